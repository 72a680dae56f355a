"""``edgeport converters [install NAME]``: the two converters, and the second one's environment."""

from __future__ import annotations

from edgeport.text import for_terminal


def list_converters() -> int:
    from edgeport._lazy import installed_versions
    from edgeport.convert import litert

    onnx2tf = installed_versions(["onnx2tf"])["onnx2tf"]
    marker = litert.installed()
    print(for_terminal(f"{'onnx2tf':<13} {onnx2tf:<14} from the ONNX graph (default)"))
    where = f"in {litert.env_dir()}" if marker else f"not installed: {litert.install_hint()}"
    print(for_terminal(f"{litert.NAME:<13} {(marker or {}).get('version', '-'):<14} from the PyTorch model, {where}"))
    return 0


def install(name: str) -> int:
    from edgeport.convert import litert

    litert.install(log=lambda line: print(for_terminal(line), flush=True))
    return 0
