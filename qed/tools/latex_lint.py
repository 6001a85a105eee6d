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

Limits (measured on a 2-core AMD EPYC):

* time and memory are linear in the file size: every pass is one scan, a regex without nested
  repetition, or a bisect, and nothing recurses, so deep nesting (20,000 ``{``, 5,000
  ``\\begin{aligned}``), a megabyte-long line or 100,000 ``$`` cost no more per byte than prose.
  About 3.5 MiB/s for Markdown and 2.5 MiB/s for plain text like the project's documents;
  about 0.3 MiB/s at worst, for a file of short formula lines that each have findings (the cost
  is per piece of math and per finding). Memory peaks at about 15 times the file size, up to
  65 times for such a file.
* a file over ``MAX_BYTES`` (64 MiB) is refused with one line, not read; so are folders
  (a folder argument means its ``*.md`` files) and anything that is not a regular file
  (``/dev/zero``, a FIFO).
* the file must be UTF-8 text: a file that is not (Latin-1, binary: a NUL byte) is reported as
  ``qed: error: FILE: not UTF-8 text (byte 0xe9 at offset 123, line 5; …)``, and so is a
  missing or unreadable file; `main` reports it, lints the other files and exits non-zero
  (2 for a path that does not exist, else 1). ``\\r\\n`` and ``\\r`` read as newlines.
* a group quoted in a ``lost-subscript`` message is cut to ``QUOTE_MAX`` (60) characters, so a
  finding's line stays short however large the group.
"""

from __future__ import annotations

import re
import stat
import sys
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

from ..errors import QedError

RULES = ("block-spacing", "break-trailing", "italic-word", "subscript-braces", "lost-subscript", "env-rows")

MAX_BYTES = 64 << 20  # a larger file is refused with one line, not read (see "Limits" above)

# Commands whose braced argument is upright text, a font, a name or a layout argument: the
# letters inside are not italic variables.
PROTECTING = (
    "mathrm",
    "text",
    "textrm",
    "textit",
    "textbf",
    "texttt",
    "textsf",
    "operatorname",
    "mathbf",
    "mathit",
    "mathsf",
    "mathtt",
    "mathcal",
    "mathbb",
    "mathfrak",
    "mathscr",
    "boldsymbol",
    "bm",
    "mbox",
    "hbox",
    "begin",
    "end",
    "label",
    "tag",
    "color",
    "textcolor",
    "hspace",
    "vspace",
    "href",
    "url",
)
# Font and accent commands after whose one-letter argument a bare letter/digit run means a lost `_`.
FONT_GROUPS = (
    "mathbf",
    "mathrm",
    "boldsymbol",
    "bm",
    "mathit",
    "mathsf",
    "mathcal",
    "mathbb",
    "hat",
    "tilde",
    "bar",
    "vec",
    "widehat",
    "overline",
)
ENVIRONMENTS = (
    "aligned",
    "align",
    "align*",
    "alignedat",
    "gathered",
    "split",
    "cases",
    "matrix",
    "bmatrix",
    "pmatrix",
    "vmatrix",
    "Vmatrix",
    "Bmatrix",
    "smallmatrix",
    "array",
    "eqnarray",
)
# Words that LaTeX has a command for: the suggested fix names the command.
KNOWN_FUNCTIONS = {
    w: "\\" + w
    for w in (
        "max",
        "min",
        "exp",
        "log",
        "ln",
        "sin",
        "cos",
        "tan",
        "tanh",
        "sinh",
        "cosh",
        "arg",
        "det",
        "lim",
        "sup",
        "inf",
        "gcd",
        "deg",
        "dim",
        "ker",
        "Pr",
    )
}
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
    line: int  # 1-based line of text[0]
    display: bool
    first_line: int  # lines the whole construct (delimiters included) occupies
    last_line: int
    kind: str  # "$$", "$" or "bare"


# ------------------------------------------------------------------------------ linear-time helpers
# Every pass below is one left-to-right scan, a regex without nested repetition, or a bisect:
# O(n) or O(n log n) in the size of the file, and nothing recurses.
_NEWLINE = re.compile("\n")
_NON_SPACE = re.compile(r"\S")


class _Lines:
    """Where the newlines of a text are, for offset → line lookups in O(log n).

    (`text.count("\\n", 0, offset)` or `text.rfind("\\n", 0, offset)` per lookup scans from the
    start of the text or of the line: one lookup per piece of math made the lint quadratic.)"""

    def __init__(self, text: str):
        self.size = len(text)
        self.newlines = [m.start() for m in _NEWLINE.finditer(text)]

    def index(self, offset: int) -> int:
        """0-based line of text[offset]: the number of newlines before it."""
        return bisect_left(self.newlines, offset)

    def start(self, offset: int) -> int:
        """Offset of the first character of the line that holds text[offset]."""
        k = bisect_left(self.newlines, offset)
        return self.newlines[k - 1] + 1 if k else 0

    def end(self, offset: int) -> int:
        """Offset of the first newline at or after `offset` (len(text) if there is none)."""
        k = bisect_left(self.newlines, offset)
        return self.newlines[k] if k < len(self.newlines) else self.size


def _merged(spans) -> list[list[int]]:
    """The union of (start, end) spans as sorted, disjoint [start, end] pairs."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _blank(text: str, spans) -> str:
    """`text` with every character of the (start, end) spans but newlines turned into a space
    (same length, lines kept). One pass over the merged spans: blanking span by span cost the
    sum of their lengths, quadratic for nested spans (a group inside a group inside …)."""
    if not spans:
        return text
    parts = []
    pos = 0
    for a, b in _merged(spans):
        parts.append(text[pos:a])
        parts.append("\n".join(" " * len(piece) for piece in text[a:b].split("\n")))
        pos = b
    parts.append(text[pos:])
    return "".join(parts)


# ------------------------------------------------------------------------------ extraction
_FENCE = re.compile(r"(`{3,}|~{3,})")
_BACKTICKS = re.compile(r"`+")


def _mask_markdown(text: str) -> str:
    """Blank out code fences, code spans and HTML comments (same length, newlines kept)."""
    masked = _blank(text, _fence_spans(text))
    masked = _blank(masked, _comment_spans(masked))
    return _blank(masked, _code_spans(masked))


def _fence_spans(text: str) -> list[tuple[int, int]]:
    """The lines of ``` / ~~~ code fences, their fence lines included."""
    spans = []
    pos = 0
    fence = None
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        marker = _FENCE.match(stripped)
        if fence is None and marker:
            fence = marker.group(1)
            spans.append((pos, pos + len(line)))
        elif fence is not None:
            spans.append((pos, pos + len(line)))
            body = stripped.strip()
            if stripped.startswith(fence) and body == body[0] * len(body):
                fence = None
        pos += len(line)
    return spans


def _comment_spans(text: str) -> list[tuple[int, int]]:
    """`<!-- … -->` comments, as `re.finditer(r"<!--.*?-->", text, re.S)` finds them but
    without its rescan: the regex searched to the end of the text for `-->` again from every
    `<!--` after an unclosed one."""
    spans = []
    pos = 0
    while True:
        a = text.find("<!--", pos)
        if a < 0:
            break
        b = text.find("-->", a + 4)
        if b < 0:  # nothing closes this one, so nothing closes a later one either
            break
        spans.append((a, b + 3))
        pos = b + 3
    return spans


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Code spans, as ``re.finditer(r"(`+)(?!`)(.+?)(?<!`)\\1(?!`)", text, re.S)`` finds them
    (a run of backticks up to the next run of exactly as many), less those that hold a blank
    line. The regex rescanned to the end of the text from every backtick that has no closing
    run — quadratic on a file of unmatched backticks; here each opener costs one bisect."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text)]
    starts_by_length: dict[int, list[int]] = {}
    for a, b in runs:
        starts_by_length.setdefault(b - a, []).append(a)
    spans = []
    resume = 0  # where the regex would try its next match
    for a, b in runs:
        if a < resume:  # inside the previous code span (or its closing run)
            continue
        for p in range(a, b):  # the regex tries each start in the run: the opener is text[p:b]
            starts = starts_by_length.get(b - p, [])
            k = bisect_right(starts, b)  # the first run of that length after this one
            if k < len(starts):
                close = starts[k] + (b - p)
                if text.find("\n\n", p, close) < 0:
                    spans.append((p, close))
                resume = close
                break
    return spans


_DOLLAR_OR_ESCAPE = re.compile(r"[\\$]")
_INLINE_STOP = re.compile(r"[\\$\n]")


def _dollar_delimiters(masked: str, smart: bool) -> list[tuple[int, int, int, int, str]]:
    """(start, body, end, stop, kind) of every `$$ … $$` and `$ … $`, scanning left to right and
    jumping from one `$` or backslash to the next with a regex (same result as a character
    loop, at C speed)."""
    found = []
    i, n = 0, len(masked)
    while i < n:
        m = _DOLLAR_OR_ESCAPE.search(masked, i)
        if m is None:
            break
        i = m.start()
        if masked[i] == "\\":  # an escaped character (\$) is not a delimiter
            i += 2
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
        j = _inline_stop(masked, i + 1)
        if smart and j < n and masked[j] == "$" and masked[j - 1].isspace():
            i += 1  # not a closer, and math never holds a bare `$`: not math
            continue
        if j < n and masked[j] == "$" and j > i + 1:
            found.append((i, i + 1, j, j + 1, "$"))
            i = j + 1
        else:
            i = j if j > i else i + 1
    return found


def _inline_stop(masked: str, j: int) -> int:
    """From j on, the first unescaped `$` or blank line (`\\n\\n`, `\\n \\n`), whichever comes
    first; len(masked) — or one past it, after a final backslash — if neither does."""
    n = len(masked)
    while j < n:
        m = _INLINE_STOP.search(masked, j)
        if m is None:
            return n
        j = m.start()
        c = masked[j]
        if c == "\\":
            j += 2
        elif c == "$" or masked.startswith("\n\n", j) or masked.startswith("\n \n", j):
            return j
        else:
            j += 1
    return j


_SOLID = re.compile(r"[^\s>]")  # not whitespace, not a blockquote marker


class _LineLead:
    """Where each line's first character other than whitespace and `>` is, found once per line
    and only for the lines asked about. (Slicing the text from the start of the line to each
    piece of math cost the whole line once per piece: quadratic on one long line.)"""

    def __init__(self, text: str):
        self.text = text
        self._first: dict[int, int] = {}

    def only_quotes_and_space(self, line_start: int, offset: int) -> bool:
        """Is text[line_start:offset] nothing but whitespace and blockquote markers?"""
        if line_start not in self._first:
            m = _SOLID.search(self.text, line_start)
            self._first[line_start] = len(self.text) if m is None else m.start()
        return self._first[line_start] >= offset


def _dollar_math(masked: str, smart: bool = False) -> list[Math]:
    """`$$ … $$` and `$ … $` in (masked) text; an inline `$` never spans a blank line. With
    `smart` (Markdown, as pymdownx.arithmatex reads it), an inline `$` followed by a space does
    not open math and one preceded by a space does not close it ("costs $5 or $6" is prose)."""
    lines, lead = _Lines(masked), _LineLead(masked)
    out = []
    for start, body, end, stop, kind in _dollar_delimiters(masked, smart):
        # alone on its lines: only blockquote markers and whitespace around it (the search after
        # it stops at the next piece of math on the line, if any: each stretch is read once)
        alone = (
            lead.only_quotes_and_space(lines.start(start), start)
            and _NON_SPACE.search(masked, stop, lines.end(stop)) is None
        )
        out.append(
            Math(
                masked[body:end],
                lines.index(body) + 1,
                kind == "$$" or alone,
                lines.index(start) + 1,
                lines.index(stop - 1) + 1,
                kind,
            )
        )
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
_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.S)
_COMMAND = re.compile(r"\\([A-Za-z]+\*?|.)")
_BRACED_SCRIPT = re.compile(r"(?<!\\)[_^]\s*\{")
QUOTE_MAX = 60  # a group quoted in a message is cut to this many characters


