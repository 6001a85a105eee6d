"""Reports of `qed check`: a line per step (streamed, so a long file shows progress also when
piped), rich colours on a terminal (not with NO_COLOR, not when piped), `--explain` (each step's
transcript), `--json` (one record per step, the schema of docs/check.md), `--markdown` and
`--html` (a report for people), and the notebook view (`Report._repr_markdown_`,
`Report._repr_html_`).

With `--json`, `--markdown` or `--html` the report is printed at the end, on stdout; progress
goes to stderr meanwhile: one line per formula when stderr is not a terminal (a log, a pipe),
one line rewritten in place on a terminal; `--quiet` silences it.
"""

from __future__ import annotations

import html as _html
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .render import counterexample_text, markdown_table
from .verdict import VERDICTS, Verdict

SCHEMA = 1  # the --json schema's version (docs/check.md, "The JSON schema")
FORMATS = ("text", "json", "markdown", "html")
STYLE = {
    "proved": "green",
    "refuted": "bold red",
    "not understood": "yellow",
    "definition": "cyan",
    "notation": "dim",
}
COLOURS = {  # HTML
    "proved": "#1a7f37",
    "refuted": "#cf222e",
    "not understood": "#9a6700",
    "definition": "#0969da",
    "notation": "#6e7781",
}


