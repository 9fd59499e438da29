"""A slider panel's figure: kept between moves, its artists updated in place, encoded as PNG.

Drawing a new figure on every move costs most of a move (benchmarks/RESULTS.md, "Slider
latency"): building the figure, constrained layout's passes (each lays out every text),
rendering, and ``savefig``, which draws twice when a layout engine is set (once to lay out,
once to render). A :class:`LiveFigure` draws once and encodes what the canvas already holds.

A plot function may carry an ``update(figure, result) -> bool`` attribute that puts a new
result into the figure it drew (new data, limits, title) and says False when it cannot
(another world size, so other artists). An updated figure keeps the layout computed once,
re-computed only when a tick label or title no longer fits. Its legends (an update leaves
them be: the same artists, so the same entries) are not laid out again: each frame is drawn
anew and its inside pasted back from the last full draw, matplotlib's blitting
(``copy_from_bbox``, ``restore_region``), for a legend that stays where it is (a fixed
``loc``) and hides what lies under it (an opaque frame).
Without ``update``, every move builds a new figure and draws it once; when a figure of the
same frame (size, grid, subfigures, axes: :func:`_frame`) was drawn before, it takes that
one's layout (the axes' positions, as constrained layout set them) rather than running the
layout engine again (half of such a draw, profiled in ``benchmarks/all_sliders.py
--profile``), unless something then overflows the figure. Layouts are kept per frame, so a
slider that changes the figure's size (a world size, a number of epochs) lays out each size
once; a figure an ``update`` could not take is drawn the same way.
"""

from __future__ import annotations

import io
import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.transforms import Bbox
from PIL import Image

SLACK = 10 / 72  # inches around a kept figure's layout, 3 / 72 in constrained layout's default
KEPT_LAYOUTS = 64  # frames whose layout a LiveFigure keeps (a few boxes each)


class LiveFigure:
    """``png(result)``: the figure of ``plot(result)``, as PNG bytes."""

    def __init__(self, plot):
        self.plot = plot
        self.figure = None
        self.layout = None  # the plot's own layout engine, re-run when something outgrows it
        self.legends = []  # (legend, pixels of its inside) from the last full draw
        self.frame = None  # without update: the last new figure's frame and its layout
        self.layouts = {}  # frame (_frame) -> the layout a figure of that frame last fitted

    def png(self, result) -> bytes:
        update = getattr(self.plot, "update", None)
        if update is None:  # a new figure: one draw, laid out as the last one where it fits
            return _encode(self._draw_new(_own_canvas(self.plot(result))))
        if self.figure is not None and update(self.figure, result):
            self._draw_without_legends()
            if self.layout is not None and not _fits(self.figure):
                self._draw_laid_out()  # a longer tick label or title: lay out afresh
        else:  # another world size: a new figure, laid out as one of its frame was
            self.figure = _own_canvas(self.plot(result))
            self.layout = self.figure.get_layout_engine()
            if isinstance(self.layout, ConstrainedLayoutEngine):
                # Room for a tick label or title a few pixels longer than this result's, so
                # that most later results fit without laying out again.
                self.layout.set(w_pad=SLACK, h_pad=SLACK)
            self._draw_laid_out(self.layouts.get(_frame(self.figure)))
        return _encode(self.figure)

    def _draw_laid_out(self, layout=None) -> None:
        """Draw with ``layout`` (from :func:`_layout`) where everything fits in it, else with
        the plot's layout engine; then keep the legends' pixels for in-place updates."""
        figure = self.figure
        if layout is not None:
            figure.set_layout_engine("none")
            if _set_layout(figure, layout):
                figure.canvas.draw()
            else:
                layout = None  # this matplotlib cannot place it: its layout engine does
        if layout is None or not _fits(figure):
            if self.layout is not None:
                figure.set_layout_engine(self.layout)
            figure.canvas.draw()
        figure.set_layout_engine("none")
        self._keep(_frame(figure), figure)
        renderer = figure.canvas.get_renderer()
        self.legends = [(legend, [figure.canvas.copy_from_bbox(box)
                                  for box in _insides(legend, renderer)])
                        for legend in _legends(figure) if _stays_and_hides(legend)]

    def _draw_new(self, figure):
        """Draw a new ``figure``: in the layout of the last figure of its frame where
        everything fits in it, else laid out by its own engine (whose layout is then kept)."""
        frame = _frame(figure)
        layout = self.layouts.get(frame)
        if layout is not None:
            engine = figure.get_layout_engine()
            figure.set_layout_engine("none")
            if _set_layout(figure, layout):
                figure.canvas.draw()
                if _fits(figure):
                    self.frame = (frame, layout)
                    return figure
            figure.set_layout_engine(engine)
        if isinstance(figure.get_layout_engine(), ConstrainedLayoutEngine):
            figure.get_layout_engine().set(w_pad=SLACK, h_pad=SLACK)  # room, as above
        figure.canvas.draw()
        self.frame = self._keep(frame, figure)
        return figure

    def _keep(self, frame, figure):
        """Keep ``figure``'s layout for later figures of its ``frame`` (a slider that comes
        back to a world size or a number of epochs finds its layout: a move back and forth
        lays out nothing); the oldest goes beyond :data:`KEPT_LAYOUTS`. Returns (frame,
        layout), or None for a figure without a frame."""
        if frame is None:
            return None
        self.layouts.pop(frame, None)  # re-inserted: the newest
        self.layouts[frame] = _layout(figure)
        while len(self.layouts) > KEPT_LAYOUTS:
            self.layouts.pop(next(iter(self.layouts)))
        return frame, self.layouts[frame]

    def _draw_without_legends(self) -> None:
        """Draw all but the legends' insides, then paste those from the last full draw. Each
        frame is drawn anew: its edge and round corners blend with the data around them."""
        canvas = self.figure.canvas
        for legend, _ in self.legends:
            legend.set_visible(False)
        try:
            canvas.draw()
        finally:
            for legend, _ in self.legends:
                legend.set_visible(True)
        for legend, insides in self.legends:
            legend.legendPatch.draw(canvas.get_renderer())
            for pixels in insides:
                canvas.restore_region(pixels)


