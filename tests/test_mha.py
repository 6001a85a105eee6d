"""The generated multi-head attention layer against PyTorch's own multi-head attention."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from generated.numpy import mha as nmha
from generated.torch import mha as tmha

B, T, C, H = 2, 5, 12, 3


def reference(x, w_qkv, b_qkv, w_o, b_o, causal):
    """nanoGPT's CausalSelfAttention with F.scaled_dot_product_attention."""
    q, k, v = F.linear(x, w_qkv, b_qkv).split(C, dim=-1)
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return F.linear(y.transpose(1, 2).reshape(B, T, C), w_o, b_o)


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in ((B, T, C), (3 * C, C), (3 * C,), (C, C), (C,))]


@pytest.mark.parametrize("causal", [True, False])
def test_numpy_and_torch_match_pytorch_mha(causal):
    args = inputs()
    dout = np.random.default_rng(1).standard_normal((B, T, C))
    ref = [torch.tensor(a, requires_grad=True) for a in args]
    y_ref = reference(*ref, causal)
    y_ref.backward(torch.tensor(dout))
    want = [y_ref.detach().numpy()] + [t.grad.numpy() for t in ref]

    y, cache = nmha.mha_forward(*args, n_head=H, causal=causal)
    got_np = [y, *nmha.mha_backward(dout, cache)]
    ty, tcache = tmha.mha_forward(*(torch.tensor(a) for a in args), n_head=H, causal=causal)
    got_t = [t.numpy() for t in (ty, *tmha.mha_backward(torch.tensor(dout), tcache))]
    ours = [torch.tensor(a, requires_grad=True) for a in args]
    y_auto = tmha.mha(*ours, n_head=H, causal=causal)
    y_auto.backward(torch.tensor(dout))
    got_auto = [y_auto.detach().numpy()] + [t.grad.numpy() for t in ours]
    for got in (got_np, got_t, got_auto):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_module_and_gradcheck():
    layer = tmha.MultiHeadAttention(C, H, dtype=torch.float64)
    assert {n for n, _ in layer.named_parameters()} == {"c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"}
    x = torch.randn(B, T, C, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))


def test_bad_head_count_is_a_clear_error():
    args = inputs()
    with pytest.raises(ValueError, match="mha: x has 12 features, not divisible by n_head=5"):
        nmha.mha_forward(*args, n_head=5)
    with pytest.raises(ValueError, match="mha: n_embd=12 is not divisible by n_head=5"):
        tmha.MultiHeadAttention(C, 5)
