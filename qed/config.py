"""GPTConfig: the sizes and architectural choices of a qed GPT, validated with helpful errors.

Every choice names the generated kernels it needs:

    norm           "layernorm" | "rmsnorm" | any norm op of the registry (`norm_choices()`,
                   generated/model_ops.py)  -> generated/<backend>/<norm>.py
    ffn            an activation between the MLP's linear maps ("relu", "gelu", "softplus", ...) or
                   a whole MLP op ("swiglu", "geglu"): the registry's ops with that role, listed
                   in generated/model_ops.py (`ffn_choices()`) -> generated/<backend>/<ffn>.py
    pos            "learned" (wpe table + embedding kernel) | "sinusoidal" (fixed table, no params)
                   | "rope" (rotary, applied to q and k of every head)
    attention      "attention" (saves the T×T weights for the backward) | "attention_lse" (saves one
                   log-sum-exp per row; the backward recomputes the weights: less memory, more time)
                   | "attention_tiled" (attention_lse's cache, the keys in blocks of 128: no T×T
                   array at all, forward or backward; memory linear in T)
    residual_scale "" (none) | an op of the registry scaling each residual branch before its add
                   (LayerScale: x + γ ⊙ f(x)), its parameters per block
    dropout        p ∈ [0, 1): inverted dropout (generated/<backend>/dropout.py) on the embedding's
                   output, on the attention weights (attention_dropout.py; attention="attention"
                   only) and on each residual branch before its add, as nanoGPT's `dropout`; on
                   in training steps only (evaluation and sampling see the whole network)
    loss           "cross_entropy" | any loss op of the registry (`loss_choices()`: label_smoothing,
                   ...): the mean over the scored targets that training minimises and evaluation
                   reports -> generated/<backend>/<loss>.py
    score_transform "" (none) | an elementwise op of the registry (the activations': softcap, …)
                   applied to every head's scores before the softmax, softmax(f(q kᵀ/√d) + M) v
                   (Gemma 2's attention soft-capping): attention then runs as its two halves,
                   attention_scores.py and attention_softmax.py, with the op between them
    qk_norm        "" (none) | a norm or q/k transform op of the registry (`qk_transform_choices()`:
                   rmsnorm, layernorm, qk_l2norm, ...) applied to q and k of every head, per
                   head's features (QK-norm), before the rotation of rope
    norm_position  "pre"  (GPT-2: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)); final ln_f)
                   | "post" (the source document / original Transformer:
                            x = ln_1(x + attn(x)); x = ln_2(x + mlp(x)); no ln_f, since every
                            block already ends with a norm)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .errors import QedError

POSITIONS = ("learned", "sinusoidal", "rope")
NORM_POSITIONS = ("pre", "post")
ATTENTIONS = ("attention", "attention_lse", "attention_tiled")


# keys added after runs were saved without them, each with the value that leaves such a run's model
# as it was: a checkpoint that lacks one resumes and samples unchanged
LATER_KEYS = {"qk_norm": "", "residual_scale": "", "dropout": 0.0, "loss": "cross_entropy", "score_transform": ""}


class ConfigError(QedError):
    """A GPTConfig that cannot be built; the message says what to change (a ValueError)."""


def ffn_choices() -> tuple[str, ...]:
    """Every `ffn` a GPT can take: the registry's activations and MLP ops (generated/model_ops.py)."""
    from generated import model_ops

    return tuple(sorted(model_ops.ACTIVATIONS + tuple(model_ops.FFNS)))


def norm_choices() -> tuple[str, ...]:
    """Every `norm` a GPT can take: the registry's norm ops (generated/model_ops.py)."""
    from generated import model_ops

    return tuple(sorted(model_ops.NORMS))


def qk_transform_choices() -> tuple[str, ...]:
    """Every `qk_norm` a GPT can take: the registry's norms and q/k transforms (generated/model_ops.py)."""
    from generated import model_ops

    return tuple(sorted(model_ops.QK_TRANSFORMS))


def _row_op(name: str) -> tuple:
    """(parameters, options) of a norm or q/k transform op, as generated/model_ops.py lists them."""
    from generated import model_ops

    return model_ops.NORMS[name] if name in model_ops.NORMS else model_ops.QK_TRANSFORMS[name]


