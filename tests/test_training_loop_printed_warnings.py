"""The warnings DDP and torchrun print: one real torchrun run on CPU makes each, with the text
the error index quotes, and the fix of the strides warning silences it."""

from ddplab.chapters.training_loop import printed_warnings


def test_one_torchrun_run_prints_each_warning_as_quoted():
    warned = printed_warnings.run()
    assert warned.returncode != 0 and warned.child_failed  # rank 1 raised
    assert printed_warnings.TEXTS["unused"] in warned.first("unused")
    assert len(warned.lines["unused"]) == 2  # once per rank
    assert printed_warnings.TEXTS["strides"] in warned.first("strides")
    assert warned.fixed_warnings == 0
    assert warned.omp_message == printed_warnings.TEXTS["omp"]
    assert warned.first("sigterm").endswith("closing signal SIGTERM")
    assert set(printed_warnings.LABELS) == set(printed_warnings.TEXTS)


def test_quotes_of_warnings_not_run_here_are_in_torchs_source():
    assert printed_warnings.in_torch_source(printed_warnings.TEXTS["barrier"],
                                            "distributed/distributed_c10d.py")
    assert not printed_warnings.in_torch_source(printed_warnings.TEXTS["barrier"] + "!",
                                                "distributed/distributed_c10d.py")
