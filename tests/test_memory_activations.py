"""Activation bytes of the memory chapter's MLP blocks, against a count worked out by hand:
each block keeps its input (width floats a row), GELU's input and the second layer's input
(4 widths each); checkpointing keeps only the checkpointed blocks' inputs; the gradients do
not change."""

import pytest

from ddplab.chapters.memory import activations

ROWS, WIDTH, DEPTH = 1024, 128, 4


def test_activation_bytes_are_nine_widths_a_row_per_block_and_checkpointing_keeps_inputs():
    result = activations.run(rows=ROWS, width=WIDTH, depth=DEPTH, segments=DEPTH)
    per_block = ROWS * 9 * WIDTH * 4  # fp32: input, GELU's input, second layer's input
    # the forward's output and the loss add one width a row
    assert result.bytes_by_way["fp32"] == pytest.approx(DEPTH * per_block, rel=0.1)
    # DEPTH - 1 checkpointed blocks keep their input; the last runs plainly
    kept = (DEPTH - 1) * ROWS * WIDTH * 4 + per_block
    assert result.bytes_by_way["checkpointed"] == pytest.approx(kept, rel=0.15)
    # bf16 halves the activations (plus bf16 copies of the weights): between a third and 2/3
    assert 0.33 < result.bytes_by_way["bf16 autocast"] / result.bytes_by_way["fp32"] < 0.67
    assert result.max_grad_diff_checkpointed == 0.0  # recomputation gives the same gradient
    assert result.parameter_bytes == DEPTH * (2 * 4 * WIDTH * WIDTH + 5 * WIDTH) * 4


@pytest.mark.parametrize("params", [{"depth": 1}, {"segments": 5}, {"rows": 0}])
def test_bad_input_is_a_value_error(params):
    with pytest.raises(ValueError):
        activations.run(**params)
