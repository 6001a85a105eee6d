"""Attention whose memory is linear in T: the online-softmax recurrence over key blocks, proved.

attention_lse (derivations/attention_lse.py) keeps no m×n array between forward and backward,
but each pass still forms the whole m×n score matrix once. The tiled form never does: the keys
are cut into K blocks, 0 = b_0 < b_1 < … < b_K = n (any sizes; the last may be short), and a
block of B_k = b_{k+1} − b_k keys is visited at a time, carrying three numbers per query row
(FlashAttention, Milakov & Gimelshein's online normaliser):

    forward, per query row i (all rows at once: the arrays below are m×B, m×1, m×d_v)

        m = −∞,  ℓ = 0,  O = 0                              # FORWARD_INIT
        for each key block [P, P + B):                       # FORWARD_BLOCK, P = b_k, B = B_k
            S_b   = Q K_bᵀ / √d_k                            # K_b = rows P … P+B−1 of K  (m×B)
            S_b   = mask(S_b)            (causal)            # −∞ where key P + w > query i
            m'    = max(m, rowmax S_b)                       # the running max
            α     = e^{m − m'}                               # rescales what was summed under m
            P_b   = e^{S_b − m'}
            ℓ     = α ℓ + rowsum P_b
            O     = α O + P_b V_b
            m     = m'
        o = O / ℓ,   mx = m,   lsum = log ℓ                  # FORWARD_END: attention_lse's cache

    backward, from attention_lse's cache (q, k, v, o, mx, lsum) and dO

        δ = rowsum(dO ⊙ O),  dQ = 0                          # BACKWARD_INIT (δ of the full row)
        for each key block [P, P + B):                       # BACKWARD_BLOCK
            S_b  = Q K_bᵀ / √d_k,  S_b = mask(S_b) (causal)
            P_b  = e^{(S_b − mx) − lsum}                     # the weights, recomputed
            dV_b = P_bᵀ dO                                   # rows P … P+B−1 of dV
            dP_b = dO V_bᵀ
            dS_b = P_b ⊙ (dP_b − δ)
            dQ  += dS_b K_b / √d_k
            dK_b = dS_bᵀ Q / √d_k                            # rows P … P+B−1 of dK

The largest temporary is m×B: memory O(T·B), not O(T²). With causal masking the rows before a
block's first key (i < P) see none of its keys: every masked score is −∞, and
`attention_tiled.causal_skip` shows the update is then the identity for them (m, ℓ, O unchanged;
their P_b, dS_b are 0, so they add nothing to dV_b, dK_b or dQ). A kernel visits only the rows
P … m − 1 of each block; with query tiles too, a tile whose first key comes after its last query
is not visited at all.

The lines above are written once, below, in the array language (`FORWARD_BLOCK`, …), with two
nodes of this module: `RowBlock(x, P, B)` (rows P … P+B−1 of x, the block's K_b and V_b) and
`BlockCausalMask(x, P)` (the causal mask of a block whose first key is P). The loop itself is
described by `BlockLoop` (init, body, end, the carried state, the rows each block writes); the
language has no loop node, so no Op is registered: the claims are built from these very lines,
and codegen prints them into the loops of the `attention_tiled` composite (below;
codegen/contexts/loops.py), whose template lays out the loop itself (docs/trusted.md).

What is proved, for symbolic sizes m, d_k, d_v, n, a symbolic block start P ≥ 0 and block size
B ≥ 1 (every identity an exact residual of 0 through the proof gate, `core.decide`, except
`max`, a case split decided by SymPy's assumptions, and `causal_skip`, by evaluation):

* `first_block` (the base): from (−∞, 0, 0), one block of keys 0 … B−1 gives the invariant
      ℓ = Σ_{j<B} e^{S_ij − m},   O = Σ_{j<B} e^{S_ij − m} V_j,   m = rowmax S_0;
* `step` (k → k + 1): if ℓ = Σ_{j<P} e^{S_ij − m} and O = Σ_{j<P} e^{S_ij − m} V_j hold for the
  keys before the block, with m any real per-row number, the body leaves them holding for the
  keys before P + B, with the new m'. The identity holds for every value of m and m': that the
  shifts are maxima is not needed for the result, only for its range (every exponent ≤ 0);
* `max` (what m is): m' = max(m, rowmax S_b) is the maximum of the scores of the first P + B
  keys when m is that of the first P and rowmax S_b that of the block (upper bound and
  attained, by a case split on the sign of m − rowmax S_b), e^{m − m'} ≤ 1 and every
  e^{S_ij − m'} ≤ 1;
* `output`, `lse` (the conclusion, after the last block, b_K = n): O/ℓ = softmax(S) V, the
  output of attention_lse; m + log ℓ = log Σ_j e^{S_ij} = attention_lse's mx + lsum, for any
  final m, and with m = rowmax S (by `max`) log ℓ is attention_lse's lsum itself;
* `causal_skip`: a block after query i changes nothing for row i;
* `dV_block`, `dK_block`: the rows P … P+B−1 of attention_lse's dV and dK, for any cache;
* `dQ` (its own induction: base dQ = 0 = the empty sum, step, conclusion): the accumulated
  dQ is attention_lse's dQ, for any cache.

So with the generated claims attention_lse.backward.* (its backward is the derivative of its
forward) the tiled pair computes attention's output and gradients.

Two abstractions keep the proofs small and are sound for the same reason (an identity proved
for every value of a per-row array holds for the value the lines give it): the new max
m' = max(m, rowmax S_b) is one per-row array in `first_block` and `step` (their identities hold
for any m'), and δ = rowsum(dO ⊙ O), the same expression in the tiled and the untiled backward,
is one per-row array in `dK_block` and `dQ`.

The blocks are put together in derivations/attention_tiled_loop.py: `attention_tiled.induction`
applies the induction rule of derivations/proof/induction.py to TILED_FORWARD and TILED_BACKWARD
(their frame checked, base, step and end built from their lines and one invariant each), and
`attention_tiled.unrolled` runs both loops over n = 5 keys in blocks of 2, 2, 1 and proves the
result equal to attention_lse's at those sizes.

What is not a proof object, and is listed in docs/trusted.md:

* the principle of induction itself, and the partition the template's loop header prints
  (b_0 = 0, b_{k+1} = b_k + min(block, n − b_k), b_K = n; tested);
* splitting a key range at the block's start, Σ_{j=0}^{P+B−1} f(j) = Σ_{j=0}^{P−1} f(j) +
  Σ_{w=0}^{B−1} f(P + w) for integers P ≥ 0, B ≥ 0 (the normaliser renames bound indices but
  never shifts them): `split_range`, its side conditions proved as goals, checked numerically in
  tests/test_attention_tiled.py;
* the rows a kernel skips: `causal_skip` proves their terms are 0; that a sum over the rows
  P … m − 1 then equals the sum over all rows is the same split, read, not proved;
* the maximum of a finite non-empty set is taken as defined by its two properties (an upper
  bound that is an element), which is what `max` proves of m'.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cache, lru_cache

import sympy as sp

from .attention_lse import ATTENTION_LSE
from .language.arrays import (
    Array,
    ArrayNode,
    Assign,
    CausalMask,
    MatMul,
    RowMax,
    RowSum,
    T,
    entry,
    index,
    shape_of,
    size,
)
from .language.ops import grad_of
from .proof.core import Claim, Mutant, Proof, Setting, counterexample, prove_index_identity, refute_identity, spot_check
from .proof.rewriting import Normaliser

m, n, d_k, d_v = size("m"), size("n"), size("d_k"), size("d_v")  # queries, keys, dims
P = sp.Symbol("P", integer=True, nonnegative=True)  # the block's first key b_k
B = size("B")  # the block's size b_{k+1} − b_k
i, f, w = index("i"), index("f"), index("w")  # query, feature, key in block


# ------------------------------------------------------------------------------- block nodes
class RowBlock(ArrayNode):
    """Rows start … start + rows − 1 of x: the block's K_b, V_b. Index form: x[start + w, c]."""

    nargs = 3

    def node_shape(self, shapes):
        (r, c), _, _ = shapes
        return (self.args[2], c)

    def node_entry(self, idx, env):
        x, start, _ = self.args
        return entry(x, (start + idx[0], idx[1]), env)

    def _latex(self, printer) -> str:
        x, start, size = (printer._print(a) for a in self.args)
        return rf"{x}_{{[{start}, {start} + {size})}}"


