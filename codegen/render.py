"""From Ops to files: analyse each op once, print its formulas, lay them out with Jinja.

`analyse(op)` derives everything the templates need from the op's declarations alone (argument
kinds and storage shapes, which sizes to bind from which axis, the validation checks, what the
cache holds); the printers print the forward and backward assignments; the templates only lay
the pieces out. Nothing here or in the templates is specific to one op.

Storage conventions (the shapes the generated code accepts), from an Array's declared (rows, cols):

* float array, rows != 1: `(..., rows, cols)` for an input (leading batch/head axes), exactly
  `(rows, cols)` for a parameter; axis 0 is `shape[-2]`, axis 1 is `shape[-1]`;
* row vector, rows == 1: 1-D `(cols,)`; axis 1 is `shape[-1]`;
* integer ids, declared `(T, 1)`: `(..., T)`; axis 0 is `shape[-1]`.
"""
from __future__ import annotations

import hashlib
import json
import textwrap
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import sympy as sp

from derivations.language.arrays import (Array, CausalMask, ColSum, Contract, Gather, MatMul, OneHot, RowMax, RowMean,
                               RowSum, T, Take, shape_of)
from derivations.language.arrays import DOCUMENT_NODES
from derivations.language.ops import Op

from .printers import PrinterError, check_name, formula_comment, printer_for

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = Path(__file__).resolve().parent / "templates"
BACKENDS = ("numpy", "torch")
HASH_PREFIX = "# content-hash: sha256:"
MODULE_IMPORTS = {"math": "import math", "np": "import numpy as np", "_special": "from . import _special",
                  "scipy.special": "import scipy.special", "torch": "import torch"}


class CodegenError(ValueError):
    """An op cannot be generated (an undefined array, an unbound size, ...)."""


# ----------------------------------------------------------------------------------- analysis
@dataclass
class Arg:
    """One positional argument of `<op>_forward`."""

    array: Array
    role: str                    # "input" or "param"
    integer: bool
    constant: bool = False       # a float input without a gradient (Op.constant_inputs)
    optional: int = 0            # leading declared axes that may be absent (Op.optional_axes)

    @property
    def differentiable(self) -> bool:
        return not self.integer and not self.constant

    @property
    def name(self) -> str:
        return self.array.name

    @property
    def row_vector(self) -> bool:
        return not self.integer and self.array.shape[0] == 1

    @property
    def batched(self) -> bool:
        """Has leading batch/head axes (inputs only; params and row vectors are exact)."""
        return self.role == "input" and not self.row_vector

    @property
    def trailing(self) -> int:
        """How many trailing axes the declared shape occupies in storage."""
        return 1 if self.integer or self.row_vector else 2

    @property
    def ndim(self) -> tuple[int, bool]:
        """(number of axes, exact?) that the stored array must have (at least, for an input:
        its optional axes may be absent)."""
        return self.trailing - self.optional, not self.batched

    def storage_dims(self) -> tuple:
        """The declared sizes of the stored trailing axes, in storage order."""
        rows, cols = self.array.shape
        return (rows,) if self.integer else ((cols,) if self.row_vector else (rows, cols))

    def axis(self, a: int) -> int | None:
        """Storage index (negative) of declared axis `a`, or None if it is not stored."""
        return storage_axis(self.array, a, self.integer)

    def storage(self, printer) -> str:
        return storage_text(self.array, self.integer, self.batched, printer)


def storage_axis(arr: Array, a: int, integer: bool) -> int | None:
    rows, cols = arr.shape
    if integer:
        if cols != 1:
            raise CodegenError(f"integer array {arr.name} must be declared (T, 1), got {arr.shape}")
        return -1 if a == 0 else None
    if rows == 1:
        return -1 if a == 1 else None
    return -2 if a == 0 else -1


def storage_text(arr: Array, integer: bool, batched: bool, printer) -> str:
    rows, cols = arr.shape
    dims = [rows] if integer else ([cols] if rows == 1 else [rows, cols])
    text = [printer.doprint(d) for d in dims]
    if batched:
        text.insert(0, "...")
    return "(" + ", ".join(text) + ("," if len(text) == 1 else "") + ")"


def storage_shape(arr: Array, integer: bool, batched: bool, sizes: dict,
                  batch: tuple = (2,)) -> tuple:
    """The concrete stored shape of `arr` at `sizes` (Symbol or name -> int): for examples."""
    subs = {(sp.Symbol(k, integer=True, positive=True) if isinstance(k, str) else k): v
            for k, v in sizes.items()}
    row_vector = sp.sympify(arr.shape[0]) == 1          # declared (1, n), whatever n is
    rows, cols = (int(sp.sympify(d).xreplace(subs)) for d in arr.shape)
    dims = (rows,) if integer else ((cols,) if row_vector else (rows, cols))
    return (tuple(batch) if batched else ()) + dims


@dataclass
class Analysis:
    op: Op
    args: list[Arg]
    float_args: list[Arg]
    int_args: list[Arg]
    option_names: dict               # option symbol -> python name
    bindings: dict                   # size symbol -> (Arg, storage axis)
    forward_sizes: list              # size symbols bound in the forward (sorted by name)
    cache_arrays: list[Array]
    cache_scalars: list[str]         # option and size names kept in the cache
    same_size: list                  # (symbol, [(Arg, axis), ...]) with >= 2 entries
    size_is: list                    # (Arg, axis, expr) for literal / composite declared sizes
    id_bounds: list                  # (Arg, bound expr)
    batched: dict                    # Array -> has leading axes (for shape comments)
    grad_of_arg: dict = field(default_factory=dict)   # differentiable arg name -> grad Array
    zero_sizes: list = field(default_factory=list)    # (size, why): must be >= 1 (a denominator)
    data_denominators: list = field(default_factory=list)   # (expr of inputs, why): checked != 0


def _size_symbols(expr, option_symbols) -> set:
    return {s for s in sp.sympify(expr).free_symbols
            if not isinstance(s, Array) and s not in option_symbols}


def _arrays(expr) -> set:
    return {s for s in sp.sympify(expr).free_symbols if isinstance(s, Array)}


def _batched(expr, flags: dict) -> bool:
    """Whether a value keeps leading axes: any batched Array inside, outside ColSum/Contract."""
    expr = sp.sympify(expr)
    if isinstance(expr, Array):
        return flags.get(expr, True)
    if isinstance(expr, (ColSum, Contract)):
        return False
    return any(_batched(a, flags) for a in expr.args)


