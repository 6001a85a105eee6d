"""Tiled attention (derivations/attention_tiled.py): the proved per-block lines, run in NumPy, and a
hand-written NumPy reference of the tiled forward and backward, each against the untiled
attention_lse kernel (float64, causal and not, T not a multiple of the block size); the
reference's peak temporary memory is O(T·B), the untiled kernel's O(T²); and the one rule the
proofs add to the normaliser's, the range split at a block's start, on numbers."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import sympy as sp

from derivations import attention_tiled as at
from derivations import registry
from derivations.language.arrays import Array, CausalMask, MatMul, RowMax, RowSum, T
from derivations.proof.core import Setting
from generated.numpy.attention_lse import attention_lse_backward, attention_lse_forward


# ------------------------------------------------------------------------------ an interpreter
class Largest:
    """The largest array (in elements) a run computes, besides its inputs and outputs."""

    def __init__(self):
        self.size = 0

    def see(self, *arrays):
        for a in arrays:
            self.size = max(self.size, int(np.size(a)))


def evaluate(e, env: dict, sizes: dict):
    """An array-language expression evaluated with NumPy (float64), arrays from `env`."""
    e = sp.sympify(e)
    if isinstance(e, Array):
        return env[e]
    if e is sp.S.NegativeInfinity:
        return -np.inf
    if isinstance(e, sp.Symbol):
        return sizes[e]
    if e.is_Number:
        return float(e)
    ev = [evaluate(a, env, sizes) for a in e.args] if not isinstance(e, (at.RowBlock, at.BlockCausalMask)) else None
    if isinstance(e, MatMul):
        return ev[0] @ ev[1]
    if isinstance(e, T):
        return np.swapaxes(ev[0], -1, -2)
    if isinstance(e, RowSum):
        return ev[0].sum(axis=-1, keepdims=True)
    if isinstance(e, RowMax):
        return ev[0].max(axis=-1, keepdims=True)
    if isinstance(e, at.RowBlock):
        x, start, rows = e.args
        start, rows = int(sp.sympify(start).xreplace(sizes)), int(sp.sympify(rows).xreplace(sizes))
        return evaluate(x, env, sizes)[start : start + rows]
    if isinstance(e, (at.BlockCausalMask, CausalMask)):
        x = evaluate(e.args[0], env, sizes)
        start = int(sp.sympify(e.args[1]).xreplace(sizes)) if isinstance(e, at.BlockCausalMask) else 0
        rows, cols = x.shape[-2:]
        seen = start + np.arange(cols)[None, :] <= np.arange(rows)[:, None]
        return np.where(seen, x, -np.inf)
    if isinstance(e, sp.Add):
        return sum(ev[1:], ev[0])
    if isinstance(e, sp.Mul):
        out = ev[0]
        for a in ev[1:]:
            out = out * a
        return out
    if isinstance(e, sp.Pow):
        return ev[0] ** ev[1]
    if isinstance(e, sp.exp):
        return np.exp(ev[0])
    if isinstance(e, sp.log):
        return np.log(ev[0])
    if isinstance(e, sp.Max):
        return np.maximum(*ev) if len(ev) == 2 else np.maximum.reduce(ev)
    raise TypeError(f"cannot evaluate {type(e).__name__}: {e}")


def execute(lines, env: dict, sizes: dict, when=frozenset(), largest: Largest | None = None) -> dict:
    """The lines run in order, each target set to its value (a redefinition reads the old)."""
    for a in lines:
        if a.when is not None and a.when not in when:
            continue
        env[a.target] = evaluate(a.expr, env, sizes)
        if largest is not None:
            largest.see(env[a.target])
    return env


def blocks(n: int, size: int):
    return [(start, min(size, n - start)) for start in range(0, n, size)]


def run_tiled_lines(q, k, v, do, causal: bool, block: int, largest: Largest | None = None):
    """The proved lines of attention_tiled (FORWARD_INIT, FORWARD_BLOCK per key block,
    FORWARD_END; BACKWARD_INIT, BACKWARD_BLOCK, dV_b and dK_b written as rows P … P+B−1)."""
    when = frozenset({"causal"}) if causal else frozenset()
    sizes = {at.d_k: q.shape[-1]}
    env = execute(at.FORWARD_INIT, {at.q: q, at.k: k, at.v: v}, sizes)
    for start, size in blocks(k.shape[0], block):
        execute(at.FORWARD_BLOCK, env, {**sizes, at.P: start, at.B: size}, when, largest)
    execute(at.FORWARD_END, env, sizes)
    o, mx, lsum = env[at.o], env[at.mx], env[at.lsum]
    env = execute(at.BACKWARD_INIT, {at.q: q, at.k: k, at.v: v, at.o: o, at.mx: mx, at.lsum: lsum, at.do: do}, sizes)
    dk, dv = np.zeros_like(k), np.zeros_like(v)
    for start, size in blocks(k.shape[0], block):
        execute(at.BACKWARD_BLOCK, env, {**sizes, at.P: start, at.B: size}, when, largest)
        dk[start : start + size] = env[at.dk_blk]
        dv[start : start + size] = env[at.dv_blk]
    return o, mx, lsum, env[at.dq] + np.zeros_like(q), dk, dv


# ------------------------------------------------------------------------------ the reference
def tiled_forward(q, k, v, causal: bool, block: int, largest: Largest | None = None):
    """Online softmax over key blocks, all queries at once; with the causal mask the rows
    before a block's first key are not visited (attention_tiled.causal_skip)."""
    m, n = q.shape[0], k.shape[0]
    scale = 1 / math.sqrt(q.shape[1])
    mx = np.full((m, 1), -np.inf)  # running max, ℓ and unnormalised O
    ell = np.zeros((m, 1))
    acc = np.zeros((m, v.shape[1]))
    for start, size in blocks(n, block):
        rows = slice(start if causal else 0, m)  # query i < start sees no key of the block
        if rows.start >= m:
            break
        s = (q[rows] @ k[start : start + size].T) * scale  # (rows, B)
        if causal:
            keys = start + np.arange(size)[None, :]
            s = np.where(keys <= np.arange(rows.start, m)[:, None], s, -np.inf)
        m_new = np.maximum(mx[rows], s.max(axis=1, keepdims=True))
        alpha = np.exp(mx[rows] - m_new)
        p = np.exp(s - m_new)
        ell[rows] = alpha * ell[rows] + p.sum(axis=1, keepdims=True)
        acc[rows] = alpha * acc[rows] + p @ v[start : start + size]
        mx[rows] = m_new
        if largest is not None:
            largest.see(s, m_new, alpha, p)
    return acc / ell, mx, np.log(ell)


