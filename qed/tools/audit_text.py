"""`qed audit --text`: wrong edits of the printed files, each to be refuted by a judge.

For each generated file of both backends, the mutants of qed/tools/text_mutants.py (a sign, a
factor, a bound off by one, a comparison, an axis, a keyword, two arguments swapped, a statement
dropped) are judged one at a time as if the edited text were on disk
(`translation.edited`): the judges that read the file — the exact rational run first (the
fastest), then the exact symbolic run, then the edge judge (a `_validate` or refusal edit) — run
the units that execute it, and the first one that reports a mismatch refutes the mutant.

    refuted    a judge reports the edit (its name is kept). After the three judges of
               `qed prove`, a fourth, numeric one: the edited kernel beside the printed one at
               float32 inputs of magnitude 1e4 and 1e30 (`stability`): an edit that computes the
               same exact function but loses it in floating point (a row max not subtracted)
    survived   every judge accepts the edited text, or none could decide in its budget

Each judge's run of one unit on one mutant has a budget (`BUDGET_S`). An exact judge can take
far longer on an edit than on the printed text: the symbolic judge, asked whether an edited
softmax without its row max equals the specification, simplifies exponentials of sums for
minutes. A run that exceeds its budget decides nothing (it is not counted as a refutation, and
the mutant goes on to the next judge: the stability judge refutes that edit in a second); a
mutant that no judge refutes and one left undecided survives, with the run that ran out named.

    equivalent an edit that computes the same thing on every input, listed in `EQUIVALENT` below
               with the reason: not judged, counted apart, and the audit fails if a listed
               edit no longer occurs in the printed text (the list cannot go stale)

A survivor is printed with its line and edit: either the edit computes the same thing on every
input the proofs cover (then it belongs in `EQUIVALENT`, with the reason) or a judge is missing
something.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

from . import ROOT

__all__ = [
    "Outcome",
    "units_of_file",
    "profile",
    "relevant",
    "statement_lines",
    "judge_mutant",
    "budget",
    "OutOfTime",
    "run",
    "main",
    "DEFAULT_LIMIT",
]

DEFAULT_LIMIT = 12  # mutants per file in a default run (evenly spread); --limit 0: all
BACKENDS = ("numpy", "torch")


@dataclass(frozen=True)
class Equivalent:
    """A printed edit that cannot change what the code computes: in generated/<backend>/<file>.py
    (both backends; every file where `file` is None), on a line containing `line`, the segment
    `before` replaced by `after`."""

    file: str | None
    line: str
    before: str
    after: str
    reason: str
    backends: tuple = ("numpy", "torch")
    # where the argument holds only for some files (a general pattern): a check on the real
    # library, (path of the printed file, its text) -> None where the edit is equivalent there,
    # else why not; then the edit is judged like any other
    checked: object = None

    def matches(self, path: Path, text_line: str, mutant) -> bool:
        return (
            (self.file is None or path.stem == self.file)
            and path.parent.name in self.backends
            and self.line in text_line
            and mutant.before == self.before
            and mutant.after == self.after
        )


# Each entry is an argument, not a judgement: why no input can tell the edit apart.
EQUIVALENT = (
    Equivalent(
        "squareplus",
        "np.hypot(x, math.sqrt(b))",
        "np.hypot(x, math.sqrt(b))",
        "np.hypot(math.sqrt(b), x)",
        "hypot is symmetric: √(x² + b) = √(b + x²), and NumPy's hypot scales by the larger of the two "
        "whichever comes first",
        backends=("numpy",),
    ),
    Equivalent(
        "attention_tiled",
        "B = min(block, n - P)",
        "n - P",
        "n + P",
        "B only bounds the slices P:P + B of k, v, dk and dv, which stop at n: min(block, n + P) "
        "and min(block, n − P) select the same rows",
    ),
    Equivalent(
        "attention_tiled",
        "ell = ",
        "0",
        "1",
        "the first key block rescales ℓ by α = e^{mx − mx_new} with mx = −∞ and mx_new finite "
        "(key 0 is visible to every row, causal or not), so α = 0 and any finite start of ℓ is lost",
    ),
    Equivalent(
        "attention_tiled",
        "acc = ",
        "0",
        "1",
        "as ℓ: the first key block multiplies acc by α = e^{−∞} = 0",
    ),
    Equivalent(
        "attention_tiled",
        "-(P - R)",
        "-(P - R)",
        "P - R",
        "under the causal flag R = min(P, m) and the loop stops at R = m, so P − R = 0 wherever the mask is applied",
    ),
    Equivalent(
        "attention_tiled",
        "1 - (P - R)",
        "1 - (P - R)",
        "1 + (P - R)",
        "under the causal flag R = min(P, m) and the loop stops at R = m, so P − R = 0 wherever the mask is applied",
    ),
    Equivalent(
        "gpt",
        "(*q.shape[:-1], k.shape[-2]), q)",
        "-2",
        "2",
        "the program calls attention with dropout on its heads only, (B, h, T, d) from `_heads`: a "
        "4-axis k, whose axis −2 is its axis 2",
    ),
    Equivalent(
        "_special",
        "_COLUMNS[-3::-1]",
        "-3",
        "3",
        "the coefficient columns are a tuple of six (derivations/special.py's P and Q of degree 5): "
        "index −3 is index 3",
    ),
    Equivalent(
        "_special",
        "np.tri(z.shape[-2], z.shape[-1]",
        "-1",
        "1",
        "z is the cached mask's 2-D array (rows, cols): its axis −1 is its axis 1",
    ),
    Equivalent(
        "_validate",
        "return leads[0]",
        "0",
        "1",
        "in the branch where every argument's leading axes equal leads[0], leads[1] is leads[0] (a "
        "broadcasting op has at least two batched arguments)",
    ),
    Equivalent(
        "_validate",
        "if a.ndim >= ndim:",
        "a.ndim >= ndim",
        "a.ndim > ndim",
        "at a.ndim == ndim the reshape below puts (1,) * 0 in front: `a` itself",
        backends=("numpy",),
    ),
    Equivalent(
        "_validate",
        "lack = t - a.ndim if a.ndim < t else 0",
        "a.ndim < t",
        "a.ndim <= t",
        "at a.ndim == t both branches give 0",
        backends=("numpy",),
    ),
    Equivalent(
        "_validate",
        "if a.dim() >= ndim:",
        "a.dim() >= ndim",
        "a.dim() > ndim",
        "at a.dim() == ndim the reshape below puts (1,) * 0 in front: `a` itself",
        backends=("torch",),
    ),
    Equivalent(
        "_validate",
        "lack = t - a.dim() if a.dim() < t else 0",
        "a.dim() < t",
        "a.dim() <= t",
        "at a.dim() == t both branches give 0",
        backends=("torch",),
    ),
    Equivalent(
        "_validate",
        "k = lack if k is None or lack < k else k",
        "lack < k",
        "lack <= k",
        "the smaller of two equal numbers is either: k is the minimum either way",
    ),
    Equivalent(
        "_validate",
        "return g.sum(axis=axes, keepdims=True).reshape(shape)",
        "g.sum(axis=axes, keepdims=True)",
        "g.sum(axis=axes, keepdims=False)",
        "the sum has the target's size either way, and the reshape to `shape` puts the summed axes' "
        "length-1 places back",
        backends=("numpy",),
    ),
    Equivalent(
        "_validate",
        'self.cached = fields.pop("cached", 0)',
        "0",
        "1",
        "the default is read only by a signature that states no `cached`: every printed signature of "
        "a function that can take the empty path (`nothing_to_compute`, the one reader) states it",
    ),
    Equivalent(
        "_validate",
        "if sig.promote else 0",
        "0",
        "1",
        "layout[0], the axes the promotion adds, is read only by `restored` and `promoted_like`, which "
        "are printed only for ops that promote (then the other branch gives it)",
    ),
    *(
        Equivalent(
            None,  # every file that prints it
            f"{g} = _v.promoted_like({g}, layout)",
            f"{g} = _v.promoted_like({g}, layout)",
            "pass",
            "the upstream gradient's promoted axes (x given as (n,), read as (1, n)) are put back for the "
            "helpers' documented (..., r, c) layout only: every printed line that reads it broadcasts it "
            "against the promoted arrays of the cache or folds the leading axes (matmul_rows, contract, "
            "colsum, rowsum, the ids' scatter), and sum_to restores each gradient's shape, so the values "
            "are the same without it; checked in each file on floats at the absent-axis shapes "
            "(`promotion_drop_differs`: bitwise the same outputs and gradients), and judged like any edit "
            "where it is not (an in-place update of dy ⊙ γ by a promoted array: qk_l2norm's backward)",
            checked=lambda path, text, g=g: promotion_drop_differs(path, text, g),
        )
        for g in ("dy", "dx")  # the upstream gradients' names (embedding's output is x)
    ),
)


_PROMOTION_CHECKED: dict = {}


def promotion_drop_differs(path: Path, text: str, g: str = "dy") -> str | None:
    """Run the printed file `path` (text `text`) with and without its line `g =
    _v.promoted_like(g, layout)` on floats, at the shapes where the promotion acts (x given as
    (n,), the rows axis absent), forward and backward: None where every output and gradient is
    bitwise the same, else what differs (an in-place update of an array made from the
    unpromoted gradient alone, `dx = dy*gamma` then `dx -= rnorm*…`, raises without it)."""
    import hashlib

    key = (str(path), hashlib.sha256(text.encode()).hexdigest(), g)
    if key not in _PROMOTION_CHECKED:
        _PROMOTION_CHECKED[key] = _promotion_drop_differs(path, text, g)
    return _PROMOTION_CHECKED[key]


def _promotion_drop_differs(path: Path, text: str, g: str) -> str | None:
    import numpy as np

    from derivations import registry

    from . import judge_edges as je

    backend = path.parent.name
    line = f"{g} = _v.promoted_like({g}, layout)"
    lines = [ln for ln in text.splitlines() if ln.strip() == line]
    if not lines:
        return f"no line {line!r}"
    edited = text
    for ln in lines:
        edited = edited.replace(ln + "\n", ln[: len(ln) - len(ln.lstrip())] + "pass\n")
    try:
        op = registry.op(path.stem)
        printed = types.ModuleType(f"generated.{backend}.{path.stem}_printed")
        unpromoted = types.ModuleType(f"generated.{backend}.{path.stem}_unpromoted")
        for mod, src in ((printed, text), (unpromoted, edited)):
            mod.__package__ = f"generated.{backend}"
            exec(compile(src, str(path), "exec"), mod.__dict__)
        raw = je.build(op, je.sizes_of(op), lead=(), drop=1, seed=4)
        args = [je._convert(backend, a) for a in raw]
        results = []
        for mod in (printed, unpromoted):
            outs, cache = getattr(mod, f"{op.name}_forward")(*args)
            outs = je.as_tuple(outs)
            rng = np.random.default_rng(5)
            ups = [je._convert(backend, rng.standard_normal(tuple(o.shape))) for o in outs]
            grads = je.as_tuple(getattr(mod, f"{op.name}_backward")(*ups, cache))
            results.append([je._numpy(x) for x in outs + grads])
    except Exception as exc:  # noqa: BLE001 - the edited file failing is the difference
        return f"{type(exc).__name__}: {exc}"
    for want, got in zip(*results):
        if want.shape != got.shape or not np.array_equal(want, got):
            return f"an output or gradient differs ({want.shape} against {got.shape})"
    return None


def equivalent_of(path: Path, text: str, mutant) -> Equivalent | None:
    """The declared equivalence that `mutant` of `path` (printed text `text`) is, or None."""
    line = text.splitlines()[mutant.line - 1] if 0 < mutant.line <= len(text.splitlines()) else ""
    e = next((e for e in EQUIVALENT if e.matches(path, line, mutant)), None)
    if e is not None and e.checked is not None and e.checked(path, text) is not None:
        return None  # not equivalent in this file: judged like any other edit
    return e


@dataclass
class Outcome:
    file: str
    mutant: str
    operator: str
    refuted_by: str = ""
    detail: str = ""
    seconds: float = 0.0
    equivalent: str = ""  # the declared reason, for an edit that computes the same

    @property
    def outcome(self) -> str:
        return "refuted" if self.refuted_by else "equivalent" if self.equivalent else "survived"


def units_of_file(path: Path):
    """The judged units that execute generated file `path` (qed/tools/judges.py's units)."""
    from . import judges

    stem = path.stem
    every = judges.units(None)
    own = [u for u in every if u.file == stem]
    if not stem.startswith("_"):
        return own
    if stem == "_validate":  # every op's checks, and the probes of its generic ones
        return [u for u in every if u.kind in ("op", "step", "table", "mha", "tiled", "validate")]

    def calls(u) -> bool:  # a helper module: every unit whose file calls into it
        f = path.parent / f"{u.file}.py"
        return u.file != stem and f.exists() and f"{stem}." in f.read_text()

    return own + [u for u in every if calls(u)]


@contextlib.contextmanager
def _real_modules(backend: str, path: Path, text: str):
    """The real (imported) generated modules of `backend`, with `path`'s module executed from
    `text` and every other generated module of that backend imported afresh against it; all
    restored afterwards. What the edge judge runs."""
    prefix = f"generated.{backend}"
    saved = {k: v for k, v in sys.modules.items() if k.startswith(prefix + ".")}
    package = importlib.import_module(prefix)
    saved_attrs = dict(vars(package))
    try:
        for k in saved:
            del sys.modules[k]
            # `from . import _validate` reads the package's attribute before sys.modules
            vars(package).pop(k.rsplit(".", 1)[1], None)
        name = f"{prefix}.{path.stem}"
        mod = types.ModuleType(name)
        mod.__file__ = str(path)
        mod.__package__ = prefix
        sys.modules[name] = mod
        exec(compile(text, str(path), "exec"), mod.__dict__)
        setattr(package, path.stem, mod)
        yield
    finally:
        for k in [k for k in sys.modules if k.startswith(prefix + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)
        vars(package).clear()
        vars(package).update(saved_attrs)


def profile(path: Path, chosen, cache=None) -> dict:
    """{judge: [(unit, the lines of `path` it executes, seconds)]}, cheapest first: each judge's
    run of each unit of a shared file (a helper) on the printed text. A unit that never executes
    the statement an edit is on cannot see the edit, so a mutant is judged by the units that
    execute it alone (`relevant`): the audit of `_validate` and `_support` then costs what their
    callers' lines cost, not every unit per mutant.

    A unit's lines and seconds are what `qed prove` keeps in its certificate cache for the same
    printed files (read from there when present; run, and stored, when not). The cache only
    routes mutants here: lines missing from a damaged entry leave a mutant unjudged, and an
    unjudged mutant survives, which fails the audit (it cannot make one pass)."""
    from . import judges
    from .prove_cache import Cache, Keys

    backend = path.parent.name
    cache = cache if cache is not None else Cache(warn=lambda line: None)
    keys = Keys()
    out = {}
    for judge in ("rational", "symbolic", "edges"):
        rows = []
        for unit in chosen:
            modules, files = judges.depends_on(unit, backend)
            key = keys.judge(judge, backend, unit.kind, unit.name, files, modules)
            what = f"judge {judge} {backend} {unit.name}"
            part = cache.load(key, what)
            if part is None:
                part = judges.run_task(judge, backend, (unit.name,))["units"][unit.name]
                if all(r["ok"] for r in part["results"]):
                    cache.store(key, what, {k: part[k] for k in ("results", "hits", "seconds")})
            lines = {int(n) for f, ns in part["hits"].items() if _same_file(f, path) for n in ns}
            rows.append((unit, frozenset(lines), part["seconds"]))
        out[judge] = sorted(rows, key=lambda r: r[2])
    return out


def _same_file(recorded: str, path: Path) -> bool:
    """A traced file names `path` (compared as generated/<backend>/<file>: a cache may have been
    written by a checkout at another place)."""
    f = Path(recorded)
    return f.name == path.name and f.parent.name == path.parent.name


def statement_lines(text: str, line: int, before: str) -> range:
    """The lines of the innermost statement of `text` that holds an edit at `line` (spanning as
    many lines as `before` does): any of them executed means the statement ran."""
    import ast

    last = line + before.count("\n")
    best = None
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.stmt) and node.lineno <= line and last <= (node.end_lineno or node.lineno):
            if best is None or (node.end_lineno - node.lineno) < (best.end_lineno - best.lineno):
                best = node
    return range(best.lineno, best.end_lineno + 1) if best is not None else range(1, len(text.splitlines()) + 1)


def relevant(prof: dict | None, judge: str, chosen, lines: range | None):
    """The units to judge a mutant on `lines` with, cheapest first (all of `chosen` without a
    profile)."""
    if prof is None or lines is None:
        return list(chosen)
    wanted = set(lines)
    return [unit for unit, hit, _ in prof[judge] if hit & wanted]


# the longest one judge may run one unit on one mutant, in seconds (the printed files' slowest
# unit takes under 10 s in every judge): past it the run decides nothing
BUDGET_S = 40.0


class OutOfTime(BaseException):
    """A judge's run of a mutant past its budget (a BaseException: the judges' own `except
    Exception`, which turns an edit that fails to run into a refutation, must not catch it)."""


@contextlib.contextmanager
def budget(seconds: float):
    """Raise OutOfTime in the block after `seconds` of wall time (the process's main thread only:
    elsewhere, unbounded). Not re-entrant."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum, frame):
        raise OutOfTime(seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# the cost of importing the generated package afresh around an edited module (the edge judge's
# and the stability judge's real modules), in seconds: what an edge run costs beyond its units
REIMPORT_SECONDS = 0.3


def judge_mutant(path: Path, text: str, chosen=None, prof=None, lines=None) -> tuple[str, str]:
    """(the judge that refutes `text` as the content of `path`, its first report), or ("", "")
    when none does (("", "undecided: …") when a judge's run ran out of its budget).
    With a `profile` and the edited statement's `lines`, each judge runs only the units that
    execute that statement, and the exact judges (rational, then symbolic) and the edge judge
    go in the order of what their units cost: an edit on a refusal path of a helper that every
    unit calls is found by the edge judge's probes in a second, not after every exact run. The
    stability judge (numeric) is the last resort."""
    backend = path.parent.name
    chosen = units_of_file(path) if chosen is None else chosen
    phases = [_exact_phase, _edges_phase]
    if prof is not None and lines is not None:

        def cost(phase):
            judges_of = ("rational", "symbolic") if phase is _exact_phase else ("edges",)
            wanted = set(lines)
            units = sum(s for j in judges_of for _, hit, s in prof[j] if hit & wanted)
            return units + (REIMPORT_SECONDS if phase is _edges_phase else 0.0)

        phases.sort(key=cost)
    undecided: list[str] = []
    for phase in (*phases, _stability_phase):
        found = phase(path, text, backend, chosen, prof, lines, undecided)
        if found[0]:
            return found
    return ("", "undecided: " + "; ".join(undecided)) if undecided else ("", "")


def _out_of_time(judge: str, unit) -> str:
    return f"the {judge} judge's run of {getattr(unit, 'name', unit)} ran past {BUDGET_S:.0f} s"


def _exact_phase(path, text, backend, chosen, prof, lines, undecided) -> tuple[str, str]:
    from . import judges
    from .field_judge import first_failure
    from .translation import edited

    with edited(path, text), first_failure():
        for judge in ("rational", "symbolic"):
            for unit in relevant(prof, judge, chosen, lines):
                try:
                    with budget(BUDGET_S):
                        results = judges._JUDGE[judge](unit, backend)
                except OutOfTime:
                    undecided.append(_out_of_time(judge, unit))
                    continue
                except Exception as exc:  # noqa: BLE001 - the edited code failing to run refutes it
                    return judge, f"{unit.name}: could not run: {type(exc).__name__}: {str(exc)[:200]}"
                bad = [r for r in results if not r.ok]
                if bad:
                    return judge, str(bad[0])[:300]
    return "", ""


def _edges_phase(path, text, backend, chosen, prof, lines, undecided) -> tuple[str, str]:
    from . import judges

    todo = relevant(prof, "edges", chosen, lines)
    if not todo:
        return "", ""
    try:
        with _real_modules(backend, path, text):
            for unit in todo:
                try:
                    with budget(BUDGET_S):
                        results = judges._JUDGE["edges"](unit, backend)
                except OutOfTime:
                    undecided.append(_out_of_time("edges", unit))
                    continue
                bad = [r for r in results if not r.ok]
                if bad:
                    return "edges", str(bad[0])[:300]
    except Exception as exc:  # noqa: BLE001 - the edited module failing to import refutes it
        return "edges", f"could not run: {type(exc).__name__}: {str(exc)[:200]}"
    return "", ""


def _stability_phase(path, text, backend, chosen, prof, lines, undecided) -> tuple[str, str]:
    ran = {u for j in prof for u in relevant(prof, j, chosen, lines)} if prof is not None else set(chosen)
    floats = [u for u in chosen if u in ran and u.kind == "op"]
    if not floats:
        return "", ""
    reference = {u.name: _float_outputs(u, backend) for u in floats}
    try:
        with _real_modules(backend, path, text):
            for unit in floats:
                try:
                    with budget(BUDGET_S):
                        found = _unstable(reference[unit.name], _float_outputs(unit, backend))
                except OutOfTime:
                    undecided.append(_out_of_time("stability", unit))
                    continue
                if found:
                    return "stability", f"{unit.name}: {found}"
    except Exception as exc:  # noqa: BLE001
        return "edges", f"could not run: {type(exc).__name__}: {str(exc)[:200]}"
    return "", ""


# the stability judge (numeric; the audit's last resort): an edit that computes the same exact
# function can still lose it in floating point (x − max x dropped from a softmax: e^{1e4} = inf).
# The edited kernel runs beside the printed one on float32 inputs of magnitude 1e4 and 1e30; where
# the printed one is finite, the edited one must be finite and within 1e-3 of it.
MAGNITUDES = (1e4, 1e30)


def _float_outputs(unit, backend: str) -> list:
    import numpy as np

    from derivations import registry

    from . import judge_edges as je

    op = registry.op(unit.name)
    out = []
    for scale in MAGNITUDES:
        args = je.build(op, je.sizes_of(op), seed=3)
        args = [(a * scale).astype(np.float32) if a.dtype.kind == "f" else a for a in args]
        with np.errstate(all="ignore"):
            try:
                res, cache = je._forward(op, backend)(*[je._convert(backend, a) for a in args])
                outs = [je._numpy(o).astype(np.float64) for o in je.as_tuple(res)]
                ups = [je._convert(backend, np.ones(o.shape, np.float32)) for o in outs]
                grads = [
                    je._numpy(g).astype(np.float64)
                    for g in je.as_tuple(je._backward(op, backend)(*ups, cache))
                    if g is not None
                ]
            except Exception as exc:  # noqa: BLE001
                out.append(f"raised {type(exc).__name__}")
                continue
        out.append(outs + grads)
    return out


def _unstable(reference: list, edited: list) -> str:
    import numpy as np

    for scale, want, got in zip(MAGNITUDES, reference, edited):
        if isinstance(want, str):
            continue
        if isinstance(got, str):
            return f"at magnitude {scale:g}: {got} where the printed kernel did not"
        for k, (w, g) in enumerate(zip(want, got)):
            if w.shape != g.shape:
                return f"at magnitude {scale:g}: array {k} has shape {g.shape}, the printed one {w.shape}"
            fine = np.isfinite(w)
            if np.any(~np.isfinite(g[fine])):
                return f"at magnitude {scale:g}: array {k} not finite where the printed kernel's is"
            err = np.abs(g[fine] - w[fine]) / np.maximum(np.abs(w[fine]), 1.0)
            if err.size and float(err.max()) > 1e-3:
                return f"at magnitude {scale:g}: array {k} differs by {float(err.max()):.2g} (relative)"
    return ""


def files(selectors: list[str] | None) -> list[Path]:
    out = []
    for b in BACKENDS:
        for p in sorted((ROOT / "generated" / b).glob("*.py")):
            if p.name == "__init__.py":
                continue
            if selectors and not any(p.stem == s or p.stem.startswith(s) for s in selectors):
                continue
            out.append(p)
    return out


def audit_file(path: Path, limit: int | None) -> list[Outcome]:
    from .text_mutants import mutants, sample

    chosen = units_of_file(path)
    out = []
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text()
    todo = sample(mutants(text), limit)
    # a shared file (more units than its own): each mutant judged by the units that run its line
    prof = profile(path, chosen) if len(chosen) > 1 else None
    for m in todo:
        same = equivalent_of(path, text, m)
        if same is not None:
            out.append(Outcome(rel, str(m), m.operator, equivalent=same.reason))
            continue
        t0 = time.perf_counter()
        lines = statement_lines(text, m.line, m.before) if prof is not None else None
        judge, detail = judge_mutant(path, m.text, chosen, prof, lines)
        out.append(Outcome(rel, str(m), m.operator, judge, detail, time.perf_counter() - t0))
    return out


def _audit_file_task(path: str, limit: int | None) -> list[dict]:
    import warnings
    from dataclasses import asdict

    import numpy as np

    # a wrong edit may divide by zero on floats (the edge judge's real kernels): a finding the
    # judge reports in its own words, not a warning on the terminal
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [asdict(o) for o in audit_file(Path(path), limit)]


def _cost_rank(path: Path) -> int:
    """The order files are handed to the pool, longest first, so that the workers finish
    together: the shared helpers (their edits are judged by their callers), then the units that
    take longest to judge, then the rest."""
    from .judges import HEAVY

    if path.stem.startswith("_"):
        return 0
    return 1 if path.stem in HEAVY else 2


def run(
    selectors: list[str] | None = None, limit: int | None = DEFAULT_LIMIT, workers: int | None = None, progress=None
) -> list[dict]:
    """Every file's sampled mutants judged, files in parallel (one process each)."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    todo = files(selectors)
    workers = workers or min(len(todo), os.cpu_count() or 1) or 1
    done: dict = {}
    if workers == 1:
        for p in todo:
            done[p] = _audit_file_task(str(p), limit)
            if progress:
                progress(p, done[p])
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(_audit_file_task, str(p), limit): p for p in sorted(todo, key=_cost_rank)}
            for fut in as_completed(futures):
                done[futures[fut]] = fut.result()
                if progress:
                    progress(futures[fut], done[futures[fut]])
    return [r for p in todo for r in done[p]]


def main(selectors: list[str] | None, as_json: bool, limit: int | None, workers: int | None) -> int:
    """`qed audit --text [FILE-PREFIX ...]`: a table per file (mutants, refuted by each judge,
    survived), the survivors listed; exit 1 if any survives."""
    import json
    from collections import Counter

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..errors import QedError

    err = Console(stderr=True)
    todo = files(selectors)
    if not todo:
        raise QedError(
            f"no generated file matches {' '.join(selectors)} (file names or their prefixes, e.g. softmax or _support)"
        )

    def tick(path, rows):
        if not err.is_terminal:
            bad = [r for r in rows if not r["refuted_by"] and not r["equivalent"]]
            err.print(
                f"{path.relative_to(ROOT).as_posix()}  {len(rows) - len(bad)}/{len(rows)} refuted", highlight=False
            )
            for r in bad:  # at once, not only in the final list: a long run shows its survivors as it goes
                err.print(f"  survived: {r['mutant']}{_why(r)}", highlight=False, markup=False)

    start = time.perf_counter()
    rows = run(selectors, limit, workers, tick)
    wall = time.perf_counter() - start
    survived = [r for r in rows if not r["refuted_by"] and not r["equivalent"]]
    stale = stale_equivalents()
    if as_json:
        json.dump(rows, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        out = Console(width=None if sys.stdout.isatty() else 160)
        table = Table(title=f"qed audit --text — {len(rows)} wrong edits of the printed files")
        for col in ("file", "mutants", "rational", "symbolic", "edges", "stability", "equivalent", "survived"):
            table.add_column(col, justify="left" if col == "file" else "right")
        per: dict = {}
        for r in rows:
            per.setdefault(r["file"], Counter())[
                r["refuted_by"] or ("equivalent" if r["equivalent"] else "survived")
            ] += 1
        for f, c in per.items():
            table.add_row(
                f,
                str(sum(c.values())),
                str(c["rational"]),
                str(c["symbolic"]),
                str(c["edges"]),
                str(c["stability"]),
                str(c["equivalent"]),
                f"[red]{c['survived']}[/]" if c["survived"] else "0",
            )
        out.print(table)
        total = Counter(r["refuted_by"] or ("equivalent" if r["equivalent"] else "survived") for r in rows)
        out.print(
            f"{len(rows)} wrong edits of the printed text: {sum(1 for r in rows if r['refuted_by'])} refuted "
            f"(rational {total['rational']}, symbolic {total['symbolic']}, edges {total['edges']}, "
            f"stability {total['stability']}), {total['equivalent']} declared equivalent, "
            f"{len(survived)} survived; {wall:.1f} s",
            highlight=False,
        )
    for r in survived:
        err.print(f"[red]SURVIVED[/red] {r['file']} {escape(r['mutant'] + _why(r))}", highlight=False)
    for e in stale:
        err.print(f"[red]STALE[/red] a declared equivalent edit no longer printed: {e}", highlight=False)
    return 1 if survived or stale else 0


def _why(row: dict) -> str:
    """What a survivor's row says beyond its edit: the judges' runs that ran out of time."""
    return f" ({row['detail']})" if row["detail"].startswith("undecided") else ""


def stale_equivalents() -> list[str]:
    """The declared equivalent edits (`EQUIVALENT`) that no mutant of the printed text is, in
    either backend: each must still describe an edit of every backend's file that has the line."""
    from .text_mutants import mutants

    printed: dict = {}  # path -> (text, its mutants), each file read and mutated once

    def of(path):
        if path not in printed:
            text = path.read_text()
            printed[path] = (text, mutants(text))
        return printed[path]

    out = []
    for e in EQUIVALENT:
        hits = 0
        for b in e.backends:
            paths = (
                [ROOT / "generated" / b / f"{e.file}.py"] if e.file else sorted((ROOT / "generated" / b).glob("*.py"))
            )
            for path in paths:
                if not path.exists():
                    continue
                text, ms = of(path)
                hits += any(equivalent_of(path, text, m) is e for m in ms)
        if not hits:
            out.append(f"{e.file}: {e.before!r} -> {e.after!r} on a line with {e.line!r}")
    return out
