"""`qed check`'s reports: the `--json` schema field by field, `--markdown` and `--html`, the progress
lines on stderr, and `--explain`'s transcripts (index forms, rewrites, normal forms, assumptions
as LaTeX mathematics, never SymPy's strings)."""

import json
import re

import pytest

from qed.tools.check import check_text, main
from qed.tools.check.report import SCHEMA
from qed.tools.check.verdict import VERDICTS

DOC = (
    "# A small derivation\n\n"
    "$$\nS_{ij} = \\frac{1}{\\sqrt{d_k}} \\sum_{m=1}^{d_k} Q_{im} K_{jm}\n$$\n\n"  # proved (line 4)
    "$$\n\\frac{\\partial A_{ij}}{\\partial S_{ik}} = A_{ij}(\\delta_{jk} - A_{ik})\n$$\n\n"  # proved, a delta sifted (8)
    "$$\n\\frac{\\partial \\mathcal{L}}{\\partial \\mathbf{V}} = \\mathbf{A} "
    "\\frac{\\partial \\mathcal{L}}{\\partial \\mathbf{O}}\n$$\n\n"  # refuted (12)
    "$$\nZ = \\mathrm{Rotate}(Q)\n$$\n\n"  # not understood (16)
    "$$\nf(u) = u^2 + 1\n$$\n\n"  # a definition (20)
    "Tokens $x \\rightarrow y$ flow.\n"  # notation, inline (23)
)

# the schema of docs/check.md, written out here independently of the code: a field renamed,
# dropped or retyped in the code fails this test
TOP = {"schema": int, "files": list}
FILE = {
    "path": str,
    "formulas": int,
    "display_formulas": int,
    "display_understood": int,
    "understood": float,
    "counts": dict,
    "problems": list,
    "steps": list,
}
STEP = {
    "verdict": str,
    "step": str,
    "reason": str,
    "line": int,
    "path": str,
    "scope": str,
    "assumptions": list,
    "counterexample": (dict, type(None)),
    "defines": (str, type(None)),
    "seconds": float,
    "formula": int,
    "display": bool,
    "assumptions_latex": list,
    "transcript": (dict, type(None)),
}
COUNTEREXAMPLE = {"at": dict, "seed": (int, type(None)), "lhs": (int, float, str), "rhs": (int, float, str)}
TRANSCRIPT = {
    "level": str,
    "lhs": (str, type(None)),
    "rhs": (str, type(None)),
    "rewrites": list,
    "normal_forms": dict,
    "residual": (str, type(None)),
}
REWRITE = {"rule": str, "count": int, "detail": str}


def typed(record: dict, schema: dict, what: str) -> None:
    assert set(record) == set(schema), (what, sorted(set(record) ^ set(schema)))
    for key, kind in schema.items():
        assert isinstance(record[key], kind), (what, key, record[key])


@pytest.fixture()
def doc(tmp_path):
    p = tmp_path / "doc.md"
    p.write_text(DOC, encoding="utf-8")
    return p


def run_json(capsys, *args):
    status = main(*args)
    captured = capsys.readouterr()
    return status, json.loads(captured.out), captured.err


@pytest.mark.parametrize("explain", [False, True])
def test_the_json_schema_field_by_field(doc, capsys, explain):
    status, data, _ = run_json(capsys, [str(doc)], False, False, explain, "json", True)
    assert status == 1  # a step is refuted
    typed(data, TOP, "top")
    assert data["schema"] == SCHEMA == 1
    (f,) = data["files"]
    typed(f, FILE, "file")
    assert f["path"] == str(doc) and f["formulas"] == 6 and f["display_formulas"] == 5
    assert f["display_understood"] == 4 and f["understood"] == 0.8
    assert list(f["counts"]) == list(VERDICTS)
    assert sum(f["counts"].values()) == len(f["steps"])
    for s in f["steps"]:
        typed(s, STEP, s["step"])
        assert s["verdict"] in VERDICTS and s["path"] == str(doc)
        assert len(s["assumptions"]) == len(s["assumptions_latex"])
        assert all(isinstance(a, str) for a in s["assumptions"] + s["assumptions_latex"])
        if s["counterexample"] is not None:
            typed(s["counterexample"], COUNTEREXAMPLE, s["step"])
        if s["transcript"] is not None:
            assert explain
            typed(s["transcript"], TRANSCRIPT, s["step"])
            assert set(s["transcript"]["normal_forms"]) == {"lhs", "rhs"}
            for r in s["transcript"]["rewrites"]:
                typed(r, REWRITE, s["step"])
    verdicts = [(s["line"], s["formula"], s["display"], s["verdict"]) for s in f["steps"]]
    assert verdicts == [
        (4, 1, True, "proved"),
        (8, 2, True, "proved"),
        (12, 3, True, "refuted"),
        (16, 4, True, "not understood"),
        (20, 5, True, "definition"),
        (23, 6, False, "notation"),
    ]
    proved = [s for s in f["steps"] if s["verdict"] == "proved"]
    assert all(s["transcript"] is not None for s in proved) == explain


