"""An error message quoted on a page: the whole sentences that hold the text a page claims,
wrapped to the page's column, never cut mid-sentence or mid-number.

A page's output column holds about 100 characters at 1280 px; lines of 70 leave room, so the
browser never wraps a line a second time. ``textwrap`` breaks at hyphens by default, which
splits ``1e-12`` into ``1e-`` and ``12``: off here.

A message only a GPU gives cannot be produced where the book is built: :class:`Recorded` holds
one as a GPU run recorded it, with where and how, and a page quotes it as such.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap

COLUMNS = 70  # characters a line: under the page's ~100 at 1280 px, and a phone's box scrolls
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\[(`'\"])")


def wrap(text: str, columns: int = COLUMNS) -> str:
    """Each line of ``text`` wrapped at ``columns``, breaking only at spaces."""
    return "\n".join(textwrap.fill(line, columns, break_on_hyphens=False,
                                   break_long_words=False, subsequent_indent="  ")
                     if line.strip() else "" for line in text.splitlines())


def sentences_holding(message: str, *expected: str) -> str:
    """The whole sentences of ``message`` from the one holding the first of ``expected`` to the
    one holding the last. Fails (AssertionError) unless each is in the message: a page that
    quotes a message checks that torch still says it."""
    flat = " ".join(message.split())
    for text in expected:
        assert " ".join(text.split()) in flat, (text, message)
    first = flat.index(" ".join(expected[0].split()))
    last_text = " ".join(expected[-1].split())
    last = flat.index(last_text, first) + len(last_text)
    starts = [0] + [m.end() for m in SENTENCE_END.finditer(flat) if m.end() <= first]
    ends = [m.start() for m in SENTENCE_END.finditer(flat) if m.start() >= last]
    start, end = starts[-1], (ends[0] if ends else len(flat))
    return ("... " if start > 0 else "") + flat[start:end] + (" ..." if end < len(flat) else "")


def show(message: str, *expected: str) -> None:
    """Print the sentences of ``message`` that hold ``expected``, wrapped to the column."""
    print(wrap(sentences_holding(message, *expected)))


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A message as a run on a GPU recorded it: ``where`` (the card and the software), ``how``
    (what ran), ``text`` (the message, verbatim)."""

    where: str
    how: str
    text: str

    def show(self, *expected: str) -> None:
        """Say where and how it was recorded, then quote it as ``show`` does."""
        print(wrap(f"Recorded {self.where}, {self.how}:"))
        show(self.text, *expected)


DUPLICATE_GPU = Recorded(
    where="on one NVIDIA H200 (torch 2.11.0+cu130, NCCL 2.28.9, 2026-11-26)",
    how="two ranks with NCCL, neither calling torch.cuda.set_device, at their first "
        "all_reduce (rank 1's message; rank 0's names rank 0 first)",
    text="DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
         "NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL "
         "version 2.28.9\nncclInvalidUsage: This usually reflects invalid usage of NCCL "
         "library.\nLast error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA "
         "device 60")
