"""The judge of the printed argument checks and empty shapes: every refusal a generated function
prints, exercised in both backends, and every "nothing to compute" path checked exactly.

The proofs hold on their domain: sizes ≥ 1 where a formula divides by them, options inside their
declared intervals (ε > 0, 0 ≤ β < 1, t ≥ 1), ids inside their axis, one float dtype, the declared
ranks and agreeing sizes. The printed `_validate` calls are what keeps every call inside that
domain, so they are judged too: for every op, step and table of the registry, in each backend,
this module makes the calls that leave the domain in one way each, built from the op's own
declarations (`codegen.analysis.analyse`, the options' `allowed()` sets) so that a new op is judged
as it is added:

    dtype        an integer array for a float argument, a float array for integer ids, float32
                 beside float64, a Python list for an array
    rank         one axis fewer than the fewest the op accepts
    sizes        each size set to 0 (and the leading axis): refused by name where a formula
                 divides by it, else empty outputs whose every gradient is exactly 0
    agreement    one axis of an argument that shares a size made one longer; leading axes that
                 do not agree or broadcast
    ids          an id equal to its axis' length
    options      just outside each option's interval, NaN, a non-number, a non-integer
                 integer (t = 2.5), a flag that is not True or False; an odd size a table
                 takes in pairs
    counts       an all-zero count in a data denominator (cross-entropy's Σ mask)
    NaN policy   the tiled attention's lines that add the NaN of the key blocks a causal row
                 skipped (`_support.nan_of`: 0 on finite entries, so invisible to the exact
                 judges) are held to attention_lse's printed kernel: one NaN put into each entry
                 of q, k, v and the upstream gradient in turn, causal and not, a block that does
                 not divide the keys, m ≠ n both ways; the NaN entries of o, dq, dk and dv must
                 be the same (a comparison of where NaN is, not of values)

Each refusal must be the op's own error, one line that starts with the op's name (`TypeError`,
`ValueError` or `IndexError`); anything else — a raw library error, a warning, an accepted call
outside the domain, a non-zero gradient of an op with empty outputs — is a finding that fails
`qed prove`. What runs here is the printed code itself (the real modules, on float64 inputs), so
its lines count towards the printed-line coverage.
"""

from __future__ import annotations

import importlib
import itertools
import time
import warnings
from dataclasses import dataclass

import numpy as np
import sympy as sp

__all__ = [
    "SIZES",
    "sizes_of",
    "dims",
    "build",
    "grad_positions",
    "as_tuple",
    "Finding",
    "judge_op",
    "judge_step",
    "judge_table",
    "judge_all",
]

BACKENDS = ("numpy", "torch")
SIZES = {
    "r": 3,
    "n": 4,
    "m": 3,
    "d_k": 4,
    "d_v": 2,
    "T": 3,
    "V": 5,
    "d": 4,
    "n_in": 3,
    "n_out": 2,
    "f": 3,
    "n_hidden": 3,
}


# ------------------------------------------------------------------------------ building calls
def sizes_of(op, **over) -> dict:
    """Size symbol -> value: SIZES, then 2, 3, ... for the rest, then `over` (by name)."""
    from codegen.analysis import analyse

    an = analyse(op)
    syms = {s for a in an.args for d in a.array.shape for s in sp.sympify(d).free_symbols}
    spare = itertools.count(2)
    out = {s: SIZES.get(s.name) or next(spare) for s in sorted(syms, key=lambda s: s.name)}
    return {s: over.get(s.name, v) for s, v in out.items()}


def dims(a, sizes) -> tuple:
    """The stored trailing dims of argument `a` at `sizes`."""
    return tuple(int(sp.sympify(d).xreplace(sizes)) for d in a.storage_dims())


def build(op, sizes, lead=(2,), drop=0, seed=0, leads=None) -> list:
    """Arguments of `<op>_forward` (NumPy): batched inputs with leading axes `lead` (or
    `leads[name]`) and their first `drop` trailing axes left out; ids in range."""
    from codegen.analysis import analyse

    an = analyse(op)
    rng = np.random.default_rng(seed)
    bound = {a.name: int(sp.sympify(b).xreplace(sizes)) for a, b in an.id_bounds}
    args = []
    for a in an.args:
        shape = dims(a, sizes)
        if a.batched:
            shape = tuple((leads or {}).get(a.name, lead)) + shape[min(drop, a.optional) :]
        if a.integer:
            hi = max(bound.get(a.name, 2), 1)
            args.append(rng.integers(0, hi, size=shape) if a.name != "mask" else np.ones(shape, np.int64))
        else:
            args.append(rng.standard_normal(shape))
    return args


def grad_positions(op) -> list[int]:
    """Argument positions that get a gradient, in the order of the op's grads."""
    from codegen.analysis import analyse

    an = analyse(op)
    pos = {a.name: i for i, a in enumerate(an.args)}
    arg_of = {g.name: n for n, g in an.grad_of_arg.items()}
    return [pos[arg_of[g.name]] for g in op.grads]


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


# ------------------------------------------------------------------------------ findings
@dataclass
class Finding:
    """One call of the judge: `unit` (op, step or table), `backend`, `case` (what was changed),
    and what was wrong, if anything."""

    unit: str
    backend: str
    case: str
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem

    def __str__(self) -> str:
        return f"{self.unit} [{self.backend}] {self.case}: {self.problem or 'as required'}"


def _module(backend: str, name: str):
    return importlib.import_module(f"generated.{backend}.{name}")


def _convert(backend: str, x):
    if backend == "numpy" or not isinstance(x, np.ndarray):
        return x
    import torch

    return torch.from_numpy(np.ascontiguousarray(x))


def _numpy(x):
    return x if isinstance(x, np.ndarray) else x.detach().cpu().numpy()


class _Refused(Exception):
    pass


def _call(unit: str, fn, *args, _quiet: str = "", **kwargs):
    """`fn(*args, **kwargs)` with every warning an error (but one starting with `_quiet`):
    (result, None), or (None, the op's own refusal message); a refusal that is not the op's own
    one line is raised as a finding."""
    with warnings.catch_warnings(), np.errstate(all="raise", under="ignore"):
        warnings.simplefilter("error")
        if _quiet:
            warnings.filterwarnings("ignore", message=_quiet)
        try:
            return fn(*args, **kwargs), None
        except (TypeError, ValueError, IndexError) as exc:
            msg = str(exc)
            if not msg.startswith(f"{unit}: ") or "\n" in msg:
                raise _Refused(f"not the op's own one-line error: {type(exc).__name__}: {msg[:200]}") from exc
            return None, msg
        except Exception as exc:  # noqa: BLE001 - a raw library error is the finding
            raise _Refused(f"a raw {type(exc).__name__}: {str(exc)[:200]}") from exc


