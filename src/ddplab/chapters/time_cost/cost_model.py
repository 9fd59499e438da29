"""A model of the time of one data-parallel training step: arithmetic only, no torch, no runs.

Everything this module returns is a **model's** figure, never a measurement. The chapter "The
time cost" first calibrates it on what it measured (:func:`latency_fit.fit_latency_bandwidth`,
:func:`link_from_fit`) and checks its step times against measured ones, and only then lets it
predict clusters (``cluster_prediction``), from the published figures below.

The all-reduce is NCCL's ring model (NCCL 2.29.7-1, src/graph/tuning.cc, ``ncclTopoTuneModel``):
an all-reduce over ``n`` ranks takes ``2(n-1)`` steps, each paying a latency ``alpha``, of which
``2(nodes-1)`` cross the network, plus a base latency per call; each rank moves ``2(n-1)/n``
times the message over the slowest link of the ring, at that link's bus bandwidth (nccl-tests,
doc/PERFORMANCE.md):

    T(S) = base + 2(n - nodes) alpha_intra + 2(nodes - 1) alpha_net + 2(n-1)/n * S / B(S)

A node's GPUs share its network links, so across nodes ``B`` is the node's network bandwidth.
Where a link has a measured table, ``B(S)`` is the bus bandwidth measured at a message of that
size (small messages reach far less than large ones); those measurements already contain the
latencies of that run, so the model counts them twice there and errs on the slow side.
Only rings: NCCL also picks trees, NVLS, CollNet or PAT where its tuner finds them faster.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap

GB = 1e9
MiB = 2 ** 20


@dataclasses.dataclass(frozen=True)
class Link:
    """One kind of link: ``alpha_s`` per ring step, ``bandwidth`` (bus bandwidth, bytes/s per
    direction), ``base_s`` once per call, and optionally ``busbw_by_size``: measured
    ``(message bytes, busbw)`` pairs, for the bandwidth a message of a given size reaches."""

    name: str
    alpha_s: float
    bandwidth: float
    source: str
    base_s: float = 0.0
    busbw_by_size: tuple = ()

    def bandwidth_at(self, nbytes: float) -> float:
        """The bus bandwidth a message of ``nbytes`` gets: ``bandwidth``, or the measured
        table interpolated in log-size (clamped to its first and last rows)."""
        if not self.busbw_by_size:
            return self.bandwidth
        sizes = [math.log(s) for s, _ in self.busbw_by_size]
        rates = [b for _, b in self.busbw_by_size]
        x = math.log(max(nbytes, 1.0))
        if x <= sizes[0]:
            return rates[0]
        for (x0, b0), (x1, b1) in zip(zip(sizes, rates), zip(sizes[1:], rates[1:])):
            if x <= x1:
                return b0 + (b1 - b0) * (x - x0) / (x1 - x0)
        return rates[-1]


# NCCL 2.29.7-1 (NVIDIA/nccl, tag v2.29.7-1), src/graph/tuning.cc, the tuner's defaults for the
# Ring algorithm and Simple protocol: line 145 baseLatencies 8.4 us per call; hwLatencies per
# ring step, line 152 NVLink 3.4 us, line 158 PCI 5.7 us, line 164 NET 14.0 us (NET was 9.6 us
# from 2.7.5 to 2.17; 14.0 since 2.18.1). Left out: the extra net overhead that 2.29 adds to the
# intra-node steps of a multi-node ring (tuning.cc lines 372-378).
NCCL = "NCCL 2.29.7-1"
BASE_LATENCY_S = 8.4e-6
_LATENCY = (f"latency: {NCCL} src/graph/tuning.cc, Ring/Simple: base 8.4 us per call "
            "(line 145) plus per ring step")
# NCCL's own model of NVLink (src/graph/topo.h, same tag): per link, SM80_NVLINK_BW 20.0 GB/s
# (line 20), SM90_NVLINK_BW 20.6 GB/s (line 21); 12 links on A100, 18 on H100.
_TOPO = f"{NCCL} src/graph/topo.h"
# stas00/ml-engineering (commit 744d01e), network/README.md lines 1405-1423: all_reduce busbw
# on 4 P6-B200 nodes (8 B200 each, 8 x 400 Gb/s AWS EFA v4 per node; NCCL 2.27.7), per payload.
EFA_4_NODES = tuple((size * MiB, busbw * GB) for size, busbw in (
    (1, 5.37), (2, 10.38), (4, 18.90), (8, 35.12), (16, 64.43), (32, 91.19), (64, 156.74), (128,
    197.94), (256, 229.09), (512, 326.90), (1024, 361.99), (2048, 372.42), (4096, 377.34),
    (8192, 380.39), (16384, 381.80)))

INTRA_NODE = {link.name: link for link in (
    Link("NVLink 4 (H100)", 3.4e-6, 18 * 20.6 * GB,
         f"18 links x 20.6 GB/s = 370.8 GB/s, NCCL's own figure ({_TOPO} line 21; the "
         "datasheet's 450 GB/s per direction is the signalling rate; stas00 measured ~376 "
         "GB/s H100 P2P, network/README.md); NVLink 3.4 us per step (tuning.cc line 152); "
         + _LATENCY, BASE_LATENCY_S),
    Link("NVLink 3 (A100)", 3.4e-6, 12 * 20.0 * GB,
         f"12 links x 20.0 GB/s = 240 GB/s, NCCL's own figure ({_TOPO} line 20; stas00 "
         "measured 235 GB/s all-reduce busbw on 8 A100, network/README.md line 82); NVLink "
         "3.4 us per step (tuning.cc line 152); " + _LATENCY, BASE_LATENCY_S),
    Link("PCIe 5 x16", 5.7e-6, 63 * GB,
         "63 GB/s per direction (stas00/ml-engineering network/README.md, PCIe table); PCI "
         "5.7 us per step (tuning.cc line 158); " + _LATENCY, BASE_LATENCY_S),
    Link("PCIe 4 x16", 5.7e-6, 31 * GB,
         "31 GB/s per direction (stas00/ml-engineering network/README.md, PCIe table); PCI "
         "5.7 us per step (tuning.cc line 158); " + _LATENCY, BASE_LATENCY_S),
)}

INTER_NODE = {link.name: link for link in (
    Link("8 x 400 Gb/s per node (EFA v4 measured)", 14.0e-6, 400 * GB,
         "8 x 400 Gb/s = 400 GB/s per node; the bandwidth a message gets is the all_reduce "
         "busbw measured on 4 nodes of 8 B200 over AWS EFA v4 at that size (stas00/ml-"
         "engineering network/README.md lines 1405-1423: 64.43 GB/s at 16 MiB, 91.19 at 32 "
         "MiB, 377.34 at 4 GiB; NCCL 2.27.7); network 14.0 us per step (tuning.cc line 164)",
         busbw_by_size=EFA_4_NODES),
    Link("InfiniBand NDR, 1 x 400 Gb/s per node", 14.0e-6, 50 * GB,
         "400 Gb/s = 50 GB/s, one NIC per node (InfiniBand NDR signalling rate, "
         "stas00/ml-engineering network/README.md); network 14.0 us per step (tuning.cc "
         "line 164)"),
    Link("Ethernet, 100 Gb/s per node", 14.0e-6, 12.5 * GB,
         "100 Gb/s = 12.5 GB/s (100GbE); network 14.0 us per step (tuning.cc line 164), "
         "optimistic for TCP"),
    Link("Ethernet, 25 Gb/s per node", 14.0e-6, 3.125 * GB,
         "25 Gb/s = 3.125 GB/s (25GbE); network 14.0 us per step (tuning.cc line 164), "
         "optimistic for TCP"),
)}


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """What one rank computes with: ``flops`` per second (dense), ``memory_bandwidth`` bytes/s,
    and ``record``: the GPU record (``gpu_record.names()``) whose model FLOPs utilisation the
    model takes for it, None where no card of its kind was measured (the reader then gives a
    utilisation). A fraction of peak measured on one card is not another's: the H200 has the
    H100 SXM's 989 TFLOP/s but 43% more memory bandwidth, and ran the same models 1.24-1.94
    times faster (the two records)."""

    name: str
    flops: float
    memory_bandwidth: float
    source: str
    record: str | None = None


H100_RECORD = "h100-2026-11-25"
ACCELERATORS = {a.name: a for a in (
    Accelerator("H100 SXM", 989e12, 3.35e12,
                "989 TFLOP/s dense BF16, 3.35 TB/s HBM3 (NVIDIA H100 datasheet); MFU from the "
                f"record measured on one H100 SXM ({H100_RECORD})", H100_RECORD),
    Accelerator("H100 PCIe", 756e12, 2.0e12,
                "756 TFLOP/s dense BF16, 2.0 TB/s HBM2e (NVIDIA H100 datasheet, PCIe column); "
                f"no PCIe card was measured: MFU from the H100 SXM's record ({H100_RECORD}), "
                "an assumption", H100_RECORD),
    Accelerator("A100 SXM 80GB", 312e12, 2.04e12,
                "312 TFLOP/s dense BF16, 2.04 TB/s HBM2e (NVIDIA A100 datasheet); no A100 was "
                "measured: give a utilisation"),
)}

# FLOPs of one forward and backward per parameter and per sample (or token): 2 forward, 4
# backward (Kaplan et al. 2020, "Scaling laws for neural language models", section 2.1: C = 6N).
FLOPS_PER_PARAM = 6
# Backward costs twice the forward (the 4 of the 6 above), so it is 2/3 of the computation.
BACKWARD_SHARE = 2 / 3


def sources() -> str:
    """Each constant the model predicts clusters from, with its source, one paragraph each
    (wrapped for a page's column): the links inside a node and across nodes, the
    accelerators, the FLOPs per parameter."""
    links = [f"{link.name}: alpha {1e6 * link.alpha_s:.1f} us per step, "
             f"{link.bandwidth / GB:g} GB/s; source: {link.source}"
             for table in (INTRA_NODE, INTER_NODE) for link in table.values()]
    chips = [f"{chip.name}: {chip.source}" for chip in ACCELERATORS.values()]
    flops = (f"{FLOPS_PER_PARAM} FLOPs per parameter and token (Kaplan et al. 2020), at the "
             "model FLOPs utilisation below")
    return "\n".join(textwrap.fill(text, 78, subsequent_indent="    ")
                     for text in [*links, *chips, flops])


def seconds_per_sample(params: float, accelerator: Accelerator, tokens_per_sample: int,
                       utilisation: float) -> float:
    """Forward and backward of one sample: 6 FLOPs per parameter and token, at
    ``utilisation`` of the accelerator's peak (model FLOPs utilisation; by model size from
    measurements in ``utilisation.from_record``)."""
    return FLOPS_PER_PARAM * params * tokens_per_sample / (accelerator.flops * utilisation)


# ---------------------------------------------------------------- the all-reduce


def ring_allreduce_seconds(nbytes: float, ranks: int, alpha_s: float, bandwidth: float) -> float:
    """``2(n-1) alpha + 2(n-1)/n * S / B``: NCCL's ring over one kind of link."""
    if ranks == 1:
        return 0.0
    return 2 * (ranks - 1) * alpha_s + 2 * (ranks - 1) / ranks * nbytes / bandwidth


