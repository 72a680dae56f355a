"""Renderers: the parity report as JSON, Markdown, HTML and a console table.

They only render: every number is already in the report dictionary.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Callable, NamedTuple

from edgeport.text import for_markdown


def _fmt(x, spec: str = ".3g") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return "inf" if obj > 0 else ("-inf" if obj < 0 else "nan")
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def render_json(report: dict) -> str:
    return json.dumps(_json_safe(report), indent=2, sort_keys=False) + "\n"


def rows(report: dict) -> list[dict]:
    """One row per (variant, runtime): the worst output's metrics."""
    out = []
    for r in report["results"]:
        outputs = r["outputs"]
        det = r.get("detections") or {}
        out.append(
            {
                "variant": r["variant"],
                "runtime": r["runtime"],
                "status": "PASS" if r["passed"] else "FAIL",
                "max_abs": max((o["max_abs"] for o in outputs), default=None),
                "max_abs_rel": max((o["max_abs_rel"] for o in outputs), default=None),
                "cosine": min((o["cosine"] for o in outputs), default=None),
                "snr_db": min((o["snr_db"] for o in outputs), default=None),
                "boxes": f"{det['matched']}/{det['reference_boxes']} (+{det['extra']})" if det else "-",
                "map50": (r.get("map") or {}).get("map50"),
                "ms": r.get("ms_per_image"),
                "bytes": _artifact_bytes(report, r["variant"]),
            }
        )
    return out


def _artifact_bytes(report: dict, variant: str):
    name = {"onnx": "model.onnx"}.get(variant, f"model_{variant}.tflite")
    entry = report.get("artifacts", {}).get(name)
    return entry["bytes"] if entry else None


HEADER = ["variant", "runtime", "status", "size KiB", "max_abs", "max_abs rel", "cosine", "SNR dB", "boxes matched", "mAP@.5", "ms/img"]


def _cells(row: dict) -> list[str]:
    return [
        row["variant"],
        row["runtime"],
        row["status"],
        _fmt(row["bytes"] / 1024, ".0f") if row["bytes"] else "-",
        _fmt(row["max_abs"]),
        _fmt(row["max_abs_rel"]),
        _fmt(row["cosine"], ".6f"),
        _fmt(row["snr_db"], ".1f"),
        row["boxes"],
        _fmt(row["map50"], ".3f"),
        _fmt(row["ms"], ".2f"),
    ]


class Quoting(NamedTuple):
    """How a renderer shows text taken from the model, the board or the user's files: ``code`` a
    name, ``text`` a phrase (reasons, versions)."""

    code: Callable[[object], str]
    text: Callable[[object], str]


# a terminal line (made safe as a whole where it is printed, ``text.for_terminal``)
TERMINAL = Quoting(code=lambda v: f"`{v}`", text=str)
# literal Markdown: no code spans, whose content cannot be escaped
MARKDOWN = Quoting(code=for_markdown, text=for_markdown)
# plain text for an HTML page, escaped there as a whole
PLAIN = Quoting(code=str, text=str)


