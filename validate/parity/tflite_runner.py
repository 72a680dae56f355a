"""The TFLite runner: optimised (XNNPACK) or reference (BUILTIN_REF) kernels.

The reference kernels' rows run in a child process (``run_in_child``; this module is its entry:
``python -m edgeport.validate.parity.tflite_runner DIR``, DIR/job.json {"path", "expected",
"kernels", "once"} and DIR/inputs.npy -> DIR/result.npz, DIR/result.json): TFLite's builtin
reference kernels abort the process on some files (its int8 SOFTMAX on rows of 1,600 values:
MobileViT's attention at 640 px), with no message and no exception to catch, which in edgeport's
process would end ``convert`` with a fatal error and no report. A child killed by a signal fails
that row and notes the file (``ops.tflite_run.note_abort``): every later in-process use of the
reference kernels on it (the divergence search, the cross-check) is refused by ``load_interpreter``
with the same words. The optimised kernels stay in-process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from edgeport.ops.tflite_run import load_interpreter
from edgeport.validate.parity.runners import Runner, RunOutput, RuntimeRefused, Stopped
from edgeport.validate.parity.tensors import from_model_output, match_outputs, to_model_input


class TFLiteRunner(Runner):
    """Loads its interpreter on first use; ``cache_key`` says when two runners compute the same
    thing (the same bytes on the same kernels: an emulator that changes nothing in the file)."""

    def __init__(self, path: Path, expected_nchw: list[tuple[int, ...]], *, kernels: str = "optimized", runtime: str | None = None,
                 images: int | None = None):
        import hashlib

        self.path, self.expected, self.kernels, self.images = Path(path), expected_nchw, kernels, images
        self.runtime = runtime or ("tflite-ref" if kernels == "reference" else "tflite")
        # the reference kernels on a diagnostic sample: one invoke an image (``Runner.once``); fixed
        # here, with the key, from the images given (nothing sets ``images`` on this runner later)
        self.once = kernels == "reference" and images is not None
        self._key = (kernels, hashlib.sha256(self.path.read_bytes()).hexdigest(), self.once)
        self.interp = None

    @property
    def cache_key(self) -> object:
        return self._key

    def split(self, parts: int) -> list[Runner]:
        """The reference kernels are slow (naive loops, one thread): their images are shared out
        to ``parts`` interpreters of the same file. The optimised kernels take no share."""
        if self.kernels != "reference":
            return [self]
        return [self] + [self._unloaded_copy() for _ in range(parts - 1)]

    def helper(self) -> Runner | None:
        """The optimised kernels: an interpreter of the same file, for the last images of a row
        that would otherwise run alone on one core (MobileViT-xxs's int8 file at 640 px: a second an
        image, every image twice). The reference kernels are shared out in fixed parts (``split``)."""
        return self._unloaded_copy() if self.kernels != "reference" else None

    def prepare(self) -> None:
        if self.interp is None:
            self._load()

    def _unloaded_copy(self) -> "TFLiteRunner":
        """The same file and kernels (and ``cache_key``, not hashed again), with an interpreter of its own."""
        import copy

        clone = copy.copy(self)
        clone.interp = None
        return clone

    def run(self, inputs, stop=None, indices=None):
        """The reference kernels in a child process (why: the module docstring), on all of ``inputs``."""
        if self.kernels == "reference":
            return run_in_child(self, inputs, stop)
        return super().run(inputs, stop, indices)

    def _load(self) -> None:
        try:
            self.interp = load_interpreter(self.path, kernels=self.kernels)
        except (RuntimeError, ValueError) as exc:  # the runtime's verdict on the file (e.g. a delegate that cannot prepare it)
            raise RuntimeRefused(f"LiteRT ({self.kernels} kernels) refused the file: {' '.join(str(exc).split())}") from exc
        (self.inp,) = self.interp.get_input_details()
        outs = self.interp.get_output_details()
        self.mapping = [(outs[i], nhwc) for i, nhwc in match_outputs(self.expected, [tuple(o["shape"]) for o in outs])]

    def _run_one(self, x):
        if self.interp is None:
            self._load()
        inp = self.inp
        self.interp.set_tensor(inp["index"], to_model_input(x, inp["shape"], inp["dtype"], inp["quantization"]))
        try:
            self.interp.invoke()
        except RuntimeError as exc:  # a kernel or delegate that cannot prepare or run the file: its verdict
            raise RuntimeRefused(f"LiteRT ({self.kernels} kernels) failed on the file: {' '.join(str(exc).split())}") from exc
        return [
            from_model_output(self.interp.get_tensor(d["index"]), d["dtype"], d["quantization"], is_nhwc)
            for d, is_nhwc in self.mapping
        ]


def output_steps(path: Path, expected_nchw) -> list[float]:
    """Per expected output, the real value of one quantisation step of the file's matching output
    (0 for a float output); read from the file, so a file no kernel can prepare still has them."""
    from edgeport.ops.tflite_graph import Graph

    g = Graph(Path(path).read_bytes())
    outs = g.sg.outputs
    quant = [g.quant(t) for t in outs]
    return [float(quant[i].scale) if quant[i] is not None else 0.0
            for i, _ in match_outputs(expected_nchw, [g.shape(t) for t in outs])]


# -- the reference kernels in a child process --------------------------------------------------


def run_in_child(runner, inputs: np.ndarray, stop: threading.Event | None = None) -> RunOutput:
    """``runner``'s run (a ``TFLiteRunner``), computed in a child process as it would be here."""
    from edgeport.ops.tflite_run import note_abort

    with tempfile.TemporaryDirectory(prefix="edgeport-tflite-") as tmp:
        folder = Path(tmp)
        np.save(folder / "inputs.npy", np.ascontiguousarray(inputs, np.float32))
        (folder / "job.json").write_text(json.dumps({"path": str(runner.path), "kernels": runner.kernels, "once": runner.once,
                                                     "expected": [list(s) for s in runner.expected]}))
        proc = subprocess.Popen([sys.executable, "-m", "edgeport.validate.parity.tflite_runner", str(folder)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            while True:
                try:
                    _, err = proc.communicate(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    if stop is not None and stop.is_set():
                        raise Stopped(runner.runtime) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        said = json.loads((folder / "result.json").read_text()) if (folder / "result.json").is_file() else None
        if said is None:
            if proc.returncode < 0:  # killed: a kernel aborted (or the machine ended it)
                why = f"LiteRT ({runner.kernels} kernels) aborted the process running the file ({_signal(-proc.returncode)})"
                note_abort(runner.path, why)
                raise RuntimeRefused(why)
            raise RuntimeError(f"the {runner.kernels} kernels' process ended (exit {proc.returncode}) without a result: "
                               f"{(err or '').strip()[-300:]}")
        if "refused" in said:
            raise RuntimeRefused(said["refused"])
        with np.load(folder / "result.npz") as saved:
            outputs = [saved[f"out{k}"] for k in range(said["outputs"])]
        return RunOutput(outputs, said["ms_per_image"], tuple(said["image_ms"]), said["repeat_max_abs"])


def _signal(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def main(folder: Path) -> int:
    job = json.loads((folder / "job.json").read_text())
    runner = TFLiteRunner(Path(job["path"]), [tuple(s) for s in job["expected"]], kernels=job["kernels"])
    runner.once = job.get("once", False)
    try:
        runner.prepare()  # loaded before the first invoke, which ``once`` times
        run = Runner.run(runner, np.load(folder / "inputs.npy"))  # the runner's own loop, here
    except RuntimeRefused as exc:
        (folder / "result.json").write_text(json.dumps({"refused": str(exc)}))
        return 0
    np.savez(folder / "result.npz", **{f"out{k}": o for k, o in enumerate(run.outputs)})
    (folder / "result.json").write_text(json.dumps({"outputs": len(run.outputs), "ms_per_image": run.ms_per_image,
                                                    "image_ms": list(run.image_ms), "repeat_max_abs": run.repeat_max_abs}))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