@dataclass
class Report:
    """The verdicts of one document, in order. What `qed.check` returns; in Jupyter it renders
    itself as a table (`_repr_markdown_`, `_repr_html_`)."""

    path: str
    verdicts: list = field(default_factory=list)
    formulas: int = 0
    display: int = 0
    problems: list = field(default_factory=list)
    display_not_understood: int = 0  # display formulas with a step not understood
    explained: bool = False  # transcripts shown (and put in the JSON records)

    # ------------------------------------------------------------ views
    @property
    def steps(self) -> list:
        """The steps' verdicts (`Verdict`: .step, .verdict, .reason, .counterexample, …)."""
        return self.verdicts

    @property
    def counts(self) -> dict:
        out = {v: 0 for v in VERDICTS}
        for v in self.verdicts:
            out[v.verdict] += 1
        return out

    @property
    def counterexamples(self) -> list[tuple[Verdict, dict]]:
        """(step, counterexample) of every refuted step."""
        return [(v, v.counterexample) for v in self.verdicts if v.verdict == "refuted" and v.counterexample]

    @property
    def understood(self) -> float:
        """The share of display formulas none of whose steps is "not understood" (1.0 when the
        document has no display formula)."""
        if not self.display:
            return 1.0
        return (self.display - self.display_not_understood) / self.display

    @property
    def ok(self) -> bool:
        """No step refuted."""
        return self.counts["refuted"] == 0

    def __iter__(self):
        return iter(self.verdicts)

    def __len__(self) -> int:
        return len(self.verdicts)

    def __getitem__(self, k):
        return self.verdicts[k]

    def explain(self) -> Report:
        """Compute every step's transcript (shown by the views from now on); returns self."""
        for v in self.verdicts:
            v.explain()
        self.explained = True
        return self

    # ------------------------------------------------------------ JSON
    def to_json(self) -> dict:
        return {
            "path": self.path,
            "formulas": self.formulas,
            "display_formulas": self.display,
            "display_understood": self.display - self.display_not_understood,
            "understood": round(self.understood, 4),
            "counts": self.counts,
            "problems": list(self.problems),
            "steps": [v.to_json() for v in self.verdicts],
        }

    # ------------------------------------------------------------ text
    def summary(self) -> str:
        c = self.counts
        parts = ", ".join(f"{c[k]} {k}" for k in VERDICTS)
        return f"{self.path}: {len(self.verdicts)} steps in {self.formulas} formulas: {parts}"

    def understood_line(self) -> str:
        return (
            f"{self.path}: {self.display - self.display_not_understood} of {self.display} display formulas "
            f"understood ({100 * self.understood:.0f} %)"
        )

    def __repr__(self) -> str:
        return f"<qed check report: {self.summary()}>"

    def __str__(self) -> str:
        lines = [line_of(v, self.explained) for v in self.verdicts]
        return "\n".join(lines + [self.understood_line(), self.summary()])

    # ------------------------------------------------------------ Markdown and HTML
    def markdown(self, explain: bool | None = None) -> str:
        """The report in Markdown, formulas as `$…$` (GitHub, Jupyter, mkdocs render them)."""
        explain = self.explained if explain is None else explain
        if explain:
            self.explain()
        out = [
            f"**{_md_escape(self.summary())}**",
            "",
            f"{_md_escape(self.understood_line())}",
            "",
            markdown_table(self.verdicts),
        ]
        if self.problems:
            out += ["", *[f"- {_md_escape(p)}" for p in self.problems]]
        if explain:
            out += ["", "#### Transcripts", ""]
            for v in self.verdicts:
                out += _md_transcript(v)
        return "\n".join(out) + "\n"

    def html(self, explain: bool | None = None, standalone: bool = False) -> str:
        """The report as HTML, formulas between `\\(…\\)` (MathJax; Jupyter typesets them)."""
        explain = self.explained if explain is None else explain
        if explain:
            self.explain()
        rows = []
        for v in self.verdicts:
            why = v.reason + (f" [{v.scope}]" if v.scope else "")
            if v.counterexample:
                why += " — " + counterexample_text(v.counterexample)
            detail = ""
            if explain:
                detail = _html_transcript(v)
            rows.append(
                f"<tr><td>{v.line}</td><td>\\({_html.escape(v.step)}\\)</td>"
                f'<td style="color:{COLOURS[v.verdict]};font-weight:bold">{v.verdict}</td>'
                f"<td>{_html.escape(why)}{detail}</td></tr>"
            )
        body = (
            f"<p><b>{_html.escape(self.summary())}</b><br>{_html.escape(self.understood_line())}</p>"
            '<table class="qed-check"><thead><tr><th>line</th><th>step</th><th>verdict</th><th>why</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
        return html_page(body) if standalone else body

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def _repr_html_(self) -> str:
        return self.html()


def html_page(body: str) -> str:
    """A standalone HTML page around report bodies (MathJax typesets the formulas)."""
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>qed check</title>\n'
        '<script async src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"></script>\n'
        "<style>table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px;vertical-align:top}"
        "</style></head>\n<body>\n" + body + "\n</body></html>\n"
    )


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_transcript(v: Verdict) -> list[str]:
    out = [f"**line {v.line}: {v.verdict}** — ${v.step}$", ""]
    t = v.explain()
    if v.reason:
        out.append(f"- {_md_escape(v.reason)}" + (f" [{v.scope}]" if v.scope else ""))
    if v.counterexample:
        out.append(f"- {_md_escape(counterexample_text(v.counterexample))}")
    if t is not None:
        out.append(f"- index forms ({t['level']}; indices counted from 0):")
        out.append(f"  - left: {_math(t['lhs'])}")
        out.append(f"  - right: {_math(t['rhs'])}")
        for r in t["rewrites"]:
            out.append(f"- rewrite: {r['rule']} (×{r['count']})" + (f": {r['detail']}" if r["detail"] else ""))
        out += _md_normal_forms(t)
    for a in v.assumptions_latex:
        out.append(f"- assumption: {a}")
    return out + [""]


def _md_normal_forms(t: dict) -> list[str]:
    nf = t["normal_forms"]
    out = []
    if nf["lhs"] is not None and nf["lhs"] == nf["rhs"]:
        out.append(f"- normal forms: both sides {_math(nf['lhs'])}")
    else:
        out.append(f"- normal form, left: {_math(nf['lhs'])}")
        out.append(f"- normal form, right: {_math(nf['rhs'])}")
    out.append(f"- residual (left − right): {_math(t['residual'])}")
    return out


def _math(latex: str | None) -> str:
    return "(too long to show)" if latex is None else f"${latex}$"


