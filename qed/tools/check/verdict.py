"""One verdict per step: proved, refuted, not understood, definition, notation.

A statement (parser.split) is read in order against the context, which it may change:

* a flow (`Tokens \\rightarrow Embedding`) is **notation**;
* `X \\in \\mathbb{R}^{a \\times b}` declares a shape (**definition**);
* a chain `e0 = e1 = … = en` is n steps. The first may be a **definition**: a new name, an entry
  `A_{ij} = …` of an array with no meaning yet, a function `f(x) = …`, moments of a random
  vector (`\\mathbb{E}[q_i] = 0`), a size (`d_{model} = 768`). A name that already has a meaning
  (the document's or the catalogue's) is *restated*: proved if it agrees, else a redefinition
  (a **definition**, with the difference shown). Every other step is a claim;
* a claim is elaborated (elaborate.py), put in index form and unfolded (expand.py), first at the
  **local** level (only what the step differentiates), then in **full**; the back end's gate
  (`derivations.proof.core.prove_index_identity`: the normaliser, the free-symbol guard, the
  spot-check, every side condition a goal) decides it for symbolic sizes. Not proved, a
  counterexample is searched for in full at concrete sizes — a point counts only if every entry
  it reads lies inside its array — and the step is **refuted** with the numbers of both sides;
  otherwise it is **not understood**, with the residual.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import mpmath
import sympy as sp

from derivations.language.arrays import Array, entry, size
from derivations.positional import pair_index
from derivations.proof import numeric
from derivations.proof.core import Setting, prove_index_identity
from derivations.proof.expectation import RandomVector

from . import parser as P
from .context import Binding, Context, Definition, FunctionSpec, basic, is_unknown, unknown_size
from .elaborate import Block, Elaborator, Val, _show, doc_name, label_for
from .expand import (
    Policy,
    _diff_expandable,
    _grad_expandable,
    consumers,
    deps,
    expand,
    labels_in,
    unfold_once,
    upstream,
)
from .grammar import NotUnderstood
from .render import markdown_table
from .transcript import TracingSetting, latex, name_latex, plain_markdown, summarise_rewrites, tagged_show

VERDICTS = ("proved", "refuted", "not understood", "definition", "notation")
SIZE_VALUES = (3, 2, 4, 5, 6, 7)  # distinct concrete sizes for counterexamples, in order of the sizes' names
PROOF_SIZE = 2  # the sizes of the gate's spot-check (a proof itself is for symbolic sizes)
TOLERANCE = mpmath.mpf(10) ** -20
# `a ≈ b`: the largest relative gap |a − b|/max(1, |a|, |b|) at which the two sides read as an
# approximation (GELU's tanh form is within 2.4e-4 of xΦ(x) on the points compared)
APPROXIMATION_TOLERANCE = 1e-2


@dataclass
class Verdict:
    """One step's verdict. Its fields are the `--json` record of the step (docs/check.md,
    "The JSON schema"); `transcript` is filled on demand (`explain()`), from what the step was
    decided on (kept apart, never serialised)."""

    verdict: str
    step: str  # the step's LaTeX
    reason: str  # one line: the method and scope, the definition, or why not
    line: int = 0
    path: str = ""
    scope: str = ""
    assumptions: list = field(default_factory=list)  # plain text, one a condition
    counterexample: dict | None = None
    defines: str | None = None
    seconds: float = 0.0
    formula: int = 0  # which formula of the file (from 1)
    display: bool = True  # a display formula (else an inline one)
    assumptions_latex: list = field(default_factory=list)  # the same, Markdown with $LaTeX$
    transcript: dict | None = None  # with --explain: see `explain()`

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")
        if len(self.assumptions_latex) != len(self.assumptions):
            self.assumptions_latex = list(self.assumptions_latex) + [
                str(a) for a in self.assumptions[len(self.assumptions_latex) :]
            ]
        self._decided = None  # (level, lhs, rhs, setting, rewrites) of an index-form decision

    def to_json(self) -> dict:
        return asdict(self)

    def explain(self) -> dict | None:
        """The step's transcript (computed once): {"level", "lhs", "rhs", "rewrites",
        "normal_forms", "residual"} — both sides' index forms as LaTeX (indices counted from 0),
        the normaliser's rewrites with their counts, each side's normal form (None where too
        long to show) and the residual of lhs − rhs. None for a step not decided in index form
        (a definition, notation, a step not understood before its sides were read)."""
        if self.transcript is None and self._decided is not None:
            from .transcript import normal_forms, residual_of, shown

            level, lhs, rhs, setting, rewrites, residual = self._decided
            if residual is None:
                residual = residual_of(lhs, rhs, setting)
            self.transcript = {
                "level": level,
                "lhs": shown(lhs),
                "rhs": shown(rhs),
                "rewrites": rewrites,
                "normal_forms": normal_forms(lhs, rhs, setting),
                "residual": residual,
            }
        return self.transcript

    def _repr_markdown_(self) -> str:
        return markdown_table([self])


class Undecided(Exception):
    def __init__(self, reason: str, counterexample: dict | None = None, decided=None):
        super().__init__(reason)
        self.counterexample = counterexample
        self.decided = decided  # what the transcript of the step is made from


# ---------------------------------------------------------------------------------- helpers
def _step_source(a: list, rel: str, b: list, text: str) -> str:
    return f"{_tok_text(a, text)} {rel} {_tok_text(b, text)}".strip()


def _tok_text(toks: list, text: str) -> str:
    toks = [t for t in toks if t.kind != "end"]
    if not toks:
        return ""
    last = toks[-1]
    end = last.pos + (1 + len(last.text) if last.kind == "cmd" else len(last.text))
    return text[toks[0].pos : end].strip()


def _is_name_like(node) -> bool:
    return doc_name(node) is not None and not isinstance(node, P.Num)


def _function_form(node):
    """f(x, y) with f a name and x, y distinct names: (f, [x, y]); else None."""
    if not (isinstance(node, P.Juxt) and len(node.items) == 2 and isinstance(node.items[1], P.Paren)):
        return None
    head, paren = node.items
    if paren.bracket != "(" or not _is_name_like(head):
        return None
    params = [doc_name(p) for p in paren.items]
    if any(p is None for p in params) or len(set(params)) != len(params):
        return None
    if any(not isinstance(p, (P.Letters, P.Greek, P.Prime, P.Accent)) for p in paren.items):
        return None
    return doc_name(head), params


def _family_function_form(node):
    """P(token_i), a name applied to one name with one index letter: (P, token, i); else None."""
    if not (isinstance(node, P.Juxt) and len(node.items) == 2 and isinstance(node.items[1], P.Paren)):
        return None
    head, paren = node.items
    if paren.bracket != "(" or len(paren.items) != 1 or not _is_name_like(head) or isinstance(head, P.Script):
        return None
    arg = paren.items[0]
    if not (isinstance(arg, P.Script) and len(arg.sub) == 1 and _is_name_like(arg.base)):
        return None
    if isinstance(arg.base, (P.Script, P.Power)):
        return None
    it = arg.sub[0]
    if isinstance(it, P.Letters) and len(it.text) == 1:
        return doc_name(head), doc_name(arg.base), it.text
    return None


def _entry_form(node):
    """A_{ij} with A a name and plain index letters: (A, [i, j]); else None."""
    if not isinstance(node, P.Script) or not _is_name_like(node.base):
        return None
    items = []
    for it in node.sub:
        if isinstance(it, P.Letters) and "_" not in it.text:
            items.extend(it.text)
        elif isinstance(it, P.Greek):
            items.append(it.name)
        else:
            return None
    if len(set(items)) != len(items):
        return None
    return doc_name(node.base), items


def _moment(node):
    """E[v_i] -> ("mean", v, i); Var(v_i) -> ("variance", v, i); else None."""
    if isinstance(node, P.Expect) and isinstance(node.arg, P.Script):
        return ("mean", doc_name(node.arg.base), node.arg)
    if (
        isinstance(node, P.Juxt)
        and len(node.items) == 2
        and isinstance(node.items[0], (P.Word, P.Letters))
        and node.items[0].text == "Var"
        and isinstance(node.items[1], P.Paren)
        and len(node.items[1].items) == 1
        and isinstance(node.items[1].items[0], P.Script)
    ):
        arg = node.items[1].items[0]
        return ("variance", doc_name(arg.base), arg)
    return None


def _pair_entry(cell):
    """x_{2i+k}, k = −1, 0 or 1, as written: (x, i, k); else None."""
    if not isinstance(cell, P.Script) or len(cell.sub) != 1 or not _is_name_like(cell.base):
        return None
    sub, k = cell.sub[0], 0
    if isinstance(sub, P.Bin) and sub.op in "+-" and isinstance(sub.b, P.Num) and sub.b.text == "1":
        sub, k = sub.a, 1 if sub.op == "+" else -1
    if (
        isinstance(sub, P.Juxt)
        and len(sub.items) == 2
        and isinstance(sub.items[0], P.Num)
        and sub.items[0].text == "2"
        and isinstance(sub.items[1], P.Letters)
        and len(sub.items[1].text) == 1
    ):
        return doc_name(cell.base), sub.items[1].text, k
    return None


# a column's pair as written -> how its statement counts: (2i, 2i+1) from 0, (2i−1, 2i) from 1 (the
# only counting in which the pairs cover a vector's entries)
_PAIRS_FROM = {frozenset({0, 1}): 0, frozenset({-1, 0}): 1}


def _pair_column(node):
    """[x_{2i}; x_{2i+1}] (or [x_{2i-1}; x_{2i}]; in either order): one name's pair of entries as a
    column — (x, i, (the pair's entry 0 or 1 at each row), the first index); else None."""
    if not isinstance(node, P.Matrix) or len(node.rows) != 2 or any(len(row) != 1 for row in node.rows):
        return None
    found = [_pair_entry(row[0]) for row in node.rows]
    if None in found or len({(n, i) for n, i, _ in found}) != 1:
        return None
    first = _PAIRS_FROM.get(frozenset(k for _, _, k in found))
    if first is None:
        return None
    name, letter, _ = found[0]
    return name, letter, tuple(k + first for _, _, k in found), first


def _pair_counting(*nodes) -> int | None:
    """How a statement that pairs dimensions counts (0 or 1; elaborate.py, `Elaborator.first`): a
    column of it is written out as a pair [x_{2i}; x_{2i+1}] (from 0) or [x_{2i-1}; x_{2i}] (from 1);
    None where none is."""
    found = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, P.Matrix) and _pair_column(n) is not None:
            found.add(_pair_column(n)[3])
        if isinstance(n, P.Node):
            stack.extend(c for c in vars(n).values() if isinstance(c, (P.Node, tuple)))
        elif isinstance(n, tuple):
            stack.extend(c for c in n if isinstance(c, (P.Node, tuple)))
    if len(found) > 1:
        raise NotUnderstood("pairs written both (2i, 2i+1) and (2i-1, 2i): counted from 0 or from 1?")
    return found.pop() if found else None


def _pair_elaborator(ctx, lhs, rhs, scope=None) -> Elaborator:
    """The elaborator of a statement, counting as its pairs say (from 1 where it has none)."""
    counting = _pair_counting(lhs, rhs)
    return Elaborator(ctx, scope=scope, first=1 if counting is None else counting, pairs=counting is not None)


def _entrywise(lv, rv, e: Elaborator) -> list:
    """Two matrices (columns) written out are equal when every entry is: (label, left, right) each."""
    if not (isinstance(lv, Block) and isinstance(rv, Block)):
        other = rv if isinstance(lv, Block) else lv
        what = "a scalar" if other.is_scalar else "an array"
        raise NotUnderstood(f"a matrix written out on one side and {what} on the other (write both out)")
    if lv.shape != rv.shape:
        (a, b), (c, d) = lv.shape, rv.shape
        raise NotUnderstood(f"the two sides are a {a}×{b} and a {c}×{d} matrix written out")
    column = lv.shape[1] == 1
    out = []
    for r, (row_l, row_r) in enumerate(zip(lv.rows, rv.rows)):
        for c, (a, b) in enumerate(zip(row_l, row_r)):
            label = f"row {r + 1}" if column else f"entry ({r + 1}, {c + 1})"
            out.append((label, _finalize(Val(a, ()), e).expr, _finalize(Val(b, ()), e).expr))
    return out


@dataclass
class _Decision:
    """What every identity of one step is decided with (Checker._decide_forms)."""

    step: str
    ranges: dict  # index symbol -> [(size, why)]
    conflicts: list
    policy_args: dict
    notes: list  # (plain, Markdown) pairs
    even: set  # sizes the step reads in pairs (2i, 2i + 1)
    offsets: dict  # index symbol -> how the document counts it (1, or 0 where it pairs dimensions)


def _evens(lf, rf, gen, ranges, even) -> tuple:
    """The sizes that must be even — read in pairs (2i, 2i + 1) by the step or by a vector it reads
    (`even`), or halved by a range (i = 0 … n/2 − 1: the pairs of n entries) — each written
    2·n_pairs, so that the step is decided for every even size: (lf, rf, gen, {n: 2·n_pairs})."""
    sizes = {basic(s).xreplace(gen) for s in even}
    for found in ranges.values():
        for x, _ in found:  # a range n/2 (+ an integer): the pairs of n entries
            x = sp.expand(basic(x).xreplace(gen))
            sizes |= {s for s in x.free_symbols if x.coeff(s) == sp.Rational(1, 2) and (x - s / 2).is_integer}
    halves = {s: 2 * size(f"{s.name}_pairs") for s in sorted(sizes, key=str) if _size_like(s)}
    if not halves:
        return lf, rf, gen, {}
    gen = {**{k: basic(v).xreplace(halves) for k, v in gen.items()}, **halves}
    return lf.xreplace(halves), rf.xreplace(halves), gen, halves


def _even_notes(halves: dict) -> list:
    return [
        (
            f"{_show(s)} even (its entries are read in pairs (2i, 2i + 1)): {_show(s)} = {_show(h)}",
            f"${latex(s)}$ even (its entries are read in pairs $(2i, 2i + 1)$): ${latex(s)} = {latex(h)}$",
        )
        for s, h in halves.items()
    ]


def _with_even_sizes(cx: dict, halves: dict) -> dict:
    """A counterexample's sizes n as well as the n_pairs it was drawn at."""
    at = cx["at"]
    for s, h in halves.items():
        (pairs,) = h.free_symbols
        if pairs.name in at and s.name not in at:
            at[s.name] = 2 * at[pairs.name]
    return cx


def _split_notes(notes) -> tuple[list, list]:
    """(plain texts, Markdown texts) of (plain, Markdown) pairs, each once, in order."""
    pairs = list(dict.fromkeys((str(a), str(b)) for a, b in notes))
    return [a for a, _ in pairs], [b for _, b in pairs]


def _size_like(s) -> bool:
    return isinstance(s, sp.Symbol) and s.is_integer and s.is_positive and not isinstance(s, sp.Dummy)


# ---------------------------------------------------------------------------------- the checker
class Checker:
    """Checks statements in order, against a context it updates (`ctx`)."""

    def __init__(self, ctx: Context, path: str = ""):
        self.ctx = ctx
        self.path = path
        self._forms = None  # the last claim's full index forms, ranges and sizes (an approximation's)

    # ---------------------------------------------------------------- entry point
    def formula(self, text: str, line: int, display: bool, number: int = 0) -> list[Verdict]:
        out = []
        for st in P.split(text):
            out.extend(self.statement(st, text, line, display))
        for v in out:
            v.formula, v.display = number, display
        return out

    def statement(self, st: P.Statement, text: str, line: int, display: bool) -> list[Verdict]:
        t0 = time.perf_counter()
        try:
            vs = self._statement(st, text, line, display)
        except (NotUnderstood, RecursionError) as e:
            vs = [Verdict("not understood", st.source, str(e) or type(e).__name__)]
        except Exception as e:  # a failure of the checker is never a verdict on the step
            vs = [Verdict("not understood", st.source, f"the checker failed: {type(e).__name__}: {e}")]
        dt = (time.perf_counter() - t0) / max(len(vs), 1)
        for v in vs:
            v.line, v.path, v.seconds = line, self.path, round(dt, 3)
        return vs

    def _statement(self, st: P.Statement, text: str, line: int, display: bool) -> list[Verdict]:
        where = f"line {line}"
        if st.error:
            return [Verdict("not understood", st.source, st.error)]
        if not st.relations:
            if not display:
                return []
            try:
                Elaborator(self.ctx).value(P.parse_tokens(st.parts[0]))
            except NotUnderstood as e:
                return [Verdict("not understood", st.source, str(e))]
            return [Verdict("notation", st.source, "an expression, no relation: nothing to check")]
        if st.is_flow:
            return [Verdict("notation", st.source, "a flow written in math mode (→): notation, nothing to check")]
        nodes = []
        for part in st.parts:
            if not part:
                return [Verdict("not understood", st.source, "a relation with a side missing")]
            try:
                nodes.append(P.parse_tokens(part))
            except NotUnderstood as e:
                return [Verdict("not understood", st.source, str(e))]
        try:
            forall = self._forall(st.remarks)
        except NotUnderstood as e:
            return [Verdict("not understood", st.source, f"the remark (∀ …): {e}")]
        if st.relations == ["∈"]:
            return [self._declaration(nodes[0], nodes[1], st.source, where)]
        moments = self._moments(nodes, st.relations, st, text, where)
        if moments is not None:
            return moments
        out = []
        for k, rel in enumerate(st.relations):
            step = _step_source(st.parts[k], rel, st.parts[k + 1], text)
            a, b = nodes[k], nodes[k + 1]
            if rel == "≈":
                out.append(self._approximation(a, b, step, forall))
                continue
            if rel != "=":
                why = {"∈": "a membership inside a chain"}.get(
                    rel, f"the relation {rel}: qed check decides equalities only"
                )
                out.append(Verdict("not understood", step, why))
                continue
            if k == 0:
                out.append(self._first(a, b, step, where, forall))
            else:
                out.append(self._claim(a, b, step, forall))
        return out

    # ---------------------------------------------------------------- approximations
    def _approximation(self, lhs, rhs, step: str, forall: dict) -> Verdict:
        """`a ≈ b`: read as `a = b` is. Proved equal, it is proved (an approximation that holds
        exactly). Otherwise it is no claim qed check decides — an approximation holds in a
        regime the formula does not state — but its two sides are compared at the points a
        counterexample is searched at: within APPROXIMATION_TOLERANCE (relative to
        max(1, |a|, |b|)) everywhere it is *notation*, with the largest gap; further apart it is
        *not understood*, with the point where they differ most. Never refuted, never proved
        from numbers."""
        scope = None
        ff = _function_form(lhs)
        spec = self.ctx.function(ff[0]) if ff is not None else None
        if spec is not None and spec.kind in ("builtin", "document"):  # GELU(x) ≈ …: about the function
            scope = self._function_scope(spec, ff[1], rhs)
        self._forms = None
        v = self._claim(lhs, rhs, step, forall, scope=scope)
        forms, self._forms = self._forms, None
        if v.verdict == "proved":
            v.reason = "an approximation (≈) that holds exactly: " + v.reason
            return v
        shapes = v.verdict == "refuted" and v.reason.startswith("the two sides have different shapes")
        if shapes or v.verdict == "not understood" and not v.reason.startswith("undecided"):
            return Verdict("not understood", step, f"an approximation (≈): {v.reason}")
        if forms is None:
            return Verdict("not understood", step, "an approximation (≈) whose sides could not be compared")
        lf, rf, ranges, gen, written = forms
        why = _opaque_definitions(lf, rf, self.ctx)
        if why:
            return Verdict("not understood", step, f"an approximation (≈) that cannot be evaluated: {why}")
        worst, seen = None, set()
        for point, a, b in self._points(lf, rf, ranges, gen, approximate=True, written=written):
            seen.add(tuple(sorted(map(str, point.symbols.items()))) + tuple(sorted(map(str, point.entries.items()))))
            gap = numeric.relative_gap(a, b)
            if worst is None or gap > worst[0]:
                worst = (gap, point, a, b)
        if worst is None:
            return Verdict("not understood", step, "an approximation (≈) whose sides cannot be evaluated at any point")
        gap, point, a, b = worst
        if gap <= APPROXIMATION_TOLERANCE:
            return Verdict(
                "notation",
                step,
                f"an approximation (≈), not an equality, so nothing is proved: the two sides agree within "
                f"{float(gap):.1e} (relative) at the {_points_text(len(seen))} compared",
            )
        cx = _report_point(point, a, b, ranges)
        return Verdict(
            "not understood",
            step,
            f"an approximation (≈) whose sides differ by {float(gap):.1e} (relative) at one of {_points_text(len(seen))}, more "
            f"than the {APPROXIMATION_TOLERANCE:.0e} an approximation is read with: its regime is not stated",
            counterexample=cx,
        )

    def _points(self, lf, rf, ranges, gen, approximate: bool = False, written=()):
        """(point, left, right) at the sizes a counterexample is searched at, 16 points each, the
        points where either side is not a number left out, and those where an entry the step
        reads — as evaluated, or as written before its definition was unfolded (`written`: ω_{i+1}
        with ω given by a formula) — lies outside its array. `approximate` (an ≈ step): new seeds at
        each size, every scalar drawn anew at each point as an entry is, and the points outside
        the formula's real domain left out too."""
        extents = _extents(lf, rf, self.ctx, gen)
        extents.update(_extents(sp.Add(*written), sp.Integer(0), self.ctx, gen))
        syms = sorted({s for s in (lf.free_symbols | rf.free_symbols) if _size_like(s)}, key=str)
        for rs in ranges.values():
            for s, _ in rs:
                syms += [x for x in basic(s).xreplace(gen).free_symbols if _size_like(x) and x not in syms]
        candidates = [{s: 2 for s in syms}]  # small first: a full unfolding nests sums
        candidates.append({s: SIZE_VALUES[k % len(SIZE_VALUES)] for k, s in enumerate(syms)})
        candidates.append({s: 3 for s in syms})
        for k, sizes in enumerate(candidates):
            setting = _setting(
                lf, rf, {s: [(basic(x).xreplace(gen), w) for x, w in f] for s, f in ranges.items()}, sizes, self.ctx
            )
            for seed in range(16 * k, 16 * (k + 1)) if approximate else range(16):
                try:
                    point = setting.point(seed)
                except (TypeError, ValueError):
                    break
                if approximate:
                    for sym in setting.scalars:  # a scalar varies from point to point, as an entry does
                        if not sym.name.startswith("kappa"):
                            point.symbols[sym] = _drawn(sym, seed)
                if not _indices_in_ranges(point, ranges, gen):
                    continue
                try:
                    a, b = numeric.evaluate(lf, point), numeric.evaluate(rf, point)
                except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError):
                    continue
                if not _entries_in_range(point, extents) or mpmath.isnan(a) or mpmath.isnan(b):
                    continue
                if not _written_in_range(point, written, extents, gen):
                    continue
                if approximate and (mpmath.im(a) != 0 or mpmath.im(b) != 0):  # outside the real domain
                    continue
                yield point, a, b

    # ---------------------------------------------------------------- remarks
    def _forall(self, remarks) -> dict:
        """(∀ i = 1, …, d_k): {i: (lo, hi)} as document values."""
        out = {}
        for kind, toks in remarks:
            if kind != "forall":
                continue
            parts = P._split_commas(list(toks))
            if not parts or not parts[0]:
                continue
            head = parts[0]
            eq = [k for k, t in enumerate(head) if t.kind == "char" and t.text == "="]
            if not eq:
                continue
            name = "".join(t.text for t in head[: eq[0]])
            lo = P.parse_tokens(head[eq[0] + 1 :])
            hi = P.parse_tokens(parts[-1])
            e = Elaborator(self.ctx)
            out[name] = (e.value(lo).expr, e.value(hi).expr)
        return out

    # ---------------------------------------------------------------- declarations
    def _declaration(self, lhs, rhs, source: str, where: str) -> Verdict:
        try:
            shape = self._space(rhs)
        except NotUnderstood as e:
            return Verdict("not understood", source, str(e))
        if isinstance(lhs, P.OnesVec):
            return Verdict("definition", source, f"declares 𝟏 ∈ ℝ^{_dims(shape)} (the all-ones vector)", defines="1")
        if isinstance(lhs, P.Partial):
            try:
                g = Elaborator(self.ctx).value(lhs)
                e = Elaborator(self.ctx)
                if g.is_scalar or len(shape) != 2 and not g.is_scalar and 1 not in g.shape:
                    raise NotUnderstood("the declared shape does not fit the gradient")
                want = shape if len(shape) == 2 else (sp.Integer(1), shape[0])
                for x, y in zip(g.shape, want):
                    e.same(x, y, "the declared shape")
            except NotUnderstood as err:
                return Verdict("not understood", source, str(err))
            return Verdict("definition", source, f"declares the gradient's shape ℝ^{_dims(shape)}")
        name = doc_name(lhs)
        if name is None or isinstance(lhs, P.Num):
            return Verdict("not understood", source, "the left of ∈ must be a name")
        b = self.ctx.value(name)
        if b is not None and self.ctx.is_default(name) and self.ctx.definition(b.label) is None:
            kind_now = "scalar" if len(shape) == 0 else "array"
            if b.kind != kind_now:  # a convention name the document never used, declared otherwise
                self.ctx.forget(name)
                b = None
        if len(shape) == 0:
            if b is not None and b.kind not in ("scalar", "poisoned"):
                return Verdict("not understood", source, f"{name} is {b.meaning or b.kind}, declared a scalar here")
            self.ctx.bind(Binding("scalar", name, label_for(name), origin=where, meaning="a scalar"))
            return Verdict("definition", source, f"declares the scalar {name}", defines=name)
        want = shape if len(shape) == 2 else (sp.Integer(1), shape[0])
        if b is not None and b.kind == "array":
            d = self.ctx.definition(b.label)
            if d is not None and d.origin == "convention" and not self.ctx.active(b.label):
                # a name of the convention whose group the document never used: its own now
                self.ctx.defs.pop(b.label, None)
                self.ctx.bind(Binding("array", name, b.label, shape=want, origin=where, meaning="declared"))
                return Verdict("definition", source, f"declares {name} ∈ ℝ^{_dims(shape)}", defines=name)
            if d is not None:
                e = Elaborator(self.ctx)
                try:
                    for x, y in zip(b.shape, want):
                        e.same(x, y, f"{name}'s declared shape")
                except NotUnderstood as err:
                    return Verdict("not understood", source, f"{err} (its definition: {d.source or d.origin})")
                _commit(self.ctx, e.subst)
                return Verdict("definition", source, f"declares {name} ∈ ℝ^{_dims(shape)} (agrees with its definition)")
            subst = {o: w for o, w in zip(b.shape, want) if is_unknown(o)}
            self.ctx.bind(Binding("array", name, b.label, shape=want, origin=where, meaning=b.meaning))
            _commit(self.ctx, subst)
            return Verdict("definition", source, f"declares {name} ∈ ℝ^{_dims(shape)}", defines=name)
        if b is not None and b.kind not in ("poisoned",):
            return Verdict(
                "not understood", source, f"{name} is {b.meaning or 'a ' + b.kind} ({b.origin}), declared an array here"
            )
        self.ctx.bind(Binding("array", name, label_for(name), shape=want, origin=where, meaning="declared"))
        return Verdict("definition", source, f"declares {name} ∈ ℝ^{_dims(shape)}", defines=name)

    def _space(self, node) -> tuple:
        """\\mathbb{R}^{a \\times b} -> (a, b); \\mathbb{R}^{n} -> (n,); \\mathbb{R} -> ()."""
        if isinstance(node, P.Own) and node.font == "bb" and node.text == "R":
            return ()
        if not (isinstance(node, P.Power) and isinstance(node.base, P.Own) and node.base.text == "R"):
            raise NotUnderstood("the right of ∈ must be \\mathbb{R}^{…}")
        dims = []
        e = node.exp
        if isinstance(e, P.Bin) and e.op == "times":
            dims = [e.a, e.b]
        else:
            dims = [e]
        if any(isinstance(d, P.Bin) and d.op == "times" for d in dims):
            raise NotUnderstood("only vectors and matrices (ℝ^{a×b}) are understood")
        return tuple(self._size(d) for d in dims)

    def _size(self, node) -> sp.Expr:
        if isinstance(node, P.Num):
            return sp.Integer(int(node.text))
        if isinstance(node, P.Juxt):
            out = sp.Integer(1)
            for it in node.items:
                out *= self._size(it)
            return out
        if isinstance(node, P.Group):
            return self._size(node.inner)
        name = doc_name(node)
        if name is None:
            raise NotUnderstood("a dimension must be a size (n, d_k, h d_v)")
        b = self.ctx.value(name)
        if b is not None and b.kind != "size" and name in self.ctx.dims:
            return self.ctx.dims[name].symbol()  # V: the vocabulary size where a size is written
        if b is not None and b.kind != "size" and self.ctx.is_default(name):
            self.ctx.forget(name)  # a convention name the document never used: its size now
            b = None
        if b is None:
            b = self.ctx.bind(Binding("size", name, label_for(name), meaning="a size (used as a dimension)"))
        if b.kind != "size":
            raise NotUnderstood(f"{name} is {b.meaning or 'a ' + b.kind} ({b.origin}), used as a size here")
        return b.symbol()

    # ---------------------------------------------------------------- moments of random vectors
    def _moments(self, nodes, rels, st, text, where):
        if set(rels) != {"="}:
            return None
        consts, moments = [], []
        for n in nodes:
            m = _moment(n)
            if m is not None:
                moments.append(m)
                continue
            mentioned = set(self.ctx.mentioned)  # a tentative reading: it uses no name
            try:
                v = Elaborator(self.ctx).value(n)
            except NotUnderstood:
                return None
            finally:
                self.ctx.mentioned = mentioned
            if not v.is_scalar or v.expr.free_symbols - {s for s in v.expr.free_symbols if _size_like(s)}:
                return None
            consts.append(v.expr)
        if not moments or len(consts) != 1:
            return None
        value = consts[0]
        new = []
        for kind, name, _ in moments:
            b = self.ctx.value(name)
            if b is None or b.kind != "array" or 1 not in b.shape:
                return None
            rv = self.ctx.random.get(b.label)
            known = rv is not None and getattr(rv, "_stated_" + kind, False)
            if known:
                return None  # stated before: the chain is a claim
            new.append((kind, name, b))
        verdicts = []
        for k, rel in enumerate(rels):
            step = _step_source(st.parts[k], rel, st.parts[k + 1], text)
            verdicts.append(
                Verdict(
                    "definition",
                    step,
                    "an assumption on a random vector (its components i.i.d., the vectors independent)",
                )
            )
        for kind, name, b in new:
            rv = self.ctx.random.get(b.label) or RandomVector(b.label)
            if kind == "mean":
                rv.mean = value
            else:
                rv.variance = value
            setattr(rv, "_stated_" + kind, True)
            self.ctx.random[b.label] = rv
            verdicts[0].defines = name
        for v in verdicts:
            v.assumptions = [f"{kind} of the components of {name} = {_show(value)}" for kind, name, _ in new]
            v.assumptions_latex = [
                f"{kind} of the components of ${name_latex(name)}$ = ${latex(value)}$" for kind, name, _ in new
            ]
        return verdicts

    # ---------------------------------------------------------------- the first link
    def _first(self, lhs, rhs, step: str, where: str, forall: dict) -> Verdict:
        if isinstance(lhs, P.Matrix):
            return self._column_statement(lhs, rhs, step, where, forall)
        ff = _function_form(lhs)
        if ff is not None:
            name, params = ff
            spec = self.ctx.function(name)
            if spec is None or spec.kind in ("opaque", "poisoned"):
                return self._define_function(name, params, rhs, step, where)
            return self._restate_function(spec, params, lhs, rhs, step, where)
        fam = _family_function_form(lhs)
        if fam is not None and self._is_family_function(*fam):
            return self._define_family_function(lhs, *fam, rhs, step, where)
        if isinstance(lhs, P.Power) and isinstance(lhs.exp, P.Num) and lhs.exp.text == "2" and _is_name_like(lhs.base):
            name = doc_name(lhs.base)
            b = self.ctx.value(name)
            if b is None or (b.kind == "scalar" and self.ctx.definition(b.label) is None) or b.kind == "poisoned":
                return self._define_name(name, rhs, step, where, square=True)
        if (_is_name_like(lhs) and not isinstance(lhs, P.Script) and not self._is_product_run(lhs)) or (
            isinstance(lhs, P.Script) and doc_name(lhs) is not None and self._is_new_scripted_name(lhs)
        ):
            name = doc_name(lhs)
            b = self.ctx.value(name)
            if b is None or b.kind == "poisoned":
                return self._define_name(name, rhs, step, where, lhs=lhs)
            if b.bare:
                return self._restate_bare(lhs, rhs, step, where, b)
            if b.kind == "size":
                return self._size_statement(b, rhs, step, where)
            if b.kind == "loss" and self.ctx.definition("L") is None:
                return self._define_name(name, rhs, step, where, lhs=lhs)
            if b.kind in ("array", "scalar") and self.ctx.definition(b.label) is None:
                return self._define_name(name, rhs, step, where, lhs=lhs)
            d = self.ctx.definition(b.label) if b.kind == "array" else None
            if d is not None and d.kind in ("recurrence", "entries") and self.ctx.is_default(name):
                # a per-step quantity of the convention (Adam's m, v) is stated by its entries
                # (m_t = …); the name alone, never used before, is the document's own
                self.ctx.forget(name)
                return self._define_name(name, rhs, step, where, lhs=lhs)
            if b.kind in ("array", "scalar", "loss"):
                return self._restate(lhs, rhs, step, where, name, forall)
        ef = _entry_form(lhs)
        if ef is not None and ef[0] == "δ" and self.ctx.value("δ") is None:
            ef = None  # the Kronecker delta is not defined by a document
        if ef is not None and all(self._is_free_index(c) for c in ef[1]):
            name, _ = ef
            b = self.ctx.value(name)
            if b is not None and b.bare:
                return self._scripted_bare(lhs, rhs, step, where, forall, b)
            if (b is None or b.kind in ("poisoned", "family")) and len(ef[1]) == 1:
                family = self._define_family(name, ef[1], rhs, step, where, again=b is not None and b.kind == "family")
                if family is not None:
                    return family
            if b is None or b.kind == "poisoned" or (b.kind == "array" and self.ctx.definition(b.label) is None):
                return self._define_entries(lhs, name, rhs, step, where)
            if b.kind == "array" and self.ctx.definition(b.label).kind == "recurrence":
                return self._restate_recurrence(lhs, rhs, step, where, name)
            d = self.ctx.definition(b.label) if b.kind == "array" else None
            if d is not None and d.kind == "entries":
                v = self._claim(lhs, rhs, step, forall)
                if v.verdict == "proved":
                    whose = "the catalogue" if d.origin == "convention" else d.origin
                    v.reason = f"agrees with {name} as {whose} defines it ({d.source}); " + v.reason
                return v
        return self._claim(lhs, rhs, step, forall)

    def _scripted_bare(self, lhs, rhs, step: str, where: str, forall: dict, b: Binding) -> Verdict:
        """`θ_t = …` with θ the convention's name written bare only (RoPE's angle): θ with an index
        is the document's own name (Adam's parameters θ_t), which replaces the angle from here on —
        as the verdict says where the document had read the angle."""
        used = b.label in self.ctx.mentioned
        self.ctx.forget(b.name)
        v = self._first(lhs, rhs, step, where, forall)
        if used and v.verdict == "definition":
            v.reason += f"; {b.name} is the document's own from here on, no longer the convention's ({b.meaning})"
        return v

    def _column_statement(self, lhs: P.Matrix, rhs, step: str, where: str, forall: dict) -> Verdict:
        """A column written out on the left: [x'_{2i}; x'_{2i+1}] = … defines x' by its pairs where
        x' has no meaning yet (or is an array with no definition); any other is a claim, one
        statement per row."""
        pc = _pair_column(lhs)
        if pc is not None:
            b = self.ctx.value(pc[0])
            undefined_array = b is not None and b.kind == "array" and not b.bare and not self.ctx.definition(b.label)
            if b is None or b.kind == "poisoned" or undefined_array:
                return self._define_pairs(lhs, pc, rhs, step, where)
        return self._claim(lhs, rhs, step, forall)

    def _define_pairs(self, lhs, pc: tuple, rhs, step: str, where: str) -> Verdict:
        """[x'_{2i}; x'_{2i+1}] = (a column of two, written out): x' by its pairs. Counted from 0, as
        pairs (2i, 2i + 1) of a vector of even length d are (i = 0 … d/2 − 1; written (2i − 1, 2i),
        from 1), one formula gives every entry c (counted from 0):

            x'_c = even(c)·top(i) + odd(c)·bottom(i),   i = ⌊c/2⌋ = (c − odd(c))/2,

        even(c) = (1 + (−1)^c)/2, odd(c) = 1 − even(c); a step that reads x' compares entries at
        c = 2i and c = 2i + 1 apart, where each is its own row's formula (`_parity_cases`)."""
        name, letter, rows, first = pc
        label = label_for(name)
        old = self.ctx.value(name)
        try:
            e = _pair_elaborator(self.ctx, lhs, rhs)
            if old is not None and old.kind == "array" and e.resolve(old.shape[0]) != 1:
                raise NotUnderstood(f"pairs of entries of a vector: {name} is {_dims(old.shape)}")
            length = old.shape[1] if old is not None and old.kind == "array" else unknown_size(name)
            i = e._free(letter)  # the pair (counted as the statement counts)
            e.pair_positions[i] = [(length, name)]
            right = e.side(rhs)
            if not (isinstance(right, Block) and right.shape == (2, 1)):
                raise NotUnderstood(
                    f"the pair of {name} is a column of 2: the right side must be one, written out (a 2×2 matrix times a column)"
                )
            e.settle_pairs()
            extra = sorted(set(e.free) - {letter})
            if extra:
                bare = [
                    f"{b.name} written bare is {b.name}_{b.bare}"
                    for b in self.ctx.values.values()
                    if b.bare in extra and b.label in e.uses
                ]
                raise NotUnderstood(
                    f"free index {', '.join(extra)} on the right only" + (f" ({'; '.join(bare)})" if bare else "")
                )
        except NotUnderstood as err:
            self.ctx.poison(name, f"its definition was not understood: {err}", where)
            return Verdict("not understood", step, str(err))
        if label in e.uses:  # x on both sides: a statement about x's pairs, not a definition
            return self._claim(lhs, rhs, step, {})
        _commit(self.ctx, e.subst)
        top, bottom = (_finalize(Val(x, ()), e).expr for x in right.column())
        by_row = {rows[0]: top, rows[1]: bottom}  # r -> the formula of the pair's entry r (0: even, 1: odd)
        c = sp.Symbol("c", integer=True)
        even = (1 + (-1) ** c) / 2
        at = {i: pair_index(c)}  # the pair of entry c (i's internal value counts pairs from 0 either way)
        expr = even * by_row[0].xreplace(at) + (1 - even) * by_row[1].xreplace(at)
        length = e.resolve(length)
        self.ctx.bind(Binding("array", name, label, shape=(sp.Integer(1), length), origin=where, meaning="defined"))
        evens = tuple(s for s in (e.resolve(x) for x in e.even) if isinstance(s, sp.Symbol))
        self.ctx.define(label, Definition("entries", expr, (c,), origin=where, source=step, even=evens))
        pair = f"2{letter}, 2{letter}+1" if first == 0 else f"2{letter}-1, 2{letter}"
        return Verdict(
            "definition",
            step,
            f"defines {name} by its pairs ({pair}), {letter} = {first} … {_show(length / 2 - 1 + first)} "
            f"(dimensions counted from {first}, the one counting in which these pairs cover a vector of even "
            f"length); {name} ∈ ℝ^{_dims((sp.Integer(1), length))}",
            defines=name,
        )

    def _restate_bare(self, lhs, rhs, step: str, where: str, b: Binding) -> Verdict:
        """`θ = …` with θ the convention's name written bare (RoPE's angle θ_i). A right side that
        reads the pair i (θ = pos·ω_i) is about θ_i: a claim, proved when it agrees with the
        catalogue's θ_i = pos·ω_i, refuted otherwise. One that does not (θ = 0.5) is the
        document's own scalar θ where the document has not read the angle yet (else a claim)."""
        mentioned = set(self.ctx.mentioned)  # a tentative reading of the right side
        try:
            e = Elaborator(self.ctx)
            e.value(rhs)
            reads_pair = b.bare in e.free
        except NotUnderstood:
            reads_pair = True  # the claim says why
        finally:
            self.ctx.mentioned = mentioned
        if not reads_pair and self.ctx.is_default(b.name):
            self.ctx.forget(b.name)
            return self._define_name(b.name, rhs, step, where, lhs=lhs)
        v = self._claim(lhs, rhs, step, {})
        d = self.ctx.definition(b.label)
        if v.verdict == "proved" and d is not None:
            v.reason = f"agrees with {b.name} as the catalogue defines it ({d.source}); " + v.reason
        return v

    def _restate_recurrence(self, lhs, rhs, step: str, where: str, name: str) -> Verdict:
        """`m_t = …` where m already has a recurrence: the step is the recurrence's step
        function, so it agrees when `rhs` equals m's definition at the left side's index, every
        other entry of m arbitrary (proved); otherwise the document redefines m (a definition,
        with the counterexample that tells the two apart)."""
        b = self.ctx.value(name)
        d = self.ctx.definition(b.label)
        whose = "the catalogue" if d.origin == "convention" else d.origin
        v = self._claim(lhs, rhs, step, {}, unfold=b.label)
        if v.verdict == "proved":
            v.reason = f"agrees with the recurrence of {name} as {whose} states it ({d.source}); " + v.reason
            return v
        if v.verdict == "not understood" and not v.reason.startswith("undecided"):
            return v
        self.ctx.defs.pop(b.label, None)
        new = self._define_entries(lhs, name, rhs, step, where)
        if new.verdict == "definition":
            why = "differs from" if v.verdict == "refuted" else "could not be compared with"
            new.reason = f"redefines {name}: {why} the recurrence of {whose} ({d.source})"
            new.counterexample = v.counterexample
        else:
            self.ctx.defs[b.label] = d
        return new

    def _is_product_run(self, node) -> bool:
        """`QK`, `AV` on the left: declared one-letter symbols side by side, not a new name."""
        if not isinstance(node, P.Letters) or self.ctx.value(node.text) is not None:
            return False
        return Elaborator(self.ctx)._split_run(node.text) is not None

    def _is_free_index(self, name: str) -> bool:
        """A letter that reads as a free index on the left of an entry definition."""
        b = self.ctx.value(name)
        return name in self.ctx.index_letters or b is None

    def _is_new_scripted_name(self, node) -> bool:
        """W_{new}, d_{model}: a scripted name that is declared as a whole, or whose subscript is
        a word (not index letters)."""
        name = doc_name(node)
        if self.ctx.value(name) is not None:
            return True
        sub = node.sub[0] if len(node.sub) == 1 else None
        return isinstance(sub, P.Word) or (isinstance(sub, P.Letters) and len(sub.text) > 2)

    # ---------------------------------------------------------------- definitions
    def _read_definition(self, e: Elaborator, name: str, where: str, step: str, read):
        """What `read()` makes of a definition's right side, or the "not understood" verdict (the
        name poisoned) when it fails or leaves an index free that the name would depend on."""
        try:
            out = read()
            if e.free:
                raise NotUnderstood(
                    f"free index {', '.join(sorted(e.free))} on the right only: {name} would depend on it"
                )
        except NotUnderstood as err:
            self.ctx.poison(name, f"its definition was not understood: {err}", where)
            return Verdict("not understood", step, str(err))
        return out

    def _define_name(self, name: str, rhs, step: str, where: str, square: bool = False, lhs=None) -> Verdict:
        if isinstance(rhs, P.ArgMax) and not square:
            return self._define_argmax(name, rhs, step, where)
        e = Elaborator(self.ctx)
        read = self._read_definition(e, name, where, step, lambda: e.value(rhs))
        if isinstance(read, Verdict):
            return read
        v = read
        label = label_for(name)
        if label in e.uses:  # the name on both sides: a statement about it, not a definition
            if lhs is None:
                return Verdict("not understood", step, f"{name} is defined through itself")
            return self._claim(lhs, rhs, step, {})
        _commit(self.ctx, e.subst)
        v = _finalize(v, e)
        old = self.ctx.value(name)
        if v.is_scalar:
            expr = sp.sqrt(v.expr) if square else v.expr
            if old is not None and old.kind == "loss":
                self.ctx.define("L", Definition("scalar", expr, origin=where, source=step))
            else:
                self.ctx.bind(Binding("scalar", name, label, origin=where, meaning="defined"))
                self.ctx.define(label, Definition("scalar", expr, origin=where, source=step))
            what = f"{name}² := …" if square else f"{name} := …"
            return Verdict("definition", step, f"defines the scalar {what}", defines=name)
        if square:
            return Verdict("not understood", step, f"{name}² defined as an array")
        shape = tuple(e.resolve(s) for s in v.shape)
        if old is not None and old.kind == "array" and old.shape is not None:
            try:
                for x, y in zip(old.shape, shape):
                    e.same(x, y, f"{name}'s declared shape")
            except NotUnderstood as err:
                return Verdict("not understood", step, str(err))
            _commit(self.ctx, e.subst)
            shape = tuple(e.resolve(s) for s in old.shape)
            label = old.label
        self.ctx.bind(Binding("array", name, label, shape=shape, origin=where, meaning="defined"))
        self.ctx.define(label, Definition("array", v.expr, origin=where, source=step))
        return Verdict("definition", step, f"defines {name} ∈ ℝ^{_dims(shape)}", defines=name)

    def _define_argmax(self, name: str, rhs: P.ArgMax, step: str, where: str) -> Verdict:
        """`k = \\arg\\max_i f(i)`: k is an index, the i (1 … n, the range of the axes i indexes)
        at which f is largest. Its body is read (a scalar in i); the argmax itself is never
        unfolded (an index is no formula of the array language): a claim about k holds for any
        value of it or is not decided, and no counterexample may use it."""
        e = Elaborator(self.ctx)
        read = self._read_definition(e, name, where, step, lambda: e.argmax(rhs))
        if isinstance(read, Verdict):
            return read
        body, sym, n = read
        label = label_for(name)
        if label in e.uses:
            return Verdict("not understood", step, f"{name} is defined through itself")
        _commit(self.ctx, e.subst)
        n = e.resolve(n)
        old = self.ctx.value(name)
        redefined = old is not None and old.kind != "poisoned" and self.ctx.definition(old.label) is not None
        if old is not None and old.kind not in ("scalar", "poisoned"):
            return Verdict(
                "not understood",
                step,
                f"{name} is {old.meaning or 'a ' + old.kind} ({old.origin}), defined as an index here",
            )
        most = "largest" if rhs.kind == "max" else "smallest"
        meaning = f"an index: the {rhs.var} in 1 … {_show(n)} where the term is {most}"
        self.ctx.bind(Binding("scalar", name, label, origin=where, meaning=meaning))
        self.ctx.define(label, Definition("argmax", sp.Lambda(sym, body.expr), origin=where, source=step))
        what = f"redefines {name} as" if redefined else f"defines {name},"
        return Verdict(
            "definition",
            step,
            f"{what} {meaning} (\\arg\\{rhs.kind}: not unfolded; no counterexample uses {name})",
            defines=name,
        )

    def _is_family_function(self, fname: str, family: str, index: str) -> bool:
        """`P(token_i) = …` defines P on a family's members when P is no value (else P(…) is a
        product) and has no definition of another kind, `token` means nothing yet (a name with a
        meaning makes token_i its entry) and i reads as a free index."""
        spec = self.ctx.function(fname)
        return (
            self.ctx.value(fname) is None
            and (spec is None or spec.kind in ("opaque", "poisoned", "family"))
            and self.ctx.value(family) is None
            and self.ctx.function(family) is None
            and self._is_free_index(index)
        )

    def _define_family_function(self, lhs, fname: str, family: str, index: str, rhs, step, where) -> Verdict:
        """`P(token_i) = e^{logit_i}/Σ_j e^{logit_j}`: P on the i-th member of the family token
        (the i-th token) is the right side at i. Its values are the entries of a vector
        `P(token)`, defined as `A_{i} = …` defines A (the right side a scalar in i, i's range
        the axes it indexes); P(token_k) then reads entry k. A restatement is compared with it."""
        spec = self.ctx.function(fname)
        table = f"{fname}({family})"
        before = None
        if spec is not None and spec.kind == "family":
            before = self._claim(lhs, rhs, step, {})
            if before.verdict == "proved":
                before.reason = f"agrees with {fname}({family}_{index}) as {spec.origin} defines it; " + before.reason
                return before
            if before.verdict == "not understood" and not before.reason.startswith("undecided"):
                return before
            self.ctx.forget(table)
        synthetic = P.Script(P.Letters(table), (P.Letters(index),))
        new = self._define_entries(synthetic, table, rhs, step, where)
        if new.verdict != "definition":
            self.ctx.poison_function(fname, f"its definition was not understood: {new.reason}", where)
            return new
        shape = self.ctx.value(table).shape
        self.ctx.functions[fname] = FunctionSpec(
            fname,
            "family",
            1,
            params=(family,),
            origin=where,
            meaning=f"its values on {family}_i, the entries of {table}",
            table=table,
        )
        new.defines = fname
        head = f"defines {fname}"
        if before is not None:
            why = "differs from" if before.verdict == "refuted" else "could not be compared with"
            head = f"redefines {fname}: {why} the one of {spec.origin}; {fname} now"
            new.counterexample = before.counterexample
        new.reason = (
            f"{head} on the members {family}_{index} of a family: {fname}({family}_{index}) is entry {index} "
            f"of the vector {table} ∈ ℝ^{_dims(shape)}"
        )
        return new

    def _define_family(
        self, name: str, indices: list, rhs, step: str, where: str, again: bool = False
    ) -> Verdict | None:
        """`head_i = Attention(Q_i, K_i, V_i)`: one array per i (a head's), when the right side is
        an array that reads matrices with the one index i (each the i-th of a family shaped like
        that matrix: elaborate.py, `_family_member`). None when it is not (then the left side
        is an entry: `x̂_j = …`), unless `name` is a family already (`again`): then the verdict
        says why it is not one. The members are arrays of their own, nothing known of them: the
        family is recorded, never unfolded, and its members are refused in later formulas."""
        (index,) = indices
        mentioned = set(self.ctx.mentioned)  # a tentative reading
        e = Elaborator(self.ctx, family=index)
        why = None
        try:
            v = e.value(rhs)
        except NotUnderstood as err:
            v, why = None, str(err)
        if v is not None and (v.is_scalar or not e.members or e.free):
            why = f"{name}_{index} is a family of arrays: its right side must be an array that reads {index}-th members"
        elif v is not None and label_for(name) in e.uses:
            why = f"{name} is defined through itself"
        if why is not None:
            self.ctx.mentioned = mentioned
            return Verdict("not understood", step, why) if again else None
        _commit(self.ctx, e.subst)
        v = _finalize(v, e)
        shape = tuple(e.resolve(s) for s in v.shape)
        old = self.ctx.value(name)
        meaning = f"a family of arrays, one per {index}"
        self.ctx.bind(Binding("family", name, label_for(name), shape=shape, origin=where, meaning=meaning))
        self.ctx.define(label_for(name), Definition("family", v.expr, vars=(index,), origin=where, source=step))
        members = ", ".join(f"{m}_{index}" for m in dict.fromkeys(e.members.values()))
        shaped = ", ".join(dict.fromkeys(e.members.values()))
        head = f"defines the family {name}"
        if again:  # two families of arrays with nothing known of their members: never compared
            head = f"redefines the family {name} ({old.origin}; families are not compared)"
        return Verdict(
            "definition",
            step,
            f"{head}: {name}_{index} ∈ ℝ^{_dims(shape)}, one per {index}; {members}: the {index}-th of "
            f"families of arrays shaped like {shaped} (nothing else known of them)",
            defines=name,
        )

    def _define_entries(self, lhs, name: str, rhs, step: str, where: str) -> Verdict:
        e = Elaborator(self.ctx)
        try:
            idx = [e.index_value(P.Letters(c)) for c in _entry_form(lhs)[1]]
            vars_ = [i - 1 for i in idx]
            if not all(isinstance(v, sp.Symbol) for v in vars_):
                raise NotUnderstood("an entry definition needs plain free indices on the left")
            label = label_for(name)
            b = self.ctx.value(name)
            recurrence = False
            if b is None or b.kind == "poisoned":
                # a new array: its shape from the sizes its indices range over on the right
                shape_guess = tuple(unknown_size(f"{name}{k}") for k in range(len(vars_)))
                tmp = Binding(
                    "array",
                    name,
                    label,
                    shape=(sp.Integer(1), shape_guess[0]) if len(vars_) == 1 else shape_guess,
                    origin=where,
                )
                self.ctx.bind(tmp)
            v = e.value(rhs)
            if not v.is_scalar:
                raise NotUnderstood("an entry defined as an array")
            extra = set(e.free) - set(_entry_form(lhs)[1])
            if extra:
                raise NotUnderstood(f"free index {', '.join(sorted(extra))} on the right only")
            own = [a for a in basic(v.expr).atoms(sp.Indexed) if str(a.base.label) == label]
            if own:
                at = tuple(
                    entry(
                        Array(label, self.ctx.value(name).shape), _positions_of(vars_, self.ctx.value(name).shape)
                    ).indices
                )
                if any(tuple(a.indices) == at for a in own):
                    raise _NotADefinition()
                recurrence = True
            binding = self.ctx.value(name)
            if b is None or b.kind == "poisoned":
                sizes = []
                for s in vars_:
                    found = {e.resolve(x) for x, _ in e.positions.get(s, [])}
                    sizes.append(found.pop() if len(found) == 1 else unknown_size(f"{name}{len(sizes)}"))
                shape = (sp.Integer(1), sizes[0]) if len(sizes) == 1 else tuple(sizes)
                binding = self.ctx.bind(Binding("array", name, label, shape=shape, origin=where, meaning="defined"))
            else:  # the left side's indices range over the array's axes: the right must agree
                axes = [x for x in binding.shape if x != 1]
                if len(axes) != len(vars_):
                    raise NotUnderstood(f"{len(vars_)} index(es) on {name} ({_dims(binding.shape)})")
                for s, axis in zip(vars_, axes):
                    for x, _ in e.positions.get(s, []):
                        e.same(x, axis, f"the index {s} of {name}")
            if len(vars_) != len([x for x in binding.shape if x != 1]):
                raise NotUnderstood(f"{len(vars_)} index(es) on {name} ({_dims(binding.shape)})")
        except _NotADefinition:
            self._restore(name, b)
            return self._claim(lhs, rhs, step, {})
        except NotUnderstood as err:
            self.ctx.poison(name, f"its definition was not understood: {err}", where)
            return Verdict("not understood", step, str(err))
        _commit(self.ctx, e.subst)
        kind = "recurrence" if recurrence else "entries"
        self.ctx.define(label, Definition(kind, v.expr, vars=tuple(vars_), origin=where, source=step))
        what = "a recurrence (not unfolded)" if recurrence else f"its entries; {name} ∈ ℝ^{_dims(binding.shape)}"
        return Verdict("definition", step, f"defines {name} by {what}", defines=name)

    def _restore(self, name: str, old: Binding | None) -> None:
        if old is None:
            self.ctx.values.pop(name, None)
        else:
            self.ctx.bind(old)

    def _define_function(self, name: str, params: list, rhs, step: str, where: str) -> Verdict:
        last_error = None
        for mode in ("scalar", "row", "matrix"):
            scope = {}
            for p in params:
                if mode == "scalar":
                    scope[p] = Val(sp.Dummy(p, real=True), ())
                else:
                    shape = (
                        (sp.Integer(1), unknown_size(f"{name}.{p}"))
                        if mode == "row"
                        else (unknown_size(f"{name}.{p}r"), unknown_size(f"{name}.{p}c"))
                    )
                    scope[p] = Val(Array(f"{name}.{p}", shape), shape)
            spec = FunctionSpec(name, "document", len(params), params=tuple(params), body=rhs, origin=where)
            e = Elaborator(self.ctx, scope=scope)
            saved = self.ctx.functions.get(name)
            # inside its own body the function is refused: no definition through itself
            self.ctx.poison_function(name, "used in its own definition", where)
            try:
                v = e.value(rhs)
                if e.free:
                    raise NotUnderstood(f"free index {', '.join(sorted(e.free))} in a function's body")
                if mode == "scalar" and not v.is_scalar:
                    raise NotUnderstood("not an elementwise function")
            except NotUnderstood as err:
                last_error = err
                continue
            finally:
                if saved is None:
                    self.ctx.functions.pop(name, None)
                else:
                    self.ctx.functions[name] = saved
            spec.scalar = mode == "scalar" and len(params) == 1
            self.ctx.functions[name] = spec
            kind = "an elementwise function" if spec.scalar else "a function of arrays"
            return Verdict("definition", step, f"defines {name}({', '.join(params)}), {kind}", defines=name)
        self.ctx.poison_function(name, f"its definition was not understood: {last_error}", where)
        return Verdict("not understood", step, str(last_error))

    def _size_statement(self, b: Binding, rhs, step: str, where: str) -> Verdict:
        sym = b.symbol()
        e = Elaborator(self.ctx)
        try:
            v = e.value(rhs)
            if not v.is_scalar or e.free or any(not _size_like(s) for s in basic(v.expr).free_symbols):
                raise NotUnderstood(f"{b.name} is a size: its value must be a number or a formula of sizes")
        except NotUnderstood as err:
            return Verdict("not understood", step, str(err))
        if sym in self.ctx.size_values or sym in basic(v.expr).free_symbols:
            return self._size_claim(sym, v.expr, step)
        if v.expr.is_number and not (v.expr.is_integer and v.expr > 0):
            return Verdict("not understood", step, f"{b.name} is a size: a positive integer, not {_show(v.expr)}")
        self.ctx.size_values[sym] = v.expr
        return Verdict(
            "definition",
            step,
            f"gives the size {b.name} the value {_show(v.expr)} (used in steps of sizes alone; "
            "array steps keep every size symbolic)",
            defines=b.name,
        )

    def _size_claim(self, lhs, rhs, step: str) -> Verdict:
        def value(x):
            x = basic(x)
            for _ in range(20):
                new = x.xreplace(self.ctx.size_values)
                if new == x:
                    break
                x = new
            return x

        a, b = value(lhs), value(rhs)
        diff = sp.simplify(a - b)
        if diff == 0:
            return Verdict(
                "proved",
                step,
                "arithmetic with the document's sizes",
                scope="the document's values",
                assumptions=[f"{_show(k)} = {_show(v)}" for k, v in self.ctx.size_values.items()],
                assumptions_latex=[f"${latex(k)} = {latex(v)}$" for k, v in self.ctx.size_values.items()],
            )
        if a.is_number and b.is_number:
            return Verdict(
                "refuted",
                step,
                "arithmetic with the document's sizes",
                counterexample={"at": {}, "seed": None, "lhs": float(a), "rhs": float(b)},
            )
        if diff.is_number:  # a constant difference: false at every size
            at = {s: 2 for s in sorted(diff.free_symbols | a.free_symbols | b.free_symbols, key=str)}
            return Verdict(
                "refuted",
                step,
                "the two sides differ by a constant",
                counterexample={
                    "at": {str(k): v for k, v in at.items()},
                    "seed": None,
                    "lhs": float(a.subs(at)),
                    "rhs": float(b.subs(at)),
                },
            )
        return Verdict("not understood", step, f"a relation between sizes that is not decided: {_show(diff)} ≠ 0")

    # ---------------------------------------------------------------- restatements
    def _restate(self, lhs, rhs, step: str, where: str, name: str, forall: dict) -> Verdict:
        v = self._claim(lhs, rhs, step, forall)
        if v.verdict in ("proved", "not understood") and not v.reason.startswith("undecided"):
            if v.verdict == "proved":
                v.reason = f"agrees with the meaning {name} already has; " + v.reason
            return v
        b = self.ctx.value(name)
        d = self.ctx.definition("L" if b.kind == "loss" else b.label)
        before = d.source or d.origin if d else "?"
        new = self._define_name(name, rhs, step, where)
        if new.verdict == "definition":
            why = "differs from" if v.verdict == "refuted" else "could not be compared with"
            new.reason = f"redefines {name}: {why} its meaning before ({before}, {d.origin if d else '?'})"
            new.counterexample = v.counterexample
        return new

    def _function_scope(self, spec: FunctionSpec, params: list, rhs, rows: bool = False) -> dict:
        """The parameters of `f(x) = …` restating a function: a scalar for an elementwise f; else
        the document's x where the right side reads a name computed from it, an array of its own
        otherwise: a row vector (1, n), or with `rows` a matrix of a row count of its own (an f
        that mixes rows, softmax(QKᵀ)V, is the same as V on one row)."""
        scope = {}
        for p in params:
            if spec.scalar:
                scope[p] = Val(sp.Symbol(p, real=True), ())
            else:
                b = self.ctx.value(p)
                if b is not None and b.kind == "ids" and spec.reads_ids:
                    # f(token_ids) = …: any ids, the lookup's (a proof holds for every value of them)
                    scope[p] = Val(Array(b.label, tuple(b.shape), integer=True), tuple(b.shape))
                elif b is not None and b.kind == "array" and b.label in self._upstream_of_names(rhs):
                    # f(x) = … x̂ …, x̂ computed from the document's x: x is that x
                    scope[p] = Val(b.array(), b.shape)
                else:  # an array of its own (never the document's array of that name)
                    if rows and b is not None and b.kind == "array" and len(b.shape) == 2:
                        shape = tuple(b.shape)  # the shape declared for the name (Q: n × d_k: d_k is its width)
                    else:
                        height = unknown_size(f"{spec.name}.{p}.rows") if rows else sp.Integer(1)
                        shape = (height, unknown_size(f"{spec.name}.{p}"))
                    scope[p] = Val(Array(f"{spec.name}.{p}", shape, latex=name_latex(p)), shape)
        return scope

    def _restate_function(self, spec: FunctionSpec, params: list, lhs, rhs, step: str, where: str) -> Verdict:
        v = self._claim(lhs, rhs, step, {}, scope=self._function_scope(spec, params, rhs))
        if not spec.scalar and v.verdict != "refuted":
            # agreement on one row is not agreement: the restatement is decided on arguments
            # with rows of their own too; only a body that reads its argument as a vector (x_i)
            # is not understood there, and then the row vector is the document's meaning
            general = self._claim(lhs, rhs, step, {}, scope=self._function_scope(spec, params, rhs, rows=True))
            if general.verdict in ("proved", "refuted") or general.reason.startswith("undecided"):
                v = general
        if v.verdict in ("proved",) or spec.kind == "builtin" and v.verdict == "not understood":
            if v.verdict == "proved":
                v.reason = (
                    f"agrees with {spec.name} as {'the catalogue' if spec.kind == 'builtin' else spec.origin} defines it; "
                    + v.reason
                )
            return v
        if v.verdict == "not understood" and not v.reason.startswith("undecided"):
            return v
        new = self._define_function(spec.name, params, rhs, step, where)
        if new.verdict == "definition":
            why = "differs from" if v.verdict == "refuted" else "could not be compared with"
            whose = "the catalogue's" if spec.kind == "builtin" else f"the one of {spec.origin}"
            new.reason = f"redefines {spec.name}: {why} {whose} ({spec.meaning or 'its body'})"
            new.counterexample = v.counterexample
        return new

    def _upstream_of_names(self, node) -> set[str]:
        """The labels every defined name that `node` reads is computed from."""
        out: set[str] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            name = doc_name(n) if isinstance(n, P.Node) else None
            b = self.ctx.value(name) if name else None
            if b is not None and b.label:
                out |= upstream(self.ctx, b.label)
            if isinstance(n, P.Node):
                for value in vars(n).values():
                    for child in value if isinstance(value, tuple) else (value,):
                        if isinstance(child, (P.Node, tuple)):
                            stack.append(child)
            elif isinstance(n, tuple):
                stack.extend(c for c in n if isinstance(c, (P.Node, tuple)))
        return out

    # ---------------------------------------------------------------- claims
    def _claim(
        self, lhs, rhs, step: str, forall: dict, scope: dict | None = None, unfold: str | None = None
    ) -> Verdict:
        try:
            return self._decide(lhs, rhs, step, forall, scope, unfold)
        except NotUnderstood as e:
            return Verdict("not understood", step, str(e))
        except Undecided as u:
            v = Verdict("not understood", step, f"undecided: {u}", counterexample=u.counterexample)
            v._decided = u.decided
            return v

    def _decide(self, lhs, rhs, step: str, forall: dict, scope: dict | None, unfold: str | None = None) -> Verdict:
        """`unfold`: the label of a recurrence unfolded once on the left side only (a restated
        recurrence: its step function is compared, every other entry arbitrary). Two columns
        (matrices) written out are equal when each row (entry) is: one statement each, all must
        hold."""
        e = _pair_elaborator(self.ctx, lhs, rhs, scope)
        for name in forall:
            e._free(name)
        lv, rv = e.side(lhs), e.side(rhs)
        e.settle_pairs()
        ranges: dict = {}
        if isinstance(lv, Block) or isinstance(rv, Block):
            cases = _entrywise(lv, rv, e)
        else:
            lv, rv = _finalize(lv, e), _finalize(rv, e)
            if lv.is_scalar != rv.is_scalar:
                one = lv if not lv.is_scalar else rv
                if tuple(e.resolve(s) for s in one.shape) != (1, 1):
                    raise NotUnderstood("a scalar on one side and an array on the other")
            if not lv.is_scalar and not rv.is_scalar:
                ls, rs = tuple(e.resolve(s) for s in lv.shape), tuple(e.resolve(s) for s in rv.shape)
                try:
                    shape = tuple(e.same(a, b, "the two sides' shapes") for a, b in zip(ls, rs))
                except NotUnderstood:
                    return self._shape_refutation(step, ls, rs)
                r, c = sp.Symbol("r", integer=True), sp.Symbol("c", integer=True)
                pos = (r if shape[0] != 1 else sp.Integer(0), c if shape[1] != 1 else sp.Integer(0))
                li, ri = entry(lv.expr, pos), entry(rv.expr, pos)
                for sym, n in zip(pos, shape):
                    if isinstance(sym, sp.Symbol):
                        ranges[sym] = [(n, "the shape")]
            else:
                li = lv.expr if lv.is_scalar else entry(lv.expr, (0, 0))
                ri = rv.expr if rv.is_scalar else entry(rv.expr, (0, 0))
            cases = [("", li, ri)]
        if unfold is not None:
            cases = [(label, unfold_once(li, self.ctx, unfold), ri) for label, li, ri in cases]
        self._recurrences_arbitrary = unfold is not None
        for name, sym in e.free.items():
            found = [(e.resolve(s), w) for s, w in e.positions.get(sym, [])]
            if name in forall:
                lo, hi = forall[name]
                if sp.simplify(lo - e.first) != 0:
                    raise NotUnderstood(f"the remark ∀ {name} = {_show(lo)}, …: indices count from {e.first}")
                found.append((hi - e.first + 1, "the remark ∀"))
            ranges[sym] = found
        conflicts = []
        for sym, found in ranges.items():
            sizes = {s for s, _ in found}
            if not sizes:
                raise NotUnderstood(f"the range of the free index {sym} is unknown (it indexes no array)")
            if len(sizes) > 1:
                conflicts.append((sym, sizes))
        _commit(self.ctx, e.subst)
        policy_args = dict(
            grads=frozenset(e.grad_targets), diffs=frozenset(e.diff_targets), jac=frozenset(e.jacobian_targets)
        )
        notes = list(e.notes)  # (plain, Markdown) pairs
        if e.random_used:
            words = (
                "the expectation operator: the random vectors independent, each one's components i.i.d.; "
                "moments as the document states them, higher cumulants symbolic"
            )
            notes.append((words, words))
        # document indices are reported as the statement counts them; a matrix step's r, c from 1
        offsets = {sym: e.first for sym in e.free.values()}
        decision = _Decision(step, ranges, conflicts, policy_args, notes, self._even_of(cases, e), offsets)
        return self._all_hold(
            [(label, lambda li=li, ri=ri: self._decide_forms(decision, li, ri)) for label, li, ri in cases]
        )

    def _even_of(self, cases, e: Elaborator) -> set:
        """The sizes the step reads in pairs: its own (x_{2i}, x_{2i+1}) and those of the vectors
        defined by their pairs that it reads (Definition.even), as the step resolves them."""
        labels = set()
        for _, li, ri in cases:
            for lab in labels_in(li) | labels_in(ri):
                labels |= {lab} | upstream(self.ctx, lab)
        out = {e.resolve(s) for s in e.even}
        for lab in labels:
            d = self.ctx.definition(lab)
            out |= {e.resolve(s) for s in (d.even if d is not None else ())}
        return {s for s in out if isinstance(s, sp.Symbol)}

    def _all_hold(self, cases) -> Verdict:
        """Each (label, decide) in turn: proved only if every one is (the reasons' first, its
        assumptions those of all); the first that is not gives the verdict, its label in front."""
        proved = []
        for label, decide in cases:
            try:
                v = decide()
            except Undecided as u:
                if label:
                    raise Undecided(f"{label}: {u}", u.counterexample, u.decided) from None
                raise
            if v.verdict != "proved":
                if label:
                    v.reason = f"{label}: {v.reason}"
                return v
            proved.append((label, v))
        label, v = proved[0]
        if len(proved) > 1:
            v.reason = f"{' and '.join(lab for lab, _ in proved)}, each: {v.reason}"
            pairs = [(a, b) for _, w in proved for a, b in zip(w.assumptions, w.assumptions_latex)]
            pairs = list(dict.fromkeys(pairs))
            v.assumptions, v.assumptions_latex = [a for a, _ in pairs], [b for _, b in pairs]
        return v

    def _decide_forms(self, d: _Decision, li, ri, split: bool = True) -> Verdict:
        """One identity li = ri (index form, before unfolding), decided: proved for symbolic sizes,
        else refuted by a counterexample, else Undecided. An entry whose formula depends on the
        parity of its position ((−1)^c: a vector defined by its pairs, RoPE's tables) is compared
        at the even and at the odd positions apart (c = 2i, c = 2i + 1), where each side reads
        the pair's own formula."""
        if split:
            parities = self._parity_cases(d, li, ri)
            if parities:
                return self._all_hold(parities)
        step, ranges, conflicts, policy_args, notes = d.step, d.ranges, d.conflicts, d.policy_args, d.notes
        levels = ["local", "full"] if any(policy_args.values()) else ["full"]
        notes = list(notes)
        last = None
        full_forms = None
        for level in levels:
            lf = expand(li, self.ctx, Policy(level, **policy_args))
            rf = expand(ri, self.ctx, Policy(level, **policy_args))
            lf, rf, gen = _generic_sizes(lf, rf, ranges)
            lf, rf, gen, halves = _evens(lf, rf, gen, ranges, d.even)
            if level == levels[0]:
                notes += _even_notes(halves)
            if level == "full":
                full_forms = (lf, rf, gen)
            if conflicts:
                continue
            rs = {s: [(basic(x).xreplace(gen), w) for x, w in f] for s, f in ranges.items()}
            setting = _setting(lf, rf, rs, defaultdict(lambda: PROOF_SIZE), self.ctx)
            with tagged_show() as tags:
                proof = prove_index_identity(
                    lf, rf, setting, method=f"index normaliser ({level})", preconditions=_denominators(lf, rf)
                )
            last = proof
            traced = getattr(setting, "traced", None)
            if proof.status == "proved-general":
                v = self._proved(step, proof, level, policy_args, notes, setting, tags)
                rewrites = summarise_rewrites(traced.rewrites if traced else [], tags)
                v._decided = (level, lf, rf, setting, rewrites, "0")
                return v
            proof.method, proof.residual = tags.plain(proof.method), tags.plain(proof.residual)
        lf, rf, gen = full_forms
        # the entries as written (before any definition is unfolded), where no sum binds their indices
        written = [
            a
            for a in basic(li).atoms(sp.Indexed) | basic(ri).atoms(sp.Indexed)
            if not any(ix.atoms(sp.Dummy) for ix in a.indices)
        ]
        self._forms = (lf, rf, ranges, gen, written) if not conflicts else None  # what an approximation compares
        cx = self._search(lf, rf, ranges, gen, conflicts, d.offsets, written)
        if cx is not None:
            cx = _with_even_sizes(cx, halves)
            why = "a counterexample at concrete sizes"
            if conflicts:
                why += " (where every index is in its range)"
            plain, md = _split_notes(notes)
            v = Verdict("refuted", step, why, counterexample=cx, assumptions=plain, assumptions_latex=md)
            residual = None  # computed by explain()
            rs = {s: [(basic(x).xreplace(gen), w) for x, w in f] for s, f in ranges.items()}
            v._decided = ("full", lf, rf, _setting(lf, rf, rs, defaultdict(lambda: PROOF_SIZE), self.ctx), [], residual)
            return v
        if conflicts:
            sym, sizes = conflicts[0]
            raise NotUnderstood(
                f"the index {sym} ranges over axes of different sizes ({', '.join(sorted(map(_show, sizes)))})"
            )
        residual = last.residual if last is not None else "?"
        why = getattr(self, "_no_search", None)
        self._no_search = None
        tail = f"no counterexample searched: {why}" if why else "no counterexample found"
        rs = {s: [(basic(x).xreplace(gen), w) for x, w in f] for s, f in ranges.items()}
        decided = ("full", lf, rf, _setting(lf, rf, rs, defaultdict(lambda: PROOF_SIZE), self.ctx), [], None)
        raise Undecided(f"{last.method if last else ''}: residual {_short(residual)}; {tail}", decided=decided)

    def _parity_cases(self, d: _Decision, li, ri) -> list:
        """(label, decide) for the even and the odd positions of the one position whose parity the
        unfolded sides read ((−1)^c), when its range has an even length 2m (the pairs: c = 2i + p,
        i = 0 … m − 1); [] otherwise (then the sides are compared at every position at once)."""
        positions = [s for s in d.ranges if s.name in ("r", "c") and len(d.ranges[s]) == 1]  # a row's, a column's
        if not positions or d.conflicts:
            return []
        policy = Policy("full", **d.policy_args)
        lf, rf = expand(li, self.ctx, policy), expand(ri, self.ctx, policy)
        signs = [p.exp for p in lf.atoms(sp.Pow) | rf.atoms(sp.Pow) if p.base == -1]
        parity = [s for s in positions if any(s in x.free_symbols for x in signs)]
        if not parity:
            return []
        pos = parity[0]
        ((length, what),) = d.ranges[pos]
        _, _, gen = _generic_sizes(lf, rf, d.ranges)
        _, _, gen, _ = _evens(lf, rf, gen, d.ranges, d.even)
        half = sp.expand(basic(length).xreplace(gen) / 2)
        if not all(t.is_integer for t in sp.Add.make_args(half)):
            return []  # an odd length, or one not known even: no pairs to compare
        pair = sp.Symbol(f"{pos.name}_pair", integer=True)
        ranges = {s: f for s, f in d.ranges.items() if s != pos}
        ranges[pair] = [(length / 2, f"the pairs of {what}")]
        axis = "columns" if pos.name == "c" else "rows"
        out = []
        for p, kind in ((0, "even"), (1, "odd")):
            at = {pos: 2 * pair + p}
            sub = _Decision(d.step, ranges, d.conflicts, d.policy_args, d.notes, d.even, d.offsets)
            label = f"at the {kind} {axis} ({pos.name} = 2·{pair.name}{' + 1' if p else ''})"

            def decide(at=at, sub=sub, p=p):
                v = self._decide_forms(sub, li.xreplace(at), ri.xreplace(at), split=False)
                if v.counterexample and pair.name in v.counterexample.get("at", {}):
                    cx = v.counterexample["at"]
                    cx[pos.name] = 2 * (cx.pop(pair.name) - 1) + p + 1  # the position, counted from 1
                return v

            out.append((label, decide))
        return out

    def _proved(self, step, proof, level, policy_args, notes, setting, tags=None) -> Verdict:
        sizes = sorted(str(s) for s in setting.sizes)
        scope = "all sizes" + (f" (symbolic {', '.join(sizes)})" if sizes else "")
        notes = list(notes)
        policy = Policy(level, **policy_args)
        for g in sorted(policy_args["grads"]):
            dg = "$" + name_latex(f"dL/d{g}") + "$"
            cons = consumers(self.ctx, g)
            if not cons:
                notes.append(
                    (
                        f"∂L/∂{g}: the upstream gradient, any array (nothing here is computed from {g})",
                        f"{dg}: the upstream gradient, any array (nothing here is computed from ${name_latex(g)}$)",
                    )
                )
            elif _grad_expandable(self.ctx, policy, g):
                how = "one step" if level == "local" else "down to the outputs"
                through = ", ".join(f"${name_latex(c)}$" for c in cons)
                notes.append(
                    (
                        f"∂L/∂{g} by the chain rule ({how}) through what is computed from {g}: {', '.join(cons)} "
                        f"(the loss reads {g} only through them)",
                        f"{dg} by the chain rule ({how}) through what is computed from ${name_latex(g)}$: {through} "
                        f"(the loss reads ${name_latex(g)}$ only through them)",
                    )
                )
            else:
                notes.append(
                    (
                        f"∂L/∂{g} kept as an arbitrary array: the step holds for any loss",
                        f"{dg} kept as an arbitrary array: the step holds for any loss",
                    )
                )
        for d in sorted(policy_args["diffs"]):
            if self.ctx.definition(d) is not None and _diff_expandable(self.ctx, policy, d):
                inputs = sorted(deps(self.ctx, d))
                notes.append(
                    (
                        f"d{d} = Σ ∂{d}/∂X dX over the inputs X of {d}: {', '.join(inputs)}",
                        rf"$\mathrm{{d}}{name_latex(d)} = \sum_X \frac{{\partial {name_latex(d)}}}{{\partial X}}"
                        rf"\,\mathrm{{d}}X$ over the inputs $X$ of ${name_latex(d)}$: "
                        + ", ".join(f"${name_latex(x)}$" for x in inputs),
                    )
                )
        plain, md = plain_markdown(proof.assumptions, tags)
        head = "side condition proved (indices counted from 0): "
        notes += [(head + a, head + b) for a, b in zip(plain, md)]
        plain, md = _split_notes(notes)
        method = tags.plain(proof.method) if tags is not None else proof.method
        return Verdict(
            "proved",
            step,
            f"{method}: residual exactly 0; spot-check gap {proof.spot_check.get('max_relative_gap', 0):.1e}",
            scope=scope,
            assumptions=plain,
            assumptions_latex=md,
        )

    def _shape_refutation(self, step, ls, rs) -> Verdict:
        syms = sorted({s for x in ls + rs for s in basic(x).free_symbols if _size_like(s)}, key=str)
        vals = {s: SIZE_VALUES[k % len(SIZE_VALUES)] for k, s in enumerate(syms)}
        a = tuple(int(basic(x).subs(vals)) for x in ls)
        b = tuple(int(basic(x).subs(vals)) for x in rs)
        if a == b:
            raise NotUnderstood(f"the two sides' shapes {_dims(ls)} and {_dims(rs)} differ symbolically")
        return Verdict(
            "refuted",
            step,
            f"the two sides have different shapes: {_dims(ls)} and {_dims(rs)}",
            counterexample={
                "at": {str(k): v for k, v in vals.items()},
                "seed": None,
                "lhs": f"{a[0]}×{a[1]}",
                "rhs": f"{b[0]}×{b[1]}",
            },
        )

    # ---------------------------------------------------------------- counterexamples
    def _search(self, lf, rf, ranges, gen, conflicts, offsets=None, written=()) -> dict | None:
        why = _opaque_definitions(lf, rf, self.ctx, recurrences=not getattr(self, "_recurrences_arbitrary", False))
        if why:
            self._no_search = why
            return None
        for point, a, b in self._points(lf, rf, ranges, gen, written=written):
            if numeric.relative_gap(a, b) > TOLERANCE:
                return _report_point(point, a, b, ranges, offsets)
        return None


