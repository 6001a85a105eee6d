"""The context of `generated/<backend>/<op>.py`: an op's forward and backward functions (and,
for torch, its autograd Function, functional form and nn.Module), all text already printed.

From the analysis (codegen/analysis): the argument checks as one `SIGNATURE` constant and one
`_v.checked` call (signature.py), the size bindings, the shape handling (op_shapes.py); from the
lowering: the forward and the backward bodies; from the printers: every shape and size as text.
The template only lays these out.
"""

from __future__ import annotations

from derivations.language.ops import Op

from ..analysis import Arg, analyse
from ..lowering import lower_body, shape_comment
from ..names import CodegenError, PrinterError
from ..printers import printer_for
from .common import (
    ARRAY_TYPE,
    class_name,
    coercion,
    def_lines,
    docstring_text,
    exports,
    import_lines,
    option_default,
    option_doc,
    option_param,
    returns_type,
    source_path,
    tuple_text,
    wrapped,
)
from .op_shapes import guard_fields, guard_lines, shape_context
from .signature import checked_lines, option_fields, signature_lines, size_value
from .table import table_context
from .torch_module import module_context

__all__ = ["op_context"]


def op_context(op: Op, backend: str, tables=()) -> dict:
    """Everything a template needs for one op and one backend (all text already printed);
    `tables` are the Tables printed into the same file (Table.file == op.name)."""
    an = analyse(op)
    matrices = frozenset(a.array for a in an.args if a.role == "param" and not a.row_vector)
    fwd = printer_for(backend, names=an.option_names, matrices=matrices)
    name = op.name

    def declared(a: Arg):
        return (a.name, a.ndim[0], a.ndim[1], a.storage(fwd))

    shapes = shape_context(op, an)
    size_lines = [f"{fwd.doprint(s)} = {an.bindings[s][0].name}.shape[{an.bindings[s][1]}]" for s in an.forward_sizes]
    where = f"op {name} ({op.module})"
    fields = {
        "options": option_fields(op.options),
        "floats": tuple(declared(a) for a in an.float_args),
        "integers": tuple(declared(a) for a in an.int_args),
        "batched": shapes["signature"]["batched"],
        "leading": shapes["signature"]["leading"],
        "same_size": tuple((sym.name, *((a.name, ax) for a, ax in occ)) for sym, occ in an.same_size),
        "layout": shapes["signature"]["layout"],
        "promoted": shapes["signature"]["promoted"],
        "sizes": tuple((s.name, an.bindings[s][0].name, an.bindings[s][1]) for s in an.forward_sizes)
        if an.size_is or an.id_bounds
        else (),  # what size_is, in_range read
        "size_is": tuple((a.name, ax, size_value(dim, where), fwd.doprint(dim)) for a, ax, dim in an.size_is),
        "in_range": tuple((a.name, size_value(bound, where), fwd.doprint(bound)) for a, bound in an.id_bounds),
        "outputs": shapes["signature"]["outputs"],
        **guard_fields(an),
    }

    try:
        forward_lines = lower_body(
            op.forward,
            fwd,
            an.batched,
            keep=set(op.outputs) | set(op.saved),
            taken=an.names,
            broadcast=((), ()) if op.broadcast else None,
        )
        bwd = printer_for(backend, names=an.option_names, matrices=matrices)
        backward_lines = lower_body(
            op.backward,
            bwd,
            an.batched,
            keep=set(op.grads),
            taken=an.names,
            broadcast=(tuple(op.upstream), op.forward) if op.broadcast else None,
        )
        guard = printer_for(backend, names=an.option_names, matrices=matrices)
        guards = guard_lines(an, guard, "SIGNATURE")
    except PrinterError as e:
        raise CodegenError(f"op {name} ({op.module}), {backend}: {e}") from None
    fwd.modules |= guard.modules
    fwd.uses_dtype = fwd.uses_dtype or guard.uses_dtype

    if fwd.uses_dtype and not an.float_args:
        raise CodegenError(f"op {name}: the forward needs a float dtype but has no float argument")
    backward_pre = []
    if bwd.uses_dtype:
        backward_pre.append(f"dtype = d{op.outputs[0].name}.dtype")

    module = None
    if op.params:
        module = module_context(op, an, fwd)
    table_ctx = [table_context(t, backend) for t in tables]
    used = fwd.modules | bwd.modules | ({"torch"} if backend == "torch" else {"np"})  # np: the annotations
    for t in table_ctx:
        used |= t["modules"]
    if backend == "torch" and module and any("math." in p["init"] for p in module["params"]):
        used.add("math")

    cache_names = [a.name for a in an.cache_arrays] + an.cache_scalars + (["layout"] if shapes["layout"] else [])
    returns = shapes["promoted"] + (["dtype"] if fwd.uses_dtype else []) + (["layout"] if shapes["layout"] else [])
    outputs = [o.name for o in op.outputs]
    upstream = [u.name for u in op.upstream]
    grads = [g.name for g in op.grads]
    options = [
        {"name": o.name, "default": option_default(o), "doc": o.doc, "coerce": coercion(o, op.name)} for o in op.options
    ]
    arg_docs = []
    for a in an.args:
        kind = (
            "integer ids"
            if a.integer
            else ("parameter" if a.role == "param" else "constant input (no gradient)" if a.constant else "input")
        )
        arg_docs.append(f"{a.name}: {a.storage(fwd)} {kind}")
    for o in op.options:
        arg_docs.extend(option_doc(o))

    # torch extras
    apply_args = [a.name for a in an.args] + [o.name for o in op.options]
    grad_returns = []
    for a in an.args:
        grad_returns.append(an.grad_of_arg[a.name].name if a.name in an.grad_of_arg else "None")
    grad_returns += ["None"] * len(op.options)

    A = ARRAY_TYPE[backend]
    params = [f"{a.name}: {A}" for a in an.args] + (["*"] + [option_param(o) for o in op.options] if options else [])
    apply_params = [f"{a.name}: {A}" for a in an.args] + [option_param(o).split(" = ")[0] for o in op.options]
    outputs_type = returns_type([A] * len(outputs))
    grads_type = returns_type([A] * len(grads))

    latex = docstring_text(f"op {name}", op.latex, "latex")
    return {
        "op": op,
        "name": name,
        "title": op.title,
        "latex": wrapped(latex, 96),
        "claims": wrapped(", ".join(_op_claims(op)) + f" ({source_path(op.module)})."),
        "cache_doc": wrapped("Cache: " + op.cache_doc),
        "saved_docs": [f"{a.name} {shape_comment(a, an.batched.get(a, True), fwd)}" for a in an.cache_arrays],
        "cache_scalars": an.cache_scalars,
        "source": source_path(op.module),
        "import_lines": import_lines(used),
        "def_forward": def_lines(f"{name}_forward", params, returns_type([outputs_type, "tuple"])),
        "def_backward": def_lines(f"{name}_backward", [f"{u}: {A}" for u in upstream] + ["cache: tuple"], grads_type),
        "def_function": def_lines(name, params, outputs_type),
        "def_apply_forward": def_lines(
            "forward", ["ctx: torch.autograd.function.FunctionCtx"] + apply_params, outputs_type, indent="    "
        ),
        "def_apply_backward": def_lines(
            "backward",
            ["ctx: torch.autograd.function.FunctionCtx"] + [f"{u}: {A}" for u in upstream],
            returns_type(["None" if g == "None" else A for g in grad_returns]),
            indent="    ",
        ),
        "outputs_type": outputs_type,
        "call_kwargs": ", ".join([a.name for a in an.args] + [f"{o.name}={o.name}" for o in op.options]),
        "arg_docs": arg_docs,
        "coercions": [o["coerce"] for o in options if o["coerce"]],
        "signature_lines": signature_lines(
            "SIGNATURE",
            name,
            {**fields, "cached": len(cache_names) - 1 if shapes["vacuous"] else 0, "returns": tuple(returns)},
        ),
        "checked": checked_lines("SIGNATURE", returns, [a.name for a in an.args] + [o.name for o in op.options]),
        "size_lines": size_lines,
        "guard_lines": guards,
        "like": an.float_args[0].name if an.float_args else "",
        **{k: v for k, v in shapes.items() if k != "signature"},
        "forward_lines": forward_lines,
        "backward_lines": backward_lines,
        "backward_pre": backward_pre,
        "outputs": outputs,
        "outputs_target": outputs[0] if len(outputs) == 1 else tuple_text(outputs),
        "outputs_return": ", ".join(outputs),
        "output_docs": [f"{o.name} {shape_comment(o, an.batched[o], fwd)}" for o in op.outputs],
        "cache_tuple": tuple_text(cache_names),
        "n_cache_arrays": len(an.cache_arrays),
        "upstream": upstream,
        "grads": grads,
        "grads_target": ", ".join(grads),
        "grad_docs": [f"{g.name} {shape_comment(g, an.batched[g], fwd)}" for g in op.grads],
        "camel": class_name(name),
        "apply_args": ", ".join(apply_args),
        "grad_returns": ", ".join(grad_returns),
        "module": module,
        "exports": exports(
            [f"{name}_forward", f"{name}_backward"]
            + (
                [f"{class_name(name)}Function", name] + ([class_name(name)] if module else [])
                if backend == "torch"
                else []
            )
            + [t["name"] for t in table_ctx]
        ),
        "tables": table_ctx,
    }


def _op_claims(op: Op) -> list[str]:
    """The claims generated from the op's specification (they prove these very lines), then the
    hand-written claims of the derivation steps that the op cites."""
    from derivations.registry import generated_claim_ids

    gen = generated_claim_ids(op)
    return gen + [c for c in op.claims if c not in gen]
