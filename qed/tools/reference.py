"""A reference GPT written with plain torch.nn / torch.nn.functional (no qed kernels).

It is the independent side of the model-equivalence tests (tests/test_model_equivalence.py;
llm.c's test_gpt2.c checks its C model against PyTorch the same way) and the baseline that
`qed bench` measures both backends against (PyTorch eager autograd, `ReferenceRunner`, with
torch.optim.AdamW: a tool, never what qed trains with): every op here is PyTorch's own — F.layer_norm, F.rms_norm,
F.linear, F.embedding, F.gelu, F.relu, F.silu, F.scaled_dot_product_attention(is_causal=True),
F.cross_entropy — and its gradients come from torch autograd. Parameter names are those of
qed's models (nanoGPT's), so weights can be copied across with `load_numpy_params`.

Conventions shared with qed (see qed/config.py):
* sinusoidal positions (seed A §5): PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...),
  added to the token embeddings, no parameters;
* RoPE (seed B §15): per head, the feature pair (2i, 2i+1) of q and k is rotated by
  θ = pos·ω_i with ω_i = 10000^(−2i/head_dim), pos = 0, 1, ...;
* post-norm blocks (the source document's flow): x = ln_1(x + attn(x)); x = ln_2(x + mlp(x)),
  and no final ln_f; pre-norm blocks (GPT-2): x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)); ln_f;
* the MLP: c_proj(act(c_fc x)) for an activation, or an MLP op's weights (swiglu: w_down(silu(w_gate x)
  ⊙ w_up x), no biases), hidden width 4·n_embd; the activation or MLP is the op's `reference`
  (PyTorch's own function, declared with the op under derivations/), or, for an op that declares
  none, its specification evaluated with torch operations (`spec_function`), autograd deriving it;
* norms use eps = 1e-5; with bias=False a LayerNorm has no bias (β = 0); QK-norm (`qk_norm`)
  normalises each head's q and k over its features with the named norm op, before RoPE; a
  residual scale (`residual_scale`, LayerScale) multiplies each branch before its add; a score
  transform (`score_transform`, soft-capping) is applied to each head's scores before the mask
  and the softmax;
* targets equal to -1 are ignored by the loss (mean over the other tokens); a loss op other than
  cross-entropy (`loss`: label smoothing, …) is its op's PyTorch function over the same mask.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..params import init_params
from ..runner import TorchRunner

EPS = 1e-5
ROPE_BASE = 10000.0


def sinusoidal_table(T: int, d: int, dtype, device=None) -> torch.Tensor:
    pos = torch.arange(T, dtype=torch.float64, device=device)[:, None]
    i2 = torch.arange(0, d, 2, dtype=torch.float64, device=device)
    angle = pos / (10000.0 ** (i2 / d))
    pe = torch.zeros(T, d, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)[:, : d // 2]
    return pe.to(dtype)


def rope_rotate(x: torch.Tensor) -> torch.Tensor:
    """Rotate feature pairs (2i, 2i+1) of x (..., T, hd) by θ = pos·10000^(−2i/hd)."""
    T, hd = x.shape[-2], x.shape[-1]
    pos = torch.arange(T, dtype=torch.float64, device=x.device)[:, None]
    omega = ROPE_BASE ** (-torch.arange(0, hd, 2, dtype=torch.float64, device=x.device) / hd)
    theta = (pos * omega).to(x.dtype)  # (T, hd/2)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    return out.flatten(-2)


class Norm(nn.Module):
    """The config's norm op by its PyTorch function (`op_function`): its gains (ones) and shifts
    (zeros, held at 0 without biases) as parameters named as qed's models name them."""

    def __init__(self, kind: str, n: int, bias: bool):
        super().__init__()
        from ..config import norm_call

        self.fn = op_function(kind)
        self.names, self.kw = norm_call(kind, EPS)
        for name, init in self.names:
            if init == "zeros" and not bias:
                self.register_buffer(name, torch.zeros(n), persistent=False)
            else:
                setattr(self, name, nn.Parameter((torch.ones if init == "ones" else torch.zeros)(n)))

    def forward(self, x):
        return self.fn(x, *(getattr(self, name) for name, _ in self.names), **self.kw)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        if cfg.qk_norm:  # QK-norm: each head's q and k normalised over its features
            self.q_norm = Norm(cfg.qk_norm, cfg.head_dim, cfg.bias)
            self.k_norm = Norm(cfg.qk_norm, cfg.head_dim, cfg.bias)

    def forward(self, x):
        B, T, C = x.shape
        nh = self.cfg.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in (q, k, v))
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.cfg.pos == "rope":
            q, k = rope_rotate(q), rope_rotate(k)
        if self.cfg.score_transform:  # f on the scores inside the softmax (soft-capping)
            s = op_function(self.cfg.score_transform)(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=s.device).tril(), -math.inf)
            y = F.softmax(s, dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def op_function(name: str):
    """The torch function of a registry op: its declared `reference` (PyTorch's own ops), else its
    specification evaluated with torch operations."""
    from derivations import registry

    op = registry.op(name)
    if op.reference is not None:
        return lambda *tensors, **options: op.reference(torch, *tensors, **options)
    return spec_function(op)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        from ..config import ffn_weights

        h = 4 * cfg.n_embd
        self.weights = ffn_weights(cfg.ffn)
        self.fn = op_function(cfg.ffn)
        if self.weights is not None:  # one MLP op: its weights, no biases
            axis = {"model": cfg.n_embd, "hidden": h}
            for name, (rows, cols) in self.weights:
                setattr(self, name, nn.Linear(axis[cols], axis[rows], bias=False))
        else:
            self.c_fc = nn.Linear(cfg.n_embd, h, bias=cfg.bias)
            self.c_proj = nn.Linear(h, cfg.n_embd, bias=cfg.bias)

    def forward(self, x):
        if self.weights is not None:
            return self.fn(x, *(getattr(self, name).weight for name, _ in self.weights))
        return self.c_proj(self.fn(self.c_fc(x)))


class Scale(nn.Module):
    """The config's residual scale op (LayerScale) by its PyTorch function, its parameters named as
    qed's models name them."""

    def __init__(self, kind: str, n: int):
        super().__init__()
        from ..config import GPTConfig, residual_scale_params

        self.fn = op_function(kind)
        self.names = residual_scale_params(GPTConfig(residual_scale=kind))
        for name, init in self.names:
            setattr(self, name, nn.Parameter((torch.ones if init == "ones" else torch.zeros)(n)))

    def forward(self, x):
        return self.fn(x, *(getattr(self, name) for name, _ in self.names))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.post = cfg.norm_position == "post"
        self.ln_1 = Norm(cfg.norm, cfg.n_embd, cfg.bias)
        self.attn = Attention(cfg)
        self.ln_2 = Norm(cfg.norm, cfg.n_embd, cfg.bias)
        self.mlp = MLP(cfg)
        scaled = bool(cfg.residual_scale)
        self.ls_1 = Scale(cfg.residual_scale, cfg.n_embd) if scaled else nn.Identity()
        self.ls_2 = Scale(cfg.residual_scale, cfg.n_embd) if scaled else nn.Identity()

    def forward(self, x):
        if self.post:
            x = self.ln_1(x + self.ls_1(self.attn(x)))
            return self.ln_2(x + self.ls_2(self.mlp(x)))
        x = x + self.ls_1(self.attn(self.ln_1(x)))
        return x + self.ls_2(self.mlp(self.ln_2(x)))


class ReferenceGPT(nn.Module):
    def __init__(self, cfg, dtype=torch.float64):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        if cfg.pos == "learned":
            self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        if cfg.norm_position == "pre":
            self.ln_f = Norm(cfg.norm, cfg.n_embd, cfg.bias)
        if not cfg.tie_weights:
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.to(dtype)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx)
        if self.cfg.pos == "learned":
            x = x + self.wpe(torch.arange(T, device=idx.device))
        elif self.cfg.pos == "sinusoidal":
            x = x + sinusoidal_table(T, self.cfg.n_embd, x.dtype, x.device)
        for block in self.h:
            x = block(x)
        if self.cfg.norm_position == "pre":
            x = self.ln_f(x)
        w = self.wte.weight if self.cfg.tie_weights else self.lm_head.weight
        logits = F.linear(x, w)
        loss = None
        if targets is not None:
            if self.cfg.loss == "cross_entropy":
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)
            else:  # another loss op: its PyTorch function over the scored targets (mask = target ≠ −1)
                flat = targets.reshape(-1, 1)
                mask = (flat >= 0).long()
                loss = op_function(self.cfg.loss)(logits.reshape(-1, logits.shape[-1]), flat * mask, mask).reshape(())
        return logits, loss

    def load_numpy_params(self, params: dict) -> None:
        """Copy a {name: np.ndarray} dict (qed's names) into this module; names must match."""
        own = dict(self.named_parameters())
        if set(own) != set(params):
            raise KeyError(
                f"parameter names differ: only here {sorted(set(own) - set(params))}, "
                f"only there {sorted(set(params) - set(own))}"
            )
        with torch.no_grad():
            for name, p in own.items():
                src = torch.as_tensor(np.asarray(params[name]))
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: shape {tuple(src.shape)} != {tuple(p.shape)}")
                p.copy_(src.to(p.dtype))


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """torch.optim param groups: weight decay on 2-D matrices only (not biases, norms)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class ReferenceRunner(TorchRunner):
    """ReferenceGPT under eager autograd with torch.optim.AdamW (weight decay on matrices only),
    started from qed's initial weights of `seed`: the baseline row of `qed bench`."""

    backend = "reference"

    def __init__(self, cfg, dtype=torch.float32, seed: int = 0, optimizer: dict | None = None, compile: bool = False):
        """`compile=True`: the module's forward (and so its loss and, through AOTAutograd, its
        backward) under torch.compile with the flags of the compiled qed backend (inductor,
        dynamic=False, pattern matcher off): the peer a user would pick instead of it."""
        model = ReferenceGPT(cfg, dtype=dtype)
        model.load_numpy_params(init_params(cfg, seed))
        if compile:
            model.forward = torch.compile(model.forward, dynamic=False, options={"pattern_matcher": False})
        super().__init__(cfg, model, seed, optimizer)

    def new_optimizer(self):
        h = self.hyper
        return torch.optim.AdamW(
            decay_groups(self.model, h["weight_decay"]), lr=h["lr"], betas=h["betas"], eps=h["eps"]
        )

    def update(self, lr) -> None:
        if lr is not None:
            for group in self.opt.param_groups:
                group["lr"] = lr
        self.opt.step()

    def set_params(self, params: dict) -> None:
        self.model.load_numpy_params(params)


