"""The exercise checker itself. A solution file is loaded as Python imports a
module: a correct file that uses ``@dataclass``, ``typing``, its own ``from __future__``
imports, module-level helpers and a ``__main__`` block passes the command's check; before,
``@dataclass`` could not even load ("'NoneType' object has no attribute '__dict__'": the module
was not in ``sys.modules``). And ``compare_grads`` looks at every parameter on every rank
before it says what differs."""

import sys
import textwrap

import pytest

from ddplab.__main__ import main
from ddplab.exercises import checker

# bucketed-ddp written with a dataclass per bucket, typing, a module-level helper and a main
# block; {future} is replaced by a future import, or by nothing.
DATACLASS_SOLUTION = '''\
{future}import dataclasses
from typing import Optional

import torch
import torch.distributed as dist

WORLD = None  # a module global, read by the helper


def world_size() -> int:
    return dist.get_world_size() if WORLD is None else WORLD


@dataclasses.dataclass
class Bucket:
    params: list
    ready: int = 0
    flat: Optional[torch.Tensor] = None
    work: Optional[object] = None


class BucketedDDP(torch.nn.Module):
    def __init__(self, module, bucket_size_mb: float):
        super().__init__()
        self.module, cap = module, bucket_size_mb * 2**20
        self.buckets: list[Bucket] = [Bucket([])]
        size = 0
        for p in reversed(list(module.parameters())):
            nbytes = p.numel() * p.element_size()
            if self.buckets[-1].params and size + nbytes > cap:
                self.buckets.append(Bucket([]))
                size = 0
            self.buckets[-1].params.append(p)
            size += nbytes
        for bucket in self.buckets:
            for p in bucket.params:
                p.register_post_accumulate_grad_hook(
                    lambda p, bucket=bucket: self._ready(bucket))

    def forward(self, *inputs):
        return self.module(*inputs)

    def _ready(self, bucket: Bucket) -> None:
        bucket.ready += 1
        if bucket.ready == len(bucket.params):
            bucket.flat = torch.cat([p.grad.flatten() for p in bucket.params])
            bucket.work = dist.all_reduce(bucket.flat, async_op=True)

    def finish_gradient_synchronization(self) -> None:
        for bucket in self.buckets:
            bucket.work.wait()
            bucket.flat /= world_size()
            offset = 0
            for p in bucket.params:
                p.grad.copy_(bucket.flat[offset:offset + p.numel()].view_as(p.grad))
                offset += p.numel()
            bucket.ready = 0


if __name__ == "__main__":
    raise SystemExit("a main block runs only when the file is run as a script")
'''


@pytest.mark.parametrize("future", ["from __future__ import annotations\n", ""],
                         ids=["own future import", "no future import"])
def test_a_correct_file_with_a_dataclass_typing_helpers_and_a_main_block_passes(
        tmp_path, capsys, future):
    path = tmp_path / "mine.py"
    path.write_text(DATACLASS_SOLUTION.format(future=future))
    assert main(["exercise", "bucketed-ddp", "--solution", str(path)]) == 0, \
        capsys.readouterr()
    assert "bucketed-ddp: passed" in capsys.readouterr().out


def test_the_file_gets_its_own_future_flags_only(tmp_path):
    # checker.py has `from __future__ import annotations`; a file without it keeps its
    # annotations evaluated, as Python would import it
    path = tmp_path / "plain.py"
    path.write_text("def f(x: int) -> int:\n    return x\n")
    assert checker.load_solution(str(path), "f").__annotations__ == {"x": int, "return": int}
    path.write_text("from __future__ import annotations\n\n\n"
                    "def f(x: int) -> int:\n    return x\n")
    assert checker.load_solution(str(path), "f").__annotations__ == {"x": "int",
                                                                     "return": "int"}


def test_the_module_is_registered_while_it_runs_and_gone_afterwards(tmp_path):
    path = tmp_path / "seen.py"
    path.write_text("import sys\n\nSEEN = sys.modules[__name__].__file__\n\n\n"
                    "def f():\n    return SEEN\n")
    f = checker.load_solution(str(path), "f")
    assert f() == str(path) and f.__module__ == checker.SOLUTION_MODULE
    assert checker.SOLUTION_MODULE not in sys.modules  # so the ranks get it by value
    assert not (tmp_path / "__pycache__").exists()  # the reader's folder left as it was


def test_a_file_that_raises_while_loading_is_unusable_with_the_error(tmp_path):
    path = tmp_path / "raises.py"
    path.write_text(textwrap.dedent("""\
        import dataclasses

        @dataclasses.dataclass
        class Broken:
            x: int = []  # a mutable default: dataclass refuses it
        """))
    with pytest.raises(checker.Unusable, match=r"raised while loading: ValueError: mutable "
                                               r"default"):
        checker.load_solution(str(path), "Broken")
    with pytest.raises(checker.Unusable, match="no such file"):
        checker.load_solution(str(tmp_path / "absent.py"), "f")


def test_compare_grads_looks_at_every_parameter_before_it_speaks():
    import numpy as np

    want = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, -1.0]), "c": np.array([0.5, 4.0])}
    # every gradient on both ranks twice the right one: one factor, named with its hint
    doubled = [{k: 2 * v for k, v in want.items()}] * 2
    said = checker.compare_grads(doubled, want, {2: "added twice."}, "here")
    assert said == "here: every gradient, on every rank, is 2 times the right one: added twice."
    # only some: which, and which are right
    some = [{**want, "b": 2 * want["b"]}] * 2
    assert checker.compare_grads(some, want, {}, "here") == \
        "here: the gradients of 'b' on every rank are 2 times the right ones (those of 'a', " \
        "'c' are right)."
    # a gradient that is another parameter's right one
    swapped = [{"a": want["b"], "b": want["a"], "c": want["c"]}] * 2
    assert "'a' on rank 0 is the right gradient of 'b'" in \
        checker.compare_grads(swapped, want, {}, "here")
    # ranks that ended differently: said as such, not as ranks left out of the average
    apart = [{**want, "a": np.array([1.0, 7.0])}, {**want, "a": np.array([5.0, 2.0])}]
    said = checker.compare_grads(apart, want, {}, "here")
    assert "differs from rank 1's: the ranks ended with different gradients" in said
    assert "did not all take part" not in said
    assert checker.compare_grads([want, want], want, {}, "here") is None
