"""``edgeport converters [install NAME]``: the converters (``convert/converters/base.py``), and where each is."""

from __future__ import annotations

from edgeport.text import for_terminal


def list_converters() -> int:
    from edgeport.convert.converters.base import NAMES
    from edgeport.convert.converters.registry import converter

    for each in map(converter, NAMES):
        version = each.version()
        print(for_terminal(f"{each.name:<13} {'-' if version == 'not installed' else version:<14} {each.source}, {each.where()}"))
    return 0


def install(name: str) -> int:
    from edgeport.convert.converters.registry import converter

    converter(name).install(log=lambda line: print(for_terminal(line), flush=True))
    return 0
