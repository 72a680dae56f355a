"""Checkpoint I/O: sniff a file, load it safely, find the weights in it, strip wrapper prefixes.

Shared by ``convert`` (its first passes) and the trainer (``--weights``, ``--resume``).
``torch.load(weights_only=True)`` by default: a checkpoint that needs arbitrary unpickling
(a pickled ``nn.Module``, a DDP wrapper, custom classes) is refused unless trusted, as
unpickling it runs code its author chose. The file is sniffed first, so an ONNX file, random
bytes or a truncated download each get their own one-line explanation.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

from edgeport.errors import CheckpointError, first_line

# Where training scripts keep the weights, in lookup order: ``ema`` first, as scripts saving both deploy it.
STATE_DICT_KEYS = ("ema", "model", "state_dict", "model_state_dict")
TRUST_HINT = "unpickling runs code: if you trust its source, pass --trust-checkpoint, or save its state_dict"
# A model a TFLite file can hold is under 2 GB (a flatbuffer's 32-bit offsets); with an optimizer's
# state and an EMA copy beside its weights, its checkpoint is a few times that at most.
MAX_CHECKPOINT_BYTES = 8 << 30
# torch.save's legacy (non-zip) format starts with a pickled magic number.
_LEGACY_MAGIC = b"\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"


def sniff(path: Path) -> str:
    """Classify a file by its first bytes: 'zip', 'legacy', or raise CheckpointError."""
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist; pass the path to a .pt/.pth file")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} is not a file; pass the path to a .pt/.pth file")
    size = path.stat().st_size
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"checkpoint {str(path)!r} holds {size / 2**30:.1f} GB, more than the {MAX_CHECKPOINT_BYTES >> 30} GB "
                              f"edgeport reads: no model a TFLite file can hold needs as much; save the model's state_dict alone")
    if size == 0:
        raise CheckpointError(f"checkpoint {str(path)!r} is empty (0 bytes); re-save or re-download it")
    with path.open("rb") as f:
        head = f.read(16)
    if head.startswith(b"PK\x03\x04"):
        if not zipfile.is_zipfile(path):
            raise CheckpointError(
                f"checkpoint {str(path)!r} is a truncated or corrupt archive ({size} bytes); "
                f"re-save or re-download it"
            )
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
        if not any(n.endswith("data.pkl") for n in names):
            raise CheckpointError(
                f"{str(path)!r} is a zip archive but not a PyTorch checkpoint (no data.pkl inside); "
                f"pass a file written by torch.save"
            )
        return "zip"
    if head[:1] == b"\x80" and head[2:].startswith(_LEGACY_MAGIC):
        return "legacy"
    what = _guess_format(head, path)
    raise CheckpointError(
        f"{str(path)!r} is not a PyTorch checkpoint ({what}); pass a file written by torch.save"
    )


def _guess_format(head: bytes, path: Path) -> str:
    if head[4:8] == b"TFL3":
        return "it is a TFLite model"
    if path.suffix.lower() == ".onnx" or head[:1] == b"\x08":
        return "it looks like an ONNX model; convert takes the PyTorch checkpoint it came from"
    if head[:1] == b"\x80":
        return "it is a plain pickle, not written by torch.save"
    return "unrecognised content"


def _unsupported_global(message: str) -> str | None:
    # torch words it two ways: "Unsupported global: GLOBAL x.y" and "unsupported GLOBAL x.y whose ..."
    match = re.search(r"unsupported (?:global: )?GLOBAL ([\w.]+)", message, flags=re.IGNORECASE)
    return match.group(1) if match else None


@functools.cache
def _ddp_contents() -> type:
    """What a pickled ``DistributedDataParallel`` unpickles as: its modules, without the process group
    DDP's ``__setstate__`` insists on, so ``torch.save(ddp_model)`` loads with no process group or GPU."""
    from torch import nn

    class DistributedDataParallelContents(nn.Module):
        """A DistributedDataParallel's state, unpickled without its communication: ``module`` is the model."""

        def __setstate__(self, state):
            nn.Module.__setstate__(self, state)

    return DistributedDataParallelContents


def _trusting_pickle():
    """``torch.load``'s pickle module for a trusted checkpoint: pickle, with a DistributedDataParallel stand-in."""
    import pickle as std
    import types

    class Unpickler(std.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("torch.nn.parallel.distributed", "DistributedDataParallel"):
                return _ddp_contents()
            return super().find_class(module, name)

    module = types.ModuleType("edgeport_trusted_pickle")
    module.Unpickler = Unpickler
    module.load = lambda f, **kw: Unpickler(f, **kw).load()
    module.__dict__.update({k: getattr(std, k) for k in ("UnpicklingError", "HIGHEST_PROTOCOL", "dumps", "dump")})
    return module


def torch_load(path: Path, *, trust: bool) -> Any:
    """``torch.load`` with the failure modes turned into one-line ``CheckpointError``s."""
    import torch

    sniff(path)
    try:
        if trust:
            return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_trusting_pickle())
        # a training script's options beside its weights (torchvision's reference scripts): plain attributes the
        # restricted unpickler reads; nothing runs. For this load alone where torch has the scoped form (2.5+)
        scoped = getattr(torch.serialization, "safe_globals", None)
        if scoped is None:
            torch.serialization.add_safe_globals([argparse.Namespace])
        with scoped([argparse.Namespace]) if scoped is not None else contextlib.nullcontext():
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        culprit = _unsupported_global(str(exc))
        if not trust and culprit:
            raise CheckpointError(
                f"checkpoint {str(path)!r} holds pickled objects ({culprit}) that safe loading refuses; " + TRUST_HINT
            ) from exc
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be unpickled ({first_line(exc)[:160]}); re-save it") from exc
    except (EOFError, RuntimeError, zipfile.BadZipFile, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {str(path)!r} is truncated or corrupt ({first_line(exc)[:160]}); re-save or re-download it"
        ) from exc
    except (ModuleNotFoundError, AttributeError) as exc:
        # Only reachable with --trust-checkpoint: the pickle names code that is not importable.
        raise CheckpointError(
            f"checkpoint {str(path)!r} needs code that is not importable ({exc}); run from the "
            f"project that defines it or add it to PYTHONPATH"
        ) from exc


