"""Seed B's sections on the embedding, the norms, RoPE, the logits and Adam: read with the
catalogue's names (E, token_ids, V the vocabulary size where a size is written, γ a gain,
LayerNorm, RMSNorm, RoPE with pos, ω_i and the angle θ, Adam's m_t, v_t, m̂_t, v̂_t), each true
statement proved against the catalogue, each wrong variant never proved, and what stays outside
the grammar refused with its reason. The fixture is a copy of the seed's sections (tests/fixtures/check/seed_b_sections.txt)."""

from pathlib import Path

import pytest
import sympy as sp

from qed.tools.check import check_file, check_text

FIX = Path(__file__).parent / "fixtures" / "check"


@pytest.fixture(scope="module")
def sections():
    return check_file(FIX / "seed_b_sections.txt")


def at(report, line):
    (v,) = [v for v in report.verdicts if v.line == line]
    return v


def test_every_section_is_read_and_nothing_is_refuted(sections):
    assert sections.counts == {"proved": 7, "refuted": 0, "not understood": 0, "definition": 12, "notation": 0}
    assert sections.display == 19 and sections.display_not_understood == 0


@pytest.mark.parametrize(
    "line, verdict, reason",
    [
        (8, "definition", "defines X ∈ ℝ^{n×d_model}"),  # X = E[token_ids]: a lookup of E's rows
        (18, "definition", "declares E ∈ ℝ^{V_vocab×d_model}"),  # V, where a size is written
        (37, "proved", "agrees with LayerNorm as the catalogue defines it"),  # γx̂ + β
        (51, "proved", "agrees with RMSNorm as the catalogue defines it"),
        (68, "definition", "defines Q' ∈ ℝ^{n×d_k}"),  # RoPE(Q)
        (77, "definition", "defines Logits ∈ ℝ^{T×V_vocab}"),
        (87, "definition", "agrees with its definition"),  # Logits ∈ ℝ^{T×V}
        (96, "proved", "agrees with the recurrence of m as the catalogue states it"),
        (100, "proved", "agrees with the recurrence of v as the catalogue states it"),
        (104, "proved", "agrees with m̂ as the catalogue defines it"),  # bias correction
        (106, "proved", "agrees with v̂ as the catalogue defines it"),
        (110, "definition", "defines θ by a recurrence"),  # Adam's θ_t: not RoPE's angle θ (bare)
        (60, "definition", "defines x' by its pairs (2i, 2i+1), i = 0 … n/2 - 1"),  # the RoPE rotation
        (64, "proved", "agrees with θ as the catalogue defines it"),  # θ = pos·ω_i
    ],
)
def test_the_sections_verdicts(sections, line, verdict, reason):
    v = at(sections, line)
    assert v.verdict == verdict and reason in v.reason, (v.step, v.verdict, v.reason)
    if verdict == "proved":
        assert v.scope.startswith("all sizes")


# ------------------------------------------------------------------------------ heads, ≈, P(token_i), argmax
HEADS_AND_TOKENS = r"""Seed B §3, §6, §12 and §17 as the seed writes them.

Attention(Q,K,V) = softmax \left( \frac{QK^T}{\sqrt{d_k}} \right)V

For each head:

head_i = Attention(Q_i,K_i,V_i)

The heads are concatenated:

H = Concat(head_1,head_2,\ldots,head_h)

A commonly used approximation is:

GELU(x) \approx \frac{x}{2} \left[ 1+ \tanh \left( \sqrt{\frac{2}{\pi}} (x+0.044715x^3) \right) \right]

The logits are converted into probabilities using softmax:

P(token_i) = \frac{e^{logit_i}} {\sum_j e^{logit_j}}

The token with the highest probability can be selected using greedy decoding:

token = \arg\max_i P(token_i)
"""


