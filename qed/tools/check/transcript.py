"""Why a step holds: its transcript, and mathematics printed as LaTeX.

A proved (or refuted) step keeps what it was decided on: the two sides' index forms at the level
that decided it, the setting (the free indices' ranges). `transcript()` rebuilds what the
normaliser did with them — the rewrites it applied (a delta sifted, a range split, sums merged,
a region split, …), each side's normal form and the residual — with a `TracingNormaliser`, the
back end's `Normaliser` (derivations/proof/rewriting.py) with its rules observed, never changed.

The normaliser states its side conditions as text, through `rewriting._show` (SymPy's string
form). While a step is proved, `tagged_show()` swaps in a show that writes a tag for each
expression instead, so that the same conditions can be printed twice: as plain text (exactly
what the back end would have said) and as Markdown with LaTeX mathematics between `$ … $`
(`Tags.markdown`) — the form `--explain`, the Markdown/HTML reports and Jupyter show.

`latex(expr)` prints an index form with the document's names: `dL/dS` is
∂𝓛/∂S, `d(S)` is dS, `β_1` is β₁, `x̂` is x̂, a word is upright.
"""

from __future__ import annotations

import contextlib
import re

import sympy as sp

from derivations.language.latex import ArrayLatexPrinter
from derivations.proof import rewriting
from derivations.proof.core import Setting
from derivations.proof.rewriting import Normaliser

from .context import basic
from .grammar import GREEK

MAX_LATEX = 1500  # a normal form longer than this (in LaTeX characters) is summarised, not shown

_UNICODE_GREEK = {v: k for k, v in GREEK.items() if not k.startswith("var")}
_UNICODE_GREEK["ε"] = "epsilon"
_ACCENTS = {"\u0302": "hat", "\u0303": "tilde", "\u0304": "bar"}


def name_latex(name: str) -> str:
    """The LaTeX of a document name or an internal label: W_Q → W_{Q}, d_model →
    d_{\\mathrm{model}}, β_1 → \\beta_{1}, x̂ → \\hat{x}, dL/dS → \\frac{\\partial
    \\mathcal{L}}{\\partial S}, d(S) → \\mathrm{d}S, Output → \\mathrm{Output}."""
    if name.startswith("dL/d") and len(name) > 4:
        return rf"\frac{{\partial \mathcal{{L}}}}{{\partial {name_latex(name[4:])}}}"
    if name.startswith("d(") and name.endswith(")"):
        return rf"\mathrm{{d}}{name_latex(name[2:-1])}"
    if name.startswith("?"):
        return f"n_{{{name_latex(name[1:])}}}"
    if name.endswith("'"):
        return name_latex(name[:-1]) + "'"
    m = re.fullmatch(r"([^()]+)\(([^()]+)\)", name)
    if m:  # P(token): the values of a function on a family's members
        return rf"{name_latex(m.group(1))}\left({name_latex(m.group(2))}\right)"
    if "^" in name:
        base, _, sup = name.partition("^")
        return f"{name_latex(base)}^{{{name_latex(sup)}}}"
    if "_" in name:
        base, _, sub = name.partition("_")
        if len(base) > 1 and base.isalpha() and sub.replace("_", "").isalnum():  # token_ids: one word
            return rf"\mathrm{{{name.replace('_', chr(92) + '_')}}}"
        return f"{name_latex(base)}_{{{name_latex(sub)}}}"
    if name and name[-1] in _ACCENTS:
        return rf"\{_ACCENTS[name[-1]]}{{{name_latex(name[:-1])}}}"
    if name in _UNICODE_GREEK:
        return "\\" + _UNICODE_GREEK[name]
    if name == "𝓛" or name == "L":
        return r"\mathcal{L}" if name == "𝓛" else "L"
    if len(name) > 1 and name.isalpha():
        return rf"\mathrm{{{name}}}"
    m = re.fullmatch(r"([A-Za-z]{2,})(\d+)", name)
    if m:
        return rf"\mathrm{{{m.group(1)}}}_{{{m.group(2)}}}"
    return name


class IndexLatexPrinter(ArrayLatexPrinter):
    """The array language's printer with the document's names (see `name_latex`)."""

    def _print_Symbol(self, e, style="plain"):
        return name_latex(e.name)

    def _print_Dummy(self, e):
        name = e.name.lstrip("_")
        m = re.fullmatch(r"([A-Za-z]+)(\d+)", name)
        return f"{m.group(1)}_{{{m.group(2)}}}" if m else name_latex(name)

    def _print_IndexedBase(self, e):
        return name_latex(str(e.label))

    def _print_Indexed(self, e):
        base = name_latex(str(e.base.label))
        if base.startswith(r"\frac"):
            base = rf"\left({base}\right)"
        return f"{{{base}}}_{{{','.join(self._print(i) for i in e.indices)}}}"

    def _print_Array(self, e):
        return e.latex_name or name_latex(e.name)

    def _print_Heaviside(self, e, exp=None):
        return rf"H\left({self._print(e.args[0])}\right)"


