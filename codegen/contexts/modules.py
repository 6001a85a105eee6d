"""The contexts of the generated modules that print no formula of their own: a file of tables
without an op, a composite (multi-head attention: calls of other kernels), the validation
module, the package `__init__`s."""

from __future__ import annotations

from .common import ARRAY_TYPE, backend_title, exports, import_lines, source_path, wrapped
from .table import table_context

__all__ = [
    "tables_module_context",
    "composite_context",
    "validate_context",
    "package_init_context",
    "model_ops_context",
    "PACKAGE_DOCS",
]

PACKAGE_DOCS = {
    None: "Generated code, printed from the proven formulas in `derivations/`: one module per op "
    "in\n`generated.numpy` and `generated.torch`.",
    "numpy": "Generated NumPy kernels, one module per op: `<op>_forward`, `<op>_backward`; constant\n"
    "tables (`TABLES`) in the module of their op or in a module of their own.",
    "torch": "Generated PyTorch kernels, one module per op: `<op>_forward`, `<op>_backward`,\n"
    "`<Op>Function` (autograd), `<op>` (functional) and, for ops with parameters, an "
    "`nn.Module`;\nconstant tables (`TABLES`) in the module of their op or in a module of their own.",
}


def tables_module_context(tables_in_file: list, backend: str) -> dict:
    """generated/<backend>/<file>.py for tables that have no op of their own."""
    ctx = [table_context(t, backend) for t in tables_in_file]
    return {
        "title": "; ".join(c["title"] for c in ctx),
        "backend_title": backend_title(backend),
        "tables": ctx,
        "import_lines": import_lines(set().union(*(c["modules"] for c in ctx))),
        "exports": exports([c["name"] for c in ctx]),
        "source": ", ".join(sorted({c["source"] for c in ctx})),
    }


def composite_context(comp, backend: str = "numpy") -> dict:
    """generated/<backend>/<composite>.py: the calls and reshapes that assemble other kernels
    (the template is the composite's own: Composite.template), and the printed lines of its
    loops over blocks (`Composite.loops`, codegen/contexts/loops.py)."""
    from .common import class_name
    from .loops import loop_context

    ctx = {
        "name": comp.name,
        "title": comp.title,
        "latex": comp.latex,
        "claims": wrapped(", ".join(comp.claims), 88),
        "kernels": comp.kernels,
        "source": source_path(comp.module),
        "class_name": class_name(comp.name),
        "modules": set(),
    }
    for key, (loop, rows, block) in zip(("forward", "backward"), comp.loops):
        ctx[key] = loop_context(loop, backend, rows)
        ctx["block"] = block
        ctx["modules"] |= ctx[key]["modules"]
    return ctx


def validate_context(backend: str) -> dict:
    """generated/<backend>/_validate.py: the argument checks and shape handling (no per-op content)."""
    return {
        "backend": backend,
        "source": "derivations/registry.py",
        "array_type": ARRAY_TYPE[backend],
        "dtype_type": "np.dtype" if backend == "numpy" else "torch.dtype",
    }


def package_init_context(key: str | None, names: list[str], table_files: list) -> dict:
    """generated/__init__.py (key None) and generated/<backend>/__init__.py: what is generated."""
    return {"doc": PACKAGE_DOCS[key], "ops": names, "tables": table_files, "source": "derivations/registry.py"}


def model_ops_context(ops) -> dict:
    """generated/model_ops.py: the ops by their role in the model (derivations' `model_role`),
    an FFN's weights with their axes named "model" (x's last axis) or "hidden"."""
    from derivations.language.ops import model_role

    ffns = []
    for op in ops:
        if model_role(op) == "ffn":
            d = op.inputs[0].shape[1]
            ffns.append(
                (op.name, [(w.name, tuple("model" if dim == d else "hidden" for dim in w.shape)) for w in op.params])
            )

    def row_op(op):  # each parameter by its module name, initialised ones or zeros; the options
        return (
            op.name,
            [(op.module_params.get(w.name, w.name), op.param_init.get(w.name, "zeros")) for w in op.params],
            [o.name for o in op.options],
        )

    norms = [row_op(op) for op in ops if model_role(op) == "norm"]
    # every norm is a q/k transform too (QK-norm); an op of that role only is one of nothing else
    qk_transforms = [row_op(op) for op in ops if model_role(op) in ("norm", "qk_transform")]
    scales = [
        (op.name, [(op.module_params.get(w.name, w.name), op.param_init.get(w.name, "ones")) for w in op.params])
        for op in ops
        if model_role(op) == "residual_scale"
    ]
    return {
        "activations": [op.name for op in ops if model_role(op) == "activation"],
        "ffns": ffns,
        "norms": norms,
        "qk_transforms": qk_transforms,
        "scales": scales,
        "losses": [op.name for op in ops if model_role(op) == "loss"],
        "source": "derivations/registry.py",
    }
