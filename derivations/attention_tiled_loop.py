"""The tiled attention's loops, whole: induction over any number of key blocks, and unrolled.

derivations/attention_tiled.py proves what one block does (`first_block`, `step`, the block
rows of dV and dK, dQ's step) and what the last state means (`output`, `lse`). Two claims here
put the blocks together, both about the loop objects the generated code is printed from
(`TILED_FORWARD`, `TILED_BACKWARD`):

* `attention_tiled.induction` (all sizes, any number K ≥ 1 of blocks of any sizes): the rule of
  derivations/proof/induction.py, its obligations built from the loops' own lines and one
  invariant each —

      forward   I(e) = (ℓ, O) = (Σ_{j<e} e^{S_ij − m_i}, Σ_{j<e} e^{S_ij − m_i} V_j), m free
                base: init, then the block [0, B), gives I(B); step: I(P) ↦ I(P + B);
                end: O/ℓ = softmax(S) V and m + log ℓ = log Σ_j e^{S_ij} from I(n)
      backward  J(e) = dQ = Σ_{j<e} dS_ij K_j / √d_k
                base: init gives J(0) = 0; step J(P) ↦ J(P + B); end: J(n) = attention_lse's dQ

  — and its frame: each loop's body reads nothing from the block before but what it carries,
  its start and size are the symbols the step was proved for (integers, P ≥ 0, B ≥ 1).

* `attention_tiled.unrolled` (concrete: n = 5 keys in blocks of 2, 2, 1; any m, d_k, d_v for
  the unmasked forward and every query row for the causal one): the loops run block by block
  (`unroll`: only the carried arrays survive a block), the final output, log-sum-exp and
  gradients proved equal to attention_lse's by the index normaliser. A check of the rule's
  conclusion that does not go through the rule: the blocks composed as the printed loop runs
  them, uneven last block included.

The mutants of the first are loops whose frame is broken (a running array not carried: the
printed loop would start it afresh each block); they are refuted by the unrolled loop's value
at a numeric point, which shows the frame condition is not a formality.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from . import attention_tiled as tiled
from .attention_tiled import (
    TILED_BACKWARD,
    TILED_FORWARD,
    UNTILED,
    WHEN,
    acc,
    delta,
    dk,
    dq,
    dq_invariant,
    dv,
    ell,
    f,
    i,
    invariant,
    lse_dk,
    lse_dq,
    lse_dv,
    lsum,
    m,
    mx,
    n,
    o,
    p_blk,
    u_,
)
from .language.arrays import Array, entry
from .proof.core import Claim, Mutant, Proof, Setting, counterexample, prove_index_identity
from .proof.induction import BlockInduction, expand_concrete_sums, unroll

TOPICS = ("attention_tiled",)  # the claims are about attention_tiled's loops
SOURCE = "FlashAttention (Dao et al. 2022), Algorithms 1 and 2; Milakov & Gimelshein 2018 (online softmax)"


# ------------------------------------------------------------------------------- the rule
def forward_rule(loop=TILED_FORWARD) -> BlockInduction:
    return BlockInduction(
        loop, lambda end, shift: dict(zip((ell, acc), invariant(end, shift or mx, False))), base="first-block", shift=mx
    )


def backward_rule(loop=TILED_BACKWARD) -> BlockInduction:
    return BlockInduction(loop, lambda end, shift: {dq: dq_invariant(end, False)}, base="init")


def _obligations(fwd: BlockInduction, bwd: BlockInduction) -> list:
    """(label, prover) for each obligation, built from the loops' lines: the forward's base,
    step and end, the backward's base, step and end."""
    F, Bk = fwd.loop, bwd.loop

    def dq_base():
        for causal in (False, True):
            start = tiled.run(Bk.init, when=WHEN[causal])[dq]
            empty = sp.sympify(entry(dq_invariant(0, causal), (i, f))).doit()
            if start != 0 or empty != 0:
                return Proof("unproven", f"dQ after init is {start}, the invariant J(0) is {empty}")
        return Proof("proved-general", "evaluation: dQ = 0 after init, J(0) an empty sum", [], "0")

    def dq_end():
        return prove_index_identity(
            [entry(dq_invariant(n, c), (i, f)) for c in (False, True)],
            [entry(UNTILED[c][lse_dq], (i, f)) for c in (False, True)],
            tiled.DQ_END_SETTING,
        )

    return [
        (
            "forward base (init, then the block [0, B))",
            lambda: tiled._lines_proof(*tiled.first_block_sides(F.body, F.init), tiled.STEP_SETTING),
        ),
        (
            "forward step I(P) ↦ I(P + B)",
            lambda: tiled._lines_proof(*tiled.step_sides(F.body), tiled.STEP_SETTING, tiled.KEY_SPLIT),
        ),
        ("forward end: O/ℓ = softmax(S) V", lambda: tiled._parts(tiled.output_parts(F.end), "index normaliser")),
        ("forward end: m + log ℓ = log Σ e^S", lambda: tiled._parts(tiled.lse_parts(F.end), "index normaliser")),
        ("backward base J(0)", dq_base),
        (
            "backward step J(P) ↦ J(P + B)",
            lambda: tiled._lines_proof(*tiled.dq_step_sides(Bk.body, Bk.init), tiled.DQ_SETTING, tiled.KEY_SPLIT),
        ),
        ("backward end J(n) = attention_lse's dQ", dq_end),
    ]