# ---------------------------------------------------------------------------------- helpers
class _NotADefinition(Exception):
    """The name is on both sides at the same place: a statement about it, not a definition."""


def _positions_of(vars_, shape) -> tuple:
    rows, cols = shape
    if rows != 1 and cols != 1:
        return tuple(vars_)
    return (sp.Integer(0), vars_[0]) if rows == 1 else (vars_[0], sp.Integer(0))


@dataclass(frozen=True)
class _OwnDenominator:
    """A denominator (or a logarithm's argument) written in the step itself: the step states an
    equality where its formulas are defined, so it may be assumed ≠ 0 — and is listed."""

    form: sp.Expr

    def index_form(self) -> sp.Expr:
        return self.form

    def describe(self) -> str:
        return "a denominator of the step itself (the step holds where its formulas are defined)"


def _denominators(lf, rf) -> list:
    out = []
    for e in (lf, rf):
        for p in basic(e).atoms(sp.Pow):
            if p.exp.is_number and p.exp.is_negative:
                out.append(_OwnDenominator(p.base))
        for g in basic(e).atoms(sp.log):
            out.append(_OwnDenominator(g.args[0]))
    return out


def _dims(shape) -> str:
    """ℝ's exponent, as the documents write it: n, n×d_k, h·d_v×d_model."""

    def one(s):
        s = basic(s)
        if isinstance(s, sp.Mul):
            return "·".join(_show(f) for f in sorted(s.args, key=str))
        return _show(s)

    if len(shape) == 1:
        out = one(shape[0])
    elif len(shape) == 2 and shape[0] == 1:
        out = one(shape[1])
    else:
        out = "×".join(one(s) for s in shape) if shape else ""
    return "{" + out + "}" if len(out) > 1 else out


