"""Claims, proofs, mutants and certificates.

A **claim** is a statement from the source documents with an id (`attention.dQ`), its source,
its LaTeX, a **prover** and at least one **mutant**. Running it gives a **certificate**:

* `proved-general`  — the symbolic residual is exactly 0 for symbolic sizes;
* `proved-concrete` — exactly 0, but only at the sizes listed in `sizes`;
* `refuted`         — a concrete counterexample was found;
* `unproven`        — neither;
* `evidence`        — a numeric experiment that supports a statement which is not a theorem.

A **mutant** is the claim with a classic mistake; the verifier must refute it with a concrete
numeric counterexample, or the claim's checks prove nothing.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import mpmath
import sympy as sp

from . import numeric
from .rewriting import Normaliser, NormaliserError

PROVED = ("proved-general", "proved-concrete")
STATUSES = ("proved-general", "proved-concrete", "refuted", "unproven", "evidence")


@dataclass
class Proof:
    """What a prover returns."""

    status: str
    method: str
    assumptions: list[str] = field(default_factory=list)
    residual: str = "0"
    sizes: dict | None = None  # for proved-concrete: the sizes it holds at
    spot_check: dict | None = None  # numeric agreement recorded beside a proof
    counterexample: dict | None = None  # for refuted
    evidence: dict | None = None  # for evidence: what was measured

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")


@dataclass
class MutantResult:
    id: str
    mistake: str
    refuted: bool
    counterexample: dict | None
    seconds: float


@dataclass
class Certificate:
    id: str
    title: str
    source: str
    module: str
    statement: str
    status: str
    scope: str
    method: str
    assumptions: list[str]
    residual: str
    seconds: float
    sizes: dict | None
    spot_check: dict | None
    counterexample: dict | None
    evidence: dict | None
    mutants: list[MutantResult]

    @property
    def ok(self) -> bool:
        """Proved (or recorded evidence) and every mutant refuted."""
        good = self.status in PROVED or self.status == "evidence"
        return good and bool(self.mutants) and all(m.refuted for m in self.mutants)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Mutant:
    """A wrong variant of a claim. `refute()` returns a counterexample dict, or None."""

    name: str
    mistake: str
    refute: Callable[[], dict | None]


@dataclass
class Claim:
    id: str
    title: str
    source: str
    latex: str
    prove: Callable[[], Proof]
    mutants: list[Mutant]
    module: str = ""

    def run(self) -> Certificate:
        start = time.perf_counter()
        try:
            proof = self.prove()
        except Exception as exc:  # a crashing prover is an unproven claim, never a proof
            proof = Proof(
                "unproven", f"prover raised {type(exc).__name__}: {exc}", residual=traceback.format_exc(limit=3)
            )
        seconds = time.perf_counter() - start
        results = []
        for m in self.mutants:
            t0 = time.perf_counter()
            try:
                cx = m.refute()
            except Exception as exc:
                cx = None
                m_err = f"{type(exc).__name__}: {exc}"
            else:
                m_err = None
            results.append(
                MutantResult(
                    id=f"{self.id}~{m.name}",
                    mistake=m.mistake + (f" [error: {m_err}]" if m_err else ""),
                    refuted=cx is not None,
                    counterexample=cx,
                    seconds=round(time.perf_counter() - t0, 4),
                )
            )
        return Certificate(
            id=self.id,
            title=self.title,
            source=self.source,
            module=self.module,
            statement=self.latex,
            status=proof.status,
            scope=_scope(proof),
            method=proof.method,
            assumptions=list(proof.assumptions),
            residual=proof.residual,
            seconds=round(seconds, 4),
            sizes=proof.sizes,
            spot_check=proof.spot_check,
            counterexample=proof.counterexample,
            evidence=proof.evidence,
            mutants=results,
        )


def _scope(proof: Proof) -> str:
    if proof.status == "proved-general":
        return "all sizes"
    if proof.status == "proved-concrete":
        sizes = proof.sizes or {}
        return "sizes " + "; ".join(f"{k}={v}" for k, v in sizes.items())
    if proof.status == "evidence":
        return "numeric evidence"
    return "-"


# ---------------------------------------------------------------------------------------------
# Index identities for symbolic sizes: the workhorse.


@dataclass
class Setting:
    """How to instantiate a claim's symbols at a concrete point, for counterexamples.

    `sizes`   symbolic size -> small concrete value used for counterexamples and spot-checks
    `indices` free index -> (lo, hi) range, in terms of the size symbols
    `scalars` other scalars (ε, β, ...) -> a concrete value
    `integer_arrays` IndexedBase name -> (lo, hi) integer range, for token ids and targets
    `domain`  free index -> (lo, hi) for the symbolic proof, where the claim holds on a wider
              range than the points drawn from `indices` (causal attention: i ∈ [0, n − 1],
              though the points take i ∈ {0, 1}); it overrides `indices` for the normaliser

    The normaliser's goals (a sifted delta's value in its range, a range split inside the
    range) are proved from `indices` (or `domain`), `integer_arrays` and the sizes.
    """

    sizes: dict
    indices: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)
    integer_arrays: dict = field(default_factory=dict)
    domain: dict = field(default_factory=dict)

    def ranges(self) -> dict:
        """The free indices' ranges the normaliser's goals are proved from."""
        out = {sp.sympify(v): (sp.sympify(lo), sp.sympify(hi)) for v, (lo, hi) in self.indices.items()}
        out.update({sp.sympify(v): (sp.sympify(lo), sp.sympify(hi)) for v, (lo, hi) in self.domain.items()})
        return out

    def normaliser(self) -> Normaliser:
        """A normaliser that proves its side conditions from this setting's ranges."""
        return Normaliser(ranges=self.ranges(), integer_arrays=dict(self.integer_arrays))

    def point(self, seed: int, sizes: dict | None = None) -> numeric.Point:
        import random

        rng = random.Random(seed)
        sizes = dict(self.sizes if sizes is None else sizes)
        symbols: dict = dict(sizes)
        symbols.update(self.scalars)
        for idx, (lo, hi) in self.indices.items():
            a = int(sp.sympify(lo).subs(symbols))
            b = int(sp.sympify(hi).subs(symbols))
            symbols[idx] = rng.randint(a, b)
        ints = {}
        for name, (lo, hi) in self.integer_arrays.items():
            ints[name] = (int(sp.sympify(lo).subs(symbols)), int(sp.sympify(hi).subs(symbols)))
        return numeric.Point(symbols=symbols, seed=seed, integer_arrays=ints)