class BlockCausalMask(ArrayNode):
    """The causal mask of the scores of a key block whose first key is `start`: entry (i, w) is
    −∞ when key start + w comes after query i (CausalMask is BlockCausalMask(·, 0))."""

    nargs = 2

    def node_shape(self, shapes):
        return shapes[0]

    def node_entry(self, idx, env):
        row, col = idx
        start = self.args[1]
        return sp.Piecewise((entry(self.args[0], idx, env), sp.Le(start + col, row)), (-sp.oo, True))


# ------------------------------------------------------------------------------- arrays
q, k, v = Array("q", (m, d_k)), Array("k", (n, d_k)), Array("v", (n, d_v))
o = Array("o", (m, d_v))
mx, lsum = Array("mx", (m, 1)), Array("lsum", (m, 1))  # attention_lse's cache: lse = mx + lsum
ell, acc = Array("ell", (m, 1)), Array("acc", (m, d_v))  # running ℓ and unnormalised O
mx_new, alpha = Array("mx_new", (m, 1)), Array("alpha", (m, 1))
s_blk, p_blk, sm_blk = Array("s_blk", (m, B)), Array("p_blk", (m, B)), Array("sm_blk", (m, B))
do, dq, dk, dv = grad_of(o), grad_of(q), grad_of(k), grad_of(v)
dp_blk, ds_blk = Array("dp_blk", (m, B)), Array("ds_blk", (m, B))
dv_blk, dk_blk = Array("dv_blk", (B, d_v)), Array("dk_blk", (B, d_k))
delta = Array("delta", (m, 1))

K_BLK, V_BLK = RowBlock(k, P, B), RowBlock(v, P, B)  # the block's keys and values (B rows)
sqrt_dk = sp.sqrt(d_k)

# ------------------------------------------------------------------------------- the loop
FORWARD_INIT = [
    Assign(mx, -sp.oo),  # m = −∞: no key seen yet
    Assign(ell, sp.Integer(0)),  # ℓ = 0
    Assign(acc, sp.Integer(0)),  # O = 0
]
# the block's scores, stated once: the forward computes them, the backward recomputes them
BLOCK_SCORES = [
    Assign(s_blk, MatMul(q, T(K_BLK)) / sqrt_dk),  # S_b = Q K_bᵀ / √d_k       (m×B)
    Assign(s_blk, BlockCausalMask(s_blk, P), when="causal"),  # −∞ where key P + w > query i
]
FORWARD_BLOCK = [
    *BLOCK_SCORES,
    Assign(mx_new, sp.Max(mx, RowMax(s_blk))),  # m' = max(m, rowmax S_b)
    Assign(alpha, sp.exp(mx - mx_new)),  # α = e^{m − m'} ∈ (0, 1]
    Assign(p_blk, sp.exp(s_blk - mx_new)),  # P_b = e^{S_b − m'}
    Assign(ell, alpha * ell + RowSum(p_blk)),  # ℓ = α ℓ + rowsum P_b
    Assign(acc, alpha * acc + MatMul(p_blk, V_BLK)),  # O = α O + P_b V_b
    Assign(mx, mx_new),  # m = m'
]
FORWARD_END = [
    Assign(o, acc / ell),  # o = O / ℓ = softmax(S) V
    Assign(lsum, sp.log(ell)),  # lsum = log ℓ; mx = m: lse = mx + lsum
]
BACKWARD_INIT = [
    Assign(
        delta,
        RowSum(do * o),  # δ = rowsum(dO ⊙ O), the full row
        note="δ = rowsum(dA ⊙ A) over every key, from dO and O alone (attention.delta)",
    ),
    Assign(dq, sp.Integer(0)),  # dQ = 0
]
BACKWARD_BLOCK = [
    *BLOCK_SCORES,  # S_b, recomputed (never stored)
    Assign(sm_blk, s_blk - mx),  # S_b − mx: as accurate as S_b
    Assign(p_blk, sp.exp(sm_blk - lsum)),  # P_b = e^{(S_b − mx) − lsum}
    Assign(dv_blk, MatMul(T(p_blk), do)),  # dV_b = P_bᵀ dO       (rows of dV)
    Assign(dp_blk, MatMul(do, T(V_BLK))),  # dP_b = dO V_bᵀ
    Assign(ds_blk, p_blk * (dp_blk - delta)),  # dS_b = P_b ⊙ (dP_b − δ)
    Assign(dq, dq + MatMul(ds_blk, K_BLK) / sqrt_dk),  # dQ += dS_b K_b / √d_k
    Assign(dk_blk, MatMul(T(ds_blk), q) / sqrt_dk),  # dK_b = dS_bᵀ Q / √d_k (rows of dK)
]


@dataclass(frozen=True)
class BlockLoop:
    """A loop over the key blocks [start, start + size) of a partition 0 = b_0 < … < b_K = n:
    `init` runs once, `body` once per block (reading `start` and `size`, the block's b_k and
    b_{k+1} − b_k), `end` once after the last block. `carried` is the state a block hands to the
    next (the body's redefinitions of it read the value on entry); `rows_out` maps an output to
    the array the body computes as its rows start … start + size − 1.

    Printing it needs a loop node in the array language and one proof rule: given an invariant
    I(P) of the carried state, `init` establishes I(0) (or the first block I(b_1)), the body
    maps I(P) to I(P + B) for symbolic P and B, and I(n) with `end` is the specification — the
    three claims below, generated instead of written."""

    name: str
    init: list
    body: list
    end: list
    carried: tuple
    start: sp.Symbol = P
    size: sp.Symbol = B
    rows_out: dict = field(default_factory=dict)
    skip: str = (
        "causal: the rows i < start see none of the block's keys and are not visited (attention_tiled.causal_skip)"
    )


TILED_FORWARD = BlockLoop("attention_tiled_forward", FORWARD_INIT, FORWARD_BLOCK, FORWARD_END, (mx, ell, acc))
TILED_BACKWARD = BlockLoop(
    "attention_tiled_backward", BACKWARD_INIT, BACKWARD_BLOCK, [], (dq,), rows_out={dv: dv_blk, dk: dk_blk}
)
for _line in FORWARD_INIT + FORWARD_BLOCK + FORWARD_END + BACKWARD_INIT + BACKWARD_BLOCK:
    shape_of(_line.expr)  # every line is well-shaped


def run(lines, state: dict | None = None, when=frozenset()) -> dict:
    """What a sequence of lines computes, each array in terms of the values on entry: every line
    reads the values the lines before it gave (a state array redefined, ℓ = α ℓ + …, reads its
    value on entry to that line), lines guarded by a flag that is off are skipped."""
    env = dict(state or {})
    for a in lines:
        if a.when is not None and a.when not in when:
            continue
        env[a.target] = sp.sympify(a.expr).xreplace(env)
    return env


