"""Pass: make every upsample compute on the board exactly what PyTorch computes.

Upsampling sites (``nn.Upsample``, edgeport's ``BoardUpsample``, ``F.interpolate`` calls) are
found on the traced graph, with their shapes from a sample forward; in a model fx cannot trace,
only the modules are found. ``ops/upsample.decide`` says what each becomes: kept as it is (the
board computes it as converted, or the board lowering makes it so after conversion:
``ops/lowering``, nothing of the model's modules replaced); only ``--legacy-resize`` swaps in
another module, on purpose. A site nothing computes exactly stops the conversion with the
module, its mode and factor, and what is exact.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import fx, nn

from edgeport.convert.base import ConvertConfig, Pass, PassResult, Prepared
from edgeport.convert.modelcheck import assert_same_outputs
from edgeport.convert.tracing import trace
from edgeport.errors import PassCheckError
from edgeport.ops.board_upsample import BoardUpsample
from edgeport.ops.upsample import Decision, UpsampleSpec, decide

INTERPOLATE_FUNCS = (F.interpolate, F.upsample, torch.nn.functional.upsample_nearest, torch.nn.functional.upsample_bilinear)
REWRITE_REL_TOL = 1e-5


def _module_spec(where: str, m: nn.Module, in_shape, out_shape) -> UpsampleSpec | None:
    scale = (out_shape[-2] / in_shape[-2], out_shape[-1] / in_shape[-1])
    if isinstance(m, BoardUpsample):
        mode = "bilinear" if m.align_corners else "tf_legacy_bilinear"
        return UpsampleSpec(where, mode, scale, m.align_corners, int(in_shape[1]))
    if isinstance(m, nn.Upsample):
        return UpsampleSpec(where, m.mode, scale, bool(m.align_corners), int(in_shape[1]))
    return None


def _call_spec(where: str, node: fx.Node, in_shape, out_shape) -> UpsampleSpec:
    bound = inspect.signature(F.interpolate).bind_partial(*node.args, **node.kwargs)
    mode = bound.arguments.get("mode", "nearest")
    if node.target is torch.nn.functional.upsample_bilinear:
        mode, align = "bilinear", True
    else:
        align = bool(bound.arguments.get("align_corners") or False)
    scale = (out_shape[-2] / in_shape[-2], out_shape[-1] / in_shape[-1])
    return UpsampleSpec(where, mode, scale, align, int(in_shape[1]))


class _ShapeRecorder(fx.Interpreter):
    """Runs the graph once, noting each tensor-valued node's shape in ``meta["shape"]``: torch's
    ShapeProp imports sympy for symbolic shapes, which a conversion never needs (docs/measured.md)."""

    def run_node(self, n: fx.Node):
        out = super().run_node(n)
        if isinstance(out, torch.Tensor):
            n.meta["shape"] = tuple(out.shape)
        return out


def _shapes(gm: fx.GraphModule, sample: torch.Tensor) -> None:
    with torch.no_grad():
        _ShapeRecorder(gm).run(sample)


def find_sites(gm: fx.GraphModule) -> list[tuple[fx.Node, UpsampleSpec]]:
    """Upsampling sites of a shape-propagated graph module."""
    mods = dict(gm.named_modules())
    sites = []
    for node in gm.graph.nodes:
        if node.op not in ("call_module", "call_function") or "shape" not in node.meta:
            continue
        src = node.args[0] if node.args else None
        if not isinstance(src, fx.Node) or "shape" not in src.meta:
            continue
        in_shape, out_shape = src.meta["shape"], node.meta["shape"]
        if len(in_shape) != 4:
            continue
        spec = None
        if node.op == "call_module":
            spec = _module_spec(str(node.target), mods[node.target], in_shape, out_shape)
        elif node.target in INTERPOLATE_FUNCS:
            spec = _call_spec(node.name, node, in_shape, out_shape)
        if spec is not None:
            sites.append((node, spec))
    return sites


def rewrite_graph(module: nn.Module, sample: torch.Tensor, board, *, legacy_resize: bool) -> tuple[nn.Module, list[Decision], str]:
    """Return (new module, decisions, how sites were found). The input module is not modified."""
    module = copy.deepcopy(module)
    try:
        gm = trace(module)
        _shapes(gm, sample)
    except Exception:  # noqa: BLE001 - untraceable model: fall back to module hooks
        return (*_rewrite_modules(module, sample, board, legacy_resize=legacy_resize), "modules (model not traceable; F.interpolate calls not seen)")
    decisions = []
    for k, (node, spec) in enumerate(find_sites(gm)):
        decision = decide(spec, board, legacy_resize=legacy_resize)
        decisions.append(decision)
        if not decision.rewritten:
            continue
        name = f"edgeport_upsample_{k}"
        gm.add_submodule(name, decision.module)
        with gm.graph.inserting_after(node):
            new = gm.graph.call_module(name, (node.args[0],))
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return gm, decisions, "fx graph"


def _rewrite_modules(module: nn.Module, sample: torch.Tensor, board, *, legacy_resize: bool):
    shapes: dict[str, tuple] = {}
    hooks = []
    for name, m in module.named_modules():
        if isinstance(m, (nn.Upsample, BoardUpsample)):
            hooks.append(m.register_forward_hook(lambda mod, inp, out, name=name: shapes.__setitem__(name, (tuple(inp[0].shape), tuple(out.shape)))))
    with torch.no_grad():
        module(sample)
    for h in hooks:
        h.remove()
    decisions = []
    for name, (in_shape, out_shape) in shapes.items():
        m = module.get_submodule(name)
        spec = _module_spec(name, m, in_shape, out_shape)
        decision = decide(spec, board, legacy_resize=legacy_resize)
        decisions.append(decision)
        if decision.rewritten:
            parent_name, _, attr = name.rpartition(".")
            setattr(module.get_submodule(parent_name) if parent_name else module, attr, decision.module)
    return module, decisions


class RewriteUpsamplePass(Pass[Prepared, Prepared]):
    name = "rewrite_upsample"

    def run(self, value: Prepared, config: ConvertConfig) -> PassResult[Prepared]:
        sample = torch.from_numpy(value.calib[:1])
        module, decisions, how = rewrite_graph(value.module, sample, config.board, legacy_resize=config.legacy_resize)
        rewritten = [d for d in decisions if d.rewritten]
        record = tuple(
            {"where": d.spec.where, "mode": d.spec.mode, "scale": list(d.spec.scale), "align_corners": d.spec.align_corners,
             "rule": d.rule, "rewritten": d.rewritten, "exact": d.exact}
            for d in decisions
        )
        summary = f"{len(decisions)} upsample sites on {config.board.name}: {len(rewritten)} rewritten"
        if rewritten:
            summary += f" ({', '.join(sorted({d.rule for d in rewritten}))})"
        summary += f"; found via {how}"
        return PassResult(replace(value, module=module.eval(), upsample=record), changed=bool(rewritten), summary=summary)

    def check(self, before: Prepared, after: Prepared, config: ConvertConfig) -> None:
        sample = torch.from_numpy(after.calib[:1])
        if isinstance(after.module, fx.GraphModule):
            gm = copy.deepcopy(after.module)
            _shapes(gm, sample)
            for _, spec in find_sites(gm):
                decision = decide(spec, config.board, legacy_resize=config.legacy_resize)
                if decision.rewritten:
                    raise PassCheckError(f"upsample {spec.describe()} still needs {decision.rule} after the rewrite")
        if all(d["exact"] for d in after.upsample):
            assert_same_outputs(self.name, before.module, after.module, after.calib[:2], rel_tol=REWRITE_REL_TOL)
