"""Pass: the int8 file with what its converter broke fixed, and what it rounded needlessly held
exactly (``tflite_fixes.py``), written to ``fixed/`` in the work folder; a file that needs no fix
is passed on as it is."""

from __future__ import annotations

from dataclasses import replace

from edgeport.convert.base import ConvertConfig, Converted, Pass, PassResult
from edgeport.convert.passes.to_tflite_pass import check_edges, write_file
from edgeport.convert.tflite_fixes import exact_constants, requantize_int8_constraints, share_resize_quantization


class Int8FixesPass(Pass[Converted, Converted]):
    name = "int8_fixes"

    def run(self, value: Converted, config: ConvertConfig) -> PassResult[Converted]:
        path = value.files.get("int8")
        if path is None:
            return PassResult(value, changed=False, summary="no int8 file")
        model, shared = share_resize_quantization(path.read_bytes())
        model, requantized = requantize_int8_constraints(model)
        exact = 0
        if "float32" in value.files:
            factors = sorted({factor for plan in value.int8_plans or () for *_, factor in plan})
            model, exact = exact_constants(model, value.files["float32"].read_bytes(), factors)
        if not shared and not requantized and not exact:
            return PassResult(value, changed=False, summary="the int8 file keeps every kernel's quantisation constraint")
        fixed = config.work_dir / "fixed" / path.name
        write_file(fixed, model)
        said = ([f"{shared} int8 resize outputs given their input's quantisation"] if shared else []) + \
               ([f"{requantized} int8 requantise ops inserted where the converter broke a kernel's quantisation constraint"]
                if requantized else []) + \
               ([f"{exact} constants on a grid that holds their values exactly"] if exact else [])
        return PassResult(replace(value, files={**value.files, "int8": fixed}), changed=True, summary="; ".join(said))

    def check(self, before: Converted, after: Converted, config: ConvertConfig) -> None:
        if after.files.get("int8") != before.files.get("int8"):
            check_edges({"int8": after.files["int8"]}, after.prepared)