def _own_canvas(figure):
    """``figure`` out of pyplot's hands (a notebook shows every figure pyplot still holds,
    below the cell) and on an Agg canvas of its own, whatever the backend."""
    plt.close(figure)
    FigureCanvasAgg(figure)
    return figure


def _legends(figure) -> list:
    return [*figure.legends, *(ax.get_legend() for ax in figure.axes if ax.get_legend())]


def _insides(legend, renderer) -> list:
    """The legend's pixels that its opaque face covers whole, less the frame's round corners,
    as two boxes (a cross): a draw gives them again whatever the data under it, so they may be
    pasted. A box's edges are whole pixels (``copy_from_bbox`` cuts the fraction off).

    Agg snaps the frame's vertices to the pixel grid (matplotlib ``src/path_converters.h``,
    ``PathSnapper``: ``floor(v + 0.5)``, plus 0.5 for a stroke of an odd number of pixels, in
    device coordinates, y down), which moves an edge up to a pixel inside the legend's extent.
    Where the frame's stroke is thinner than a pixel (0.8 pt below 90 dpi) the pixel row at
    that edge then shows the data under it faintly. So each edge is where it lies further in:
    as drawn snapped, or not."""
    box = legend.get_window_extent(renderer)
    frame = legend.legendPatch
    stroke = renderer.points_to_pixels(frame.get_linewidth())
    grid = 0.5 if math.floor(stroke + 0.5) % 2 else 0.0

    def snapped(device: float) -> float:
        return math.floor(device + 0.5) + grid

    height = renderer.height  # display y up, device y down: device = height - y
    x0 = math.ceil(max(box.x0, snapped(box.x0)))
    x1 = math.floor(min(box.x1, snapped(box.x1)))
    y0 = math.ceil(max(box.y0, height - snapped(height - box.y0)))
    y1 = math.floor(min(box.y1, height - snapped(height - box.y1)))
    rounding = getattr(frame.get_boxstyle(), "rounding_size", None) or 0
    corner = math.ceil(rounding * frame.get_mutation_scale() + stroke) + 1
    return [Bbox.from_extents(x0 + corner, y0, x1 - corner, y1),
            Bbox.from_extents(x0, y0 + corner, x1, y1 - corner)]


def _stays_and_hides(legend) -> bool:
    """A legend at a fixed place (not ``loc="best"``, code 0, which follows the data) with an
    opaque frame: its old pixels are exactly what a new draw would give."""
    frame = legend.get_frame()
    loc = getattr(legend, "_loc", None)  # no public getter; without it, drawn as any artist
    return (legend.get_visible() and loc not in (None, 0) and legend.get_frame_on()
            and frame.get_alpha() in (None, 1) and frame.get_facecolor()[3] == 1)