def replaced(lines, target: Array, expr, when=None) -> list:
    """The lines with the (first unguarded, or `when`-guarded) definition of `target` replaced."""
    out, done = [], False
    for a in lines:
        if not done and a.target == target and a.when == when:
            out.append(Assign(target, expr, when=when))
            done = True
        else:
            out.append(a)
    assert done, f"no line defines {target} (when={when})"
    return out


def inserted_before(lines, target: Array, line: Assign) -> list:
    """The lines with `line` inserted before the first definition of `target`."""
    at = next(n_ for n_, a in enumerate(lines) if a.target == target)
    return lines[:at] + [line] + lines[at:]


# ------------------------------------------------------------------------------- invariants
def prefix_scores(end, causal: bool):
    """The scores of the keys 0 … end − 1, masked where causal (m×end)."""
    scores = MatMul(q, T(RowBlock(k, 0, end))) / sqrt_dk
    return CausalMask(scores) if causal else scores


def invariant(end, shift, causal: bool) -> tuple:
    """ℓ = Σ_{j<end} e^{S_ij − m_i} and O = Σ_{j<end} e^{S_ij − m_i} V_j: the forward's state
    after the keys 0 … end − 1, shifted by the per-row number m = `shift`."""
    weights = sp.exp(prefix_scores(end, causal) - shift)
    return RowSum(weights), MatMul(weights, RowBlock(v, 0, end))


def split_range(expr, lo, hi, at, setting: Setting) -> tuple:
    """Every one-limit sum over exactly [lo, hi] in `expr`, split at `at` and its upper part
    shifted to start at 0:  Σ_{j=lo}^{hi} f(j) = Σ_{j=lo}^{at−1} f(j) + Σ_{w=0}^{hi−at} f(at + w),
    sums read as loops (an empty range is 0). The side condition lo ≤ at ≤ hi + 1 (the two pieces
    partition the range) is a goal, proved from the setting's ranges and the sizes; unproved, the
    split is refused (ValueError). Returns (expr, the goals proved)."""
    norm = Normaliser(ranges=setting.ranges())
    goals = [(at - lo, f"{sp.sstr(lo)} ≤ {sp.sstr(at)}"), (hi + 1 - at, f"{sp.sstr(at)} ≤ {sp.sstr(hi + 1)}")]
    for g, text in goals:
        if not norm.nonnegative(g):
            raise ValueError(f"range split at {at}: cannot prove {text}")

    def split(s: sp.Sum):
        ((var, a, b),) = s.limits
        shifted = sp.Dummy(var.name, integer=True)
        return sp.Sum(s.function, (var, a, at - 1)) + sp.Sum(
            s.function.xreplace({var: at + shifted}), (shifted, 0, b - at)
        )

    def is_target(e) -> bool:
        return (
            isinstance(e, sp.Sum)
            and len(e.limits) == 1
            and e.limits[0][1] == lo
            and sp.expand(e.limits[0][2] - hi) == 0
        )

    out = expr.replace(is_target, split)
    return out, [f"{t} (the key range [{sp.sstr(lo)}, {sp.sstr(hi)}] split at the block's start)" for _, t in goals]


def _lines_proof(lhs, rhs, setting: Setting, split=None, method="index normaliser (symbolic sizes)") -> Proof:
    """lhs = rhs (lists of identities), the right sides' key ranges split by `split_range` first
    when `split = (lo, hi, at)`; the spot-check is of the unsplit statement."""
    rhs_list = list(rhs) if isinstance(rhs, (list, tuple)) else [rhs]
    lhs_list = list(lhs) if isinstance(lhs, (list, tuple)) else [lhs]
    goals: list = []
    if split is not None:
        pieces = [split_range(r_, *split, setting) for r_ in rhs_list]
        goals = pieces[0][1]
        rhs_split = [p_[0] for p_ in pieces]
        method += "; the key range split at the block's start (split_range)"
    else:
        rhs_split = rhs_list
    proof = prove_index_identity(lhs_list, rhs_split, setting, method)
    if proof.status != "proved-general":
        return proof
    worst = 0.0
    for a, b in zip(lhs_list, rhs_list):
        check = spot_check(a, b, setting)
        if check.get("error") is not None or check["max_relative_gap"] > 1e-25:
            return Proof(
                "unproven",
                method + f" (the unsplit statement's spot-check disagrees: {check})",
                proof.assumptions,
                "0",
                spot_check=check,
            )
        worst = max(worst, check["max_relative_gap"])
    proof.assumptions = goals + [a_ for a_ in proof.assumptions if a_ not in goals]
    proof.spot_check = dict(proof.spot_check, max_relative_gap=worst, identities=len(lhs_list))
    return proof


SOURCE = "FlashAttention (Dao et al. 2022), Algorithms 1 and 2; Milakov & Gimelshein 2018 (online softmax)"


def lines_claim(
    id: str, title: str, latex: str, sides, setting: Setting, mutants: dict, split=None, assumptions=(), source=SOURCE
) -> Claim:
    """A claim lhs = rhs whose lhs is what the loop's lines compute: `sides()` gives (lhs, rhs)
    (built when the claim runs, once), `mutants` {name: (mistake, wrong)} where `wrong()` is the
    lhs of the lines with one classic mistake, which must be refuted."""
    sides = lru_cache(maxsize=None)(sides)

    def prove():
        proof = _lines_proof(*sides(), setting, split)
        proof.assumptions = list(assumptions) + proof.assumptions
        return proof

    return Claim(
        id=id,
        title=title,
        source=source,
        latex=latex,
        prove=prove,
        mutants=[
            Mutant(name, mistake, (lambda wl=wrong: refute_lines(*sides(), wl(), setting)))
            for name, (mistake, wrong) in mutants.items()
        ],
    )


def refute_lines(lhs, rhs, wrong, setting: Setting) -> dict | None:
    """A counterexample to wrong = rhs (core.refute_identity, its normaliser sanity check
    included), searched only among the identities where the mistake changed the lines' value (a
    mask mistake leaves the unmasked identities as they were)."""
    for right, wrong_, rhs_ in zip(lhs, wrong, rhs, strict=True):
        if right != wrong_:
            cx = refute_identity(rhs_, wrong_, setting)
            if cx is not None:
                return cx
    return None


WHEN = {False: frozenset(), True: frozenset({"causal"})}
STEP_SETTING = Setting(
    sizes={m: 4, d_k: 2, d_v: 2, P: 2, B: 2},  # rows 0, 1 before the block,
    indices={i: (0, m - 1), f: (0, d_v - 1)},
)  # 2 in it, 3 after it


def _forward_entries(state_after: dict) -> list:
    return [entry(state_after[ell], (i, 0)), entry(state_after[acc], (i, f))]


def new_max_abstracted(after: dict) -> dict:
    """The state after a block with its new max m' (the closed expression max(m, rowmax S_b)
    the lines computed) read as one per-row array m' wherever it occurs: the identities about
    ℓ and O then hold for every value of m' (what m' is, attention_tiled.max shows)."""
    value = after[mx]
    return {a: e.xreplace({value: mx_new}) for a, e in after.items()}


def _invariant_entries(end, shift, causal: bool) -> list:
    ell_inv, acc_inv = invariant(end, shift, causal)
    return [entry(ell_inv, (i, 0)), entry(acc_inv, (i, f))]


def _at_start(lines, start) -> list:
    """The lines with the block's first key P set to `start`."""
    return [Assign(a.target, sp.sympify(a.expr).xreplace({P: start}), when=a.when, note=a.note) for a in lines]


def _unmasked_and_causal(sides) -> tuple:
    """(lhs, rhs) lists of the identities `sides(causal)` gives, for causal off and on."""
    lhs, rhs = [], []
    for causal in (False, True):
        a, b = sides(causal)
        lhs += a
        rhs += b
    return lhs, rhs


