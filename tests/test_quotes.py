"""The specifications tied to the sources (qed/tools/quotes.py): each quoted formula of the
sources, read by `qed check`'s front end with its name bound to the op's `spec`, is proved; a
wrong specification is not; every op that quotes nothing is named on docs/trusted.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from derivations import registry
from derivations.language.arrays import Assign
from qed.tools import docs, quotes

ROOT = Path(__file__).resolve().parent.parent
QUOTED = [o.name for o in registry.ops() if o.quotes]


def test_the_quoted_ops_are_the_sources_activations():
    assert set(QUOTED) >= {"gelu", "gelu_tanh", "silu", "attention", "ffn_relu", "swiglu"}


@pytest.mark.parametrize("name", QUOTED)
def test_every_quote_reads_as_its_ops_specification(name):
    results = quotes.check_op(registry.op(name))
    assert results and all(r.ok for r in results), [str(r) for r in results]


@pytest.mark.parametrize("name", QUOTED)
@pytest.mark.parametrize(
    "wrong",
    [lambda e: e / 2, lambda e: e + sp.Rational(1, 100), lambda e: -e],
    ids=["halved", "shifted", "negated"],
)
def test_a_wrong_specification_is_not_proved_against_the_quote(name, wrong):
    op = registry.op(name)
    last = op.spec[-1]
    spec = [*op.spec[:-1], Assign(last.target, wrong(last.expr))]
    results = quotes.check_op(op, spec=spec)
    assert results and not any(r.ok for r in results), [str(r) for r in results]


def test_a_wrong_inner_definition_is_not_proved_either():
    # SiLU with σ(x) = 1/(1 + e^{x}): the last line is right, the one it reads is not
    op = registry.op("silu")
    sigma, y = op.spec
    spec = [Assign(sigma.target, 1 / (1 + sp.exp(next(iter(op.inputs))))), y]
    assert not any(r.ok for r in quotes.check_op(op, spec=spec))


def test_every_op_that_quotes_nothing_is_named_on_the_trusted_page():
    page = (ROOT / "docs" / "trusted.md").read_text()
    missing = [n for n in quotes.unquoted() if f"`{n}`" not in page]
    assert not missing, missing
    assert not set(QUOTED) & set(quotes.unquoted())


def test_each_quote_is_printed_in_its_document_as_quoted():
    seeds = docs.find_seeds()
    if seeds is None:
        pytest.skip("the seed documents are not beside the repository")
    assert quotes.verbatim(seeds, docs.SEEDS) == []


def test_a_quote_that_is_not_in_its_document_is_found(tmp_path):
    seeds = docs.find_seeds()
    if seeds is None:
        pytest.skip("the seed documents are not beside the repository")
    for name in docs.SEEDS:
        text = (seeds / name).read_text().replace(r"x\Phi(x)", r"x \Phi(x)")
        (tmp_path / name).write_text(text)
    assert any(m.startswith("gelu:") for m in quotes.verbatim(tmp_path, docs.SEEDS))


def _replaced(op, target: str, expr):
    """op's spec with the line that assigns `target` given `expr` instead."""
    return [Assign(a.target, expr) if a.target.name == target else a for a in op.spec]


def test_wrong_layouts_and_wirings_of_the_multi_input_ops_are_not_proved():
    """The quotes that bind several inputs (Q, K, V) or parameters written in the sources' layout
    (x W₁, the op's w1 = W₁ᵀ): the classic slips are caught against the quoted formula."""
    from derivations import attention as att
    from derivations import ffn
    from derivations.activations import FFN_RELU, FX, W1
    from derivations.language.arrays import MatMul, T

    op = registry.op("attention")
    s = next(a for a in op.spec if a.target.name == "s")
    q, k, _ = op.inputs
    (d_k,) = [sym for sym in s.expr.free_symbols if sym.name == "d_k"]
    wrong = {
        "1/d_k, not 1/√d_k": _replaced(op, "s", MatMul(q, T(k)) / d_k),
        "√d_k multiplied, not divided": _replaced(op, "s", MatMul(q, T(k)) * sp.sqrt(d_k)),
    }
    for why, spec in wrong.items():
        assert not any(r.ok for r in quotes.check_op(op, spec=spec)), why
    sw = registry.op("swiglu")
    gate_swapped = _replaced(sw, "h", ffn.u_s / (1 + sp.exp(-ffn.u_s)) * ffn.g_s)  # SiLU(u) ⊙ g
    assert not any(r.ok for r in quotes.check_op(sw, spec=gate_swapped))
    no_b1 = _replaced(FFN_RELU, "z", MatMul(FX, T(W1)))
    assert not any(r.ok for r in quotes.check_op(FFN_RELU, spec=no_b1))
    assert att.ATTENTION is op


