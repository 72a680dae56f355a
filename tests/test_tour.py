"""The README's five-minute tour, command for command, at a smaller size.

The commands are read from README.md itself, so the tour a new user copies is the one tested. The
only changes: fewer and smaller images, one epoch, the shipped weights' path made absolute. Each
command must exit 0; the convert report must match boxes; `check` must pass the report against
itself.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMALLER = {"--n": "16", "--n-val": "8", "--imgsz": "96", "--epochs": "1"}

pytestmark = pytest.mark.slow


def tour_commands() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    block = text[text.index("## A five-minute tour"):]
    block = block[block.index("```") + 3:]
    block = block[: block.index("```")]
    commands = []
    for line in block.strip().splitlines():
        line = line.split("#")[0].strip()
        if not line.startswith("edgeport "):
            continue  # make setup && source ...: the test runs in this environment
        argv = shlex.split(line)[1:]
        for i, arg in enumerate(argv[:-1]):
            if arg in SMALLER:
                argv[i + 1] = SMALLER[arg]
            if arg == "--weights":
                argv[i + 1] = str(REPO / argv[i + 1])
        commands.append(argv)
    return commands


def test_the_tour_as_the_readme_says_it(tmp_path):
    commands = tour_commands()
    assert [c[0] for c in commands] == ["data", "train", "convert", "validate", "boards", "check"], commands
    for argv in commands:
        proc = subprocess.run([sys.executable, "-m", "edgeport.cli", *argv], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-3000:])
        if argv[0] == "train":
            assert re.search(r"best\.pt \(mAP@0\.5 0\.\d+\) and last\.pt are in .*runs/tour/", proc.stderr), proc.stderr[-1000:]
        if argv[0] == "convert":
            assert "px (the size the checkpoint was trained at)" in proc.stderr, proc.stderr[-2000:]
    report = json.loads((tmp_path / "runs" / "tour-conv" / "report.json").read_text())
    assert report["passed"]
    float_rows = [r for r in report["results"] if r["variant"] == "float32"]
    assert float_rows and all(r["detections"]["matched"] > 0 for r in float_rows), [r["detections"] for r in float_rows]
    # calibrated and judged on the user's own images, not synthetic scenes
    assert report["model"]["calibration"].endswith("images from data/persons/images/train"), report["model"]["calibration"]
    # judged on the quarter of them held out of the calibration: images the int8 file never saw
    assert report["inputs"]["source"].endswith("--calib images held out of the calibration (every fourth)"), report["inputs"]
    assert report["inputs"]["held_out"] is True
