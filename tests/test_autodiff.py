"""Reverse mode over the array language (derivations/language/autodiff.py): the derived backward of
every op, ops declared by their forward alone, and the derivation's refusals.

The registry's forward-only ops (Softplus, squared ReLU, logit soft-capping, Mish, GeGLU: one
module each under derivations/) are declared by their specification alone: each gets a derived
backward, whose generated claims must prove, and whose values must agree with `torch.autograd`
over PyTorch's own function (`Op.reference`) in float64 (the derived lines run through a small
NumPy evaluator of the array language, below).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.special
import sympy as sp
import torch
from sympy.codegen.cfunctions import expm1, log1p

from derivations import registry
from derivations.language import arrays as A
from derivations.language.arrays import Array, ArrayError, Assign, RowMax, RowSum, size
from derivations.language.autodiff import derive
from derivations.language.ops import Op, grad_of
from derivations.proof.derived import derived_op
from derivations.proof.obligations import claims_for, flag_sets

torch.set_default_dtype(torch.float64)

# ---------------------------------------------------------------------------------------------
# A NumPy evaluator of the array language (float64, 2-D arrays; (1, c) and (r, 1) kept 2-D).


def _ev(e, env: dict, scalars: dict):
    e = sp.sympify(e)
    if isinstance(e, Array):
        return env[e]
    if e in scalars:
        return scalars[e]
    if e.is_Number or isinstance(e, sp.NumberSymbol):
        return float(e)
    args = [_ev(a, env, scalars) for a in e.args]
    unary = {
        sp.exp: np.exp,
        sp.log: np.log,
        sp.tanh: np.tanh,
        sp.erf: scipy.special.erf,
        sp.Abs: np.abs,
        sp.sign: np.sign,
        A.Sigmoid: scipy.special.expit,
        A.HalfStep: lambda u: np.heaviside(u, 0.5),
        A.NormalCDF: scipy.special.ndtr,
        A.Gaussian: lambda u: np.exp(-u * u / 2),
        log1p: np.log1p,
        expm1: np.expm1,
    }
    if isinstance(e, sp.Add):
        return sum(args)
    if isinstance(e, sp.Mul):
        out = 1.0
        for a in args:
            out = out * a
        return out
    if isinstance(e, sp.Pow):
        return np.power(args[0], args[1])
    if e.func in unary:
        return unary[e.func](args[0])
    if isinstance(e, A.Hypot):
        return np.hypot(args[0], args[1])
    if isinstance(e, sp.Max):
        return np.maximum.reduce(np.broadcast_arrays(*args))
    if isinstance(e, sp.Min):
        return np.minimum.reduce(np.broadcast_arrays(*args))
    if isinstance(e, sp.Heaviside):
        return np.heaviside(args[0], args[1] if len(args) > 1 else 0.5)
    if isinstance(e, A.MatMul):
        return args[0] @ args[1]
    if isinstance(e, A.T):
        return np.swapaxes(args[0], -1, -2)
    if isinstance(e, A.RowSum):
        return args[0].sum(-1, keepdims=True)
    if isinstance(e, A.RowMean):
        return args[0].mean(-1, keepdims=True)
    if isinstance(e, A.RowMax):
        return args[0].max(-1, keepdims=True)
    if isinstance(e, A.ColSum):
        return np.asarray(args[0]).sum(0, keepdims=True)
    if isinstance(e, A.Contract):
        return args[0].T @ args[1]
    if isinstance(e, A.CausalMask):
        m, n = args[0].shape
        return np.where(np.tri(m, n, dtype=bool), args[0], -np.inf)
    if isinstance(e, A.Gather):
        return args[0][args[1][:, 0].astype(int)]
    if isinstance(e, A.OneHot):
        ids, vocab = args[0], int(args[1])
        return (ids.astype(int) == np.arange(vocab)).astype(float)
    if isinstance(e, A.Take):
        a, ids = args
        return a[np.arange(a.shape[0]), ids[:, 0].astype(int)][:, None]
    raise TypeError(f"no NumPy rule for {type(e).__name__}: {e}")


def run(assigns, env: dict, scalars: dict, when=frozenset()) -> dict:
    env = dict(env)
    for a in assigns:
        if a.when is None or a.when in when:
            env[a.target] = np.broadcast_to(_ev(a.expr, env, scalars), _dims(a.target.shape, scalars)).copy()
    return env


def _dims(shape, scalars):
    return tuple(int(sp.sympify(d).xreplace(scalars)) for d in shape)


def _draw(arr: Array, scalars, rng, ids_hi=None):
    shape = _dims(arr.shape, scalars)
    if arr.integer_valued:
        return rng.integers(0, ids_hi or 2, size=shape).astype(float)
    return rng.uniform(-2, 2, size=shape)


def backward_values(op: Op, inputs: dict, upstream: dict, scalars: dict, when=frozenset()) -> dict:
    """The op's forward, then its backward from the cache and the upstream gradients."""
    fwd = run(op.forward, inputs, scalars, when)
    cache = {a: fwd[a] for a in op.saved}
    return run(op.backward, {**cache, **upstream}, scalars, when)