def _group_end(s: str, open_at: int) -> int:
    """Index just past the brace group that opens at s[open_at] == '{' (or len(s)). One scan per
    call: for many groups use `_MathText.group_end`."""
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


def _brace_ends(s: str) -> dict[int, int]:
    """{offset of each '{': offset just past its matching '}', len(s) if unclosed}, in one pass
    with a stack (no recursion). A backslash escapes the next character, as in `_group_end`.
    Scanning from each '{' to its '}' instead cost a group's length per group: quadratic for
    nested groups (`x_{x_{x_{…}}}`, `\\text{\\text{…}}`)."""
    ends = {}
    opened = []
    for m in _BRACE_OR_ESCAPE.finditer(s):
        c = m.group()
        if c == "{":
            opened.append(m.start())
        elif c == "}" and opened:
            ends[opened.pop()] = m.end()
    for a in opened:
        ends[a] = len(s)
    return ends


class _MathText:
    """One piece of math and what several rules need of it, each computed once, in one pass."""

    def __init__(self, s: str):
        self.s = s
        self.lines = _Lines(s)
        self._ends: dict[int, int] | None = None
        self._masks: tuple[str, str] | None = None

    def group_end(self, open_at: int) -> int:
        """Index just past the brace group opening at s[open_at] == '{' (or len(s)). The rules ask
        only for a '{' that follows a letter, `*`, `_`, `^` or whitespace — never an escaped one,
        so the one-pass table has it; `_group_end` stays as the fallback for any other."""
        if self._ends is None:
            self._ends = _brace_ends(self.s)
        end = self._ends.get(open_at)
        return _group_end(self.s, open_at) if end is None else end

    def masks(self) -> tuple[str, str]:
        """Two copies of the text, same length: `names` with command names blanked, and `letters`
        with, in addition, the arguments of protecting commands and braced sub/superscripts
        blanked — the letters left in `letters` are the ones LaTeX sets as italic variables on the
        main line."""
        if self._masks is None:
            s = self.s
            commands, arguments = [], []
            for m in _COMMAND.finditer(s):
                commands.append((m.start(), m.end()))
                if m.group(1).rstrip("*") in PROTECTING:
                    j = m.end()
                    while j < len(s) and s[j] in " \t":
                        j += 1
                    if j < len(s) and s[j] == "{":
                        arguments.append((j, self.group_end(j)))
            for m in _BRACED_SCRIPT.finditer(s):
                arguments.append((m.start(), self.group_end(m.end() - 1)))
            self._masks = _blank(s, commands), _blank(s, commands + arguments)
        return self._masks

    def quote(self, a: int, b: int) -> str:
        """s[a:b] for a message, cut to QUOTE_MAX characters: a finding quotes its own group, and
        quoting each of 20,000 nested groups whole would print 20,000² characters."""
        if b - a <= QUOTE_MAX:
            return self.s[a:b]
        return self.s[a : a + QUOTE_MAX - 1] + "…"


