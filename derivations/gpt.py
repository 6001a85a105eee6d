"""The GPT: the sources' whole flow, declared once as a program over the registry's ops.

Seed B's flow, tokens → embedding → blocks → logits → softmax → cross-entropy →
backpropagation → AdamW → updated weights, with the options a qed GPT takes:

    pos            learned (a second embedding, added) | sinusoidal (a constant table, added)
                   | rope (q and k of every head rotated)
    norm_position  pre  (GPT-2):      x = x + attn(ln_1(x));  x = x + mlp(ln_2(x));  …; ln_f
                   post (seed B §10): x = ln_1(x + attn(x));  x = ln_2(x + mlp(x))
    ffn            activation: mlp(x) = c_proj(f(c_fc(x)))  |  op: mlp(x) = the MLP op's own
    bias, tie_weights, norm, attention: read by the role's call (linear or linear_nobias; the
                   norm op's parameters; lm_head ≡ wte when tied)

`GPT` is the declaration (derivations/language/program.py); codegen prints it with its derived
backward (the composition rule, `program.reverse`) and AdamW's step as
generated/<backend>/gpt.py. What makes the printed program right:

* every node's own rule: the op claims (linear.dX, layernorm.dx, attention.dQ, …), proved for
  symbolic sizes;
* the composition rule, proved here for symbolic sizes: a chain of maps (`gpt.chain`, the
  induction step over blocks: the backward of blocks l+1…n gives ∂L/∂x_{l+1}, block l's
  backward then gives ∂L/∂x_l), a value read twice (residual.backward, residual.prenorm,
  residual.postnorm), a parameter read twice (`gpt.tied`), the head split and merge as index
  maps (mha.concat), the batch's slices weighted by their scored tokens (`gpt.slices`);
* the printed text itself, executed by the judges (qed/tools/judge_program.py): exactly, on
  rationals, with every op replaced by a polynomial stand-in whose backward is its exact
  transpose, against this declaration interpreted directly (forward, the derivative of the
  loss in random directions, the AdamW step with decay on exactly the parameters of `decay_min_axes` or more axes), at 2 layers,
  3 heads, T = 5, in every option combination.
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
}
PRE, POST = {"norm_position": "pre"}, {"norm_position": "post"}

EMBED = Section(
    "embed",
    inputs=("ids", "pos"),
    outputs=("x",),
    body=(
        stmt("embedding", "tok", "ids", scope="wte", note="x_t = W_E[id_t]  (seed B §1)"),
        stmt("embedding", "wpe", "pos", scope="wpe", when={"pos": "learned"}, note="p_t = W_P[t]"),
        stmt("add", "x", "tok", "wpe", when={"pos": "learned"}, note="x_t = W_E[id_t] + W_P[t]"),
        stmt("add_table", "x", "tok", when={"pos": "sinusoidal"}, note="x_t = W_E[id_t] + PE_t  (seed A §5)"),
        stmt("same", "x", "tok", when={"pos": "rope"}, note="x_t = W_E[id_t]  (positions enter q and k)"),
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
        stmt("rope", "qr", "qh", when={"pos": "rope"}, note="q_t ← R(t·ω) q_t  (seed B §15)"),
        stmt("rope", "kr", "kh", when={"pos": "rope"}, note="k_t ← R(t·ω) k_t"),
        stmt("same", "qr", "qh", when={"pos": ("learned", "sinusoidal")}),
        stmt("same", "kr", "kh", when={"pos": ("learned", "sinusoidal")}),
        stmt("attention", "att_h", "qr", "kr", "vh", note="head_i = softmax(Q_i K_iᵀ/√d + M) V_i  (causal)"),
        stmt("merge", "om", "att_h", note="Concat(head_1, …, head_h)"),
        stmt("linear", "att", "om", scope="attn.c_proj", note="MultiHead = Concat(…) W_Oᵀ + b"),
        stmt("add", "x1", "x", "att", when=PRE, note="x1 = x + MultiHead(LN_1(x))"),
        stmt("add", "s1", "x", "att", when=POST, note="s1 = x + MultiHead(x)"),
        stmt("norm", "x1", "s1", scope="ln_1", when=POST, note="x1 = LN_1(x + MultiHead(x))"),
        # MLP sublayer
        stmt("norm", "m_in", "x1", scope="ln_2", when=PRE, note="m_in = LN_2(x1)"),
        stmt("same", "m_in", "x1", when=POST, note="m_in = x1"),
        stmt("linear", "f", "m_in", scope="mlp.c_fc", when={"ffn_kind": "activation"}, note="f = m_in W_1ᵀ + b_1"),
        stmt("activation", "g", "f", when={"ffn_kind": "activation"}, note="g = φ(f)"),
        stmt("linear", "m", "g", scope="mlp.c_proj", when={"ffn_kind": "activation"}, note="m = g W_2ᵀ + b_2"),
        stmt("mlp", "m", "m_in", scope="mlp", when={"ffn_kind": "op"}, note="m = FFN(m_in)  (one op: SwiGLU, …)"),
        stmt("add", "y", "x1", "m", when=PRE, note="y = x1 + FFN(LN_2(x1))"),
        stmt("add", "s2", "x1", "m", when=POST, note="s2 = x1 + FFN(x1)"),
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
            note="L = −(1/N) Σ_{t: target_t ≠ −1} log softmax(logits_t)[target_t]",
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
    latex=r"x_{l+1} = B_{l}(x_{l}),\ l = 0, \ldots, n - 1 \Rightarrow rac{\partial L}{\partial x_{l}} = "
    r"J_{B_{l}}^{T} J_{B_{l+1}}^{T} \cdots J_{B_{n-1}}^{T} rac{\partial L}{\partial x_{n}}",
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

CLAIMS: list[Claim] = [chain, tied, slices, depth]
