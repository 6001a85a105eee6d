"""The denominators of an array-language expression and the sign analysis that sorts them.

One rule, read by code generation (codegen/analysis/denominators.py: which sizes must be ≥ 1,
which denominators the generated kernel checks at run time) and by the proofs
(derivations/proof/preconditions.py: a denominator the normaliser cannot prove ≠ 0 is a
hypothesis only where the kernel checks it): the two read the same functions, so the list of
run-time checks the proofs accept is the one the code prints.

    denominators(expr)   each negative power's base, each log's argument, each mean's count
    sign(expr, …)        "+" (provably positive), "0+" (provably ≥ 0) or None, from the
                         expression alone: sums of exps, squares, |·|, positive options and
                         sizes, the array language's positive nodes (σ, Φ, G, hypot)
    expanded(expr, env)  every intermediate replaced by its definition (a causal mask by its
                         argument: no row is fully masked, key 0 is always seen)
    classified(op)       every denominator of an op's printed lines, expanded and sorted:
                         provably positive, sizes alone, options alone and nowhere 0 on their
                         domains (1 − p for 0 ≤ p < 1: the option check refuses the rest), in
                         the inputs alone (a run-time check), or none of these
"""

from __future__ import annotations

import sympy as sp

from .arrays import (
    DOCUMENT_NODES,
    Array,
    ArrayNode,
    CausalMask,
    ColSum,
    Contract,
    Gather,
    MatMul,
    RowMax,
    RowMean,
    RowSum,
    T,
    Take,
    shape_of,
)

__all__ = ["SUMS", "denominators", "sign", "expanded", "classified", "root_beside_positive"]

SUMS = {RowSum: 1, RowMean: 1, RowMax: 1, ColSum: 0, Contract: 0}  # node -> the axis it sums over


def denominators(expr) -> list:
    """The denominators of `expr`: bases of negative powers, log arguments, each mean's count;
    as (denominator, the node that divides by it or takes its log, as text)."""
    out = []
    for node in sp.preorder_traversal(sp.sympify(expr)):
        if isinstance(node, sp.Pow) and node.exp.is_negative:
            out.append((node.base, sp.sstr(node)))
        elif isinstance(node, sp.log):
            out.append((node.args[0], sp.sstr(node)))
        elif isinstance(node, RowMean):  # RowMean(A) = RowSum(A)/cols
            out.append((shape_of(node.args[0])[1], sp.sstr(node)))
    return out


def root_beside_positive(e: sp.Add) -> bool:
    """e = k v + k √(v² + c) with k > 0 and c > 0 (asinh's log argument, squareplus' sum):
    √(v² + c) > |v| ≥ −v, so e > 0 for every real v."""
    if len(e.args) != 2:
        return False
    for t, other in (e.args, e.args[::-1]):
        roots = [f for f in sp.Mul.make_args(t) if isinstance(f, sp.Pow) and f.exp == sp.S.Half]
        if len(roots) != 1:
            continue
        k = t / roots[0]
        if k.is_positive is not True:
            continue
        v = other / k
        if sp.expand(roots[0].base - v**2).is_positive is True:
            return True
    return False