def analyse(op: Op) -> Analysis:
    where = f"op {op.name} ({op.module})"
    if not op.name.isidentifier() or op.name.startswith("_"):
        raise CodegenError(f"{where}: the name must be a Python identifier (it names files "
                           "and functions) and may not start with '_'")
    integer = set(op.integer_inputs)
    constant = set(op.constant_inputs)
    args = [Arg(a, "input", a in integer, a in constant) for a in op.inputs] + \
           [Arg(a, "param", False) for a in op.params]
    names = [a.name for a in args] + [o.name for o in op.options]
    for n in names:
        try:
            check_name(n, "argument")
        except PrinterError as e:
            raise CodegenError(f"{where}: {e}") from None
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
        missing = _arrays(asg.expr) - defined
        if missing:
            raise CodegenError(f"{where}: forward line {asg.target.name} reads "
                               f"{sorted(m.name for m in missing)} before they are defined")
        if asg.when is not None and asg.when not in option_names:
            raise CodegenError(f"{where}: forward line {asg.target.name} is guarded by "
                               f"{asg.when!r}, which is not an option")
        fwd_sizes |= _size_symbols(asg.expr, option_symbols)
        defined.add(asg.target)
    upstream = op.upstream
    available = set(op.saved) | set(upstream)
    bwd_sizes: set = set()
    bwd_options: set = set()
    for asg in op.backward:
        missing = _arrays(asg.expr) - available
        if missing:
            raise CodegenError(f"{where}: backward line {asg.target.name} reads "
                               f"{sorted(m.name for m in missing)}, which are neither saved, "
                               "upstream gradients, nor computed earlier in the backward")
        if asg.when is not None:
            if asg.when not in option_names:
                raise CodegenError(f"{where}: backward line {asg.target.name} is guarded by "
                                   f"{asg.when!r}, which is not an option")
            bwd_options.add(asg.when)
        bwd_sizes |= _size_symbols(asg.expr, option_symbols)
        bwd_options |= {option_symbols[s] for s in sp.sympify(asg.expr).free_symbols
                        if s in option_symbols}
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
            raise CodegenError(f"{where}: sizes[{sym}] reads axis {ax} of {arr.name}, which is "
                               "not stored")
        bindings[sym] = (by_name[arr.name], idx)
    for sym, occ in occurrences.items():
        bindings.setdefault(sym, occ[0])
    same_size = []
    for sym, occ in sorted(occurrences.items(), key=lambda kv: kv[0].name):
        ref = bindings[sym]
        rest = [o for o in occ if not (o[0] is ref[0] and o[1] == ref[1])]
        if rest:
            same_size.append((sym, [ref] + rest))

    # Integer ids: the sizes that bound them, from the nodes that index with them.
    id_bounds = []
    int_arrays = {a.array: a for a in int_args}
    for asg in op.forward + op.backward:
        for node in sp.preorder_traversal(asg.expr):
            bound = None
            if isinstance(node, Gather) and node.args[1] in int_arrays:
                bound, ids = shape_of(node.args[0])[0], node.args[1]
            elif isinstance(node, OneHot) and node.args[0] in int_arrays:
                bound, ids = node.args[1], node.args[0]
            elif isinstance(node, Take) and node.args[1] in int_arrays:
                bound, ids = shape_of(node.args[0])[1], node.args[1]
            if bound is not None and (int_arrays[ids], bound) not in id_bounds:
                id_bounds.append((int_arrays[ids], bound))

    needed = set(fwd_sizes) | set(bwd_sizes)
    for _, _, dim in size_is:
        needed |= _size_symbols(dim, option_symbols)
    for _, bound in id_bounds:
        needed |= _size_symbols(bound, option_symbols)
    unbound = sorted((s for s in needed if s not in bindings), key=lambda s: s.name)
    if unbound:
        raise CodegenError(f"{where}: sizes {[s.name for s in unbound]} are used but no argument "
                           "declares them (add them to Op.sizes or to an argument's shape)")

    flags = {a.array: a.batched for a in args}
    for asg in op.forward:
        flags[asg.target] = _batched(asg.expr, flags)
    for up, out in zip(upstream, op.outputs):
        flags[up] = flags[out]
    for asg in op.backward:
        flags[asg.target] = _batched(asg.expr, flags)

    grad_of_arg = {}
    diff_args = [a for a in float_args if a.differentiable]
    diff_names = [a.name for a in diff_args]
    for a, g in zip(diff_args, op.grads):
        grad_of_arg[a.name] = g
    by_grad = {g.name: g for g in op.grads}
    if all(("d" + n) in by_grad for n in diff_names):   # match d<name> when the names allow
        grad_of_arg = {n: by_grad["d" + n] for n in diff_names}
    for a in float_args:
        if a.constant and ("d" + a.name) in by_grad:
            raise CodegenError(f"{where}: {a.name} is a constant input but the op lists the "
                               f"gradient d{a.name}")

    for a in diff_args:
        g = grad_of_arg[a.name]
        if g.shape != a.array.shape:
            raise CodegenError(f"{where}: gradient {g.name} is declared {g.shape} but "
                               f"{a.name} is {a.array.shape}")
        if flags[g] != a.batched:
            raise CodegenError(
                f"{where}: gradient {g.name} " +
                ("has no leading batch axes (ColSum/Contract sum over them) but the input "
                 f"{a.name} has them; declare {a.name} as a param (shared by every batch "
                 "element, stored exactly 2-D) or compute the gradient per batch element"
                 if a.batched else
                 f"keeps leading batch axes but {a.name} is a param (shared, stored exactly "
                 f"{a.trailing}-D); sum them with ColSum/Contract"))
    # One name, one thing: an array, a size and an option may not share a Python name.
    things: dict = {}
    every = list(op.inputs) + list(op.params) + list(upstream) + list(op.grads) + \
        [asg.target for asg in op.forward + op.backward]
    for asg in op.forward + op.backward:
        every += sorted(_arrays(asg.expr), key=lambda a: a.name)
    for arr in every:
        things.setdefault(arr.name, set()).add(("array", arr))
    for sym in needed:
        things.setdefault(sym.name, set()).add(("size", sym))
    for o in op.options:
        things.setdefault(o.name, set()).add(("option", o.name))
    for nm, what in sorted(things.items()):
        if len(what) > 1:
            kinds = sorted(f"{k} {nm}{tuple(v.shape)}" if k == "array" else f"{k} {nm}"
                           for k, v in what)
            raise CodegenError(f"{where}: the name {nm!r} is used for different things: "
                               + "; ".join(kinds))
        try:
            check_name(nm, "name")
        except PrinterError as e:
            raise CodegenError(f"{where}: {e}") from None

    _check_optional_axes(op, args, flags, where)
    cache_scalars = [o.name for o in op.options if o.name in bwd_options] + \
                    sorted(s.name for s in bwd_sizes)
    zero_sizes, data_dens = _denominator_guards(op, set(option_symbols), where)
    return Analysis(op=op, args=args, float_args=float_args, int_args=int_args,
                    option_names=option_symbols, bindings=bindings,
                    forward_sizes=sorted(needed, key=lambda s: s.name),
                    cache_arrays=list(op.saved), cache_scalars=cache_scalars,
                    same_size=same_size, size_is=size_is, id_bounds=id_bounds, batched=flags,
                    grad_of_arg=grad_of_arg, zero_sizes=zero_sizes, data_denominators=data_dens)


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
            lead = a.storage_dims()[:a.optional]
            if tuple(dims[:len(lead)]) != tuple(lead):
                raise CodegenError(f"{where}: optional_axes={op.optional_axes}: output {out.name} "
                                   f"{tuple(out.shape)} does not begin with the optional axes "
                                   f"{tuple(lead)} of {a.name} {tuple(a.array.shape)}")


# ------------------------------------------------------------------ what must not be 0
# Every denominator of the printed formulas (a negative power's base, a log's argument, a mean's
# row length) is sorted into one of three kinds, from the expressions alone:
#   * it is 0 when a size is 0 (1/√d_k; a row sum over n keys; a mean over n): that size must be
#     ≥ 1, checked from the shapes (`_v.nonzero_size`), unless every output is empty (then the
#     kernel computes nothing);
#   * it is provably positive (a sum of exps; √(σ² + ε) with ε > 0, the option's domain): nothing;
#   * neither (Σ mask, a count of the inputs): it is computed from the inputs and checked at run
#     time (`_v.nonzero`).
_SUMS = {RowSum: 1, RowMean: 1, RowMax: 1, ColSum: 0, Contract: 0}


def _denominators(expr) -> list:
    """The denominators of `expr`: bases of negative powers, log arguments, each mean's count;
    as (denominator, the node that divides by it or takes its log, as text)."""
    out = []
    for node in sp.preorder_traversal(sp.sympify(expr)):
        if isinstance(node, sp.Pow) and node.exp.is_negative:
            out.append((node.base, sp.sstr(node)))
        elif isinstance(node, sp.log):
            out.append((node.args[0], sp.sstr(node)))
        elif isinstance(node, RowMean):                 # RowMean(A) = RowSum(A)/cols
            out.append((shape_of(node.args[0])[1], sp.sstr(node)))
    return out


def _zero_when(den, options: set) -> set:
    """The sizes s such that `den` is 0 when s is 0: a size itself, a sum over an axis of length
    s, a product with such a factor, a sum of terms that all are."""
    den = sp.sympify(den)
    if isinstance(den, Array):
        return set()
    if isinstance(den, sp.Symbol):
        return {den} if den not in options else set()
    if type(den) in _SUMS:
        return _size_symbols(shape_of(den.args[0])[_SUMS[type(den)]], options)
    if isinstance(den, MatMul):
        return _size_symbols(shape_of(den.args[0])[1], options)
    if isinstance(den, sp.Mul):
        return set().union(*(_zero_when(a, options) for a in den.args))
    if isinstance(den, sp.Pow) and den.exp.is_positive:
        return _zero_when(den.base, options)
    if isinstance(den, sp.Add):
        return set.intersection(*(_zero_when(a, options) for a in den.args))
    return set()


