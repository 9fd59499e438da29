"""Exercise ``accumulate``: the mistakes readers make are rejected, each named."""

import pytest

from exercise_cells import assert_rejected

ACCUMULATE = {
    "all-reducing every micro-batch": ("""
        def accumulate_step(ddp_model, micro_batches, loss_fn):
            for x, y in micro_batches:
                (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
        """, r"all-reduced 4 times in one step, once per micro-batch"),
    "loss not divided": ("""
        def accumulate_step(ddp_model, micro_batches, loss_fn):
            with ddp_model.no_sync():
                for x, y in micro_batches[:-1]:
                    loss_fn(ddp_model(x), y).backward()
            x, y = micro_batches[-1]
            loss_fn(ddp_model(x), y).backward()
        """, r"is 4 times the right one: each micro-batch's loss was not divided by the "
             r"number of micro-batches"),
    "every backward inside no_sync": ("""
        def accumulate_step(ddp_model, micro_batches, loss_fn):
            with ddp_model.no_sync():
                for x, y in micro_batches:
                    (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
        """, r"DDP never all-reduced.*outside ddp_model.no_sync\(\)"),
}


@pytest.mark.parametrize("kind", list(ACCUMULATE))
def test_a_wrong_solution_is_rejected_naming_the_mistake(kind):
    source, match = ACCUMULATE[kind]
    assert_rejected("accumulate", source, match)
