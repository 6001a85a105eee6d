"""The signature of a generated function: every argument check of its entry as one constant.

A kernel checks its arguments with one call, `x, layout = _v.checked(SIGNATURE, x=x, ...)`, where
`SIGNATURE = _v.Signature("layernorm", floats=..., same_size=..., ...)` is printed here, at module
level, from the declaration (the op's analysis, a step's or a table's options and inputs); the
generated `_validate` module reads it (validate_shared.py.j2: `Signature`, `checked`). The
fields are plain tuples of names, axes, numbers and the messages' texts.
"""

from __future__ import annotations

import sympy as sp

from ..names import CodegenError
from .common import domain_bounds, quoted

__all__ = ["Code", "literal", "signature_lines", "checked_lines", "size_value", "option_fields"]


class Code(str):
    """Text that goes into a literal as it is (a number already printed)."""


def literal(v) -> str:
    """`v` (str, tuple, number, bool, None, Code) as a Python literal."""
    if isinstance(v, Code):
        return str(v)
    if isinstance(v, str):
        return quoted(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(literal(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


def signature_lines(constant: str, op: str, fields: dict, width: int = 96) -> list[str]:
    """`<constant> = _v.Signature("<op>", field=..., ...)`, one field a line (its items one a
    line where the field is too long); empty fields left out."""
    lines = [f"{constant} = _v.Signature(", f"    {quoted(op)},"]
    for name, value in fields.items():
        if value in ((), None, False, 0):
            continue
        one = f"    {name}={literal(value)},"
        if len(one) <= width or not isinstance(value, tuple):
            lines.append(one)
        else:
            lines += [f"    {name}=("] + [f"        {literal(v)}," for v in value] + ["    ),"]
    return lines + [")"]


def checked_lines(constant: str, returns: list[str], arguments: list[str], width: int = 92) -> list[str]:
    """`<returns> = _v.checked(<constant>, a=a, ...)` (no assignment when nothing is returned),
    the arguments packed into lines of at most `width` where one line is too long."""
    head = (", ".join(returns) + " = " if returns else "") + "_v.checked("
    args = [constant] + [f"{a}={a}" for a in arguments]
    if len(head) + len(", ".join(args)) + 1 <= width:
        return [head + ", ".join(args) + ")"]
    lines, line = [head], "   "
    for a in args:
        if len(line) + len(a) + 2 > width:
            lines.append(line.rstrip())
            line = "   "
        line += f" {a},"
    return lines + [line, ")"]


def size_value(expr, where: str):
    """A declared size as the signature holds it: a number, a size's name, or a tuple of them
    (their product)."""
    expr = sp.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    if isinstance(expr, sp.Symbol):
        return expr.name
    if isinstance(expr, sp.Mul) and all(a.is_Integer or isinstance(a, sp.Symbol) for a in expr.args):
        return tuple(size_value(a, where) for a in expr.args)
    raise CodegenError(f"{where}: the declared size {expr} is not a number, a size or a product of them")


def option_fields(options) -> tuple:
    """(name, lo, hi, lo_open, hi_open) of every option whose allowed set is not all of ℝ
    (Option.allowed: the proofs' assumptions or a narrower `domain`): eps > 0, t >= 1,
    0 <= beta1 < 1."""
    out = []
    for o in options:
        bounds = domain_bounds(o)
        if bounds is not None:
            lo, hi, lo_open, hi_open = bounds
            out.append((o.name, Code(str(lo)), Code(str(hi)), lo_open, hi_open))
    return tuple(out)