# ------------------------------------------------------------------------------- base case
# From m = −∞, ℓ = 0, O = 0, the first block (P = 0): α = e^{−∞ − m'} = 0 and max(−∞, x) = x,
# so ℓ = rowsum P_b and O = P_b V_b: the invariant over the keys 0 … B − 1, shifted by
# m' = rowmax S_0 (real: key 0 is seen by every query, masked or not).
def first_block_sides(body=FORWARD_BLOCK, init=FORWARD_INIT) -> tuple:
    def sides(causal):
        after = new_max_abstracted(run(_at_start(body, 0), run(init), WHEN[causal]))
        return _forward_entries(after), _invariant_entries(B, mx_new, causal)

    return _unmasked_and_causal(sides)


first_block = lines_claim(
    "attention_tiled.first_block",
    "Base case: the first key block, from (−∞, 0, 0), establishes the invariant",
    r"m = -\infty, \ \ell = 0, \ O = 0 \ \Rightarrow \ \ell'_{i} = \sum_{j < B} e^{S_{ij} - m'_{i}}, \quad "
    r"O'_{if} = \sum_{j < B} e^{S_{ij} - m'_{i}} V_{jf}, \quad m'_{i} = \max\left(-\infty, \max_{j < B} S_{ij}\right) "
    r"\quad \text{(unmasked, and causal: } S = \operatorname{mask}(S)\text{)}",
    first_block_sides,
    STEP_SETTING,
    mutants={
        "no-scale": (
            "the 1/√d_k dropped from the block's scores",
            lambda: first_block_sides(replaced(FORWARD_BLOCK, s_blk, MatMul(q, T(K_BLK))))[0],
        ),
        "mask-excludes-diagonal": (
            "the causal mask hides key i from query i (P + w < i)",
            lambda: first_block_sides(replaced(FORWARD_BLOCK, s_blk, BlockCausalMask(s_blk, P + 1), when="causal"))[0],
        ),
        "init-max-zero-ell-one": (
            "the running state started at m = 0, ℓ = 1 (not −∞, 0): the start is rescaled into the sum",
            lambda: first_block_sides(
                init=[Assign(mx, sp.Integer(0)), Assign(ell, sp.Integer(1)), Assign(acc, sp.Integer(0))]
            )[0],
        ),
    },
    assumptions=["e^{−∞ − m'} = 0 and max(−∞, x) = x by evaluation, m' real (key 0 is seen by every query)"],
)


# ------------------------------------------------------------------------------- the step
# ℓ = Σ_{j<P} e^{S_ij − m} and O = Σ_{j<P} e^{S_ij − m} V_j on entry (m any real per-row number):
#   α ℓ + rowsum P_b = e^{m − m'} Σ_{j<P} e^{S_ij − m} + Σ_{w<B} e^{S_i,P+w − m'} = Σ_{j<P+B} e^{S_ij − m'}
# and the same with V_j; the right side's range split at P (split_range).
def step_sides(body=FORWARD_BLOCK) -> tuple:
    def sides(causal):
        ell_in, acc_in = invariant(P, mx, causal)
        after = new_max_abstracted(run(body, {ell: ell_in, acc: acc_in}, WHEN[causal]))
        return _forward_entries(after), _invariant_entries(P + B, mx_new, causal)

    return _unmasked_and_causal(sides)


KEY_SPLIT = (sp.Integer(0), P + B - 1, P)  # the keys 0 … P+B−1 split at the block's start P
step = lines_claim(
    "attention_tiled.step",
    "Induction step: one key block keeps the online-softmax invariant",
    r"\ell_{i} = \sum_{j < P} e^{S_{ij} - m_{i}}, \ O_{if} = \sum_{j < P} e^{S_{ij} - m_{i}} V_{jf} \ \Rightarrow \ "
    r"e^{m_{i} - m'_{i}} \ell_{i} + \sum_{w < B} e^{S_{i,P+w} - m'_{i}} = \sum_{j < P + B} e^{S_{ij} - m'_{i}}, \quad "
    r"e^{m_{i} - m'_{i}} O_{if} + \sum_{w < B} e^{S_{i,P+w} - m'_{i}} V_{P+w,f} = \sum_{j < P + B} e^{S_{ij} - m'_{i}} V_{jf} "
    r"\quad \text{(any } P \geq 0, B \geq 1, m, m'\text{; unmasked and causal)}",
    step_sides,
    STEP_SETTING,
    split=KEY_SPLIT,
    mutants={
        "no-rescale": (
            "the partial sums not rescaled by e^{m − m'} when the block arrives",
            lambda: step_sides(
                replaced(replaced(FORWARD_BLOCK, ell, ell + RowSum(p_blk)), acc, acc + MatMul(p_blk, V_BLK))
            )[0],
        ),
        "rescale-sign": (
            "the rescale with the wrong sign, e^{m' − m}",
            lambda: step_sides(replaced(FORWARD_BLOCK, alpha, sp.exp(mx_new - mx)))[0],
        ),
        "block-old-max": (
            "the block's weights shifted by the old max, e^{S_b − m}",
            lambda: step_sides(replaced(FORWARD_BLOCK, p_blk, sp.exp(s_blk - mx)))[0],
        ),
        "no-scale": (
            "the 1/√d_k dropped from the block's scores",
            lambda: step_sides(replaced(FORWARD_BLOCK, s_blk, MatMul(q, T(K_BLK))))[0],
        ),
        "keys-not-offset": (
            "the block's keys read from row 0 (the block's start forgotten)",
            lambda: step_sides(replaced(FORWARD_BLOCK, s_blk, MatMul(q, T(RowBlock(k, 0, B))) / sqrt_dk))[0],
        ),
        "mask-not-offset": (
            "the causal mask of the block's own index w ≤ i, not P + w ≤ i",
            lambda: step_sides(replaced(FORWARD_BLOCK, s_blk, BlockCausalMask(s_blk, 0), when="causal"))[0],
        ),
    },
    assumptions=["P + B ≤ n (the block lies in the sequence)", "m, m' real"],
)


# ------------------------------------------------------------------------------- the running max
MAX_LINE = next(a for a in FORWARD_BLOCK if a.target == mx_new)


