"""The documentation: generated pages match the registry, every formula renders with KaTeX, the
LaTeX rules hold on the project's own pages, the linter finds the known slips of the sources,
each lint rule on a good and a bad snippet, the figures script, and the site builds strictly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qed.tools import catalogue, docs, figures
from qed.tools.latex_lint import extract, lint_file, lint_text

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "assets" not in p.parts) + [ROOT / "README.md"]
SEEDS = docs.find_seeds()


def rules(text: str, markdown: bool = True) -> list[str]:
    return [f.rule for f in lint_text(text, "t.md", markdown)]


# ------------------------------------------------------------------------------ drift
def test_generated_pages_match_the_registry():
    """The claim pages (their certificates come from the run's cache where test_claims stored
    them, as `make demo`'s docs step reads what `qed prove` stored)."""
    pages = docs.render_derivations(docs.certificates(workers=2), docs.code_objects())
    drift = docs.check(pages)
    assert not drift, "generated docs are out of date; run `make docs` (or `qed docs`):\n  " + "\n  ".join(drift)


@pytest.mark.slow
def test_the_sources_page_matches_the_seeds():
    """docs/sources.md: `qed check` of both source documents (a minute of proving; the check
    itself is tested on the seeds' sections by tests/test_check_sources.py)."""
    seeds = docs.find_seeds()
    if seeds is None:
        pytest.skip("source documents not found (../shared/seeds, $QED_SEEDS)")
    text = docs.render_sources(docs.lint_seeds(seeds), docs.check_seeds(seeds))
    on_disk = (ROOT / "docs" / "sources.md").read_text(encoding="utf-8")
    assert docs.normalise(on_disk) == docs.normalise(text), "docs/sources.md is out of date; run `make docs`"


def test_every_generated_page_carries_the_marker():
    for p in sorted((ROOT / "docs" / "derivations").glob("*.md")):
        assert p.read_text(encoding="utf-8").startswith(docs.MARKER), p
    assert (ROOT / "docs" / "sources.md").read_text(encoding="utf-8").startswith(docs.MARKER)


def test_check_ignores_timings_but_not_content(tmp_path, monkeypatch):
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    monkeypatch.setattr(docs, "DERIVATIONS", tmp_path / "docs" / "derivations")
    page = f"{docs.MARKER}\n\n# x\n\ntime {docs.seconds(0.12)}\n"
    pages = {"docs/derivations/x.md": page}
    assert docs.check(pages) == ["docs/derivations/x.md"]  # missing
    assert docs.write(pages) == ["docs/derivations/x.md"]
    assert docs.check(pages) == []
    retimed = {"docs/derivations/x.md": page.replace("0.12", "9.87")}
    assert docs.check(retimed) == []  # a timing is not drift
    assert docs.write(retimed) == []  # and is not rewritten
    edited = {"docs/derivations/x.md": page.replace("# x", "# y")}
    assert docs.check(edited) == ["docs/derivations/x.md"]
    (tmp_path / "docs" / "derivations" / "old.md").write_text(docs.MARKER + "\n")
    assert docs.check(pages) == ["docs/derivations/old.md (stale)"]
    (tmp_path / "docs" / "derivations" / "hand.md").write_text("# written by hand\n")
    assert "docs/derivations/hand.md (stale)" not in docs.check(pages)


def test_every_claim_has_a_page():
    from derivations import registry

    fake = [
        {
            "id": c.id,
            "title": c.title,
            "source": c.source,
            "module": c.module,
            "statement": c.latex,
            "status": "proved-general",
            "scope": "all sizes",
            "method": "m",
            "assumptions": [],
            "seconds": 0.0,
            "mutants": [],
        }
        for c in registry.claims()
    ]
    fake.append(dict(fake[0], id="brand_new.thing"))
    pages = docs.render_derivations(fake, docs.code_objects())
    text = "\n".join(pages.values())
    for c in fake:
        assert f"## {c['id']}\n" in text, c["id"]
    assert "docs/derivations/brand_new.md" in pages
    assert "beyond the catalogue" in pages["docs/derivations/index.md"]


def test_row_mapping():
    assert catalogue.row_of("attention.dQ").page == "attention.dQ-dK"
    assert catalogue.row_of("attention.variance.dot_var").page == "attention.variance"
    assert catalogue.row_of("layernorm.dx").page == "layernorm"
    assert catalogue.row_of("embedding.dE").page == "embedding.lookup"
    assert catalogue.row_of("gelu.tanh.bound").page == "gelu"
    assert catalogue.row_of("attention.flash") is None  # several attention rows: no guess


def test_brief_counterexamples_are_short_and_rounded():
    cx = {"at": {"n": 3, "i": 1}, "seed": 0, "lhs": -0.3974761037465688, "rhs": 0.1, "trace": list(range(10))}
    text = docs.brief(cx)
    assert text.startswith("at={n=3, i=1}") and "-0.397476," in text and "(10 items)" in text
    assert len(docs.brief({"x": "y" * 1000})) <= 240


def test_reflow_puts_each_row_on_its_own_line():
    out = docs.reflow_latex(r"\begin{cases} 0 & j \leq i \\ -\infty & j > i \end{cases}")
    assert out.splitlines()[0].endswith("\\\\") and "\\\\ " not in out
    assert not [f for f in lint_text("$$\n" + out + "\n$$\n") if f.rule == "break-trailing"]


# ------------------------------------------------------------------------------ KaTeX
def _node_katex():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the KaTeX check needs it)")
    katex = docs.find_katex()
    if katex is None:
        pytest.skip(
            "the npm katex package is not installed: "
            f"npm install --prefix build/node --no-save katex@{docs.KATEX_VERSION}"
        )
    return node, katex.parent


