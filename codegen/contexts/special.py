"""The context of generated/numpy/_special.py: erf and Φ for float32 arrays, as
derivations/special.py defines them, and the cached causal mask."""

from __future__ import annotations

import sympy as sp

from derivations.language.arrays import Array, CausalMask
from derivations.special import Loop

from ..names import CodegenError
from ..printers import NumpyPrinter, printer_for
from .common import import_lines, wrapped

__all__ = ["special_context", "SPECIAL_BLOCK"]


# Elements per block of the special functions: 131072 float32 (z, t and the (2, n) rows of P and
# Q: 2 MiB, as the float64 version's 65536) measured ~5-10 % faster than 65536 and ~20 % faster
# than 32768 on one thread (15 NumPy calls a block at ~1.5 µs of overhead each, against ~3.3 ns
# an element of arithmetic); large blocks also mean few GIL hand-overs when NumpyGPT's batch
# threads run erf side by side.
SPECIAL_BLOCK = 131072


def _float_literal(pr, c: sp.Expr) -> str:
    """c as a float literal when a float holds it exactly (255/64 -> 3.984375), else printed."""
    return repr(float(c)) if sp.Rational(float(c)) == c else pr.doprint(c)


# in-place NumPy spellings of the operations of derivations/special.py, where the output is the
# first operand (`r /= pq[1]`)
_AUGMENTED = {"add": "+=", "multiply": "*=", "divide": "/="}


def _operand(a, names: dict) -> str:
    if isinstance(a, tuple):
        name, k = a
        return f"{names.get(name, name)}[{k}]"
    if a.startswith("-"):
        return "-" + names[a[1:]]
    return names.get(a, a)


def program_lines(program, names: dict) -> list[str]:
    """derivations/special.py's operations as in-place NumPy lines: `np.<ufunc>(..., out=<out>)`,
    or `<out> op= <operand>` where the output is the first operand; a Loop as a `for`; each line
    with its operation's note (formatted with `names`). `names` spells the operands."""
    lines = []
    for op in program:
        if isinstance(op, Loop):  # over coefficient columns
            name, start, stop, step = op.columns
            columns = (
                f"{names[name]}[{'' if start is None else start}:{'' if stop is None else stop}"
                + ("" if step is None else f":{step}")
                + "]"
            )
            lines.append(f"for {op.var} in {columns}:")
            lines += ["    " + line for line in program_lines(op.body, {**names, op.var: op.var})]
            continue
        args = [_operand(a, names) for a in op.args]
        if op.args[0] == op.out and op.ufunc in _AUGMENTED:
            line = f"{names.get(op.out, op.out)} {_AUGMENTED[op.ufunc]} {', '.join(args[1:])}"
        else:
            line = f"np.{op.ufunc}({', '.join(args)}, out={names.get(op.out, op.out)})"
        lines.append(line + (f"  # {op.note.format_map(names)}" if op.note else ""))
    return lines


