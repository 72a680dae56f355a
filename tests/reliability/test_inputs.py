"""Bad inputs to convert and validate: one line naming the file or tensor, exit 2, nothing written."""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from .conftest import assert_one_line, inventory

CONVERT = ("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64")


def test_nan_weights_are_named_by_tensor(workspace, run_inproc, save_pdet):
    save_pdet(workspace / "nan.pt", tamper=lambda sd: sd["module.neck.td3.0.weight"].view(-1)[:3].fill_(float("nan")))
    before = inventory(workspace)
    r = run_inproc("convert", "nan.pt", "--arch", "pdet-n", "--imgsz", "64")
    assert_one_line(r, 2, "module.neck.td3.0.weight", "3 NaN/Inf values")
    assert inventory(workspace) == before and not (workspace / "runs").exists()


def test_inf_bias_is_named_by_tensor(workspace, run_inproc, save_pdet):
    save_pdet(workspace / "inf.pt", tamper=lambda sd: sd["module.head.preds.0.bias"].fill_(float("inf")))
    r = run_inproc("convert", "inf.pt", "--arch", "pdet-n", "--imgsz", "64")
    assert_one_line(r, 2, "module.head.preds.0.bias")


def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path):
    from PIL import Image

    from edgeport.models.preprocess import load_image

    ramp = np.linspace(0, 65535, 64 * 64).reshape(64, 64).astype(np.uint16)
    Image.fromarray(ramp).save(tmp_path / "g16.png")
    img = load_image(tmp_path / "g16.png")
    assert img.dtype == np.uint8 and img.shape == (64, 64, 3)
    np.testing.assert_array_equal(img[..., 0], (ramp >> 8).astype(np.uint8))
    assert (img == 255).mean() < 0.01, "16-bit values were clipped to 255"


def _png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG whose header claims ``width`` x ``height``: Pillow reads the size before any pixel."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b""))
    return path


def test_an_image_too_large_is_refused_by_name(workspace, run_inproc):
    _png_header_only(workspace / "calib" / "huge.png", 14000, 14000)
    before = inventory(workspace)
    r = run_inproc(*CONVERT, "--calib", "calib")
    assert_one_line(r, 2, "huge.png", "exceeds limit")
    assert inventory(workspace) == before


