"""Numeric checks of the generated kernels, one test per op x backend, from the registry.

For every op: the NumPy backward against float64 central differences of the NumPy forward
(loss = Σ dout·out, random dout); `torch.autograd.gradcheck` on the generated
`torch.autograd.Function`; NumPy and PyTorch agreeing to 1e-10 (relative, float64) on outputs
and gradients; float32 in, float32 out. Inputs are built from the op's declarations alone
(size symbols get small distinct values, inputs a batch axis of 2, ids random in range), so a
new op in the registry is tested without touching this file.
"""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest
import sympy as sp
import torch

from codegen.analysis import analyse, storage_shape
from codegen.contexts.common import class_name
from derivations.registry import ops

OPS = list(ops())
NAMES = [o.name for o in OPS]

# Small, distinct example sizes; a symbol not listed gets the next unused value of 2..5.
SIZES = {
    "r": 3,
    "n": 4,
    "m": 3,
    "d_k": 4,
    "d_v": 2,
    "T": 3,
    "V": 5,
    "d": 3,
    "n_in": 3,
    "n_out": 2,
    "h": 2,
    "d_model": 4,
    "d_ff": 5,
}
BATCH = (2,)


def example_sizes(op) -> dict:
    an = analyse(op)
    syms = set()
    for a in an.args:
        for dim in a.array.shape:
            syms |= sp.sympify(dim).free_symbols
    syms |= set(op.sizes)
    out = {}
    spare = itertools.cycle(range(2, 6))
    for s in sorted(syms, key=lambda s: s.name):
        out[s] = SIZES.get(s.name) or next(spare)
    return out


def option_sets(op) -> list[dict]:
    """Defaults, then each boolean option switched on in turn."""
    sets = [{}]
    for o in op.options:
        if isinstance(o.default, bool):
            sets.append({o.name: not o.default})
    return sets


def make_inputs(op, seed=0, dtype=np.float64) -> list:
    """Positional arguments of `<op>_forward` as NumPy arrays."""
    an = analyse(op)
    sizes = example_sizes(op)
    rng = np.random.default_rng(seed)
    bounds = {}
    for a, bound in an.id_bounds:
        b = int(sp.sympify(bound).xreplace(sizes))
        bounds[a.name] = min(bounds.get(a.name, b), b)
    args = []
    for a in an.args:
        shape = storage_shape(a.array, a.integer, a.batched, sizes, BATCH)
        if a.integer:
            args.append(rng.integers(0, bounds.get(a.name, 5), size=shape))
        else:
            args.append(rng.standard_normal(shape).astype(dtype))
    return args


def modules(op):
    analyse(op)  # an op that cannot be generated fails here, with the generator's reason
    return (
        importlib.import_module(f"generated.numpy.{op.name}"),
        importlib.import_module(f"generated.torch.{op.name}"),
    )


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def numpy_run(op, args, opts, douts=None, seed=1):
    npm, _ = modules(op)
    outs, cache = getattr(npm, f"{op.name}_forward")(*args, **opts)
    outs = as_tuple(outs)
    if douts is None:
        rng = np.random.default_rng(seed)
        douts = [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]
    grads = as_tuple(getattr(npm, f"{op.name}_backward")(*douts, cache))
    return outs, douts, grads, cache


def float_positions(op):
    """Positions of the arguments that have a gradient: float inputs and params, except the
    op's constant inputs (tables: no gradient, held fixed by finite differences and gradcheck)."""
    an = analyse(op)
    return [i for i, a in enumerate(an.args) if a.differentiable]


def test_constant_inputs_get_no_gradient():
    """An op with constant inputs returns one gradient per *differentiable* argument, and its
    torch Function returns None for the constants (they may not require grad at all)."""
    for op in [o for o in OPS if o.constant_inputs]:
        args = make_inputs(op)
        _, _, grads, _ = numpy_run(op, args, {})
        assert len(grads) == len(float_positions(op)) == len(op.grads)
        _, tm = modules(op)
        an = analyse(op)
        targs = [torch.tensor(a, requires_grad=not arg.integer) for a, arg in zip(args, an.args)]
        getattr(tm, op.name)(*targs).sum().backward()
        for t, a in zip(targs, an.args):
            assert (t.grad is None) == (not a.differentiable), a.name