def allreduce_seconds(nbytes: float, gpus_per_node: int, nodes: int,
                      intra: Link, inter: Link | None = None) -> float:
    """The ring over ``nodes`` x ``gpus_per_node`` ranks: a base latency,
    ``2(nodes-1)`` of its steps cross the network, the rest stay in a node;
    bytes move at the slowest link's bandwidth for a message of ``nbytes``."""
    ranks = gpus_per_node * nodes
    if ranks == 1:
        return 0.0
    if nodes > 1 and inter is None:
        raise ValueError("more than one node needs an inter-node link")
    net_steps = 2 * (nodes - 1)
    links = [intra] if gpus_per_node > 1 else []
    links += [inter] if nodes > 1 else []
    bandwidth = min(link.bandwidth_at(nbytes) for link in links)
    latency = max(link.base_s for link in links)
    latency += (2 * (ranks - 1) - net_steps) * intra.alpha_s
    if nodes > 1:
        latency += net_steps * inter.alpha_s
    return latency + 2 * (ranks - 1) / ranks * nbytes / bandwidth


def link_from_fit(alpha_s: float, bandwidth: float, ranks: int, name: str) -> Link:
    """The ring constants behind a fit ``T(S) = alpha + S/B`` measured at ``ranks`` ranks:
    ``alpha / (2(n-1))`` per step and the bus bandwidth ``B * 2(n-1)/n``."""
    if ranks < 2:
        raise ValueError("a fit of the all-reduce needs at least 2 ranks")
    steps = 2 * (ranks - 1)
    return Link(name, alpha_s / steps, bandwidth * steps / ranks,
                f"fitted here at {ranks} ranks: alpha {alpha_s * 1e6:.0f} us, "
                f"B {bandwidth / GB:.2f} GB/s")


