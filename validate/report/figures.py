"""Figures for the HTML report, as PNG bytes: drawn from the report's own rows, plus one
sample image with PyTorch's and the board's boxes. Only drawing happens here."""

from __future__ import annotations

import io

import numpy as np

from edgeport.text import for_terminal
from edgeport.validate.parity.result import ResultRow


def _plain(value) -> str:
    """A name from a file as a figure's label: control characters shown as escapes, and no
    mathtext (matplotlib reads "$...$" as TeX, and a stray "$" in a tensor's name as an error)."""
    return for_terminal(value).replace("$", r"\$")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)  # fixed layout: a "tight" box measures every text extent, slowly
    return buf.getvalue()


def plain_log_ticks(axis) -> None:
    """Label a log or symlog ``axis`` in plain text ("1e-6"). matplotlib's default labels are
    mathtext ("$10^{-6}$"), whose parser is built on its first use in a process."""
    from matplotlib.ticker import LogFormatter

    class PlainLog(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            if 1 <= x <= 1000:
                return super()._num_to_string(x, vmin, vmax)
            mantissa, exponent = f"{x:.0e}".split("e")
            return f"{mantissa}e{int(exponent)}"

    axis.set_major_formatter(PlainLog())
    if axis.get_scale() == "log":  # symlog labels no minor ticks
        axis.set_minor_formatter(PlainLog(labelOnlyBase=False))


def _figure(figsize: tuple[float, float]):
    """A figure and its axes, drawn by Agg without pyplot (no GUI state, a faster import)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def error_histograms(results: tuple[ResultRow, ...]) -> bytes | None:
    rows = [r for r in results if r.error_histogram]
    if not rows:
        return None
    fig, ax = _figure((7.5, 3.2))
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.17, top=0.9)
    for r in rows:
        h = r.error_histogram
        edges = np.asarray(h["log10_edges"])
        centers = (edges[:-1] + edges[1:]) / 2
        ax.plot(centers, h["counts"], marker=".", label=_plain(f"{r.variant} / {r.runtime}"))
    ax.set(xlabel="log10 |output error| vs PyTorch", ylabel="elements", title="error distribution per runtime", yscale="symlog")
    plain_log_ticks(ax.yaxis)
    ax.legend(fontsize=7)
    return _png(fig)


def layer_curves(results: tuple[ResultRow, ...]) -> bytes | None:
    rows = [r for r in results if r.divergence and r.divergence["curve"]]
    if not rows:
        return None
    fig, ax = _figure((7.5, 3.2))
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.17, top=0.9)
    for r in rows:
        curve = r.divergence["curve"]
        y = [max(c["max_abs_rel"], 1e-9) if r.variant != "int8" else max(1 - c["cosine"], 1e-9) for c in curve]
        ax.plot([c["index"] for c in curve], y, marker=".", label=_plain(f"{r.variant} / {r.runtime}"))
        first = r.divergence["first"]
        if first:
            ax.annotate(_plain(first["reference"]), (first["index"], y[[c["index"] for c in curve].index(first["index"])]), fontsize=7, color="red")
    ax.set(xlabel="reference layer (graph order)", ylabel="max|err|/max|ref|  (int8: 1 - cosine)", yscale="log",
           title="per-layer error against the trained model")
    plain_log_ticks(ax.yaxis)
    ax.legend(fontsize=7)
    return _png(fig)


def boxes_overlay(image_chw: np.ndarray, reference, board, labels: tuple[str, str]) -> bytes:
    """The first validation image with the reference's boxes (green) and the board's (red, dashed);
    a side with no boxes is named on the image ("no detections: ...") instead of promising a colour."""
    from matplotlib.patches import Rectangle

    fig, ax = _figure((4, 4))
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    ax.imshow(np.clip(image_chw.transpose(1, 2, 0), 0, 1))
    for dets, colour, style, label in ((reference, "lime", "-", labels[0]), (board, "red", "--", labels[1])):
        for i, (x1, y1, x2, y2) in enumerate(dets.boxes):
            ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, color=colour, linestyle=style, linewidth=1.5,
                                   label=_plain(label) if i == 0 else None))
    ax.set_axis_off()
    if len(reference) or len(board):
        ax.legend(fontsize=7, loc="lower right")
    empty = [label for dets, label in zip((reference, board), labels) if not len(dets)]
    if empty:
        ax.text(0.02, 0.98, _plain(f"no detections: {', '.join(empty)}"), transform=ax.transAxes, va="top", ha="left",
                fontsize=8, color="white", bbox={"facecolor": "black", "alpha": 0.6, "linewidth": 0})
    return _png(fig)
