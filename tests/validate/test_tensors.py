from __future__ import annotations

import numpy as np
import pytest

from edgeport.validate.parity.tensors import dequantize, match_outputs, nchw_to_nhwc, nhwc_to_nchw, quantize


def test_layout_roundtrip():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    y = nchw_to_nhwc(x)
    assert y.shape == (2, 4, 5, 3) and y[1, 2, 3, 0] == x[1, 0, 2, 3]
    np.testing.assert_array_equal(nhwc_to_nchw(y), x)


def test_quantize_rounds_half_to_even_and_saturates():
    q = quantize(np.array([0.5, 1.5, -0.5, 1000.0, -1000.0]), 1.0, 0, np.int8)
    assert q.tolist() == [0, 2, 0, 127, -128]
    x = np.linspace(-1, 1, 101).astype(np.float32)
    back = dequantize(quantize(x, 1 / 127, 0, np.int8), 1 / 127, 0)
    assert np.abs(back - x).max() <= 0.5 / 127 + 1e-6
    # a zero point shifts the representable range: values past it saturate
    assert dequantize(quantize(np.array([1.0]), 1 / 127, 3, np.int8), 1 / 127, 3)[0] < 0.98


def test_outputs_matched_by_shape_whatever_their_order():
    expected = [(1, 6, 20, 20), (1, 6, 10, 10), (1, 6, 5, 5)]
    got = [(1, 5, 5, 6), (1, 20, 20, 6), (1, 10, 10, 6)]
    assert match_outputs(expected, got) == [(1, True), (2, True), (0, True)]
    with pytest.raises(ValueError, match="no output of shape"):
        match_outputs(expected, got[:2])


def test_ambiguous_outputs_raise_instead_of_pairing_by_position():
    from edgeport.validate.parity.tensors import AmbiguousOutputs

    with pytest.raises(AmbiguousOutputs, match=r"matches converted outputs \[0, 1\]"):
        match_outputs([(1, 6, 8, 8), (1, 6, 8, 8)], [(1, 8, 8, 6), (1, 8, 8, 6)])
    # an NCHW output that an NHWC one could also be (C == W == H) is ambiguous too
    with pytest.raises(AmbiguousOutputs):
        match_outputs([(1, 4, 4, 4)], [(1, 4, 4, 4), (1, 4, 4, 4)])
    assert match_outputs([(1, 4, 4, 4)], [(1, 4, 4, 4)]) == [(0, True)]