def _short(s: str, n: int = 160) -> str:
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "…"


def _finalize(v: Val, e: Elaborator) -> Val:
    """`v` with the sizes unified while it was read written in."""
    if not e.subst:
        return v
    expr = basic(v.expr)
    reps = {}
    for a in expr.atoms(Array):
        new_shape = tuple(e.resolve(s) for s in a.shape)
        if new_shape != a.shape:
            reps[a] = Array(a.name, new_shape, a.integer_valued, a.latex_name)
    expr = expr.xreplace(reps) if reps else expr
    sizes = {s: e.resolve(s) for s in expr.free_symbols if is_unknown(s)}
    expr = expr.xreplace(sizes) if sizes else expr
    return Val(expr, tuple(e.resolve(s) for s in v.shape))


def _commit(ctx: Context, subst: dict) -> None:
    """Sizes fixed by a statement become the context's: shapes and stored definitions."""
    if not subst:
        return

    def res(s):
        s = basic(s)
        for _ in range(10):
            new = s.xreplace(subst)
            if new == s:
                break
            s = new
        return s

    for b in ctx.values.values():
        if b.shape is not None:
            b.shape = tuple(res(s) for s in b.shape)
    for lab, d in list(ctx.defs.items()):
        if d.kind in ("array", "entries", "scalar", "recurrence") and isinstance(d.expr, sp.Basic):
            reps = {}
            for a in d.expr.atoms(Array):
                new_shape = tuple(res(s) for s in a.shape)
                if new_shape != a.shape:
                    reps[a] = Array(a.name, new_shape, a.integer_valued, a.latex_name)
            expr = d.expr.xreplace(reps).xreplace(subst) if reps or subst else d.expr
            ctx.defs[lab] = Definition(d.kind, expr, d.vars, d.origin, d.source, tuple(res(s) for s in d.even))


