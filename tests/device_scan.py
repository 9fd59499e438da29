"""A static check that rank code would run on a GPU rank, as it runs on a CPU one.

Under NCCL a collective on a tensor left on the host fails ("No backend type associated with
device type cpu"), a module left on the host fails inside DDP, and ``.numpy()`` of a CUDA
tensor raises. On a CPU machine every rank's device *is* the host, so running the code cannot
show any of this; reading it can. This module follows, within each function, which values
start on the host and where they go:

- a value is *on the host* when it comes from a torch factory called without ``device=``
  (``torch.tensor``, ``torch.zeros``, ...), from a ``make_*`` builder (``make_model``,
  ``make_batch``: CPU modules and batches), from a ``torch.nn`` module or a module class
  defined in the same file, or from an expression built on such a value, unless it went
  through ``.to(<a device>)``/``.cuda()`` on the way (``model.to(ctx.device)`` as a statement
  moves ``model`` from that line on);
- it must not reach: a ``torch.distributed`` collective, ``DDP(...)``, the call of a DDP
  wrapper (its forward's inputs), or, built by ``make_model`` right there, a wrapper class
  that trains it;
- ``.numpy()`` of a value that is not on the host needs ``.cpu()`` in between;
- a device type written as ``"cpu"`` in ``torch.autocast``, ``GradScaler`` or
  ``torch.device``.

It is a reading of the code, deliberately simple: names are followed within a function (and
the functions around it), by the last assignment above the line that uses them; a module-level
function called in the same file with a value on the host, or returning one, is followed into
and out of; other parameters are taken to be where the caller put them. So it can miss a
mistake (a host tensor handed in from another module), and each message names the line, for a
reader to judge. ``findings`` returns (path, line, message) triples.
"""

from __future__ import annotations

import ast
import pathlib

FACTORIES = {"tensor", "zeros", "ones", "full", "empty", "arange", "rand", "randn", "randint",
             "linspace", "eye", "as_tensor", "from_numpy", "randperm"}
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "reduce", "gather", "scatter", "send",
               "recv", "isend", "irecv", "all_to_all", "all_to_all_single"}
DDP_NAMES = {"DDP", "DistributedDataParallel"}
MOVES = {"to", "cuda"}
DEVICE_TYPE_CALLS = {"autocast", "GradScaler"}
HOST_PARAMETER = ast.Call(func=ast.Name(id="make_host_parameter"), args=[], keywords=[])


def dotted(node) -> str:
    """``torch.nn.Linear`` for that attribute chain, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def is_cpu_literal(node) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cpu"


def is_move(call: ast.Call) -> bool:
    """``x.to(device)`` / ``x.to(ctx.device, dtype)`` / ``x.cuda()``: placed where the code
    says (``x.to(torch.float64)`` or ``x.to("cpu")`` moves nothing onto a device)."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr in MOVES):
        return False
    if call.func.attr == "cuda":
        return True
    given = list(call.args) + [k.value for k in call.keywords if k.arg == "device"]
    return any("device" in ast.unparse(a) or "cuda" in ast.unparse(a) for a in given
               if not is_cpu_literal(a))


def is_host_factory(call: ast.Call) -> bool:
    name = dotted(call.func)
    if name.startswith("torch.") and name.split(".")[-1] in FACTORIES and name.count(".") == 1:
        device = [k.value for k in call.keywords if k.arg == "device"]
        return not device or is_cpu_literal(device[0]) or (
            isinstance(device[0], ast.Constant) and device[0].value is None)
    return False


