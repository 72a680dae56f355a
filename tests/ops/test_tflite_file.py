"""``tflite_file.widen_ranges``: a calibrated model's minima and maxima widened to another's, in place."""

import numpy as np
import pytest

from edgeport.ops.tflite_file import unpack, widen_ranges

from ..conftest import fc_model


def _calibrated(ranges: dict[int, tuple[float, float]]) -> bytes:
    """x[1,4] -> FULLY_CONNECTED -> y[1,3], as TensorFlow's calibrator leaves it: a minimum and a
    maximum on the tensors named in ``ranges``."""
    g = fc_model()
    x, y = g.sg.inputs[0], g.sg.outputs[0]
    for i, (low, high) in ranges.items():
        q = g.schema.QuantizationParametersT()
        q.min, q.max = [low], [high]
        g.sg.tensors[(x, y)[i]].quantization = q
    return g.to_bytes()


def _ranges(data: bytes) -> list:
    return [None if t.quantization is None or t.quantization.min is None else (float(t.quantization.min[0]), float(t.quantization.max[0]))
            for t in unpack(data).subgraphs[0].tensors]


def test_ranges_widen_to_the_other_models_in_place():
    mine = _calibrated({0: (-1.0, 2.0), 1: (0.0, 5.0)})
    theirs = _calibrated({0: (-3.0, 1.0), 1: (0.5, 7.5)})
    widened = widen_ranges(mine, theirs)
    assert len(widened) == len(mine) and widened != mine
    got = _ranges(widened)
    assert (-3.0, 2.0) in got and (0.0, 7.5) in got, got
    assert widen_ranges(mine, mine) == mine, "nothing to widen: every byte kept"
    changed = [k for k, (p, q) in enumerate(zip(mine, widened)) if p != q]
    assert len(changed) <= 8, "only the bytes of the two values that widened (4 each)"


def test_a_tie_keeps_the_first_seen_sign_of_zero():
    mine, theirs = _calibrated({0: (0.0, 1.0)}), _calibrated({0: (-0.0, 1.0)})
    low = [r for r in _ranges(widen_ranges(mine, theirs)) if r is not None][0][0]
    assert low == 0.0 and not np.signbit(low), "one calibrator keeps the first of two equal minima"


def test_models_with_statistics_on_other_tensors_do_not_widen():
    with pytest.raises(ValueError, match="differ in kind"):
        widen_ranges(_calibrated({0: (-1.0, 1.0)}), _calibrated({1: (-1.0, 1.0)}))
