from __future__ import annotations

import pytest

from edgeport.errors import BadInputError
from edgeport.ops.tflite_model import OpUse, TFLiteSummary, read_tflite
from edgeport.validate.board.profiles import BoardProfile, board_names, check_model, load_board, op_min_runtime, version_le

# a profile whose runtime nobody probed: TFLite's tabulated op versions are all there is to go on
UNPROBED = BoardProfile("soc", "", "tflite", "2.4.0", ("float32",), ram_bytes=1, flash_bytes=10**9)


def summary(*ops, dtypes=("float32",), min_rt="1.13.1", size=1000):
    return TFLiteSummary("m.tflite", size, tuple(ops), tuple(dtypes), min_rt)


def test_versions_compare_component_by_component():
    assert version_le("1.13.1", "1.14.0") and version_le("1.9.0", "1.13.1") and not version_le("1.14.0", "1.13.1")
    assert version_le("2.2", "2.2.0") and version_le("2.2.0", "2.2") and not version_le("2.10.0", "2.9.9")


def test_shipped_profiles():
    assert {"default", "tflite-1.13", "tflm-m4-256k"} <= set(board_names())
    old = load_board("tflite-1.13")
    assert (old.runtime, old.version, old.dtypes, old.quantised) == ("tflite", "1.13.1", ("float32", "uint8"), "uint8")
    # its uint8 kernels, probed: MEAN wraps around, LEAKY_RELU and TRANSPOSE_CONV are float-only
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "LOGISTIC", "CONCATENATION"} <= old.uint8.ops
    assert not {"MEAN", "LEAKY_RELU", "TRANSPOSE_CONV", "QUANTIZE", "HARD_SWISH", "RELU"} & old.uint8.ops
    assert old.lacks("MEAN", 1, None, "uint8") and not old.lacks("MEAN", 1, None, "float32")
    assert load_board("default").quantised == "int8" and load_board("default").uint8 is None
    assert old.max_op_version("RESIZE_BILINEAR") == 1 and old.max_op_version("CONV_2D") == 1
    # LOGISTIC v1 is in TFLite 1.13.1 (probed), though runtime_version.cc tabulated it at 1.14.0
    assert old.max_op_version("RESIZE_NEAREST_NEIGHBOR") == 1 and old.max_op_version("LOGISTIC") == 1
    assert old.max_op_version("DEPTHWISE_CONV_2D") == 2 and old.max_op_version("HARD_SWISH") == 0
    assert "tensorflow==1.13.1" in old.op_table.source and old.install.python == "3.7"
    assert load_board("default").max_op_version("RESIZE_BILINEAR") >= 4
    mcu = load_board("tflm-m4-256k")
    assert (mcu.runtime, mcu.dtypes, mcu.ram_bytes, mcu.flash_bytes) == ("tflm", ("int8",), 262144, 1048576)
    assert op_min_runtime()["RESIZE_BILINEAR"][3] == "2.2.0"


def test_the_write_up_bug_is_named():
    s = summary(OpUse("RESIZE_BILINEAR", 3, 2, ("half_pixel_centers",)), OpUse("CONV_2D", 1, 9), min_rt="2.2.0")
    reasons = check_model(s, load_board("tflite-1.13"))
    assert reasons == ["RESIZE_BILINEAR v3 (half_pixel_centers) is not in tflite-1.13's runtime: it has RESIZE_BILINEAR v1 "
                       f"({load_board('tflite-1.13').op_table.source})"]
    assert check_model(s, load_board("default")) == []


def test_a_flag_only_newer_kernels_honour_is_refused_whatever_version_is_declared():
    # onnx2tf 2.x writes RESIZE_BILINEAR v1 with half_pixel_centers set and no min_runtime_version:
    # TFLite 1.13 would load it and ignore the flag, the write-up's bug
    s = summary(OpUse("RESIZE_BILINEAR", 1, 2, ("half_pixel_centers",), needs=3), min_rt=None)
    (reason,) = check_model(s, load_board("tflite-1.13"))
    assert reason.startswith("RESIZE_BILINEAR v1 (half_pixel_centers): only RESIZE_BILINEAR v3 kernels honour half_pixel_centers")
    assert check_model(s, load_board("default")) == []
    assert check_model(summary(OpUse("RESIZE_BILINEAR", 1, 2, ("align_corners",))), load_board("tflite-1.13")) == []


def test_a_grouped_convolution_declared_v1_is_refused_where_no_v6_kernel_runs():
    # onnx2tf 2.x writes grouped convolutions as CONV_2D v1 whose filter has fewer channels than
    # its input: TFLite 1.13.1 refuses that at prepare ("input->dims->data[3] != filter->dims->data[3]")
    s = summary(OpUse("CONV_2D", 1, 3, ("grouped",), needs=6), min_rt=None)
    (reason,) = check_model(s, load_board("tflite-1.13"))
    assert reason.startswith("CONV_2D v1 (grouped): only CONV_2D v6 kernels honour grouped; tflite-1.13 runs 1.13.1, whose "
                             "kernel refuses it"), reason
    assert check_model(s, load_board("default")) == []


