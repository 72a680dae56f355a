from __future__ import annotations

import math

import numpy as np
import pytest

from edgeport.validate.parity.compare import FLOAT32, INT8, Tolerance, compare_tensors, tensor_metrics


def test_identical_tensors():
    x = np.random.default_rng(0).normal(size=(2, 6, 4, 4)).astype(np.float32)
    m = tensor_metrics(x, x)
    assert m.max_abs == 0 and m.rmse == 0 and m.cosine == pytest.approx(1.0) and math.isinf(m.snr_db)
    assert compare_tensors("p3", x, x, FLOAT32).passed


def test_known_metrics():
    ref = np.array([3.0, 4.0], np.float32)
    got = np.array([3.0, 5.0], np.float32)
    m = tensor_metrics(ref, got)
    assert m.max_abs == 1.0 and m.mean_abs == 0.5 and m.rmse == pytest.approx(math.sqrt(0.5))
    assert m.cosine == pytest.approx((9 + 20) / (5 * math.sqrt(34)))
    assert m.snr_db == pytest.approx(10 * math.log10(25 / 1))
    assert m.ref_max_abs == 4.0 and m.max_abs_rel == 0.25


def test_failure_says_why_and_what_would_pass():
    ref = np.linspace(-1, 1, 100).astype(np.float32)
    got = ref + np.float32(0.01)
    c = compare_tensors("p4", ref, got, FLOAT32)
    assert not c.passed
    assert any("max_abs" in r for r in c.reasons)
    assert c.needed.max_abs_rel == pytest.approx(0.01, rel=1e-3)
    assert compare_tensors("p4", ref, got, Tolerance(max_abs_rel=c.needed.max_abs_rel, min_cosine=c.needed.min_cosine)).passed


def test_int8_tolerance_gates_cosine_only():
    ref = np.random.default_rng(1).normal(size=1000).astype(np.float32)
    noisy = ref + np.random.default_rng(2).normal(scale=0.05, size=1000).astype(np.float32)
    assert compare_tensors("p", ref, noisy, INT8).passed
    assert not compare_tensors("p", ref, -ref, INT8).passed


def test_non_finite_output_fails_and_shape_mismatch_raises():
    ref = np.ones(4, np.float32)
    got = np.array([1, 1, np.nan, 1], np.float32)
    assert not compare_tensors("p", ref, got, INT8).passed
    with pytest.raises(ValueError, match="shape mismatch"):
        tensor_metrics(ref, np.ones(5, np.float32))
    d = compare_tensors("p", ref, ref, FLOAT32).to_dict()
    assert {"max_abs", "mean_abs", "rmse", "cosine", "snr_db", "p99_abs", "passed", "needed"} <= set(d)


def test_a_varying_channel_that_collapses_fails_by_name_and_group():
    """One int8 scale over box pixels and a score: the score (and a keypoint visibility) round to a
    constant, while the output's overall cosine stays high."""
    from edgeport.validate.parity.compare import compare_channels, compare_tensors

    rng = np.random.default_rng(0)
    ref = np.concatenate([rng.uniform(0, 300, (4, 1, 50)), rng.uniform(0, 1, (4, 1, 50))], axis=1)  # boxes, score
    got = ref.copy()
    got[:, 1] = 0.0  # the score collapsed
    assert compare_tensors("y", ref, got, INT8).passed, "the whole output hides it"
    result = compare_channels("y", ref, got, 1, groups=(("boxes", (0,)), ("scores", (1,))))
    assert not result.passed and result.name == "y[channels]"
    assert result.reasons[0].startswith("channel 1 (scores) collapsed to the constant 0; PyTorch's varies")


