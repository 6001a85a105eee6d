"""qed check's front end: the tokenizer, the parser and the cutting of formulas into statements.
Every construct has one reading or is refused with a reason (qed/tools/check/grammar.py, parser.py)."""

import pytest

from qed.tools.check import parser as P
from qed.tools.check.grammar import NotUnderstood, tokenize


def kinds(text):
    return [(t.kind, t.text) for t in tokenize(text) if t.kind != "end"]


def test_tokens_fold_delimiters_and_drop_spacing():
    assert kinds(r"\left( a \right)\,b") == [("char", "("), ("letters", "a"), ("char", ")"), ("letters", "b")]
    assert kinds(r"token\_ids") == [("letters", "token_ids")]
    assert kinds("0.044715x") == [("number", "0.044715"), ("letters", "x")]


@pytest.mark.parametrize(
    "text, why",
    [
        (r"\|x\|", "unsupported command"),
        (r"|x|", "absolute values"),
        (r"\left\{ x \right.", "brace as a delimiter"),
        ("x @ y", "outside the grammar"),
    ],
)
def test_tokens_outside_the_grammar_are_refused(text, why):
    with pytest.raises(NotUnderstood, match=why):
        P.parse(text)


def test_a_run_of_letters_stays_whole_and_a_script_takes_one_character():
    assert P.parse("softmax") == P.Letters("softmax")
    # LaTeX's own rule: W_attention lowers only the a
    assert P.parse("W_attention") == P.Juxt((P.Script(P.Letters("W"), (P.Letters("a"),)), P.Letters("ttention")))
    assert P.parse("d_{model}") == P.Script(P.Letters("d"), (P.Letters("model"),))


def test_transpose_is_never_a_power():
    assert P.parse("K^T") == P.Transpose(P.Letters("K"))
    assert P.parse(r"K^{\top}") == P.Transpose(P.Letters("K"))
    assert P.parse("x^2") == P.Power(P.Letters("x"), P.Num("2"))
    assert isinstance(P.parse(r"\mathbb{R}^{T \times V}"), P.Power)  # a shape, not a transpose


def test_partial_derivatives_sums_and_expectations():
    d = P.parse(r"\frac{\partial \mathcal{L}}{\partial V_{kj}}")
    assert d == P.Partial(P.Own("cal", "L"), P.Script(P.Letters("V"), (P.Letters("kj"),)))
    s = P.parse(r"\sum_{i=1}^{n} a_i b_i + c")
    assert isinstance(s, P.Bin) and isinstance(s.a, P.Sum) and s.a.vars == ("i",)  # the body stops at +
    assert P.parse(r"\mathbb{E}[q_i]") == P.Expect(P.Script(P.Letters("q"), (P.Letters("i"),)))
    assert P.parse(r"\mathbf{1}^T") == P.Transpose(P.OnesVec())


@pytest.mark.parametrize(
    "text, why",
    [
        (r"\mathbf{W}1", "lost subscript"),
        (r"d{\text{model}}", "lost subscript"),
        (r"\prod_{i=1}^{n} x_i", r"\\prod"),
        (r"\max_i x_i", "over an index"),
        (r"\sqrt[3]{x}", "square root"),
        (r"\frac{\partial^2 L}{\partial x^2}", "higher derivatives"),
        (r"\sum_{pos=1}^{n} x", "one index"),
        (r"\sum^{n} x", "without an index"),
        (r"\begin{array}{c} 1 \end{array}", "environment"),
        (r"\arg x", r"\\arg alone"),  # a complex number's argument
        (r"\arg\max x_i", "without its index"),
        (r"\arg\max_{i \in S} x_i", "one index letter"),  # a set under it: no one range
        (r"\arg\max_{ij} x_i", "one index letter"),
        (r"\arg\max_i^n x_i", "upper bound"),
        (r"\operatorname*{sup}_i x_i", "starred operators"),
        (r"\int_0^1 x", "integrals"),
    ],
)
def test_refusals_carry_their_reason(text, why):
    with pytest.raises(NotUnderstood, match=why):
        P.parse(text)


