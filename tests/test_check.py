"""`qed check`: every step of a derivation gets one verdict; true steps of the sources are proved for
symbolic sizes, wrong ones refuted with a counterexample, and what the grammar cannot read in one
way is not understood — never a verdict. The documents are excerpts of the sources copied into
tests/fixtures/check/ (the tests do not read the shared folder)."""

import json
from pathlib import Path

import pytest

from qed.tools.check import check_document, check_file, check_text, main
from qed.tools.check.report import counterexample_text, line_of

FIX = Path(__file__).parent / "fixtures" / "check"


def one(text, context=None):
    (v,) = check_text(text, context=context)
    return v


def by_line(report):
    out = {}
    for v in report.verdicts:
        out.setdefault(v.line, []).append(v)
    return out


# ------------------------------------------------------------------------------ the sources
@pytest.fixture(scope="module")
def seed_a():
    return check_file(FIX / "seed_a_excerpt.txt")


@pytest.fixture(scope="module")
def seed_b():
    return check_file(FIX / "seed_b_excerpt.txt")


def test_seed_a_every_step_is_proved_or_a_definition(seed_a):
    c = seed_a.counts
    assert c["refuted"] == 0 and c["not understood"] == 0, [
        (v.line, v.step, v.reason) for v in seed_a.verdicts if v.verdict in ("refuted", "not understood")
    ]
    assert c["proved"] >= 35 and c["definition"] >= 15


@pytest.mark.parametrize(
    "fragment",
    [
        r"S_{ij} = \frac{1}{\sqrt{d_k}} \sum_{m=1}^{d_k} Q_{im} K_{jm}",  # §1.A, index form
        r"\mathrm{Var}(q \cdot k) = \sum_{i=1}^{d_k} \mathrm{Var}(q_i k_i)",  # §1.B, the variance law
        r"\sum_{i=1}^{d_k} \mathrm{Var}(q_i k_i) = d_k",
        r"\frac{d_k}{d_k} = 1",
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{V}} = \mathbf{A}^T",  # §6.A
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{A}} = \frac{\partial \mathcal{L}}{\partial \mathbf{O}} \mathbf{V}^T",
        r"\frac{\partial A_{ij}}{\partial S_{ik}} = A_{ij}(\delta_{jk} - A_{ik})",  # §6.C
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{S}} = \mathbf{A} \odot",
        r"\mathrm{d}\mathbf{S} = \frac{1}{\sqrt{d_k}}",  # §6.D
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{Q}} = \frac{1}{\sqrt{d_k}}",
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{K}} = \frac{1}{\sqrt{d_k}}",
    ],
)
def test_seed_a_derivation_steps_are_proved_for_symbolic_sizes(seed_a, fragment):
    found = [v for v in seed_a.verdicts if v.step.startswith(fragment)]
    assert found, fragment
    for v in found:
        assert v.verdict == "proved", (v.step, v.reason)
        assert v.scope.startswith("all sizes")


def test_seed_a_step_of_the_chain_rule_keeps_the_upstream_gradient_opaque(seed_a):
    (v,) = [v for v in seed_a.verdicts if v.step.startswith(r"\frac{\partial \mathcal{L}}{\partial \mathbf{Q}}")]
    assert "(local)" in v.reason
    assert any("through what is computed from Q: S" in a for a in v.assumptions)


def test_seed_a_definitions_and_assumptions(seed_a):
    defs = [v for v in seed_a.verdicts if v.verdict == "definition"]
    assert any(v.step.startswith(r"\mathbb{E}[q_i] = \mathbb{E}[k_i]") for v in defs)  # moments assumed
    assert any(v.defines == "x̂" for v in defs) and any(v.defines == "μ" for v in defs)