def test_the_heads_the_approximation_and_the_greedy_token_of_seed_b():
    """§6: head_i a family of arrays (Q_i the i-th head's queries); the concatenation of a list
    written with \\ldots stays refused. §12: GELU's tanh form is an approximation, notation with
    its gap, never proved. §17: P on the i-th token is entry i of the softmax of the convention's
    logit (derivations/loss.py's P(token_j)), and the greedy token an index, never unfolded."""
    from qed.tools.check import check_document

    report = check_document(HEADS_AND_TOKENS, "text")
    verdicts = {v.line: v for v in report.verdicts}
    assert [verdicts[k].verdict for k in (7, 11, 15, 19, 23)] == [
        "definition",
        "not understood",
        "notation",
        "definition",
        "definition",
    ]
    assert verdicts[7].defines == "head" and "the i-th of families of arrays shaped like Q, K, V" in verdicts[7].reason
    assert "Concat" in verdicts[11].reason
    assert "agree within 2.3e-04" in verdicts[15].reason
    assert verdicts[19].defines == "P" and verdicts[23].defines == "token"
    # the probabilities of the tokens sum to 1 (read back through P), and no more than 1
    for claim, verdict in ((r"\sum_i P(token_i) = 1", "proved"), (r"\sum_i P(token_i) = 1 + P(token_1)", "refuted")):
        v = check_document(HEADS_AND_TOKENS + "\n" + claim + "\n", "text").verdicts[-1]
        assert v.verdict == verdict, (claim, v.verdict, v.reason)


# ------------------------------------------------------------------------------ wrong variants
LN = "$$\n\\mu = \\frac{1}{n} \\sum_{i=1}^{n}x_i\n$$\n\n$$\n\\sigma^2 = \\frac{1}{n} \\sum_{i=1}^{n}(x_i-\\mu)^2\n$$\n\n$$\n\\hat{x} = \\frac{x-\\mu} {\\sqrt{\\sigma^2+\\epsilon}}\n$$\n\n"
RMS = "$$\nRMS(x) = \\sqrt{ \\frac{1}{n} \\sum_{i=1}^{n}x_i^2 +\\epsilon }\n$$\n\n"


@pytest.mark.parametrize(
    "doc, why",
    [
        (LN + "$$\nLayerNorm(x) = \\gamma\\hat{x}\n$$\n", "redefines LayerNorm: differs"),  # β dropped
        (LN + "$$\nLayerNorm(x) = \\gamma\\hat{x}-\\beta\n$$\n", "redefines LayerNorm: differs"),  # a sign
        (LN.replace("+\\epsilon", "") + "$$\nLayerNorm(x) = \\gamma\\hat{x}+\\beta\n$$\n", "redefines LayerNorm"),
        (RMS + "$$\nRMSNorm(x) = \\frac{x}{RMS(x)}\n$$\n", "redefines RMSNorm: differs"),  # γ dropped
        ("$$\nm_t = \\beta_1m_{t-1} + \\beta_1 g_t\n$$\n", "redefines m: differs"),  # 1 − β₁ written β₁
        ("$$\nv_t = \\beta_2v_{t-1} + (1-\\beta_2)g_t\n$$\n", "redefines v: differs"),  # g_t not squared
        ("$$\nm_t = \\beta_1m_{t-1} + (1-\\beta_1)g_{t-1}\n$$\n", "redefines m: differs"),  # a wrong index
    ],
)
def test_a_wrong_restatement_is_never_proved(doc, why):
    v = check_text(doc)[-1]
    assert v.verdict == "definition" and why in v.reason, (v.verdict, v.reason)
    if "differs" in why:
        cx = v.counterexample
        assert cx is not None and cx["lhs"] != cx["rhs"]


@pytest.mark.parametrize(
    "step",
    [
        r"\hat{m}_t = \frac{m_t}{1-\beta_1^{t-1}}",  # the exponent off by one
        r"\hat{m}_t = \frac{m_t}{1-\beta_2^t}",  # the other β
        r"\hat{v}_t = \frac{v_t}{1+\beta_2^t}",  # a sign
        r"\hat{m}_t = m_t",  # the correction dropped
    ],
)
def test_a_wrong_bias_correction_is_never_proved(step):
    (v,) = check_text(step)
    assert v.verdict != "proved", v.reason