def _expect(out: list, refused: bool, unit: str, backend: str, case: str, fn, *args, **kwargs) -> None:
    """One call that must be refused by the op's own error (`refused`) or accepted."""
    try:
        _result, msg = _call(unit, fn, *args, **kwargs)
    except _Refused as exc:
        out.append(Finding(unit, backend, case, str(exc)))
        return
    if refused:
        out.append(Finding(unit, backend, case, "" if msg is not None else "accepted, outside the domain"))
    else:
        out.append(Finding(unit, backend, case, "" if msg is None else f"refused inside the domain: {msg}"))


def _expect_refusal(out: list, unit: str, backend: str, case: str, fn, *args, **kwargs) -> None:
    _expect(out, True, unit, backend, case, fn, *args, **kwargs)


def _wrong_kind(o) -> list:
    """Values of another kind than option `o`'s, each refused by the op's name (never rounded,
    never read as a flag): a string, a list, a fraction for an integer, a word for a flag."""
    if o.symbol is None:
        return ["yes", 1]
    if o.symbol.is_integer:
        return [2.5, "3"]
    return ["abc", [1.0, 2.0], None]


def _closed_ends(o) -> list:
    """The finite ends an option's interval includes (0 of 0 ≤ β < 1; 1 of t ≥ 1)."""
    dom = o.allowed()
    if isinstance(dom, sp.Range):
        dom = sp.Interval(dom.inf, sp.oo)
    return [
        int(end) if end.is_integer else float(end)
        for end, is_open in ((dom.left, dom.left_open), (dom.right, dom.right_open))
        if not end.is_infinite and not is_open
    ]


def _expect_accepted(out: list, unit: str, backend: str, case: str, fn, *args, **kwargs) -> None:
    _expect(out, False, unit, backend, case, fn, *args, **kwargs)


def _broadcast_two_leading(op, backend, unit, batched, file=None) -> list[Finding]:
    """Two leading axes (2, 3), each batched argument in turn with (2, 1): its outputs must be
    those of the same argument copied out to (2, 3), and its gradient that copy's gradient
    summed over the axis it was broadcast along (the one-leading-axis runs of the exact judges
    cannot tell that sum's axis from another)."""
    from codegen.analysis import analyse

    names = [a.name for a in analyse(op).args]
    fwd, bwd = _forward(op, backend, file), _backward(op, backend, file)
    full = build(op, sizes_of(op), lead=(2, 3), seed=5)
    pos = grad_positions(op)
    out = []
    for j in batched:
        case = f"{names[j]} with leading axes (2, 1) against the others' (2, 3)"
        narrow = list(full)
        narrow[j] = full[j][:, :1]
        wide = list(full)
        wide[j] = np.ascontiguousarray(np.broadcast_to(narrow[j], full[j].shape))
        try:
            got = []
            for args in (narrow, wide):
                res, msg = _call(unit, fwd, *[_convert(backend, a) for a in args])
                if msg is not None:
                    raise _Refused(f"refused: {msg}")
                outs, cache = res
                ups = [_convert(backend, np.ones(tuple(o.shape))) for o in as_tuple(outs)]
                grads, msg = _call(unit, bwd, *ups, cache)
                if msg is not None:
                    raise _Refused(f"the backward refused: {msg}")
                got.append(([_numpy(o) for o in as_tuple(outs)], [_numpy(g) for g in as_tuple(grads)]))
        except _Refused as exc:
            out.append(Finding(unit, backend, case, str(exc)))
            continue
        (o_n, g_n), (o_w, g_w) = got
        problem = ""
        if any(a.shape != b.shape or not np.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(o_n, o_w)):
            problem = "outputs differ from the copied-out argument's"
        for k, (gn, gw) in enumerate(zip(g_n, g_w)):
            want = gw.sum(axis=1, keepdims=True) if pos[k] == j else gw
            if gn.shape != want.shape or not np.allclose(gn, want, rtol=1e-10, atol=1e-12):
                problem = problem or f"gradient {k} is not the copied-out one's, summed over the broadcast axis"
        out.append(Finding(unit, backend, case, problem))
    return out


def _batch_of_one(backend, fwd, unit, one, base, keeps) -> Finding:
    """Every batched argument with a leading axis of 1 (the first slice of the batch of 2): each
    output that keeps the leading axes must be the batch of 2's first slice (not the empty path's
    zeros), with its leading 1; an output reduced over the batch (a mean loss) must have the
    batch of 2's shape. `keeps`: per output, whether it keeps the leading axes."""
    case = "a batch of one"
    try:
        res1, msg1 = _call(unit, fwd, *[_convert(backend, a) for a in one])
        res2, msg2 = _call(unit, fwd, *[_convert(backend, a) for a in base])
    except _Refused as exc:
        return Finding(unit, backend, case, str(exc))
    if msg1 is not None or msg2 is not None:
        return Finding(unit, backend, case, f"refused: {msg1 or msg2}")
    if isinstance(res1[0], tuple) != isinstance(res2[0], tuple):
        return Finding(unit, backend, case, "one output returned as a tuple in one call and not the other")
    for k, (a, b, keep) in enumerate(zip(as_tuple(res1[0]), as_tuple(res2[0]), keeps)):
        a, b = _numpy(a), _numpy(b)
        if not keep:
            if a.shape != b.shape:
                return Finding(unit, backend, case, f"output {k} has shape {a.shape}, the batch of 2's {b.shape}")
            continue
        if a.shape[1:] != b.shape[1:] or a.shape[:1] != (1,):
            return Finding(unit, backend, case, f"output {k} has shape {a.shape}, the batch of 2's {b.shape}")
        if not np.allclose(a[0], b[0], rtol=1e-12, atol=1e-12):
            return Finding(unit, backend, case, f"output {k} is not the first slice's")
    return Finding(unit, backend, case)


def _outside(o) -> list:
    """Values just outside an option's allowed interval (and NaN for a real option)."""
    dom = o.allowed()
    if isinstance(dom, sp.Range):
        dom = sp.Interval(dom.inf, sp.oo)
    out = []
    for end, is_open, step in ((dom.left, dom.left_open, -1), (dom.right, dom.right_open, 1)):
        if end.is_infinite:
            continue
        e = int(end) if end.is_integer else float(end)
        out.append(e if is_open else e + step * (1 if isinstance(e, int) and o.symbol.is_integer else 0.5))
    return out + [float("nan")] * (not o.symbol.is_integer)


