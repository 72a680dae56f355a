"""``userfiles``: a user's file opened only when it is a plain file, and read no further than its bound."""

from __future__ import annotations

import json
import os

import pytest

from edgeport.jsonfile import read_json
from edgeport.userfiles import Refused, open_plain, read_bounded


def test_a_fifo_is_refused_at_once_and_a_device_too(tmp_path):
    os.mkfifo(tmp_path / "pipe")  # no writer: a blocking open would wait for ever
    with pytest.raises(Refused, match=r"is a FIFO \(a named pipe\), not a plain file"):
        open_plain(tmp_path / "pipe")
    with pytest.raises(Refused, match="is a device, not a plain file"):
        open_plain("/dev/null")


def test_a_folder_and_a_missing_file_are_the_callers_to_name(tmp_path):
    with pytest.raises(IsADirectoryError):
        open_plain(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_plain(tmp_path / "nope")


def test_a_link_to_a_plain_file_is_read_and_reads_stop_at_the_bound(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 10)
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read_bounded(tmp_path / "link", 10) == b"x" * 10
    with pytest.raises(Refused, match="is larger than 9 bytes"):
        read_bounded(tmp_path / "link", 9)


def test_json_objects_and_lists_are_counted_before_the_parse(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"a": [{}] * 9}))  # 11 objects and lists
    assert read_json(path, 1 << 20, containers=11) == {"a": [{}] * 9}
    with pytest.raises(Refused, match="holds 11 objects and lists .* more than 10,"):
        read_json(path, 1 << 20, containers=10)
    with pytest.raises(Refused, match="more than 10,"):
        read_json(path, 640)  # by default one per 64 bytes of the bound
