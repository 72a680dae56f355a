"""Renderers: the parity report as JSON, Markdown, HTML and a console table.

They only render: every number is already in the ``Report``. Text from files (tensor
names, reasons, runtime names) is escaped at the edge: ``text.for_markdown`` for Markdown,
``_h`` (control characters shown as escapes, then ``html.escape``) for HTML.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Callable, NamedTuple

from edgeport.text import for_markdown, for_terminal
from edgeport.validate.report.schema import REFERENCE, SCHEMA, Report, failures
from edgeport.validate.report.sections import CrossCheck, RepairStep, Sample, SampleBox


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


def json_text(data) -> str:
    """JSON as edgeport writes it: non-finite numbers as the strings ``jsonfile.number`` reads back."""
    return json.dumps(_json_safe(data), indent=2, sort_keys=False) + "\n"


def render_json(report: Report) -> str:
    return json_text(report.to_dict())


def rows(report: Report) -> list[dict]:
    """One row per (variant, runtime): the worst output's metrics; ``same_run_as``: the row whose
    run this one reuses (``ResultRow.same_run_as``; ``legend`` says why), else None."""
    out = []
    for r in report.results:
        det = r.detections or {}
        out.append(
            {
                "variant": r.variant,
                "runtime": r.runtime,
                "status": "PASS" if r.passed else "FAIL",
                "max_abs": max((o["max_abs"] for o in r.outputs), default=None),
                "max_abs_rel": max((o["max_abs_rel"] for o in r.outputs), default=None),
                "cosine": min((o["cosine"] for o in r.outputs), default=None),
                "snr_db": min((o["snr_db"] for o in r.outputs), default=None),
                "boxes": f"{det['matched']}/{det['reference_boxes']} (+{det['extra']})" if det else "-",
                "box_px": det.get("box_centre_px"),
                "map50": (r.map or {}).get("map50"),
                "ms": r.ms_per_image,
                "bytes": report.artifact_bytes(r.variant),
                "same_run_as": r.same_run_as,
                "images": r.images,
            }
        )
    return out


HEADER = ["variant", "runtime", "status", "size KiB", "max_abs", "max_abs rel", "cosine", "SNR dB", "boxes matched", "box px",
          "mAP@.5", "ms/img"]


SAME_RUN = "\u2020"  # the dagger: this row is another row's run (``ResultRow.same_run_as``)
SAMPLED = "\u2021"  # the double dagger: this row was judged on the first images only (``ResultRow.images``)


def _runtime_cell(row: dict, marks: bool) -> str:
    """The runtime, marked where the legend explains it (report files); a sampled row says so everywhere."""
    if not marks:
        return row["runtime"] + (f" (first {row['images']} images)" if row.get("images") is not None else "")
    return " ".join([row["runtime"], *([SAME_RUN] if row.get("same_run_as") else []),
                     *([SAMPLED] if row.get("images") is not None else [])])


def _cells(row: dict, *, marks: bool = False) -> list[str]:
    return [
        row["variant"],
        _runtime_cell(row, marks),
        row["status"],
        _fmt(row["bytes"] / 1024, ".0f") if row["bytes"] else "-",
        _fmt(row["max_abs"]),
        _fmt(row["max_abs_rel"]),
        _fmt(row["cosine"], ".6f"),
        _fmt(row["snr_db"], ".1f"),
        row["boxes"],
        _fmt(row["box_px"], ".2g"),
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


def legend(report: Report) -> list[str]:
    """What the summary table's columns and marks mean (both report files say it under the table)."""
    lines = [
        "status: the row against PyTorch as loaded (the reference), by every check it carries; what failed is listed "
        "under Failures, with the value and the threshold.",
        "max_abs, cosine, SNR dB: the row's worst output; max_abs rel: max_abs as a fraction of PyTorch's max|output|. "
        "A float file is judged on the images and the seeded noise inputs (a path no image takes), a quantised file on the "
        "images alone (its calibration never saw noise).",
        "boxes matched M/R (+E): M of PyTorch's R boxes on the real images that the row finds too (same class, "
        "IoU >= 0.5); +E: boxes the row finds that PyTorch does not. box px: over the anchors PyTorch scores >= 0.25 on "
        "the images, the mean distance of the row's box centres from PyTorch's, in input pixels (per stride in report.json).",
        "ms/img: median per image, warm: the second invoke of each image (the first may load the runtime), on one "
        "thread; the runtimes run side by side, one per core. A row from the board's own runtime shows the time it reports.",
    ]
    shared = sorted({r.same_run_as for r in report.results if r.same_run_as})
    if shared:
        lines.append(f"{SAME_RUN} same run as {', '.join(shared)}: the board's emulator runs this file unchanged on the "
                     "kernels its profile names, so parity ran it once; the row repeats that run's numbers, it is no second "
                     "measurement.")
    rows = [r for r in report.results if r.images is not None]
    sampled = sorted({r.images for r in rows})
    if sampled:
        total = report.inputs
        of = f" of the {total.count}" if total.count is not None else ""
        which = []
        if any(r.variant in ("folded", "onnx") for r in rows):
            which.append("the folded model and the ONNX graph (where an error entered: every file made from them is judged "
                         "on every input)")
        if any(r.runtime == "tflite-ref" for r in rows):
            which.append("the reference kernels where no board row runs them (which op parts from the optimised kernels' "
                         "arithmetic; each image invoked once, its ms/img that invoke's, as the kernels load nothing on a "
                         "first invoke; the rows on every input check repeats)")
        lines.append(f"{SAMPLED} judged on the first {', '.join(map(str, sampled))}{of} images only, a diagnostic: "
                     f"{' and '.join(which) or 'rows no verdict rests on'}; mAP is not computed on so few.")
    return lines


