"""Counting the printed lines the judges run: the statement counters compiled into printed text
count a line only if code on it ran, as a line trace does, and change nothing else."""

import ast

import pytest

from qed.tools.line_coverage import HIT, Tracer, instrument

SOURCE = '''"""doc"""
from __future__ import annotations


def f(xs, c, d=None):
    y = [x * 2
         for x in xs
         if x > 0]
    z = (1 if c
         else 2)
    w = c and (
        3)
    g = lambda: (
        4)
    try:
        q = 1 / len(xs)
    except ZeroDivisionError:
        q = None
    assert c is not None, (
        "no c")
    if d:
        return y, z, w, q
    return y, z, w, q, g
'''


def run(args, tracer: Tracer, path="/tmp/printed.py"):
    tree, hit = instrument(ast.parse(SOURCE), path)
    ns = {HIT: hit}
    with tracer:
        exec(compile(tree, path, "exec"), ns)
        return ns["f"](*args)


def traced(args):
    """What a line trace (sys.settrace) sees of the same text: the reference."""
    import sys

    ns, hits = {}, set()

    def local(frame, event, arg):
        if event == "line":
            hits.add(frame.f_lineno)
        return local

    def glob(frame, event, arg):
        if frame.f_code.co_filename == "<traced>":
            hits.add(frame.f_lineno)
            return local
        return None

    sys.settrace(glob)
    try:
        exec(compile(SOURCE, "<traced>", "exec"), ns)
        out = ns["f"](*args)
    finally:
        sys.settrace(None)
    return out, hits


@pytest.mark.parametrize("args", [([], False), ([1, -2], True), ([3], True, 1)])
def test_counted_lines_are_the_traced_lines(args):
    tracer = Tracer(printed_only=True)
    got = run(args, tracer)
    want, lines = traced(args)
    assert repr(got)[:20] == repr(want)[:20]  # the same results (the lambda aside)
    counted = next(iter(tracer.hits.values()))
    # every counted line ran; a trace also reports line 0, the docstring, the __future__ import
    # (no counter may precede it), the `except` header, and a comprehension's condition line as
    # its loop ends even when no element was tested (CPython's line table): the counters are
    # the stricter, never the looser
    assert counted <= lines
    assert lines - counted <= {0, 1, 2, 8, 17}
    if args[0]:
        assert 8 in counted


def test_conditional_parts_count_only_when_they_run():
    tracer = Tracer(printed_only=True)
    run(([], False), tracer)
    lines = next(iter(tracer.hits.values()))
    assert 8 not in lines  # the comprehension's condition: no element
    assert 10 in lines and 9 in lines  # `else 2` ran; the statement's first line too
    assert 12 not in lines  # `c and (3)` with c False
    assert 14 not in lines  # the lambda's body: never called
    assert 20 not in lines  # the assert's message: it held
    tracer = Tracer(printed_only=True)
    run(([5], True), tracer)
    lines = next(iter(tracer.hits.values()))
    assert {8, 12} <= lines and 10 not in lines


def test_outside_a_printed_only_tracer_nothing_is_counted():
    outer = Tracer(printed_only=True)
    with outer:
        pass
    tree, hit = instrument(ast.parse("x = 1\n"), "/tmp/p.py")
    ns = {HIT: hit}
    exec(compile(tree, "/tmp/p.py", "exec"), ns)  # no Tracer active: runs, counts nothing
    assert ns["x"] == 1 and outer.hits == {}


def test_a_printed_file_that_does_not_parse_is_a_failure_not_a_traceback(tmp_path, monkeypatch):
    from qed.tools import line_coverage

    bad = tmp_path / "generated" / "numpy" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f(x):\n    return (x +\n")
    monkeypatch.setattr(line_coverage, "ROOT", tmp_path)
    count = line_coverage.report({}, ("numpy",), [bad])["numpy"]
    assert not count.complete
    assert line_coverage.describe_missed(count) == [
        "generated/numpy/bad.py: does not parse: '(' was never closed (line 2)"
    ]
