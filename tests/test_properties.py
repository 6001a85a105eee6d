"""Property tests over shapes: every generated op, any small sizes (1 and odd included), any
number of leading batch axes — NumPy and PyTorch agree, gradients have their arguments' shapes."""

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_kernels import OPS, as_tuple, float_positions, modules

from codegen.analysis import analyse, storage_shape


def arguments(op, sizes: dict, batch: tuple, seed: int) -> list:
    an = analyse(op)
    rng = np.random.default_rng(seed)
    bounds = {}
    for a, bound in an.id_bounds:
        bounds[a.name] = min(bounds.get(a.name, 10**9), int(sp.sympify(bound).xreplace(sizes)))
    args = []
    for a in an.args:
        shape = storage_shape(a.array, a.integer, a.batched, sizes, batch)
        if a.integer and a.name == "mask":  # the loss's token mask: at least one scored token
            args.append(np.ones(shape, dtype=np.int64))
        elif a.integer:
            args.append(rng.integers(0, bounds.get(a.name, 5), size=shape))
        else:
            args.append(rng.standard_normal(shape))
    return args


def size_symbols(op) -> list:
    syms = set(op.sizes)
    for a in analyse(op).args:
        for dim in a.array.shape:
            syms |= sp.sympify(dim).free_symbols
    return sorted(syms, key=lambda s: s.name)


@pytest.mark.parametrize("op", OPS, ids=[o.name for o in OPS])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_shape_numpy_matches_torch(op, data):
    sizes = {s: data.draw(st.integers(1, 5), label=s.name) for s in size_symbols(op)}
    batch = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2), label="batch"))
    seed = data.draw(st.integers(0, 2**16), label="seed")
    args = arguments(op, sizes, batch, seed)
    npm, tm = modules(op)
    outs, cache = getattr(npm, f"{op.name}_forward")(*args)
    outs = as_tuple(outs)
    rng = np.random.default_rng(seed + 1)
    douts = [rng.standard_normal(o.shape) for o in outs]
    grads = as_tuple(getattr(npm, f"{op.name}_backward")(*douts, cache))
    t_outs, t_cache = getattr(tm, f"{op.name}_forward")(*(torch.tensor(a) for a in args))
    t_grads = as_tuple(getattr(tm, f"{op.name}_backward")(*(torch.tensor(d) for d in douts), t_cache))
    for a, b in zip(outs, as_tuple(t_outs)):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)
    positions = float_positions(op)
    assert len(grads) == len(positions)
    for i, g, tg in zip(positions, grads, t_grads):
        assert g.shape == args[i].shape, f"d{analyse(op).args[i].name}: {g.shape} vs {args[i].shape}"
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, tg.numpy(), rtol=1e-10, atol=1e-12)