def test_seed_b_excerpt(seed_b):
    c = seed_b.counts
    assert c["refuted"] == 0
    lines = {v.step: v for v in seed_b.verdicts}
    for step in (
        r"softmax(x_i) = \frac{e^{x_i}} {\sum_j e^{x_j}}",
        r"\sum_i p_i = 1",
        r"GELU(x) = x\Phi(x)",
        r"\sigma(x) = \frac{1}{1+e^{-x}}",
        r"SiLU(x) = \frac{x}{1+e^{-x}}",
        r"d_k = \frac{768}{12}",
    ):
        assert lines[step].verdict == "proved", (step, lines[step].reason)
    assert lines[r"S = \frac{QK^T}{\sqrt{d_k}}"].verdict == "definition"  # S re-used: a redefinition
    assert "redefines S" in lines[r"S = \frac{QK^T}{\sqrt{d_k}}"].reason
    # γx̂: the convention's gain γ scales each feature; the catalogue's LayerNorm (γ, β, ε) agrees
    assert lines[r"LayerNorm(x) = \gamma\hat{x}+\beta"].verdict == "proved"
    assert "agrees with LayerNorm as the catalogue defines it" in lines[r"LayerNorm(x) = \gamma\hat{x}+\beta"].reason
    gelu = lines[r"GELU(x) ≈ \frac{x}{2} \left[ 1+ \tanh \left( \sqrt{\frac{2}{\pi}} (x+0.044715x^3) \right) \right]"]
    assert gelu.verdict == "notation" and "agree within" in gelu.reason  # an approximation: never proved
    assert c["notation"] == 6  # the flow lines and the approximation


# ------------------------------------------------------------------------------ wrong steps
WRONG_LINES = {9, 15, 21, 27, 33, 39, 45, 57, 65}


@pytest.fixture(scope="module")
def wrong():
    return check_file(FIX / "wrong_steps.md")


def test_every_deliberate_mistake_is_refuted_with_a_counterexample(wrong):
    refuted = {v.line for v in wrong.verdicts if v.verdict == "refuted"}
    assert refuted == WRONG_LINES
    for v in wrong.verdicts:
        if v.verdict == "refuted":
            cx = v.counterexample
            assert cx["lhs"] != cx["rhs"] and cx["at"], v.step
            assert all(isinstance(n, int) and n >= 1 for n in cx["at"].values())
    assert wrong.counts["not understood"] == 0
    # the true step of the variance chain is still proved
    assert [v.verdict for v in by_line(wrong)[57]] == ["proved", "refuted"]


@pytest.mark.parametrize(
    "wrong_step, right_step",
    [
        (
            r"\frac{\partial A_{ij}}{\partial S_{ik}} = A_{ij}(\delta_{jk} + A_{ik})",
            r"\frac{\partial A_{ij}}{\partial S_{ik}} = A_{ij}(\delta_{jk} - A_{ik})",
        ),
        (r"S_{ij} = \sum_{m=1}^{d_k} Q_{im} K_{jm}", r"S_{ij} = \frac{1}{\sqrt{d_k}}\sum_{m=1}^{d_k} Q_{im} K_{jm}"),
        (r"S_{ij} = \frac{1}{\sqrt{d_k}}\sum_{m=1}^{n} Q_{im} K_{jm}", None),  # the sum over the wrong size
        (r"\mathbf{Q}\mathbf{K}^T = \mathbf{K}\mathbf{Q}^T", r"(\mathbf{Q}\mathbf{K}^T)^T = \mathbf{K}\mathbf{Q}^T"),
        (
            r"\frac{\partial \mathcal{L}}{\partial \mathbf{S}} = \mathbf{A} \odot \frac{\partial \mathcal{L}}{\partial \mathbf{A}}",
            r"\frac{\partial \mathcal{L}}{\partial \mathbf{S}} = \mathbf{A} \odot \left(\frac{\partial \mathcal{L}}{\partial \mathbf{A}}"
            r" - \mathrm{rowsum}\left(\frac{\partial \mathcal{L}}{\partial \mathbf{O}} \odot \mathbf{O}\right)\mathbf{1}^T\right)",
        ),
        (r"\sum_{j=1}^{n} A_{ij} = n", r"\sum_{j} A_{ij} = 1"),
        (  # a rotation times its transpose, and times itself
            r"\begin{bmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta \end{bmatrix}"
            r"\begin{bmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta \end{bmatrix}"
            r" = \begin{bmatrix} 1 & 0 \\ 0 & 1 \end{bmatrix}",
            r"\begin{bmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta \end{bmatrix}"
            r"\begin{bmatrix} \cos\theta & \sin\theta \\ -\sin\theta & \cos\theta \end{bmatrix}"
            r" = \begin{bmatrix} 1 & 0 \\ 0 & 1 \end{bmatrix}",
        ),
        (  # the softmax Jacobian's symmetric form, and the same with one index moved
            r"A_{ij}(\delta_{jk} - A_{ik}) = A_{ik}(\delta_{jk} - A_{ik})",
            r"A_{ij}(\delta_{jk} - A_{ik}) = A_{ik}(\delta_{jk} - A_{ij})",
        ),
    ],
)
def test_a_mutant_is_refuted_and_its_original_proved(wrong_step, right_step):
    v = one(wrong_step)
    assert v.verdict == "refuted", v.reason
    assert "left =" in counterexample_text(v.counterexample)
    if right_step is not None:
        assert one(right_step).verdict == "proved"