def test_progress_is_a_line_per_formula_on_stderr_when_piped(doc, capsys):
    _, data, err = run_json(capsys, [str(doc)], False, False, False, "json")
    lines = err.strip().split("\n")
    assert len(lines) == data["files"][0]["formulas"] == 6
    assert lines[0] == f"qed check: {doc}: formula 1/6 (line 4): proved"
    assert lines[2].endswith("(line 12): refuted")
    _, _, err = run_json(capsys, [str(doc)], False, False, False, "json", True)
    assert err == ""  # --quiet


def test_the_plain_report_streams_a_line_per_step(doc, capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert main([str(doc)]) == 1
    out = capsys.readouterr().out.strip().split("\n")
    assert [line.split(": ")[1] for line in out[:6]] == [
        "proved",
        "proved",
        "refuted",
        "not understood",
        "definition",
        "notation",
    ]
    assert out[-2] == f"{doc}: 4 of 5 display formulas understood (80 %)"


def test_the_markdown_and_html_reports(doc, capsys):
    assert main([str(doc)], fmt="markdown", quiet=True) == 1
    md = capsys.readouterr().out
    assert md.startswith(f"## {doc}\n")
    assert "| line | step | verdict | why |" in md
    assert "| 12 | $\\frac{\\partial \\mathcal{L}}{\\partial \\mathbf{V}}" in md and "| refuted |" in md
    assert "left =" in md and "right =" in md  # the counterexample's numbers
    assert "#### Transcripts" not in md
    main([str(doc)], fmt="markdown", explain=True, quiet=True)
    md = capsys.readouterr().out
    assert "#### Transcripts" in md and "- rewrite: delta sifted" in md
    main([str(doc)], fmt="html", quiet=True)
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") and "mathjax" in page
    assert ">refuted</td>" in page and ">proved</td>" in page and "\\(S_{ij}" in page


# ------------------------------------------------------------------------------ --explain
def test_a_proved_step_shows_both_index_forms_the_rewrites_and_the_normal_forms():
    (v,) = check_text(r"\frac{\partial A_{ij}}{\partial S_{ik}} = A_{ij}(\delta_{jk} - A_{ik})")
    t = v.explain()
    assert t["level"] == "local" and t["residual"] == "0"
    assert r"\delta_{j k}" in t["lhs"] and r"\sum_{k'=0}^{n - 1}" in t["lhs"]  # bound indices renamed apart
    assert [r["rule"] for r in t["rewrites"]] == ["delta sifted"]
    assert t["rewrites"][0]["detail"].startswith("$\\sum_{k'=0}^{n - 1}")
    assert t["normal_forms"]["lhs"] == t["normal_forms"]["rhs"] is not None
    assert v.to_json()["transcript"] == t


def test_a_refuted_step_shows_the_residual():
    (v,) = check_text(r"S_{ij} = \sum_{m=1}^{d_k} Q_{im} K_{jm}")
    t = v.explain()
    assert v.verdict == "refuted" and t["level"] == "full"
    assert t["normal_forms"]["lhs"] != t["normal_forms"]["rhs"]
    assert t["residual"] not in (None, "0") and r"\sqrt{d_{k}}" in t["residual"]


def test_steps_not_decided_in_index_form_have_no_transcript():
    v = check_text("$$\nf(u) = u^2 + 1\n$$\n\n$$\nZ = \\mathrm{Rotate}(Q)\n$$\n")
    assert [x.explain() for x in v] == [None, None]


SYMPY_STRINGS = re.compile(r"Sum\(|sqrt\(|exp\(|\*\*|_k\d|KroneckerDelta|Indexed")


@pytest.mark.parametrize(
    "step",
    [
        r"\frac{\partial A_{ij}}{\partial S_{ik}} = A_{ij}(\delta_{jk} - A_{ik})",
        r"\sum_{j} A_{ij} = 1",
        r"\frac{\partial \mathcal{L}}{\partial \mathbf{Q}} = \frac{1}{\sqrt{d_k}} \frac{\partial \mathcal{L}}{\partial \mathbf{S}} \mathbf{K}",
    ],
)
def test_assumptions_are_latex_mathematics_not_sympy_strings(step):
    (v,) = check_text(step)
    assert v.verdict == "proved" and v.assumptions_latex
    for md in v.assumptions_latex:
        assert not SYMPY_STRINGS.search(md), md
        assert md.count("$") % 2 == 0 and "$" in md, md
    side = [a for a in v.assumptions_latex if a.startswith("side condition")]
    assert side and all(re.search(r"\$[^$]*\\(neq|in) [^$]*\$", a) for a in side), side
    # the plain text keeps the back end's own words (what `qed prove` would print)
    assert any("≠ 0" in a or "∈ [" in a for a in v.assumptions)


def test_the_command_line_explain_prints_the_transcript(doc, capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    main([str(doc)], explain=True)
    out = capsys.readouterr().out
    block = out.split(f"{doc}:8: proved:")[1].split(f"{doc}:12:")[0]
    assert "index forms (local; indices counted from 0):" in block
    assert "left:  $" in block and "right: $" in block
    assert "delta sifted ×1: $" in block
    assert "normal forms: both sides $" in block and "residual (left − right): $0$" in block
    assert "assumptions:" in block and "· side condition proved (indices counted from 0): $k \\in [0, n - 1]$" in block