def _fits(figure) -> bool:
    """Whether every axes, with its labels and title, lies within the figure after a draw
    (what an update changes: ticks, axis labels, title; an axis turned off or an empty title
    draws nothing, wherever it would be)."""
    renderer = figure.canvas.get_renderer()
    bounds = figure.bbox
    boxes = []
    for ax in figure.axes:
        boxes += [axis.get_tightbbox(renderer) for axis in (ax.xaxis, ax.yaxis)
                  if ax.axison and axis.get_visible()]
        if ax.title.get_text():
            boxes.append(ax.title.get_window_extent(renderer))
    return all(box is None or (box.x0 >= bounds.x0 - 0.5 and box.y0 >= bounds.y0 - 0.5
                               and box.x1 <= bounds.x1 + 0.5 and box.y1 <= bounds.y1 + 0.5)
               for box in boxes)


def _frame(figure):
    """What fixes a figure's layout besides its texts: its size, each subfigure's and each
    axes' place in its grid (and the subfigure it is in); None where the layout also moves
    other things (legends or titles of the figure or of a subfigure), and where this
    matplotlib lacks what :func:`_set_layout` needs (see :data:`PRIVATE`)."""
    subfigures = _subfigures(figure)
    if not _can_place(figure) or figure.legends or any(s.legends or any(_titles(s))
                                                       for s in subfigures):
        return None
    return (tuple(figure.get_size_inches()), figure.dpi,
            tuple(_place(s._subplotspec) for s in subfigures),  # no public getter
            tuple((_place(ax.get_subplotspec()), _index(subfigures, ax.figure))
                  for ax in figure.axes))


def _subfigures(figure) -> list:
    """Every subfigure of ``figure``, depth first (``figure.subfigs`` holds only its own)."""
    return [s for sub in figure.subfigs for s in (sub, *_subfigures(sub))]


def _index(items: list, item):
    return next((i for i, x in enumerate(items) if x is item), None)


def _place(spec):
    """A subplot's rows and columns in its grid, the grid's shape and ratios."""
    if spec is None:
        return None
    grid = spec.get_gridspec()
    return (spec.rowspan, spec.colspan, grid.get_geometry(),
            tuple(grid.get_height_ratios() or ()), tuple(grid.get_width_ratios() or ()))


def _titles(figure) -> list:
    """The figure's suptitle, supxlabel and supylabel, None where unset (no public getters)."""
    return [getattr(figure, name, None) for name in TITLES]


# The private names of matplotlib a kept layout is put back with (tests/test_live_figure.py
# passed on 3.7.5, the oldest requirements.txt allows, and 3.11.2): where one is missing, no
# layout is kept and every figure is laid out by its own engine (slower, never wrong).
TITLES = ("_suptitle", "_supxlabel", "_supylabel")
PRIVATE = {"Axes": ("_set_position",), "Figure": TITLES,
           "SubFigure": ("_redo_transform_rel_fig", "_subplotspec", *TITLES)}


def _can_place(figure) -> bool:
    """Whether this matplotlib has every private name :func:`_set_layout` uses, on
    ``figure``, its subfigures and its axes."""
    objects = {"Figure": [figure], "SubFigure": _subfigures(figure), "Axes": figure.axes}
    return all(hasattr(obj, name) for kind, names in PRIVATE.items() for obj in objects[kind]
               for name in names)


def _layout(figure) -> tuple:
    """The axes' positions, the subfigures' boxes and the figure titles' places, as a draw
    laid them out (an axes in a subfigure is placed within it)."""
    titles = [t.get_position() if t is not None else None for t in _titles(figure)]
    return ([ax.get_position(original=True).frozen() for ax in figure.axes], titles,
            [s.bbox_relative.frozen() for s in _subfigures(figure)])


def _set_layout(figure, layout) -> bool:
    """Put subfigures, axes and titles where :func:`_layout` found them
    (``_redo_transform_rel_fig`` and ``_set_position``: what constrained layout itself calls,
    matplotlib/_constrained_layout.py, ``reposition_axes``); False, with nothing moved, where
    this matplotlib lacks them."""
    if not _can_place(figure):
        return False
    positions, titles, boxes = layout
    for subfigure, box in zip(_subfigures(figure), boxes):
        subfigure._redo_transform_rel_fig(bbox=box)
    for ax, position in zip(figure.axes, positions):
        ax._set_position(position)
    for text, place in zip(_titles(figure), titles):
        if text is not None and place is not None:
            text.set_position(place)
    return True


def _encode(figure) -> bytes:
    """The canvas as drawn, as PNG (fast zlib level: a panel image is re-sent on every move)."""
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(figure.canvas.buffer_rgba())).save(buffer, format="png",
                                                                  compress_level=1)
    return buffer.getvalue()