@pytest.mark.parametrize("op", OPS, ids=[f"{n}-numpy" for n in NAMES])
def test_backward_finite_differences(op):
    for opts in option_sets(op):
        args = make_inputs(op)
        outs, douts, grads, _ = numpy_run(op, args, opts)
        npm, _ = modules(op)
        fwd = getattr(npm, f"{op.name}_forward")

        def loss(xs, fwd=fwd, opts=opts, douts=douts):
            o, _ = fwd(*xs, **opts)
            return sum(float(np.sum(d * y)) for d, y in zip(douts, as_tuple(o)))

        h = 1e-6
        for g, pos in zip(grads, float_positions(op)):
            x = args[pos]
            num = np.zeros_like(x)
            for idx in np.ndindex(x.shape):
                plus = [a.copy() for a in args]
                minus = [a.copy() for a in args]
                plus[pos][idx] += h
                minus[pos][idx] -= h
                num[idx] = (loss(plus) - loss(minus)) / (2 * h)
            assert g.shape == x.shape, f"{op.name}: gradient of arg {pos} has shape {g.shape}"
            np.testing.assert_allclose(
                g, num, rtol=1e-5, atol=1e-7, err_msg=f"{op.name} {opts}: gradient of argument {pos}"
            )


@pytest.mark.parametrize("op", OPS, ids=[f"{n}-torch" for n in NAMES])
def test_gradcheck(op):
    positions = set(float_positions(op))
    _, tm = modules(op)
    fn = getattr(tm, f"{class_name(op.name)}Function")
    for opts in option_sets(op):
        args = [torch.tensor(a, requires_grad=i in positions) for i, a in enumerate(make_inputs(op))]
        options = [opts.get(o.name, o.default) for o in op.options]
        assert torch.autograd.gradcheck(
            lambda *xs, options=options: fn.apply(*xs, *options), tuple(args), eps=1e-6, atol=1e-6, rtol=1e-5
        )


@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_numpy_matches_torch(op):
    _, tm = modules(op)
    for opts in option_sets(op):
        args = make_inputs(op)
        outs, douts, grads, _ = numpy_run(op, args, opts)
        t_outs, t_cache = getattr(tm, f"{op.name}_forward")(*[torch.tensor(a) for a in args], **opts)
        t_grads = as_tuple(getattr(tm, f"{op.name}_backward")(*[torch.tensor(d) for d in douts], t_cache))
        for a, b in zip(outs + grads, as_tuple(t_outs) + t_grads):
            b = b.numpy()
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_float32(op, backend):
    args = make_inputs(op, dtype=np.float32)
    npm, tm = modules(op)
    mod = npm if backend == "numpy" else tm
    conv = (lambda a: a) if backend == "numpy" else torch.tensor
    for opts in option_sets(op):
        outs, cache = getattr(mod, f"{op.name}_forward")(*[conv(a) for a in args], **opts)
        douts = [o * 0 + 1 for o in as_tuple(outs)]
        grads = as_tuple(getattr(mod, f"{op.name}_backward")(*douts, cache))
        f32 = np.float32 if backend == "numpy" else torch.float32
        for y in as_tuple(outs) + grads:
            assert y.dtype == f32, f"{op.name}-{backend}: float32 in, {y.dtype} out"
        for c in cache:
            if hasattr(c, "dtype") and (c.dtype.kind == "f" if backend == "numpy" else c.dtype.is_floating_point):
                assert c.dtype == f32, f"{op.name}-{backend}: cache holds {c.dtype}"


