"""PyTorch's own OpInfo samples through qed's generated kernels, both backends, both passes.

For every OpInfo in `torch.testing._internal.common_methods_invocations.op_db` whose function
qed has an op for (`ADAPTERS`), every float64 sample input is mapped to qed's call, run through
the generated NumPy kernel (`<op>_forward`, `<op>_backward`) and the generated PyTorch one (the
autograd `<op>` function), and compared with torch's own op (forward) and its autograd
(backward, one random upstream gradient per sample, the same for both).

The adapters translate calling conventions only, never math: qed's row axis is the last one, so
softmax's `dim` and cross-entropy's class axis 1 are moved there (and back); layer_norm's and
rms_norm's `normalized_shape` of k axes is one axis of their product (a reshape, weight and bias
alike); a missing weight or bias is ones or zeros (no gradient compared for it); cross-entropy's
`ignore_index` is qed's mask; rms_norm's `eps=None` is torch's `finfo(float64).eps`. A sample that
uses an option qed does not offer is skipped and counted by reason (`SKIP_*`); everything else
must agree, and a kernel that refuses a sample fails the test.

Counts at torch 2.13 (float64, CPU), the same for numpy and torch: 108 samples of 10 OpInfos
(softmax and its with_dtype variant, layer_norm, rms_norm, linear, relu, gelu, silu,
scaled_dot_product_attention, cross_entropy, embedding); 78 agree, forward and every gradient,
0 mismatch, 0 refused; 30 skipped, by the option qed does not offer:
    dropout_p > 0 (scaled_dot_product_attention)                              12
    attn_mask (scaled_dot_product_attention)                                   1
    class-probability targets (cross_entropy)                                 10
    class weights (cross_entropy)                                              3
    reduction 'sum' / 'none' (cross_entropy: qed's loss is the mean)           2
    eps <= 0 (layer_norm and rms_norm, one each: eps = -0.5; qed's eps > 0)    2
The agreeing samples include 0-D and 1-D inputs (softmax, relu, silu, linear, layer_norm,
embedding ids), empty ones ((5, 0, 0) softmax, (0, 3) linear, (1, 0, 3) silu, (0, 1)
layer_norm), a non-last softmax axis, normalized_shape of 2 and 3 axes, ignore_index, causal
attention with 3 queries and 6 keys, and q (4, 3, 8) broadcast against k, v (4, 4, 6, 8).
`test_opinfo_samples_agree` asserts these counts (EXPECTED_*).

Importing op_db takes about 7 s on these machines (torch itself about 2.5 s more): it is imported
once per session, in the fixture.
"""

from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from codegen.analysis import analyse
from derivations import registry

pytest.importorskip("expecttest")  # op_db's test utilities import it

OPS = {o.name: o for o in registry.ops()}


class Skip(Exception):
    """A sample that uses an option qed does not offer (the reason is counted)."""


@dataclass
class Call:
    """One sample in qed's terms: the op, its arguments (torch tensors, in qed's layout), its
    options, how each argument came from a sample tensor (its leaf and how its gradient goes
    back to the leaf's layout), and how qed's output goes back to torch's layout."""

    op: str
    args: list
    options: dict = field(default_factory=dict)
    leaves: list = field(default_factory=list)  # per arg: (leaf tensor or None, back(g))
    out_back: object = None  # qed output -> torch output layout
    up_to: object = None  # torch upstream gradient -> qed layout


def _same(t):
    return lambda g: g


def _moved(t, src, dst=-1):
    """t with axis `src` moved to `dst`, the map there and the map back home."""
    if t.dim() == 0:
        return t.detach(), _same(t), _same(t)
    return t.detach().movedim(src, dst), (lambda g: g.movedim(src, dst)), (lambda g: g.movedim(dst, src))


# ------------------------------------------------------------------------------ adapters
def _softmax(s):
    dtype = s.kwargs.get("dtype")
    if dtype not in (None, torch.float64):
        raise Skip("dtype conversion (softmax)")
    x = s.input
    dim = s.args[0] if s.args else s.kwargs["dim"]
    xq, to, back = _moved(x, dim)
    return Call("softmax", [xq], leaves=[(x, back)], out_back=back, up_to=to)


def _norm(op, s, has_bias):
    x, (shape, *rest) = s.input, s.args
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    eps = s.kwargs.get("eps", 1e-5 if has_bias else None)
    if eps is None:
        eps = torch.finfo(torch.float64).eps  # rms_norm's default
    if eps <= 0:
        raise Skip(f"eps <= 0 ({op}: qed's eps > 0, the proofs' domain)")
    k = len(shape)
    lead = tuple(x.shape[: x.dim() - k])
    n = int(np.prod(shape))

    def flat(t):  # the k normalized axes as one
        return t.detach().reshape(lead + (n,)), lambda g: g.reshape(t.shape)

    def flat_param(t, fill):
        if t is None:
            return torch.full((n,), fill, dtype=x.dtype), None, None
        return t.detach().reshape(-1), t, (lambda g: g.reshape(t.shape))

    xq, xb = flat(x)
    weight = rest[0] if rest else s.kwargs.get("weight")
    w, wl, wb = flat_param(weight, 1.0)
    args, leaves = [xq, w], [(x, xb), (wl, wb)]
    if has_bias:
        bias = rest[1] if len(rest) > 1 else s.kwargs.get("bias")
        b, bl, bb = flat_param(bias, 0.0)
        args.append(b)
        leaves.append((bl, bb))
    return Call(
        op,
        args,
        {"eps": float(eps)},
        leaves,
        out_back=lambda y: y.reshape(x.shape),
        up_to=lambda g: g.reshape(xq.shape),
    )


