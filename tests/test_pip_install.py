"""scripts/pip_install.py: uv is configured as pip is (`make setup`)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("pip_install", ROOT / "scripts" / "pip_install.py")
pip_install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_install)


def _said(monkeypatch, stdout: str, returncode: int = 0) -> None:
    monkeypatch.setattr(pip_install.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, returncode, stdout=stdout, stderr=""))


def test_pips_settings_as_pip_takes_them(monkeypatch):
    _said(monkeypatch, "\n".join([
        "global.cert='/etc/ssl/certs/ca.crt'",  # not a setting uv takes from here
        "global.index-url='https://global.example/simple'",
        "install.index-url='https://install.example/simple'",  # the command's section wins over global
        "global.extra-index-url='file:///opt/a file:///opt/b'",  # several values, on one line
        "global.find-links='\\n/opt/wheels\\n/opt/more'",  # several values, on several lines (pip.conf)
        ":env:.find-links='/env/wheels'",  # PIP_FIND_LINKS wins over every file
        "download.constraint='/not/for/install.txt'",  # another command's section
        "global.constraint=\"/etc/it's.txt\"",
    ]))
    settings = pip_install.pip_settings()
    assert settings == {"index-url": ["https://install.example/simple"], "extra-index-url": ["file:///opt/a", "file:///opt/b"],
                        "find-links": ["/env/wheels"], "constraint": ["/etc/it's.txt"]}
    command = pip_install.uv_command(Path("uv"), settings, ["-e", "."])
    assert command[:4] == ["uv", "pip", "install", "-q"] and command[-2:] == ["-e", "."]
    assert command[command.index("--extra-index-url") + 1:][:3] == ["file:///opt/a", "--extra-index-url", "file:///opt/b"]
    assert "--no-config" in command and "unsafe-best-match" in command and "--no-index" not in command


def test_no_index_is_a_switch(monkeypatch):
    _said(monkeypatch, "global.no-index='true'\nglobal.find-links='/opt/wheels'")
    command = pip_install.uv_command(Path("uv"), pip_install.pip_settings(), ["x"])
    assert "--no-index" in command and command[command.index("--find-links") + 1] == "/opt/wheels"
    _said(monkeypatch, "global.no-index='false'")
    assert "--no-index" not in pip_install.uv_command(Path("uv"), pip_install.pip_settings(), ["x"])


def test_a_configuration_pip_cannot_say_means_pip_installs(monkeypatch):
    _said(monkeypatch, "", returncode=1)
    assert pip_install.pip_settings() is None
    _said(monkeypatch, "global.find-links=not a repr")
    assert pip_install.pip_settings() is None