def test_a_shape_mismatch_between_the_sides_is_refuted():
    v = one(
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{V}} = \left(\frac{\partial \mathcal{L}}{\partial \mathbf{O}}\right)^T \mathbf{A}"
    )
    assert v.verdict == "refuted" and "different shapes" in v.reason


# ------------------------------------------------------------------------------ what is refused
@pytest.mark.parametrize(
    "text, why",
    [
        (r"\sum_q A_{iq} = 1", "q is not a declared index"),  # an unbound summation index
        (r"y = softmax x", "without parentheses"),
        (r"pot + 1 = 2", "unknown word 'pot'"),  # a word is never a product p·o·t (pos is RoPE's position)
        (r"\mathbf{Q}\mathbf{K} = \mathbf{S}", "sizes d_k and n differ"),  # products are matrix products
        (r"\gamma \hat{x} = x", "unknown symbol x̂"),
        (r"x \gamma = x", "two row vectors side by side"),
        (r"\mathbf{A}^2 = \mathbf{A}", "power of a matrix"),
        (r"d_k^T = d_k", "transpose .* of a scalar"),
        (r"\mathbf{W}1 = \mathbf{W}_1", "lost subscript"),
        (r"\prod_{i=1}^{n} x_i = 1", r"\\prod"),
        (r"X \approx Y", "approximation"),
        (r"a \leq b", "equalities only"),
        (r"H = \mathrm{Concat}(h_1, \dots, h_h)", "unknown word 'Concat'"),
        (r"\frac{\partial \mathcal{L}}{\partial Z} = 0", "Z is not a declared"),
        (r"\mathbb{E}[x_i] = 0 \cdot x_i + \mathbb{E}[Q_{ij}]", "no stated distribution"),
        (r"\begin{aligned} a &= b \ c &= d \end{aligned}", "control space"),
        (r"\mathrm{Attention}(Q) = Q", None),  # a definition: not refused
    ],
)
def test_what_cannot_be_read_one_way_is_not_understood(text, why):
    v = check_text(text)[0]
    if why is None:
        assert v.verdict == "definition"
        return
    assert v.verdict == "not understood", (v.verdict, v.reason)
    import re

    assert re.search(why, v.reason), v.reason


def test_a_declared_vector_is_never_read_as_an_index():
    doc = "$\\mathbf{q} \\in \\mathbb{R}^{d_k}$ and\n\n$$\nO_{ij} = \\sum_{p=1}^{n} A_{iq} V_{qj}\n$$\n"
    decl, step = check_text(doc)
    assert decl.verdict == "definition"
    assert step.verdict == "not understood" and "q is declared here, not an index" in step.reason


def test_a_definition_that_is_not_understood_makes_later_uses_not_understood():
    doc = "$$\nZ = \\mathrm{Rotate}(Q)\n$$\n\n$$\n(Z^T)^T = Z\n$$\n"
    first, second = check_text(doc)
    assert first.verdict == second.verdict == "not understood"
    assert "Rotate" in second.reason


def test_an_input_whose_definition_failed_stays_arbitrary_but_is_never_a_counterexample():
    doc = (
        "$$\nX = E[ids]\n$$\n\n$$\nQ = XW_Q\n$$\n\n"
        "$$\n(\\mathbf{Q}^T)^T = \\mathbf{Q}\n$$\n\n$$\n\\mathbf{Q}\\mathbf{Q}^T = \\mathbf{Q}\\mathbf{K}^T\n$$\n"
    )
    v = check_text(doc)
    assert [x.verdict for x in v] == ["not understood", "definition", "proved", "not understood"]
    assert "no counterexample searched" in v[3].reason


