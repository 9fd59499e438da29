"""The book's chapters, one package each, named as its page (``book/<chapter>.md``), its lab
(``labs/NN_<chapter>.ipynb``) and its tests (``tests/test_<chapter>*.py``).

A chapter is registered by being here: the CLI finds its commands (a module's ``COMMAND``) and
the forkserver preload imports its rank functions through the functions below, so no list of
chapters is kept anywhere else. Of the rest of the library only the report imports a chapter
(it runs their drivers, from the floor above them: ARCHITECTURE.md, "Floors"); a chapter imports
no other, and what two chapters share lives in ``ddplab.common``.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def names() -> list[str]:
    """The chapters' package names, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg)


def experiment_modules() -> list[ModuleType]:
    """Every chapter module but the plots (ranks never draw; matplotlib stays out of them)."""
    modules = []
    for chapter in names():
        package = importlib.import_module(f"{__name__}.{chapter}")
        for info in pkgutil.iter_modules(package.__path__):
            if info.name != "plots":
                modules.append(importlib.import_module(f"{package.__name__}.{info.name}"))
    return modules


def commands() -> dict[str, ModuleType]:
    """The CLI's experiments: ``{module.COMMAND: module}`` over every chapter, sorted by name."""
    found = {}
    for module in experiment_modules():
        command = getattr(module, "COMMAND", None)
        if command is None:
            continue
        if command in found:
            raise RuntimeError(f"two modules claim the command {command!r}: "
                               f"{found[command].__name__} and {module.__name__}")
        found[command] = module
    return dict(sorted(found.items()))
