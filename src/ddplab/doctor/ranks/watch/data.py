"""Data: every DataLoader, every pass over it, every DistributedSampler order (wrapped: torch
has no hook for these).

A *pass* is one ``iter(loader)``; it is a *training* pass once a backward runs during it, an
*evaluation* pass if none does. Training passes are cut at ``Settings.batches`` batches
(at an optimizer-step boundary) so that two epochs of a large dataset take seconds. After
``Settings.steps`` optimizer steps, or the training epochs they need at that cut (two at
least: what ``sampler-set-epoch`` needs), training ends (``Recorder.drain``): each of the
script's remaining epochs gets one batch of each loader, never none (its per-epoch code may
need one: the epoch's last loss, a batch's shape), so its evaluation, early stopping, final
save and load and teardown run on every rank and are checked. The steps of those batches are
not counted or judged. Evaluation passes run whole, the first two after training ended too:
a metric's unequal shards show in their last batches.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import weakref

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.digest import first_tensor, tensor_hash
from ddplab.doctor.ranks.watch import gathered, iterables
from ddplab.doctor.ranks.watch.model import MODELS
from ddplab.doctor.settings import Settings

FIRST = 8  # indices kept per sampler order, to show in a message
CUSTOM_FIRST = 64  # indices of a sampler of the reader's own class, digested and kept
DRAINED = 20  # training passes of one batch, training ended, before the run stops
KEPT_INDICES = 1 << 16  # a shard up to this size is kept whole, to compare across ranks


def _len(value):
    try:
        return len(value)
    except Exception:
        return None


def fingerprint(dataset) -> str:
    """Same value on two ranks: the same data, as far as can be told without calling the
    reader's ``__getitem__`` (which may draw random numbers and change their run): a
    TensorDataset's tensors, a Subset's indices, and those a dataset of the reader's holds in
    its attributes."""
    import torch.utils.data as data

    if isinstance(dataset, data.TensorDataset):
        return "tensors:" + ",".join(tensor_hash(t) for t in dataset.tensors)
    if isinstance(dataset, data.Subset):
        picked = hashlib.blake2b(repr(list(dataset.indices)).encode(), digest_size=8)
        return f"subset:{picked.hexdigest()}:{fingerprint(dataset.dataset)}"
    held = [fingerprint(value) for value in getattr(dataset, "__dict__", {}).values()
            if isinstance(value, (data.TensorDataset, data.Subset))]
    if held:  # a dataset of the reader's that keeps a split (random_split's Subsets) inside
        digest = hashlib.blake2b("|".join(held).encode(), digest_size=8).hexdigest()
        return f"holds:{digest}:{type(dataset).__name__}:{_len(dataset)}"
    return f"{type(dataset).__name__}:{_len(dataset)}"


def _digest(indices) -> str:
    return hashlib.blake2b(repr(indices).encode(), digest_size=8).hexdigest()


def _plain(index):
    """An index as JSON: an int (a 0-dim tensor's too), a batch's list of them, else its
    text."""
    try:
        return operator.index(index)
    except TypeError:
        pass
    if isinstance(index, (list, tuple)):
        return [_plain(i) for i in index]
    return repr(index)


def _custom_samplers(loader) -> list:
    """The loader's samplers of the reader's own classes that have ``set_epoch`` (its sampler,
    its batch sampler, the sampler inside that): their order is judged by ``sampler-set-epoch``
    as a DistributedSampler's is."""
    from torch.utils.data.distributed import DistributedSampler

    found = []
    for sampler in (loader.sampler, loader.batch_sampler,
                    getattr(loader.batch_sampler, "sampler", None)):
        kind = type(sampler)
        iterate = getattr(kind, "__iter__", None)
        code = getattr(iterate, "__code__", None)
        if (sampler is None or not callable(getattr(kind, "set_epoch", None)) or code is None
                or iterate is getattr(DistributedSampler, "__iter__", None)
                or not where.is_reader_file(code.co_filename)):
            continue
        found.append(sampler)
    return found


def _watch_custom(sampler) -> None:
    """Wrap the ``__iter__`` and ``set_epoch`` of a sampler's class (once per class); a
    DistributedSampler's subclass keeps its epoch where ``DistributedSampler.set_epoch``, which
    is watched already, puts it."""
    from torch.utils.data.distributed import DistributedSampler

    kind = type(sampler)
    distributed = issubclass(kind, DistributedSampler)

    def make_iter(real):
        code = real.__code__

        def __iter__(self):
            rec = _recorder.RECORDER
            inner = iter(real(self))
            drawn = list(itertools.islice(inner, CUSTOM_FIRST))
            first = [_plain(i) for i in drawn]
            if "_ddplab_doctor" not in self.__dict__:
                self.__dict__["_ddplab_doctor"] = rec.count("sampler")
            active = getattr(rec, "active_pass", None)
            rec.add(records.CustomOrder(
                sampler=self._ddplab_doctor, type=type(self).__name__,
                epoch=self.__dict__.get("epoch" if distributed else "_ddplab_epoch"),
                first=first, digest=_digest(first),
                loader=active.loader if active else None,
                pass_number=active.number if active else None,
                iter_file=code.co_filename, iter_line=code.co_firstlineno))
            return itertools.chain(drawn, inner)
        return __iter__

    def make_set_epoch(real):
        def set_epoch(self, epoch, *args, **kwargs):
            rec = _recorder.RECORDER
            if "_ddplab_doctor" not in self.__dict__:
                self.__dict__["_ddplab_doctor"] = rec.count("sampler")
            self.__dict__["_ddplab_epoch"] = epoch if isinstance(epoch, int) else None
            spot = where.line()
            rec.add(records.SetEpoch(sampler=self._ddplab_doctor, epoch=epoch,
                                     **where.fields(spot)))
            return real(self, epoch, *args, **kwargs)
        return set_epoch

    patching.wrap(kind, "__iter__", make_iter, "custom-sampler")
    if not distributed:
        patching.wrap(kind, "set_epoch", make_set_epoch, "custom-sampler")


class Wrapped:
    """A loader's iterator in place of the real one (``_inner``): iterable, its length and
    everything else the real iterator's; a subclass says what ``__next__`` does."""

    def __init__(self, inner):
        self._inner = inner

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._inner)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class PassIterator(Wrapped):
    """The loader's iterator, counted. The pass's record is replaced with a new one as it goes
    (records are frozen)."""

    def __init__(self, inner, record: records.Pass, cap: int):
        super().__init__(inner)
        self.record, self._cap = record, cap

    def __next__(self):
        rec, seen = _recorder.RECORDER, self.record
        if rec.backwards > seen.backwards_seen:
            if not seen.training:
                eval_samples = rec.counters.get("eval_samples", 0)
                rec.counters["eval_samples"] = max(0, eval_samples - seen.samples)
            seen = self.record = rec.update(seen, training=True, backwards_seen=rec.backwards)
        at_step = rec.counters.get("backwards_at_step", -1) == rec.backwards
        if seen.training and at_step and (
                (seen.batches >= self._cap and rec.steps > seen.steps_at_start)
                or rec.draining is not None):
            self.record = rec.update(seen, capped=True)
            raise StopIteration
        rec.active_pass = seen
        try:
            batch = next(self._inner)
        except StopIteration:
            self.record = rec.update(seen, exhausted=True)
            raise
        tensor = first_tensor(batch)
        size = int(tensor.shape[0]) if tensor is not None and tensor.dim() else 1
        first = tensor_hash(tensor) if seen.batches == 0 and tensor is not None else seen.first
        self.record = rec.update(seen, batches=seen.batches + 1, samples=seen.samples + size,
                                 first=first)
        rec.counters["last_batch"] = size
        if not seen.training:
            rec.counters["eval_samples"] = rec.counters.get("eval_samples", 0) + size
        return batch