class Scope:
    """The names of one function (and of the functions around it) and what they were given."""

    def __init__(self, fn, outer: Scope | None, module_classes: set[str],
                 host_params=frozenset(), returns_host: dict[str, bool] | None = None):
        self.outer, self.module_classes = outer, module_classes
        self.returns_host: dict[str, bool] = returns_host if returns_host is not None else {}
        self.bound: dict[str, list[tuple[int, ast.AST]]] = {}
        for name in host_params:  # a caller in this file hands it a value on the host
            self.bound[name] = [(fn.lineno, HOST_PARAMETER)]
        self.moved: dict[str, list[int]] = {}
        self.ddp_names: set[str] = set()
        for node in walk_own(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self.bind(target, node.value, node.lineno)
                if isinstance(node.value, ast.Call) and dotted(node.value.func) in DDP_NAMES:
                    self.ddp_names |= {t.id for t in targets if isinstance(t, ast.Name)}
            elif isinstance(node, (ast.For, ast.comprehension)):
                self.bind(node.target, node.iter, getattr(node, "lineno", node.iter.lineno))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self.bind(node.optional_vars, node.context_expr, node.context_expr.lineno)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                    and is_move(node.value) and isinstance(node.value.func.value, ast.Name):
                self.moved.setdefault(node.value.func.value.id, []).append(node.lineno)

    def bind(self, target, value, line: int):
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                self.bound.setdefault(name.id, []).append((line, value))

    def is_ddp(self, name: str) -> bool:
        return name in self.ddp_names or (self.outer is not None and self.outer.is_ddp(name))

    def host(self, node, line: int, seen=frozenset()) -> bool:
        """Whether ``node``, used on ``line``, carries a value that starts on the host and was
        never moved to a device."""
        if isinstance(node, ast.Call):
            if is_move(node):
                return False
            name = dotted(node.func)
            last = node.func.attr if isinstance(node.func, ast.Attribute) else name
            if name.startswith("torch.") and last in FACTORIES:
                return is_host_factory(node)
            if last.startswith("make_") or name.startswith(("torch.nn.", "nn.")) and \
                    last[:1].isupper():
                return True
            if name in self.module_classes and not node.args:
                return True
            if name in self.returns_host:
                return self.returns_host[name]
            if name.endswith("_like") or last in ("numpy", "item", "tolist", "cpu", "len"):
                return False  # same device as its argument, or no tensor on a device at all
            parts = ([node.func.value] if isinstance(node.func, ast.Attribute) else []) + \
                list(node.args) + [k.value for k in node.keywords]
            return any(self.host(p, line, seen) for p in parts)
        if isinstance(node, ast.Name):
            return self.name_host(node.id, line, seen)
        if isinstance(node, ast.Subscript):
            return self.host(node.value, line, seen)
        if isinstance(node, ast.Attribute):
            return self.host(node.value, line, seen)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.host(node.elt, line, seen)
        if isinstance(node, (ast.Lambda, ast.Constant, ast.JoinedStr)):
            return False
        return any(self.host(child, line, seen) for child in ast.iter_child_nodes(node)
                   if isinstance(child, ast.expr))  # operators, comparisons, tuples, lists

    def name_host(self, name: str, line: int, seen) -> bool:
        if (name, line) in seen:
            return False
        seen = seen | {(name, line)}
        if any(moved_at < line for moved_at in self.moved.get(name, [])):
            return False
        assigned = self.bound.get(name)
        if not assigned:
            return self.outer.name_host(name, line, seen) if self.outer else False
        before = [(at, value) for at, value in assigned if at <= line]
        at, value = max(before, key=lambda pair: pair[0]) if before else assigned[0]
        return self.host(value, at, seen)


def is_module_built(node) -> bool:
    """``make_model(...)``: a module built right there, handed on as it is."""
    return isinstance(node, ast.Call) and dotted(node.func).split(".")[-1] == "make_model"


def walk_own(fn):
    """The nodes of ``fn``'s body, not those of the functions and classes defined in it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def check_function(fn, scope: Scope, path: str, found: list):
    def report(node, message):
        found.append((path, node.lineno, message))

    for node in walk_own(fn):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        last = name.split(".")[-1]
        tensors = list(node.args) + [k.value for k in node.keywords if k.arg in (
            "tensor", "tensor_list", "output_tensor_list", "input_tensor", "output", "input")]
        if name.startswith("dist.") and last in COLLECTIVES:
            for arg in tensors:
                if scope.host(arg, node.lineno):
                    report(node, f"dist.{last} of a tensor on the host: "
                                 f"{ast.unparse(arg)} (make it with device=, or .to(device))")
        elif name in DDP_NAMES and node.args and scope.host(node.args[0], node.lineno):
            report(node, f"DDP of a module on the host: {ast.unparse(node.args[0])} "
                         "(.to(ctx.device) first)")
        elif last[:1].isupper() and not name.startswith(("torch.", "nn.")) and any(
                scope.host(arg, node.lineno) for arg in node.args if is_module_built(arg)):
            report(node, f"{name}(...) given a module built on the host (.to(ctx.device) "
                         "first): it trains it as its own")
        elif isinstance(node.func, ast.Name) and scope.is_ddp(node.func.id):
            for arg in node.args:
                if scope.host(arg, node.lineno):
                    report(node, f"DDP's forward of a batch on the host: {ast.unparse(arg)}")
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "numpy":
            receiver = node.func.value
            through_cpu = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                              and n.func.attr == "cpu" for n in ast.walk(receiver))
            if not through_cpu and not scope.host(receiver, node.lineno):
                report(node, f"{ast.unparse(receiver)}.numpy() without .cpu(): "
                             "raises for a CUDA tensor")
        if last in DEVICE_TYPE_CALLS and (name.startswith("torch") or last == "GradScaler"):
            given = node.args[:1] + [k.value for k in node.keywords
                                     if k.arg in ("device_type", "device", "type")]
            if any(is_cpu_literal(a) for a in given):
                report(node, f"{name}(\"cpu\"): take the device type from the tensors or "
                             "ctx.device")


def findings_in_source(source: str, path: str = "<source>") -> list[tuple[str, int, str]]:
    tree = ast.parse(source)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    host_params: dict[str, set[str]] = {name: set() for name in functions}
    returns_host: dict[str, bool] = {}

    def scopes(node, outer: Scope | None):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                given = host_params.get(child.name, ()) if node is tree else ()
                scope = Scope(child, outer, classes, given, returns_host)
                yield child, scope
                yield from scopes(child, scope)
            elif not isinstance(child, ast.expr):
                yield from scopes(child, outer)

    # A module-level function called in this file with a value on the host gets it, and one
    # that returns a value on the host gives one: twice, so that a value handed on through one
    # more function is followed too.
    for _ in range(2):
        for fn, scope in list(scopes(tree, None)):
            if fn.name in functions:
                returns_host[fn.name] = any(
                    scope.host(r.value, r.lineno) for r in walk_own(fn)
                    if isinstance(r, ast.Return) and r.value is not None)
            for call in walk_own(fn):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
                        and call.func.id in functions:
                    names = [a.arg for a in functions[call.func.id].args.args]
                    for name, arg in zip(names, call.args):
                        if scope.host(arg, call.lineno):
                            host_params[call.func.id].add(name)
    found: list = []
    for fn, scope in scopes(tree, None):
        check_function(fn, scope, path, found)
    return sorted(set(found))


def findings(paths) -> list[tuple[str, int, str]]:
    found = []
    for path in paths:
        found += findings_in_source(pathlib.Path(path).read_text(), str(path))
    return found


def cell_sources(path) -> list[tuple[str, str]]:
    """(where, code) of each code cell of a page (``{code-cell}`` blocks of a MyST notebook)
    or a lab (``.ipynb``), IPython's ``%`` and ``!`` lines and a cell's options (``:key:``
    lines, or a YAML block between ``---`` lines at its top) left out."""
    path = pathlib.Path(path)
    text = path.read_text()
    if path.suffix == ".ipynb":
        import json

        cells = [("".join(c["source"])) for c in json.loads(text)["cells"]
                 if c["cell_type"] == "code"]
    else:
        import re

        cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.S | re.M)
        cells = [re.sub(r"\A---\n.*?^---\n", "", cell, flags=re.S | re.M) for cell in cells]
    out = []
    for i, cell in enumerate(cells):
        lines = [line for line in cell.splitlines()
                 if not line.lstrip().startswith(("%", "!", ":"))]
        out.append((f"{path} cell {i + 1}", "\n".join(lines)))
    return out