@pytest.mark.parametrize("op", [o for o in OPS if o.params], ids=[o.name for o in OPS if o.params])
def test_module(op):
    """The nn.Module holds the params with the stored shapes and trains them through autograd."""
    _, tm = modules(op)
    an = analyse(op)
    cls = getattr(tm, class_name(op.name))
    sizes = example_sizes(op)
    # the constructor takes the param sizes in order of first appearance
    order = []
    for p in op.params:
        for d in p.shape:
            for s in sorted(sp.sympify(d).free_symbols, key=lambda s: s.name):
                if s not in order:
                    order.append(s)
    module = cls(*[sizes[s] for s in order], dtype=torch.float64)
    params = dict(module.named_parameters())
    assert len(params) == len(op.params)
    for p, (_, value) in zip(op.params, params.items()):
        assert tuple(value.shape) == storage_shape(p, False, False, sizes)
    inputs = [torch.tensor(a) for a, arg in zip(make_inputs(op), an.args) if arg.role == "input"]
    out = module(*inputs)
    sum(o.sum() for o in as_tuple(out)).backward()
    assert all(v.grad is not None for v in params.values())


# ------------------------------------------------------------------------------ optimiser steps
from derivations.registry import steps  # noqa: E402

STEPS = list(steps())
STEP_NAMES = [s.name for s in STEPS]


def step_args(st, seed=0, dtype=np.float64, shape=(3, 4)):
    rng = np.random.default_rng(seed)
    args = []
    for a in st.inputs:
        x = rng.standard_normal(shape)
        if a in getattr(st, "state", []) and a is st.inputs[-1]:
            x = np.abs(x)  # the second moment is a mean of squares: v >= 0
        args.append(x.astype(dtype))
    opts = {o.name: (3 if o.default is None else o.default) for o in st.options}
    return args, opts


def step_fn(st, backend):
    return getattr(importlib.import_module(f"generated.{backend}.{st.name}"), f"{st.name}_step")