def sign(expr, positive_symbols: set, memo: dict) -> str | None:
    """ "+" if `expr` is provably > 0, "0+" if provably ≥ 0, else None (for every value of the
    inputs, with every size ≥ 1 and every option in its domain). Intermediates are expanded."""
    if expr in memo:
        return memo[expr]
    e, out = expr, None
    if not e.free_symbols:  # 2, π, √2: SymPy decides
        out = "+" if e.is_positive else "0+" if e.is_zero else None
    elif isinstance(e, Array):
        out = None  # an input's values: anything
    elif isinstance(e, sp.Symbol):
        out = "+" if e in positive_symbols else "0+" if e.is_nonnegative else None
    elif isinstance(e, sp.exp):
        out = "+"
    elif isinstance(e, DOCUMENT_NODES):  # σ, Φ, G and hypot(u, s > 0) are positive; H(u) only ≥ 0
        out = "+" if e.is_positive else "0+" if e.is_nonnegative else None
    elif isinstance(e, sp.Abs):
        out = "0+"
    elif isinstance(e, sp.Pow):
        b = sign(e.base, positive_symbols, memo)
        out = (
            b
            if b == "+"
            else "0+"
            if (b == "0+" and e.exp.is_positive) or (e.exp.is_integer and e.exp.is_even)
            else None
        )
    elif isinstance(e, (Take, Gather, T)):  # entries picked or moved: their signs
        out = sign(e.args[0], positive_symbols, memo)
    elif isinstance(e, sp.Add) and root_beside_positive(e):  # k v + k √(v² + c), c > 0
        out = "+"
    elif isinstance(e, (sp.Add, sp.Mul, MatMul, Contract)) or type(e) in SUMS:
        signs = [sign(a, positive_symbols, memo) for a in e.args]
        if all(x is not None for x in signs):
            strict = all(x == "+" for x in signs) if not isinstance(e, sp.Add) else "+" in signs
            out = "+" if strict else "0+"
    elif isinstance(e, sp.Max):
        signs = [sign(a, positive_symbols, memo) for a in e.args]
        out = "+" if "+" in signs else "0+" if "0+" in signs else None
    elif isinstance(e, sp.Function) and not isinstance(e, ArrayNode):  # cosh u > 0: SymPy's facts
        out = "+" if e.is_positive else "0+" if e.is_nonnegative else None
    memo[expr] = out
    return out


def expanded(expr, env: dict, memo: dict):
    """`expr` with every intermediate array replaced by its definition, recursively; a causal
    mask read as its argument (no row is fully masked: key 0 is always seen, attention.causal)."""
    expr = sp.sympify(expr)
    if expr in memo:
        return memo[expr]
    if isinstance(expr, Array):
        out = expanded(env[expr], env, memo) if expr in env else expr
    elif isinstance(expr, CausalMask):
        out = expanded(expr.args[0], env, memo)
    elif expr.args:
        out = expr.func(*[expanded(a, env, memo) for a in expr.args])
    else:
        out = expr
    memo[expr] = out
    return out


def nonzero_on_domain(expr, options) -> bool:
    """Whether `expr`, a function of one option's symbol alone, has no zero on the values the
    option accepts (`Option.allowed`): 1 − p on 0 ≤ p < 1, 1 − β^t on β in [0, 1)."""
    free = sp.sympify(expr).free_symbols
    if len(free) != 1:
        return False
    (symbol,) = free
    option = next((o for o in options if o.symbol == symbol), None)
    if option is None:
        return False
    try:
        zeros = sp.solveset(sp.sympify(expr), symbol, domain=option.allowed())
    except (NotImplementedError, ValueError, TypeError):
        return False
    return zeros is sp.S.EmptySet


def classified(op):
    """Every denominator of `op`'s forward and backward lines (every flag on), as (line, the
    denominator, its node as text, its expanded form, kind), kind one of

        "positive"   provably > 0 (a sum of exps; ε plus a square; a positive option)
        "sizes"      a function of sizes alone: the size checks (≥ 1) cover it
        "options"    a function of one option alone, nowhere 0 on the option's domain (which the
                     generated code refuses outside, before anything is computed)
        "inputs"     a function of the inputs alone, not provably positive: checked at run time
        "other"      none of these (it reads an intermediate): nothing can check it beforehand
    """
    from .arrays import Array

    env = op.env(frozenset(o.name for o in op.options))
    options = {o.symbol for o in op.options if o.symbol is not None}
    positive = {
        o.symbol for o in op.options if o.symbol is not None and o.allowed().is_subset(sp.Interval.open(0, sp.oo))
    }
    inputs = set(op.inputs) | set(op.params)
    memo: dict = {}
    signs: dict = {}
    for asg in op.forward + op.backward:
        for den, shown in denominators(asg.expr):
            full = expanded(den, env, memo)
            free = sp.sympify(full).free_symbols
            sizes = {s for s in free if not isinstance(s, Array) and s not in options}
            arrays = {s for s in free if isinstance(s, Array)}
            if sign(full, positive | sizes, signs) == "+":
                kind = "positive"
            elif not arrays and not sizes and nonzero_on_domain(full, op.options):
                kind = "options"
            elif sizes and not arrays:
                kind = "sizes"
            elif arrays <= inputs:
                kind = "inputs"
            else:
                kind = "other"
            yield asg, den, shown, full, kind