# ------------------------------------------------------------------------------ contexts
def test_a_qed_block_declares_the_documents_names():
    doc = (
        "```qed\nmatrix W: m x m\nsize m\n```\n\n"
        "$$\n(\\mathbf{W}^T)^T = \\mathbf{W}\n$$\n\n$$\n\\mathbf{W}^T = \\mathbf{W}\n$$\n"
    )
    v = check_document(doc).verdicts
    assert [x.verdict for x in v] == ["proved", "refuted"]
    assert check_text(r"\mathbf{W}^T\mathbf{W} = \mathbf{W}^T\mathbf{W}", context={"W": "matrix n x d"})[0].verdict == (
        "proved"
    )


def test_a_function_of_q_k_v_given_one_argument_is_self_attention():
    """Attention(X), for a document's Attention(Q, K, V): Attention(XW_Q, XW_K, XW_V). The residual
    X + Attention(X) needs d_v = d_model: with the convention's W_V (d_model × d_v) it is not
    understood (the sizes differ), with a square W_V it is checked, and a swapped W_Q, W_K refuted."""
    attention = "$$Attention(Q,K,V) = softmax\\left(\\frac{QK^T}{\\sqrt{d_k}}\\right)V$$\n\n"
    residual = "$$X' = X + Attention(X)$$\n\n"
    written = "$$X' = X + softmax\\left(\\frac{X W_{a} (X W_{b})^T}{\\sqrt{d_k}}\\right) X W_V$$\n"
    v = check_document(attention + residual).verdicts
    assert v[1].verdict == "not understood" and "d_v" in v[1].reason
    square = "```qed\nmatrix W_V: d_model x d_model\n```\n\n"
    right = written.replace("W_{a}", "W_Q").replace("W_{b}", "W_K")
    wrong = written.replace("W_{a}", "W_K").replace("W_{b}", "W_Q")
    v = check_document(square + attention + residual + right).verdicts
    assert [x.verdict for x in v] == ["definition", "definition", "proved"]
    v = check_document(square + attention + residual + wrong).verdicts
    assert v[-1].verdict != "proved"


def test_gradient_descent_on_any_parameter_and_the_loss_of_the_correct_token():
    """The convention's W is any parameter of the model (the loss depends on it through the model,
    not written out): ∂L/∂W is the opaque gradient and W_new = W_old − η ∂L/∂W a definition; a
    claim about it is still decided. p_{correct} is the entry at the target's id."""
    doc = (
        "$$L = -\\log(p_{correct})$$\n\n"
        "$$W_{new} = W_{old} - \\eta \\frac{\\partial L}{\\partial W}$$\n\n"
        "$$W_{new} - W_{old} = -\\eta \\frac{\\partial L}{\\partial W}$$\n\n"
        "$$W_{new} - W_{old} = \\eta \\frac{\\partial L}{\\partial W}$$\n"
    )
    v = check_document(doc).verdicts
    assert [x.verdict for x in v] == ["definition", "definition", "proved", "refuted"]
    assert v[0].defines == "L" and v[1].defines == "W_new"


# ------------------------------------------------------------------------------ approximations
GELU_TANH = r"GELU(x) \approx \frac{x}{2} \left[ 1+ \tanh \left( \sqrt{\frac{2}{\pi}} (x+0.044715x^3) \right) \right]"