# ------------------------------------------------------------------------------ ops
def _forward(op, backend, file=None):
    name = file or op.name
    return getattr(_module(backend, name), f"{name}_forward")


def _backward(op, backend, file=None):
    name = file or op.name
    return getattr(_module(backend, name), f"{name}_backward")


def judge_op(op, backend: str, file: str | None = None) -> list[Finding]:
    """Every way out of `op`'s domain, one at a time, in `backend`; and the empty cases. `file`:
    another generated module that implements the same op (attention_tiled for attention_lse)."""
    from codegen.analysis import analyse

    an = analyse(op)
    out: list[Finding] = []
    fwd = _forward(op, backend, file)
    base = build(op, sizes_of(op))
    conv = [_convert(backend, a) for a in base]
    u = file or op.name

    def refuse(case, args, **opts):
        _expect_refusal(out, u, backend, case, fwd, *[_convert(backend, a) for a in args], **opts)

    # dtype
    floats = [i for i, a in enumerate(an.args) if not a.integer]
    ints = [i for i, a in enumerate(an.args) if a.integer]
    if floats:
        i = floats[0]
        refuse(f"{an.args[i].name} as integers", [a.astype(np.int64) if k == i else a for k, a in enumerate(base)])
        if backend == "numpy":
            refuse(f"{an.args[i].name} as a list", [a.tolist() if k == i else a for k, a in enumerate(base)])
        else:
            _expect_refusal(
                out,
                u,
                backend,
                f"{an.args[i].name} as a NumPy array",
                fwd,
                *[base[k] if k == i else c for k, c in enumerate(conv)],
            )
    if len(floats) > 1:
        j = floats[1]
        refuse(
            f"{an.args[j].name} float32 beside float64",
            [a.astype(np.float32) if k == j else a for k, a in enumerate(base)],
        )
    for i in ints:
        refuse(f"{an.args[i].name} as floats", [a.astype(np.float64) if k == i else a for k, a in enumerate(base)])
    # rank: one axis fewer than the fewest accepted (an input that may be 0-D cannot be refused)
    a0 = next((a for a in an.args if a.batched), None)
    if a0 is not None and a0.trailing - a0.optional - 1 >= 0:
        i = an.args.index(a0)
        lacking = a0.trailing - a0.optional - 1
        short = build(op, sizes_of(op), lead=())
        short[i] = np.asarray(short[i][(0,) * (short[i].ndim - lacking)])
        refuse(f"{a0.name} with {lacking} axes", short)
    # agreement: each axis that shares a size with another argument, one longer
    for sym, places in an.same_size:
        (arg, axis) = places[-1]
        i = an.args.index(arg)
        args = list(base)
        shape = list(args[i].shape)
        shape[axis] += 1
        args[i] = np.zeros(shape, dtype=args[i].dtype) if not arg.integer else np.zeros(shape, dtype=np.int64)
        refuse(f"{arg.name}.shape[{axis}] one longer than {sym}", args)
    for arg, axis, _expr in an.size_is:
        i = an.args.index(arg)
        args = list(base)
        shape = list(args[i].shape)
        shape[axis] += 1
        args[i] = np.zeros(shape, dtype=args[i].dtype)
        refuse(f"{arg.name}.shape[{axis}] not its declared size", args)
    batched = [i for i, a in enumerate(an.args) if a.batched]
    if len(batched) > 1:
        for j in batched:  # each argument in turn: the first is compared too, and the second
            args = list(base)  # (a check that skips one argument passes the others' cases)
            args[j] = np.concatenate([args[j]] * 2, axis=0) if args[j].ndim else args[j]
            args[j] = np.concatenate([args[j], args[j][:1]], axis=0)  # leading 2 vs 5
            refuse(f"{an.args[j].name} with leading axes that do not agree", args)
    # a batch of one: every batched argument with a leading axis of length 1 is computed, not
    # read as empty (the outputs are those of the batch's one slice)
    if op.broadcast and len(batched) > 1:
        out += _broadcast_two_leading(op, backend, u, batched, file)
    if batched:
        one = [a[:1] if k in batched else a for k, a in enumerate(base)]  # the first slice, kept 3-D
        keeps = [bool(an.batched[o]) for o in op.outputs]
        out.append(_batch_of_one(backend, fwd, u, one, base, keeps))
    # ids
    sizes = sizes_of(op)
    for arg, bound in an.id_bounds:
        i = an.args.index(arg)
        args = list(base)
        ids = args[i].copy()
        ids.flat[0] = int(sp.sympify(bound).xreplace(sizes))
        args[i] = ids
        refuse(f"{arg.name} = its axis' length", args)
    # options
    for o in op.options:
        for value in _wrong_kind(o):
            _expect_refusal(out, u, backend, f"{o.name} = {value!r}", fwd, *conv, **{o.name: value})
        if o.symbol is None:
            continue
        if o.allowed() not in (sp.S.Reals, sp.S.Integers):
            for value in _outside(o):
                _expect_refusal(out, u, backend, f"{o.name} = {value}", fwd, *conv, **{o.name: value})
            for value in _closed_ends(o):  # inside the domain, on its edge: accepted
                _expect_accepted(out, u, backend, f"{o.name} = {value} (a closed end)", fwd, *conv, **{o.name: value})
    # counts in a denominator
    names = {a.name for _, why in an.data_denominators for a in an.args if a.name in why and a.integer}
    if names:
        args = [np.zeros_like(a) if an.args[k].name in names else a for k, a in enumerate(base)]
        refuse(f"{', '.join(sorted(names))} all zero", args)
    # sizes 0: refused by name where a formula divides by it, else empty (exactly zero gradients)
    zero_sized = {s.name for s, _ in an.zero_sizes}
    for name in sorted({s.name for s in sizes_of(op)}) + ["batch"]:
        zsizes = sizes_of(op, **({name: 0} if name != "batch" else {}))
        args = build(op, zsizes, lead=(0,) if name == "batch" else (2,))
        out.append(_empty_case(op, an, backend, f"{name} = 0", args, name in zero_sized, file))
    return out


def judge_tiled(backend: str) -> list[Finding]:
    """attention_tiled: attention_lse's domain (the same SIGNATURE), and its block size."""
    from derivations import registry

    op = registry.op("attention_lse")
    out = judge_op(op, backend, file="attention_tiled")
    fwd = _forward(op, backend, "attention_tiled")
    args = [_convert(backend, a) for a in build(op, sizes_of(op))]
    for block in (0, -1, True, 2.5, "2"):
        _expect_refusal(out, "attention_tiled", backend, f"block = {block!r}", fwd, *args, block=block)
    res, _ = _call("attention_tiled", fwd, *args)
    o, cache = res
    _expect_refusal(
        out,
        "attention_tiled",
        backend,
        "backward block = 0",
        _backward(op, backend, "attention_tiled"),
        _convert(backend, np.ones(tuple(o.shape))),
        cache,
        block=0,
    )
    return out + judge_tiled_nan(backend)


