"""Translation validation of the PyTorch text: every generated torch kernel, executed as printed on
exact symbolic tensors (qed/tools/torch_shim.py), equals the SymPy objects its claims are about,
and so do its printed wrappers (`<Op>Function`'s forward and backward, the functional form, the
`nn.Module`).

One test per op (forward outputs and every gradient, for every flag combination), per step, per
table and for the mha template; and negative tests: an edited copy of a generated torch file's
text (one printed line changed; generated/ on disk is never touched) must be reported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from test_translation import _failures  # noqa: E402 - the NumPy run's report of failed checks

from derivations import registry
from derivations.proof.obligations import flag_sets
from qed.tools import torch_shim as ts
from qed.tools import translation as tv

GENERATED = Path(__file__).resolve().parent.parent / "generated" / "torch"


@pytest.mark.parametrize("name", [o.name for o in registry.ops()])
def test_op_torch_text_equals_proved_expressions(name):
    op = registry.op(name)
    checks = tv.validate_op(op, backend="torch")
    assert not _failures(checks), "\n".join(_failures(checks))
    assert all(c.backend == "torch" for c in checks)
    # every output and every gradient, for every flag combination, was compared: the kernels
    # and the printed wrappers
    whats = {(c.what, c.flags) for c in checks}
    for when in flag_sets(op):
        flags = tuple(sorted(when))
        for o in op.outputs:
            assert (f"forward {o.name}", flags) in whats
            assert (f"Function.forward {o.name}", flags) in whats
            assert (f"functional {o.name}", flags) in whats
            if op.params:
                assert (f"Module.forward {o.name}", flags) in whats
        for g in op.grads:
            assert (f"backward {g.name}", flags) in whats
            assert (f"Function.backward {g.name}", flags) in whats


@pytest.mark.parametrize("name", tv.STEP_NAMES)
def test_step_torch_text_equals_update_rule(name):
    checks = tv.validate_step(name, backend="torch")
    assert not _failures(checks), "\n".join(_failures(checks))
    from derivations.optim import STEPS

    assert [c.what for c in checks] == [f"step {o.name}" for o in STEPS[name].outputs]


@pytest.mark.parametrize("name", [t.name for t in registry.tables()])
def test_table_torch_text_equals_entry_formula(name):
    checks = tv.validate_table(name, backend="torch")
    assert not _failures(checks), "\n".join(_failures(checks))
    assert [c.what for c in checks] == [f"table {a.name}" for a in registry.table(name).arrays]


def test_mha_torch_layout_equals_the_head_index_map():
    checks = tv.validate_mha(backend="torch")
    # per causal flag: forward, five gradients, the functional form and the module
    assert len(checks) == 16 and all(c.ok for c in checks), _failures(checks)
    assert {c.what for c in checks} >= {"functional out", "Module.forward out"}


# --------------------------------------------------------------------------------- negatives
def _edited(name, line, wrong):
    text = (GENERATED / f"{name}.py").read_text()
    assert text.count(line) == 1, f"the printed line {line!r} is not once in generated/torch/{name}.py"
    return text.replace(line, wrong)


def _reported(checks, mismatch=True):
    bad = [c for c in checks if not c.ok]
    assert bad, "the edited torch text passed translation validation"
    if mismatch:
        assert any(c.mismatches for c in bad), [str(c)[:300] for c in bad]
    return bad


# (file, validation, flags, printed text, the same with one wrong edit, a mismatch (not a failed run))
WRONG_LINES = [
    # the causal mask's diagonal: query i would not see key i
    (
        "attention",
        "op",
        [frozenset({"causal"})],
        "device=s.device).triu(1)",
        "device=s.device).triu(0)",
        True,
    ),
    # a clamp bound swapped: min(x, 0) for max(x, 0)
    ("relu", "op", None, "y = torch.clamp(x, min=0)", "y = torch.clamp(x, max=0)", True),
    ("squared_relu", "op", None, "y_max = torch.clamp(x, min=0)", "y_max = torch.clamp(x, max=0)", True),
    # addcmul's value= dropped: Φ + g·G(g) for Φ + g·G(g)/√(2π)
    (
        "gelu",
        "op",
        None,
        "torch.addcmul(cdf, dx, x, value=math.sqrt(2)/(2*math.sqrt(math.pi)), out=dx)",
        "torch.addcmul(cdf, dx, x, out=dx)",
        True,
    ),
    # the sign of a fused update: m ← (1−β₁)g − β₁m
    ("adam", "step", None, "m_new.add_(m, alpha=beta1)", "m_new.add_(m, alpha=-beta1)", True),
    # the sign of an in-place subtraction
    ("layernorm", "op", None, "    dx -= _support.rowmean(dxhat)", "    dx += _support.rowmean(dxhat)", True),
    # the row max over the wrong axis (a column max is no shift of the row)
    ("softmax", "op", None, "torch.amax(x, dim=-1, keepdim=True)", "torch.amax(x, dim=-2, keepdim=True)", True),
    # a digit of a literal
    ("gelu_tanh", "op", None, "    dx *= 0.134145*x*x + 1", "    dx *= 0.13415*x*x + 1", True),
    # a comparison's boundary: the subgradient at 0
    ("relu", "op", None, "dx = (x > 0).to(dtype)", "dx = (x >= 0).to(dtype)", True),
    # the bias correction's exponent
    ("adamw", "step", None, "p_new /= math.sqrt(1 - beta2**t)", "p_new /= math.sqrt(1 - beta2**(t - 1))", True),
    # the table's parity
    ("sinusoidal", "table", None, "    sign_col = (1 - 2*(col % 2))", "    sign_col = (1 - 2*(row % 2))", True),
    # the autograd.Function's backward returns two gradients in the wrong order
    (
        "swiglu",
        "op",
        None,
        "\n        return dx, dw_gate, dw_up, dw_down",
        "\n        return dx, dw_up, dw_gate, dw_down",
        True,
    ),
    # the functional form passes the parameters to Function.apply in the wrong order
    (
        "layernorm",
        "op",
        None,
        "LayernormFunction.apply(x, gamma, beta, eps)",
        "LayernormFunction.apply(x, beta, gamma, eps)",
        True,
    ),
    # the ctx keeps one array too few: the backward unpacks a cache of the wrong length
    ("linear", "op", None, "ctx.save_for_backward(*cache[:2])", "ctx.save_for_backward(*cache[:1])", False),
    # the Function's backward returns a gradient for an option
    ("layernorm", "op", None, "return dx, dgamma, dbeta, None", "return dx, dgamma, dbeta, dbeta", False),
    # the module's parameter created with its axes swapped
    (
        "linear",
        "op",
        None,
        "torch.empty((n_out, n_in), device=device, dtype=dtype)",
        "torch.empty((n_in, n_out), device=device, dtype=dtype)",
        False,
    ),
    # a function the shim does not model: an error of the run, never a pass
    ("relu", "op", None, "y = torch.clamp(x, min=0)", "y = torch.relu(x)", False),
    ("softmax", "op", None, "    y.exp_()", "    y.exp2_()", False),
]


@pytest.mark.parametrize(
    "name,kind,flags,line,wrong,mismatch",
    WRONG_LINES,
    ids=[f"{n}:{w.strip()[:30]}" for n, _, _, _, w, _ in WRONG_LINES],
)
def test_a_wrong_printed_torch_line_is_reported(name, kind, flags, line, wrong, mismatch):
    edited = _edited(name, line, wrong)
    if kind == "op":
        checks = tv.validate_op(name, source=edited, flags=flags, backend="torch")
    elif kind == "step":
        checks = tv.validate_step(name, source=edited, backend="torch")
    else:
        checks = tv.validate_table("sinusoidal_table", source=edited, backend="torch")
    _reported(checks, mismatch)


def test_the_unedited_torch_texts_pass():
    """The edits above, not the harness, make the difference: the same validations of the
    unedited files pass."""
    checks = (
        tv.validate_op("attention", flags=[frozenset({"causal"})], backend="torch")
        + tv.validate_op("layernorm", backend="torch")
        + tv.validate_op("linear", backend="torch")
        + tv.validate_step("adam", backend="torch")
        + tv.validate_table("sinusoidal_table", backend="torch")
    )
    assert not _failures(checks), _failures(checks)


def test_a_wrong_function_backward_is_the_wrappers_finding():
    """The gradients in the wrong order: the kernels still pass, the Function's backward fails."""
    edited = _edited(
        "swiglu", "\n        return dx, dw_gate, dw_up, dw_down", "\n        return dx, dw_up, dw_gate, dw_down"
    )
    bad = _reported(tv.validate_op("swiglu", source=edited, backend="torch"))
    assert {c.what for c in bad} == {"Function.backward dw_gate", "Function.backward dw_up"}


