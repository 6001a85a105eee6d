"""Text of verdicts shared by the report and the notebook view: a counterexample in words, a
Markdown table of steps."""

from __future__ import annotations


def markdown_table(verdicts: list) -> str:
    rows = ["| line | step | verdict | why |", "|---|---|---|---|"]
    for v in verdicts:
        why = v.reason
        if v.counterexample:
            why += " — " + counterexample_text(v.counterexample)
        step = v.step.replace("|", "\\|")
        rows.append(f"| {v.line} | ${step}$ | {v.verdict} | {why.replace('|', '/')} |")
    return "\n".join(rows)


def counterexample_text(cx: dict) -> str:
    at = ", ".join(f"{k} = {v}" for k, v in cx.get("at", {}).items())
    lhs, rhs = cx.get("lhs"), cx.get("rhs")
    return f"at {at or 'the document’s values'}: left = {_fmt(lhs)}, right = {_fmt(rhs)}"


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)