def judge_tiled_nan(backend: str) -> list[Finding]:
    """The NaN policy of the printed tiled loops against attention_lse's printed kernel (module
    docstring): the same NaN entries in every output and gradient, wherever the NaN is put."""
    from derivations import registry

    op = registry.op("attention_lse")
    tiled_f, tiled_b = _forward(op, backend, "attention_tiled"), _backward(op, backend, "attention_tiled")
    lse_f, lse_b = _forward(op, backend), _backward(op, backend)
    rng = np.random.default_rng(7)
    out = []
    for (m, n), causal in itertools.product(((3, 5), (5, 3)), (True, False)):
        base = [rng.standard_normal((2, m, 2)), rng.standard_normal((2, n, 2)), rng.standard_normal((2, n, 3))]
        base.append(rng.standard_normal((2, m, 3)))  # the upstream gradient dO
        problems = []
        for i, entry in [(a, e) for a in range(4) for e in np.ndindex(base[a].shape[1:])]:
            arrays = [a.copy() for a in base]
            arrays[i][(1, *entry)] = np.nan
            q, k, v, do = (_convert(backend, a) for a in arrays)
            with np.errstate(invalid="ignore"):
                o_ref, c_ref = lse_f(q, k, v, causal=causal)
                want = [o_ref, *lse_b(do, c_ref)]
                o_t, c_t = tiled_f(q, k, v, causal=causal, block=2)
                got = [o_t, *tiled_b(do, c_t, block=2)]
            for name, w, g in zip(("o", "dq", "dk", "dv"), want, got):
                if not np.array_equal(np.isnan(_numpy(w)), np.isnan(_numpy(g))):
                    problems.append(f"NaN in {'q k v dO'.split()[i]}{entry}: {name}'s NaN entries differ")
        case = f"NaN policy m={m} n={n} block=2 causal={causal}"
        out.append(Finding("attention_tiled", backend, case, "; ".join(problems[:3])))
    return out


def _empty_case(op, an, backend, case, args, must_refuse, file=None) -> Finding:
    """A zero-length axis: refused by the op (where a denominator needs the size), or outputs of
    the declared shapes; where every output is empty, every gradient exactly 0 in its argument's
    shape."""
    u = file or op.name
    try:
        res, msg = _call(u, _forward(op, backend, file), *[_convert(backend, a) for a in args])
        if msg is not None:
            return Finding(u, backend, case)  # refused by name (a size, an id or a count)
        outs, cache = res
        if len(op.outputs) == 1 and isinstance(outs, tuple):
            return Finding(u, backend, case, "the one output returned as a tuple")
        outs = [_numpy(o) for o in as_tuple(outs)]
        if must_refuse and not all(o.size == 0 for o in outs):
            return Finding(u, backend, case, "a size a formula divides by is 0, accepted")
        if not all(o.size == 0 for o in outs):
            return Finding(u, backend, case)
        ups = [_convert(backend, np.ones(o.shape)) for o in outs]
        grads, msg = _call(u, _backward(op, backend, file), *ups, cache)
        if msg is not None:
            return Finding(u, backend, case, f"the backward refused: {msg}")
        pos = grad_positions(op)
        for k, g in enumerate(as_tuple(grads)):
            g = _numpy(g)
            if g.shape != np.shape(args[pos[k]]):
                return Finding(
                    u, backend, case, f"gradient {k} has shape {g.shape}, its argument {np.shape(args[pos[k]])}"
                )
            if np.any(g != 0):
                return Finding(u, backend, case, f"gradient {k} of an op with empty outputs is not 0")
        return Finding(u, backend, case)
    except _Refused as exc:
        return Finding(u, backend, case, str(exc))


# ------------------------------------------------------------------------------ steps, tables
def judge_step(step, backend: str) -> list[Finding]:
    fn = getattr(_module(backend, step.name), f"{step.name}_step")
    rng = np.random.default_rng(0)
    arrs = [rng.standard_normal((2, 3)) for _ in step.inputs]
    if len(arrs) > 3:
        arrs[3] = np.abs(arrs[3])  # v ≥ 0
    base = {"t": 3} if any(o.name == "t" for o in step.options) else {}
    out: list[Finding] = []
    u = step.name

    def refuse(case, args, **opts):
        _expect_refusal(out, u, backend, case, fn, *[_convert(backend, a) for a in args], **{**base, **opts})

    refuse("p as integers", [arrs[0].astype(np.int64)] + arrs[1:])
    refuse(f"{step.inputs[1].name} float32 beside float64", [arrs[0], arrs[1].astype(np.float32)] + arrs[2:])
    refuse(f"{step.inputs[1].name} of another shape", [arrs[0], np.zeros((3, 2))] + arrs[2:])
    if backend == "numpy":
        refuse("p as a list", [arrs[0].tolist()] + arrs[1:])
    for o in step.options:
        for value in _outside(o) + _wrong_kind(o):
            refuse(f"{o.name} = {value!r}", arrs, **{o.name: value})
        for value in _closed_ends(o) if o.symbol is not None else []:  # on the domain's edge: accepted
            _expect_accepted(
                out,
                u,
                backend,
                f"{o.name} = {value!r} (a closed end)",
                fn,
                *[_convert(backend, a) for a in arrs],
                **{**base, o.name: value},
            )
    return out