def counterexample(lhs, rhs, setting: Setting, tries: int = 12, tol: float = 1e-20) -> dict | None:
    """Search concrete points where `lhs ≠ rhs`; return the first as a report, or None. A point
    where the specification (`rhs`) has a value and the printed side (`lhs`) divides by zero
    counts: the printed line is undefined where the formula is not ((x + |x|)² under a quotient
    for x < 0)."""
    for seed in range(tries):
        point = setting.point(seed)
        try:
            b = numeric.evaluate(rhs, point)
        except (numeric.EvaluationError, ZeroDivisionError, ValueError):
            continue
        try:
            a = numeric.evaluate(lhs, point)
        except ZeroDivisionError:
            if numeric.is_finite(b):
                return {"at": point.report(), "seed": seed, "lhs": "division by zero", "rhs": _num(b)}
            continue
        except (numeric.EvaluationError, ValueError):
            continue
        if numeric.relative_gap(a, b) > tol:
            return {"at": point.report(), "seed": seed, "lhs": _num(a), "rhs": _num(b)}
    return None


def spot_check(lhs, rhs, setting: Setting, seeds=(101, 202)) -> dict:
    """Numeric agreement at concrete points, recorded beside a proof (never a proof). A point
    that cannot be evaluated is reported under "error" (and the gate then refuses the proof)."""
    worst = 0.0
    for seed in seeds:
        point = setting.point(seed)
        try:
            a, b = numeric.evaluate(lhs, point), numeric.evaluate(rhs, point)
        except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError) as exc:
            return {
                "points": len(seeds),
                "max_relative_gap": None,
                "error": f"seed {seed}: {exc}",
                "sizes": {str(k): v for k, v in setting.sizes.items()},
            }
        worst = max(worst, float(numeric.relative_gap(a, b)))
    return {"points": len(seeds), "max_relative_gap": worst, "sizes": {str(k): v for k, v in setting.sizes.items()}}


def _num(v):
    if isinstance(v, mpmath.mpc) and v.imag != 0:
        return str(v)  # a complex value (a log of a negative number): its text
    f = float(v.real if isinstance(v, mpmath.mpc) else v)
    return f if abs(f) < 1e300 else str(v)


SPOT_CHECK_TOLERANCE = 1e-25


# every identity `decide` is asked, while `recorded()` is open: what a claim's transcript is made of
_DECISIONS: list | None = None


@contextlib.contextmanager
def recorded():
    """Record every identity decided inside the block: a list of (lhs, rhs, setting, method, proof),
    in order (`qed prove CLAIM --explain` rebuilds each one's rewrites and normal forms)."""
    global _DECISIONS
    saved, _DECISIONS = _DECISIONS, []
    try:
        yield _DECISIONS
    finally:
        _DECISIONS = saved


