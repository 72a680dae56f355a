"""Board profiles end to end: convert for a board, the naive model refused, `edgeport boards`."""

from __future__ import annotations

import json

import pytest

from edgeport.validate.board.profiles import version_le

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bilinear_ckpt(random_checkpoint):
    return random_checkpoint("pdet-n-bilinear", 1)


def test_bilinear_detector_for_tflite_113_is_runnable_and_exact(bilinear_ckpt, tmp_path, cli):
    out = tmp_path / "old"
    proc = cli("convert", str(bilinear_ckpt), "--imgsz", "160", "--board", "tflite-1.13", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (out / "model_int8.tflite").exists(), "tflite-1.13 has no int8 kernels"
    assert (out / "model_uint8.tflite").exists(), "tflite-1.13 runs uint8 (per-tensor)"
    report = json.loads((out / "report.json").read_text())
    check = report["board"]["checks"]["float32"]
    assert check["runnable"] and check["reasons"] == []
    assert all(op["version"] == 1 for op in check["ops"])
    from edgeport.convert.converters.onnx2tf import installed_backend

    if installed_backend().generation >= 2:
        assert check["min_runtime_version"] is None  # onnx2tf 2.x writes no such metadata
    else:
        assert version_le(check["min_runtime_version"], "1.13.1")
    assert [s["rule"] for s in report["upsample"]["sites"]] == ["bilinear_half_pixel_lowered"] * 2
    # the two half-pixel resizes are lowered in the file, float32 and uint8 alike, and the report says so
    for variant in ("float32", "uint8"):
        assert report["converter"]["lowered_rules"][variant]["resize_bilinear_half_pixel"] == 2, report["converter"]
    assert r"Lowered for the board: float32: resize\_bilinear\_half\_pixel x2" in (out / "report.md").read_text()
    (f32,) = [r for r in report["results"] if r["variant"] == "float32" and r["runtime"] == "tflite"]
    for o in f32["outputs"]:
        assert o["max_abs"] <= 1e-4 * o["ref_max_abs"] and o["cosine"] >= 0.99999, o
    # the same model converted naively (default board) is refused by the old board, with the reason
    naive = tmp_path / "naive"
    assert cli("convert", str(bilinear_ckpt), "--imgsz", "160", "--no-int8", "--out", str(naive)).returncode == 0
    chk = cli("boards", "check", str(naive / "model_float32.tflite"), "--board", "tflite-1.13")
    assert chk.returncode == 1
    if installed_backend().generation >= 2:  # version 1 with the flag: refused for the flag
        assert "only RESIZE_BILINEAR v3 kernels honour half_pixel_centers; tflite-1.13 runs 1.13.1" in chk.stdout
    else:
        assert "RESIZE_BILINEAR v3 (half_pixel_centers) is not in tflite-1.13's runtime: it has RESIZE_BILINEAR v1" in chk.stdout
    assert cli("boards", "check", str(out / "model_float32.tflite"), "--board", "tflite-1.13").returncode == 0


def test_legacy_resize_runs_on_the_old_board_but_fails_parity(bilinear_ckpt, tmp_path, cli):
    out = tmp_path / "legacy"
    proc = cli("convert", str(bilinear_ckpt), "--imgsz", "160", "--board", "tflite-1.13", "--legacy-resize", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["board"]["runnable"] is True and report["passed"] is False
    assert [s["rule"] for s in report["upsample"]["sites"]] == ["legacy_resize"] * 2
    (f32,) = [r for r in report["results"] if r["variant"] == "float32" and r["runtime"] == "tflite"]
    assert not f32["passed"]
    from edgeport.validate.board.profiles import load_board
    from edgeport.validate.board.runtime import installed_python

    if installed_python(load_board("tflite-1.13")) is not None:
        # the write-up's bug on the write-up's runtime: it runs the file, and computes something else
        (real,) = [r for r in report["results"] if r["runtime"] == "board:tflite-1.13 (TFLite 1.13.1)" and r["variant"] == "float32"]
        assert not real["passed"] and real["verdict"]["runnable"] and real["divergence"]["found"]
        assert real["divergence"]["located_on"].startswith("the emulator") and "Resize" in real["divergence"]["first"]["reference"]


def test_mcu_board_gets_int8_only(bilinear_ckpt, tmp_path, cli):
    out = tmp_path / "mcu"
    proc = cli("convert", str(bilinear_ckpt), "--imgsz", "96", "--board", "tflm-m4-256k", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (out / "model_float32.tflite").exists() and (out / "model_int8.tflite").exists()
    report = json.loads((out / "report.json").read_text())
    assert set(report["board"]["checks"]) == {"int8"} and report["board"]["checks"]["int8"]["runnable"]
    bad = cli("convert", str(bilinear_ckpt), "--imgsz", "96", "--board", "tflm-m4-256k", "--no-int8", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "runs only int8" in bad.stderr


def test_boards_listing_and_bad_input(tmp_path, cli):
    listing = cli("boards")
    assert listing.returncode == 0 and "tflite-1.13" in listing.stdout and "tflm-m4-256k" in listing.stdout
    (tmp_path / "x.tflite").write_bytes(b"junk")
    bad = cli("boards", "check", str(tmp_path / "x.tflite"), "--board", "tflite-1.13")
    assert bad.returncode == 2 and "not a TFLite model" in bad.stderr
    assert cli("boards", "check", str(tmp_path / "x.tflite"), "--board", "nope").returncode == 2


def test_the_cli_finds_the_runtime_where_make_setup_boards_put_it():
    """One home for `make setup-boards`, the tests and the CLI ($EDGEPORT_HOME, else
    ~/.local/share/edgeport): where the tests find the real TFLite 1.13.1, a plain `edgeport boards`
    -- no environment set for it -- lists it as installed."""
    import subprocess
    import sys

    from edgeport.validate.board.profiles import load_board
    from edgeport.validate.board.runtime import installed_python

    if installed_python(load_board("tflite-1.13")) is None:
        pytest.skip("the real TFLite 1.13.1 is not installed here (make setup-boards)")
    proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "boards"], capture_output=True, text=True, timeout=120)
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("tflite-1.13 ")]
    assert proc.returncode == 0 and line.endswith("[real runtime installed]"), proc.stdout
