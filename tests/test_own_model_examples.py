"""docs/convert.md's worked examples ("Your own model, worked through"), file for file and command
for command: each example's Python files are written as the page has them, its commands run in an
empty folder, and each must end as the page says: exit 0 with a report that passed, except the DDP
script's detector on onnx2tf 2.x (exit 1, float32 the file; the Ultralytics example is skipped there).

The only change: the Ultralytics example converts at 128 px, not 320 (its repair makes it the slow
one); the others run at the size written.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMALLER = {"An Ultralytics model": {"--imgsz": "128"}}

pytestmark = pytest.mark.slow


def examples() -> dict[str, tuple[dict[str, str], list[list[str]]]]:
    """Each example's title -> (its files by name, its commands)."""
    text = (REPO / "docs" / "convert.md").read_text()
    part = text[text.index("## Your own model, worked through"):]
    part = part[: part.index("\n## ", 1)]
    found = {}
    for section in part.split("\n### ")[1:]:
        title = section.splitlines()[0].strip()
        files, commands = {}, []
        for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, re.S):
            if lang == "python":
                name = body.splitlines()[0].removeprefix("# ").strip()
                files[name] = body
            elif lang == "sh":
                commands += [shlex.split(line) for line in body.strip().splitlines()]
        found[title] = (files, commands)
    return found


def test_the_page_has_the_three_examples():
    assert list(examples()) == ["A model from your own DDP training script", "A torchvision detector", "An Ultralytics model"]
    for files, commands in examples().values():
        assert [c[0] for c in commands] == ["python", "edgeport"] and commands[0][1] in files, commands


def _two_x() -> bool:
    from edgeport.convert.converters.onnx2tf import installed_backend  # imports TensorFlow: only where asked

    return installed_backend().generation >= 2


@pytest.mark.parametrize("title", list(examples()))
def test_the_example_converts_as_written(title, tmp_path):
    two_x = _two_x()
    if title == "An Ultralytics model" and two_x:
        # (there its int8 file's 80 random class scores fail, and no mostly-integer repair passes: exit 1)
        pytest.skip("asserted on the default line, onnx2tf 1.28 (Python 3.11)")
    # onnx2tf 2.x writes no int8 file of the DDP script's detector (the page says why): float32 is the file
    fails = two_x and title == "A model from your own DDP training script"
    files, commands = examples()[title]
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    env = {**os.environ, "YOLO_OFFLINE": "1"}
    for argv in commands:
        argv = [SMALLER.get(title, {}).get(argv[i - 1], a) if i else a for i, a in enumerate(argv)]
        run = [sys.executable, *argv[1:]] if argv[0] == "python" else [sys.executable, "-m", "edgeport.cli", *argv[1:]]
        proc = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == (1 if fails and argv[0] == "edgeport" else 0), (argv, proc.stdout[-2000:], proc.stderr[-3000:])
    (written,) = (tmp_path / "runs" / "convert").glob("*/report.json")  # convert's default --out
    report = json.loads(written.read_text())
    if fails:
        assert not report["passed"] and report["ship"]["variant"] == "float32", report["ship"]
        (int8,) = [r for r in report["results"] if r["variant"] == "int8"]
        assert int8["runtime"] == "converter" and "onnx2tf failed" in " ".join(int8["verdict"]["reasons"]), int8
        return
    assert report["passed"] and report["ship"]["passes"], report.get("ship")
    heads = {"A model from your own DDP training script": "yolov8", "A torchvision detector": "raw", "An Ultralytics model": "yolov8"}
    assert report["model"]["head"] == heads[title], "the head the page says is found"
