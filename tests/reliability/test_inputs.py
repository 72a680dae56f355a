"""Bad inputs to convert and validate: one line naming the file or tensor, exit 2, nothing written."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
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
    import edgeport.convert.fold_bn_pass as fold

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
