"""The passes after the export, one at a time, on files built with ``Graph``: to_tflite (with a
converter that hands back given files), int8_fixes, uint8, lower_for_board, board_gate and parity.
Each writes new files and never rewrites the one it was given."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgeport.convert.base import Converted, Exported, Gated, Prepared
from edgeport.convert.converters.base import Conversion, Converter
from edgeport.convert.passes.board_gate_pass import BoardGatePass
from edgeport.convert.passes.int8_fixes_pass import Int8FixesPass
from edgeport.convert.passes.lower_for_board_pass import LowerForBoardPass
from edgeport.convert.passes.parity_pass import ParityPass
from edgeport.convert.passes.to_tflite_pass import ToTFLitePass
from edgeport.convert.passes.uint8_pass import Uint8Pass
from edgeport.convert.pipeline import PIPELINE
from edgeport.errors import ConversionError, PassCheckError
from edgeport.models.heads import Head
from edgeport.ops.tflite_graph import Graph, Quant
from edgeport.validate.board.profiles import load_board
from edgeport.validate.report.sections import Repair

from ..ops.test_lowering import finish, unary
from .conftest import config
from .test_tflite_fixes import QX, _resize
from .test_uint8 import int8_model

OLD = "tflite-1.13"
# the pipeline's repair, with the passes it converts and judges by
(REPAIR,) = [p for p in PIPELINE if p.name == "repair"]


def _file(folder: Path, name: str, model: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(model)
    return folder / name


def _prepared(imgsz: int = 4) -> Prepared:
    calib = np.random.default_rng(0).random((2, 3, imgsz, imgsz), dtype=np.float32)
    return Prepared(model=None, module=None, reference=None, imgsz=imgsz, calib=calib, calib_source="random", val=calib,
                    val_source="random", output_names=("y",), strides=(), head=None, output_shapes=((1, imgsz, imgsz, 3),))


def _converted(files: dict, **kw) -> Converted:
    return Converted(Exported(_prepared(), Path("model.onnx")), files, **kw)


class Given(Converter):
    """A converter that hands back the files (and reasons) it was given."""

    name, source = "given", "files given"

    def __init__(self, files: dict, not_written: dict | None = None):
        self.files, self.not_written, self.asked = files, not_written or {}, []

    def version(self): return "1"  # noqa: E704
    def info(self): return {"name": "given", "version": "1", "writer": "test"}  # noqa: E704
    def describe(self): return "given 1"  # noqa: E704
    def require(self): pass  # noqa: E704
    def where(self): return "here"  # noqa: E704

    def convert(self, exported, work, *, quantised, timeout_s, context, meanwhile=None):
        self.asked.append(quantised)
        return Conversion(dict(self.files), dict(self.not_written), {}, 0.1, plans=("a plan",))


def _to_tflite(monkeypatch, tmp_path, given: Given, board: str) -> Converted:
    monkeypatch.setattr("edgeport.convert.passes.to_tflite_pass.converter", lambda name: given)
    return ToTFLitePass().run(Exported(_prepared(), tmp_path / "model.onnx"), config(tmp_path, board=load_board(board))).value


def test_to_tflite_copies_the_variants_the_board_needs_and_leaves_the_converters_files(monkeypatch, tmp_path):
    src = {"float32": _file(tmp_path / "conv", "a.tflite", unary("RELU", (1, 4, 4, 3))), "int8": _file(tmp_path / "conv", "b.tflite", int8_model())}
    before = {v: p.read_bytes() for v, p in src.items()}
    given = Given(src)
    out = _to_tflite(monkeypatch, tmp_path / "default", given, "default")
    assert given.asked == ["int8"] and set(out.files) == {"float32", "int8"} and out.int8_plans == ("a plan",)
    assert all(p.read_bytes() == before[v] and out.files[v] != p for v, p in src.items())
    # a uint8 board: the int8 file to be rewritten (uint8_pass.py); a microcontroller: no float32
    assert set(_to_tflite(monkeypatch, tmp_path / "old", given, OLD).files) == {"float32", "int8"} and given.asked[-1] == "uint8"
    assert set(_to_tflite(monkeypatch, tmp_path / "mcu", given, "tflm-m4-256k").files) == {"int8"}


def test_to_tflite_without_a_float32_file_is_an_error_and_without_int8_a_reason(monkeypatch, tmp_path):
    f32 = _file(tmp_path / "conv", "a.tflite", unary("RELU", (1, 4, 4, 3)))
    out = _to_tflite(monkeypatch, tmp_path / "a", Given({"float32": f32}, {"int8": "no kernel for X"}), "default")
    assert set(out.files) == {"float32"} and out.not_written == {"int8": "no kernel for X"} and out.int8_plans is None
    with pytest.raises(ConversionError, match="wrote no float32 file: boom"):
        _to_tflite(monkeypatch, tmp_path / "b", Given({}, {"float32": "boom"}), "default")


def test_int8_fixes_writes_a_fixed_file_and_passes_a_sound_one_on(tmp_path):
    skewed = _file(tmp_path, "model_int8.tflite", _resize(Quant(QX.scale * 0.99, QX.zero_point)))
    before = skewed.read_bytes()
    result = Int8FixesPass().run(_converted({"int8": skewed}), config(tmp_path))
    fixed = result.value.files["int8"]
    assert result.changed and fixed == tmp_path / "fixed" / "model_int8.tflite" and skewed.read_bytes() == before
    assert "1 int8 resize outputs given their input's quantisation" in result.summary
    g = Graph(fixed.read_bytes())
    assert g.quant(g.sg.inputs[0]) == g.quant(g.sg.outputs[0])
    sound = _converted({"int8": _file(tmp_path / "sound", "model_int8.tflite", _resize(QX))})
    again = Int8FixesPass().run(sound, config(tmp_path))
    assert not again.changed and again.value is sound


def test_uint8_rewrites_the_int8_file_and_keeps_it_as_its_twin(tmp_path):
    int8 = _file(tmp_path, "model_int8.tflite", int8_model())
    value = _converted({"float32": tmp_path / "model_float32.tflite", "int8": int8}, int8_plans=("plan",))
    result = Uint8Pass().run(value, config(tmp_path, board=load_board(OLD)))
    out = result.value
    assert set(out.files) == {"float32", "uint8"} and out.twins == {"uint8": int8} and out.int8_plans == ("plan",)
    assert Graph(out.files["uint8"].read_bytes()).dtype(0) == "uint8" and int8.read_bytes() == int8_model()
    assert Uint8Pass().run(value, config(tmp_path)).value is value  # the default board runs int8


def test_uint8_names_its_variant_where_there_is_no_int8_file(tmp_path):
    cfg = config(tmp_path, board=load_board(OLD))
    missing = Uint8Pass().run(_converted({"float32": tmp_path / "f.tflite"}, not_written={"int8": "no kernel"}), cfg).value
    assert missing.not_written == {"uint8": "no kernel"} and set(missing.files) == {"float32"}
    per_channel = _file(tmp_path, "model_int8.tflite", int8_model(per_channel=True))
    refused = Uint8Pass().run(_converted({"int8": per_channel}, int8_plans=("plan",)), cfg).value
    assert refused.not_written["uint8"].startswith("the int8 file cannot be rewritten as uint8") and not refused.files
    assert refused.int8_plans is None


def test_lower_for_board_writes_new_files_and_drops_a_quantised_one_it_cannot_lower(tmp_path):
    cfg = config(tmp_path, board=load_board(OLD))
    f32 = _file(tmp_path, "model_float32.tflite", unary("HARD_SWISH", (1, 4, 4, 3)))
    before = f32.read_bytes()
    # uint8 GELU: TFLite 1.13 has no GELU, and no rule writes it
    u8 = _file(tmp_path, "model_uint8.tflite", unary("GELU", (1, 4, 4, 3), "uint8", Quant(0.1, 128), Quant(0.1, 128)))
    value = _converted({"float32": f32, "uint8": u8}, twins={"uint8": tmp_path / "model_int8.tflite"})
    result = LowerForBoardPass().run(value, cfg)
    out = result.value
    assert out.files["float32"] == tmp_path / "lowered" / "model_float32.tflite" and f32.read_bytes() == before
    assert "uint8" not in out.files and "GELU" in out.not_written["uint8"] and not out.twins
    assert out.lowered_rules["float32"] == {"hard_swish": 1}
    LowerForBoardPass().check(value, replace(out, exported=Exported(_prepared(), Path("m.onnx"))), cfg)  # computes the same
    assert not LowerForBoardPass().run(value, config(tmp_path)).changed  # the default board runs every op
    wrong = _file(tmp_path / "wrong", "model_float32.tflite", unary("RELU", (1, 4, 4, 3)))  # a "lowering" that computes another thing
    with pytest.raises(PassCheckError, match="the lowered float32 file does not compute what the converted one does"):
        LowerForBoardPass().check(value, replace(out, files={"float32": wrong}, exported=Exported(_prepared(), Path("m.onnx"))), cfg)


def test_board_gate_names_what_the_board_lacks(tmp_path):
    f32 = _file(tmp_path, "model_float32.tflite", unary("GELU", (1, 4, 4, 3)))
    gated = BoardGatePass().run(_converted({"float32": f32}), config(tmp_path, board=load_board(OLD))).value
    check = gated.board.checks["float32"]
    assert not check.runnable and any("GELU" in r for r in check.reasons)
    assert BoardGatePass().run(_converted({"float32": f32}), config(tmp_path)).value.board.checks["float32"].runnable


def _gated(tmp_path, tflite: bytes, int8: bytes | None = None) -> Gated:
    """A ReLU, as PyTorch, ONNX and one float32 file (``tflite``) hold it (and an ``int8`` one),
    through the board gate."""
    import onnx
    import torch
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, (1, 3, 4, 4))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 3, 4, 4))
    graph = helper.make_graph([helper.make_node("Relu", ["images"], ["y"])], "relu", [x], [y])
    tmp_path.mkdir(parents=True)
    # IR 8: what every ONNX Runtime edgeport pins reads (a newer onnx writes a newer IR by default)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "model.onnx")
    images = np.random.default_rng(0).standard_normal((4, 3, 4, 4)).astype(np.float32)  # negatives: ReLU is not |x|
    prepared = Prepared(model=None, module=torch.nn.ReLU(), reference=torch.nn.ReLU(), imgsz=4, calib=images,
                        calib_source="random", val=images, val_source="random", output_names=("y",), strides=(),
                        head=Head("raw"), output_shapes=((1, 3, 4, 4),))
    files = {"float32": _file(tmp_path, "f.tflite", tflite), **({"int8": _file(tmp_path, "q.tflite", int8)} if int8 else {})}
    return BoardGatePass().run(Converted(Exported(prepared, tmp_path / "model.onnx"), files), config(tmp_path)).value


def test_parity_judges_every_file_against_pytorch_and_a_failed_row_is_a_verdict_not_a_broken_pass(tmp_path):
    cfg = config(tmp_path)
    same = _gated(tmp_path / "same", unary("RELU", (1, 4, 4, 3)))
    result = ParityPass().run(same, cfg)
    ParityPass().check(same, result.value, cfg)
    rows = {(r.variant, r.runtime): r.passed for r in result.value.parity.rows}
    assert rows[("reference", "pytorch")] and rows[("folded", "pytorch")] and rows[("onnx", "onnxruntime")]
    assert rows[("float32", "tflite")] and all(rows.values()) and result.summary == "all passed"
    # a file that computes |x|: its rows fail, with why; the pass itself kept its promise
    other = _gated(tmp_path / "abs", unary("ABS", (1, 4, 4, 3)))
    result = ParityPass().run(other, cfg)
    ParityPass().check(other, result.value, cfg)
    failed = [r for r in result.value.parity.rows if not r.passed]
    assert failed and {r.variant for r in failed} == {"float32"} and result.summary.startswith("FAILED: float32/tflite")
    assert all(o["cosine"] < 0.99 for o in failed[0].outputs)
    # a file the parity left without a row breaks the pass's promise
    missing = replace(result.value, parity=replace(result.value.parity, rows=result.value.parity.rows[:3]))
    with pytest.raises(PassCheckError, match="parity has rows for"):
        ParityPass().check(other, missing, cfg)


def test_a_failing_quantised_row_names_the_ops_that_carry_its_error(tmp_path):
    """int8 whose ReLU writes a grid of 0.75 (values 0..3): the int8 rows fail, and each names that
    op as the one whose own quantisation carries the error (validate/parity/op_errors.py)."""
    g = Graph.empty()
    x, y = g.add_tensor("x", (1, 4, 4, 3), "int8", Quant(1 / 32, 0)), g.add_tensor("y", (1, 4, 4, 3), "int8", Quant(0.75, -128))
    g.add(g.new_op("RELU", [x], [y]))
    gated = _gated(tmp_path / "m", unary("RELU", (1, 4, 4, 3)), int8=finish(g, [x], [y]))
    rows = ParityPass().run(gated, config(tmp_path)).value.parity.rows
    failed = [r for r in rows if r.variant == "int8"]
    assert failed and not any(r.passed for r in failed)
    for r in failed:
        assert r.op_errors["judged"] == 1 and r.op_errors["worst"][0]["op"] == "RELU" and r.op_errors["worst"][0]["own"] > 0.05
    assert all(r.op_errors is None for r in rows if r.variant != "int8")


def _relu_chain(dtype: str, quants: dict, reshape: bool = False) -> bytes:
    """x -> RELU -> a -> RELU -> b -> RELU (or, ``reshape``, a RESHAPE to the same shape) -> y: a ReLU."""
    g = Graph.empty()
    t = {n: g.add_tensor(n, (1, 4, 4, 3), dtype, quants.get(n)) for n in ("x", "a", "b", "y")}
    for src, dst in (("x", "a"), ("a", "b")):
        g.add(g.new_op("RELU", [t[src]], [t[dst]]))
    if reshape:
        shape = g.constant("shape", np.array([1, 4, 4, 3], np.int32), "int32")
        g.add(g.new_op("RESHAPE", [t["b"], shape], [t["y"]], "ReshapeOptions", newShape=[1, 4, 4, 3]))
    else:
        g.add(g.new_op("RELU", [t["b"]], [t["y"]]))
    return finish(g, [t["x"]], [t["y"]])


FINE, COARSE = Quant(1 / 32, 0), Quant(0.75, -128)  # COARSE: 0.75 a step, for ReLU values of 0 to 3


def _repaired(tmp_path, int8: bytes, float32: bytes):
    gated = _gated(tmp_path / "m", float32, int8=int8)
    cfg = config(tmp_path)
    validated = ParityPass().run(gated, cfg).value
    assert not any(r.passed for r in validated.parity.rows if r.variant == "int8")
    result = REPAIR.run(validated, cfg)
    REPAIR.check(validated, result.value, cfg)
    after = result.value
    assert after.gated.tflite.files["int8"].read_bytes() == int8  # the pure file, as it was
    repaired = after.gated.tflite.files["int8-repaired"]
    assert repaired.name == "model_int8_repaired.tflite" and after.gated.board.checks["int8-repaired"].runnable
    rows = {(r.variant, r.runtime): r for r in after.parity.rows}
    assert rows[("int8-repaired", "tflite")].passed and rows[("int8-repaired", "tflite-ref")].passed
    assert not rows[("int8", "tflite")].passed
    return validated, result


def test_repair_first_sets_again_a_grid_the_float_values_show_wrong(tmp_path):
    """int8 whose middle ReLU writes a grid of 0.75 (values 0 to 3: 4 of 256 steps used) fails; the
    calibration ranges repair gives it the values' own range, and the file passes with no op in float."""
    validated, result = _repaired(tmp_path, _relu_chain("int8", {"x": FINE, "a": FINE, "b": COARSE, "y": FINE}),
                                  _relu_chain("float32", {}))
    info = result.value.repairs["int8"]
    assert info.passed and info.reranged == 1 and info.float_ops == 0 and info.applied[0].examples == ("b",)
    assert result.summary == "int8: 1 grids re-calibrated, passes" and info.latency.ratio > 0
    unrepaired = REPAIR.run(validated, config(tmp_path, repair=False))  # without the repair: the pure file's failure
    assert unrepaired.value is validated and unrepaired.summary == "not asked (--no-repair)"


