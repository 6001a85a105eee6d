"""The parameters of a qed GPT: their names (nanoGPT's) and shapes, their initialisation, and the
one check that a set of arrays fits a config (used by both models and by the checkpoint loader).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from .config import GPTConfig, ffn_weights, norm_params, residual_scale_params
from .errors import QedError

INIT_STD = 0.02  # GPT-2


class ParameterError(QedError):
    """Arrays whose names or shapes do not fit the model (a ValueError)."""


def param_shapes(config: GPTConfig) -> OrderedDict[str, tuple[int, ...]]:
    """Every parameter's name (nanoGPT's) and shape, in a fixed order."""
    c = config
    C, H, V = c.n_embd, c.ffn_hidden, c.vocab_size
    out: OrderedDict = OrderedDict()
    out["wte.weight"] = (V, C)
    if c.pos == "learned":
        out["wpe.weight"] = (c.block_size, C)

    def norm(prefix, op=None, width=C):
        for name, _ in norm_params(c, op):
            out[f"{prefix}.{name}"] = (width,)

    def scale(prefix):  # the residual branch's scale (LayerScale), if the model has one
        if c.residual_scale:
            for name, _ in residual_scale_params(c):
                out[f"{prefix}.{name}"] = (C,)

    def lin(prefix, n_out, n_in, bias):
        out[f"{prefix}.weight"] = (n_out, n_in)
        if bias:
            out[f"{prefix}.bias"] = (n_out,)

    for layer in range(c.n_layer):
        p = f"h.{layer}"
        norm(f"{p}.ln_1")
        lin(f"{p}.attn.c_attn", 3 * C, C, c.bias)
        if c.qk_norm:  # per head's features: (head_dim,)
            norm(f"{p}.attn.q_norm", c.qk_norm, c.head_dim)
            norm(f"{p}.attn.k_norm", c.qk_norm, c.head_dim)
        lin(f"{p}.attn.c_proj", C, C, c.bias)
        scale(f"{p}.ls_1")
        norm(f"{p}.ln_2")
        weights = ffn_weights(c.ffn)
        if weights is not None:  # one MLP op (SwiGLU, GeGLU): no biases
            axis = {"model": C, "hidden": H}
            for name, (rows, cols) in weights:
                lin(f"{p}.mlp.{name}", axis[rows], axis[cols], False)
        else:
            lin(f"{p}.mlp.c_fc", H, C, c.bias)
            lin(f"{p}.mlp.c_proj", C, H, c.bias)
        scale(f"{p}.ls_2")
    if c.norm_position == "pre":
        norm("ln_f")
    if not c.tie_weights:
        out["lm_head.weight"] = (V, C)
    return out


def _is_norm(name: str) -> bool:
    return name.split(".")[-2] in ("ln_1", "ln_2", "ln_f", "q_norm", "k_norm", "ls_1", "ls_2")


def _is_residual_projection(name: str, config: GPTConfig) -> bool:
    """The maps into the residual stream: attention's and the MLP's output projections (an MLP
    op's weight of shape (model, hidden))."""
    outputs = ["attn.c_proj.weight", "mlp.c_proj.weight"]
    outputs += [f"mlp.{w}.weight" for w, axes in (ffn_weights(config.ffn) or ()) if axes == ("model", "hidden")]
    return name.endswith(tuple(outputs))


def init_params(config: GPTConfig, seed: int = 0) -> OrderedDict[str, np.ndarray]:
    """GPT-2 initialisation in float64, deterministic from `seed` (both backends use it):
    matrices ~ N(0, 0.02²), residual projections ~ N(0, (0.02/√(2·n_layer))²), biases 0,
    norm weights 1."""
    rng = np.random.default_rng(seed)
    out: OrderedDict = OrderedDict()
    norm_init = dict(norm_params(config))  # a norm's gains 1, its shifts 0
    if config.qk_norm:
        norm_init.update(norm_params(config, config.qk_norm))
    if config.residual_scale:
        norm_init.update(residual_scale_params(config))
    for name, shape in param_shapes(config).items():
        if len(shape) == 2:
            std = INIT_STD / math.sqrt(2 * config.n_layer) if _is_residual_projection(name, config) else INIT_STD
            out[name] = rng.normal(0.0, std, size=shape)
        elif _is_norm(name) and norm_init.get(name.rsplit(".", 1)[1]) == "ones":
            out[name] = np.ones(shape)
        else:  # linear biases, norm shifts
            out[name] = np.zeros(shape)
    return out


def check_params(params: dict, expected: dict, where: str = "parameters") -> None:
    """Refuse arrays whose names or shapes differ from `expected` ({name: shape}): one line
    naming what is missing, unexpected or of the wrong shape."""
    missing = [k for k in expected if k not in params]
    extra = [k for k in params if k not in expected]
    wrong = [
        f"{k} has shape {tuple(np.shape(params[k]))}, the model needs {tuple(expected[k])}"
        for k in expected
        if k in params and tuple(np.shape(params[k])) != tuple(expected[k])
    ]
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if extra:
        parts.append(f"unexpected {', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}")
    if wrong:
        parts.append("; ".join(wrong[:3]))
    if parts:
        raise ParameterError(f"{where}: do not fit the model ({'; '.join(parts)})")