def test_an_approximation_is_compared_numerically_and_never_proved_from_numbers():
    """`a ≈ b`: notation when the sides agree within 1 % everywhere they are compared (GELU's tanh
    form: 2.3e-4), with the largest gap; proved only when the two sides are proved equal; and
    a wrong approximation is refused with the point where the sides differ most — never proved,
    never refuted (an approximation's regime is not stated)."""
    v = one(GELU_TANH)
    assert v.verdict == "notation" and "nothing is proved" in v.reason and "agree within 2.3e-04" in v.reason
    for wrong in (GELU_TANH.replace("0.044715", "0.44715"), GELU_TANH.replace(r"\frac{2}{\pi}", r"\frac{\pi}{2}")):
        v = one(wrong)
        assert v.verdict == "not understood" and "differ by 9." in v.reason, v.reason
        cx = v.counterexample
        assert cx["lhs"] != cx["rhs"] and set(cx["at"]) == {"x"}
    v = one(r"\sigma(x) \approx \frac{1}{1+e^{-x}}")  # an approximation that holds exactly
    assert v.verdict == "proved" and v.reason.startswith("an approximation (≈) that holds exactly")
    v = one(r"\mathbf{Q}\mathbf{K}^T \approx \mathbf{K}\mathbf{Q}^T")  # arrays: compared entry by entry
    assert v.verdict == "not understood" and "differ by" in v.reason
    v = one(r"QK^T \approx Q")
    assert v.verdict == "not understood" and "different shapes" in v.reason
    v = one(r"\sqrt{768} \approx 27.7")  # numbers: one point
    assert v.verdict == "notation" and "at the 1 point compared" in v.reason


# ------------------------------------------------------------------------------ families and argmax
ATTENTION = "$$Attention(Q,K,V) = softmax\\left(\\frac{QK^T}{\\sqrt{d_k}}\\right)V$$\n\n"


def test_a_function_of_arrays_applied_to_the_heads_defines_a_family():
    """head_i = Attention(Q_i, K_i, V_i): Q_i, with one index on a matrix, is read as the i-th of a
    family of arrays shaped like Q only where a family over i is defined; its members are arrays
    of their own, and the family is never read as a value afterwards."""
    doc = ATTENTION + "$$head_i = Attention(Q_i,K_i,V_i)$$\n\n$$Z = head_1$$\n\n$$Y = Q_i$$\n\n"
    doc += "$$head_i = Attention(Q_i,K_i)$$\n\n$$head_i = 1$$\n\n$$s_{k} = Q_k K_k^T$$\n\n$$g_{k} = Q_k K_k^T$$\n"
    v = check_document(doc).verdicts
    assert [x.verdict for x in v] == ["definition", "definition"] + ["not understood"] * 4 + ["definition"] + [
        "not understood"
    ]
    assert v[1].defines == "head" and "head_i ∈ ℝ^{n×d_v}, one per i" in v[1].reason
    assert "family of arrays" in v[2].reason  # a member is not read in another formula
    assert "1 index(es) on a matrix" in v[3].reason  # outside a family: still refused
    assert "takes 3 argument(s), given 2" in v[4].reason
    assert "must be an array" in v[5].reason
    assert "s_k ∈ ℝ^{n×n}, one per k" in v[6].reason
    assert "1 index(es) on a matrix" in v[7].reason  # g has a meaning (Adam's): g_k is its entry


def test_a_function_of_a_familys_members_and_its_argmax():
    """P(token_i) = e^{logit_i}/Σ_j e^{logit_j} defines P on the i-th token: entry i of a vector,
    which the checker reads back (its entries sum to 1: proved; to 2: refuted). token =
    \\arg\\max_i P(token_i) defines an index that is never unfolded: no counterexample uses it."""
    doc = "$$P(token_i) = \\frac{e^{logit_i}} {\\sum_j e^{logit_j}}$$\n\n"
    doc += "$$\\sum_i P(token_i) = 1$$\n\n$$\\sum_i P(token_i) = 2$$\n\n$$P(token_i) = e^{logit_i}$$\n\n"
    doc += "$$token = \\arg\\max_i P(token_i)$$\n\n$$token + 0 = token$$\n\n$$token = 1$$\n\n$$P(x) = 1$$\n"
    v = check_document(doc).verdicts
    assert [x.verdict for x in v] == [
        "definition",
        "proved",
        "refuted",
        "definition",
        "definition",
        "proved",
        "definition",
        "not understood",
    ], [(x.verdict, x.reason) for x in v]
    assert v[0].defines == "P" and "entry i of the vector P(token)" in v[0].reason
    assert v[3].reason.startswith("redefines P: differs") and v[3].counterexample is not None  # no softmax
    assert v[4].defines == "token" and "an index" in v[4].reason and v[4].counterexample is None
    assert "could not be compared" in v[6].reason and v[6].counterexample is None  # never refuted
    assert "members token_i of a family only" in v[7].reason