def _sign(expr, positive_symbols: set, memo: dict) -> str | None:
    """"+" if `expr` is provably > 0, "0+" if provably ≥ 0, else None (for every value of the
    inputs, with every size ≥ 1 and every option in its domain). Intermediates are expanded."""
    if expr in memo:
        return memo[expr]
    e, out = expr, None
    if not e.free_symbols:                                 # 2, π, √2: SymPy decides
        out = "+" if e.is_positive else "0+" if e.is_zero else None
    elif isinstance(e, Array):
        out = None                                         # an input's values: anything
    elif isinstance(e, sp.Symbol):
        out = "+" if e in positive_symbols else "0+" if e.is_nonnegative else None
    elif isinstance(e, (sp.exp,)) or isinstance(e, DOCUMENT_NODES):
        out = "+"
    elif isinstance(e, sp.Pow):
        b = _sign(e.base, positive_symbols, memo)
        out = b if b == "+" else "0+" if (b == "0+" and e.exp.is_positive) or \
            (e.exp.is_integer and e.exp.is_even) else None
    elif isinstance(e, (sp.Add, sp.Mul, MatMul, Contract)) or type(e) in _SUMS:
        signs = [_sign(a, positive_symbols, memo) for a in e.args]
        if all(x is not None for x in signs):
            strict = all(x == "+" for x in signs) if not isinstance(e, sp.Add) else "+" in signs
            out = "+" if strict else "0+"
    elif isinstance(e, sp.Max):
        signs = [_sign(a, positive_symbols, memo) for a in e.args]
        out = "+" if "+" in signs else "0+" if "0+" in signs else None
    memo[expr] = out
    return out


def _expanded(expr, env: dict, memo: dict):
    """`expr` with every intermediate array replaced by its definition, recursively; a causal
    mask read as its argument (no row is fully masked: key 0 is always seen, attention.causal)."""
    expr = sp.sympify(expr)
    if expr in memo:
        return memo[expr]
    if isinstance(expr, Array):
        out = _expanded(env[expr], env, memo) if expr in env else expr
    elif isinstance(expr, CausalMask):
        out = _expanded(expr.args[0], env, memo)
    elif expr.args:
        out = expr.func(*[_expanded(a, env, memo) for a in expr.args])
    else:
        out = expr
    memo[expr] = out
    return out


def _denominator_guards(op: Op, options: set, where: str):
    """(zero_sizes, data_denominators): [(size, why)], [(expanded denominator, why)], from every
    forward and backward line with every flag on."""
    env = op.env(frozenset(o.name for o in op.options))
    positive = {o.symbol for o in op.options if o.symbol is not None
                and o.allowed().is_subset(sp.Interval.open(0, sp.oo))}
    inputs = set(op.inputs) | set(op.params)
    zero: dict = {}
    data: dict = {}
    memo: dict = {}
    signs: dict = {}
    for asg in op.forward + op.backward:
        for den, shown in _denominators(asg.expr):
            full = _expanded(den, env, memo)
            for s in sorted(_zero_when(full, options), key=lambda s: s.name):
                zero.setdefault(s, shown)
            if _sign(full, positive | (_size_symbols(full, options)), signs) == "+":
                continue
            if _size_symbols(full, options) and not _arrays(full):
                continue                                   # sizes alone: the size checks
            if not _arrays(full) <= inputs:
                raise CodegenError(f"{where}: the denominator {sp.sstr(den)} of line "
                                   f"{asg.target.name} is not provably nonzero and is not a "
                                   "function of the inputs alone (it cannot be checked before "
                                   "the forward runs)")
            data.setdefault(sp.sstr(full), (full, shown))
    return sorted(zero.items(), key=lambda kv: kv[0].name), list(data.values())


# ----------------------------------------------------------------------------------- printing
def _shape_comment(arr: Array, batched: bool, printer) -> str:
    return storage_text(arr, arr.integer_valued, batched and arr.shape[0] != 1, printer)


def _full_shape(batched: dict):
    """The stored shape of a subexpression, for in-place printing: (rows, cols, has leading
    axes), or None where that is not known (a scalar)."""
    def full(e):
        try:
            shape = shape_of(e)
        except Exception:  # noqa: BLE001 - an ill-formed part: no in-place
            return None
        if shape == ():
            return None
        return (*shape, _batched(e, batched))
    return full


_TEMP = re.compile(r"(_t\d+) = ")


def _body(assigns, printer, batched: dict, keep=None) -> list[str]:
    """Lines for a sequence of assignments; `when` guards print as `if <flag>:`.

    With `keep` (the arrays still needed after the body: outputs and saved arrays, or the
    gradients), an intermediate is deleted (`del`) after the line that reads it last, and the
    temporaries `_tN` of a line after that line: a large m×n intermediate is freed as soon as it
    is dead instead of when the function returns (the peak memory of attention's backward)."""
    lines: list[str] = []
    last_read: dict = {}
    if keep is not None:
        first_guard: dict = {}
        for k, asg in enumerate(assigns):
            for a in sp.sympify(asg.expr).free_symbols:
                if isinstance(a, Array):
                    last_read[a.name] = k
            first_guard.setdefault(asg.target.name, asg.when)
        local = {n for n, w in first_guard.items() if w is None and n not in {a.name for a in keep}}
        last_read = {n: k for n, k in last_read.items() if n in local}
    for k, asg in enumerate(assigns):
        if _masks_own_array(assigns, k):               # S = mask(S) on S computed just above
            printed = printer.print_causal_in_place(asg.target.name)
        else:
            # arrays this line reads for the last time, computed above as new arrays: the line
            # may take one over as its result (S − max S written into S's array)
            dead = {a for a in sp.sympify(asg.expr).free_symbols if isinstance(a, Array)
                    and last_read.get(a.name) == k and _own_array(assigns, k, a)}
            printed = printer.print_assign(asg.target.name, asg.expr, full=_full_shape(batched),
                                           dead=dead)
        printed[-1] += f"  # {_shape_comment(asg.target, batched[asg.target], printer)}"
        # the formula of the line, printed from the same expression (FormulaPrinter)
        printed.insert(0, formula_comment(asg.target.name, asg.expr,
                                          indent=8 if asg.when is not None else 4))
        if keep is not None:
            temps = [m.group(1) for p in printed for m in [_TEMP.match(p)] if m]
            if temps:
                printed.append("del " + ", ".join(temps))
        if asg.when is not None:
            lines.append(f"if {asg.when}:")
            printed = ["    " + p for p in printed]
        lines.extend(printed)
        dead = sorted(n for n, last in last_read.items() if last == k)
        if dead:
            lines.append("del " + ", ".join(dead))
    return lines


_VIEW_NODES = (T, Gather, Take, CausalMask, OneHot)      # may print as views of their argument


def _masks_own_array(assigns, k: int) -> bool:
    """Whether assignment k is `S = CausalMask(S)` with S computed earlier in this body as a
    new array that nothing else views: then the mask may be applied to S in place."""
    asg = assigns[k]
    expr, target = asg.expr, asg.target
    if not (isinstance(expr, CausalMask) and expr.args[0] == target):
        return False
    earlier = [a for a in assigns[:k] if a.target == target]
    if not earlier or isinstance(earlier[-1].expr, (Array, *_VIEW_NODES)) or earlier[-1].when != asg.when \
            and earlier[-1].when is not None:
        return False
    return not any(isinstance(node, _VIEW_NODES) and target in node.args
                   for a in assigns[:k] for node in sp.preorder_traversal(a.expr))


def _own_array(assigns, k: int, a: Array) -> bool:
    """Whether `a`, as assignment k reads it, is a new array computed earlier in this body
    (not an input, not a view of anything) that no other name views."""
    for j in range(k - 1, -1, -1):
        if assigns[j].target != a:
            continue
        if _masks_own_array(assigns, j):               # masked in place: still its own array
            continue
        if assigns[j].when is not None or isinstance(assigns[j].expr, (Array, *_VIEW_NODES)):
            return False
        return not any(isinstance(node, _VIEW_NODES) and a in node.args
                       for i, b in enumerate(assigns[:k]) if not _masks_own_array(assigns, i)
                       for node in sp.preorder_traversal(b.expr))
    return False


def _tuple(names: list[str]) -> str:
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _q(s: str) -> str:
    """A double-quoted Python string literal."""
    return json.dumps(str(s), ensure_ascii=False)


def _call(func: str, args: list[str], width: int = 92) -> list[str]:
    """A call as one line, or one argument per line when it would be too long."""
    one = f"{func}({', '.join(args)})"
    if len(one) <= width:
        return [one]
    return [f"{func}("] + [f"    {a}," for a in args] + [")"]


def _wrap(text: str, width: int = 92) -> list[str]:
    """Docstring prose (or LaTeX, which ignores line breaks) wrapped at spaces."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def class_name(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_") if p)


def _import_order(module: str) -> tuple:
    """Imports sorted by their text, the package's own (`from . import ...`) last."""
    return MODULE_IMPORTS[module].startswith("from ."), MODULE_IMPORTS[module]