_ITALIC_RUN = re.compile(r"(?<![A-Za-z])[A-Za-z]{3,}(?![A-Za-z])")


def _rule_italic_words(t: _MathText) -> list[tuple[int, str, str]]:
    _, letters = t.masks()
    # one finding per line of the math, naming every run on it (a dict: ordered, O(1) dedup)
    by_line: dict[int, dict[str, None]] = {}
    first_at: dict[int, int] = {}
    for m in _ITALIC_RUN.finditer(letters):
        ln = t.lines.index(m.start())
        by_line.setdefault(ln, {})[m.group(0)] = None
        first_at.setdefault(ln, m.start())
    out = []
    for ln, words in by_line.items():
        fixes = [KNOWN_FUNCTIONS.get(w, "\\mathrm{" + w + "}") for w in words]
        quoted = ", ".join(f"'{w}'" for w in words)
        out.append(
            (first_at[ln], f"letters set as an italic product of variables: {quoted}", "write " + ", ".join(fixes))
        )
    return out


_UNBRACED_SCRIPT = re.compile(r"(?<!\\)([_^])[ \t]*([A-Za-z]{2,}|[0-9]{2,})")


def _rule_subscripts(t: _MathText) -> list[tuple[int, str, str]]:
    names, _ = t.masks()
    out = []
    for m in _UNBRACED_SCRIPT.finditer(names):
        # the run must be in the original text too (not a blanked command name)
        op, run = m.group(1), m.group(2)
        where = "subscript" if op == "_" else "superscript"
        out.append(
            (
                m.start(),
                f"unbraced multi-character {where} '{op}{run}' applies to '{run[0]}' only",
                f"write {op}{{{run}}}",
            )
        )
    return out


