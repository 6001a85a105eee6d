"""`qed lint-latex` is linear in its input and reports a file it cannot read in one line.

Each scaling test counts the linter's work on an input and on one `factor` times larger, and
asserts the ratio stays under 3 × factor: linear gives about `factor`, quadratic up to factor².
Work is counted, not timed (a busy machine cannot change it): every Python call and every
builtin call. A pass that rescans the text at C speed inside one builtin call (a regex, a
`str.count` from the start once per piece) is not seen by this count: the CPU-time ratios,
which see it, are measured side by side by `qed bench --lint`. Each input below made one pass of
the old linter quadratic (the comment says which).
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from qed.tools import latex_lint
from qed.tools.latex_lint import LintInputError, extract, lint_file, lint_text

ROOT = Path(__file__).resolve().parent.parent
FACTOR = 8
SPACES = " " * 1000  # filler: makes a pass that rescans the text cost more per piece


def work(fn) -> int:
    """The work of fn(), counted as above (deterministic)."""
    total = 0

    def count(frame, event, arg):
        nonlocal total
        if event in ("call", "c_call"):
            total += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return total


def work_ratio(run, make, n: int, factor: int) -> float:
    """The work of run(make(factor * n)) over that of run(make(n))."""
    small, big = make(n), make(factor * n)
    return work(lambda: run(big)) / max(work(lambda: run(small)), 1)


def assert_linear(make, n: int, markdown: bool = True, factor: int = FACTOR) -> None:
    """lint_text on make(factor * n) does at most about factor times the work of make(n)."""
    r = work_ratio(lambda text: lint_text(text, "t", markdown), make, n, factor)
    assert r < 3 * factor, f"{factor}x the input took {r:.0f}x the work"


def assert_rule_linear(rule, make, n: int, factor: int = 16) -> None:
    """The same for one rule alone, on math text."""
    r = work_ratio(lambda text: rule(latex_lint._MathText(text)), make, n, factor)
    assert r < 3 * factor, f"{factor}x the input took {r:.0f}x the work"


# ------------------------------------------------------------------------------ file size
# two lines with a finding each (a lost subscript), so that the corpus has findings where the
# source documents beside the checkout are absent
KNOWN_FINDINGS = "The heads $\\mathbf{W}i$ and $d{\\text{model}}$ of the sources.\n"


def corpus(size: int) -> str:
    """The project's pages and the source documents, concatenated to `size` characters."""
    pages = sorted((ROOT / "docs").glob("*.md"))
    seeds = sorted((ROOT.parent / "shared" / "seeds").glob("*"))
    text = KNOWN_FINDINGS + "".join(p.read_text(encoding="utf-8") + "\n" for p in pages + seeds)
    return (text * (size // len(text) + 1))[:size]


def test_four_times_the_file_takes_about_four_times_the_work():
    small, big = corpus(1 << 17), corpus(4 << 17)
    found = {}
    w_small = work(lambda: found.setdefault("small", lint_text(small, "t.md")))
    w_big = work(lambda: found.setdefault("big", lint_text(big, "t.md")))
    # linear: 4; the old per-piece line lookup made it 15 (and 47 s for 4 MiB)
    assert w_big / w_small < 8, (w_small, w_big)
    # the findings scale with the copies (the rules still ran on all of it)
    assert len(found["big"]) >= 3 * len(found["small"]) > 0


# ------------------------------------------------------------------------------ nesting
def nested(opener: str, n: int) -> str:
    return "Intro\n\n$$\n" + opener * n + "y" + "}" * n + "\n$$\n"


def test_twenty_thousand_nested_braces_scale_linearly():
    """Brace groups were matched by scanning from each `{` to its `}`, and blanked character by
    character, once per group: 20,000 nested `x_{` took minutes."""
    w_small = work(lambda: lint_text(nested("x_{", 2000)))
    w_big = work(lambda: lint_text(nested("x_{", 20000)))
    assert w_big / w_small < 3 * 10, (w_small, w_big)  # 10x the input; quadratic is 100x
    assert lint_text(nested("x_{", 20000)) == []  # every group braced: clean
    assert lint_text(nested("{", 20000)) == []


@pytest.mark.parametrize("opener", ["x_{", "\\text{", "\\mathrm {", "a{", "{"])
def test_nested_groups_scale_linearly(opener):
    assert_linear(lambda n: nested(opener, n), 500)


def test_a_group_quoted_in_a_message_is_cut():
    """Each of n nested `a{` is a finding that quotes its group: whole, the output was n² long."""
    found = lint_text(nested("a{", 5000))
    assert found and all(f.rule == "lost-subscript" for f in found)
    assert max(len(f.format()) for f in found) < 4 * latex_lint.QUOTE_MAX
    assert "'a{a{a{" in found[0].message and "…" in found[0].message
    short = lint_text("$$\nd{\\text{model}}\n$$\n")  # a short group is quoted whole
    assert [f.message for f in short] == ["'d{\\text{model}}' puts a group right after 'd': likely a lost '_'"]


def test_nested_and_unclosed_environments_scale_linearly():
    """env-rows rescanned each environment's whole body from its `\\begin`: nested bodies made it
    depth × size."""
    deep = lambda n: "$$\n" + "\\begin{aligned} a \\ b " * n + "\\end{aligned}" * n + "\n$$\n"
    unclosed = lambda n: "$$\n" + "\\begin{cases} a \\ b " * n + "\n$$\n"
    assert_linear(deep, 300)
    assert_linear(unclosed, 300)
    assert {f.rule for f in lint_text(deep(300))} == {"env-rows"}


# ------------------------------------------------------------------------------ dollars and lines
def test_one_hundred_thousand_dollar_signs():
    """`$$$$…` is 25,000 empty display blocks on one line: each looked its line up from the
    start of the file and split the whole line again."""
    text = "$" * 100_000 + "\n"
    assert lint_text(text, "t.md") == []
    assert lint_text(text, "t.txt", markdown=False) == []
    assert_linear(lambda n: "$" * n + "\n", 2000)
    assert_linear(lambda n: "$" * n + "\n", 2000, markdown=False)


@pytest.mark.parametrize(
    "make,n,factor",
    [
        # the start and end of a piece's line found by rfind/find, and the text around it sliced
        (lambda n: ("$a$" + SPACES) * n + "\n", 100, 16),
        # block-spacing split the whole line once per piece on it ...
        (lambda n: ("$$a$$" + SPACES) * n + "\n", 100, 16),
        # ... and stripped the line above once per piece
        (lambda n: "x" * (4 * n) + "\n" + "$$a$$ " * n + "\n", 500, FACTOR),
        # each piece's line counted from the start of the file
        (lambda n: ("text $x_1$ more" + SPACES + "\n") * n, 100, 16),
        # each finding's line counted from the start of its math
        (lambda n: "$$\n" + "x_ab " * n + "\n$$\n", 1000, 16),
    ],
    ids=["one-line", "display-one-line", "long-line-above", "many-lines", "many-findings"],
)
def test_many_pieces_of_math_scale_linearly(make, n, factor):
    assert_linear(make, n, factor=factor)


def test_a_long_line_of_formula_text_scales_linearly():
    """A bare formula line of 250 KB: break-trailing and italic-word rescanned it per match."""
    formula = r"\mathbf{W}_{i}^{Q} x_1 + \mathrm{softmax}(QK^T) \\ a &= b \ c + W_attention + f{g} "
    assert_linear(lambda n: formula * n + "\n", 200, markdown=False, factor=16)
    found = lint_text(formula * 200 + "\n", "t.txt", markdown=False)
    assert {f.rule for f in found} == {"break-trailing", "italic-word", "subscript-braces", "lost-subscript"}


def test_breaks_on_one_line_scale_linearly():
    """break-trailing sliced the rest of the line after each `\\\\` (and searched the rest of
    the text for a `]` after each `\\\\[`)."""
    rule = latex_lint._rule_breaks
    assert_rule_linear(rule, lambda n: ("a \\\\" + SPACES[:100]) * n, 600)
    assert_rule_linear(rule, lambda n: ("a \\\\[" + SPACES[:100]) * n, 600)
    assert_rule_linear(rule, lambda n: "\\\\[" * n + "]" + " " * (4 * n), 600)
    assert len(rule(latex_lint._MathText("a \\\\" + SPACES[:100]))) == 1


def test_italic_runs_on_many_lines_scale_linearly():
    """italic-word counted the line of each run from the start of the math."""
    rule = latex_lint._rule_italic_words
    assert_rule_linear(rule, lambda n: ("abc" + SPACES[:100] + "\n") * n, 600)
    assert len(rule(latex_lint._MathText(("abc" + SPACES[:100] + "\n") * 600))) == 600


def test_many_distinct_words_on_one_line_scale_linearly():
    """italic-word deduplicated the words of a line with a list: quadratic in distinct words."""

    def make(n):
        words = ("".join(chr(97 + (i // 26**k) % 26) for k in range(4)) for i in range(n))
        return "$$\n" + " ".join(words) + "\n$$\n"

    assert_linear(make, 500)
    assert len(lint_text(make(500))) == 1


def test_unclosed_delimiters_scale_linearly():
    """Backtick runs with no run of the same length after them (`` `x``x```x… ``) and an unclosed
    `<!--` made the masking regexes rescan to the end of the file from each opener. (An unclosed
    `$$` was linear already: kept so.)"""
    runs = lambda n: "".join("`" * i + "x" for i in range(1, int((2 * n) ** 0.5)))
    assert_linear(runs, 500)
    assert_linear(lambda n: "<!-- a " * n + "\n", 500)
    assert_linear(lambda n: "$$\n" + "x_1 + y \\\\\n" * n, 500)
    assert_linear(lambda n: "text $$ a\n" + "x = y_1 + \\alpha\n" * n, 200, markdown=False)
    assert [m.text for m in extract(runs(50) + " $x$", markdown=True)] == ["x"]


# ------------------------------------------------------------------------------ same results
def test_masking_keeps_its_meaning():
    """The linear masking reads code spans, comments and fences as the regexes did."""
    text = (
        "`$a_bc$` and ``$x_yz$ ` still code`` but `` `$q_rs$`\n\n"
        "<!-- $W_ab$ --> $ok_{1}$ <!-- unclosed $W_cd$\n\n"
        "```\n$W_ef$\n```\n$W_gh$\n"
    )
    found = [f.message.split("'")[1] for f in lint_text(text) if f.rule == "subscript-braces"]
    # `` with no closing `` : its last backtick pairs with the next single one, "` `", so
    # $q_rs$ is math; so is $W_cd$ after an unclosed comment, and $W_gh$ after the fence
    assert found == ["_rs", "_cd", "_gh"]
    # a "code span" that spans a blank line is not code, and the backticks it spans are used up
    assert [m.text for m in extract("`a\n\n$x$ ` $y$ `", markdown=True)] == ["x", "y"]


def test_line_lookup_matches_counting():
    rng = random.Random(0)
    text = "".join(rng.choice("ab\n") for _ in range(2000))
    lines = latex_lint._Lines(text)
    for offset in range(len(text) + 1):
        assert lines.index(offset) == text.count("\n", 0, offset)
        assert lines.start(offset) == text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        assert lines.end(offset) == (len(text) if end < 0 else end)


def test_windows_newlines_read_as_newlines(tmp_path):
    lf = "Intro\n$$\nsoftmax \\\\ x\n$$\n"
    (tmp_path / "lf.md").write_bytes(lf.encode())
    (tmp_path / "crlf.md").write_bytes(lf.replace("\n", "\r\n").encode())
    strip = lambda fs: [(f.line, f.rule, f.message) for f in fs]
    assert strip(lint_file(tmp_path / "crlf.md")) == strip(lint_file(tmp_path / "lf.md")) != []


# ------------------------------------------------------------------------------ bad input
def run_cli(capsys, *paths):
    from qed.cli import main

    rc = main(["lint-latex", *map(str, paths)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out.splitlines(), [ln for ln in err.splitlines() if ln.startswith("qed: error: ")]


def test_latin1_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "latin1.md"
    bad.write_bytes("Intro\n\ncafé $x$\n".encode("latin-1"))
    rc, out, errors = run_cli(capsys, bad)
    assert rc == 1 and out == []
    assert errors == [f"qed: error: {bad}: not UTF-8 text (byte 0xe9 at offset 10, line 3; re-save it as UTF-8)"]
    with pytest.raises(LintInputError, match="not UTF-8"):
        lint_file(bad)


def test_binary_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "image.md"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    rc, out, errors = run_cli(capsys, bad)
    assert rc == 1 and out == []
    assert len(errors) == 1 and errors[0].startswith(f"qed: error: {bad}: not UTF-8 text")
    nul = tmp_path / "nul.md"  # valid UTF-8, but a NUL byte: not text
    nul.write_bytes(b"$x$\x00\n")
    assert run_cli(capsys, nul)[2] == [f"qed: error: {nul}: not UTF-8 text (a NUL byte at offset 3: a binary file?)"]


def test_folders(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out, errors = run_cli(capsys, empty)
    assert rc == 1 and errors == [f"qed: error: {empty}: a folder with no *.md file in it"]
    (tmp_path / "docs" / "odd.md").mkdir(parents=True)  # a folder named *.md is not a file to lint
    (tmp_path / "docs" / "page.md").write_text("Intro\n\n$softmax(x)$\n", encoding="utf-8")
    rc, out, errors = run_cli(capsys, tmp_path / "docs")
    assert rc == 1 and errors == [] and len(out) == 1 and ": italic-word: " in out[0]
    with pytest.raises(LintInputError, match="is a folder"):
        lint_file(tmp_path / "docs")


def test_bad_files_are_reported_and_the_rest_still_linted(tmp_path, capsys):
    good = tmp_path / "good.md"
    good.write_text("Intro\n\n$\\mathrm{softmax}(x)$\n", encoding="utf-8")
    bad = tmp_path / "bad.md"
    bad.write_text("Intro\n\n$softmax(x)$\n", encoding="utf-8")
    latin = tmp_path / "latin.md"
    latin.write_bytes(b"\xe9\n")
    rc, out, errors = run_cli(capsys, latin, good, bad)
    assert rc == 1 and len(errors) == 1 and [ln.split(":")[1] for ln in out] == ["3"]
    rc, out, errors = run_cli(capsys, latin, good)
    assert rc == 1 and out == [] and len(errors) == 1  # no finding, but a file not linted
    rc, out, errors = run_cli(capsys, tmp_path / "missing.md", bad)
    assert rc == 2 and len(out) == 1  # a missing path: 2, as before
    assert errors == [f"qed: error: {tmp_path / 'missing.md'}: no such file or folder"]


def test_unreadable_too_large_and_special_files(tmp_path, capsys, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("Intro\n\n$x$\n", encoding="utf-8")
    if Path("/dev/zero").exists():  # endless: refused, not read (in a subprocess, so
        r = subprocess.run(
            [sys.executable, "-m", "qed", "lint-latex", "/dev/zero"],  # reading it
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )  # cannot hang us)
        assert (r.returncode, r.stderr.splitlines()[0]) == (1, "qed: error: /dev/zero: not a regular file")
    monkeypatch.setattr(latex_lint, "MAX_BYTES", 8)
    rc, _, errors = run_cli(capsys, page)
    assert rc == 1 and errors == [f"qed: error: {page}: too large (11 bytes; the limit is 8 bytes)"]
    monkeypatch.setattr(latex_lint, "MAX_BYTES", 64 << 20)

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", denied)
    rc, _, errors = run_cli(capsys, page)
    assert rc == 1 and errors == [f"qed: error: {page}: cannot read it: Permission denied"]
