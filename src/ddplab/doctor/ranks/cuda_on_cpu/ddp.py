"""DDP's GPU arguments and SyncBatchNorm on CPU ranks.

``DistributedDataParallel(device_ids=, output_device=)`` drops the GPU index for a module whose
parameters are on the CPU. ``SyncBatchNorm`` refuses CPU inputs in torch 2.13
(``nn/modules/batchnorm.py``: "SyncBatchNorm expected input tensor to be on GPU"), its kernels
(``batch_norm_stats``) have no CPU version, and DDP refuses it in a CPU module
(``_passing_sync_batchnorm_handle``): for a module and inputs the script put on ``cuda``, the
statistics (sums, sums of squares, counts) are all-reduced over gloo with autograd, as torch
all-gathers them on GPUs, and DDP's refusal is skipped; the all-reduce is recorded as
SyncBatchNorm's collective. A CPU script's SyncBatchNorm is left to torch's refusal (the error
index explains it).
"""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching
from ddplab.doctor.ranks.cuda_on_cpu.marks import marked, note
from ddplab.doctor.ranks.watch import ddp_collectives


def install() -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    def make_init(real):
        def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
            if (device_ids or output_device is not None) and all(
                    p.device.type == "cpu" for p in module.parameters()):
                note("DistributedDataParallel(device_ids=...)")
                device_ids, output_device = None, None
            return real(self, module, device_ids, output_device, *args, **kwargs)
        return __init__

    def make_sync_check(real):
        def _passing_sync_batchnorm_handle(self, module):
            if any(marked(p) for p in module.parameters()):
                return None  # the script's GPU module: its SyncBatchNorm runs over gloo
            return real(self, module)
        return _passing_sync_batchnorm_handle

    def make_sync_forward(real):
        def forward(self, input):
            import torch.distributed as dist

            if (self.training and marked(input) and dist.is_initialized()
                    and dist.get_world_size(self.process_group or dist.group.WORLD) > 1):
                note("SyncBatchNorm (statistics all-reduced over gloo)")
                return _synced_batch_norm(self, input)
            return real(self, input)
        return forward

    patching.wrap(DistributedDataParallel, "__init__", make_init, "cuda")
    patching.wrap(DistributedDataParallel, "_passing_sync_batchnorm_handle", make_sync_check,
                  "cuda")
    patching.wrap(torch.nn.SyncBatchNorm, "forward", make_sync_forward, "cuda")


def _synced_batch_norm(bn, input):
    """``SyncBatchNorm``'s training forward on the CPU: every rank's sums, sums of squares
    and counts, all-reduced with autograd (the backward all-reduces their gradients)."""
    import torch
    import torch.distributed as dist

    factor = 0.0 if bn.momentum is None else bn.momentum
    if bn.track_running_stats and bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(1)
        if bn.momentum is None:
            factor = 1.0 / float(bn.num_batches_tracked)
    channels, dims = input.shape[1], [0, *range(2, input.dim())]
    x = input.float()
    local = torch.cat([x.sum(dims), (x * x).sum(dims),
                       x.new_tensor([x.numel() // channels])])
    group = bn.process_group or dist.group.WORLD
    # recorded as the collective a GPU's SyncBatchNorm makes: a rank that runs it alone
    # (a forward in training mode on rank 0 only) is named by it
    ddp_collectives.note("all_reduce", records.DdpCall.SYNC_BATCHNORM, group, [local])
    total = _AllReduceSum.apply(local, group)
    count = total[-1]
    mean = total[:channels] / count
    var = total[channels:2 * channels] / count - mean * mean
    if bn.track_running_stats and bn.running_mean is not None:
        with torch.no_grad():
            bn.running_mean.mul_(1 - factor).add_(mean.detach() * factor)
            unbiased = var.detach() * count / max(float(count) - 1, 1.0)
            bn.running_var.mul_(1 - factor).add_(unbiased * factor)
    shape = (1, channels) + (1,) * (input.dim() - 2)
    out = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + bn.eps)
    if bn.weight is not None:
        out = out * bn.weight.view(shape) + bn.bias.view(shape)
    return out.to(input.dtype)


def _all_reduce_class():
    import torch

    class AllReduceSum(torch.autograd.Function):
        """A sum over the group; its gradient is the sum of every rank's gradient."""

        @staticmethod
        def forward(ctx, tensor, group):
            import torch.distributed as dist

            ctx.group = group
            out = tensor.clone()
            patching.original(dist, "all_reduce")(out, group=group)
            return out

        @staticmethod
        def backward(ctx, grad):
            import torch.distributed as dist

            grad = grad.clone()
            patching.original(dist, "all_reduce")(grad, group=ctx.group)
            return grad, None

    return AllReduceSum


class _Lazy:
    def __init__(self, make):
        self.make, self.made = make, None

    def apply(self, *args):
        if self.made is None:
            self.made = self.make()
        return self.made.apply(*args)


_AllReduceSum = _Lazy(_all_reduce_class)
