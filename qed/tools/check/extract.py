"""Where the formulas of a document are, and its `qed` context block.

Formulas are found as `qed lint-latex` finds them (qed/tools/latex_lint.py, `extract`):
Markdown `$$ … $$` and `$ … $` outside code; in plain text also bare formula lines (a line with a
LaTeX command, `=`, `_` or `^` that reads as a formula rather than prose). A `$ … $` alone on
its line, and a bare line, is display math.

In a LaTeX file (`.tex`): `\\[ … \\]`, `\\( … \\)`, `$$ … $$`, `$ … $` and the environments
equation, align, gather, multline (starred or not), comments and `\\label`/`\\nonumber`/`\\notag`
removed; an align or gather keeps its rows (`\\\\`), which the splitter reads as aligned rows.

A context block is a fenced block whose info string is `qed` (```` ```qed ````), or the lines of
a front matter (`---` … `---` at the top) that start with a declaration keyword; its lines are
blanked before the formulas are looked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..latex_lint import extract as find_math

_FENCE_OPEN = re.compile(r"^\s*(`{3,}|~{3,})\s*qed\s*$")
_FRONT_DECL = re.compile(r"^\s*(size|sizes|index|indices|scalar|scalars|vector|matrix|function)\b")


@dataclass(frozen=True)
class Formula:
    text: str
    line: int
    display: bool


def context_blocks(text: str) -> tuple[str, str]:
    """(the declarations of the document's `qed` blocks and front matter, the text with those
    lines blanked — same number of lines)."""
    lines = text.split("\n")
    decls: list[str] = []
    k = 0
    if lines and lines[0].strip() == "---":
        for j in range(1, len(lines)):
            if lines[j].strip() == "---":
                for m in range(1, j):
                    if _FRONT_DECL.match(lines[m]):
                        decls.append(lines[m])
                        lines[m] = ""
                k = j + 1
                break
    while k < len(lines):
        m = _FENCE_OPEN.match(lines[k])
        if m:
            fence = m.group(1)
            lines[k] = ""
            k += 1
            while k < len(lines) and not lines[k].strip().startswith(fence):
                decls.append(lines[k])
                lines[k] = ""
                k += 1
            if k < len(lines):
                lines[k] = ""
        k += 1
    return "\n".join(decls), "\n".join(lines)


def formulas(text: str, markdown: bool) -> list[Formula]:
    """Every formula of a document, in order."""
    out = []
    for m in find_math(text, markdown):
        lead = m.text[: len(m.text) - len(m.text.lstrip())]
        out.append(Formula(m.text, m.line + lead.count("\n"), m.display))  # the line of its first character
    return out


_LATEX_ENVS = ("equation", "equation*", "align", "align*", "gather", "gather*", "multline", "multline*")
_TEX_DELIMS = re.compile(
    r"\\\[(?P<d>.*?)\\\]|\\\((?P<i>.*?)\\\)|\$\$(?P<dd>.*?)\$\$|(?<!\\)\$(?P<ii>[^$]+?)(?<!\\)\$"
    r"|\\begin\{(?P<env>" + "|".join(re.escape(e) for e in _LATEX_ENVS) + r")\}(?P<body>.*?)\\end\{(?P=env)\}",
    re.S,
)
_TEX_NOISE = re.compile(r"\\(?:label|tag)\{[^{}]*\}|\\(?:nonumber|notag)\b")


def _strip_tex_comments(text: str) -> str:
    """`%` to the end of the line, unless escaped (`\\%`); lines and offsets kept."""
    return re.sub(r"(?<!\\)%[^\n]*", lambda m: " " * len(m.group()), text)


def latex_formulas(text: str) -> list[Formula]:
    """The formulas of a LaTeX file (see the module docstring)."""
    body = _strip_tex_comments(text)
    start = body.find("\\begin{document}")
    out = []
    for m in _TEX_DELIMS.finditer(body, max(start, 0)):
        if m.group("env"):
            env = m.group("env").rstrip("*")
            inner = _TEX_NOISE.sub(" ", m.group("body"))
            if env in ("align", "gather"):
                inner = "\\begin{aligned}" + inner + "\\end{aligned}"
            elif env == "multline":
                inner = inner.replace("\\\\", " ")
            at, display = m.start("body"), True
        else:
            g = next(g for g in ("d", "dd", "i", "ii") if m.group(g) is not None)
            inner, at, display = _TEX_NOISE.sub(" ", m.group(g)), m.start(g), g in ("d", "dd")
        lead = len(inner) - len(inner.lstrip())
        line = body.count("\n", 0, at) + 1 + inner[:lead].count("\n")
        out.append(Formula(inner, line, display))
    return out


def is_latex(path) -> bool:
    return str(path).lower().endswith((".tex", ".latex"))


def document_formulas(text: str, kind: str) -> list[Formula]:
    """The formulas of a document of `kind`: "markdown", "latex" or "text"."""
    if kind == "latex":
        return latex_formulas(text)
    return formulas(text, markdown=kind == "markdown")


def kind_of(path) -> str:
    from ..latex_lint import is_markdown

    if is_latex(path):
        return "latex"
    return "markdown" if is_markdown(path) else "text"