def judge_table(table, backend: str) -> list[Finding]:
    fn = getattr(_module(backend, table.file), table.name)
    out: list[Finding] = []
    u = table.name
    n = len(table.sizes)
    for k, s in enumerate(table.sizes):
        sizes = [4] * n
        sizes[k] = 0  # an empty table: its declared shape, no error
        try:
            got, msg = _call(u, fn, *sizes)
            shapes = [tuple(g.shape) for g in as_tuple(got)] if msg is None else []
            out.append(
                Finding(
                    u, backend, f"{s.name} = 0", msg or ("" if any(0 in sh for sh in shapes) else f"shapes {shapes}")
                )
            )
        except _Refused as exc:
            out.append(Finding(u, backend, f"{s.name} = 0", str(exc)))
        sizes[k] = -1
        _expect_refusal(out, u, backend, f"{s.name} = -1", fn, *sizes)
        sizes[k] = 2.5
        _expect_refusal(out, u, backend, f"{s.name} = 2.5", fn, *sizes)
        if s in table.even:  # taken in pairs: an odd one is refused
            sizes[k] = 5
            _expect_refusal(out, u, backend, f"{s.name} = 5 (odd)", fn, *sizes)
    if backend == "numpy":
        _expect_refusal(out, u, backend, "dtype = int64", fn, *([4] * n), dtype=np.int64)
        got = as_tuple(fn(*([4] * n), dtype=np.float32))
        out.append(
            Finding(
                u,
                backend,
                "dtype = float32",
                "" if all(g.dtype == np.float32 for g in got) else f"returned {[str(g.dtype) for g in got]}",
            )
        )
    else:
        import torch

        _expect_refusal(out, u, backend, "dtype = torch.int64", fn, *([4] * n), dtype=torch.int64)
        got = as_tuple(fn(*([4] * n), dtype=torch.float32))
        out.append(
            Finding(
                u,
                backend,
                "dtype = torch.float32",
                "" if all(g.dtype == torch.float32 for g in got) else f"returned {[str(g.dtype) for g in got]}",
            )
        )
        # a size given as a 0-d integer tensor reads as that integer
        same = as_tuple(fn(*[torch.tensor(4)] * n, dtype=torch.float64))
        want = as_tuple(fn(*([4] * n), dtype=torch.float64))
        out.append(
            Finding(
                u,
                backend,
                "sizes as 0-d integer tensors",
                "" if all(torch.equal(a, b) for a, b in zip(same, want)) else "differs from int sizes",
            )
        )
    for o in table.options:
        for value in _wrong_kind(o):
            _expect_refusal(out, u, backend, f"{o.name} = {value!r}", fn, *([4] * n), **{o.name: value})
        if o.symbol is not None and o.allowed() not in (sp.S.Reals, sp.S.Integers):
            for value in _outside(o):
                _expect_refusal(out, u, backend, f"{o.name} = {value}", fn, *([4] * n), **{o.name: value})
    return out


def judge_mha(backend: str) -> list[Finding]:
    """The mha template's own checks: features not divisible by the heads, a fused projection
    of the wrong width."""
    fn = _module(backend, "mha").mha_forward
    rng = np.random.default_rng(0)
    T, C = 3, 4
    x, w_qkv, b_qkv = rng.standard_normal((T, C)), rng.standard_normal((3 * C, C)), rng.standard_normal(3 * C)
    w_o, b_o = rng.standard_normal((C, C)), rng.standard_normal(C)
    out: list[Finding] = []
    conv = lambda *a: [_convert(backend, v) for v in a]  # noqa: E731
    _expect_refusal(out, "mha", backend, "n_head = 3 of C = 4", fn, *conv(x, w_qkv, b_qkv, w_o, b_o), n_head=3)
    _expect_refusal(out, "mha", backend, "n_head = 0", fn, *conv(x, w_qkv, b_qkv, w_o, b_o), n_head=0)
    _expect_refusal(out, "mha", backend, "n_head = 2.5", fn, *conv(x, w_qkv, b_qkv, w_o, b_o), n_head=2.5)
    # kinds that the divisibility check alone would let through (4 % True == 0, 4 % 2.0 == 0)
    for wrong in (True, 2.0, "2"):
        _expect_refusal(out, "mha", backend, f"n_head = {wrong!r}", fn, *conv(x, w_qkv, b_qkv, w_o, b_o), n_head=wrong)
    _expect_refusal(
        out, "mha", backend, "w_qkv of width 2C", fn, *conv(x, w_qkv[: 2 * C], b_qkv[: 2 * C], w_o, b_o), n_head=2
    )
    try:
        _, msg = _call("mha", fn, *conv(x, w_qkv, b_qkv, w_o, b_o), n_head=1)
        out.append(Finding("mha", backend, "n_head = 1 (one head of C)", msg or ""))
    except _Refused as exc:
        out.append(Finding("mha", backend, "n_head = 1 (one head of C)", str(exc)))
    if backend == "torch":
        module = _module(backend, "mha").MultiHeadAttention
        _expect_refusal(out, "mha", backend, "MultiHeadAttention(n_embd=5, n_head=2)", module, 5, 2)
        functional = _module(backend, "mha").mha  # the differentiable form checks its arguments itself
        for case, args, heads in (
            ("n_head = 2.5", conv(x, w_qkv, b_qkv, w_o, b_o), 2.5),
            ("n_head = True", conv(x, w_qkv, b_qkv, w_o, b_o), True),
            ("n_head = 3 of C = 4", conv(x, w_qkv, b_qkv, w_o, b_o), 3),
            ("w_qkv of width 2C", conv(x, w_qkv[: 2 * C], b_qkv[: 2 * C], w_o, b_o), 2),
        ):
            _expect_refusal(out, "mha", backend, f"mha(…, {case})", functional, *args, n_head=heads)
        try:  # one head is a valid module; no head is not
            module(C, 1)
            out.append(Finding("mha", backend, "MultiHeadAttention(n_embd=4, n_head=1)", ""))
        except Exception as exc:  # noqa: BLE001 - a refusal of a valid module is the finding
            out.append(Finding("mha", backend, "MultiHeadAttention(n_embd=4, n_head=1)", f"refused: {exc}"))
        _expect_refusal(out, "mha", backend, "MultiHeadAttention(n_embd=4, n_head=0)", module, C, 0)
        # leading axes: the functional form on a batch is the form on each slice of it
        import torch

        xb = rng.standard_normal((2, T, C))
        whole = functional(*conv(xb, w_qkv, b_qkv, w_o, b_o), n_head=2)
        slices = torch.stack([functional(*conv(xb[k], w_qkv, b_qkv, w_o, b_o), n_head=2) for k in range(2)])
        same = tuple(whole.shape) == (2, T, C) and torch.allclose(whole, slices, rtol=1e-12, atol=1e-12)
        out.append(Finding("mha", backend, "mha(…) on a batch of 2 = on each slice", "" if same else "differs"))
    return out