def _induction(fwd: BlockInduction | None = None, bwd: BlockInduction | None = None) -> Proof:
    fwd, bwd = fwd or forward_rule(), bwd or backward_rule()
    problems = [f"{r.loop.name}: {p}" for r in (fwd, bwd) for p in r.problems()]
    if problems:
        return Proof("unproven", "the induction rule refuses the loops: " + "; ".join(problems))
    assumptions: list[str] = []
    worst = 0.0
    for label, prover in _obligations(fwd, bwd):
        proof = prover()
        if proof.status != "proved-general":
            return Proof(
                proof.status,
                f"{label}: {proof.method}",
                proof.assumptions,
                proof.residual,
                counterexample=proof.counterexample,
            )
        assumptions += [a for a in proof.assumptions if a not in assumptions]
        worst = max(worst, (proof.spot_check or {}).get("max_relative_gap", 0.0))
    return Proof(
        "proved-general",
        "induction on the number of key blocks (derivations/proof/induction.py): the frame of both loops checked "
        "(each body reads only its carried state from the block before), start and size the step's symbols; base, "
        "step and end of each loop built from its printed lines and one invariant, each through the proof gate",
        [
            "the principle of induction on k = 0 … K (the step instantiated at P = b_k, B = b_{k+1} − b_k)",
            "the printed partition: b_0 = 0, b_{k+1} = b_k + min(block, n − b_k), b_K = n (the template's loop "
            "header, tests/test_attention_tiled.py)",
            "the running max: any real per-row value (attention_tiled.max)",
        ]
        + assumptions,
        "0",
        spot_check={"max_relative_gap": worst, "identities": 7},
    )


# ------------------------------------------------------------------------------- unrolled
PARTITION = ((0, 2), (2, 2), (4, 1))  # n = 5 keys: two full blocks of 2 and a short one
N_KEYS = 5
UNROLL_SETTING = Setting(
    sizes={m: 7, tiled.d_k: 2, tiled.d_v: 2}, indices={i: (0, m - 1), f: (0, tiled.d_v - 1)}, scalars={u_: 0}
)
UNROLL_SETTING_K = Setting(sizes={m: 7, tiled.d_k: 2, tiled.d_v: 2}, indices={i: (0, m - 1), f: (0, tiled.d_k - 1)})
CAUSAL_ROWS = (*range(N_KEYS), N_KEYS + u_)  # each query that sees a part of the keys, and one past them all


def _max_abstracted(k: int, state: dict) -> dict:
    """Block k's new running max (its closed max(…) expression) read as a free per-row array m_k:
    the identities hold for any value of it (what it is: attention_tiled.max)."""
    value = state[mx]
    if isinstance(value, Array):
        return state
    fresh = Array(f"m_{k}", (m, 1), latex=f"m_{{{k}}}")
    return {a: sp.sympify(e).xreplace({value: fresh}) for a, e in state.items()}


