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


def option_param(opt) -> str:
    """`name=default`, or just `name` (a required keyword) when the default is None."""
    return opt.name if opt.default is None else f"{opt.name}={option_default(opt)}"


def coercion(opt) -> str | None:
    """Options are made plain Python values (a NumPy float64 eps would upcast float32).

    The type is the default's; with no default, the symbol's (integer -> int, else float).
    """
    for t in (bool, int, float):
        if type(opt.default) is t:
            return f"{opt.name} = {t.__name__}({opt.name})"
    if opt.default is None and opt.symbol is not None:
        return f"{opt.name} = {'int' if opt.symbol.is_integer else 'float'}({opt.name})"
    return None


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