def judge_special(backend: str) -> list[Finding]:
    """The printed float32 erf and Φ take what NumPy's functions take: a list, a scalar, a
    float64 array (SciPy's), each equal to the call on the float32 or float64 array; and their
    float32 values lie in erf's and Φ's ranges."""
    if backend != "numpy":
        return []
    special = _module("numpy", "_special")
    out: list[Finding] = []
    for name in ("erf", "ndtr"):
        fn = getattr(special, name)
        for case, value, dtype in (
            ("a list", [0.25, -1.5], np.float64),
            ("a Python float", 0.75, np.float64),
            ("a float32 list", np.array([0.25, -1.5], np.float32).tolist(), np.float64),
        ):
            try:
                got = np.asarray(fn(value))
                want = np.asarray(fn(np.asarray(value, dtype=dtype)))
                bad = "" if got.shape == want.shape and np.array_equal(got, want) else f"{got} ≠ {want}"
            except Exception as exc:  # noqa: BLE001 - a raw error is the finding
                bad = f"raised {type(exc).__name__}: {exc}"
            out.append(Finding("special", backend, f"{name} of {case}", bad))
    # the causal mask's cache: one array per dtype, grown to the most rows and columns asked for,
    # every mask a read-only view of it, rebuilt only when a larger one is asked for
    special._CAUSAL_MASKS.clear()
    bad, base = "", None
    rows = cols = 0
    sequence = ((3, 5, True), (3, 4, False), (2, 5, False), (2, 6, True), (5, 3, True), (5, 6, False), (1, 2, False))
    for m, n, grows in sequence:
        rows, cols = max(rows, m), max(cols, n)
        got = special.causal_mask(m, n, np.float64)
        want = np.where(np.arange(n)[None, :] > np.arange(m)[:, None], -np.inf, 0.0)
        new_base = got.base if got.base is not None else got
        if got.shape != (m, n) or not np.array_equal(got, want):
            bad = bad or f"causal_mask({m}, {n}) is not B_ij = 0 (j ≤ i), −∞ (j > i)"
        elif (new_base is not base) != grows:
            bad = bad or f"causal_mask({m}, {n}) {'rebuilt' if not grows else 'did not grow'} the cached mask"
        elif new_base.shape != (rows, cols):
            bad = bad or f"after causal_mask({m}, {n}) the cache is {new_base.shape}, not {(rows, cols)}"
        elif got.flags.writeable or new_base.flags.writeable:
            bad = bad or "the cached mask is writeable (a caller's in-place edit would change every later mask)"
        base = new_base
    out.append(Finding("special", backend, "causal_mask's cache reused and grown", bad))
    # the range: |erf| ≤ 1 and 0 ≤ Φ ≤ 1 in float32 too. R's float32 evaluation exceeds 1 by an
    # ulp near the clamp (x ≈ ±3.98): the final clip is what keeps it in range, invisible to
    # the exact judges (|R| < 1 at every real x), so it is held here, on a grid that meets it
    x = np.linspace(-5, 5, 20001, dtype=np.float32)
    for name, lo in (("erf", -1.0), ("ndtr", 0.0)):
        y = getattr(special, name)(x)
        worst = x[np.argmax(np.maximum(y - 1, lo - y))]
        bad = "" if ((y >= lo) & (y <= 1)).all() else f"{name}({worst}) is outside [{lo}, 1]"
        out.append(Finding("special", backend, f"{name}'s float32 values in [{lo}, 1]", bad))
    return out


def judge_validate(backend: str) -> list[Finding]:
    """`_validate`'s generic checks that no op of the registry declares today, on a probe
    signature: a declared size that is a product of sizes (`size_is`), accepted at its value and
    refused one off; a signature with an unknown field refused where it is built."""
    v = _module(backend, "_validate")
    out: list[Finding] = []
    sig = v.Signature(
        "probe",
        floats=(("x", 2, False, "(r, c)"),),
        sizes=(("r", "x", -2),),
        size_is=(("x", -1, ("r", 2), "2·r"),),
        returns=("x",),
    )
    x = _convert(backend, np.zeros((3, 6)))
    try:
        _, msg = _call("probe", v.checked, sig, x=x)
        out.append(Finding("_validate", backend, "size_is at its value", msg or ""))
    except _Refused as exc:
        out.append(Finding("_validate", backend, "size_is at its value", str(exc)))
    _expect_refusal(out, "probe", backend, "size_is one off", v.checked, sig, x=_convert(backend, np.zeros((3, 5))))
    # the adjoint of a broadcast: sum_to(g, shape) sums g back over every extra leading axis (none,
    # one, two, three of them) and every axis where `shape` has 1, exactly (integer-valued floats)
    # (g itself with a length-1 axis too: an axis is summed where g's is longer than shape's,
    # read at its own position from either end)
    g4 = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5) % 7
    g1 = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4, 1) % 5
    cases = [
        (g4, s)
        for s in ((2, 3, 4, 5), (3, 4, 5), (4, 5), (5,), (1, 4, 5), (3, 1, 5), (1, 1, 1, 5), (2, 1, 4, 1), (1, 5))
    ]
    cases += [(g1, s) for s in ((2, 1, 1, 1), (3, 1, 1), (1, 3, 1, 1), (1, 1, 4, 1))]
    for g, shape in cases:
        extra = g.ndim - len(shape)
        want = g.sum(axis=tuple(range(extra)))
        ones = tuple(i for i, n in enumerate(shape) if n == 1 and want.shape[i] != 1)
        want = want.sum(axis=ones, keepdims=True) if ones else want
        try:
            got = _numpy(v.sum_to(_convert(backend, g), shape))
            bad = (
                "" if got.shape == want.shape and np.array_equal(got, want) else f"gave shape {got.shape}, other values"
            )
        except Exception as exc:  # noqa: BLE001 - a raw error is the finding
            bad = f"raised {type(exc).__name__}: {exc}"
        out.append(Finding("_validate", backend, f"sum_to {g.shape} -> {shape}", bad))
    # where only length-1 axes differ, sum_to is a view of g (its documented contract): no copy
    for g, shape in ((g1, (2, 3, 4)), (g4, (1, 2, 3, 4, 5)), (g1[0], (3, 4))):
        case = f"sum_to {g.shape} -> {shape}: a view"
        try:
            src = _convert(backend, g)
            got = v.sum_to(src, shape)
            shared = (
                np.shares_memory(got, src)
                if backend == "numpy"
                else got.untyped_storage().data_ptr() == src.untyped_storage().data_ptr()
            )
            same = np.array_equal(_numpy(got), g.reshape(shape))
            out.append(Finding("_validate", backend, case, "" if shared and same else "a copy, or other values"))
        except Exception as exc:  # noqa: BLE001 - a raw error is the finding
            out.append(Finding("_validate", backend, case, f"raised {type(exc).__name__}: {exc}"))
    # an option's domain with closed ends (no option declares a closed upper end today): each
    # end accepted, just past it refused
    for value, ok in ((0.0, True), (1.0, True), (-0.5, False), (1.5, False)):
        case = f"in_domain {value} in [0, 1]"
        try:
            _, msg = _call("probe", v.in_domain, "probe", "p", value, 0.0, 1.0, False, False)
            out.append(
                Finding(
                    "_validate",
                    backend,
                    case,
                    "" if (msg is None) == ok else f"wrongly {'refused' if ok else 'accepted'}",
                )
            )
        except _Refused as exc:
            out.append(Finding("_validate", backend, case, str(exc)))
    out += _judge_passed(v, backend)
    # an absent optional axis reads as length 1; a present one as its length
    row = _convert(backend, np.zeros(4))
    got = (v.dim(row, -2), v.dim(row, -1))
    out.append(Finding("_validate", backend, "dim of an absent axis", "" if got == (1, 4) else f"read {got}"))
    if backend == "torch":
        # while torch.compile traces, the checks that read tensor values are skipped (a compiled
        # caller checks ids before it enters the compiled code): they return without a word
        import torch

        compiling = torch.compiler.is_compiling
        torch.compiler.is_compiling = lambda: True
        try:
            skipped = (
                v.in_range("probe", "ids", torch.tensor([9]), 3, "V") is None
                and v.nonzero("probe", "n", torch.tensor([0]), "a count", "a mean") is None
                and v._call_key(sig, {"x": x}) is None  # nothing remembered inside a graph
            )
        finally:
            torch.compiler.is_compiling = compiling
        out.append(Finding("_validate", backend, "value checks while compiling", "" if skipped else "checked"))
    try:
        v.Signature("probe", no_such_field=())
        out.append(Finding("_validate", backend, "unknown field", "accepted"))
    except TypeError as exc:
        out.append(
            Finding(
                "_validate",
                backend,
                "unknown field",
                "" if str(exc).startswith("Signature of probe: unknown fields") else str(exc),
            )
        )
    return out