def residual_scale_choices() -> tuple[str, ...]:
    """Every `residual_scale` a GPT can take: the registry's ops of that role (generated/model_ops.py)."""
    from generated import model_ops

    return tuple(sorted(getattr(model_ops, "RESIDUAL_SCALES", {})))


def score_transform_choices() -> tuple[str, ...]:
    """Every `score_transform`: the registry's elementwise ops without parameters (its activations)."""
    from generated import model_ops

    return tuple(sorted(model_ops.ACTIVATIONS))


def loss_choices() -> tuple[str, ...]:
    """Every `loss` a GPT can take: the registry's ops of the loss role (generated/model_ops.py)."""
    from generated import model_ops

    return tuple(sorted(getattr(model_ops, "LOSSES", ("cross_entropy",))))


def norm_params(config: GPTConfig, norm: str | None = None) -> tuple:
    """The parameters the model keeps of its norm (or of the norm op `norm`): ((module name,
    "ones" | "zeros"), ...) in the order the kernel takes them; a shift ("zeros") only with
    bias=True (else the kernel gets 0)."""
    params, _ = _row_op(norm or config.norm)
    return tuple(p for p in params if config.bias or p[1] != "zeros")


def residual_scale_params(config: GPTConfig) -> tuple:
    """The residual scale's parameters: ((module name, "ones" | "zeros"), ...) in kernel order."""
    from generated import model_ops

    return tuple(model_ops.RESIDUAL_SCALES[config.residual_scale]) if config.residual_scale else ()


def norm_call(norm: str, eps: float) -> tuple[tuple, dict]:
    """(every parameter of the norm op, in its kernel's order, as (module name, init); the keyword
    options the model passes: eps where the op takes one)."""
    params, options = _row_op(norm)
    return params, ({"eps": eps} if "eps" in options else {})


def ffn_weights(ffn: str) -> tuple | None:
    """An MLP op's weights, ((name, (axis, axis)), ...) with axes "model"/"hidden"; None for an
    activation (the MLP is then c_fc, the activation, c_proj)."""
    from generated import model_ops

    return model_ops.FFNS.get(ffn)


def _even_multiple(n: int, m: int) -> int:
    """The multiple of lcm(2, m) nearest to n (at least one)."""
    step = m if m % 2 == 0 else 2 * m
    return step * max(1, round(n / step))


