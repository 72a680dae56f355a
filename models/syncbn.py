"""A SyncBatchNorm that runs on CPU (gloo), and the converter that picks the right one.

``torch.nn.SyncBatchNorm`` refuses CPU modules under DDP ("SyncBatchNorm layers only work
with GPU modules"). This one has the same state_dict keys (weight, bias, running_mean,
running_var, num_batches_tracked) and the same math:

- forward (training): per-channel sum and sum of squares and the element count are
  all-reduced in float64, so mean and biased variance are those of the global batch;
  the running variance is updated with the unbiased variance over the global count;
- backward: per-channel sums of ``dy`` and ``dy * x_hat`` are all-reduced, so the input
  gradient is the one BatchNorm on the whole batch would give; weight and bias gradients
  stay local, and DDP averages them like any other parameter's;
- eval, or no process group: plain ``F.batch_norm``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


def _world(group) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


class _SyncBNFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, group):
        c = x.shape[1]
        dims = [d for d in range(x.dim()) if d != 1]
        x64 = x.double()
        stats = torch.cat(
            [
                x64.sum(dim=dims),
                (x64 * x64).sum(dim=dims),
                torch.tensor([x.numel() // c], dtype=torch.float64),
            ]
        )
        dist.all_reduce(stats, group=group)
        count = stats[-1]
        mean = stats[:c] / count
        var = (stats[c : 2 * c] / count - mean * mean).clamp_min(0.0)
        invstd = torch.rsqrt(var + eps)
        shape = [1, c] + [1] * (x.dim() - 2)
        x_hat = ((x64 - mean.view(shape)) * invstd.view(shape)).to(x.dtype)
        y = x_hat
        if weight is not None:
            y = y * weight.view(shape) + bias.view(shape)
        ctx.save_for_backward(x_hat, weight, invstd.to(x.dtype))
        ctx.count = count.item()
        ctx.group = group
        ctx.mark_non_differentiable(mean, var)
        return y, mean.to(x.dtype), var.to(x.dtype), count.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_y, _gm, _gv, _gc):
        x_hat, weight, invstd = ctx.saved_tensors
        c = x_hat.shape[1]
        dims = [d for d in range(x_hat.dim()) if d != 1]
        shape = [1, c] + [1] * (x_hat.dim() - 2)
        grad_weight = (grad_y * x_hat).sum(dim=dims) if weight is not None else None
        grad_bias = grad_y.sum(dim=dims) if weight is not None else None
        g = grad_y * weight.view(shape) if weight is not None else grad_y
        sums = torch.cat([g.sum(dim=dims), (g * x_hat).sum(dim=dims)]).double()
        dist.all_reduce(sums, group=ctx.group)
        mean_g = (sums[:c] / ctx.count).to(g.dtype).view(shape)
        mean_gx = (sums[c:] / ctx.count).to(g.dtype).view(shape)
        grad_x = (g - mean_g - x_hat * mean_gx) * invstd.view(shape)
        return grad_x, grad_weight, grad_bias, None, None


class SyncBatchNorm(_BatchNorm):
    """Cross-process BatchNorm for any backend, CPU included. Drop-in for ``nn.SyncBatchNorm``."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, process_group=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or _world(self.process_group) == 1:
            return super().forward(x)
        y, mean, var, count = _SyncBNFunction.apply(x, self.weight, self.bias, self.eps, self.process_group)
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                momentum = (
                    1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                )
                unbiased = var * (count / (count - 1).clamp_min(1))
                self.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
                self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)
        return y


def convert_sync_batchnorm(module: nn.Module, device: str | torch.device = "cpu", process_group=None) -> nn.Module:
    """Replace every BatchNorm with a SyncBatchNorm: torch's on CUDA, this module's elsewhere."""
    if torch.device(device).type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    if isinstance(module, _BatchNorm) and not isinstance(module, (SyncBatchNorm, nn.SyncBatchNorm)):
        new = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats, process_group)
        new.load_state_dict(module.state_dict())
        new.train(module.training)
        for p_new, p_old in zip(new.parameters(), module.parameters()):
            p_new.requires_grad_(p_old.requires_grad)
        return new
    for name, child in module.named_children():
        module.add_module(name, convert_sync_batchnorm(child, device, process_group))
    return module
