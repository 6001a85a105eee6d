"""Attention that keeps no m×n matrix between forward and backward: recompute from the log-sum-exp.

The standard op (`derivations/attention.py`) saves A = softmax(S), an m×n matrix per batch and
head, from the forward to the backward: at T = 1024 that is the largest thing a GPT keeps. This
op saves instead two numbers per row, FlashAttention's log-sum-exp in two parts, the row max
and the log-sum of the shifted scores,

    mx_i = max_k S_ik,    lsum_i = log Σ_p exp(S_ip − mx_i)     (lse_i = mx_i + lsum_i),

and the backward rebuilds the weights from the scores (Q Kᵀ/√d_k, recomputed, one matmul):

    A_ij = exp((S_ij − mx_i) − lsum_i).

The two parts are kept apart for accuracy: lse_i rounded to one number has an absolute error of
|mx_i|·ε, which is O(1) once |S| ≳ 1/ε (2^24 in float32), and exp(S − lse) would then lose the
normalisation (rows of A no longer summing to 1). S − mx is as accurate as S, and lsum ∈
[0, log n]. That identity is the claim `attention_lse.recompute` (for symbolic n, with the
index normaliser; the row max is an arbitrary per-row number there, so it holds for whatever
shift the code subtracts). The rest of the backward is the standard one (dV, dA, dS with rowsum(dO ⊙ O), dQ,
dK); `attention_lse.dQ`, `.dK`, `.dV` differentiate the loss through the *forward* as computed
and compare with the backward as printed, recomputation included. `attention_lse.output` shows
the forward computes the same O as the standard op, and `attention_lse.causal` that the
recomputed weights of masked positions are exactly 0 and the rest equal the masked softmax.
"""

from __future__ import annotations

import sympy as sp

from .attention import (
    BACKWARD_FROM_WEIGHTS,
    CAUSAL,
    QUOTES,
    causal_parts,
    later,
    past,
    past_setting,
    refute_causal,
    score_overflow,
)
from .language.arrays import Array, Assign, CausalMask, MatMul, RowMax, RowSum, T, entry, index, size
from .language.ops import Op, grad_of
from .proof.core import Claim, Mutant, Proof, Setting, index_claim
from .softmax import softmax_math, softmax_stable

m, n, d_k, d_v = size("m"), size("n"), size("d_k"), size("d_v")
i, j, e, f, c = (index(s) for s in ("i", "j", "e", "f", "c"))

q, k, v = Array("q", (m, d_k)), Array("k", (n, d_k)), Array("v", (n, d_v))
s, att, o = Array("s", (m, n)), Array("att", (m, n)), Array("o", (m, d_v))
mx, ex = Array("mx", (m, 1)), Array("ex", (m, n))
lsum = Array("lsum", (m, 1))  # log Σ_p e^{S_ip − mx_i}: lse = mx + lsum, kept apart
sm = Array("sm", (m, n))  # the backward's shifted scores S − mx
do, datt, ds = grad_of(o), grad_of(att), grad_of(s)
dq, dk, dv = grad_of(q), grad_of(k), grad_of(v)
delta = Array("delta", (m, 1))

SCORES = MatMul(q, T(k)) / sp.sqrt(d_k)

# The document's attention (seed A §1, seed B §3 and §5) and FlashAttention's row log-sum-exp,
# in a scope of their own: no max shift anywhere (the printed lines' shift is what the
# generated claims prove harmless). ℓ is not an output: it is saved, and the generated backward
# claims read the cache's mx and lsum through their forward definitions.
S_spec = Array("s", (m, n), latex="S")
A_spec = Array("att", (m, n), latex="A")
L_spec = Array("lse", (m, 1), latex=r"\ell")
ATTENTION_LSE_SPEC = [
    Assign(S_spec, SCORES),  # S = Q Kᵀ / √d_k
    Assign(S_spec, CausalMask(S_spec), when="causal"),  # S = mask(S): S_ij = −∞ for j > i
    Assign(L_spec, sp.log(RowSum(sp.exp(S_spec)))),  # ℓ = log Σ_p e^{S_ip}
    Assign(A_spec, softmax_math(S_spec)),  # A = e^{S} / rowsum(e^{S})
    Assign(o, MatMul(A_spec, v)),  # O = A V
]