def _is_state_dict(obj: Any) -> bool:
    import torch

    return (
        isinstance(obj, dict)
        and len(obj) > 0
        and all(isinstance(k, str) for k in obj)
        and all(isinstance(v, torch.Tensor) for v in obj.values())
    )


def find_weights(obj: Any) -> tuple[str, dict | None, Any, str | None, dict | None]:
    """Return (layout, state_dict, module, arch, arch_config) for a loaded checkpoint."""
    from torch import nn

    if isinstance(obj, nn.Module):
        return "pickled module", None, obj, None, None
    if _is_state_dict(obj):
        return "state_dict", dict(obj), None, None, None
    if isinstance(obj, dict):
        arch = obj.get("arch") if isinstance(obj.get("arch"), str) else None
        config = obj.get("config") if isinstance(obj.get("config"), dict) else None
        for key in STATE_DICT_KEYS:
            value = obj.get(key)
            if _is_state_dict(value):
                layout = "edgeport trainer checkpoint" if arch else f"dict['{key}']"
                return layout, dict(value), None, arch, config
            if isinstance(value, nn.Module):
                return f"dict['{key}'] (pickled module)", None, value, arch, config
        keys = ", ".join(sorted(map(str, obj))[:12]) or "none"
        raise CheckpointError(
            f"no weights found in the checkpoint dict (keys: {keys}); expected a state_dict, or one "
            f"under {', '.join(repr(k) for k in STATE_DICT_KEYS)}"
        )
    raise CheckpointError(
        f"checkpoint holds a {type(obj).__name__}, not weights; expected a state_dict, a dict "
        f"holding one, or (with --trust-checkpoint) a pickled nn.Module"
    )


def recorded_imgsz(obj: Any) -> int | None:
    """The input size a checkpoint says its model was trained at (edgeport's trainer writes ``imgsz``):
    a number from a file, so only a whole number in 32..4096; else None."""
    value = obj.get("imgsz") if isinstance(obj, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 32 <= value <= 4096:  # (cliargs is a layer above)
        return value
    return None


def weights_digest(module) -> str:
    """SHA-256 of a module's weights and buffers (names, dtypes, shapes and bytes, in name order):
    which trained model a report is about, whatever file it was saved in."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        flat = t.detach().cpu().reshape(-1).contiguous()
        h.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return h.hexdigest()


def check_finite(named_tensors, path: Path) -> None:
    """Refuse weights holding NaN or Inf, naming the tensor: they convert to garbage."""
    bad = []
    for name, t in named_tensors:
        if getattr(t, "is_floating_point", lambda: False)():
            n = int((~t.isfinite()).sum())
            if n:
                bad.append((name, n, t.numel()))
    if bad:
        name, n, total = bad[0]
        more = f" (and {len(bad) - 1} more tensors)" if len(bad) > 1 else ""
        raise CheckpointError(
            f"checkpoint {str(path)!r}: tensor {name!r} holds {n} NaN/Inf values of {total}{more}; the training run "
            f"diverged before it was saved: use an earlier checkpoint (such as best.pt) or retrain with a lower learning rate"
        )


DDP_PREFIX = "module."
COMPILE_PART = "_orig_mod"


def strip_state_dict(sd: dict) -> tuple[dict, int]:
    """``module._orig_mod.module.backbone._orig_mod.conv`` -> ``backbone.conv``; a leading wrapper part
    goes only while every key carries it (DDP prefixes all keys), so a child called ``module`` keeps its name."""
    keys = list(sd)
    parts = [k.split(".") for k in keys]
    while parts and all(len(p) > 1 and p[0] == parts[0][0] for p in parts) and parts[0][0] in (
        "module",
        COMPILE_PART,
    ):
        parts = [p[1:] for p in parts]
    # torch.compile reserves `_orig_mod`: it also appears deeper for compiled sub-modules
    new_keys = [".".join(x for x in p if x != COMPILE_PART) for p in parts]
    if len(set(new_keys)) != len(new_keys):
        raise CheckpointError("two checkpoint keys map to the same name after removing DDP/compile prefixes; re-save the state_dict without wrappers")
    out = dict(zip(new_keys, sd.values()))
    return out, sum(a != b for a, b in zip(keys, new_keys))


def unwrap_module(module: Any) -> tuple[Any, list[str]]:
    """Peel DistributedDataParallel / DataParallel / compiled wrappers off a module object."""
    from torch import nn

    peeled: list[str] = []
    while True:
        if isinstance(module, (nn.parallel.DistributedDataParallel, nn.DataParallel, _ddp_contents())):
            peeled.append("DistributedDataParallel" if isinstance(module, _ddp_contents()) else type(module).__name__)
            module = module.module
        elif hasattr(module, "_orig_mod") and isinstance(module._orig_mod, nn.Module):
            peeled.append(type(module).__name__)
            module = module._orig_mod
        else:
            return module, peeled