def _layer_norm(s):
    return _norm("layernorm", s, has_bias=True)


def _rms_norm(s):
    return _norm("rmsnorm", s, has_bias=False)


def _linear(s):
    x, weight = s.input, s.args[0]
    bias = s.args[1] if len(s.args) > 1 else s.kwargs.get("bias")
    if weight.dim() != 2:
        raise Skip("1-D weight (linear)")
    args = [x.detach(), weight.detach()] + ([bias.detach()] if bias is not None else [])
    leaves = [(x, _same(x)), (weight, _same(weight))] + ([(bias, _same(bias))] if bias is not None else [])
    return Call("linear" if bias is not None else "linear_nobias", args, leaves=leaves, out_back=_same(x))


def _elementwise(name):
    def adapt(s):
        if s.args or s.kwargs.get("inplace"):
            raise Skip(f"inplace ({name})")
        return Call(name, [s.input.detach()], leaves=[(s.input, _same(s.input))], out_back=_same(s.input))

    return adapt


def _gelu(s):
    approximate = s.kwargs.get("approximate", "none")
    return Call(
        {"none": "gelu", "tanh": "gelu_tanh"}[approximate],
        [s.input.detach()],
        leaves=[(s.input, _same(s.input))],
        out_back=_same(s.input),
    )


def _sdpa(s):
    q, (k, v) = s.input, s.args[:2]
    kw = s.kwargs
    if kw.get("dropout_p", 0.0) > 0:
        raise Skip("dropout_p > 0 (scaled_dot_product_attention)")
    if kw.get("attn_mask") is not None:
        raise Skip("attn_mask (scaled_dot_product_attention)")
    if kw.get("scale") is not None:
        raise Skip("scale (scaled_dot_product_attention)")
    if kw.get("enable_gqa"):
        raise Skip("enable_gqa (scaled_dot_product_attention)")
    return Call(
        "attention",
        [q.detach(), k.detach(), v.detach()],
        {"causal": bool(kw.get("is_causal", False))},
        leaves=[(q, _same(q)), (k, _same(k)), (v, _same(v))],
        out_back=_same(q),
    )


def _cross_entropy(s):
    logits, target = s.input, s.args[0]
    kw = s.kwargs
    if target.is_floating_point():
        raise Skip("class-probability targets (cross_entropy)")
    if kw.get("weight") is not None:
        raise Skip("class weights (cross_entropy)")
    if kw.get("reduction", "mean") != "mean":
        raise Skip("reduction 'sum' / 'none' (cross_entropy: qed's loss is the mean)")
    if kw.get("label_smoothing", 0.0):
        raise Skip("label_smoothing (cross_entropy)")
    ignore = kw.get("ignore_index", -100)
    z, _, back = _moved(logits, 1) if logits.dim() > 1 else (logits.detach(), None, _same(logits))
    mask = (target != ignore).long()
    return Call(
        "cross_entropy",
        [z, torch.where(mask.bool(), target, 0), mask],
        leaves=[(logits, back), (None, None), (None, None)],
        out_back=lambda y: y.reshape(()),
        up_to=lambda g: g.reshape(1),
    )


def _embedding(s):
    weight, ids = s.input, s.args[0]
    unsupported = [k for k in ("padding_idx", "max_norm", "scale_grad_by_freq", "sparse") if s.kwargs.get(k)]
    if unsupported:
        raise Skip(f"{', '.join(unsupported)} (embedding)")
    return Call(
        "embedding", [ids, weight.detach()], leaves=[(None, None), (weight, _same(weight))], out_back=lambda y: y
    )


ADAPTERS = {
    "softmax": _softmax,
    "nn.functional.layer_norm": _layer_norm,
    "nn.functional.rms_norm": _rms_norm,
    "nn.functional.linear": _linear,
    "nn.functional.relu": _elementwise("relu"),
    "nn.functional.silu": _elementwise("silu"),
    "nn.functional.gelu": _gelu,
    "nn.functional.scaled_dot_product_attention": _sdpa,
    "nn.functional.cross_entropy": _cross_entropy,
    "nn.functional.embedding": _embedding,
}

# What the samples give at torch 2.13 (both backends alike): agreeing, and skipped by reason.
EXPECTED_AGREE = 78
EXPECTED_SKIPS = {
    "dropout_p > 0 (scaled_dot_product_attention)": 12,
    "attn_mask (scaled_dot_product_attention)": 1,
    "class-probability targets (cross_entropy)": 10,
    "class weights (cross_entropy)": 3,
    "reduction 'sum' / 'none' (cross_entropy: qed's loss is the mean)": 2,
    "eps <= 0 (layernorm: qed's eps > 0, the proofs' domain)": 1,
    "eps <= 0 (rmsnorm: qed's eps > 0, the proofs' domain)": 1,
}