def latex(expr) -> str:
    """LaTeX of an index form; bound indices (SymPy Dummies) get names of their own, distinct
    from each other and from the free symbols (k, k', k'', …)."""
    e = basic(expr)
    dummies = sorted(e.atoms(sp.Dummy), key=lambda d: (d.dummy_index, d.name))
    if dummies:
        used = {name_latex(s.name) for s in e.free_symbols if not isinstance(s, sp.Dummy)}
        used |= {name_latex(str(a.base.label)) for a in e.atoms(sp.Indexed)}
        reps = {}
        for d in dummies:
            base = re.sub(r"\d+$", "", d.name.lstrip("_")) or "k"
            name = base
            while name_latex(name) in used:
                name += "'"
            used.add(name_latex(name))
            reps[d] = sp.Symbol(name, integer=True)
        e = e.xreplace(reps)
    return re.sub(r" {2,}", " ", IndexLatexPrinter().doprint(e))


# ------------------------------------------------------------------------------ tagged show
_TAG = re.compile("\x00(\\d+)\x01")
_GLUE = set(" ∈[](),.≤≥≠<>=+-−·/0123456789")
_SYMBOLS = {"∈": r"\in ", "≤": r"\leq ", "≥": r"\geq ", "≠": r"\neq ", "−": "-", "·": r"\cdot "}


class Tags:
    """Expressions the normaliser showed, by tag."""

    def __init__(self):
        self.exprs: list = []
        self._index: dict = {}

    def show(self, e) -> str:
        try:
            key = basic(e)
            k = self._index.get(key)
        except (TypeError, sp.SympifyError):
            return str(e)
        if k is None:
            k = self._index[key] = len(self.exprs)
            self.exprs.append(key)
        return f"\x00{k}\x01"

    def plain(self, text: str) -> str:
        """The text as the back end writes it (SymPy's string form)."""
        return _TAG.sub(lambda m: sp.sstr(self.exprs[int(m.group(1))]), str(text))

    def markdown(self, text: str) -> str:
        """The text with its mathematics in LaTeX between `$ … $`."""
        text = str(text)
        if not _TAG.search(text):
            return text
        out, k = [], 0
        for m in re.finditer("(?:\x00\\d+\x01|[" + re.escape("".join(sorted(_GLUE))) + "])+", text):
            run = m.group()
            if not _TAG.search(run):
                continue
            lead = len(run) - len(run.lstrip(" ,.("))
            trail = len(run) - len(run.rstrip(" ,.("))
            start, end = m.start() + lead, m.end() - trail
            out.append(text[k:start])
            pieces = _split_outside_brackets(text[start:end])
            out.append(", ".join(f"${self._math(p)}$" if _TAG.search(p) else p for p in pieces))
            k = end
        out.append(text[k:])
        return "".join(out)

    def _math(self, piece: str) -> str:
        piece = _TAG.sub(lambda m: "\x02" + str(m.group(1)) + "\x03", piece)
        for u, t in _SYMBOLS.items():
            piece = piece.replace(u, t)
        piece = re.sub("\x02(\\d+)\x03", lambda m: latex(self.exprs[int(m.group(1))]), piece)
        return re.sub(r" {2,}", " ", piece).strip()


def _split_outside_brackets(text: str) -> list[str]:
    """`a ≥ 0, b ≤ 0` → [`a ≥ 0`, `b ≤ 0`]; `k ∈ [0, n - 1]` stays whole."""
    parts, depth, k = [], 0, 0
    for m in re.finditer(r"[\[(]|[\])]|, ", text):
        c = m.group()
        if c in "[(":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0:
            parts.append(text[k : m.start()])
            k = m.end()
    parts.append(text[k:])
    return parts


@contextlib.contextmanager
def tagged_show():
    """While inside, the normaliser shows expressions as tags (see the module docstring)."""
    tags = Tags()
    saved = rewriting._show
    rewriting._show = tags.show
    try:
        yield tags
    finally:
        rewriting._show = saved


def plain_markdown(texts, tags: Tags | None) -> tuple[list, list]:
    """(plain texts, Markdown texts) of texts that may hold tags."""
    if tags is None:
        return list(texts), [str(t) for t in texts]
    plain = list(dict.fromkeys(tags.plain(t) for t in texts))
    md = list(dict.fromkeys(tags.markdown(t) for t in texts))
    return plain, md


