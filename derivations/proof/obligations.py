"""Proof obligations generated from every op: what makes "proved" mean the printed code.

An op states its sources' formula once, as a **specification** (`Op.spec`: array-language
assignments in the document's own form, in a scope of their own). From it and from the
assignments that codegen prints, the registry generates, for every op and without any
per-module writing:

    <op>.forward            every output as the forward's own assignments compute it
                            equals the specification's, for symbolic sizes;
    <op>.backward.<grad>    every gradient as the backward's own assignments compute it —
                            the cache arrays replaced by their forward definitions, nothing
                            else shared — equals  Σ_o Σ_ij dO_ij ∂spec(O)_ij / ∂input,
                            differentiated by `sp.diff` on the index form of the spec.

Three scopes, never one namespace:

    spec      inputs, params → the document's intermediates → outputs
    forward   inputs, params → the printed intermediates → outputs, saved
    backward  the cache (saved) and the upstream gradients d<output> → gradients

A name defined in two scopes is two arrays: the backward's `xhat` (rebuilt from the cache) is
not the forward's `xhat`, so neither hides the other from a claim.

Each generated claim carries mutants made from the printed assignments themselves (the
`qed audit` operators of `derivations/proof/mutation.py`: a sign flipped, a factor of 2, a term
dropped, …) besides the op's hand-written classic mistakes (`Op.mistakes`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy as sp

from ..language.arrays import Array, ArrayError, entry, index
from ..language.ops import Op, grad_of, index_bounds
from . import numeric
from .core import Claim, Mutant, Proof, Setting, prove_index_identity

# the free indices of a generated claim: an output's entry (i, j), an input's entry (e, f)
I, J = index("i"), index("j")
E, F = index("e"), index("f")


def arrays_in(expr) -> set:
    return {s for s in sp.sympify(expr).free_symbols if isinstance(s, Array)}


def close(assigns, start: dict | None = None, when=frozenset()) -> dict:
    """The assignments' values with every earlier target substituted: each value is an
    expression in the scope's free arrays only. A redefinition (S = mask(S)) reads the
    previous value. `start` seeds the scope (the backward's cache)."""
    env = dict(start or {})
    for a in assigns:
        if a.when is not None and a.when not in when:
            continue
        env[a.target] = sp.sympify(a.expr).xreplace(env)
    return env


def forward_scope(op: Op, when=frozenset()) -> dict:
    """Every forward target → what the printed forward computes, in inputs and params."""
    return close(op.forward, when=when)


def spec_scope(op: Op, when=frozenset()) -> dict:
    """Every specification target → the document's value, in inputs and params."""
    return close(op.spec, when=when)


def cache_values(op: Op, when=frozenset()) -> dict:
    """The saved arrays that the forward computes → their forward values (inputs and params
    that are saved stay themselves: they are data to the backward, as to the forward)."""
    fwd = forward_scope(op, when)
    return {s: fwd[s] for s in op.saved if s in fwd}


def backward_scope(op: Op, when=frozenset()) -> dict:
    """Every backward target → what the printed backward computes, with the cache arrays
    replaced by their forward definitions and nothing else of the forward shared."""
    return close(op.backward, start=cache_values(op, when), when=when)


def flag_sets(op: Op) -> list[frozenset]:
    """Every combination of the op's flags that some assignment is guarded by."""
    flags = sorted({a.when for a in op.forward + op.backward + op.spec if a.when is not None})
    return [frozenset(c) for k in range(len(flags) + 1) for c in itertools.combinations(flags, k)]


def check_scopes(op: Op) -> None:
    """Build-time checks: each scope reads only what it may (raises ArrayError)."""

    def walk(assigns, free: set, what: str):
        defined = set(free)
        for a in assigns:
            extra = arrays_in(a.expr) - defined
            if extra:
                raise ArrayError(
                    f"op {op.name}: the {what} line for {a.target.name} reads "
                    f"{', '.join(sorted(x.name for x in extra))}, which "
                    + (
                        "is not in the cache (saved) nor an upstream gradient"
                        if what == "backward"
                        else f"the {what} has not defined"
                    )
                )
            defined.add(a.target)
        return defined

    inputs = set(op.inputs) | set(op.params)
    walk(op.forward, inputs, "forward")
    walk(op.backward, set(op.saved) | set(op.upstream), "backward")
    if op.spec:
        defined = walk(op.spec, inputs, "specification")
        missing = [o.name for o in op.outputs if o not in defined]
        if missing:
            raise ArrayError(f"op {op.name}: the specification does not define {missing}")
    defined = {a.target for a in op.backward}
    missing = [g.name for g in op.grads if g not in defined]
    if missing:
        raise ArrayError(f"op {op.name}: the backward never computes {missing}")


# ---------------------------------------------------------------------------------------------
# Index forms of the obligations.


def _ranges(a: Array, row, col) -> dict:
    r, c = a.shape
    out = {}
    if r != 1:
        out[row] = (0, r - 1)
    if c != 1:
        out[col] = (0, c - 1)
    return out


def _element(a: Array, row, col):
    """The Indexed entry of input `a` that a derivative is taken with respect to."""
    return entry(a, (row, col))


def loss_of(op: Op, env: dict) -> sp.Expr:
    """L = Σ_o Σ_ij dO_ij O_ij: any loss, through its upstream gradients."""
    total = sp.Integer(0)
    for o in op.outputs:
        r, c = o.shape
        term = entry(grad_of(o), (I, J)) * entry(o, (I, J), env)
        limits = [(x, 0, size - 1) for x, size in ((I, r), (J, c)) if size != 1]
        total += sp.Sum(term, *limits) if limits else term
    return total


def input_of(op: Op, grad: Array) -> Array:
    for a in op.inputs + op.params:
        if grad_of(a) == grad:
            return a
    raise ArrayError(f"op {op.name}: {grad.name} is the gradient of no input")


# ---------------------------------------------------------------------------------------------
# Settings: where counterexamples are searched.


def setting_for(op: Op, ranges: dict) -> Setting:
    """Concrete sizes and scalars for counterexamples and spot-checks (`Op.check` overrides),
    and the ranges of the free indices and of the integer inputs."""
    sizes: dict = {}
    for a in op.inputs + op.params + op.outputs:
        for dim in a.shape:
            for s in sp.sympify(dim).free_symbols:
                sizes.setdefault(s, None)
    defaults = iter((3, 2, 4, 2, 3, 2))
    for s in sorted(sizes, key=lambda x: x.name):
        sizes[s] = op.check.get("sizes", {}).get(s.name, next(defaults, 2))
    scalars = {}
    for opt in op.options:
        if opt.symbol is not None:
            scalars[opt.symbol] = op.check.get("scalars", {}).get(opt.name, sp.Rational(1, 10))
    # an integer input that indexes an axis of length B lies in 0 … B − 1 for every size (the
    # kernel refuses the rest, `index_bounds`); another (a 0/1 mask) in its `check` range
    bounds = {a: b for a, b in reversed(index_bounds(op))}
    ints = {}
    for a in op.integer_inputs:
        lo, hi = (0, bounds[a] - 1) if a in bounds else op.check.get("integers", {}).get(a.name, (0, 1))
        ints[a.name] = (lo, hi)
    return Setting(sizes=sizes, indices=dict(ranges), scalars=scalars, integer_arrays=ints)


@dataclass
class Obligation:
    """One generated claim before it is run: its id, and the (printed, required) pairs that
    it checks for every flag combination, as a function of the op's printed assignments."""

    id: str
    op: Op
    kind: str  # "forward" or "backward"
    target: Array  # the output or the gradient
    setting: Setting

    def __post_init__(self):
        self._required: list | None = None
        self._values: dict = {}

    def printed(self, op: Op | None = None) -> list:
        """Index forms of the target as the printed lines of `op` (the op itself, or a mutated
        copy of it in the audit) compute it, one per flag combination."""
        op = op or self.op
        if self.kind == "forward":
            return [entry(self.target, (I, J), forward_scope(op, w)) for w in flag_sets(self.op)]
        return [entry(self.target, (E, F), backward_scope(op, w)) for w in flag_sets(self.op)]

    def required(self) -> list:
        """What the specification requires of it, one per flag combination (computed once)."""
        if self._required is None:
            op, out = self.op, []
            for w in flag_sets(op):
                if self.kind == "forward":
                    out.append(entry(self.target, (I, J), spec_scope(op, w)))
                else:
                    x = input_of(op, self.target)
                    out.append(sp.diff(loss_of(op, spec_scope(op, w)), _element(x, E, F)))
            self._required = out
        return self._required

    def prove(self) -> Proof:
        """printed = required by the normaliser; where that is not decided and the required side
        holds a document form that the printer rewrites (log(1 + e^{u}) inside an erf, whose
        printed max(u, 0) + log1p(e^{−|u|}) the normaliser cannot see through the erf), the
        same rewrites are applied to the required side and printed = rewritten is proved: each
        rewrite is an equality for every real u, proved by its lemma (`stability.*`, named in
        the method), so the two together prove printed = required."""
        from ..language.stabilise import stabilise
        from .preconditions import runtime_checks

        method = "index normaliser, generated from the specification"
        printed, required = self.printed(), self.required()
        proof = prove_index_identity(
            printed, required, self.setting, method, preconditions=lambda: runtime_checks(self.op)
        )
        if proof.status == "proved-general":
            return proof
        rewritten, lemmas = zip(*(stabilise(r) for r in required))
        used = sorted(set().union(*lemmas))
        if not used or list(rewritten) == list(required):
            return proof
        again = prove_index_identity(
            printed,
            list(rewritten),
            self.setting,
            f"{method}, its document forms rewritten by the proved lemmas {', '.join(used)}",
            preconditions=lambda: runtime_checks(self.op),
        )
        return again if again.status == "proved-general" else proof

    def refute(self, op: Op, tries: int = 12) -> dict | None:
        """A counterexample to the obligation for a (mutated) op, or None. The required side's
        values at each point are computed once and kept."""
        for k, (a, b) in enumerate(zip(self.printed(op), self.required())):
            for seed in range(tries):
                key = (k, seed)
                if key not in self._values:
                    try:
                        self._values[key] = numeric.evaluate(b, self.setting.point(seed))
                    except (numeric.EvaluationError, ZeroDivisionError, ValueError):
                        self._values[key] = None
                want = self._values[key]
                if want is None:
                    continue
                point = self.setting.point(seed)
                try:
                    got = numeric.evaluate(a, point)
                except ZeroDivisionError:
                    if not numeric.is_finite(want):
                        continue
                    got = "division by zero"  # the printed line is undefined where the spec has a value
                except (numeric.EvaluationError, ValueError):
                    continue
                if isinstance(got, str) or _gap(got, want) > 1e-20:
                    return {
                        "at": point.report(),
                        "seed": seed,
                        "lhs": got if isinstance(got, str) else _num(got),
                        "rhs": _num(want),
                        "flags": sorted(flag_sets(self.op)[k]),
                    }
        # the points above lie off every kink (entries ≠ 0): the printed value at each kink of
        # the printed code must lie between the specification's one-sided derivatives there
        from .kinks import refute_at_kinks

        for k, (a, b) in enumerate(zip(self.printed(op), self.required())):
            try:
                cx = refute_at_kinks(a, b, self.setting)
            except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError):
                cx = None
            if cx is not None:
                return dict(cx, flags=sorted(flag_sets(self.op)[k]))
        return None