def _at_n(expr):
    return expand_concrete_sums(sp.sympify(expr).xreplace({n: N_KEYS}))


def forward_pairs(loop=TILED_FORWARD, flags=(False, True)) -> list:
    """(label, unrolled, attention_lse's) for the output and log-sum-exp, unmasked and causal
    (each side's entry taken once at the symbolic row i, then at each causal row)."""
    out = []
    for causal in flags:
        state, _ = unroll(loop, PARTITION, WHEN[causal], after_block=_max_abstracted)
        sides = [
            (name, entry(got, (i, col), state), entry(got, (i, col), tiled.LSE_FORWARD[causal]))
            for name, got, col in (("O", o, f), ("lse", mx + lsum, 0))
        ]
        for row in CAUSAL_ROWS if causal else (i,):
            tag = f"{'causal' if causal else 'unmasked'}, row {row}"
            out += [
                (
                    f"{name}, {tag}",
                    _at_n(sp.sympify(lhs).xreplace({i: row})),
                    _at_n(sp.sympify(rhs).xreplace({i: row})),
                    UNROLL_SETTING,
                )
                for name, lhs, rhs in sides
            ]
    return out


def backward_pairs(loop=TILED_BACKWARD) -> list:
    """(label, unrolled, attention_lse's) for dQ (every row) and each block's rows of dV, dK
    (unmasked; δ the per-row array both read)."""
    init = [a for a in loop.init if not (a.target == delta and a.expr == tiled.DELTA)]
    state, rows = unroll(_loop(loop, init=init), PARTITION, WHEN[False])  # δ: a free per-row array
    out = [("dQ", _at_n(entry(state[dq], (i, f))), _at_n(entry(UNTILED[False][lse_dq], (i, f))), UNROLL_SETTING_K)]
    for grad, untiled, setting in ((dv, lse_dv, UNROLL_SETTING), (dk, lse_dk, UNROLL_SETTING_K)):
        for start, size, block in rows[grad]:
            for r in range(size):
                out.append(
                    (
                        f"{grad.name} row {start + r}",
                        _at_n(entry(block, (r, f))),
                        _at_n(entry(UNTILED[False][untiled], (start + r, f))),
                        setting,
                    )
                )
    return out


@cache
def _pairs() -> tuple:
    return tuple(forward_pairs() + backward_pairs())


def _unrolled() -> Proof:
    assumptions: list[str] = []
    worst = 0.0
    pairs = _pairs()
    for label, lhs, rhs, setting in pairs:
        proof = prove_index_identity(lhs, rhs, setting)
        if proof.status != "proved-general":
            return Proof(
                proof.status,
                f"{label}: {proof.method}",
                proof.assumptions,
                proof.residual,
                counterexample=proof.counterexample,
            )
        assumptions += [a for a in proof.assumptions if a not in assumptions]
        worst = max(worst, proof.spot_check["max_relative_gap"])
    return Proof(
        "proved-concrete",
        f"the loops unrolled over n = {N_KEYS} keys in blocks {[b for _, b in PARTITION]} (only the carried "
        "arrays survive a block), each block's running max a free per-row array; the index normaliser on "
        f"{len(pairs)} identities, the blocks' sums written out",
        ["δ = rowsum(dO ⊙ O), one per-row array on both sides"] + assumptions,
        "0",
        sizes={"n": N_KEYS, "blocks": "2, 2, 1", "m, d_k, d_v": "symbolic", "causal rows": "0 … 4 and 5 + u"},
        spot_check={"max_relative_gap": worst, "identities": len(pairs)},
    )


