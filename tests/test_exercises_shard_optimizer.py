"""The shard-optimizer exercise: the answer passes, and so does a sharding by size (PyTorch's
ZeroRedundancyOptimizer); the mistakes readers make (a plain optimizer, no broadcast, a
broadcast from rank 0, gradients divided again, a rank that owns nothing, a broadcast only the
owner calls) are each rejected with a message that names them and the case; the command's exit
codes."""

import inspect
import json
import textwrap

import pytest

from ddplab import exercises
from ddplab.__main__ import main

NAME = "shard-optimizer"
ANSWER = exercises.shard_optimizer.EXERCISE.answer
IMPORTS = "import torch\nimport torch.distributed as dist\n\n\n"
FIRST = "world size 2, momentum, layers [8, 16, 4] (4 parameters)"

# Each mistake but the first is the answer (``Answer``) with one thing changed.
WRONG = {
    "a plain optimizer on every rank": ("""
        class ShardedOptimizer:
            def __init__(self, params, optimizer_cls, **kwargs):
                self.optimizer = optimizer_cls(params, **kwargs)

            def step(self, closure=None):
                return self.optimizer.step(closure)

            def zero_grad(self):
                self.optimizer.zero_grad()
        """, f"{FIRST}: every rank holds the whole optimizer state (848 bytes on each of the 2 "
             "ranks), as a plain optimizer does"),
    "no broadcast after the step": ("""
        class ShardedOptimizer(Answer):
            def step(self, closure=None):
                if self.local is not None:
                    self.local.step()
        """, f"{FIRST}: after 3 steps parameter '0.weight' differs between rank 0 and rank "
             "1 (rank 1 still holds its initial value): each rank stepped its own share and "
             "the others never received it"),
    "every broadcast from rank 0": ("""
        class ShardedOptimizer(Answer):
            def step(self, closure=None):
                if self.local is not None:
                    self.local.step()
                with torch.no_grad():
                    for p, _ in self.owners:
                        dist.broadcast(p, src=0)
        """, f"{FIRST}: after 3 steps parameter '0.bias' is the same on every rank but never "
             "moved from its initial value: rank 1, which holds its optimizer state, stepped "
             "it, but it was broadcast from a rank that did not step it"),
    "gradients divided by the world size again": ("""
        class ShardedOptimizer(Answer):
            def step(self, closure=None):
                for p, owner in self.owners:
                    if owner == dist.get_rank():
                        p.grad /= dist.get_world_size()
                return super().step(closure)
        """, f"{FIRST}: after 3 steps parameter '0.weight' is what one process gets with every "
             "gradient divided by the world size (2): DDP's backward already averaged"),
    "an optimizer on no parameters": ("""
        class ShardedOptimizer(Answer):
            def __init__(self, params, optimizer_cls, **kwargs):
                super().__init__(params, optimizer_cls, **kwargs)
                if self.local is None:  # the answer's guard left out
                    self.local = optimizer_cls([], **kwargs)
        """, "world size 3, adam, layers [6, 3] (2 parameters): ShardedOptimizer raised on rank "
             "2: ValueError: optimizer got an empty parameter list. With 2 parameters on 3 "
             "ranks some rank owns none"),
    "another raise on a rank that owns nothing": ("""
        class ShardedOptimizer(Answer):
            def __init__(self, params, optimizer_cls, **kwargs):
                super().__init__(params, optimizer_cls, **kwargs)
                self.lr = self.local.param_groups[0]["lr"]  # None on a rank that owns nothing
        """, "world size 3, adam, layers [6, 3] (2 parameters): ShardedOptimizer raised on rank "
             "2: AttributeError: 'NoneType' object has no attribute 'param_groups'. With 2 "
             "parameters on 3 ranks some rank owns none, and a rank that owns none must still "
             "run"),
    "only the owner calls broadcast": ("""
        class ShardedOptimizer(Answer):
            def step(self, closure=None):
                if self.local is not None:
                    self.local.step()
                with torch.no_grad():
                    for p, owner in self.owners:
                        if owner == dist.get_rank():
                            dist.broadcast(p, src=owner)
        """, f"{FIRST}: hang in dist.broadcast. Broadcasts each rank started: rank 0: 1, the "
             "last from src=0; rank 1: 1, the last from src=1. A broadcast is a collective: "
             "every rank must call every broadcast"),
    "all the state on rank 0": ("""
        class ShardedOptimizer(Answer):
            def __init__(self, params, optimizer_cls, **kwargs):
                torch.optim.Optimizer.__init__(self, params, kwargs)
                self.owners = [(p, 0) for group in self.param_groups for p in group["params"]]
                everything = [p for p, _ in self.owners]
                self.local = optimizer_cls(everything, **kwargs) if dist.get_rank() == 0 \\
                    else None
        """, f"{FIRST}: rank 0 holds 848 of the 848 bytes of optimizer state, more than a share "
             "(768 bytes, the state of the 2 largest of the 4 parameters)"),
}


def reader(source: str):
    """``ShardedOptimizer`` as a notebook cell defines it (a namespace named ``__main__``):
    shipped to the ranks by value, as a reader's is."""
    namespace = {"__name__": "__main__", "Answer": ANSWER}
    exec(compile(IMPORTS + textwrap.dedent(source), "<cell>", "exec"), namespace)
    return namespace["ShardedOptimizer"]


# Importing torch.distributed.optim scripts its functional optimizers, which torch.jit now warns of.
@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_the_answer_and_a_sharding_by_size_pass_on_every_case():
    verdict = exercises.check(NAME, ANSWER, world_size=4)
    assert verdict.passed, verdict.message
    assert verdict.message.startswith("4 cases on world sizes [2, 3, 4] agree with")
    by_size = reader("""
        from torch.distributed.optim import ZeroRedundancyOptimizer

        class ShardedOptimizer(ZeroRedundancyOptimizer):  # largest first, to the emptiest rank
            def __init__(self, params, optimizer_cls, **kwargs):
                super().__init__(params, optimizer_class=optimizer_cls, **kwargs)
        """)
    verdict = exercises.check(NAME, by_size)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("kind", list(WRONG))
def test_a_wrong_solution_is_rejected_naming_the_mistake(kind):
    source, words = WRONG[kind]
    verdict = exercises.check(NAME, reader(source), timeout=5)
    assert not verdict.passed
    assert verdict.message.startswith(words), verdict.message
    assert verdict.message.count("rank 2") <= 1, verdict.message  # a rank is named once


def test_the_command_says_1_for_a_plain_optimizer_and_0_for_the_answer(tmp_path, capsys):
    """``main`` in this process, where the pool is warm (tests/test_exercises.py runs the
    command in a process of its own)."""
    for name, source, code in [
            ("plain.py", textwrap.dedent(WRONG["a plain optimizer on every rank"][0]), 1),
            ("answer.py", inspect.getsource(ANSWER), 0)]:
        path = tmp_path / name
        path.write_text(IMPORTS + source)
        assert main(["exercise", NAME, "--solution", str(path), "--json"]) == code
        verdict = json.loads(capsys.readouterr().out)
        assert verdict["passed"] is (code == 0), verdict
        assert code == 0 or "every rank holds the whole optimizer state" in verdict["message"]
    assert verdict["message"].startswith("4 cases on world sizes [2, 3] agree with")
