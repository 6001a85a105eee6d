"""`qed audit --text`: wrong edits of the printed files (qed/tools/text_mutants.py), each judged by
the judges of `qed prove` (qed/tools/audit_text.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from qed.tools import audit_text as at
from qed.tools.text_mutants import mutants, sample

ROOT = Path(__file__).resolve().parent.parent


def _file(rel):
    return (ROOT / rel).resolve()


def test_mutants_edit_code_only_one_site_each():
    path = _file("generated/numpy/layernorm.py")
    text = path.read_text()
    ms = mutants(text)
    assert len(ms) > 20
    tree = ast.parse(text)
    doc_lines = {
        n
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.Module)) and ast.get_docstring(node)
        for n in range(node.body[0].lineno, node.body[0].end_lineno + 1)
    }
    for m in ms:
        assert m.text != text
        ast.parse(m.text)  # every mutant is valid Python
        assert m.line not in doc_lines, m
        changed = [k for k, (a, b) in enumerate(zip(text.splitlines(), m.text.splitlines())) if a != b]
        assert changed and changed[0] + 1 == m.line, m
    assert {m.operator for m in ms} >= {"sign", "factor", "bound", "drop", "swap"}


def test_mutants_cut_the_edited_node_where_a_line_has_non_ascii_text_before_it():
    """AST columns count UTF-8 bytes: a message or name with `√` before the edited node must not
    shift the cut (every mutant's `before` is the node's text, and the rest of the line stays)."""
    text = 'def f(x, y):\n    s = "√Σ"; z = x + y\n    return z * 2  # ½\n'
    ms = mutants(text)
    on_sum = [m for m in ms if m.before == "x + y"]
    assert on_sum, [m.before for m in ms]
    for m in on_sum:  # the sum sits after the non-ASCII string: cut at characters, not bytes
        assert m.text == text.replace("x + y", m.after, 1), m
    for m in ms:
        ast.parse(m.text)
        assert '"√Σ"' in m.text or m.operator == "drop", m


def test_no_mutant_is_an_identity_of_the_arithmetic():
    """Exchanging max's arguments, or x * -1 for x / -1, is no wrong edit: none is made."""
    for m in mutants(_file("generated/numpy/softplus.py").read_text()):
        assert not (m.operator == "swap" and m.before.startswith("np.maximum(")), m
        assert not (m.operator == "factor" and m.before.endswith("*= -1")), m


def test_no_mutant_flips_the_sign_of_a_nan_policy_term():
    """x ± _support.nan_of(a) is the same (the term is 0 or NaN), and so is the order of
    broadcast_shapes' arguments: neither edit is made; dropping the NaN term's statement is."""
    for backend in ("numpy", "torch"):
        ms = mutants(_file(f"generated/{backend}/attention_tiled.py").read_text())
        assert not [m for m in ms if m.operator == "sign" and "nan_of" in m.before], backend
        assert not [m for m in ms if m.operator == "swap" and "broadcast_shapes" in m.before], backend
        assert [m for m in ms if m.operator == "drop" and "nan_of" in m.before], backend


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_dropping_a_nan_policy_line_is_refuted_by_the_edge_judge(backend):
    """The NaN terms are 0 on the exact judges' numbers: the edge judge's NaN-policy check (NaN
    entries against attention_lse's printed kernel) is what sees them."""
    path = _file(f"generated/{backend}/attention_tiled.py")
    text = path.read_text()
    old = "        dv = dv + (qk + _support.nan_of_columns(do))"
    assert text.count(old) == 1
    units = [u for u in at.units_of_file(path) if u.kind == "tiled"]
    got, detail = at.judge_mutant(path, text.replace(old, "        pass"), units)
    assert got == "edges", (got, detail)


def test_sample_spreads_evenly():
    ms = list(range(100))
    assert sample(ms, 10) == list(range(0, 100, 10))
    assert sample(ms, None) == ms and sample(ms[:3], 10) == ms[:3]


@pytest.mark.parametrize(
    "rel,old,new,judge",
    [
        ("generated/numpy/softmax.py", "y /= _support.rowsum(y)", "y *= _support.rowsum(y)", "rational"),
        ("generated/torch/softmax.py", "dx *= y", "dx /= y", "rational"),
        ("generated/numpy/_support.py", "return rowsum(a) / a.shape[-1]", "return rowsum(a) / a.shape[-2]", "rational"),
        # a symmetric forward (x ⊙ m): only the functional form's backward sees the swap
        (
            "generated/torch/dropout.py",
            "DropoutFunction.apply(x, mask, p)",
            "DropoutFunction.apply(mask, x, p)",
            "rational",
        ),
        (
            "generated/torch/softmax.py",
            "x - torch.amax(x, dim=-1, keepdim=True)",
            "x + torch.amax(x, dim=-1, keepdim=True)",
            "stability",
        ),
    ],
)
def test_a_wrong_edit_is_refuted_by_a_judge(rel, old, new, judge):
    path = _file(rel)
    text = path.read_text()
    assert text.count(old) == 1, old
    got, detail = at.judge_mutant(path, text.replace(old, new))
    assert got == judge, (got, detail)


