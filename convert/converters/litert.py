"""litert-torch, driven: the second converter, PyTorch -> TFLite without ONNX (``--converter litert-torch``).

The route Ultralytics' own LiteRT export takes, independent of onnx2tf: where the two agree, a
failed parity row is the model's; where they part, a converter's (``cross_check``).

It lives in its own environment, because its pins clash with both onnx2tf lines (it needs
ai-edge-litert 2.3 with extras, typing-extensions 4.12, jax, transformers; onnx2tf 2.x pins
ai-edge-litert 2.1.2). ``edgeport converters install litert-torch`` builds it at setup time, the
way ``boards install`` builds a board's runtime: a venv of this Python layered on this
environment's site-packages (one ``.pth`` line), so torch is this environment's own (one copy,
and ``torch.export`` files pass between the two unchanged) and only what litert-torch adds is
installed, about 1 GB. Nothing downloads at conversion time.

A conversion: this process exports the prepared model with ``torch.export`` (``begin``), the
converter's Python converts it (``litert_worker.py``, one process, offline), and the files go
through the same gate, lowering and parity as onnx2tf's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from edgeport import venvs
from edgeport.convert.context import RunContext, WarmChild
from edgeport.convert.converters.base import Conversion, Converter, condense, offline_env
from edgeport.errors import BadInputError, MissingDependencyError

NAME = "litert-torch"
# pinned: the converter's output (ops, versions, layouts) is what the zoo's outcomes were measured on
PACKAGES = ("litert-torch==0.10.0",)
# and what it pulls in beyond this environment's packages, pinned as they resolved on 2026-12-03:
# unpinned, they floated with the registry (its quantiser, ``==0.10.*``; jax; scipy), and a later
# resolution changed which rows of the zoo's mobilevit-xxs int8 file pass (tests/zoo/test_zoo_litert.py)
LAYER_PINS = (
    "ai-edge-quantizer==0.10.0", "annotated-doc==0.0.7", "annotated-types==0.8.0", "anyio==4.14.2", "fire==0.7.1",
    "immutabledict==4.2.1", "jax==0.10.2", "jaxlib==0.10.2", "jaxtyping==0.3.11", "kagglehub==1.0.3",
    "kagglesdk==0.1.38", "lark==1.3.1", "litert-converter==0.5.0", "litert-lm-builder==0.18.1", "multipledispatch==1.0.0",
    "ordered-set==4.1.0", "pydantic==2.11.10", "pydantic_core==2.33.2", "regex==2026.11.19", "scipy==1.17.1",
    "sentencepiece==0.2.3", "shellingham==1.5.4", "tabulate==0.10.0", "tokenizers==0.23.3", "tomli==2.5.0",
    "torchao==0.18.0", "transformers==5.24.0", "typer==0.29.2", "typing-inspection==0.4.2", "typing_extensions==4.12.2",
    "wadler_lindig==0.1.8", "xdsl==0.28.0",
)
MARKER = ".edgeport-converter.json"
WORKER = Path(__file__).with_name("litert_worker.py")


def env_dir() -> Path:
    """This environment's litert-torch: one per Python and host environment, under EDGEPORT_HOME."""
    host = hashlib.sha256(sys.prefix.encode()).hexdigest()[:8]
    return venvs.home() / "converters" / f"{NAME}-py{sys.version_info[0]}{sys.version_info[1]}-{host}"


def installed() -> dict | None:
    """The installed converter's marker (its version, what it was built on), or None."""
    return venvs.read_marker(env_dir(), MARKER)


def install_hint() -> str:
    return "edgeport converters install litert-torch (make setup-converters)"


def pins(torch: str) -> list[str]:
    """What the environment is built to: the converter, its layer (``LAYER_PINS``) and this
    environment's torch. The marker keeps them; an environment built to others is built again."""
    return sorted([*PACKAGES, *LAYER_PINS, f"torch=={torch.split('+')[0]}"])


def stale(marker: dict) -> str | None:
    """Why an installed environment is not the one this edgeport builds, or None."""
    torch = _host_torch()
    if str(marker.get("torch")).split("+")[0] != torch.split("+")[0]:
        return f"was installed on torch {marker.get('torch')}, and this environment now has torch {torch}"
    if marker.get("pins") is None:
        return "was installed before edgeport pinned what litert-torch adds (its marker records no pins)"
    if marker.get("pins") != pins(torch):
        changed = sorted(set(pins(torch)) - set(marker.get("pins") or ()))
        return (f"was installed with other pins than this edgeport's ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''} "
                f"{'were' if len(changed) > 1 else 'was'} not among them)" if changed else "was installed with other pins than this edgeport's")
    return None