_FONT_RUN = re.compile(r"\\(" + "|".join(FONT_GROUPS) + r")\{([^{}]{1,3})\}(?:([A-Za-z]+)(?=[\^{])|([0-9]+))")
# `f{\left(x \right)}` is how sympy.latex prints a function call: not a lost `_`
_LETTER_BRACE = re.compile(r"(?<![\\A-Za-z@])([A-Za-z])\{(?!\s*\\left)")


def _rule_lost_subscript(t: _MathText) -> list[tuple[int, str, str]]:
    s = t.s
    if "{" not in s:  # both patterns need a brace (a C-speed test saves two regex passes)
        return []
    out = []
    for m in _FONT_RUN.finditer(s):
        run = m.group(3) or m.group(4)
        out.append(
            (
                m.start(),
                f"'{m.group(0)}' sets '{run}' on the main line: likely a lost '_'",
                f"write \\{m.group(1)}{{{m.group(2)}}}_{{{run}}}",
            )
        )
    for m in _LETTER_BRACE.finditer(s):
        end = t.group_end(m.end() - 1)
        out.append(
            (
                m.start(),
                f"'{t.quote(m.start(), end)}' puts a group right after '{m.group(1)}': likely a lost '_'",
                f"write {m.group(1)}_{t.quote(m.start() + 1, end)}",
            )
        )
    return out