def tiled_backward(q, k, v, o, mx, lsum, do, causal: bool, block: int, largest: Largest | None = None):
    """dV_b, dK_b per key block and dQ accumulated, from the recomputed P_b = e^{(S_b − mx) − lsum}
    and δ = rowsum(dO ⊙ O) of the full row."""
    m, n = q.shape[0], k.shape[0]
    scale = 1 / math.sqrt(q.shape[1])
    delta = (do * o).sum(axis=1, keepdims=True)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for start, size in blocks(n, block):
        rows = slice(start if causal else 0, m)
        if rows.start >= m:
            break
        kb, vb = k[start : start + size], v[start : start + size]
        s = (q[rows] @ kb.T) * scale
        if causal:
            keys = start + np.arange(size)[None, :]
            s = np.where(keys <= np.arange(rows.start, m)[:, None], s, -np.inf)
        p = np.exp((s - mx[rows]) - lsum[rows])
        dv[start : start + size] = p.T @ do[rows]
        dp = do[rows] @ vb.T
        ds = p * (dp - delta[rows])
        dq[rows] += (ds @ kb) * scale
        dk[start : start + size] = (ds.T @ q[rows]) * scale
        if largest is not None:
            largest.see(s, p, dp, ds)
    return dq, dk, dv


def untiled(q, k, v, do, causal: bool):
    o, cache = attention_lse_forward(q, k, v, causal=causal)
    dq, dk, dv = attention_lse_backward(do, cache)
    return o, cache[4], cache[5], dq, dk, dv