# ------------------------------------------------------------------------------ running
def _grad_order(op_name: str) -> list[int]:
    """The positions of the arguments that get a gradient, in the order of the op's grads."""
    an = analyse(OPS[op_name])
    pos = {a.name: i for i, a in enumerate(an.args)}
    arg_of = {g.name: n for n, g in an.grad_of_arg.items()}
    return [pos[arg_of[g.name]] for g in OPS[op_name].grads]


def _reference(opinfo, s, upstream_seed: int):
    """torch's output and the gradients of its leaves for one random upstream gradient."""
    out = opinfo(s.input, *s.args, **s.kwargs)
    leaves = [t for t in [s.input, *s.args, *s.kwargs.values()] if isinstance(t, torch.Tensor) and t.requires_grad]
    g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(upstream_seed))
    grads = torch.autograd.grad(out, leaves, g, allow_unused=True) if leaves else ()
    return out.detach(), g, dict(zip(map(id, leaves), grads))


def _qed_grads(call: Call, grads: list) -> dict:
    """qed's gradients, back in the leaves' layout: id(leaf) -> gradient."""
    out = {}
    for i, g in zip(_grad_order(call.op), grads):
        leaf, back = call.leaves[i]
        if leaf is not None:
            out[id(leaf)] = back(g)
    return out


def _run_numpy(call: Call, g):
    mod = importlib.import_module(f"generated.numpy.{call.op}")
    args = [a.numpy() for a in call.args]
    out, cache = getattr(mod, f"{call.op}_forward")(*args, **call.options)
    upstream = (call.up_to or _same(g))(g).numpy()
    grads = getattr(mod, f"{call.op}_backward")(upstream, cache)
    grads = grads if isinstance(grads, tuple) else (grads,)
    return call.out_back(torch.from_numpy(np.asarray(out))), [torch.from_numpy(np.asarray(x)) for x in grads]


def _run_torch(call: Call, g):
    mod = importlib.import_module(f"generated.torch.{call.op}")
    order = _grad_order(call.op)
    args = [a.clone().requires_grad_(i in order) for i, a in enumerate(call.args)]
    out = getattr(mod, call.op)(*args, **call.options)
    grads = torch.autograd.grad(out, [args[i] for i in order], (call.up_to or _same(g))(g), allow_unused=True)
    return call.out_back(out.detach()), [
        x if x is not None else torch.zeros_like(args[i]) for i, x in zip(order, grads)
    ]


def _close(a, b) -> bool:
    return a.shape == b.shape and torch.allclose(
        a.to(torch.float64), b.to(torch.float64), rtol=1e-7, atol=1e-9, equal_nan=False
    )


@pytest.fixture(scope="module")
def opinfos():
    from torch.testing._internal.common_methods_invocations import op_db

    found = [
        o
        for o in op_db
        if o.name in ADAPTERS and torch.float64 in o.supported_dtypes("cpu") and o.variant_test_name not in ("complex",)
    ]
    assert {o.name for o in found} == set(ADAPTERS), "an OpInfo qed has an op for is gone"
    return found


def run(opinfos, backend: str) -> tuple[int, list, Counter]:
    """(agreeing, failures, skips by reason) over every sample of every matched OpInfo."""
    agree, failures, skips = 0, [], Counter()
    runner = _run_numpy if backend == "numpy" else _run_torch
    for info in opinfos:
        for k, s in enumerate(info.sample_inputs("cpu", torch.float64, requires_grad=True)):
            label = f"{info.name}[{info.variant_test_name}] #{k}"
            try:
                call = ADAPTERS[info.name](s)
            except Skip as why:
                skips[str(why)] += 1
                continue
            ref, g, ref_grads = _reference(info, s, k)
            try:
                out, grads = runner(call, g)
            except Exception as exc:  # noqa: BLE001 - a refused sample is a failure, reported
                failures.append(f"{label}: refused: {type(exc).__name__}: {exc}")
                continue
            bad = [] if _close(out, ref) else ["output"]
            got = _qed_grads(call, grads)
            for lid, rg in ref_grads.items():
                if rg is None:
                    continue
                if lid not in got or not _close(got[lid], rg):
                    bad.append("gradient")
            if bad:
                failures.append(
                    f"{label}: {', '.join(sorted(set(bad)))} differ (shapes "
                    f"{tuple(s.input.shape)}, {[tuple(a.shape) for a in s.args if isinstance(a, torch.Tensor)]})"
                )
            else:
                agree += 1
    return agree, failures, skips


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_opinfo_samples_agree(opinfos, backend):
    agree, failures, skips = run(opinfos, backend)
    assert not failures, "\n".join(failures)
    assert agree == EXPECTED_AGREE and dict(skips) == EXPECTED_SKIPS, (agree, dict(skips))
