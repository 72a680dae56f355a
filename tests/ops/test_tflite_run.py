"""The one place edgeport makes an interpreter (ops/tflite_run.py): what it leaves on stderr."""

from __future__ import annotations

import subprocess
import sys

from edgeport.ops.tflite_run import DELEGATE_NOTE

from .test_lowering import unary

LOAD = """
import sys
from edgeport.ops.tflite_run import load_interpreter
load_interpreter(sys.argv[1])
print("loaded", file=sys.stderr)
try:
    load_interpreter(sys.argv[2])
except ValueError as exc:
    print("refused", file=sys.stderr)
"""


def test_loading_a_file_on_xnnpack_says_nothing_on_stderr_but_what_the_runtime_refuses(tmp_path):
    model, broken = tmp_path / "relu.tflite", tmp_path / "broken.tflite"
    model.write_bytes(unary("RELU", (1, 4, 4, 3)))
    broken.write_bytes(b"not a flatbuffer" * 4)
    bare = subprocess.run([sys.executable, "-c", "from ai_edge_litert.interpreter import Interpreter as I; "
                           f"I(model_path={str(model)!r}, num_threads=1).allocate_tensors()"], capture_output=True, timeout=120)
    assert DELEGATE_NOTE in bare.stderr, "the runtime writes the note: the test shows edgeport takes it away"
    ours = subprocess.run([sys.executable, "-c", LOAD, str(model), str(broken)], capture_output=True, timeout=120)
    assert ours.returncode == 0, ours.stderr.decode()
    assert DELEGATE_NOTE not in ours.stderr
    assert ours.stderr.decode().splitlines()[0] == "loaded" and "refused" in ours.stderr.decode()


def test_a_process_without_stderr_still_loads_a_file(tmp_path):
    """``edgeport ... 2>&-``: with no fd 2 the file loads all the same."""
    import os

    model = tmp_path / "relu.tflite"
    model.write_bytes(unary("RELU", (1, 4, 4, 3)))
    script = "import sys\nfrom edgeport.ops.tflite_run import load_interpreter\nload_interpreter(sys.argv[1])\nprint('loaded')"
    proc = subprocess.run([sys.executable, "-c", script, str(model)], capture_output=False, stdout=subprocess.PIPE,
                          preexec_fn=lambda: os.close(2), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == b"loaded"


def test_without_stderr_native_output_is_still_caught():
    """``2>&-``: what native code writes on fd 2 is caught all the same (TFLM's arena report is read so),
    nested blocks each catch their own, and fd 2 is closed again after, as the process started."""
    import os

    script = ("import os\nfrom edgeport.process import caught_stderr\n"
              "with caught_stderr() as outer:\n    os.write(2, b'outer')\n"
              "    with caught_stderr() as inner:\n        os.write(2, b'inner')\n"
              "try:\n    os.fstat(2)\n    closed = False\nexcept OSError:\n    closed = True\n"
              "print(outer, inner, closed)")
    proc = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == b"[b'outer'] [b'inner'] True", proc.stdout