def refute_unrolled(fwd_loop=TILED_FORWARD, bwd_loop=TILED_BACKWARD) -> dict | None:
    """A numeric counterexample: the unrolled loops (as given) against attention_lse at a point,
    searched among the pairs of the loop that differs from the printed one, unmasked first."""
    expected = {label: (rhs, setting) for label, _, rhs, setting in _pairs()}
    tries = []
    if fwd_loop != TILED_FORWARD:
        tries += [lambda: forward_pairs(fwd_loop, (False,)), lambda: forward_pairs(fwd_loop, (True,))]
    if bwd_loop != TILED_BACKWARD:
        tries.append(lambda: backward_pairs(bwd_loop))
    for wrong in tries:
        for label, got, _, _ in wrong():
            rhs, setting = expected[label]
            cx = counterexample(got, rhs, setting)
            if cx is not None:
                return dict(cx, part=label)
    return None


def _loop(loop, **changes):
    from dataclasses import replace

    return replace(loop, **changes)


LOOP_MUTANTS = (
    (
        "acc-not-carried",
        "O not carried from block to block (the printed loop would start it at 0 each block)",
        _loop(TILED_FORWARD, carried=(mx, ell)),
        TILED_BACKWARD,
    ),
    (
        "max-not-carried",
        "the running max not carried (each block would start it at −∞: α = 0 forgets the blocks before)",
        _loop(TILED_FORWARD, carried=(ell, acc)),
        TILED_BACKWARD,
    ),
    (
        "dq-not-carried",
        "dQ not carried (each block's term would replace the sum)",
        TILED_FORWARD,
        _loop(TILED_BACKWARD, carried=()),
    ),
)

induction = Claim(
    id="attention_tiled.induction",
    title="Any number of key blocks: the tiled loops end in attention_lse's output, log-sum-exp and dQ",
    source=SOURCE,
    latex=r"\forall K \geq 1, \ 0 = b_0 < \dots < b_K = n: \ \frac{O}{\ell} = \mathrm{softmax}(S) V, \ "
    r"m + \log \ell = \log \textstyle\sum_j e^{S_{ij}}, \ \partial Q = \tfrac{1}{\sqrt{d_k}} \partial S K "
    r"\quad \text{(induction on } k\text{: base, step } I(b_k) \mapsto I(b_{k+1})\text{, end; frame checked)}",
    prove=_induction,
    mutants=[
        Mutant(name, mistake, (lambda fl=fl, bl=bl: refute_unrolled(fl, bl))) for name, mistake, fl, bl in LOOP_MUTANTS
    ],
)

unrolled = Claim(
    id="attention_tiled.unrolled",
    title="Unrolled over n = 5 keys in blocks of 2, 2, 1: the tiled loops compute attention_lse's forward and backward",
    source=SOURCE,
    latex=r"n = 5, \ (b_k) = (0, 2, 4, 5): \ \frac{O}{\ell} = \mathrm{softmax}(S) V, \ m + \log \ell = "
    r"\log \textstyle\sum_j e^{S_{ij}}, \ \partial Q, \ \partial K_{b}, \ \partial V_{b} = \text{attention\_lse's} "
    r"\quad \text{(any } m, d_k, d_v\text{; causal: every query row)}",
    prove=_unrolled,
    mutants=[
        Mutant(
            "no-rescale",
            "ℓ and O not rescaled by e^{m − m'} when a block arrives",
            lambda: refute_unrolled(
                _loop(
                    TILED_FORWARD,
                    body=tiled.replaced(
                        tiled.replaced(TILED_FORWARD.body, ell, ell + tiled.RowSum(p_blk)),
                        acc,
                        acc + tiled.MatMul(p_blk, tiled.V_BLK),
                    ),
                )
            ),
        ),
        Mutant(
            "delta-from-block",
            "δ from the block, rowsum(dP_b ⊙ P_b), not the full row's",
            lambda: refute_unrolled(bwd_loop=_loop(TILED_BACKWARD, body=tiled.DELTA_FROM_BLOCK)),
        ),
        Mutant(
            "acc-not-carried",
            "O not carried from block to block",
            lambda: refute_unrolled(_loop(TILED_FORWARD, carried=(mx, ell))),
        ),
    ],
)

CLAIMS: list[Claim] = [induction, unrolled]