def test_the_unedited_text_is_accepted():
    path = _file("generated/numpy/relu.py")
    assert at.judge_mutant(path, path.read_text()) == ("", "")


def test_edits_of_the_argument_checks_reach_the_edge_judge():
    path = _file("generated/numpy/_validate.py")
    text = path.read_text()
    old = "        args[name] = size(sig.op, name, args[name])"
    assert text.count(old) == 1
    got, _ = at.judge_mutant(
        path, text.replace(old, "        pass"), [u for u in at.units_of_file(path) if u.kind == "table"]
    )
    assert got == "edges"


def test_cli_audits_one_file():
    r = subprocess.run(
        [sys.executable, "-m", "qed", "audit", "--text", "sgd", "--limit", "4", "-j", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "8 wrong edits of the printed text: 8 refuted" in r.stdout, r.stdout


def _promoting_ops(backend):
    from derivations import registry

    for op in registry.ops():
        path = ROOT / "generated" / backend / f"{op.name}.py"
        if path.exists() and "= _v.promoted_like(" in path.read_text():
            yield op, path


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_declared_equivalent_promotion_is_checked_in_each_file(backend):
    """The one declared-equivalent edit every file shares (audit_text.EQUIVALENT: the upstream
    gradient's promotion dropped) is checked per file on the real libraries: each printed file
    without the line, at the shapes where the promotion acts (x (n,): rows absent), gives bitwise
    the same outputs and gradients, or the edit is not excused and a judge must refute it
    (qk_l2norm's backward updates dx = dy ⊙ γ in place by a promoted array)."""
    from qed.tools import text_mutants

    ops = list(_promoting_ops(backend))
    assert {op.name for op, _ in ops} >= {"linear", "layernorm", "rmsnorm", "swiglu", "embedding", "qk_l2norm"}
    differs = {}
    for op, path in ops:
        text = path.read_text()
        g = "dx" if "dx = _v.promoted_like(dx, layout)" in text else "dy"
        differs[op.name] = at.promotion_drop_differs(path, text, g)
        drop = [m for m in text_mutants.mutants(text) if m.after == "pass" and "promoted_like" in m.before]
        assert drop, op.name
        excused = at.equivalent_of(path, text, drop[0])
        assert (excused is None) == (differs[op.name] is not None), op.name
    assert all(differs[n] is None for n in ("linear", "layernorm", "rmsnorm", "swiglu", "embedding")), differs
    assert differs["qk_l2norm"] is not None, differs
    # where it is not equivalent, a judge refutes it
    path = ROOT / "generated" / backend / "qk_l2norm.py"
    text = path.read_text()
    (m,) = [m for m in text_mutants.mutants(text) if m.after == "pass" and "promoted_like" in m.before]
    judge, detail = at.judge_mutant(path, m.text)
    assert judge, detail


def test_a_mutant_is_judged_by_the_units_that_execute_its_statement():
    text = "def f(x,\n      k=1):\n    y = (x +\n         1)\n    if y:\n        return y\n    return 0\n"
    assert at.statement_lines(text, 4, "1") == range(3, 5)  # inside a statement over two lines
    assert at.statement_lines(text, 2, "1") == range(1, 8)  # a default: the whole def
    prof = {"rational": [("cheap", frozenset({3, 6}), 0.1), ("dear", frozenset({1, 7}), 9.0)]}
    assert at.relevant(prof, "rational", ["dear", "cheap"], range(3, 5)) == ["cheap"]
    assert at.relevant(prof, "rational", ["dear", "cheap"], range(1, 8)) == ["cheap", "dear"]
    assert at.relevant(None, "rational", ["dear", "cheap"], None) == ["dear", "cheap"]  # no profile: all


def test_a_profile_is_read_from_the_certificate_cache(tmp_path, monkeypatch):
    """The lines each unit executes come from what `qed prove` stored for the same printed files:
    the second profile runs no judge, and gives the same lines."""
    from qed.tools import judges
    from qed.tools.prove_cache import Cache

    path = _file("generated/numpy/relu.py")
    chosen = at.units_of_file(path)
    cache = Cache(tmp_path)
    first = at.profile(path, chosen, cache)
    assert all(rows and rows[0][1] for rows in first.values())  # every judge ran relu's lines

    def no_run(*a, **k):
        raise AssertionError("a judge ran although the cache holds its unit")

    monkeypatch.setattr(judges, "run_task", no_run)
    again = at.profile(path, chosen, Cache(tmp_path))
    assert {j: [(u.name, hit) for u, hit, _ in rows] for j, rows in again.items()} == {
        j: [(u.name, hit) for u, hit, _ in rows] for j, rows in first.items()
    }


def test_a_recorded_file_is_matched_by_backend_and_name():
    path = _file("generated/torch/_support.py")
    assert at._same_file("/elsewhere/checkout/generated/torch/_support.py", path)
    assert not at._same_file("/elsewhere/checkout/generated/numpy/_support.py", path)
    assert not at._same_file(str(path.with_name("_validate.py")), path)


def test_the_cheaper_judge_goes_first(monkeypatch):
    """With a profile, the exact judges and the edge judge run in the order of what the units
    that execute the edited statement cost; the stability judge only when neither refutes."""
    calls = []

    def phase(name, verdict):
        def run(*args):
            calls.append(name)
            return verdict

        return run

    monkeypatch.setattr(at, "_exact_phase", phase("exact", ("", "")))
    monkeypatch.setattr(at, "_edges_phase", phase("edges", ("edges", "probe")))
    monkeypatch.setattr(at, "_stability_phase", phase("stability", ("", "")))
    path = _file("generated/numpy/_validate.py")
    dear = {"rational": [("u", frozenset({5}), 30.0)], "symbolic": [], "edges": [("u", frozenset({5}), 0.1)]}
    assert at.judge_mutant(path, "", ["u"], dear, range(5, 6)) == ("edges", "probe")
    assert calls == ["edges"]
    calls.clear()
    cheap = {"rational": [("u", frozenset({5}), 0.01)], "symbolic": [], "edges": [("u", frozenset({5}), 0.1)]}
    assert at.judge_mutant(path, "", ["u"], cheap, range(5, 6)) == ("edges", "probe")
    assert calls == ["exact", "edges"]
    calls.clear()
    monkeypatch.setattr(at, "_edges_phase", phase("edges", ("", "")))
    assert at.judge_mutant(path, "", ["u"], cheap, range(5, 6)) == ("", "")
    assert calls == ["exact", "edges", "stability"]


def test_the_unedited_helper_is_accepted_by_the_units_that_run_each_statement():
    """No judge refutes the printed text itself, with the profile's routing (a harness that
    failed to run would refute every mutant)."""
    import ast

    path = _file("generated/numpy/_support.py")
    text = path.read_text()
    chosen = [u for u in at.units_of_file(path) if u.name in ("relu", "layernorm", "softmax", "colsum", "rmsnorm")]
    assert len(chosen) >= 3
    prof = at.profile(path, chosen)
    checked = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and any(
            node.lineno in hit for rows in prof.values() for _, hit, _ in rows
        ):
            assert at.judge_mutant(path, text, chosen, prof, range(node.lineno, node.end_lineno + 1)) == ("", ""), (
                node.name
            )
            checked.append(node.name)
    assert "rowsum" in checked and len(checked) >= 3, checked


def test_a_judge_run_past_its_budget_decides_nothing():
    """`budget` interrupts a run (a BaseException: a judge's own `except Exception`, which turns a
    failing edit into a refutation, cannot swallow it), and leaves no timer behind."""
    import signal
    import time

    with pytest.raises(at.OutOfTime):
        with at.budget(0.2):
            try:
                while True:
                    time.sleep(0.01)
            except Exception:  # noqa: BLE001 - what a judge does with an edit that fails
                pytest.fail("the budget's interruption was caught as an edit's failure")
    with at.budget(5):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_mutant_left_undecided_survives_and_says_which_run_ran_out(monkeypatch):
    def out_of_time(path, text, backend, chosen, prof, lines, undecided):
        undecided.append(at._out_of_time("symbolic", "attention"))
        return "", ""

    def accepts(*args):
        return "", ""

    monkeypatch.setattr(at, "_exact_phase", out_of_time)
    monkeypatch.setattr(at, "_edges_phase", accepts)
    monkeypatch.setattr(at, "_stability_phase", accepts)
    judge, detail = at.judge_mutant(_file("generated/numpy/attention.py"), "", ["u"])
    assert judge == ""
    assert detail.startswith("undecided: the symbolic judge's run of attention ran past"), detail
    assert at._why({"detail": detail}).startswith(" (undecided")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow the stability judge reports
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_an_exact_judge_that_runs_long_does_not_stop_the_audit(monkeypatch, backend):
    """A softmax without its row max is the same exact function: the rational judge accepts it,
    and the symbolic judge simplifies its exponentials for minutes. Past the budget that run
    decides nothing and the stability judge refutes the edit (e^{1e4} overflows)."""
    monkeypatch.setattr(at, "BUDGET_S", 3.0)
    path = _file(f"generated/{backend}/attention.py")
    text = path.read_text()
    drops = [m for m in mutants(text) if m.operator == "drop" and "max" in m.before and "-=" in m.before]
    assert drops, [m.before for m in mutants(text) if "max" in m.before]
    judge, detail = at.judge_mutant(path, drops[0].text)
    assert judge == "stability", detail