def _import_block(std: list[str], third: list[str]) -> list[str]:
    """Standard-library imports, a blank line, third-party imports, a blank line (if any), then
    the package's own (`from . import ...`), which the templates' `from . import _validate`
    follows directly."""
    own = [i for i in third if i.startswith("from .")]
    third = [i for i in third if not i.startswith("from .")]
    lines = std + ([""] if std and third else []) + third
    return lines + ([""] if lines else []) + own


def _option_default(opt) -> str:
    if isinstance(opt.default, (bool, int, float, str)) or opt.default is None:
        return repr(opt.default)
    raise CodegenError(f"option {opt.name}: default {opt.default!r} is not a plain Python value")


def _option_param(opt) -> str:
    """`name=default`, or just `name` (a required keyword) when the default is None."""
    return opt.name if opt.default is None else f"{opt.name}={_option_default(opt)}"


def _coerce(opt) -> str | None:
    """Options are made plain Python values (a NumPy float64 eps would upcast float32).

    The type is the default's; with no default, the symbol's (integer -> int, else float).
    """
    for t in (bool, int, float):
        if type(opt.default) is t:
            return f"{opt.name} = {t.__name__}({opt.name})"
    if opt.default is None and opt.symbol is not None:
        return f"{opt.name} = {'int' if opt.symbol.is_integer else 'float'}({opt.name})"
    return None


def op_context(op: Op, backend: str, tables=()) -> dict:
    """Everything a template needs for one op and one backend (all text already printed);
    `tables` are the Tables printed into the same file (Table.file == op.name)."""
    an = analyse(op)
    matrices = frozenset(a.array for a in an.args if a.role == "param" and not a.row_vector)
    fwd = printer_for(backend, names=an.option_names, matrices=matrices)
    name = op.name
    qn = _q(name)

    def arr_text(a: Arg):
        return f"({_q(a.name)}, {a.name}, {a.ndim[0]}, {a.ndim[1]}, {_q(a.storage(fwd))})"

    checks: list[list[str]] = []
    if an.float_args:
        checks.append(_call("_v.floats", [qn] + [arr_text(a) for a in an.float_args]))
    if an.int_args:
        checks.append(_call("_v.integers", [qn] + [arr_text(a) for a in an.int_args]))
    batched = [a for a in an.args if a.batched]
    shapes = _shape_context(op, an, fwd, qn)
    if len(batched) > 1:
        lead_check = "_v.broadcast_leading" if op.broadcast else "_v.same_leading"
        call = _call(lead_check, [qn] + [f"({_q(a.name)}, {a.name}, {a.trailing})" for a in batched])
        if shapes["vacuous"]:                            # the empty-output path needs the axes
            call[0] = "lead = " + call[0]
        checks.append(call)
    for sym, occ in an.same_size:
        checks.append(_call("_v.same_size", [qn, _q(sym.name)] + [
            f"({_q(a.name)}, {a.name}, {ax})" for a, ax in occ]))
    size_lines = [f"{fwd.doprint(s)} = {an.bindings[s][0].name}.shape[{an.bindings[s][1]}]"
                  for s in an.forward_sizes]
    late_checks: list[list[str]] = []
    for a, ax, dim in an.size_is:
        late_checks.append(_call("_v.size_is", [qn, _q(a.name), a.name, str(ax), fwd.doprint(dim),
                                                _q(fwd.doprint(dim))]))
    for a, bound in an.id_bounds:
        late_checks.append(_call("_v.in_range", [qn, _q(a.name), a.name, fwd.doprint(bound),
                                                 _q(fwd.doprint(bound))]))

    try:
        forward_lines = _body(op.forward, fwd, an.batched, keep=set(op.outputs) | set(op.saved))
        bwd = printer_for(backend, names=an.option_names, matrices=matrices)
        backward_lines = _body(op.backward, bwd, an.batched, keep=set(op.grads))
        guard = printer_for(backend, names=an.option_names, matrices=matrices)
        guard_lines = _guard_lines(an, guard, qn)
    except PrinterError as e:
        raise CodegenError(f"op {name} ({op.module}), {backend}: {e}") from None
    fwd.modules |= guard.modules
    fwd.uses_dtype = fwd.uses_dtype or guard.uses_dtype

    if fwd.uses_dtype:
        if not an.float_args:
            raise CodegenError(f"op {name}: the forward needs a float dtype but has no float argument")
        checks[0][0] = "dtype = " + checks[0][0]
    backward_pre = []
    if bwd.uses_dtype:
        backward_pre.append(f"dtype = d{op.outputs[0].name}.dtype")

    module = None
    if op.params:
        module = _module_context(op, an, fwd)
    table_ctx = [table_context(t, backend) for t in tables]
    used = fwd.modules | bwd.modules | ({"torch"} if backend == "torch" else set())
    for t in table_ctx:
        used |= t["modules"]
    if backend == "torch" and module and any("math." in p["init"] for p in module["params"]):
        used.add("math")
    modules = sorted(used)
    imports = [MODULE_IMPORTS[m] for m in sorted(modules, key=_import_order)]
    std_imports = [i for i in imports if i == "import math"]
    third_imports = [i for i in imports if i != "import math"]
    import_lines = _import_block(std_imports, third_imports)

    cache_names = [a.name for a in an.cache_arrays] + an.cache_scalars + \
        (["layout"] if shapes["layout"] else [])
    outputs = [o.name for o in op.outputs]
    upstream = [u.name for u in op.upstream]
    grads = [g.name for g in op.grads]
    options = [{"name": o.name, "default": _option_default(o), "doc": o.doc,
                "coerce": _coerce(o)} for o in op.options]
    arg_docs = []
    for a in an.args:
        kind = "integer ids" if a.integer else ("parameter" if a.role == "param" else
                                                 "constant input (no gradient)" if a.constant else "input")
        arg_docs.append(f"{a.name}: {a.storage(fwd)} {kind}")
    for o in op.options:
        arg_docs.extend(_wrap(f"{o.name}: option, default {_option_default(o)}" + _domain_doc(o) +
                              (f"; {o.doc}" if o.doc else ""), 84))

    # torch extras
    apply_args = [a.name for a in an.args] + [o.name for o in op.options]
    grad_returns = []
    for a in an.args:
        grad_returns.append(an.grad_of_arg[a.name].name if a.name in an.grad_of_arg else "None")
    grad_returns += ["None"] * len(op.options)

    latex = op.latex
    if '"""' in latex or latex.endswith("\\"):
        raise CodegenError(f"op {name}: latex cannot go into a docstring as is")
    return {
        "op": op, "name": name, "title": op.title, "latex": _wrap(latex, 96),
        "claims": _wrap(", ".join(_op_claims(op)) + f" ({op.module.replace('.', '/')}.py)."),
        "cache_doc": _wrap("Cache: " + op.cache_doc),
        "saved_docs": [f"{a.name} {_shape_comment(a, an.batched.get(a, True), fwd)}"
                       for a in an.cache_arrays],
        "cache_scalars": an.cache_scalars,
        "source": op.module.replace(".", "/") + ".py",
        "import_lines": import_lines,
        "signature": ", ".join([a.name for a in an.args] +
                               (["*"] + [_option_param(o) for o in op.options]
                                if options else [])),
        "call_kwargs": ", ".join([a.name for a in an.args] +
                                 [f"{o.name}={o.name}" for o in op.options]),
        "arg_docs": arg_docs,
        "coercions": [o["coerce"] for o in options if o["coerce"]],
        "checks": [line for c in checks for line in c], "size_lines": size_lines,
        "late_checks": [line for c in late_checks for line in c],
        "option_checks": _option_checks(op.options, qn), "guard_lines": guard_lines,
        **shapes,
        "vacuous_cache": f"(None,) * {len(cache_names) - 1} + ((layout[0], layout[1], True),)",
        "forward_lines": forward_lines, "backward_lines": backward_lines,
        "backward_pre": backward_pre,
        "outputs": outputs,
        "outputs_target": outputs[0] if len(outputs) == 1 else _tuple(outputs),
        "outputs_return": ", ".join(outputs),
        "output_docs": [f"{o.name} {_shape_comment(o, an.batched[o], fwd)}" for o in op.outputs],
        "cache_tuple": _tuple(cache_names), "n_cache_arrays": len(an.cache_arrays),
        "upstream": upstream,
        "grads": grads, "grads_target": ", ".join(grads),
        "grad_docs": [f"{g.name} {_shape_comment(g, an.batched[g], fwd)}" for g in op.grads],
        "camel": class_name(name),
        "apply_args": ", ".join(apply_args),
        "grad_returns": ", ".join(grad_returns),
        "module": module,
        "exports": _exports([f"{name}_forward", f"{name}_backward"] +
                            ([f"{class_name(name)}Function", name] + ([class_name(name)] if module else [])
                             if backend == "torch" else []) +
                            [t["name"] for t in table_ctx]),
        "tables": table_ctx,
    }


