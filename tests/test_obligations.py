"""The generated claims read the printed lines: scopes, coverage, and the audit's mutants.

These tests edit the printed lines of ops (never generated/ itself) and check that a proof —
not a numeric test — refutes each wrong edit.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import sympy as sp

from derivations import registry
from derivations.language.arrays import Array, ArrayError, Assign, ColSum
from derivations.language.ops import Op, grad_of
from derivations.proof import coverage, mutation, obligations

OPS = [o for o in registry.ops() if o.spec]


def _replace(op: Op, scope: str, target: str, expr) -> Op:
    lines = list(getattr(op, scope))
    pos = max(k for k, a in enumerate(lines) if a.target.name == target)
    lines[pos] = Assign(lines[pos].target, expr, lines[pos].when)
    return dataclasses.replace(op, **{scope: lines})


def _refuted(op: Op, wrong: Op) -> list[str]:
    return [ob.id for ob in obligations.obligations(op) if ob.refute(wrong) is not None]


def test_every_op_has_a_specification_and_generated_claims():
    ids = {c.id for c in registry.claims()}
    for op in registry.ops():
        assert op.spec, f"op {op.name} has no specification"
        assert f"{op.name}.forward" in ids or any(i.startswith(f"{op.name}.forward.") for i in ids)
        for g in op.grads:
            assert f"{op.name}.backward.{g.name}" in ids


def test_a_shadowed_forward_line_is_still_proved():
    """LayerNorm's backward rebuilds x̂ from the cache; the forward's own x̂ line is a different
    array, so a wrong forward x̂ is refuted by layernorm.forward."""
    op = registry.op("layernorm")
    xc = next(a.target for a in op.forward if a.target.name == "xc")
    rstd = next(a.target for a in op.forward if a.target.name == "rstd")
    wrong = _replace(op, "forward", "xhat", xc * rstd * 2)
    assert "layernorm.forward" in _refuted(op, wrong)


def test_a_backward_that_reads_outside_its_cache_is_rejected():
    x, y = Array("x", (2, 3)), Array("y", (2, 3))
    h = Array("h", (2, 3))
    with pytest.raises(ArrayError, match="not in the cache"):
        Op(
            name="leaky",
            module="derivations.t",
            title="t",
            claims=[],
            inputs=[x],
            forward=[Assign(h, 2 * x), Assign(y, h)],
            outputs=[y],
            saved=[x],
            backward=[Assign(grad_of(x), 2 * grad_of(y) * h)],
            grads=[grad_of(x)],
            spec=[Assign(y, 2 * x)],
        )


def test_the_spec_must_define_every_output():
    x, y, z = Array("x", (2, 3)), Array("y", (2, 3)), Array("z", (2, 3))
    with pytest.raises(ArrayError, match="does not define"):
        Op(
            name="nospec",
            module="derivations.t",
            title="t",
            claims=[],
            inputs=[x],
            forward=[Assign(y, 2 * x)],
            outputs=[y],
            saved=[],
            backward=[Assign(grad_of(x), 2 * grad_of(y))],
            grads=[grad_of(x)],
            spec=[Assign(z, 2 * x)],
        )


def test_an_unknown_claim_id_is_an_error():
    op = registry.op("layernorm")
    with pytest.raises(ValueError, match="unknown claims"):
        registry.check_claim_ids(
            [dataclasses.replace(op, claims=["layernorm.nope"])], {c.id for c in registry.claims()}
        )


def test_a_dead_printed_line_is_uncovered():
    """A printed line that no generated claim reads is not covered."""
    op = registry.op("rmsnorm")
    x = op.inputs[0]
    dead = Assign(Array("unused", x.shape), 3 * x)
    with_dead = dataclasses.replace(op, forward=list(op.forward) + [dead])
    lines = set()
    for ob in obligations.obligations(with_dead):
        lines |= mutation.path(with_dead, ob)
    assert ("forward", len(op.forward)) not in lines
    assert ("forward", 0) in lines


def test_the_registry_is_fully_covered_when_every_claim_is_proved():
    cov = coverage.compute({c.id for c in registry.claims()})
    assert cov.complete, cov.uncovered
    assert cov.total >= 60


def test_coverage_drops_when_a_generated_claim_is_not_proved():
    proved = {c.id for c in registry.claims()} - {"layernorm.backward.dx"}
    cov = coverage.compute(proved)
    assert not cov.complete
    assert any("op layernorm: backward" in u for u in cov.uncovered)


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_audit_sample_kills_every_wrong_edit(op):
    """A fast sample of the audit (`make audit` runs all of it): no mutant survives."""
    results = mutation.audit_op(op, limit=6)
    assert results
    survived = [r.mutant + ": " + r.mistake for r in results if r.outcome == "survived"]
    assert not survived
    assert sum(r.outcome == "killed" for r in results) >= 1


def test_a_claim_off_the_mutated_lines_path_refutes_nothing():
    """Which claim reads which line matters: the forward claim does not read the backward, so
    it refutes none of the backward's mutants (the audit asks the claims on the line's path)."""
    op = registry.op("rmsnorm")
    backward = [x for x in mutation.op_mutants(op) if x.scope == "backward"]
    assert backward
    forward = next(o for o in obligations.obligations(op) if o.kind == "forward")
    assert all(forward.refute(x.apply(op)) is None for x in backward[:5])
    assert all((x.scope, x.position) not in mutation.path(op, forward) for x in backward)


def test_an_equivalent_mutant_is_not_counted_as_killed_or_survived(monkeypatch):
    """2·ColSum(dy/2) written for ColSum(dy): no counterexample exists, the claim still proves,
    and the audit's verdict is 'equivalent'."""
    from derivations.proof.core import prove_index_identity

    op = registry.op("layernorm")
    dy = grad_of(op.outputs[0])
    pos = next(k for k, a in enumerate(op.backward) if a.target.name == "dbeta")
    same = mutation.PrintedMutant("same", "ColSum(dy) written as 2·ColSum(dy/2)", "backward", pos, 2 * ColSum(dy / 2))
    ob = next(o for o in obligations.obligations(op) if o.id == "layernorm.backward.dbeta")
    assert ob.refute(same.apply(op)) is None
    assert prove_index_identity(ob.printed(same.apply(op)), ob.required(), ob.setting).status == "proved-general"
    monkeypatch.setattr(mutation, "op_mutants", lambda o: [same])
    (result,) = mutation.audit_op(op)
    assert result.outcome == "equivalent"