# ---------------------------------------------------------------------------------------------
# Ops declared by their forward alone (not in the registry: generated/ is not regenerated here).

r, n, d, f = size("r"), size("n"), size("d"), size("f")

# the registry's ops declared by their forward alone (derivations/softplus.py, ...), each with
# PyTorch's own function as `reference`: the independent check. Read off the registry, so an op
# declared by its forward is tested as it is added.
FORWARD_ONLY = [op for op in registry.ops() if op.derived]
SOFTPLUS = registry.op("softplus")
(X,), (Y,) = SOFTPLUS.inputs, SOFTPLUS.outputs
SIZES = {r: 3, n: 4, d: 3, f: 5}


def reference(op, *tensors):
    """PyTorch's own function where the op names one; else its specification in torch ops."""
    if op.reference is None:
        from qed.tools.reference import spec_function

        return spec_function(op)(*tensors)
    return op.reference(torch, *tensors)


def _scalars(op) -> dict:
    """The sizes above, every other size of the op 3, and each option at its declared default."""
    sizes = {s: 3 for a in op.inputs + op.params for s in A.shape_of(a) if isinstance(s, sp.Symbol)}
    return {**sizes, **SIZES, **{o.symbol: float(o.default) for o in op.options if o.symbol is not None}}


@pytest.mark.parametrize("op", FORWARD_ONLY, ids=[o.name for o in FORWARD_ONLY])
def test_a_forward_only_op_gets_a_derived_backward(op):
    differentiable = [a for a in op.inputs + op.params if a not in op.constant_inputs + op.integer_inputs]
    assert op.derived and op.backward and op.grads == [grad_of(a) for a in differentiable]
    # the generated claims and stability lemmas, and any hand-written claim of the op's own module
    generated = {c.id for c in claims_for(op)} | set(op.stability)
    own = {c.id for c in registry.claims() if c.module == op.module}
    assert generated <= set(op.claims) <= generated | own
    assert all(c.startswith("stability.") for c in op.stability)


@pytest.mark.parametrize("op", FORWARD_ONLY, ids=[o.name for o in FORWARD_ONLY])
def test_the_derived_backward_is_proved_against_the_specification(op):
    for claim in claims_for(op):
        cert = claim.run()
        assert cert.status == "proved-general", (claim.id, cert.method, cert.residual)
        assert cert.mutants and all(m.refuted for m in cert.mutants), claim.id


@pytest.mark.parametrize("op", FORWARD_ONLY, ids=[o.name for o in FORWARD_ONLY])
def test_the_derived_backward_agrees_with_torch_autograd(op):
    rng = np.random.default_rng(0)
    scalars = _scalars(op)
    args = op.inputs + op.params
    values = {a: _draw(a, scalars, rng) * (8.0 if op.name == "softcap" else 1.0) for a in args}
    (out,) = op.outputs
    upstream = {grad_of(out): _draw(out, scalars, rng)}
    got = backward_values(op, values, upstream, scalars)
    tensors = [torch.tensor(values[a], requires_grad=True) for a in args]
    y = reference(op, *tensors)
    fwd = run(op.forward, values, scalars)
    np.testing.assert_allclose(fwd[out], y.detach().numpy(), rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad((y * torch.tensor(upstream[grad_of(out)])).sum(), tensors)
    for a, want in zip(args, grads):
        if a in op.constant_inputs:  # no gradient declared (a mask, a table)
            continue
        np.testing.assert_allclose(got[grad_of(a)], want.numpy(), rtol=1e-10, atol=1e-12, err_msg=a.name)


def test_softplus_derived_backward_is_exact_at_the_kink_and_stable():
    """max(x, 0) and |x| both have a kink at 0 that cancels in softplus: the derivative there is
    ½, which the derived (1 + sign x)/2 form keeps; and no exp overflows at ±1e4 in float32."""
    scalars = dict(SIZES)
    x = np.array([[0.0, 1e4, -1e4, 3.0]] * 3, dtype=np.float32)
    dy = np.ones_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = backward_values(SOFTPLUS, {X: x}, {grad_of(Y): dy}, scalars)[grad_of(X)]
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got[0], scipy.special.expit(x[0].astype(np.float64)), rtol=1e-6)
    assert got[0, 0] == 0.5


# ---------------------------------------------------------------------------------------------
# The registry's ops: the derived backward, with each op's own cache, against the printed one.

OPS = list(registry.ops())


