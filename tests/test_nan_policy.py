"""The NaN policy (docs/cli.md), for every op of the registry, forward and backward, both backends.

Every kernel computes with IEEE arithmetic on its formula as written, masked entries included:
NaN passes through +, ×, exp, log, sums, maxima and matrix products; the causal mask adds −∞
(−∞ + NaN is NaN) and a masked weight is 0 (0·NaN is NaN), so a mask never hides a NaN; a
comparison reads NaN as false (the gradient of relu at a NaN is 0, as torch's own). Each test
puts one NaN into one entry of one input (or of an upstream gradient) and checks:

* the forward never hides it: every output entry whose value depends on that input entry (a
  finite change of it changes the entry) is NaN;
* it stays inside the rows that read it: the other leading (batch, head) slices of a batched
  input come out bit for bit as without it;
* NumPy and PyTorch give the same NaN entries, outputs and gradients;
* attention, attention_lse and attention_tiled (any block size) give the same NaN entries,
  causal or not, for q, k, v and the upstream gradient: the tiled kernel adds the NaN of the
  blocks it skips (`_support.nan_of`).
"""

from __future__ import annotations

import importlib
import itertools
import warnings

import numpy as np
import pytest
import torch

from codegen.analysis import analyse
from derivations.registry import ops
from qed.tools.judge_edges import as_tuple, build, sizes_of

OPS = list(ops())


def _flags(op) -> list[dict]:
    return [{}] + ([{"causal": True}] if any(o.name == "causal" for o in op.options) else [])


def _run(name, backend, args, ups=None, **opts):
    """(outputs, gradients) as NumPy arrays; upstream gradients `ups` (ones by default)."""
    m = importlib.import_module(f"generated.{backend}.{name}")
    conv = (lambda a: torch.from_numpy(np.array(a))) if backend == "torch" else (lambda a: np.array(a))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        outs, cache = getattr(m, f"{name}_forward")(*[conv(a) for a in args], **opts)
        outs = as_tuple(outs)
        ups = ups if ups is not None else [np.ones(tuple(o.shape)) for o in outs]
        grads = as_tuple(getattr(m, f"{name}_backward")(*[conv(u) for u in ups], cache))
    back = (lambda t: t.detach().numpy()) if backend == "torch" else np.asarray
    return [back(o) for o in outs], [back(g) for g in grads]