def test_the_conventions_adam_is_the_catalogues():
    """The LaTeX of the convention (context.CONVENTION_DEFINITIONS), read by the front end,
    equals derivations/optim.py's update rules: moments and bias correction."""
    from derivations.optim import adam_bias_correction, adam_moments
    from qed.tools.check.builtins import default_context

    ctx = default_context()
    d = {label: ctx.definition(label) for label in ("m", "v", "mhat", "vhat")}
    g, m, v, b1, b2 = sp.symbols("g m v beta1 beta2", real=True)
    step = sp.Symbol("T", positive=True, integer=True)  # the document's t (counted from 1)
    (t,) = d["m"].vars
    beta1, beta2 = sp.Symbol("β_1", real=True), sp.Symbol("β_2", real=True)
    reads = {
        sp.IndexedBase("m", real=True)[t - 1]: m,
        sp.IndexedBase("v", real=True)[t - 1]: v,
        sp.IndexedBase("g", real=True)[t]: g,
        beta1: b1,
        beta2: b2,
    }
    want_m, want_v = adam_moments(g, m, v, b1, b2)
    assert sp.simplify(d["m"].expr.xreplace(reads) - want_m) == 0
    assert sp.simplify(d["v"].expr.xreplace(reads) - want_v) == 0
    now = {
        sp.IndexedBase("m", real=True)[t]: m,
        sp.IndexedBase("v", real=True)[t]: v,
        beta1: b1,
        beta2: b2,
        t: step - 1,
    }
    want_mhat, want_vhat = adam_bias_correction(m, v, step, b1, b2)
    assert sp.simplify(d["mhat"].expr.xreplace(now) - want_mhat) == 0
    assert sp.simplify(d["vhat"].expr.xreplace(now) - want_vhat) == 0


# ------------------------------------------------------------------------------ the readings stay one
@pytest.mark.parametrize(
    "text, why",
    [
        (r"x \gamma = x", "two row vectors side by side"),  # a gain only before what it scales
        (
            "$\\mathbf{g} \\in \\mathbb{R}^{d}$, $\\mathbf{h} \\in \\mathbb{R}^{d}$\n\n$$\nz = g h\n$$\n",
            "two row vectors side by side",
        ),  # vectors the document declares are never gains
        (r"Y = W_Q[token\_ids]", "sizes d_model and V_vocab differ"),  # a lookup of rows that are not ids'
        (r"Z = token\_ids + 1", "outside a lookup"),  # ids are integers, read only through E[ids]
        (r"y = E[x]", "read as a lookup only around token ids"),  # never a product, nor an expectation
        (r"E[x_i y_i] = E[x_i] y_i", "read as a lookup only around token ids"),  # E[·] without \mathbb
        # only the vocabulary's V doubles as a size; Q, once the document used it, is the queries
        ("$$\n(\\mathbf{Q}^T)^T = \\mathbf{Q}\n$$\n\n$F \\in \\mathbb{R}^{Q \\times d}$\n", "used as a size"),
    ],
)
def test_the_new_readings_are_refused_where_they_do_not_apply(text, why):
    import re

    v = check_text(text)[-1]
    assert v.verdict == "not understood" and re.search(why, v.reason), (v.verdict, v.reason)


def test_a_name_of_the_convention_the_document_never_used_is_the_documents():
    # m is Adam's moment by default; a document that declares m a size, or declares v a vector,
    # gets its own meaning (and none of Adam's)
    doc = "```qed\nsize m\nmatrix W: m x m\n```\n\n$$\n(\\mathbf{W}^T)^T = \\mathbf{W}\n$$\n"
    (v,) = check_text(doc)
    assert v.verdict == "proved"
    doc = "$\\mathbf{v} \\in \\mathbb{R}^{d}$ and\n\n$$\nv_t = 2 v_t - v_t\n$$\n"
    decl, step = check_text(doc)
    assert decl.verdict == "definition" and "declares v" in decl.reason
    assert step.verdict == "proved" and "recurrence" not in step.reason
    (v,) = check_text(r"v = XW_V")  # Adam's v, never used: the document's own, no redefinition
    assert v.verdict == "definition" and v.reason.startswith("defines v") and v.counterexample is None


def test_the_sources_page_lists_every_display_formula_with_its_verdict():
    """docs/sources.md's `qed check` section (qed/tools/docs.py `render_checked`): the counts and
    one row per display step, each with one of the five verdicts."""
    from qed.tools.docs import render_checked

    report = check_file(FIX / "seed_b_sections.txt")
    lines = render_checked({"seed_b_sections.txt": report})
    rows = [ln for ln in lines if ln.startswith("| ") and ln.count("|") >= 5 and not ln.startswith("| line")]
    steps = [
        ln
        for ln in rows
        if ln.split("|")[3].strip() in ("proved", "refuted", "not understood", "definition", "notation")
    ]
    assert len(steps) == sum(1 for v in report.verdicts if v.display) > 10
    total = report.display
    assert any(f"{total - report.display_not_understood} of {total}" in ln for ln in rows)