def test_a_truncated_calibration_image_is_refused_by_name(workspace, run_inproc):
    data = (workspace / "calib" / "img0.png").read_bytes()
    (workspace / "calib" / "img0.png").write_bytes(data[: len(data) // 2])
    r = run_inproc(*CONVERT, "--calib", "calib")
    assert_one_line(r, 2, "img0.png")


def test_a_permission_error_names_the_file(workspace, run_inproc, monkeypatch):
    # the suite runs as root, for whom chmod denies nothing: raise what the kernel would
    import edgeport.checkpoints as lc

    def denied(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(lc, "sniff", denied)
    r = run_inproc(*CONVERT)
    assert_one_line(r, 2, "model.pt", "Permission denied", "permissions")


def test_imgsz_zero_is_refused(workspace, run_inproc):
    assert_one_line(run_inproc(*CONVERT[:-1], "0"), 2, "--imgsz", ">= 1")


def test_opset_out_of_range_is_refused(workspace, run_inproc):
    assert_one_line(run_inproc(*CONVERT, "--opset", "99"), 2, "--opset", "between 11 and 20")


def test_unknown_board_is_refused(workspace, run_inproc):
    assert_one_line(run_inproc(*CONVERT, "--board", "esp32"), 2, "unknown board", "valid:")


def test_validate_with_a_missing_tflite_is_refused(workspace, run_inproc):
    before = inventory(workspace)
    r = run_inproc("validate", "model.pt", "--arch", "pdet-n", "--tflite", "nope.tflite")
    assert_one_line(r, 2, "nope.tflite")
    assert inventory(workspace) == before


def test_an_internal_error_exits_3_with_a_log(workspace, run_inproc, monkeypatch):
    import edgeport.convert.passes.fold_bn_pass as fold

    def broken(module):
        raise TypeError("unsupported operand")

    monkeypatch.setattr(fold, "fold_batchnorm", broken)
    before = inventory(workspace)
    r = run_inproc(*CONVERT)
    line = assert_one_line(r, 3, "internal error", "fold_bn", "not a failed gate")
    log = Path(line.rsplit(" ", 1)[-1])
    assert log.is_file() and "TypeError: unsupported operand" in log.read_text()
    log.unlink()
    assert inventory(workspace) == before and not (workspace / "runs").exists()


def test_untrusted_pickle_never_runs(workspace, run_inproc):
    class Payload:
        def __reduce__(self):
            return (Path.write_text, (workspace / "pwned.txt", "ran"))

    torch.save({"model": Payload()}, workspace / "evil.pt")
    r = run_inproc("convert", "evil.pt", "--arch", "pdet-n")
    assert_one_line(r, 2, "--trust-checkpoint")
    assert not (workspace / "pwned.txt").exists()


# -- a checkpoint never chooses code --------------------------------------------------------------


def _named_checkpoint(workspace: Path, arch: str, name: str = "named.pt") -> Path:
    """A weights-only checkpoint, loadable without trust, that names its own architecture."""
    from edgeport.models.registry import build_model

    model, _ = build_model("pdet-n")
    torch.save({"arch": arch, "model": model.state_dict()}, workspace / name)
    return workspace / name


@pytest.mark.parametrize("arch", ["evil:build", "os:abort", "pdb:set_trace"])
def test_a_checkpoints_own_arch_never_imports_code(workspace, run_inproc, arch):
    (workspace / "evil.py").write_text("from pathlib import Path\nPath('pwned.txt').write_text('ran')\ndef build():\n    return None\n")
    _named_checkpoint(workspace, arch)
    before = inventory(workspace)
    r = run_inproc("convert", "named.pt", "--imgsz", "64")
    line = assert_one_line(r, 2, f"the checkpoint names its architecture {arch!r}", "--trust-checkpoint")
    assert "--arch '" not in line  # the user gave no --arch: the message does not say they did
    assert not (workspace / "pwned.txt").exists() and "evil" not in sys.modules
    assert inventory(workspace) == before and not (workspace / "runs").exists()


def test_a_checkpoints_unknown_arch_is_named_as_the_files(workspace, run_inproc):
    _named_checkpoint(workspace, "yolov99")
    assert_one_line(run_inproc("convert", "named.pt", "--imgsz", "64"), 2, "the checkpoint names architecture 'yolov99'",
                    "not in edgeport's registry")


def test_a_stored_config_asking_for_a_huge_network_is_refused(workspace, run_inproc):
    from edgeport.models.registry import build_model

    model, config = build_model("pdet-n")
    torch.save({"arch": "pdet-n", "config": {**config, "widths": [10**6] * 5}, "model": model.state_dict()}, workspace / "big.pt")
    assert_one_line(run_inproc("convert", "big.pt", "--imgsz", "64"), 2, "config stored for 'pdet-n' is invalid", "1..4096")


def test_imgsz_beyond_memory_is_refused_before_any_image_is_made(workspace, run_inproc):
    before = inventory(workspace)
    r = run_inproc(*CONVERT[:-1], "65536")
    assert_one_line(r, 2, "--imgsz 65536 needs about", "GiB", "use --imgsz")
    assert inventory(workspace) == before and not (workspace / "runs").exists()


# -- names from files reach the terminal inert ------------------------------------------------------


def test_a_checkpoint_key_with_control_characters_cannot_rewrite_the_terminal(workspace, run_inproc, save_pdet):
    def tamper(sd):
        sd["module.\x1b]0;owned\x07\x1b[2J\nedgeport: ok"] = torch.zeros(1)

    save_pdet(workspace / "keys.pt", tamper=tamper)
    r = run_inproc("convert", "keys.pt", "--arch", "pdet-n", "--imgsz", "64")
    line = assert_one_line(r, 2, "unexpected", "\\x1b]0;owned\\x07\\x1b[2J\\nedgeport: ok")
    assert "\x1b" not in r.err and "\x07" not in r.err and line.count("\n") == 0


@pytest.mark.slow  # a real conversion
def test_markup_in_a_path_is_shown_as_it_is(workspace, run_inproc):
    """rich reads [/] as a closing tag; a path holding it is text, never markup."""
    r = run_inproc(*CONVERT, "--no-int8", "--out", "out[/]x", "--board", "default")
    assert r.code in (0, 1), r.err
    assert "out[/]x" in r.out
