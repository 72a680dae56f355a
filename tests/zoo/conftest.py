"""The zoo's tests, longest first: `make test` runs them on two workers with ``--dist load``, which
keeps a short queue per worker and fills it as tests end, so the two end nearly together instead of
one running a long conversion alone at the end (longest-processing-time-first, roughly)."""

from __future__ import annotations

import pytest

# what a test costs, roughly, by what it converts (tests/zoo: measured with --durations on 2026-12-03)
_LONGEST_FIRST = (
    "test_zoo_litert.py::",  # litert-torch and onnx2tf's cross-check, then litert-torch for TFLite 1.13: 80-120 s
    "test_a_failing_quantised_file_is_repaired",  # two converts, each with its repair: 75-85 s
    "test_zoo_model_ends_as_documented",  # two converts: 30-90 s
    "test_uint8_of_a_trained_head_on_tflite_113",  # one convert each: 15-40 s
    "test_int8_of_a_trained_head_keeps_every_channel",
)
# refused before any converter runs: a few seconds
_REFUSED = ("[ssdlite320]", "[fcos_resnet50]", "[retinanet_resnet50]")


def _rank(item: pytest.Item) -> int:
    if item.nodeid.endswith(_REFUSED):
        return len(_LONGEST_FIRST)
    return next((i for i, part in enumerate(_LONGEST_FIRST) if part in item.nodeid), len(_LONGEST_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The zoo's tests sorted among the places they hold (the hook sees every test of the run:
    the others keep theirs)."""
    places = [i for i, item in enumerate(items) if item.nodeid.startswith("tests/zoo/")]
    for place, item in zip(places, sorted((items[i] for i in places), key=_rank)):  # stable within a rank
        items[place] = item