ATTENTION_LSE = Op(
    name="attention_lse",
    range_limit=score_overflow("attention_lse"),
    module=__name__,
    title="Scaled dot-product attention, weights recomputed from the log-sum-exp",
    spec=ATTENTION_LSE_SPEC,
    source="seed A §1 and §6, seed B §3–§5; FlashAttention",
    quotes=QUOTES,  # attention's: the same function of Q, K, V, with and without the mask
    check={"sizes": {"m": 3, "n": 3}},  # causal: every row sees a different count of keys
    mistakes={
        "no-scale": (
            "the 1/√d_k scale dropped from the forward's scores",
            "forward",
            "ex",
            sp.exp(s * sp.sqrt(d_k) - mx),
        ),
        "lsum-with-max": (
            "the whole lse = max + log Σ e^{S − max} saved where the backward subtracts the max again",
            "forward",
            "lsum",
            mx + sp.log(RowSum(ex)),
        ),
        "lsum-unshifted": (
            "log Σ e^{S} (no shift) saved with the shifted scores",
            "forward",
            "lsum",
            sp.log(RowSum(sp.exp(s))),
        ),
        "lse-unmasked": (
            "the log-sum of the unmasked scores (mask applied after the log-sum-exp)",
            "forward",
            "lsum",
            sp.log(RowSum(sp.exp(SCORES - RowMax(SCORES)))),
        ),
        "mask-after-softmax": (
            "future weights zeroed after the softmax of the unmasked scores, rows not renormalised",
            "forward",
            "att",
            sp.exp(SCORES - RowMax(SCORES)) / RowSum(sp.exp(SCORES - RowMax(SCORES))) * sp.exp(s - SCORES),
        ),
        "recompute-unscaled": (
            "scores recomputed without 1/√d_k in the backward",
            "backward",
            "sm",
            s * sp.sqrt(d_k) - mx,
        ),
        "recompute-no-shift": (
            "the max not subtracted in the backward: e^{S − lsum}",
            "backward",
            "att",
            sp.exp(s - lsum),
        ),
        "recompute-exp-minus-lse": (
            "e^{S − max} − lsum instead of e^{S − max − lsum}",
            "backward",
            "att",
            sp.exp(sm) - lsum,
        ),
        "dq-no-scale": ("the 1/√d_k dropped from dQ", "backward", "dq", MatMul(ds, k)),
        "dA-for-dS": ("dA used in place of dS in dQ", "backward", "dq", MatMul(datt, k) / sp.sqrt(d_k)),
        "no-rowsum": ("dS = A ⊙ dA (the rowsum term dropped)", "backward", "ds", att * datt),
        "rowsum-of-dO": ("δ = rowsum(dO) instead of rowsum(dO ⊙ O)", "backward", "delta", RowSum(do)),
    },
    claims=[
        "attention_lse.forward",
        "attention_lse.backward.dq",
        "attention_lse.backward.dk",
        "attention_lse.backward.dv",
        "attention_lse.recompute",
        "attention_lse.output",
        "attention_lse.causal",
        "attention_lse.dV",
        "attention_lse.dQ",
        "attention_lse.dK",
        "attention.delta",
    ],
    inputs=[q, k, v],
    options=[CAUSAL],
    sizes={d_k: (q, 1)},
    forward=[
        Assign(s, SCORES),  # scores, scaled by 1/√d_k
        Assign(s, CausalMask(s), when="causal"),  # M_ij = −∞ for j > i
        Assign(mx, RowMax(s)),  # any per-row shift: softmax.shift
        Assign(ex, sp.exp(s - mx)),
        Assign(lsum, sp.log(RowSum(ex))),  # lse = mx + lsum, kept as two numbers
        Assign(att, ex / RowSum(ex)),
        Assign(o, MatMul(att, v)),
    ],
    outputs=[o],
    saved=[q, k, v, o, mx, lsum],  # no m×n array is kept
    backward=[
        Assign(s, SCORES),  # recomputed: one matmul
        Assign(s, CausalMask(s), when="causal"),
        Assign(sm, s - mx),  # S − max: as accurate as S
        Assign(att, sp.exp(sm - lsum)),  # attention_lse.recompute
    ]
    + BACKWARD_FROM_WEIGHTS,  # then attention's: dV, dA, δ, dS, dQ, dK
    grads=[dq, dk, dv],
    broadcast=True,  # leading axes broadcast between q, k, v (torch's scaled_dot_product_attention)
    cache_doc="q, k, v, the output o, and the log-sum-exp of each row of scores in two parts (m×1 "
    "each): mx, the row max, and lsum = log Σ exp(S − mx); no m×n array: the backward "
    "recomputes the scores and A = exp((S − mx) − lsum) from them (never S − (mx + lsum), "
    "whose rounding loses lsum once |S| ≳ 1/ε).",
)
OPS = [ATTENTION_LSE]


