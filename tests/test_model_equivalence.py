"""Model equivalence, llm.c style: NumpyGPT (generated NumPy kernels, no autograd), TorchGPT
(generated torch autograd Functions) and a reference GPT written with torch.nn.functional
(qed/tools/reference.py) agree, in float64 and with the same weights, on the logits, the loss
and every parameter gradient — for every norm × ffn × pos × norm_position — and on the losses
of 10 AdamW steps. Plus config validation and the optimizer utilities.

Relative error of a tensor = max|a − b| / max|b| (b the reference), required ≤ 1e-9.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from qed.config import ConfigError, GPTConfig, ffn_choices, loss_choices, norm_choices
from qed.kernels import kernel, table_fn
from qed.model_numpy import NumpyGPT
from qed.model_torch import TorchGPT
from qed.optim import AdamW, TorchAdamW, clip_grad_norm, cosine_lr, torch_clip_grad_norm
from qed.params import init_params, param_shapes
from qed.runner import build_model
from qed.tools.reference import ReferenceGPT, decay_groups

TOL = 1e-9
TINY = dict(n_layer=2, n_head=2, n_embd=8, block_size=8, vocab_size=11)
B = 2

NORMS = ("layernorm", "rmsnorm")
FFNS = ("relu", "gelu", "gelu_tanh", "swiglu")
POSS = ("learned", "sinusoidal", "rope")
FLOWS = ("pre", "post")
COMBOS = list(itertools.product(NORMS, FFNS, POSS, FLOWS))
VARIANTS = {
    "untied": dict(tie_weights=False),
    "nobias": dict(bias=False),
    "nobias-untied-rope-post": dict(bias=False, tie_weights=False, pos="rope", norm_position="post"),
    "nobias-rmsnorm-swiglu-sinusoidal": dict(bias=False, norm="rmsnorm", ffn="swiglu", pos="sinusoidal"),
    "nobias-relu-learned-post": dict(bias=False, ffn="relu", norm_position="post"),
    "attention_lse": dict(attention="attention_lse"),
    "attention_lse-rope-post-swiglu": dict(attention="attention_lse", pos="rope", norm_position="post", ffn="swiglu"),
    "attention_tiled": dict(attention="attention_tiled"),
    "attention_tiled-rope-post-geglu": dict(attention="attention_tiled", pos="rope", norm_position="post", ffn="geglu"),
    "qk_rmsnorm": dict(qk_norm="rmsnorm"),
    "qk_layernorm-nobias-rope-post": dict(qk_norm="layernorm", bias=False, pos="rope", norm_position="post"),
    "qk_layernorm-rmsnorm-swiglu": dict(qk_norm="layernorm", norm="rmsnorm", ffn="swiglu"),
    # an op of the q/k transform role only (unit-length q and k, then a gain)
    "qk_l2norm-rope-nobias": dict(qk_norm="qk_l2norm", pos="rope", bias=False),
    "layerscale": dict(residual_scale="layerscale"),
    "layerscale-post-rope-nobias": dict(residual_scale="layerscale", norm_position="post", pos="rope", bias=False),
    "softcap_scores": dict(score_transform="softcap"),
    # a transform far from the identity at these scores, with rope, post-norm and QK-norm
    "gelu_scores-rope-post-qk_rmsnorm": dict(
        score_transform="gelu", pos="rope", norm_position="post", qk_norm="rmsnorm"
    ),
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: torch's thread pool only adds overhead (25x slower on a loaded machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- position tables
def test_position_tables_generated():
    """The runtime's table functions are codegen's (generated/<backend>/{rope,sinusoidal}.py),
    and they agree with the classic constructions (RoFormer's interleaved pairs, seed A §5)."""
    for backend in ("numpy", "torch"):
        for module, name in (("rope", "rope_tables"), ("sinusoidal", "sinusoidal_table")):
            fn = table_fn(backend, module, name)
            assert fn.__module__ == f"generated.{backend}.{module}"
    T, D = 5, 6
    pos = np.arange(T)[:, None]
    inv = 10000.0 ** (-np.arange(0, D, 2) / D)  # ω_i, one per pair
    angle = np.repeat(pos * inv, 2, axis=1)  # (T, D): each pair's angle twice
    rot = np.zeros((D, D))
    for i in range(D // 2):  # (x @ rot)_{2i} = -x_{2i+1}
        rot[2 * i, 2 * i + 1], rot[2 * i + 1, 2 * i] = 1.0, -1.0
    pe = np.zeros((T, D))
    pe[:, 0::2], pe[:, 1::2] = np.sin(pos * inv), np.cos(pos * inv)
    cos, sin, r = kernel("numpy", "rope").rope_tables(T, D, base=10000.0, dtype=np.float64)
    np.testing.assert_allclose(cos, np.cos(angle), rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin, np.sin(angle), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(r, rot)
    np.testing.assert_allclose(
        kernel("numpy", "sinusoidal").sinusoidal_table(T, D, dtype=np.float64), pe, rtol=0, atol=1e-15
    )
    tcos, tsin, tr = kernel("torch", "rope").rope_tables(T, D, dtype=torch.float64)
    for a, b in ((tcos, cos), (tsin, sin), (tr, r)):
        np.testing.assert_allclose(a.numpy(), b, rtol=0, atol=1e-15)


# --------------------------------------------------------------------------- helpers
def rel(a, b) -> float:
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    b = b.detach().cpu().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return float(np.max(np.abs(a - b))) / max(scale, 1e-300)


def perturbed_params(cfg: GPTConfig, seed: int = 0) -> dict:
    """GPT-2 init plus noise, so that biases and norm gains are not trivially 0 and 1."""
    rng = np.random.default_rng(1000 + seed)
    return {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in init_params(cfg, seed).items()}


def batch(cfg: GPTConfig, seed: int = 0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, cfg.vocab_size, (B, cfg.block_size))
    tgt = rng.integers(0, cfg.vocab_size, (B, cfg.block_size))
    idx[0, :3] = idx[0, 0]  # repeated ids: embedding gradients must accumulate
    tgt[1, :2] = -1  # ignored targets (nanoGPT's ignore_index=-1)
    return idx, tgt


def three_models(cfg: GPTConfig):
    params = perturbed_params(cfg)
    npm = NumpyGPT(cfg, dtype=np.float64)
    npm.load_params(params)
    tm = TorchGPT(cfg, dtype=torch.float64)
    tm.load_params(params)
    ref = ReferenceGPT(cfg, dtype=torch.float64)
    ref.load_numpy_params(params)
    return npm, tm, ref


WORST = {"value": 0.0, "where": ""}


def check_equivalence(cfg: GPTConfig):
    npm, tm, ref = three_models(cfg)
    idx, tgt = batch(cfg)
    ti, tt = torch.as_tensor(idx), torch.as_tensor(tgt)
    logits, loss = npm.forward(idx, tgt)
    grads = npm.backward()
    tlogits, tloss = tm(ti, tt)
    tloss.backward()
    rlogits, rloss = ref(ti, tt)
    rloss.backward()

    errors = {
        "logits/numpy": rel(logits, rlogits),
        "logits/torch": rel(tlogits, rlogits),
        "loss/numpy": rel(np.array(loss), rloss),
        "loss/torch": rel(tloss, rloss),
    }
    rgrads = {k: p.grad for k, p in ref.named_parameters()}
    tgrads = {k: p.grad for k, p in tm.named_parameters()}
    assert set(grads) == set(rgrads) == set(tgrads) == set(param_shapes(cfg))
    scale = max(float(g.abs().max()) for g in rgrads.values())
    for k in rgrads:
        assert grads[k].dtype == np.float64 and grads[k].shape == tuple(rgrads[k].shape)
        if k.endswith("attn.k_norm.bias"):
            # exactly 0: a shift b of every key adds q·b to a query's every score, which the
            # softmax ignores; held to the rounding of the whole gradient instead
            for who, g in (("numpy", grads[k]), ("torch", tgrads[k]), ("reference", rgrads[k])):
                errors[f"d{k}/{who}"] = float(np.max(np.abs(np.asarray(g)))) / scale
            continue
        errors[f"d{k}/numpy"] = rel(grads[k], rgrads[k])
        errors[f"d{k}/torch"] = rel(tgrads[k], rgrads[k])
        assert np.any(grads[k] != 0), f"gradient of {k} is identically zero"
    worst = max(errors, key=errors.get)
    if errors[worst] > WORST["value"]:
        WORST.update(value=errors[worst], where=f"{worst} @ {cfg}")
    bad = {k: v for k, v in errors.items() if not v <= TOL}
    assert not bad, f"relative errors above {TOL}: {bad}"


# --------------------------------------------------------------------------- the 48 combos
@pytest.mark.parametrize("norm,ffn,pos,flow", COMBOS, ids=["-".join(c) for c in COMBOS])
def test_equivalence(norm, ffn, pos, flow):
    check_equivalence(GPTConfig(**TINY, norm=norm, ffn=ffn, pos=pos, norm_position=flow))


@pytest.mark.parametrize("ffn", ffn_choices())
def test_equivalence_every_ffn_of_the_registry(ffn):
    """Every activation and MLP op the registry offers (generated/model_ops.py), the ops declared by
    their forward alone included, against the torch.nn reference's PyTorch function (`Op.reference`)."""
    check_equivalence(GPTConfig(**TINY, ffn=ffn))


@pytest.mark.parametrize("norm", norm_choices())
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_equivalence_every_norm_of_the_registry(norm, bias):
    check_equivalence(GPTConfig(**TINY, norm=norm, bias=bias))


@pytest.mark.parametrize("loss", loss_choices())
def test_equivalence_every_loss_of_the_registry(loss):
    """Every op of the loss role (generated/model_ops.py's LOSSES) as the model's loss, against
    the reference's PyTorch function for it (label smoothing: F.cross_entropy's label_smoothing)."""
    check_equivalence(GPTConfig(**TINY, loss=loss))


def test_the_registry_offers_a_loss_besides_cross_entropy():
    assert {"cross_entropy", "label_smoothing"} <= set(loss_choices())
    assert not {"softmax", "layernorm", "dropout"} & set(loss_choices())


def test_the_registry_offers_the_forward_only_ops():
    assert {"softplus", "squared_relu", "softcap", "mish", "geglu"} <= set(ffn_choices())
    assert not {"softmax", "layernorm", "ffn_relu", "linear"} & set(ffn_choices())


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
def test_equivalence_variants(variant):
    check_equivalence(GPTConfig(**{**TINY, **VARIANTS[variant]}))


def test_numpy_threads_agree():
    """Splitting the batch across threads (each slice weighted by its scored tokens) gives the
    loss and gradients of one pass over the whole batch, to rounding."""
    cfg = GPTConfig(**TINY)
    params = perturbed_params(cfg)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, cfg.vocab_size, (5, cfg.block_size))
    tgt = rng.integers(0, cfg.vocab_size, (5, cfg.block_size))
    tgt[0, :5] = -1  # slices with different numbers of scored tokens
    tgt[3, :] = -1
    out = {}
    for threads in (1, 2, 3, 5):
        m = NumpyGPT(cfg, dtype=np.float64, threads=threads)
        m.load_params(params)
        logits, loss = m.forward(idx, tgt)
        out[threads] = (logits, loss, m.backward())
    logits1, loss1, g1 = out[1]
    for threads, (logits, loss, g) in out.items():
        assert rel(logits, logits1) <= 1e-14 and abs(loss - loss1) <= 1e-14 * abs(loss1), threads
        for k in g1:
            assert rel(g[k], g1[k]) <= 1e-12, (threads, k)


# --------------------------------------------------------------------------- AdamW steps
STEP_CONFIGS = {
    "gpt2": dict(),
    "rmsnorm-swiglu-rope-post-untied": dict(
        norm="rmsnorm", ffn="swiglu", pos="rope", norm_position="post", tie_weights=False
    ),
    "nobias-gelu_tanh-sinusoidal": dict(bias=False, ffn="gelu_tanh", pos="sinusoidal"),
    "qk_rmsnorm-rope": dict(qk_norm="rmsnorm", pos="rope"),
    "qk_l2norm-post": dict(qk_norm="qk_l2norm", norm_position="post"),
    "layerscale-qk_rmsnorm": dict(residual_scale="layerscale", qk_norm="rmsnorm"),
    "label_smoothing-nobias": dict(loss="label_smoothing", bias=False),
    "softcap_scores-swiglu": dict(score_transform="softcap", ffn="swiglu"),
}


@pytest.mark.parametrize("name", list(STEP_CONFIGS), ids=list(STEP_CONFIGS))
def test_adamw_ten_steps(name):
    """numpy AdamW on NumpyGPT, TorchAdamW on TorchGPT, torch.optim.AdamW on the reference
    (weight decay on matrices only): the same losses over 10 steps."""
    cfg = GPTConfig(**{**TINY, **STEP_CONFIGS[name]})
    npm, tm, ref = three_models(cfg)
    hp = dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    opt_np = AdamW(npm.params, **hp)
    opt_t = TorchAdamW(tm, **hp)
    opt_r = torch.optim.AdamW(decay_groups(ref, hp["weight_decay"]), lr=hp["lr"], betas=hp["betas"], eps=hp["eps"])
    losses = {"numpy": [], "torch": [], "ref": []}
    for step in range(10):
        idx, tgt = batch(cfg, seed=step % 2)  # two batches in turn: the loss must go down
        ti, tt = torch.as_tensor(idx), torch.as_tensor(tgt)
        _, loss = npm.forward(idx, tgt)
        opt_np.step(npm.backward())
        losses["numpy"].append(loss)
        opt_t.zero_grad()
        _, tloss = tm(ti, tt)
        tloss.backward()
        opt_t.step()
        losses["torch"].append(tloss.item())
        opt_r.zero_grad()
        _, rloss = ref(ti, tt)
        rloss.backward()
        opt_r.step()
        losses["ref"].append(rloss.item())
    r = np.array(losses["ref"])
    assert r[-1] < r[0], f"training did not reduce the loss: {r}"
    for k in ("numpy", "torch"):
        err = np.max(np.abs(np.array(losses[k]) - r) / np.abs(r))
        assert err <= TOL, f"{k} losses differ from the reference by {err:.2e}: {losses[k]} vs {r}"
    for k, p in ref.named_parameters():
        assert rel(npm.params[k], p) <= 1e-8, k


def test_adamw_weight_decay_only_on_matrices():
    cfg = GPTConfig(**TINY)
    m = NumpyGPT(cfg, dtype=np.float64)
    before = {k: v.copy() for k, v in m.params.items()}
    opt = AdamW(m.params, lr=0.1, weight_decay=0.5)
    opt.step({k: np.zeros_like(v) for k, v in m.params.items()})  # zero gradient: only decay moves
    for k, v in m.params.items():
        if v.ndim == 2:
            np.testing.assert_allclose(v, before[k] * (1 - 0.1 * 0.5), rtol=1e-12)
        else:
            np.testing.assert_array_equal(v, before[k])


def test_adamw_state_dict_resume():
    """Three steps, save, three more == six steps straight (numpy and torch backends)."""
    cfg = GPTConfig(**TINY)
    for backend in ("numpy", "torch"):
        runs = []
        for resume in (False, True):
            model = build_model(cfg, backend, np.float64, seed=3)
            opt = AdamW(model.params, lr=1e-2) if backend == "numpy" else TorchAdamW(model, lr=1e-2)
            for step in range(6):
                if resume and step == 3:
                    state = opt.state_dict()
                    params = (
                        {k: v.copy() for k, v in model.params.items()}
                        if backend == "numpy"
                        else {k: v.detach().clone() for k, v in model.state_dict().items()}
                    )
                    model = build_model(cfg, backend, np.float64, seed=99)
                    model.load_params(params)
                    opt = AdamW(model.params, lr=1e-2) if backend == "numpy" else TorchAdamW(model, lr=1e-2)
                    opt.load_state_dict(state)
                idx, tgt = batch(cfg, seed=step)
                if backend == "numpy":
                    model.forward(idx, tgt)
                    opt.step(model.backward())
                else:
                    opt.zero_grad()
                    model(torch.as_tensor(idx), torch.as_tensor(tgt))[1].backward()
                    opt.step()
            runs.append(
                {
                    k: (v.detach().numpy().copy() if isinstance(v, torch.Tensor) else v.copy())
                    for k, v in (model.params.items() if backend == "numpy" else model.state_dict().items())
                }
            )
        for k in runs[0]:
            np.testing.assert_allclose(runs[1][k], runs[0][k], rtol=1e-12, atol=1e-15, err_msg=k)


def test_clip_grad_norm_matches_torch():
    rng = np.random.default_rng(0)
    grads = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(5)}
    tparams = [
        torch.nn.Parameter(torch.zeros(3, 4, dtype=torch.float64)),
        torch.nn.Parameter(torch.zeros(5, dtype=torch.float64)),
    ]
    for p, g in zip(tparams, grads.values()):
        p.grad = torch.as_tensor(g.copy())
    norm = clip_grad_norm(grads, 1.0)
    tnorm = torch.nn.utils.clip_grad_norm_(tparams, 1.0)
    assert math.isclose(norm, float(tnorm), rel_tol=1e-12)
    for p, g in zip(tparams, grads.values()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-12)
    assert math.isclose(math.sqrt(sum(float(np.sum(g * g)) for g in grads.values())), 1.0, rel_tol=1e-5)
    # below the limit nothing changes
    small = {"a": np.full(3, 0.1)}
    assert math.isclose(clip_grad_norm(small, 10.0), math.sqrt(0.03))
    np.testing.assert_array_equal(small["a"], np.full(3, 0.1))
    tp = [torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))]
    tp[0].grad = torch.full((3,), 3.0, dtype=torch.float64)
    assert math.isclose(torch_clip_grad_norm(tp, 1.0), math.sqrt(27))
    assert math.isclose(float(tp[0].grad.norm()), 1.0, rel_tol=1e-5)