def _max_union() -> Proof:
    """The printed m' = max(m, rowmax S_b), with m = max_{j<P} S_ij and rowmax S_b = max_{w<B}
    S_{i,P+w}, is max_{j<P+B} S_ij: an upper bound of every score of the first P + B keys and one
    of them; e^{m − m'} ≤ 1 and e^{S_ij − m'} ≤ 1. Per row, for real scores (a masked −∞ is below
    every bound and never the only candidate: key 0 is seen in the first block). The maximum of a
    finite non-empty set is defined by those two properties (it is unique). Case split on the
    sign of m − rowmax S_b; in each branch the scores are written with non-negative slacks below
    their block's max (S_j = m − p_j, S_{P+w} = rowmax S_b − q_w, p, q ≥ 0) and SymPy's
    assumptions decide every inequality; the base max(−∞, x) = x by evaluation."""
    a, b = sp.Symbol("m_prefix", real=True), sp.Symbol("m_block", real=True)
    new = MAX_LINE.expr.xreplace({mx: a, RowMax(s_blk): b})
    if new.free_symbols != {a, b}:
        return Proof("unproven", f"the running max line is not a function of m and rowmax S_b: {new}")
    t, p_, q_ = (sp.Dummy(x, nonnegative=True) for x in ("t", "p", "q"))
    done = []
    for where, sub in (("m ≥ rowmax S_b", {a: b + t}), ("rowmax S_b ≥ m", {b: a + t})):
        value = new.xreplace(sub)
        am, bm = a.xreplace(sub), b.xreplace(sub)
        if value.has(sp.Max, sp.Min):
            return Proof("unproven", f"{where}: max not decided: {value}")
        checks = {
            "bounds the first P keys": (value - (am - p_)).is_nonnegative,  # S_j = m − p_j
            "bounds the block's keys": (value - (bm - q_)).is_nonnegative,  # S_{P+w} = rowmax − q_w
            "is attained": value == am or value == bm,  # at j_m or at P + w_b
            "rescale e^{m − m'} ≤ 1": (am - value).is_nonpositive,
        }
        failed = [c for c, ok in checks.items() if ok is not True]
        if failed:
            return Proof("unproven", f"{where}: not proved: {failed}")
        done.append(where)
    if MAX_LINE.expr.xreplace({mx: -sp.oo, RowMax(s_blk): b}) != b:
        return Proof("unproven", "base: max(−∞, rowmax S_0) is not rowmax S_0")
    if MAX_LINE.expr.xreplace({mx: a, RowMax(s_blk): -sp.oo}) != a:  # a block masked for the row
        return Proof("unproven", "max(m, −∞) is not m")
    norm = Normaliser(ranges={})
    if not (norm.nonnegative(P) and norm.nonnegative(B)):
        return Proof("unproven", "the prefix and the block do not partition the keys 0 … P + B − 1")
    cx = _refute_max(MAX_LINE.expr, tries=20)
    if cx is not None:
        return Proof("unproven", "case split done but the numbers disagree: " + str(cx), counterexample=cx)
    return Proof(
        "proved-general",
        "case split on the sign of m − rowmax S_b (" + ", ".join(done) + "), inequalities decided by "
        "SymPy's assumptions on non-negative slacks; base max(−∞, x) = x and a block masked for the "
        "row, max(m, −∞) = m, by evaluation",
        [
            "the keys 0 … P+B−1 are the prefix 0 … P−1 and the block P + w, 0 ≤ w ≤ B−1 (0 ≤ P, 0 ≤ B)",
            "max of a finite non-empty set: the upper bound that is one of its elements",
            "real scores (a masked −∞ is below every bound; key 0, seen by every query, makes m real)",
        ],
        spot_check={"points": 20, "max_relative_gap": 0.0, "sizes": {"P": 2, "B": 3}},
    )


def _refute_max(line_expr, tries: int = 12) -> dict | None:
    """Random score rows (P = 2 prefix keys, B = 3 block keys, small rationals): is the line's
    value, from m = max(prefix) and rowmax S_b = max(block), the max of all five?"""
    for seed in range(tries):
        rng = random.Random(seed)
        scores = [sp.Rational(rng.randint(-16, 16), 8) for _ in range(5)]
        prefix, block = scores[:2], scores[2:]
        got = line_expr.xreplace({mx: max(prefix), RowMax(s_blk): max(block)})
        if got != max(scores):
            return {
                "at": {"prefix": [str(x) for x in prefix], "block": [str(x) for x in block]},
                "seed": seed,
                "lhs": str(got),
                "rhs": str(max(scores)),
            }
    return None


running_max = Claim(
    id="attention_tiled.max",
    title="The running max is the max over every key seen so far",
    source="FlashAttention (Dao et al. 2022), Algorithm 1; Milakov & Gimelshein 2018",
    latex=r"m'_{i} = \max\left(m_{i}, \max_{w < B} S_{i,P+w}\right) = \max_{j < P + B} S_{ij} \ \text{when} \ "
    r"m_{i} = \max_{j < P} S_{ij}, \quad e^{m_{i} - m'_{i}} \leq 1, \quad e^{S_{ij} - m'_{i}} \leq 1 \ (j < P + B)",
    prove=_max_union,
    mutants=[
        Mutant(name, mistake, (lambda e=expr: _refute_max(e)))
        for name, mistake, expr in (
            ("block-max-only", "m' = rowmax S_b (the keys before the block forgotten)", RowMax(s_blk)),
            ("not-updated", "m' = m (the running max never updated)", mx),
            ("min", "m' = min(m, rowmax S_b)", sp.Min(mx, RowMax(s_blk))),
        )
    ],
)


# ------------------------------------------------------------------------------- the conclusion
# After the last block (b_K = n) the invariant holds over every key: ℓ = Σ_j e^{S_ij − m},
# O = Σ_j e^{S_ij − m} V_j, for the final m (any real per-row number here; the max by
# attention_tiled.max). FORWARD_END then gives attention_lse's output and cache.
r_ = sp.Symbol("r", integer=True, nonnegative=True)  # j = i + 1 + r: a key after query i
u_ = sp.Symbol("u", integer=True, nonnegative=True)  # i = n + u: a query past the last key
END_SETTING = Setting(sizes={m: 3, n: 3, d_k: 2, d_v: 2}, indices={i: (0, m - 1), f: (0, d_v - 1)})
CAUSAL_END_SETTING = Setting(
    sizes={m: 3, n: 3, d_k: 2, d_v: 2}, indices={i: (0, m - 1), f: (0, d_v - 1)}, domain={i: (0, n - 1)}
)  # every query with its causal range split
PAST_SETTING = Setting(
    sizes={m: 4, n: 2, d_k: 2, d_v: 2}, indices={f: (0, d_v - 1)}, scalars={u_: 0}, domain={u_: (0, m - 1 - n)}
)  # m > n: queries past the last key
LSE_FORWARD = {False: run(ATTENTION_LSE.forward), True: run(ATTENTION_LSE.forward, when=WHEN[True])}


def end_state(causal: bool, end_lines=FORWARD_END, shift=mx) -> dict:
    """FORWARD_END run on the invariant over all n keys, shifted by the final m = `shift`."""
    ell_n, acc_n = invariant(n, shift, causal)
    state = {ell: ell_n, acc: acc_n}
    if shift != mx:
        state[mx] = shift
    return run(end_lines, state)


def _parts(parts, method: str, assumptions=()) -> Proof:
    """A proof of several identities (label, lhs, rhs, setting), each through the proof gate."""
    out = list(assumptions)
    worst = 0.0
    for label, lhs, rhs, setting in parts:
        proof = prove_index_identity(lhs, rhs, setting)
        if proof.status != "proved-general":
            return Proof(
                proof.status,
                f"{label}: {proof.method}",
                out + proof.assumptions,
                proof.residual,
                counterexample=proof.counterexample,
            )
        out += [a for a in proof.assumptions if a not in out]
        worst = max(worst, proof.spot_check["max_relative_gap"])
    return Proof(
        "proved-general",
        method,
        out,
        "0",
        spot_check={"points": 2 * len(parts), "max_relative_gap": worst, "identities": len(parts)},
    )


def _refute_parts(parts) -> dict | None:
    for label, lhs, wrong, setting in parts:
        cx = refute_identity(lhs, wrong, setting)
        if cx is not None:
            return dict(cx, part=label)
    return None


def output_parts(end_lines=FORWARD_END) -> list:
    """O/ℓ after the last block against attention_lse's forward output: unmasked; causal for the
    queries 0 … n−1 (range split at i) and for a query n + u past the last key (m > n)."""

    def o_of(causal, row):
        return entry(o, (row, f), end_state(causal, end_lines))

    return [
        ("unmasked", o_of(False, i), entry(o, (i, f), LSE_FORWARD[False]), END_SETTING),
        ("causal", o_of(True, i), entry(o, (i, f), LSE_FORWARD[True]), CAUSAL_END_SETTING),
        ("causal, past the last key", o_of(True, n + u_), entry(o, (n + u_, f), LSE_FORWARD[True]), PAST_SETTING),
    ]


