"""The scaling efficiency to expect, from the cost model: a MODEL, not a measurement.

For a few model sizes and the clusters readers ask about (one node of 8 GPUs over NVLink or
over PCIe; two such nodes over InfiniBand or over Ethernet), ``cluster_prediction.run`` gives
the weak scaling efficiency of DDP: one GPU's step over the cluster's, each GPU keeping its
batch. Compute runs at the model FLOPs utilisation a GPU record measured for that size
(``utilisation.from_record``: one H100, GPT-2 shapes, ``torch.compile``); links are the
published ones of ``cost_model.INTRA_NODE`` and ``INTER_NODE``. A run far below its row is the
question to ask of that run (the time cost chapter's list of causes).
"""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import cluster_prediction
from ddplab.common.checks import positive_int, positive_number

# (label, GPUs per node, nodes, link inside a node, link between nodes)
CLUSTERS = (
    ("1 node x 8, NVLink", 8, 1, "NVLink 4 (H100)", "InfiniBand NDR, 1 x 400 Gb/s per node"),
    ("1 node x 8, PCIe", 8, 1, "PCIe 5 x16", "InfiniBand NDR, 1 x 400 Gb/s per node"),
    ("2 nodes x 8, InfiniBand", 8, 2, "NVLink 4 (H100)",
     "InfiniBand NDR, 1 x 400 Gb/s per node"),
    ("2 nodes x 8, Ethernet", 8, 2, "NVLink 4 (H100)", "Ethernet, 100 Gb/s per node"),
)
SIZES_MILLIONS = (100, 350, 1000)


@dataclasses.dataclass(frozen=True)
class Expected:
    """``efficiency[cluster][size]``: the model's weak scaling efficiency."""

    sizes_millions: tuple
    batch_size: int
    tokens_per_sample: int
    efficiency: dict
    utilisation: dict  # size -> where the MFU comes from
    links: dict  # cluster -> (inside a node, between nodes)

    def describe(self) -> str:
        lines = [f"MODEL, not a measurement: weak scaling efficiency of DDP, "
                 f"{self.batch_size} x {self.tokens_per_sample} tokens per GPU, H100s",
                 f"{'':<26}" + "".join(f"{f'{m:,} M params':>16}" for m in self.sizes_millions)]
        for cluster, row in self.efficiency.items():
            lines.append(f"{cluster:<26}" + "".join(f"{row[m]:>16.0%}"
                                                     for m in self.sizes_millions))
        lines.append("compute: " + "; ".join(f"{m:,} M: {self.utilisation[m]}"
                                             for m in self.sizes_millions))
        return "\n".join(lines)


def run(sizes_millions=SIZES_MILLIONS, batch_size: int = 4,
        tokens_per_sample: int = 2048) -> Expected:
    for size in sizes_millions:
        positive_number("each of sizes_millions", size)
    positive_int("batch_size", batch_size)
    positive_int("tokens_per_sample", tokens_per_sample)
    efficiency, utilisation, links = {}, {}, {}
    for label, per_node, nodes, intra, inter in CLUSTERS:
        efficiency[label] = {}
        links[label] = (intra, inter if nodes > 1 else "none")
        for size in sizes_millions:
            p = cluster_prediction.run(params_millions=size, gpus_per_node=per_node,
                                       nodes=nodes, intra=intra, inter=inter,
                                       batch_size=batch_size,
                                       tokens_per_sample=tokens_per_sample)
            efficiency[label][size] = p.step.efficiency
            utilisation[size] = f"MFU {p.utilisation.value:.0%}"
    return Expected(tuple(sizes_millions), batch_size, tokens_per_sample, efficiency,
                    utilisation, links)
