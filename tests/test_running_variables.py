"""The running page's table of environment variables cites lines of the installed torch: each
still names its variable, and a citation that does not is reported."""

from ddplab.chapters.running import variables


def test_every_cited_line_names_its_variable():
    assert variables.lines_not_holding_their_names() == []


def test_a_citation_off_by_a_line_is_reported(monkeypatch):
    path, line = variables.SOURCES["WORLD_SIZE"]
    monkeypatch.setitem(variables.SOURCES, "WORLD_SIZE", (path, line + 2))
    wrong = variables.lines_not_holding_their_names()
    assert len(wrong) == 1 and wrong[0].startswith("WORLD_SIZE: ")