class EndedPass(Wrapped):
    """A loader's pass once training has ended: one batch, or the whole pass for a training
    loader while every DDP model is in ``eval()`` mode (an accuracy over the training set at
    the script's end, as many scripts compute). The batches a model trains on are counted
    (``drained_batches``): the optimizer steps they feed are the script's, not training on
    after its loaders ended."""

    def __init__(self, inner, record: records.Pass, whole_in_eval: bool):
        super().__init__(inner)
        self.record, self._whole_in_eval = record, whole_in_eval

    def __next__(self):
        models = [m["ddp"]() for m in MODELS.values()]
        training = not models or any(m is not None and m.module.training for m in models)
        if self.record.batches and (training or not self._whole_in_eval):
            raise StopIteration
        rec = _recorder.RECORDER
        rec.active_pass = self.record  # the sampler's order is this pass's
        batch = next(self._inner)
        self.record = rec.update(self.record, batches=self.record.batches + 1)
        if training:
            rec.counters["drained_batches"] = rec.counters.get("drained_batches", 0) + 1
        return batch


def _ended(rec, index: int, trained: int) -> bool:
    """Whether this pass is cut to one batch, training ended: a loader's that trained is,
    and one's that only evaluated is after two whole passes since (so that a script that
    evaluates every epoch still reaches its end soon). After ``DRAINED`` such training passes
    the run stops: a script of a thousand epochs is not waited for."""
    ended = rec.counters.setdefault("ended_passes", 0)
    if trained:
        rec.counters["ended_passes"] = ended + 1
        if ended + 1 > DRAINED:
            raise _recorder.DoctorStop(f"{DRAINED} epochs of one batch after training ended")
        return True
    key = f"evaluations_since_drain/{index}"
    rec.counters[key] = rec.counters.get(key, 0) + 1
    return rec.counters[key] > 2


