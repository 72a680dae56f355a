"""``modelcheck``: a pass's check of the model's outputs; ``rows_match``, a top-k tail's rows
compared as a set, ties at its cut included."""

import numpy as np
import pytest
import torch

from edgeport.convert.modelcheck import assert_same_outputs, rows_match
from edgeport.errors import PassCheckError

TOL = 1e-5


def _topk(scores: np.ndarray, boxes: np.ndarray, k: int) -> np.ndarray:
    """(1, k, 6): the k best rows, best first, as an end-to-end head returns them (box, score, class)."""
    order = np.argsort(-scores, kind="stable")[:k]
    return np.concatenate([boxes[order], scores[order, None], np.zeros((k, 1))], axis=1)[None].astype(np.float32)


def _anchors(n: int = 64, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.2, 0.9, n), rng.uniform(0, 320, (n, 4))


def test_the_same_rows_in_another_order_match():
    scores, boxes = _anchors()
    a = _topk(scores, boxes, 10)
    b = a[:, ::-1].copy()
    assert rows_match(a, b, TOL)
    b[0, 3, 0] += 1.0  # one box moved by a pixel: another result
    assert not rows_match(a, b, TOL)


def test_a_cut_between_tied_scores_keeps_either_row():
    """Two anchors tied at the k-th score: a rewrite that moves one by an ulp keeps the other,
    and the two results differ in that row only, a box far from the other's."""
    scores, boxes = _anchors()
    k = 10
    cut = np.sort(scores)[::-1][k - 1]
    other = int(np.argsort(-scores)[k])  # the first anchor left out
    scores[other] = cut  # tied with the last kept
    a = _topk(scores, boxes, k)
    moved = scores.copy()
    moved[other] += 1e-7  # now it is kept, and the tied one is not
    b = _topk(moved, boxes, k)
    assert not np.allclose(a, b)
    assert rows_match(a, b, TOL)


def test_rows_that_differ_above_the_cut_or_by_more_than_a_tie_do_not_match():
    scores, boxes = _anchors()
    k = 10
    a = _topk(scores, boxes, k)
    # the anchor left out gains enough to enter, far above the tolerance: another result
    other = int(np.argsort(-scores)[k])
    raised = scores.copy()
    raised[other] = np.sort(scores)[::-1][k - 1] + 0.05
    assert not rows_match(a, _topk(raised, boxes, k), TOL)
    # the best row replaced by another box of the same score: not at the cut
    b = a.copy()
    b[0, 0, :4] = boxes[other]
    assert not rows_match(a, b, TOL)


def test_rows_that_share_nothing_do_not_match_even_when_tied():
    """Every score equal, every box different: no row in common is no cut, whatever the scores."""
    _, boxes = _anchors()
    flat = np.full(64, 0.5)
    a = _topk(flat, boxes, 10)
    b = _topk(flat, boxes[::-1].copy(), 10)
    assert not rows_match(a, b, TOL)


def test_a_column_that_falls_with_the_score_by_chance_does_not_make_a_cut():
    """A dog (class 16) then two persons (class 0): the class column falls too. Two other persons
    at far lower scores are another result, though their class ties with the last row's."""
    a = np.array([[[10, 10, 50, 50, 0.8, 16], [60, 60, 90, 90, 0.7, 0], [100, 100, 140, 140, 0.6, 0]]], np.float32)
    b = a.copy()
    b[0, 1:, :4] += 200  # other boxes
    b[0, 1:, 4] = [0.3, 0.2]  # other scores
    assert not rows_match(a, b, TOL)


def test_ties_are_judged_on_the_scores_own_scale_not_the_boxes():
    """Scores in [0, 1] beside boxes in pixels: a tie is within the tolerance of the scores, so rows
    of scores 0.001 apart at the cut are not tied, however small that is beside 640 px."""
    rng = np.random.default_rng(1)
    boxes = rng.uniform(0, 640, (40, 4))
    scores = np.linspace(0.05, 0.001, 40)
    a = _topk(scores, boxes, 30)
    b = a.copy()
    b[0, -3:, :4] += 100  # the three lowest rows: other boxes ...
    b[0, -3:, 4] -= 0.001  # ... at scores 0.001 lower: not a tie at 1e-5 of the scores
    assert not rows_match(a, b, TOL)


class _Outputs(torch.nn.Module):
    """x's first channel, with ``where`` set to ``value``."""

    def __init__(self, where=(), value=float("nan")):
        super().__init__()
        self.where, self.value = where, value

    def forward(self, x):
        y = x[:, :1].clone()
        for idx in self.where:
            y[(slice(None), 0, *idx)] = self.value
        return y


def test_a_pass_that_makes_nan_fails_its_check_and_nan_that_stays_does_not():
    x = torch.rand(2, 3, 4, 4).numpy()
    with pytest.raises(PassCheckError, match="NaN or infinite in other places than before"):
        assert_same_outputs("p", _Outputs(), _Outputs([(0, 0)]), x, rel_tol=1e-3)  # its error was NaN: it passed
    with pytest.raises(PassCheckError, match="NaN or infinite"):
        assert_same_outputs("p", _Outputs([(0, 0)]), _Outputs([(1, 1)]), x, rel_tol=1e-3)  # moved
    with pytest.raises(PassCheckError, match="NaN or infinite"):
        assert_same_outputs("p", _Outputs([(0, 0)], float("inf")), _Outputs([(0, 0)], -float("inf")), x, rel_tol=1e-3)
    # a model whose outputs hold NaN where they did: its finite values judged as before
    assert assert_same_outputs("p", _Outputs([(0, 0)]), _Outputs([(0, 0)]), x, rel_tol=0.0) == 0.0
