"""Output logits, next-token probabilities and the cross-entropy loss (seed B §16–§18).

Seed B §16: Logits = H W_vocab + b ∈ ℝ^{T×V} (here V is the vocabulary size, not the value
matrix of §2). §17: P(token_i) = e^{logit_i} / Σ_j e^{logit_j}, greedy token = argmax_i P.
§18: L = −Σ_i y_i log p_i = −log p_correct.

The `cross_entropy` op computes the per-token loss with the log-sum-exp trick and the mean over
the tokens that count (a 0/1 `mask`, which is how `ignore_index` reaches the kernel), and its
backward is the proven `dz = dloss · mask ⊙ (softmax(z) − onehot(t)) / Σ mask`.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, ColSum, MatMul, OneHot, RowMax, RowSum, Take, entry, index, shape_of, size
from .language.ops import Op, grad_of
from .proof import numeric
from .proof.core import Claim, Mutant, Proof, Setting, index_claim, prove_index_identity, refute_identity
from .softmax import softmax_math, softmax_stable

T, V, d = size("T"), size("V"), size("d")  # tokens, vocabulary, hidden width
i, j, a, b, k = (index(s) for s in "ijabk")

SOURCE_CE = "seed B §18"
SOURCE_LOGITS = "seed B §16–§17"

# ------------------------------------------------------------------------------- the op
Z = Array("logits", (T, V), latex="z")
TGT = Array("targets", (T, 1), integer=True, latex="t")
MASK = Array("mask", (T, 1), integer=True, latex="w")
MX = Array("row_max", (T, 1))
EXPS = Array("exps", (T, V))
SUMEXP = Array("sum_exps", (T, 1))
PROBS = Array("probs", (T, V))
ZT = Array("target_shifted", (T, 1))  # z_t − max: the target's logit against the row max
LOSSES = Array("losses", (T, 1))
LOSS = Array("loss", (1, 1), latex="L")
dLOSS = grad_of(LOSS)
dZ = grad_of(Z)


def mean_over_mask(per_token, mask):
    """Σ_i mask_i ℓ_i / Σ_i mask_i over every row (and leading axis): a (1, 1) array."""
    return ColSum(mask * per_token) / ColSum(mask)


def cross_entropy_vjp(dloss, probs, targets, mask, vocab):
    """∂L/∂z = dloss · mask ⊙ (p − onehot(t)) / Σ mask  (the proven backward)."""
    return dloss * mask * (probs - OneHot(targets, vocab)) / ColSum(mask)


# The document's loss (seed B §17–§18), in a scope of its own: p = softmax(z) per row,
# ℓ_i = −log p_{i, t_i} (= −Σ_j y_ij log p_ij for one-hot y, cross_entropy.onehot), and the mean
# of ℓ over the tokens that count, L = Σ_i w_i ℓ_i / Σ_i w_i with the 0/1 mask w. No max shift:
# the generated forward claim proves the printed max-shifted log-sum-exp equal to it.
P_S = Array("p", (T, V), latex="p")
ELL_S = Array("ell", (T, 1), latex=r"\ell")
W_S = MASK
CROSS_ENTROPY_SPEC = [
    Assign(P_S, sp.exp(Z) / RowSum(sp.exp(Z))),  # p_ij = e^{z_ij} / Σ_k e^{z_ik}
    Assign(ELL_S, -sp.log(Take(P_S, TGT))),  # ℓ_i = −log p_{i, t_i}
    Assign(LOSS, ColSum(W_S * ELL_S) / ColSum(W_S)),  # L = Σ_i w_i ℓ_i / Σ_i w_i
]

# The loss role's signature, shared by the registry's other losses (label_smoothing, z_loss):
# logits (T, V), integer targets and a 0/1 mask (T, 1) -> the (1, 1) mean over the mask; the
# specification's softmax line and masked mean are CROSS_ENTROPY_SPEC's first and last
LOSS_SIGNATURE = dict(
    inputs=[Z, TGT, MASK],
    integer_inputs=[TGT, MASK],
    outputs=[LOSS],
    optional_axes=1,  # logits (V,) with 0-D targets and mask: one row
    # V = 4 classes, targets over all of them, masks drawn 0/1 (a point with Σ w = 0 is skipped)
    check={"sizes": {"T": 3, "V": 4}, "integers": {"targets": (0, 3), "mask": (0, 1)}},
    role="loss",
)


def masked_mean_reference(per_row):
    """A loss op's PyTorch reference from its per-row losses `per_row(torch, z (N, V), t (N,),
    **options)`: their mean over the mask, shape (1,), as the op's kernel returns it."""

    def reference(torch, z, t, w, **options):
        weights = w.reshape(-1).to(z.dtype)
        rows = per_row(torch, z.reshape(-1, z.shape[-1]), t.long().reshape(-1), **options)
        return ((rows * weights).sum() / weights.sum()).reshape(1)

    return reference


CROSS_ENTROPY = Op(
    name="cross_entropy",
    module=__name__,
    title="Cross-entropy of logits against target ids (mean over a mask)",
    spec=CROSS_ENTROPY_SPEC,
    source="seed B §17, §18",
    mistakes={
        "max-not-added-back": (
            "log Σ exp(z − max) − z_t without the max added back",
            "forward",
            "losses",
            sp.log(SUMEXP) - Take(Z, TGT),
        ),
        "no-log": ("Σ exp(z − max) used without its log", "forward", "losses", MX + SUMEXP - Take(Z, TGT)),
        "max-subtracted": (
            "the max subtracted instead of added back",
            "forward",
            "losses",
            -MX + sp.log(SUMEXP) - Take(Z, TGT),
        ),
        "divide-by-T": (
            "the masked sum divided by T (ignored tokens counted in the mean)",
            "forward",
            "loss",
            ColSum(MASK * LOSSES) / T,
        ),
        "no-mask": ("ignored tokens' losses summed in", "forward", "loss", ColSum(LOSSES) / ColSum(MASK)),
        "probs-unnormalised": ("probs cached as exp(z − max) without the division", "forward", "probs", EXPS),
        "grad-sign-flip": (
            "y − p instead of p − y",
            "backward",
            "dlogits",
            dLOSS * MASK * (OneHot(TGT, V) - PROBS) / ColSum(MASK),
        ),
        "grad-no-mean": (
            "the 1/Σw of the mean forgotten",
            "backward",
            "dlogits",
            dLOSS * MASK * (PROBS - OneHot(TGT, V)),
        ),
        "grad-divide-by-T": (
            "divided by T instead of Σw",
            "backward",
            "dlogits",
            dLOSS * MASK * (PROBS - OneHot(TGT, V)) / T,
        ),
        "grad-no-mask": (
            "ignored tokens still receive gradient",
            "backward",
            "dlogits",
            dLOSS * (PROBS - OneHot(TGT, V)) / ColSum(MASK),
        ),
    },
    claims=[
        "cross_entropy.forward",
        "cross_entropy.onehot",
        "cross_entropy.grad",
        "cross_entropy.logsumexp",
        "cross_entropy.nonnegative",
        "cross_entropy.vjp",
    ],
    **LOSS_SIGNATURE,
    forward=[
        Assign(MX, RowMax(Z), note="each row shifted by its max: exp(z − m) ≤ 1 never overflows"),
        Assign(EXPS, sp.exp(Z - MX)),
        Assign(SUMEXP, RowSum(EXPS)),
        Assign(PROBS, EXPS / SUMEXP),
        # log Σ e^{z − m} − (z_t − m): both O(1)-accurate terms; the max is never added to the
        # O(1) log-sum (m + log Σ … rounds the log-sum away once |m| ≫ 1/ε)
        Assign(ZT, Take(Z, TGT) - MX, note="log-sum-exp: m cancels, never added to the O(1) log-sum"),
        Assign(LOSSES, sp.log(SUMEXP) - ZT),
        Assign(LOSS, mean_over_mask(LOSSES, MASK)),
    ],
    saved=[PROBS, TGT, MASK],
    backward=[Assign(dZ, cross_entropy_vjp(dLOSS, PROBS, TGT, MASK, V))],
    grads=[dZ],
    cache_doc="probs (softmax of the logits), targets, mask. The runtime builds mask = "
    "(targets != ignore_index) as 0/1 and replaces ignored targets by 0 (any valid id: "
    "their rows are multiplied by 0); Σ mask must be > 0.",
)
OPS = [CROSS_ENTROPY]

code = CROSS_ENTROPY.env()
setting = Setting(
    sizes={T: 3, V: 4, d: 2},
    indices={i: (0, T - 1), a: (0, T - 1), b: (0, V - 1), j: (0, V - 1), k: (0, V - 1)},
    integer_arrays={"targets": (0, V - 1), "mask": (0, 1)},
)
# the spot-check points (seeds 101, 202) happen to draw masks with Σ mask > 0, as the op needs

# document forms, one token row i
P_doc = softmax_math(Z)  # e^{z_ij} / Σ_j e^{z_ij}
p_ij = entry(P_doc, (i, j))
p_correct = entry(Take(P_doc, TGT), (i, 0))  # p_{i, t_i}
y_ij = entry(OneHot(TGT, V), (i, j))  # δ(t_i, j)


# ------------------------------------------------------------ cross_entropy: one-hot collapse
onehot = index_claim(
    "cross_entropy.onehot",
    "With one-hot targets the cross-entropy is −log p_correct",
    SOURCE_CE,
    r"L = -\sum_{j} y_{j} \log p_{j} = -\log p_{\mathrm{correct}}, \quad y_{j} = \delta_{j t}",
    lhs=-sp.Sum(y_ij * sp.log(p_ij), (j, 0, V - 1)),
    rhs=-sp.log(p_correct),
    setting=setting,
    mutants={
        "sign-dropped": ("the minus sign dropped: L = Σ y log p", sp.log(p_correct)),
        "all-classes": ("every class counted: L = −Σ_j log p_j", -sp.Sum(sp.log(p_ij), (j, 0, V - 1))),
    },
)

# ------------------------------------------------------------ cross_entropy: gradient p − y
ell_doc = -sp.log(p_correct)
grad = index_claim(
    "cross_entropy.grad",
    "Gradient of −log softmax(z)_t is p − y",
    SOURCE_CE,
    r"\frac{\partial}{\partial z_{j}} \left(-\log \mathrm{softmax}(z)_{t}\right) = p_{j} - y_{j}",
    lhs=sp.diff(ell_doc, Z.base[a, b]),
    rhs=sp.KroneckerDelta(i, a) * (entry(P_doc, (i, b)) - entry(OneHot(TGT, V), (i, b))),
    setting=setting,
    mutants={
        "sign-flip": (
            "y − p instead of p − y",
            sp.KroneckerDelta(i, a) * (entry(OneHot(TGT, V), (i, b)) - entry(P_doc, (i, b))),
        ),
        "no-target": ("the −y term dropped: ∂ = p", sp.KroneckerDelta(i, a) * entry(P_doc, (i, b))),
    },
)


# ------------------------------------------------------------ log-sum-exp = naive form
def _exp_equal(lhs, rhs, label) -> Proof:
    """lhs = rhs for real lhs, rhs, proved as exp(lhs) = exp(rhs) (exp is injective on ℝ):
    the normaliser does not rewrite logarithms, but it splits exp of a sum."""
    proof = prove_index_identity(sp.exp(lhs), sp.exp(rhs), setting, "index normaliser on exp of both sides")
    if proof.status == "proved-general":
        proof.method += f" ({label}); exp is injective on the reals, so the logs agree"
        proof.assumptions.append("both sides real (logits finite)")
    return proof


ell_code = entry(LOSSES, (i, 0), code)


def _prove_logsumexp() -> Proof:
    # the code's loss is −log p_correct, and z_t − m − log Σ e^{z−m} = log softmax(z)_t for every m
    first = _exp_equal(-ell_code, sp.log(p_correct), "code: log Σ e^{z−max} − (z_t − max)")
    if first.status != "proved-general":
        return first
    m = sp.IndexedBase("c", real=True)[i]  # an arbitrary real shift per row
    shifted = entry(Take(Z, TGT), (i, 0)) - m - sp.log(sp.Sum(sp.exp(Z.base[i, k] - m), (k, 0, V - 1)))
    second = _exp_equal(shifted, sp.log(p_correct), "any shift c")
    if second.status != "proved-general":
        return second
    first.assumptions += [x for x in second.assumptions if x not in first.assumptions]
    first.assumptions.append(
        "the row max used by the code is an arbitrary real per row: the identity holds for any shift"
    )
    first.method += "; and for an arbitrary shift c: z_t − c − log Σ e^{z − c} = log softmax(z)_t"
    return first


def _refute_lse(wrong) -> dict | None:
    return refute_identity(wrong, ell_doc, setting)


logsumexp = Claim(
    id="cross_entropy.logsumexp",
    title="The stable log-sum-exp loss equals −log softmax(z)_t",
    source=SOURCE_CE,
    latex=r"z_{t} - m - \log \sum_{j} e^{z_{j} - m} = \log \mathrm{softmax}(z)_{t} \quad \text{for any } m, "
    r"\text{ in particular } m = \max_{j} z_{j}",
    prove=_prove_logsumexp,
    mutants=[
        Mutant(
            "max-not-added-back",
            "log Σ exp(z − max) without the max added back",
            lambda: _refute_lse(entry(sp.log(SUMEXP) - Take(Z, TGT), (i, 0), code)),
        ),
        Mutant(
            "no-log",
            "Σ exp(z − max) used without its log",
            lambda: _refute_lse(entry(MX + SUMEXP - Take(Z, TGT), (i, 0), code)),
        ),
    ],
)


# ------------------------------------------------------------ L ≥ 0
def _prove_nonnegative() -> Proof:
    # 1. the row sum splits into the correct class and the rest: Σ_j e^{z_j} = e^{z_t} + R
    rest = sp.Sum((1 - sp.KroneckerDelta(j, TGT.base[i])) * sp.exp(Z.base[i, j]), (j, 0, V - 1))
    correct = sp.exp(Z.base[i, TGT.base[i]])
    # both identities through the gate (goal targets_i ∈ [0, V − 1] from the setting, spot-check)
    split = prove_index_identity(sp.Sum(sp.exp(Z.base[i, j]), (j, 0, V - 1)), correct + rest, setting)
    # 2. −log p_t = −log(a / (a + R)) with a = e^{z_t} > 0, R ≥ 0 (each term (1 − δ)·e^z ≥ 0)
    A, R = sp.Symbol("a", positive=True), sp.Symbol("R", nonnegative=True)
    hidden = {correct: A, rest: R}
    p_split = correct / (correct + rest)
    same_p = prove_index_identity(p_correct, p_split, setting)
    assumptions = list(dict.fromkeys(split.assumptions + same_p.assumptions))
    ell = (-sp.log(p_split)).xreplace(hidden)  # −log(a/(a + R))
    rewritten = sp.log(1 + R / A)  # = log(1 + R/a)
    same = sp.cancel(sp.exp(-ell) * sp.exp(rewritten) - 1) == 0  # exp(−ell)·exp(rewritten) = 1
    if (
        split.status != "proved-general"
        or same_p.status != "proved-general"
        or not same
        or rewritten.is_nonnegative is not True
    ):
        return Proof(
            "unproven",
            "sign argument",
            assumptions,
            sp.sstr([split.residual, same_p.residual, same, rewritten.is_nonnegative]),
        )
    return Proof(
        "proved-general",
        "normaliser: Σ_j e^{z_j} = e^{z_t} + R with R = Σ_j (1 − δ_jt) e^{z_j} ≥ 0; then "
        "−log p_t = log(1 + R/e^{z_t}) (checked through exp) and SymPy's assumptions decide "
        "log(1 + x) ≥ 0 for x ≥ 0. The masked mean Σ w_i ℓ_i / Σ w_i with w_i ∈ {0, 1}, Σ w > 0 is "
        "then a weighted average of non-negative numbers",
        assumptions + ["logits finite", "w_i ∈ {0, 1}, Σ_i w_i > 0"],
        "0",
    )


def _refute_nonnegative(expr) -> dict | None:
    """A counterexample to `expr ≥ 0`: a point where it is negative."""
    for seed in range(12):
        point = setting.point(seed)
        value = numeric.evaluate(expr, point)
        if value < 0:
            return {"at": point.report(), "seed": seed, "value": float(value)}
    return None


nonnegative = Claim(
    id="cross_entropy.nonnegative",
    title="Cross-entropy is non-negative",
    source=SOURCE_CE,
    latex=r"-\log p_{t} = \log\left(1 + \frac{\sum_{j \neq t} e^{z_{j}}}{e^{z_{t}}}\right) \geq 0",
    prove=_prove_nonnegative,
    mutants=[
        Mutant(
            "sign-dropped",
            "L = log p_correct (minus sign dropped) claimed ≥ 0",
            lambda: _refute_nonnegative(sp.log(p_correct)),
        ),
        Mutant(
            "max-not-added-back",
            "the stable loss without the max added back claimed ≥ 0",
            lambda: _refute_nonnegative(entry(sp.log(SUMEXP) - Take(Z, TGT), (i, 0), code)),
        ),
    ],
)

# ------------------------------------------------------------ the op's backward
loss_code = entry(LOSS, (0, 0), code)
vjp_lhs = dLOSS.base[0] * sp.diff(loss_code, Z.base[a, b])


def _mutant_backward(expr):
    return entry(expr, (a, b), code)


vjp = index_claim(
    "cross_entropy.vjp",
    "Cross-entropy backward (masked mean) as generated",
    SOURCE_CE,
    r"\frac{\partial L}{\partial z_{ij}} = \frac{w_{i}\left(p_{ij} - y_{ij}\right)}{\sum_{i'} w_{i'}}, "
    r"\quad L = \frac{\sum_{i} w_{i} \ell_{i}}{\sum_{i} w_{i}}",
    lhs=vjp_lhs,
    rhs=entry(dZ, (a, b), code),
    setting=setting,
    mutants={
        "sign-flip": (
            "y − p instead of p − y",
            _mutant_backward(dLOSS * MASK * (OneHot(TGT, V) - PROBS) / ColSum(MASK)),
        ),
        "no-mean": ("the 1/Σw of the mean forgotten", _mutant_backward(dLOSS * MASK * (PROBS - OneHot(TGT, V)))),
        "divide-by-T": (
            "divided by T instead of Σw (ignored tokens counted in the mean)",
            _mutant_backward(dLOSS * MASK * (PROBS - OneHot(TGT, V)) / T),
        ),
        "no-mask": (
            "ignored tokens still receive gradient",
            _mutant_backward(dLOSS * (PROBS - OneHot(TGT, V)) / ColSum(MASK)),
        ),
    },
    method="index normaliser (symbolic T, V); the row max is held constant in the derivative, "
    "which is exact because the loss does not depend on it (cross_entropy.logsumexp)",
)

# ------------------------------------------------------------------- logits.softmax
H = Array("h", (T, d))
W_vocab = Array("w_vocab", (d, V))
B_vocab = Array("b_vocab", (1, V))
LOGITS_A = Array("z", (T, V))
logits_env = {LOGITS_A: MatMul(H, W_vocab) + B_vocab}  # z = H W + b (the linear op)
P_A = softmax_stable(LOGITS_A)  # what the runtime computes for sampling


def _logit_doc(row, col):
    """Seed B §16 in index form: logit_ij = Σ_m H_im W_mj + b_j."""
    m = sp.Dummy("m", integer=True)
    return sp.Sum(H.base[row, m] * W_vocab.base[m, col], (m, 0, d - 1)) + B_vocab.base[col]


def _prob_doc(row, col):
    """Seed B §17: P(token_j) = e^{logit_j} / Σ_k e^{logit_k}."""
    kk = sp.Dummy("k", integer=True)
    return sp.exp(_logit_doc(row, col)) / sp.Sum(sp.exp(_logit_doc(row, kk)), (kk, 0, V - 1))


def _prove_logits_forward() -> Proof:
    shape = shape_of(softmax_stable(logits_env[LOGITS_A]))
    if shape != (T, V):
        return Proof("unproven", "shape", residual=str(shape))
    proof = prove_index_identity(entry(P_A, (i, j), logits_env), _prob_doc(i, j), setting)
    proof.method += f"; shape of softmax(HW + b) computed by the array language: {shape}"
    return proof


def _column_softmax(row, col):
    kk = sp.Dummy("k", integer=True)
    return sp.exp(_logit_doc(row, col)) / sp.Sum(sp.exp(_logit_doc(kk, col)), (kk, 0, T - 1))


logits_forward = Claim(
    id="logits.softmax.forward",
    title="Next-token probabilities P = softmax(HW + b), shape T × V",
    source=SOURCE_LOGITS,
    latex=r"P = \mathrm{softmax}(H W_{\mathrm{vocab}} + b) \in \mathbb{R}^{T \times V}, \quad "
    r"P_{ij} = \frac{e^{\mathrm{logit}_{ij}}}{\sum_{k} e^{\mathrm{logit}_{ik}}}",
    prove=_prove_logits_forward,
    mutants=[
        Mutant(
            "column-softmax",
            "normalised over the tokens (column) instead of the vocabulary (row)",
            lambda: refute_identity(entry(P_A, (i, j), logits_env), _column_softmax(i, j), setting),
        ),
        Mutant(
            "bias-after-softmax",
            "bias added after the softmax",
            lambda: refute_identity(
                entry(P_A, (i, j), logits_env), entry(softmax_math(MatMul(H, W_vocab)) + B_vocab, (i, j)), setting
            ),
        ),
    ],
)

ratio_lhs = entry(P_A, (i, a), logits_env) / entry(P_A, (i, b), logits_env)
ratio_rhs = sp.exp(entry(LOGITS_A, (i, a), logits_env) - entry(LOGITS_A, (i, b), logits_env))


def _prove_argmax() -> Proof:
    proof = prove_index_identity(ratio_lhs, ratio_rhs, setting)
    if proof.status != "proved-general":
        return proof
    x = sp.Symbol("x", real=True)
    where = sp.solveset(sp.exp(x) > 1, x, sp.S.Reals)
    if where != sp.Interval.open(0, sp.oo):
        return Proof("unproven", "monotonicity of exp", residual=str(where))
    proof.method += (
        "; P_ia / P_ib = e^{z_ia − z_ib} and solveset: e^x > 1 ⇔ x ∈ (0, ∞), so with P_ib > 0 "
        "(softmax.normalised) P_ia > P_ib ⇔ z_ia > z_ib: softmax is strictly increasing per row "
        "and argmax_j P_ij = argmax_j z_ij (ties included)"
    )
    proof.spot_check = dict(proof.spot_check, greedy=_greedy_numbers())
    return proof


def _greedy_numbers() -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    z = rng.standard_normal((64, 50)) * 3
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return {"rows": 64, "V": 50, "argmax agree": int((p.argmax(1) == z.argmax(1)).sum())}


argmax = Claim(
    id="logits.softmax.argmax",
    title="Greedy decoding: argmax of P is argmax of the logits",
    source="seed B §17",
    latex=r"\frac{P_{ia}}{P_{ib}} = e^{z_{ia} - z_{ib}}, \quad z_{ia} > z_{ib} \Leftrightarrow P_{ia} > P_{ib}, "
    r"\quad \arg\max_{j} P_{ij} = \arg\max_{j} z_{ij}",
    prove=_prove_argmax,
    mutants=[
        Mutant(
            "ratio-of-logits",
            "p_a / p_b = z_a / z_b",
            lambda: refute_identity(
                ratio_lhs, entry(LOGITS_A, (i, a), logits_env) / entry(LOGITS_A, (i, b), logits_env), setting
            ),
        ),
        Mutant(
            "column-argmax",
            "probabilities normalised over the column, so the ratio is not e^{z_a − z_b}",
            lambda: refute_identity(_column_softmax(i, a) / _column_softmax(i, b), ratio_rhs, setting),
        ),
    ],
)

# claim-id prefixes besides this module's ops, tables and steps: the logits (the tied output projection) feed the loss
TOPICS = ("logits",)

CLAIMS: list[Claim] = [onehot, grad, logsumexp, nonnegative, vjp, logits_forward, argmax]
