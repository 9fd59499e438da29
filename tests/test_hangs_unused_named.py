"""Under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s level DDP's unused-parameter error names the
parameters; without it, it says how to get them (``unused_parameters.named``)."""

from ddplab.chapters.hangs import unused_parameters


def test_detail_names_the_unused_head():
    named = unused_parameters.named(world_size=2)
    assert named.startswith("Expected to have finished reduction")
    assert "Parameters which did not receive grad for rank 0: aux.bias, aux.weight" in named
    plain = unused_parameters.run(world_size=2, steps=2).error
    assert "Parameters which did not receive grad" not in plain
    assert "TORCH_DISTRIBUTED_DEBUG" in plain