def test_a_quote_must_write_every_parameter():
    import dataclasses

    op = registry.op("ffn_relu")
    short = dataclasses.replace(op.quotes[-1], params=op.quotes[-1].params[:-1])
    results = quotes.check_op(dataclasses.replace(op, quotes=(short,)))
    assert results and not results[0].ok and "writes no b2" in results[0].error, [str(r) for r in results]


def test_the_sources_values_are_quoted_too():
    """Formulas the sources state as a value (Logits = HW_{vocab}+b, Attention = softmax(… + M)V)
    tie their ops as well: the value's lines, then Spec(arguments) = the value."""
    assert {"attention_scores", "attention_softmax", "attention_lse", "linear", "linear_nobias"} <= set(QUOTED)
    causal = [q for q in registry.op("attention").quotes if q.when == "causal"]
    assert causal and causal[0].args == ("Q", "K", "V") and "M_{ij}" in causal[0].latex


def test_the_causal_quote_refutes_a_spec_without_its_mask_or_with_the_mask_flipped():
    import dataclasses

    from derivations.language.arrays import CausalMask, T

    for name in ("attention", "attention_lse"):
        op = registry.op(name)
        (quote,) = [q for q in op.quotes if q.when == "causal"]
        one = dataclasses.replace(op, quotes=(quote,))
        assert all(r.ok for r in quotes.check_op(one)), name
        # the quote read against the op with causal=False: the mask is missing
        assert not any(
            r.ok for r in quotes.check_op(dataclasses.replace(one, quotes=(dataclasses.replace(quote, when=""),)))
        )
        # keys before the query masked instead of those after it
        flipped = [
            Assign(a.target, T(CausalMask(T(a.expr.args[0]))), when=a.when) if isinstance(a.expr, CausalMask) else a
            for a in op.spec
        ]
        assert any(isinstance(a.expr, sp.Basic) and a.when == "causal" for a in flipped)
        assert not any(r.ok for r in quotes.check_op(one, spec=flipped)), name


def test_a_value_quote_binds_its_arguments_in_order_and_its_parameters_as_written():
    import dataclasses

    scores = registry.op("attention_scores")
    swapped = dataclasses.replace(scores.quotes[-1], args=("K", "Q"))  # Spec(K, Q) = K Qᵀ/√d_k ≠ S
    assert not quotes.check_op(dataclasses.replace(scores, quotes=(swapped,)))[0].ok
    q, k = scores.inputs
    (d_k,) = [sym for sym in scores.spec[0].expr.free_symbols if sym.name == "d_k"]
    from derivations.language.arrays import MatMul
    from derivations.language.arrays import T as tr

    assert not any(r.ok for r in quotes.check_op(scores, spec=[Assign(scores.spec[0].target, MatMul(q, tr(k)) / d_k)]))
    linear = registry.op("linear")
    w_doc, y = linear.spec
    no_bias = [w_doc, Assign(y.target, y.expr - linear.params[1])]
    assert not quotes.check_op(linear, spec=no_bias)[0].ok
    # the stored weight read as the sources' W_{vocab} itself, not its transpose: a shape error
    untransposed = dataclasses.replace(linear.quotes[0], params=(("weight", "W_{vocab}"), ("bias", "b")))
    assert not quotes.check_op(dataclasses.replace(linear, quotes=(untransposed,)))[0].ok


def test_the_embedding_quote_reads_the_token_ids_as_its_ids():
    """X = E[token_ids]: Spec(token_ids) passes the ids as the lookup reads them; a spec that looks
    up the next row is not proved."""
    op = registry.op("embedding")
    assert op.quotes and op.quotes[0].args == (r"token\_ids",)
    (x,) = op.spec
    table, ids = x.expr.args
    assert all(r.ok for r in quotes.check_op(op))
    shifted = [Assign(x.target, type(x.expr)(table, ids + 1))]
    assert not any(r.ok for r in quotes.check_op(op, spec=shifted))


# ------------------------------------------------------------------------------ RoPE (seed B §15)
def _rope_with(**changes):
    import dataclasses

    op = registry.op("rope")
    return op, dataclasses.replace(op.quotes[0], **changes)