_ENV = re.compile(r"\\begin\{(" + "|".join(re.escape(e) for e in ENVIRONMENTS) + r")\}")
_CONTROL_SPACE = re.compile(r"(?<!\\)\\(?=[ \t\n])")


def _env_bodies(s: str) -> dict[str, list[list[int]]]:
    """{environment: its bodies, from `\\begin{env}` to the next `\\end{env}` (or the end), as
    sorted disjoint spans}. Nested or repeated environments overlap; merging them keeps the
    control-space check at one bisect per `\\ `, where checking every body cost depth × size."""
    bodies: dict[str, list[tuple[int, int]]] = {}
    next_end: dict[str, int] = {}  # the last `\end{env}` found: reused while it lies ahead
    for m in _ENV.finditer(s):
        env = m.group(1)
        end = next_end.get(env)
        if end is None or (end < m.end() and end != len(s)):
            end = s.find("\\end{" + env + "}", m.end())
            end = len(s) if end < 0 else end
            next_end[env] = end
        bodies.setdefault(env, []).append((m.end(), end))
    return {env: _merged(spans) for env, spans in bodies.items()}


def _rule_env_rows(t: _MathText) -> list[tuple[int, str, str]]:
    if "\\begin" not in t.s:
        return []
    bodies = _env_bodies(t.s)
    if not bodies:
        return []
    out = []
    for sp in _CONTROL_SPACE.finditer(t.s):
        at = sp.start()
        for env, spans in bodies.items():
            k = bisect_right(spans, [at, len(t.s) + 1]) - 1  # the last body starting at or before it
            if k >= 0 and at < spans[k][1]:
                out.append(
                    (
                        at,
                        f"rows of '{env}' separated by '\\ ' (a control space): the rows collapse into one line",
                        "use \\\\ between rows",
                    )
                )
    return out


_BREAK = re.compile(r"(?<!\\)\\\\(?!\\)")