def render_markdown(report: dict) -> str:
    md = for_markdown
    model = report["model"]
    lines = [
        "# edgeport parity report",
        "",
        f"**{'PASSED' if report['passed'] else 'FAILED'}** — schema {md(report['schema'])}, created {md(report['created'])}",
        "",
        f"Model: {md(model.get('arch'))} from {md(model.get('checkpoint'))} ({md(model.get('layout'))}), "
        f"input {md(report['inputs']['shape'])}; inputs: {md(report['inputs']['source'])}.",
        f"Reference: {md(report['reference']['what'])}.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    lines += ["| " + " | ".join(md(c) for c in _cells(r)) + " |" for r in rows(report)]
    failures = [(r, o) for r in report["results"] for o in r["outputs"] if not o["passed"]]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- {md(r['variant'])} on {md(r['runtime'])}, output {md(o['name'])}: {md('; '.join(o['reasons']))}"
                  for r, o in failures]
    lines += _section(_board_title(report, MARKDOWN), _board_items(report, MARKDOWN))
    lines += _section("Where it diverges", divergence_lines(report, MARKDOWN))
    lines += _section(_upsample_title(report), _upsample_items(report, MARKDOWN))
    if report.get("stages"):
        lines += ["", "## Stages", "", "| stage | seconds | changed | summary |", "|---|---|---|---|"]
        lines += [f"| {md(s['name'])} | {s['seconds']:.2f} | {s['changed']} | {md(s['summary'])} |" for s in report["stages"]]
    converter = report.get("converter")
    if converter:
        notes = "; ".join(f"{k}: {v}" for k, v in (converter.get("notes") or {}).items())
        lines += ["", f"Converter: {md(converter['name'])} {md(converter['version'])} ({md(converter['writer'])})"
                  + (f"; {md(notes)}" if notes else "")]
        lowered = "; ".join(f"{k}: {v}" for k, v in (converter.get("lowered") or {}).items())
        if lowered:
            lines += ["", f"Lowered for the board: {md(lowered)}"]
        if converter.get("cross_check"):
            lines += ["", f"Cross-check: {md(cross_check_line(converter['cross_check']))}"]
    lines += ["", "Versions: " + ", ".join(f"{md(k)} {md(v)}" for k, v in report["versions"].items()), ""]
    return "\n".join(lines)


def cross_check_line(c: dict) -> str:
    """The other converter's float32 file against the shipped one, in one sentence."""
    who = f"{c['name']} {c['version']}"
    if not c.get("ran"):
        return f"{who}: not compared: {c.get('reason')}"
    if c["agree"]:
        return (f"{who}'s float32 file agrees with this one: largest difference {c['max_abs_rel']:.2g} x max|output| "
                f"(tolerance {c['tolerance']:g}, {c['images']} images, reference kernels)")
    first = c.get("first_parting")
    where = (f"; they first part at {first['op']} `{first['tensor']}` (its closest: {first['other_op']} `{first['other_tensor']}`, "
             f"{first['max_abs_rel']:.2g} x its range)" if first else "; no intermediate tensor pairs up to say where")
    return f"{who}'s float32 file PARTS from this one by {c['max_abs_rel']:.2g} x max|output| (tolerance {c['tolerance']:g}){where}"


def _section(title: str | None, items: list[str]) -> list[str]:
    return ["", f"## {title}", ""] + [f"- {item}" for item in items] if title and items else []


def divergence_lines(report: dict, q: Quoting = TERMINAL) -> list[str]:
    """One line per row whose first divergence was found."""
    out = []
    for r in report["results"]:
        d = r.get("divergence")
        if d and d.get("found"):
            f = d["first"]
            cand = f"{q.text(f['candidate_type'])} {q.code(f['candidate'])}" if f["candidate"] else "nothing"
            where = f" (located on {q.text(d['located_on'])})" if d.get("located_on") else ""
            out.append(f"{q.code(r['variant'])} on {q.text(r['runtime'])}: first divergence at reference node {q.code(f['reference'])} "
                       f"({q.text(f['reference_type'])}); closest {cand}: max_abs {f['max_abs_rel']:.3g} x max|ref|, "
                       f"cosine {f['cosine']:.6f} (needs {q.text(d['criterion'])}){where}")
    return out


def _board_title(report: dict, q: Quoting) -> str | None:
    board = report.get("board")
    if not board:
        return None
    return f"Board {q.code(board['name'])} ({q.text(board['runtime'])} {q.text(board['version'])}, {q.text(', '.join(board['dtypes']))})"