def _generic_sizes(lf, rf, ranges: dict | None = None):
    """Sizes still unknown (a vector's length nothing fixed) become ordinary symbolic sizes."""
    syms = set(lf.free_symbols | rf.free_symbols)
    for found in (ranges or {}).values():
        for s, _ in found:
            syms |= basic(s).free_symbols
    unknown = {s for s in syms if is_unknown(s)}
    gen = {s: size("n_" + s.name[1:].replace(".", "_")) for s in unknown}
    if not gen:
        return lf, rf, {}
    return lf.xreplace(gen), rf.xreplace(gen), gen


def _points_text(n: int) -> str:
    return f"{n} point" + ("" if n == 1 else "s")


def _drawn(s: sp.Symbol, seed: int):
    """A scalar's value at a point of an approximation's comparison: k/8 for k in ±1 … ±16 as an
    array entry's (numeric.Point.value_of), positive where the scalar is."""
    import random

    rng = random.Random(f"{seed}|{s.name}")
    k = rng.randint(1, 16) * (1 if s.is_positive else rng.choice([-1, 1]))
    return mpmath.mpf(k) / 8


def _scalar_value(s: sp.Symbol, k: int):
    if s.is_positive:
        return sp.Rational(1, 3) + sp.Rational(k, 7)
    return sp.Rational(3, 5) - sp.Rational(k, 4)