def _domain_text(o) -> str:
    """An option's allowed values in words ("eps > 0", "0 <= beta1 < 1"), "" if any real."""
    bounds = _domain_bounds(o)
    if bounds is None:
        return ""
    lo, hi, lo_open, hi_open = bounds
    if hi is None:
        return f"{o.name} {'>' if lo_open else '>='} {lo}"
    left = "" if lo is None else f"{lo} {'<' if lo_open else '<='} "
    return f"{left}{o.name} {'<' if hi_open else '<='} {hi}"


def _domain_bounds(o):
    """(lo, hi, lo_open, hi_open) of an option's allowed interval (None: unbounded), or None."""
    if o.symbol is None:
        return None
    dom = o.allowed()
    if dom == sp.S.Reals or dom == sp.S.Integers:
        return None
    if isinstance(dom, sp.Range):                      # integers lo, lo + 1, ...: [lo, ∞)
        dom = sp.Interval(dom.inf, sp.oo)
    if not isinstance(dom, sp.Interval):
        raise CodegenError(f"option {o.name}: domain {dom} is not an interval")

    def end(x):
        return None if x.is_infinite else repr(int(x) if x.is_integer else float(x))
    return end(dom.left), end(dom.right), bool(dom.left_open), bool(dom.right_open)


def _domain_doc(o) -> str:
    text = _domain_text(o)
    return f" ({text})" if text else ""


def _option_checks(options, qn: str) -> list[str]:
    """`_v.in_domain` for every option whose allowed set is not all of ℝ (Option.allowed: the
    proofs' assumptions or a narrower `domain`): eps > 0, t >= 1, 0 <= beta1 < 1."""
    lines = []
    for o in options:
        bounds = _domain_bounds(o)
        if bounds is not None:
            lo, hi, lo_open, hi_open = bounds
            lines += _call("_v.in_domain", [qn, _q(o.name), o.name, str(lo), str(hi),
                                            str(lo_open), str(hi_open)])
    return lines


def _size_text(sym, an: Analysis, printer) -> str:
    """A size as the generated code reads it: its variable if bound, else its axis."""
    if sym in an.forward_sizes:
        return printer.doprint(sym)
    arg, idx = an.bindings[sym]
    return f"{arg.name}.shape[{idx}]"


def _output_shape(out: Array, an: Analysis, printer, lead: str) -> str | None:
    """The stored shape of an output as code (after promotion), or None if it is never empty."""
    dims = []
    for d in Arg(out, "input", out.integer_valued).storage_dims():
        d = sp.sympify(d)
        if d.is_Integer:
            dims.append(str(d))
        elif isinstance(d, sp.Symbol) and d in an.bindings:
            dims.append(_size_text(d, an, printer))
        else:
            raise CodegenError(f"op {an.op.name}: output {out.name} has the axis {d}, neither a "
                               "number nor a size read off an argument")
    leading = an.batched[out] and out.shape[0] != 1
    if not leading and all(x.isdigit() and x != "0" for x in dims):
        return None
    return "(" + ", ".join(([f"*{lead}"] if leading else []) + dims) + ("," if len(dims) == 1 and not leading else "") + ")"


def _shape_context(op: Op, an: Analysis, printer, qn: str) -> dict:
    """The shape handling of `<op>_forward`/`_backward`, from Op.optional_axes and
    Op.broadcast alone (the same for every op; `_validate`'s helpers do the work):

        layout = (k, (shapes of the differentiable arguments), False)   # k: axes promotion adds
        x = _v.promoted(x, 2)                 # an absent optional axis: a length-1 view
        if _v.empty(<output shapes>): ...     # every output empty: zeros, nothing computed
        y = _v.restored(y, layout)            # the outputs drop the promoted axes again
    backward:
        if layout[2]: return zeros            # the forward was empty: every gradient is 0
        dy = _v.promoted_like(dy, layout)
        dx = _v.sum_to(dx, layout[1][0])      # un-broadcast, un-promote (a view if only 1s)
    """
    batched = [a for a in an.args if a.batched]
    lead = "lead" if len(batched) > 1 else f"{batched[0].name}.shape[:-{batched[0].trailing}]"
    out_shapes = [_output_shape(o, an, printer, lead) for o in op.outputs]
    vacuous = all(s is not None for s in out_shapes)
    promote = [a for a in batched if a.optional]
    layout = vacuous or bool(promote) or op.broadcast
    arg_of_grad = {g.name: n for n, g in an.grad_of_arg.items()}
    k = _call("_v.missing", [f"({a.name}, {a.trailing})" for a in batched])[0] if promote else "0"
    grad_shapes = [f"{arg_of_grad[g.name]}.shape" for g in op.grads]
    like = an.float_args[0].name
    restore = [f"{o.name} = _v.restored({o.name}, layout)" for o in op.outputs
               if promote and an.batched[o]]
    by_name = {a.name: a for a in an.args}
    grad_lines = [f"{g.name} = _v.sum_to({g.name}, layout[1][{i}])" for i, g in enumerate(op.grads)
                  if (promote or op.broadcast) and by_name[arg_of_grad[g.name]].batched]
    one = len(op.grads) == 1
    return {
        "layout": layout,
        "layout_lines": ([f"layout = ({k}, {_tuple(grad_shapes)}, False)  "
                          "# promoted axes, the arguments' shapes, empty?"] if layout else []) +
                        [f"{a.name} = _v.promoted({a.name}, {a.trailing})" for a in promote],
        "vacuous": {"test": "_v.empty(" + ", ".join(out_shapes) + ")",
                    "outputs": [f"{o.name} = _v.zeros({s}, {like})" for o, s in zip(op.outputs, out_shapes)]
                    } if vacuous else None,
        "restore_lines": restore,
        "upstream_lines": [f"{u.name} = _v.promoted_like({u.name}, layout)"
                           for u, o in zip(op.upstream, op.outputs) if promote and an.batched[o]],
        "grad_lines": grad_lines,
        "vacuous_return": f"_v.zero_grads(layout, {op.upstream[0].name})" + ("[0]" if one else ""),
        "shape_docs": _shape_docs(op, an, promote, vacuous),
    }


def _shape_docs(op: Op, an: Analysis, promote: list, vacuous: bool) -> list[str]:
    """What the forward accepts beyond the declared shapes, in words (its docstring)."""
    docs = []
    by_dims: dict = {}
    for a in promote:
        by_dims.setdefault(", ".join(sp.sstr(d) for d in a.storage_dims()[:a.optional]), []).append(a.name)
    outputs = any(an.batched[o] for o in op.outputs)
    for dims, names in by_dims.items():
        docs.append(f"{', '.join(names)} may lack {'the axes' if ',' in dims else 'the axis'} {dims} "
                    "(read as length 1, as torch does)" +
                    (f"; the outputs lack {'them' if ',' in dims else 'it'} too." if outputs else "."))
    batched = [a.name for a in an.args if a.batched]
    if op.broadcast and len(batched) > 1:
        docs.append(f"The leading axes of {', '.join(batched)} broadcast against each other; each "
                    "gradient is summed back to its argument's shape.")
    if vacuous:
        docs.append("Where every output is empty, nothing is computed: empty outputs, zero gradients.")
    for sym, why in an.zero_sizes:
        docs.append(f"Otherwise {sym.name} >= 1 is required (a denominator: {why}).")
    for _, why in an.data_denominators:
        docs.append(f"Refused where a denominator computed from the inputs is 0 ({why}).")
    return [line for d in docs for line in _wrap(d, 84)]