def test_cosine_lr():
    kw = dict(lr=1.0, warmup=10, max_steps=110, min_lr=0.1)
    assert cosine_lr(0, **kw) == pytest.approx(1 / 11)
    assert cosine_lr(9, **kw) == pytest.approx(10 / 11)
    assert cosine_lr(10, **kw) == pytest.approx(1.0)
    assert cosine_lr(60, **kw) == pytest.approx(0.55)
    assert cosine_lr(110, **kw) == pytest.approx(0.1)
    assert cosine_lr(500, **kw) == pytest.approx(0.1)
    lrs = [cosine_lr(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


# --------------------------------------------------------------------------- model API
def test_same_seed_same_weights_across_backends():
    cfg = GPTConfig(**TINY, tie_weights=False)
    a = build_model(cfg, "numpy", np.float64, seed=7)
    b = build_model(cfg, "torch", torch.float64, seed=7)
    c = build_model(cfg, "numpy", np.float64, seed=8)
    sd = b.state_dict()
    assert list(sd) == list(a.params) == list(param_shapes(cfg))
    for k in sd:
        np.testing.assert_array_equal(sd[k].numpy(), a.params[k])
    assert not np.array_equal(a.params["wte.weight"], c.params["wte.weight"])
    # GPT-2 init: residual projections scaled by 1/sqrt(2 n_layer), biases 0, gains 1
    assert np.all(a.params["h.0.ln_1.weight"] == 1) and np.all(a.params["h.0.attn.c_attn.bias"] == 0)
    big = init_params(GPTConfig(n_layer=2, n_embd=64, n_head=4, vocab_size=64), seed=0)
    assert np.std(big["h.0.mlp.c_fc.weight"]) == pytest.approx(0.02, rel=0.05)
    assert np.std(big["h.0.mlp.c_proj.weight"]) == pytest.approx(0.02 / 2, rel=0.05)


def test_param_names():
    cfg = GPTConfig(**TINY, norm_position="post", ffn="swiglu", pos="rope", tie_weights=False)
    names = set(param_shapes(cfg))
    assert "ln_f.weight" not in names and "wpe.weight" not in names and "lm_head.weight" in names
    assert {"h.1.mlp.w_gate.weight", "h.1.mlp.w_up.weight", "h.1.mlp.w_down.weight"} <= names
    assert param_shapes(cfg)["h.0.attn.c_attn.weight"] == (24, 8)
    assert "h.0.ln_1.bias" not in param_shapes(GPTConfig(**TINY, bias=False))
    assert "h.0.ln_1.bias" not in param_shapes(GPTConfig(**TINY, norm="rmsnorm"))


def test_float32_backends():
    cfg = GPTConfig(**TINY)
    idx, tgt = batch(cfg)
    m = NumpyGPT(cfg)
    logits, loss = m.forward(idx, tgt)
    grads = m.backward()
    assert logits.dtype == np.float32 and all(g.dtype == np.float32 for g in grads.values())
    assert math.isclose(loss, math.log(cfg.vocab_size), rel_tol=0.05)  # near-uniform at init
    t = TorchGPT(cfg)
    tlogits, tloss = t(torch.as_tensor(idx), torch.as_tensor(tgt))
    assert tlogits.dtype == torch.float32
    assert abs(tloss.item() - loss) < 1e-5
    no_targets = m.forward(idx)
    assert no_targets[1] is None and no_targets[0].shape == (B, cfg.block_size, cfg.vocab_size)


def test_model_input_errors():
    cfg = GPTConfig(**TINY)
    m = NumpyGPT(cfg, dtype=np.float64)
    with pytest.raises(ValueError, match="block_size"):
        m.forward(np.zeros((1, cfg.block_size + 1), dtype=np.int64))
    with pytest.raises(RuntimeError, match="forward"):
        m.backward()
    bad = {k: v for k, v in m.params.items() if k != "wte.weight"}
    with pytest.raises(ValueError, match="missing wte.weight"):
        m.load_params(bad)
    bad = dict(m.params, **{"h.0.ln_1.weight": np.ones(3)})
    with pytest.raises(ValueError, match=r"h\.0\.ln_1\.weight has shape \(3,\), the model needs \(8,\)"):
        m.load_params(bad)
    with pytest.raises(ValueError, match="unknown backend"):
        build_model(cfg, "jax", None, 0)


# --------------------------------------------------------------------------- config validation
@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            dict(n_embd=30, n_head=4),
            r"n_embd=30 is not divisible by n_head=4: choose n_embd a multiple of n_head \(e\.g\. 32\)",
        ),
        (
            dict(n_embd=12, n_head=4, pos="rope"),
            r"head size .* = 3 is odd: choose n_embd a multiple of 2\*n_head \(e\.g\. 16\)",
        ),
        (dict(n_embd=9, n_head=3, pos="sinusoidal"), r"n_embd=9 is odd"),
        (dict(norm="batchnorm"), r"norm='batchnorm' is not a known option: choose one of 'layernorm', 'rmsnorm'"),
        (dict(ffn="tanh"), r"ffn='tanh' .*'gelu', 'gelu_tanh', .*'relu', .*'swiglu'"),
        (dict(pos="alibi"), r"pos='alibi' .*'learned', 'sinusoidal', 'rope'"),
        (dict(norm_position="sandwich"), r"norm_position='sandwich' .*'pre', 'post'"),
        (dict(n_layer=0), r"n_layer=0 must be a positive integer"),
        (dict(n_head=-2), r"n_head=-2 must be a positive integer"),
        (dict(vocab_size=0), r"vocab_size=0 must be a positive integer"),
        (dict(block_size=2.5), r"block_size=2.5 must be an integer"),
        (dict(bias="yes"), r"bias='yes' must be True or False"),
        (
            dict(qk_norm="batchnorm"),
            r"qk_norm='batchnorm' is not a known option: '' \(none\) or a norm or q/k .*'qk_l2norm'",
        ),
        (dict(norm="qk_l2norm"), r"norm='qk_l2norm' is not a known option: choose one of 'layernorm', 'rmsnorm'$"),
        (dict(residual_scale="rmsnorm"), r"residual_scale='rmsnorm' is not a known option: .*'layerscale'"),
        (dict(loss="mse"), r"loss='mse' is not a known option: choose one of 'cross_entropy', 'label_smoothing'"),
        (dict(score_transform="layernorm"), r"score_transform='layernorm' is not a known option: .*'softcap'"),
        (dict(score_transform="softcap", attention="attention_tiled"), r"never forms whole: use attention='attention'"),
    ],
    ids=[
        "heads",
        "rope-odd",
        "sinusoidal-odd",
        "norm",
        "ffn",
        "pos",
        "norm_position",
        "n_layer",
        "n_head",
        "vocab",
        "block-float",
        "bias",
        "qk_norm",
        "norm-qk-transform-only",
        "residual_scale",
        "loss",
        "score_transform",
        "score_transform-tiled",
    ],
)
def test_config_errors(kwargs, message):
    cfg = GPTConfig(**kwargs)
    with pytest.raises(ConfigError, match=message):
        cfg.validate()
    with pytest.raises(ValueError):  # a ConfigError is a ValueError
        NumpyGPT(cfg)


