"""`qed check`: a user's own derivation, checked step by step.

From Python or a notebook (also as `qed.check` and `qed.derive`, loaded on first use):

    import qed
    r = qed.check(r"\\frac{\\partial A_{ij}}{\\partial S_{ik}} = A_{ij}(\\delta_{jk} - A_{ik})")
    r.steps[0].verdict            # 'proved'; r renders as a table in Jupyter
    qed.check("notes.md")         # a Markdown, LaTeX or plain-text file
    qed.derive(r"\\log(1 + e^{x})")  # the derivative, the proved backward, NumPy/PyTorch code

* `check(latex_or_path, context=None, explain=False)` — a formula, a document's text or a file;
  returns a `Report` (steps, counts, counterexamples, `_repr_markdown_`, `_repr_html_`);
* `derive(formula, wrt=None, context=None)` — a `Derivation` (derivation.py);
* `check_text(text, context=None)` — the list of `Verdict`s of a formula or a document;
* `check_file(path)`, `check_document(text, kind)` — a `Report`;
* `main(paths, ...)` — the command line.

The pieces: extract.py (where the formulas are), grammar.py and parser.py (a whitelisted LaTeX
grammar that fails closed), context.py and builtins.py (what each name means), elaborate.py and
expand.py (to the back end's array language and index form), verdict.py (one verdict per step),
transcript.py (why: the rewrites, the normal forms, mathematics as LaTeX), report.py (text,
rich, JSON, Markdown, HTML), derivation.py (a formula's derivative and code).
"""

from __future__ import annotations

import os
from pathlib import Path

from .extract import Formula, kind_of
from .report import Report, run_document
from .verdict import VERDICTS, Verdict

__all__ = [
    "check",
    "derive",
    "check_text",
    "check_file",
    "check_document",
    "Report",
    "Verdict",
    "VERDICTS",
    "main",
]

_FILE_SUFFIXES = (".md", ".markdown", ".tex", ".latex", ".txt", ".text")


def check_document(text: str, kind: str = "markdown", context=None, path: str = "<text>") -> Report:
    """Every step of a document of `kind` ("markdown", "latex" or "text"), in order."""
    return run_document(text, kind, context=context, path=path)


def _formulas_of(text: str) -> list[Formula] | None:
    """A text without `$`: one formula (with an environment), or one formula a line."""
    if "\\begin" in text:
        return [Formula(text, 1, True)]
    return [Formula(line, no, True) for no, line in enumerate(text.split("\n"), start=1) if line.strip()]


def _check_formulas(found: list[Formula], context=None, path: str = "<formula>") -> Report:
    from .builtins import make_context
    from .verdict import Checker

    ctx, problems = make_context(context)
    checker = Checker(ctx, path)
    report = Report(path, [], len(found), len(found), problems)
    for number, f in enumerate(found, start=1):
        vs = checker.formula(f.text, f.line, True, number)
        report.verdicts.extend(vs)
        if any(v.verdict == "not understood" for v in vs):
            report.display_not_understood += 1
    return report


def check_text(text: str, context=None) -> list[Verdict]:
    """The verdicts of a Markdown document (`text` with `$`), of one formula (with an environment:
    `\\begin{aligned}`), or of formulas one a line."""
    if "$" in text:
        return check_document(text, "markdown", context=context).verdicts
    return _check_formulas(_formulas_of(text), context).verdicts


def check_file(path, context=None) -> Report:
    from ..latex_lint import read_source

    text = read_source(path)
    return run_document(text, kind_of(path), context=context, path=str(path))


def _is_path(x) -> bool:
    if isinstance(x, os.PathLike):
        return True
    if not isinstance(x, str) or "\n" in x or "$" in x or "\\" in x or len(x) > 1024:
        return False
    return x.strip().lower().endswith(_FILE_SUFFIXES) or Path(x).is_file()


def check(latex_or_path, context=None, explain: bool = False) -> Report:
    """Check a formula, a document or a file, step by step (see docs/check.md).

    `latex_or_path`: a path (a `Path`, or a string naming a `.md`, `.tex` or `.txt` file or an
    existing file); a Markdown document (text with `$`); one formula, or formulas one a line.
    `context`: declarations — a `qed` block's text, or a dict such as `{"W": "matrix d x d",
    "t": "index"}`. `explain=True` computes every step's transcript at once (shown by the views).
    Returns a `Report`: `.steps` (`Verdict`s: `.step`, `.verdict`, `.reason`, `.scope`,
    `.assumptions`, `.counterexample`, `.explain()`), `.counts`, `.counterexamples`,
    `.understood`; in Jupyter it renders as a table."""
    if _is_path(latex_or_path):
        report = check_file(latex_or_path, context=context)
    else:
        text = str(latex_or_path)
        if "$" in text:
            report = check_document(text, "markdown", context=context)
        else:
            report = _check_formulas(_formulas_of(text), context)
    return report.explain() if explain else report


def derive(formula: str, wrt: str | None = None, context=None, name: str = "f"):
    """The derivative of a formula, its proved backward and the NumPy/PyTorch code codegen would
    print for it: see `qed.tools.check.derivation.derive`."""
    from .derivation import derive as _derive

    return _derive(formula, wrt=wrt, context=context, name=name)


def main(
    paths: list[str],
    as_json: bool = False,
    strict: bool = False,
    explain: bool = False,
    fmt: str | None = None,
    quiet: bool = False,
) -> int:
    from .report import run_cli

    return run_cli([Path(p) for p in paths], as_json=as_json, strict=strict, explain=explain, fmt=fmt, quiet=quiet)