def _gap(got, want):
    """The relative gap; a complex value (√ of a negative number) where a real one is required
    is a counterexample too: the printed code would give NaN."""
    try:
        return numeric.relative_gap(got, want)
    except TypeError:
        return float("inf")


def _num(v):
    if isinstance(v, numeric.mpmath.mpc):
        return str(v)
    f = float(v)
    return f if abs(f) < 1e300 else str(v)


def obligations(op: Op) -> list[Obligation]:
    out = []
    for o in op.outputs:
        suffix = "" if len(op.outputs) == 1 else "." + o.name
        out.append(Obligation(f"{op.name}.forward{suffix}", op, "forward", o, setting_for(op, _ranges(o, I, J))))
    for g in op.grads:
        x = input_of(op, g)
        out.append(Obligation(f"{op.name}.backward.{g.name}", op, "backward", g, setting_for(op, _ranges(x, E, F))))
    return out


def claims_for(op: Op) -> list[Claim]:
    """The generated claims of an op, each with its automatic and classic mutants."""
    from . import mutation

    out = []
    for ob in obligations(op):
        mutants = [
            Mutant(m.name, m.mistake, (lambda m=m, ob=ob: ob.refute(m.apply(op)))) for m in mutation.sample_for(op, ob)
        ]
        what = "forward" if ob.kind == "forward" else f"gradient {ob.target.name}"
        out.append(
            Claim(
                id=ob.id,
                title=f"{op.title}: the printed {what} equals the specification"
                + ("" if ob.kind == "forward" else "'s derivative"),
                source=op.source or op.module,
                latex=obligation_latex(op, ob),
                prove=ob.prove,
                mutants=mutants,
                module=op.module,
            )
        )
    from .derived import derived_claims  # <op>.backward_derived.<grad>: a hand-written backward

    return out + derived_claims(op)


def obligation_latex(op: Op, ob: Obligation) -> str:
    """The statement, printed from the specification by `sympy.latex`."""
    from ..language.latex import array_latex, assigns_latex

    spec = assigns_latex(op.spec)
    if ob.kind == "forward":
        return spec
    x = input_of(op, ob.target)
    ups = ", ".join(array_latex(grad_of(o)) for o in op.outputs)
    return (
        rf"{array_latex(ob.target)} = \frac{{\partial}}{{\partial {array_latex(x)}}} "
        rf"\sum {ups} \odot \mathrm{{spec}}, \quad " + spec
    )
