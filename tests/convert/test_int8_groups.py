"""int8 output groups: planned from the model's own ranges, applied before the joining Concat,
restored exactly for parity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgeport.convert.converters.int8_groups import MAX_GROUP_RATIO, group_factor, group_scales, normalise_onnx
from edgeport.convert.passes.export_onnx_pass import export_onnx, run_onnxruntime, simplify
from edgeport.models.heads import FREE, PIXELS, UNIT, Head
from edgeport.validate.parity.tensors import denormalise


class Yoloish(torch.nn.Module):
    """One (1, 4+nc, A) output: box pixels concatenated with sigmoid scores, as YOLOv8 exports."""

    def __init__(self, nc=2):
        super().__init__()
        self.box, self.cls = torch.nn.Conv2d(3, 4, 8, 8), torch.nn.Conv2d(3, nc, 8, 8)

    def forward(self, x):
        boxes = torch.relu(self.box(x)).flatten(2) * 100.0 + 50.0
        return torch.cat([boxes, torch.sigmoid(self.cls(x)).flatten(2)], 1)


def test_groups_far_apart_are_planned_and_close_ones_are_not():
    boxes_and_scores = np.concatenate([np.full((1, 4, 10), 300.0), np.full((1, 1, 10), 0.9)], 1).astype(np.float32)
    v8 = Head("yolov8", nc=1)
    assert group_scales([boxes_and_scores], v8, 320) == [[(1, 0, 4, 320.0)]]
    close = boxes_and_scores.copy()
    close[:, :4] = 0.9 * MAX_GROUP_RATIO / 2
    assert group_scales([close], v8, 320) == [[]]
    assert group_scales([np.zeros((1, 6, 4, 4), np.float32)], Head("pdet", nc=1, strides=(8,)), 320) == [[]]
    # an untrained head's scores (Ultralytics' prior: ~1e-4) are raised by a power of two, exactly
    assert group_factor(UNIT, 0.014, 320) == 2.0**-6 and group_factor(UNIT, 0.9, 320) == 1.0
    assert group_factor(PIXELS, 500.0, 320) == 320.0 and group_factor(FREE, 40.0, 320) == 64.0


def test_a_pose_heads_keypoints_are_planned_apart_from_their_visibility():
    """(1, 4+1+17*3, A): per keypoint x, y in pixels and a visibility score, interleaved."""
    out = np.zeros((1, 56, 10), np.float32)
    out[:, :4], out[:, 4] = 300.0, 0.9
    for k in range(17):
        out[:, 5 + 3 * k : 7 + 3 * k], out[:, 7 + 3 * k] = 200.0, 0.8
    (plan,) = group_scales([out], Head("yolov8-pose", nc=1, kpt_shape=(17, 3)), 320)
    assert plan[0] == (1, 0, 4, 320.0) and len(plan) == 18
    assert plan[1:] == [(1, 5 + 3 * k, 7 + 3 * k, 320.0) for k in range(17)]


def test_the_graph_divides_each_group_before_the_concat(tmp_path):
    torch.manual_seed(0)
    model = Yoloish().eval()
    src, dst = tmp_path / "m.onnx", tmp_path / "n.onnx"
    export_onnx(model, 64, src, output_names=["output0"], opset=17)
    simplify(src)  # as the pipeline does: static shapes for every tensor
    plan = [[(1, 0, 4, 64.0), (1, 4, 6, 0.5)]]
    assert normalise_onnx(src, dst, plan)
    import onnx

    nodes = onnx.load(str(dst)).graph.node
    concat = next(i for i, n in enumerate(nodes) if n.op_type == "Concat" and "output0" in n.output)
    assert sum(n.op_type == "Mul" and n.name.startswith("edgeport_int8_scale") for n in nodes[:concat]) == 2
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)  # the export is static: batch 1
    (ref,) = run_onnxruntime(src, x)
    (got,) = run_onnxruntime(dst, x)
    np.testing.assert_allclose(got[:, :4], ref[:, :4] / 64.0, rtol=1e-6)
    np.testing.assert_allclose(got[:, 4:], ref[:, 4:] / 0.5, rtol=1e-6)
    (back,) = denormalise([got], plan)
    np.testing.assert_allclose(back, ref, rtol=1e-6)


def test_a_group_that_straddles_two_concat_inputs_is_not_rewritten(tmp_path):
    src, dst = tmp_path / "m.onnx", tmp_path / "n.onnx"
    export_onnx(Yoloish().eval(), 64, src, output_names=["output0"], opset=17)
    simplify(src)
    assert not normalise_onnx(src, dst, [[(1, 0, 5, 64.0)]])  # channels 0-4 span the boxes and one score
    assert not dst.exists()


@pytest.mark.parametrize("shape", [(1, 4, 10)])
def test_restore_leaves_unplanned_outputs_alone(shape):
    y = np.ones(shape, np.float32)
    (same,) = denormalise([y], [[]])
    assert same is not y and np.array_equal(same, y)


class Posish(torch.nn.Module):
    """Ultralytics' pose export: cat([boxes, scores], 1), then keypoints made (B, K, 3, A) -- x, y
    in pixels beside a sigmoid visibility -- and reshaped to (B, K*3, A) before the last Concat."""

    def __init__(self, kpts=3):
        super().__init__()
        self.kpts = kpts
        self.box, self.cls, self.kpt = torch.nn.Conv2d(3, 4, 8, 8), torch.nn.Conv2d(3, 1, 8, 8), torch.nn.Conv2d(3, kpts * 3, 8, 8)

    def forward(self, x):
        det = torch.cat([torch.relu(self.box(x)).flatten(2) * 100.0, torch.sigmoid(self.cls(x)).flatten(2)], 1)
        k = self.kpt(x).flatten(2).view(1, self.kpts, 3, -1)
        kpts = torch.cat([k[:, :, :2] * 50.0 + 100.0, torch.sigmoid(k[:, :, 2:3])], 2).view(1, self.kpts * 3, -1)
        return torch.cat([det, kpts], 1)


def test_keypoints_are_scaled_before_the_reshape_that_interleaves_them(tmp_path):
    torch.manual_seed(0)
    model = Posish().eval()
    src, dst = tmp_path / "m.onnx", tmp_path / "n.onnx"
    export_onnx(model, 64, src, output_names=["output0"], opset=17)
    simplify(src)
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    (ref,) = run_onnxruntime(src, x)
    (plan,) = group_scales([ref], Head("yolov8-pose", nc=1, kpt_shape=(3, 3)), 64)
    assert plan and all(f == 64.0 for *_, f in plan)
    assert normalise_onnx(src, dst, [plan])
    (got,) = run_onnxruntime(dst, x)
    (back,) = denormalise([got], [plan])
    np.testing.assert_allclose(back, ref, rtol=1e-5, atol=1e-5)
    assert group_scales([got], Head("yolov8-pose", nc=1, kpt_shape=(3, 3)), 64) == [[]], "the groups now share a range"
    import onnx

    muls = [n for n in onnx.load(str(dst)).graph.node if n.name.startswith("edgeport_int8_scale")]
    assert len(muls) == 2, "boxes before the first Concat, keypoint x, y before the one the reshape reads"


def _tflite_head(fused: str = "NONE", *, kpts_out: bool = False) -> tuple[bytes, list[int]]:
    """A float32 TFLite head as litert-torch writes Ultralytics' pose output (``Posish``): boxes
    (1, 4, A) and a score (1, 1, A) beside keypoints -- x, y (1, K, 2, A) joined with a visibility
    (1, K, 1, A), then reshaped to (1, K*3, A) -- joined by one CONCATENATION along the channels
    (``fused``: its activation; ``kpts_out``: the joined keypoints are an output too)."""
    from edgeport.ops.tflite_graph import ACTIVATIONS, Graph

    from ..ops.test_lowering import finish

    g = Graph.empty()
    box, score = g.add_tensor("box", (1, 4, 10), "float32"), g.add_tensor("score", (1, 1, 10), "float32")
    xy, vis = g.add_tensor("xy", (1, 3, 2, 10), "float32"), g.add_tensor("vis", (1, 3, 1, 10), "float32")
    kpts, flat = g.add_tensor("kpts", (1, 3, 3, 10), "float32"), g.add_tensor("kpts_flat", (1, 9, 10), "float32")
    out = g.add_tensor("output0", (1, 14, 10), "float32")
    g.add(g.new_op("CONCATENATION", [xy, vis], [kpts], "ConcatenationOptions", axis=-2))
    g.add(g.new_op("RESHAPE", [kpts, g.constant("shape", np.array([1, 9, 10], np.int32))], [flat]))
    g.add(g.new_op("CONCATENATION", [box, score, flat], [out], "ConcatenationOptions", axis=1,
                   fusedActivationFunction=ACTIVATIONS[fused]))
    return finish(g, [box, score, xy, vis], [out, kpts] if kpts_out else [out]), [box, score, xy, vis]


def test_a_tflite_file_divides_each_group_before_the_concat(tmp_path):
    """litert-torch's line: the float32 file ai-edge-quantizer quantises gets the same division
    onnx2tf's ONNX graph gets, through the Concat and the Reshape, and parity restores it."""
    from edgeport.convert.converters.int8_groups import normalise_tflite
    from edgeport.ops.tflite_graph import Graph

    from ..ops.test_lowering import run

    model, _ = _tflite_head()
    src, dst = tmp_path / "m.tflite", tmp_path / "n.tflite"
    src.write_bytes(model)
    rng = np.random.default_rng(0)
    xs = [rng.random((1, 4, 10), dtype=np.float32) * 300, rng.random((1, 1, 10), dtype=np.float32),
          rng.random((1, 3, 2, 10), dtype=np.float32) * 200, rng.random((1, 3, 1, 10), dtype=np.float32)]
    (ref,) = run(model, xs, tmp_path, "ref")
    (plan,) = group_scales([ref], Head("yolov8-pose", nc=1, kpt_shape=(3, 3)), 64)
    assert plan[0] == (1, 0, 4, 64.0) and plan[1:] == [(1, 5 + 3 * k, 7 + 3 * k, 64.0) for k in range(3)]
    assert normalise_tflite(src, dst, [plan])
    g = Graph(dst.read_bytes())
    # the keypoints' x, y before their Concat (under the Reshape); the boxes before the last Concat
    assert [g.name(op) for op in g.ops] == ["MUL", "CONCATENATION", "RESHAPE", "MUL", "CONCATENATION"]
    assert g.tensor_name(g.sg.outputs[0]) == "output0"
    (got,) = run(dst.read_bytes(), xs, tmp_path, "got")
    np.testing.assert_allclose(got[:, :4], ref[:, :4] / 64.0, rtol=1e-6)
    np.testing.assert_array_equal(got[:, 4], ref[:, 4])  # the score, and each keypoint's visibility, untouched
    np.testing.assert_array_equal(got[:, 7::3], ref[:, 7::3])
    (back,) = denormalise([got], [plan])
    np.testing.assert_allclose(back, ref, rtol=1e-6)