@pytest.mark.parametrize("op", OPS, ids=[o.name for o in OPS])
def test_the_derived_backward_equals_the_hand_written_one_numerically(op):
    rng = np.random.default_rng(1)
    sym_sizes = {s for a in op.inputs + op.params + op.outputs for dim in a.shape for s in sp.sympify(dim).free_symbols}
    scalars = {s: v for s, v in zip(sorted(sym_sizes, key=lambda s: s.name), (3, 4, 2, 5, 3, 4))}
    scalars.update({o.symbol: float(o.default) for o in op.options if o.symbol is not None})
    if op.name == "cross_entropy":
        scalars.update({s: 4 for s in sym_sizes if s.name == "V"})
    vocab = {a.name: int(scalars.get(size("V"), 2)) for a in op.integer_inputs}
    values = {a: _draw(a, scalars, rng, vocab.get(a.name)) for a in op.inputs + op.params}
    if any(a.name == "mask" for a in op.integer_inputs):
        values[next(a for a in op.integer_inputs if a.name == "mask")][0] = 1.0
    upstream = {grad_of(o): _draw(o, scalars, rng) for o in op.outputs}
    derived = derived_op(op)
    for when in flag_sets(op):
        want = backward_values(op, values, upstream, scalars, when)
        got = backward_values(derived, values, upstream, scalars, when)
        for g in op.grads:
            np.testing.assert_allclose(
                got[g], want[g], rtol=1e-9, atol=1e-12, err_msg=f"{op.name} {g.name} {set(when)}"
            )


def test_every_hand_written_backward_has_derived_claims():
    ids = {c.id for c in registry.claims()}
    hand = [op for op in registry.ops() if not op.derived]
    assert hand and len(hand) < len(registry.ops())
    for op in registry.ops():
        for g in op.grads:  # a derived backward is proved by <op>.backward.<grad> itself
            assert (f"{op.name}.backward_derived.{g.name}" in ids) == (not op.derived), (op.name, g.name)


def test_the_derived_backward_reads_the_cache_not_what_it_caches():
    """Nothing the forward cached is recomputed: no derived line assigns a cached array, and no
    cached array's forward value appears inside a derived line (it is read by name)."""
    for op in registry.ops():
        derived = derived_op(op)
        values = {a.target: a.expr for a in op.forward if a.target in op.saved and not isinstance(a.expr, Array)}
        for line in derived.backward:
            assert line.target not in op.saved, (op.name, line.target.name)
            for value in values.values():
                assert not line.expr.has(value), (op.name, line.target.name, value)


def test_common_subexpressions_are_computed_once():
    from derivations.language.autodiff import _costly

    for op in [derived_op(o) for o in registry.ops()] + FORWARD_ONLY:
        seen: dict = {}
        for line in op.backward:
            for sub in sp.preorder_traversal(line.expr):
                if _costly(sub) and A.shape_of(sub) != ():
                    seen[sub] = seen.get(sub, 0) + 1
        assert not [s for s, k in seen.items() if k > 1], (op.name, [s for s, k in seen.items() if k > 1])


def test_attention_derivation_proves_its_lemmas():
    lemmas = " ".join(derived_op(registry.op("attention")).derivation_lemmas)
    assert "RowMax" in lemmas and "without causal" in lemmas
    assert "CausalMask" in lemmas and "above the diagonal" in lemmas


# ---------------------------------------------------------------------------------------------
# The cache: automatic, or as the op declares.

rs, ns = size("r"), size("n")
x, y = Array("x", (rs, ns)), Array("y", (rs, ns))
softmax_forward = [Assign(y, sp.exp(x - RowMax(x)) / RowSum(sp.exp(x - RowMax(x))))]


def test_the_automatic_cache_is_what_the_backward_reads():
    d = derive(softmax_forward, [x], [y])
    assert d.saved == [y]
    (line,) = d.backward
    assert line.expr == y * (grad_of(y) - RowSum(grad_of(y) * y))


def test_a_declared_cache_is_recomputed_from():
    d = derive(softmax_forward, [x], [y], saved=[x])
    assert d.saved == [x]
    targets = [a.target for a in d.backward]
    assert targets[-1] == grad_of(x) and y in targets  # y recomputed by the forward's own line
    defined = {x, grad_of(y)}
    for line in d.backward:  # each line reads the cache and earlier lines
        assert {a for a in line.expr.free_symbols if isinstance(a, Array)} <= defined, line
        defined.add(line.target)


# ---------------------------------------------------------------------------------------------
# Refusals: never an assumed rule.


def test_a_row_max_that_carries_a_gradient_is_refused():
    with pytest.raises(ArrayError, match="carries a gradient"):
        derive([Assign(y, x - RowMax(x))], [x], [y])


