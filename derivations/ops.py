"""Ops: the forward and backward formulas that `codegen` prints.

An op is declared once, in the derivation module whose claims prove it. It lists, in the array
language of `arrays.py`:

* `inputs` and `params` (positional arguments of `<op>_forward`, in that order),
* `options` (keyword-only arguments: flags such as `causal`, hyperparameters such as `eps`),
* `sizes` (size symbols read off argument shapes at run time: `d_k = q.shape[-1]`),
* `forward` assignments, `outputs`, the `saved` arrays that go into the cache,
* `backward` assignments from the upstream gradients `d<output>` and the cache, and `grads`.

The claims prove these very expressions (through `Op.env`), and the printers print them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from .arrays import Array, ArrayError, Assign, shape_of


@dataclass(frozen=True)
class Option:
    """A keyword-only argument: a flag (`causal`) or a scalar hyperparameter (`eps`)."""

    symbol: sp.Symbol | None
    name: str
    default: object
    doc: str = ""


@dataclass
class Op:
    name: str
    module: str
    title: str
    latex: str
    claims: list[str]
    inputs: list[Array]
    forward: list[Assign]
    outputs: list[Array]
    saved: list[Array]
    backward: list[Assign]
    grads: list[Array]
    params: list[Array] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    sizes: dict = field(default_factory=dict)   # size Symbol -> (Array, axis) to read it from
    integer_inputs: list[Array] = field(default_factory=list)  # token ids, targets
    cache_doc: str = ""
    # torch nn.Module wrapper (codegen): PyTorch-style attribute names of the params
    # ({"gamma": "weight", "beta": "bias"}; default: the param's own name) and their
    # initialisers, one of "zeros", "ones", "normal" (std 0.02), "fan_in" (uniform ±1/√fan_in);
    # default: "normal" for matrices, "zeros" for row vectors.
    module_params: dict = field(default_factory=dict)
    param_init: dict = field(default_factory=dict)

    def __post_init__(self):
        defined = set(self.inputs) | set(self.params)
        for a in self.forward:
            defined.add(a.target)
        for a in self.outputs + self.saved:
            if a not in defined:
                raise ArrayError(f"op {self.name}: {a.name} is output/saved but never defined")
        if len(self.grads) != len(self.inputs) + len(self.params) - len(self.integer_inputs):
            raise ArrayError(f"op {self.name}: one gradient per float input and parameter")

    @property
    def upstream(self) -> list[Array]:
        """The upstream gradients d<output>, one per output, same shape."""
        return [grad_of(o) for o in self.outputs]

    def env(self, when: frozenset | set = frozenset()) -> dict:
        """Definitions of every forward and backward intermediate, for index expansion.

        `when` names the flags that are on (e.g. {"causal"}); an assignment guarded by a
        flag that is off is skipped, exactly as the generated code skips it.
        """
        env: dict = {}
        for a in self.forward + self.backward:
            if a.when is not None and a.when not in when:
                continue
            expr = a.expr
            if a.target in env:  # a redefinition (S = mask(S)) refers to the previous value
                expr = expr.xreplace({a.target: env[a.target]})
            env[a.target] = expr
        return env

    def value(self, target: Array, when=frozenset()) -> sp.Expr:
        """The expression that the generated code computes for `target`."""
        return self.env(when)[target]


def grad_of(a: Array) -> Array:
    """The array `d<name>` that carries ∂L/∂<name>: same shape."""
    return Array("d" + a.name, a.shape)


def check_shapes(op: Op) -> None:
    """Every assignment's shape must be computable (raises ArrayError otherwise)."""
    for a in op.forward + op.backward:
        shape_of(a.expr)
