"""The notebook API: `qed.check` (a result with steps, verdicts and counterexamples that renders
in Jupyter) and `qed.derive` (a formula's derivative, its proved backward, the code codegen
prints), both loaded only when first used."""

import json
import math
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import sympy as sp

import qed
from derivations.language.arrays import document_form
from qed.tools.check.derivation import Derivation, DeriveError, derive

ROOT = Path(__file__).resolve().parents[1]


def test_importing_qed_loads_no_tool_until_check_or_derive_is_used():
    code = (
        "import json, sys\nimport qed\nbefore = sorted(m for m in sys.modules if m.startswith(('qed.tools', "
        "'derivations', 'sympy')))\nr = qed.check(r'\\sum_{j} A_{ij} = 1')\n"
        "print(json.dumps([before, r.steps[0].verdict, 'qed.tools.check' in sys.modules, qed.derive is not None]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [[], "proved", True, True]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        qed.nothing  # noqa: B018


# ------------------------------------------------------------------------------ qed.check
def test_check_returns_steps_verdicts_and_counterexamples():
    r = qed.check(r"S_{ij} = \sum_{m=1}^{d_k} Q_{im} K_{jm}" + "\n" + r"\sum_{j} A_{ij} = 1")
    assert [s.verdict for s in r.steps] == ["refuted", "proved"]
    assert r.counts["refuted"] == 1 and not r.ok
    ((step, cx),) = r.counterexamples
    assert step is r.steps[0] and cx["lhs"] != cx["rhs"] and cx["at"]["d_k"] >= 1
    assert r.steps[1].scope.startswith("all sizes")
    assert len(r) == 2 and list(r) == r.steps and r[1] is r.steps[1]


def test_the_jupyter_views_carry_every_verdict_and_the_counterexample():
    r = qed.check("$$\nS_{ij} = \\sum_{m=1}^{d_k} Q_{im} K_{jm}\n$$\n\n$$\n\\sum_{j} A_{ij} = 1\n$$\n\n$$\nZ = Y\n$$\n")
    md, html = r._repr_markdown_(), r._repr_html_()
    for text in (md, html):
        for verdict in ("refuted", "proved", "not understood"):
            assert verdict in text
        assert "left = " in text and "right = " in text
        assert "1 refuted, 1 proved" not in text  # the summary's order is the verdicts'
        assert "1 proved, 1 refuted, 1 not understood" in text
    assert "$S_{ij} = \\sum_{m=1}^{d_k} Q_{im} K_{jm}$" in md  # formulas as Markdown math
    assert "\\(S_{ij} = \\sum_{m=1}^{d_k} Q_{im} K_{jm}\\)" in html and "<table" in html
    assert "color:#cf222e" in html  # refuted in red
    assert "#### Transcripts" not in md
    r.explain()
    assert "#### Transcripts" in r._repr_markdown_() and "index forms" in r._repr_html_()


def test_check_reads_a_path_or_text_and_takes_a_context(tmp_path):
    p = tmp_path / "notes.md"
    p.write_text("```qed\nmatrix W: m x m\nsize m\n```\n\n$$\n(\\mathbf{W}^T)^T = \\mathbf{W}\n$$\n", encoding="utf-8")
    for arg in (p, str(p)):
        r = qed.check(arg)
        assert r.path == str(p) and [s.verdict for s in r.steps] == ["proved"]
    with pytest.raises(Exception, match="missing.md"):
        qed.check(str(tmp_path / "missing.md"))
    r = qed.check(r"\mathbf{W}^T\mathbf{W} = \mathbf{W}\mathbf{W}^T", context={"W": "matrix d x d"})
    assert r.steps[0].verdict == "refuted"
    r = qed.check(r"\mathbf{Z}^T\mathbf{Z} = \mathbf{Z}\mathbf{Z}^T")
    assert r.steps[0].verdict == "not understood"  # Z means nothing without the context


# ------------------------------------------------------------------------------ qed.derive
def test_derive_softplus_gives_the_logistic_function_proved_and_printed():
    d = qed.derive(r"\log(1 + e^{x})")
    assert isinstance(d, Derivation) and d.variable == "x"
    assert d.function == r"y = \log{\left(e^{x} + 1 \right)}"
    assert d.derivative == r"\frac{e^{x}}{e^{x} + 1}"
    assert d.proofs == {
        "f.forward": "proved-general",
        "f.backward.dx": "proved-general",
        "derivative shown = printed backward": "proved-general",
    }
    assert d.proved and "stability.softplus" in d.cited  # the printed forward is the stable form
    assert re.search(r"^def f_forward\(x\b", d.numpy, re.M) and re.search(r"^def f_backward\(dy\b", d.numpy, re.M)
    assert "np.log1p" in d.numpy and re.search(r"torch\.log1p\(|\.log1p_\(\)", d.torch)
    assert "class FFunction(torch.autograd.Function)" in d.torch
    md = d._repr_markdown_()
    assert d.derivative in md and "```python" in md and "f.backward.dx" in md


def test_derive_log_cosh_prints_it_without_cosh_and_check_reads_the_hyperbolic_functions():
    """log cosh x (the log-cosh loss): proved, printed as |x| + log1p(e^{−2|x|}) − log 2 (no
    cosh x = ∞), its derivative tanh x without 1 − 1 near 0; `qed check` reads \\cosh and
    \\sinh: sinh/cosh = tanh proved, cosh/sinh = tanh refuted."""
    d = qed.derive(r"\log(\cosh x)")
    assert d.proved and {"stability.log_cosh", "stability.centred_sigmoid"} <= set(d.cited)
    assert "np.log1p" in d.numpy and "np.cosh" not in d.numpy
    r = qed.check(r"\frac{\sinh x}{\cosh x} = \tanh x" + "\n" + r"\frac{\cosh x}{\sinh x} = \tanh x")
    assert [s.verdict for s in r.steps] == ["proved", "refuted"]


def test_derive_prints_a_root_of_squares_as_hypot():
    """x/√(1 + x²) (the inverse square root unit): proved, printed with hypot (no x² = ∞ from
    |x| > 1.8e19 in float32), its derivative 1/√(1 + x²)³ reduced from the quotient rule's
    1/h − x²/h³ (which cancels to 0 from |x| > 4e3) and printed as (1/h)³; its LaTeX reads the
    cube of the root."""
    d = qed.derive(r"\frac{x}{\sqrt{1 + x^2}}")
    assert d.proved and "stability.hypot" in d.cited
    assert "np.hypot(x, 1)" in d.numpy and "np.sqrt" not in d.numpy
    assert "dx_recip*dx_recip*dx_recip" in d.numpy
    assert r"\left(\sqrt{x^{2} + 1}\right)^{3}" in d.backward


def _numeric_derivative(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


@pytest.mark.parametrize(
    "formula",
    [
        r"\log(1 + e^{x})",
        r"x \sigma(x)",
        r"\tanh(x) + x^2",
        r"\frac{1}{1+e^{-x}}",
        r"\sqrt{x^2 + 1}",
        r"x\Phi(x)",
        r"\log(\cosh x)",
    ],
)
def test_the_derivative_agrees_with_finite_differences(formula):
    d = derive(formula)
    f = sp.lambdify(d.symbol, document_form(d.expr), modules=["mpmath", "sympy"])
    df = sp.lambdify(d.symbol, document_form(d.derivative_expr), modules=["mpmath", "sympy"])
    for x in (-1.7, -0.3, 0.4, 2.1):
        got = complex(df(x)).real
        want = _numeric_derivative(lambda u: complex(f(u)).real, x)
        assert math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-8), (formula, x, got, want)


def test_the_printed_numpy_module_computes_the_derivative():
    """The module codegen prints, run as generated/numpy/<op>.py would be."""
    import numpy as np

    d = derive(r"\log(1 + e^{x})", name="softplus_try")
    module = types.ModuleType("generated.numpy.softplus_try")
    module.__package__ = "generated.numpy"
    exec(compile(d.numpy, "softplus_try.py", "exec"), module.__dict__)  # noqa: S102 - the code qed printed
    x = np.array([[-3.0, -0.5, 0.0], [0.25, 1.5, 40.0]])
    y, cache = module.softplus_try_forward(x)
    assert np.allclose(y, np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0))
    dx = module.softplus_try_backward(np.ones_like(x), cache)
    assert np.allclose(dx, 1 / (1 + np.exp(-x)))  # σ(x)