def _judge_passed(v, backend: str) -> list[Finding]:
    """`checked` remembers the calls that passed (`_PASSED`, by `_call_key`): a call that agrees
    with one in shape, dtype and option values is accepted again with its own arrays (promoted as
    the first was) and the same layout; one that differs in any of them is checked afresh and
    refused where it is wrong; ids are read at every call; the table stops growing at
    `_PASSED_MAX` keys."""
    out: list[Finding] = []

    def case(name: str, bad: str) -> None:
        out.append(Finding("_validate", backend, f"passed calls: {name}", bad))

    sig = v.Signature(
        "probe",
        options=(("eps", 0, None, True, True),),
        floats=(("x", 2, False, "(r, c)"),),
        sizes=(("r", "x", -2),),
        size_is=(("x", -1, ("r", 2), "2·r"),),
        returns=("x", "dtype"),
    )
    first, again = (_convert(backend, np.full((3, 6), float(i))) for i in (1, 2))
    try:
        (x1, d1), m1 = _call("probe", v.checked, sig, x=first, eps=0.5)
        (x2, d2), m2 = _call("probe", v.checked, sig, x=again, eps=0.5)
        same = x1 is first and x2 is again and type(d2) is type(d1) and d2 == d1 and not (m1 or m2)
        kept = v._call_key(sig, {"x": again, "eps": 0.5}) in v._PASSED
        case("the same key again", "" if same and kept else "other returns" if not same else "not remembered")
    except Exception as exc:  # noqa: BLE001 - a raw error (or a refusal) is the finding
        case("the same key again", f"raised {type(exc).__name__}: {exc}")
    for what, kwargs in (
        ("another shape", {"x": _convert(backend, np.zeros((3, 5))), "eps": 0.5}),
        ("another dtype", {"x": _convert(backend, np.zeros((3, 6), dtype=np.int64)), "eps": 0.5}),
        ("another option value", {"x": _convert(backend, np.zeros((3, 6))), "eps": -0.5}),
    ):
        _expect_refusal(out, "probe", backend, f"passed calls: {what}", v.checked, sig, **kwargs)
    # ids: in range at one call, out of it at the next of the same shape
    ids_sig = v.Signature("probe", integers=(("ids", 1, False, "(n,)"),), in_range=(("ids", 3, "3"),), returns=("ids",))
    for _ in range(2):
        _expect(
            out,
            False,
            "probe",
            backend,
            "passed calls: ids in range",
            v.checked,
            ids_sig,
            ids=_convert(backend, np.array([0, 2])),
        )
    _expect_refusal(
        out,
        "probe",
        backend,
        "passed calls: ids out of range",
        v.checked,
        ids_sig,
        ids=_convert(backend, np.array([9, 0])),
    )
    # an absent optional axis: each call gets its own array as a length-1 view, the same layout
    row_sig = v.Signature(
        "probe",
        floats=(("x", 1, False, "(r, c)"),),
        batched=(("x", 2),),
        promoted=("x",),
        layout=("x",),
        returns=("x", "layout"),
    )
    rows = [np.arange(4.0) + i for i in range(2)]
    try:
        got = [v.checked(row_sig, x=_convert(backend, r)) for r in rows]
        ok = all(tuple(x.shape) == (1, 4) and np.array_equal(_numpy(x)[0], r) for (x, _), r in zip(got, rows))
        bad = "" if ok and got[0][1] == got[1][1] else f"returned {[(tuple(x.shape), lay) for x, lay in got]}"
    except Exception as exc:  # noqa: BLE001 - a raw error is the finding
        bad = f"raised {type(exc).__name__}: {exc}"
    case("a promoted argument", bad)
    # a full table keeps what it has and remembers nothing new
    limit = v._PASSED_MAX
    v._PASSED_MAX = len(v._PASSED)
    try:
        fresh = _convert(backend, np.zeros((5, 10)))
        v.checked(sig, x=fresh, eps=0.5)
        bad = "remembered a new key" if v._call_key(sig, {"x": fresh, "eps": 0.5}) in v._PASSED else ""
    except Exception as exc:  # noqa: BLE001 - a raw error is the finding
        bad = f"raised {type(exc).__name__}: {exc}"
    finally:
        v._PASSED_MAX = limit
    case("a full table", bad)
    return out


