"""``tflite_file.recorded_ranges`` and ``set_ranges``: which tensors of a calibrated model carry a
minimum and a maximum, and what they are; those set in place."""

import numpy as np
import pytest

from edgeport.ops.tflite_file import graph_outputs, recorded_ranges, set_ranges, unpack

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


def test_the_recorded_ranges_are_those_with_a_minimum_and_a_maximum():
    g = fc_model()
    x, y = g.sg.inputs[0], g.sg.outputs[0]
    assert recorded_ranges(_calibrated({0: (-1.0, 2.0), 1: (0.0, 5.0)})) == {x: (-1.0, 2.0), y: (0.0, 5.0)}
    assert list(recorded_ranges(_calibrated({0: (-1.0, 2.0), 1: (0.0, 5.0)}))) == sorted([x, y]), "in the tensors' order"
    assert recorded_ranges(_calibrated({1: (0.0, 5.0)})) == {y: (0.0, 5.0)}
    assert recorded_ranges(g.to_bytes()) == {}, "no statistics: nothing recorded"


def test_ranges_are_set_in_place_and_every_other_byte_kept():
    mine = _calibrated({0: (-1.0, 2.0), 1: (0.0, 5.0)})
    x, y = recorded_ranges(mine)  # (in order)
    got = set_ranges(mine, {y: (0.25, 7.5)})
    assert len(got) == len(mine) and got != mine
    ranges = _ranges(got)
    assert ranges[y] == (0.25, 7.5) and ranges[x] == (-1.0, 2.0), ranges
    changed = [k for k, (p, q) in enumerate(zip(mine, got)) if p != q]
    assert len(changed) <= 8, "only the bytes of the two values set (4 each)"
    assert set_ranges(mine, {x: (-1.0, 2.0)}) == mine, "the same values: the same bytes"
    assert np.float32(_ranges(set_ranges(mine, {x: (-0.1, 0.1)}))[x][0]) == np.float32(-0.1), "stored as float32"


def test_a_tensor_without_statistics_is_not_given_a_range():
    mine = _calibrated({1: (0.0, 5.0)})
    with pytest.raises(ValueError, match="carries no calibration statistics"):
        set_ranges(mine, {fc_model().sg.inputs[0]: (-1.0, 1.0)})
    with pytest.raises(ValueError, match="carries no calibration statistics"):
        set_ranges(mine, {10_000: (-1.0, 1.0)})


def test_graph_outputs_are_read_without_unpacking():
    g = fc_model()
    assert graph_outputs(g.to_bytes()) == [int(t) for t in g.sg.outputs]
