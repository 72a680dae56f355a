"""`edgeport validate` and the board emulator end to end; the HTML report in a real browser."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from edgeport.models.synth import make_scene
from edgeport.ops.tflite_model import read_tflite
from edgeport.validate.board.differences import IgnoreHalfPixelCenters
from edgeport.validate.board.profiles import load_board
from edgeport.validate.datasets import write_dataset
from edgeport.validate.parity.emulator import emulate

pytestmark = pytest.mark.slow

EMULATED, REAL = "board:tflite-1.13 (emulated)", "board:tflite-1.13 (TFLite 1.13.1)"


def _real_runtime() -> bool:
    """Whether the real TFLite 1.13.1 is installed (`make setup-boards`): its rows join the emulator's."""
    from edgeport.validate.board.runtime import installed_python

    return installed_python(load_board("tflite-1.13")) is not None


@pytest.fixture(scope="module")
def bilinear(tmp_path_factory, cli_session, random_checkpoint):
    """A bilinear detector, converted correctly (default board) and the old way (--legacy-resize)."""
    root = tmp_path_factory.mktemp("val")
    ckpt = random_checkpoint("pdet-n-bilinear", 5)
    for name, extra in (("naive", []), ("legacy", ["--board", "tflite-1.13", "--legacy-resize"])):
        cli_session("convert", str(ckpt), "--imgsz", "96", "--no-int8", "--out", str(root / name), *extra)
    return ckpt, root