@pytest.mark.parametrize(
    "op,line,wrong",
    [
        ("gelu", "    g.mul_(-0.5)", "    g.mul_(-0.25)"),  # the Gaussian's −1/2
        (
            "layernorm",
            "return torch.mean(a, dim=-1, keepdim=True)",
            "return torch.sum(a, dim=-1, keepdim=True)",
        ),  # rowmean as rowsum
        (
            "rmsnorm",
            "return torch.mean(a, dim=-1, keepdim=True)",
            "return torch.mean(a, dim=-2, keepdim=True)",
        ),  # rowmean's axis
        (
            "linear",
            "return torch.addmm(b, rows(x), w).reshape(*x.shape[:-1], w.shape[1])",
            "return torch.addmm(b, rows(x), w, alpha=2).reshape(*x.shape[:-1], w.shape[1])",
        ),
    ],
)
def test_a_wrong_support_helper_is_reported(op, line, wrong):
    """generated/torch/_support.py is run as printed too: an edit of a helper fails the kernels
    that call it."""
    edited = _edited("_support", line, wrong)
    _reported(tv.validate_op(op, backend="torch", sources={"_support": edited}))


def test_a_wrong_mha_torch_layout_is_reported():
    text = (GENERATED / "mha.py").read_text()
    line = "dqkv = torch.cat([_merge_heads(t) for t in (dq, dk, dv)], dim=-1)"
    assert line in text
    checks = tv.validate_mha(backend="torch", source=text.replace(line, line.replace("dq, dk, dv", "dq, dv, dk")))
    assert any(not c.ok for c in checks)
    line = "q, k, v = (_split_heads(t, n_head) for t in qkv.chunk(3, dim=-1))"
    assert text.count(line) == 2  # mha_forward and the functional mha
    edited = text.replace("    " + line + "    # (..., h, T, d)", "    k, q, v" + line[7:] + "    # (..., h, T, d)")
    assert edited != text
    checks = tv.validate_mha(backend="torch", source=edited)
    assert any(not c.ok for c in checks if c.what == "forward out")
    assert all(c.ok for c in checks if c.what == "functional out")  # the other copy is right