# ---------------------------------------------------------------- buckets and overlap


def exposed_seconds(bucket_seconds: float, buckets: int, backward_s: float,
                    overlap: bool = True) -> float:
    """Communication left after backward's last gradient, for ``buckets``
    all-reduces of ``bucket_seconds`` each, run one after the other.

    With ``overlap``, backward fills bucket ``i`` (of ``n``) at ``i/n`` of
    its time, and a bucket's all-reduce starts once it is full and the
    previous one is done; so the last one ends at
    ``max(backward + T_b, backward/n + n T_b)``. Without overlap (a CPU whose
    cores also run backward), every all-reduce is paid after it.
    """
    if not overlap:
        return buckets * bucket_seconds
    end = max(backward_s + bucket_seconds,
              backward_s / buckets + buckets * bucket_seconds)
    return end - backward_s


# ---------------------------------------------------------------- a step


@dataclasses.dataclass(frozen=True)
class Step:
    """The model's time of one optimizer step, in seconds, and what follows from it."""

    ranks: int
    samples: int  # global batch: batch_size x accumulation x ranks
    compute_s: float  # forward and backward of every micro-batch
    copy_s: float  # DDP copies the gradients into its buckets and back: 2 copies of S bytes
    comm_s: float  # every bucket's all-reduce, end to end
    exposed_s: float  # the part of comm_s that backward did not hide
    optimizer_s: float
    buckets: int

    @property
    def step_s(self) -> float:
        return self.compute_s + self.copy_s + self.exposed_s + self.optimizer_s

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.step_s

    @property
    def efficiency(self) -> float:
        """Samples per second against ``ranks`` times one rank that communicates nothing."""
        alone = self.compute_s + self.optimizer_s
        return alone / self.step_s