def katex_errors(items: list[dict]) -> dict:
    node, node_modules = _node_katex()
    env = dict(os.environ, NODE_PATH=str(node_modules))
    res = subprocess.run(
        [node, str(ROOT / "docs" / "katex_check.js")],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_every_formula_in_the_docs_renders_with_katex():
    items = []
    for path in DOC_FILES:
        for m in extract(path.read_text(encoding="utf-8"), markdown=True):
            items.append({"expr": m.text, "display": m.display, "where": f"{path.relative_to(ROOT)}:{m.line}"})
    assert len(items) > 100, "the math extraction found almost nothing"
    out = katex_errors(items)
    assert out["checked"] == len(items)
    assert not out["errors"], "\n".join(f"{e['where']}: {e['error']}" for e in out["errors"])


def test_katex_check_reports_a_parse_error():
    out = katex_errors(
        [
            {"expr": r"\frac{a}{b", "display": True, "where": "bad"},
            {"expr": r"\mathrm{softmax}(x)", "display": False, "where": "good"},
        ]
    )
    assert [e["where"] for e in out["errors"]] == ["bad"]


# ------------------------------------------------------------------------------ lint-latex on the project
def test_lint_latex_passes_on_the_docs_and_the_readme():
    findings = [f for p in DOC_FILES for f in lint_file(p, str(p.relative_to(ROOT)))]
    assert not findings, "\n".join(f.format() for f in findings)


def test_claim_statements_pass_the_lint_once_reflowed():
    from derivations import registry

    bad = []
    for c in registry.claims():
        bad += [f.format() for f in lint_text(f"$$\n{docs.reflow_latex(c.latex)}\n$$\n", c.id)]
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(SEEDS is None, reason="the source documents (../shared/seeds) are not here")
def test_lint_latex_finds_the_known_slips_in_the_sources():
    found = docs.lint_seeds(SEEDS)
    for letter, section, rule, what in docs.KNOWN_LATEX_SLIPS:
        assert any(L == letter and s == section and f.rule == rule for L, s, f in found), (
            f"seed {letter} {section}: {what} ({rule}) not found"
        )
    a = [f for L, s, f in found if L == "A"]
    assert {f.line for f in a if f.rule == "lost-subscript"} == {70, 71, 72, 101}
    b_words = " ".join(f.message for L, s, f in found if L == "B" and f.rule == "italic-word")
    for word in ("softmax", "Attention", "Concat", "LayerNorm"):
        assert f"'{word}'" in b_words


@pytest.mark.skipif(SEEDS is None, reason="the source documents (../shared/seeds) are not here")
def test_lint_latex_cli_on_the_sources(capsys):
    from qed.cli import main

    rc = main(["lint-latex", *map(str, sorted(SEEDS.glob("*.txt")))])
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert any(":107: env-rows: " in line and line.endswith("(use \\\\ between rows)") for line in out)


def test_sources_page_has_the_hand_written_slips():
    text = (ROOT / "docs" / "sources.md").read_text(encoding="utf-8")
    for needle in ("`W_V`", "§16", "AdamW", "§2", "§4", "§5", "env-rows", "lost-subscript"):
        assert needle in text, needle
    assert "**no**" not in text, "a slip FORMULAS.md names is not found by the linter"


def test_section_labels():
    text = "Title\n\n1. One\n\nA. Sub\nx\n\n2. Two\n1. faq item\n\nComplete Transformer Flow\n\ny"
    labels = docs.section_labels(text)
    assert labels[0] == "title" and labels[2] == "§1" and labels[5] == "§1.A"
    assert labels[7] == "§2" and labels[8] == "§2" and labels[-1] == "flow"


# ------------------------------------------------------------------------------ the lint rules
@pytest.mark.parametrize(
    "rule,good,bad",
    [
        ("block-spacing", "text\n\n$$\nx = 1\n$$\n\nmore\n", "text\n$$\nx = 1\n$$\nmore\n"),
        (
            "break-trailing",
            "$$\n\\begin{aligned}\na &= b \\\\\nc &= d\n\\end{aligned}\n$$\n",
            "$$\n\\begin{aligned}\na &= b \\\\ c &= d\n\\end{aligned}\n$$\n",
        ),
        ("break-trailing", "$$\na \\\\\nb\n$$\n", "$$\na \\\\  \nb\n$$\n"),
        (
            "italic-word",
            r"$\mathrm{softmax}(x) + \text{Attention} + \operatorname{Concat} + W_{attention}$",
            r"$softmax(x)$",
        ),
        ("italic-word", r"$\mathrm{LayerNorm}(x) = \gamma \hat{x} + \beta$", r"$LayerNorm(x) = \gamma \hat{x}$"),
        ("subscript-braces", r"$W_{attention} + d_{k} + W_{i}^{Q} + x_1 + \beta_1 m$", r"$W_attention$"),
        ("subscript-braces", r"$d_{\mathrm{model}}$", r"$d_model$"),
        ("subscript-braces", r"$x^{10}$", r"$x^10$"),
        ("lost-subscript", r"$\mathbf{W}_{i}^{Q} \in \mathbb{R}^{d_{\text{model}} \times d_k}$", r"$\mathbf{W}i^Q$"),
        ("lost-subscript", r"$\frac{1}{2}x^2 + \sqrt{d_k} + \hat{x}_j$", r"$\mathbb{R}^{d{\text{model}}}$"),
        ("lost-subscript", r"$\mathbf{W}_1 \mathbf{x}$", r"$\mathbf{W}1 \in \mathbb{R}$"),
        (
            "env-rows",
            "$$\n\\begin{aligned}\na &= b \\\\\nc &= d\n\\end{aligned}\n$$\n",
            "$$\n\\begin{aligned} a &= b \\ c &= d \\end{aligned}\n$$\n",
        ),
        (
            "env-rows",
            "$$\n\\begin{cases}\n0 & j \\leq i \\\\\n1 & j > i\n\\end{cases}\n$$\n",
            "$$\n\\begin{cases} 0 & j \\leq i \\ 1 & j > i \\end{cases}\n$$\n",
        ),
    ],
)
def test_lint_rule(rule, good, bad):
    assert rule not in rules(good), lint_text(good)
    assert rule in rules(bad)


def test_lint_good_snippets_are_fully_clean():
    good = (
        "Some text with $\\mathrm{softmax}(x)_{j}$ inline.\n\n$$\n"
        "\\frac{\\partial \\mathcal{L}}{\\partial \\mathbf{Q}} = \\frac{1}{\\sqrt{d_{k}}} "
        "\\frac{\\partial \\mathcal{L}}{\\partial \\mathbf{S}} \\mathbf{K}\n$$\n\nEnd.\n"
    )
    assert lint_text(good) == []


def test_lint_skips_code_and_escaped_dollars():
    text = (
        "```python\nx = softmax_x  # $softmax$\n```\n\n`$W_attention$` costs \\$5 and \\$6.\n\n"
        "<!-- $LayerNorm$ -->\n\nA fee of $5 or $6 per softmax.\n"
    )
    assert lint_text(text) == []
    assert [m.text for m in extract("pay $5 or $6, then $x_1$", markdown=True)] == ["x_1"]


def test_plain_text_bare_formula_lines():
    text = (
        "Scaled attention:\n\nAttention(Q,K,V) = softmax \\left( \\frac{QK^T}{\\sqrt{d_k}} \\right)V\n\n"
        "In LaTeX, line breaks are achieved using double backslashes \\\\ and words like W_attention.\n"
    )
    found = lint_text(text, "seed.txt", markdown=False)
    assert [f.line for f in found] == [3] and found[0].rule == "italic-word"
    assert "'Attention', 'softmax'" in found[0].message
    assert lint_text(text, "seed.md", markdown=True) == []  # Markdown: only $…$ is math


def test_finding_format_and_cli_exit_codes(tmp_path, capsys):
    from qed.cli import main

    bad = tmp_path / "bad.md"
    bad.write_text("Intro\n\n$softmax(x)$\n", encoding="utf-8")
    good = tmp_path / "good.md"
    good.write_text("Intro\n\n$\\mathrm{softmax}(x)$\n", encoding="utf-8")
    assert main(["lint-latex", str(good)]) == 0
    assert main(["lint-latex", str(bad)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"{bad}:3: italic-word: letters set as an italic product of variables: 'softmax' (write \\mathrm{{softmax}})"
    ]
    assert main(["lint-latex", str(tmp_path)]) == 1  # a folder: its *.md
    assert main(["lint-latex", str(tmp_path / "missing.md")]) == 2


# ------------------------------------------------------------------------------ figures
def test_saturation_figure(tmp_path):
    out = figures.saturation(tmp_path / "s.png")
    assert out.stat().st_size > 10_000


def test_training_figure_reads_metrics_and_skips_without_a_run(tmp_path, capsys):
    assert figures.training(None, tmp_path / "t.png") is None
    assert "skipped" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    recs = [
        {
            "step": s,
            "train_loss": 1.0 / (s + 1),
            "val_loss": 1.2 / (s + 1),
            "lr": 1e-3,
            "tokens_per_s": 1e4,
            "accuracy": min(1.0, s / 100),
        }
        for s in range(0, 200, 50)
    ]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n{torn", encoding="utf-8")
    assert figures.training(run, tmp_path / "t.png").stat().st_size > 5_000


def test_attention_and_bench_figures_skip_gracefully(tmp_path, capsys):
    assert figures.attention(None, tmp_path / "a.png") is None
    assert figures.attention(tmp_path, tmp_path / "a.png") is None  # no checkpoint there
    assert figures.bench(tmp_path / "none.json", tmp_path / "b.png") is None
    results = tmp_path / "r.json"
    results.write_text(
        json.dumps({"rows": [{"op": "softmax", "size": 2**k, "ratio": 1 + k / 10} for k in range(4, 8)]})
    )
    assert figures.bench(results, tmp_path / "b.png").exists()
    assert capsys.readouterr().err.count("skipped") == 3


def test_figures_shown_in_the_docs_exist():
    text = (ROOT / "docs" / "figures.md").read_text(encoding="utf-8")
    for name in ("saturation.png", "training.png", "attention.png"):
        assert f"figures/{name}" in text
        assert (ROOT / "docs" / "figures" / name).exists(), f"run `make figures` ({name})"


# ------------------------------------------------------------------------------ the site
def _mkdocs_available() -> bool:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import pymdownx  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(
    not _mkdocs_available(),
    reason="mkdocs, mkdocs-material or pymdown-extensions not installed (pip install -e '.[docs]')",
)
def test_mkdocs_build_strict(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    site = tmp_path / "site"
    page = (site / "derivations" / "attention.dQ-dK" / "index.html").read_text(encoding="utf-8")
    assert 'class="arithmatex"' in page
    assert (site / "src" / "generated" / "numpy" / "attention.py").exists()
    assert "../../src/generated/numpy/attention.py" in page
    assert "cdn" not in (site / "index.html").read_text(encoding="utf-8").lower()
    # the derivation pages are grouped by topic in the navigation, every page under one
    index = (site / "index.html").read_text(encoding="utf-8")
    for topic in ("Attention", "Normalisation", "Optimisers", "Positions"):
        assert topic in index, topic
    from qed.tools import catalogue

    stems = [p.stem for p in (ROOT / "docs" / "derivations").glob("*.md") if p.stem != "index"]
    assert all(catalogue.topic_of(s) != "Beyond the catalogue" for s in stems if catalogue.is_catalogue_page(s))


def test_without_the_sources_the_sources_page_is_left_alone(monkeypatch):
    monkeypatch.setattr(docs, "find_seeds", lambda: None)
    fake = [
        {
            "id": "softmax.shift",
            "title": "t",
            "source": "s",
            "module": "derivations.softmax",
            "statement": "x = x",
            "status": "proved-general",
            "scope": "all sizes",
            "method": "m",
            "assumptions": [],
            "seconds": 0.0,
            "mutants": [],
        }
    ]
    pages, notes = docs.render_all(certs=fake)
    assert "docs/sources.md" not in pages and any("sources.md" in n for n in notes)


def test_plain_text_on_a_page_shows_no_stray_backslash():
    """Python-Markdown unescapes \\* or \\_ but not \\<: a < in a mistake's text ("x < 0") is
    written as an entity, so the rendered page shows "x < 0", never "x \\< 0"."""
    import markdown

    from qed.tools.docs import md_text

    for text in ("gradient passed where x < 0", "P + w < i and j > i", "a*b_c [d] #f"):
        html = markdown.markdown(md_text(text))
        assert "\\" not in html, html
        assert html.removeprefix("<p>").removesuffix("</p>").replace("&lt;", "<").replace("&gt;", ">") == text


def test_search_snippets_read_as_mathematics_not_latex(tmp_path):
    """The site's search index: every formula of an entry's title and text in plain Unicode."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qed" / "tools"))
    import mkdocs_hooks

    text = (
        r"Row \(\frac{\partial \mathcal{L}}{\partial S} = A \odot B\) and \[\sqrt{d_k}\] and <code>\frac{a}{b}</code>"
    )
    plain = mkdocs_hooks.plain_math(text)
    assert "∂ℒ/∂S" in plain and "√(d_k)" in plain and "\\(" not in plain and "\\[" not in plain
    assert r"<code>\frac{a}{b}</code>" in plain  # LaTeX shown as code stays code
    index = tmp_path / "search" / "search_index.json"
    index.parent.mkdir()
    index.write_text(json.dumps({"docs": [{"location": "x/", "title": r"\(\sigma\)", "text": text}]}))
    mkdocs_hooks.on_post_build({"site_dir": str(tmp_path)})
    doc = json.loads(index.read_text())["docs"][0]
    assert doc["title"] == "σ" and "\\(" not in doc["text"]