def test_legacy_resize_fails_on_the_old_board_emulator_at_the_resize(bilinear, tmp_path, cli):
    ckpt, root = bilinear
    out = tmp_path / "v"
    proc = cli("validate", str(ckpt), "--tflite", str(root / "legacy" / "model_float32.tflite"), "--board", "tflite-1.13", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "first divergence at reference node" in proc.stdout and "(Resize)" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    (board_row,) = [r for r in report["results"] if r["runtime"] == EMULATED]
    assert board_row["verdict"]["runnable"] and not board_row["passed"]
    assert board_row["divergence"]["first"]["reference_type"] == "Resize"
    if _real_runtime():  # the real TFLite 1.13.1 runs it too, and computes the same wrong thing
        (real,) = [r for r in report["results"] if r["runtime"] == REAL]
        assert not real["passed"] and real["divergence"]["first"]["reference_type"] == "Resize"
    assert "Where it diverges" in (out / "report.md").read_text()


def test_naive_model_cannot_run_on_the_old_board(bilinear, tmp_path, cli):
    ckpt, root = bilinear
    proc = cli("validate", str(ckpt), "--tflite", str(root / "naive" / "model_float32.tflite"), "--board", "tflite-1.13", "--out", str(tmp_path / "v"))
    assert proc.returncode == 1
    from edgeport.convert.converters.onnx2tf import installed_backend

    if installed_backend().generation >= 2:  # v1 with the flag set: refused for the flag
        assert "only RESIZE_BILINEAR v3 kernels honour half_pixel_centers" in proc.stderr
    else:
        assert "RESIZE_BILINEAR v3 (half_pixel_centers) is not in tflite-1.13's runtime: it has RESIZE_BILINEAR v1" in proc.stderr
        if _real_runtime():  # and the runtime itself refuses to load it, in its own words
            report = json.loads((tmp_path / "v" / "report.json").read_text())
            (real,) = [r for r in report["results"] if r["runtime"] == REAL]
            assert real["verdict"] == {"judge": "runtime", "runnable": False, "differences": {}, "arena_bytes": None,
                                       "model_bytes": None, "reasons": ["TFLite 1.13.1 refused the model: Didn't find op for "
                                                                        "builtin opcode 'RESIZE_BILINEAR' version '3'"]}
            assert report["board_runtime"]["refused"] == ["float32"] and "refused float32" in " ".join(proc.stdout.split())


def test_a_board_that_ignores_half_pixel_centres_is_emulated(bilinear, tmp_path):
    ckpt, root = bilinear
    naive = root / "naive" / "model_float32.tflite"
    patched, n = IgnoreHalfPixelCenters().apply(naive.read_bytes())
    assert n == 2 and patched != naive.read_bytes()
    (tmp_path / "p.tflite").write_bytes(patched)
    assert not any("half_pixel_centers" in o.notes for o in read_tflite(tmp_path / "p.tflite").ops)
    profile = tmp_path / "vendor.toml"
    profile.write_text('name = "vendor"\nruntime = "tflite"\nversion = "2.4.0"\ndtypes = ["float32"]\nram_bytes = 100000000\n'
                       'flash_bytes = 100000000\ndifferences = ["ignore_half_pixel_centers"]\n')
    emulation = emulate(naive, load_board(str(profile)), [(1, 6, 12, 12), (1, 6, 6, 6), (1, 6, 3, 3)], tmp_path)
    assert emulation.verdict.runnable and emulation.verdict.differences == {"ignore_half_pixel_centers": 2}


def test_tflm_arena_against_the_board_ram(demo_ckpt, tmp_path, cli):
    out = tmp_path / "mcu"
    proc = cli("convert", str(demo_ckpt), "--imgsz", "160", "--board", "tflm-m4-256k", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    (row,) = [r for r in report["results"] if r["runtime"] == "board:tflm-m4-256k"]
    assert row["passed"] and 100_000 < row["verdict"]["arena_bytes"] <= 262_144
    small = tmp_path / "tiny.toml"
    small.write_text('name = "m0-64k"\nruntime = "tflm"\nversion = "2026.10"\ndtypes = ["int8"]\nram_bytes = 65536\n'
                     'flash_bytes = 1048576\nops = ["CONV_2D", "PAD", "ADD", "RESIZE_NEAREST_NEIGHBOR"]\n')
    verdict = emulate(out / "model_int8.tflite", load_board(str(small)), [(1, 6, 20, 20), (1, 6, 10, 10), (1, 6, 5, 5)], tmp_path).verdict
    assert not verdict.runnable
    assert any(r.startswith("tensor arena needs") and "m0-64k has 65,536 bytes of RAM" in r for r in verdict.reasons)


def test_shipped_detector_passes_on_the_old_board_with_labels(demo_ckpt, tmp_path, cli):
    data = tmp_path / "data"
    rng = np.random.default_rng(11)
    write_dataset(data, {"val": [make_scene(rng, 160) for _ in range(8)]}, size=160)
    conv = cli("convert", str(demo_ckpt), "--imgsz", "160", "--board", "tflite-1.13", "--out", str(tmp_path / "old"))
    assert conv.returncode == 0, conv.stderr[-2000:]
    proc = cli("validate", str(demo_ckpt), "--tflite", str(tmp_path / "old" / "model_float32.tflite"), "--board", "tflite-1.13",
               "--data", str(data), "--out", str(tmp_path / "v"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "calibration" not in proc.stderr, "validate calibrates nothing, and says nothing of a calibration"
    report = json.loads((tmp_path / "v" / "report.json").read_text())
    assert report["inputs"]["labelled"] and report["inputs"]["random"] == 2
    rows = {r["runtime"]: r for r in report["results"]}
    assert set(rows) == {"pytorch", "tflite", "tflite-ref", EMULATED} | ({REAL} if _real_runtime() else set())
    for board_row in {EMULATED, REAL} & set(rows):
        assert rows[board_row]["map"]["map50"] == pytest.approx(rows["pytorch"]["map"]["map50"], abs=0.01)
    # mAP on every labelled image, PyTorch's, the file's and the board's own runtime's: here the 8 parity
    # judged too, so the same figures
    dataset = report["dataset"]
    cheap = {"pytorch", "tflite"} | ({REAL} if _real_runtime() else set())
    assert dataset["images"] == 8 and set(dataset["rows"]) == cheap and dataset["refused"] == {}
    for name in cheap:
        assert dataset["rows"][name]["map50"] == pytest.approx(rows[name]["map"]["map50"], abs=1e-9)
        assert dataset["rows"][name]["map50_95"] == pytest.approx(rows[name]["map"]["map50_95"], abs=1e-9)
        (person,) = dataset["rows"][name]["classes"].values()
        assert person["ap50"] == pytest.approx(dataset["rows"][name]["map50"]) and person["instances"] > 0
    assert "- pytorch: mAP@0.5:0.95 " in proc.stdout and "mAP on the dataset" in (tmp_path / "v" / "report.md").read_text()
    html = (tmp_path / "v" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2  # error histograms and the sample; no row failed: no layer curve
    _render_in_browser(tmp_path / "v" / "report.html", tmp_path)
    # yolo val's work: the file on TFLite's optimised kernels and its mAP alone (no reference kernels'
    # sample, no board rows), on the first 5 images
    proc = cli("validate", str(demo_ckpt), "--tflite", str(tmp_path / "old" / "model_uint8.tflite"), "--board", "tflite-1.13",
               "--data", str(data), "--out", str(tmp_path / "quick"), "--images", "5", "--rows", "file")
    assert proc.returncode == 0, proc.stderr[-2000:]
    quick = json.loads((tmp_path / "quick" / "report.json").read_text())
    assert {r["runtime"] for r in quick["results"]} == {"pytorch", "tflite"} and quick["inputs"]["count"] == 5
    assert quick["dataset"]["images"] == 5 and set(quick["dataset"]["rows"]) == {"tflite"}


def _render_in_browser(page, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run installs it")
        pytest.skip("chromium not installed (apt-get install chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'chr'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'id="verdict">PASSED: ship ' in dom.stdout and 'id="summary"' in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, *flags, "--window-size=1200,2000", f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    from PIL import Image

    with Image.open(shot) as im:
        pixels = np.asarray(im.convert("L"))
    assert pixels.shape[0] > 1000 and pixels.std() > 10, "the page rendered blank"


@pytest.mark.parametrize("board, variants", [("default", {"float32", "int8"}), ("tflite-1.13", {"float32", "uint8"}), ("tflm-m4-256k", {"int8"})])
def test_shipped_bilinear_detector_passes_on_every_shipped_board(board, variants, tmp_path, cli, demo_ckpt):
    ckpt = demo_ckpt.parent / "pdet_n_bilinear_person.pt"
    out = tmp_path / board
    proc = cli("convert", str(ckpt), "--imgsz", "160", "--board", board, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] and set(report["board"]["checks"]) == variants
    rows = [r for r in report["results"] if r["variant"] in variants]
    # tflite, tflite-ref, the emulator, + the board's own runtime; the default board's float32 has no
    # reference kernels' row (a diagnostic of the quantised files only, where no board runs them)
    per_variant = {v: 4 if board == "tflite-1.13" and _real_runtime() else 2 if (board, v) == ("default", "float32") else 3
                   for v in variants}
    assert len(rows) == sum(per_variant.values()) and all(r["passed"] for r in rows)
    assert all(r["detections"]["recall"] >= 0.9 for r in rows), [r["detections"] for r in rows]


def test_validate_bad_input_is_one_line_and_leaves_nothing(bilinear, tmp_path, cli):
    ckpt, root = bilinear
    tfl = root / "naive" / "model_float32.tflite"
    (tmp_path / "junk.tflite").write_bytes(b"junk")
    cases = [
        (["--tflite", str(tmp_path / "missing.tflite")], "does not exist"),
        (["--tflite", str(tmp_path / "junk.tflite")], "not a TFLite model"),
        (["--tflite", str(tfl), "--imgsz", "160"], "the TFLite model takes 96x96"),
        (["--tflite", str(tfl), "--data", str(tmp_path / "nodata")], "is not a folder"),
        (["--tflite", str(tfl), "--images", "5"], "--images 5 takes the first images of --data"),
        (["--tflite", str(tfl), "--images", "0"], "--images"),
        (["--tflite", str(tfl), "--board", "nope"], "unknown board 'nope'"),
    ]
    for args, needle in cases:
        out = tmp_path / "runs" / "v"
        proc = cli("validate", str(ckpt), *args, "--out", str(out))
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
        assert not (tmp_path / "runs").exists()