def _rule_breaks(t: _MathText) -> list[tuple[int, str, str]]:
    s = t.s
    if "\\\\" not in s:
        return []
    out = []
    bracket = None  # the last s.find("]", x): breaks come in order, so it holds until passed
    non_space: dict[int, bool] = {}  # from a break (or its `]`) on: more than spaces on the line?
    for m in _BREAK.finditer(s):
        after = m.end()
        eol = t.lines.end(after)
        rest = after  # where the rest of the line starts, less a \\[4pt] spacing
        if after < eol and s[after] == "[":
            if bracket is None or 0 <= bracket <= after:
                bracket = s.find("]", after + 1)
            if 0 <= bracket < eol:
                rest = bracket + 1
        if rest == eol:
            continue
        if rest not in non_space:
            non_space[rest] = _NON_SPACE.search(s, rest, eol) is not None
        if non_space[rest]:
            out.append((m.start(), "'\\\\' has more math after it on the same line", "end the line right after \\\\"))
        else:
            out.append((m.start(), "trailing whitespace after '\\\\'", "delete the spaces after \\\\"))
    return out


class _LineFacts:
    """What block-spacing asks of a document's lines, computed once per line: the same long line
    was stripped or split once for each piece of math on it or next to it."""

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self._memo: dict[tuple[str, int], bool] = {}

    def _fact(self, what: str, no: int, compute) -> bool:
        key = (what, no)
        if key not in self._memo:
            self._memo[key] = compute(self.lines[no - 1])
        return self._memo[key]

    def blank(self, no: int) -> bool:
        """Is line `no` (1-based) empty but for blockquote markers? Outside the file counts as blank."""
        if no < 1 or no > len(self.lines):
            return True
        return self._fact("blank", no, lambda line: _strip_prefix(line).strip() == "")

    def text_before_dollars(self, no: int) -> bool:
        """Is there text (not blockquote markers) before the first `$$` of line `no`?"""
        return self._fact("before", no, lambda line: bool(_strip_prefix(line.split("$$", 1)[0]).strip()))

    def text_after_dollars(self, no: int) -> bool:
        """Is there text after the last `$$` of line `no`?"""
        return self._fact("after", no, lambda line: bool(line.rsplit("$$", 1)[-1].strip()))


def _block_spacing(m: Math, facts: _LineFacts, markdown: bool) -> list[tuple[int, str, str]]:
    out = []
    what = "display math" if m.kind != "bare" else "formula line"
    if not facts.blank(m.first_line - 1):
        out.append((m.first_line, f"{what} needs a blank line before it", "insert an empty line above"))
    if not facts.blank(m.last_line + 1):
        out.append((m.last_line, f"{what} needs a blank line after it", "insert an empty line below"))
    if markdown and m.kind == "$$":
        if facts.text_before_dollars(m.first_line):
            out.append(
                (m.first_line, "display math starts in the middle of a line", "put $$ at the start of its own line")
            )
        if facts.text_after_dollars(m.last_line):
            out.append((m.last_line, "text follows the closing $$ on its line", "end the line after $$"))
    return out


_CHECKS = (
    ("break-trailing", _rule_breaks),
    ("italic-word", _rule_italic_words),
    ("subscript-braces", _rule_subscripts),
    ("lost-subscript", _rule_lost_subscript),
    ("env-rows", _rule_env_rows),
)


def lint_text(text: str, path: str = "<text>", markdown: bool = True) -> list[Finding]:
    facts = _LineFacts(text)
    findings: set[Finding] = set()
    for m in extract(text, markdown):
        if m.display:
            for line, msg, fix in _block_spacing(m, facts, markdown):
                findings.add(Finding(path, line, "block-spacing", msg, fix))
        t = _MathText(m.text)
        for rule, check in _CHECKS:
            for at, msg, fix in check(t):
                findings.add(Finding(path, m.line + t.lines.index(at), rule, msg, fix))
    return sorted(findings, key=lambda f: (f.line, RULES.index(f.rule), f.message))


def is_markdown(path: str | Path) -> bool:
    return Path(path).suffix.lower() in (".md", ".markdown")


# ------------------------------------------------------------------------------ files
class LintInputError(QedError):
    """A file that cannot be linted (missing, a folder, not a regular file, too large,
    unreadable, not UTF-8 text); its message is one line that starts with the path."""


