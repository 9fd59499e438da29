"""``common.threads.one_thread``: one intra-op thread inside, torch's own number after."""

import pytest
import torch

from ddplab.common.threads import one_thread


def test_one_thread_inside_and_the_number_given_back_after_even_on_an_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # a number one_thread must change, so the check can fail
    try:
        with one_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(KeyError), one_thread():
            raise KeyError("inside")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
