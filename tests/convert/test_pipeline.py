"""run_pipeline: passes in order, each on the value the one before returned; errors name the pass."""

from __future__ import annotations

import typing

import pytest

from edgeport.convert import base
from edgeport.convert.base import Pass, PassResult, run_pipeline
from edgeport.convert.pipeline import PIPELINE, VALIDATE
from edgeport.errors import BadInputError, PassCheckError

from .conftest import config


class Step(Pass):
    """Appends its name to a list it is given; ``fail`` raises in run, ``broken`` in check."""

    def __init__(self, name: str, *, fail: Exception | None = None, broken: bool = False):
        self.name, self.fail, self.broken = name, fail, broken

    def run(self, value, config) -> PassResult:
        if self.fail is not None:
            raise self.fail
        return PassResult((*((value,) if not isinstance(value, tuple) else value), self.name), changed=True, summary=self.name)

    def check(self, before, after, config) -> None:
        if self.broken:
            raise PassCheckError("promise broken")


def test_each_pass_gets_what_the_one_before_returned(tmp_path):
    cfg = config(tmp_path)
    value, records = run_pipeline(cfg, [Step("a"), Step("b"), Step("c")])
    assert value == (cfg, "a", "b", "c") and [r.name for r in records] == ["a", "b", "c"]


def test_an_error_names_the_pass_and_those_before_it(tmp_path):
    with pytest.raises(PassCheckError, match=r"b failed: ValueError: boom \(after a\)"):
        run_pipeline(config(tmp_path), [Step("a"), Step("b", fail=ValueError("boom")), Step("c")])
    with pytest.raises(PassCheckError, match=r"c: promise broken \(after a, b\)"):
        run_pipeline(config(tmp_path), [Step("a"), Step("b"), Step("c", broken=True)])
    with pytest.raises(BadInputError, match="^bad input$"):  # the user's input: its own words, nothing added
        run_pipeline(config(tmp_path), [Step("a"), Step("b", fail=BadInputError("bad input"))])


def _types(p: Pass) -> tuple[type, type]:
    """The declared (input, output) record types of a pass: ``Pass[In, Out]``."""
    (generic,) = [b for b in type(p).__orig_bases__ if typing.get_origin(b) is Pass]
    return typing.get_args(generic)


@pytest.mark.parametrize("passes", [PIPELINE, VALIDATE], ids=["convert", "validate"])
def test_the_phases_chain_by_their_declared_types(passes):
    """Reading the signatures is enough to follow a value from the command line to the report."""
    assert _types(passes[0])[0] is base.ConvertConfig
    for before, after in zip(passes, passes[1:]):
        returns, takes = _types(before)[1], _types(after)[0]
        assert returns is takes or returns in typing.get_args(takes), f"{before.name} returns {returns}, {after.name} takes {takes}"
    assert _types(passes[-1])[1] is base.Validated


def test_the_cross_check_runs_only_when_asked(tmp_path):
    from edgeport.convert.base import Converted
    from edgeport.convert.passes.cross_check_pass import CrossCheckPass

    value = Converted(exported=None, files={"float32": tmp_path / "model_float32.tflite"})
    result = CrossCheckPass().run(value, config(tmp_path))
    assert result.value is value and not result.changed and "--cross-check" in result.summary
    CrossCheckPass().check(value, result.value, config(tmp_path))
    with pytest.raises(PassCheckError, match="no comparison was recorded"):
        CrossCheckPass().check(value, value, config(tmp_path, cross_check=True))