@dataclass
class GPTConfig:
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    block_size: int = 16
    vocab_size: int = 16
    bias: bool = True
    norm: str = "layernorm"
    ffn: str = "gelu"
    pos: str = "learned"
    norm_position: str = "pre"
    tie_weights: bool = True
    attention: str = "attention"
    qk_norm: str = ""  # "" (none) or a norm op applied to q and k of every head (QK-norm)
    residual_scale: str = ""  # "" (none) or an op scaling each residual branch (LayerScale)
    score_transform: str = ""  # "" (none) or an elementwise op on the attention scores (softcap)
    loss: str = "cross_entropy"  # the loss op: cross_entropy or another of the loss role
    dropout: float = 0.0  # drop rate of the embedding's, the attention weights' and each branch's dropout

    # ------------------------------------------------------------------ derived sizes
    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def ffn_hidden(self) -> int:
        """Hidden width of the MLP: 4·n_embd (GPT-2); a gated MLP op (SwiGLU, GeGLU) uses the
        same width for its gate and up projections (so its block has 1.5x the MLP parameters)."""
        return 4 * self.n_embd

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise ConfigError naming the offending field and a fix; return None if valid."""
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"{name}={v!r} must be an integer (e.g. {name}={getattr(GPTConfig, name)})")
            if v <= 0:
                raise ConfigError(f"{name}={v} must be a positive integer (e.g. {name}={getattr(GPTConfig, name)})")
        for name in ("bias", "tie_weights"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise ConfigError(f"{name}={v!r} must be True or False")
        for name, allowed in (
            ("norm", norm_choices()),
            ("ffn", ffn_choices()),
            ("pos", POSITIONS),
            ("norm_position", NORM_POSITIONS),
            ("attention", ATTENTIONS),
            ("loss", loss_choices()),
        ):
            v = getattr(self, name)
            if v not in allowed:
                raise ConfigError(
                    f"{name}={v!r} is not a known option: choose one of " + ", ".join(repr(a) for a in allowed)
                )
        if self.qk_norm not in ("",) + qk_transform_choices():
            raise ConfigError(
                f"qk_norm={self.qk_norm!r} is not a known option: '' (none) or a norm or q/k transform op: "
                + ", ".join(repr(a) for a in qk_transform_choices())
            )
        if self.residual_scale not in ("",) + residual_scale_choices():
            raise ConfigError(
                f"residual_scale={self.residual_scale!r} is not a known option: '' (none) or one of "
                + ", ".join(repr(a) for a in residual_scale_choices())
            )
        if self.score_transform not in ("",) + score_transform_choices():
            raise ConfigError(
                f"score_transform={self.score_transform!r} is not a known option: '' (none) or an elementwise op: "
                + ", ".join(repr(a) for a in score_transform_choices())
            )
        if self.score_transform and self.attention != "attention":
            raise ConfigError(
                f"score_transform={self.score_transform!r} transforms the T×T scores, which attention="
                f"{self.attention!r} never forms whole: use attention='attention' with a score transform"
            )
        p = self.dropout
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
            raise ConfigError(f"dropout={p!r} must be a number with 0 <= dropout < 1 (e.g. dropout=0.2; 0: none)")
        if self.dropout > 0 and self.attention != "attention":
            raise ConfigError(
                f"dropout={self.dropout} drops attention weights, which attention={self.attention!r} does not keep "
                "(it recomputes them block by block): use attention='attention' with dropout, or dropout=0"
            )
        if self.n_embd % self.n_head:
            good = self.n_head * max(1, round(self.n_embd / self.n_head))
            raise ConfigError(
                f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: choose n_embd a "
                f"multiple of n_head (e.g. {good})"
            )
        if self.pos == "rope" and self.head_dim % 2:
            raise ConfigError(
                f"pos='rope' rotates pairs of features, but the head size n_embd/n_head = "
                f"{self.n_embd}/{self.n_head} = {self.head_dim} is odd: choose n_embd a multiple "
                f"of 2*n_head (e.g. {_even_multiple(self.n_embd, 2 * self.n_head)})"
                f" or another pos ('learned', 'sinusoidal')"
            )
        if self.pos == "sinusoidal" and self.n_embd % 2:
            raise ConfigError(
                f"pos='sinusoidal' pairs sin and cos features, but n_embd={self.n_embd} is odd: "
                f"choose an even n_embd that is a multiple of n_head (e.g. {_even_multiple(self.n_embd, self.n_head)})"
                f" or another pos ('learned', 'rope')"
            )

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, complete: bool = False) -> GPTConfig:
        """A validated config; `complete`: every key must be given (a checkpoint's config, where a
        missing key must not silently become the default)."""
        if not isinstance(d, dict):
            raise ConfigError(f"a config must be a dict, got {type(d).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(map(repr, unknown))}: known keys are {', '.join(known)}"
            )
        missing = [k for k in known if k not in d and k not in LATER_KEYS]
        if complete and missing:
            raise ConfigError(
                f"config lacks key(s) {', '.join(map(repr, missing))} (a default would silently change the model)"
            )
        cfg = cls(**d)
        cfg.validate()
        return cfg


def check_idx(config: GPTConfig, idx: object, targets: object = None) -> tuple[int, int]:
    """(B, T) of a batch of token ids (NumPy or torch) that a model of this config can take,
    or a ValueError saying what is wrong; with targets, at least one must be scored (not -1)."""
    shape = tuple(idx.shape)
    if len(shape) != 2:
        raise ValueError(f"idx must have shape (batch, time), got {shape}")
    B, T = shape
    if T > config.block_size:
        raise ValueError(f"sequence length {T} exceeds block_size={config.block_size}")
    if T < 1 or B < 1:
        raise ValueError(f"idx must be non-empty, got shape {shape}")
    if targets is not None and tuple(targets.shape) != shape:
        raise ValueError(f"targets must have the shape of idx {shape}, got {tuple(targets.shape)}")
    if targets is not None and not bool((targets >= 0).any()):  # -1: ignored (nanoGPT's ignore_index)
        raise ValueError("every target is -1 (ignored): there is no token to score")
    return B, T
