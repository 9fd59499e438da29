"""The report's stages as records (``ddplab.report.stage``): a stage added by its record alone
runs on real ranks and appears in report.json, the schema, the page and the summary; the
registry's rules are checked before anything runs."""

import dataclasses
import re

import matplotlib
import pytest

import ddplab
from ddplab import report
from ddplab.chapters.running import first_group
from ddplab.common import home
from ddplab.report import schema, stages
from ddplab.report.figures import compared
from ddplab.report.stage import Section, Stage, Table, check
from ddplab.report.stages.machine import MachineSection

matplotlib.use("Agg")


@dataclasses.dataclass
class RanksSection(Section):
    pids: list


def count_ranks(s, machine: MachineSection) -> RanksSection:
    """The all-reduced sum of the ranks (the running chapter's first group), against N(N-1)/2
    for the N ranks the machine stage found."""
    ranks = ddplab.run(first_group.report, s.world_size, timeout=s.timeout)
    n = machine.world_size
    return RanksSection({"world_size": n,
                         "rank_sum": compared(ranks[0]["rank_sum"], n * (n - 1) / 2, "1"),
                         "hosts": sorted({r["host"] for r in ranks})},
                        [r["pid"] for r in ranks])


def ranks_figure(section: RanksSection) -> list:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(len(section.pids)), [1] * len(section.pids))
    return [fig]


COUNTED = Stage(
    name="ranks", key="ranks", what="every rank counted", measure=count_ranks,
    needs=("machine",), title="Every rank counted",
    about="The all-reduced sum of the ranks against N(N-1)/2.", book="running.md",
    figures=ranks_figure, table=lambda part: Table(("host",), [(h,) for h in part["hosts"]]),
    rows=lambda part: [("sum of the ranks", part["rank_sum"])],
    verdicts=lambda part: [f"every rank counted: {part['rank_sum']['ratio'] == 1}"])


def test_a_stage_is_added_by_its_record_alone(monkeypatch, tmp_path):
    """Registered beside the machine stage, and nothing else edited: it runs after it, on
    real ranks, given the machine's section, and its part is in report.json, checked by the
    schema, drawn on the page (heading, link, table, figure, every number) and in the
    summary's table and verdicts."""
    monkeypatch.setattr(stages, "STAGES", (stages.machine.STAGE, COUNTED))
    lines = []
    with ddplab.placed(largest_world_size=2):
        made = report.run(world_size=2, quick=True,
                          progress=lambda done, total, label: lines.append((done, total, label)))
    assert made.failure is None
    assert lines == [(0, 2, "the machine"), (1, 2, "every rank counted"), (2, 2, "done")]
    data = made.to_json()
    assert data["ranks"]["rank_sum"] == compared(1, 1, "1")  # ranks 0 and 1
    assert data["ranks"]["world_size"] == data["machine"]["world_size"] == 2
    assert schema.top_level() == ("schema_version", "machine", "ranks")
    assert schema.problems(data) == []
    assert isinstance(made.sections["ranks"], RanksSection)
    summary = made.describe().splitlines()
    assert re.match(r"sum of the ranks +100 % +100 % +1\.00$", summary[2]), summary
    assert "every rank counted: True" in summary
    page = (tmp_path / "report.html").read_text() if made.write(str(tmp_path)) else ""
    section = page.split("<h2 id='ranks'>Every rank counted</h2>")[1]
    assert f"{home.book()}running.html" in section and "<th>host</th>" in section
    assert len(re.findall(r'<img[^>]* src="data:image/png;base64,', section)) == 1
    assert "Every rank counted: every number" in section
    assert "every rank counted: True" in page.split("<h2 id='machine'>")[0]  # the summary


def test_a_registered_stages_part_is_in_the_json_or_named_missing():
    """A report that lacks a registered stage's part is a schema problem unless the part is
    named as missing (as a failed stage's are)."""
    registry = (stages.machine.STAGE, COUNTED)
    data = {"schema_version": 1, "machine": {}, "ranks": None, "missing": []}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stages, "STAGES", registry)
        assert schema.problems(data) == ["ranks is empty and not named as missing"]
        data["missing"].append({"part": "ranks", "why": "not measured: it failed"})
        assert schema.problems(data) == []


@pytest.mark.parametrize("change, match", [
    (dict(needs=("prediction",)), r"needs \['prediction'\]: not an earlier stage"),
    (dict(needs=()), r"measure takes \['machine'\] after the settings, its needs are \[\]"),
    (dict(name="machine"), "is taken"),
    (dict(key="nowhere.ranks", title=None), "lies in no earlier stage's part"),
    (dict(key="machine.ranks"), "a nested one none"),
    (dict(about=""), "a top-level part has a title, an about and a book section"),
])
def test_the_registry_refuses_a_stage_that_breaks_its_rules(change, match):
    with pytest.raises(ValueError, match=match):
        check((stages.machine.STAGE, dataclasses.replace(COUNTED, **change)))


def test_the_registry_holds_every_stage_in_an_order_its_needs_allow():
    assert check(stages.STAGES) == stages.STAGES
    assert [s.name for s in stages.STAGES] == ["machine", "allreduce", "step", "buckets",
                                               "accumulation", "memory", "prediction"]
    assert schema.top_level() == ("schema_version", "machine", "allreduce", "step", "buckets",
                                  "memory", "prediction")
