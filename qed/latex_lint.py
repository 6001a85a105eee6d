"""`qed lint-latex`: the LaTeX rules of seed A's FAQ, checked in Markdown and in plain text.

The rules (FORMULAS.md, "LaTeX rules for everything the project renders"):

* ``block-spacing``    a display math block has a blank line before and after it;
* ``break-trailing``   ``\\\\`` ends its line: nothing (not even a space) after it on the line;
* ``italic-word``      words are set with ``\\mathrm{}``/``\\text{}``/``\\operatorname{}``, not
  as a run of italic letters (``softmax`` reads as s·o·f·t·m·a·x);
* ``subscript-braces`` a sub- or superscript of more than one character is braced
  (``W_attention`` lowers only the ``a``: write ``W_{attention}``);
* ``lost-subscript``   ``\\mathbf{W}i^Q`` or ``d{\\text{model}}``: an underscore was lost;
* ``env-rows``         rows of ``aligned``/``cases``/``bmatrix``/... are separated by ``\\\\``,
  not by ``\\ `` (a control space: every row collapses into one line).

Where the math is:

* Markdown (``.md``): ``$$ … $$`` display blocks and ``$ … $`` inline math, outside code
  fences, code spans and HTML comments;
* plain text (anything else, e.g. the source documents): the same delimiters, plus **bare
  formula lines** — a line with no ``$`` that holds a LaTeX command, ``=``, ``_`` or ``^`` and
  reads as a formula rather than as prose (see `_is_formula_line`). A bare line, and a ``$ … $``
  that stands alone on its lines, is display math there.

`lint_file(path)` returns `Finding`s; `main(paths)` prints ``file:line: rule: message (fix)``
and returns 1 if anything was found, 0 if the files are clean.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

RULES = ("block-spacing", "break-trailing", "italic-word", "subscript-braces", "lost-subscript",
         "env-rows")

# Commands whose braced argument is upright text, a font, a name or a layout argument: the
# letters inside are not italic variables.
PROTECTING = ("mathrm", "text", "textrm", "textit", "textbf", "texttt", "textsf", "operatorname",
              "mathbf", "mathit", "mathsf", "mathtt", "mathcal", "mathbb", "mathfrak", "mathscr",
              "boldsymbol", "bm", "mbox", "hbox", "begin", "end", "label", "tag", "color",
              "textcolor", "hspace", "vspace", "href", "url")
# Font and accent commands after whose one-letter argument a bare letter/digit run means a lost `_`.
FONT_GROUPS = ("mathbf", "mathrm", "boldsymbol", "bm", "mathit", "mathsf", "mathcal", "mathbb",
               "hat", "tilde", "bar", "vec", "widehat", "overline")
ENVIRONMENTS = ("aligned", "align", "align*", "alignedat", "gathered", "split", "cases",
                "matrix", "bmatrix", "pmatrix", "vmatrix", "Vmatrix", "Bmatrix", "smallmatrix",
                "array", "eqnarray")
# Words that LaTeX has a command for: the suggested fix names the command.
KNOWN_FUNCTIONS = {w: "\\" + w for w in ("max", "min", "exp", "log", "ln", "sin", "cos", "tan",
                                           "tanh", "sinh", "cosh", "arg", "det", "lim", "sup",
                                           "inf", "gcd", "deg", "dim", "ker", "Pr")}
KNOWN_FUNCTIONS.update({"argmax": "\\arg\\max", "argmin": "\\arg\\min"})


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    rule: str
    message: str
    fix: str

    def format(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.message} ({self.fix})"


@dataclass(frozen=True)
class Math:
    """One piece of math: its text without delimiters, where it starts, and how it is set."""

    text: str
    line: int          # 1-based line of text[0]
    display: bool
    first_line: int    # lines the whole construct (delimiters included) occupies
    last_line: int
    kind: str          # "$$", "$" or "bare"


# ------------------------------------------------------------------------------ extraction
def _mask_markdown(text: str) -> str:
    """Blank out code fences, code spans and HTML comments (same length, newlines kept)."""
    out = list(text)

    def blank(a: int, b: int) -> None:
        for i in range(a, b):
            if out[i] != "\n":
                out[i] = " "

    pos = 0
    fence = None
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if fence is None and marker:
            fence = marker.group(1)
            blank(pos, pos + len(line))
        elif fence is not None:
            blank(pos, pos + len(line))
            if stripped.startswith(fence) and stripped.strip() == stripped.strip()[0] * len(stripped.strip()):
                fence = None
        pos += len(line)
    masked = "".join(out)
    for m in re.finditer(r"<!--.*?-->", masked, re.S):
        blank(m.start(), m.end())
    masked = "".join(out)
    for m in re.finditer(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", masked, re.S):
        if "\n\n" not in m.group(0):
            blank(m.start(), m.end())
    return "".join(out)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _dollar_math(masked: str, smart: bool = False) -> list[Math]:
    """`$$ … $$` and `$ … $` in (masked) text; an inline `$` never spans a blank line. With
    `smart` (Markdown, as pymdownx.arithmatex reads it), an inline `$` followed by a space does
    not open math and one preceded by a space does not close it ("costs $5 or $6" is prose)."""
    found = []
    i, n = 0, len(masked)
    while i < n:
        c = masked[i]
        if c == "\\":          # an escaped character (\$) is not a delimiter
            i += 2
            continue
        if c != "$":
            i += 1
            continue
        if masked.startswith("$$", i):
            j = masked.find("$$", i + 2)
            if j < 0:
                i += 2
                continue
            found.append((i, i + 2, j, j + 2, "$$"))
            i = j + 2
            continue
        if smart and (i + 1 >= n or masked[i + 1].isspace()):
            i += 1
            continue
        j = i + 1
        while j < n:
            if masked[j] == "\\":
                j += 2
                continue
            if masked.startswith("\n\n", j) or masked.startswith("\n \n", j):
                break
            if masked[j] == "$":
                break
            j += 1
        if smart and j < n and masked[j] == "$" and masked[j - 1].isspace():
            i += 1               # not a closer, and math never holds a bare `$`: not math
            continue
        if j < n and masked[j] == "$" and j > i + 1:
            found.append((i, i + 1, j, j + 1, "$"))
            i = j + 1
        else:
            i = j if j > i else i + 1
    out = []
    for start, body, end, stop, kind in found:
        first, last = _line_of(masked, start), _line_of(masked, stop - 1)
        line_start = masked.rfind("\n", 0, start) + 1
        line_end = masked.find("\n", stop)
        line_end = n if line_end < 0 else line_end
        alone = (_strip_prefix(masked[line_start:start]).strip() == ""
                 and masked[stop:line_end].strip() == "")
        out.append(Math(masked[body:end], _line_of(masked, body), kind == "$$" or alone,
                        first, last, kind))
    return out


def _strip_prefix(s: str) -> str:
    """What precedes a block on its line, less blockquote markers and indentation."""
    return re.sub(r"^[\s>]*", "", s)


_PROSE_WORD = re.compile(r"^[(\"']?[a-z]{2,}[)\"']?[,.;:?!]?$")


def _is_formula_line(line: str) -> bool:
    """A bare line of LaTeX in a plain-text document (no `$`): it has a command, `=`, `_` or
    `^`, and fewer than four prose words (all-lowercase tokens of two or more letters; `softmax`
    in `A = softmax(…)` is one) — prose that merely mentions `\\\\` or `W_attention` has many."""
    s = line.strip()
    if not s or "$" in s:
        return False
    if not (re.search(r"\\[A-Za-z]+", s) or re.search(r"[=_^]", s)):
        return False
    words = sum(1 for tok in s.split() if _PROSE_WORD.match(tok))
    return words < 4


def extract(text: str, markdown: bool) -> list[Math]:
    """Every piece of math in a document, in order."""
    masked = _mask_markdown(text) if markdown else text
    maths = _dollar_math(masked, smart=markdown)
    if not markdown:
        inside = set()
        for m in maths:
            inside.update(range(m.first_line, m.last_line + 1))
        for no, line in enumerate(masked.split("\n"), start=1):
            if no not in inside and _is_formula_line(line):
                indent = len(line) - len(line.lstrip())
                maths.append(Math(line[indent:].rstrip(), no, True, no, no, "bare"))
        maths.sort(key=lambda m: (m.first_line, m.line))
    return maths


# ------------------------------------------------------------------------------ the rules
def _group_end(s: str, open_at: int) -> int:
    """Index just past the brace group that opens at s[open_at] == '{' (or len(s))."""
    depth = 0
    i = open_at
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(s)


def _masks(s: str) -> tuple[str, str]:
    """Two copies of `s`, same length: `names` with command names blanked, and `letters` with,
    in addition, the arguments of protecting commands and braced sub/superscripts blanked — the
    letters left in `letters` are the ones LaTeX sets as italic variables on the main line."""
    names = list(s)
    letters = list(s)

    def blank(buf, a, b):
        for k in range(a, b):
            if buf[k] != "\n":
                buf[k] = " "

    for m in re.finditer(r"\\([A-Za-z]+\*?|.)", s):
        blank(names, m.start(), m.end())
        blank(letters, m.start(), m.end())
        name = m.group(1).rstrip("*")
        if name in PROTECTING:
            j = m.end()
            while j < len(s) and s[j] in " \t":
                j += 1
            if j < len(s) and s[j] == "{":
                blank(letters, j, _group_end(s, j))
    for m in re.finditer(r"(?<!\\)[_^]\s*\{", s):
        blank(letters, m.start(), _group_end(s, m.end() - 1))
    return "".join(names), "".join(letters)


def _rule_italic_words(s: str) -> list[tuple[int, str, str]]:
    _, letters = _masks(s)
    runs = []
    for m in re.finditer(r"(?<![A-Za-z])[A-Za-z]{3,}(?![A-Za-z])", letters):
        runs.append((m.start(), m.group(0)))
    if not runs:
        return []
    # one finding per line of the math, naming every run on it
    by_line: dict[int, list[str]] = {}
    first_at: dict[int, int] = {}
    for at, word in runs:
        ln = s.count("\n", 0, at)
        by_line.setdefault(ln, [])
        if word not in by_line[ln]:
            by_line[ln].append(word)
        first_at.setdefault(ln, at)
    out = []
    for ln, words in by_line.items():
        fixes = [KNOWN_FUNCTIONS.get(w, "\\mathrm{" + w + "}") for w in words]
        quoted = ", ".join(f"'{w}'" for w in words)
        out.append((first_at[ln], f"letters set as an italic product of variables: {quoted}",
                    "write " + ", ".join(fixes)))
    return out


def _rule_subscripts(s: str) -> list[tuple[int, str, str]]:
    names, _ = _masks(s)
    out = []
    for m in re.finditer(r"(?<!\\)([_^])[ \t]*([A-Za-z]{2,}|[0-9]{2,})", names):
        # the run must be in the original text too (not a blanked command name)
        op, run = m.group(1), m.group(2)
        where = "subscript" if op == "_" else "superscript"
        out.append((m.start(), f"unbraced multi-character {where} '{op}{run}' applies to "
                    f"'{run[0]}' only", f"write {op}{{{run}}}"))
    return out


_FONT_RUN = re.compile(r"\\(" + "|".join(FONT_GROUPS) + r")\{([^{}]{1,3})\}(?:([A-Za-z]+)(?=[\^{])|([0-9]+))")
# `f{\left(x \right)}` is how sympy.latex prints a function call: not a lost `_`
_LETTER_BRACE = re.compile(r"(?<![\\A-Za-z@])([A-Za-z])\{(?!\s*\\left)")


def _rule_lost_subscript(s: str) -> list[tuple[int, str, str]]:
    out = []
    for m in _FONT_RUN.finditer(s):
        run = m.group(3) or m.group(4)
        out.append((m.start(), f"'{m.group(0)}' sets '{run}' on the main line: likely a lost '_'",
                    f"write \\{m.group(1)}{{{m.group(2)}}}_{{{run}}}"))
    for m in _LETTER_BRACE.finditer(s):
        end = _group_end(s, m.end() - 1)
        group = s[m.start():end]
        out.append((m.start(), f"'{group}' puts a group right after '{m.group(1)}': likely a "
                    f"lost '_'", f"write {m.group(1)}_{group[1:]}"))
    return out


_ENV = re.compile(r"\\begin\{(" + "|".join(re.escape(e) for e in ENVIRONMENTS) + r")\}")


def _rule_env_rows(s: str) -> list[tuple[int, str, str]]:
    out = []
    for m in _ENV.finditer(s):
        env = m.group(1)
        end = s.find("\\end{" + env + "}", m.end())
        end = len(s) if end < 0 else end
        for sp_ in re.finditer(r"(?<!\\)\\(?=[ \t\n])", s[m.end():end]):
            out.append((m.end() + sp_.start(), f"rows of '{env}' separated by '\\ ' (a control "
                        "space): the rows collapse into one line", "use \\\\ between rows"))
    return out


def _rule_breaks(s: str) -> list[tuple[int, str, str]]:
    out = []
    for m in re.finditer(r"(?<!\\)\\\\(?!\\)", s):
        nl = s.find("\n", m.end())
        rest = s[m.end(): len(s) if nl < 0 else nl]
        rest_clean = re.sub(r"^\[[^\]]*\]", "", rest)    # \\[4pt] spacing is part of the break
        if not rest_clean:
            continue
        if rest_clean.strip():
            out.append((m.start(), "'\\\\' has more math after it on the same line",
                        "end the line right after \\\\"))
        else:
            out.append((m.start(), "trailing whitespace after '\\\\'", "delete the spaces after \\\\"))
    return out


def _block_spacing(m: Math, lines: list[str], markdown: bool) -> list[tuple[int, str, str]]:
    out = []

    def blank(no: int) -> bool:   # 1-based; outside the file counts as blank
        if no < 1 or no > len(lines):
            return True
        return _strip_prefix(lines[no - 1]).strip() == ""

    what = "display math" if m.kind != "bare" else "formula line"
    if not blank(m.first_line - 1):
        out.append((m.first_line, f"{what} needs a blank line before it", "insert an empty line above"))
    if not blank(m.last_line + 1):
        out.append((m.last_line, f"{what} needs a blank line after it", "insert an empty line below"))
    if markdown and m.kind == "$$":
        first = lines[m.first_line - 1]
        last = lines[m.last_line - 1]
        if _strip_prefix(first.split("$$")[0]).strip():
            out.append((m.first_line, "display math starts in the middle of a line",
                        "put $$ at the start of its own line"))
        if last.rsplit("$$", 1)[-1].strip():
            out.append((m.last_line, "text follows the closing $$ on its line",
                        "end the line after $$"))
    return out


def lint_text(text: str, path: str = "<text>", markdown: bool = True) -> list[Finding]:
    lines = text.split("\n")
    findings: set[Finding] = set()
    for m in extract(text, markdown):
        if m.display:
            for line, msg, fix in _block_spacing(m, lines, markdown):
                findings.add(Finding(path, line, "block-spacing", msg, fix))
        for rule, check in (("break-trailing", _rule_breaks), ("italic-word", _rule_italic_words),
                            ("subscript-braces", _rule_subscripts),
                            ("lost-subscript", _rule_lost_subscript), ("env-rows", _rule_env_rows)):
            for at, msg, fix in check(m.text):
                findings.add(Finding(path, m.line + m.text.count("\n", 0, at), rule, msg, fix))
    return sorted(findings, key=lambda f: (f.line, RULES.index(f.rule), f.message))


def is_markdown(path: str | Path) -> bool:
    return Path(path).suffix.lower() in (".md", ".markdown")


def lint_file(path: str | Path, display_path: str | None = None) -> list[Finding]:
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    return lint_text(text, display_path or str(path), markdown=is_markdown(p))


def main(paths: list[str], out=None) -> int:
    """Lint each file (a folder: its Markdown files); print findings; 1 if any, else 0."""
    out = out or sys.stdout
    files: list[Path] = []
    for p in paths:
        q = Path(p)
        if q.is_dir():
            files.extend(sorted(q.rglob("*.md")))
        elif q.exists():
            files.append(q)
        else:
            print(f"qed lint-latex: no such file: {p}", file=sys.stderr)
            return 2
    findings = [f for path in files for f in lint_file(path)]
    for f in findings:
        print(f.format(), file=out)
    if findings:
        rules = sorted({f.rule for f in findings})
        print(f"{len(findings)} finding(s) in {len({f.path for f in findings})} file(s): "
              + ", ".join(rules), file=sys.stderr)
        return 1
    print(f"{len(files)} file(s) clean", file=sys.stderr)
    return 0
