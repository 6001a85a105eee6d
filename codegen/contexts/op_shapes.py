"""The shape handling and the guards of `<op>_forward`/`_backward` (the same for every op; the
generated `_validate` module's helpers do the work): promotion of absent optional axes, the
empty-output path, broadcasting and its adjoint, the sizes and counts a denominator needs —
as Signature fields (signature.py) and the few lines that stay in the kernel."""

from __future__ import annotations

import sympy as sp

from derivations.language.arrays import Array, ColSum, Contract, Gather, MatMul, OneHot, RowMean, RowSum, T, Take
from derivations.language.ops import Op

from ..analysis import Analysis, Arg
from ..lowering import Lowering, stored_shape
from ..names import CodegenError
from .common import wrapped

__all__ = ["shape_context", "guard_lines", "guard_fields", "gloss"]


def _output_dims(out: Array, an: Analysis):
    """(leading?, dims) of an output's stored shape (after promotion), each dim a number or the
    (argument, axis) it is read off; None if the output is never empty."""
    dims = []
    for d in Arg(out, "input", out.integer_valued).storage_dims():
        d = sp.sympify(d)
        if d.is_Integer:
            dims.append(int(d))
        elif isinstance(d, sp.Symbol) and d in an.bindings:
            arg, idx = an.bindings[d]
            dims.append((arg.name, idx))
        else:
            raise CodegenError(
                f"op {an.op.name}: output {out.name} has the axis {d}, neither a number nor a size read off an argument"
            )
    leading = an.batched[out] and out.shape[0] != 1
    if not leading and all(isinstance(x, int) and x != 0 for x in dims):
        return None
    return leading, tuple(dims)


def shape_context(op: Op, an: Analysis) -> dict:
    """The shape handling of `<op>_forward`/`_backward`, from Op.optional_axes and
    Op.broadcast alone (the same for every op; `_validate`'s helpers do the work):

        x, layout = _v.checked(SIGNATURE, x=x, ...)   # absent optional axes: length-1 views;
                                                       # layout = (k, argument shapes, empty?)
        if layout[2]: return _v.nothing_to_compute(...) # every output empty: zeros, nothing computed
        y = _v.restored(y, layout)            # the outputs drop the promoted axes again
    backward:
        if layout[2]: return zeros            # the forward was empty: every gradient is 0
        dy = _v.promoted_like(dy, layout)
        dx = _v.sum_to(dx, layout[1][0])      # un-broadcast, un-promote (a view if only 1s)

    `signature` holds the Signature fields of the shape handling (codegen/contexts/signature.py).
    """
    batched = [a for a in an.args if a.batched]
    out_dims = [_output_dims(o, an) for o in op.outputs]
    vacuous = all(d is not None for d in out_dims)
    promote = [a for a in batched if a.optional]
    layout = vacuous or bool(promote) or op.broadcast
    arg_of_grad = {g.name: n for n, g in an.grad_of_arg.items()}
    restored = [bool(promote and an.batched[o]) for o in op.outputs]
    by_name = {a.name: a for a in an.args}
    grad_lines = [
        f"{g.name} = _v.sum_to({g.name}, layout[1][{i}])"
        for i, g in enumerate(op.grads)
        if (promote or op.broadcast) and by_name[arg_of_grad[g.name]].batched
    ]
    one = len(op.grads) == 1
    needs_batched = vacuous or bool(promote) or len(batched) > 1
    return {
        "layout": layout,
        "vacuous": vacuous,
        "promoted": [a.name for a in promote],
        "signature": {
            "batched": tuple((a.name, a.trailing) for a in batched) if needs_batched else (),
            "leading": ("broadcast" if op.broadcast else "same") if len(batched) > 1 else None,
            "layout": tuple(arg_of_grad[g.name] for g in op.grads) if layout else None,
            "promoted": tuple(a.name for a in promote),
            "outputs": tuple((leading, r, dims) for (leading, dims), r in zip(out_dims, restored)) if vacuous else (),
        },
        "restore_lines": [f"{o.name} = _v.restored({o.name}, layout)" for o, r in zip(op.outputs, restored) if r],
        "upstream_lines": [
            f"{u.name} = _v.promoted_like({u.name}, layout)"
            for u, o in zip(op.upstream, op.outputs)
            if promote and an.batched[o] and not _broadcast_restores(op, u)
        ],
        "grad_lines": grad_lines,
        "vacuous_return": f"_v.zero_grads(layout, {op.upstream[0].name})" + ("[0]" if one else ""),
        "shape_docs": _shape_docs(op, an, promote, vacuous),
    }


