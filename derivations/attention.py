"""Scaled dot-product attention: forward, index form, and the whole backward pass.

Seed A §1 and §6, seed B §3 and §5:

    S = Q Kᵀ / √d_k        A = softmax(S)  (+ causal mask M)        O = A V
    dV = Aᵀ dO   dA = dO Vᵀ   dS = A ⊙ (dA − rowsum(dA ⊙ A))   dQ = dS K/√d_k   dK = dSᵀ Q/√d_k

The generated backward uses rowsum(dO ⊙ O) in place of rowsum(dA ⊙ A) (the `attention.delta`
identity, as FlashAttention does), so it needs O, not dA, to form the correction. The claims
`attention.dQ` and `attention.dK` differentiate L = Σ dO ⊙ O through S, A and O end to end and
compare with the very expressions the code generator prints.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, CausalMask, ColSum, MatMul, RowMax, RowSum, T, entry, index, size
from .language.ops import Op, Option, Quote, RangeLimit, grad_of
from .proof.core import Claim, Mutant, Proof, Setting, counterexample, decide, index_claim
from .softmax import softmax_math, softmax_stable

m, n, d_k, d_v = size("m"), size("n"), size("d_k"), size("d_v")  # queries, keys, dims
i, j, e, f, p, c = (index(s) for s in ("i", "j", "e", "f", "p", "c"))

q, k, v = Array("q", (m, d_k)), Array("k", (n, d_k)), Array("v", (n, d_v))
s, att, o = Array("s", (m, n)), Array("att", (m, n)), Array("o", (m, d_v))
do, datt, ds = grad_of(o), grad_of(att), grad_of(s)
dq, dk, dv = grad_of(q), grad_of(k), grad_of(v)
delta = Array("delta", (m, 1))

# The backward from the weights A = att, the output o and dO: attention's whole backward, and
# attention_lse's once it has recomputed A (derivations/attention_lse.py).
BACKWARD_FROM_WEIGHTS = [
    Assign(dv, MatMul(T(att), do)),  # dV = Aᵀ dO
    Assign(datt, MatMul(do, T(v))),  # dA = dO Vᵀ
    Assign(
        delta,
        RowSum(do * o),  # rowsum(dA ⊙ A) = rowsum(dO ⊙ O)
        note="δ = rowsum(dA ⊙ A), from dO and O alone (FlashAttention's D)",
    ),
    Assign(ds, att * (datt - delta)),  # dS = A ⊙ (dA − δ 1ᵀ)
    Assign(dq, MatMul(ds, k) / sp.sqrt(d_k)),  # dQ = dS K / √d_k
    Assign(dk, MatMul(T(ds), q) / sp.sqrt(d_k)),  # dK = dSᵀ Q / √d_k
]

# The document's attention (seed A §1, seed B §3 and §5), in a scope of its own: the softmax
# without the max shift, the causal mask on the scores before it.
S_spec = Array("s", (m, n), latex="S")
A_spec = Array("att", (m, n), latex="A")
ATTENTION_SPEC = [
    Assign(S_spec, MatMul(q, T(k)) / sp.sqrt(d_k)),  # S = Q Kᵀ / √d_k
    Assign(S_spec, CausalMask(S_spec), when="causal"),  # S = mask(S): S_ij = −∞ for j > i
    Assign(A_spec, softmax_math(S_spec)),  # A = e^{S} / rowsum(e^{S})
    Assign(o, MatMul(A_spec, v)),  # O = A V
]
_unmasked = MatMul(q, T(k)) / sp.sqrt(d_k)

# the flag every attention op takes, and where each one's scores leave the floating-point range
CAUSAL = Option(
    None,
    "causal",
    False,
    "mask keys after the query position: query i sees keys j ≤ i (top-left aligned when m ≠ n, as torch's is_causal)",
)


def score_overflow(name: str) -> RangeLimit:
    """An attention op's range limit: its scores s = q kᵀ/√d_k overflow at |q|, |k| ~ M with M² past
    the largest float, and s − rowmax(s) is then inf − inf = NaN where the exact attention is
    one-hot and its output finite."""
    return RangeLimit(
        {"float32": 1e20, "float64": 1e300},
        f"{name}: s = q kᵀ/√d_k overflows (|s| ~ M² with q, k ~ M) → inf − inf = NaN "
        "in s − rowmax(s); the exact attention is one-hot and o finite",
    )


# the sources' formula: without the causal mask (the op with causal=False), and seed B §5's
# mask M added to the scores (causal=True), stated as a value of Q, K and V
QUOTES = (
    Quote(
        "seed A §1",
        "Attention",
        r"\mathrm{Attention}(\mathbf{Q}, \mathbf{K}, \mathbf{V}) = "
        r"\mathrm{softmax}\left(\frac{\mathbf{Q}\mathbf{K}^T}{\sqrt{d_k}}\right)\mathbf{V}",
    ),
    Quote("seed B §3", "Attention", r"Attention(Q,K,V) = softmax \left( \frac{QK^T}{\sqrt{d_k}} \right)V"),
    Quote(
        "seed B §5",
        "Attention",
        r"M_{ij} = \begin{cases} 0 & j \leq i \\ -\infty & j > i \end{cases}"
        "\n"
        r"Attention = softmax \left( \frac{QK^T}{\sqrt{d_k}} + M \right)V",
        args=("Q", "K", "V"),
        when="causal",
    ),
)

ATTENTION = Op(
    name="attention",
    range_limit=score_overflow("attention"),
    module=__name__,
    title="Scaled dot-product attention",
    spec=ATTENTION_SPEC,
    source="seed A §1 and §6, seed B §3 and §5",
    quotes=QUOTES,
    check={"sizes": {"m": 3, "n": 3}},  # causal: every row sees a different count of keys
    mistakes={
        "no-scale": ("the 1/√d_k scale dropped (softmax of Q Kᵀ)", "forward", "att", softmax_stable(s * sp.sqrt(d_k))),
        "column-softmax": (
            "softmax normalised over queries (columns) instead of keys",
            "forward",
            "att",
            sp.exp(s - RowMax(s)) / ColSum(sp.exp(s - RowMax(s))),
        ),
        "no-mask": ("causal mask forgotten: later keys get weight", "forward", "s", s),
        "mask-after-softmax": (
            "future weights zeroed after the softmax of the unmasked scores, rows not renormalised",
            "forward",
            "att",
            softmax_stable(_unmasked) * sp.exp(s - _unmasked),
        ),
        "dq-no-scale": ("the 1/√d_k dropped from dQ", "backward", "dq", MatMul(ds, k)),
        "dk-no-scale": ("the 1/√d_k dropped from dK", "backward", "dk", MatMul(T(ds), q)),
        "dA-for-dS": ("dA used in place of dS in dQ", "backward", "dq", MatMul(datt, k) / sp.sqrt(d_k)),
        "no-rowsum": ("dS = A ⊙ dA (the rowsum term dropped)", "backward", "ds", att * datt),
        "rowsum-sign": ("+ rowsum instead of − rowsum", "backward", "ds", att * (datt + delta)),
        "rowsum-of-dO": ("δ = rowsum(dO) instead of rowsum(dO ⊙ O)", "backward", "delta", RowSum(do)),
        "no-A-factor": ("the leading A ⊙ dropped from dS", "backward", "ds", datt - delta),
    },
    claims=[
        "attention.forward",
        "attention.backward.dq",
        "attention.backward.dk",
        "attention.backward.dv",
        "attention.index_form",
        "softmax.shift",
        "attention.causal",
        "attention.dV",
        "attention.dA",
        "attention.dS",
        "attention.delta",
        "attention.dQ",
        "attention.dK",
    ],
    inputs=[q, k, v],
    options=[CAUSAL],
    sizes={d_k: (q, 1)},
    forward=[
        Assign(s, MatMul(q, T(k)) / sp.sqrt(d_k)),  # scores, scaled by 1/√d_k
        Assign(s, CausalMask(s), when="causal"),  # M_ij = −∞ for j > i
        Assign(att, softmax_stable(s)),  # row max subtracted: softmax.shift
        Assign(o, MatMul(att, v)),
    ],
    outputs=[o],
    saved=[q, k, v, att, o],
    backward=BACKWARD_FROM_WEIGHTS,
    grads=[dq, dk, dv],
    broadcast=True,  # leading axes broadcast between q, k, v (torch's scaled_dot_product_attention)
    cache_doc="q, k, v, the attention weights att = softmax(s) (m×n) and the output o; "
    "o is kept so that the backward forms rowsum(dO ⊙ O) instead of rowsum(dA ⊙ A).",
)
OPS = [ATTENTION]

# ------------------------------------------------------------------------------- settings
setting = Setting(
    sizes={m: 2, n: 3, d_k: 2, d_v: 2}, indices={i: (0, m - 1), j: (0, n - 1), e: (0, m - 1), f: (0, d_k - 1)}
)
code = ATTENTION.env()  # every intermediate as the generated code computes it
causal_code = ATTENTION.env({"causal"})
sqrt_dk = sp.sqrt(d_k)


def loss(out: Array, env: dict, rows, cols, upstream: Array):
    """L = Σ_ij G_ij Out_ij: any loss, through its upstream gradient G = ∂L/∂Out."""
    return sp.Sum(upstream.base[i, j] * entry(out, (i, j), env), (i, 0, rows - 1), (j, 0, cols - 1))


# ------------------------------------------------------------------------------- forward
# The document's index forms (seed A §1.A): S_ij = Σ_m Q_im K_jm / √d_k, A_ij = e^{S_ij}/Σ_p e^{S_ip},
# O_ij = Σ_q A_iq V_qj, each written out by hand and compared with the code's expression.
t = index("t")
S_doc = lambda row, col: sp.Sum(q.base[row, t] * k.base[col, t], (t, 0, d_k - 1)) / sqrt_dk  # noqa: E731
A_doc = lambda row, col: sp.exp(S_doc(row, col)) / sp.Sum(sp.exp(S_doc(row, p)), (p, 0, n - 1))  # noqa: E731
O_doc = sp.Sum(A_doc(i, c) * v.base[c, j], (c, 0, n - 1))
index_form = index_claim(
    "attention.index_form",
    "Matrix form equals the index forms of S, A and O",
    "seed A §1.A, seed B §3",
    r"S_{ij} = \frac{1}{\sqrt{d_{k}}} \sum_{t} Q_{it} K_{jt}, \quad A_{ij} = \frac{e^{S_{ij}}}{\sum_{p} e^{S_{ip}}}, "
    r"\quad O_{ij} = \sum_{c} A_{ic} V_{cj}",
    lhs=[entry(s, (i, j), code), entry(att, (i, j), code), entry(o, (i, j), code)],
    rhs=[S_doc(i, j), A_doc(i, j), O_doc],
    setting=Setting(sizes={m: 2, n: 3, d_k: 2, d_v: 2}, indices={i: (0, m - 1), j: (0, 1)}),
    mutants={
        "no-scale": ("the 1/√d_k scale dropped", [S_doc(i, j) * sqrt_dk, A_doc(i, j), O_doc]),
        "scale-by-d": ("scaled by 1/d_k instead of 1/√d_k", [S_doc(i, j) / sqrt_dk, A_doc(i, j), O_doc]),
        "column-softmax": (
            "softmax normalised over queries (columns) instead of keys",
            [S_doc(i, j), sp.exp(S_doc(i, j)) / sp.Sum(sp.exp(S_doc(p, j)), (p, 0, m - 1)), O_doc],
        ),
    },
)

# ------------------------------------------------------------------------------- backward
dV_lhs = sp.diff(loss(o, {o: MatMul(att, v)}, m, d_v, do), v.base[e, f])
dV = index_claim(
    "attention.dV",
    "Gradient with respect to V",
    "seed A §6.A",
    r"\frac{\partial \mathcal{L}}{\partial V} = A^{T} \frac{\partial \mathcal{L}}{\partial O}",
    lhs=dV_lhs,
    rhs=entry(ATTENTION.value(dv), (e, f)),
    setting=Setting(sizes=setting.sizes, indices={e: (0, n - 1), f: (0, d_v - 1)}),
    mutants={
        "no-transpose": ("A used instead of Aᵀ", entry(MatMul(att, do), (e, f))),
        "wrong-order": ("dO Aᵀ order confusion", sp.Sum(do.base[e, c] * att.base[f, c], (c, 0, m - 1))),
    },
)

dA_lhs = sp.diff(loss(o, {o: MatMul(att, v)}, m, d_v, do), att.base[e, f])
dA = index_claim(
    "attention.dA",
    "Gradient with respect to the attention weights A",
    "seed A §6.B",
    r"\frac{\partial \mathcal{L}}{\partial A} = \frac{\partial \mathcal{L}}{\partial O} V^{T}",
    lhs=dA_lhs,
    rhs=entry(ATTENTION.value(datt), (e, f)),
    setting=Setting(sizes=setting.sizes, indices={e: (0, m - 1), f: (0, n - 1)}),
    mutants={
        "no-transpose": ("V used instead of Vᵀ", sp.Sum(do.base[e, c] * v.base[c, f], (c, 0, d_v - 1))),
        "scaled": ("a stray 1/√d_k", entry(ATTENTION.value(datt), (e, f)) / sqrt_dk),
    },
)

# dS in the document's form, A ⊙ (dA − rowsum(dA ⊙ A) 1ᵀ), from L = Σ dA ⊙ A(S) with dA free.
softmax_of_s = {att: softmax_stable(s)}
dS_lhs = sp.diff(loss(att, softmax_of_s, m, n, datt), s.base[e, f])
dS_doc = att * (datt - RowSum(datt * att))
dS = index_claim(
    "attention.dS",
    "Gradient with respect to the scores S (softmax backward)",
    "seed A §6.C",
    r"\frac{\partial \mathcal{L}}{\partial S} = A \odot \left(\frac{\partial \mathcal{L}}{\partial A} - "
    r"\mathrm{rowsums}\left(\frac{\partial \mathcal{L}}{\partial A} \odot A\right) \mathbf{1}^{T}\right)",
    lhs=dS_lhs,
    rhs=entry(dS_doc, (e, f), softmax_of_s),
    setting=Setting(sizes=setting.sizes, indices={e: (0, m - 1), f: (0, n - 1)}),
    mutants={
        "sign-flip": ("+ rowsum instead of − rowsum", entry(att * (datt + RowSum(datt * att)), (e, f), softmax_of_s)),
        "no-A-factor": ("the leading A ⊙ dropped", entry(datt - RowSum(datt * att), (e, f), softmax_of_s)),
        "rowsum-of-dA": (
            "rowsum(dA) instead of rowsum(dA ⊙ A)",
            entry(att * (datt - RowSum(datt)), (e, f), softmax_of_s),
        ),
    },
)

# rowsum(dA ⊙ A) = rowsum(dO ⊙ O) when dA = dO Vᵀ and O = A V: the backward never needs dA ⊙ A.
through_v = {datt: MatMul(do, T(v)), o: MatMul(att, v)}
delta_claim = index_claim(
    "attention.delta",
    "rowsum(dA ⊙ A) = rowsum(dO ⊙ O) (lets backward skip dA ⊙ A)",
    "FlashAttention; seed A §6.C",
    r"\mathrm{rowsums}\left(\frac{\partial \mathcal{L}}{\partial A} \odot A\right) = "
    r"\mathrm{rowsums}\left(\frac{\partial \mathcal{L}}{\partial O} \odot O\right)",
    lhs=entry(RowSum(datt * att), (i, 0), through_v),
    rhs=entry(ATTENTION.value(delta), (i, 0), through_v),
    setting=setting,
    mutants={
        "product-of-rowsums": ("rowsum(dO) · rowsum(O)", entry(RowSum(do) * RowSum(o), (i, 0), through_v)),
        "missing-A": ("rowsum(dA) without the A factor", entry(RowSum(datt), (i, 0), through_v)),
    },
)

# End to end: d/dQ and d/dK of L = Σ dO ⊙ O through S, A, O, against the printed backward.
L_code = loss(o, code, m, d_v, do)
dQ_lhs = sp.diff(L_code, q.base[e, f])
dK_lhs = sp.diff(L_code, k.base[e, f])
dQ = index_claim(
    "attention.dQ",
    "Gradient with respect to Q, end to end",
    "seed A §6.D",
    r"\frac{\partial \mathcal{L}}{\partial Q} = \frac{1}{\sqrt{d_{k}}} \frac{\partial \mathcal{L}}{\partial S} K",
    lhs=dQ_lhs,
    rhs=entry(dq, (e, f), code),
    setting=setting,
    mutants={
        "no-scale": ("the 1/√d_k dropped", entry(MatMul(ds, k), (e, f), code)),
        "skip-softmax": ("dA used in place of dS", entry(MatMul(datt, k) / sqrt_dk, (e, f), code)),
        "rowsum-dA-missing": (
            "dS = A ⊙ dA (rowsum term dropped)",
            entry(MatMul(att * datt, k) / sqrt_dk, (e, f), code),
        ),
    },
)
dK = index_claim(
    "attention.dK",
    "Gradient with respect to K, end to end",
    "seed A §6.D",
    r"\frac{\partial \mathcal{L}}{\partial K} = \frac{1}{\sqrt{d_{k}}} \left(\frac{\partial \mathcal{L}}{\partial S}\right)^{T} Q",
    lhs=dK_lhs,
    rhs=entry(dk, (e, f), code),
    setting=Setting(sizes=setting.sizes, indices={e: (0, n - 1), f: (0, d_k - 1)}),
    mutants={
        "no-transpose": (
            "dS used instead of dSᵀ",
            sp.Sum(entry(ds, (e, c), code) * q.base[c, f], (c, 0, m - 1)) / sqrt_dk,
        ),
        "no-scale": ("the 1/√d_k dropped", entry(MatMul(T(ds), q), (e, f), code)),
    },
)

# ------------------------------------------------------------------------------- causal mask
# Top-left alignment, any m and n (torch's is_causal: the mask is tril(ones(m, n))): query i sees
# the keys j ≤ i. A query i ≤ n − 1 has keys after it, j = i + 1 + r; a query past the last key
# (i = n + u, only when m > n) sees every key. No row is ever fully masked (key 0 is always seen).
r_ = sp.Symbol("r", integer=True, nonnegative=True)  # j = i + 1 + r is a position after i
later = i + 1 + r_
u_ = sp.Symbol("u", integer=True, nonnegative=True)  # i = n + u is a query past the last key
past = n + u_
causal_setting = Setting(
    sizes={m: 2, n: 3, d_k: 2, d_v: 2},  # m < n: a rectangular mask
    indices={i: (0, 1), j: (0, n - 1), f: (0, d_v - 1)},
    scalars={r_: 0},
    # the symbolic claim: any query i with a later key i + 1 + r in the sequence
    domain={i: (0, n - 1), r_: (0, n - 2 - i)},
)
past_setting = Setting(
    sizes={m: 4, n: 2, d_k: 2, d_v: 2},  # m > n: queries past the keys
    indices={j: (0, n - 1), f: (0, d_v - 1)},
    scalars={u_: 0},
    domain={u_: (0, m - 1 - n)},
)


def _causal() -> Proof:
    """Five facts, each an exact residual of 0 for symbolic m, n and i:
    (1) masked weights are exactly 0, (2) rows still sum to 1, (3) masked scores get zero
    gradient, (4) output row i does not depend on any V row after i, (5) a query past the last
    key (m > n) gets the unmasked attention: its output row is O_i of softmax(S) V."""
    parts = []
    weight_after = entry(att, (i, later), causal_code)  # (1)
    parts.append(("masked weight A_{i,i+1+r}", weight_after, sp.Integer(0), None))
    row_sum = sp.Sum(entry(att, (i, j), causal_code), (j, 0, n - 1))  # (2)
    parts.append(("row sum", row_sum, sp.Integer(1), "normaliser"))
    grad_after = entry(ds, (i, later), causal_code)  # (3)
    parts.append(("dS_{i,i+1+r}", grad_after, sp.Integer(0), None))
    dO_dV = sp.diff(entry(o, (i, j), causal_code), v.base[later, f])  # (4)
    parts.append(("∂O_ij/∂V_{i+1+r,f}", dO_dV, sp.Integer(0), "normaliser"))
    parts.append(
        (
            "O_{n+u,f} = unmasked O_{n+u,f}",
            entry(o, (past, f), causal_code),  # (5)
            entry(o, (past, f), code),
            past_setting,
        )
    )
    return causal_parts(
        parts,
        "exp(−∞) = 0 by evaluation for (1), (3); index normaliser with a causal "
        "range split for (2), (4) and the mask's whole-range case for (5)",
    )


CAUSAL_ASSUMPTIONS = (
    "0 ≤ r ≤ n - 2 - i (position i+1+r lies after i, in the sequence)",
    "top-left alignment, any m and n: query i sees the keys j ≤ i (tril(ones(m, n)), torch's is_causal)",
)


def causal_parts(parts, method: str) -> Proof:
    """A proof made of facts (label, lhs, rhs, how) about causal attention, each exact: `how`
    None means SymPy's own evaluation must give rhs (exp(−∞) = 0 kills a masked entry),
    "normaliser" means the index normaliser's residual lhs − rhs must be 0 on causal_setting's
    domain, and a Setting means the same on that setting's domain (past_setting: i = n + u)."""
    assumptions = list(CAUSAL_ASSUMPTIONS)
    for label, lhs, rhs, how in parts:
        if how is None:
            if lhs != rhs:
                return Proof("unproven", f"{label} did not evaluate to {rhs}", assumptions, sp.sstr(lhs))
        else:  # the gate every index proof passes: goals from the setting's domain, spot-check
            proof = decide(lhs, rhs, causal_setting if how == "normaliser" else how, label)
            assumptions += [a for a in proof.assumptions if a not in assumptions]
            if proof.status != "proved-general":
                return Proof("unproven", f"{label}: {proof.status}, {proof.method}", assumptions, proof.residual)
    return Proof("proved-general", method, assumptions)