class _NoSuchPath(LintInputError):
    """A path that does not exist: a usage error, exit status 2."""


def read_source(path: str | Path, display_path: str | None = None) -> str:
    """The text of a file to lint, newlines made universal (as `Path.read_text` makes them), or a
    LintInputError saying in one line why not. Reads at most MAX_BYTES + 1 bytes, so that a
    huge or endless file (/dev/zero) is refused rather than read."""
    p = Path(path)
    name = display_path or str(path)
    try:
        st = p.stat()
        if stat.S_ISDIR(st.st_mode):
            raise LintInputError(f"{name}: is a folder (give the folder itself to lint its *.md files)")
        if not stat.S_ISREG(st.st_mode):
            raise LintInputError(f"{name}: not a regular file")
        if st.st_size > MAX_BYTES:
            raise LintInputError(f"{name}: too large ({_size(st.st_size)}; the limit is {_size(MAX_BYTES)})")
        with p.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise _NoSuchPath(f"{name}: no such file") from None
    except OSError as e:
        raise LintInputError(f"{name}: cannot read it: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise LintInputError(f"{name}: too large (over {_size(MAX_BYTES)}, the limit)")
    return _decode(data, name).replace("\r\n", "\n").replace("\r", "\n")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def _decode(data: bytes, name: str) -> str:
    nul = data.find(b"\0")  # valid UTF-8 can hold NUL, but no text file does: binary
    if nul >= 0:
        raise LintInputError(f"{name}: not UTF-8 text (a NUL byte at offset {nul}: a binary file?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise LintInputError(
            f"{name}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}, line {line}; re-save it as UTF-8)"
        ) from None


def lint_file(path: str | Path, display_path: str | None = None) -> list[Finding]:
    """The findings in one file; a LintInputError (one line) if it cannot be read as text."""
    text = read_source(path, display_path)
    return lint_text(text, display_path or str(path), markdown=is_markdown(path))


def _files_of(arg: str) -> list[Path]:
    """The files one argument names: itself, or a folder's *.md files below it (a folder
    that happens to be named *.md is not one of them)."""
    q = Path(arg)
    if q.is_dir():
        files = sorted(f for f in q.rglob("*.md") if not f.is_dir())
        if not files:
            raise LintInputError(f"{arg}: a folder with no *.md file in it")
        return files
    if not q.exists():
        raise _NoSuchPath(f"{arg}: no such file or folder")
    return [q]


def main(paths: list[str], out=None) -> int:
    """Lint each file (a folder: its Markdown files); print findings on `out` and, on stderr, one
    `qed: error: FILE: why` line for each file that cannot be linted (the others are still
    linted). Exit status: 2 if a path does not exist, else 1 if anything was found or a file
    could not be linted, else 0."""
    out = out or sys.stdout
    missing = failed = linted = 0
    found: list[Finding] = []
    for arg in paths:
        try:
            files = _files_of(arg)
        except LintInputError as e:
            missing += isinstance(e, _NoSuchPath)
            failed += not isinstance(e, _NoSuchPath)
            print(f"qed: error: {e}", file=sys.stderr, flush=True)
            continue
        for path in files:
            try:
                findings = lint_file(path)
            except LintInputError as e:
                missing += isinstance(e, _NoSuchPath)
                failed += not isinstance(e, _NoSuchPath)
                print(f"qed: error: {e}", file=sys.stderr, flush=True)
                continue
            linted += 1
            for f in findings:
                print(f.format(), file=out)
            found += findings
    summary = []
    if found:
        rules = sorted({f.rule for f in found})
        summary.append(f"{len(found)} finding(s) in {len({f.path for f in found})} file(s): " + ", ".join(rules))
    elif linted or not missing + failed:
        summary.append(f"{linted} file(s) clean")
    if missing + failed:
        summary.append(f"{missing + failed} file(s) not linted")
    print("; ".join(summary), file=sys.stderr)
    if missing:
        return 2
    return 1 if found or failed else 0
