"""Storage conventions: the shapes the generated code accepts, from an Array's declared (rows, cols).

* float array, rows != 1: `(..., rows, cols)` for an input (leading batch/head axes), exactly
  `(rows, cols)` for a parameter; axis 0 is `shape[-2]`, axis 1 is `shape[-1]`;
* row vector, rows == 1: 1-D `(cols,)`; axis 1 is `shape[-1]`;
* integer ids, declared `(T, 1)`: `(..., T)`; axis 0 is `shape[-1]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from derivations.language.arrays import Array, ColSum, Contract

from ..names import CodegenError

__all__ = ["Arg", "storage_axis", "storage_text", "storage_shape", "size_symbols", "arrays_in", "keeps_leading_axes"]


@dataclass
class Arg:
    """One positional argument of `<op>_forward`."""

    array: Array
    role: str  # "input" or "param"
    integer: bool
    constant: bool = False  # a float input without a gradient (Op.constant_inputs)
    optional: int = 0  # leading declared axes that may be absent (Op.optional_axes)

    @property
    def differentiable(self) -> bool:
        return not self.integer and not self.constant

    @property
    def name(self) -> str:
        return self.array.name

    @property
    def row_vector(self) -> bool:
        return not self.integer and self.array.shape[0] == 1

    @property
    def batched(self) -> bool:
        """Has leading batch/head axes (inputs only; params and row vectors are exact)."""
        return self.role == "input" and not self.row_vector

    @property
    def trailing(self) -> int:
        """How many trailing axes the declared shape occupies in storage."""
        return 1 if self.integer or self.row_vector else 2

    @property
    def ndim(self) -> tuple[int, bool]:
        """(number of axes, exact?) that the stored array must have (at least, for an input:
        its optional axes may be absent)."""
        return self.trailing - self.optional, not self.batched

    def storage_dims(self) -> tuple:
        """The declared sizes of the stored trailing axes, in storage order."""
        rows, cols = self.array.shape
        return (rows,) if self.integer else ((cols,) if self.row_vector else (rows, cols))

    def axis(self, a: int) -> int | None:
        """Storage index (negative) of declared axis `a`, or None if it is not stored."""
        return storage_axis(self.array, a, self.integer)

    def storage(self, printer) -> str:
        return storage_text(self.array, self.integer, self.batched, printer)


def storage_axis(arr: Array, a: int, integer: bool) -> int | None:
    rows, cols = arr.shape
    if integer:
        if cols != 1:
            raise CodegenError(f"integer array {arr.name} must be declared (T, 1), got {arr.shape}")
        return -1 if a == 0 else None
    if rows == 1:
        return -1 if a == 1 else None
    return -2 if a == 0 else -1


def storage_text(arr: Array, integer: bool, batched: bool, printer) -> str:
    rows, cols = arr.shape
    dims = [rows] if integer else ([cols] if rows == 1 else [rows, cols])
    text = [printer.doprint(d) for d in dims]
    if batched:
        text.insert(0, "...")
    return "(" + ", ".join(text) + ("," if len(text) == 1 else "") + ")"


def storage_shape(arr: Array, integer: bool, batched: bool, sizes: dict, batch: tuple = (2,)) -> tuple:
    """The concrete stored shape of `arr` at `sizes` (Symbol or name -> int): for examples."""
    subs = {(sp.Symbol(k, integer=True, positive=True) if isinstance(k, str) else k): v for k, v in sizes.items()}
    row_vector = sp.sympify(arr.shape[0]) == 1  # declared (1, n), whatever n is
    rows, cols = (int(sp.sympify(d).xreplace(subs)) for d in arr.shape)
    dims = (rows,) if integer else ((cols,) if row_vector else (rows, cols))
    return (tuple(batch) if batched else ()) + dims


# what an expression reads ------------------------------------------------------------------
def size_symbols(expr, option_symbols) -> set:
    return {s for s in sp.sympify(expr).free_symbols if not isinstance(s, Array) and s not in option_symbols}


def arrays_in(expr) -> set:
    return {s for s in sp.sympify(expr).free_symbols if isinstance(s, Array)}


def keeps_leading_axes(expr, flags: dict) -> bool:
    """Whether a value keeps leading axes: any batched Array inside, outside ColSum/Contract."""
    expr = sp.sympify(expr)
    if isinstance(expr, Array):
        return flags.get(expr, True)
    if isinstance(expr, (ColSum, Contract)):
        return False
    return any(keeps_leading_axes(a, flags) for a in expr.args)
