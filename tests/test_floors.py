"""The floors of the library: which package imports which, read from the source and held
against one table, the one ARCHITECTURE.md prints ("Floors"). A package that starts or stops
importing another changes the table here and there, or this fails.

    .venv/bin/python tests/test_floors.py    # prints the table the source has
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ddplab"
CHAPTER = "ddplab.chapters.<chapter>"  # any one chapter's package (a chapter imports no other)

# package: (what it is, {the package of ddplab it imports: why, where it is not plain})
FLOORS = {
    "ddplab.common": ("what two or more chapters use: the MLP, hooks, the clock and timed step, "
                      "checks, results, GPU records", {}),
    "ddplab.chapters": ("the finder: `names()`, `experiment_modules()`, `commands()`", {}),
    "ddplab.engine": ("the warm pool, forkserver and preload, the rank side, torchrun, messages, "
                      "placement, hang watching, the ranks' notes and turns at the pool (work "
                      "run ahead gives way)", {
                          "ddplab.common": "",
                          "ddplab.chapters": "`preload.py` only: the forkserver loads every "
                                             "chapter's rank functions through the finder",
                      }),
    "ddplab": ("the face: `run`, `Cluster`, `logs`, `RankError`, `placed`, `placement`",
               {"ddplab.engine": ""}),
    "ddplab.screen": ("what a reader sees: sliders (their neighbouring values run ahead), live "
                      "figures, static panels, style, quoted errors, the status line, the "
                      "predict-then-run input", {
                          "ddplab.common": "", "ddplab.engine": "the placement, the ranks' "
                                                                "notes, turns at the pool"}),
    "ddplab.exercises": ("write-it-yourself exercises and their checker",
                         {"ddplab": "", "ddplab.common": "", "ddplab.engine": ""}),
    CHAPTER: ("one chapter: its experiments (rank functions, drivers, results) and plots", {
        "ddplab": "", "ddplab.common": "", "ddplab.engine": "",
        "ddplab.screen": "the plots"}),
    "ddplab.doctor.records": ("the record kinds a watcher writes and a judge reads, one "
                              "frozen type each", {}),
    "ddplab.doctor.messages": ("what crosses a process boundary in a doctor's run, one frozen "
                               "type per message (a crash among them), and the run they make",
                               {"ddplab.doctor.records": ""}),
    "ddplab.doctor.reference": ("the reference run's shared parts: the files both runs keep, "
                                "batches cut and joined, the comparison of parameters, "
                                "learning rates and printed numbers",
                                {"ddplab.doctor.records": ""}),
    "ddplab.doctor.store": ("the doctor's own TCPStore: evidence leaves a rank only through it",
                            {"ddplab.doctor.messages": "", "ddplab.doctor.records": "",
                             "ddplab.engine": "a store on loopback only"}),
    "ddplab.doctor.settings": ("what a doctor's run is asked to do, stated once and carried to "
                               "every rank as one variable",
                               {"ddplab.engine": "whether torchrun started us"}),
    "ddplab.doctor.ranks": ("the doctor on every rank: the entry point, the watchers, the "
                            "recorder, the reader's line, processes the script spawns, the "
                            "script's CUDA on CPU ranks, its writes kept in a scratch folder", {
                                "ddplab.doctor.messages": "", "ddplab.doctor.records": "",
                                "ddplab.doctor.reference": "", "ddplab.doctor.settings": "",
                                "ddplab.doctor.store": "",
                                "ddplab.engine": "dying with the parent"}),
    "ddplab.doctor.judging": ("the doctor's judging: the evidence read back, the checks' "
                              "registry, the judges, findings and verdicts",
                              {"ddplab.common": "where the book lives (`home`)",
                               "ddplab.doctor.messages": "", "ddplab.doctor.records": "",
                               "ddplab.doctor.reference": ""}),
    "ddplab.doctor.reporting": ("the diagnosis shown: text, JSON, GitHub annotations, SARIF, "
                                "a page",
                                {"ddplab.common": "", "ddplab.doctor.judging": ""}),
    "ddplab.doctor.launch": ("the doctor's own process: the command line, the run and its "
                             "judging, the ranks started and watched, torchrun mode", {
                                 "ddplab": "where the package lies, for the ranks' path",
                                 "ddplab.common": "", "ddplab.engine": "torchrun's environment; "
                                                                       "dying with the parent",
                                 "ddplab.doctor.judging": "", "ddplab.doctor.messages": "",
                                 "ddplab.doctor.ranks": "", "ddplab.doctor.records": "",
                                 "ddplab.doctor.reference": "", "ddplab.doctor.reporting": "",
                                 "ddplab.doctor.settings": "", "ddplab.doctor.store": ""}),
    "ddplab.doctor.examples": ("the doctor's example scripts (a reader's script: torch only)",
                               {}),
    "ddplab.doctor": ("`ddplab doctor`: the package, whose folders are the processes it runs "
                      "in", {}),
    "ddplab.report": ("`ddplab report`: the chapters' drivers run on the reader's machine", {
        "ddplab": "", "ddplab.common": "", "ddplab.engine": "", "ddplab.screen": "",
        CHAPTER: "the drivers, the plots"}),
    "ddplab.__main__": ("`python -m ddplab <command>`", {
        "ddplab": "", "ddplab.common": "", "ddplab.engine": "",
        "ddplab.chapters": "the commands", "ddplab.doctor.launch": "", "ddplab.exercises": "",
        "ddplab.report": ""}),
}


def package_of(module: str) -> str | None:
    """The row of FLOORS that ``module`` (a dotted name of ddplab) belongs to."""
    parts = module.split(".")
    if parts[0] != "ddplab":
        return None
    if len(parts) == 1:
        return "ddplab"
    if parts[1] == "chapters" and len(parts) > 2:
        return CHAPTER
    if parts[1] == "doctor" and len(parts) > 2:  # a row per folder: the process it runs in
        return f"ddplab.doctor.{parts[2]}"
    return f"ddplab.{parts[1]}"


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, package_names: set[str]) -> set[str]:
    """The modules of ddplab a module's source imports (anywhere in it); ``from ddplab import
    chapters`` imports the package ``ddplab.chapters``, ``from ddplab import run`` the face."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, "relative imports hide the floors"
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if f"{node.module}.{alias.name}" in package_names}
    return found