# ------------------------------------------------------------------------------- environments
def _env(assigns, when=frozenset()) -> dict:
    """Definitions as a sequence of lines computes them (a redefinition reads the old value)."""
    env: dict = {}
    for a in assigns:
        if a.when is not None and a.when not in when:
            continue
        expr = a.expr.xreplace({a.target: env[a.target]}) if a.target in env else a.expr
        env[a.target] = expr
    return env


forward = _env(ATTENTION_LSE.forward)  # the forward as it runs
forward_causal = _env(ATTENTION_LSE.forward, {"causal"})
# the backward's own lines (its recomputed s and att), reading the forward's saved mx, lsum and o
backward = {**forward, **_env(ATTENTION_LSE.backward)}
backward[att] = sp.exp(s - mx - lsum)
backward_causal = {**forward_causal, **_env(ATTENTION_LSE.backward, {"causal"})}
backward_causal[att] = sp.exp(s - mx - lsum)
# the printed lines sm = s − mx, att = exp(sm − lsum): A in the backward's s and the cache
recomputed = ATTENTION_LSE.backward[3].expr.xreplace({sm: ATTENTION_LSE.backward[2].expr})
assert recomputed == sp.exp(s - mx - lsum)

setting = Setting(
    sizes={m: 2, n: 3, d_k: 2, d_v: 2}, indices={i: (0, m - 1), j: (0, n - 1), e: (0, m - 1), f: (0, d_k - 1)}
)
sqrt_dk = sp.sqrt(d_k)

# ------------------------------------------------------------------------------- recompute
# exp((S_ij − mx_i) − lsum_i) = e^{S_ij} / Σ_p e^{S_ip}, S free (any scores), the max an arbitrary per-row number.
scores_free = {mx: RowMax(s), ex: sp.exp(s - mx), lsum: sp.log(RowSum(ex))}
lse_wrong_no_max = sp.log(RowSum(sp.exp(s - RowMax(s))))
recompute = index_claim(
    "attention_lse.recompute",
    "exp((S − max) − lsum) is the softmax (the backward may rebuild A from two numbers per row)",
    "FlashAttention (log-sum-exp recomputation); seed B §4",
    r"e^{\left(S_{ij} - \mu_{i}\right) - \lambda_{i}} = \frac{e^{S_{ij}}}{\sum_{p} e^{S_{ip}}}, \quad "
    r"\mu_{i} = \max_{k} S_{ik}, \quad \lambda_{i} = \log \sum_{p} e^{S_{ip} - \mu_{i}}",
    lhs=entry(recomputed, (i, j), scores_free),
    rhs=entry(softmax_math(s), (i, j)),
    setting=setting,
    mutants={
        "max-not-subtracted": (
            "the row max not subtracted before lsum: e^{S − lsum}",
            entry(sp.exp(s - lse_wrong_no_max), (i, j)),
        ),
        "max-added": (
            "the row max added instead of subtracted: e^{S + max − lsum}",
            entry(sp.exp(s + RowMax(s) - lse_wrong_no_max), (i, j)),
        ),
        "exp-minus-lse": (
            "e^{S − max} − lsum instead of e^{S − max − lsum}",
            entry(sp.exp(s - RowMax(s)) - lse_wrong_no_max, (i, j)),
        ),
    },
)

