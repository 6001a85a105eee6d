"""The edge judge (qed/tools/judge_edges.py): every printed refusal exercised in both backends,
every empty-output path checked exactly; and a wrong edit of a printed check is a finding."""

from __future__ import annotations

import numpy as np
import pytest

from derivations import registry
from qed.tools import judge_edges as je


def _bad(findings):
    return [str(f) for f in findings if not f.ok]


@pytest.mark.parametrize("backend", je.BACKENDS)
def test_every_printed_refusal_holds(backend):
    findings, _ = je.judge_all(backends=(backend,))
    assert not _bad(findings), "\n".join(_bad(findings))
    units = {f.unit for f in findings}
    assert {o.name for o in registry.ops()} <= units
    assert {s.name for s in registry.steps()} <= units and {t.name for t in registry.tables()} <= units
    assert {"mha", "_validate"} <= units


def test_every_op_is_judged_at_every_zero_size():
    findings, _ = je.judge_all(backends=("numpy",), names={"attention"})
    cases = {f.case for f in findings if f.unit == "attention"}
    for size in ("m", "n", "d_k", "d_v", "batch"):
        assert f"{size} = 0" in cases


@pytest.mark.parametrize("backend", je.BACKENDS)
def test_an_id_check_that_lets_everything_through_is_found(backend, monkeypatch):
    v = je._module(backend, "_validate")
    monkeypatch.setattr(v, "in_range", lambda *a, **k: None)
    findings = je.judge_op(registry.op("embedding"), backend)
    # NumPy's own IndexError, or an accepted id past the table: either way a finding
    assert any(not f.ok and f.case.startswith("ids") for f in findings)


def test_an_option_check_that_lets_everything_through_is_found(monkeypatch):
    v = je._module("numpy", "_validate")
    monkeypatch.setattr(v, "in_domain", lambda *a, **k: None)
    findings = je.judge_op(registry.op("layernorm"), "numpy")
    assert any(f.case.startswith("eps = ") and not f.ok for f in findings)


def test_nonzero_gradients_of_an_empty_op_are_found(monkeypatch):
    v = je._module("numpy", "_validate")
    monkeypatch.setattr(v, "zero_grads", lambda layout, like: tuple(np.ones(s) for s in layout[1]))
    # linear with n_out = 0: every output empty, but dx (r, n_in) and dweight are not
    findings = je.judge_op(registry.op("linear"), "numpy")
    assert any("is not 0" in f.problem for f in findings)


def _raising(exc):
    def check(op, *args):
        raise exc

    return check


@pytest.mark.parametrize(
    "check,exc,op,finding",
    [
        ("nonzero_size", ZeroDivisionError("division by zero"), "attention", "raw ZeroDivisionError"),
        ("same_size", ValueError("bad input"), "linear", "not the op's own one-line error"),
    ],
    ids=["a raw library error", "a refusal not naming the op"],
)
def test_a_check_that_raises_the_wrong_error_is_a_finding(monkeypatch, check, exc, op, finding):
    monkeypatch.setattr(je._module("numpy", "_validate"), check, _raising(exc))
    findings = je.judge_op(registry.op(op), "numpy")
    assert any(finding in f.problem for f in findings)


# Wrong edits of the printed `_validate` that the edge judge alone must refute (each was left
# standing by an earlier judge: a check of the first argument skipped, a batch of one read as
# empty, the empty path's one output as a tuple, a closed end refused, a broadcast axis that g
# holds at length 1 read from the wrong end).
VALIDATE_EDITS = [
    ("name0, a0, t0 = args[0]", "name0, a0, t0 = args[1]", "cross_entropy", "do not agree"),
    ("    for name, a, t in args[1:]:", "    for name, a, t in args[2:]:", "cross_entropy", "do not agree"),
    ("if leading and 0 in lead:", "if leading and 1 in lead:", "attention", "a batch of one"),
    ("len(outs) == 1 else outs", "len(outs) != 1 else outs", "attention", "= 0"),
    ("value <= hi)", "value < hi)", None, "in_domain"),
    ("if s == 1 and g.shape[extra + i] != 1)", "if s == 1 and g.shape[extra - i] != 1)", None, "sum_to"),
    ("        n *= s\n", "        pass\n", None, "a view"),  # torch's sum_to: a copy where a view is due
    # the table of passed calls (`_PASSED`): a key that forgets the shape, the dtype or an option's
    # value, ids remembered, a hit without the promotion or with the first call's arrays, a
    # full table that still grows
    ("key.append((v.shape, v.dtype", "key.append((v.ndim, v.dtype", None, "another shape"),
    ("key.append((v.shape, v.dtype", "key.append((v.shape, 0", None, "another dtype"),
    ("key.append((v.__class__, v))", "key.append(v.__class__)", None, "another option value"),
    ("self.remembered = not self.in_range", "self.remembered = True", None, "ids out of range"),
    (
        "            args[name] = promoted(args[name], t)\n        args.update",
        "            pass\n        args.update",
        None,
        "a promoted",
    ),
    (
        "_PASSED[key] = tuple([args[n] for n in sig.kept])",
        "_PASSED[key] = tuple([args[n] for n in sig.returns])",
        None,
        "same key",
    ),
    ("len(_PASSED) < _PASSED_MAX", "len(_PASSED) <= _PASSED_MAX", None, "a full table"),
    ("            _PASSED[key] = tuple(", "            pass  # tuple(", None, "same key"),
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("old, new, op, case", VALIDATE_EDITS, ids=[e[1].strip()[:40] for e in VALIDATE_EDITS])
def test_a_wrong_edit_of_the_validation_helpers_is_refuted(backend, old, new, op, case):
    from pathlib import Path

    from qed.tools import audit_text

    path = Path(je.__file__).resolve().parents[2] / "generated" / backend / "_validate.py"
    text = path.read_text()
    if old not in text:
        pytest.skip(f"not printed in {backend}'s _validate")
    with audit_text._real_modules(backend, path, text.replace(old, new, 1)):
        found = je.judge_validate(backend) if op is None else je.judge_op(registry.op(op), backend)
    bad = [f for f in found if not f.ok]
    assert any(case in f.case for f in bad), [str(f) for f in bad][:5]