def decide(lhs, rhs, setting: Setting, method: str = "index normaliser", spec=None, preconditions=None) -> Proof:
    """`_decide` (below), recorded where `recorded()` asks for it."""
    proof = _decide(lhs, rhs, setting, method, spec, preconditions)
    if _DECISIONS is not None:
        _DECISIONS.append((lhs, rhs, setting, method, proof))
    return proof


def _decide(lhs, rhs, setting: Setting, method: str = "index normaliser", spec=None, preconditions=None) -> Proof:
    """The one gate every index-form proof passes, hand-written or generated:

    1. normalise `lhs − rhs` with a normaliser that proves its side conditions from the
       setting's ranges (`Setting.normaliser`);
    2. free-symbol guard: the normal form has no free symbol the claim did not
       (a bound index leaking out is a normaliser bug: unproven);
    3. the residual must be exactly 0 (else refuted with a counterexample, or unproven);
    4. the numeric spot-check must agree (else unproven: a normaliser bug);
    5. no goal may be undischarged (assumed without proof);
    6. a hypothesis is a goal too (a normaliser's hypothesis is never assumed):
       * each kink u = 0 the identity was proved off (a step's value at its jump) must be one
         of the specification's own (`spec`, by default `rhs`: a max, |·|, sign or step of u),
         and the printed value there must lie between its one-sided derivatives, checked at
         points on it (`proof/kinks.py`); otherwise refuted at such a point, or unproven;
       * each denominator ≠ 0 the normaliser could not prove must be a precondition that the
         generated code checks at run time (`preconditions`: `proof/preconditions.py`, by
         default every op's), named on the certificate; otherwise unproven;

    then `proved-general`, with the normaliser's discharged goals, the checked kinks and the
    preconditions as assumptions.
    """
    norm = setting.normaliser()
    try:
        residual = norm.residual(lhs, rhs)  # 1 and 2 (the guard is in `residual`)
    except NormaliserError as exc:
        return Proof("unproven", f"{method} (normaliser: {exc})", list(norm.assumptions), "?")
    if residual != 0:  # 3
        cx = counterexample(lhs, rhs, setting)
        if cx is not None:
            return Proof("refuted", method, list(norm.assumptions), sp.sstr(residual), counterexample=cx)
        return Proof("unproven", method, list(norm.assumptions), sp.sstr(residual))
    check = spot_check(lhs, rhs, setting)  # 4
    if check.get("error") is not None:
        return Proof(
            "unproven",
            method + f" (normal form 0 but the spot-check could not evaluate: {check['error']})",
            list(norm.assumptions),
            "0",
            spot_check=check,
        )
    if check["max_relative_gap"] > SPOT_CHECK_TOLERANCE:
        return Proof(
            "unproven",
            method + " (normal form 0 but spot-check disagrees: normaliser bug)",
            list(norm.assumptions),
            "0",
            spot_check=check,
        )
    if norm.undischarged:  # 5
        return Proof(
            "unproven",
            method + " (undischarged goals: " + "; ".join(norm.undischarged) + ")",
            list(norm.assumptions),
            "0",
            spot_check=check,
        )
    return _hypotheses(norm, lhs, rhs, setting, method, spec, preconditions, check)  # 6


def _hypotheses(norm, lhs, rhs, setting, method, spec, preconditions, check) -> Proof:
    """Step 6 of `decide`: every kink checked, every undecided denominator a run-time check."""
    from . import kinks
    from . import preconditions as pre

    assumptions = [a for a in norm.assumptions if a not in norm.hypotheses]
    if norm.nonzero:
        if callable(preconditions):  # computed only where a hypothesis needs them
            preconditions = preconditions()
        checks = pre.all_runtime_checks() if preconditions is None else list(preconditions)
        for h in norm.nonzero:
            found = pre.match(h, checks, setting.normaliser())
            if found is None:
                return Proof(
                    "unproven",
                    method + f" (the hypothesis {sp.sstr(h)} ≠ 0 is neither proved nor "
                    "checked by the generated code at run time)",
                    assumptions,
                    "0",
                    spot_check=check,
                )
            assumptions.append(f"{sp.sstr(h)} ≠ 0: a precondition, {found.describe()}")
    if norm.kinks:
        if callable(spec):  # computed only where a kink needs it
            spec = spec()
        spec = rhs if spec is None else spec
        printed = [e for e in (lhs, rhs) if e is not spec]
        verdict, lines, cx = kinks.check(norm.kinks, printed, spec, setting)
        if verdict == "refuted":
            return Proof("refuted", method + " (at a kink)", assumptions, "0 off the kink", counterexample=cx)
        if verdict != "ok":
            return Proof("unproven", method + f" ({'; '.join(lines)})", assumptions, "0 off the kink", spot_check=check)
        assumptions += lines
    return Proof("proved-general", method, assumptions, "0", spot_check=check)


