"""``every-rank-writes`` (``judges/files.py``) on hand-built records, one test per branch: a file
several ranks write (an error where the run proves bytes, advice where it sees opens only),
and a folder several ranks create."""

from __future__ import annotations

import dataclasses

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import files
from ddplab.doctor.messages import Done
from ddplab.doctor.records import Outcome, Write
from judge_records import FILE, crashed, evidence, judge

RUN = "/home/reader/run/"  # where the script ran: a Write's path is absolute


def write(name: str, how: str = "torch.save", line: int = 40, step: int = 8, **changes):
    return Write(step=step, file=FILE, line=line, path=RUN + name, how=how, **changes)


def test_every_rank_writes_found_where_two_ranks_save_one_file():
    save = write("snapshot.pt")
    got = judge(files.EVERY_RANK_WRITES, evidence({0: [save], 1: [save]}))
    assert got.status == Status.FOUND and got.problems[0].kind is None  # the check's: error
    assert got.why.endswith("snapshot.pt (torch.save at train.py:40, step 8): the 2 copies race "
                            "each other on a shared disk, and a rank that reads the file may "
                            "find it half-written")
    assert got.problems[0].evidence["ranks"] == [0, 1] and got.problems[0].line == 40


def test_every_rank_writes_names_a_rank_that_writes_not_one_that_opened():
    opened = write("snapshot.pt", how="open", line=15, step=0, mode="w")
    ev = evidence({0: [opened], 1: [write("snapshot.pt")], 2: [write("snapshot.pt")]})
    got = judge(files.EVERY_RANK_WRITES, ev)
    assert got.status == Status.FOUND and got.why.startswith("ranks 1, 2 all write ")
    assert "snapshot.pt (torch.save at train.py:40, step 8): the 2 copies" in got.why


def test_every_rank_writes_names_three_files_at_most():
    saves = [write(f"epoch{n}.pt") for n in range(4)]
    got = judge(files.EVERY_RANK_WRITES, evidence({0: saves, 1: saves}))
    assert got.status == Status.FOUND and len(got.problems) == 3


def test_every_rank_writes_advises_where_every_rank_only_opens_a_file_once():
    opened = write("log.txt", how="open", line=15, step=0, mode="w")
    got = judge(files.EVERY_RANK_WRITES, evidence({0: [opened], 1: [opened]}))
    assert got.status == Status.FOUND and got.problems[0].kind == "advisory"
    assert "log.txt with \"w\" once (at train.py:15, step 0): the doctor sees the opens" \
        in got.why and got.why.startswith("ranks 0, 1 open ")
    assert "dist.get_rank() == 0" in got.problems[0].fix


def test_every_rank_writes_advises_where_one_rank_writes_after_the_others_opened():
    """build-nanogpt's log: every rank opens it with "w" at start, rank 0 appends."""
    opened = write("log.txt", how="open", line=15, step=0, mode="w")
    appended = write("log.txt", how="open", line=90, step=4, mode="a")
    got = judge(files.EVERY_RANK_WRITES, evidence({0: [opened, appended], 1: [opened]}))
    assert got.status == Status.FOUND and got.problems[0].kind == "advisory"
    assert got.why.startswith("rank 1 opens ")
    assert ("log.txt with \"w\" once (at train.py:15, step 0), and rank 0 writes to it "
            "afterwards") in got.why
    assert got.problems[0].evidence["writers"] == [0]


def test_every_rank_writes_found_where_ranks_make_one_folder_and_one_fails():
    made = write("out", how="mkdir", line=12, step=0)
    failed = crashed("FileExistsError: [Errno 17] File exists: 'out'", line=12, path="out")
    ev = evidence({0: [made], 1: [made]}, outcomes={0: Done(Outcome.FINISHED), 1: failed})
    got = judge(files.EVERY_RANK_WRITES, ev)
    assert got.status == Status.FOUND and got.why.startswith("ranks 0, 1 all create the folder ")
    assert got.why.endswith("out (os.mkdir at train.py:12, step 0): the first one wins and rank 1 "
                            "fails with FileExistsError")
    assert got.problems[0].evidence["failed"] == 1


def test_every_rank_writes_passes_one_writer_a_file():
    ev = evidence({0: [write("model.pt"), write("log.txt", how="open", mode="a")],
                   1: [write("out", how="mkdir", line=12, step=0)]})
    got = judge(files.EVERY_RANK_WRITES, ev)
    assert got.status == Status.PASSED and got.why == "2 files written, each by one rank"


def test_every_rank_writes_passes_a_file_on_each_nodes_own_disk():
    ev = evidence({0: [write("model.pt")], 1: [write("model.pt")]})
    ev.by_rank[1] = dataclasses.replace(ev.by_rank[1], host="node1")
    got = judge(files.EVERY_RANK_WRITES, ev)
    assert got.status == Status.PASSED and got.why == "2 files written, each by one rank"


def test_every_rank_writes_not_applicable_to_folders_alone():
    """Folders made, and a FileExistsError on another path than theirs."""
    made = write("out", how="mkdir", line=12, step=0)
    failed = crashed("FileExistsError: [Errno 17] File exists: 'cache'", path="cache")
    for outcomes in (None, {0: Done(Outcome.FINISHED), 1: failed}):
        got = judge(files.EVERY_RANK_WRITES, evidence({0: [made], 1: [made]}, outcomes=outcomes))
        assert (got.status, got.why) == (Status.NOT_APPLICABLE, "no rank wrote a file")


def test_every_rank_writes_not_applicable_without_writes_or_on_one_rank():
    got = judge(files.EVERY_RANK_WRITES, evidence({0: [], 1: []}))
    assert (got.status, got.why) == (Status.NOT_APPLICABLE, "no rank wrote a file")
    got = judge(files.EVERY_RANK_WRITES, evidence({0: [write("model.pt")]}))
    assert (got.status, got.why) == (Status.NOT_APPLICABLE, "one rank")
