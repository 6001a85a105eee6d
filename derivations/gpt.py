"""The GPT: the sources' whole flow, declared once as a program over the registry's ops.

Seed B's flow, tokens → embedding → blocks → logits → softmax → cross-entropy →
backpropagation → AdamW → updated weights, with the options a qed GPT takes:

    pos            learned (a second embedding, added) | sinusoidal (a constant table, added)
                   | rope (q and k of every head rotated)
    norm_position  pre  (GPT-2):      x = x + attn(ln_1(x));  x = x + mlp(ln_2(x));  …; ln_f
                   post (seed B §10): x = ln_1(x + attn(x));  x = ln_2(x + mlp(x))
    ffn            activation: mlp(x) = c_proj(f(c_fc(x)))  |  op: mlp(x) = the MLP op's own
    dropout        off | on: x = drop(embedding), the attention weights dropped (attention_dropout),
                   each branch drop(attn(…)), drop(mlp(…)) before its scale and add (nanoGPT's
                   transformer.drop, attn_dropout, resid_dropout); the masks are inputs
    bias, tie_weights, norm, attention: read by the role's call (linear or linear_nobias; the
                   norm op's parameters; lm_head ≡ wte when tied)

`GPT` is the declaration (derivations/language/program.py); codegen prints it with its derived
backward (the composition rule, `program.reverse`) and AdamW's step as
generated/<backend>/gpt.py. What makes the printed program right:

* the declaration is the sources' flow (`gpt.flow`): read as a term, every op an opaque function
  of its inputs and its parameters, it equals the flow written from seed B's statements in every
  option combination — for every kernel and every size;
* every node's own rule: the op claims (linear.dX, layernorm.dx, attention.dQ, …), proved for
  symbolic sizes;
* the composition rule, proved here for symbolic sizes: a chain of maps (`gpt.chain`, the
  induction step over blocks: the backward of blocks l+1…n gives ∂L/∂x_{l+1}, block l's
  backward then gives ∂L/∂x_l; `gpt.depth`, the induction with the block's frame checked), a
  value read twice (residual.backward, residual.prenorm, residual.postnorm), a parameter read
  twice (`gpt.tied`), the head split and merge as index
  maps (mha.concat), the batch's slices weighted by their scored tokens (`gpt.slices`);
* the printed text itself, executed by the program judge (qed/tools/judge_program.py):
  exactly, over a prime field, with every op replaced by a polynomial stand-in whose backward
  is its exact transpose, against this declaration interpreted directly (the forward, the
  loss's derivative in a random direction, the AdamW step with decay on exactly the parameters
  of `decay_min_axes` or more axes), at 2 layers (and 1 and 3), 3 heads, T = 5, in option
  combinations covering every pair (all 768 in the slow test).
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, index, size
from .language.program import Program, Section, stmt
from .proof.core import Claim, Mutant, Proof, Setting, counterexample, index_claim
from .residual import dphi, dpsi, phi, psi

OPTIONS = {
    "pos": ("learned", "sinusoidal", "rope"),
    "norm_position": ("pre", "post"),
    "ffn_kind": ("activation", "op"),
    "qk_norm": ("off", "on"),
    "residual_scale": ("off", "on"),
    "dropout": ("off", "on"),
    "score_transform": ("off", "on"),
}
QK = {"qk_norm": "on"}
LS, NO_LS = {"residual_scale": "on"}, {"residual_scale": "off"}
PRE, POST = {"norm_position": "pre"}, {"norm_position": "post"}
DROP, NO_DROP = {"dropout": "on"}, {"dropout": "off"}
ST, NO_ST = {"score_transform": "on"}, {"score_transform": "off"}

EMBED = Section(
    "embed",
    inputs=("ids", "pos"),
    outputs=("x",),
    body=(
        stmt("embedding", "tok", "ids", scope="wte", note="x_t = W_E[id_t]  (seed B §1)"),
        stmt("embedding", "wpe", "pos", scope="wpe", when={"pos": "learned"}, note="p_t = W_P[t]"),
        stmt("add", "x0", "tok", "wpe", when={"pos": "learned"}, note="x_t = W_E[id_t] + W_P[t]"),
        stmt("add_table", "x0", "tok", when={"pos": "sinusoidal"}, note="x_t = W_E[id_t] + PE_t  (seed A §5)"),
        stmt("same", "x0", "tok", when={"pos": "rope"}, note="x_t = W_E[id_t]  (positions enter q and k)"),
        stmt("dropout", "x", "x0", when=DROP, note="x = dropout(x_0)  (nanoGPT's transformer.drop)"),
        stmt("same", "x", "x0", when=NO_DROP),
    ),
)

BLOCK = Section(
    "block",
    inputs=("x",),
    outputs=("y",),
    body=(
        # attention sublayer: pre-norm normalises its input, post-norm its residual sum
        stmt("norm", "a_in", "x", scope="ln_1", when=PRE, note="a_in = LN_1(x)"),
        stmt("same", "a_in", "x", when=POST, note="a_in = x"),
        stmt("linear", "qkv", "a_in", scope="attn.c_attn", note="[Q K V] = a_in W_QKVᵀ + b  (fused)"),
        stmt("split3", ("q", "k", "v"), "qkv", note="Q, K, V: the three column blocks"),
        stmt("heads", "qh", "q", note="head i of Q: columns i·d … i·d + d − 1  (mha.concat)"),
        stmt("heads", "kh", "k"),
        stmt("heads", "vh", "v"),
        stmt("norm", "qn", "qh", scope="attn.q_norm", which="qk_norm", when=QK, note="q ← Norm(q) per head (QK-norm)"),
        stmt("norm", "kn", "kh", scope="attn.k_norm", which="qk_norm", when=QK, note="k ← Norm(k) per head"),
        stmt("same", "qn", "qh", when={"qk_norm": "off"}),
        stmt("same", "kn", "kh", when={"qk_norm": "off"}),
        stmt("rope", "qr", "qn", when={"pos": "rope"}, note="q_t ← R(t·ω) q_t  (seed B §15)"),
        stmt("rope", "kr", "kn", when={"pos": "rope"}, note="k_t ← R(t·ω) k_t"),
        stmt("same", "qr", "qn", when={"pos": ("learned", "sinusoidal")}),
        stmt("same", "kr", "kn", when={"pos": ("learned", "sinusoidal")}),
        stmt(
            "attention",
            "att_h",
            "qr",
            "kr",
            "vh",
            when={**NO_DROP, **NO_ST},
            note="head_i = softmax(Q_i K_iᵀ/√d + M) V_i  (causal)",
        ),
        stmt(
            "attention_dropout",
            "att_h",
            "qr",
            "kr",
            "vh",
            when={**DROP, **NO_ST},
            note="head_i = (softmax(Q_i K_iᵀ/√d + M) ⊙ D/(1 − p)) V_i  (causal)",
        ),
        # a score transform acts inside the softmax: attention in its two halves, the op between
        stmt("scores", "sc", "qr", "kr", when=ST, note="S_i = Q_i K_iᵀ/√d"),
        stmt("score_transform", "sc_t", "sc", when=ST, note="S_i ← f(S_i)  (the score transform: soft-capping, …)"),
        stmt("attend", "att_h", "sc_t", "vh", when=ST, note="head_i = softmax(f(S_i) + M) V_i  (causal)"),
        stmt("merge", "om", "att_h", note="Concat(head_1, …, head_h)"),
        stmt("linear", "att", "om", scope="attn.c_proj", note="MultiHead = Concat(…) W_Oᵀ + b"),
        stmt("dropout", "att_d", "att", when=DROP, note="dropout(MultiHead(…))  (nanoGPT's attn.resid_dropout)"),
        stmt("same", "att_d", "att", when=NO_DROP),
        stmt("scale", "att_s", "att_d", scope="ls_1", when=LS, note="γ_1 ⊙ MultiHead(…)  (LayerScale)"),
        stmt("same", "att_s", "att_d", when=NO_LS),
        stmt("add", "x1", "x", "att_s", when=PRE, note="x1 = x + MultiHead(LN_1(x))"),
        stmt("add", "s1", "x", "att_s", when=POST, note="s1 = x + MultiHead(x)"),
        stmt("norm", "x1", "s1", scope="ln_1", when=POST, note="x1 = LN_1(x + MultiHead(x))"),
        # MLP sublayer
        stmt("norm", "m_in", "x1", scope="ln_2", when=PRE, note="m_in = LN_2(x1)"),
        stmt("same", "m_in", "x1", when=POST, note="m_in = x1"),
        stmt("linear", "f", "m_in", scope="mlp.c_fc", when={"ffn_kind": "activation"}, note="f = m_in W_1ᵀ + b_1"),
        stmt("activation", "g", "f", when={"ffn_kind": "activation"}, note="g = φ(f)"),
        stmt("linear", "m", "g", scope="mlp.c_proj", when={"ffn_kind": "activation"}, note="m = g W_2ᵀ + b_2"),
        stmt("mlp", "m", "m_in", scope="mlp", when={"ffn_kind": "op"}, note="m = FFN(m_in)  (one op: SwiGLU, …)"),
        stmt("dropout", "m_d", "m", when=DROP, note="dropout(FFN(…))  (nanoGPT's mlp.dropout)"),
        stmt("same", "m_d", "m", when=NO_DROP),
        stmt("scale", "m_s", "m_d", scope="ls_2", when=LS, note="γ_2 ⊙ FFN(…)  (LayerScale)"),
        stmt("same", "m_s", "m_d", when=NO_LS),
        stmt("add", "y", "x1", "m_s", when=PRE, note="y = x1 + FFN(LN_2(x1))"),
        stmt("add", "s2", "x1", "m_s", when=POST, note="s2 = x1 + FFN(x1)"),
        stmt("norm", "y", "s2", scope="ln_2", when=POST, note="y = LN_2(x1 + FFN(x1))"),
    ),
)

HEAD = Section(
    "head",
    inputs=("x", "targets"),
    outputs=("logits", "loss"),
    body=(
        stmt("norm", "xf", "x", scope="ln_f", when=PRE, note="x_f = LN_f(x)"),
        stmt("same", "xf", "x", when=POST, note="x_f = x  (every block ends with a norm)"),
        stmt("linear_nobias", "logits", "xf", scope="lm_head", note="logits = x_f W_Eᵀ  (tied: W_E)"),
        stmt(
            "loss",
            "loss",
            "logits",
            "targets",
            note="L = the loss op's mean over targets ≠ −1 (cross-entropy: −log softmax(z_t)[t])",
        ),
    ),
)

GPT = Program(
    name="gpt",
    title="GPT training step: forward, backward and AdamW",
    options=OPTIONS,
    embed=EMBED,
    block=BLOCK,
    head=HEAD,
    ties={"lm_head": ("tie_weights", "wte")},
    decay_min_axes=2,  # weight decay on the matrices (embeddings, linear weights): nanoGPT's rule
)
GPT.check()

PROGRAMS = [GPT]

# --------------------------------------------------------------------------- the composition rule
r, n = size("r"), size("n")
i, j, e, f, a_, b_, u_, v_ = (index(s) for s in ("i", "j", "e", "f", "a", "b", "u", "v"))


# φ (block l's map) and ψ (the rest of the network): arbitrary differentiable functions, SymPy
# seeing only them and their derivatives (derivations/residual.py's stand-ins)
phi1, dphi1, phi2, dphi2 = phi, dphi, psi, dpsi

x = Array("x", (r, n))
w1, w2 = Array("w1", (n, n)), Array("w2", (n, n))
g = Array("g", (r, n))  # ∂L/∂(output of the rest)
chain_setting = Setting(sizes={r: 2, n: 2}, indices={e: (0, r - 1), f: (0, n - 1)})


def _sum_rn(expr):
    return sp.Sum(expr, (i, 0, r - 1), (j, 0, n - 1))


# h = φ₁(x W₁) (block l), out = φ₂(h W₂) (blocks l+1…n and the head), L = ⟨g, out⟩
def _h(row, col):
    return phi1(sp.Sum(x.base[row, a_] * w1.base[a_, col], (a_, 0, n - 1)))


_hw2 = lambda row, col: sp.Sum(_h(row, u_) * w2.base[u_, col], (u_, 0, n - 1))  # noqa: E731
_loss = _sum_rn(g.base[i, j] * phi2(_hw2(i, j)))
# ∂L/∂h, the backward of the rest (φ₂′(h W₂) ⊙ g) W₂ᵀ: the induction hypothesis
_dh_entry = lambda row, col: sp.Sum(  # noqa: E731
    dphi2(_hw2(row, v_)) * g.base[row, v_] * w2.base[col, v_], (v_, 0, n - 1)
)
_xw1 = lambda row, col: sp.Sum(x.base[row, a_] * w1.base[a_, col], (a_, 0, n - 1))  # noqa: E731
# block l's backward applied to ∂L/∂h: dx = (φ₁′(x W₁) ⊙ dh) W₁ᵀ
_dx_chain = sp.Sum(dphi1(_xw1(e, b_)) * _dh_entry(e, b_) * w1.base[f, b_], (b_, 0, n - 1))

chain = index_claim(
    "gpt.chain",
    "Blocks compose: block l's backward of ∂L/∂x_{l+1} is ∂L/∂x_l",
    "seed B, complete flow (backpropagation)",
    r"x_{l+1} = B_{l}(x_{l}) \Rightarrow \frac{\partial L}{\partial x_{l}} = J_{B_{l}}^{T} "
    r"\frac{\partial L}{\partial x_{l+1}}",
    lhs=sp.diff(_loss, x.base[e, f]),
    rhs=_dx_chain,
    setting=chain_setting,
    mutants={
        "no-transpose": (
            "J_B instead of J_Bᵀ: W₁ not transposed",
            sp.Sum(dphi1(_xw1(e, b_)) * _dh_entry(e, b_) * w1.base[b_, f], (b_, 0, n - 1)),
        ),
        "order": (
            "the blocks' backwards applied in forward order: φ₁′ read at the rest's input",
            sp.Sum(dphi1(_hw2(e, b_)) * _dh_entry(e, b_) * w1.base[f, b_], (b_, 0, n - 1)),
        ),
    },
)

# A parameter read twice: the tied embedding E is the lookup table and the output projection.
#   L = ⟨G_x, E[ids]⟩ + ⟨G_z, H Eᵀ⟩  ⇒  ∂L/∂E = onehot(ids)ᵀ G_x + G_zᵀ H
t_, V_, d_ = size("T"), size("V"), size("d")
ids = Array("ids", (t_, 1), integer=True)
emb = Array("E", (V_, d_))
gx, gz, hh = Array("g_x", (t_, d_)), Array("g_z", (t_, V_)), Array("H", (t_, d_))
c_ = index("c")
tied_setting = Setting(
    sizes={t_: 4, V_: 3, d_: 2},
    indices={e: (0, V_ - 1), f: (0, d_ - 1)},
    integer_arrays={"ids": (0, V_ - 1)},
)
_tied_loss = sp.Sum(gx.base[i, j] * emb.base[ids.base[i], j], (i, 0, t_ - 1), (j, 0, d_ - 1)) + sp.Sum(
    gz.base[i, a_] * sp.Sum(hh.base[i, j] * emb.base[a_, j], (j, 0, d_ - 1)), (i, 0, t_ - 1), (a_, 0, V_ - 1)
)
_d_lookup = sp.Sum(sp.KroneckerDelta(ids.base[c_], e) * gx.base[c_, f], (c_, 0, t_ - 1))
_d_logits = sp.Sum(gz.base[c_, e] * hh.base[c_, f], (c_, 0, t_ - 1))
tied = index_claim(
    "gpt.tied",
    "Tied embedding: the lookup's and the logits' gradients add",
    "seed B §1, logits",
    r"L = L(E[\mathrm{ids}], H E^{T}) \Rightarrow \frac{\partial L}{\partial E} = "
    r"\mathrm{onehot}(\mathrm{ids})^{T} G_{x} + G_{z}^{T} H",
    lhs=sp.diff(_tied_loss, emb.base[e, f]),
    rhs=_d_lookup + _d_logits,
    setting=tied_setting,
    mutants={
        "overwritten": ("the logits' gradient overwrites the lookup's", _d_logits),
        "lookup-only": ("only the lookup's gradient kept", _d_lookup),
    },
)

# The batch cut into slices (threads, processes, ranks, micro-batches): slice s scores n_s of
# the N tokens, its loss is its own mean ℓ_s = S_s / n_s, its gradient is weighted by n_s / N.
n1, n2, S1, S2 = sp.symbols("n_1 n_2 S_1 S_2", positive=True)


def _slices() -> Proof:
    N = n1 + n2
    whole = (S1 + S2) / N  # the mean over all N scored tokens
    weighted = (n1 / N) * (S1 / n1) + (n2 / N) * (S2 / n2)
    residual = sp.simplify(weighted - whole)
    weights = sp.simplify(n1 / N + n2 / N - 1)
    if residual != 0 or weights != 0:
        return Proof("unproven", "residual not zero", residual=f"{residual}; {weights}")
    return Proof(
        "proved-general",
        "exact arithmetic on symbols: Σ_s (n_s/N)(S_s/n_s) − (Σ_s S_s)/N = 0 and Σ_s n_s/N = 1 (two "
        "slices; more by induction, merging two at a time)",
        ["n_s > 0 for every slice (the runtime does not cut a batch where a slice scores nothing)"],
    )


def _slice_mutant(weights):
    N = n1 + n2
    wrong = weights[0] * (S1 / n1) + weights[1] * (S2 / n2)
    return counterexample(wrong, (S1 + S2) / N, Setting(sizes={}, scalars={n1: 1, n2: 3, S1: 2, S2: 7}))


slices = Claim(
    id="gpt.slices",
    title="Slices of a batch: weighted by their scored tokens, their losses give the batch's mean",
    source="seed B, complete flow (the mean over the batch)",
    latex=r"\sum_{s} \frac{n_{s}}{N} \cdot \frac{1}{n_{s}} \sum_{t \in s} \ell_{t} = \frac{1}{N} \sum_{t} \ell_{t}, "
    r"\quad N = \sum_{s} n_{s}",
    prove=_slices,
    mutants=[
        Mutant("equal-weights", "every slice weighted 1/2", lambda: _slice_mutant((sp.Rational(1, 2),) * 2)),
        Mutant(
            "counted-twice",
            "slice 1 counted twice",
            lambda: _slice_mutant((2 * n1 / (n1 + n2), n2 / (n1 + n2))),
        ),
    ],
)


# Any depth: the printed loop runs the block's statements for layer = 0 … n_layer − 1 under the
# prefix h.<layer>., handing y on as the next x, and its backward runs them in reverse handing
# d_x on as the next d_y. By induction on the number of blocks above x_l, the adjoint reaching
# block l is ∂L/∂x_{l+1}: the base is the head's backward (∂L/∂x_n), the step gpt.chain. What the
# step needs of the loop is its frame: a block reads nothing but its input x and its own
# parameters, and hands on nothing but y.
def block_frame_problems(program=GPT) -> list[str]:
    """Why the block section is not a frame for the induction over depth (empty: it is)."""
    block = program.block
    out = []
    defined = set(block.inputs)
    for st in block.body:
        outside = [a for a in st.args if a not in defined]
        if outside:
            out.append(f"{st.kind} {st.out} reads {outside} from outside the block")
        if st.scope is not None and st.scope in program.ties:
            out.append(f"{st.kind} {st.out} reads the tied scope {st.scope!r}, shared across blocks")
        defined.update(st.out)
    if block.inputs != ("x",) or block.outputs != ("y",):
        out.append(f"the block maps {block.inputs} to {block.outputs}, not x to y")
    return out


def _depth() -> Proof:
    problems = block_frame_problems()
    if problems:
        return Proof("unproven", "the block is not a frame: " + "; ".join(problems))
    step = chain.prove()
    if step.status != "proved-general":
        return Proof(step.status, f"the step, gpt.chain: {step.method}", step.assumptions, step.residual)
    return Proof(
        "proved-general",
        "induction on the number of blocks above x_l: base the head's backward (∂L/∂x_n), step gpt.chain "
        "(proved for symbolic sizes); the block's frame checked (it reads only its input x and its own "
        "parameters under h.<l>., hands on only y)",
        [
            "the principle of induction on l = n_layer … 0",
            "one block's backward is the vector-Jacobian product of its forward: the per-op claims and the "
            "program judge (the printed block against the declaration, every option pair, 1, 2 and 3 layers)",
        ],
    )


def _frame_mutant(extra) -> dict | None:
    from dataclasses import replace

    wrong = replace(GPT, block=replace(GPT.block, body=GPT.block.body + (extra,)))
    problems = block_frame_problems(wrong)
    return {"frame": problems[0]} if problems else None


depth = Claim(
    id="gpt.depth",
    title="Any depth: the stack's backward hands each block ∂L/∂x_{l+1}",
    source="seed B, complete flow (N blocks)",
    latex=r"x_{l+1} = B_{l}(x_{l}),\ l = 0, \ldots, n - 1 \Rightarrow \frac{\partial L}{\partial x_{l}} = "
    r"J_{B_{l}}^{T} J_{B_{l+1}}^{T} \cdots J_{B_{n-1}}^{T} \frac{\partial L}{\partial x_{n}}",
    prove=_depth,
    mutants=[
        Mutant(
            "not-handed-on",
            "block l's backward started from ∂L/∂x_n instead of ∂L/∂x_{l+1}",
            lambda: counterexample(
                sp.diff(_loss, x.base[e, f]),
                sp.Sum(dphi1(_xw1(e, b_)) * g.base[e, b_] * w1.base[f, b_], (b_, 0, n - 1)),
                chain_setting,
            ),
        ),
        Mutant(
            "reads-outside",
            "a block that reads the token embedding (a value outside its frame)",
            lambda: _frame_mutant(stmt("add", "y2", "y", "tok")),
        ),
        Mutant(
            "shares-tied",
            "a block that reads the tied head's scope",
            lambda: _frame_mutant(stmt("linear_nobias", "z", "y", scope="lm_head")),
        ),
    ],
)


# --------------------------------------------------------------------------- the declaration is the flow
# Each op as an opaque function of its inputs and its parameters (one symbol per scope, so a tied
# matrix is the same symbol): the declaration, read this way, is a term; so is the sources' flow,
# written here from seed B's statements. Equal terms compute the same thing for every choice of
# kernels and every size; a residual dropped, a norm on the wrong path, q and k crossed or the
# head reading its own matrix when tied makes the terms differ.
_EMB, _LIN, _NORM, _ACT, _FFN = (sp.Function(n) for n in ("Emb", "Lin", "Norm", "Act", "FFN"))
_ATTN, _ROPE, _HEADS, _MERGE, _CE = (sp.Function(n) for n in ("Attn", "Rope", "Heads", "Merge", "CE"))
_QKV = tuple(sp.Function(n) for n in ("ColsQ", "ColsK", "ColsV"))  # the three column blocks
_QKNORM = sp.Function("QKNorm")  # the qk_norm op (may differ from the model's norm)
_SCALE = sp.Function("Scale")  # the residual scale op (LayerScale)
_DROP = sp.Function("Drop")  # dropout: a fresh keep mask at every call (its site is its argument)
_ATTN_DROP = sp.Function("AttnDrop")  # attention with dropout on its weights
_SCORES, _SCORE_T, _ATTEND = (sp.Function(n) for n in ("Scores", "ScoreT", "Attend"))  # attention's halves
_PE, _IDS, _POS, _TARGETS = sp.symbols("PE ids pos targets")


def _W(scope: str) -> sp.Symbol:
    """The parameters of a scope, one symbol ("W[h.l.ln_1]")."""
    return sp.Symbol(f"W[{scope}]")


# each statement kind as a term of its arguments `a` and its scope's parameters `w`
_TERM = {
    "embedding": lambda a, w: _EMB(a[0], w),
    "linear": lambda a, w: _LIN(a[0], w),
    "linear_nobias": lambda a, w: _LIN(a[0], w),
    "norm": lambda a, w: _NORM(a[0], w),
    "qk_norm": lambda a, w: _QKNORM(a[0], w),
    "activation": lambda a, w: _ACT(a[0]),
    "mlp": lambda a, w: _FFN(a[0], w),
    "scale": lambda a, w: _SCALE(a[0], w),
    "dropout": lambda a, w: _DROP(a[0]),
    "attention": lambda a, w: _ATTN(*a),
    "attention_dropout": lambda a, w: _ATTN_DROP(*a),
    "scores": lambda a, w: _SCORES(*a),
    "score_transform": lambda a, w: _SCORE_T(a[0]),
    "attend": lambda a, w: _ATTEND(*a),
    "rope": lambda a, w: _ROPE(a[0]),
    "add": lambda a, w: a[0] + a[1],
    "add_table": lambda a, w: a[0] + _PE,
    "same": lambda a, w: a[0],
    "heads": lambda a, w: _HEADS(a[0]),
    "merge": lambda a, w: _MERGE(a[0]),
    "loss": lambda a, w: _CE(a[0], a[1]),
}


def meaning(program, section, options: dict, env: dict, prefix: str = "") -> dict:
    """The section's values as terms: each statement's kind read as an opaque function."""
    from .language.program import guard_holds

    env = dict(env)
    for st in section.body:
        if not guard_holds(st.when, options):
            continue
        a = [env[v] for v in st.args]
        scope = st.scope
        if scope is not None:
            if scope in program.ties and options.get(program.ties[scope][0]):
                scope = program.ties[scope][1]
            else:
                scope = prefix + scope
        k = st.kind
        if k == "split3":
            env.update(zip(st.out, (f(a[0]) for f in _QKV)))
            continue
        term = _TERM["qk_norm" if k == "norm" and st.which == "qk_norm" else k]
        env[st.out[0]] = term(a, None if scope is None else _W(scope))
    return env


def flow(options: dict, x: sp.Expr, l: str = "h.l."):
    """Seed B's flow, written from its statements: (the embedding, one block of x, the head of x)."""
    rope = options["pos"] == "rope"
    scaled = options["residual_scale"] == "on"

    def drop(u):  # nanoGPT: transformer.drop on the embedding, resid_dropout on each branch
        return _DROP(u) if options["dropout"] == "on" else u

    if options["pos"] == "learned":
        x0 = _EMB(_IDS, _W("wte")) + _EMB(_POS, _W("wpe"))  # x_t = W_E[t] + W_P[t]
    elif options["pos"] == "sinusoidal":
        x0 = _EMB(_IDS, _W("wte")) + _PE  # seed A §5: x_t = W_E[t] + PE_t
    else:
        x0 = _EMB(_IDS, _W("wte"))  # positions rotate q and k (seed B §15)
    x0 = drop(x0)

    def mha(u):  # §6-7: Concat(head_1, …, head_h) W_O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
        qkv = _LIN(u, _W(l + "attn.c_attn"))
        q, k, v = (_HEADS(f(qkv)) for f in _QKV)
        if options["qk_norm"] == "on":  # QK-norm: each head's q and k normalised, own parameters
            q, k = _QKNORM(q, _W(l + "attn.q_norm")), _QKNORM(k, _W(l + "attn.k_norm"))
        if rope:
            q, k = _ROPE(q), _ROPE(k)
        if options["score_transform"] == "on":  # softmax(f(Q Kᵀ/√d) + M) V: f inside the softmax
            heads = _ATTEND(_SCORE_T(_SCORES(q, k)), v)
        else:
            heads = _ATTN_DROP(q, k, v) if options["dropout"] == "on" else _ATTN(q, k, v)  # attn_dropout on A
        out = drop(_LIN(_MERGE(heads), _W(l + "attn.c_proj")))
        return _SCALE(out, _W(l + "ls_1")) if scaled else out  # LayerScale: γ_1 ⊙ MultiHead

    def ffn(u):  # §11: W_2 φ(W_1 u + b_1) + b_2, or one MLP op (SwiGLU, …)
        if options["ffn_kind"] == "op":
            out = _FFN(u, _W(l + "mlp"))
        else:
            out = _LIN(_ACT(_LIN(u, _W(l + "mlp.c_fc"))), _W(l + "mlp.c_proj"))
        out = drop(out)
        return _SCALE(out, _W(l + "ls_2")) if scaled else out  # LayerScale: γ_2 ⊙ FFN

    def ln(name, u):
        return _NORM(u, _W(l + name))

    if options["norm_position"] == "pre":  # GPT-2: x1 = x + MHA(LN_1(x)); y = x1 + FFN(LN_2(x1))
        x1 = x + mha(ln("ln_1", x))
        y = x1 + ffn(ln("ln_2", x1))
        xf = _NORM(x, _W("ln_f"))
    else:  # §10: x1 = LN_1(x + MHA(x)); y = LN_2(x1 + FFN(x1)); no final norm
        x1 = ln("ln_1", x + mha(x))
        y = ln("ln_2", x1 + ffn(x1))
        xf = x
    head = _W("wte") if options["tie_weights"] else _W("lm_head")  # logits = x_f W_Eᵀ when tied
    logits = _LIN(xf, head)
    return x0, y, logits, _CE(logits, _TARGETS)