def judge_defaults(unit, backend: str, kind: str) -> list[Finding]:
    """Every option's default as printed in each generated function of the unit equals the one
    the registry declares (the proofs hold for every value in the domain; the default is the
    declaration's, and nowhere else)."""
    import inspect

    out: list[Finding] = []
    if kind == "op":
        names, mod = [f"{unit.name}_forward"], _module(backend, unit.name)
    elif kind == "step":
        names, mod = [f"{unit.name}_step"], _module(backend, unit.name)
    else:
        names, mod = [unit.name], _module(backend, unit.file)
    # and every other public function or class printed in the module that takes the option (the
    # torch functional form, the nn.Module's constructor): each prints its own default
    for attr, value in vars(mod).items():
        if attr.startswith("_") or attr in names or getattr(value, "__module__", "") != mod.__name__:
            continue
        if callable(value) and any(o.name in _parameters(value) for o in unit.options):
            names.append(attr)
    for fn_name in names:
        params = _parameters(getattr(mod, fn_name))
        for o in unit.options:
            if fn_name not in names[:1] and o.name not in params:
                continue  # another callable, without this option
            printed = params[o.name].default if o.name in params else "absent"
            if printed is inspect.Parameter.empty:
                printed = None  # required: declared without a default
            want = o.default
            same = (
                printed == want
                and type(printed) is type(want)
                or (
                    isinstance(want, (int, float))
                    and not isinstance(want, bool)
                    and isinstance(printed, (int, float))
                    and float(printed) == float(want)
                )
            )
            out.append(
                Finding(
                    unit.name,
                    backend,
                    f"default {o.name} of {fn_name}",
                    "" if same else f"printed {printed!r}, declared {want!r}",
                )
            )
    return out


def _parameters(fn) -> dict:
    """The parameters of a function, or of a class's constructor."""
    import inspect

    try:
        return dict(inspect.signature(fn.__init__ if inspect.isclass(fn) else fn).parameters)
    except (TypeError, ValueError):
        return {}


def judge_option_types(unit, backend: str, kind: str) -> list[Finding]:
    """An option given as a library scalar is read as its number: NumPy float64 / int64 scalars
    beside float32 arrays leave the results float32 (NumPy would promote them to float64), and a
    0-d float64 tensor that requires grad leaves torch's results out of autograd's graph."""
    import numpy as np

    scalar_opts = [o for o in unit.options if o.symbol is not None]
    if not scalar_opts:
        return []
    if kind == "op":
        args = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in build(unit, sizes_of(unit))]
        fn = _forward(unit, backend)
    elif kind == "step":
        rng = np.random.default_rng(0)
        args = [np.abs(rng.standard_normal((2, 3))).astype(np.float32) for _ in unit.inputs]
        fn = getattr(_module(backend, unit.name), f"{unit.name}_step")
    else:  # a table: sizes, and the float32 dtype asked for
        import functools

        dtype = np.float32
        if backend == "torch":
            import torch

            dtype = torch.float32
        args = [4] * len(unit.sizes)
        fn = functools.partial(getattr(_module(backend, unit.file), unit.name), dtype=dtype)

    def value(o):
        v = o.default if o.default is not None else 3
        if backend == "numpy":
            return np.int64(v) if o.symbol.is_integer else np.float64(v)
        import torch

        return int(v) if o.symbol.is_integer else torch.tensor(float(v), dtype=torch.float64, requires_grad=True)

    opts = {o.name: value(o) for o in scalar_opts}
    try:
        # float() of a tensor that requires grad is the very conversion asked for: its warning is not
        # a finding
        res, msg = _call(
            unit.name,
            fn,
            *[_convert(backend, a) for a in args],
            _quiet="Converting a tensor with requires_grad",
            **opts,
        )
    except _Refused as exc:
        return [Finding(unit.name, backend, "options as library scalars", str(exc))]
    if msg is not None:
        return [Finding(unit.name, backend, "options as library scalars", f"refused: {msg}")]
    outs = res[0] if kind == "op" else res
    problems = []
    for k, o in enumerate(as_tuple(outs)):
        if backend == "numpy" and o.dtype != np.float32:
            problems.append(f"result {k} is {o.dtype}, its inputs float32")
        if backend == "torch" and getattr(o, "grad_fn", None) is not None:
            problems.append(f"result {k} depends on an option tensor in autograd's graph")
    return [Finding(unit.name, backend, "options as library scalars", "; ".join(problems))]


def judge_module_init(backend: str, names=None) -> list[Finding]:
    """The printed torch `nn.Module`s start where the model expects: every bias and shift 0,
    every gain 1, every weight drawn with standard deviation 0.02 (measured on a 96 × 96 draw:
    within 10 %), all finite."""
    if backend != "torch":
        return []
    import inspect

    import torch

    from derivations import registry

    out: list[Finding] = []
    for op in registry.ops():
        if names is not None and op.name not in names:
            continue
        mod = _module("torch", op.name)
        classes = [
            c
            for _, c in inspect.getmembers(mod, inspect.isclass)
            if issubclass(c, torch.nn.Module) and c.__module__ == mod.__name__
        ]
        for cls in classes:
            params = [
                p
                for p in inspect.signature(cls.__init__).parameters.values()
                if p.name != "self" and p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD
            ]
            torch.manual_seed(0)
            try:
                m = cls(*[96] * len(params), dtype=torch.float64)
            except TypeError:
                continue
            for name, p in m.named_parameters():
                v = p.detach()
                if name.startswith("b") or name in ("beta", "bias"):
                    ok, want = bool(torch.all(v == 0)), "0"
                elif name in ("gamma", "weight") and v.dim() == 1:
                    ok, want = bool(torch.all(v == 1)), "1"
                else:
                    std = float(v.std())
                    ok, want = bool(torch.isfinite(v).all()) and 0.018 <= std <= 0.022, "std 0.02"
                out.append(
                    Finding(op.name, "torch", f"{cls.__name__}.{name} starts at {want}", "" if ok else "it does not")
                )
    return out


def judge_all(backends=BACKENDS, names=None) -> tuple[list[Finding], float]:
    """Every op, step and table of the registry (or those named), in each backend: (findings,
    seconds)."""
    from derivations import registry

    t0 = time.perf_counter()
    out: list[Finding] = []
    for backend in backends:
        for op in registry.ops():
            if names is None or op.name in names:
                out += judge_op(op, backend)
        for step in registry.steps():
            if names is None or step.name in names:
                out += judge_step(step, backend)
        for table in registry.tables():
            if names is None or table.name in names or table.file in names:
                out += judge_table(table, backend)
        if names is None or "mha" in names:
            out += judge_mha(backend)
        if names is None or "attention_tiled" in names:
            out += judge_tiled(backend)
        for kind, group in (("op", registry.ops()), ("step", registry.steps()), ("table", registry.tables())):
            for unit in group:
                if names is None or unit.name in names:
                    out += judge_defaults(unit, backend, kind) + judge_option_types(unit, backend, kind)
        if names is None:
            out += judge_module_init(backend)
        if names is None:
            out += judge_validate(backend)
    return out, time.perf_counter() - t0


def main() -> int:  # pragma: no cover - python -m qed.tools.judge_edges
    findings, seconds = judge_all()
    bad = [f for f in findings if not f.ok]
    for f in bad:
        print(f)
    print(f"{len(findings) - len(bad)}/{len(findings)} edge calls as required ({seconds:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