def _sample_title(sample: Sample) -> str:
    """The sample figure's caption: whose boxes are drawn, and whose are none."""
    row = sample.row
    if not sample.reference and not sample.candidate:
        return f"sample image: no detections, from PyTorch or from {row}"
    def who(name, boxes, colour):
        return f"{name} ({colour})" if boxes else f"{name}: no detections"

    return f"sample image: {who('PyTorch', sample.reference, 'green')} vs {who(row, sample.candidate, 'red')}"


def render_markdown(report: Report) -> str:
    md = for_markdown
    model = report.model
    lines = [
        "# edgeport parity report",
        "",
        f"**{verdict(report)}** — schema {md(SCHEMA)}, created {md(report.created)}",
        "",
        f"Model: {md(model.arch)} from {md(model.checkpoint)} ({md(model.layout)}), "
        f"input {md(list(report.inputs.shape))}; inputs: {md(report.inputs.source)}.",
        f"Reference: {md(REFERENCE)}.",
    ]
    failed = failures(report)
    if failed:
        lines += ["", "## Failures", ""]
        for f in failed:
            if len(f.reasons) <= 1:
                lines.append(f"- {md(f.what)}" + (f": {md(f.reasons[0])}" if f.reasons else ""))
            else:
                lines += [f"- {md(f.what)}:"] + [f"  - {md(why)}" for why in f.reasons]
    lines += [
        "",
        "## Summary",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    lines += ["| " + " | ".join(md(c) for c in _cells(r, marks=True)) + " |" for r in rows(report)]
    lines += [""] + [f"- {md(item)}" for item in legend(report)]
    for title, items in _sections(report, MARKDOWN):
        lines += ["", f"## {title}", ""] + [f"- {item}" for item in items]
    if report.stages:
        lines += ["", "## Stages", "", "| stage | seconds | changed | summary |", "|---|---|---|---|"]
        lines += [f"| {md(s.name)} | {s.seconds:.2f} | {s.changed} | {md(s.summary)} |" for s in report.stages]
    converter = report.converter
    if converter:
        notes = "; ".join(f"{k}: {v}" for k, v in converter.notes.items())
        lines += ["", f"Converter: {md(converter.name)} {md(converter.version)} ({md(converter.writer)})"
                  + (f"; {md(notes)}" if notes else "")]
        lowered = "; ".join(f"{k}: {v}" for k, v in converter.lowered.items())
        if lowered:
            lines += ["", f"Lowered for the board: {md(lowered)}"]
        if converter.cross_check:
            lines += ["", f"Cross-check: {md(cross_check_line(converter.cross_check))}"]
    lines += ["", "Versions: " + ", ".join(f"{md(k)} {md(v)}" for k, v in report.versions.items()), ""]
    return "\n".join(lines)


def cross_check_line(c: CrossCheck | dict) -> str:
    """The other converter's float32 file against the shipped one, in one sentence."""
    if isinstance(c, dict):  # as convert's cross-check pass hands it, for its summary
        c = CrossCheck.from_dict(c, "cross_check")
    who = f"{c.name} {c.version}"
    if not c.ran:
        return f"{who}: not compared: {c.reason}"
    if c.agree:
        return (f"{who}'s float32 file agrees with this one: largest difference {c.max_abs_rel:.2g} x max|output| "
                f"(tolerance {c.tolerance:g}, {c.images} images, reference kernels)")
    first = c.first_parting
    where = (f"; they first part at {first.op} `{first.tensor}` (its closest: {first.other_op} `{first.other_tensor}`, "
             f"{first.max_abs_rel:.2g} x its range)" if first else "; no intermediate tensor pairs up to say where")
    return f"{who}'s float32 file PARTS from this one by {c.max_abs_rel:.2g} x max|output| (tolerance {c.tolerance:g}){where}"


def _sections(report: Report, q: Quoting) -> list[tuple[str, list[str]]]:
    """The report files' sections after the summary, each (title, items); those with nothing to say left out."""
    return [(title, items) for title, items in ((_board_title(report, q), _board_items(report, q)),
                                                ("Where it diverges", divergence_lines(report, q)),
                                                (OP_ERRORS_TITLE, op_error_lines(report, q)),
                                                (REPAIRS_TITLE, repair_lines(report, q)),
                                                (DATASET_TITLE, dataset_lines(report, q)),
                                                (_upsample_title(report), _upsample_items(report, q))) if title and items]


def divergence_lines(report: Report, q: Quoting = TERMINAL) -> list[str]:
    """One line per row whose first divergence was found."""
    out = []
    for r in report.results:
        d = r.divergence
        if d and d.get("found"):
            f = d["first"]
            cand = f"{q.text(f['candidate_type'])} {q.code(f['candidate'])}" if f["candidate"] else "nothing"
            where = f" (located on {q.text(d['located_on'])})" if d.get("located_on") else ""
            out.append(f"{q.code(r.variant)} on {q.text(r.runtime)}: first divergence at reference node {q.code(f['reference'])} "
                       f"({q.text(f['reference_type'])}); closest {cand}: max_abs {f['max_abs_rel']:.3g} x max|ref|, "
                       f"cosine {f['cosine']:.6f} (needs {q.text(d['criterion'])}){where}")
    return out


OP_ERRORS_TITLE = "Which ops carry the quantisation error"


def op_error_lines(report: Report, q: Quoting = TERMINAL) -> list[str]:
    """One line per quantised file that failed: its ops with the largest error of their own."""
    out, seen = [], set()
    for r in report.results:
        e = r.op_errors
        if not e or r.variant in seen:
            continue
        seen.add(r.variant)
        if "error" in e:
            out.append(f"{q.code(r.variant)}: not measured ({q.text(e['error'])})")
            continue
        worst = "; ".join(f"{q.text(o['op'])} {q.code(o['tensor'])} {_pct(o['own'])} of its own ({_pct(o['reached'])} reached it)"
                          for o in e["worst"])
        out.append(f"{q.code(r.variant)}, {e['judged']} ops each run alone ({q.text(e['on'])}), largest own error "
                   f"(rms error / rms value) first: {worst or 'none judged'}")
    return out


REPAIRS_TITLE = "Repairs"


def _cost(size, timed) -> str:
    kib = f"{size / 1024:,.0f} KiB" if size else "size unknown"
    return f"{kib}, {timed[0]:.3g} ms/img on {timed[1]}" if timed else f"{kib}, not timed"


def verdict(report: Report) -> str:
    """PASSED or FAILED, and the file to ship (``Report.ship``) with what it is and what it costs --
    a repaired file's float share, size and time beside the pure file's and float32's."""
    ship = report.ship
    if ship.file is None:
        return "FAILED: no file passes"
    said = f"{ship.file} ({ship.what}; {_cost(ship.bytes, ship.timed)}"
    if ship.pure is not None:
        said += f"; the pure file {_cost(*ship.pure)}"
    if ship.float32 is not None and ship.variant != "float32" and (ship.pure is not None or ship.float32[0]):
        said += f"; float32 {_cost(*ship.float32)}"
    said += ")"
    if ship.passes:
        return f"PASSED: ship {said}"
    refused = report.dataset.refused if report.dataset is not None else {}
    if refused and report.parity_passed:
        return f"FAILED: {said} passes parity, but {', '.join(refused)} refused images of the dataset"
    return f"FAILED: no quantised file passes; {said} passes: ship it where the board's float32 is fast enough"


def _step_line(a: RepairStep, q: Quoting) -> str:
    """What one repair tried did, in words."""
    if a.error is not None:
        return f"{q.text(a.repair)} could not run ({q.text(a.error)})"
    not_kept = "" if a.kept else ", not kept"
    if a.repair in ("equalisation", "bias correction"):
        what = f"{a.pairs} convolution pairs" if a.pairs is not None else f"{a.biases} biases"
        return f"{a.repair}: nothing to change" if not (a.pairs or a.biases) else \
            f"{a.repair}: {what}, converted again, worst cosine {_fmt(a.worst_cosine, '.4f')}{not_kept}"
    if a.repair == "calibration ranges":
        return "calibration ranges: no grid the float values show wrong" if not a.tensors else \
            (f"calibration ranges: {a.tensors} grids set again from the float32 file's values (e.g. "
             f"{', '.join(q.code(t) for t in a.examples)}), worst cosine {_fmt(a.worst_cosine, '.4f')}{not_kept}")
    if a.failed:
        return f"a candidate{f' with {a.float_ops} ops in float' if a.float_ops else ''} that passed on TFLite's kernels " \
               f"failed on {q.text(', '.join(a.failed))}"
    steps = ", ".join(f"{t.float_ops} ops {'pass' if t.passed else _fmt(t.worst_cosine, '.4f')}" for t in a.tried)
    return f"{q.text(a.repair)} of {q.text(a.on)} (worst cosine): {steps or 'none possible'}"


def repair_lines(report: Report, q: Quoting = TERMINAL) -> list[str]:
    """One line per quantised file that failed: each repair tried and what it did, the file and its cost."""
    out = []
    for variant, r in (report.repairs or {}).items():
        tried = [_step_line(a, q) for a in r.applied]
        if not r.repaired:
            out.append(f"{q.code(variant)} failed its gate and was not repaired ({q.text(r.why)}); tried: "
                       f"{'; '.join(tried) or 'nothing'}")
            continue
        changed = ", ".join(r.changes()) + (" (the float32 file's " + ", ".join(f"{q.text(k)} {v}" for k, v in r.float_op_names.items())
                                            + ")" if r.float_op_names else "")
        lat = r.latency
        cost = (f"it takes {lat.ratio:.2f}x the pure file's time on {q.text(lat.runtime)} ({lat.ms_per_image:.2f} vs "
                f"{lat.pure_ms_per_image:.2f} ms/img)" + (f", {lat.tflite_ratio:.2f}x on today's optimised kernels (XNNPACK)"
                                                           if lat.tflite_ratio is not None else "")
                if lat else "its time against the pure file was not measured on the same runtime")
        out.append(f"{q.code(variant)} failed its gate; {q.code(r.file)} {changed or 'changes nothing'} and "
                   f"{'PASSES every row' if r.passed else 'still FAILS'}: worst cosine {_fmt(r.pure_worst_cosine, '.4f')} "
                   f"-> {_fmt(r.worst_cosine, '.4f')}; {cost}. Tried: {'; '.join(tried)}")
    return out


def _pct(value) -> str:
    return f"{value:.2%}" if isinstance(value, (int, float)) and value == value else str(value)


def _board_title(report: Report, q: Quoting) -> str | None:
    board = report.board
    return f"Board {q.code(board.name)} ({q.text(board.runtime)} {q.text(board.version)}, {q.text(', '.join(board.dtypes))})" if board else None


def _board_items(report: Report, q: Quoting) -> list[str]:
    board = report.board
    if not board:
        return []
    lines = []
    for variant, check in board.checks.items():
        status = "runnable" if check.runnable else "NOT runnable: " + q.text("; ".join(check.reasons))
        lines.append(f"{q.code(variant)}: {status} (min_runtime_version {q.text(check.min_runtime_version)}, "
                     f"{check.size_bytes:,} bytes)")
    for r in report.results:
        v = r.verdict
        if v and v.judge == "converter":
            lines.append(f"the converter wrote no {q.code(r.variant)} file: {q.text('; '.join(v.reasons))}")
        elif v:
            arena = f", arena {v.arena_bytes:,} of {board.ram_bytes:,} bytes" if v.arena_bytes else ""
            diffs = f", differences {q.text(v.differences)}" if v.differences else ""
            why = "" if v.runnable else ": " + q.text("; ".join(v.reasons))
            lines.append(f"{v.judge} ({q.text(r.runtime)}), {q.code(r.variant)}: {'ran' if v.runnable else 'cannot run'}"
                         f"{arena}{diffs}{why}")
    return lines + board_runtime_lines(report, q)


def board_runtime_lines(report: Report, q: Quoting = TERMINAL) -> list[str]:
    """Whose word the board rows are."""
    real = report.board_runtime
    if not real:
        return []
    if real.real:
        if real.refused:
            return [f"the board's own runtime ({q.text(real.via)}) refused {q.text(', '.join(real.refused))}: its rows are the verdict"]
        return [f"the board's own runtime ran every file ({q.text(real.via)}); its rows are the verdict"]
    how = f": {q.code(real.install)} installs it" if real.install else ""
    return [f"emulated only: the board's real runtime is not installed here{how}, and its rows then come from it"]


DATASET_TITLE = "mAP on the dataset"


def dataset_lines(report: Report, q: Quoting = TERMINAL, *, classes: bool = True) -> list[str]:
    """``validate --data``: each row's mAP on every labelled image, then (``classes``) each class's AP."""
    d = report.dataset
    if d is None:
        return []
    judged = report.inputs.count
    took = f", {d.seconds:.1f} s" if d.seconds is not None else ""
    out = [f"mAP on {d.images} labelled images ({q.text(d.source or 'the dataset')}{took}); parity's rows (the reference "
           f"kernels' and the emulator's among them) on the first {judged} at most"]
    for name, m in d.rows.items():
        out.append(f"{q.text(name)}: mAP@0.5:0.95 {m.map50_95:.3f}, mAP@0.5 {m.map50:.3f}")
    out += [f"{q.text(name)}: refused {q.text(why)}, so it has no mAP" for name, why in d.refused.items()]
    names = list(d.rows)
    for c in sorted({c for m in d.rows.values() for c in m.classes}, key=int) if classes else ():
        aps = [d.rows[n].classes.get(c) for n in names]
        count = next(a.instances for a in aps if a is not None)
        out.append(f"class {q.text(c)} ({count} boxes): AP@0.5:0.95 " + ", ".join(
            f"{q.text(n)} {a.ap50_95:.3f}" for n, a in zip(names, aps) if a is not None) + "; AP@0.5 " + ", ".join(
            f"{q.text(n)} {a.ap50:.3f}" for n, a in zip(names, aps) if a is not None))
    return out


def _upsample_title(report: Report) -> str | None:
    up = report.upsample
    return "Upsampling" + (" (--legacy-resize)" if up.legacy_resize else "") if up and up.sites else None


def _upsample_items(report: Report, q: Quoting) -> list[str]:
    sites = report.upsample.sites if report.upsample else ()
    return [f"{q.code(s.where)}: {q.text(s.mode)} x{s.scale[0]:g}, align_corners={s.align_corners} -> {q.text(s.rule)}"
            f"{' (rewritten)' if s.rewritten else ' (native)'}" for s in sites]


def _h(value) -> str:
    """Every text the page shows passes here (the module's docstring says how)."""
    return html.escape(for_terminal(value))


def _failures_html(report: Report) -> str:
    failed = failures(report)
    if not failed:
        return ""
    items = "".join(f"<li><strong>{_h(f.what)}</strong>"
                    + ("<ul>" + "".join(f"<li>{_h(why)}</li>" for why in f.reasons) + "</ul>" if f.reasons else "")
                    + "</li>" for f in failed)
    return f'<h2 id="failures">Failures</h2>\n<ul class="failures">{items}</ul>\n'


def render_html(report: Report, figures: dict[str, bytes] | None = None) -> str:
    import base64

    head = "".join(f"<th>{_h(h)}</th>" for h in HEADER)
    body = ""
    for row in rows(report):
        cls = "pass" if row["status"] == "PASS" else "fail"
        body += f'<tr class="{cls}">' + "".join(f"<td>{_h(c)}</td>" for c in _cells(row, marks=True)) + "</tr>\n"
    per_output = ""
    for r in report.results:
        for o in r.outputs:
            per_output += (
                f'<tr class="{"pass" if o["passed"] else "fail"}"><td>{_h(r.variant)}</td><td>{_h(r.runtime)}</td>'
                f'<td>{_h(o["name"])}</td>'
                f"<td>{_fmt(o['max_abs'])}</td><td>{_fmt(o['mean_abs'])}</td><td>{_fmt(o['rmse'])}</td>"
                f"<td>{_fmt(o['cosine'], '.6f')}</td><td>{_fmt(o['snr_db'], '.1f')}</td><td>{_fmt(o['p99_abs'])}</td>"
                f'<td class="text">{"PASS" if o["passed"] else _h("; ".join(o["reasons"]))}</td></tr>\n'
            )
    stages = "".join(
        f'<tr><td>{_h(s.name)}</td><td>{s.seconds:.2f}</td><td class="text">{_h(s.summary)}</td></tr>'
        for s in report.stages
    )
    said = verdict(report)
    figs = "".join(
        f'<figure><img alt="{_h(name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"><figcaption>{_h(name)}</figcaption></figure>'
        for name, png in (figures or {}).items() if png
    )
    sections = "".join(
        f"<h2>{_h(title)}</h2><ul>" + "".join(f"<li>{_h(item)}</li>" for item in items) + "</ul>\n"
        for title, items in _sections(report, PLAIN))
    notes = "".join(f"<li>{_h(item)}</li>" for item in legend(report))
    model = report.model
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgeport parity report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 100rem; }}
.scroll {{ overflow-x: auto; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: .3rem .6rem; text-align: right; white-space: nowrap; }}
td.text {{ white-space: normal; text-align: left; min-width: 24rem; }}
th {{ background: #f3f3f3; }} td:first-child, td:nth-child(2), td:nth-child(3) {{ text-align: left; }}
tr.fail td {{ background: #fde8e8; }} #summary tr.pass td:nth-child(3) {{ color: #1a7f37; font-weight: 600; }}
ul.failures {{ background: #fde8e8; padding: .6rem 2rem; border-left: 4px solid #b42318; }}
ul.legend {{ font-size: .85rem; color: #555; }}
figure {{ display: inline-block; margin: .5rem; }} figcaption {{ font-size: .8rem; color: #555; }}
.verdict {{ font-size: 1.4rem; font-weight: 700; color: {'#1a7f37' if report.passed else '#b42318'}; }}
</style></head><body>
<h1>edgeport parity report</h1>
<p class="verdict" id="verdict">{_h(said)}</p>
<p>Model <code>{_h(model.arch)}</code> from <code>{_h(model.checkpoint)}</code>,
input {_h(list(report.inputs.shape))}; inputs: {_h(report.inputs.source)}.<br>
Reference: {_h(REFERENCE)}.</p>
{_failures_html(report)}<h2>Summary</h2>
<div class="scroll"><table id="summary"><tr>{head}</tr>
{body}</table></div>
<ul class="legend" id="legend">{notes}</ul>
{sections}
<h2>Figures</h2>
<div class="figs">{figs}</div>
<h2>Per output</h2>
<div class="scroll"><table id="per-output"><tr><th>variant</th><th>runtime</th><th>output</th><th>max_abs</th><th>mean_abs</th><th>rmse</th><th>cosine</th>
<th>SNR dB</th><th>p99 abs</th><th>status</th></tr>
{per_output}</table></div>
<h2>Stages</h2>
<div class="scroll"><table><tr><th>stage</th><th>seconds</th><th>summary</th></tr>{stages}</table></div>
<p><small>schema {_h(SCHEMA)}, created {_h(report.created)}; {_h(', '.join(f'{k} {v}' for k, v in report.versions.items()))}</small></p>
</body></html>
"""


def write_reports(report: Report, folder: Path, sample_image=None) -> None:
    """report.json, report.md and report.html into ``folder``. A command checks the report first
    (``validate.gate.check.check_written``: every report edgeport writes is one ``edgeport check`` passes)."""
    (folder / "report.json").write_text(render_json(report))
    (folder / "report.md").write_text(render_markdown(report))
    (folder / "report.html").write_text(render_html(report, make_figures(report, sample_image)))


def make_figures(report: Report, sample_image=None) -> dict[str, bytes]:
    from edgeport.models.decode import Detections
    from edgeport.validate.report import figures

    out = {"error distribution per runtime": figures.error_histograms(report.results),
           "per-layer error curve": figures.layer_curves(report.results)}
    sample = report.sample
    if sample is not None and sample_image is not None:
        def dets(boxes: tuple[SampleBox, ...]):
            import numpy as np

            return Detections(np.asarray([b.box for b in boxes], np.float32).reshape(-1, 4),
                              np.asarray([b.score for b in boxes], np.float32), np.asarray([b.class_ for b in boxes]))

        out[_sample_title(sample)] = figures.boxes_overlay(
            sample_image, dets(sample.reference), dets(sample.candidate), ("PyTorch", sample.row))
    return out


def print_table(report: Report, console) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(for_terminal(f"parity: {verdict(report)}")), min_width=100)  # names a user's file: never markup
    for h in HEADER:
        table.add_column(h, justify="left" if h in ("variant", "runtime", "status") else "right")
    for row in rows(report):
        # a runtime's name can come from a board's reply: plain text, never markup
        cells = [Text(for_terminal(c)) for c in _cells(row)]
        cells[2].stylize("green" if row["status"] == "PASS" else "red")
        table.add_row(*cells)
    console.print(table)
