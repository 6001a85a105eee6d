"""The generated kernels, loaded by name, and what a GPT of a given config needs of them.

    kernel(backend, op)            generated/<backend>/<op>.py, or MissingKernelError
    table_fn(backend, module, fn)  a generated table function (RoPE's, the sinusoidal table)
    kernels_for(config)            the ops and table functions a config calls (both backends)
    load_kernels(backend, config)  {op: module} of every kernel a config calls, tables checked

The constants are the generated kernels' defaults that the models pass on.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from .config import GPTConfig

NORM_EPS = 1e-5  # eps of LayerNorm / RMSNorm (the generated kernels' default)
ROPE_BASE = 10000.0  # ω_i = ROPE_BASE^(−2i/hd)
SINUSOID_BASE = 10000.0  # PE(pos, 2i) = sin(pos / SINUSOID_BASE^(2i/C))


class MissingKernelError(ImportError):
    """A generated kernel the model needs is not in generated/<backend>/."""


def kernel(backend: str, name: str) -> ModuleType:
    """The generated module generated/<backend>/<name>.py, or MissingKernelError saying so."""
    modname = f"generated.{backend}.{name}"
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name not in (modname, "generated", f"generated.{backend}"):
            raise
        raise MissingKernelError(
            f"the generated kernel generated/{backend}/{name}.py is missing: run "
            f"`PYTHONPATH=. python3 -m codegen` (the op {name!r} must be in derivations/)"
        ) from None


def table_fn(backend: str, module: str, name: str) -> Callable:
    """A generated table function (RoPE's cos/sin/rot tables, the sinusoidal PE table), or
    MissingKernelError. Expected signatures (no formula is typed in qed: the tables are the
    formulas of derivations/positional.py, printed by codegen):

        rope_tables(T, d, *, base=10000.0, dtype, [device]) -> (cos (T, d), sin (T, d), rot (d, d))
            in generated/<backend>/rope.py
        sinusoidal_table(T, d, *, base=10000.0, dtype, [device]) -> PE (T, d)
            in generated/<backend>/sinusoidal.py
    """
    fn = getattr(kernel(backend, module), name, None)
    if fn is None:
        raise MissingKernelError(
            f"the generated table function {name}() is missing from generated/{backend}/{module}.py: "
            f"codegen must print it from derivations/positional.py"
        )
    return fn


def kernels_for(config: GPTConfig) -> tuple[list[str], list[tuple[str, str]]]:
    """The generated kernels a GPT with this config calls (op names), and the table functions
    (module, function) it builds its position tables with — the same for both backends."""
    c = config
    names = [
        "embedding",
        c.attention,
        c.loss,  # cross_entropy or another op of the loss role
        c.norm,
        *([c.qk_norm] if c.qk_norm else []),  # QK-norm's op (may be the model's norm)
        *([c.residual_scale] if c.residual_scale else []),  # LayerScale's op
        "linear" if c.bias else "linear_nobias",
        "linear_nobias",
    ]
    names.append(c.ffn)  # an activation or a whole MLP op (generated/model_ops.py)
    if c.score_transform:  # attention's two halves and the transform between them
        names += ["attention_scores", c.score_transform, "attention_softmax"]
    if c.dropout > 0:
        names += ["dropout", "attention_dropout"]  # the embedding's, the branches' and the weights' dropout
    names.append("adamw")  # the printed program's step (generated/<backend>/gpt.py's `step`)
    tables = []
    if c.pos == "rope":
        names.append("rope")
        tables.append(("rope", "rope_tables"))
    if c.pos == "sinusoidal":
        tables.append(("sinusoidal", "sinusoidal_table"))
    return names, tables


def load_kernels(backend: str, config: GPTConfig) -> dict:
    """{op name: generated module} of every kernel a GPT with this config calls, after checking
    that its table functions exist: a missing one fails when the model is built, not mid-forward."""
    names, tables = kernels_for(config)
    for module, fn in tables:
        table_fn(backend, module, fn)
    return {name: kernel(backend, name) for name in names}
