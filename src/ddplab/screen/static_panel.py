"""Precomputed sliders for a static page: every grid point is a real run, made at build time.

    from ddplab.screen import static_panel
    static_panel.explore(averaging.run, plots.gradients, describe=averaging.Averaging.describe,
                         world_size=[1, 2, 4, 8], reduction=["mean", "sum"])

The same experiment and plot function as :func:`ddplab.screen.widgets.explore`, but each control is
a list of values (or of ``(label, value)`` pairs): ``run`` is called at every point of the grid
when the page is built, each figure is kept as a small image, and the panel is one piece of
HTML holding the images, the controls, the result text of every point and a few lines of plain
JavaScript that show the image and text of the values chosen. No kernel, no CDN, nothing
fetched: it works from ``file://``. A list of numbers is a range slider over its values;
anything else is a dropdown. Each control starts at ``run``'s default when it is in the list.

The grid is a product, so its size multiplies: a panel refuses to exceed ``MAX_PANEL_BYTES``
(a page must stay light to load), which keeps grids coarse; the lab has the full range.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from ddplab.screen.style import PAGE_WIDTH
from ddplab.screen.widgets import defaults_of

MAX_PANEL_BYTES = 1_500_000  # one panel's HTML, images included
SVG_TRY_BYTES = 40_000  # see _image
PIXELS_PER_INCH = 100  # at PAGE_WIDTH: 750 px, the theme's text column at full width

# Plain JavaScript, no library: a control's change picks the grid point whose values are the
# ones chosen (row-major over the controls, as itertools.product walks them).
_SCRIPT = """(function () {
  var root = document.getElementById(%(id)s), data = %(data)s;
  var controls = root.querySelectorAll("[data-control]");
  function show() {
    var point = 0, chosen = [];
    controls.forEach(function (c, i) {
      var k = Number(c.value);
      point = point * data.sizes[i] + k;
      chosen.push(c.name + " " + data.labels[i][k]);
      var out = root.querySelector('output[data-for="' + c.name + '"]');
      if (out) out.textContent = data.labels[i][k];
    });
    var img = root.querySelector("img");
    img.src = data.images[data.image[point]];
    img.alt = alt(chosen, data.texts[point]);
    root.querySelector("pre").textContent = data.texts[point];
  }
  function alt(chosen, text) {
    return "The figure for " + chosen.join(", ") + (text ? ": " + text.split("\\n")[0] : "");
  }
  controls.forEach(function (c) { c.addEventListener("input", show); });
  show();
})();"""

_STYLE = ("border:1px solid #ddd;border-radius:4px;padding:0.5em;margin:0.5em 0;"
          "font-size:0.9em")


def explore(run, plot, describe=None, **grid) -> HTML:
    """Run ``run(**values)`` at every point of ``grid`` and return a static panel of the
    figures ``plot(result)``. ``describe(result)`` gives the text under the figure (default:
    the result's own ``describe()``, first line; a result without one shows none)."""
    if not grid:
        raise ValueError("explore needs at least one control: name=[value, ...]")
    defaults = defaults_of(run)
    controls = {name: _options(name, spec) for name, spec in grid.items()}
    images, image_of, texts = [], [], []
    seen = {}  # identical figures (a control that changes nothing drawn) are stored once
    for point in itertools.product(*(values for _, values in controls.values())):
        result = run(**dict(zip(controls, point)))
        figure = plot(result)
        uri = _image(figure)
        plt.close(figure)
        if uri not in seen:
            seen[uri] = len(images)
            images.append(uri)
        image_of.append(seen[uri])
        texts.append(_text(result, describe))
    start = [values.index(defaults[name]) if defaults.get(name, object()) in values else 0
             for name, (_, values) in controls.items()]
    data = {"sizes": [len(values) for _, values in controls.values()],
            "labels": [labels for labels, _ in controls.values()],
            "images": images, "image": image_of, "texts": texts}
    payload = json.dumps(data, separators=(",", ":"))
    panel_id = "ddplab-panel-" + hashlib.sha1(payload.encode()).hexdigest()[:12]
    first = sum(k * _stride(data["sizes"], i) for i, k in enumerate(start))
    parts = [f'<div class="ddplab-panel" id="{panel_id}" style="{_STYLE}">',
             '<div style="display:flex;flex-wrap:wrap;gap:0.4em 1.5em">']
    for (name, (labels, _)), k in zip(controls.items(), start):
        parts.append(_control(name, labels, k))
    parts += ["</div>",
              f'<img alt="{html.escape(_alt(controls, start, texts[first]))}" '
              f'style="width:100%;height:auto" src="{images[image_of[first]]}">',
              f'<pre style="white-space:pre;overflow-x:auto;margin:0.3em 0 0">'
              f"{html.escape(texts[first])}</pre>",
              # "</" inside a script would end it early; JSON allows the escaped form.
              "<script>" + _SCRIPT % {"id": json.dumps(panel_id),
                                      "data": payload.replace("</", "<\\/")} + "</script>",
              "</div>"]
    text = "\n".join(parts)
    if len(text.encode()) > MAX_PANEL_BYTES:
        raise ValueError(f"the panel is {len(text.encode()):,} bytes, over MAX_PANEL_BYTES "
                         f"({MAX_PANEL_BYTES:,}): give the grid fewer values")
    return HTML(text)


def _alt(controls: dict, chosen: list[int], text: str) -> str:
    """What the figure shows, for a screen reader: the values chosen and the text's first
    line (the script writes the same for each point)."""
    values = ", ".join(f"{name} {labels[k]}" for (name, (labels, _)), k
                       in zip(controls.items(), chosen))
    return f"The figure for {values}" + (f": {text.splitlines()[0]}" if text else "")


def _options(name: str, spec) -> tuple[list[str], list]:
    """``(labels, values)`` of one control: a list of values, or of ``(label, value)``."""
    if not isinstance(spec, list) or not spec:  # a tuple is a range to widgets.explore
        raise ValueError(f"control {name!r}: expected a non-empty list of values, got {spec!r}")
    if all(isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str) for o in spec):
        return [label for label, _ in spec], [value for _, value in spec]
    return [str(v) for v in spec], list(spec)