def lse_parts(end_lines=FORWARD_END) -> list:
    """mx + lsum after the last block against attention_lse's: for any final m (the sum), and with
    m = rowmax S (attention_tiled.max) lsum itself."""

    def lse_of(causal, row, shift=mx):
        return entry(mx + lsum, (row, 0), end_state(causal, end_lines, shift))

    return [
        ("lse, unmasked", lse_of(False, i), entry(mx + lsum, (i, 0), LSE_FORWARD[False]), END_SETTING),
        ("lse, causal", lse_of(True, i), entry(mx + lsum, (i, 0), LSE_FORWARD[True]), CAUSAL_END_SETTING),
        (
            "lse, causal, past the last key",
            lse_of(True, n + u_),
            entry(mx + lsum, (n + u_, 0), LSE_FORWARD[True]),
            PAST_SETTING,
        ),
        (
            "lsum with m = rowmax S",
            entry(lsum, (i, 0), end_state(False, end_lines, LSE_FORWARD[False][mx])),
            entry(lsum, (i, 0), LSE_FORWARD[False]),
            END_SETTING,
        ),
    ]


def _wrong(parts_of, end_lines) -> list:
    return [
        (label, rhs, wrong, setting)
        for (label, _, rhs, setting), (_, wrong, _, _) in zip(parts_of(), parts_of(end_lines))
    ]


output = Claim(
    id="attention_tiled.output",
    title="After the last block, O/ℓ is softmax(S) V (attention_lse's output)",
    source="FlashAttention (Dao et al. 2022), Algorithm 1",
    latex=r"\frac{O_{if}}{\ell_{i}} = \frac{\sum_{j < n} e^{S_{ij} - m_{i}} V_{jf}}{\sum_{j < n} e^{S_{ij} - m_{i}}} = "
    r"\left(\mathrm{softmax}(S) V\right)_{if} \quad \text{(any } m\text{; unmasked and causal, any } m \times n\text{)}",
    prove=lambda: _parts(
        output_parts(),
        "index normaliser (symbolic sizes), causal range split at i and the mask's "
        "whole-range case for a query past the last key",
        [
            "the invariant over the keys 0 … n−1: attention_tiled.first_block, then "
            "attention_tiled.step block by block (composed for any K blocks, b_K = n, by attention_tiled.induction)"
        ],
    ),
    mutants=[
        Mutant(name, mistake, (lambda lines=lines: _refute_parts(_wrong(output_parts, lines))))
        for name, mistake, lines in (
            ("no-normaliser", "O returned without dividing by ℓ", replaced(FORWARD_END, o, acc)),
            (
                "divided-by-exp-lse",
                "O divided by e^{m} ℓ (the unshifted sum) instead of ℓ",
                replaced(FORWARD_END, o, acc / (sp.exp(mx) * ell)),
            ),
        )
    ],
)

lse = Claim(
    id="attention_tiled.lse",
    title="After the last block, m + log ℓ is the untiled log-sum-exp",
    source="FlashAttention (Dao et al. 2022), Algorithms 1 and 2",
    latex=r"m_{i} + \log \ell_{i} = m_{i} + \log \sum_{j < n} e^{S_{ij} - m_{i}} = \log \sum_{j < n} e^{S_{ij}} = "
    r"\mu_{i} + \lambda_{i}, \quad \log \ell_{i} = \lambda_{i} \ \text{when} \ m_{i} = \mu_{i} = \max_{j} S_{ij}",
    prove=lambda: _parts(
        lse_parts(),
        "index normaliser (symbolic sizes): logarithms of positive sums, causal range split at i",
        [
            "the invariant over the keys 0 … n−1 (any K blocks, b_K = n: attention_tiled.induction)",
            "μ, λ: attention_lse's saved mx and lsum (its forward); m = μ by attention_tiled.max",
        ],
    ),
    mutants=[
        Mutant(name, mistake, (lambda lines=lines: _refute_parts(_wrong(lse_parts, lines))))
        for name, mistake, lines in (
            (
                "max-not-added",
                "lsum = log ℓ saved as the whole log-sum-exp (the max counted twice when mx is added back)",
                replaced(FORWARD_END, lsum, mx + sp.log(ell)),
            ),
            ("log-sign", "lsum = −log ℓ", replaced(FORWARD_END, lsum, -sp.log(ell))),
        )
    ],
)


# ------------------------------------------------------------------------------- causal: skipping
# A block whose first key is P = i + 1 + r (r ≥ 0) lies wholly after query i: every masked
# score S_{i,P+w} = −∞ (w ≥ 0), so rowmax S_b = −∞ (the max of a row of −∞), m' = max(m, −∞) = m,
# α = e^0 = 1, P_b = e^{−∞} = 0: ℓ, O (and in the backward P_b, dS_b, so dQ's row i, and row i's
# terms of dV_b and dK_b) are unchanged. A query tile [Q_0, Q_1) with P ≥ Q_1 is such a block
# for each of its rows, so the kernel skips the tile.
AFTER_QUERY = i + 1 + r_
SKIP_SETTING = Setting(sizes={m: 4, B: 2, d_k: 2, d_v: 2}, indices={i: (0, 1), f: (0, d_v - 1)}, scalars={r_: 0})


def _block_keys_nonnegative(expr):
    """Each sum over a block's keys (from 0) with its index declared ≥ 0, which it is in the loop."""

    def rename(s):
        ((var, lo, hi),) = s.limits
        fresh = sp.Dummy(var.name, integer=True, nonnegative=True)
        return sp.Sum(s.function.xreplace({var: fresh}), (fresh, lo, hi))

    return expr.replace(lambda e: isinstance(e, sp.Sum) and len(e.limits) == 1 and e.limits[0][1] == 0, rename)


def _block_max_is_minus_infinity(expr):
    """rowmax S_b (the opaque per-row max_…[i]) of a row of −∞ is −∞."""
    maxes = {a for a in expr.atoms(sp.Indexed) if str(a.base.label).startswith("max_")}
    return expr.xreplace({a: -sp.oo for a in maxes}), len(maxes)


def skip_sides(forward=FORWARD_BLOCK, backward=BACKWARD_BLOCK, start=AFTER_QUERY) -> list:
    """(label, what the block leaves, what it must leave) for row i, the block's start `start`."""
    fwd = run(_at_start(forward, start), {}, WHEN[True])
    bwd = run(_at_start(backward, start), {delta: RowSum(do * o)}, WHEN[True])
    w_ = sp.Dummy("w", integer=True, nonnegative=True)
    sides = [("masked score S_{i,P+w}", entry(fwd[s_blk], (i, w_)), -sp.oo)]
    for label, expr, unchanged in (("m'", fwd[mx], mx), ("ℓ'", fwd[ell], ell), ("O'", fwd[acc], acc)):
        sides.append((label, entry(expr, (i, f)), entry(unchanged, (i, f))))
    sides += [
        ("P_b[i, w]", entry(bwd[p_blk], (i, w_)), sp.Integer(0)),
        ("dS_b[i, w]", entry(bwd[ds_blk], (i, w_)), sp.Integer(0)),
        ("dQ' − dQ (row i)", entry(bwd[dq] - dq, (i, f)), sp.Integer(0)),
    ]
    return sides


def _causal_skip() -> Proof:
    """Each side evaluated by SymPy: the block's sums with their index ≥ 0, the condition
    P + w ≤ i false for P = i + 1 + r, e^{−∞} = 0, max(m, −∞) = m, Σ 0 = 0."""
    for label, got, want in skip_sides():
        value, count = _block_max_is_minus_infinity(_block_keys_nonnegative(got))
        value = value.doit() if value.has(sp.Sum) else value
        if value != want:
            return Proof("unproven", f"{label} did not evaluate to {want}: {value}", [], sp.sstr(value))
    return Proof(
        "proved-general",
        "evaluation: P + w ≤ i is false for P = i + 1 + r, w ≥ 0; e^{−∞} = 0; max(m, −∞) = m; a sum of zeros is 0",
        [
            "0 ≤ r: the block's first key P = i + 1 + r comes after query i",
            "rowmax of a row of −∞ is −∞ (its only element); m real",
            "δ = rowsum(dO ⊙ O) (BACKWARD_INIT)",
        ],
    )