def flow_mismatch(program=GPT) -> dict | None:
    """The first option combination where the declaration's terms differ from the flow's, or None."""
    x = sp.Symbol("x")
    names = list(program.options) + ["tie_weights"]
    for values in _combinations(program):
        options = dict(zip(names, values))
        x0, y, logits, loss = flow(options, x)
        emb = meaning(program, program.embed, options, {"ids": _IDS, "pos": _POS})
        blk = meaning(program, program.block, options, {"x": x}, prefix="h.l.")
        hd = meaning(program, program.head, options, {"x": x, "targets": _TARGETS})
        for what, declared, stated in (
            ("embedding", emb.get("x"), x0),
            ("block", blk.get("y"), y),
            ("logits", hd.get("logits"), logits),
            ("loss", hd.get("loss"), loss),
        ):
            if declared is None or sp.expand(declared - stated) != 0:
                return {"options": options, "value": what, "declared": str(declared), "flow": str(stated)}
    return None


def _flow() -> Proof:
    cx = flow_mismatch()
    if cx is not None:
        return Proof("refuted", f"the declaration differs from the flow at {cx['value']}", counterexample=cx)
    n = len(list(_combinations(GPT)))
    return Proof(
        "proved-general",
        f"the declaration read as a term, each op an opaque function of its inputs and parameters, equals the "
        f"sources' flow term in each of the {n} option combinations (embedding, one block, logits, loss)",
        [
            "an op's kernel is a function of its inputs and its scope's parameters (what each op's own claims prove "
            "it computes); the terms are equal as terms, so for every kernel and every size",
        ],
    )