def _html_transcript(v: Verdict) -> str:
    items = []
    t = v.explain()
    if t is not None:
        items.append(f"index forms ({t['level']}; indices from 0): left {_hmath(t['lhs'])}, right {_hmath(t['rhs'])}")
        for r in t["rewrites"]:
            items.append(f"rewrite: {r['rule']} (×{r['count']}) {_hmd(r['detail'])}")
        nf = t["normal_forms"]
        if nf["lhs"] is not None and nf["lhs"] == nf["rhs"]:
            items.append(f"normal forms: both sides {_hmath(nf['lhs'])}")
        else:
            items.append(f"normal forms: left {_hmath(nf['lhs'])}, right {_hmath(nf['rhs'])}")
        items.append(f"residual: {_hmath(t['residual'])}")
    items += [f"assumption: {_hmd(a)}" for a in v.assumptions_latex]
    if not items:
        return ""
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _hmath(latex: str | None) -> str:
    return "(too long to show)" if latex is None else f"\\({_html.escape(latex)}\\)"


def _hmd(md: str) -> str:
    """Markdown with `$…$` mathematics as HTML with `\\(…\\)`."""
    parts = md.split("$")
    return "".join(_html.escape(p) if k % 2 == 0 else f"\\({_html.escape(p)}\\)" for k, p in enumerate(parts))


# ------------------------------------------------------------------------------ plain lines
def line_of(v: Verdict, explain: bool = False) -> str:
    out = f"{v.path}:{v.line}: {v.verdict}: {v.step}"
    detail = v.reason
    if v.scope:
        detail += f" [{v.scope}]"
    if v.counterexample:
        detail += "; " + counterexample_text(v.counterexample)
    out += f"  — {detail}"
    if explain:
        out += "".join(f"\n    {line}" for line in explain_lines(v))
    return out


def explain_lines(v: Verdict) -> list[str]:
    """The transcript of a step, as indented lines of text with LaTeX mathematics."""
    out = []
    t = v.explain()
    if t is not None:
        out.append(f"index forms ({t['level']}; indices counted from 0):")
        out += transcript_lines(t, ("left", "right"))
    if v.assumptions_latex:
        out.append("assumptions:")
        out += [f"  · {a}" for a in v.assumptions_latex]
    return out


def transcript_lines(t: dict, sides: tuple[str, str], indent: str = "") -> list[str]:
    """An identity's transcript ({"lhs", "rhs", "rewrites", "normal_forms", "residual"}) as lines
    of text with LaTeX mathematics, its two sides named `sides`: a step's (`qed check --explain`)
    and a claim's (`qed prove CLAIM --explain`)."""
    a, b = sides
    width = max(len(a), len(b)) + 1
    out = [f"  {a + ':':<{width}} {_text_math(t['lhs'])}", f"  {b + ':':<{width}} {_text_math(t['rhs'])}"]
    if t["rewrites"]:
        out.append("rewrites:")
        for r in t["rewrites"]:
            out.append(f"  {r['rule']} ×{r['count']}" + (f": {r['detail']}" if r["detail"] else ""))
    nf = t["normal_forms"]
    if nf["lhs"] is not None and nf["lhs"] == nf["rhs"]:
        out.append(f"normal forms: both sides {_text_math(nf['lhs'])}")
    else:
        out.append(f"normal form, {a + ':':<{width}} {_text_math(nf['lhs'])}")
        out.append(f"normal form, {b + ':':<{width}} {_text_math(nf['rhs'])}")
    out.append(f"residual ({a} − {b}): {_text_math(t['residual'])}")
    return [indent + line for line in out]


def _text_math(latex: str | None) -> str:
    return "(too long to show)" if latex is None else f"${latex}$"


