"""The rules of reverse mode, each a claim: the vector-Jacobian product of every node of the array
language, as derivations/language/autodiff.py computes it, equals the derivative of the node's
index form by `sp.diff`, for symbolic sizes.

For a node Y = f(X, …) and any upstream gradient G (Y's shape), the rule's contribution to X is
claimed equal to

    ∂/∂X_ef  Σ_ij G_ij Y_ij

(the sum over Y's non-broadcast axes), the very function the derivation calls (`vjp`,
`elementwise_vjp`, `derivative`) producing the right-hand side. Each claim has mutants: the
classic wrong rule (a missing transpose, a mean for a sum, no reduction over a broadcast axis, a
mask that lets the future through), which the verifier refutes with a counterexample.

The row max has no rule of its own: `ad.rowmax` proves that a shift the result does not depend
on gets a zero adjoint (softmax and log-sum-exp), and the derivation proves it again for the
op at hand before it drops the max's term.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import (
    Array,
    CausalMask,
    ColSum,
    Contract,
    Gather,
    MatMul,
    NormalCDF,
    RowMean,
    RowSum,
    Sigmoid,
    T,
    Take,
    document_form,
    entry,
    index,
    size,
)
from .language.autodiff import derivative, elementwise_vjp, vjp
from .proof.core import Claim, Mutant, Proof, Setting, index_claim, prove_index_identity, refute_identity

TOPICS = ("ad",)  # the rules' claims: ad.matmul, ad.rowsum, …

r, k, c = size("r"), size("k"), size("c")  # rows, inner size, columns
V = size("V")  # a table's rows (a vocabulary)
i, j, e, f, p = (index(s) for s in "ijefp")

G_SOURCE = "reverse-mode differentiation (vector-Jacobian products); seed A §6"


def _all_batched(_expr) -> bool:
    return True


def upstream(shape, name="G") -> Array:
    return Array(name, shape, latex=r"\bar{Y}")


def loss(Y, G: Array, env=None) -> sp.Expr:
    """L = Σ_ij G_ij Y_ij over Y's axes that are not of size 1."""
    rows, cols = G.shape
    term = entry(G, (i, j)) * entry(Y, (i, j), env)
    limits = [(x, 0, n - 1) for x, n in ((i, rows), (j, cols)) if n != 1]
    return sp.Sum(term, *limits) if limits else term


def gradient(Y, G, X: Array, env=None):
    """∂L/∂X_ef by sp.diff of the index form, σ and Φ as the documents' formulas."""
    return sp.diff(document_form(loss(Y, G, env)), entry(X, (e, f)))


def at(expr):
    return entry(expr, (e, f))


def setting_for(X: Array, sizes: dict | None = None, **kw) -> Setting:
    rows, cols = X.shape
    indices = {}
    if rows != 1:
        indices[e] = (0, rows - 1)
    if cols != 1:
        indices[f] = (0, cols - 1)
    return Setting(sizes=sizes or {r: 2, k: 3, c: 4, V: 3}, indices=indices, **kw)


def share(node, G, position, batched=_all_batched):
    """The rule's contribution to operand `position`, as the derivation computes it."""
    return dict(vjp(node, G, batched))[position]


def rule_claim(id: str, title: str, latex: str, parts: list, mutants: dict, source: str = G_SOURCE) -> Claim:
    """A rule's claim: every part `(setting, lhs, rhs)` proved for symbolic sizes (each with its
    own operand's index ranges); a mutant `{name: (mistake, [(part, wrong lhs, wrong rhs)])}` is
    refuted when one of its wrong pairs has a counterexample."""

    def prove() -> Proof:
        proofs = [prove_index_identity(lhs, rhs, st, "index normaliser (symbolic sizes)") for st, lhs, rhs in parts]
        bad = next((pr for pr in proofs if pr.status != "proved-general"), None)
        if bad is not None:
            return bad
        worst = max(pr.spot_check["max_relative_gap"] for pr in proofs)
        return Proof(
            "proved-general",
            f"index normaliser (symbolic sizes), {len(parts)} identit{'y' if len(parts) == 1 else 'ies'}",
            list(dict.fromkeys(a for pr in proofs for a in pr.assumptions)),
            "0",
            spot_check=dict(proofs[0].spot_check, max_relative_gap=worst),
        )

    def refute(wrong) -> dict | None:
        for part, lhs, rhs in wrong:
            cx = refute_identity(lhs, rhs, parts[part][0])
            if cx is not None:
                return cx
        return None

    return Claim(
        id=id,
        title=title,
        source=source,
        latex=latex,
        prove=prove,
        mutants=[Mutant(name, mistake, (lambda w=wrong: refute(w))) for name, (mistake, wrong) in mutants.items()],
    )


