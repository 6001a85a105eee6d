"""The context of a constant table function: `<name>(<sizes>, *, <options>, dtype=None[, device=None])`,
each array its entry formula printed over float64 index grids, then broadcast to its shape and
cast to dtype. The tables of a file go into the module of the op named `Table.file`, or into a
module of their own (files.py)."""

from __future__ import annotations

import textwrap

import sympy as sp

from ..lowering import Lowering
from ..names import CodegenError, PrinterError, distinct_names
from ..printers import printer_for
from ..printers.code import ATOM, Code
from .common import (
    ARRAY_TYPE,
    DTYPE_TYPE,
    coercion,
    def_lines,
    dims_text,
    docstring_text,
    option_doc,
    option_param,
    returns_type,
    source_path,
    wrapped,
)
from .signature import checked_lines, option_fields, signature_lines

__all__ = ["table_context", "table_array_lines"]


def table_array_lines(lowering: Lowering, target: str, expr, shape) -> list[str]:
    """Lines computing `target` = `expr` (an expression on the index grids) as a fresh array
    of exactly `shape` (rows, cols) and the requested dtype: computed in float64 (Python
    numbers and float64 grids), broadcast to the shape, rounded once by the cast."""
    printer = lowering.printer
    dims = ", ".join(str(printer.code(d)) for d in shape)
    if printer.scalar(expr):
        return [f"{target} = {printer.full_of(dims, str(printer.code(expr)))}"]
    lines = lowering.assign(target, expr)
    return lines + [f"{target} = {printer.broadcast_cast(Code(target, ATOM), dims)}"]


# a printer's extra table parameter (`table_params`) as the signature holds it, annotated
_TABLE_PARAM_TYPES = {"device=None": "device: torch.device | str | None = None"}


def table_context(table, backend: str) -> dict:
    """Everything table_functions.py.j2 needs for one table and one backend."""
    where = f"table {table.name} ({table.module})"
    if not table.name.isidentifier() or table.name.startswith("_"):
        raise CodegenError(f"{where}: the name must be a Python identifier not starting with '_'")
    option_symbols = {o.symbol: o.name for o in table.options if o.symbol is not None}
    indices = {idx for a in table.arrays for idx in a.index}
    things: dict = {}
    for kind, names in (
        ("size", [s.name for s in table.sizes]),
        ("option", [o.name for o in table.options]),
        ("array", [a.name for a in table.arrays]),
        ("index", sorted({i.name for i in indices})),
    ):
        for nm in names:
            things.setdefault(nm, []).append(kind)
    distinct_names(where, things, sep=", ")
    if len({i.name for i in indices}) != len(indices):
        raise CodegenError(f"{where}: two different index symbols share a name")
    printer = printer_for(backend, names={**option_symbols, **{i: i.name for i in indices}}, arrays=frozenset(indices))
    lowering = Lowering(printer, things)
    body: list[str] = []
    bound: dict = {}
    try:
        for a in table.arrays:
            used = sp.sympify(a.entry).free_symbols
            for axis, (idx, dim) in enumerate(zip(a.index, a.shape)):
                if idx in used and bound.get(idx) != (dim, axis):
                    shape = f"({printer.doprint(dim)}, 1)" if axis == 0 else f"(1, {printer.doprint(dim)})"
                    body.append(f"{idx.name} = {printer.grid(dim, axis)}  # {shape}")
                    bound[idx] = (dim, axis)
            lines = table_array_lines(lowering, a.name, sp.sympify(a.entry), a.shape)
            lines[-1] += f"  # {dims_text(a.shape, printer)}"
            body.extend(lines)
    except PrinterError as e:
        raise CodegenError(f"{where}, {backend}: {e}") from None
    constant = f"{table.name.upper()}_SIGNATURE"
    returns = [s.name for s in table.sizes] + ["dtype"]  # the sizes as ints, the dtype
    fields = {
        "table_sizes": tuple(s.name for s in table.sizes),
        "even_sizes": tuple((s.name, why) for s, why in table.even.items()),
        "options": option_fields(table.options),
        "table_dtype": True,
        "returns": tuple(returns),
    }
    checks = [c for c in (coercion(o, table.name) for o in table.options) if c]
    checks += checked_lines(
        constant, returns, [s.name for s in table.sizes] + [o.name for o in table.options] + ["dtype"]
    )
    extra = list(printer.table_params)
    names = [a.name for a in table.arrays]
    docs = [f"{a.name}[{a.index[0].name}, {a.index[1].name}] = {sp.sstr(a.entry)}" for a in table.arrays]
    for text in docs + [table.title, table.doc]:
        docstring_text(where, text, raw=False)
    return {
        "name": table.name,
        "title": table.title,
        "doc": wrapped(table.doc) if table.doc else [],
        "source": source_path(table.module),
        "claims": wrapped(", ".join(table.claims) + f" ({source_path(table.module)}).", 88),
        "def_lines": def_lines(
            table.name,
            [f"{s.name}: int" for s in table.sizes]
            + ["*"]
            + [option_param(o) for o in table.options]
            + [f"dtype: {DTYPE_TYPE[backend]} = None"]
            + [_TABLE_PARAM_TYPES[e] for e in extra],
            returns_type([ARRAY_TYPE[backend]] * len(names)),
        ),
        "arg_docs": [f"{s.name}: {'even ' * (s in table.even)}int >= 0 (a size)" for s in table.sizes]
        + [line for o in table.options for line in option_doc(o)]
        + [f"dtype: the floating dtype of the result (default: {printer.default_dtype_doc})"]
        + [f"{e.split('=')[0]}: {printer.table_param_docs[e]}" for e in extra],
        "entry_docs": [
            line
            for d in docs
            for line in textwrap.wrap(d, 84, break_long_words=False, break_on_hyphens=False, subsequent_indent="    ")
        ],
        "return_docs": [f"{a.name} {dims_text(a.shape, printer)}" for a in table.arrays],
        "returns": names[0] if len(names) == 1 else ", ".join(names),
        "signature_lines": signature_lines(constant, table.name, fields),
        "checks": checks,
        "body": body,
        "modules": set(printer.modules) | {"np" if backend == "numpy" else "torch"},  # and the annotations
    }