def _refute_skip(forward=FORWARD_BLOCK, backward=BACKWARD_BLOCK, start=AFTER_QUERY) -> dict | None:
    """A numeric counterexample to "the block changes nothing for row i" (rowmax S_b evaluated
    as any per-row number, as everywhere in index form)."""
    for label, got, want in skip_sides(forward, backward, start)[1:]:
        got = got.xreplace({d: sp.Dummy(d.name, integer=True) for d in got.atoms(sp.Dummy) if d.is_nonnegative})
        cx = counterexample(got, want, SKIP_SETTING)
        if cx is not None:
            return dict(cx, part=label)
    return None


causal_skip = Claim(
    id="attention_tiled.causal_skip",
    title="Causal: a key block after the query changes nothing (it may be skipped)",
    source="FlashAttention (Dao et al. 2022), causal block skipping; seed B §5",
    latex=r"P \geq i + 1: \ S_{i,P+w} = -\infty, \ m'_{i} = \max(m_{i}, -\infty) = m_{i}, \ \ell'_{i} = \ell_{i}, \ "
    r"O'_{if} = O_{if}, \ (P_{b})_{iw} = 0, \ (\partial S_{b})_{iw} = 0, \ \partial Q'_{if} = \partial Q_{if}",
    prove=_causal_skip,
    mutants=[
        Mutant(
            "mask-not-offset",
            "the block's mask tests its own index w ≤ i, not P + w ≤ i",
            lambda: _refute_skip(
                replaced(FORWARD_BLOCK, s_blk, BlockCausalMask(s_blk, 0), when="causal"),
                replaced(BACKWARD_BLOCK, s_blk, BlockCausalMask(s_blk, 0), when="causal"),
            ),
        ),
        Mutant(
            "diagonal-block-skipped",
            "a block skipped when its first key P ≤ i (the block holding key i)",
            lambda: _refute_skip(start=i - r_),
        ),
    ],
)


# ------------------------------------------------------------------------------- the backward
# attention_lse's backward from its cache (q, k, v, o, mx, lsum) and dO, the cache left free: the
# tiled backward is compared with it for *any* cache, and attention_lse.backward.* prove that it
# is the derivative of attention_lse's forward, whose cache attention_tiled.output and .lse show
# the tiled forward computes (mx = m by attention_tiled.max).
#
# δ = rowsum(dO ⊙ O) is the same expression on both sides (BACKWARD_INIT's line is attention's),
# a function of the cache alone: both sides read it as one per-row array δ, so each identity
# holds for every δ (a mutant that computes δ in the block differs from it and is refuted).
DELTA = RowSum(do * o)
UNTILED = {
    c: {a: e.xreplace({DELTA: delta}) for a, e in run(ATTENTION_LSE.backward, when=WHEN[c]).items() if a != delta}
    for c in (False, True)
}
lse_ds, lse_dq, lse_dk, lse_dv = (grad_of(a) for a in (ATTENTION_LSE.forward[0].target, q, k, v))
BLOCK_SETTING = Setting(sizes={m: 4, d_k: 2, d_v: 2, P: 2, B: 2}, indices={w: (0, B - 1), f: (0, d_v - 1)})
BLOCK_SETTING_K = Setting(sizes=BLOCK_SETTING.sizes, indices={w: (0, B - 1), f: (0, d_k - 1)})
DELTA_ASSUMPTION = (
    "δ = rowsum(dO ⊙ O): BACKWARD_INIT's line is attention_lse's, both sides read it as one per-row array"
)


def backward_block(body=BACKWARD_BLOCK, init=BACKWARD_INIT, causal=False, state=None) -> dict:
    """One block of the backward, after `init` (dQ = `state`'s, else init's 0); δ kept as the
    array δ where `init` computes attention's rowsum(dO ⊙ O)."""
    env = run(init)
    if env.get(delta) == DELTA:
        del env[delta]
    return run(body, {**env, **(state or {})}, WHEN[causal])


def rows_sides(grad: Array, block_grad: Array, body=BACKWARD_BLOCK, init=BACKWARD_INIT) -> tuple:
    """Row w of the block's dV_b (dK_b) against row P + w of attention_lse's dV (dK)."""

    def sides(causal):
        return (
            [entry(backward_block(body, init, causal)[block_grad], (w, f))],
            [entry(UNTILED[causal][grad], (P + w, f))],
        )

    return _unmasked_and_causal(sides)


dV_block = lines_claim(
    "attention_tiled.dV_block",
    "dV, block by block: P_bᵀ dO is rows P … P+B−1 of attention_lse's dV",
    r"\left(P_{b}^{T} \frac{\partial \mathcal{L}}{\partial O}\right)_{wf} = \left(\frac{\partial \mathcal{L}}{\partial V}"
    r"\right)_{P+w,f}, \quad (P_{b})_{iw} = e^{\left(S_{i,P+w} - \mu_{i}\right) - \lambda_{i}} \quad "
    r"\text{(any cache; unmasked and causal)}",
    lambda: rows_sides(lse_dv, dv_blk),
    BLOCK_SETTING,
    mutants={
        "recompute-no-max": (
            "the block's weights recomputed as e^{S_b − lsum} (max not subtracted)",
            lambda: rows_sides(lse_dv, dv_blk, replaced(BACKWARD_BLOCK, sm_blk, s_blk))[0],
        ),
        "keys-not-offset": (
            "the block's keys read from row 0",
            lambda: rows_sides(
                lse_dv, dv_blk, replaced(BACKWARD_BLOCK, s_blk, MatMul(q, T(RowBlock(k, 0, B))) / sqrt_dk)
            )[0],
        ),
        "mask-not-offset": (
            "the causal mask of the block's own index w ≤ i",
            lambda: rows_sides(
                lse_dv, dv_blk, replaced(BACKWARD_BLOCK, s_blk, BlockCausalMask(s_blk, 0), when="causal")
            )[0],
        ),
    },
    assumptions=["P + B ≤ n (the block lies in the sequence), 0 ≤ w ≤ B − 1"],
    source="FlashAttention (Dao et al. 2022), Algorithm 2",
)