# ------------------------------------------------------------------------------- forward output
# O of this op equals O of the standard op (softmax_stable, attention.index_form) entry by entry.
output = index_claim(
    "attention_lse.output",
    "The forward's output is the standard attention output",
    "seed A §1.A",
    r"O = \frac{e^{S - \max S}}{\mathrm{rowsum}\left(e^{S - \max S}\right)} V = \mathrm{softmax}(S) V",
    lhs=entry(o, (i, j), forward),
    rhs=entry(MatMul(softmax_stable(SCORES), v), (i, j)),
    setting=Setting(sizes=setting.sizes, indices={i: (0, m - 1), j: (0, d_v - 1)}),
    mutants={
        "no-scale": ("the 1/√d_k scale dropped", entry(MatMul(softmax_stable(MatMul(q, T(k))), v), (i, j))),
        "lse-weights-no-max": (
            "the weights exp(S − log Σ e^{S − max}) (max not added back)",
            entry(MatMul(sp.exp(SCORES - sp.log(RowSum(sp.exp(SCORES - RowMax(SCORES))))), v), (i, j)),
        ),
    },
)


# ------------------------------------------------------------------------------- backward, end to end
def loss(out: Array, env: dict, rows, cols, upstream: Array):
    """L = Σ_ij G_ij Out_ij: any loss, through its upstream gradient G = ∂L/∂Out."""
    return sp.Sum(upstream.base[i, j] * entry(out, (i, j), env), (i, 0, rows - 1), (j, 0, cols - 1))


# L is differentiated through the forward as it runs (ex / rowsum(ex)); the gradients are the
# backward's lines, whose A is the recomputed exp((S − mx) − lsum).
L_forward = loss(o, forward, m, d_v, do)
wrong_recompute = {**backward, att: sp.exp(s - lsum)}  # the max not subtracted
dV = index_claim(
    "attention_lse.dV",
    "Gradient with respect to V, with A recomputed from mx and lsum",
    "seed A §6.A",
    r"\frac{\partial \mathcal{L}}{\partial V} = \left(e^{\left(S - \mu \mathbf{1}^{T}\right) - \lambda \mathbf{1}^{T}}\right)^{T} "
    r"\frac{\partial \mathcal{L}}{\partial O}",
    lhs=sp.diff(L_forward, v.base[e, f]),
    rhs=entry(dv, (e, f), backward),
    setting=Setting(sizes=setting.sizes, indices={e: (0, n - 1), f: (0, d_v - 1)}),
    mutants={
        "no-transpose": ("A used instead of Aᵀ", entry(MatMul(att, do), (e, f), backward)),
        "recompute-no-max": ("A recomputed without the row max subtracted", entry(dv, (e, f), wrong_recompute)),
    },
)
dQ = index_claim(
    "attention_lse.dQ",
    "Gradient with respect to Q, end to end, with A recomputed from mx and lsum",
    "seed A §6.D; FlashAttention",
    r"\frac{\partial \mathcal{L}}{\partial Q} = \frac{1}{\sqrt{d_{k}}} \left(A \odot \left(\frac{\partial "
    r"\mathcal{L}}{\partial O} V^{T} - \mathrm{rowsum}\left(\frac{\partial \mathcal{L}}{\partial O} \odot "
    r"O\right)\right)\right) K, \quad A = e^{\left(S - \mu \mathbf{1}^{T}\right) - \lambda \mathbf{1}^{T}}",
    lhs=sp.diff(L_forward, q.base[e, f]),
    rhs=entry(dq, (e, f), backward),
    setting=setting,
    mutants={
        "no-scale": ("the 1/√d_k dropped", entry(MatMul(ds, k), (e, f), backward)),
        "recompute-no-max": ("A recomputed without the row max subtracted", entry(dq, (e, f), wrong_recompute)),
        "recompute-unscaled": ("scores recomputed without 1/√d_k", entry(dq, (e, f), {**backward, s: MatMul(q, T(k))})),
    },
)
dK = index_claim(
    "attention_lse.dK",
    "Gradient with respect to K, end to end, with A recomputed from mx and lsum",
    "seed A §6.D; FlashAttention",
    r"\frac{\partial \mathcal{L}}{\partial K} = \frac{1}{\sqrt{d_{k}}} \left(\frac{\partial \mathcal{L}}"
    r"{\partial S}\right)^{T} Q, \quad A = e^{\left(S - \mu \mathbf{1}^{T}\right) - \lambda \mathbf{1}^{T}}",
    lhs=sp.diff(L_forward, k.base[e, f]),
    rhs=entry(dk, (e, f), backward),
    setting=Setting(sizes=setting.sizes, indices={e: (0, n - 1), f: (0, d_k - 1)}),
    mutants={
        "no-transpose": (
            "dS used instead of dSᵀ",
            sp.Sum(entry(ds, (e, c), backward) * q.base[c, f], (c, 0, m - 1)) / sqrt_dk,
        ),
        "recompute-no-max": ("A recomputed without the row max subtracted", entry(dk, (e, f), wrong_recompute)),
    },
)