def _setting(lf, rf, ranges: dict, sizes: dict | None = None, ctx: Context | None = None) -> Setting:
    syms = {s for s in lf.free_symbols | rf.free_symbols if isinstance(s, sp.Symbol)}
    for found in ranges.values():
        for s, _ in found:
            syms |= basic(s).free_symbols
    integer_arrays = _integer_arrays(lf, rf, ctx)
    for _lo, hi in integer_arrays.values():
        syms |= basic(hi).free_symbols
    size_syms = sorted({s for s in syms if _size_like(s)}, key=str)
    if sizes is None:
        sizes = {s: SIZE_VALUES[k % len(SIZE_VALUES)] for k, s in enumerate(size_syms)}
    else:
        sizes = {s: sizes[s] if s in sizes or isinstance(sizes, defaultdict) else 3 for s in size_syms}
    indices = {}
    for sym, found in ranges.items():
        n = sorted({basic(s) for s, _ in found}, key=str)[0]
        indices[sym] = (0, n - 1)
    scalars = {}
    base_labels = {a.base.label for a in lf.atoms(sp.Indexed) | rf.atoms(sp.Indexed)}
    others = sorted(
        (
            s
            for s in syms
            if isinstance(s, sp.Symbol)
            and s not in indices
            and s not in sizes
            and s not in base_labels
            and not isinstance(s, sp.Dummy)
        ),
        key=str,
    )
    for k, s in enumerate(others):
        if s.name.startswith("kappa"):
            scalars[s] = 0
        else:
            scalars[s] = _scalar_value(s, k)
    return TracingSetting(sizes=sizes, indices=indices, scalars=scalars, integer_arrays=integer_arrays)