# ------------------------------------------------------------------------------- the shim itself
def _annotations(tree) -> set:
    """The ids of every node inside an annotation: never evaluated (each printed file starts with
    `from __future__ import annotations`), so never read from the shim."""
    out = set()
    for node in ast.walk(tree):
        parts = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            parts.append(node.returns)
        if isinstance(node, ast.arg) and node.annotation is not None:
            parts.append(node.annotation)
        if isinstance(node, ast.AnnAssign):
            parts.append(node.annotation)
        for p in parts:
            out.update(id(n) for n in ast.walk(p))
    return out


def _torch_attributes(tree) -> set:
    """Every dotted `torch.a.b…` the code of a printed file reads (not its comments, not its
    annotations)."""
    out = set()
    skip = _annotations(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Attribute):
            parts, n = [], node
            while isinstance(n, ast.Attribute):
                parts.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name) and n.id == "torch":
                out.add("torch." + ".".join(reversed(parts)))
    return out


def test_every_torch_name_the_printed_code_reads_is_modelled():
    names = set()
    for path in sorted(GENERATED.glob("*.py")):
        names |= _torch_attributes(ast.parse(path.read_text()))
    assert names, "no torch name found"
    for dotted in sorted(names):
        obj = ts.TORCH
        for part in dotted.split(".")[1:]:
            obj = getattr(obj, part)  # a ShimError here names the gap


def test_an_unmodelled_torch_function_is_an_error():
    with pytest.raises(tv.ShimError, match="torch.einsum"):
        _ = ts.TORCH.einsum
    with pytest.raises(tv.ShimError, match="torch.nn.functional.gelu"):
        _ = ts.TORCH.nn.functional.gelu
    t = ts.tensor(tv._symbols("x", (2, 3)))
    with pytest.raises(tv.ShimError, match="Tensor.relu_"):
        t.relu_()
    with pytest.raises(tv.ShimError, match="inexact float"):
        t * 0.5
    with pytest.raises(tv.ShimError, match="not decided"):
        t.masked_fill_(t > 0, 0)  # a symbolic comparison is no mask
    with pytest.raises(tv.ShimError, match="rounding_mode"):
        ts.TORCH.div(t, t, rounding_mode="floor")


def test_the_shim_keeps_torch_semantics():
    import sympy as sp

    x = tv._symbols("x", (2, 3))
    t = ts.tensor(x)
    v = t[:, 1:]  # a view: in place through it writes t
    v.mul_(2)
    assert t._a[0, 1] == 2 * x[0, 1] and t._a[0, 0] == x[0, 0]
    out = ts.tensor(tv._symbols("o", (2, 3)))
    r = ts.TORCH.add(t, t, alpha=3, out=out)  # out= writes in place
    assert r is out and out._a[0, 0] == 4 * x[0, 0]
    assert t.to(ts.FLOAT) is t and t.contiguous() is t
    ids = ts.tensor(__import__("numpy").array([0, 2]))
    assert ids.dtype is ts.LONG and ids.long() is ids
    assert ((t > 0).to(ts.FLOAT))._a[0, 0] == sp.Heaviside(x[0, 0], 0)
    with pytest.raises(ValueError):
        t[None].expand(2, 2, 3).add_(1)  # an expanded view is read-only
    ctx = ts.FunctionCtx()
    ctx.save_for_backward(t)
    t.exp_()  # changed after it was saved
    with pytest.raises(RuntimeError, match="inplace"):
        _ = ctx.saved_tensors
    with pytest.raises(tv.ShimError, match="ctx.missing"):
        _ = ctx.missing


