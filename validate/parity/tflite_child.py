"""The reference kernels' rows in a child process: a kernel that aborts is a verdict, not a crash.

TFLite's builtin reference kernels abort the process on some files (its int8 SOFTMAX on rows of
1,600 values: MobileViT's attention at 640 px), with no message and no exception to catch. Run in
edgeport's process, that ended ``convert`` with a fatal error and no report. The reference kernels'
rows (``TFLiteRunner`` with ``kernels="reference"``; their images shared out as before) therefore run
here, one child per share: a child killed by a signal is that row's failure, the file is noted
(``ops.tflite_run.note_abort``), and every later in-process use of the reference kernels on it
(the divergence search, the cross-check, the per-op errors) is refused by ``load_interpreter``
with the same words instead of ending the process. The optimised kernels stay in-process.

    python -m edgeport.validate.parity.tflite_child DIR
    DIR/job.json {"path", "expected", "kernels"} and DIR/inputs.npy -> DIR/result.npz, DIR/result.json
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

from edgeport.validate.parity.runners import RunOutput, RuntimeRefused, Stopped


def run_in_child(runner, inputs: np.ndarray, stop: threading.Event | None = None) -> RunOutput:
    """``runner``'s run (a ``TFLiteRunner``), computed in a child process as it would be here."""
    from edgeport.ops.tflite_run import note_abort

    with tempfile.TemporaryDirectory(prefix="edgeport-tflite-") as tmp:
        folder = Path(tmp)
        np.save(folder / "inputs.npy", np.ascontiguousarray(inputs, np.float32))
        (folder / "job.json").write_text(json.dumps({"path": str(runner.path), "kernels": runner.kernels,
                                                     "expected": [list(s) for s in runner.expected]}))
        proc = subprocess.Popen([sys.executable, "-m", __name__, str(folder)], stdout=subprocess.DEVNULL,
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
    from edgeport.validate.parity.runners import Runner
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    job = json.loads((folder / "job.json").read_text())
    runner = TFLiteRunner(Path(job["path"]), [tuple(s) for s in job["expected"]], kernels=job["kernels"])
    try:
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
