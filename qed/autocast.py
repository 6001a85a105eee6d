"""Mixed precision (`--dtype bfloat16`, the torch backend): the matrix products in bfloat16,
everything else in float32, the weights kept in float32 (the master copy AdamW updates).

This is the policy of `torch.autocast(dtype=torch.bfloat16)` (nanoGPT's `dtype = 'bfloat16'`)
applied to the printed program's kernels rather than to single torch calls: the kernels whose
work is matrix products — `linear`, `linear_nobias` and an MLP op (SwiGLU, …) — receive their
float arguments rounded to bfloat16 and compute in it; what they return (outputs and gradients)
is widened back to float32 before anything else reads it. Norms, attention's softmax, the loss,
the residual sums and AdamW stay in float32. The kernels are the same printed, proved code at
another dtype: the policy decides only where values are rounded (a cast, no arithmetic), so the
step is the float32 step up to bfloat16's rounding of the products' inputs and outputs
(tests/test_autocast.py measures it).
"""

from __future__ import annotations

import types

LOW_DTYPES = ("bfloat16",)  # the `--dtype` names that mean: float32 weights, products in LOW


def weight_dtype(dtype: str) -> str:
    """The dtype the weights (and checkpoints) are kept in for a run's `--dtype`."""
    return "float32" if dtype in LOW_DTYPES else dtype


def product_ops(config: object) -> tuple[str, ...]:
    """The kernels of `config`'s model that compute in the low precision: the linear maps and the
    config's MLP op (generated/model_ops.py's FFNS), when it is one."""
    from generated import model_ops

    return ("linear", "linear_nobias") + ((config.ffn,) if config.ffn in model_ops.FFNS else ())


def low_precision(modules: dict, config: object, low: object) -> dict:
    """`modules` ({op name: generated module}) with each product kernel wrapped: its float
    tensor arguments cast to `low` on the way in, its float results cast back to float32."""
    out = dict(modules)
    for name in product_ops(config):
        if name in out:
            out[name] = _wrapped(out[name], name, low)
    return out


def _wrapped(module: object, name: str, low: object) -> types.SimpleNamespace:
    import torch

    forward, backward = getattr(module, name + "_forward"), getattr(module, name + "_backward")

    def down(a):
        return a.to(low) if isinstance(a, torch.Tensor) and a.is_floating_point() else a

    def up(a):
        return a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a

    def low_forward(*args: object, **options: object) -> tuple:
        out, cache = forward(*(down(a) for a in args), **options)
        return (tuple(up(o) for o in out) if isinstance(out, tuple) else up(out)), cache

    def low_backward(*args: object) -> object:
        *upstream, cache = args
        grads = backward(*(down(g) for g in upstream), cache)
        return tuple(up(g) for g in grads) if isinstance(grads, tuple) else up(grads)

    return types.SimpleNamespace(**{name + "_forward": low_forward, name + "_backward": low_backward})
