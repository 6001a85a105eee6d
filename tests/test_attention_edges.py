"""Attention at the edges: length 1, logits of magnitude 1e4, non-contiguous inputs."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from generated.numpy.attention import attention_backward, attention_forward
from generated.torch import attention as tattention


def reference(q, k, v, do, causal):
    q, k, v = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(torch.tensor(do))
    return [t.detach().numpy() for t in (o, q.grad, k.grad, v.grad)]


def ours(backend, q, k, v, do, causal):
    if backend == "numpy":
        o, cache = attention_forward(q, k, v, causal=causal)
        return [o, *attention_backward(do, cache)]
    o, cache = tattention.attention_forward(*(torch.tensor(a) for a in (q, k, v)), causal=causal)
    return [t.numpy() for t in (o, *tattention.attention_backward(torch.tensor(do), cache))]


def close(got, want):
    for a, b in zip(got, want):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("causal", [False, True])
def test_length_one(backend, causal):
    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((2, 3, 1, 4)) for _ in range(4))
    got = ours(backend, q, k, v, do, causal)
    np.testing.assert_allclose(got[0], v)  # one key: its weight is exactly 1
    close(got, reference(q, k, v, do, causal))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("causal", [False, True])
def test_logits_of_magnitude_1e4_are_finite_without_warnings(backend, causal):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 5, 8)) * 100  # q·k/√d reaches ~1e4
    k = rng.standard_normal((2, 5, 8)) * 100
    v, do = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 3))
    s = np.abs(q @ np.swapaxes(k, -1, -2) / np.sqrt(8)).max()
    assert s > 5e3
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        got = ours(backend, q, k, v, do, causal)
    close(got, reference(q, k, v, do, causal))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_non_contiguous_inputs(backend):
    rng = np.random.default_rng(2)
    big = rng.standard_normal((2, 6, 16))
    q = big[..., ::2]  # strided view
    k = np.swapaxes(rng.standard_normal((2, 8, 6)), -1, -2)  # transposed view
    v = rng.standard_normal((2, 6, 10))[..., 3:7]
    do = rng.standard_normal((2, 6, 4))
    assert not (q.flags.c_contiguous or k.flags.c_contiguous or v.flags.c_contiguous)
    got = ours(backend, q, k, v, do, False)
    want = ours(backend, *(np.ascontiguousarray(a) for a in (q, k, v, do)), False)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    close(got, reference(*(np.ascontiguousarray(a) for a in (q, k, v, do)), False))


def test_keys_may_be_longer_than_queries():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 8)), rng.standard_normal((5, 8)), rng.standard_normal((5, 2))
    do = rng.standard_normal((3, 2))
    close(ours("numpy", q, k, v, do, False), reference(q, k, v, do, False))
