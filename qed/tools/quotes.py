"""The specifications tied to the sources: each op's quoted formula, checked against its `spec`.

An op's specification (`Op.spec`) is what every claim of the op proves the printed code equal
to; it is the one thing the claims take on trust. Where the sources state the op's formula, the
op quotes it verbatim (`Op.quotes`: document and section, the function name as written there,
the LaTeX as printed there), and this module reads each quote with `qed check`'s front end
(qed/tools/check: its own parser, no sympify of the text) in a context where the quoted name is
bound to the op's specification, and nothing else of the catalogue's meaning for that name:

    GELU(x) = x\\Phi(x)        GELU := the gelu op's spec (x(1 + erf(x/√2))/2, entry by entry)

The step is then one identity of the back end (the index normaliser, symbolic sizes): proved
means the sources' right-hand side is the op's specification; anything else (refuted with a
counterexample, not understood) fails `qed prove`.  Where the sources state the op as a value
(`Logits = HW_{vocab}+b`), the quote names the arrays it is computed from (`Quote.args`), its
lines are read as the document's definitions, and one statement is added after them:

    Logits = HW_{vocab}+b        (the sources' line: defines Logits)
    \\mathrm{Spec}(H) = Logits    Spec := the linear op's spec, weight read as W_{vocab}^T, bias as b

which is decided like any other step; the sources' lines are never edited. An op given constant
inputs (RoPE's tables cos, sin, rot) is read with them as the table printed beside it computes
them (the registry's table whose `file` is the op's), their rows the positions: an argument of one
row (the sources' x) is at the check context's `pos`.  So a specification
that is not the sources' formula (squared ReLU halved, soft-capping without its inner 1/c, a
causal mask that hides the keys before the query) cannot stay proved unless the op quotes no
formula: `unquoted()` lists those ops, and docs/trusted.md names them.

Where the seed documents are at hand (`docs.find_seeds`), each quote must occur in its document
verbatim (`verbatim`), so a quote cannot drift from its source either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

__all__ = ["QuoteResult", "check_op", "check_all", "unquoted", "verbatim", "bound_context"]


@dataclass
class QuoteResult:
    op: str
    where: str
    latex: str
    verdicts: list = field(default_factory=list)  # (verdict, reason) per step
    error: str = ""

    @property
    def ok(self) -> bool:
        """The quote's last line (the op's formula) proved; the lines before it, if any, only
        define what it reads (μ, σ², RMS) or are proved."""
        if self.error or not self.verdicts or self.verdicts[-1][0] != "proved":
            return False
        return all(v in ("proved", "definition") and not r.startswith("redefines") for v, r in self.verdicts[:-1])

    def __str__(self) -> str:
        head = f"{self.op}: {self.where} `{self.latex}`"
        if self.error:
            return f"{head}: {self.error}"
        return head + ": " + "; ".join(f"{v} ({r})" for v, r in self.verdicts)


# an op's parameters and options by the names the sources give them (the check context's own)
_SOURCE_NAMES = {"gamma": "γ", "beta": "β", "eps": "ε"}


SPEC = "Spec"  # the op's specification, as a function, beside a quote that states a value


def _spec_function(op, name: str, spec=None, params=(), when: str = ""):
    """The op's specification as a function of its one input, for `qed check`'s elaborator:
    entry by entry for a scalar argument (an elementwise op); for an array argument, the spec
    with the input replaced by the argument, its sizes by the argument's, and each parameter by
    the quote's reading of it in the sources' names (`params`: W₁ᵀ for a weight stored out × in),
    else each parameter and option by the context's value of the same meaning (γ, β, ε)."""
    from derivations.language.arrays import entry, index, shape_of
    from derivations.proof.obligations import close

    from .check.builtins import _epsilon, _row_parameter
    from .check.elaborate import Val
    from .check.grammar import NotUnderstood
    from .check.parser import parse

    if len(op.outputs) != 1:
        raise ValueError(f"{op.name}: a quote binds a function of one output")
    x, (y,) = op.inputs[0], op.outputs
    value = sp.sympify(close(op.spec if spec is None else spec, when=frozenset({when} - {""}))[y])
    elementwise = _elementwise(op) and shape_of(value) == shape_of(x)
    i, j = index("i"), index("j")
    scalar_form, x_ij = entry(value, (i, j)), entry(x, (i, j))
    cols = shape_of(x)[1]
    written = dict(params)
    unknown = [p.name for p in op.params if written and p.name not in written]
    if unknown:
        raise ValueError(f"{op.name}: the quote writes no {', '.join(unknown)}")

    def apply(elab, vals, nodes):
        v = vals[0]
        if v.is_scalar and len(vals) == 1:
            if not elementwise:
                raise NotUnderstood(f"{name} of a scalar (the {op.name} op acts on each row)")
            return v.with_expr(scalar_form.xreplace({x_ij: v.expr}))
        if any(a.is_scalar for a in vals):
            raise NotUnderstood(f"{name} of a scalar (the {op.name} op reads arrays)")
        n = elab.shape(v)[1]
        sub, sizes = {}, {cols: n}

        def unify(arr, shape, what):  # the op's size symbols read off the sources' shapes
            if len(shape_of(arr)) != len(shape):
                raise NotUnderstood(
                    f"{what}: {len(shape)} axes where the {op.name} op's {arr.name} has {len(shape_of(arr))}"
                )
            for s, t in zip(shape_of(arr), shape):
                if isinstance(s, sp.Symbol):
                    sizes[s] = elab.same(sizes[s], t, what) if s in sizes else t
                else:
                    elab.same(s, t, what)

        for arr, a in zip(_arguments(op), vals):  # the arguments in the op's order (Q, K, V)
            unify(arr, elab.shape(a), name)
            sub[arr] = a.expr
        for arr in op.constant_inputs:  # RoPE's cos, sin, rot: as the op's table computes them
            sub[arr] = _constant_table(op, arr, elab, sizes, name)
        for p in op.params:
            if written:
                w = elab.value(parse(written[p.name]))
                unify(p, elab.shape(w), f"{name}'s {written[p.name]}")
                sub[p] = w.expr
            else:
                sub[p] = _row_parameter(elab, _SOURCE_NAMES.get(p.name, p.name), n, name)
        for o in op.options:
            if o.symbol is not None:
                if _SOURCE_NAMES.get(o.name) != "ε":
                    raise NotUnderstood(f"{name}: the {op.name} op's option {o.name} has no name in the sources")
                sub[o.symbol] = _epsilon(elab, name)
        # the result has the op's output shape in the arguments' sizes (Attention(Q, K, V): n × d_v)
        out_shape = tuple(elab.resolve(sp.sympify(t).xreplace(sizes)) for t in shape_of(y))
        return Val(value.xreplace(sub).xreplace(sizes), out_shape)

    return apply