def test_config_dict_roundtrip():
    cfg = GPTConfig(n_layer=3, norm="rmsnorm", pos="rope", ffn="swiglu", norm_position="post")
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    # a run saved before qk_norm existed resumes as it was: the key is absent, not a change
    saved = {k: v for k, v in cfg.to_dict().items() if k != "qk_norm"}
    assert GPTConfig.from_dict(saved, complete=True) == cfg
    with pytest.raises(ConfigError, match="lacks key"):
        GPTConfig.from_dict({k: v for k, v in saved.items() if k != "ffn"}, complete=True)
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) 'n_embed'.*known keys are n_layer"):
        GPTConfig.from_dict({**cfg.to_dict(), "n_embed": 32})
    with pytest.raises(ConfigError, match="not divisible"):
        GPTConfig.from_dict({**cfg.to_dict(), "n_embd": 30, "n_head": 4})
    GPTConfig().validate()


def test_a_missing_step_kernel_is_an_error_not_a_fallback(monkeypatch):
    """Without the generated adamw_step neither optimiser runs: no unproven update in its place."""
    from qed.kernels import MissingKernelError, kernel

    cfg = GPTConfig(**TINY)
    m, t = NumpyGPT(cfg, dtype=np.float64), TorchGPT(cfg, dtype=torch.float64)
    for backend in ("numpy", "torch"):
        monkeypatch.delattr(kernel(backend, "adamw"), "adamw_step")
    with pytest.raises(MissingKernelError, match="no adamw_step: run `make codegen`"):
        AdamW(m.params, lr=1e-2)
    with pytest.raises(MissingKernelError, match="no adamw_step"):
        TorchAdamW(t, lr=1e-2)


