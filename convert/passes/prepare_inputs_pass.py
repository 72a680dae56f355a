"""Fix the input size against the model's stride and load calibration images.

Done before any rewriting so that a bad ``--imgsz`` or ``--calib`` fails in seconds.
"""

from __future__ import annotations

import numpy as np

from edgeport.convert.base import ConvertConfig, Model, Pass, PassResult, Prepared
from edgeport.convert.calibration import calibration_and_judging
from edgeport.errors import BadInputError, PassCheckError
from edgeport.models.registry import model_output_names
from edgeport.text import clip

DEFAULT_IMGSZ = 320
# float32 copies of every input a conversion holds at once (the batch, its NHWC copy for the
# converter, letterboxes) and a margin for the converter's own
COPIES = 8


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (Linux's MemAvailable); None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(imgsz: int, images: int) -> None:
    """Refuse an input size whose images alone would not fit in memory, before any is made."""
    have = available_memory()
    need = images * 3 * imgsz * imgsz * 4 * COPIES
    if have is not None and need > have:
        fits = int((have / (images * 3 * 4 * COPIES)) ** 0.5)
        raise BadInputError(f"--imgsz {imgsz} needs about {need / 2**30:.1f} GiB for its {images} calibration and validation "
                            f"images alone; this machine has {have / 2**30:.1f} GiB available: use --imgsz {max(32, fits // 32 * 32)} "
                            f"or less")


# the sizes tried for a model that states no stride and does not run at the size asked
TRIED_SIZES = range(8, 321)
SEARCH_S = 30.0  # at most this long


def _refusal(module, size: int) -> Exception | None:
    """What the model raises on a ``size`` x ``size`` image of zeros; None where it runs."""
    import torch

    try:
        with torch.no_grad():
            module(torch.zeros(1, 3, size, size))
    except (RuntimeError, ValueError) as exc:
        return exc
    return None


def own_size(module, imgsz: int, where: str, *, chosen: bool) -> tuple[int, str]:
    """The size a model that states no stride runs at: ``imgsz`` where it runs there; else, unless the
    user (or the checkpoint) chose that size, the one size of ``TRIED_SIZES`` it runs at (a fixed-size
    net: MTCNN's R-Net at 24, O-Net at 48). Otherwise exit 2, naming the sizes it takes."""
    refused = _refusal(module, imgsz)
    if refused is None:
        return imgsz, where
    import time

    sizes, tried, ends = [], TRIED_SIZES[-1], time.monotonic() + SEARCH_S
    for size in TRIED_SIZES:
        if time.monotonic() > ends:  # a large model refusing for another reason: the search ends, and says where
            tried = size - 1
            break
        if _refusal(module, size) is None:
            sizes.append(size)
    if len(sizes) == 1 and not chosen:
        return sizes[0], "the one size the model runs at"
    takes = (f"it runs at {', '.join(map(str, sizes[:8]))}{' ...' if len(sizes) > 8 else ''} px"
             if sizes else f"it runs at no size from {TRIED_SIZES[0]} to {tried} px")
    raise BadInputError(f"the model does not run on {imgsz} x {imgsz} inputs ({where}: {clip(' '.join(str(refused).split()), 80)}); "
                        f"{takes}: pass --imgsz with one") from refused


class PrepareInputsPass(Pass[Model, Prepared]):
    name = "prepare_inputs"

    def run(self, value: Model, config: ConvertConfig) -> PassResult[Prepared]:
        import torch

        from edgeport.models.heads import head_hints, resolve_head
        from edgeport.models.outputs import OutputSelector, output_shapes, require_fixed_outputs, require_tensors

        stride = value.stride  # 0: the model says none, and any size it runs at will do
        trained = value.checkpoint.imgsz
        # the size the checkpoint was trained at, unless --imgsz says otherwise: a report about a model
        # at a size it never saw is no report on what was trained
        imgsz = config.imgsz or trained or DEFAULT_IMGSZ
        where = (config.imgsz_from if config.imgsz else "the size the checkpoint was trained at" if trained
                 else "the default; --imgsz sets it")
        if config.imgsz and trained and config.imgsz != trained:
            where = f"{config.imgsz_from}; warning: the checkpoint was trained at {trained} px"
        if imgsz <= 0 or (stride and imgsz % stride):
            lower = max(stride, imgsz // stride * stride)
            given = f"--imgsz {imgsz}" if config.imgsz else f"the size the checkpoint was trained at ({imgsz})"
            raise BadInputError(f"{given} is not a positive multiple of the model's stride {stride}; use {lower} or {lower + stride}"
                                + ("" if config.imgsz else " (--imgsz)"))
        if not stride:  # a model that states no stride: the sizes it takes are what it runs at
            imgsz, where = own_size(value.module, imgsz, where, chosen=bool(config.imgsz or trained))
        check_memory(imgsz, config.max_calib + config.max_validate)
        # a quantised file is judged on images it was not calibrated on, where the user's images allow it
        calib, source, val, val_source, held_out = calibration_and_judging(
            config.calib_dir, config.val_dir, imgsz, calib=config.max_calib, judge=config.max_validate, seed=config.seed)
        module, reference = value.module, value.reference
        with torch.no_grad():
            out = module(torch.from_numpy(calib[:1]))
        require_tensors(out, config.outputs)
        if config.outputs is not None:  # export and parity see the tensors --outputs picks
            module = OutputSelector(module, config.outputs).eval()
            reference = OutputSelector(reference, config.outputs).eval()
            with torch.no_grad():
                out = module(torch.from_numpy(calib[:1]))
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        # a second, different image: outputs whose shapes follow the data (after NMS) cannot be exported
        other = np.random.default_rng(config.seed).random((1, 3, imgsz, imgsz), dtype=np.float32)
        with torch.no_grad():
            again = module(torch.from_numpy(other))
        require_fixed_outputs(outputs, again if isinstance(again, (tuple, list)) else (again,), config.outputs)
        names = tuple(model_output_names(value.module, len(outputs)))
        # each output's stride: a grid's from its shape, else the level the model says it is (0: none)
        strides = tuple(imgsz // o.shape[-1] if o.dim() == 4 else 0 for o in outputs)
        if not all(strides) and len(value.strides) == len(outputs):
            strides = value.strides
        head = resolve_head(config.head, [tuple(o.shape) for o in outputs], strides, head_hints(value.module))
        prepared = Prepared(value, module, reference, imgsz, calib, source, val, val_source, names, strides, head,
                            output_shapes(outputs), held_out=held_out)
        judged = f"judged on {val_source}" if held_out else f"judged on {val_source} (give --val DIR to hold images out)"
        # `validate` judges a file it was given (``given``): it calibrates nothing, and its images are its --data's
        said = "" if config.given is not None else f", calibration: {source}; {judged}"
        return PassResult(prepared, changed=False, summary=f"{imgsz}px ({where}), head {head.describe()}{said}")

    def check(self, before: Model, after: Prepared, config: ConvertConfig) -> None:
        calib = after.calib
        if calib is None or calib.ndim != 4 or calib.shape[1:] != (3, after.imgsz, after.imgsz):
            raise PassCheckError(f"calibration batch has shape {None if calib is None else calib.shape}")
        if not np.isfinite(calib).all() or calib.min() < 0 or calib.max() > 1:
            raise PassCheckError("calibration inputs are outside [0, 1]")
