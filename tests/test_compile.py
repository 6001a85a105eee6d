"""TorchGPT(compile=True): the loss path under torch.compile computes what the uncompiled
generated backend computes, and every check the compiled graph skips is made before it.

Compiling takes tens of seconds, so the comparisons that compile are marked slow; the checks
that must happen before any compilation run by default (they never reach the compiler).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from qed.config import GPTConfig
from qed.errors import QedError
from qed.kernels import kernel
from qed.model_torch import TorchGPT
from qed.optim import TorchAdamW
from qed.train import TrainSettings

TINY = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11)


def batch(cfg, B=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), generator=g)
    tgt[0, :3] = -1  # ignored targets
    return idx, tgt


def test_ids_checked_before_the_compiled_graph():
    """Out-of-range ids and targets raise the kernels' own IndexError, and nothing is compiled."""
    cfg = GPTConfig(**TINY)
    m = TorchGPT(cfg, dtype=torch.float64, compile=True)
    idx, tgt = batch(cfg)
    bad = idx.clone()
    bad[1, 2] = cfg.vocab_size
    with pytest.raises(IndexError, match=r"embedding: ids has values in \[\d+, 11\]; expected 0 <= ids < V \(= 11\)"):
        m(bad, tgt)
    bad = tgt.clone()
    bad[2, 0] = 12
    with pytest.raises(IndexError, match=r"cross_entropy: targets has values in \[0, 12\]"):
        m(idx, bad)
    with pytest.raises(ValueError, match="every target is -1"):
        m(idx, torch.full_like(tgt, -1))
    logits, loss = m(idx)  # logits alone: not compiled
    assert loss is None and logits.shape == (3, cfg.block_size, cfg.vocab_size)
    assert m._compiled is None


def test_in_range_skipped_only_while_compiling(monkeypatch):
    """The generated validator reads the ids' values except while torch.compile traces."""
    v = kernel("torch", "_validate")
    ids = torch.tensor([0, 5])
    with pytest.raises(IndexError):
        v.in_range("embedding", "ids", ids, 5, "V")
    monkeypatch.setattr(v, "_compiling", lambda: True)
    v.in_range("embedding", "ids", ids, 5, "V")  # skipped: the caller checked


def test_a_compiler_failure_is_one_clear_error():
    """An error of torch.compile's machinery (here a stand-in for inductor's 'no working C++
    compiler') becomes a CompileError, a one-line error at the command line; an error the model
    itself raises passes through unchanged."""
    from qed.errors import CompileError, QedError

    class InductorError(RuntimeError):
        pass

    InductorError.__module__ = "torch._inductor.exc"
    cfg = GPTConfig(**TINY)
    m = TorchGPT(cfg, dtype=torch.float64, compile=True)
    idx, tgt = batch(cfg)

    def failing(*args):
        raise InductorError("InvalidCxxCompiler: No working C++ compiler found\nmore")

    m._compiled = failing
    with pytest.raises(
        CompileError,
        match=r"torch.compile failed \(InductorError: InvalidCxxCompiler: No "
        r"working C\+\+ compiler found\); train without --compile",
    ) as info:
        m(idx, tgt)
    assert isinstance(info.value, QedError)

    def model_error(*args):
        raise ValueError("a shape the model rejects")

    m._compiled = model_error
    with pytest.raises(ValueError, match="a shape the model rejects"):
        m(idx, tgt)


def test_compile_needs_the_torch_backend():
    with pytest.raises(QedError, match="--compile applies to --backend torch"):
        TrainSettings(backend="numpy", torch_compile=True).validate()
    TrainSettings(backend="torch", torch_compile=True).validate()


@pytest.mark.slow
def test_compiled_equals_uncompiled():
    """float64, three AdamW steps: the compiled loss, gradients and parameters equal the
    uncompiled backend's to rounding (inductor reorders sums; the formulas are the same)."""
    cfg = GPTConfig(**TINY)
    plain = TorchGPT(cfg, dtype=torch.float64, seed=1)
    comp = TorchGPT(cfg, dtype=torch.float64, seed=1, compile=True)
    opts = [TorchAdamW(m, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1) for m in (plain, comp)]
    for step in range(3):
        idx, tgt = batch(cfg, seed=step)
        losses = []
        for m, opt in zip((plain, comp), opts):
            opt.zero_grad()
            _, loss = m(idx, tgt)
            loss.backward()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-12, abs=1e-12)
        for (name, p), q in zip(plain.named_parameters(), comp.parameters()):
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
        for opt in opts:
            opt.step()
    for p, q in zip(plain.parameters(), comp.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-9, atol=1e-12)
    assert comp._compiled is not None


@pytest.mark.slow
def test_compiled_mixed_precision_equals_uncompiled():
    """--compile with --dtype bfloat16: the products' bfloat16 rounding inside the compiled
    graph. Same weights and batch: the compiled mixed-precision loss and gradients are the
    uncompiled mixed-precision ones to float32 rounding of the same bfloat16 products (relative
    1e-3 of each gradient's norm), float32 throughout, and both within bfloat16's rounding of the
    float32 step (relative 3e-2)."""
    cfg = GPTConfig(**TINY)
    full = TorchGPT(cfg, seed=1)
    plain = TorchGPT(cfg, seed=1, autocast=torch.bfloat16)
    comp = TorchGPT(cfg, seed=1, autocast=torch.bfloat16, compile=True)
    idx, tgt = batch(cfg, seed=0)
    results = []
    for m in (full, plain, comp):
        m.zero_grad()
        _, loss = m(idx, tgt)
        loss.backward()
        results.append((loss, {k: p.grad for k, p in m.named_parameters()}))
    (full_loss, full_g), (plain_loss, plain_g), (comp_loss, comp_g) = results
    assert comp_loss.dtype == torch.float32 and comp_loss.item() == pytest.approx(plain_loss.item(), rel=1e-4)
    assert plain_loss.item() != full_loss.item()  # the products really are rounded
    for k, g in full_g.items():
        assert comp_g[k].dtype == torch.float32
        assert (comp_g[k] - plain_g[k]).norm() <= 1e-3 * plain_g[k].norm() + 1e-6, k
        assert (comp_g[k] - g).norm() <= 3e-2 * g.norm() + 1e-6, k
    assert comp._compiled is not None


@pytest.mark.parametrize(
    "name", ["layernorm", "attention", "gelu", "linear", "cross_entropy", "softplus", "attention_tiled"]
)
def test_a_generated_kernel_traces_without_a_graph_break(name):
    """torch.compile traces a generated functional as one graph: its argument checks and every
    kernel line included (a check looked up by name per call once broke the graph at every
    kernel: the compiled model ran slower than the uncompiled one)."""
    import importlib

    import torch._dynamo

    mod = importlib.import_module(f"generated.torch.{name}")
    fn = getattr(mod, name)
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    args = {
        "layernorm": (x, torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)),
        "attention": (x, x, x),
        "attention_tiled": (x, x, x),
        "gelu": (x,),
        "softplus": (x,),
        "linear": (x, torch.randn(5, 4, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)),
        "cross_entropy": (x, torch.tensor([[0, 1, 2], [3, 0, 1]]), torch.ones(2, 3, dtype=torch.int64)),
    }[name]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(lambda *a: fn(*a).sum(), backend="eager", fullgraph=False)
    compiled(*args)
    breaks = dict(torch._dynamo.utils.counters["graph_break"])
    assert not breaks, list(breaks)[:3]
