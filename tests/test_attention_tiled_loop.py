"""The tiled attention's loops whole: the induction rule's checks, the unrolled loops, and the
partition the template's loop header prints."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import sympy as sp

from derivations import attention_tiled as at
from derivations import attention_tiled_loop as loop
from derivations import registry
from derivations.language.arrays import Array, Assign
from derivations.proof.induction import expand_concrete_sums, frame, frame_problems, symbol_problems, unroll

TEMPLATES = Path(__file__).resolve().parents[1] / "codegen" / "templates"


# ------------------------------------------------------------------------------ the frame
def test_the_printed_loops_pass_the_rule():
    for rule in (loop.forward_rule(), loop.backward_rule()):
        assert rule.problems() == []


def test_the_forward_body_reads_exactly_its_carried_state_from_the_block_before():
    entry, defined = frame(at.TILED_FORWARD.body)
    assert entry & defined == {at.mx, at.ell, at.acc} == set(at.TILED_FORWARD.carried)


@pytest.mark.parametrize("dropped", ["mx", "ell", "acc"])
def test_a_running_array_not_carried_is_refused(dropped):
    carried = tuple(a for a in at.TILED_FORWARD.carried if a.name != dropped)
    broken = dataclasses.replace(at.TILED_FORWARD, carried=carried)
    problems = frame_problems(broken)
    assert any(f"reads {dropped} from the block before" in p for p in problems), problems
    proof = loop._induction(fwd=loop.forward_rule(broken))
    assert proof.status == "unproven" and "refuses" in proof.method


def test_the_end_may_not_read_a_temporary_of_the_last_block():
    leaky = dataclasses.replace(at.TILED_FORWARD, end=[Assign(at.o, at.acc / at.ell * at.RowSum(at.p_blk))])
    assert any("p_blk, a temporary" in p for p in frame_problems(leaky))


def test_a_block_output_the_body_does_not_define_is_refused():
    stray = Array("stray", (at.B, at.d_v))
    broken = dataclasses.replace(at.TILED_BACKWARD, rows_out={at.dv: stray})
    assert any("stray is not defined" in p for p in frame_problems(broken))


@pytest.mark.parametrize(
    "start,size",
    [
        (sp.Symbol("P"), at.B),  # no assumptions on the start
        (sp.Symbol("P", integer=True), at.B),  # may be negative
        (at.P, sp.Symbol("B", integer=True, nonnegative=True)),  # an empty block allowed
    ],
)
def test_the_step_symbols_must_carry_the_assumptions_it_was_proved_under(start, size):
    broken = dataclasses.replace(at.TILED_FORWARD, start=start, size=size)
    assert symbol_problems(broken)


def test_an_invariant_about_an_array_the_loop_does_not_carry_is_refused():
    rule = dataclasses.replace(loop.forward_rule(), invariant=lambda end, shift: {at.alpha: at.ell})
    assert any("alpha, which the loop does not carry" in p for p in rule.problems())


# ------------------------------------------------------------------------------ unrolling
def test_unroll_keeps_only_the_carried_arrays_between_blocks():
    x, t_ = Array("x", (1, 1)), Array("t", (1, 1))
    body = [Assign(t_, x + at.P), Assign(x, t_ + at.B)]  # x ← x + P + B; t a temporary
    lp = at.BlockLoop("toy", [Assign(x, sp.Integer(0)), Assign(t_, sp.Integer(100))], body, [], (x,))
    state, _ = unroll(lp, [(0, 2), (2, 3), (5, 1)])
    assert state[x] == (0 + 2) + (2 + 3) + (5 + 1)
    dropped = dataclasses.replace(lp, carried=())
    state, _ = unroll(dropped, [(0, 2), (2, 3), (5, 1)])
    assert state[x] == 0  # nothing survives a block


def test_expand_concrete_sums_writes_out_only_integer_ranges():
    j, c = sp.Symbol("j", integer=True), sp.Symbol("c", integer=True)
    d = sp.Symbol("d", integer=True, positive=True)
    f, g = sp.IndexedBase("f"), sp.IndexedBase("g")
    inner = sp.Sum(g[j, c], (c, 0, d - 1))
    out = expand_concrete_sums(sp.Sum(f[j] * inner, (j, 0, 2)))
    assert out == f[0] * inner.xreplace({j: 0}) + f[1] * inner.xreplace({j: 1}) + f[2] * inner.xreplace({j: 2})
    assert expand_concrete_sums(sp.Sum(f[j], (j, 0, -1))) == 0
    assert expand_concrete_sums(sp.Sum(f[j], (j, 0, d))) == sp.Sum(f[j], (j, 0, d))


# ------------------------------------------------------------------------------ the partition
def _headers(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^( *for P in range\(.*\):)\n( *B = .*)$", text, flags=re.M)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_template_partition_is_the_one_the_induction_assumes(backend):
    """The loop header the template prints, run for every n, block ≤ 40: b_0 = 0, each block
    starts where the one before ended, has B ≥ 1 keys, and the last ends at n."""
    headers = _headers((TEMPLATES / f"{backend}_attention_tiled.py.j2").read_text())
    assert len(headers) == 2 and len(set(headers)) == 1  # forward and backward alike
    for_line, size_line = (s.strip() for s in headers[0])
    program = f"blocks = []\n{for_line}\n    {size_line}\n    blocks.append((P, B))\n"
    for n in range(1, 41):
        for block in range(1, 41):
            scope = {"n": n, "block": block}
            exec(compile(program, "<template loop header>", "exec"), {}, scope)  # the template's own text
            blocks = scope["blocks"]
            assert blocks[0][0] == 0 and all(size >= 1 for _, size in blocks)
            assert all(p2 == p1 + b1 for (p1, b1), (p2, _) in zip(blocks, blocks[1:]))
            assert blocks[-1][0] + blocks[-1][1] == n


# ------------------------------------------------------------------------------ registered
def test_the_loop_claims_are_registered_and_listed_by_the_composite():
    ids = {c.id for c in registry.claims()}
    assert {"attention_tiled.induction", "attention_tiled.unrolled"} <= ids
    assert {"attention_tiled.induction", "attention_tiled.unrolled"} <= set(at.ATTENTION_TILED.claims)


def test_the_unrolled_claim_is_concrete_and_says_at_which_sizes():
    proof = loop._unrolled()
    assert proof.status == "proved-concrete" and proof.sizes["n"] == 5