@pytest.mark.parametrize(
    "doc, why",
    [
        ("$$y = 1 + \\arg\\max_i x_i$$\n", "whole right side of a definition"),  # an index, not a value
        ("$$k = \\arg\\max_q x_q$$\n", "q is not a declared index"),
        ("$$k = \\arg\\max_i Q$$\n", "of an array"),
        ("$$f(x_i) = x_i^2$$\n", "unknown symbol f"),  # x has a meaning: x_i is its entry, f stays unknown
        ("$$P(token_i) = e^{zz_i}$$\n\n$$P(token_1) = 1$$\n", "its definition was not understood"),
    ],
)
def test_argmax_and_functions_of_members_are_refused_where_they_do_not_apply(doc, why):
    v = check_document(doc).verdicts[-1]
    assert v.verdict == "not understood" and why in v.reason, (v.verdict, v.reason)


def test_the_documents_own_declarations_and_definitions_come_first():
    doc = (
        "$\\mathbf{x} \\in \\mathbb{R}^{d}$ and\n\n"
        "$$\n\\mu = \\frac{1}{d}\\sum_{j=1}^{d} x_j \\quad\\Rightarrow\\quad \\sum_{j=1}^{d} (x_j - \\mu) = 0\n$$\n"
    )
    v = check_text(doc)
    assert [x.verdict for x in v] == ["definition", "definition", "proved"]


def test_elementwise_functions_of_the_document():
    doc = "$$\nf(u) = u^2 + 1\n$$\n\n$$\nf(2) = 5\n$$\n\n$$\nf(x_j) = x_j x_j + 1\n$$\n"
    assert [v.verdict for v in check_text(doc)] == ["definition", "proved", "proved"]


# ------------------------------------------------------------------------------ interfaces
def test_check_text_returns_verdicts_for_a_notebook():
    v = one(r"\frac{\partial A_{ij}}{\partial S_{ik}} = A_{ij}(\delta_{jk} - A_{ik})")
    assert v.verdict == "proved" and v.to_json()["verdict"] == "proved"
    assert "proved" in v._repr_markdown_()
    report = check_document("$$\n\\sum_{j=1}^{n} A_{ij} = 1\n$$\n")
    assert "1 proved" in report._repr_markdown_()