def _integer_arrays(lf, rf, ctx: Context | None) -> dict:
    """The token-id arrays the forms read, with the range of their entries (0 … V − 1)."""
    out = {}
    if ctx is None:
        return out
    for a in lf.atoms(sp.Indexed) | rf.atoms(sp.Indexed):
        b = ctx.binding_of_label(str(a.base.label))
        if b is not None and b.kind == "ids":
            out[b.label] = (0, b.bound - 1)
    return out


def _indices_in_ranges(point, ranges, gen) -> bool:
    for sym, found in ranges.items():
        v = point.symbols.get(sym)
        if v is None:
            continue
        for s, _ in found:
            n = int(basic(s).xreplace(gen).subs(point.symbols))
            if not 0 <= int(v) <= n - 1:
                return False
    return True


def _extents(lf, rf, ctx: Context, gen) -> dict:
    """label -> (rows, cols) of every named array the forms read."""
    out = {}
    for a in lf.atoms(sp.Indexed) | rf.atoms(sp.Indexed):
        lab = str(a.base.label)
        target = lab[4:] if lab.startswith("dL/d") else lab[2:-1] if lab.startswith("d(") else lab
        b = ctx.binding_of_label(target)
        if b is not None and b.shape is not None:
            out[lab] = tuple(basic(s).xreplace(gen) for s in b.shape)
    return out