# ------------------------------------------------------------------------------ the rewrites
_F = sp.Function("f")  # the summand, in a rewrite's law


class TracingNormaliser(Normaliser):
    """The back end's normaliser, its rules observed: `rewrites` lists (rule, Markdown detail)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rewrites: list[tuple[str, str]] = []

    def _log(self, rule: str, detail: str) -> None:
        self.rewrites.append((rule, detail))

    def _sift_deltas(self, factors, limits):
        deltas = [f for f in factors if isinstance(f, sp.KroneckerDelta)]
        new_factors, new_limits = super()._sift_deltas(factors, limits)
        kept = {v for v, _, _ in new_limits}
        for v, lo, hi in limits:
            if v in kept:
                continue
            d = next((d for d in deltas if v in d.args), None)
            if d is None:
                self._log("delta sifted", "")
                continue
            other = d.args[0] if d.args[1] == v else d.args[1]
            law = sp.Eq(sp.Sum(d * _F(v), (v, lo, hi)), _F(other), evaluate=False)
            self._log("delta sifted", f"${latex(law)}$")
        return new_factors, new_limits

    def _split_piecewise(self, factors, limits):
        out = super()._split_piecewise(factors, limits)
        if out is not None and len(out) == 2:
            (_, la), (_, lb) = out
            pieces = [next((x for x in la if x not in limits), None), next((x for x in lb if x not in limits), None)]
            whole = next((x for x in limits if pieces[0] is not None and x[0] == pieces[0][0]), None)
            if None in pieces or whole is None:
                self._log("range split", "")
            else:
                v = whole[0]
                law = sp.Eq(
                    sp.Sum(_F(v), whole),
                    sp.Add(*(sp.Sum(_F(v), p) for p in pieces), evaluate=False),
                    evaluate=False,
                )
                self._log("range split", f"${latex(law)}$")
        elif out is not None:
            self._log("condition true on the whole range", "")
        return out

    def _merge_blocks(self, factors, limits):
        new_factors, new_limits = super()._merge_blocks(factors, limits)
        if len(new_limits) < len(limits):
            self._log("sums merged", "block reindexing $c = b\\,u + w$")
        return new_factors, new_limits

    def _split_on_sign(self, canonical, depth):
        before = len(self.discharged)
        ok = super()._split_on_sign(canonical, depth)
        if ok:
            for text in self.discharged[before:]:
                if "case split" in str(text):
                    self._log("region split", str(text))
        return ok

    def _logs_cancel(self, canonical):
        ok = super()._logs_cancel(canonical)
        if ok:
            self._log("logarithms compared as exponentials", "exp is injective on ℝ")
        return ok


class TracingSetting(Setting):
    """A `Setting` whose normalisers are `TracingNormaliser`s; the first one made (the gate's
    own, which decides the identity) is kept in `traced`."""

    def normaliser(self) -> Normaliser:
        n = TracingNormaliser(ranges=self.ranges(), integer_arrays=dict(self.integer_arrays))
        if getattr(self, "traced", None) is None:
            self.traced = n
        return n


def summarise_rewrites(rewrites: list, tags: Tags | None = None) -> list[dict]:
    """[{"rule", "count", "detail"}]: each rule once, in the order first applied, its first
    detail (Markdown with LaTeX)."""
    out: dict = {}
    for rule, detail in rewrites:
        if rule not in out:
            out[rule] = {"rule": rule, "count": 0, "detail": tags.markdown(detail) if tags else detail}
        out[rule]["count"] += 1
    return list(out.values())


def shown(expr) -> str | None:
    """LaTeX of an expression, or None when it is too long to be worth showing."""
    text = latex(expr)
    return text if len(text) <= MAX_LATEX else None


def normal_forms(lhs, rhs, setting: Setting) -> dict:
    """Each side's canonical form (the normaliser's own: sums pulled out, deltas sifted, bound
    indices renamed), as LaTeX (None where too long)."""
    out = {}
    for side, e in (("lhs", lhs), ("rhs", rhs)):
        try:
            with tagged_show():
                form = Normaliser(ranges=setting.ranges(), integer_arrays=dict(setting.integer_arrays)).canon(e)
            out[side] = shown(form)
        except Exception:  # a side that cannot be put in normal form alone: none shown
            out[side] = None
    return out


def residual_of(lhs, rhs, setting: Setting) -> str | None:
    """LaTeX of lhs − rhs as the normaliser leaves it (None where too long or not normalisable)."""
    try:
        with tagged_show():
            r = Normaliser(ranges=setting.ranges(), integer_arrays=dict(setting.integer_arrays)).residual(lhs, rhs)
        return shown(r)
    except Exception:  # the residual is a courtesy of the transcript: none where it fails
        return None