# ------------------------------------------------------------------------------- matrix product
A, B = Array("A", (r, k)), Array("B", (k, c))
G_mm = upstream((r, c))
AB = MatMul(A, B)
weight = lambda e_: e_ != B  # noqa: E731 - B a weight: no leading axes
weight_a = lambda e_: e_ != A  # noqa: E731 - A a weight
dA_lhs, dB_lhs = gradient(AB, G_mm, A), gradient(AB, G_mm, B)
st_A, st_B = setting_for(A), setting_for(B)
matmul = rule_claim(
    "ad.matmul",
    "Vector-Jacobian product of a matrix product",
    r"Y = A B: \quad \frac{\partial L}{\partial A} = \bar{Y} B^{T}, \quad \frac{\partial L}{\partial B} = "
    r"A^{T} \bar{Y} \quad \left(\sum_{\text{rows}} A^{T} \bar{Y} \text{ for a weight } B \text{ without "
    r"leading axes}\right)",
    # the weight forms: Contract sums the same products over the leading axes, where a weight
    # is shared by every slice
    parts=[
        (st_A, dA_lhs, at(share(AB, G_mm, 0))),
        (st_B, dB_lhs, at(share(AB, G_mm, 1))),
        (st_B, dB_lhs, at(share(AB, G_mm, 1, weight))),
        (st_A, dA_lhs, at(share(AB, G_mm, 0, weight_a))),
    ],
    mutants={
        "no-transpose-dA": (
            "dA = Ȳ B (B not transposed: index B_pf for B_fp)",
            [(0, dA_lhs, sp.Sum(G_mm.base[e, p] * B.base[p, f], (p, 0, c - 1)))],
        ),
        "swapped-dB": (
            "dB = (Ȳ Aᵀ)-style index order: A_ep for A_pe",
            [(1, dB_lhs, sp.Sum(A.base[e, p] * G_mm.base[p, f], (p, 0, r - 1)))],
        ),
        "weight-one-slice": (
            "the weight's gradient from the first row only",
            [(2, dB_lhs, A.base[0, e] * G_mm.base[0, f])],
        ),
    },
)

# ------------------------------------------------------------------------------- transpose
X_rc = Array("X", (r, c))
G_t = upstream((c, r))
transpose = index_claim(
    "ad.transpose",
    "Vector-Jacobian product of a transpose",
    G_SOURCE,
    r"Y = X^{T}: \quad \frac{\partial L}{\partial X} = \bar{Y}^{T}",
    lhs=gradient(T(X_rc), G_t, X_rc),
    rhs=at(share(T(X_rc), G_t, 0)),
    setting=setting_for(X_rc),
    mutants={"not-transposed": ("dX = Ȳ (index Ȳ_ef for Ȳ_fe)", G_t.base[e, f])},
)

# ------------------------------------------------------------------------------- reductions
G_row = upstream((r, 1))
rowsum = index_claim(
    "ad.rowsum",
    "Vector-Jacobian product of a row sum: the adjoint broadcast back along the row",
    G_SOURCE,
    r"Y = \operatorname{rowsum}(X): \quad \frac{\partial L}{\partial X} = \bar{Y} \mathbf{1}^{T}",
    lhs=gradient(RowSum(X_rc), G_row, X_rc),
    rhs=at(share(RowSum(X_rc), G_row, 0)),
    setting=setting_for(X_rc),
    mutants={
        "mean-rule": ("dX = Ȳ 1ᵀ / c (the mean's rule)", at(G_row / c)),
        "column-broadcast": ("Ȳ broadcast along the column (index Ȳ_f)", G_row.base[f]),
    },
)

