"""With ``TORCH_DISTRIBUTED_DEBUG=INFO`` in the ranks' environment before they start, DDP's
unused-parameter error names the parameters; without it, it says how to get them
(``unused_parameters.under_debug_level``)."""

from ddplab.chapters.hangs import unused_parameters


def test_info_in_the_environment_names_the_unused_head():
    ranks = unused_parameters.under_debug_level("INFO", world_size=2)
    assert [r.returncode for r in ranks] == [1, 1]
    for rank, done in enumerate(ranks):
        assert unused_parameters.lines_holding(done.stderr, "Parameters which did not") == [
            f"[rank{rank}]: Parameters which did not receive grad for rank {rank}: "
            "aux.bias, aux.weight"]
    plain = unused_parameters.run(world_size=2, steps=2).error
    assert "Parameters which did not receive grad" not in plain
    assert "TORCH_DISTRIBUTED_DEBUG" in plain