def refute_causal(env: dict, weights_expr) -> dict | None:
    """A wrong mask (weights `weights_expr` in place of A, in the code `env`): some weight
    after position i is not 0, or a row does not sum to 1."""
    env = {**env, att: weights_expr}
    cx = counterexample(entry(att, (i, later), env), sp.Integer(0), causal_setting)
    return cx or counterexample(sp.Sum(entry(att, (i, j), env), (j, 0, n - 1)), sp.Integer(1), causal_setting)


def _bottom_right(row, col):
    """The other alignment (FlashAttention's for m ≠ n): query i sees keys j ≤ i + n − m."""

    def masked(key):
        return sp.Piecewise((entry(S_raw, (row, key)), sp.Le(key, row + n - m)), (-sp.oo, True))

    return sp.exp(masked(col)) / sp.Sum(sp.exp(masked(p)), (p, 0, n - 1))


def refute_bottom_right():
    """Bottom-right alignment: at m < n query 0 sees key 1 (torch's top-left mask hides it)."""
    return counterexample(_bottom_right(i, later), sp.Integer(0), causal_setting)


S_raw = MatMul(q, T(k)) / sqrt_dk  # unmasked scores, for the mutants
causal = Claim(
    id="attention.causal",
    title="Causal mask: no attention to, and no gradient from, the future",
    source="seed B §5",
    latex=r"M_{ij} = \begin{cases} 0 & j \leq i \\ -\infty & j > i \end{cases}: \quad A_{ij} = 0 \ (j > i), \quad "
    r"\sum_{j} A_{ij} = 1, \quad \frac{\partial \mathcal{L}}{\partial S_{ij}} = 0 \ (j > i), \quad "
    r"\frac{\partial O_{i}}{\partial V_{j}} = 0 \ (j > i), \quad O_{i} = \left(\mathrm{softmax}(S) V\right)_{i} "
    r"\ (i \geq n) \quad \text{(any } m \times n\text{, top-left aligned)}",
    prove=_causal,
    mutants=[
        Mutant(
            "mask-after-softmax",
            "future weights zeroed after the softmax, not renormalised",
            lambda: refute_causal(causal_code, softmax_math(S_raw) * sp.exp(CausalMask(S_raw) - S_raw)),
        ),
        Mutant(
            "no-mask",
            "mask forgotten: later keys get weight",
            lambda: refute_causal(causal_code, softmax_stable(S_raw)),
        ),
        Mutant(
            "bottom-right",
            "mask aligned bottom-right (query i sees keys j ≤ i + n − m) instead of top-left",
            refute_bottom_right,
        ),
    ],
)


CLAIMS: list[Claim] = [index_form, causal, dV, dA, dS, delta_claim, dQ, dK]