rowmean = index_claim(
    "ad.rowmean",
    "Vector-Jacobian product of a row mean",
    G_SOURCE,
    r"Y = \operatorname{mean}(X): \quad \frac{\partial L}{\partial X} = \frac{1}{c} \bar{Y} \mathbf{1}^{T}",
    lhs=gradient(RowMean(X_rc), G_row, X_rc),
    rhs=at(share(RowMean(X_rc), G_row, 0)),
    setting=setting_for(X_rc),
    mutants={
        "sum-rule": ("dX = Ȳ 1ᵀ (the 1/c dropped)", at(G_row)),
        "rows-not-columns": ("divided by the row count r", at(G_row / r)),
    },
)

G_col = upstream((1, c))
colsum = index_claim(
    "ad.colsum",
    "Vector-Jacobian product of a sum over the rows (a parameter's gradient)",
    G_SOURCE,
    r"Y = \sum_{\text{rows}} X: \quad \frac{\partial L}{\partial X} = \mathbf{1} \bar{Y}",
    lhs=gradient(ColSum(X_rc), G_col, X_rc),
    rhs=at(share(ColSum(X_rc), G_col, 0)),
    setting=setting_for(X_rc),
    mutants={
        "mean-rule": ("dX = 1 Ȳ / r (a mean over the rows)", at(G_col / r)),
        "row-broadcast": ("Ȳ broadcast along the row (index Ȳ_e)", G_col.base[e]),
    },
)

# ------------------------------------------------------------------------------- contraction
P, Q = Array("P", (r, k)), Array("Q", (r, c))
G_ct = upstream((k, c))
PQ = Contract(P, Q)
contract = index_claim(
    "ad.contract",
    "Vector-Jacobian product of a contraction over the rows (Σ_rows Pᵀ Q)",
    G_SOURCE,
    r"Y = \sum_{\text{rows}} P^{T} Q: \quad \frac{\partial L}{\partial P} = Q \bar{Y}^{T}, \quad "
    r"\frac{\partial L}{\partial Q} = P \bar{Y}",
    lhs=gradient(PQ, G_ct, P),
    rhs=at(share(PQ, G_ct, 0)),
    setting=setting_for(P),
    mutants={
        "no-transpose": ("dP = Q Ȳ (index Ȳ_pf for Ȳ_fp)", sp.Sum(Q.base[e, p] * G_ct.base[p, f], (p, 0, c - 1))),
        "mean-over-rows": ("dP = Q Ȳᵀ / r (averaged over the rows)", at(share(PQ, G_ct, 0)) / r),
    },
)
contract_q = index_claim(
    "ad.contract.other",
    "Vector-Jacobian product of a contraction: the second operand",
    G_SOURCE,
    r"Y = \sum_{\text{rows}} P^{T} Q: \quad \frac{\partial L}{\partial Q} = P \bar{Y}",
    lhs=gradient(PQ, G_ct, Q),
    rhs=at(share(PQ, G_ct, 1)),
    setting=setting_for(Q),
    mutants={
        "transposed": ("dQ = P Ȳᵀ order (index Ȳ_fp for Ȳ_pf)", sp.Sum(P.base[e, p] * G_ct.base[f, p], (p, 0, k - 1)))
    },
)


# ------------------------------------------------------------------------------- elementwise
class dphi(sp.Function):
    """φ′ (arbitrary)."""


class phi(sp.Function):
    """An arbitrary differentiable elementwise function (SymPy sees only φ and φ′)."""

    def fdiff(self, argindex=1):
        return dphi(self.args[0])


G_full = upstream((r, c))


def element_share(expr, operand, batched=_all_batched):
    return dict(elementwise_vjp(expr, G_full, batched))[operand]


