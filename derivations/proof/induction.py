"""Induction over the blocks of a loop: from a base and a step to any number of blocks.

A block loop (derivations/attention_tiled.py's `BlockLoop`) runs `init` once, `body` once per
block [P, P + B) of a partition 0 = b_0 < b_1 < … < b_K = n, then `end`. Between blocks only the
`carried` arrays survive (the printed loop writes them back; every other array the body defines
is a temporary of one block). Given an invariant I(e) of the carried state — its value after
the blocks that cover the keys 0 … e − 1 — the rule is

    base       the state after `init` and a first block [0, B) is I(B)      (or `init` gives I(0))
    step       for symbolic P ≥ 0, B ≥ 1: the body maps I(P) to I(P + B)
    frame      the body reads nothing from the block before it but the carried state
    ----------------------------------------------------------------------------------------
    for every K ≥ 1 and every partition, the state after the last block is I(b_K) = I(n)

by induction on k: the step at P = b_k, B = b_{k+1} − b_k (an instance: P and B are symbols
with exactly those assumptions). This module derives the obligations from the loop's own
lines and one invariant, so a base, a step and a conclusion about different invariants, or
about lines other than the printed ones, cannot be put together; and it checks the frame and
the symbols. The principle of induction on the natural numbers is the one step not checked.

`unroll` runs the loop over a concrete partition with those semantics (non-carried arrays do
not survive a block), for proofs at concrete sizes and for numeric counterexamples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp

from ..language.arrays import Array

__all__ = ["BlockInduction", "frame", "frame_problems", "unroll", "expand_concrete_sums"]


def _reads(expr) -> set:
    return {s for s in sp.sympify(expr).free_symbols if isinstance(s, Array)}


def frame(lines) -> tuple[set, set]:
    """(entry reads, defined) of a block's lines: the arrays some line reads before any earlier
    line of the block defined them, and the arrays the lines define."""
    entry, defined = set(), set()
    for a in lines:
        entry |= _reads(a.expr) - defined
        defined.add(a.target)
    return entry, defined


def frame_problems(loop) -> list[str]:
    """What keeps the loop from being a function of its carried state, block to block:

    * an array the body defines and reads on entry (a value from the block before) that is not
      carried — the printed loop would read a stale or missing value;
    * a carried array that neither `init` nor the body defines;
    * an array the `end` reads that only the body defines and that is not carried (a
      temporary of the last block);
    * a block output (`rows_out`) that the body does not define."""
    entry, defined = frame(loop.body)
    _, init_defined = frame(loop.init)
    carried = set(loop.carried)
    out = [
        f"the body reads {a.name} from the block before, but it is not carried"
        for a in sorted(entry & defined - carried, key=lambda a: a.name)
    ]
    out += [
        f"carried {a.name} is defined neither by init nor by the body"
        for a in sorted(carried - defined - init_defined, key=lambda a: a.name)
    ]
    end_entry, _ = frame(loop.end)
    out += [
        f"the end reads {a.name}, a temporary of the last block (not carried)"
        for a in sorted(end_entry & defined - carried - init_defined, key=lambda a: a.name)
    ]
    out += [
        f"block output {blk.name} is not defined by the body" for blk in loop.rows_out.values() if blk not in defined
    ]
    return out


def symbol_problems(loop) -> list[str]:
    """The step is proved for the loop's start and size symbols; it applies to every block of
    every partition only if they are integers with P ≥ 0 and B ≥ 1 and nothing more is assumed."""
    P, B = loop.start, loop.size
    out = []
    if not (P.is_integer and P.is_nonnegative):
        out.append(f"the block start {P} is not declared a non-negative integer")
    if not (B.is_integer and B.is_positive):
        out.append(f"the block size {B} is not declared a positive integer")
    return out


def _run(lines, env: dict, when, subs: dict) -> dict:
    """The lines run on `env` (each reads the values before it), `subs` put into each line."""
    env = dict(env)
    for a in lines:
        if a.when is not None and a.when not in when:
            continue
        env[a.target] = sp.sympify(a.expr).xreplace(subs).xreplace(env)
    return env


def unroll(
    loop, blocks, when=frozenset(), inputs: dict | None = None, after_block: Callable[[int, dict], dict] | None = None
) -> tuple[dict, dict]:
    """The loop run over the concrete partition `blocks` [(P, B), …]: `init` on `inputs`; each
    block starts from init's values and the carried arrays of the block before (nothing else it
    defined survives); `after_block(k, state)` may rewrite a block's state (a proof abstracts the
    running max there); then `end`. Returns (the final state, {output: [(P, B, block rows)]})."""
    keep = _run(loop.init, dict(inputs or {}), when, {})
    rows: dict = {}
    for k, (start, size) in enumerate(blocks):
        after = _run(loop.body, keep, when, {loop.start: start, loop.size: size})
        if after_block is not None:
            after = after_block(k, after)
        keep = {**keep, **{c: after[c] for c in loop.carried}}
        for out, blk in loop.rows_out.items():
            rows.setdefault(out, []).append((start, size, after[blk]))
    return _run(loop.end, keep, when, {}), rows


def expand_concrete_sums(expr):
    """Every sum whose limits are integers written out term by term (a block of a concrete
    partition); sums over symbolic ranges (the feature axis d_k) are left as they are. Only the
    summation variable is replaced (no `doit`, which would try to evaluate the inner sums)."""

    def written_out(s: sp.Sum):
        terms = [s.function]
        for var, lo, hi in s.limits:  # innermost first; every limit is an integer here
            terms = [t.xreplace({var: sp.Integer(k)}) for t in terms for k in range(int(lo), int(hi) + 1)]
        return sp.Add(*terms)

    return sp.sympify(expr).replace(
        lambda s: isinstance(s, sp.Sum) and all(lim[1].is_Integer and lim[2].is_Integer for lim in s.limits),
        written_out,
    )


@dataclass(frozen=True)
class BlockInduction:
    """The induction rule for one loop and one invariant: `invariant(end, shift)` is the carried
    state {array: value} after the keys 0 … end − 1 shifted by the per-row number `shift` (the
    running max; a carried array, free in the identities, what it is is another claim's). `base` is "first-block" (init and the
    block [0, B) give I(B)) or "init" (init gives I(0)). The obligations below are built from the
    loop's lines and this one invariant; `problems()` lists what the rule itself refuses."""

    loop: object
    invariant: Callable
    base: str = "init"
    shift: Array | None = None  # a carried array the identities hold for every value of

    def problems(self) -> list[str]:
        out = frame_problems(self.loop) + symbol_problems(self.loop)
        speaks = set(self.invariant(self.loop.start, None))
        carried = set(self.loop.carried)
        out += [
            f"the invariant speaks of {a.name}, which the loop does not carry"
            for a in sorted(speaks - carried, key=lambda a: a.name)
        ]
        free = carried - speaks - ({self.shift} if self.shift is not None else set())
        out += [
            f"carried {a.name} is neither in the invariant nor its free shift"
            for a in sorted(free, key=lambda a: a.name)
        ]
        if self.base not in ("init", "first-block"):
            out.append(f"unknown base {self.base!r}")
        return out
