"""A hypothesis is a goal too (derivations/proof/kinks.py, derivations/proof/preconditions.py).

A generated claim may hold "where u ≠ 0" only if the specification itself has a kink at u = 0
(a max, |·|, sign or step of u), and the printed value there must lie between the
specification's one-sided derivatives, checked at points on the kink; a kink only the printed
code has is a refutation. A denominator the normaliser cannot prove ≠ 0 is kept only as a
precondition that the generated code checks at run time, named on the certificate.
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from derivations import registry
from derivations.language import autodiff
from derivations.language.arrays import Assign, HalfStep, Sigmoid
from derivations.language.ops import Op, grad_of
from derivations.proof import kinks
from derivations.proof.core import Setting, decide
from derivations.proof.obligations import claims_for, obligations
from derivations.proof.preconditions import RuntimeCheck, runtime_checks
from derivations.proof.rewriting import Indicator, Normaliser


def _backward(op: Op, grad: str):
    return next(ob for ob in obligations(op) if ob.kind == "backward" and ob.target.name == grad)


def _with_backward(op: Op, expr) -> Op:
    (line,) = op.backward[-1:]
    return dataclasses.replace(op, backward=op.backward[:-1] + [Assign(line.target, expr)])


def _kink_lines(cert) -> list[str]:
    return [a for a in cert.assumptions if a.startswith("kink at")]


# ------------------------------------------------------------------------------------ kinks


def test_a_heaviside_for_the_midpoint_step_refutes_softplus(monkeypatch):
    """The reviewer's hole: reverse mode's d max(0, u) taken as SymPy's H(u, 0) instead of the
    midpoint H(u) (½ at 0). Softplus' printed backward then returns 0 at x = 0, where the
    derivative of log(1 + e^x) is ½: the claim must not be proved 'where x ≠ 0'."""
    softplus = registry.op("softplus")

    def heaviside_at_zero(d):
        d = d.replace(
            lambda e: isinstance(e, sp.Heaviside) and (len(e.args) == 1 or e.args[1] == sp.S.Half),
            lambda e: sp.Heaviside(e.args[0], 0),
        )
        return d.replace(lambda e: isinstance(e, sp.DiracDelta), lambda e: sp.Integer(0))

    monkeypatch.setattr(autodiff, "_kinks", heaviside_at_zero)
    op = Op(
        name="softplus_h0",
        title="Softplus",
        inputs=list(softplus.inputs),
        outputs=list(softplus.outputs),
        spec=list(softplus.spec),
        forward=list(softplus.forward),
        optional_axes=2,
    )
    monkeypatch.undo()
    assert op.backward[0].expr.has(sp.Heaviside) and not op.backward[0].expr.has(HalfStep)
    cert = next(c for c in claims_for(op) if c.id == "softplus_h0.backward.dx").run()
    assert cert.status == "refuted", (cert.status, cert.method)
    cx = cert.counterexample
    assert cx["kink"] == "x[e, f] = 0" and cx["lhs"] == 0
    assert cx["rhs"] != 0 and "no kink" in cx["why"]


def test_softplus_as_printed_records_no_kink():
    cert = registry.claim("softplus.backward.dx").run()
    assert cert.status == "proved-general" and not _kink_lines(cert)
    assert (
        kinks.admitted_by(
            sp.Symbol("u"),
            _backward(registry.op("softplus"), "dx").required()[0],
            _backward(registry.op("softplus"), "dx").setting,
        )
        is None
    )


@pytest.mark.parametrize(
    "claim_id", ["relu.backward.dx", "ffn_relu.backward.dx", "ffn_relu.backward_derived.dw1", "ffn.relu.vjp"]
)
def test_relu_is_proved_with_its_kink_checked(claim_id):
    cert = registry.claim(claim_id).run()
    assert cert.status == "proved-general", cert.method
    lines = _kink_lines(cert)
    assert lines and all("the specification's step" in a and "checked at 3 points" in a for a in lines)
    assert not any("≠ 0 (" in a for a in cert.assumptions)  # no bare kink hypothesis left
    assert cert.ok


def test_relu_kink_value_is_in_the_subdifferential():
    """relu.backward.dx: at x = 0 the printed dy·H(0, 0) = 0 lies in [min(0, dy), max(0, dy)]."""
    cert = registry.claim("relu.backward.dx").run()
    (line,) = _kink_lines(cert)
    assert "printed value (0 at the first point)" in line


def test_a_printed_kink_value_outside_the_subdifferential_is_refuted():
    """dy·(4H(x) − 3H(x, 0)) equals dy·H(x, 0) off x = 0 (the normaliser proves that, and the
    kink is the specification's own), but at x = 0 it is 2·dy, outside [0, dy]."""
    relu = registry.op("relu")
    (x,), (y,) = relu.inputs, relu.outputs
    op = _with_backward(relu, grad_of(y) * (4 * HalfStep(x) - 3 * sp.Heaviside(x, 0)))
    proof = _backward(op, "dx").prove()
    assert proof.status == "refuted", proof.method
    cx = proof.counterexample
    assert cx["kink"].startswith("x[") and "outside" in cx["why"]
    low, high = cx["rhs"]
    assert not (low <= cx["lhs"] <= high)


def test_a_smooth_specification_admits_no_kink():
    """A printed kink on a smooth op (softplus' σ(x) plus H(x, 0) − H(x)): proved equal off
    x = 0 by the normaliser, refuted at x = 0, where the specification is differentiable."""
    softplus = registry.op("softplus")
    (x,), (y,) = softplus.inputs, softplus.outputs
    op = _with_backward(softplus, grad_of(y) * (Sigmoid(x) + sp.Heaviside(x, 0) - HalfStep(x)))
    proof = _backward(op, "dx").prove()
    assert proof.status == "refuted", proof.method
    assert proof.counterexample["kink"] == "x[e, f] = 0"
    assert "no kink" in proof.counterexample["why"]


def test_the_kink_mutants_are_declared_and_refuted():
    """The claims carry mutants of this class: the midpoint step printed as H(u, 0) (softplus),
    a printed subgradient given the value 4 (ReLU, the ReLU FFN). Squared ReLU and Mish read
    the step's value at 0 times a factor that is 0 there: no such mutant (it would be no
    mistake)."""
    for claim_id, what in [
        ("softplus.backward.dx", "printed as H(x, 0)"),
        ("relu.backward.dx", "value 4"),
        ("ffn_relu.backward.db1", "value 4"),
    ]:
        cert = registry.claim(claim_id).run()
        found = [m for m in cert.mutants if m.id.split("~")[1].startswith("kink-")]
        assert found and all(m.refuted for m in found) and any(what in m.mistake for m in found), claim_id
        assert all("kink" in m.counterexample for m in found)
    for claim_id in ("squared_relu.backward.dx", "mish.backward.dx"):
        assert not [m for m in registry.claim(claim_id).mutants if m.name.startswith("kink-")]


def test_subjects_are_compared_up_to_indices_and_a_factor():
    i, j, e, f = (sp.Symbol(s, integer=True) for s in "ijef")
    x = sp.IndexedBase("x")
    assert kinks.same_up_to_indices(x[i, j], -2 * x[e, f])
    assert not kinks.same_up_to_indices(x[i, j], x[e, f] - 1)
    assert not kinks.same_up_to_indices(x[i, j], x[e, f] ** 2)


# ------------------------------------------------------------------------- preconditions


def test_sigma_mask_is_a_precondition_checked_at_run_time():
    for claim_id in ("cross_entropy.forward", "cross_entropy.backward.dlogits", "cross_entropy.vjp"):
        cert = registry.claim(claim_id).run()
        assert cert.status == "proved-general", cert.method
        pre = [a for a in cert.assumptions if "precondition" in a]
        assert pre and all("mask" in a and "_validate.nonzero_denominator" in a for a in pre)


def test_a_hypothesis_neither_discharged_nor_checked_fails_the_claim():
    k, n = sp.Symbol("k", integer=True), sp.Symbol("n", integer=True, positive=True)
    v, a = sp.IndexedBase("v"), sp.IndexedBase("a")
    lhs = sp.Sum(a[k], (k, 0, n - 1)) / sp.Sum(v[k], (k, 0, n - 1))
    rhs = sp.Sum(2 * a[k], (k, 0, n - 1)) / (2 * sp.Sum(v[k], (k, 0, n - 1)))
    setting = Setting(sizes={n: 3})
    assert decide(lhs, rhs, setting, preconditions=[]).status == "unproven"

    class Refused(RuntimeCheck):  # a kernel that refuses Σ v = 0
        def index_form(self):
            return sp.Sum(v[k], (k, 0, n - 1))

    proof = decide(lhs, rhs, setting, preconditions=[Refused("op", sp.Symbol("D"))])
    assert proof.status == "proved-general"
    assert any("precondition" in x and "checked at run time" in x for x in proof.assumptions)


def test_the_runtime_checks_are_the_ones_code_generation_emits():
    from codegen.analysis.denominators import denominator_guards

    for op in registry.ops():
        options = {o.symbol for o in op.options if o.symbol is not None}
        _, data = denominator_guards(op, options, op.name)
        # the option-domain ones are the option checks, printed for every option already
        ours = sorted(sp.sstr(c.denominator) for c in runtime_checks(op) if c.option is None)
        assert sorted(sp.sstr(d) for d, _ in data) == ours, op.name


def test_a_variance_plus_eps_and_a_causal_row_are_discharged():
    n = sp.Symbol("n", integer=True, positive=True)
    i, k = sp.Symbol("i", integer=True), sp.Symbol("k", integer=True)
    x, eps = sp.IndexedBase("x", real=True), sp.Symbol("eps", positive=True)
    var = sp.Sum(x[i, k] ** 2, (k, 0, n - 1)) / n - sp.Sum(x[i, k], (k, 0, n - 1)) ** 2 / n**2
    norm = Normaliser(ranges={i: (0, n - 1)})
    norm.canon(1 / (var + eps))
    causal = sp.Sum(sp.exp(x[i, k]) * sp.Piecewise((1, k <= i), (0, True)), (k, 0, n - 1))
    norm.canon(1 / causal)
    # as the normaliser keeps a mask it cannot split on: [k ≤ i] counts at k = 0, as i ≥ 0
    norm.canon(1 / sp.Sum(sp.exp(x[i, k]) * Indicator(sp.Le(k, i)), (k, 0, n - 1)))
    assert not norm.hypotheses and not norm.nonzero
    norm.canon(1 / sp.Sum(sp.exp(x[i, k]) * Indicator(sp.Le(k, i - 1)), (k, 0, n - 1)))
    assert norm.nonzero  # row i = 0 has no key: may be 0
    norm.nonzero.clear()
    norm.canon(1 / var)  # a variance alone may be 0
    assert norm.nonzero


def test_the_sign_analysis_reads_each_node_by_its_own_sign():
    """σ, Φ, G and hypot(u, s > 0) are positive; the step H(u) and |u| only ≥ 0: a denominator
    1 + H(x) is positive, H(x) alone and |x| alone are not (each is 0 somewhere), |x| + hypot(x, 1)
    is (squareplus' rationalised denominator, which no run-time check need guard)."""
    from derivations.language.arrays import Array, Gaussian, HalfStep, Hypot, NormalCDF, Sigmoid, size
    from derivations.language.denominators import sign

    r, c = size("r"), size("n")
    x = Array("x", (r, c))
    positive = {"+": [Sigmoid(x), NormalCDF(x), Gaussian(x), Hypot(x, 1), 1 + HalfStep(x), sp.Abs(x) + Hypot(x, 1)]}
    for e in positive["+"]:
        assert sign(e, set(), {}) == "+", e
    for e in (HalfStep(x), sp.Abs(x)):
        assert sign(e, set(), {}) == "0+", e
    assert sign(Hypot(x, sp.Symbol("s", real=True)), set(), {}) is None  # s = 0 leaves |x|
