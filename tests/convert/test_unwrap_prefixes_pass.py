from __future__ import annotations

import pytest
import torch

from edgeport.checkpoints import strip_state_dict, unwrap_module
from edgeport.convert.passes.unwrap_prefixes_pass import UnwrapPrefixesPass
from edgeport.errors import CheckpointError, PassCheckError

from .conftest import checkpoint_record, config


@pytest.mark.parametrize(
    "prefix",
    ["", "module.", "_orig_mod.", "module._orig_mod.", "_orig_mod.module.", "module.module.", "module._orig_mod.module."],
)
def test_prefix_variants_strip_to_model_keys(pdet_n, prefix):
    sd = pdet_n.state_dict()
    wrapped = {prefix + k: v for k, v in sd.items()}
    out, renamed = strip_state_dict(wrapped)
    assert list(out) == list(sd)
    assert renamed == (len(sd) if prefix else 0)


def test_inner_compiled_submodule_prefix_is_removed():
    sd = {"backbone._orig_mod.conv.weight": torch.zeros(1), "head.bias": torch.zeros(1)}
    out, _ = strip_state_dict({"module." + k: v for k, v in sd.items()})
    assert list(out) == ["backbone.conv.weight", "head.bias"]


def test_a_child_named_module_keeps_its_name():
    # not every key starts with module.: this is the model's own child, not DDP
    sd = {"module.weight": torch.zeros(1), "other.weight": torch.zeros(1)}
    out, renamed = strip_state_dict(sd)
    assert list(out) == ["module.weight", "other.weight"] and renamed == 0


def test_colliding_keys_are_an_error():
    with pytest.raises(CheckpointError, match="same name"):
        strip_state_dict({"module._orig_mod.a": torch.zeros(1), "module.a": torch.zeros(1)})


@pytest.mark.slow  # importing torch.compile's machinery: 1.6 s
def test_compiled_module_object_is_unwrapped(pdet_n):
    compiled = torch.compile(pdet_n)  # wrapping only: nothing compiles until it is called
    module, peeled = unwrap_module(compiled)
    assert module is pdet_n and peeled == ["OptimizedModule"]


def test_ddp_module_object_is_unwrapped(pdet_n, tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(pdet_n)
        module, peeled = unwrap_module(torch.compile(ddp))
        assert module is pdet_n and peeled == ["OptimizedModule", "DistributedDataParallel"]
    finally:
        dist.destroy_process_group()


def test_pass_reports_change_and_check_catches_leftovers(pdet_n, tmp_path):
    ckpt = checkpoint_record(tmp_path, state_dict={"module." + k: v for k, v in pdet_n.state_dict().items()})
    cfg = config(tmp_path)
    p = UnwrapPrefixesPass()
    result = p.run(ckpt, cfg)
    assert result.changed and not any(k.startswith("module.") for k in result.value.state_dict)
    p.check(ckpt, result.value, cfg)
    with pytest.raises(PassCheckError, match="prefixes remain"):
        p.check(ckpt, ckpt, cfg)