def predict_step(params: float, batch_size: int, seconds_per_sample: float,
                 gpus_per_node: int = 1, nodes: int = 1, intra: Link | None = None,
                 inter: Link | None = None, bucket_mb: float = 25.0, accumulation: int = 1,
                 overlap: bool = True, optimizer_s: float = 0.0,
                 memory_bandwidth: float | None = None, copy_bandwidth: float | None = None,
                 bytes_per_param: int = 4) -> Step:
    """One optimizer step of DDP: ``accumulation`` micro-batches of ``batch_size`` samples per
    rank, the all-reduce once, in buckets of ``bucket_mb`` MiB overlapped with the last
    backward (``overlap``), plus DDP's two copies of the gradients (into the buckets and
    back). A copy of S bytes reads S and writes S: ``4 S / memory_bandwidth`` for a
    datasheet's memory bandwidth (reads and writes counted together), ``2 S /
    copy_bandwidth`` for a measured copy rate (bytes copied per second)."""
    ranks = gpus_per_node * nodes
    nbytes = params * bytes_per_param
    compute = accumulation * batch_size * seconds_per_sample
    buckets = max(1, math.ceil(nbytes / (bucket_mb * MiB)))
    bucket_s = (allreduce_seconds(nbytes / buckets, gpus_per_node, nodes, intra, inter)
                if ranks > 1 else 0.0)
    backward = BACKWARD_SHARE * batch_size * seconds_per_sample  # the last micro-batch's
    exposed = exposed_seconds(bucket_s, buckets, backward, overlap) if ranks > 1 else 0.0
    copy = (2 * nbytes / copy_bandwidth if copy_bandwidth
            else 4 * nbytes / memory_bandwidth if memory_bandwidth else 0.0)
    return Step(ranks=ranks, samples=batch_size * accumulation * ranks, compute_s=compute,
                copy_s=copy, comm_s=buckets * bucket_s, exposed_s=exposed,
                optimizer_s=optimizer_s, buckets=buckets)