def _places(op, args):
    """(argument index, entry) of every float input, a few entries each."""
    an = analyse(op)
    for i, a in enumerate(an.args):
        if a.integer:
            continue
        entries = list(np.ndindex(np.shape(args[i])))
        yield from ((i, e) for e in entries[:: max(1, len(entries) // 5)])


def _with(args, i, entry, value):
    out = [np.array(a, copy=True) for a in args]
    out[i][entry] = value
    return out


@pytest.mark.parametrize("op", OPS, ids=[o.name for o in OPS])
def test_a_nan_is_never_hidden_nor_spread_and_both_backends_agree(op):
    base = build(op, sizes_of(op))
    batched = {i for i, a in enumerate(analyse(op).args) if a.batched}
    for opts in _flags(op):
        clean, _ = _run(op.name, "numpy", base, **opts)
        for i, entry in _places(op, base):
            outs, grads = _run(op.name, "numpy", _with(base, i, entry, np.nan), **opts)
            touts, tgrads = _run(op.name, "torch", _with(base, i, entry, np.nan), **opts)
            where = f"{op.name} {opts} NaN in argument {i} at {entry}"
            for a, b in zip(outs + grads, touts + tgrads):
                assert np.array_equal(np.isnan(a), np.isnan(b)), f"{where}: NumPy and torch differ"
            moved, _ = _run(op.name, "numpy", _with(base, i, entry, base[i][entry] + 1.375), **opts)
            for k, (o, c, m) in enumerate(zip(outs, clean, moved)):
                depends = m != c
                assert np.isnan(o)[depends].all(), f"{where}: output {k} hides it"
            if i in batched and np.ndim(base[i]) > analyse(op).args[i].trailing:
                other = (1 - entry[0],) if len(base[i]) == 2 else None
                for k, (o, c) in enumerate(zip(outs, clean)):
                    if other is not None and o.ndim == np.ndim(base[i]) and len(o) == 2:
                        assert np.array_equal(o[other], c[other]), f"{where}: output {k} left its slice"


ATTENTION = [("attention", {}), ("attention_lse", {})] + [("attention_tiled", {"block": b}) for b in (1, 2, 3, 128)]


@pytest.mark.parametrize("m,n", [(4, 4), (3, 5), (5, 3)])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_every_attention_kernel_has_attentions_nan_entries(m, n, causal):
    """Attention is the reference: q row i NaN makes o's row i NaN, a NaN key the whole slice,
    value column c column c of every row; every kernel of it, each backend, the same entries
    of o, dq, dk and dv."""
    rng = np.random.default_rng(0)
    d = 2
    base = [rng.standard_normal((2, m, d)), rng.standard_normal((2, n, d)), rng.standard_normal((2, n, d))]
    up = rng.standard_normal((2, m, d))
    sources = [(i, e) for i in range(3) for e in np.ndindex(base[i].shape[1:])]
    sources += [(3, e) for e in np.ndindex(up.shape[1:])]
    for i, entry in sources:
        args, ups = [a.copy() for a in base], up.copy()
        (args[i] if i < 3 else ups)[(1, *entry)] = np.nan
        outs, grads = _run("attention", "numpy", args, [ups], causal=causal)
        want = [np.isnan(a) for a in outs + grads]
        assert all(not w[0].any() for w in want), "a NaN in slice 1 reached slice 0"
        for (name, opts), backend in itertools.product(ATTENTION, ("numpy", "torch")):
            o, g = _run(name, backend, args, [ups], causal=causal, **opts)
            got = [np.isnan(a) for a in o + g]
            for k, (w, h) in enumerate(zip(want, got)):
                assert np.array_equal(w, h), (
                    f"{name} {opts} [{backend}] NaN in {'qkv'[i] if i < 3 else 'do'}{entry}: result {k}"
                )


def test_what_attention_does_with_a_nan():
    """The policy in numbers: causal attention reads every key and value, masked ones too."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((4, 2)) for _ in range(3))
    for name, opts in ATTENTION:
        kk = k.copy()
        kk[3, 0] = np.nan  # the last key: masked for rows 0-2
        (o,), _ = _run(name, "numpy", [q, kk, v], causal=True, **opts)
        assert np.isnan(o).all(), name
        vv = v.copy()
        vv[3, 1] = np.nan
        (o,), _ = _run(name, "numpy", [q, k, vv], causal=True, **opts)
        assert np.isnan(o[:, 1]).all() and np.isfinite(o[:, 0]).all(), name
        qq = q.copy()
        qq[2, 0] = np.nan
        (o,), _ = _run(name, "numpy", [qq, k, v], causal=True, **opts)
        assert np.isnan(o[2]).all() and np.isfinite(np.delete(o, 2, axis=0)).all(), name


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_nan_of_marks_exactly_the_slices_and_columns_that_hold_a_nan(backend):
    """The helpers the tiled kernel adds: 0 (exactly) for a finite slice or column, NaN else."""
    sup = importlib.import_module(f"generated.{backend}._support")
    a = np.arange(24.0).reshape(2, 3, 4) - 7.5
    a[1, 2, 3] = np.nan
    conv = (lambda x: torch.from_numpy(x)) if backend == "torch" else (lambda x: x)
    back = (lambda t: t.numpy()) if backend == "torch" else np.asarray
    whole, cols = back(sup.nan_of(conv(a))), back(sup.nan_of_columns(conv(a)))
    assert whole.shape == (2, 1, 1) and whole[0, 0, 0] == 0 and np.isnan(whole[1, 0, 0])
    assert cols.shape == (2, 1, 4) and (cols[0] == 0).all() and (cols[1, 0, :3] == 0).all() and np.isnan(cols[1, 0, 3])
