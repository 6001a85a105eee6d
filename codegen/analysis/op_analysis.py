"""`analyse(op)`: everything the generated functions need, derived from an op's declarations alone.

The argument kinds and storage shapes (storage.py), which sizes to bind from which axis, the
validation checks (which axes must agree, which ids index which axis), what the cache holds,
which values keep leading batch axes, the optional axes, the denominators that must not be 0
(denominators.py). Every error names the op and what is wrong with its declaration. Nothing
here is specific to one op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from derivations.language.arrays import Array
from derivations.language.ops import Op, index_bounds

from ..names import CodegenError, distinct_names, valid_name
from .denominators import denominator_guards
from .storage import Arg, arrays_in, keeps_leading_axes, size_symbols

__all__ = ["Analysis", "analyse"]


@dataclass
class Analysis:
    op: Op
    args: list[Arg]
    float_args: list[Arg]
    int_args: list[Arg]
    option_names: dict  # option symbol -> python name
    bindings: dict  # size symbol -> (Arg, storage axis)
    forward_sizes: list  # size symbols bound in the forward (sorted by name)
    cache_arrays: list[Array]
    cache_scalars: list[str]  # option and size names kept in the cache
    same_size: list  # (symbol, [(Arg, axis), ...]) with >= 2 entries
    size_is: list  # (Arg, axis, expr) for literal / composite declared sizes
    id_bounds: list  # (Arg, bound expr)
    batched: dict  # Array -> has leading axes (for shape comments)
    grad_of_arg: dict = field(default_factory=dict)  # differentiable arg name -> grad Array
    zero_sizes: list = field(default_factory=list)  # (size, why): must be >= 1 (a denominator)
    data_denominators: list = field(default_factory=list)  # (expr of inputs, why): checked != 0
    names: frozenset = frozenset()  # every array, size and option name


def analyse(op: Op) -> Analysis:
    where = f"op {op.name} ({op.module})"
    if not op.name.isidentifier() or op.name.startswith("_"):
        raise CodegenError(
            f"{where}: the name must be a Python identifier (it names files and functions) and may not start with '_'"
        )
    integer = set(op.integer_inputs)
    constant = set(op.constant_inputs)
    args = [Arg(a, "input", a in integer, a in constant) for a in op.inputs] + [
        Arg(a, "param", False) for a in op.params
    ]
    names = [a.name for a in args] + [o.name for o in op.options]
    for n in names:
        valid_name(where, n, "argument")
    if len(set(names)) != len(names):
        raise CodegenError(f"{where}: argument names repeat: {names}")
    for a in args:
        if a.integer != a.array.integer_valued and a.role == "input":
            raise CodegenError(f"{where}: {a.name} is integer-valued iff it is in integer_inputs")
    for a in args:
        if a.batched:
            a.optional = min(op.optional_axes, a.trailing)
    float_args = [a for a in args if not a.integer]
    int_args = [a for a in args if a.integer]
    option_symbols = {o.symbol: o.name for o in op.options if o.symbol is not None}
    option_names = {o.name for o in op.options}
    by_name = {a.name: a for a in args}

    # Which arrays each pass may read, in order; which symbols it uses.
    defined = set(op.inputs) | set(op.params)
    fwd_sizes: set = set()
    for asg in op.forward:
        missing = arrays_in(asg.expr) - defined
        if missing:
            raise CodegenError(
                f"{where}: forward line {asg.target.name} reads "
                f"{sorted(m.name for m in missing)} before they are defined"
            )
        if asg.when is not None and asg.when not in option_names:
            raise CodegenError(
                f"{where}: forward line {asg.target.name} is guarded by {asg.when!r}, which is not an option"
            )
        fwd_sizes |= size_symbols(asg.expr, option_symbols)
        defined.add(asg.target)
    upstream = op.upstream
    available = set(op.saved) | set(upstream)
    bwd_sizes: set = set()
    bwd_options: set = set()
    for asg in op.backward:
        missing = arrays_in(asg.expr) - available
        if missing:
            raise CodegenError(
                f"{where}: backward line {asg.target.name} reads "
                f"{sorted(m.name for m in missing)}, which are neither saved, "
                "upstream gradients, nor computed earlier in the backward"
            )
        if asg.when is not None:
            if asg.when not in option_names:
                raise CodegenError(
                    f"{where}: backward line {asg.target.name} is guarded by {asg.when!r}, which is not an option"
                )
            bwd_options.add(asg.when)
        bwd_sizes |= size_symbols(asg.expr, option_symbols)
        bwd_options |= {option_symbols[s] for s in sp.sympify(asg.expr).free_symbols if s in option_symbols}
        available.add(asg.target)
    for g in op.grads:
        if g not in available:
            raise CodegenError(f"{where}: gradient {g.name} is never computed by the backward")

    # Where every size can be read from: the op's own choice first, then every declared axis.
    occurrences: dict = {}
    size_is = []
    for a in args:
        for ax in (0, 1):
            idx = a.axis(ax)
            if idx is None:
                continue
            dim = a.array.shape[ax]
            if isinstance(dim, sp.Symbol):
                occurrences.setdefault(dim, []).append((a, idx))
            else:
                size_is.append((a, idx, dim))
    bindings = {}
    for sym, (arr, ax) in op.sizes.items():
        if arr.name not in by_name or by_name[arr.name].array != arr:
            raise CodegenError(f"{where}: sizes[{sym}] reads {arr.name}, which is not an argument")
        idx = by_name[arr.name].axis(ax)
        if idx is None:
            raise CodegenError(f"{where}: sizes[{sym}] reads axis {ax} of {arr.name}, which is not stored")
        bindings[sym] = (by_name[arr.name], idx)
    for sym, occ in occurrences.items():
        bindings.setdefault(sym, occ[0])
    same_size = []
    for sym, occ in sorted(occurrences.items(), key=lambda kv: kv[0].name):
        ref = bindings[sym]
        rest = [o for o in occ if not (o[0] is ref[0] and o[1] == ref[1])]
        if rest:
            same_size.append((sym, [ref] + rest))

    # Integer ids: the sizes that bound them, from the nodes that index with them (the rule the
    # proofs read too: `index_bounds`)
    int_arrays = {a.array: a for a in int_args}
    id_bounds = [(int_arrays[ids], bound) for ids, bound in index_bounds(op, op.forward + op.backward)]

    needed = set(fwd_sizes) | set(bwd_sizes)
    for _, _, dim in size_is:
        needed |= size_symbols(dim, option_symbols)
    for _, bound in id_bounds:
        needed |= size_symbols(bound, option_symbols)
    unbound = sorted((s for s in needed if s not in bindings), key=lambda s: s.name)
    if unbound:
        raise CodegenError(
            f"{where}: sizes {[s.name for s in unbound]} are used but no argument "
            "declares them (add them to Op.sizes or to an argument's shape)"
        )

    flags = {a.array: a.batched for a in args}
    for asg in op.forward:
        flags[asg.target] = keeps_leading_axes(asg.expr, flags)
    for up, out in zip(upstream, op.outputs):
        flags[up] = flags[out]
    for asg in op.backward:
        flags[asg.target] = keeps_leading_axes(asg.expr, flags)

    grad_of_arg = {}
    diff_args = [a for a in float_args if a.differentiable]
    diff_names = [a.name for a in diff_args]
    for a, g in zip(diff_args, op.grads):
        grad_of_arg[a.name] = g
    by_grad = {g.name: g for g in op.grads}
    if all(("d" + n) in by_grad for n in diff_names):  # match d<name> when the names allow
        grad_of_arg = {n: by_grad["d" + n] for n in diff_names}
    for a in float_args:
        if a.constant and ("d" + a.name) in by_grad:
            raise CodegenError(f"{where}: {a.name} is a constant input but the op lists the gradient d{a.name}")

    for a in diff_args:
        g = grad_of_arg[a.name]
        if g.shape != a.array.shape:
            raise CodegenError(f"{where}: gradient {g.name} is declared {g.shape} but {a.name} is {a.array.shape}")
        if flags[g] != a.batched:
            raise CodegenError(
                f"{where}: gradient {g.name} "
                + (
                    "has no leading batch axes (ColSum/Contract sum over them) but the input "
                    f"{a.name} has them; declare {a.name} as a param (shared by every batch "
                    "element, stored exactly 2-D) or compute the gradient per batch element"
                    if a.batched
                    else f"keeps leading batch axes but {a.name} is a param (shared, stored exactly "
                    f"{a.trailing}-D); sum them with ColSum/Contract"
                )
            )
    # One name, one thing: an array, a size and an option may not share a Python name.
    things: dict = {}
    every = (
        list(op.inputs)
        + list(op.params)
        + list(upstream)
        + list(op.grads)
        + [asg.target for asg in op.forward + op.backward]
    )
    for asg in op.forward + op.backward:
        every += sorted(arrays_in(asg.expr), key=lambda a: a.name)
    for arr in every:
        things.setdefault(arr.name, set()).add(("array", arr))
    for sym in needed:
        things.setdefault(sym.name, set()).add(("size", sym))
    for o in op.options:
        things.setdefault(o.name, set()).add(("option", o.name))
    distinct_names(
        where,
        {
            nm: sorted(f"{k} {nm}{tuple(v.shape)}" if k == "array" else f"{k} {nm}" for k, v in what)
            for nm, what in things.items()
        },
        what="name",
    )

    _check_optional_axes(op, args, flags, where)
    cache_scalars = [o.name for o in op.options if o.name in bwd_options] + sorted(s.name for s in bwd_sizes)
    zero_sizes, data_dens = denominator_guards(op, set(option_symbols), where)
    return Analysis(
        op=op,
        args=args,
        float_args=float_args,
        int_args=int_args,
        option_names=option_symbols,
        bindings=bindings,
        forward_sizes=sorted(needed, key=lambda s: s.name),
        cache_arrays=list(op.saved),
        cache_scalars=cache_scalars,
        same_size=same_size,
        size_is=size_is,
        id_bounds=id_bounds,
        batched=flags,
        grad_of_arg=grad_of_arg,
        zero_sizes=zero_sizes,
        data_denominators=data_dens,
        names=frozenset(things),
    )


def _check_optional_axes(op: Op, args: list, flags: dict, where: str) -> None:
    """The outputs drop the axes that promotion put in front of the inputs (`_v.restored`): so
    each batched output must begin with the optional axes of every batched input (softmax's
    y (r, n) with x (r, n); linear's y (r, n_out) with x (r, n_in))."""
    if not op.optional_axes:
        return
    batched = [a for a in args if a.batched]
    for out in op.outputs:
        if not flags[out]:
            continue
        dims = Arg(out, "input", out.integer_valued).storage_dims()
        for a in batched:
            lead = a.storage_dims()[: a.optional]
            if tuple(dims[: len(lead)]) != tuple(lead):
                raise CodegenError(
                    f"{where}: optional_axes={op.optional_axes}: output {out.name} "
                    f"{tuple(out.shape)} does not begin with the optional axes "
                    f"{tuple(lead)} of {a.name} {tuple(a.array.shape)}"
                )