def special_context() -> dict:
    """generated/numpy/_special.py: each `RationalApproximation` of derivations/special.py,
    R(x) = clip(z·P(z²)/Q(z²), −bound, bound) with z = clip(x, −c, c), as in-place NumPy lines over
    cache-sized blocks (`_<name>_blocks`): the operations ARGUMENT (or SCALED_ARGUMENT), RATIONAL,
    BOUND and, optionally, AFFINE of derivations/special.py, printed by `program_lines` — z, t =
    z², P(t) and Q(t) together as the two rows of one (2, n) array by Horner's rule (one call per
    step for both), z·P/Q written into the output; z = clip(scale·x) and outer·R + shift inside the
    same blocks are how each `AffineOfApproximation` (Φ from erf) is computed. Other dtypes call
    the library function the NumPy printer names for arrays in general
    (`NumpyPrinter.library_funcs`)."""
    from derivations.special import AFFINE, APPROXIMATIONS, ARGUMENT, BOUND, COMPOSED, RATIONAL, SCALED_ARGUMENT

    pr = printer_for("numpy")
    functions, blocks = [], []
    for a in APPROXIMATIONS:
        name = a.function.__name__
        label, clamp, cols = f"_{name.upper()}", f"_{name.upper()}_CLAMP", f"_{name.upper()}_COLUMNS"
        if a.compute_dtype != a.dtype:
            raise CodegenError(
                f"{name}: evaluated in {a.compute_dtype}, stored as {a.dtype}: the "
                "blocks write the result straight into the output"
            )
        rows = a.coefficient_rows()
        n = len(rows[0])
        constants = [f"{clamp} = {_float_literal(pr, a.clamp)}", f"{label}_PQ = np.array(["]
        constants += [
            f"    [{', '.join(pr.doprint(sp.sympify(c)) for c in row)}],  # {which}"
            for row, which in zip(rows, ("P", "Q"))
        ]
        constants += [
            f"], dtype=np.{a.compute_dtype})",
            f"{cols} = tuple({label}_PQ[:, k:k + 1] for k in range({n}))  # (2, 1) each",
        ]
        names = {
            "x": "flat_in[start:start + m]",
            "clamp": clamp,
            "C": cols,
            "scale": "scale",
            "outer": "outer",
            "shift": "shift",
            "bound": "" if a.bound is None else _float_literal(pr, a.bound),
        }
        body = [
            "z, t, pq = z_buf[:m], t_buf[:m], pq_buf[:, :m]",
            "r = flat_out[start:start + m]",
            "if scale is None:",
            *["    " + line for line in program_lines(ARGUMENT, names)],
            "else:",
            *["    " + line for line in program_lines(SCALED_ARGUMENT, names)],
            *program_lines(RATIONAL + (BOUND if a.bound is not None else ()), names),
            "if outer is not None:",
            *["    " + line for line in program_lines(AFFINE, names)],
        ]
        blocks.append(
            {
                "name": f"_{name}_blocks",
                "dtype": a.dtype,
                "constants": constants,
                "body": body,
                "buffers": [
                    f"z_buf, t_buf = (np.empty(size, dtype=np.{a.compute_dtype}) for _ in range(2))",
                    f"pq_buf = np.empty((2, size), dtype=np.{a.compute_dtype})",
                ],
            }
        )
        functions.append(
            {
                "name": name,
                "dtype": a.dtype,
                "fallback": NumpyPrinter.library_funcs[a.function],
                "summary": f"{name}, elementwise ({a.dtype}: the rational of derivations/special.py).",
                "doc": wrapped(f"* `{name}`: {a.doc}.", 92),
                "call": f"_{name}_blocks(x)",
            }
        )
    for f in COMPOSED:  # outer·g(scale·x) + shift inside g's blocks
        inner, outer, shift = (_float_literal(pr, v) for v in (f.inner_scale, f.outer_scale, f.outer_shift))
        functions.append(
            {
                "name": f.name,
                "dtype": f.approximation.dtype,
                "fallback": NumpyPrinter.library_funcs[f.function],
                "summary": f"{f.name}, elementwise ({f.approximation.dtype}: derivations/special.py).",
                "doc": wrapped(f"* `{f.name}`: {f.doc}.", 92),
                "call": f"_{f.approximation.function.__name__}_blocks(x, {inner}, {outer}, {shift})",
            }
        )
    # causal_mask's table: the CausalMask node printed on an array z of zeros
    size = sp.Symbol("n", integer=True, positive=True)
    mask_pr = printer_for("numpy")
    causal_mask_of_z = mask_pr.doprint(CausalMask(Array("z", (size, size))))
    needs_math = "math" in mask_pr.modules or any("math." in fn["call"] for fn in functions)
    return {
        "functions": functions,
        "blocks": blocks,
        "block": SPECIAL_BLOCK,
        "causal_mask_of_z": causal_mask_of_z,
        "source": "derivations/special.py",
        "import_lines": import_lines(
            {"np"} | {fn["fallback"].rsplit(".", 1)[0] for fn in functions} | ({"math"} if needs_math else set())
        ),
    }
