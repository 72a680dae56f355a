"""A board's own runtime as a parity row: all images in one call over the runner protocol
(``validate/board/runtime.py``), its outputs read back strictly."""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np

from edgeport.text import for_terminal
from edgeport.validate.board.runtime import BoardRuntimeError
from edgeport.validate.parity.runners import Runner, RunOutput, RuntimeRefused


class BoardRunner(Runner):
    """A board's own runtime behind the ``Runner`` interface, all images in one call: its worker invokes
    each image twice and reports the largest difference (once, with ``Runner.once``). Its ms/img is the
    median of the times the board's runtime reports (``validate/board/worker.py`` times each image's
    first invoke): the board's word, not a warm time measured here as the other runners' are (``Runner.run``)."""

    board_runtime = True

    def __init__(self, transport, path: Path, expected_nchw, *, runtime: str, workdir: Path | None):
        self.transport, self.path, self.expected, self.workdir = transport, Path(path), expected_nchw, workdir
        self.runtime = runtime

    def _run_one(self, x):
        return self.run(x).outputs

    def run(self, inputs: np.ndarray, stop=None) -> RunOutput:  # one child call: nothing to stop between images
        from edgeport.ops.tflite_model import read_tflite
        from edgeport.validate.parity.tensors import from_model_output, match_outputs, to_model_input

        summary = read_tflite(self.path)
        folder = Path(tempfile.mkdtemp(prefix="board-run-", dir=self.workdir))
        try:
            shutil.copy2(self.path, folder / "model.tflite")
            (folder / "inputs").mkdir()
            for i in range(inputs.shape[0]):
                x = to_model_input(np.ascontiguousarray(inputs[i : i + 1], dtype=np.float32), summary.input_shape,
                                   summary.input_dtype, summary.input_quantization)
                np.save(folder / "inputs" / f"{i:04d}.npy", x)
            result = self.transport.execute(folder, "once" if self.once else "run")
            said = f"{result['runtime']} {result['version']}"
            if not result["ok"]:
                raise RuntimeRefused(f"{said} refused the model: {result['message']}")
            details = result["outputs"]
            try:
                pairs = match_outputs(self.expected, [tuple(d["shape"]) for d in details])
            except ValueError as exc:
                raise BoardRuntimeError(f"{self.transport.what} answered with outputs the model does not have ({exc})") from None
            outputs = [
                np.concatenate([
                    from_model_output(self._output(folder / "outputs" / f"{i:04d}_{k}.npy", details[k]), details[k]["dtype"],
                                      tuple(details[k]["quantization"]), nhwc)
                    for i in range(inputs.shape[0])
                ]).astype(np.float32)
                for k, nhwc in pairs
            ]
            return RunOutput(outputs, statistics.median(result["ms"]), tuple(result["ms"]), result.get("repeat_max_abs"),
                             reported=None if said in self.runtime else said)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _output(self, path: Path, declared: dict) -> np.ndarray:
        """One output the board wrote: a plain npy array (never a pickle) of the shape and dtype it declared."""
        try:
            y = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise BoardRuntimeError(f"{self.transport.what} wrote an output edgeport cannot read ({path.name}: "
                                    f"{for_terminal(str(exc)[:160])})") from None
        if list(y.shape) != declared["shape"] or y.dtype.name != declared["dtype"]:
            raise BoardRuntimeError(f"{self.transport.what} wrote {path.name} as {y.dtype.name}{list(y.shape)}, but declared "
                                    f"{declared['dtype']}{declared['shape']}")
        return y


# images each file is timed on, every round (``worker.TIME_ROUNDS``): the files' times against each other
TIMED_IMAGES = 4


def time_interleaved(transport, files: list[Path], inputs: np.ndarray, workdir: Path | None = None) -> list[float]:
    """Each of ``files``' median ms an invoke on ``transport``'s runtime (``runtime.transport_for``, or
    ``runtime.this_python``: today's TFLite), timed against each other in one process, interleaved
    (``worker.time_models``), on the first ``TIMED_IMAGES`` of ``inputs`` as each file takes them: a
    ratio between two files that holds on a machine doing other work, where rows timed apart do not."""
    from edgeport.ops.tflite_model import read_tflite
    from edgeport.validate.parity.tensors import to_model_input

    folder = Path(tempfile.mkdtemp(prefix="board-time-", dir=workdir))
    try:
        for k, path in enumerate(files):
            summary, where = read_tflite(path), folder / "time" / str(k)
            (where / "inputs").mkdir(parents=True)
            shutil.copy2(path, where / "model.tflite")
            for i in range(min(TIMED_IMAGES, inputs.shape[0])):
                x = to_model_input(np.ascontiguousarray(inputs[i : i + 1], dtype=np.float32), summary.input_shape,
                                   summary.input_dtype, summary.input_quantization)
                np.save(where / "inputs" / f"{i:04d}.npy", x)
        result = transport.execute(folder, "time")
        if not result["ok"]:
            raise RuntimeRefused(f"{result['runtime']} {result['version']} refused a file it ran before: {result['message']}")
        return result["ms"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
