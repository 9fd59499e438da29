"""The scaling efficiency to expect, from the cost model: a MODEL, not a measurement.

For a few model sizes and the clusters readers ask about (one node of 8 H100 over NVLink, or of
8 H100 PCIe cards over PCIe; two nodes of 8 H100 SXM over InfiniBand, with one NIC per node or
one per GPU, or over Ethernet), ``cluster_prediction.run`` gives the weak scaling efficiency of
DDP: one GPU's step over the cluster's, each GPU keeping its batch. Compute runs at the model
FLOPs utilisation measured on the row's own kind of card for that size (``Accelerator.record``,
``utilisation.from_record``: one H100 SXM, GPT-2 shapes, ``torch.compile``; the PCIe card was
not measured, so its row takes the SXM's fraction of its own, lower peak); links are the
published ones of ``cost_model.INTRA_NODE`` and ``INTER_NODE`` (a NIC per GPU: the bus
bandwidth measured by message size on 8 x 400 Gb/s AWS EFA v4 nodes, the only such table the
model has). Each row prints its card, peak and links. A run far
below its row is the question to ask of that run (the time cost chapter's list of causes).
"""

from __future__ import annotations

import dataclasses
import textwrap

from ddplab.chapters.time_cost import cluster_prediction, cost_model
from ddplab.common import gpu_record
from ddplab.common.checks import positive_int, positive_number

ONE_NIC = "InfiniBand NDR, 1 x 400 Gb/s per node"
# (label, accelerator, GPUs per node, nodes, link inside a node, link between nodes or None)
CLUSTERS = (
    ("1 node x 8 H100, NVLink", "H100 SXM", 8, 1, "NVLink 4 (H100)", None),
    ("1 node x 8 H100 PCIe", "H100 PCIe", 8, 1, "PCIe 5 x16", None),
    ("2 nodes x 8 H100, IB, 1 NIC/node", "H100 SXM", 8, 2, "NVLink 4 (H100)", ONE_NIC),
    ("2 nodes x 8 H100, a NIC per GPU", "H100 SXM", 8, 2, "NVLink 4 (H100)",
     "8 x 400 Gb/s per node (EFA v4 measured)"),
    ("2 nodes x 8 H100, Ethernet", "H100 SXM", 8, 2, "NVLink 4 (H100)",
     "Ethernet, 100 Gb/s per node"),
)
SIZES_MILLIONS = (100, 350, 1000)
_LABEL = 34  # the widest label, and a space


@dataclasses.dataclass(frozen=True)
class Expected:
    """``efficiency[cluster][size]``: the model's weak scaling efficiency."""

    sizes_millions: tuple
    batch_size: int
    tokens_per_sample: int
    efficiency: dict
    utilisation: dict  # cluster -> {size: MFU, a fraction of the accelerator's peak}
    records: dict  # cluster -> the GPU record its MFU comes from
    accelerators: dict  # cluster -> accelerator name
    links: dict  # cluster -> (inside a node, between nodes)

    @property
    def assumed(self) -> dict:
        """cluster -> the card whose measured MFU its row borrows, for each row whose own card
        was not measured (the record belongs to the first accelerator that names it)."""
        owner = {}
        for chip in cost_model.ACCELERATORS.values():
            owner.setdefault(chip.record, chip.name)
        return {c: owner[self.records[c]] for c, a in self.accelerators.items()
                if owner[self.records[c]] != a}

    def describe(self) -> str:
        lines = [f"MODEL, not a measurement: weak scaling efficiency of DDP, "
                 f"{self.batch_size} x {self.tokens_per_sample} tokens per GPU",
                 f"{'':<{_LABEL}}" + "".join(f"{f'{m:,} M params':>16}"
                                             for m in self.sizes_millions)]
        for cluster, row in self.efficiency.items():
            lines.append(f"{cluster:<{_LABEL}}" + "".join(f"{row[m]:>16.0%}"
                                                          for m in self.sizes_millions))
        lines.append("each row: the GPU (dense BF16 peak); the link inside a node; between nodes")
        for cluster, (intra, inter) in self.links.items():
            chip = cost_model.ACCELERATORS[self.accelerators[cluster]]
            borrowed = self.assumed.get(cluster)
            assumption = (f"; ASSUMED: the {borrowed}'s measured MFU, no {chip.name} measured"
                          if borrowed else "")
            lines.append(textwrap.fill(f"{cluster}: {chip.name} ({chip.flops / 1e12:.0f} "
                                       f"TFLOP/s); {intra}; {inter}{assumption}", 96,
                                       initial_indent="  ", subsequent_indent="      "))
        for record in dict.fromkeys(self.records.values()):
            rows = [c for c, r in self.records.items() if r == record]
            mfu = self.utilisation[rows[0]]
            lines.append(textwrap.fill(
                f"compute ({len(rows)} rows): MFU {gpu_record.load(record).origin} "
                f"({record}), of each row's own peak: "
                + "; ".join(f"{m:,} M {mfu[m]:.0%}" for m in self.sizes_millions), 96,
                subsequent_indent="  "))
        return "\n".join(lines)


def run(sizes_millions=SIZES_MILLIONS, batch_size: int = 4,
        tokens_per_sample: int = 2048) -> Expected:
    for size in sizes_millions:
        positive_number("each of sizes_millions", size)
    positive_int("batch_size", batch_size)
    positive_int("tokens_per_sample", tokens_per_sample)
    efficiency, utilisation, records, accelerators, links = {}, {}, {}, {}, {}
    for label, accelerator, per_node, nodes, intra, inter in CLUSTERS:
        efficiency[label], utilisation[label] = {}, {}
        records[label] = cost_model.ACCELERATORS[accelerator].record
        accelerators[label] = accelerator
        links[label] = (intra, inter or "no network")
        for size in sizes_millions:
            p = cluster_prediction.run(params_millions=size, gpus_per_node=per_node,
                                       nodes=nodes, intra=intra, inter=inter or ONE_NIC,
                                       accelerator=accelerator, batch_size=batch_size,
                                       tokens_per_sample=tokens_per_sample)
            efficiency[label][size] = p.step.efficiency
            utilisation[label][size] = p.utilisation.value
    return Expected(tuple(sizes_millions), batch_size, tokens_per_sample, efficiency,
                    utilisation, records, accelerators, links)