Y_el = phi(X_rc) * X_rc
elementwise = index_claim(
    "ad.elementwise",
    "Vector-Jacobian product of an elementwise expression: Ȳ ⊙ ∂f/∂X by sp.diff",
    G_SOURCE,
    r"Y = f(X) \text{ elementwise}: \quad \frac{\partial L}{\partial X} = \bar{Y} \odot f'(X), \quad "
    r"f(x) = x \varphi(x)",
    lhs=gradient(Y_el, G_full, X_rc),
    rhs=at(element_share(Y_el, X_rc)),
    setting=setting_for(X_rc),
    mutants={
        "no-chain": ("Ȳ ⊙ φ′(X) (the product rule's φ(X) term dropped)", at(G_full * dphi(X_rc))),
        "no-upstream": ("f′(X) without Ȳ", at(phi(X_rc) + X_rc * dphi(X_rc))),
    },
)

# (r, 1) and (1, c) operands broadcast along the row and over the rows: their adjoints sum back
a_col, b_row = Array("a", (r, 1)), Array("b", (1, c))
Y_bc = phi(X_rc * a_col + b_row)
no_axes = lambda e_: e_ != b_row  # noqa: E731 - b has no leading axes (a bias, a gain)
da_lhs, db_lhs = gradient(Y_bc, G_full, a_col).subs(f, 0), gradient(Y_bc, G_full, b_row).subs(e, 0)
broadcast = rule_claim(
    "ad.broadcast",
    "Vector-Jacobian product through broadcasting: (r, 1) and (1, c) operands sum back",
    r"Y = \varphi(X \odot a + b), \; a \in \mathbb{R}^{r \times 1}, \; b \in \mathbb{R}^{1 \times c}: \quad "
    r"\frac{\partial L}{\partial a} = \operatorname{rowsum}\left(\bar{Y} \odot \varphi' \odot X\right), \quad "
    r"\frac{\partial L}{\partial b} = \sum_{\text{rows}} \bar{Y} \odot \varphi'",
    parts=[
        (
            Setting(sizes={r: 2, c: 3}, indices={e: (0, r - 1)}),
            da_lhs,
            entry(element_share(Y_bc, a_col, no_axes), (e, 0)),
        ),
        (
            Setting(sizes={r: 2, c: 3}, indices={f: (0, c - 1)}),
            db_lhs,
            entry(element_share(Y_bc, b_row, no_axes), (0, f)),
        ),
    ],
    mutants={
        "no-rowsum": (
            "da not summed along the row (one column's share)",
            [(0, da_lhs, entry(G_full * dphi(X_rc * a_col + b_row) * X_rc, (e, 0)))],
        ),
        "no-colsum": (
            "db not summed over the rows (one row's share)",
            [(1, db_lhs, entry(G_full * dphi(X_rc * a_col + b_row), (0, f)))],
        ),
    },
)

# ------------------------------------------------------------------------------- the row max
# A shift m (any per-row number, here an independent array M) subtracted where the result does
# not depend on it gets a zero adjoint: the stable softmax and the log-sum-exp. The row max's
# index form is such a number (arrays.RowMax), so the shift's term can be dropped, as
# derivations/language/autodiff.py does once it has proved the same for the op at hand.
M = Array("M", (r, 1), latex="m")
shifted = sp.exp(X_rc - M)
softmax_shifted = shifted / RowSum(shifted)
lse_shifted = M + sp.log(RowSum(shifted))
G_lse = upstream((r, 1))
rowmax_setting = Setting(sizes={r: 2, c: 3}, indices={e: (0, r - 1)})
d_softmax = gradient(softmax_shifted, G_full, M).subs(f, 0)
d_lse = gradient(lse_shifted, G_lse, M).subs(f, 0)
rowmax = rule_claim(
    "ad.rowmax",
    "The row max carries no gradient: a shift the result does not depend on has adjoint 0",
    r"\frac{\partial}{\partial m} \sum \bar{Y} \odot \frac{e^{X - m \mathbf{1}^{T}}}{\operatorname{rowsum}\left("
    r"e^{X - m \mathbf{1}^{T}}\right)} = 0, \quad \frac{\partial}{\partial m} \sum \bar{Y} \odot \left(m + "
    r"\log \operatorname{rowsum}\left(e^{X - m \mathbf{1}^{T}}\right)\right) = 0 \quad \text{for any } m",
    parts=[(rowmax_setting, d_softmax, sp.Integer(0)), (rowmax_setting, d_lse, sp.Integer(0))],
    mutants={
        "numerator-only": (
            "the shift in the numerator only: e^{X − m} / rowsum(e^{X}) has a gradient",
            [(0, gradient(shifted / RowSum(sp.exp(X_rc)), G_full, M).subs(f, 0), sp.Integer(0))],
        ),
        "lse-not-added-back": (
            "log rowsum(e^{X − m}) without m added back has a gradient",
            [(1, gradient(sp.log(RowSum(shifted)), G_lse, M).subs(f, 0), sp.Integer(0))],
        ),
    },
    source="softmax shift invariance (seed B §4); FlashAttention's log-sum-exp",
)