def _long_chain(dtype: str, quants: dict) -> bytes:
    """x -> RELU -> a -> RELU -> b -> RELU -> c -> RELU -> d -> RESHAPE -> y (d and y tied: a reshape keeps its grid)."""
    g = Graph.empty()
    t = {n: g.add_tensor(n, (1, 4, 4, 3), dtype, quants.get(n)) for n in ("x", "a", "b", "c", "d", "y")}
    for src, dst in (("x", "a"), ("a", "b"), ("b", "c"), ("c", "d")):
        g.add(g.new_op("RELU", [t[src]], [t[dst]]))
    shape = g.constant("shape", np.array([1, 4, 4, 3], np.int32), "int32")
    g.add(g.new_op("RESHAPE", [t["d"], shape], [t["y"]], "ReshapeOptions", newShape=[1, 4, 4, 3]))
    return finish(g, [t["x"]], [t["y"]])


def test_repair_runs_a_float_tail_where_a_grid_cannot_move_and_the_report_names_the_file_to_ship(tmp_path):
    """The coarse grid is the output's (a RESHAPE ties d to y, and an output's grid stays), so no
    island can hand back onto it: the repair runs d's ReLU and the RESHAPE in float, 2 of the 5 ops,
    fed the third ReLU's int8 values; the report passes on it, naming it with its float share, while
    it is faster than float32 -- and ships float32, failing, where it is not."""
    from edgeport.validate.report.assemble import build_report
    from edgeport.validate.report.render import MARKDOWN, repair_lines, verdict

    fine = {n: FINE for n in "xabc"}
    _, result = _repaired(tmp_path, _long_chain("int8", {**fine, "d": COARSE, "y": COARSE}), _long_chain("float32", {}))
    after = result.value
    info = after.repairs["int8"]
    assert info.passed and info.float_ops == 2 and info.ops == 5 and info.fed_at == ("c",) and info.float_as == "tail"
    assert [a.repair for a in info.applied[:5]] == ["calibration ranges", "equalisation", "bias correction", "float islands",
                                                   "float tail"]
    assert not any(t.passed for t in info.applied[3].tried), "an island hands back onto the output's coarse grid"
    assert info.applied[4].tried[-1].passed and result.summary == "int8: 2 of 5 ops in float (tail), passes"

    # the three files were timed against each other, interleaved, on the pure file's runtime (XNNPACK here)
    assert info.latency.interleaved and info.latency.runtime == "tflite" and info.latency.float32_ms_per_image > 0

    def report(ms: dict):  # rows and the interleaved timing as given (a 4x4 model's times are noise)
        rows = tuple(replace(r, ms_per_image=ms.get(r.variant, r.ms_per_image)) for r in after.parity.rows)
        timing = replace(info.latency, ms_per_image=ms["int8-repaired"], pure_ms_per_image=ms.get("int8"),
                         float32_ms_per_image=ms["float32"])
        return build_report(replace(after.parity, rows=rows), model={"arch": "relu", "weights_sha256": "0" * 64, "outputs": ["y"]},
                            board=after.gated.board, artifacts={}, repairs={"int8": replace(info, latency=timing)})

    fast = report({"int8-repaired": 1.0, "float32": 2.0, "int8": 0.9})
    assert fast.passed and fast.repaired == ["int8"]
    assert verdict(fast).startswith("PASSED: ship model_int8_repaired.tflite (int8 with 2 of 5 ops in float (tail); ")
    assert "1 ms/img on tflite; the pure file" in verdict(fast) and "float32 size unknown, 2 ms/img" in verdict(fast)
    (line,) = repair_lines(fast, MARKDOWN)
    assert "2 of 5 ops in float (tail)" in line and "PASSES every row" in line and "calibration ranges: no grid" in line
    slow = report({"int8-repaired": 2.0, "float32": 1.0})
    assert not slow.passed and "no faster than float32" in slow.stand_in_refusal("int8")
    assert verdict(slow).startswith("FAILED: no quantised file passes; model_float32.tflite (float32; ")


