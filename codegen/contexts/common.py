"""What every context builder shares: literals and calls as text, docstring prose, import
blocks and the options (signature, coercion, domain check, doc line); the name checks are
codegen.names.

Each builder (op.py, table.py, step.py, special.py, files.py) states what is particular to its
kind of artefact and calls these for the rest, so that an option is documented, coerced and
checked the same way in every generated function.
"""

from __future__ import annotations

import json
import textwrap

import sympy as sp

from ..names import CodegenError
from ..printers import MODULE_IMPORTS

__all__ = [
    "quoted",
    "wrapped",
    "tuple_text",
    "class_name",
    "exports",
    "dims_text",
    "import_lines",
    "option_default",
    "option_param",
    "option_kind",
    "ARRAY_TYPE",
    "DTYPE_TYPE",
    "returns_type",
    "def_lines",
    "coercion",
    "domain_bounds",
    "option_doc",
    "docstring_text",
    "source_path",
    "backend_title",
]


# literals, calls, prose ------------------------------------------------------------------------
def quoted(s: str) -> str:
    """A double-quoted Python string literal."""
    return json.dumps(str(s), ensure_ascii=False)


def wrapped(text: str, width: int = 92) -> list[str]:
    """Docstring prose (or LaTeX, which ignores line breaks) wrapped at spaces."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def tuple_text(names: list[str]) -> str:
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def class_name(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_") if p)


def exports(names: list[str]) -> str:
    return ", ".join(quoted(n) for n in names)


def dims_text(shape, printer) -> str:
    return "(" + ", ".join(printer.doprint(d) for d in shape) + ")"


def source_path(module: str) -> str:
    """derivations.loss -> derivations/loss.py (the header's and the docstrings' source)."""
    return module.replace(".", "/") + ".py"


def backend_title(backend: str) -> str:
    return "NumPy" if backend == "numpy" else "PyTorch"


def docstring_text(where: str, text: str, what: str | None = None, raw: bool = True) -> str:
    """`text` as it goes into a docstring (a raw one: r\"\"\"...\"\"\"), or CodegenError where it
    cannot (named `what`, else quoted)."""
    if '"""' in text or (text.endswith("\\") if raw else "\\" in text):
        raise CodegenError(f"{where}: {what or repr(text)} cannot go into a docstring as is")
    return text


# imports ------------------------------------------------------------------------------------------
def _import_order(module: str) -> tuple:
    """Imports sorted by their text, the package's own (`from . import ...`) last."""
    return MODULE_IMPORTS[module].startswith("from ."), MODULE_IMPORTS[module]


def import_lines(modules) -> list[str]:
    """The import block of a generated module that uses `modules` (MODULE_IMPORTS' keys):
    standard-library imports, a blank line, third-party imports, a blank line (if any), then the
    package's own (`from . import ...`), which the templates' `from . import _validate` follows
    directly."""
    imports = [MODULE_IMPORTS[m] for m in sorted(modules, key=_import_order)]
    std = [i for i in imports if i == "import math"]
    third = [i for i in imports if i != "import math" and not i.startswith("from .")]
    own = [i for i in imports if i.startswith("from .")]
    lines = std + ([""] if std and third else []) + third
    return lines + ([""] if lines else []) + own


# options ------------------------------------------------------------------------------------------
def option_default(opt) -> str:
    if isinstance(opt.default, (bool, int, float, str)) or opt.default is None:
        return repr(opt.default)
    raise CodegenError(f"option {opt.name}: default {opt.default!r} is not a plain Python value")


def option_kind(opt) -> type | None:
    """The Python type of an option's values: the default's; with no default, the symbol's
    (integer, else real); None when neither says."""
    kind = next((t for t in (bool, int, float) if type(opt.default) is t), None)
    if kind is None and opt.default is None and opt.symbol is not None:
        kind = int if opt.symbol.is_integer else float
    return kind


def option_param(opt) -> str:
    """`name: kind = default`, or just `name: kind` (a required keyword) when the default is
    None (the annotation `object` where the kind is unknown)."""
    kind = option_kind(opt)
    head = f"{opt.name}: {kind.__name__ if kind else 'object'}"
    return head if opt.default is None else f"{head} = {option_default(opt)}"


# the annotation of an array argument or result, and of a dtype argument, in each backend
ARRAY_TYPE = {"numpy": "np.ndarray", "torch": "torch.Tensor"}
DTYPE_TYPE = {"numpy": "np.dtype | type | None", "torch": "torch.dtype | None"}


def returns_type(types: list[str]) -> str:
    """The return annotation of a function returning `types` (a tuple of them when not one)."""
    return types[0] if len(types) == 1 else "tuple[" + ", ".join(types) + "]"


def def_lines(name: str, params: list[str], returns: str, indent: str = "", width: int = 100) -> list[str]:
    """`def name(p, ...) -> returns:` on one line, or, where that is longer than `width`, the
    parameters packed into lines under `def name(` and `) -> returns:` last (a bare `*` stays
    with the parameter after it, so that every line holds code)."""
    one = f"{indent}def {name}({', '.join(params)}) -> {returns}:"
    if len(one) <= width:
        return [one]
    items: list[str] = []
    for p in params:
        if items and items[-1] == "*":
            items[-1] = f"*, {p}"
        else:
            items.append(p)
    lines, line = [f"{indent}def {name}("], ""
    for item in items:
        if line and len(indent) + 4 + len(line) + len(item) + 2 > width:
            lines.append(f"{indent}    {line.rstrip()}")
            line = ""
        line += f"{item}, "
    return lines + [f"{indent}    {line.rstrip()}", f"{indent}) -> {returns}:"]


# the `_validate` function that reads an option of each kind as a plain Python value
_READERS = {bool: "flag_option", int: "integer_option", float: "real_option"}


def coercion(opt, unit: str) -> str | None:
    """Options are made plain Python values (a NumPy float64 eps would upcast float32), each by
    the one reader of its kind in `_validate`, which refuses a value of another kind by the
    unit's name (t = 1.7 is never read as 1, causal = "no" never as True).

    The kind is the default's; with no default, the symbol's (integer, else real). A real option
    is converted by the module's own `float` (which the judges replace with an exact one).
    """
    kind = option_kind(opt)
    if kind is None:
        return None
    extra = ", float" if kind is float else ""
    return f'{opt.name} = _v.{_READERS[kind]}("{unit}", "{opt.name}", {opt.name}{extra})'


def domain_bounds(o):
    """(lo, hi, lo_open, hi_open) of an option's allowed interval (None: unbounded), or None."""
    if o.symbol is None:
        return None
    dom = o.allowed()
    if dom == sp.S.Reals or dom == sp.S.Integers:
        return None
    if isinstance(dom, sp.Range):  # integers lo, lo + 1, ...: [lo, ∞)
        dom = sp.Interval(dom.inf, sp.oo)
    if not isinstance(dom, sp.Interval):
        raise CodegenError(f"option {o.name}: domain {dom} is not an interval")

    def end(x):
        return None if x.is_infinite else repr(int(x) if x.is_integer else float(x))

    return end(dom.left), end(dom.right), bool(dom.left_open), bool(dom.right_open)


def _domain_text(o) -> str:
    """An option's allowed values in words ("eps > 0", "0 <= beta1 < 1"), "" if any real."""
    bounds = domain_bounds(o)
    if bounds is None:
        return ""
    lo, hi, lo_open, hi_open = bounds
    if hi is None:
        return f"{o.name} {'>' if lo_open else '>='} {lo}"
    left = "" if lo is None else f"{lo} {'<' if lo_open else '<='} "
    return f"{left}{o.name} {'<' if hi_open else '<='} {hi}"


def option_doc(o, *, required_shows_default: bool = True) -> list[str]:
    """The docstring lines of an option: `eps: option, default 1e-05 (eps > 0); <its doc>`
    (without the default for a required one, unless `required_shows_default`)."""
    default = "" if o.default is None and not required_shows_default else f", default {option_default(o)}"
    domain = _domain_text(o)
    return wrapped(
        f"{o.name}: option{default}" + (f" ({domain})" if domain else "") + (f"; {o.doc}" if o.doc else ""), 84
    )
