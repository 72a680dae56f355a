"""Pass: for a board that runs uint8 (TFLite 1.x), the int8 file quantised per tensor and
rewritten as uint8 (``uint8.py``). The int8 file it came from is not shipped (the board does not
run it) but stays a file of the run, as its twin: parity checks that the uint8 file computes the
same integers shifted by 128."""

from __future__ import annotations

from dataclasses import replace

from edgeport.convert.base import ConvertConfig, Converted, Pass, PassResult
from edgeport.convert.passes.to_tflite_pass import check_edges, write_file
from edgeport.convert.uint8 import int8_to_uint8
from edgeport.errors import ConversionError


class Uint8Pass(Pass[Converted, Converted]):
    name = "uint8"

    def run(self, value: Converted, config: ConvertConfig) -> PassResult[Converted]:
        if "uint8" not in config.variants:
            return PassResult(value, changed=False, summary=f"{config.board.name} runs no uint8")
        files, not_written = dict(value.files), dict(value.not_written)
        twin = files.pop("int8", None)
        if twin is None:  # the converter wrote no int8 file: the board's quantised variant has none
            not_written["uint8"] = not_written.pop("int8", "the converter wrote no int8 file")
            return PassResult(replace(value, files=files, not_written=not_written), changed=True,
                              summary=f"uint8 NOT written: {not_written['uint8']}")
        try:
            model = int8_to_uint8(twin.read_bytes())
        except ConversionError as exc:
            not_written["uint8"] = f"the int8 file cannot be rewritten as uint8: {exc}"
            return PassResult(replace(value, files=files, not_written=not_written, int8_plans=None), changed=True,
                              summary=f"uint8 NOT written: {not_written['uint8']}")
        files["uint8"] = config.work_dir / "model_uint8.tflite"
        write_file(files["uint8"], model)
        return PassResult(replace(value, files=files, twins={"uint8": twin}), changed=True,
                          summary=f"uint8 {files['uint8'].stat().st_size / 1024:.0f} KiB from the int8 file quantised per tensor, "
                                  f"its twin, whose arithmetic it keeps (shifted by 128)")

    def check(self, before: Converted, after: Converted, config: ConvertConfig) -> None:
        if "uint8" in after.files:
            check_edges({"uint8": after.files["uint8"]}, after.prepared)
