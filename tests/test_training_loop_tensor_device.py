"""A CPU tensor in a collective: refused by a group whose one backend serves CUDA tensors
(the shape of init_process_group("nccl")'s), all-reduced by a group with a CPU backend."""

import pytest

from ddplab.chapters.training_loop import tensor_device


def test_a_cpu_tensor_on_a_cuda_only_group_has_no_backend():
    result = tensor_device.run(world_size=2, group="cuda-only")
    assert result.error_per_rank == ["No backend type associated with device type cpu"] * 2
    assert result.mean_per_rank == [None, None]


def test_a_group_with_a_cpu_backend_all_reduces_the_mean():
    result = tensor_device.run(world_size=3, group="per-device")
    assert result.error_per_rank == [None] * 3
    assert result.mean_per_rank == [pytest.approx((0 + 1 + 2) / 3)] * 3  # ranks' own numbers


def test_an_unknown_group_is_a_value_error():
    with pytest.raises(ValueError, match="group"):
        tensor_device.run(group="nccl")