def real_floors() -> dict[str, dict[str, set[str]]]:
    """package -> the package it imports -> the files that do, from the source."""
    paths = sorted(SRC.rglob("*.py"))
    names = {module_name(path) for path in paths}
    edges: dict[str, dict[str, set[str]]] = {}
    for path in paths:
        name = module_name(path)
        here = package_of(name)
        own_chapter = name.split(".")[:3]
        for module in imported(ast.parse(path.read_text()), names):
            there = package_of(module)
            if there is None or (there == here and here != CHAPTER):
                continue
            if here == CHAPTER == there:
                if module.split(".")[:3] == own_chapter:
                    continue
                there = "another chapter"
            edges.setdefault(here, {}).setdefault(there, set()).add(
                path.relative_to(SRC).as_posix())
        edges.setdefault(here, {})
    return edges


def floor_numbers(imports: dict) -> dict[str, int]:
    """Each package's floor (``imports``: package -> what it imports): 0 for one that imports
    nothing of ddplab, else one above the highest it imports. Raises on a circle."""
    numbers: dict[str, int] = {}

    def floor(package, seen=()):
        assert package not in seen, f"a circle: {' -> '.join([*seen, package])}"
        if package not in numbers:
            numbers[package] = 1 + max((floor(p, (*seen, package)) for p in imports[package]),
                                       default=-1)
        return numbers[package]

    for package in imports:
        floor(package)
    return numbers


