"""Untrusted text made safe at the edges: one function for the terminal, one for Markdown.

Names that come from files -- a checkpoint's keys, a TFLite file's custom op, a board's reply,
a report's rows, a path -- may hold control characters. Printed raw, they clear the screen,
set the window title, or forge a line ("runnable on tflite-1.13") with a newline. So every name
from a file passes ``for_terminal`` before stdout or stderr, and ``for_markdown`` before
``report.md`` (HTML: ``html.escape``). Rich never reads it as markup: its call sites print plain
``Text`` (``commands.output.Progress``, ``validate.render.print_table``) or pass ``markup=False``.

No torch, no numpy: imported at start-up.
"""

from __future__ import annotations

import re

# C0 and C1 control characters, DEL, and the Unicode marks that reorder what a terminal shows
# (bidirectional overrides and isolates: "Trojan Source")
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# what CommonMark (with GitHub's tables and strikethrough) gives a meaning to in the middle of a
# line -- emphasis, code, links and images, raw HTML and entities, table cells; a backslash
# before ASCII punctuation makes it a literal
_MARKDOWN = re.compile(r"([\\`*_\[\]<>#!|~&])")


def _visible(match: re.Match) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def for_terminal(value: object) -> str:
    """``value`` as one line of inert text: every control character (newline included) and
    bidirectional mark shown as its escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return _UNSAFE.sub(_visible, str(value))


def for_markdown(value: object) -> str:
    """``value`` as literal Markdown text: control characters escaped as for the terminal,
    then every character Markdown (or the HTML it may carry) would interpret."""
    return _MARKDOWN.sub(r"\\\1", for_terminal(value))


def clip(text: str, limit: int = 200) -> str:
    """Text from a file, bounded: a reason may be long, a line of edgeport's output may not."""
    return text if len(text) <= limit else text[:limit] + "..."


def shown(value: object, limit: int = 80) -> str:
    """A value from a file or the command line as an error shows it: exactly (``repr``), bounded
    (a name may be megabytes long), with its length where cut."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value)):,} characters)"
