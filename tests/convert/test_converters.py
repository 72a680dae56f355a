"""The converter interface (convert/converters/base.py): every converter the CLI offers is one, and each
has another to cross-check with."""

from __future__ import annotations

from edgeport.cli import CONVERTERS as CHOICES
from edgeport.convert.converters.base import NAMES, Converter
from edgeport.convert.converters.registry import CONVERTERS, converter, other


def test_the_cli_offers_exactly_the_registered_converters():
    assert tuple(CONVERTERS) == NAMES == CHOICES


def test_each_converter_has_another_to_cross_check_with():
    for name, each in CONVERTERS.items():
        assert isinstance(each, Converter) and converter(name) is each and each.name == name
        assert other(name) is not each and other(other(name).name) is each
        assert each.version() and each.source and each.where()


def test_installing_the_converter_make_setup_installed_says_so():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "converters", "install", "onnx2tf"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "onnx2tf" in proc.stdout and "comes with edgeport's own environment" in proc.stdout, proc