KPTS = [(1, 5 + 3 * k, 7 + 3 * k, 64.0) for k in range(3)]


@pytest.mark.parametrize("plans, fused, kpts_out", [
    ([[(1, 0, 6, 64.0)]], "NONE", False),  # the first keypoint's x, without the rest
    ([[(1, 0, 4, 64.0)]], "RELU6", False),  # a Concat that clips is more than a join
    ([KPTS, []], "NONE", True),  # the keypoints joined are read by another (an output): it would read them divided
    ([[(1, 0, 4, 64.0)], [], []], "NONE", False),  # a plan for an output the file lacks
    ([[(1, 10, 15, 64.0)]], "NONE", False),  # channels past the output's 14
])
def test_a_tflite_group_out_of_reach_writes_nothing(tmp_path, plans, fused, kpts_out):
    from edgeport.convert.converters.int8_groups import normalise_tflite

    model, _ = _tflite_head(fused, kpts_out=kpts_out)
    src, dst = tmp_path / "m.tflite", tmp_path / "n.tflite"
    src.write_bytes(model)
    assert not normalise_tflite(src, dst, plans)
    assert not dst.exists()
    if kpts_out:  # the boxes alone are reached through a tensor nothing else reads
        assert normalise_tflite(src, dst, [[(1, 0, 4, 64.0)], []])