@pytest.mark.parametrize("st", STEPS, ids=STEP_NAMES)
def test_step_numpy_matches_torch_and_sympy(st):
    args, opts = step_args(st)
    out_np = as_tuple(step_fn(st, "numpy")(*args, **opts))
    out_t = as_tuple(step_fn(st, "torch")(*[torch.tensor(a) for a in args], **opts))
    for a, b in zip(out_np, out_t):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-14)
    # the printed code against SymPy's own evaluation of the step's expression, entry by entry
    symbols = {o.symbol: opts[o.name] for o in st.options if o.symbol is not None}
    for out, target in zip(out_np, st.outputs):
        expr = st.value(target)
        for idx in [(0, 0), (1, 2), (2, 3)]:
            point = {a: float(x[idx]) for a, x in zip(st.inputs, args)} | symbols
            want = float(expr.xreplace({k: sp.Float(v, 30) for k, v in point.items()}).evalf(30))
            assert out[idx] == pytest.approx(want, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("st", STEPS, ids=STEP_NAMES)
def test_step_float32(st, backend):
    args, opts = step_args(st, dtype=np.float32)
    if backend == "torch":
        args = [torch.tensor(a) for a in args]
    for y in as_tuple(step_fn(st, backend)(*args, **opts)):
        assert y.dtype == (np.float32 if backend == "numpy" else torch.float32)


# PyTorch's own optimisers as the independent reference (per step: test data, not generator code)
TORCH_OPTIMS = {
    "sgd": lambda p, o: torch.optim.SGD([p], lr=o["lr"]),
    "adam": lambda p, o: torch.optim.Adam([p], lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"]),
    "adamw": lambda p, o: torch.optim.AdamW(
        [p], lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], weight_decay=o["weight_decay"]
    ),
}


@pytest.mark.parametrize(
    "st", [s for s in STEPS if s.name in TORCH_OPTIMS], ids=[s.name for s in STEPS if s.name in TORCH_OPTIMS]
)
def test_step_matches_torch_optim(st):
    """Ten steps of the generated step against torch.optim on the same gradients."""
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal((3, 4))
    grads = [rng.standard_normal((3, 4)) for _ in range(10)]
    _, opts = step_args(st)
    opts = {k: v for k, v in opts.items() if k != "t"}
    ref = torch.tensor(p0, requires_grad=True)
    optim = TORCH_OPTIMS[st.name](ref, opts)
    p, state = p0.copy(), [np.zeros_like(p0) for _ in getattr(st, "state", [])]
    fn = step_fn(st, "numpy")
    for t, g in enumerate(grads, start=1):
        ref.grad = torch.tensor(g)
        optim.step()
        kw = dict(opts, t=t) if any(o.name == "t" for o in st.options) else opts
        out = as_tuple(fn(p, g, *state, **kw))
        p, state = out[0], list(out[1:])
    np.testing.assert_allclose(p, ref.detach().numpy(), rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------ PyTorch's own ops
# The independent reference for each op that PyTorch has (test data, keyed by op name; an op
# without an entry is skipped here and still checked above against finite differences).
F = torch.nn.functional


def _ce(logits, targets, mask):
    per_token = F.cross_entropy(logits.flatten(0, -2), targets.long().flatten(), reduction="none")
    w = mask.flatten().to(logits.dtype)
    return ((per_token * w).sum() / w.sum()).reshape(1)


REFERENCES = {
    "softmax": lambda x: F.softmax(x, dim=-1),
    "attention": lambda q, k, v, causal=False: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    "attention_lse": lambda q, k, v, causal=False: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    "linear": F.linear,
    "linear_nobias": F.linear,
    "embedding": lambda ids, w: F.embedding(ids.long(), w),
    "cross_entropy": _ce,
    "ffn_relu": lambda x, w1, b1, w2, b2: F.linear(F.relu(F.linear(x, w1, b1)), w2, b2),
}
# the ops that declare PyTorch's own function with their formula (`Op.reference`: the
# activations, the MLP ops, every op declared by its forward alone that names one)
REFERENCES.update({o.name: (lambda *t, o=o, **kw: o.reference(torch, *t, **kw)) for o in OPS if o.reference})
REF_OPS = [o for o in OPS if o.name in REFERENCES]


@pytest.mark.parametrize("op", REF_OPS, ids=[o.name for o in REF_OPS])
def test_matches_pytorch(op):
    """Outputs and autograd gradients of the generated functional against PyTorch's own op."""
    _, tm = modules(op)
    positions = set(float_positions(op))
    for opts in option_sets(op):
        base = make_inputs(op, seed=3)
        ours = [torch.tensor(a, requires_grad=i in positions) for i, a in enumerate(base)]
        ref = [torch.tensor(a, requires_grad=i in positions) for i, a in enumerate(base)]
        y = as_tuple(getattr(tm, op.name)(*ours, **opts))
        y_ref = as_tuple(REFERENCES[op.name](*ref, **opts))
        gen = torch.Generator().manual_seed(0)
        douts = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in y]
        sum((d * o).sum() for d, o in zip(douts, y)).backward()
        sum((d * o).sum() for d, o in zip(douts, y_ref)).backward()
        for a, b in zip(y, y_ref):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        for i in sorted(positions):
            torch.testing.assert_close(ours[i].grad, ref[i].grad, rtol=1e-9, atol=1e-11)


# ------------------------------------------------------------------------------ constant tables
from derivations.registry import tables  # noqa: E402

TABLES = list(tables())
TABLE_NAMES = [t.name for t in TABLES]


def table_fn(table, backend):
    return getattr(importlib.import_module(f"generated.{backend}.{table.file}"), table.name)


def as_arrays(out):
    return [o.numpy() if isinstance(o, torch.Tensor) else o for o in as_tuple(out)]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("table", TABLES, ids=TABLE_NAMES)
def test_table_matches_sympy(table, backend):
    """Every entry of the generated table equals the table's SymPy formula evaluated exactly
    (30 digits) at concrete sizes: even and odd widths, another base, one row. A table that
    takes its width in pairs (RoPE's) refuses an odd one by name."""
    for sizes, opts in (({"T": 7, "d": 6}, {}), ({"T": 4, "d": 5}, {"base": 500.0}), ({"T": 1, "d": 2}, {})):
        args = [sizes[s.name] for s in table.sizes]
        dtype = np.float64 if backend == "numpy" else torch.float64
        odd = [s.name for s in table.even if sizes[s.name] % 2]
        if odd:
            with pytest.raises(ValueError, match=f"{table.name}: {odd[0]} = {sizes[odd[0]]}; expected an even"):
                table_fn(table, backend)(*args, **opts, dtype=dtype)
            continue
        out = as_arrays(table_fn(table, backend)(*args, **opts, dtype=dtype))
        assert len(out) == len(table.arrays)
        for got, arr in zip(out, table.arrays):
            shape = tuple(int(sp.sympify(d).xreplace({s: sizes[s.name] for s in table.sizes})) for d in arr.shape)
            assert got.shape == shape and got.dtype == np.float64
            for r_, c_ in np.ndindex(shape):
                want = float(sp.N(table.value(arr.name, r_, c_, sizes, opts), 30))
                assert got[r_, c_] == pytest.approx(want, rel=1e-13, abs=1e-14), (
                    f"{table.name}.{arr.name}[{r_}, {c_}] at {sizes} {opts}"
                )


@pytest.mark.parametrize("table", TABLES, ids=TABLE_NAMES)
def test_table_dtypes_and_fresh_arrays(table):
    """float32 out for float32 asked (rounded from float64, so equal to the float64 table cast);
    the library default dtype when none is asked; fresh, contiguous, writable arrays;
    numpy and torch agree exactly."""
    args = [6 if s.name != "d" else 4 for s in table.sizes]
    np64 = as_arrays(table_fn(table, "numpy")(*args, dtype=np.float64))
    np32 = as_arrays(table_fn(table, "numpy")(*args, dtype=np.float32))
    t64 = as_tuple(table_fn(table, "torch")(*args, dtype=torch.float64, device="cpu"))
    t32 = as_tuple(table_fn(table, "torch")(*args, dtype=torch.float32))
    default_np = as_arrays(table_fn(table, "numpy")(*args))
    default_t = as_tuple(table_fn(table, "torch")(*args))
    for a64, a32, b64, b32, dn, dt in zip(np64, np32, t64, t32, default_np, default_t):
        assert a32.dtype == np.float32 and b32.dtype == torch.float32
        assert dn.dtype == np.float64 and dt.dtype == torch.get_default_dtype()
        np.testing.assert_array_equal(a32, a64.astype(np.float32))
        np.testing.assert_array_equal(b64.numpy(), a64)
        np.testing.assert_array_equal(b32.numpy(), a32)
        assert a64.flags.c_contiguous and a64.flags.writeable and a64.base is None
        assert b64.is_contiguous() and b32.is_contiguous()
    # results are not cached views: writing into one leaves the next call's result unchanged
    first = as_arrays(table_fn(table, "numpy")(*args, dtype=np.float64))
    for a in first:
        a[...] = 0
    for a, b in zip(as_arrays(table_fn(table, "numpy")(*args, dtype=np.float64)), np64):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("table", TABLES, ids=TABLE_NAMES)
def test_table_argument_errors(table, backend):
    fn = table_fn(table, backend)
    good = [4 for _ in table.sizes]  # even: RoPE's d is taken in pairs
    name = table.sizes[0].name
    with pytest.raises(TypeError, match=f"{table.name}: {name} must be an integer, got float"):
        fn(3.0, *good[1:])
    with pytest.raises(ValueError, match=f"{table.name}: {name} must be >= 0, got -1"):
        fn(-1, *good[1:])
    bad_dtype = np.int64 if backend == "numpy" else torch.int64
    with pytest.raises(ValueError, match=f"{table.name}: dtype must be a floating"):
        fn(*good, dtype=bad_dtype)
    empty = as_arrays(fn(*[0 for _ in table.sizes]))  # zero sizes: empty tables, no error
    assert all(a.size == 0 for a in empty)


# ------------------------------------------------------------------------------ edge inputs
# Activations at huge, moderate and tiny arguments; cross-entropy at logits of ±1e4; norms on
# constant rows. Outputs and gradients must be finite, and NumPy must not warn: overflow,
# division by zero and invalid operations raise here. Underflow is left at NumPy's default
# (ignored): exp(−2e4) in a softmax, φ(1e4) = exp(−5e7)/√(2π) in GELU, (1e-30)² in float32 are
# *correctly* rounded to 0 (or a subnormal), and no formula can avoid producing them.
EDGE = [1e4, -1e4, 80.0, -80.0, 1e-30, -1e-30]


def edge_cases(dtype):
    x = np.array([EDGE], dtype=dtype)  # (1, 6)
    eye = np.eye(len(EDGE), dtype=dtype)
    logits = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4], [1e4, 1e4, 1e4]], dtype=dtype)
    const = np.array([[0.1] * 5, [0.0] * 5, [-3e4] * 5], dtype=dtype)
    from derivations.language.ops import model_role

    return {
        **{o.name: [x] for o in OPS if model_role(o) == "activation"},
        **{o.name: [x, eye, eye, eye] for o in OPS if model_role(o) == "ffn"},  # g = u = x
        "cross_entropy": [logits, np.array([0, 1, 2]), np.array([1, 1, 1])],
        "softmax": [logits],
        "layernorm": [const, np.ones(5, dtype), np.zeros(5, dtype)],
        "rmsnorm": [const, np.ones(5, dtype)],
    }