def test_a_printed_line_that_divides_by_zero_where_the_formula_has_a_value_is_refuted():
    """Squareplus' backward with x read for hypot0 in its squared denominator, (x + |x|)²: 0 for
    every x < 0, where the other branch's step is 0 too, so no point gives two different values.
    The claim is refuted where the specification has a value and the printed line divides by 0;
    the mutant is no longer a survivor of the audit."""
    op = registry.op("squareplus")
    line, h = op.backward[-1], op.backward[0].target
    (den,) = [p for p in sp.preorder_traversal(line.expr) if isinstance(p, sp.Pow) and p.exp == -2]
    bad = mutation.PrintedMutant(
        "x-for-hypot",
        "x read for hypot0 in (hypot0 + |x|)²",
        "backward",
        len(op.backward) - 1,
        line.expr.xreplace({den: den.xreplace({h: op.inputs[0]})}),
    )
    ob = next(o for o in obligations.obligations(op) if o.id == "squareplus.backward.dx")
    found = ob.refute(bad.apply(op))
    assert found is not None and found["lhs"] == "division by zero", found
    assert all(r.outcome != "survived" for r in mutation.audit_op(op))


def test_qed_audit_cli_json():
    out = subprocess.run(
        [sys.executable, "-m", "qed", "audit", "rmsnorm", "--limit", "4", "--json", "-j", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 4
    assert {r["outcome"] for r in rows} <= {"killed", "equivalent"}


def test_qed_audit_rejects_a_bad_limit():
    out = subprocess.run(
        [sys.executable, "-m", "qed", "audit", "--limit", "0"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "positive integer" in out.stderr
    assert "Traceback" not in out.stderr