@pytest.mark.parametrize(
    "text",
    [r"\arg\max_i x_i", r"\argmax_i x_i", r"\operatorname{argmax}_i x_i", r"\operatorname*{arg\,max}_{i} x_i"]
    + [r"\mathrm{arg\,max}_i x_i", "argmax_i x_i"],
)
def test_every_spelling_of_argmax_is_one_node(text):
    assert P.parse(text) == P.ArgMax("max", "i", P.Script(P.Letters("x"), (P.Letters("i"),)))


def test_argmax_takes_the_rest_of_the_term_and_argmin_is_its_own():
    node = P.parse(r"\arg\max_i P(token_i) + 1")
    assert isinstance(node, P.Bin) and isinstance(node.a, P.ArgMax)  # the body stops at +
    assert node.a.body == P.Juxt((P.Letters("P"), P.Paren((P.Script(P.Letters("token"), (P.Letters("i"),)),), "(")))
    assert P.parse(r"\arg\min_j y_j").kind == "min"
    assert P.parse("argmax") == P.Letters("argmax")  # without its index: a word like any other


def statements(text):
    return [(st.relations, len(st.parts), st.error) for st in P.split(text)]


def test_chains_consequences_and_quads_are_cut():
    assert statements("a = b = c") == [(["=", "="], 3, None)]
    s = r"\mathbf{S} = \frac{Q}{2} \quad \Rightarrow \quad S_{ij} = 1"
    assert statements(s) == [(["="], 2, None), (["="], 2, None)]
    assert statements(r"Q=XW_Q,\quad K=XW_K") == [(["="], 2, None), (["="], 2, None)]
    assert statements(r"\mu = 1, \sigma = 2") == [(["="], 2, None), (["="], 2, None)]
    assert statements(r"f(a, b) = 1") == [(["="], 2, None)]  # a comma inside parentheses


def test_aligned_rows_continue_the_chain_of_the_row_before():
    text = "\\begin{aligned}\na &= b \\\\\n &= c \\\\\nd &= e\n\\end{aligned}"
    assert statements(text) == [(["=", "="], 3, None), (["="], 2, None)]


def test_a_control_space_between_rows_is_refused():
    text = r"\begin{aligned} a &= b \ c &= d \end{aligned}"
    ((rels, n, error),) = statements(text)
    assert "control space" in error


def test_a_row_break_outside_an_environment_is_refused():
    ((_, _, error),) = statements(r"a = b \\ c = d")
    assert "outside an aligned environment" in error


def test_remarks_are_set_aside():
    (st,) = P.split(r"A_{ij} = B_{ij} \quad (\text{where } \delta_{jk} \text{ is Kronecker delta})")
    assert st.relations == ["="] and st.remarks[0][0] == "where"
    sts = P.split(r"\mathbb{E}[q_i] = 0, \quad \mathrm{Var}(q_i) = 1 \quad (\forall i = 1, \dots, d_k)")
    assert [s.relations for s in sts] == [["="], ["="]]
    assert sts[-1].remarks[0][0] == "forall"
    (st,) = P.split(r"\text{where } h_i = 1")
    assert st.remarks == [("word", "where")]


def test_a_flow_is_recognised():
    (st,) = P.split(r"Tokens \rightarrow Embedding \rightarrow Transformer\ Blocks")
    assert st.is_flow


def test_cases_need_one_comparison_per_row():
    node = P.parse(r"\begin{cases} 0 & j \leq i \\ -\infty & j > i \end{cases}")
    assert isinstance(node, P.Cases) and node.rows[0][1].rel == "≤"
    with pytest.raises(NotUnderstood, match="in words"):
        P.parse(r"\begin{cases} 0 & \text{if masked} \\ 1 & \text{otherwise} \end{cases}")


def test_no_text_of_a_document_reaches_sympify_parse_expr_or_eval():
    """The front end builds SymPy objects itself: the only sympify call is `basic`, which refuses
    text; no parse_expr, eval, exec or pickle anywhere in the package."""
    import ast
    from pathlib import Path

    import qed.tools.check as pkg
    from qed.tools.check.context import basic

    calls = []
    for path in sorted(Path(pkg.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in ("sympify", "parse_expr", "parse_latex", "eval", "exec", "S", "loads"):
                    calls.append((path.name, name))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                assert not any("pickle" in m or "parsing" in m for m in mods), (path.name, mods)
    assert calls == [("context.py", "sympify")]
    with pytest.raises(TypeError):
        basic("x + 1")
