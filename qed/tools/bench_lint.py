"""`qed bench --lint`: `qed lint-latex` on an input and on one four times larger, CPU time side by
side (best of three each), for the inputs that once made a pass quadratic. Linear reads about 4×.

The test suite checks the same inputs by counting calls (tests/test_latex_lint_scaling.py), which
no busy machine can disturb but which cannot see a rescan inside one builtin call; these ratios
can.
"""

from __future__ import annotations

import time

from . import ROOT

FACTOR = 4


def _corpus(size: int) -> str:
    pages = sorted((ROOT / "docs").glob("*.md"))
    text = "".join(p.read_text(encoding="utf-8") + "\n" for p in pages)
    return (text * (size // max(len(text), 1) + 1))[:size]


def _nested(n: int) -> str:
    return "Intro\n\n$$\n" + "x_{" * n + "y" + "}" * n + "\n$$\n"


INPUTS = {
    # name: (make(n), n, markdown)
    "docs corpus": (_corpus, 1 << 18, True),
    "nested braces": (_nested, 4000, True),
    "pieces on one line": (lambda n: ("$a$" + " " * 1000) * n + "\n", 400, True),
    "many lines": (lambda n: ("text $x_1$ more" + " " * 1000 + "\n") * n, 400, True),
    "unclosed comments": (lambda n: "<!-- a " * n + "\n", 4000, True),
    "bare formula line": (lambda n: r"\mathbf{W}_{i}^{Q} x_1 + \mathrm{softmax}(QK^T) \\ a " * n + "\n", 800, False),
}


def _cpu(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return max(best, 1e-4)


def _compute(overrides, args) -> list[dict]:
    from .latex_lint import lint_text

    rows = []
    for name, (make, n, markdown) in INPUTS.items():
        small, big = make(n), make(FACTOR * n)
        t_small = _cpu(lambda s=small, m=markdown: lint_text(s, "t", m))
        t_big = _cpu(lambda b=big, m=markdown: lint_text(b, "t", m))
        rows.append(
            {"input": name, "chars": len(small), "seconds": t_small, "seconds_4x": t_big, "ratio": t_big / t_small}
        )
    return rows


def render(rows: list[dict]) -> None:
    lines = [f"lint-latex scaling: CPU time of {FACTOR}x the input over the input (linear: about {FACTOR})"]
    for r in rows:
        lines.append(
            f"  {r['input']:<20} {r['chars']:>9,} chars  {r['seconds'] * 1e3:8.1f} ms  "
            f"{r['seconds_4x'] * 1e3:8.1f} ms  {r['ratio']:5.1f}x"
        )
    print("\n".join(lines))


SECTION = ("lint_scaling", _compute, render)
