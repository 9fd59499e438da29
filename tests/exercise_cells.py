"""What the exercise tests share: a reader's code as a notebook cell defines it, and the check
that a wrong solution is rejected with a message naming its mistake."""

import re
import textwrap

from ddplab import exercises


def cell(source: str, name: str, **names):
    """``name`` as a notebook cell defines it (a namespace named ``__main__``), so that it is
    shipped to the ranks by value, as a reader's would be; ``names`` are defined first (a
    base class to build on, say)."""
    namespace = {"__name__": "__main__", **names}
    exec(compile("import torch\nimport torch.distributed as dist\n"
                 + textwrap.dedent(source), "<cell>", "exec"), namespace)
    return namespace[name]


def assert_rejected(name: str, source: str, match: str, **names) -> None:
    """The exercise ``name`` rejects ``source``, with a message matching ``match``."""
    solution = cell(source, exercises.EXERCISES[name].function, **names)
    verdict = exercises.check(name, solution, timeout=10)
    assert not verdict.passed
    assert re.search(match, verdict.message), verdict.message
