"""``report.html``: one self-contained file (figures as PNG data URIs, CSS inline, no script,
nothing fetched), readable offline and attachable to an issue. Its figures are the chapters'
own (``time_cost.plots``, ``memory.plots``), with a link to the book's section on each."""

from __future__ import annotations

import base64
import html
import io
import json

import matplotlib

matplotlib.use("Agg")  # a file, never a window: the report may run on a headless node

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ddplab.chapters.memory import plots as memory_plots  # noqa: E402
from ddplab.chapters.time_cost import plots as time_plots  # noqa: E402
from ddplab.common.html_page import head, table  # noqa: E402
from ddplab.report.summary import rows, shown, summary_lines  # noqa: E402
from ddplab.screen.style import PAGE_WIDTH  # noqa: E402

BOOK = "https://github.com/ddplab/ddplab/blob/main/book/"
SECTIONS = {  # part -> (title, what it measures, the book's section that explains it)
    "machine": ("The machine", "Where the ranks ran, and what sets NCCL's choices.",
                "running.md"),
    "allreduce": ("All-reduce against message size",
                  "Median time of an all-reduce of each size on the slowest rank; algbw = S/t "
                  "and busbw = algbw x 2(n-1)/n as nccl-tests defines them; the model is "
                  "T(S) = alpha + S/B fitted to these times.", "time_cost.md#the-all-reduce"),
    "step": ("One DDP step",
             "Forward, backward, the wait for the all-reduce that backward did not hide, and "
             "the optimizer, beside the same steps without DDP; the model adds to that "
             "computation DDP's copies and the exposed all-reduce.",
             "time_cost.md#what-one-step-costs"),
    "buckets": ("Bucket size and accumulation",
                "Step time at several bucket_cap_mb values against the model's best bucket "
                "count sqrt(S/(w o)); with no_sync, one all-reduce per optimizer step.",
                "time_cost.md#overlap-and-bucket-size"),
    "memory": ("Memory per rank",
               "Bytes each rank holds after an Adam step, counted tensor by tensor, against "
               "the memory chapter's calculator.", "memory.md#what-one-ddp-rank-holds"),
    "prediction": ("Prediction for more nodes",
                   "What the model, calibrated on the measurements above, says for two and "
                   "four times the nodes.", "time_cost.md#from-here-to-a-cluster-a-cost-model"),
}


def png(fig) -> str:
    """A figure as an <img> with a data URI (nothing to fetch)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="figure" src="data:image/png;base64,{data}">'


def allreduce_figure(result, fit):
    """Measured all-reduce times and the (constrained) fit ``alpha + S/B``."""
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH * 0.6, 3.0), constrained_layout=True)
    sizes = np.array(result.sizes_bytes, dtype=float)
    ax.loglog(sizes, 1e3 * np.array(result.seconds), "o", ms=4, label="measured (median)")
    fine = np.geomspace(sizes[0], sizes[-1], 50)
    ax.loglog(fine, [1e3 * fit.seconds(s) for s in fine], "-", lw=1,
              label=f"model: {1e6 * fit.alpha_s:.0f} us + S / "
                    f"{fit.bandwidth / 1e9:.3g} GB/s")
    ax.set_xlabel("message size S, bytes", fontsize=9)
    ax.set_ylabel("ms per all-reduce", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def figures(found: dict) -> dict:
    """part -> [<img>...], for what was measured."""
    out = {}
    if "allreduce" in found:
        out["allreduce"] = [png(allreduce_figure(found["allreduce"], found["model"].fit))]
    if "step" in found:
        out["step"] = [png(time_plots.step_phases(list(found["step"])))]
    if "buckets" in found and "tradeoff" in found:
        out["buckets"] = [png(time_plots.bucket_tradeoff(found["buckets"], found["tradeoff"]))]
    if "accumulation" in found:
        out.setdefault("buckets", []).append(png(time_plots.accumulation(found["accumulation"])))
    if "memory" in found:
        results = found["memory"]
        out["memory"] = [png(memory_plots.strategies(list(results.values()), list(results)))]
    return out


def compared_table(data: dict) -> str:
    body = [(label, shown(f["measured"], f["unit"]), shown(f["predicted"], f["unit"]),
             "-" if f["ratio"] is None else f"{f['ratio']:.2f}") for label, f in rows(data)]
    return table(("", "measured", "model", "measured / model"), body)


def machine_table(machine: dict) -> str:
    body = [("hosts", ", ".join(machine["hosts"])),
            ("ranks per host", ", ".join(f"{h}: {n}" for h, n in
                                         machine["ranks_per_host"].items())),
            ("devices", ", ".join(machine["devices"])), ("backend", machine["backend"]),
            ("torch / CUDA / NCCL", f"{machine['torch']} / {machine['cuda']} / "
                                    f"{machine['nccl']}"),
            ("NCCL_* variables", ", ".join(f"{k}={v}" for k, v in machine["nccl_env"].items())
             or "none set")]
    return table(("", ""), body)


def prediction_table(prediction: dict) -> str:
    body = [(nodes, p["ranks"], shown(p["step"]["predicted"], "s"),
             shown(p["exposed_allreduce"]["predicted"], "s"),
             shown(p["samples_per_s"]["predicted"], "samples/s"),
             shown(p["efficiency"]["predicted"], "1"))
            for nodes, p in prediction["nodes"].items()]
    return table(("nodes", "ranks", "step (model)", "exposed all-reduce (model)",
                  "samples/s (model)", "efficiency (model)"), body)


def verdicts(data: dict) -> list[str]:
    """The summary's lines after its table: the margin check and the predictions."""
    return [line for line in summary_lines(data)
            if line.startswith(("measured/model", "PREDICTION"))]


def render(report) -> str:
    data, found = report.to_json(), report.found
    images = figures(found)
    parts = [head("ddplab report"), "<h1>ddplab report</h1>",
             "<p>Every figure measured on this cluster, beside what the book's cost model "
             "predicts for it from the same measurements; a ratio far from 1 is a question "
             "worth asking.</p>"]
    if data["failure"]:
        parts.append(f"<p class='failure'>{html.escape(data['failure'])}</p>")
    if data["missing"]:
        items = "".join(f"<li>{html.escape(m['part'])}: {html.escape(m['why'])}</li>"
                        for m in data["missing"])
        parts.append(f"<div class='missing'>Not measured:<ul>{items}</ul></div>")
    parts += ["<h2>Summary</h2>", compared_table(data),
              f"<pre>{html.escape(chr(10).join(verdicts(data)))}</pre>"]
    for part, (title, words, section) in SECTIONS.items():
        parts.append(f"<h2 id='{part}'>{html.escape(title)}</h2><p>{html.escape(words)} "
                     f"<a href='{BOOK}{section}'>In the book.</a></p>")
        section_data = data.get(part)
        if section_data is None:
            parts.append("<p class='missing'>Not measured.</p>")
            continue
        if part == "machine":
            parts.append(machine_table(section_data))
        if part == "prediction" and section_data.get("what"):
            parts.append(f"<p class='prediction'>{html.escape(section_data['what'])}</p>")
            parts.append(prediction_table(section_data))
        parts += images.get(part, [])
        parts.append(f"<details><summary>{html.escape(title)}: every number</summary><pre>"
                     f"{html.escape(json.dumps(section_data, indent=1))}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)
