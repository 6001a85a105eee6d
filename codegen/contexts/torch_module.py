"""The `nn.Module` wrapper of an op with parameters (torch only): parameters by their PyTorch
names, created from the sizes, initialised by name."""

from __future__ import annotations

import sympy as sp

from derivations.language.ops import Op

from ..names import CodegenError, check_name
from .common import def_lines, option_param

__all__ = ["module_context", "INIT"]

# parameter initialisers by name (an Op may choose one per parameter through `param_init`);
# `bound` is printed by the printer: 1/√fan_in
INIT = {
    "zeros": "torch.nn.init.zeros_({p})",
    "ones": "torch.nn.init.ones_({p})",
    "normal": "torch.nn.init.normal_({p}, mean=0.0, std=0.02)",
    "fan_in": "torch.nn.init.uniform_({p}, -{bound}, {bound})",
}


def module_context(op: Op, an, printer) -> dict:
    """The nn.Module wrapper: parameters by their PyTorch names, created from the sizes."""
    attr = dict(getattr(op, "module_params", None) or {})
    init = dict(getattr(op, "param_init", None) or {})
    unknown = sorted((set(attr) | set(init)) - {p.name for p in op.params})
    if unknown:
        raise CodegenError(
            f"op {op.name}: module_params/param_init name {unknown}, which are "
            f"not params ({[p.name for p in op.params]})"
        )
    sizes: list = []
    params = []
    for p in op.params:
        for dim in p.shape:
            for s in sorted(sp.sympify(dim).free_symbols, key=lambda s: s.name):
                if s not in sizes:
                    sizes.append(s)
        rows, cols = p.shape
        shape = [cols] if rows == 1 else [rows, cols]
        kind = init.get(p.name, "normal" if rows != 1 else "zeros")
        name = check_name(attr.get(p.name, p.name), "module parameter")
        if kind not in INIT:
            raise CodegenError(f"op {op.name}: param_init[{p.name}] = {kind!r}; known: {sorted(INIT)}")
        bound = printer.doprint(1 / sp.sqrt(shape[-1])) if kind == "fan_in" else ""
        params.append(
            {
                "array": p.name,
                "attr": name,
                "shape": "(" + ", ".join(printer.doprint(d) for d in shape) + ("," if len(shape) == 1 else "") + ")",
                "init": INIT[kind].format(p=f"self.{name}", bound=bound),
            }
        )
    inputs = [a.name for a in an.args if a.role == "input"]
    return {
        "sizes": [printer.doprint(s) for s in sizes],
        "params": params,
        "inputs": ", ".join(f"{i}: torch.Tensor" for i in inputs),
        "call": ", ".join(
            inputs + [f"self.{p['attr']}" for p in params] + [f"{o.name}=self.{o.name}" for o in op.options]
        ),
        "def_init": def_lines(
            "__init__",
            ["self"]
            + [f"{printer.doprint(s)}: int" for s in sizes]
            + ["*"]
            + [option_param(o) for o in op.options]
            + ["device: torch.device | str | None = None", "dtype: torch.dtype | None = None"],
            "None",
            indent="    ",
        ),
        "options": [o.name for o in op.options],
    }