def test_repair_leaves_a_passing_run_and_a_failing_float32_file_alone(tmp_path):
    cfg = config(tmp_path)
    passing = ParityPass().run(_gated(tmp_path / "ok", _relu_chain("float32", {}),
                                      int8=_relu_chain("int8", {n: FINE for n in "xaby"})), cfg).value
    assert REPAIR.run(passing, cfg).summary == "nothing to repair: every quantised file passes"
    tflite = passing.gated.tflite
    unwritten = replace(passing, gated=replace(passing.gated, tflite=replace(tflite, not_written={"uint8": "no TRANSPOSE v4"})))
    assert REPAIR.run(unwritten, cfg).summary == ("nothing to repair: every quantised file written passes; "
                                                  "no uint8 file: no TRANSPOSE v4")
    broken = ParityPass().run(_gated(tmp_path / "abs", unary("ABS", (1, 4, 4, 3)),
                                     int8=_relu_chain("int8", {"x": FINE, "a": FINE, "b": COARSE, "y": FINE})), cfg).value
    result = REPAIR.run(broken, cfg)
    assert result.value.repairs["int8"] == Repair(repaired=False, why="the float32 file fails or was not written: a float tail "
                                                                      "would carry its error")
    assert "int8-repaired" not in result.value.gated.tflite.files