@pytest.mark.parametrize("threads", [1, 2])
def test_adamw_chunks_match_one_call(monkeypatch, threads):
    """The flat-buffer update cut into small chunks (shared by two threads) gives the very same
    parameters and moments as one kernel call per run, both backends, over three steps."""
    cfg = GPTConfig(**TINY)
    rng = np.random.default_rng(5)
    grads = [{k: rng.standard_normal(shape) for k, shape in param_shapes(cfg).items()} for _ in range(3)]
    results = {}
    for chunk in (10**9, 37):  # one call per run, then chunks of 37
        monkeypatch.setattr(AdamW, "CHUNK", chunk)
        monkeypatch.setattr(TorchAdamW, "CHUNK", chunk)
        npm = NumpyGPT(cfg, dtype=np.float64, seed=1)
        opt = AdamW(npm.params, lr=1e-2, weight_decay=0.1, threads=threads)
        tm = build_model(cfg, "torch", np.float64, seed=1)
        topt = TorchAdamW(tm, lr=1e-2, weight_decay=0.1)
        named = dict(tm.named_parameters())
        for g in grads:
            opt.step({k: v.copy() for k, v in g.items()})
            for k, p in named.items():
                p.grad = torch.as_tensor(g[k])
            topt.step()
        results[chunk] = (
            {k: v.copy() for k, v in npm.params.items()},
            opt.state_dict(),
            {k: p.detach().numpy().copy() for k, p in named.items()},
        )
    (p1, s1, t1), (p2, s2, t2) = results[10**9], results[37]
    for k in p1:
        np.testing.assert_array_equal(p1[k], p2[k], err_msg=k)
        np.testing.assert_array_equal(t1[k], t2[k], err_msg=k)
        np.testing.assert_allclose(p1[k], t1[k], rtol=1e-12, atol=1e-15, err_msg=k)
    for k in s1:
        if isinstance(s1[k], np.ndarray):
            np.testing.assert_array_equal(s1[k], s2[k], err_msg=k)
    assert sum(p.size for p in p1.values()) > 37 * 4  # several chunks per run