# ------------------------------------------------------------------------------- the causal mask
n = size("n")
S = Array("S", (n, n))
G_sq = upstream((n, n))
H = sp.IndexedBase("H", real=True)


def _vanishing(row, col):
    """An adjoint that is 0 above the diagonal: H_ij for j ≤ i (as A ⊙ (…) is, A masked)."""
    return sp.Piecewise((H[row, col], sp.Le(col, row)), (0, True))


L_mask = sp.Sum(G_sq.base[i, j] * entry(CausalMask(S), (i, j)), (i, 0, n - 1), (j, 0, n - 1))
L_mask_vanishing = sp.Sum(_vanishing(i, j) * entry(CausalMask(S), (i, j)), (i, 0, n - 1), (j, 0, n - 1))
mask_setting = Setting(sizes={n: 3}, indices={e: (0, n - 1), f: (0, n - 1)})
causal_mask = index_claim(
    "ad.causal_mask",
    "Vector-Jacobian product of the causal mask: the masked entries get nothing",
    "seed B §5; reverse-mode differentiation",
    r"Y = \operatorname{mask}(S): \quad \frac{\partial L}{\partial S_{ij}} = [j \leq i] \, \bar{Y}_{ij}, "
    r"\quad = \bar{Y}_{ij} \text{ when } \bar{Y}_{ij} = 0 \text{ for } j > i",
    lhs=[sp.diff(L_mask, S.base[e, f]), sp.diff(L_mask_vanishing, S.base[e, f])],
    rhs=[sp.Piecewise((G_sq.base[e, f], sp.Le(f, e)), (0, True)), _vanishing(e, f)],
    setting=mask_setting,
    mutants={
        "future-passes": ("the adjoint passed above the diagonal too: dS = Ȳ", [G_sq.base[e, f], _vanishing(e, f)]),
        "mask-transposed": (
            "[i ≤ j] instead of [j ≤ i]",
            [sp.Piecewise((G_sq.base[e, f], sp.Le(e, f)), (0, True)), _vanishing(e, f)],
        ),
    },
)

# ------------------------------------------------------------------------------- σ and Φ
# The derivation differentiates σ(u) and Φ(u) by their nodes' own `fdiff` (σ(1 − σ), φ); these
# claims check those against sp.diff of the documents' formulas 1/(1 + e^{−u}), (1 + erf(u/√2))/2.
sigmoid = index_claim(
    "ad.sigmoid",
    "Vector-Jacobian product of the sigmoid: σ′ = σ(1 − σ)",
    "seed B §13",
    r"Y = \sigma(X): \quad \frac{\partial L}{\partial X} = \bar{Y} \odot \sigma(X) \odot \left(1 - \sigma(X)\right)",
    lhs=gradient(Sigmoid(X_rc), G_full, X_rc),
    rhs=at(element_share(Sigmoid(X_rc), X_rc)),
    setting=setting_for(X_rc),
    mutants={
        "no-one-minus": ("Ȳ ⊙ σ(X)", at(G_full * Sigmoid(X_rc))),
        "plus": ("Ȳ ⊙ σ(X)(1 + σ(X))", at(G_full * Sigmoid(X_rc) * (1 + Sigmoid(X_rc)))),
    },
)
assert derivative(Sigmoid(X_rc), X_rc) == Sigmoid(X_rc) * (1 - Sigmoid(X_rc))