def test_the_probed_op_table_beats_the_tabulated_runtime():
    # every YOLO is SiLU = LOGISTIC + MUL; runtime_version.cc says LOGISTIC v1 needs 1.14.0,
    # the real TFLite 1.13.1 has it (validate/board_profiles/tflite-1.13.ops.toml)
    old = load_board("tflite-1.13")
    assert op_min_runtime()["LOGISTIC"][1] == "1.14.0" and op_min_runtime()["SLICE"][1] == "1.14.0"
    assert check_model(summary(OpUse("LOGISTIC", 1, 3), OpUse("MUL", 1, 3), OpUse("SLICE", 1, 2), min_rt="1.14.0"), old) == []
    (reason,) = check_model(summary(OpUse("SLICE", 2, 2)), old)
    assert reason.startswith("SLICE v2 is not in tflite-1.13's runtime: it has SLICE v1 (probed on TFLite 1.13.1")
    (reason,) = check_model(summary(OpUse("HARD_SWISH", 1, 1)), old)
    assert reason.startswith("HARD_SWISH v1 is not in tflite-1.13's runtime: it has no HARD_SWISH kernel at all")
    # hardsigmoid (timm's MobileNetV3) is RELU_0_TO_1, absent from the tabulated table, present in the runtime
    assert "RELU_0_TO_1" not in op_min_runtime()
    assert check_model(summary(OpUse("RELU_0_TO_1", 1, 4), dtypes=("float32", "int8"), min_rt=None), load_board("default")) == []


def test_dtype_size_unknown_and_custom_ops():
    s = TFLiteSummary("m", 2_000_000, (OpUse("CONV_2D", 99, 1), OpUse("CUSTOM:Foo", 1, 1)), ("float32", "int32"), None, ("CUSTOM:Foo",))
    reasons = check_model(s, load_board("tflm-m4-256k"))
    assert "CUSTOM:Foo is a custom op; tflm-m4-256k has only builtin kernels" in reasons
    assert "float32 tensors; tflm-m4-256k runs int8" in reasons
    assert "model is 2,000,000 bytes; tflm-m4-256k has 1,048,576 bytes of flash" in reasons
    assert not any("int32" in r for r in reasons)  # index tensors are fine everywhere
    assert any("CONV_2D v99 is not in tflite-1.13's runtime: it has CONV_2D v1" in r for r in check_model(s, load_board("tflite-1.13")))
    assert any("CONV_2D v99 is not in TFLite's op-version table" in r for r in check_model(s, UNPROBED))


def test_profile_overrides_and_errors(tmp_path):
    path = tmp_path / "soc.toml"
    path.write_text('name = "soc"\nruntime = "tflite"\nversion = "2.4.0"\ndtypes = ["float32"]\nram_bytes = 1\nflash_bytes = 100000\n'
                    '[overrides.RESIZE_BILINEAR]\nmax_version = 1\nreason = "vendor kernel ignores half_pixel_centers"\n')
    board = load_board(str(path))
    assert board.max_op_version("RESIZE_BILINEAR") == 1
    reasons = check_model(summary(OpUse("RESIZE_BILINEAR", 3, 1, ("half_pixel_centers",))), board)
    assert reasons == ["RESIZE_BILINEAR v3 (half_pixel_centers): vendor kernel ignores half_pixel_centers"]
    with pytest.raises(BadInputError, match="unknown board 'nope'; valid: default"):
        load_board("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text('runtime = "vxworks"\nversion = "1"\n')
    with pytest.raises(BadInputError, match="is invalid"):
        load_board(str(bad))


def test_read_tflite_rejects_other_files(tmp_path):
    (tmp_path / "x.tflite").write_bytes(b"not a model")
    with pytest.raises(BadInputError, match="no TFL3 identifier"):
        read_tflite(tmp_path / "x.tflite")
    (tmp_path / "y.tflite").write_bytes(b"\x00\x00\x00\x00TFL3" + b"\xff" * 8)
    with pytest.raises(BadInputError, match="damaged TFLite flatbuffer"):
        read_tflite(tmp_path / "y.tflite")


def test_uses_of_one_op_the_board_lacks_are_named_once():
    # two GATHER_NDs that differ only in their index type: one reason, not two
    s = summary(OpUse("GATHER_ND", 1, 2, dtype="float32"), OpUse("GATHER_ND", 1, 1, dtype="int32"))
    reasons = check_model(s, load_board("tflite-1.13"))
    assert len(reasons) == 1 and reasons[0].startswith("GATHER_ND v1 is not in tflite-1.13's runtime"), reasons