# nodes whose result depends on where an operand's leading axes are, not only on broadcasting:
# an upstream gradient read inside one needs its promoted axes back (`_v.promoted_like`)
_AXIS_BOUND = (MatMul, T, ColSum, Contract, Gather, OneHot, Take)


def _broadcast_restores(op: Op, u) -> bool:
    """Whether every backward line reads the upstream gradient `u` only elementwise or in a row
    reduction: then NumPy's and torch's broadcasting put back its absent leading axes where it
    meets a promoted array, and `_v.promoted_like` would compute nothing (`qed audit --text`
    found those lines equivalent). Read inside a product, a transpose or a column sum, it keeps
    its promotion."""
    for asg in op.backward:
        for node in sp.preorder_traversal(asg.expr):
            if isinstance(node, _AXIS_BOUND) and u in sp.sympify(node).free_symbols:
                return False
    return True


def _shape_docs(op: Op, an: Analysis, promote: list, vacuous: bool) -> list[str]:
    """What the forward accepts beyond the declared shapes, in words (its docstring)."""
    docs = []
    by_dims: dict = {}
    for a in promote:
        by_dims.setdefault(", ".join(sp.sstr(d) for d in a.storage_dims()[: a.optional]), []).append(a.name)
    outputs = any(an.batched[o] for o in op.outputs)
    for dims, names in by_dims.items():
        docs.append(
            f"{', '.join(names)} may lack {'the axes' if ',' in dims else 'the axis'} {dims} "
            "(read as length 1, as torch does)"
            + (f"; the outputs lack {'them' if ',' in dims else 'it'} too." if outputs else ".")
        )
    batched = [a.name for a in an.args if a.batched]
    if op.broadcast and len(batched) > 1:
        docs.append(
            f"The leading axes of {', '.join(batched)} broadcast against each other; each "
            "gradient is summed back to its argument's shape."
        )
    if vacuous:
        docs.append("Where every output is empty, nothing is computed: empty outputs, zero gradients.")
    for sym, why in an.zero_sizes:
        docs.append(f"Otherwise {sym.name} >= 1 is required (a denominator: {why}).")
    for _, why in an.data_denominators:
        docs.append(f"Refused where a denominator computed from the inputs is 0 ({why}).")
    return [line for d in docs for line in wrapped(d, 84)]


def guard_lines(an: Analysis, printer, constant: str) -> list[str]:
    """The denominators computed from the inputs, each computed and checked nonzero
    (`_v.nonzero_denominator`, its texts in the signature's `nonzero`) after the empty-output
    path; the sizes that denominators need are the signature's `nonzero_sizes`."""
    lines = []
    lowering = Lowering(printer, an.names)
    for k, (den, _why) in enumerate(an.data_denominators):
        name = lowering.fresh(den, "den")
        lines += ["# a denominator computed from the inputs: nowhere 0"]
        lines += lowering.assign(name, den, full=stored_shape(an.batched))
        temps = list(lowering.defined)
        lines += [f"_v.nonzero_denominator({constant}, {k}, {name})", "del " + ", ".join(temps + [name])]
    return lines


def guard_fields(an: Analysis) -> dict:
    """The Signature fields of the denominators' checks: the sizes (≥ 1) and the texts of the
    denominators computed from the inputs."""
    return {
        "nonzero_sizes": tuple(
            (sym.name, an.bindings[sym][0].name, an.bindings[sym][1], why) for sym, why in an.zero_sizes
        ),
        "nonzero": tuple((sp.sstr(den), gloss(den), why) for den, why in an.data_denominators),
    }


def gloss(den) -> str:
    """A denominator in words, for the message that says it is 0."""
    if isinstance(den, ColSum):
        return f"{sp.sstr(den.args[0])} summed over every row and leading axis: nothing is counted"
    if isinstance(den, (RowSum, RowMean)):
        return f"{sp.sstr(den.args[0])} summed over a row"
    return "computed from the inputs"
