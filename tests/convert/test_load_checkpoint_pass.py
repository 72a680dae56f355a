from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from edgeport.checkpoints import find_weights, sniff, torch_load
from edgeport.errors import CheckpointError


@pytest.fixture
def sd(pdet_n):
    return pdet_n.state_dict()


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.mkdir(), "is not a file"),
        (lambda p: p.write_bytes(b""), "is empty"),
        (lambda p: p.write_bytes(os.urandom(4096).replace(b"\x80", b"\x81").replace(b"PK", b"QK")), "not a PyTorch checkpoint"),
        (lambda p: p.write_bytes(b"\x08\x07\x12\x07pytorch" + os.urandom(64)), "ONNX"),
        (lambda p: p.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64)), "TFLite"),
        (lambda p: p.write_bytes(pickle.dumps({"a": 1}, protocol=2)), "plain pickle"),
    ],
    ids=["missing", "directory", "empty", "random", "onnx", "tflite", "plain-pickle"],
)
def test_sniff_rejects_non_checkpoints(tmp_path, make, needle):
    path = tmp_path / "model.pt"
    make(path)
    with pytest.raises(CheckpointError, match=needle):
        sniff(path)


def test_truncated_checkpoint_is_reported(tmp_path, sd):
    full = tmp_path / "full.pt"
    torch.save(sd, full)
    cut = tmp_path / "cut.pt"
    data = full.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        torch_load(cut, trust=False)


def test_zip_without_pickle_is_not_a_checkpoint(tmp_path):
    import zipfile

    path = tmp_path / "x.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(CheckpointError, match="no data.pkl"):
        sniff(path)


def test_legacy_serialization_loads(tmp_path, sd):
    path = tmp_path / "legacy.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=False)
    assert sniff(path) == "legacy"
    loaded = torch_load(path, trust=False)
    assert set(loaded) == set(sd)


@pytest.mark.parametrize("key", ["model", "state_dict", "model_state_dict", "ema"])
def test_weights_found_under_known_keys(sd, key):
    layout, found, module, arch, _ = find_weights({key: sd, "epoch": 3, "optimizer": {"state": {}}})
    assert found is sd or found == sd
    assert module is None and arch is None
    assert key in layout


def test_raw_state_dict(sd):
    layout, found, module, _, _ = find_weights(sd)
    assert layout == "state_dict" and len(found) == len(sd) and module is None


def test_ema_preferred_over_model(sd):
    other = {k: v + 1 if v.is_floating_point() else v for k, v in sd.items()}
    _, found, _, _, _ = find_weights({"model": other, "ema": sd})
    assert all(torch.equal(found[k], sd[k]) for k in sd)


def test_trainer_checkpoint_carries_arch_and_config(sd):
    layout, found, _, arch, config = find_weights({"arch": "pdet-n", "config": {"num_classes": 1}, "model": sd})
    assert layout == "edgeport trainer checkpoint" and arch == "pdet-n" and config == {"num_classes": 1}


def test_dict_without_weights_lists_its_keys():
    with pytest.raises(CheckpointError, match=r"keys: epoch, lr"):
        find_weights({"epoch": 1, "lr": 0.1})


def test_non_dict_content_rejected():
    with pytest.raises(CheckpointError, match="holds a list"):
        find_weights([1, 2, 3])


def test_pickled_module_needs_trust(tmp_path, pdet_n):
    path = tmp_path / "full.pt"
    torch.save(pdet_n, path)
    with pytest.raises(CheckpointError, match="--trust-checkpoint") as info:
        torch_load(path, trust=False)
    assert "pickled objects" in str(info.value) and "PDet" in str(info.value)
    obj = torch_load(path, trust=True)
    layout, sd, module, _, _ = find_weights(obj)
    assert layout == "pickled module" and isinstance(module, torch.nn.Module) and sd is None


class _Payload:
    """Unpickling this runs a command that creates a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_untrusted_payload_is_never_executed(tmp_path):
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    torch.save({"model": _Payload(marker)}, path)
    with pytest.raises(CheckpointError, match="--trust-checkpoint") as info:
        torch_load(path, trust=False)
    assert "system" in str(info.value)
    assert not marker.exists(), "the pickle payload ran during a safe load"


def test_a_training_scripts_options_load_safely_and_carry_nothing_that_runs(tmp_path, sd):
    import argparse

    path = tmp_path / "ref.pt"  # as torchvision's references/detection/train.py saves it
    torch.save({"model": sd, "optimizer": {"state": {}}, "args": argparse.Namespace(lr=0.01, epochs=26), "epoch": 25}, path)
    loaded = torch_load(path, trust=False)
    assert loaded["args"].lr == 0.01 and find_weights(loaded)[0] == "dict['model']"
    if hasattr(torch.serialization, "safe_globals"):  # torch 2.5+: allowed for edgeport's load alone, not the process's
        assert argparse.Namespace not in torch.serialization.get_safe_globals()
    marker = tmp_path / "PWNED"
    torch.save({"model": sd, "args": argparse.Namespace(hook=_Payload(marker))}, path)
    with pytest.raises(CheckpointError, match="--trust-checkpoint"):
        torch_load(path, trust=False)
    assert not marker.exists(), "what the options hold is read as strictly as the rest"
