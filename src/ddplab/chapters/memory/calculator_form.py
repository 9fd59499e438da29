"""The calculator as one piece of HTML: a form, and the formulas of ``calculator`` translated
from their Python source into JavaScript when the page is built. No kernel, no CDN.

The translation (``javascript``) knows only the little Python the formulas use: functions
with defaults, assignments, returns, arithmetic, ``==``, ``!=``, ``<``, ``and``, ``x if c else
y``, dict literals and look-ups in the module's tables, calls of each other, and ``if c: raise
ValueError(text)`` (a JavaScript ``throw``; the form shows its text). Anything else raises, so
a formula written in other Python fails the build instead of drifting from the JavaScript.
"""

from __future__ import annotations

import ast
import html
import inspect
import json

from ddplab.chapters.memory import calculator

FUNCTIONS = ("share", "bytes_per_rank", "bytes_per_parameter", "step_temporary_per_parameter",
             "largest_model")
_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARISONS = {ast.Eq: "===", ast.NotEq: "!==", ast.Lt: "<"}


def _expr(node) -> str:
    if isinstance(node, ast.Constant):
        return json.dumps(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return f"({_expr(node.left)} {_OPERATORS[type(node.op)]} {_expr(node.right)})"
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARISONS:
        return (f"({_expr(node.left)} {_COMPARISONS[type(node.ops[0])]} "
                f"{_expr(node.comparators[0])})")
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return "(" + " && ".join(_expr(v) for v in node.values) + ")"
    if isinstance(node, ast.IfExp):
        return f"({_expr(node.test)} ? {_expr(node.body)} : {_expr(node.orelse)})"
    if isinstance(node, ast.Subscript):
        return f"{_expr(node.value)}[{_expr(node.slice)}]"
    if isinstance(node, ast.Dict):
        return "{" + ", ".join(f"{_expr(k)}: {_expr(v)}"
                               for k, v in zip(node.keys, node.values)) + "}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords \
            and node.func.id in FUNCTIONS:
        return f"{node.func.id}({', '.join(_expr(a) for a in node.args)})"
    raise ValueError(f"the calculator's formulas use Python that has no translation: "
                     f"{ast.unparse(node)}")


def _function(source: str) -> str:
    tree = ast.parse(source).body[0]
    args = tree.args
    defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    names = [a.arg if d is None else f"{a.arg} = {_expr(d)}" for a, d in zip(args.args,
                                                                             defaults)]
    lines = [f"function {tree.name}({', '.join(names)}) {{"]
    for statement in tree.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            lines.append(f"  var {_expr(statement.targets[0])} = {_expr(statement.value)};")
        elif isinstance(statement, ast.Return):
            lines.append(f"  return {_expr(statement.value)};")
        elif _is_raise_if(statement):
            error = statement.body[0].exc
            lines.append(f"  if {_expr(statement.test)} {{ throw new Error("
                         f"{_expr(error.args[0])}); }}")
        else:
            raise ValueError(f"no translation for {ast.unparse(statement)}")
    return "\n".join(lines + ["}"])


def _is_raise_if(statement) -> bool:
    """``if c: raise ValueError(text)``, nothing else in the ``if``."""
    if not (isinstance(statement, ast.If) and not statement.orelse
            and len(statement.body) == 1 and isinstance(statement.body[0], ast.Raise)):
        return False
    error = statement.body[0].exc
    return (isinstance(error, ast.Call) and isinstance(error.func, ast.Name)
            and error.func.id == "ValueError" and len(error.args) == 1 and not error.keywords)


def javascript() -> str:
    """The tables and the formulas of ``calculator``, as JavaScript."""
    tables = [f"var {name} = {json.dumps(getattr(calculator, name))};"
              for name in calculator.TABLES]
    functions = [_function(inspect.getsource(getattr(calculator, name))) for name in FUNCTIONS]
    return "\n".join(tables + functions)


# One click for the case readers bring most ("out of memory with a 3B model"): the values it
# sets, by control name. The memory chapter shows the same case computed in Python.
PRESETS = (("3 B parameters, Adam, 4 GPUs of 80 GB",
            {"billions": "3", "optimizer": "adam", "precision": "autocast", "strategy": "ddp",
             "world_size": "4", "activations": "0", "gpu": "80"}),)

# The labels' column takes what it needs and the controls the rest, narrowed to fit (a
# select's widest option would otherwise push the form past a phone's screen); under 480 px
# each label sits above its control.
_FORM = """<div id="{id}" style="border:1px solid #ddd;border-radius:4px;padding:0.5em;
font-size:0.9em"><style>#{id} form{{display:grid;grid-template-columns:max-content
minmax(0,1fr);gap:0.2em 1em}} #{id} select,#{id} input{{max-width:100%;box-sizing:border-box}}
@media (max-width:480px){{#{id} form{{grid-template-columns:minmax(0,1fr)}}}}</style>
<div style="margin-bottom:0.4em">Presets (a click fills in the form): {presets}</div>
<form onsubmit="return false">
<label>parameters (billions)</label><input name="billions" type="number" value="7" min="0"
 step="any">
<label>optimizer</label><select name="optimizer">{optimizers}</select>
<label>precision</label><select name="precision">{precisions}</select>
<label>strategy</label><select name="strategy">{strategies}</select>
<label>DDP bucket view</label><input name="bucket_view" type="checkbox">
<label>world size</label><input name="world_size" type="number" value="8" min="1">
<label>activations per rank (GB)</label><input name="activations" type="number" value="0"
 min="0" step="any">
<label>GPU memory (GB)</label><input name="gpu" type="number" value="80" min="0" step="any">
</form><pre></pre></div>"""

_SHOW = """(function () {{
{formulas}
  var root = document.getElementById({id}), form = root.querySelector("form");
  function lines() {{
    var v = function (n) {{ return form.elements[n].value; }};
    var P = Number(v("billions")) * 1e9, W = Math.max(1, Math.round(Number(v("world_size"))));
    var bv = form.elements["bucket_view"].checked, act = Number(v("activations")) * 1e9;
    var o = v("optimizer"), s = v("strategy"), pr = v("precision");
    var parts = bytes_per_rank(P, o, s, W, pr, bv, 0, act);
    var out = ["held from backward through the optimizer step (the steady state):"];
    var total = 0;
    for (var k in parts) {{ total += parts[k];
      out.push((k + "          ").slice(0, 16) + (parts[k] / 1e9).toFixed(2) + " GB"); }}
    var gpu = Number(v("gpu")) * 1e9;
    out.push("total per rank  " + (total / 1e9).toFixed(2) + " GB: " +
             (total <= gpu ? "fits" : "does not fit") + " in " + v("gpu") + " GB");
    var peak = total - act + P * step_temporary_per_parameter(o, s, W, pr);
    out.push("during optimizer.step(), at least " + (peak / 1e9).toFixed(2) + " GB: " +
             (peak <= gpu ? "fits" : "does not fit"));
    var most = largest_model(gpu, o, s, W, pr, bv, act);
    out.push("largest model that fits, step included: " + (Math.max(0, most) / 1e9)
             .toFixed(2) + " billion parameters");
    out.push("", "every strategy at these settings, per rank (steady state, step):");
    {strategy_names}.forEach(function (other) {{
      var name = "  " + (other + "      ").slice(0, 6);
      try {{
        var held = 0, p = bytes_per_rank(P, o, other, W, pr, bv, 0, act);
        for (var k in p) held += p[k];
        var step = held - act + P * step_temporary_per_parameter(o, other, W, pr);
        out.push(name + (held / 1e9).toFixed(1) + " GB, " + (step / 1e9).toFixed(1) +
                 " GB: " + (Math.max(held, step) <= gpu ? "fits" : "does not fit"));
      }} catch (error) {{ out.push(name + error.message); }}
    }});
    return out;
  }}
  function show() {{
    var text;
    try {{ text = lines().join("\\n"); }} catch (error) {{ text = error.message; }}
    root.querySelector("pre").textContent = text;
  }}
  form.addEventListener("input", show);
  root.querySelectorAll("button[data-preset]").forEach(function (button) {{
    button.addEventListener("click", function () {{
      var values = JSON.parse(button.getAttribute("data-preset"));
      for (var k in values) form.elements[k].value = values[k];
      form.elements["bucket_view"].checked = false;
      show();
    }});
  }});
  show();
}})();"""


def _options(values, chosen, labels=None) -> str:
    labels = labels or {}
    return "".join(f'<option value="{html.escape(v)}"{" selected" if v == chosen else ""}>'
                   f"{html.escape(labels.get(v, v))}</option>" for v in values)


def form_html(element_id: str = "ddplab-memory-calculator") -> str:
    """The form and its script, as one HTML string."""
    presets = "".join(f'<button type="button" data-preset="{html.escape(json.dumps(values))}">'
                      f"{html.escape(label)}</button>" for label, values in PRESETS)
    body = _FORM.format(
        id=element_id, presets=presets,
        optimizers=_options(("sgd", "momentum", "adam"), "adam"),
        precisions=_options(calculator.PRECISIONS, "autocast", calculator.PRECISION_NAMES),
        strategies=_options(calculator.CALCULATOR_STRATEGIES, "ddp"))
    script = _SHOW.format(formulas=javascript(), id=json.dumps(element_id),
                          strategy_names=json.dumps(list(calculator.CALCULATOR_STRATEGIES)))
    return f"{body}\n<script>\n{script}\n</script>"


def show():
    """The calculator as a notebook output (``IPython.display.HTML``)."""
    from IPython.display import HTML

    return HTML(form_html())
