"""Preconditions: the hypotheses a proof may keep because the printed code checks them.

The normaliser proves a denominator ≠ 0 where positivity decides it (a sum of exps, √(σ² + ε)
with ε > 0, a size, a variance plus ε, a causal row's sum whose first key always counts). What it
cannot decide is a hypothesis of the proof, and a hypothesis is a goal too: the gate
(`core.decide`) keeps it only as a **precondition** that the generated kernel checks at run time,
and names that check; otherwise the claim is not proved.

The run-time checks are those code generation emits (codegen/analysis/denominators.py): every
denominator of an op's printed lines (a negative power's base, a log's argument), expanded
through the op's intermediates, that is a function of the inputs alone and not provably
positive is refused at 0 before the forward runs (`_validate.nonzero_denominator`). Both read the
one sign analysis of derivations/language/denominators.py; tests/test_hypotheses.py checks that
the two lists agree for every op.

A hypothesis h ≠ 0 (a normal form) is such a check when, for some renaming of its indices, it is
c·D for a non-zero number c and D the check's denominator in index form (Σ_t mask_t).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..language.arrays import entry, index, shape_of
from ..language.denominators import classified


@dataclass(frozen=True)
class RuntimeCheck:
    """A denominator D (an array expression in the op's inputs) that the generated kernel of
    `op` refuses at 0 at run time."""

    op: str
    denominator: sp.Expr
    option: object = None  # the Option whose domain excludes the zeros (no data check needed)

    def describe(self) -> str:
        if self.option is not None:
            return (
                f"checked at run time: {sp.sstr(self.denominator)} has no zero where {self.option.name} lies in "
                f"{_interval(self.option.allowed())}, and the generated {self.op} kernel refuses {self.option.name} "
                "outside it (_validate.real_option)"
            )
        return (
            f"checked at run time: the generated {self.op} kernel refuses {sp.sstr(self.denominator)} = 0 "
            "before its forward (_validate.nonzero_denominator)"
        )

    def index_form(self) -> sp.Expr:
        r, c = index("r_"), index("c_")
        shape = shape_of(self.denominator)
        if not shape:  # a scalar: a function of the options alone (1 − p)
            return sp.sympify(self.denominator)
        rows, cols = shape
        return entry(self.denominator, (r if rows != 1 else 0, c if cols != 1 else 0))


def _interval(s) -> str:
    """[0, 1) for Interval.Ropen(0, 1); any other set as SymPy prints it."""
    if isinstance(s, sp.Interval):
        return f"{'(' if s.left_open else '['}{sp.sstr(s.start)}, {sp.sstr(s.end)}{')' if s.right_open else ']'}"
    return sp.sstr(s)


def runtime_checks(op) -> list[RuntimeCheck]:
    """The denominators the generated kernel of `op` checks at run time: those in the inputs
    alone and not provably positive (the classification codegen prints its checks from), and
    those of one option alone that its domain check keeps nonzero."""
    out: dict = {}
    for _, _, _, full, kind in classified(op):
        if kind == "inputs":
            out.setdefault(sp.sstr(full), RuntimeCheck(op.name, full))
        elif kind == "options":
            (symbol,) = sp.sympify(full).free_symbols
            option = next(o for o in op.options if o.symbol == symbol)
            out.setdefault(sp.sstr(full), RuntimeCheck(op.name, full, option))
    return list(out.values())


_ALL: list = []


def all_runtime_checks() -> list[RuntimeCheck]:
    """Every registered op's run-time checks (for a hand-written claim about an op's formulas),
    computed once."""
    from .. import registry

    if _ALL:
        return list(_ALL[0])
    checks = [c for o in registry.ops() for c in runtime_checks(o)]
    if not registry.loading():  # a list read while the topic modules load lacks some of them
        _ALL.append(checks)
    return checks


def match(hypothesis, checks, normaliser) -> RuntimeCheck | None:
    """The run-time check that `hypothesis` ≠ 0 is, up to a renaming of its indices and a
    non-zero constant factor; None if there is none."""
    from .kinks import same_up_to_indices

    for check in checks:
        try:
            d = normaliser.canon(check.index_form())
        except Exception:  # a form the normaliser refuses: no match
            continue
        # a positive power of D is 0 exactly where D is: hypot(x, z) = √(x² + z²) checked for
        # the hypothesis x² + z² ≠ 0 (the check computes the root, which does not underflow)
        forms = [d] + ([d.base] if d.is_Pow and d.exp.is_Rational and d.exp > 0 else [])
        if any(same_up_to_indices(f, hypothesis, sizes=_sizes(f) | _sizes(hypothesis)) for f in forms):
            return check
    return None


def _sizes(e) -> set:
    return {s for s in e.free_symbols if isinstance(s, sp.Symbol) and s.is_positive and s.is_integer}