# ------------------------------------------------------------------------------- causal mask
# j = i + 1 + r (r ≥ 0) is a position after i; the same facts and counterexample search as
# attention.causal (derivations/attention.py)


def _causal() -> Proof:
    """(1) a recomputed weight after position i is exactly 0; (2) the recomputed weights equal
    the masked softmax the forward used (index normaliser, causal range split); (3) so the
    masked scores get zero gradient; (4) a query past the last key (m > n, top-left alignment)
    recomputes the unmasked softmax."""
    return causal_parts(
        [
            ("recomputed weight after i", entry(recomputed, (i, later), backward_causal), sp.Integer(0), None),  # (1)
            (
                "recomputed weights vs masked softmax",
                entry(recomputed, (i, j), backward_causal),  # (2)
                entry(softmax_stable(CausalMask(SCORES)), (i, j)),
                "normaliser",
            ),
            ("dS after i", entry(ds, (i, later), backward_causal), sp.Integer(0), None),  # (3)
            (
                "recomputed weights past the last key vs the unmasked softmax, against any V",  # (4)
                sp.Sum(entry(recomputed, (past, j), backward_causal) * v.base[j, f], (j, 0, n - 1)),
                sp.Sum(entry(softmax_stable(SCORES), (past, j)) * v.base[j, f], (j, 0, n - 1)),
                past_setting,
            ),
        ],
        "exp(−∞) = 0 by evaluation for (1), (3); index normaliser with a causal range split for (2) "
        "and the mask's whole-range case for (4)",
    )


causal = Claim(
    id="attention_lse.causal",
    title="Causal mask: recomputed weights are 0 after the query and a softmax before it",
    source="seed B §5; FlashAttention",
    latex=r"e^{\left(S_{ij} - \mu_{i}\right) - \lambda_{i}} = 0 \ (j > i), \quad e^{\left(S_{ij} - \mu_{i}\right) - \lambda_{i}} = \mathrm{softmax}(S + M)_{ij}, \quad "
    r"e^{\left(S_{ij} - \mu_{i}\right) - \lambda_{i}} = \mathrm{softmax}(S)_{ij} \ (i \geq n)",
    prove=_causal,
    mutants=[
        Mutant(
            "unmasked-recompute",
            "scores recomputed without the mask (future keys get weight)",
            lambda: refute_causal(backward_causal, sp.exp(SCORES - mx - lsum)),
        ),
        Mutant(
            "unmasked-lse",
            "lsum of the unmasked scores (rows of the masked weights do not sum to 1)",
            lambda: refute_causal(
                backward_causal,
                sp.exp(CausalMask(SCORES) - (RowMax(SCORES) + sp.log(RowSum(sp.exp(SCORES - RowMax(SCORES)))))),
            ),
        ),
    ],
)

CLAIMS: list[Claim] = [recompute, output, causal, dV, dQ, dK]
