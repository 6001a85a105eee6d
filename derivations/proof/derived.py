"""The derived backward of every op that keeps a hand-written one, proved equal to it.

An op whose backward is written by hand (attention's δ = rowsum(dO ⊙ O), LayerNorm's closed
form, …) also gets the backward that reverse mode derives from its printed forward, with the
op's own cache (`derivations/language/autodiff.py`: the forward arrays it reads outside the cache
are recomputed from it). For every gradient the registry then generates

    <op>.backward_derived.<grad>    the derived backward's gradient equals the printed one,

both as index forms of the backward's lines over the same cache and upstream gradients. The
cache is related to the inputs by the forward, one step at a time: each cached array is
replaced by its forward definition in the inputs and the *other* cached arrays, which stay free
(LayerNorm's mean is RowMean(x), its rstd any per-row number; attention's o is att V, att any
matrix). An identity that holds for every value of those free arrays holds in particular for
the values the forward gives them, so this proves a little more than needed and is much cheaper
than expanding the cache all the way (which is tried second). The printed backward is proved
equal to the specification's derivative by `<op>.backward.<grad>`; with this claim the derived
one is too.

Mutants: the derived line's value negated and doubled, and the op's classic backward mistakes
(in the printed backward) that bear on the gradient: the comparison must refute each.
"""

from __future__ import annotations

import dataclasses

import sympy as sp

from ..language.arrays import entry
from ..language.ops import Op
from . import numeric
from .core import Claim, Mutant, Proof, prove_index_identity
from .obligations import E, F, backward_scope, cache_values, close, flag_sets, obligations

_DERIVED: dict = {}
_CLASSIC_MUTANTS = 3  # of the op's classic backward mistakes on the gradient's path (the
# generated <op>.backward.<grad> carries them all)


def derived_op(op: Op) -> Op:
    """The op with its backward derived from its forward (the op's own cache), once per op."""
    if op.name not in _DERIVED:
        from ..language.autodiff import derive_op

        d = derive_op(op, flag_sets(op))
        _DERIVED[op.name] = (
            dataclasses.replace(op, backward=d.backward, grads=d.grads, derived=True, derivation_lemmas=d.lemmas),
            d,
        )
    return _DERIVED[op.name][0]


def cache_relations(op: Op, when=frozenset()) -> dict:
    """Each cached forward array → its forward definition in the inputs, the parameters and the
    other cached arrays (which stay free)."""
    env: dict = {}
    out: dict = {}
    final = {a.target: k for k, a in enumerate(op.forward)}
    for k, a in enumerate(op.forward):
        if a.when is not None and a.when not in when:
            continue
        value = sp.sympify(a.expr).xreplace(env)
        if a.target in op.saved and final[a.target] == k:
            out[a.target] = value
            env.pop(a.target, None)  # read as itself from here on
        else:
            env[a.target] = value
    return out


def _sides(op: Op, derived: Op, grad, when, full: bool):
    start = cache_values(op, when) if full else cache_relations(op, when)
    left = entry(grad, (E, F), close(derived.backward, start=start, when=when))
    right = entry(grad, (E, F), close(op.backward, start=start, when=when))
    return left, right


def _setting(op: Op, grad):
    return next(ob.setting for ob in obligations(op) if ob.kind == "backward" and ob.target == grad)


def _prove(op: Op, grad) -> Proof:
    derived = derived_op(op)
    setting = _setting(op, grad)
    lemmas = _DERIVED[op.name][1].lemmas
    # a kink either side takes a value at must be the specification's, and both values must lie
    # in its subdifferential there (`core.decide`)
    from .preconditions import runtime_checks

    ob = next(ob for ob in obligations(op) if ob.kind == "backward" and ob.target == grad)
    spec = [(lambda k=k: ob.required()[k]) for k in range(len(flag_sets(op)))]
    for full in (False, True):
        pairs = [_sides(op, derived, grad, w, full) for w in flag_sets(op)]
        how = (
            "the cache expanded through the forward"
            if full
            else "each cached array by its forward definition in the inputs and the other cached arrays"
        )
        proof = prove_index_identity(
            [p[0] for p in pairs],
            [p[1] for p in pairs],
            setting,
            f"index normaliser: derived vs printed backward, {how}",
            spec=spec,
            preconditions=lambda: runtime_checks(op),
        )
        if proof.status == "proved-general":
            proof.assumptions = list(dict.fromkeys(proof.assumptions + lemmas))
            return proof
    return proof


def _refute(op: Op, derived: Op, grad) -> dict | None:
    """A counterexample to derived = printed (the cache expanded: what the code computes)."""
    setting = _setting(op, grad)
    for w in flag_sets(op):
        left = entry(grad, (E, F), backward_scope(derived, w))
        right = entry(grad, (E, F), backward_scope(op, w))
        for seed in range(12):
            point = setting.point(seed)
            try:
                a, b = numeric.evaluate(left, point), numeric.evaluate(right, point)
            except (numeric.EvaluationError, ZeroDivisionError, ValueError):
                continue
            if numeric.relative_gap(a, b) > 1e-20:
                return {"at": point.report(), "seed": seed, "lhs": float(a), "rhs": float(b), "flags": sorted(w)}
    return None


def _with_line(op: Op, target, value) -> Op:
    lines = list(op.backward)
    pos = max(k for k, a in enumerate(lines) if a.target == target)
    lines[pos] = dataclasses.replace(lines[pos], expr=value)
    return dataclasses.replace(op, backward=lines)


def derived_claims(op: Op) -> list[Claim]:
    """`<op>.backward_derived.<grad>` for an op whose printed backward is written by hand."""
    from .mutation import sample_for

    if op.derived or not op.spec:
        return []
    out = []
    for ob in obligations(op):
        if ob.kind != "backward":
            continue
        g = ob.target

        def mutated_derived(scale, g=g):
            derived = derived_op(op)
            line = next(a for a in reversed(derived.backward) if a.target == g)
            return _with_line(derived, g, scale * line.expr)

        mutants = [
            Mutant(
                "derived-sign",
                f"{g.name}: the derived value negated",
                lambda g=g, m=mutated_derived: _refute(op, m(-1), g),
            ),
            Mutant(
                "derived-factor",
                f"{g.name}: the derived value doubled",
                lambda g=g, m=mutated_derived: _refute(op, m(2), g),
            ),
        ]
        # (a kink mutant changes a value at a kink only, where derived and printed may differ
        # anyway: the generated <op>.backward.<grad> refutes it, at the kink)
        classic = [m for m in sample_for(op, ob) if m.scope == "backward" and not m.name.startswith(("auto-", "kink-"))]
        for m in classic[:_CLASSIC_MUTANTS]:
            mutants.append(
                Mutant(
                    f"printed-{m.name}",
                    f"the printed backward with: {m.mistake}",
                    lambda g=g, m=m: _refute(m.apply(op), derived_op(op), g),
                )
            )
        out.append(
            Claim(
                id=f"{op.name}.backward_derived.{g.name}",
                title=f"{op.title}: the derived gradient {g.name} equals the printed one",
                source=op.source or op.module,
                latex=rf"\left({_latex_name(g)}\right)_{{\text{{derived}}}} = "
                rf"\left({_latex_name(g)}\right)_{{\text{{printed}}}}",
                prove=lambda g=g: _prove(op, g),
                mutants=mutants,
                module=op.module,
            )
        )
    return out


def _latex_name(a) -> str:
    from ..language.latex import array_latex

    return array_latex(a)
