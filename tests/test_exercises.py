"""The exercise checker: the answers pass; the mistakes readers make are rejected, each with a
message that names it; a hang is reported within its timeout; the command's exit codes."""

import inspect
import json
import os
import textwrap
import time

import nbformat
import pytest

from conftest import alive, ddplab_cli, descendants
from ddplab import exercises
from ddplab.__main__ import main
from ddplab.exercises import prediction


def cell(source: str, name: str):
    """``name`` as a notebook cell defines it (a namespace named ``__main__``), so that it is
    shipped to the ranks by value, as a reader's would be."""
    namespace = {"__name__": "__main__"}
    exec(compile("import torch\nimport torch.distributed as dist\n"
                 + textwrap.dedent(source), "<cell>", "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_each_answer_passes(name):
    verdict = exercises.check(name, exercises.EXERCISES[name].answer)
    assert verdict.passed, verdict.message
    assert "agree with" in verdict.message


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_an_answer_written_in_a_cell_passes_too(name):
    module = exercises.EXERCISES[name]
    source = inspect.getsource(module.answer)
    prelude = "import math\nimport torch.nn.functional as F\n"
    verdict = exercises.check(name, cell(prelude + source, module.FUNCTION))
    assert verdict.passed, verdict.message


AVERAGE = {
    "sum without the division": ("""
        def average_gradients(model):
            for p in model.parameters():
                dist.all_reduce(p.grad)
        """, r"every gradient, on every rank, is 2 times the right one: summed over the ranks "
             r"but not divided by the world size \(2\)"),
    "divided, never exchanged": ("""
        def average_gradients(model):
            for p in model.parameters():
                p.grad /= dist.get_world_size()
        """, r"'0.weight' on rank 0 is that rank's own divided by 2: divided, but never "
             r"summed over the ranks"),
    "biases left out": ("""
        def average_gradients(model):
            for name, p in model.named_parameters():
                if name.endswith("weight"):
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
        """, r"'0.bias' on rank 0 is still that rank's own: it was never all-reduced"),
}

SHARDS = {
    "no padding": ("""
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            return list(range(dataset_len))[rank::world_size]
        """, r"dataset_len=10, world_size=4.*rank 2: expected \[2, 6, 0\], got \[2, 6\]\. "
             r"No padding"),
    "contiguous blocks": ("""
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            n = dataset_len // world_size
            return list(range(rank * n, (rank + 1) * n))
        """, r"dataset_len=8, world_size=4.*rank 0: expected \[0, 4\], got \[0, 1\]\. "
             r"That is a contiguous block"),
    "drop_last ignored": ("""
        import math
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            n = math.ceil(dataset_len / world_size) * world_size
            return [i % dataset_len for i in range(n)][rank::world_size]
        """, r"drop_last=True.*That is the answer for drop_last=False"),
    "epoch ignored": ("""
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            import math
            g = torch.Generator().manual_seed(seed)
            idx = torch.randperm(dataset_len, generator=g).tolist() if shuffle \\
                else list(range(dataset_len))
            per = (math.ceil((dataset_len - world_size) / world_size)
                   if drop_last and dataset_len % world_size
                   else math.ceil(dataset_len / world_size))
            idx = (idx * 3)[:per * world_size] if not drop_last else idx[:per * world_size]
            return idx[rank::world_size]
        """, r"epoch=1.*That is epoch 0's order: .*seed \+ epoch"),
    "shuffled with Python's random": ("""
        import math
        import random
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            indices = list(range(dataset_len))
            if shuffle:
                random.Random(seed + epoch).shuffle(indices)
            per = (math.ceil((dataset_len - world_size) / world_size)
                   if drop_last and dataset_len % world_size
                   else math.ceil(dataset_len / world_size))
            total = per * world_size
            indices = indices[:total] if drop_last else (indices * 3)[:total]
            return indices[rank:total:world_size]
        """, r"shuffle=True.*Every case without shuffle passes and this shuffled one does not.*"
             r"torch\.randperm\(dataset_len, generator=g\).*seed \+ epoch"),
}

ACCUMULATE = {
    "all-reducing every micro-batch": ("""
        def accumulate_step(ddp_model, micro_batches, loss_fn):
            for x, y in micro_batches:
                (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
        """, r"all-reduced 4 times in one step, once per micro-batch"),
    "loss not divided": ("""
        def accumulate_step(ddp_model, micro_batches, loss_fn):
            with ddp_model.no_sync():
                for x, y in micro_batches[:-1]:
                    loss_fn(ddp_model(x), y).backward()
            x, y = micro_batches[-1]
            loss_fn(ddp_model(x), y).backward()
        """, r"is 4 times the right one: each micro-batch's loss was not divided by the "
             r"number of micro-batches"),
    "every backward inside no_sync": ("""
        def accumulate_step(ddp_model, micro_batches, loss_fn):
            with ddp_model.no_sync():
                for x, y in micro_batches:
                    (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
        """, r"DDP never all-reduced.*outside ddp_model.no_sync\(\)"),
}

BUCKETS_BASE = exercises.bucketed_ddp.BucketedDDP
BUCKETED = {
    "buckets all-reduced only at the end": ("""
        class BucketedDDP(Answer):
            def _grad_ready(self, p):
                pass

            def finish_gradient_synchronization(self):
                for i, bucket in enumerate(self.buckets):
                    flat = torch.cat([q.grad.flatten() for q in bucket])
                    self.pending.append((i, flat, dist.all_reduce(flat, async_op=True)))
                super().finish_gradient_synchronization()
        """, r"every all-reduce started after backward had produced all 4 gradients"),
    "one all-reduce per parameter": ("""
        class BucketedDDP(Answer):
            def __init__(self, module, bucket_size_mb):
                super().__init__(module, 0.0)  # every parameter a bucket of its own
        """, r"bucket_size_mb=0.009766.*4 all-reduces on rank 0, expected 2.*one per "
             r"parameter is not bucketing"),
    "sum without the division": ("""
        class BucketedDDP(Answer):
            def finish_gradient_synchronization(self):
                for i, flat, work in self.pending:
                    work.wait()  # and no division
                    offset = 0
                    for q in self.buckets[i]:
                        q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                        offset += q.numel()
                self.pending, self.ready = [], [0] * len(self.buckets)
        """, r"every gradient, on every rank, is 2 times the right one: summed over the ranks "
             r"but not divided by the world size \(2\); or the gradient was added twice"),
    "counts never reset between steps": ("""
        class BucketedDDP(Answer):
            def finish_gradient_synchronization(self):
                ready = self.ready
                super().finish_gradient_synchronization()
                self.ready = ready
        """, r"step 2: 0 all-reduces on rank 0, expected 2, one per bucket, while step 1 "
             r"launched 2: .*kept its value from step 1\. Reset that state for the next step"),
    "a hook that writes .grad before autograd adds it": ("""
        class BucketedDDP(Answer):
            def __init__(self, module, bucket_size_mb):
                super().__init__(module, bucket_size_mb)
                for p in self.bucket_of:  # and the answer's post-accumulate hooks stay
                    p.register_hook(lambda g, p=p: self._write(p, g))

            def _write(self, p, g):
                p.grad = g.clone()  # autograd then adds g to it: twice the gradient
        """, r"every gradient, on every rank, is 2 times the right one: .*or the gradient was "
             r"added twice: a hook registered with register_hook runs before autograd"),
    "a bucket copied back in reverse": ("""
        class BucketedDDP(Answer):
            def finish_gradient_synchronization(self):
                for i, flat, work in self.pending:
                    work.wait()
                    flat /= dist.get_world_size()
                    offset = 0
                    for q in reversed(self.buckets[i]):  # not the order it was flattened in
                        q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                        offset += q.numel()
                self.pending, self.ready = [], [0] * len(self.buckets)
        """, r"step 1: the gradient of '0.weight' on rank 0 is the right gradient of "
             r"'2.weight': '0.weight' received the gradient of '2.weight'"),
}

WRONG = [(name, kind, *case) for name, table in [
    ("average-gradients", AVERAGE), ("shard-indices", SHARDS), ("accumulate", ACCUMULATE),
    ("bucketed-ddp", BUCKETED)] for kind, case in table.items()]


@pytest.mark.parametrize("name, kind, source, match", WRONG, ids=[w[1] for w in WRONG])
def test_a_wrong_solution_is_rejected_naming_the_mistake(name, kind, source, match):
    module = exercises.EXERCISES[name]
    namespace = {"__name__": "__main__"}
    exec("import torch\nimport torch.distributed as dist\n", namespace)
    namespace["Answer"] = BUCKETS_BASE
    exec(compile(textwrap.dedent(source), "<cell>", "exec"), namespace)
    verdict = exercises.check(name, namespace[module.FUNCTION], timeout=10)
    assert not verdict.passed
    assert pytest.importorskip("re").search(match, verdict.message), verdict.message


def test_a_collective_one_rank_skips_is_a_hang_naming_the_rank_that_never_came():
    skips = cell("""
        def average_gradients(model):
            if dist.get_rank() == 0:  # rank 1 never joins
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
        """, "average_gradients")
    exercises.check("average-gradients", exercises.average_gradients.answer)  # pool warm
    before = descendants()
    start = time.monotonic()
    verdict = exercises.check("average-gradients", skips, timeout=3)
    assert time.monotonic() - start < 3 + 5
    assert not verdict.passed
    assert verdict.message.startswith("hang: rank(s) [0] waited in a collective that rank(s) "
                                      "[1] never called"), verdict.message
    gone = before - descendants()
    assert gone and not any(alive(pid) for pid in gone)  # the hung ranks were ended


def test_the_command_exits_0_when_passed_1_when_wrong_2_when_unusable(tmp_path):
    right = tmp_path / "right.py"
    # the answer's annotations name torch: a file Python can import must import it
    right.write_text("import torch\nimport torch.distributed as dist\n\n\n"
                     + inspect.getsource(exercises.average_gradients.answer))
    done = ddplab_cli("exercise", "average-gradients", "--solution", str(right), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True and "agree with" in report["message"]
    wrong = tmp_path / "wrong.py"
    wrong.write_text(textwrap.dedent(AVERAGE["sum without the division"][0])
                     .replace("dist.", "torch.distributed."))
    wrong.write_text("import torch\n" + wrong.read_text())
    done = ddplab_cli("exercise", "average-gradients", "--solution", str(wrong))
    assert done.returncode == 1 and "not divided by the world size" in done.stdout
    broken = tmp_path / "broken.py"
    broken.write_text("def average_gradients(model):\n    return (\n\nx = 1\n")
    done = ddplab_cli("exercise", "average-gradients", "--solution", str(broken))
    assert done.returncode == 2 and "broken.py, line 2" in done.stderr, done.stderr


def test_a_file_without_the_named_function_names_it(tmp_path, capsys):
    other = tmp_path / "other.py"
    other.write_text("def average_gradient(model):\n    pass\n")
    assert main(["exercise", "average-gradients", "--solution", str(other)]) == 2
    err = capsys.readouterr().err
    assert "defines no 'average_gradients' (it defines: average_gradient)" in err


def test_a_prediction_is_compared_with_the_run():
    guess = prediction.ask("How many?", default=2)
    assert prediction.reveal(guess, 3, "rank 3 sees") == \
        "rank 3 sees: 3. You predicted 2: not this time."
    guess.box.value = 3
    assert prediction.reveal(guess, 3.0, "rank 3 sees").endswith("3: right.")


LABS = {"ring-allreduce": "00_running", "average-gradients": "01_averaging",
        "shard-indices": "02_sharding", "scaled-lr": "03_lr_scaling",
        "bucketed-ddp": "04_buckets", "accumulate": "05_time_cost", "equal-batches": "06_hangs",
        "shard-optimizer": "07_memory", "gather-unequal": "08_training_loop"}
ROOT = os.path.dirname(os.path.dirname(__file__))


def test_every_exercise_has_its_lab_and_the_readme_names_it():
    assert sorted(LABS) == sorted(exercises.EXERCISES)
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert all(f"`{name}`" in readme for name in exercises.EXERCISES)


@pytest.mark.parametrize("name", sorted(LABS))
def test_each_labs_hidden_answer_is_the_packages(name):
    lab = LABS[name]
    path = os.path.join(ROOT, "labs", f"{lab}.ipynb")
    hidden = [c.source for c in nbformat.read(path, as_version=4).cells
              if c.metadata.get("jupyter", {}).get("source_hidden")]
    answer = inspect.getsource(exercises.EXERCISES[name].answer)
    assert any(answer in source for source in hidden), f"{lab}: no hidden cell holds the answer"
