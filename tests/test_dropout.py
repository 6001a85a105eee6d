"""Dropout (derivations/dropout.py): the printed kernels against PyTorch's own dropout on the same
mask, the expectation claim's statement checked numerically over many masks, and the drop
rate's domain. The claims themselves (E[y] = x, Var(y) = x² p/(1 − p), for symbolic n) are
proved by `qed prove dropout` (tests/test_claims.py runs every claim and its mutants)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from derivations import registry
from generated.numpy import dropout as dnp
from generated.torch import dropout as dtorch


def _mask_of_torch_dropout(shape, p, seed):
    """The keep mask torch's own dropout draws with `seed`: F.dropout of ones is m/(1 − p)."""
    torch.manual_seed(seed)
    ones = torch.ones(shape, dtype=torch.float64)
    return (torch.nn.functional.dropout(ones, p, training=True) != 0).to(torch.float64)


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 0.9])
def test_the_printed_kernels_are_torch_dropout_on_its_own_mask(p):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 7))
    mask = _mask_of_torch_dropout(x.shape, p, seed=1)
    torch.manual_seed(1)
    want = torch.nn.functional.dropout(torch.from_numpy(x), p, training=True)
    got_np, _ = dnp.dropout_forward(x, mask.numpy(), p=p)
    got_t = dtorch.dropout(torch.from_numpy(x), mask, p=p)
    np.testing.assert_allclose(got_np, want.numpy(), rtol=1e-15, atol=0)
    torch.testing.assert_close(got_t, want, rtol=1e-15, atol=0)
    # the backward is the same map: autograd of torch's dropout on the same mask
    xt = torch.from_numpy(x).requires_grad_(True)
    dy = torch.from_numpy(rng.standard_normal(x.shape))
    torch.manual_seed(1)
    (gx,) = torch.autograd.grad(torch.nn.functional.dropout(xt, p, training=True), xt, dy)
    _, cache = dnp.dropout_forward(x, mask.numpy(), p=p)
    np.testing.assert_allclose(dnp.dropout_backward(dy.numpy(), cache), gx.numpy(), rtol=1e-15, atol=0)


def test_gradcheck_of_the_printed_torch_function():
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    mask = (torch.rand(2, 3, 5, dtype=torch.float64) > 0.3).to(torch.float64)
    assert torch.autograd.gradcheck(lambda a: dtorch.dropout(a, mask, p=0.3), (x,))


def test_the_mean_over_many_masks_is_the_input():
    """The claim dropout.expectation, seen numerically: over N masks the mean of y is x within
    the standard error that dropout.variance states, σ = |x| √(p/(1 − p)) / √N."""
    p, trials = 0.2, 20000
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 6))
    masks = (rng.random((trials, 1, 6)) >= p).astype(np.float64)
    y, _ = dnp.dropout_forward(np.broadcast_to(x, masks.shape), masks, p=p)
    mean, var = y.mean(axis=0), y.var(axis=0)
    sigma = np.abs(x) * np.sqrt(p / (1 - p)) / np.sqrt(trials)
    assert np.all(np.abs(mean - x) < 5 * sigma)
    np.testing.assert_allclose(var, x**2 * p / (1 - p), rtol=0.05)
    # the wrong scale (none) is far outside: E[x m] = (1 − p) x
    assert np.all(np.abs((masks * x).mean(axis=0) - x) > 5 * sigma)


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, float("nan")])
def test_a_drop_rate_outside_0_to_1_is_refused(p):
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match="p"):
        dnp.dropout_forward(x, x, p=p)
    with pytest.raises(ValueError, match="p"):
        dtorch.dropout(torch.ones(2, 3), torch.ones(2, 3), p=p)


def test_the_claims_read_the_ops_own_specification():
    """The claims' random entry is the registered op's spec entry (m and x read as rows), so a
    wrong spec changes what they state: each mutant is such a wrong spec, and is refuted
    (tests/test_claims.py proves the claims and refutes the mutants)."""
    import sympy as sp

    from derivations import dropout

    op = registry.op("dropout")
    assert op.spec[0].expr is dropout.DROPOUT.spec[0].expr
    assert op.claims == ["dropout.forward", "dropout.backward.dx", "dropout.expectation", "dropout.variance"]
    assert sp.simplify(dropout.y_j - dropout.xs[dropout.j] * dropout.m[dropout.j] / (1 - dropout.p)) == 0
    wrong = dropout._row_entry(dropout.x * dropout.mask)
    assert sp.simplify(dropout.E.E(wrong) - dropout.xs[dropout.j]) != 0


@pytest.mark.parametrize("p,causal", [(0.2, True), (0.5, False), (0.0, True)])
def test_attention_dropout_is_torchs_attention_with_its_weights_dropped(p, causal):
    """generated/<backend>/attention_dropout.py against PyTorch's own ops: softmax of the masked
    scores, dropped by the same keep mask and rescaled, times V; every gradient by autograd."""
    from generated.numpy import attention as anp
    from generated.numpy import attention_dropout as adnp
    from generated.torch import attention_dropout as adt

    rng = np.random.default_rng(3)
    B, h, m, n, d = 2, 3, 5, 5 if causal else 4, 4
    q, k, v = (rng.standard_normal((B, h, r, d)) for r in (m, n, n))
    mask = (rng.random((B, h, m, n)) >= p).astype(np.float64)
    do = rng.standard_normal((B, h, m, d))
    qt, kt, vt = (torch.from_numpy(a).requires_grad_(True) for a in (q, k, v))
    scores = qt @ kt.transpose(-1, -2) / d**0.5
    if causal:
        scores = scores.masked_fill(torch.ones(m, n, dtype=torch.bool).triu(1), float("-inf"))
    want = (torch.softmax(scores, dim=-1) * torch.from_numpy(mask) / (1 - p)) @ vt
    want_grads = torch.autograd.grad(want, (qt, kt, vt), torch.from_numpy(do))
    o, cache = adnp.attention_dropout_forward(q, k, v, mask, causal=causal, p=p)
    np.testing.assert_allclose(o, want.detach().numpy(), rtol=1e-12, atol=1e-13)
    for got, ref in zip(adnp.attention_dropout_backward(do, cache), want_grads):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-11, atol=1e-12)
    ins = [torch.from_numpy(a).requires_grad_(True) for a in (q, k, v)]
    ot = adt.attention_dropout(*ins, torch.from_numpy(mask), causal=causal, p=p)
    torch.testing.assert_close(ot, want.detach(), rtol=1e-12, atol=1e-13)
    for got, ref in zip(torch.autograd.grad(ot, ins, torch.from_numpy(do)), want_grads):
        torch.testing.assert_close(got, ref, rtol=1e-11, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda a, b, c: adt.attention_dropout(a, b, c, torch.from_numpy(mask), causal=causal, p=p), ins
    )
    if p == 0.0:  # nothing dropped: attention itself
        np.testing.assert_allclose(o, anp.attention_forward(q, k, v, causal=causal)[0], rtol=1e-14, atol=1e-15)
