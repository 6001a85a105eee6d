"""Mixed precision (`--dtype bfloat16`, qed/autocast.py): the product kernels compute in bfloat16
on rounded arguments and hand float32 back; the weights, the rest of the step and the checkpoint
stay float32; the step is the float32 step up to that rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from qed.autocast import low_precision, product_ops, weight_dtype
from qed.config import GPTConfig
from qed.errors import QedError
from qed.kernels import load_kernels
from qed.model_torch import TorchGPT
from qed.runner import build_model
from qed.train import Trainer, load_for_inference
from tests.train_helpers import TASK, settings, tiny_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

CFG = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11)


def _batch(seed=0, B=3, T=8, V=11):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    targets[0, :2] = -1  # ignored targets too
    return idx, targets


def _loss_and_grads(model, idx, targets):
    model.zero_grad()
    _, loss = model(idx, targets)
    loss.backward()
    return loss, {k: p.grad for k, p in model.named_parameters()}


def test_a_product_kernel_computes_on_rounded_arguments_and_returns_float32():
    """linear's wrapped forward is the bfloat16 kernel on the arguments rounded to bfloat16,
    widened: exactly; its gradients come back float32, equal to the bfloat16 kernel's widened."""
    modules = load_kernels("torch", CFG)
    low = low_precision(modules, CFG, torch.bfloat16)["linear"]
    g = torch.Generator().manual_seed(1)
    x, w, b = (torch.randn(s, generator=g) for s in ((2, 5, 7), (4, 7), (4,)))
    y, cache = low.linear_forward(x, w, b)
    y_ref, cache_ref = modules["linear"].linear_forward(*(t.bfloat16() for t in (x, w, b)))
    assert y.dtype == torch.float32 and torch.equal(y, y_ref.float())
    assert not torch.equal(y, modules["linear"].linear_forward(x, w, b)[0])  # rounded: not the float32 product
    dy = torch.randn(y.shape, generator=g)
    grads = low.linear_backward(dy, cache)
    grads_ref = modules["linear"].linear_backward(dy.bfloat16(), cache_ref)
    for got, want in zip(grads, grads_ref):
        assert got.dtype == torch.float32 and torch.equal(got, want.float())


@pytest.mark.parametrize(
    "ffn,expected", [("gelu", {"linear", "linear_nobias"}), ("swiglu", {"linear", "linear_nobias", "swiglu"})]
)
def test_the_products_are_the_linear_maps_and_an_mlp_op(ffn, expected):
    assert set(product_ops(GPTConfig(ffn=ffn))) == expected
    assert weight_dtype("bfloat16") == "float32" and weight_dtype("float64") == "float64"


@pytest.mark.parametrize("config", [CFG, GPTConfig(**{**CFG.__dict__, "ffn": "swiglu", "bias": False, "pos": "rope"})])
def test_the_mixed_precision_step_is_the_float32_step_up_to_rounding(config):
    """Same weights and batch: loss and every gradient of the mixed-precision model within
    bfloat16's rounding of the float32 model's (relative 3e-2 of the gradient's norm), and not
    equal to them (the products really are rounded); weights and gradients float32."""
    full = TorchGPT(config, seed=5)
    mixed = TorchGPT(config, seed=5, autocast=torch.bfloat16)
    idx, targets = _batch()
    loss, grads = _loss_and_grads(full, idx, targets)
    mixed_loss, mixed_grads = _loss_and_grads(mixed, idx, targets)
    assert mixed_loss.dtype == torch.float32 and abs(mixed_loss.item() - loss.item()) < 2e-3 * loss.item()
    assert mixed_loss.item() != loss.item()
    for k, g in grads.items():
        m = mixed_grads[k]
        assert m.dtype == torch.float32 and dict(mixed.named_parameters())[k].dtype == torch.float32
        assert (m - g).norm() <= 3e-2 * g.norm() + 1e-6, k


def test_mixed_precision_trains_like_float32(tmp_path):
    """The sort task: 40 steps in each precision from the same seed; the mixed-precision losses
    follow the float32 ones (each step's within 10 %), the run learns, and its checkpoint holds
    float32 weights that NumPy reads back."""
    runs = {}
    for dtype in ("float32", "bfloat16"):
        s = settings(backend="torch", dtype=dtype, steps=40, eval_every=40, lr=3e-3, batch_size=16)
        t = Trainer.new(tiny_config(n_embd=32), s, TASK, out=str(tmp_path / dtype), progress=False)
        assert t.run() == 0
        runs[dtype] = t.losses
    for step, loss in runs["float32"].items():
        assert abs(runs["bfloat16"][step] - loss) <= 0.1 * loss, (step, runs["bfloat16"][step], loss)
    assert runs["bfloat16"][40] < 0.8 * runs["bfloat16"][1]
    runner, c = load_for_inference(tmp_path / "bfloat16", backend="numpy")
    assert {str(a.dtype) for a in c.params.values()} == {"float32"}


def test_bfloat16_is_refused_off_the_torch_backend():
    with pytest.raises(QedError, match="--dtype bfloat16 runs on --backend torch"):
        settings(backend="numpy", dtype="bfloat16").validate()
    with pytest.raises(QedError, match="NumPy has no bfloat16"):
        build_model(CFG, "numpy", "bfloat16")
    with pytest.raises(ValueError, match="keeps float32 weights"):
        TorchGPT(CFG, dtype=torch.float64, autocast=torch.bfloat16)
    assert np.dtype(weight_dtype("bfloat16")) == np.float32
