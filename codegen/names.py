"""The names generated code may use, and the two errors of the generator.

Every array, size and option of the array language becomes a Python name in the generated
files; `check_name` refuses one that is not an identifier or that the generated code uses
itself (`np`, `dtype`, `_v`, `layout`, ...; and `_t0`, `_t1`, ...: no generated name has that form).
"""

from __future__ import annotations

import keyword

__all__ = ["CodegenError", "PrinterError", "RESERVED_NAMES", "check_name", "valid_name", "distinct_names"]


class PrinterError(ValueError):
    """An expression cannot be printed (unsupported node, bad name, ...)."""


class CodegenError(ValueError):
    """An op cannot be generated (an undefined array, an unbound size, ...)."""


# Names that generated code uses itself; an Array or Symbol may not be called like this.
RESERVED_NAMES = frozenset(
    {
        "np",
        "math",
        "scipy",
        "torch",
        "nn",
        "F",
        "dtype",
        "cache",
        "ctx",
        "self",
        "grads",
        "annotations",
        "_v",
        "_special",
        "_support",
        "device",
        "layout",
        "lead",
        "SIGNATURE",
    }
)


def check_name(name: str, what: str = "name") -> str:
    """A name that the generated code can use as is, or PrinterError."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise PrinterError(f"{what} {name!r} is not a valid Python identifier")
    if name in RESERVED_NAMES or (name.startswith("_t") and name[2:].isdigit()):
        raise PrinterError(f"{what} {name!r} clashes with a name the generated code uses")
    return name


def valid_name(where: str, name: str, what: str) -> str:
    """`name` if generated code may use it (codegen.names.check_name), else CodegenError."""
    try:
        return check_name(name, what)
    except PrinterError as e:
        raise CodegenError(f"{where}: {e}") from None


def distinct_names(where: str, described: dict, sep: str = "; ", what: str | None = None) -> None:
    """One name, one thing: `described` maps each Python name to what it names (one text per
    thing); a name with two things is an error, and every name must be valid (named `what` in
    the message, else as its one thing)."""
    for nm, things in sorted(described.items()):
        if len(things) > 1:
            raise CodegenError(f"{where}: the name {nm!r} is used for different things: " + sep.join(things))
        valid_name(where, nm, what or things[0])