__all__ = ["ReferenceGPT", "ReferenceRunner", "sinusoidal_table", "rope_rotate", "decay_groups", "EPS"]


# ---------------------------------------------------------------------------------------------
# An op's specification with torch operations: the reference of an op that names no PyTorch
# function of its own. The expression tree is walked (no text is evaluated); torch autograd
# differentiates the result.


def spec_function(op):
    """f(*inputs, *params, **options) -> the outputs (one tensor, or a tuple) of `op.spec`, in torch."""
    import sympy as sp

    from derivations.language import arrays as A
    from derivations.language import functions

    # every function of the one table (derivations/language/functions.py), as torch spells it
    unary = {
        **{f: getattr(torch, name.removeprefix("torch.")) for f, name in functions.printed("torch").items()},
        A.Sigmoid: torch.sigmoid,
        A.NormalCDF: lambda u: 0.5 * (1 + torch.erf(u / 2**0.5)),
        A.Gaussian: lambda u: torch.exp(-u * u / 2),
    }
    reductions = {
        A.RowSum: lambda a: a.sum(-1, keepdim=True),
        A.RowMean: lambda a: a.mean(-1, keepdim=True),
        A.RowMax: lambda a: a.amax(-1, keepdim=True),
        A.MatMul: lambda a, b: a @ b,
        A.T: lambda a: a.transpose(-1, -2),
        A.ColSum: lambda a: a.reshape(-1, a.shape[-1]).sum(0, keepdim=True),
        # integer ids are held as (..., T, 1): the entry of each row at its id, a row of a table,
        # a one-hot row
        A.Take: lambda a, ids: torch.take_along_dim(a, ids.long(), dim=-1),
        A.Gather: lambda table, ids: table[ids[..., 0].long()],
        A.OneHot: lambda ids, classes: torch.nn.functional.one_hot(ids[..., 0].long(), int(classes)).to(
            torch.get_default_dtype()
        ),
    }

    def fold(combine, args):
        out = args[0]
        for a in args[1:]:
            out = combine(out, a)
        return out

    def ev(e, env):
        if e in env:
            return env[e]
        if e.is_Number or e.is_NumberSymbol:
            return float(e)
        args = [ev(a, env) for a in e.args]
        if isinstance(e, sp.Add):
            return fold(lambda a, b: a + b, args)
        if isinstance(e, sp.Mul):
            return fold(lambda a, b: a * b, args)
        if isinstance(e, sp.Pow):
            return args[0] ** args[1]
        if isinstance(e, (sp.Max, sp.Min)):
            pick = torch.maximum if isinstance(e, sp.Max) else torch.minimum
            return fold(lambda a, b: pick(torch.as_tensor(a), torch.as_tensor(b)), args)
        if isinstance(e, sp.Heaviside):
            h0 = args[1] if len(args) > 1 else 0.5
            return torch.where(args[0] > 0, 1.0, torch.where(args[0] < 0, 0.0, h0)).to(args[0].dtype)
        fn = reductions.get(type(e)) or unary.get(type(e))
        if fn is None:
            raise ValueError(
                f"op {op.name}: no torch form for {type(e).__name__} in its specification; "
                "declare `reference=` with PyTorch's own function"
            )
        return fn(*args)

    def fn(*tensors, **options):
        env = {o.symbol: float(options.get(o.name, o.default)) for o in op.options if o.symbol is not None}
        env.update(zip(op.inputs + op.params, tensors))
        dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.get_default_dtype())
        for a in op.integer_inputs:  # ids (..., T) as the column (..., T, 1) they are declared, as
            env[a] = env[a][..., None].to(dtype)  # values of the floats' dtype (Σ mask^{−1}: no float32)
        for line in op.spec:
            env[line.target] = ev(line.expr, env)
        outs = tuple(env[o] for o in op.outputs)
        return outs[0] if len(outs) == 1 else outs

    return fn
