"""Quoting an error message on a page: whole sentences, lines that fit the column, numbers
kept whole, and a failure when torch no longer says what the page claims."""

import pytest

from ddplab.screen import quoted

MESSAGE = ("RuntimeError: First sentence here. The claim starts in this one, and by\n"
           "making sure it goes on past a newline, it ends here. Then one more.")


def test_the_sentences_from_the_first_text_to_the_last_are_quoted_whole():
    text = quoted.sentences_holding(MESSAGE, "The claim starts", "it ends")
    # a newline inside a sentence is no sentence end (the cut at "and by" readers saw)
    assert text == ("... The claim starts in this one, and by making sure it goes on past a "
                    "newline, it ends here. ...")


def test_a_message_that_no_longer_holds_the_text_fails():
    with pytest.raises(AssertionError):
        quoted.sentences_holding(MESSAGE, "a sentence torch never wrote")


def test_lines_fit_the_column_and_numbers_stay_whole():
    wrapped = quoted.wrap("a difference of " + "1e-12 " * 30)
    assert max(len(line) for line in wrapped.splitlines()) <= quoted.COLUMNS
    assert all(word == "1e-12" for line in wrapped.splitlines()
               for word in line.split()[3 if line.startswith("a ") else 0:])


def test_a_recorded_message_says_where_it_was_recorded_then_quotes_it(capsys):
    quoted.DUPLICATE_GPU.show("NCCL error in", "Duplicate GPU detected")
    out = capsys.readouterr().out
    assert out.startswith("Recorded on one NVIDIA H200 (torch 2.11.0+cu130, NCCL 2.28.9,")
    assert "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60" \
        in " ".join(out.split())
    assert all(len(line) <= quoted.COLUMNS for line in out.splitlines())