def test_the_command_line_exit_status_plain_lines_and_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    good = tmp_path / "good.md"
    good.write_text("$$\nA_{ij} = A_{ij}\n$$\n\n$$\nZ = \\mathrm{Rotate}(Q)\n$$\n", encoding="utf-8")
    bad = tmp_path / "bad.md"
    bad.write_text("$$\n\\mathbf{Q}\\mathbf{K}^T = \\mathbf{K}\\mathbf{Q}^T\n$$\n", encoding="utf-8")
    assert main([str(good)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{good}:2: proved: A_{{ij}} = A_{{ij}}")
    assert "\x1b[" not in "".join(out)  # plain when piped
    assert out[-1].endswith("1 proved, 0 refuted, 1 not understood, 0 definition, 0 notation")
    assert main([str(good)], strict=True) == 1
    assert main([str(bad)]) == 1
    capsys.readouterr()
    assert main([str(bad), str(good)], as_json=True) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == 1 and [f["path"] for f in data["files"]] == [str(bad), str(good)]
    step = data["files"][0]["steps"][0]
    assert set(step) >= {"verdict", "step", "reason", "line", "counterexample", "assumptions", "scope"}
    assert step["verdict"] == "refuted" and step["counterexample"]["lhs"] != step["counterexample"]["rhs"]
    assert main([str(tmp_path / "missing.md")]) == 2


def test_the_qed_cli_has_the_check_command(tmp_path, capsys):
    from qed.cli import main as qed_main

    f = tmp_path / "d.md"
    f.write_text("$$\n\\sum_{j=1}^{n} A_{ij} = 1\n$$\n", encoding="utf-8")
    assert qed_main(["check", str(f), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "proved" in out and "·" in out  # --explain lists the assumptions


def test_line_of_a_refutation_shows_both_numbers():
    v = one(r"S_{ij} = \sum_{m=1}^{d_k} Q_{im} K_{jm}")
    text = line_of(v)
    assert "refuted" in text and "left =" in text and "right =" in text


def test_a_layernorm_derivation_is_proved_and_its_dropped_term_refuted():
    report = check_file(FIX / "layernorm.md")
    steps = [(v.verdict, v.step.split("=")[0].strip()) for v in report.verdicts]
    assert report.counts == {"proved": 7, "refuted": 1, "not understood": 0, "definition": 5, "notation": 0}, steps
    assert report.verdicts[-1].verdict == "refuted" and report.verdicts[-2].verdict == "proved"


def test_a_latex_file(tmp_path):
    tex = tmp_path / "d.tex"
    tex.write_text(
        "\\documentclass{article}\n\\begin{document}\nThe scores % a comment with $x = y$\n"
        "\\begin{equation}\n  S_{ij} = \\frac{1}{\\sqrt{d_k}} \\sum_{m=1}^{d_k} Q_{im} K_{jm} \\label{eq:s}\n"
        "\\end{equation}\nand \\(O_{ij} = \\sum_{q=1}^{n} A_{iq} V_{qj}\\), then\n\\begin{align}\n"
        "\\frac{\\partial \\mathcal{L}}{\\partial \\mathbf{V}} &= \\mathbf{A}^T \\frac{\\partial \\mathcal{L}}"
        "{\\partial \\mathbf{O}} \\nonumber \\\\\n"
        "\\frac{\\partial \\mathcal{L}}{\\partial \\mathbf{V}} &= \\mathbf{A} \\frac{\\partial \\mathcal{L}}"
        "{\\partial \\mathbf{O}}\n\\end{align}\n\\[ \\sum_{j=1}^{n} A_{ij} = 1 \\]\n\\end{document}\n",
        encoding="utf-8",
    )
    report = check_file(tex)
    assert [(v.line, v.verdict) for v in report.verdicts] == [
        (5, "proved"),
        (7, "proved"),
        (8, "proved"),
        (8, "refuted"),
        (12, "proved"),
    ]


def test_formulas_one_a_line_and_equations_run_together():
    v = check_text("x_i = x_i\n\\sum_{j} A_{ij} = 1")
    assert [(x.line, x.verdict) for x in v] == [(1, "proved"), (2, "proved")]
    (v,) = check_text("$$\na = b\nc = d\n$$\n")  # two equations that LaTeX sets on one line
    assert v.verdict == "not understood" and "separate lines" in v.reason
    (v,) = check_text(r"q \cdot k = 1")  # k is not declared here: never read as an index
    assert v.verdict == "not understood"


@pytest.mark.parametrize(
    "restated,verdict",
    [
        ("V", "definition"),  # softmax over one key is 1: equal on one row, not on n
        (r"softmax \left( \frac{QK^T}{d_k} \right)V", "definition"),  # 1/d_k, also equal on one row
        (r"softmax \left( \frac{QK^T}{\sqrt{d_k}} \right)V", "proved"),
    ],
)
def test_a_function_of_matrices_is_restated_on_matrices_not_on_one_row(restated, verdict):
    """A restatement of a function of arrays is decided on arguments with rows of their own: on
    row vectors alone, softmax(QKᵀ/√d_k)V is V (one key), and F(Q,K,V) = V would be proved."""
    text = "F(Q,K,V) = softmax \\left( \\frac{QK^T}{\\sqrt{d_k}} \\right)V\n" + f"F(Q,K,V) = {restated}"
    first, second = check_text(text)
    assert first.verdict == "definition"
    assert second.verdict == verdict, second.reason
    if verdict == "definition":
        assert second.reason.startswith("redefines F: differs"), second.reason
        assert second.counterexample, second.reason


def test_a_row_function_written_with_one_index_is_still_restated_on_its_row():
    """A body that reads its argument as a vector (x_i) is that vector's function: its
    restatement is decided on the row, where it is understood."""
    text = "G(x) = \\frac{x}{\\sqrt{x x^T}}\nG(x) = \\frac{x}{\\sqrt{\\sum_i x_i^2}}"
    assert [v.verdict for v in check_text(text)] == ["definition", "proved"]