def _combinations(program):
    """Every combination of the program's options and tied weights (what `flow_mismatch` runs)."""
    import itertools

    return itertools.product(*program.options.values(), (True, False))


def _flow_mutant(section: str, index: int, **changes) -> dict | None:
    """The declaration with one statement changed: the flow check must find where it differs."""
    from dataclasses import replace

    sec = getattr(GPT, section)
    body = list(sec.body)
    body[index] = replace(body[index], **changes)
    return flow_mismatch(replace(GPT, **{section: replace(sec, body=tuple(body))}))


def _find(section: str, out: str, when: dict | None = None) -> int:
    sec = getattr(GPT, section)
    for k, st in enumerate(sec.body):
        if out in st.out and (when is None or dict(st.when) == {a: (b,) for a, b in when.items()}):
            return k
    raise KeyError(out)


flow_claim = Claim(
    id="gpt.flow",
    title="The declared GPT is the sources' flow: embedding, blocks, logits, loss",
    source="seed B, complete flow; §1, §6-7, §10-11, §15; seed A §5",
    latex=r"x^{(0)} = E[\mathrm{ids}] + P, \quad x^{(l+1)} = x' + \mathrm{FFN}(\mathrm{LN}_{2}(x')),\ "
    r"x' = x^{(l)} + \mathrm{MHA}(\mathrm{LN}_{1}(x^{(l)})), \quad L = \mathrm{CE}(\mathrm{LN}_{f}(x^{(n)}) E^{T})",
    prove=_flow,
    mutants=[
        Mutant(
            "residual-dropped",
            "x1 = MultiHead(LN_1(x)): the attention's residual dropped",
            lambda: _flow_mutant("block", _find("block", "x1", PRE), args=("att", "att")),
        ),
        Mutant(
            "qk-crossed",
            "attention of (k, q, v): queries and keys crossed",
            lambda: _flow_mutant("block", _find("block", "att_h"), args=("kr", "qr", "vh")),
        ),
        Mutant(
            "norm-after-add",
            "pre-norm's MLP input read before its norm (m_in = x1)",
            lambda: _flow_mutant("block", _find("block", "m_in", PRE), kind="same", scope=None),
        ),
        Mutant(
            "rope-on-v",
            "the rotation applied to k's slot from v",
            lambda: _flow_mutant("block", _find("block", "kr", {"pos": "rope"}), args=("vh",)),
        ),
        Mutant("untied", "the logits read lm_head even when tied", lambda: flow_mismatch(_untied())),
        Mutant(
            "embedding-not-dropped",
            "with dropout on, the embedding's output passed on as it is",
            lambda: _flow_mutant("embed", _find("embed", "x", DROP), kind="same"),
        ),
        Mutant(
            "dropout-after-scale",
            "the MLP branch's dropout applied to the residual stream x1 instead of FFN(…)",
            lambda: _flow_mutant("block", _find("block", "m_d", DROP), args=("x1",)),
        ),
        Mutant(
            "score-transform-skipped",
            "with a score transform, the softmax read the untransformed scores",
            lambda: _flow_mutant("block", _find("block", "att_h", ST), args=("sc", "vh")),
        ),
        Mutant(
            "scores-crossed",
            "the scores formed as K Qᵀ: queries and keys crossed in attention's first half",
            lambda: _flow_mutant("block", _find("block", "sc", ST), args=("kr", "qr")),
        ),
    ],
)


def _untied():
    from dataclasses import replace

    return replace(GPT, ties={})


CLAIMS: list[Claim] = [chain, tied, slices, depth, flow_claim]