CASES = [  # (m queries, n keys, d_k, d_v, block): T not a multiple of the block, a block ≥ T, blocks of 1
    (37, 37, 5, 3, 8),
    (29, 29, 4, 6, 29),
    (9, 9, 3, 2, 1),
    (11, 29, 4, 3, 7),
    (29, 11, 4, 3, 4),
]


def _inputs(m, n, d_k, d_v, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((m, d_k)) * 2,
        rng.standard_normal((n, d_k)) * 2,
        rng.standard_normal((n, d_v)),
        rng.standard_normal((m, d_v)),
    )


@pytest.mark.parametrize("causal", [False, True], ids=["unmasked", "causal"])
@pytest.mark.parametrize("case", CASES, ids=[f"m{c[0]}-n{c[1]}-B{c[4]}" for c in CASES])
def test_proved_lines_compute_attention(case, causal):
    """The very lines the claims are about, run block by block, give attention_lse's output, saved
    log-sum-exp (mx itself: attention_tiled.max) and gradients."""
    m, n, d_k, d_v, block = case
    q, k, v, do = _inputs(m, n, d_k, d_v)
    got = run_tiled_lines(q, k, v, do, causal, block)
    want = untiled(q, k, v, do, causal)
    for name, a, b in zip(("o", "mx", "lsum", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("causal", [False, True], ids=["unmasked", "causal"])
@pytest.mark.parametrize("case", CASES, ids=[f"m{c[0]}-n{c[1]}-B{c[4]}" for c in CASES])
def test_reference_matches_untiled_kernel(case, causal):
    m, n, d_k, d_v, block = case
    q, k, v, do = _inputs(m, n, d_k, d_v, seed=1)
    o, mx, lsum = tiled_forward(q, k, v, causal, block)
    grads = tiled_backward(q, k, v, o, mx, lsum, do, causal, block)
    want = untiled(q, k, v, do, causal)
    for name, a, b in zip(("o", "mx", "lsum", "dq", "dk", "dv"), (o, mx, lsum, *grads), want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)


def test_large_scores_do_not_overflow():
    """Scores of ±1e4: every exponent is ≤ 0 (attention_tiled.max), nothing overflows."""
    q, k, v, do = _inputs(16, 16, 4, 3, seed=2)
    q = q * 1e3
    with np.errstate(over="raise", invalid="raise"):
        o, mx, lsum = tiled_forward(q, k, v, True, 5)
    want = untiled(q, k, v, do, True)
    np.testing.assert_allclose(o, want[0], rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(lsum)) and np.all(lsum >= 0)


# ------------------------------------------------------------------------------ memory
@pytest.mark.parametrize("causal", [False, True], ids=["unmasked", "causal"])
def test_largest_temporary_is_T_by_block(causal):
    """The largest array a tiled pass computes is T×B (or T×d), never T×T."""
    T_, d, block = 256, 16, 32
    q, k, v, do = _inputs(T_, T_, d, d, seed=3)
    for run in ("reference", "lines"):
        largest = Largest()
        if run == "reference":
            o, mx, lsum = tiled_forward(q, k, v, causal, block, largest)
            tiled_backward(q, k, v, o, mx, lsum, do, causal, block, largest)
        else:
            run_tiled_lines(q, k, v, do, causal, block, largest)
        assert largest.size <= T_ * max(block, d), (run, largest.size)
        assert largest.size < T_ * T_ // 4


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_grows_linearly_in_T():
    """Peak traced memory of forward + backward at T and 4T: the tiled reference's grows ~4×
    (linear), the untiled kernel's ~16× (its T×T scores)."""
    d, block = 16, 64
    peaks = {}
    for T_ in (256, 1024):
        q, k, v, do = _inputs(T_, T_, d, d, seed=4)

        def tiled(q=q, k=k, v=v, do=do):
            o, mx, lsum = tiled_forward(q, k, v, True, block)
            tiled_backward(q, k, v, o, mx, lsum, do, True, block)

        peaks[T_] = (_peak_bytes(tiled), _peak_bytes(lambda q=q, k=k, v=v, do=do: untiled(q, k, v, do, True)))
    tiled_ratio = peaks[1024][0] / peaks[256][0]
    untiled_ratio = peaks[1024][1] / peaks[256][1]
    assert tiled_ratio < 5.0, peaks
    assert untiled_ratio > 10.0, peaks
    assert peaks[1024][0] * 4 < peaks[1024][1], peaks


# ------------------------------------------------------------------------------ the range split
def test_split_range_is_the_loop_split_on_numbers():
    """Σ_{j=0}^{P+B−1} f(j) = Σ_{j=0}^{P−1} f(j) + Σ_{w=0}^{B−1} f(P + w), P ≥ 0 and B ≥ 1 symbolic,
    at every P, B ≤ 5 (P = 0: an empty first part), f arbitrary numbers."""
    j = sp.Symbol("j", integer=True)
    fb = sp.IndexedBase("f")
    total = sp.Sum(fb[j] * sp.exp(fb[j]), (j, 0, at.P + at.B - 1))
    split, goals = at.split_range(total, sp.Integer(0), at.P + at.B - 1, at.P, Setting(sizes={}))
    assert len(goals) == 2 and split != total
    rng = np.random.default_rng(5)
    values = {fb[x]: sp.Rational(int(rng.integers(-9, 9)), 4) for x in range(12)}
    for p_ in range(0, 6):
        for b_ in range(1, 6):
            at_point = {at.P: p_, at.B: b_}
            a = total.xreplace(at_point).doit().xreplace(values)
            b = split.xreplace(at_point).doit().xreplace(values)
            assert sp.simplify(a - b) == 0, (p_, b_)


def test_split_range_refuses_an_unproved_split():
    j = sp.Symbol("j", integer=True)
    total = sp.Sum(sp.IndexedBase("f")[j], (j, 0, at.B - 1))
    with pytest.raises(ValueError):  # at = P may exceed B: the pieces would not partition
        at.split_range(total, sp.Integer(0), at.B - 1, at.P, Setting(sizes={}))
    with pytest.raises(ValueError):  # at = −1 lies below the range
        at.split_range(total, sp.Integer(0), at.B - 1, sp.Integer(-1), Setting(sizes={}))


def test_split_range_only_touches_the_key_range():
    j, t = sp.Symbol("j", integer=True), sp.Symbol("t", integer=True)
    inner = sp.Sum(sp.IndexedBase("q")[t], (t, 0, at.d_k - 1))
    total = sp.Sum(sp.exp(inner) * sp.IndexedBase("f")[j], (j, 0, at.P + at.B - 1))
    split, _ = at.split_range(total, sp.Integer(0), at.P + at.B - 1, at.P, Setting(sizes={}))
    sums = split.atoms(sp.Sum)
    assert inner in sums and sum(1 for s_ in sums if s_.limits[0][0] != t) == 2


# ------------------------------------------------------------------------------ registry
def test_claims_registered_and_no_op():
    ids = {c.id for c in registry.claims()}
    assert {c.id for c in at.CLAIMS} <= ids
    assert not getattr(at, "OPS", [])  # no kernel printed until the language has a loop node
    assert all(c.id.startswith("attention_tiled.") for c in at.CLAIMS)


# ---------------------------------------------------------------------------------------------
# The printed kernels: generated/<backend>/attention_tiled.py against attention_lse (the untiled
# kernel whose generated claims prove it), forward, saved log-sum-exp and backward.

import importlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

TILED_SHAPES = [  # (m, n, block): blocks that divide n, a short last block, one block, m ≠ n
    (7, 7, 3),
    (8, 8, 4),
    (5, 9, 4),
    (9, 5, 2),
    (6, 6, 128),
    (1, 1, 1),
    (4, 12, 5),
]


def _tiled(backend):
    return (
        importlib.import_module(f"generated.{backend}.attention_tiled"),
        importlib.import_module(f"generated.{backend}.attention_lse"),
    )


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("m,n,block", TILED_SHAPES, ids=[f"m{m}-n{n}-b{b}" for m, n, b in TILED_SHAPES])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_printed_tiled_kernel_equals_the_untiled_one(backend, m, n, block, causal):
    tiled, lse = _tiled(backend)
    rng = np.random.default_rng(m * 100 + n * 10 + block)
    arrays = [rng.standard_normal(s) * 3 for s in ((2, 3, m, 4), (2, 3, n, 4), (2, 3, n, 5))]
    do = rng.standard_normal((2, 3, m, 5))
    conv = (lambda a: torch.tensor(a)) if backend == "torch" else (lambda a: a)
    q, k, v = (conv(a) for a in arrays)
    o1, c1 = lse.attention_lse_forward(q, k, v, causal=causal)
    o2, c2 = tiled.attention_tiled_forward(q, k, v, causal=causal, block=block)
    np.testing.assert_allclose(np.asarray(o2), np.asarray(o1), rtol=1e-12, atol=1e-13)
    lse1, lse2 = (np.asarray(c[4]) + np.asarray(c[5]) for c in (c1, c2))  # mx + lsum
    np.testing.assert_allclose(lse2, lse1, rtol=1e-12, atol=1e-12)
    g1 = lse.attention_lse_backward(conv(do), c1)
    g2 = tiled.attention_tiled_backward(conv(do), c2, block=block)
    for a, b in zip(g2, g1):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-11, atol=1e-12)
    # either backward takes the other's forward: the caches are the same layout
    g3 = tiled.attention_tiled_backward(conv(do), c1, block=block)
    for a, b in zip(g3, g1):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-11, atol=1e-12)


