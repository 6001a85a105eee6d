"""Generated claims of the constant tables and the optimiser steps (derivations/proof/tables_steps.py):
`<table>.entries` and `<step>.update` prove what codegen prints, and the audit kills every
automatic mutant of it."""

from __future__ import annotations

import pytest
import sympy as sp

from derivations import optim as O
from derivations import positional as P
from derivations import registry
from derivations.language.arrays import ArrayError, Assign
from derivations.language.ops import Table, TableArray
from derivations.proof import tables_steps as constants

TABLES = list(registry.tables())
STEPS = list(registry.steps())


def _claim(unit_id: str):
    return registry.claim(unit_id)


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_table_entries_claim(table):
    cid = f"{table.name}.entries"
    assert cid in table.claims  # printed as "Proved by the claims" in the header
    cert = _claim(cid).run()
    assert cert.status == "proved-general", cert.residual
    assert cert.mutants and all(m.refuted for m in cert.mutants), [m.id for m in cert.mutants if not m.refuted]
    assert {m.id.split("~")[1] for m in cert.mutants} >= set(table.mistakes)


@pytest.mark.parametrize("step", STEPS, ids=[s.name for s in STEPS])
def test_step_update_claim(step):
    cid = f"{step.name}.update"
    assert cid in step.claims
    cert = _claim(cid).run()
    assert cert.status == "proved-general", cert.residual
    assert cert.mutants and all(m.refuted for m in cert.mutants), [m.id for m in cert.mutants if not m.refuted]


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_table_audit_nothing_survives(table):
    res = constants.audit_table(table)
    assert res and not [r.mutant for r in res if r.outcome == "survived"]


@pytest.mark.parametrize("step", STEPS, ids=[s.name for s in STEPS])
def test_step_audit_nothing_survives(step):
    res = constants.audit_step(step)
    assert res and not [r.mutant for r in res if r.outcome == "survived"]


def test_wrong_entries_are_refuted_and_equal_forms_proved():
    rope = registry.table("rope_tables")
    row, col = P._row, P._col
    # ω_i with i instead of 2i: refuted by the proof, with an entry of the table as witness
    wrong = constants.prove_entries(rope, {"cos": sp.cos(row * P.BASE ** (-P.pair_index(col) / P.d))})
    assert wrong.status == "refuted" and wrong.counterexample["array"] == "cos"
    # the rotation's sign
    assert constants.prove_entries(rope, {"rot": -P.rope_rot_table(row, col)}).status == "refuted"
    # another form of the same matrix (the column's parity decides) is the same table
    same = constants.prove_entries(rope, {"rot": P.rope_rot_table_by_column(row, col)})
    assert same.status == "proved-general"
    # sin and cos swapped in the sinusoidal table
    pe = registry.table("sinusoidal_table")
    w = P.BASE ** (-2 * P.pair_index(col) / P.d)
    swapped = P._odd(col) * sp.sin(row * w) + P._even(col) * sp.cos(row * w)
    assert constants.prove_entries(pe, {"pe": swapped}).status == "refuted"


def test_wrong_step_is_refuted():
    adam = O.STEPS["adam"]
    lines = list(adam.assigns)
    lines[-1] = Assign(O.P_new, O.P - O.lr_s * O.M_new / (sp.sqrt(O.V_new) + O.eps_s))  # no bias correction
    proof = constants.prove_update(adam, lines)
    assert proof.status == "refuted" and proof.counterexample["output"] == "p_new"


def test_integer_deltas():
    k, j = sp.Symbol("k", integer=True), sp.Symbol("j", integer=True)
    assert constants._integer_delta(sp.KroneckerDelta(2 * k, 2 * j + 1)) == 0
    assert constants._integer_delta(sp.KroneckerDelta(2 * k + 1, 2 * j + 1)) == constants._integer_delta(
        sp.KroneckerDelta(j, k)
    )
    x = sp.Symbol("x")  # not an integer: left alone
    assert constants._integer_delta(sp.KroneckerDelta(2 * x, 1)) == sp.KroneckerDelta(2 * x, 1)


def test_specs_are_checked_and_printed():
    for t in TABLES:
        assert t.spec and t.latex
    for s in STEPS:
        assert s.spec and s.latex and ("\\theta" in s.latex or "W_" in s.latex)
    r, c = sp.Symbol("r", integer=True), sp.Symbol("c", integer=True)
    n = sp.Symbol("n", integer=True, positive=True)
    arr = TableArray("a", (n, n), (r, c), r + c)
    with pytest.raises(ArrayError, match="every array"):
        Table(name="toy", file="toy", module="m", title="t", sizes=(n,), arrays=[arr], spec={"b": r})
    with pytest.raises(ArrayError, match="neither its"):
        Table(name="toy", file="toy", module="m", title="t", sizes=(n,), arrays=[arr], spec={"a": sp.Symbol("z")})
    with pytest.raises(ValueError, match="does not define"):
        O.Step(
            name="toy",
            title="t",
            claims=[],
            inputs=[O.P, O.G],
            options=[O._LR],
            assigns=[Assign(O.P_new, O.P - O.lr_s * O.G)],
            outputs=[O.P_new],
            spec=[Assign(O.M_new, O.P)],
        )