# ------------------------------------------------------------------------------ the command line
class _Printer:
    def __init__(self, fmt: str, explain: bool, quiet: bool = False):
        self.fmt = fmt
        self.explain = explain
        self.quiet = quiet
        self.console = None
        self.tty_progress = sys.stderr.isatty()
        if fmt == "text" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
            try:
                from rich.console import Console

                self.console = Console(highlight=False)
            except ImportError:  # pragma: no cover - rich is a dependency
                self.console = None

    def step(self, v: Verdict) -> None:
        if self.fmt != "text":
            return
        if self.console is None:
            print(line_of(v, self.explain), flush=True)
            return
        from rich.markup import escape

        style = STYLE[v.verdict]
        text = f"[dim]{escape(v.path)}:{v.line}:[/dim] [{style}]{v.verdict}[/{style}]: {escape(v.step)}"
        detail = v.reason + (f" [{v.scope}]" if v.scope else "")
        if v.counterexample:
            detail += "; " + counterexample_text(v.counterexample)
        self.console.print(text + f"  [dim]— {escape(detail)}[/dim]")
        if self.explain:
            for line in explain_lines(v):
                self.console.print(f"    [dim]{escape(line)}[/dim]")

    def formula(self, path: str, number: int, total: int, line: int, verdicts: list) -> None:
        """Progress, for the formats that print their report at the end."""
        if self.fmt == "text" or self.quiet:
            return
        what = ", ".join(v.verdict for v in verdicts) or "no step"
        text = f"qed check: {path}: formula {number}/{total} (line {line}): {what}"
        if self.tty_progress:
            print("\r\x1b[2K" + text, end="", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def summary(self, report: Report) -> None:
        if self.fmt != "text":
            if self.tty_progress and not self.quiet:
                print("\r\x1b[2K", end="", file=sys.stderr, flush=True)
            return
        for p in report.problems:
            print(f"{report.path}: {p}", flush=True)
        if report.display:
            print(report.understood_line(), flush=True)
        if self.console is None:
            print(report.summary(), flush=True)
        else:
            from rich.markup import escape

            self.console.print(f"[bold]{escape(report.summary())}[/bold]")


def run_document(text: str, kind: str, context=None, path: str = "<text>", on_step=None, on_formula=None) -> Report:
    """Check every formula of a document, in order; `on_step(verdict)` and
    `on_formula(number, total, line, verdicts)` are called as each is done."""
    from .builtins import make_context
    from .context import apply_block
    from .extract import context_blocks, document_formulas
    from .verdict import Checker

    ctx, problems = make_context(context)
    decls, body = context_blocks(text)
    if decls.strip():
        problems += apply_block(ctx, decls)
    checker = Checker(ctx, path)
    found = document_formulas(body, kind)
    report = Report(path, [], len(found), sum(1 for f in found if f.display), problems)
    for number, f in enumerate(found, start=1):
        vs = checker.formula(f.text, f.line, f.display, number)
        for v in vs:
            report.verdicts.append(v)
            if on_step is not None:
                on_step(v)
        if f.display and any(v.verdict == "not understood" for v in vs):
            report.display_not_understood += 1
        if on_formula is not None:
            on_formula(number, len(found), f.line, vs)
    return report


def run_cli(
    paths: list[Path],
    as_json: bool = False,
    strict: bool = False,
    explain: bool = False,
    fmt: str | None = None,
    quiet: bool = False,
) -> int:
    """`qed check FILE...`: exit 1 on a refuted step (and, with --strict, on one not
    understood) or on a file that cannot be read (2 if it does not exist)."""
    from ..latex_lint import LintInputError, _NoSuchPath, read_source
    from .extract import kind_of

    fmt = fmt or ("json" if as_json else "text")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    printer = _Printer(fmt, explain, quiet)
    reports: list[Report] = []
    status = 0
    for path in paths:
        try:
            text = read_source(path)
        except _NoSuchPath as e:
            print(f"qed: error: {e}", file=sys.stderr, flush=True)
            status = max(status, 2)
            continue
        except LintInputError as e:
            print(f"qed: error: {e}", file=sys.stderr, flush=True)
            status = max(status, 1)
            continue
        report = run_document(
            text,
            kind_of(path),
            path=str(path),
            on_step=printer.step,
            on_formula=lambda k, n, line, vs, p=str(path): printer.formula(p, k, n, line, vs),
        )
        if explain:
            report.explain()
        printer.summary(report)
        reports.append(report)
        c = report.counts
        redefined = any(v.verdict == "definition" and v.counterexample for v in report.verdicts)
        if c["refuted"] or (strict and (c["not understood"] or redefined)):
            status = max(status, 1)
    if fmt == "json":
        print(json.dumps({"schema": SCHEMA, "files": [r.to_json() for r in reports]}, indent=1, ensure_ascii=False))
    elif fmt == "markdown":
        print("\n".join(f"## {r.path}\n\n{r.markdown(explain)}" for r in reports), end="")
    elif fmt == "html":
        print(html_page("".join(f"<h2>{_html.escape(r.path)}</h2>{r.html(explain)}" for r in reports)), end="")
    return status