normal_cdf = index_claim(
    "ad.normal_cdf",
    "Vector-Jacobian product of the normal CDF: Φ′ = φ",
    "seed B §12",
    r"Y = \Phi(X): \quad \frac{\partial L}{\partial X} = \bar{Y} \odot \frac{e^{-X^{2}/2}}{\sqrt{2 \pi}}",
    lhs=gradient(NormalCDF(X_rc), G_full, X_rc),
    rhs=at(element_share(NormalCDF(X_rc), X_rc)),
    setting=setting_for(X_rc),
    mutants={
        "unnormalised": ("Ȳ ⊙ e^{−X²/2} (the 1/√(2π) dropped)", at(G_full * sp.exp(-(X_rc**2) / 2))),
        "cdf-for-pdf": ("Ȳ ⊙ Φ(X)", at(G_full * NormalCDF(X_rc))),
    },
)

# ------------------------------------------------------------------------------- gathers
t_ = size("T")
ids = Array("ids", (t_, 1), integer=True, latex=r"\mathrm{ids}")
E_tab = Array("E", (V, c))
G_g = upstream((t_, c))
gather_setting = Setting(
    sizes={t_: 4, V: 3, c: 2}, indices={e: (0, V - 1), f: (0, c - 1)}, integer_arrays={"ids": (0, V - 1)}
)
gather = index_claim(
    "ad.gather",
    "Vector-Jacobian product of a row gather (embedding): repeated ids accumulate",
    "seed B §1",
    r"Y = E[\mathrm{ids}]: \quad \frac{\partial L}{\partial E} = \operatorname{onehot}(\mathrm{ids})^{T} \bar{Y}",
    lhs=gradient(Gather(E_tab, ids), G_g, E_tab),
    rhs=at(share(Gather(E_tab, ids), G_g, 0, lambda x: x != E_tab)),
    setting=gather_setting,
    mutants={
        "last-wins": (
            "only the first token with the id counted (no accumulation)",
            G_g.base[0, f] * sp.KroneckerDelta(ids.base[0], e),
        ),
        "no-transpose": (
            "onehot(ids) Ȳ (index δ(ids_e, p) for δ(ids_p, e))",
            sp.Sum(sp.KroneckerDelta(ids.base[e], p) * G_g.base[p, f], (p, 0, t_ - 1)),
        ),
    },
)

Z = Array("Z", (t_, c))
G_take = upstream((t_, 1))
take_setting = Setting(sizes={t_: 3, c: 4}, indices={e: (0, t_ - 1), f: (0, c - 1)}, integer_arrays={"ids": (0, c - 1)})
take = index_claim(
    "ad.take",
    "Vector-Jacobian product of picking one entry per row (the target's logit)",
    "seed B §18",
    r"Y_{i} = Z_{i, \mathrm{ids}_{i}}: \quad \frac{\partial L}{\partial Z} = "
    r"\bar{Y} \odot \operatorname{onehot}(\mathrm{ids})",
    lhs=gradient(Take(Z, ids), G_take, Z),
    rhs=at(share(Take(Z, ids), G_take, 0)),
    setting=take_setting,
    mutants={
        "no-onehot": ("Ȳ broadcast to every entry of the row", G_take.base[e]),
        "other-row": ("the id of the next row", G_take.base[e] * sp.KroneckerDelta(ids.base[e + 1], f)),
    },
)

CLAIMS: list[Claim] = [
    matmul,
    transpose,
    rowsum,
    rowmean,
    colsum,
    contract,
    contract_q,
    elementwise,
    broadcast,
    rowmax,
    causal_mask,
    sigmoid,
    normal_cdf,
    gather,
    take,
]
