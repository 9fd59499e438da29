"""The notes ranks write to their logs, read back by both of their readers (``hang_watch`` in
the caller, ``screen.while_running``'s ticking thread) through one module, ``engine.notes``."""

import subprocess
import sys

import ddplab
import rank_fns
from ddplab.engine import hang_watch, notes
from ddplab.screen import while_running


def test_a_runs_notes_are_read_back_per_rank_and_no_other_calls():
    ddplab.run(rank_fns.noting, 4, call_id="earlier", steps=5)  # in the same logs, not read
    before = while_running._log_sizes()
    ddplab.run(rank_fns.noting, 3, call_id="this", steps=2)
    read = hang_watch.read_notes("this", 3)
    assert [[n.get("step") for n in rank] for rank in read] == [[0, 1], [0, 1, None], [0, 1]]
    assert read[1][-1] == {"call": "this", "rank": 1, "waiting": "the check-in"}
    assert [len(rank) for rank in hang_watch.read_notes("earlier", 4)] == [5, 6, 5, 5]
    # the ticking thread reads only what the logs gained since it started (rank 3 noted
    # before), and says where each rank is by its last note that says so
    assert while_running.rank_states(before) == {
        0: "finished step 1", 1: "waits in the check-in", 2: "finished step 1"}


def test_a_note_still_being_written_and_other_lines_are_skipped():
    whole = notes.line("c", 0, step=3)
    text = "\n".join(["a rank's own print", whole, whole[:-4], notes.NOTE + "{not json"])
    assert list(notes.in_text(text)) == [{"call": "c", "rank": 0, "step": 3}]
    assert notes.of_call([text, whole.replace('"rank": 0', '"rank": 5')], "c", 2) == [
        [{"call": "c", "rank": 0, "step": 3}], []]  # a rank beyond the world size is left out


def test_where_a_note_says_a_rank_is():
    assert notes.position({"rank": 0, "check_in": None}) == "passed the check-in"
    assert notes.position({"rank": 0, "check_in": "Rank 1 failed"}) == "check-in: Rank 1 failed"
    assert notes.position({"rank": 0, "stopped_at": 4}) == "left the loop at step 4"
    assert notes.position({"rank": 0, "pid": 123}) is None  # says nothing of where it is
    assert notes.states([{"rank": 0, "step": 1}, {"rank": 0, "pid": 9}]) == {
        0: "finished step 1"}


def test_the_notes_module_imports_no_torch():
    """The kernel's ticking thread reads notes while a run holds the ranks: loading torch
    there would cost it a second."""
    code = ("import sys; import ddplab.engine.notes, ddplab.screen.while_running; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