def _guard_lines(an: Analysis, printer, qn: str) -> list[str]:
    """The checks of the sizes and input counts that denominators need (after the empty-output
    path): `_v.nonzero_size` for each size, `_v.nonzero` for each denominator of the inputs."""
    lines = []
    for sym, why in an.zero_sizes:
        text = _size_text(sym, an, printer)
        arg, idx = an.bindings[sym]
        lines += _call("_v.nonzero_size", [qn, _q(sym.name), text, _q(f"{arg.name}.shape[{idx}]"), _q(why)])
    for k, (den, why) in enumerate(an.data_denominators):
        name = f"_den{k}"
        printed = printer.print_assign(name, den, full=_full_shape(an.batched))
        lines += printed
        temps = [m.group(1) for line in printed for m in [_TEMP.match(line)] if m]
        lines += _call("_v.nonzero", [qn, _q(sp.sstr(den)), name, _q(_gloss(den)), _q(why)])
        lines.append("del " + ", ".join(temps + [name]))
    return lines


def _gloss(den) -> str:
    """A denominator in words, for the message that says it is 0."""
    if isinstance(den, ColSum):
        return f"{sp.sstr(den.args[0])} summed over every row and leading axis: nothing is counted"
    if isinstance(den, (RowSum, RowMean)):
        return f"{sp.sstr(den.args[0])} summed over a row"
    return "computed from the inputs"


def _op_claims(op: Op) -> list[str]:
    """The claims generated from the op's specification (they prove these very lines), then the
    hand-written claims of the derivation steps that the op cites."""
    from derivations.registry import generated_claim_ids

    gen = generated_claim_ids(op)
    return gen + [c for c in op.claims if c not in gen]


def _exports(names: list[str]) -> str:
    return ", ".join(_q(n) for n in names)


def _module_context(op: Op, an: Analysis, printer) -> dict:
    """The nn.Module wrapper: parameters by their PyTorch names, created from the sizes."""
    attr = dict(getattr(op, "module_params", None) or {})
    init = dict(getattr(op, "param_init", None) or {})
    unknown = sorted((set(attr) | set(init)) - {p.name for p in op.params})
    if unknown:
        raise CodegenError(f"op {op.name}: module_params/param_init name {unknown}, which are "
                           f"not params ({[p.name for p in op.params]})")
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
        params.append({"array": p.name, "attr": name,
                       "shape": "(" + ", ".join(printer.doprint(d) for d in shape) +
                                ("," if len(shape) == 1 else "") + ")",
                       "init": INIT[kind].format(p=f"self.{name}",
                                                 fan_in=printer.doprint(shape[-1]))})
    inputs = [a.name for a in an.args if a.role == "input"]
    return {
        "sizes": [printer.doprint(s) for s in sizes],
        "params": params,
        "inputs": ", ".join(inputs),
        "call": ", ".join(inputs + [f"self.{p['attr']}" for p in params] +
                          [f"{o.name}=self.{o.name}" for o in op.options]),
        "init_signature": ", ".join([printer.doprint(s) for s in sizes] + ["*"] +
                                    [_option_param(o) for o in op.options] +
                                    ["device=None", "dtype=None"]),
        "options": [o.name for o in op.options],
    }


def steps() -> tuple:
    """Optimiser steps: `STEPS` (name -> Step) of every topic module, sorted by name."""
    from derivations.registry import topic_modules
    out = []
    for mod in topic_modules():
        for st in dict(getattr(mod, "STEPS", {}) or {}).values():
            st.module = getattr(st, "module", None) or mod.__name__
            out.append(st)
    return tuple(sorted(out, key=lambda st: st.name))


def step_context(step, backend: str) -> dict:
    """A Step: `<name>_step(*inputs, *, options) -> outputs`, elementwise over any shape."""
    where = f"step {step.name} ({step.module})"
    names = [a.name for a in step.inputs] + [o.name for o in step.options]
    try:
        for n in names:
            check_name(n, "argument")
    except PrinterError as e:
        raise CodegenError(f"{where}: {e}") from None
    option_symbols = {o.symbol: o.name for o in step.options if o.symbol is not None}
    defined = set(step.inputs)
    for asg in step.assigns:
        missing = _arrays(asg.expr) - defined
        if missing:
            raise CodegenError(f"{where}: line {asg.target.name} reads "
                               f"{sorted(m.name for m in missing)} before they are defined")
        sizes = _size_symbols(asg.expr, option_symbols)
        if sizes:
            raise CodegenError(f"{where}: a step is elementwise but line {asg.target.name} uses "
                               f"the sizes {sorted(s.name for s in sizes)}")
        if asg.when is not None:
            raise CodegenError(f"{where}: guarded lines are not supported in steps")
        defined.add(asg.target)
    for o in step.outputs:
        if o not in defined:
            raise CodegenError(f"{where}: output {o.name} is never computed")
    printer = printer_for(backend, names=option_symbols)
    try:
        body = []
        for asg in step.assigns:       # elementwise: every array has the one shape
            body.append(formula_comment(asg.target.name, asg.expr, indent=4))
            body.extend(printer.print_assign(asg.target.name, asg.expr,
                                             full=lambda e: None if printer._scalar(e) else "all"))
    except PrinterError as e:
        raise CodegenError(f"{where}, {backend}: {e}") from None
    qn = _q(step.name)
    checks = _call("_v.floats", [qn] + [f"({_q(a.name)}, {a.name}, 0, False, \"(any shape)\")"
                                        for a in step.inputs])
    if printer.uses_dtype:
        checks[0] = "dtype = " + checks[0]
    checks = _option_checks(step.options, qn) + checks       # t >= 1, 0 <= beta < 1, eps > 0
    if len(step.inputs) > 1:
        checks += _call("_v.same_shape", [qn] + [f"({_q(a.name)}, {a.name})" for a in step.inputs])
    used = set(printer.modules)
    imports = [MODULE_IMPORTS[m] for m in sorted(used, key=_import_order)]
    std = [i for i in imports if i == "import math"]
    outputs = [o.name for o in step.outputs]
    latex = step.latex
    if '"""' in latex or latex.endswith("\\"):
        raise CodegenError(f"{where}: latex cannot go into a docstring as is")
    return {
        "name": step.name, "title": step.title, "latex": _wrap(latex, 96),
        "backend_title": "NumPy" if backend == "numpy" else "PyTorch",
        "claims": _wrap(", ".join(step.claims) + f" ({step.module.replace('.', '/')}.py)."),
        "doc": _wrap(step.doc) if step.doc else [],
        "source": step.module.replace(".", "/") + ".py",
        "import_lines": _import_block(std, [i for i in imports if i not in std]),
        "signature": ", ".join([a.name for a in step.inputs] +
                               (["*"] + [_option_param(o) for o in step.options]
                                if step.options else [])),
        "arg_docs": [f"{a.name}: float array (any shape, all alike)" for a in step.inputs] +
                    [line for o in step.options for line in
                     _wrap(f"{o.name}: option" + ("" if o.default is None else
                                                  f", default {_option_default(o)}") + _domain_doc(o) +
                           (f"; {o.doc}" if o.doc else ""), 84)],
        "coercions": [c for c in (_coerce(o) for o in step.options) if c],
        "checks": checks, "body": body,
        "outputs": ", ".join(outputs),
    }


def tables() -> tuple:
    """Constant tables: `TABLES` of every topic module (derivations.registry.tables())."""
    from derivations.registry import tables as registry_tables
    return registry_tables()