def test_a_channel_that_barely_varies_is_not_held_to_int8s_resolution():
    """A class no object belongs to (scores 1e-4..1e-3 next to 0.9): under a tenth of its group's
    range, int8 does not promise its shape."""
    from edgeport.validate.parity.compare import compare_channels

    rng = np.random.default_rng(1)
    ref = np.stack([rng.uniform(0, 0.9, 100), rng.uniform(1e-4, 1e-3, 100)])[None]
    got = np.round(ref * 256) / 256
    result = compare_channels("scores", ref, got, 1, groups=(("scores", (0, 1)),))
    assert result.passed and result.metrics.cosine > 0.99


def test_top_k_rows_are_compared_as_a_set():
    from edgeport.validate.parity.compare import align_rows

    ref = np.array([[[1, 2, 3, 4, 0.5, 0], [5, 6, 7, 8, 0.5, 1], [0, 0, 1, 1, 0.1, 0]]], np.float32)
    got = ref[:, [1, 0, 2]] + 1e-6  # a tie between two scores, ordered the other way
    np.testing.assert_allclose(align_rows(ref, got), ref, atol=1e-5)
    assert compare_tensors("y", ref, align_rows(ref, got), FLOAT32).passed and not compare_tensors("y", ref, got, FLOAT32).passed


def test_a_dead_channel_fails_whatever_the_head():
    """A detector edgeport does not know (head ``raw``, no groups): box pixels 0..480 beside scores and
    an angle in 0..1. int8 with one scale over the output zeroes the score and angle channels while the
    output's cosine stays at 0.999; each channel is judged against channels of its own magnitude, so
    both fail by name."""
    from edgeport.validate.parity.compare import compare_channels, magnitude_groups

    rng = np.random.default_rng(3)
    ref = np.concatenate([rng.uniform(0, 480, (2, 4, 300)), rng.uniform(0, 1, (2, 2, 300))], axis=1)
    got = np.round(ref / 3.78) * 3.78  # one symmetric int8 scale over +-480: the 0..1 channels round to 0
    assert magnitude_groups(ref, 1) == [(4, 5), (0, 1, 2, 3)]
    assert compare_tensors("y", ref, got, INT8).passed and compare_tensors("y", ref, got, INT8).metrics.cosine > 0.999
    result = compare_channels("y", ref, got, 1)
    assert not result.passed, "a raw head hides no dead channel"
    assert [r.split(" collapsed")[0] for r in result.reasons] == ["channel 4", "channel 5"], result.reasons
    healthy = ref + rng.normal(0, 0.002, ref.shape)
    assert compare_channels("y", ref, healthy, 1).passed


def test_channel_groups_by_magnitude_keep_like_channels_together():
    from edgeport.validate.parity.compare import magnitude_groups

    ref = np.array([[1.0, 5.0, 9.0, 100.0, 800.0, 0.0]])[..., None].repeat(3, axis=2) * np.array([1, -1, 0.5])
    # a group starts at its smallest channel and takes those up to 10 times larger: 0 | 1, 5, 9 | 100, 800
    assert magnitude_groups(ref, 1) == [(5,), (0, 1, 2), (3, 4)]
    assert magnitude_groups(ref, 1, [3, 4]) == [(3, 4)]


def test_a_probability_no_head_decodes_is_held_value_by_value_in_a_quantised_file():
    """MTCNN's P-Net: a quantised file that puts 0.91 where PyTorch has 0.57 adds a face, though the
    map's cosine stays above 0.99; an output beyond [0, 1], or a head that decodes, is judged as before."""
    from edgeport.models.heads import Head
    from edgeport.validate.parity.compare import PROBABILITY_ERROR
    from edgeport.validate.parity.run import comparisons

    rng = np.random.default_rng(0)
    prob = rng.uniform(0, 0.3, (2, 2, 40, 40)).astype(np.float32)
    prob[0, 1, 5, 5] = 0.57
    flipped = prob.copy()
    flipped[0, 1, 5, 5] = 0.91
    (raw,) = [c for c in comparisons(["prob"], Head("raw"), [prob], [flipped], "int8") if c.name == "prob"]
    assert raw.tolerance.max_abs_rel * 0.57 == pytest.approx(PROBABILITY_ERROR) and not raw.passed and raw.metrics.cosine > 0.99
    (near,) = [c for c in comparisons(["prob"], Head("raw"), [prob], [prob + 0.04], "int8") if c.name == "prob"]
    assert near.passed
    (float_file,) = [c for c in comparisons(["prob"], Head("raw"), [prob], [flipped], "float32") if c.name == "prob"]
    assert float_file.tolerance.scale == 1.0  # a float file: 1e-4 of a probability's 1
    logits = prob * 10 - 5
    (beyond,) = [c for c in comparisons(["logits"], Head("raw"), [logits], [flipped * 10 - 5], "int8") if c.name == "logits"]
    assert beyond.tolerance == INT8 and beyond.passed


