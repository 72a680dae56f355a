"""Pass: with ``--cross-check``, the other converter's float32 file of the same prepared model
against ``--converter``'s, as written (``validate/parity/cross_check.py``).

It runs before the board lowering, whose own check holds the lowered file to these values. The
result goes in the report (``converter.cross_check``) and is not a gate: parity judges the shipped
file against PyTorch, the cross-check says whether the other route agrees. The other file is not shipped.
"""

from __future__ import annotations

from dataclasses import replace

from edgeport.convert.base import ConvertConfig, Converted, Pass, PassResult
from edgeport.convert.converters.base import Conversion
from edgeport.convert.converters.registry import other
from edgeport.errors import ConversionError, PassCheckError

CROSS_CHECK_IMAGES = 2  # the reference kernels are slow; float32 rounding shows on any image


class CrossCheckPass(Pass[Converted, Converted]):
    name = "cross_check"

    def run(self, value: Converted, config: ConvertConfig) -> PassResult[Converted]:
        if not config.cross_check:
            return PassResult(value, changed=False, summary="not asked (--cross-check)")
        shipped = value.files["float32"]
        prepared, work = value.prepared, config.work_dir / "cross_check"
        second = other(config.converter)
        info = {"name": second.name, "version": second.version()}
        try:
            conversion = second.convert(value.exported, work, quantised=None, timeout_s=config.converter_timeout_s,
                                        context=config.context)
        except ConversionError as exc:  # it cannot convert this model: the check has nothing to compare
            conversion = Conversion({}, {"float32": str(exc)}, {}, 0.0)
        if "float32" in conversion.files:
            from edgeport.validate.parity.cross_check import compare_files
            images = prepared.val[:CROSS_CHECK_IMAGES]
            result = {**info, **compare_files(shipped, conversion.files["float32"], images, prepared.output_shapes)}
        else:
            result = {**info, "ran": False, "reason": f"it wrote no float32 file: {conversion.not_written.get('float32', '?')}"}
        from edgeport.validate.report.render import cross_check_line

        return PassResult(replace(value, cross_check=result), changed=True, summary=cross_check_line(result))

    def check(self, before: Converted, after: Converted, config: ConvertConfig) -> None:
        if config.cross_check != (after.cross_check is not None):
            raise PassCheckError("--cross-check was asked and no comparison was recorded, or the reverse")
        if after.files != before.files:
            raise PassCheckError("the cross-check changed the files the board gets")