def table_context(table, backend: str) -> dict:
    """A Table: `<name>(<sizes>, *, <options>, dtype=None[, device=None])`, each array its entry
    formula printed over float64 index grids, then broadcast to its shape and cast to dtype."""
    where = f"table {table.name} ({table.module})"
    if not table.name.isidentifier() or table.name.startswith("_"):
        raise CodegenError(f"{where}: the name must be a Python identifier not starting with '_'")
    option_symbols = {o.symbol: o.name for o in table.options if o.symbol is not None}
    indices = {idx for a in table.arrays for idx in a.index}
    things: dict = {}
    for kind, names in (("size", [s.name for s in table.sizes]),
                        ("option", [o.name for o in table.options]),
                        ("array", [a.name for a in table.arrays]),
                        ("index", sorted({i.name for i in indices}))):
        for nm in names:
            things.setdefault(nm, []).append(kind)
    for nm, kinds in sorted(things.items()):
        if len(kinds) > 1:
            raise CodegenError(f"{where}: the name {nm!r} is used for different things: "
                               + ", ".join(kinds))
        try:
            check_name(nm, kinds[0])
        except PrinterError as e:
            raise CodegenError(f"{where}: {e}") from None
    if len({i.name for i in indices}) != len(indices):
        raise CodegenError(f"{where}: two different index symbols share a name")
    printer = printer_for(backend, names={**option_symbols, **{i: i.name for i in indices}},
                          arrays=frozenset(indices))
    body: list[str] = []
    bound: dict = {}
    try:
        for a in table.arrays:
            used = sp.sympify(a.entry).free_symbols
            for axis, (idx, dim) in enumerate(zip(a.index, a.shape)):
                if idx in used and bound.get(idx) != (dim, axis):
                    shape = f"({printer.doprint(dim)}, 1)" if axis == 0 else f"(1, {printer.doprint(dim)})"
                    body.append(f"{idx.name} = {printer.grid(dim, axis)}  # {shape}")
                    bound[idx] = (dim, axis)
            lines = printer.print_table_array(a.name, a.entry, a.shape)
            lines[-1] += f"  # {_dims(a.shape, printer)}"
            body.extend(lines)
    except PrinterError as e:
        raise CodegenError(f"{where}, {backend}: {e}") from None
    qn = _q(table.name)
    checks = [f"{s.name} = _v.size({qn}, {_q(s.name)}, {s.name})" for s in table.sizes]
    checks += [c for c in (_coerce(o) for o in table.options) if c]
    checks += _option_checks(table.options, qn)
    checks.append(f"dtype = _v.float_dtype({qn}, dtype)")
    extra = list(printer.table_params)
    names = [a.name for a in table.arrays]
    returns = names[0] if len(names) == 1 else ", ".join(names)
    docs = [f"{a.name}[{a.index[0].name}, {a.index[1].name}] = {sp.sstr(a.entry)}"
            for a in table.arrays]
    for text in docs + [table.title, table.doc]:
        if "\\" in text or '"""' in text:
            raise CodegenError(f"{where}: {text!r} cannot go into a docstring as is")
    return {
        "name": table.name, "title": table.title,
        "doc": _wrap(table.doc) if table.doc else [],
        "source": table.module.replace(".", "/") + ".py",
        "claims": _wrap(", ".join(table.claims) + f" ({table.module.replace('.', '/')}.py).", 88),
        "signature": ", ".join([s.name for s in table.sizes] + ["*"] +
                               [_option_param(o) for o in table.options] + ["dtype=None"] + extra),
        "arg_docs": [f"{s.name}: int >= 0 (a size)" for s in table.sizes] +
                    [line for o in table.options for line in
                     _wrap(f"{o.name}: option, default {_option_default(o)}" + _domain_doc(o) +
                           (f"; {o.doc}" if o.doc else ""), 84)] +
                    [f"dtype: the floating dtype of the result (default: {printer.default_dtype_doc})"] +
                    [f"{e.split('=')[0]}: {printer.table_param_docs[e]}" for e in extra],
        "entry_docs": [line for d in docs for line in
                       textwrap.wrap(d, 84, break_long_words=False, break_on_hyphens=False,
                                     subsequent_indent="    ")],
        "return_docs": [f"{a.name} {_dims(a.shape, printer)}" for a in table.arrays],
        "returns": returns,
        "checks": checks, "body": body,
        "modules": set(printer.modules),
    }


def _dims(shape, printer) -> str:
    return "(" + ", ".join(printer.doprint(d) for d in shape) + ")"


def render_tables(tables_in_file: list, backend: str, env: jinja2.Environment | None = None) -> str:
    """The text of generated/<backend>/<file>.py for tables that have no op of their own."""
    tname = "tables_module.py.j2"
    ctx = [table_context(t, backend) for t in tables_in_file]
    used = set().union(*(c["modules"] for c in ctx))
    imports = [MODULE_IMPORTS[m] for m in sorted(used, key=_import_order)]
    std = [i for i in imports if i == "import math"]
    sources = sorted({c["source"] for c in ctx})
    text = (env or _env()).get_template(tname).render(
        title="; ".join(c["title"] for c in ctx),
        backend_title="NumPy" if backend == "numpy" else "PyTorch",
        tables=ctx, import_lines=_import_block(std, [i for i in imports if i not in std]),
        exports=_exports([c["name"] for c in ctx]))
    return with_header(_tidy(text), ", ".join(sources), tname)


# parameter initialisers by name (an Op may choose one per parameter through `param_init`)
INIT = {
    "zeros": "torch.nn.init.zeros_({p})",
    "ones": "torch.nn.init.ones_({p})",
    "normal": "torch.nn.init.normal_({p}, mean=0.0, std=0.02)",
    "fan_in": "torch.nn.init.uniform_({p}, -1.0 / math.sqrt({fan_in}), 1.0 / math.sqrt({fan_in}))",
}


# ----------------------------------------------------------------------------------- files
PACKAGE_DOCS = {
    None: "Generated code, printed from the proven formulas in `derivations/`: one module per op "
          "in\n`generated.numpy` and `generated.torch`.",
    "numpy": "Generated NumPy kernels, one module per op: `<op>_forward`, `<op>_backward`; constant\n"
             "tables (`TABLES`) in the module of their op or in a module of their own.",
    "torch": "Generated PyTorch kernels, one module per op: `<op>_forward`, `<op>_backward`,\n"
             "`<Op>Function` (autograd), `<op>` (functional) and, for ops with parameters, an "
             "`nn.Module`;\nconstant tables (`TABLES`) in the module of their op or in a module of their own.",
}

def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=True, lstrip_blocks=True, autoescape=False)


def with_header(body: str, source: str, template: str) -> str:
    """Prefix the generated-file header; the hash covers everything after its own line."""
    body = body.lstrip("\n")
    digest = hashlib.sha256(body.encode()).hexdigest()
    return (f"# Generated by `python -m codegen` from {source} with template {template}.\n"
            "# Do not edit: change the derivation or the template and run `make codegen`.\n"
            f"{HASH_PREFIX}{digest}\n{body}")


def verify_header(text: str) -> bool:
    """True if `text` carries a header whose content hash matches what follows it."""
    lines = text.split("\n")
    for n, line in enumerate(lines[:5]):
        if line.startswith(HASH_PREFIX):
            rest = "\n".join(lines[n + 1:])
            return hashlib.sha256(rest.encode()).hexdigest() == line[len(HASH_PREFIX):]
    return False


def render_op(op: Op, backend: str, env: jinja2.Environment | None = None, tables=()) -> str:
    """The text of generated/<backend>/<op>.py (with the table functions of `tables`)."""
    tname = f"{backend}_op.py.j2"
    ctx = op_context(op, backend, tables)
    text = (env or _env()).get_template(tname).render(**ctx)
    return with_header(_tidy(text), ctx["source"], tname)


# Elements per block of the special functions: 131072 float32 (z, t and the (2, n) rows of P and
# Q: 2 MiB, as the float64 version's 65536) measured ~5-10 % faster than 65536 and ~20 % faster
# than 32768 on one thread (15 NumPy calls a block at ~1.5 µs of overhead each, against ~3.3 ns
# an element of arithmetic); large blocks also mean few GIL hand-overs when NumpyGPT's batch
# threads run erf side by side.
SPECIAL_BLOCK = 131072


def _float_literal(pr, c: sp.Expr) -> str:
    """c as a float literal when a float holds it exactly (255/64 -> 3.984375), else printed."""
    return repr(float(c)) if sp.Rational(float(c)) == c else pr.doprint(c)