EDGE_OPS = [o for o in OPS if o.name in edge_cases(np.float64)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", EDGE_OPS, ids=[o.name for o in EDGE_OPS])
def test_edge_inputs_finite_without_warnings(op, dtype):
    import warnings

    args = edge_cases(dtype)[op.name]
    npm, tm = modules(op)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise", under="ignore"):
            outs, cache = getattr(npm, f"{op.name}_forward")(*args)
            outs = as_tuple(outs)
            grads = as_tuple(getattr(npm, f"{op.name}_backward")(*[np.ones_like(o) for o in outs], cache))
    for a in outs + grads:
        assert a.dtype == dtype and np.isfinite(a).all(), f"{op.name} numpy: {a}"
    t_outs, t_cache = getattr(tm, f"{op.name}_forward")(*[torch.tensor(a) for a in args])
    t_outs = as_tuple(t_outs)
    t_grads = as_tuple(getattr(tm, f"{op.name}_backward")(*[torch.ones_like(o) for o in t_outs], t_cache))
    for a, b in zip(outs + grads, t_outs + t_grads):
        assert torch.isfinite(b).all(), f"{op.name} torch: {b}"
        np.testing.assert_allclose(b.numpy(), a, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-30)


def test_silu_edge_values():
    """SiLU prints σ as expit/sigmoid: exact limits at ±1e4 (0 and x), no exp overflow."""
    npm = importlib.import_module("generated.numpy.silu")
    for dtype in (np.float32, np.float64):
        x = np.array([[-1e4, 1e4, -80.0]], dtype=dtype)
        with np.errstate(all="raise"):
            y, cache = npm.silu_forward(x)
            dx = npm.silu_backward(np.ones_like(y), cache)
        assert y[0, 0] == 0 and y[0, 1] == dtype(1e4) and dx[0, 0] == 0 and dx[0, 1] == 1
        assert y[0, 2] == pytest.approx(-80 / (1 + np.exp(80.0)), rel=1e-6)


@pytest.mark.parametrize(
    "name, reference",
    [
        ("layernorm", lambda n: torch.nn.LayerNorm(n, dtype=torch.float64)),
        ("rmsnorm", lambda n: torch.nn.RMSNorm(n, eps=1e-5, dtype=torch.float64)),
    ],
)
def test_norm_modules_look_like_pytorchs(name, reference):
    """Layernorm/Rmsnorm: PyTorch's parameter names (weight, bias), initial values (ones,
    zeros), so a state_dict loads either way, and the same outputs."""
    tm = importlib.import_module(f"generated.torch.{name}")
    ours, ref = getattr(tm, class_name(name))(6, dtype=torch.float64), reference(6)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[k], v)
    with torch.no_grad():
        for p in ref.parameters():
            p.uniform_(-1, 1)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-12, atol=1e-12)