def _control(name: str, labels: list[str], index: int) -> str:
    """A range slider over the values' positions when every label is a number, else a
    dropdown; both carry ``data-control`` and report the position chosen."""
    label = html.escape(name)
    if len(labels) > 1 and all(_is_number(v) for v in labels):
        return (f'<label>{label} <input type="range" data-control name="{label}" min="0" '
                f'max="{len(labels) - 1}" step="1" value="{index}" '
                f'style="vertical-align:middle"> <output data-for="{label}">'
                f"{html.escape(labels[index])}</output></label>")
    options = "".join(f'<option value="{i}"{" selected" if i == index else ""}>'
                      f"{html.escape(text)}</option>" for i, text in enumerate(labels))
    return f'<label>{label} <select data-control name="{label}">{options}</select></label>'


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text not in ("nan", "inf", "-inf")


def _stride(sizes: list[int], i: int) -> int:
    stride = 1
    for size in sizes[i + 1:]:
        stride *= size
    return stride


def _image(figure) -> str:
    """The figure at the page's width as a data URI: a palette PNG (figures use few colours,
    and 256 keep them exact enough), or an SVG when that is smaller. A PNG under
    ``SVG_TRY_BYTES`` is kept without drawing the SVG: a second draw costs as much as the
    first (0.1 to 0.2 s here), and an SVG with text is rarely that small."""
    width, height = figure.get_size_inches()
    if width > PAGE_WIDTH:  # wide figures are shown at the column's width anyway
        figure.set_size_inches(PAGE_WIDTH, height * PAGE_WIDTH / width)
    # One draw on an Agg canvas, read as pixels: savefig would lay out and render (two passes
    # under a layout engine) and encode a PNG, only for it to be decoded here.
    figure.set_dpi(PIXELS_PER_INCH)
    figure.set_facecolor("white")
    FigureCanvasAgg(figure).draw()
    image = Image.fromarray(np.asarray(figure.canvas.buffer_rgba())).convert("RGB")
    png = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(png, format="png",
                                                                     optimize=True)
    if len(png.getvalue()) < SVG_TRY_BYTES:
        return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    svg = io.BytesIO()
    figure.savefig(svg, format="svg", facecolor="white", metadata={"Date": None})
    if len(svg.getvalue()) < len(png.getvalue()):
        return "data:image/svg+xml;base64," + base64.b64encode(svg.getvalue()).decode()
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()


def _text(result, describe) -> str:
    if describe is not None:
        return str(describe(result))
    try:
        return result.describe().splitlines()[0]
    except (AttributeError, NotImplementedError, TypeError, IndexError):
        return ""