def special_context() -> dict:
    """generated/numpy/_special.py: each `RationalApproximation` of derivations/special.py,
    R(x) = clip(z·P(z²)/Q(z²), −bound, bound) with z = clip(x, −c, c), as in-place NumPy lines over
    cache-sized blocks (`_<name>_blocks`): z, t = z², then P(t) and Q(t) together as the two rows
    of one (2, n) array by Horner's rule (one call per step for both), then z·P/Q written into the
    output; optionally z = clip(scale·x) and outer·R + shift inside the same blocks, which is how
    each `AffineOfApproximation` (Φ from erf) is computed. Other dtypes call the library function
    the NumPy printer names for arrays in general (`NumpyPrinter.library_funcs`)."""
    from derivations.special import APPROXIMATIONS, COMPOSED

    from .printers import NumpyPrinter

    pr = printer_for("numpy")
    functions, blocks = [], []
    for a in APPROXIMATIONS:
        name = a.function.__name__
        label, clamp, cols = f"_{name.upper()}", f"_{name.upper()}_CLAMP", f"_{name.upper()}_COLUMNS"
        n = max(len(a.numerator), len(a.denominator))
        if n < 1:
            raise CodegenError(f"{name}: a rational approximation needs coefficients")
        if a.compute_dtype != a.dtype:
            raise CodegenError(f"{name}: evaluated in {a.compute_dtype}, stored as {a.dtype}: the "
                               "blocks write the result straight into the output")
        rows = [list(a.numerator) + [0] * (n - len(a.numerator)),       # zero-padded to one length
                list(a.denominator) + [0] * (n - len(a.denominator))]
        constants = [f"{clamp} = {_float_literal(pr, a.clamp)}", f"{label}_PQ = np.array(["]
        constants += [f"    [{', '.join(pr.doprint(sp.sympify(c)) for c in row)}],  # {which}"
                      for row, which in zip(rows, ("P", "Q"))]
        constants += [f"], dtype=np.{a.compute_dtype})",
                      f"{cols} = tuple({label}_PQ[:, k:k + 1] for k in range({n}))  # (2, 1) each"]
        if n == 1:                                   # pq = (P, Q) = c₀
            horner = [f"pq[...] = {cols}[0]"]
        else:                                        # pq = c_n; pq = pq·t + c_k, k = n−1 … 0
            horner = [f"np.multiply(t, {cols}[-1], out=pq)  # rows P(t), Q(t) by Horner's rule",
                      f"pq += {cols}[-2]"]
            if n > 2:
                horner += [f"for c in {cols}[-3::-1]:", "    pq *= t", "    pq += c"]
        body = ["z, t, pq = z_buf[:m], t_buf[:m], pq_buf[:, :m]",
                "r = flat_out[start:start + m]",
                "if scale is None:",
                f"    np.clip(flat_in[start:start + m], -{clamp}, {clamp}, out=z)  # z = clip(x)",
                "else:",
                "    np.multiply(flat_in[start:start + m], scale, out=z)",
                f"    np.clip(z, -{clamp}, {clamp}, out=z)  # z = clip(scale·x)",
                "np.multiply(z, z, out=t)  # t = z²",
                *horner,
                "np.multiply(pq[0], z, out=r)",
                "r /= pq[1]  # z·P(t)/Q(t)"]
        if a.bound is not None:
            b = _float_literal(pr, a.bound)
            body.append(f"np.clip(r, -{b}, {b}, out=r)  # |R| ≤ {b}")
        body += ["if outer is not None:", "    r *= outer", "    r += shift  # outer·R + shift"]
        blocks.append({
            "name": f"_{name}_blocks", "dtype": a.dtype, "constants": constants, "body": body,
            "buffers": [f"z_buf, t_buf = (np.empty(size, dtype=np.{a.compute_dtype}) for _ in range(2))",
                        f"pq_buf = np.empty((2, size), dtype=np.{a.compute_dtype})"]})
        functions.append({
            "name": name, "dtype": a.dtype, "fallback": NumpyPrinter.library_funcs[a.function],
            "summary": f"{name}, elementwise ({a.dtype}: the rational of derivations/special.py).",
            "doc": _wrap(f"* `{name}`: {a.doc}.", 92), "call": f"_{name}_blocks(x)"})
    for f in COMPOSED:                               # outer·g(scale·x) + shift inside g's blocks
        inner, outer, shift = (_float_literal(pr, v) for v in (f.inner_scale, f.outer_scale, f.outer_shift))
        functions.append({
            "name": f.name, "dtype": f.approximation.dtype,
            "fallback": NumpyPrinter.library_funcs[f.function],
            "summary": f"{f.name}, elementwise ({f.approximation.dtype}: derivations/special.py).",
            "doc": _wrap(f"* `{f.name}`: {f.doc}.", 92),
            "call": f"_{f.approximation.function.__name__}_blocks(x, {inner}, {outer}, {shift})"})
    # causal_mask's table: the CausalMask node printed on an array z of zeros
    from derivations.language.arrays import Array, CausalMask

    size = sp.Symbol("n", integer=True, positive=True)
    mask_pr = printer_for("numpy")
    causal_mask_of_z = mask_pr.doprint(CausalMask(Array("z", (size, size))))
    needs_math = "math" in mask_pr.modules or any("math." in fn["call"] for fn in functions)
    imports = [MODULE_IMPORTS[m] for m in sorted({"np", "scipy.special"}, key=_import_order)]
    std = [MODULE_IMPORTS["math"]] if needs_math else []
    return {"functions": functions, "blocks": blocks, "block": SPECIAL_BLOCK, "causal_mask_of_z": causal_mask_of_z,
            "import_lines": _import_block(std, imports)}


def render_all(ops=None, *, raise_errors: bool = True, errors_out: dict | None = None,
               table_list=None) -> dict[str, str]:
    """Every generated file, path relative to the repository root -> text.

    An op (or a file of tables) that cannot be generated raises CodegenError (all such in one
    message), or, with `raise_errors=False`, is left out and its message put in
    `errors_out[op or file name]`. Tables go into the file of the op named `Table.file`, or
    into a module of their own.
    """
    if ops is None:
        from derivations.registry import ops as registry_ops
        ops = registry_ops()
    env = _env()
    files: dict[str, str] = {}
    names = [o.name for o in ops]
    errors: dict[str, str] = {}
    by_file: dict = {}
    for t in (tables() if table_list is None else table_list):
        by_file.setdefault(t.file, []).append(t)
    step_names = {st.name for st in steps()}
    for file in by_file:
        if file in step_names or not file.isidentifier() or file.startswith("_"):
            errors.setdefault(file, f"tables {[t.name for t in by_file[file]]}: the file name "
                              f"{file!r} is a step's or not a module name")
    for backend in BACKENDS:
        for op in ops:
            try:
                files[f"generated/{backend}/{op.name}.py"] = render_op(
                    op, backend, env, by_file.get(op.name, ()))
            except (CodegenError, PrinterError) as e:
                errors.setdefault(op.name, str(e))
        for file, group in sorted(by_file.items()):
            if file in names or file in errors:
                continue
            try:
                files[f"generated/{backend}/{file}.py"] = render_tables(group, backend, env)
            except (CodegenError, PrinterError) as e:
                errors.setdefault(file, str(e))
        vname = f"{backend}_validate.py.j2"
        files[f"generated/{backend}/_validate.py"] = with_header(
            _tidy(env.get_template(vname).render(backend=backend)), "derivations/registry.py", vname)
        if backend == "numpy":        # erf for float32 arrays (SciPy's float32 loop is scalar)
            files["generated/numpy/_special.py"] = with_header(
                _tidy(env.get_template("numpy_special.py.j2").render(**special_context())),
                "derivations/special.py", "numpy_special.py.j2")

    from derivations.registry import composites
    for comp in composites():
        for backend in BACKENDS:
            tname = f"{backend}_{comp.template}.py.j2"
            ctx = {"name": comp.name, "title": comp.title, "latex": comp.latex,
                   "claims": _wrap(", ".join(comp.claims), 88), "kernels": comp.kernels,
                   "source": comp.module.replace(".", "/") + ".py"}
            files[f"generated/{backend}/{comp.name}.py"] = with_header(
                _tidy(env.get_template(tname).render(**ctx)), ctx["source"], tname)
        names.append(comp.name)

    for st in steps():
        for backend in BACKENDS:
            try:
                ctx = step_context(st, backend)
            except (CodegenError, PrinterError) as e:
                errors.setdefault(st.name, str(e))
                continue
            files[f"generated/{backend}/{st.name}.py"] = with_header(
                _tidy(env.get_template("step.py.j2").render(**ctx)), ctx["source"], "step.py.j2")
        names.append(st.name)
    names = sorted(n for n in names if n not in errors)
    table_files = sorted((t.name, f) for f, group in by_file.items() if f not in errors for t in group)
    for key in ("numpy", "torch", None):
        path = f"generated/{key}/__init__.py" if key else "generated/__init__.py"
        files[path] = with_header(
            _tidy(env.get_template("package_init.py.j2").render(doc=PACKAGE_DOCS[key], ops=names,
                                                                 tables=table_files)),
            "derivations/registry.py", "package_init.py.j2")
    if errors and raise_errors:
        raise CodegenError("\n".join(f"{n}: {m}" for n, m in sorted(errors.items())))
    if errors_out is not None:
        errors_out.update(errors)
    return dict(sorted(files.items()))


def _tidy(text: str) -> str:
    """Trailing spaces off, at most two blank lines in a row, one final newline."""
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.strip("\n") + "\n"


def generated_paths(root: Path = ROOT) -> set[str]:
    """The generated files now on disk (relative paths), caches excluded."""
    out = set()
    base = root / "generated"
    if base.exists():
        for p in base.rglob("*.py"):
            if "__pycache__" not in p.parts:
                out.add(p.relative_to(root).as_posix())
    return out