def test_a_wrong_derivative_is_caught_by_the_check_derive_runs(monkeypatch):
    """derive proves the derivative it shows against the printed backward: a wrong one (here
    the derivative made to answer σ(x) + 1) is refused, never shown."""
    import qed.tools.check.derivation as D

    real = D._derivative
    monkeypatch.setattr(D, "_derivative", lambda scalar, symbol: real(scalar, symbol) + 1)
    with pytest.raises(DeriveError, match="does not match the printed backward"):
        D.derive(r"\log(1 + e^{x})")


@pytest.mark.parametrize(
    "formula, why",
    [
        (r"\epsilon x", "one variable"),
        (r"y = x", "not an equation"),
        (r"\mathrm{Foo}(x)", "not understood"),
        (r"\prod_{i=1}^{n} x_i", "not understood"),
    ],
)
def test_derive_refuses_what_it_cannot_read(formula, why):
    with pytest.raises(DeriveError, match=why):
        derive(formula)


def test_derive_with_a_context_and_a_row_op():
    d = derive(r"u^3", wrt="u")
    assert d.derivative == "3 u^{2}" and d.proved
    d = derive(r"\mathrm{softmax}(x)")
    assert d.derivative is None and d.proved  # not elementwise: the backward is the VJP
    assert d.backward.startswith(r"\partial x = y")