def test_a_float_files_probability_is_held_on_the_scale_of_one_whatever_its_values():
    """An untrained head's scores (1e-4): ONNX Runtime's sigmoid parts from PyTorch's by 5e-8 there,
    5e-4 of the values' own max, a rounding on a probability's scale of 1; a score off by 1e-3 fails."""
    from edgeport.models.heads import Head
    from edgeport.validate.parity.run import comparisons

    scores = np.full((1, 4, 50), 1.5e-4, np.float32)
    (near,) = comparisons(["scores"], Head("raw"), [scores], [scores + 5e-8], "onnx")
    assert near.passed and near.metrics.max_abs_rel > FLOAT32.max_abs_rel
    # and the gate, reading it back, agrees: its scale is the output's own, a probability's 1 at most
    from edgeport.validate.parity.result import own_tolerance_failure

    written = near.to_dict()
    assert written["tolerance"]["scale"] == 1.0 and own_tolerance_failure(written, {"max_abs_rel": 1e-4, "min_cosine": 0.99999}) is None
    assert own_tolerance_failure({**written, "tolerance": {"max_abs_rel": 1e-4, "min_cosine": 0.99999}}) is not None
    (far,) = comparisons(["scores"], Head("raw"), [scores], [scores + 1e-3], "float32")
    assert not far.passed
    logits = scores * 1e4 - 3.0  # beyond [0, 1]: held to its own max, as before
    (plain,) = comparisons(["logits"], Head("raw"), [logits], [logits + 5e-3], "float32")
    assert plain.tolerance == FLOAT32 and not plain.passed


def test_float32s_own_error_lets_a_float_row_off_by_no_more_than_a_report_may_hold():
    """Where float64 does not settle what float32 computes (RT-DETR's query top-k among ties), float32's
    own error is most of the output: a float row is held to at most 1e-3 of the output's largest value
    there (what the report's reader allows), so the report it writes reads back."""
    from edgeport.models.heads import Head
    from edgeport.validate.parity.result import FLOAT32_ERROR_BOUND, ResultRow
    from edgeport.validate.parity.run import comparisons

    ref = np.random.default_rng(1).uniform(0, 50, (1, 300, 6)).astype(np.float32)
    got = ref.copy()
    got[0, 7] += 20.0  # another query kept
    small, large = np.full(ref.shape, 1e-6), np.abs(got - ref) + 1e-6
    (held,) = comparisons(["y"], Head("raw"), [ref], [got], "float32", errors=[small])
    (capped,) = comparisons(["y"], Head("raw"), [ref], [got], "float32", errors=[large])
    assert held.tolerance.float32_error == pytest.approx(2e-6) and not held.passed
    assert capped.tolerance.float32_error == FLOAT32_ERROR_BOUND * float(np.abs(ref).max()) and not capped.passed
    row = ResultRow("float32", "tflite", False, outputs=(capped.to_dict(),))
    assert ResultRow.from_dict(row.to_dict(), "row").outputs[0]["tolerance"]["float32_error"] == capped.tolerance.float32_error
