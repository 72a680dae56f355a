"""The TFLite runner: optimised (XNNPACK) or reference (BUILTIN_REF) kernels."""

from __future__ import annotations

from pathlib import Path

from edgeport.ops.tflite_run import load_interpreter
from edgeport.validate.parity.runners import Runner, RuntimeRefused
from edgeport.validate.parity.tensors import from_model_output, match_outputs, to_model_input


class TFLiteRunner(Runner):
    """Loads its interpreter on first use; ``cache_key`` says when two runners compute the same
    thing (the same bytes on the same kernels: an emulator that changes nothing in the file)."""

    def __init__(self, path: Path, expected_nchw: list[tuple[int, ...]], *, kernels: str = "optimized", runtime: str | None = None,
                 images: int | None = None):
        import hashlib

        self.path, self.expected, self.kernels, self.images = Path(path), expected_nchw, kernels, images
        self.runtime = runtime or ("tflite-ref" if kernels == "reference" else "tflite")
        self._key = (kernels, hashlib.sha256(self.path.read_bytes()).hexdigest())
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

    def _unloaded_copy(self) -> "TFLiteRunner":
        """The same file and kernels (and ``cache_key``, not hashed again), with an interpreter of its own."""
        import copy

        clone = copy.copy(self)
        clone.interp = None
        return clone

    def run(self, inputs, stop=None):
        """The reference kernels run in a child process (``tflite_child.py``: one that aborts is
        this row's failure, not edgeport's end); the optimised ones here."""
        if self.kernels == "reference":
            from edgeport.validate.parity.tflite_child import run_in_child

            return run_in_child(self, inputs, stop)
        return super().run(inputs, stop)

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