def _count_iteration(rec, index: int) -> None:
    made = next((d for d in rec.records.get(records.Loader.KIND, []) if d.index == index), None)
    if made is not None:
        rec.update(made, iterations=made.iterations + 1)


def install() -> None:
    import torch.utils.data as data
    from torch.utils.data.distributed import DistributedSampler

    settings = Settings.current()
    cap = settings.batches
    epochs = max(2, -(-settings.steps // max(cap, 1)))  # the training epochs --steps needs

    def make_init(real):
        def __init__(self, dataset, *args, **kwargs):
            real(self, dataset, *args, **kwargs)
            rec = _recorder.RECORDER
            spot = where.line()
            sampler = self.sampler
            inner = getattr(self.batch_sampler, "sampler", None)
            self._ddplab_doctor = rec.count("loader")
            rec.add(records.Loader(
                index=self._ddplab_doctor, **where.fields(spot),
                dataset=type(dataset).__name__, dataset_len=_len(dataset),
                fingerprint=fingerprint(dataset),
                iterable=isinstance(dataset, data.IterableDataset),
                sampler=type(sampler).__name__ if sampler is not None else None,
                distributed=isinstance(sampler, DistributedSampler)
                or isinstance(inner, DistributedSampler)
                or isinstance(self.batch_sampler, DistributedSampler),
                sampler_len=_len(sampler) if sampler is not None else None,
                batch_size=self.batch_size, drop_last=bool(self.drop_last)))
            if isinstance(dataset, data.IterableDataset):
                iterables.remember(self._ddplab_doctor, self)
            for custom in _custom_samplers(self):
                _watch_custom(custom)
        return __init__

    def make_iter(real):
        def __iter__(self):
            rec = _recorder.RECORDER
            index = getattr(self, "_ddplab_doctor", None)
            if index is None:
                return real(self)
            _count_iteration(rec, index)
            passes = [p for p in rec.records.get(records.Pass.KIND, []) if p.loader == index]
            trained = sum(p.training for p in passes)
            if trained >= epochs:
                rec.drain(f"{epochs} epochs")
            ended = rec.draining is not None and _ended(rec, index, trained)
            spot = where.line()
            record = rec.add(records.Pass(loader=index, number=len(passes), len=_len(self),
                                          **where.fields(spot),
                                          backwards_seen=rec.backwards,
                                          steps_at_start=rec.steps, ended=ended))
            if ended:
                return EndedPass(real(self), record, whole_in_eval=bool(trained))
            rec.active_pass = record  # workers draw their first indices while it starts
            return PassIterator(real(self), record, cap)
        return __iter__

    def make_sampler_iter(real):
        def __iter__(self):
            rec = _recorder.RECORDER
            indices = list(real(self))
            if not hasattr(self, "_ddplab_doctor"):
                self._ddplab_doctor = rec.count("sampler")
            active = getattr(rec, "active_pass", None)
            rec.add(records.SamplerOrder(
                sampler=self._ddplab_doctor, epoch=self.epoch, shuffle=self.shuffle,
                seed=self.seed, drop_last=self.drop_last, num_replicas=self.num_replicas,
                sampler_rank=self.rank, dataset_len=_len(self.dataset),
                total_size=self.total_size, first=indices[:FIRST], count=len(indices),
                digest=_digest(indices),
                loader=active.loader if active else None,
                pass_number=active.number if active else None,
                indices=indices if len(indices) <= KEPT_INDICES else None))
            gathered.SAMPLERS[self._ddplab_doctor] = weakref.ref(self)
            return iter(indices)
        return __iter__

    def make_set_epoch(real):
        def set_epoch(self, epoch):
            rec = _recorder.RECORDER
            if not hasattr(self, "_ddplab_doctor"):
                self._ddplab_doctor = rec.count("sampler")
            spot = where.line()
            rec.add(records.SetEpoch(sampler=self._ddplab_doctor, epoch=epoch,
                                     **where.fields(spot)))
            return real(self, epoch)
        return set_epoch

    patching.wrap(data.DataLoader, "__init__", make_init)
    patching.wrap(data.DataLoader, "__iter__", make_iter)
    patching.wrap(DistributedSampler, "__iter__", make_sampler_iter)
    patching.wrap(DistributedSampler, "set_epoch", make_set_epoch)