def install(*, log=print) -> dict:
    """Build the layered environment (idempotent: an installed one is kept, and one built to other
    pins or on another torch is brought to them in place)."""
    folder = env_dir()
    done = installed()
    why = stale(done) if done is not None else None
    if done is not None and why is None:
        log(f"{NAME} {done['version']} already installed in {folder}")
        return done
    torch = _host_torch()
    if torch == "not installed":
        raise MissingDependencyError("litert-torch converts with this environment's torch, and torch is not installed here")
    log(f"{'installing' if why is None else 'installing again'} {' '.join(PACKAGES)} for Python {sys.version_info[0]}.{sys.version_info[1]} "
        f"in {folder} (on this environment's torch {torch}){f': it {why}' if why else ''}")

    def layer(python: Path) -> list[str]:
        """After its own site-packages, this environment's: what litert-torch installs comes first,
        the rest (torch) from here, pinned to this torch; its own layer pinned (``LAYER_PINS``)."""
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        host = sysconfig.get_paths()
        Path(site, "edgeport-host.pth").write_text("".join(f"{p}\n" for p in dict.fromkeys([host["purelib"], host["platlib"]])))
        (folder / "constraints.txt").write_text("".join(f"{pin}\n" for pin in (f"torch=={torch.split('+')[0]}", *LAYER_PINS)))
        return ["-c", str(folder / "constraints.txt")]

    python = venvs.build_venv(folder, getattr(sys, "_base_executable", sys.executable), PACKAGES, what=NAME, layer=layer)
    # what the worker imports, imported once: a broken environment is found here, not at conversion
    version = subprocess.run([str(python), "-I", "-c", "import ai_edge_quantizer, litert_torch, numpy, torch; "
                              "print(litert_torch.__version__)"], capture_output=True, text=True, env=_worker_env())
    if version.returncode != 0:
        raise BadInputError(f"{NAME} installed in {folder} but does not import: {condense(version.stderr)}; remove that folder "
                            f"and install it again")
    marker = {"converter": NAME, "version": version.stdout.strip().splitlines()[-1], "packages": list(PACKAGES),
              "host": sys.prefix, "torch": torch, "pins": pins(torch)}
    venvs.write_marker(folder, MARKER, marker)
    log(f"{NAME} {marker['version']} installed in {folder}")
    return marker


def _host_torch() -> str:
    from edgeport._lazy import installed_versions

    return installed_versions(["torch"])["torch"]


def require() -> Path:
    """The converter's Python, or a MissingDependencyError saying how to install it (or to
    build it again, when this environment's torch or edgeport's pins changed since: it runs on
    that torch, and converts as those pins do)."""
    marker = installed()
    if marker is None:
        raise MissingDependencyError(f"{NAME} is not installed for this Python ({sys.prefix}): {install_hint()}")
    why = stale(marker)
    if why is not None:
        raise MissingDependencyError(f"{NAME} in {env_dir()} {why}: {install_hint()} builds it again")
    return env_dir() / "bin" / "python"


@dataclass
class Begun:
    """A conversion handed to the worker (``begin``): its process and job, or why none started."""

    work: Path
    variants: list[str]
    t0: float
    timeout_s: float = 0.0
    child: WarmChild | None = None
    deadline: float = 0.0
    ask: bool = False  # int8 asked for: the worker asks which float32 file to quantise (``_answer``)
    failed: Conversion | None = None  # the model torch.export could not capture or save: the reason
    source: object = None  # the ``Prepared`` it was begun from (``LiteRTTorch.begin``)

    def no_file(self, why: str) -> Conversion:
        """No file: the same reason for every variant."""
        return Conversion({}, {v: why for v in self.variants}, {}, time.perf_counter() - self.t0)