def table(floors: dict) -> str:
    """The floors as ARCHITECTURE.md prints them, the lowest first."""
    numbers = floor_numbers({package: imports for package, (_, imports) in floors.items()})
    rows = ["| floor | package | what | imports, of ddplab |", "|---|---|---|---|"]
    for package in sorted(floors, key=lambda p: (numbers[p], list(floors).index(p))):
        what, imports = floors[package]
        listed = ", ".join(f"`{p}`" + (f" ({why})" if why else "")
                           for p, why in sorted(imports.items())) or "nothing"
        rows.append(f"| {numbers[package]} | `{package}` | {what} | {listed} |")
    return "\n".join(rows)


def test_each_package_imports_what_the_table_says_and_nothing_else():
    real = {package: set(found) for package, found in real_floors().items()}
    assert set(real) == set(FLOORS), "a package is missing from FLOORS, or FLOORS names one gone"
    stated = {package: set(imports) for package, (_, imports) in FLOORS.items()}
    unexpected = {p: {q: sorted(real_floors()[p][q]) for q in real[p] - stated[p]} for p in real}
    assert {p: found for p, found in unexpected.items() if found} == {}
    unused = {p: stated[p] - real[p] for p in real}
    assert {p: found for p, found in unused.items() if found} == {}


def test_the_floors_have_no_circle_and_the_engine_sits_below_the_chapters():
    numbers = floor_numbers({package: imports for package, (_, imports) in FLOORS.items()})
    assert numbers["ddplab.common"] == 0
    assert numbers["ddplab.engine"] < numbers[CHAPTER] < numbers["ddplab.report"]
    assert numbers["ddplab.screen"] < numbers[CHAPTER]  # the plots draw with screen
    assert max(numbers.values()) == numbers["ddplab.__main__"]
    try:  # a circle is seen
        floor_numbers({"a": {"b": ""}, "b": {"a": ""}})
    except AssertionError as exc:
        assert "a -> b -> a" in str(exc)
    else:
        raise AssertionError("a circle went unseen")


def test_the_scanner_sees_every_way_of_importing():
    names = {"ddplab.chapters", "ddplab.engine", "ddplab.engine.pool"}
    source = ("import ddplab\nfrom ddplab.engine import pool\nfrom ddplab import chapters, run\n"
              "def f():\n    import ddplab.common.mlp\n")
    found = imported(ast.parse(source), names)
    assert found >= {"ddplab", "ddplab.engine.pool", "ddplab.chapters", "ddplab.common.mlp"}
    assert {package_of(m) for m in found} == {"ddplab", "ddplab.engine", "ddplab.chapters",
                                              "ddplab.common"}
    assert package_of("ddplab.chapters.hangs.uneven") == CHAPTER


def module_imports() -> dict[str, set[str]]:
    """module -> the modules of ddplab it imports (anywhere in it, a function's import too);
    ``from package import module`` imports the module, not the package's ``__init__``."""
    paths = sorted(SRC.rglob("*.py"))
    names = {module_name(path) for path in paths}
    graph = {}
    for path in paths:
        found = imported(ast.parse(path.read_text()), names)
        parents = {m.rsplit(".", 1)[0] for m in found}
        graph[module_name(path)] = {m for m in found if m in names and m not in parents
                                    } - {module_name(path)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_round_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles(module_imports()) == []


def test_rank_side_code_never_imports_judging_or_reporting():
    rank_side = [m for m in module_imports() if m.startswith("ddplab.doctor.ranks")]
    assert rank_side
    for module in rank_side:
        upward = {m for m in module_imports()[module]
                  if m.startswith(("ddplab.doctor.judging", "ddplab.doctor.reporting",
                                   "ddplab.doctor.launch"))}
        assert upward == set(), f"{module} imports {sorted(upward)}"


def test_architecture_prints_this_table():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    assert table(FLOORS) in text, ("ARCHITECTURE.md's floors differ from tests/test_floors.py's; "
                                   "the table it should print:\n" + table(FLOORS))


if __name__ == "__main__":
    print(table({package: ("", {p: "" for p in found})
                 for package, found in real_floors().items()}))