DELTA_FROM_BLOCK = inserted_before(BACKWARD_BLOCK, ds_blk, Assign(delta, RowSum(dp_blk * p_blk)))
dK_block = lines_claim(
    "attention_tiled.dK_block",
    "dK, block by block: dS_bᵀ Q/√d_k is rows P … P+B−1 of attention_lse's dK",
    r"\frac{1}{\sqrt{d_{k}}} \left(\partial S_{b}^{T} Q\right)_{wf} = \left(\frac{\partial \mathcal{L}}{\partial K}\right)_{P+w,f}, "
    r"\quad \partial S_{b} = P_{b} \odot \left(\frac{\partial \mathcal{L}}{\partial O} V_{b}^{T} - \delta \mathbf{1}^{T}\right), "
    r"\quad \delta = \mathrm{rowsum}\left(\frac{\partial \mathcal{L}}{\partial O} \odot O\right)",
    lambda: rows_sides(lse_dk, dk_blk),
    BLOCK_SETTING_K,
    mutants={
        "delta-from-block": (
            "δ from the block, rowsum(dP_b ⊙ P_b), instead of the full row's rowsum(dO ⊙ O)",
            lambda: rows_sides(lse_dk, dk_blk, DELTA_FROM_BLOCK)[0],
        ),
        "no-scale": (
            "the 1/√d_k dropped from dK_b",
            lambda: rows_sides(lse_dk, dk_blk, replaced(BACKWARD_BLOCK, dk_blk, MatMul(T(ds_blk), q)))[0],
        ),
        "values-not-offset": (
            "dP_b = dO V_bᵀ with the values read from row 0",
            lambda: rows_sides(lse_dk, dk_blk, replaced(BACKWARD_BLOCK, dp_blk, MatMul(do, T(RowBlock(v, 0, B)))))[0],
        ),
        "no-rowsum": (
            "dS_b = P_b ⊙ dP_b (the δ term dropped)",
            lambda: rows_sides(lse_dk, dk_blk, replaced(BACKWARD_BLOCK, ds_blk, p_blk * dp_blk))[0],
        ),
    },
    assumptions=["P + B ≤ n (the block lies in the sequence), 0 ≤ w ≤ B − 1", DELTA_ASSUMPTION],
    source="FlashAttention (Dao et al. 2022), Algorithm 2",
)


# dQ accumulated: the invariant dQ = Σ_{j<P} dS_ij K_j / √d_k (dS attention_lse's, all n keys' δ):
# base dQ = 0 = the empty sum (P = 0), step P → P + B (range split at P), end P = n.
def dq_invariant(end, causal: bool):
    """Σ_{j<end} dS_ij K_j / √d_k, dS attention_lse's (its columns 0 … end − 1)."""
    return MatMul(T(RowBlock(T(UNTILED[causal][lse_ds]), 0, end)), RowBlock(k, 0, end)) / sqrt_dk


DQ_SETTING = Setting(sizes={m: 4, d_k: 2, d_v: 2, P: 2, B: 2}, indices={i: (0, m - 1), f: (0, d_k - 1)})
DQ_END_SETTING = Setting(sizes={m: 3, n: 3, d_k: 2, d_v: 2}, indices={i: (0, m - 1), f: (0, d_k - 1)})


def dq_step_sides(body=BACKWARD_BLOCK, init=BACKWARD_INIT) -> tuple:
    """dQ after a block, from the invariant over the keys before it, against the invariant over
    the keys before P + B (unmasked, causal)."""

    def sides(causal):
        after = backward_block(body, init, causal, {dq: dq_invariant(P, causal)})
        return [entry(after[dq], (i, f))], [entry(dq_invariant(P + B, causal), (i, f))]

    return _unmasked_and_causal(sides)


@cache
def _dq_sides() -> tuple:
    return dq_step_sides()


def _dq_proof() -> Proof:
    out = ["P + B ≤ n (each block lies in the sequence)", DELTA_ASSUMPTION]
    for causal in (False, True):
        # base: dQ = 0 (BACKWARD_INIT) and the invariant at P = 0 is a sum over 0 … −1: both 0
        base, empty = run(BACKWARD_INIT)[dq], sp.sympify(entry(dq_invariant(0, causal), (i, f))).doit()
        if base != 0 or empty != 0:
            return Proof("unproven", f"base: dQ = {base}, the invariant at P = 0 is {empty}")
    parts = [("step", *_dq_sides(), DQ_SETTING, KEY_SPLIT)]
    parts += [
        (
            f"end, {'causal' if c else 'unmasked'}",
            [entry(dq_invariant(n, c), (i, f))],
            [entry(UNTILED[c][lse_dq], (i, f))],
            DQ_END_SETTING,
            None,
        )
        for c in (False, True)
    ]
    worst = 0.0
    for label, lhs, rhs, setting, split in parts:
        proof = _lines_proof(lhs, rhs, setting, split)
        if proof.status != "proved-general":
            return Proof(
                proof.status,
                f"{label}: {proof.method}",
                proof.assumptions,
                proof.residual,
                counterexample=proof.counterexample,
            )
        out += [a_ for a_ in proof.assumptions if a_ not in out]
        worst = max(worst, proof.spot_check["max_relative_gap"])
    return Proof(
        "proved-general",
        "induction over key blocks: base by evaluation (dQ = 0, the empty sum), step by "
        "the index normaliser with the key range split at the block's start, end (P = n) by the normaliser",
        out,
        "0",
        spot_check={"points": 8, "max_relative_gap": worst, "identities": 4},
    )


dQ = Claim(
    id="attention_tiled.dQ",
    title="dQ accumulated block by block is attention_lse's dQ",
    source="FlashAttention (Dao et al. 2022), Algorithm 2",
    latex=r"\partial Q = 0, \quad \partial Q \mathrel{+}= \frac{1}{\sqrt{d_{k}}} \partial S_{b} K_{b} \ \text{per block} \ "
    r"\Rightarrow \ \partial Q_{if} = \frac{1}{\sqrt{d_{k}}} \sum_{j < n} \partial S_{ij} K_{jf} = "
    r"\left(\frac{\partial \mathcal{L}}{\partial Q}\right)_{if} \quad \text{(any cache; unmasked and causal)}",
    prove=_dq_proof,
    mutants=[
        Mutant(name, mistake, (lambda b=body: refute_lines(*_dq_sides(), dq_step_sides(b)[0], DQ_SETTING)))
        for name, mistake, body in (
            (
                "delta-from-block",
                "δ from the block, rowsum(dP_b ⊙ P_b), instead of the full row's rowsum(dO ⊙ O)",
                DELTA_FROM_BLOCK,
            ),
            (
                "no-scale",
                "the 1/√d_k dropped from the block's dQ term",
                replaced(BACKWARD_BLOCK, dq, dq + MatMul(ds_blk, K_BLK)),
            ),
            (
                "overwritten",
                "dQ = dS_b K_b/√d_k: overwritten by each block instead of accumulated",
                replaced(BACKWARD_BLOCK, dq, MatMul(ds_blk, K_BLK) / sqrt_dk),
            ),
            (
                "keys-not-offset",
                "the block's dQ term with the keys read from row 0",
                replaced(BACKWARD_BLOCK, dq, dq + MatMul(ds_blk, RowBlock(k, 0, B)) / sqrt_dk),
            ),
        )
    ],
)

CLAIMS: list[Claim] = [first_block, step, running_max, output, lse, causal_skip, dV_block, dK_block, dQ]


# ------------------------------------------------------------------------------- printed
# The loops printed as generated/<backend>/attention_tiled.py (codegen/contexts/loops.py prints
# every line above into codegen/templates/<backend>_attention_tiled.py.j2, which lays out the
# loop): the same arguments, checks and cache as attention_lse, whose generated claims prove the
# untiled forward and backward; the claims below prove the tiled ones equal to them.
from .language.latex import assigns_latex as _assigns_latex  # noqa: E402
from .language.ops import Composite  # noqa: E402

BLOCK = 128  # keys per block, the default: the largest temporary is m × 128
ATTENTION_TILED = Composite(
    name="attention_tiled",
    module=__name__,
    title="Scaled dot-product attention over key blocks (online softmax: memory linear in T)",
    latex=_assigns_latex([a for a in FORWARD_BLOCK if a.when is None]),
    claims=[c.id for c in CLAIMS]
    + [
        "attention_tiled.induction",
        "attention_tiled.unrolled",
        "attention_lse.forward",
        "attention_lse.backward.dq",
        "attention_lse.backward.dk",
        "attention_lse.backward.dv",
    ],
    kernels=["attention_lse"],
    template="attention_tiled",
    loops=((TILED_FORWARD, m, BLOCK), (TILED_BACKWARD, m, BLOCK)),
)
COMPOSITES = [ATTENTION_TILED]