def begin(module, calib: np.ndarray, work: Path, *, int8: bool, timeout_s: float, context: RunContext,
          per_tensor: bool = False) -> Begun:
    """Capture the prepared module on the first image with ``torch.export`` and hand it to the
    worker, which converts while this process goes on (``convert_variants`` takes the result).
    A model ``torch.export`` cannot capture or save is a reason, and no worker starts. A copy of
    the module is run and captured: ``module`` stays as the passes after see it."""
    import copy

    import torch

    python = require()
    work.mkdir(parents=True, exist_ok=True)
    variants = ["float32", "int8"] if int8 else ["float32"]
    begun = Begun(work, variants, time.perf_counter(), timeout_s, ask=int8)

    def failed(why: str) -> Begun:
        begun.failed = begun.no_file(why)
        return begun

    sample = np.ascontiguousarray(calib[:1], np.float32)
    try:
        # once at this size first, as Ultralytics' exporter does: a module that caches what depends
        # only on the input's size (Ultralytics' Detect: its anchors) is captured with it as
        # constants, not as the ops that compute it (BROADCAST_TO, which TFLite 1.13 lacks)
        module = copy.deepcopy(module).eval()
        with torch.no_grad():
            module(torch.from_numpy(sample))
        program = torch.export.export(module, (torch.from_numpy(sample),))
    except Exception as exc:  # noqa: BLE001 -- which construct the exporter refused is the reason
        return failed(f"torch.export cannot capture the model: {condense(f'{type(exc).__name__}: {exc}')}")
    try:
        torch.export.save(program, str(work / "model.pt2"))
    except Exception as exc:  # noqa: BLE001 -- a captured program torch cannot serialise (a custom object in it)
        return failed(f"torch.export cannot save the captured model: {condense(f'{type(exc).__name__}: {exc}')}")
    np.save(work / "sample.npy", sample)
    if int8:
        np.save(work / "calib.npy", np.ascontiguousarray(calib, np.float32))
    (work / "job.json").write_text(json.dumps({"variants": variants, "per_tensor": per_tensor, "ask": begun.ask}))
    for stale in (work / "float32.done", work / "result.json"):  # a folder converted in before: only this run's words count
        stale.unlink(missing_ok=True)
    begun.child = context.child(_worker_argv(python), _worker_env(), str(work), more=begun.ask)
    begun.deadline = time.perf_counter() + timeout_s
    return begun


