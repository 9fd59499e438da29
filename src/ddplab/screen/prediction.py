"""Predict, then run: an input for the reader's guess, and the run's number beside it.

    guess = prediction.ask("How many samples will rank 3 see?")   # a cell: the question
    print(prediction.reveal(guess, result.samples_per_rank, "rank 3 sees"))  # after the run

The guess has a default, so a lab run top to bottom (nbval, a book build) needs no click; a
reader types a number and runs the next cell again.
"""

from __future__ import annotations

import math

import ipywidgets


def ask(question: str, default: float = 0) -> ipywidgets.VBox:
    """The question and a number box for the prediction; ``.value`` is the guess."""
    box = ipywidgets.FloatText(value=default, description="prediction:",
                               layout=ipywidgets.Layout(width="16em"))
    panel = ipywidgets.VBox([ipywidgets.HTML(f"<b>Predict:</b> {question}"), box])
    panel.box = box
    return panel


def guess_of(guess) -> float:
    """The number in ``guess``: a panel from :func:`ask`, a widget, or a number."""
    if hasattr(guess, "box"):
        return guess.box.value
    return getattr(guess, "value", guess)


def reveal(guess, actual: float, what: str, rel_tol: float = 0.02) -> str:
    """The run's number and whether the guess was right (within ``rel_tol``)."""
    value = guess_of(guess)
    right = math.isclose(value, actual, rel_tol=rel_tol, abs_tol=1e-9)
    verdict = "right" if right else "not this time"
    return f"{what}: {actual:g}. You predicted {value:g}: {verdict}."