def test_the_rope_quote_is_seed_bs_rotation_read_step_by_step():
    """The bmatrix defines x' by its pairs, θ = pos·ω_i is the catalogue's angle, and Spec(x) = x'
    (the op's spec with the tables rope_tables prints, the row x at position pos) is proved pair
    by pair."""
    op = registry.op("rope")
    (quote,) = op.quotes
    assert quote.where == "seed B §15" and quote.args == ("x",) and r"\omega_i" in quote.latex
    (result,) = quotes.check_op(op)
    assert result.ok, str(result)
    assert [v for v, _ in result.verdicts] == ["definition", "proved", "proved"]
    assert "at the even columns" in result.verdicts[-1][1]


@pytest.mark.parametrize(
    "old, new",
    [
        (r"-\sin\theta\\ \sin\theta", r"\sin\theta\\ -\sin\theta"),  # the rotation by −θ
        (r"\cos\theta & -\sin\theta\\ \sin\theta & \cos\theta", r"\sin\theta & -\cos\theta\\ \cos\theta & \sin\theta"),
        (r"\omega_i", r"\omega_{i+1}"),  # the next pair's frequency
        (r"x_{2i}\\ x_{2i+1}", r"x_{2i+1}\\ x_{2i}"),  # the column's rows swapped
        (r"x'_{2i}\\ x'_{2i+1}", r"x'_{2i+1}\\ x'_{2i}"),  # the left column's rows swapped
    ],
    ids=["minus-theta", "cos-sin-swapped", "omega-i+1", "rows-swapped", "left-rows-swapped"],
)
def test_a_wrong_rotation_in_the_rope_quote_is_not_proved(old, new):
    op, quote = _rope_with()
    assert old in quote.latex
    import dataclasses

    (result,) = quotes.check_op(
        dataclasses.replace(op, quotes=(dataclasses.replace(quote, latex=quote.latex.replace(old, new)),))
    )
    assert not result.ok, str(result)
    assert any(v == "refuted" or r.startswith("redefines Spec: differs") for v, r in result.verdicts), str(result)


def test_a_wrong_rope_specification_is_refuted_by_its_quote():
    """The spec with the rotation's sin negated (R(−θ)), with rot transposed, with the tables
    swapped: each differs from seed B's rotation at a point the quote's check finds."""
    from derivations.language.arrays import MatMul, T

    op = registry.op("rope")
    xperp, y = op.spec
    x, cos, sin, rot = op.inputs
    wrong = {
        "sin negated": [xperp, Assign(y.target, cos * x - sin * xperp.target)],
        "rot transposed": [Assign(xperp.target, MatMul(x, T(rot))), y],
        "tables swapped": [xperp, Assign(y.target, sin * x + cos * xperp.target)],
    }
    for why, spec in wrong.items():
        (result,) = quotes.check_op(op, spec=spec)
        assert not result.ok, why
        verdict, reason = result.verdicts[-1]
        assert verdict == "definition" and reason.startswith("redefines Spec: differs"), (why, reason)


def test_the_rope_quote_reads_the_tables_as_printed(monkeypatch):
    """Spec's cos, sin, rot are rope_tables' printed entries: a table with the classic ω_i =
    base^{−i/d} (i for 2i) is refuted by the quote too."""
    import copy
    import dataclasses

    table = registry.table("rope_tables")
    _, array, wrong_entry = table.mistakes["omega-i"]
    broken = copy.copy(table)  # the same table, its cos entry printed with the mistake
    broken.arrays = [dataclasses.replace(a, entry=wrong_entry) if a.name == array else a for a in table.arrays]
    tables = registry.tables()
    monkeypatch.setattr(registry, "tables", lambda: tuple(broken if t is table else t for t in tables))
    (result,) = quotes.check_op(registry.op("rope"))
    assert not result.ok, str(result)
    assert result.verdicts[-1][1].startswith("redefines Spec: differs"), str(result)


def test_the_trusted_page_names_exactly_the_ops_that_quote_nothing():
    """docs/trusted.md's list ("trusted as written: `a`, `b`, …") is `unquoted()`: an op that now
    quotes the sources (rope) is no longer listed, one that does not is."""
    import re

    page = " ".join((ROOT / "docs" / "trusted.md").read_text().split())
    listed = re.search(r"trusted as written: (.*?)\. ", page).group(1)
    assert set(re.findall(r"`([a-z_0-9]+)`", listed)) == set(quotes.unquoted())