def _board_items(report: dict, q: Quoting) -> list[str]:
    board = report.get("board")
    if not board:
        return []
    lines = []
    for variant, check in (board.get("checks") or {}).items():
        status = "runnable" if check["runnable"] else "NOT runnable: " + q.text("; ".join(check["reasons"]))
        lines.append(f"{q.code(variant)}: {status} (min_runtime_version {q.text(check.get('min_runtime_version'))}, "
                     f"{check['size_bytes']:,} bytes)")
    for r in report["results"]:
        v = r.get("verdict")
        if v and v["judge"] == "converter":
            lines.append(f"the converter wrote no {q.code(r['variant'])} file: {q.text('; '.join(v['reasons']))}")
        elif v:
            arena = f", arena {v['arena_bytes']:,} of {board['ram_bytes']:,} bytes" if v.get("arena_bytes") else ""
            diffs = f", differences {q.text(v['differences'])}" if v.get("differences") else ""
            why = "" if v["runnable"] else ": " + q.text("; ".join(v["reasons"]))
            lines.append(f"{v['judge']} ({q.text(r['runtime'])}), {q.code(r['variant'])}: {'ran' if v['runnable'] else 'cannot run'}"
                         f"{arena}{diffs}{why}")
    return lines + board_runtime_lines(report, q)


def board_runtime_lines(report: dict, q: Quoting = TERMINAL) -> list[str]:
    """Whose word the board rows are."""
    real = report.get("board_runtime")
    if not real:
        return []
    if real["real"]:
        refused = real.get("refused") or []
        if refused:
            return [f"the board's own runtime ({q.text(real['via'])}) refused {q.text(', '.join(refused))}: its rows are the verdict"]
        return [f"the board's own runtime ran every file ({q.text(real['via'])}); its rows are the verdict"]
    how = f": {q.code(real['install'])} installs it" if real.get("install") else ""
    return [f"emulated only: the board's real runtime is not installed here{how}, and its rows then come from it"]


def _upsample_title(report: dict) -> str | None:
    up = report.get("upsample")
    if not up or not up.get("sites"):
        return None
    return "Upsampling" + (" (--legacy-resize)" if up.get("legacy_resize") else "")


def _upsample_items(report: dict, q: Quoting) -> list[str]:
    up = report.get("upsample") or {}
    return [f"{q.code(s['where'])}: {q.text(s['mode'])} x{s['scale'][0]:g}, align_corners={s['align_corners']} -> {q.text(s['rule'])}"
            f"{' (rewritten)' if s['rewritten'] else ' (native)'}" for s in up.get("sites") or ()]


