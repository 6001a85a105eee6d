"""Preconditions: the hypotheses a proof may keep because the printed code checks them.

The normaliser proves a denominator ≠ 0 where positivity decides it (a sum of exps, √(σ² + ε)
with ε > 0, a size, a variance plus ε, a causal row's sum whose first key always counts). What it
cannot decide is a hypothesis of the proof, and a hypothesis is a goal too: the gate
(`core.decide`) keeps it only as a **precondition** that the generated kernel checks at run time,
and names that check; otherwise the claim is not proved.

The run-time checks are those code generation emits (codegen/analysis/denominators.py): every
denominator of an op's printed lines (a negative power's base, a log's argument), expanded
through the op's intermediates, that is a function of the inputs alone and not provably
positive is refused at 0 before the forward runs (`_validate.nonzero_denominator`). The same rule
is stated here, on the op alone (derivations never import codegen); tests/test_hypotheses.py
checks that the two lists agree for every op.

A hypothesis h ≠ 0 (a normal form) is such a check when, for some renaming of its indices, it is
c·D for a non-zero number c and D the check's denominator in index form (Σ_t mask_t).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..language.arrays import DOCUMENT_NODES, Array, CausalMask, ColSum, Contract, MatMul, RowMax, RowMean, RowSum, \
    entry, index, shape_of

_SUMS = {RowSum: 1, RowMean: 1, RowMax: 1, ColSum: 0, Contract: 0}


@dataclass(frozen=True)
class RuntimeCheck:
    """A denominator D (an array expression in the op's inputs) that the generated kernel of
    `op` refuses at 0 at run time."""

    op: str
    denominator: sp.Expr

    def describe(self) -> str:
        return (f"checked at run time: the generated {self.op} kernel refuses {sp.sstr(self.denominator)} = 0 "
                "before its forward (_validate.nonzero_denominator)")

    def index_form(self) -> sp.Expr:
        r, c = index("r_"), index("c_")
        rows, cols = shape_of(self.denominator)
        return entry(self.denominator, (r if rows != 1 else 0, c if cols != 1 else 0))


def runtime_checks(op) -> list[RuntimeCheck]:
    """The denominators the generated kernel of `op` checks at run time (the rule of
    codegen/analysis/denominators.py: in the inputs alone, not provably positive)."""
    env = op.env(frozenset(o.name for o in op.options))
    options = {o.symbol for o in op.options if o.symbol is not None}
    positive = {o.symbol for o in op.options if o.symbol is not None
                and o.allowed().is_subset(sp.Interval.open(0, sp.oo))}
    inputs = set(op.inputs) | set(op.params)
    out: dict = {}
    memo: dict = {}
    signs: dict = {}
    for asg in op.forward + op.backward:
        for den in _denominators(asg.expr):
            full = _expanded(den, env, memo)
            sizes = {s for s in sp.sympify(full).free_symbols if not isinstance(s, Array) and s not in options}
            arrays = {s for s in sp.sympify(full).free_symbols if isinstance(s, Array)}
            if _sign(full, positive | sizes, signs) == "+":
                continue
            if sizes and not arrays:
                continue                                   # sizes alone: the size checks
            if arrays and arrays <= inputs:
                out.setdefault(sp.sstr(full), RuntimeCheck(op.name, full))
    return list(out.values())


_ALL: list = []


def all_runtime_checks() -> list[RuntimeCheck]:
    """Every registered op's run-time checks (for a hand-written claim about an op's formulas),
    computed once."""
    from .. import registry

    if not _ALL:
        _ALL.append([c for o in registry.ops() for c in runtime_checks(o)])
    return list(_ALL[0])


def match(hypothesis, checks, normaliser) -> RuntimeCheck | None:
    """The run-time check that `hypothesis` ≠ 0 is, up to a renaming of its indices and a
    non-zero constant factor; None if there is none."""
    from .kinks import same_up_to_indices

    for check in checks:
        try:
            d = normaliser.canon(check.index_form())
        except Exception:                                  # a form the normaliser refuses: no match
            continue
        if same_up_to_indices(d, hypothesis, sizes=_sizes(d) | _sizes(hypothesis)):
            return check
    return None


def _sizes(e) -> set:
    return {s for s in e.free_symbols if isinstance(s, sp.Symbol) and s.is_positive and s.is_integer}


def _denominators(expr) -> list:
    out = []
    for node in sp.preorder_traversal(sp.sympify(expr)):
        if isinstance(node, sp.Pow) and node.exp.is_negative:
            out.append(node.base)
        elif isinstance(node, sp.log):
            out.append(node.args[0])
        elif isinstance(node, RowMean):
            out.append(shape_of(node.args[0])[1])
    return out


def _sign(expr, positive_symbols: set, memo: dict) -> str | None:
    """"+" if provably > 0, "0+" if provably ≥ 0, else None (codegen's rule, verbatim)."""
    if expr in memo:
        return memo[expr]
    e, out = expr, None
    if not e.free_symbols:
        out = "+" if e.is_positive else "0+" if e.is_zero else None
    elif isinstance(e, Array):
        out = None
    elif isinstance(e, sp.Symbol):
        out = "+" if e in positive_symbols else "0+" if e.is_nonnegative else None
    elif isinstance(e, (sp.exp,)) or isinstance(e, DOCUMENT_NODES):
        out = "+"
    elif isinstance(e, sp.Pow):
        b = _sign(e.base, positive_symbols, memo)
        out = b if b == "+" else "0+" if (b == "0+" and e.exp.is_positive) or \
            (e.exp.is_integer and e.exp.is_even) else None
    elif isinstance(e, (sp.Add, sp.Mul, MatMul, Contract)) or type(e) in _SUMS:
        signs = [_sign(a, positive_symbols, memo) for a in e.args]
        if all(x is not None for x in signs):
            strict = all(x == "+" for x in signs) if not isinstance(e, sp.Add) else "+" in signs
            out = "+" if strict else "0+"
    elif isinstance(e, sp.Max):
        signs = [_sign(a, positive_symbols, memo) for a in e.args]
        out = "+" if "+" in signs else "0+" if "0+" in signs else None
    memo[expr] = out
    return out


def _expanded(expr, env: dict, memo: dict):
    expr = sp.sympify(expr)
    if expr in memo:
        return memo[expr]
    if isinstance(expr, Array):
        out = _expanded(env[expr], env, memo) if expr in env else expr
    elif isinstance(expr, CausalMask):
        out = _expanded(expr.args[0], env, memo)
    elif expr.args:
        out = expr.func(*[_expanded(a, env, memo) for a in expr.args])
    else:
        out = expr
    memo[expr] = out
    return out


__all__ = ["RuntimeCheck", "runtime_checks", "all_runtime_checks", "match"]
