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
    assert set(QUOTED) >= {"gelu", "gelu_tanh", "silu"}


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