def convert_variants(module, calib: np.ndarray, work: Path, *, int8: bool, timeout_s: float, per_tensor: bool = False,
                     plans=None, meanwhile: Callable[[dict[str, Path]], None] | None = None,
                     begun: Begun | None = None, context: RunContext | None = None) -> Conversion:
    """float32 (and full-integer int8 when asked, calibrated on ``calib``: weights per channel, or
    per tensor) from the prepared module. With ``plans`` (``int8_groups``), int8 is quantised from
    the float32 file with its output groups divided apart (``_answer``). A model ``torch.export``
    cannot capture (``begin``), or a variant the converter cannot write, is a reason. ``begun``: the
    conversion ``begin`` handed over already (its options are then its own), else it is begun here.
    ``meanwhile`` (``Converter.convert``): called once the module is captured, while the worker
    converts (and, with int8, again with the float32 file while the worker quantises). ``timeout_s``:
    the worker's time, from its job."""
    if begun is None:
        with RunContext() if context is None else contextlib.nullcontext(context) as run:
            begun = begin(module, calib, work, int8=int8, timeout_s=timeout_s, context=run, per_tensor=per_tensor)
            return convert_variants(module, calib, work, int8=int8, timeout_s=timeout_s, plans=plans, meanwhile=meanwhile,
                                    begun=begun)
    if begun.failed is not None:
        return begun.failed
    child, variants, work = begun.child, begun.variants, begun.work
    proc = child.proc
    meanwhile = meanwhile or (lambda files: None)
    log, asked = work / "litert-torch.log", work / "float32.done"
    try:
        meanwhile({})
        if begun.ask:
            plans = _answer(child, work, plans, begun.deadline, meanwhile)
        proc.wait(timeout=max(0.0, begun.deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        tail = condense(log.read_text(errors="replace")[-4000:]) if log.is_file() else "no output"
        return begun.no_file(f"litert-torch did not finish within {begun.timeout_s:.0f} s (its last words: {tail})")
    finally:
        child.end()
    seconds = time.perf_counter() - begun.t0
    try:
        result = json.loads((work / "result.json").read_text())
    except (OSError, ValueError):
        result = None
    if result is None:  # it ended before it wrote what it did (a crash, an import that failed)
        tail = condense(log.read_text(errors="replace")[-4000:]) if log.is_file() else f"exit {proc.returncode}, no log"
        if not asked.exists():
            return begun.no_file(f"litert-torch failed: {tail}")
        result = {"written": ["float32"], "errors": {"int8": f"it failed after writing float32: {tail}"}}
    # (a worker that crashed while shutting down, after result.json, still wrote its files)
    files = {v: work / f"model_{v}.tflite" for v in result["written"] if (work / f"model_{v}.tflite").is_file()}
    if "int8" in files:  # ai-edge-quantizer stores constants after the flatbuffer: inline them, as every runtime reads
        from edgeport.ops.tflite_graph import Graph

        files["int8"].write_bytes(Graph(files["int8"].read_bytes()).to_bytes())
    not_written = {v: f"litert-torch: {result['errors'].get(v) or 'no file written'}" for v in variants if v not in files}
    return Conversion(files, not_written, {}, seconds, plans=plans if plans and "int8" in files else None)


def _answer(child: WarmChild, work: Path, plans, deadline: float, meanwhile) -> object:
    """The worker's question, once its float32 file is written (``float32.done``): which float32
    file to quantise. The file with each output's groups divided apart (``int8_groups.normalise_tflite``),
    or, where they cannot be reached apart, the file itself (the plans then None: returned). Nothing
    answered (the worker ended, or the time is up) closes its input: it then quantises nothing."""
    asked, answer = work / "float32.done", None
    while child.running() and not asked.exists() and time.perf_counter() < deadline:
        time.sleep(0.02)
    if asked.exists():
        from edgeport.convert.converters.int8_groups import normalise_tflite

        float32, answer = work / "model_float32.tflite", work / "model_float32_groups_apart.tflite"
        try:
            apart = bool(plans) and normalise_tflite(float32, answer, plans)
        except Exception:  # noqa: BLE001 -- a file the rewrite cannot read: int8 as it is, as where it finds no way
            apart = False
        if not apart:
            answer, plans = float32, None  # int8 as it is (no output mixes scales, or none reached); parity says what it costs
    child.tell(None if answer is None else str(answer))
    if answer is not None:  # (after the answer: parity's early runs wait on PyTorch's, and the worker must not)
        meanwhile({"float32": work / "model_float32.tflite"})
    return plans


def _worker_argv(python: Path) -> list[str]:
    """Isolated (``-I``), so nothing beside the worker file (or in PYTHONPATH) shadows the converter's imports."""
    return [str(python), "-I", str(WORKER)]


def _worker_env() -> dict[str, str]:
    """Offline (a closed proxy), on the CPU, with no PYTHON* variable of this process."""
    return {k: v for k, v in offline_env().items() if not k.startswith("PYTHON") or k == "PYTHONUNBUFFERED"}


def version() -> str:
    marker = installed()
    return marker["version"] if marker else "not installed"


class LiteRTTorch(Converter):
    """``--converter litert-torch``: from the PyTorch model, in its own environment."""

    name, source = NAME, "from the PyTorch model"

    def version(self) -> str:
        return version()

    def info(self) -> dict:
        return {"name": NAME, "version": version(), "writer": "litert_converter"}

    def describe(self) -> str:
        return f"{NAME} {version()}"

    def require(self) -> None:
        require()

    def where(self) -> str:
        return f"in {env_dir()}" if installed() else f"not installed: {install_hint()}"

    def install(self, *, log=print) -> None:
        install(log=log)

    def warm(self, context: RunContext) -> None:
        if installed() is not None:
            context.warm(_worker_argv(env_dir() / "bin" / "python"), _worker_env())

    def begin(self, prepared, work: Path, *, quantised: str | None, timeout_s: float, context: RunContext) -> Begun:
        begun = begin(prepared.module, prepared.calib, work / "litert", int8=quantised is not None, timeout_s=timeout_s,
                      context=context, per_tensor=quantised == "uint8")
        begun.source = prepared
        return begun

    def convert(self, exported, work: Path, *, quantised: str | None, timeout_s: float, context: RunContext,
                meanwhile: Callable[[dict[str, Path]], None] | None = None) -> Conversion:
        prepared, begun = exported.prepared, getattr(exported, "begun", None)  # begun by the export pass, or here
        if begun is not None and not (isinstance(begun, Begun) and begun.source is prepared):
            # another converter's (--cross-check after onnx2tf), or begun from what a pass has replaced since: begun here
            if isinstance(begun, Begun) and begun.child is not None:
                begun.child.end()
            begun = None
        from edgeport.convert.converters.int8_groups import plan_for

        # (where begun: while the worker converts) which output groups its int8 is quantised apart, its answer once it asks
        done = convert_variants(prepared.module, prepared.calib, work / "litert", int8=quantised is not None, timeout_s=timeout_s,
                                per_tensor=quantised == "uint8", plans=plan_for(prepared) if quantised else None, meanwhile=meanwhile,
                                begun=begun, context=context)
        why = done.not_written.get("float32", "")
        if why.startswith("torch.export cannot"):  # the model, as litert-torch takes it: refused, not a crash (exit 2)
            raise BadInputError(f"{NAME} cannot convert this model: {why}; convert it with --converter onnx2tf")
        return done