def _arguments(op) -> list:
    """The op's inputs a quote passes: all but the constant ones (tables the op is given)."""
    return [a for a in op.inputs if a not in op.constant_inputs]


def _constant_table(op, arr, elab, sizes: dict, what: str):
    """The op's constant input `arr` as the table printed beside the op computes it (the registry's
    table whose file is the op's, its array of that name): its printed entry formula, in the
    arguments' sizes. A table's rows that are the op's rows are positions: for an argument of one
    row (the sources' x), the row is at the context's pos."""
    from derivations import registry
    from derivations.language.arrays import shape_of

    from .check.builtins import TableRows, position
    from .check.grammar import NotUnderstood

    found = [a for t in registry.tables() if t.file == op.name for a in t.arrays if a.name == arr.name]
    if len(found) != 1 or tuple(found[0].shape) != tuple(shape_of(arr)):
        raise NotUnderstood(f"{what}: no table beside the {op.name} op computes its constant input {arr.name}")
    (table,) = found
    row, col = table.index
    formula = table.entry
    if shape_of(arr)[0] == shape_of(op.inputs[0])[0] and sizes.get(shape_of(arr)[0]) == 1:
        formula = formula.xreplace({row: position(elab, what)})
    shape = tuple(elab.resolve(sp.sympify(s).xreplace(sizes)) for s in shape_of(arr))
    return TableRows(sp.Symbol(arr.name), sp.Lambda((row, col), formula.xreplace(sizes)), *shape)


def _elementwise(op) -> bool:
    """An op of one input, no parameters and no options acts entry by entry (a scalar's function
    to the check); any other reads arrays (attention_scores(Q, K) of two matrices)."""
    return len(op.inputs) == 1 and not op.params and not op.options


def bound_context(op, name: str, spec=None, params=(), when: str = ""):
    """`qed check`'s default context with `name` bound to `op`'s specification (or `spec`; with
    the flag `when` on), its parameters read as the quote writes them (`params`)."""
    from .check.builtins import default_context
    from .check.context import FunctionSpec

    ctx = default_context()
    ctx.functions[name] = FunctionSpec(
        name,
        "builtin",
        len(_arguments(op)),
        _spec_function(op, name, spec, params, when),
        scalar=_elementwise(op),
        reads_ids=bool(op.integer_inputs),
        meaning=f"the {op.name} op's specification",
    )
    return ctx


def check_op(op, spec=None) -> list[QuoteResult]:
    """Each quote of `op` read with its name bound to the op's specification (or to `spec`, a
    replacement: what the tests use to show that a wrong specification is refuted)."""
    from .check import check_text

    out = []
    for q in op.quotes:
        res = QuoteResult(op.name, q.where, q.latex)
        try:
            verdicts = check_text(_document(q), bound_context(op, SPEC if q.args else q.name, spec, q.params, q.when))
            res.verdicts = [(v.verdict, v.reason) for v in verdicts]
        except Exception as exc:  # noqa: BLE001 - a quote that cannot be read is a failure
            res.error = f"{type(exc).__name__}: {exc}"
        out.append(res)
    return out


def _document(q) -> str:
    """The quote as a document, one display a line; after a value's lines, the statement that the
    op's specification of the arguments is that value."""
    lines = [ln for ln in q.latex.splitlines() if ln.strip()]
    if q.args:
        lines.append(f"\\mathrm{{{SPEC}}}({', '.join(q.args)}) = {q.name}")
    return "\n\n".join(f"$${ln}$$" for ln in lines)


def check_all(names=None) -> list[QuoteResult]:
    from derivations import registry

    return [r for op in registry.ops() if names is None or op.name in names for r in check_op(op)]


def unquoted() -> list[str]:
    """The ops whose specification quotes no formula of the sources."""
    from derivations import registry

    return [op.name for op in registry.ops() if not op.quotes]


def verbatim(seeds, names: dict) -> list[str]:
    """The quotes whose lines do not each occur in their document as printed (`seeds`: the folder of the
    source documents; `names`: file name -> (letter, title), `docs.SEEDS`)."""
    from derivations import registry

    texts = {letter: (seeds / name).read_text() for name, (letter, _) in names.items() if (seeds / name).exists()}
    missing = []
    for op in registry.ops():
        for q in op.quotes:
            letter = q.where.split()[1] if q.where.startswith("seed ") else ""
            lines = [ln for ln in q.latex.splitlines() if ln.strip()]  # one formula a line, as printed
            if letter in texts and not all(ln in texts[letter] for ln in lines):
                missing.append(f"{op.name}: {q.where} `{q.latex}`")
    return missing