def test_a_row_constant_share_under_a_row_reduction_counts_every_column():
    """y = Σ_j (x_ij² − m_i²) with m = mean_j x: m is read by each of the n columns, so
    ∂y_i/∂x_ij = 2 x_ij − 2 m_i (m's share −2 m_i G_i summed over the n columns, then spread by
    the mean's 1/n; taken once it would leave 2 x_ij − 2 m_i / n); proved against the
    specification and checked numerically."""
    m, out = Array("m", (rs, 1)), Array("out", (rs, 1))
    op = Op(
        name="row_constant_share",
        module=__name__,
        title="t",
        inputs=[x],
        outputs=[out],
        spec=[Assign(m, A.RowMean(x)), Assign(out, RowSum(x * x - m**2))],
    )
    for claim in claims_for(op):
        cert = claim.run()
        assert cert.status == "proved-general", (claim.id, cert.residual)
    rng = np.random.default_rng(1)
    scalars = {rs: 3, ns: 5}
    xv, g = rng.standard_normal((3, 5)), rng.standard_normal((3, 1))
    got = backward_values(op, {x: xv}, {grad_of(out): g}, scalars)[grad_of(x)]
    np.testing.assert_allclose(got, 2 * g * (xv - xv.mean(axis=1, keepdims=True)), rtol=1e-12)


def test_a_row_max_whose_gradients_cancel_across_a_row_mean_is_a_shift():
    """log Σ_j e^{x_j − m} − mean_j(x_j − m): the max's adjoint is −1 (the log-sum) + 1 (the mean
    over n columns) = 0, so it is a shift the derivation may hold constant (label smoothing's
    printed form); counting the mean's share once would leave (1 − n)/n and refuse it."""
    out = Array("out", (rs, 1))
    mx = RowMax(x)
    d = derive([Assign(out, sp.log(RowSum(sp.exp(x - mx))) - A.RowMean(x - mx))], [x], [out])
    assert d.backward and any("max" in lemma or "shift" in lemma for lemma in d.lemmas), d.lemmas


def test_a_guarded_line_that_is_not_a_mask_is_refused():
    with pytest.raises(ArrayError, match="guarded"):
        derive([Assign(y, 2 * x), Assign(y, 3 * y, when="flag")], [x], [y])


def test_an_unused_input_is_refused():
    z = Array("z", (rs, ns))
    with pytest.raises(ArrayError, match="no gradient"):
        derive([Assign(y, 2 * x)], [x, z], [y])


def test_a_backward_with_grads_but_no_lines_is_refused():
    with pytest.raises(ArrayError, match="grads"):
        Op(name="t", module=__name__, title="t", inputs=[x], outputs=[y], spec=[Assign(y, 2 * x)], grads=[grad_of(x)])


@pytest.mark.parametrize("op", FORWARD_ONLY, ids=[o.name for o in FORWARD_ONLY])
def test_the_audit_kills_the_wrong_edits_of_a_derived_backward(op):
    """Every automatic wrong edit of the derived (printed) lines is refuted by a generated
    claim, or proved equivalent: none survives."""
    from derivations.proof import mutation

    results = mutation.audit_op(op, limit=12)
    assert results and not [r for r in results if r.outcome == "survived"]


def test_a_forward_value_with_a_numeric_coefficient_is_read_with_it_divided_out():
    """y = 2x²/(x² + 4): the backward's x²/(x² + 4) is y/2, not y (the coefficient was dropped
    once, and the derived backward was refuted)."""
    from derivations.language.autodiff import recognise

    r_, n_ = size("r"), size("n")
    X, Y = Array("x", (r_, n_)), Array("y", (r_, n_))
    value = 2 * X**2 / (X**2 + 4)
    got = recognise(4 * X**3 / (X**2 + 4) ** 2, {value: Y})
    assert sp.simplify(got.xreplace({Y: value}) - 4 * X**3 / (X**2 + 4) ** 2) == 0
    assert got.has(Y)


def test_a_forward_value_with_a_square_beside_another_factor_is_not_read_back():
    """y = x²σ(x) overflows with x² (|x| > 1.8e19 in float32) where x²σ(x)(1 − σ(x)) in its
    derivative is finite (0 at x = 1e20): the backward recomputes that term rather than read
    y·(1 − σ), ∞·0 = NaN there. A value without such a square is read back as before."""
    from derivations.language.arrays import Sigmoid
    from derivations.language.autodiff import recognise

    r_, n_ = size("r"), size("n")
    X, Y = Array("x", (r_, n_)), Array("y", (r_, n_))
    gate = Sigmoid(X)
    term = X**2 * gate * (1 - gate)
    assert not recognise(term, {X**2 * gate: Y}).has(Y)
    assert recognise(X * gate * (1 - gate), {X * gate: Y}).has(Y)  # SiLU's y·(1 − σ): read