def prove_index_identity(
    lhs, rhs, setting: Setting, method: str = "index normaliser", spec=None, preconditions=None
) -> Proof:
    """Prove `lhs = rhs` for symbolic sizes through the gate (`decide`): the normaliser's goals
    are proved from `setting.indices` (or `setting.domain`), `setting.integer_arrays` and the
    sizes; a spot-check is recorded beside the proof.

    `lhs` and `rhs` may be lists of the same length: every pair must hold (and `spec`, when
    given, a list of the specification's value for each pair: see `decide`). `spec` and
    `preconditions` may be given as callables, called only where a kink or a hypothesis needs
    them.
    """
    if isinstance(lhs, (list, tuple)):
        specs = [None] * len(lhs) if spec is None else list(spec)
        proofs = [
            prove_index_identity(a, b, setting, method, s, preconditions)
            for a, b, s in zip(lhs, rhs, specs, strict=True)
        ]
        for p in proofs:
            if p.status != "proved-general":
                return p
        assumptions = list(dict.fromkeys(a for p in proofs for a in p.assumptions))
        worst = max(p.spot_check["max_relative_gap"] for p in proofs)
        check = dict(proofs[0].spot_check, max_relative_gap=worst, identities=len(proofs))
        return Proof("proved-general", method, assumptions, "0", spot_check=check)
    return decide(lhs, rhs, setting, method, spec, preconditions)


def canonical(expr, setting: Setting) -> sp.Expr:
    """The normal form of `expr` with the goals proved from `setting` (for provers that reason
    about a normal form, e.g. its sign, rather than an identity); raises NormaliserError if a
    goal had to be assumed."""
    norm = setting.normaliser()
    out = norm.canon(expr)
    leaked = _free(out) - _free(sp.sympify(expr))
    if leaked:
        raise NormaliserError(f"normal form has free symbols the expression did not: {sorted(map(str, leaked))}")
    if norm.undischarged:
        raise NormaliserError("undischarged goals: " + "; ".join(norm.undischarged))
    if norm.kinks or norm.nonzero:  # a hypothesis only the gate (`decide`) can check
        raise NormaliserError(
            "hypotheses the normal form cannot check: "
            + "; ".join(
                [sp.sstr(k.subject) + " = 0 a kink" for k in norm.kinks] + [sp.sstr(h) + " ≠ 0" for h in norm.nonzero]
            )
        )
    return out


def _free(e) -> set:
    return {s for s in e.free_symbols if not isinstance(s, sp.Indexed)}


def refute_identity(lhs, wrong_rhs, setting: Setting) -> dict | None:
    """A mutant is refuted when a concrete counterexample exists (and, as a sanity check of
    the normaliser, its residual is not 0). With lists, one wrong pair suffices."""
    if isinstance(lhs, (list, tuple)):
        for a, b in zip(lhs, wrong_rhs, strict=True):
            cx = refute_identity(a, b, setting)
            if cx is not None:
                return cx
        return None
    cx = counterexample(lhs, wrong_rhs, setting)
    if cx is None:
        return None
    norm = setting.normaliser()
    if norm.residual(lhs, wrong_rhs) == 0 and not norm.undischarged:
        raise NormaliserError("normaliser reduced a refuted mutant to 0: unsound")
    return cx


def identity_mutants(mutants: dict, setting: Setting) -> list[Mutant]:
    """Mutants `{name: (mistake, lhs, wrong_rhs)}`, each refuted by `refute_identity` (for claims
    whose wrong variants change the left side too: a wrong spec's expectation, say)."""
    return [
        Mutant(name, mistake, (lambda left=left, wrong=wrong: refute_identity(left, wrong, setting)))
        for name, (mistake, left, wrong) in mutants.items()
    ]


def index_claim(
    id: str,
    title: str,
    source: str,
    latex: str,
    lhs,
    rhs,
    setting: Setting,
    mutants: dict,
    method: str = "index normaliser (symbolic sizes)",
) -> Claim:
    """A claim `lhs = rhs` in index form, with mutants `{name: (mistake, wrong_rhs)}`."""
    return Claim(
        id=id,
        title=title,
        source=source,
        latex=latex,
        prove=lambda: prove_index_identity(lhs, rhs, setting, method),
        mutants=[
            Mutant(name, mistake, (lambda w=wrong: refute_identity(lhs, w, setting)))
            for name, (mistake, wrong) in mutants.items()
        ],
    )
