"""Figure text a reader can read: at least ``style.MIN_TEXT_PX`` pixels where the page shows
the figure at 1280 px. The browser check (scripts/check_book_in_browser.py) holds each figure
to its own size up to ``style.FIGURE_PX``; this holds every font size the plots set, and
matplotlib's own defaults, to ``style.min_text_points`` for the figure's width."""

import ast
import pathlib

import matplotlib
import pytest

from ddplab.screen import style

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "ddplab"
PLOTS = sorted([*SRC.glob("chapters/*/plots.py"), *SRC.glob("chapters/*/plots/*.py"),
                *SRC.glob("screen/*.py")])
SIZE_ARGUMENTS = ("fontsize", "labelsize", "title_fontsize")


def sizes(path: pathlib.Path) -> list[tuple[int, float]]:
    """Every font size written as a number in a call: (line, points)."""
    return [(node.value.lineno, node.value.value) for node in ast.walk(ast.parse(
        path.read_text())) if isinstance(node, ast.keyword) and node.arg in SIZE_ARGUMENTS
        and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float))]


def width(path: pathlib.Path) -> float:
    """The widest figure a module draws: WIDE where it uses it, else the text column."""
    return style.WIDE if "WIDE" in path.read_text() else style.PAGE_WIDTH


def test_the_scan_finds_the_sizes_it_checks():
    assert len(PLOTS) > 10 and sum(len(sizes(p)) for p in PLOTS) > 30
    assert style.min_text_points(style.WIDE) > style.min_text_points(style.PAGE_WIDTH) == 7.2


@pytest.mark.parametrize("path", PLOTS, ids=[str(p.relative_to(SRC)) for p in PLOTS])
def test_every_font_size_a_plot_sets_is_10_px_on_the_page(path):
    least = style.min_text_points(width(path))
    small = [(line, points) for line, points in sizes(path) if points < least]
    assert small == [], f"{path.name}: below {least:.1f} pt (10 px at 1280 px)"


def test_the_shared_sizes_and_matplotlibs_defaults_are_10_px_on_the_page():
    least = style.min_text_points(style.WIDE)
    assert min(style.LEGEND_SIZE, style.TEXT_SIZE) >= style.min_text_points(style.PAGE_WIDTH)
    defaults = matplotlib.rcParamsDefault
    font = matplotlib.font_manager.FontProperties(size=defaults["font.size"])
    for key in ("xtick.labelsize", "ytick.labelsize", "axes.labelsize", "legend.fontsize"):
        font.set_size(defaults[key])
        assert font.get_size_in_points() >= least, key
    assert matplotlib.rcParamsDefault["figure.dpi"] == style.PIXELS_PER_INCH
