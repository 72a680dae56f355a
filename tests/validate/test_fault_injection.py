"""Five distinct conversion faults: each is caught by validation and its divergence located."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from edgeport.convert.base import ConvertConfig, Pass, PassResult, run_pipeline
from edgeport.convert.pipeline import PIPELINE
from edgeport.validate.board.profiles import load_board

pytestmark = pytest.mark.slow


class Fault(Pass):
    """Applies ``fn`` to the value right after the pass named ``after`` (a ``Prepared`` record)."""

    def __init__(self, after: str, fn):
        self.after, self.fn = after, fn
        self.name = f"fault_after_{after}"

    def run(self, value, config) -> PassResult:
        return PassResult(self.fn(value), changed=True, summary="fault injected")

    def check(self, before, after, config) -> None:
        """A fault promises nothing: the passes after it and the parity report must catch it."""


def _with_fault(fault: Fault) -> list[Pass]:
    passes = list(PIPELINE)
    i = [p.name for p in passes].index(fault.after)
    return passes[: i + 1] + [fault] + passes[i + 1 :]


def _module_edit(edit):
    def fn(prepared):
        import copy

        module = copy.deepcopy(prepared.module)
        with torch.no_grad():
            edit(module)
        return replace(prepared, module=module)

    return fn


@pytest.fixture(scope="module")
def checkpoints(random_checkpoint):
    return {arch: random_checkpoint(arch, 3) for arch in ("pdet-n", "pdet-n-bilinear")}


def _convert(ckpt, tmp_path, passes, **cfg):
    from edgeport.validate.report.assemble import build_report

    cfg.setdefault("board", load_board("default"))
    cfg.setdefault("repair", False)  # what is injected is to be caught and located, not repaired (its own tests: test_tflite_passes)
    config = ConvertConfig(checkpoint=ckpt, work_dir=tmp_path, imgsz=cfg.pop("imgsz", 96), max_calib=8, max_validate=2, **cfg)
    validated, _ = run_pipeline(config, passes)
    prepared = validated.gated.tflite.prepared
    return build_report(validated.parity, model=prepared.describe(), board=validated.gated.board, artifacts={}).to_dict()


def _first_divergence(report, variant, runtime="tflite"):
    (row,) = [r for r in report["results"] if r["variant"] == variant and r["runtime"] == runtime]
    assert not row["passed"], f"{variant}/{runtime} should fail"
    assert row["divergence"] and row["divergence"]["found"], row["divergence"]
    return row["divergence"]["first"]


def test_legacy_resize_on_the_old_board_is_caught_at_the_resize(checkpoints, tmp_path):
    report = _convert(checkpoints["pdet-n-bilinear"], tmp_path, list(PIPELINE), board=load_board("tflite-1.13"), legacy_resize=True)
    assert report["passed"] is False and report["board"]["runnable"] is True
    first = _first_divergence(report, "float32", "board:tflite-1.13 (emulated)")
    assert first["reference_type"] == "Resize" and "up" in first["reference"]
    assert first["candidate_type"] == "RESIZE_BILINEAR"


def test_changed_bn_eps_is_caught_at_its_conv(checkpoints, tmp_path):
    def wrong_eps(m):
        m.backbone.stages[1][0][1].eps = 0.5  # a buggy SyncBN revert losing eps
    report = _convert(checkpoints["pdet-n"], tmp_path, _with_fault(Fault("revert_syncbn", _module_edit(wrong_eps))), int8=False)
    first = _first_divergence(report, "float32")
    assert "stages.1" in first["reference"] or "stages/stages.1" in first["reference"], first
    (folded,) = [r for r in report["results"] if r["variant"] == "folded"]
    assert not folded["passed"]


def test_channel_order_slip_is_caught_at_the_first_conv(checkpoints, tmp_path):
    def bgr(m):
        conv = m.get_submodule("backbone.stem.0")
        conv.weight.copy_(conv.weight[:, [2, 1, 0]])
    report = _convert(checkpoints["pdet-n"], tmp_path, _with_fault(Fault("fold_bn", _module_edit(bgr))), int8=False)
    first = _first_divergence(report, "float32")
    assert "stem" in first["reference"], first


def test_dropped_bias_is_caught_at_its_conv(checkpoints, tmp_path):
    def drop(m):
        m.get_submodule("neck.td3.0").bias.zero_()
    report = _convert(checkpoints["pdet-n"], tmp_path, _with_fault(Fault("fold_bn", _module_edit(drop))), int8=False)
    first = _first_divergence(report, "float32")
    assert "td3" in first["reference"], first


def test_int8_calibrated_on_wrongly_normalised_images_is_caught(demo_ckpt, tmp_path):
    # the trained detector: its outputs depend on the image (a random network's barely do)
    def times_255(exported):
        prepared = replace(exported.prepared, calib=np.ascontiguousarray(exported.prepared.calib * 255.0))  # 0..255, not 0..1
        return replace(exported, prepared=prepared)
    report = _convert(demo_ckpt, tmp_path, _with_fault(Fault("export_onnx", times_255)))
    rows = {(r["variant"], r["runtime"]): r for r in report["results"]}
    assert rows[("float32", "tflite")]["passed"], "float32 does not depend on calibration"
    first = _first_divergence(report, "int8")
    assert first["index"] <= 2, f"should diverge right at the input layers: {first}"