def test_the_code_objects_carry_the_generated_files_paths():
    """A tracer sees the printed files' own line numbers (numpy and torch)."""
    root = GENERATED.parent
    mod = tv.load_torch("relu")
    assert mod.relu_forward.__code__.co_filename == str(root / "torch" / "relu.py")
    assert tv.load("relu").relu_forward.__code__.co_filename == str(root / "numpy" / "relu.py")
    path = str(root / "torch" / "relu.py")
    lines = set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename == path and event == "line":
            lines.add(frame.f_lineno)
        return tracer

    sys.settrace(tracer)
    try:
        checks = tv.validate_op("relu", backend="torch")
    finally:
        sys.settrace(None)
    assert all(c.ok for c in checks)
    text = (GENERATED / "relu.py").read_text().splitlines()
    clamp = next(k for k, line in enumerate(text, 1) if "torch.clamp(x, min=0)" in line)
    assert clamp in lines


def test_the_real_torch_modules_are_untouched():
    import torch

    import generated.torch.layernorm as real

    tv.load_torch("layernorm")
    assert real.torch is torch
    f32 = {"dtype": torch.float32}  # explicit: another test module sets the default dtype
    y, _ = real.layernorm_forward(torch.ones(2, 3, **f32), torch.ones(3, **f32), torch.zeros(3, **f32))
    assert y.dtype == torch.float32
    assert "generated.torch._support" not in sys.modules or sys.modules["generated.torch._support"].torch is torch


def test_literals_are_read_exactly():
    import sympy as sp

    mod = tv.load_torch("gelu", source="def f():\n    return 0.044715, (1/2), -0.5\n")
    assert mod.f() == (sp.Rational(44715, 10**6), sp.Rational(1, 2), sp.Rational(-1, 2))


# ------------------------------------------------------------------------- the tiled attention
@pytest.mark.parametrize("backend", tv.BACKENDS)
def test_tiled_text_equals_attention_lse(backend):
    """attention_tiled's loops, at blocks of 1 and 2 keys (m = 2, n = 3), causal off and on:
    its output, its cache and its backward are attention_lse's."""
    checks = tv.validate_tiled(backend)
    assert not _failures(checks), "\n".join(_failures(checks))
    op = registry.op("attention_lse")
    whats = {(c.what, c.flags) for c in checks}
    for when in flag_sets(op):
        for b in tv.TILED_BLOCKS:
            flags = tuple(sorted(when)) + (f"block={b}",)
            want = {"forward o", "cache 4", "cache 5"} | {f"backward {g.name}" for g in op.grads}
            if backend == "torch":
                want |= {"Function.forward o", "functional o"}
                want |= {f"Function.backward {g.name}" for g in op.grads}
            assert {(w, flags) for w in want} <= whats


@pytest.mark.parametrize(
    "line,wrong",
    [
        # the running sum not rescaled to the new max
        ("ell_r = alpha*ell_r + _support.rowsum(p_blk)", "ell_r = ell_r + _support.rowsum(p_blk)"),
        # dQ of one block only: the accumulation over blocks dropped
        (
            "dq_r = dq_r + (ds_blk @ k[..., P:P + B, :])/math.sqrt(d_k)",
            "dq_r = (ds_blk @ k[..., P:P + B, :])/math.sqrt(d_k)",
        ),
    ],
)
def test_a_wrong_tiled_line_is_reported(line, wrong):
    checks = tv.validate_tiled("torch", source=_edited("attention_tiled", line, wrong), flags=[frozenset()])
    _reported(checks)


def test_validate_all_runs_both_backends_by_default(monkeypatch):
    seen = []

    def record(kind):
        def f(*args, backend="numpy", **kwargs):
            seen.append((kind, backend))
            return []

        return f

    for kind in ("validate_op", "validate_step", "validate_table", "validate_mha", "validate_tiled"):
        monkeypatch.setattr(tv, kind, record(kind))
    tv.validate_all()
    assert {b for _, b in seen} == {"numpy", "torch"}
    assert {k for k, b in seen if b == "torch"} == {
        "validate_op",
        "validate_step",
        "validate_table",
        "validate_mha",
        "validate_tiled",
    }
    seen.clear()
    tv.validate_all("torch")
    assert {b for _, b in seen} == {"torch"}