def test_the_tiled_kernel_broadcasts_and_keeps_float32():
    tiled, lse = _tiled("numpy")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 1, 6, 4)).astype(np.float32)
    k, v = (rng.standard_normal((1, 3, 6, c)).astype(np.float32) for c in (4, 2))
    o, c = tiled.attention_tiled_forward(q, k, v, causal=True, block=4)
    o_ref, c_ref = lse.attention_lse_forward(q, k, v, causal=True)
    assert o.dtype == np.float32 and o.shape == (2, 3, 6, 2)
    np.testing.assert_allclose(o, o_ref, rtol=1e-5, atol=1e-6)
    grads = tiled.attention_tiled_backward(np.ones_like(o), c, block=4)
    for g, a in zip(grads, (q, k, v)):
        assert g.shape == a.shape and g.dtype == np.float32


def test_the_tiled_torch_kernel_passes_gradcheck_and_matches_sdpa():
    _, _ = _tiled("torch")
    from generated.torch.attention_tiled import attention_tiled

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 3, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, b, c, causal=causal: attention_tiled(a, b, c, causal=causal, block=2), (q, k, v)
        )
        torch.testing.assert_close(
            attention_tiled(q, k, v, causal=causal, block=2),
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
        )


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_a_bad_block_size_is_refused_by_name(bad):
    tiled, _ = _tiled("numpy")
    x = np.zeros((2, 3))
    # a non-integer is refused as every integer argument is (TypeError), a small one as too small
    small = isinstance(bad, int) and not isinstance(bad, bool)
    kind, words = (ValueError, "a positive integer") if small else (TypeError, "an integer")
    with pytest.raises(kind, match=f"attention_tiled: block must be {words}"):
        tiled.attention_tiled_forward(x, x, x, block=bad)


def test_the_tiled_kernel_checks_its_arguments_as_attention_lse():
    tiled, _ = _tiled("numpy")
    with pytest.raises(ValueError, match="attention_tiled"):
        tiled.attention_tiled_forward(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((2, 3)))
    o, cache = tiled.attention_tiled_forward(np.zeros((0, 3)), np.zeros((2, 3)), np.zeros((2, 5)))
    assert o.shape == (0, 5)
    assert all(np.all(g == 0) for g in tiled.attention_tiled_backward(np.zeros((0, 5)), cache))


def test_the_tiled_kernel_forms_no_m_by_n_array():
    """The printed text never multiplies the whole of q by the whole of k: every score is a
    block's (k[..., P:P + B, :]), so the largest temporary is m × block."""
    from codegen.render import ROOT

    for backend in ("numpy", "torch"):
        text = (ROOT / "generated" / backend / "attention_tiled.py").read_text()
        assert "k[..., P:P + B, :]" in text and "v[..., P:P + B, :]" in text
        assert "@ k.mT" not in text and "k.mT)" not in text
