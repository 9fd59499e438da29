"""The groups a rank keeps: one per world size the pool has served, each made torch's default
group in turn, so that moving between world sizes forms no group once each size has been seen.

Why: forming a gloo group (rendezvous through the store, then a connection to every peer) costs
more than a small DDP step (benchmarks/RESULTS.md), and a lab's world-size slider moves back
and forth between a few sizes.

How, and what it relies on in torch (checked in 2.13, ``torch/distributed/distributed_c10d.py``):

- One default group per process: ``init_process_group`` refuses a second while
  ``GroupMember.WORLD`` is set ("trying to initialize the default process group twice!",
  :1772). Every rank function uses the default group (``dist.all_reduce`` without ``group=``,
  DDP without ``process_group=``), so the kept group a call needs *becomes* the default:
  ``_update_default_pg(pg)`` (:1445), the same two lines ``init_process_group`` ends with
  (:1912), which set ``_world.default_pg`` and the rank the C++ side logs with. Before a new
  group is formed the current one is parked with ``_update_default_pg(None)``; it stays
  registered (``_world.pg_map``, the C++ name registry), which is all its collectives need.
- Distinct names. A default group is named from ``_world.group_count`` (``_process_group_name``,
  :5486), which only ``destroy_process_group()`` resets to 0 (:2427); two groups of one name are
  refused (``_new_process_group_helper``, :2008), and ``new_group`` names subgroups from the same
  counter, so every member of a group must hold the same count. The group formed for pool
  generation g starts its count at ``g * SPAN``; when a group is parked its count is saved with
  it and restored when it is used again (its members ran the same calls in between).
- Every kept group has the process's pool rank as its rank, so the global-to-group rank maps
  torch keeps per group (``_world.pg_group_ranks``) stay true whichever group is the default.

Fragility: ``_update_default_pg`` and ``_world.group_count`` are private. Where either is
missing (another torch), :data:`CAN_KEEP` is False and a move destroys the group and forms the
next one, as before. NCCL groups are never kept across a change of size: the pool starts fresh
processes for that (pytorch#119196), so a process holds at most one NCCL group.
"""

from __future__ import annotations

import dataclasses

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

SPAN = 1_000_000  # group names of one kept group: generation * SPAN upwards
CAN_KEEP = hasattr(c10d, "_update_default_pg") and hasattr(type(c10d._world), "group_count")


@dataclasses.dataclass
class Kept:
    group: object  # the ProcessGroup
    count: int  # _world.group_count while it is the default
    ctx: object  # the RankContext calls in this group receive


class Groups:
    """The groups of one rank process, by the pool's generation that formed each."""

    def __init__(self):
        self.kept: dict[int, Kept] = {}
        self.active: int | None = None

    def use(self, generation: int, join):
        """The context of group ``generation``, made the default; ``join()`` forms it (every
        member of the group calls it in the same call) when this rank has not got it yet."""
        if self.active == generation:
            return self.kept[generation].ctx
        self._park()
        if generation in self.kept:
            kept = self.kept[generation]
            c10d._update_default_pg(kept.group)
            c10d._world.group_count = kept.count
        else:
            c10d._world.group_count = generation * SPAN
            ctx = join()
            self.kept[generation] = Kept(c10d._get_default_group(), 0, ctx)
        self.active = generation
        return self.kept[generation].ctx

    def _park(self) -> None:
        if self.active is None:
            return
        if not CAN_KEEP:
            self.close()
            return
        self.kept[self.active].count = c10d._world.group_count
        c10d._update_default_pg(None)
        self.active = None

    def close(self) -> None:
        """Shut every kept group down: ``destroy_process_group()`` on the default shuts down
        every registered group (:2407) and clears torch's tables."""
        if CAN_KEEP and self.kept and not dist.is_initialized():  # one parked, none active
            c10d._update_default_pg(next(iter(self.kept.values())).group)
        if dist.is_initialized():
            dist.destroy_process_group()
        self.kept.clear()
        self.active = None
