"""Cross-layer equalisation and bias correction on the prepared (BN-folded) PyTorch model, before
export: Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias Correction"
(ICCV 2019), as AIMET applies it.

**Equalisation.** Where one convolution feeds another through an activation that is positively
homogeneous per channel -- f(s x) = s f(x) for s > 0: ReLU, LeakyReLU, PReLU (any slopes), identity,
and a max pool between them -- scaling the first convolution's output channel i by 1/s_i and the
second's input channel i by s_i computes the same function. With s_i = sqrt(r1_i / r2_i) (r1_i:
the largest |weight| of the first's output channel i, r2_i: of the second's input channel i) both
channels end with the same range, sqrt(r1_i r2_i): a per-tensor weight grid (TFLite 1.x's uint8)
no longer spends its steps on one channel's outliers. ReLU6 and SiLU are not homogeneous: their
pairs are left as they are.

**Bias correction** (empirical). Quantising a convolution's weights moves its output's mean by
``conv(E[x], W_q - W)``: the weight error against the mean input of each channel, measured on the
calibration images. Each convolution's bias takes that shift off, with ``W_q`` rounded as the
board's quantised file will round it (int8 symmetric, per output channel where the board runs int8,
per tensor where it runs uint8).

Both change the PyTorch model only; the repair pass exports and converts it again
(``convert/passes/repair_pass.py``) and judges the new file against the trained model as loaded.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass

import torch
from torch import fx, nn

from edgeport.convert.tracing import trace

HOMOGENEOUS = (nn.ReLU, nn.LeakyReLU, nn.PReLU, nn.Identity)
HOMOGENEOUS_FUNCTIONS = {torch.relu, torch.nn.functional.relu, torch.nn.functional.leaky_relu}
PASS_THROUGH = (nn.MaxPool2d,)  # per-channel and positively homogeneous: an equalised pair may hold one


@dataclass(frozen=True)
class Equalised:
    module: nn.Module
    pairs: int  # convolution pairs equalised
    biases: int  # convolutions whose bias was corrected


def _plain_conv(m) -> bool:
    return isinstance(m, nn.Conv2d) and m.groups == 1 and m.padding_mode == "zeros"


def conv_pairs(module: nn.Module) -> list[tuple[str, str]]:
    """(first, second) convolution names where the first's output reaches only the second, through
    activations homogeneous per channel (and max pools); each module called once. On ``module``'s fx
    graph; raises where fx cannot trace it."""
    gm = trace(module)
    mods = dict(gm.named_modules())
    calls = Counter(n.target for n in gm.graph.nodes if n.op == "call_module")

    def passes(node: fx.Node) -> bool:
        if node.op == "call_module":
            m = mods.get(node.target)
            return isinstance(m, HOMOGENEOUS + PASS_THROUGH) and calls[node.target] == 1
        return node.op == "call_function" and node.target in HOMOGENEOUS_FUNCTIONS

    pairs = []
    for node in gm.graph.nodes:
        if node.op != "call_module" or not _plain_conv(mods.get(node.target)) or calls[node.target] != 1:
            continue
        cur = node
        while len(cur.users) == 1:
            (nxt,) = cur.users
            if nxt.op == "call_module" and _plain_conv(mods.get(nxt.target)) and calls[nxt.target] == 1 and nxt.args[0] is cur:
                if mods[node.target].out_channels == mods[nxt.target].in_channels:
                    pairs.append((node.target, nxt.target))
                break
            if not passes(nxt) or nxt.args[0] is not cur:
                break
            cur = nxt
    return pairs


def _equalise_pair(first: nn.Conv2d, second: nn.Conv2d) -> None:
    with torch.no_grad():
        r1 = first.weight.abs().amax(dim=(1, 2, 3))
        r2 = second.weight.abs().amax(dim=(0, 2, 3))
        s = torch.where((r1 > 0) & (r2 > 0), torch.sqrt(r1 / r2.clamp_min(1e-12)), torch.ones_like(r1))
        first.weight.div_(s.view(-1, 1, 1, 1))
        if first.bias is not None:
            first.bias.div_(s)
        second.weight.mul_(s.view(1, -1, 1, 1))


def _equalise(module: nn.Module) -> int:
    """In place: the whole model's graph, else each largest submodule fx can trace."""
    try:
        pairs = conv_pairs(module)
    except Exception:  # noqa: BLE001 - fx cannot trace every model: go one level down
        return sum(_equalise(child) for child in module.children())
    for first, second in pairs:
        _equalise_pair(module.get_submodule(first), module.get_submodule(second))
    return len(pairs)


def quantise_weights(w: torch.Tensor, per_channel: bool) -> torch.Tensor:
    """``w`` on the grid a TFLite int8 file gives it: symmetric, [-127, 127], per output channel or per tensor."""
    top = w.abs().amax(dim=tuple(range(1, w.dim())), keepdim=True) if per_channel else w.abs().max()
    scale = torch.where(top > 0, top / 127, torch.ones_like(top))
    return torch.clamp(torch.round(w / scale), -127, 127) * scale


def correct_biases(module: nn.Module, images: torch.Tensor, per_channel: bool) -> int:
    """In place: each plain or grouped convolution's bias less the mean shift its weights' grid makes."""
    convs = [m for m in module.modules() if isinstance(m, nn.Conv2d) and m.padding_mode == "zeros"]
    means: dict[nn.Module, torch.Tensor] = {}

    def record(m, args) -> None:  # (a hook that returns a value would replace the input)
        means.setdefault(m, args[0].detach().mean(dim=(0, 2, 3)))

    hooks = [m.register_forward_pre_hook(record) for m in convs]
    try:
        with torch.no_grad():
            module(images)
    finally:
        for h in hooks:
            h.remove()
    corrected = 0
    with torch.no_grad():
        for m in convs:
            if m not in means:
                continue
            error = quantise_weights(m.weight, per_channel) - m.weight  # (out, in/groups, kh, kw)
            x = means[m].view(m.groups, -1)  # the mean of each input channel, per group
            per_out = error.sum(dim=(2, 3)).view(m.groups, -1, error.shape[1])  # (groups, out/groups, in/groups)
            shift = torch.einsum("goc,gc->go", per_out, x).reshape(-1)
            if m.bias is None:
                m.bias = nn.Parameter(torch.zeros(m.out_channels, dtype=m.weight.dtype))
            m.bias.sub_(shift)
            corrected += 1
    return corrected


def equalise(module: nn.Module, images: torch.Tensor, *, per_channel: bool, pairs: bool = True, biases: bool = True) -> Equalised:
    """A copy of ``module`` (eval), equalised (``pairs``), then its biases corrected on NCHW ``images`` (``biases``)."""
    module = copy.deepcopy(module).eval()
    equalised = _equalise(module) if pairs else 0
    return Equalised(module, equalised, correct_biases(module, images, per_channel) if biases else 0)
