"""Translation validation: every generated NumPy kernel, executed on exact symbolic inputs,
equals the SymPy objects its claims are about (qed/tools/translation.py).

One test per op (forward outputs and every gradient, for every flag combination), per step and
per table; and negative tests: an edited copy of a generated file's text (one character of one
printed line changed) must be reported as a mismatch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from derivations import registry
from derivations.proof.obligations import flag_sets
from qed.tools import translation as tv

GENERATED = Path(__file__).resolve().parent.parent / "generated" / "numpy"


def _failures(checks):
    return [str(c)[:2000] for c in checks if not c.ok]


@pytest.mark.parametrize("name", [o.name for o in registry.ops()])
def test_op_kernel_text_equals_proved_expressions(name):
    op = registry.op(name)
    checks = tv.validate_op(op)
    assert not _failures(checks), "\n".join(_failures(checks))
    # every output and every gradient, for every flag combination, was compared
    whats = {(c.what, c.flags) for c in checks}
    for when in flag_sets(op):
        flags = tuple(sorted(when))
        for o in op.outputs:
            assert (f"forward {o.name}", flags) in whats
        for g in op.grads:
            assert (f"backward {g.name}", flags) in whats


@pytest.mark.parametrize("name", tv.STEP_NAMES)
def test_step_text_equals_update_rule(name):
    checks = tv.validate_step(name)
    assert not _failures(checks), "\n".join(_failures(checks))
    from derivations.optim import STEPS

    assert [c.what for c in checks] == [f"step {o.name}" for o in STEPS[name].outputs]


@pytest.mark.parametrize("name", [t.name for t in registry.tables()])
def test_table_text_equals_entry_formula(name):
    checks = tv.validate_table(name)
    assert not _failures(checks), "\n".join(_failures(checks))
    assert [c.what for c in checks] == [f"table {a.name}" for a in registry.table(name).arrays]


def test_sizes_are_distinct_where_they_can_be_confused():
    """An axis read from the wrong argument (√n for √d_k, shape[-2] for shape[-1]) only shows
    when the sizes differ."""
    for op in registry.ops():
        sizes = tv._op_sizes(op, None)
        values = list(sizes.values())
        assert len(set(values)) == len(values), (op.name, {s.name: v for s, v in sizes.items()})


# --------------------------------------------------------------------------------- negatives
# (file, validation, printed line, the line with one wrong edit)
WRONG_LINES = [
    ("layernorm", "op", "    xc = x - mean  # (..., r, n)", "    xc = x + mean  # (..., r, n)"),
    ("layernorm", "op", "    dx -= _support.rowmean(dxhat)", "    dx += _support.rowmean(dxhat)"),
    ("relu", "op", "    dx = (x > 0).astype(dtype)", "    dx = (x >= 0).astype(dtype)"),
    ("gelu_tanh", "op", "    y = 0.044715*x", "    y = 0.04471*x"),
    ("rmsnorm", "op", "eps + _support.rowmean(x*x))", "eps + _support.rowsum(x*x))"),
    ("adam", "step", "    p_new /= math.sqrt(1 - beta2**t)", "    p_new /= math.sqrt(1 - beta2**(t - 1))"),
    ("sinusoidal", "table", "    sign_col = (1 - 2*(col % 2))", "    sign_col = (1 - 2*(row % 2))"),
]


@pytest.mark.parametrize(
    "name,kind,line,wrong", WRONG_LINES, ids=[f"{n}:{w.strip()[:24]}" for n, _, _, w in WRONG_LINES]
)
def test_a_wrong_printed_line_is_reported(name, kind, line, wrong):
    text = (GENERATED / f"{name}.py").read_text()
    assert text.count(line) == 1, f"the printed line {line!r} is not in generated/numpy/{name}.py"
    edited = text.replace(line, wrong)
    if kind == "op":
        checks = tv.validate_op(name, source=edited)
    elif kind == "step":
        checks = tv.validate_step(name, source=edited)
    else:
        checks = tv.validate_table("sinusoidal_table", source=edited)
    bad = [c for c in checks if not c.ok]
    assert bad, "the edited kernel passed translation validation"
    assert any(c.mismatches for c in bad)
    # the unedited text still passes (the edit, not the harness, made the difference)
    fn = {"op": tv.validate_op, "step": tv.validate_step, "table": tv.validate_table}[kind]
    assert all(c.ok for c in fn("sinusoidal_table" if kind == "table" else name))


def test_a_swapped_mask_axis_is_reported():
    """causal_mask(n, m) for (m, n) scores: a shape error at m ≠ n, caught as a failed run."""
    text = (GENERATED / "attention.py").read_text()
    line = "_special.causal_mask(s.shape[-2], s.shape[-1], s.dtype)"
    assert line in text
    edited = text.replace(line, "_special.causal_mask(s.shape[-1], s.shape[-2], s.dtype)")
    checks = tv.validate_op("attention", source=edited, flags=[frozenset({"causal"})])
    assert any(not c.ok for c in checks)


def test_an_unmodelled_numpy_function_is_an_error():
    with pytest.raises(tv.ShimError, match="np.einsum"):
        _ = tv.NUMPY.einsum
    with pytest.raises(tv.ShimError, match="math.fsum"):
        _ = tv.MATH.fsum


def test_the_real_modules_are_untouched():
    import numpy as np

    import generated.numpy.layernorm as real

    tv.load("layernorm")
    assert real.np is np
    x = np.ones((2, 3))
    y, _ = real.layernorm_forward(x, np.ones(3), np.zeros(3))
    assert y.dtype == np.float64


def test_literals_are_read_exactly():
    import sympy as sp

    mod = tv.load("gelu_tanh", source="def f():\n    return 0.044715, (1/2), 2**-1\n")
    assert mod.f() == (sp.Rational(44715, 10**6), sp.Rational(1, 2), sp.Rational(1, 2))


def test_an_inexact_value_is_an_error():
    import numpy as np

    check = tv.Check("x", "forward y")
    tv._compare(check, np.array([0.5], dtype=object), {(0,): 0}, (1,))
    assert not check.ok


# ------------------------------------------------------------------------------ the mha layout
def test_mha_layout_equals_the_head_index_map():
    checks = tv.validate_mha()
    assert len(checks) == 12 and all(c.ok for c in checks), [str(c) for c in checks if not c.ok]


@pytest.mark.parametrize(
    "line, wrong",
    [
        ("q, k, v = (_split_heads(t, n_head)", "k, q, v = (_split_heads(t, n_head)"),
        (
            "return np.swapaxes(t.reshape(*lead, T, n_head, C // n_head), -2, -3)",
            "return t.reshape(*lead, n_head, T, C // n_head)",
        ),
        (
            "dqkv = np.concatenate([_merge_heads(t) for t in (dq, dk, dv)], axis=-1)",
            "dqkv = np.concatenate([_merge_heads(t) for t in (dq, dv, dk)], axis=-1)",
        ),
    ],
)
def test_a_wrong_mha_layout_is_reported(line, wrong):
    text = (tv.GENERATED / "mha.py").read_text()
    assert line in text
    checks = tv.validate_mha(source=text.replace(line, wrong))
    assert any(not c.ok for c in checks)