def render_html(report: dict, figures: dict[str, bytes] | None = None) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in HEADER)
    body = ""
    for row in rows(report):
        cls = "pass" if row["status"] == "PASS" else "fail"
        body += f'<tr class="{cls}">' + "".join(f"<td>{esc(c)}</td>" for c in _cells(row)) + "</tr>\n"
    per_output = ""
    for r in report["results"]:
        for o in r["outputs"]:
            per_output += (
                f"<tr><td>{esc(r['variant'])}</td><td>{esc(r['runtime'])}</td><td>{esc(o['name'])}</td>"
                f"<td>{_fmt(o['max_abs'])}</td><td>{_fmt(o['mean_abs'])}</td><td>{_fmt(o['rmse'])}</td>"
                f"<td>{_fmt(o['cosine'], '.6f')}</td><td>{_fmt(o['snr_db'], '.1f')}</td><td>{_fmt(o['p99_abs'])}</td>"
                f"<td>{'PASS' if o['passed'] else esc('; '.join(o['reasons']))}</td></tr>\n"
            )
    stages = "".join(
        f"<tr><td>{esc(s['name'])}</td><td>{s['seconds']:.2f}</td><td>{esc(s['summary'])}</td></tr>"
        for s in report.get("stages", [])
    )
    verdict = "PASSED" if report["passed"] else "FAILED"
    import base64

    figs = "".join(
        f'<figure><img alt="{esc(name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"><figcaption>{esc(name)}</figcaption></figure>'
        for name, png in (figures or {}).items() if png
    )
    sections = "".join(
        f"<h2>{esc(title)}</h2><ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>"
        for title, items in ((_board_title(report, PLAIN), _board_items(report, PLAIN)),
                             ("Where it diverges", divergence_lines(report, PLAIN)),
                             (_upsample_title(report), _upsample_items(report, PLAIN)))
        if title and items
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgeport parity report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: .3rem .6rem; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child, td:nth-child(2) {{ text-align: left; }}
tr.fail td {{ background: #fde8e8; }} tr.pass td:nth-child(3) {{ color: #1a7f37; font-weight: 600; }}
figure {{ display: inline-block; margin: .5rem; }} figcaption {{ font-size: .8rem; color: #555; }}
.verdict {{ font-size: 1.4rem; font-weight: 700; color: {'#1a7f37' if report['passed'] else '#b42318'}; }}
</style></head><body>
<h1>edgeport parity report</h1>
<p class="verdict" id="verdict">{verdict}</p>
<p>Model <code>{esc(str(report['model'].get('arch')))}</code> from <code>{esc(str(report['model'].get('checkpoint')))}</code>,
input {esc(str(report['inputs']['shape']))}; inputs: {esc(report['inputs']['source'])}.<br>
Reference: {esc(report['reference']['what'])}.</p>
<h2>Summary</h2>
<table id="summary"><tr>{head}</tr>
{body}</table>
{sections}
<h2>Figures</h2>
<div class="figs">{figs}</div>
<h2>Per output</h2>
<table><tr><th>variant</th><th>runtime</th><th>output</th><th>max_abs</th><th>mean_abs</th><th>rmse</th><th>cosine</th>
<th>SNR dB</th><th>p99 abs</th><th>status</th></tr>
{per_output}</table>
<h2>Stages</h2>
<table><tr><th>stage</th><th>seconds</th><th>summary</th></tr>{stages}</table>
<p><small>schema {esc(report['schema'])}, created {esc(report['created'])}; {esc(', '.join(f'{k} {v}' for k, v in report['versions'].items()))}</small></p>
</body></html>
"""


def write_reports(report: dict, folder: Path, sample_image=None) -> None:
    (folder / "report.json").write_text(render_json(report))
    (folder / "report.md").write_text(render_markdown(report))
    (folder / "report.html").write_text(render_html(report, make_figures(report, sample_image)))


def make_figures(report: dict, sample_image=None) -> dict[str, bytes]:
    from edgeport.models.decode import Detections
    from edgeport.validate.report import figures

    out = {"error distribution per runtime": figures.error_histograms(report),
           "per-layer error curve": figures.layer_curves(report)}
    sample = report.get("sample")
    if sample is not None and sample_image is not None:
        def dets(boxes):
            import numpy as np

            return Detections(np.asarray([b["box"] for b in boxes], np.float32).reshape(-1, 4),
                              np.asarray([b["score"] for b in boxes], np.float32), np.asarray([b["class"] for b in boxes]))

        out[f"sample image: PyTorch (green) vs {sample['row']} (red)"] = figures.boxes_overlay(
            sample_image, dets(sample["reference"]), dets(sample["candidate"]), ("PyTorch", sample["row"]))
    return out


def print_table(report: dict, console) -> None:
    from rich.table import Table
    from rich.text import Text

    from edgeport.text import for_terminal

    table = Table(title=f"parity: {'PASSED' if report['passed'] else 'FAILED'}", min_width=100)
    for h in HEADER:
        table.add_column(h, justify="left" if h in ("variant", "runtime", "status") else "right")
    for row in rows(report):
        # a runtime's name can come from a board's reply: plain text, never markup
        cells = [Text(for_terminal(c)) for c in _cells(row)]
        cells[2].stylize("green" if row["status"] == "PASS" else "red")
        table.add_row(*cells)
    console.print(table)