def _entries_in_range(point, extents) -> bool:
    for base, idx in point.entries:
        shape = extents.get(base)
        if shape is None:
            continue
        try:
            dims = [int(basic(s).subs(point.symbols)) for s in shape]
        except TypeError:  # a size this point does not give: the point proves nothing
            return False
        if len(idx) == 2:
            ok = 0 <= idx[0] < dims[0] and 0 <= idx[1] < dims[1]
        else:
            n = dims[1] if dims[0] == 1 else dims[0]
            ok = 0 <= idx[0] < n
        if not ok:
            return False
    return True


def _written_in_range(point, written, extents, gen) -> bool:
    """Every entry as the step writes it (ω_{i+1}) inside its array at `point`."""
    entries = []
    for a in written:
        try:
            at = tuple(int(basic(ix).xreplace(gen).subs(point.symbols)) for ix in a.indices)
        except TypeError:  # an index this point does not give: the point proves nothing
            return False
        entries.append((str(a.base.label), at))
    return _entries_in_range(_Entries(entries, point.symbols), extents)


@dataclass
class _Entries:
    """Entries and the point's symbols, as `_entries_in_range` reads a point."""

    entries: list
    symbols: dict


def _opaque_definitions(lf, rf, ctx: Context, recurrences: bool = True) -> str | None:
    """Why a counterexample may not be searched for: a recurrence left folded, or a name whose
    definition was not understood (its stand-in is arbitrary, the document's is not)."""
    labels = {str(a.base.label) for a in lf.atoms(sp.Indexed) | rf.atoms(sp.Indexed)}
    labels |= {s.name for s in lf.free_symbols | rf.free_symbols if isinstance(s, sp.Symbol)}
    for lab in sorted(labels):
        d = ctx.definition(lab)
        if d is not None and d.kind == "recurrence" and recurrences:
            return f"{lab} is defined by a recurrence (not unfolded)"
        if d is not None and d.kind in ("argmax", "family"):
            return f"{lab} is defined by an argmax (not unfolded)" if d.kind == "argmax" else f"{lab} is a family"
        b = ctx.binding_of_label(lab)
        if b is not None and b.opaque:
            return f"{b.name}: {b.opaque}"
    return None


def _report_point(point, a, b, ranges, offsets=None) -> dict:
    at = {}
    for k, v in point.symbols.items():
        name = str(k)
        if k in ranges:  # internal indices count from 0; the document's from 1 (0 where it pairs dimensions)
            at[name] = int(v) + (offsets or {}).get(k, 1)
        elif isinstance(k, sp.Symbol) and _size_like(k):
            at[name] = int(v)
        else:
            at[name] = numeric._plain(v)
    return {"at": at, "seed": point.seed, "lhs": _num(a), "rhs": _num(b)}


def _num(v):
    f = float(v)
    return f if abs(f) < 1e300 else str(v)
