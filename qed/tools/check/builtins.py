"""The catalogue's functions, as `qed check` reads them: each a rule from argument values to a
value of the array language (derivations/language/arrays.py), with the back end's own nodes:
`softmax` is `derivations.softmax.softmax_math` (row-wise), `σ` is `Sigmoid`, `Φ` is
`NormalCDF`, `rowsum` is `RowSum`. Elementwise functions act entry by entry on an array.
`LayerNorm`, `RMSNorm` are the catalogue's (derivations/normalization.py: per row, population
variance, ε inside the root), with the context's γ, β and ε; `RoPE` rotates each row's pairs of
columns (2i, 2i + 1) by the angle pos·ω_i, pos the row (of a matrix; of one row, the context's
pos), ω_i = base^{−2i/d} (derivations/positional.py). The convention's ω and θ are those
frequencies and angles (`_rope_names`)."""

from __future__ import annotations

import sympy as sp

from derivations.language.arrays import ArrayNode, MatMul, NormalCDF, RowSum, Sigmoid, T, entry, shape_of, size
from derivations.positional import frequency, rope_cos_table, rope_rot_table_by_column, rope_sin_table
from derivations.softmax import softmax_math

from .context import (
    CONVENTION_DEFINITIONS,
    DIM_SIZES,
    GAINS,
    IDS,
    INDEX_LETTERS,
    LOSSES,
    MATRICES,
    ROPE_ANGLE,
    ROPE_SCALARS,
    ROPE_VECTORS,
    SCALARS,
    SIZES,
    VECTORS,
    Binding,
    Context,
    Definition,
    FunctionSpec,
    _sz,
    apply_block,
    label_of,
    unknown_size,
)
from .grammar import NotUnderstood


def _elementwise(name, f, meaning):
    def apply(elab, vals, nodes):
        (v,) = vals
        return v.with_expr(f(v.expr))

    return FunctionSpec(name, "builtin", 1, apply, scalar=True, meaning=meaning)


def _softmax(elab, vals, nodes):
    (v,) = vals
    if v.is_scalar:
        raise NotUnderstood("softmax of a scalar (softmax acts on a vector or on each row of a matrix)")
    return v.with_expr(softmax_math(v.expr))


def _rowsum(elab, vals, nodes):
    (v,) = vals
    if v.is_scalar:
        raise NotUnderstood("rowsum of a scalar")
    return v.__class__(RowSum(v.expr), (v.shape[0], sp.Integer(1)))


def _row_parameter(elab, name: str, cols, what: str):
    """The context's per-feature vector `name` (γ, β), its length unified with `cols`."""
    v = elab.lookup(name)
    if v is None or getattr(v, "is_scalar", True) or elab.shape(v)[0] != 1:
        raise NotUnderstood(f"{what} reads the vector {name}, which is not a row vector here")
    elab.same(elab.shape(v)[1], cols, f"{what}'s {name}")
    return v.expr


def _epsilon(elab, what: str):
    v = elab.lookup("ε")
    if v is None or not getattr(v, "is_scalar", False):
        raise NotUnderstood(f"{what} reads ε, which is not a scalar here")
    return v.expr


def _layernorm(elab, vals, nodes):
    (v,) = vals
    if v.is_scalar:
        raise NotUnderstood("LayerNorm of a scalar (it normalises a vector, or each row of a matrix)")
    cols = elab.shape(v)[1]
    x = v.expr
    mu = RowSum(x) / cols
    var = RowSum((x - mu) ** 2) / cols
    gamma, beta = (_row_parameter(elab, g, cols, "LayerNorm") for g in ("γ", "β"))
    return v.with_expr(gamma * (x - mu) / sp.sqrt(var + _epsilon(elab, "LayerNorm")) + beta)


def _rmsnorm(elab, vals, nodes):
    (v,) = vals
    if v.is_scalar:
        raise NotUnderstood("RMSNorm of a scalar (it normalises a vector, or each row of a matrix)")
    cols = elab.shape(v)[1]
    x = v.expr
    rms = sp.sqrt(RowSum(x**2) / cols + _epsilon(elab, "RMSNorm"))
    return v.with_expr(x / rms * _row_parameter(elab, "γ", cols, "RMSNorm"))


class Rope(ArrayNode):
    """RoPE(X): row t (the position), columns (2i, 2i + 1) rotated by t·ω_i, ω_i = base^{−2i/d}:
    X ⊙ cos + (X rot) ⊙ sin with the catalogue's tables (derivations/positional.py). With a
    second argument, every row is at that position: RoPE(x, pos) of one row x."""

    nargs = (1, 2)

    def node_shape(self, shapes):
        return shapes[0]

    def node_entry(self, idx, env):
        x = self.args[0]
        t, c = idx
        at = self.args[1] if len(self.args) == 2 else t  # the position of row t
        d = shape_of(x)[1]
        k = sp.Dummy("k", integer=True)
        turned = sp.Sum(entry(x, (t, k), env) * rope_rot_table_by_column(k, c), (k, 0, d - 1))
        return entry(x, idx, env) * rope_cos_table(at, c, d) + turned * rope_sin_table(at, c, d)

    def _latex(self, printer) -> str:
        return rf"\operatorname{{RoPE}}\left({printer._print(self.args[0])}\right)"


def _rope(elab, vals, nodes):
    (v,) = vals
    if v.is_scalar:
        raise NotUnderstood("RoPE of a scalar (it rotates the pairs of columns of each row)")
    if elab.shape(v)[0] == 1:  # one row: at its position pos, not at row 0
        return v.with_expr(Rope(v.expr, position(elab, "RoPE of one row")))
    return v.with_expr(Rope(v.expr))


def position(elab, what: str):
    """The context's pos: the position of a row read alone (x, not a row of X)."""
    v = elab.lookup("pos")
    if v is None or not getattr(v, "is_scalar", False):
        raise NotUnderstood(f"{what} reads pos, the position of the row, which is not a scalar here")
    return v.expr


class TableRows(ArrayNode):
    """An op's constant input as its table computes it, entry by entry: args (the name, the entry
    formula as a Lambda of (row, col), rows, cols). Where an index is summed (x @ rot sums rot's
    row), each Kronecker delta of the entry is solved for it — δ(c, k + 1) is δ(k, c − 1), the
    same number — the form in which the index normaliser sifts it."""

    nargs = 4

    def node_shape(self, shapes):
        return (self.args[2], self.args[3])

    def node_entry(self, idx, env):
        value = self.args[1](*idx)
        for k in idx:
            if isinstance(k, sp.Dummy):
                value = _solved_for(value, k)
        return value

    def _latex(self, printer) -> str:
        return printer._print(self.args[0])


def _solved_for(expr, k):
    """Each δ(a, b) with a − b = ±k + r written δ(k, ∓r): [a = b] is [k = ∓r]."""

    def solve(delta):
        a, b = delta.args
        diff = sp.expand(a - b)
        coeff = diff.coeff(k)
        rest = sp.expand(diff - coeff * k)
        if coeff in (1, -1) and k not in rest.free_symbols:
            return sp.KroneckerDelta(k, -rest / coeff)
        return delta

    return expr.replace(lambda x: isinstance(x, sp.KroneckerDelta) and k in x.free_symbols, solve)


def install(ctx: Context) -> None:
    fs = [
        _elementwise("σ", Sigmoid, "the logistic function 1/(1 + e^{−u})"),
        _elementwise("sigmoid", Sigmoid, "the logistic function 1/(1 + e^{−u})"),
        _elementwise("Φ", NormalCDF, "the standard normal CDF"),
        _elementwise("ReLU", lambda u: sp.Max(0, u), "max(0, u)"),
        _elementwise("GELU", lambda u: u * NormalCDF(u), "u Φ(u)"),
        _elementwise("SiLU", lambda u: u * Sigmoid(u), "u σ(u)"),
        _elementwise("tanh", sp.tanh, "tanh"),
        _elementwise("exp", sp.exp, "exp"),
        _elementwise("log", sp.log, "log"),
        FunctionSpec("softmax", "builtin", 1, _softmax, meaning="e^{x}/Σ e^{x}, over each row"),
        FunctionSpec("rowsum", "builtin", 1, _rowsum, meaning="the sum of each row (a column)"),
        FunctionSpec("rowsums", "builtin", 1, _rowsum, meaning="the sum of each row (a column)"),
        FunctionSpec("Var", "builtin", 1, None, meaning="the variance (the expectation operator)"),
        FunctionSpec("LayerNorm", "builtin", 1, _layernorm, meaning="γ ⊙ (x − μ)/√(σ² + ε) + β, over each row"),
        FunctionSpec("RMSNorm", "builtin", 1, _rmsnorm, meaning="x/√(mean(x²) + ε) ⊙ γ, over each row"),
        FunctionSpec("RoPE", "builtin", 1, _rope, meaning="the rotary embedding: row t's pairs turned by t·ω_i"),
    ]
    for f in fs:
        ctx.functions[f.name] = f


# ------------------------------------------------------------------------------ built-ins
_DEFAULT: list = []


def default_context() -> Context:
    """The convention table, as bindings, definitions and functions (built once, copied)."""
    if not _DEFAULT:
        _DEFAULT.append(_build_default())
    return _DEFAULT[0].copy()


def _build_default() -> Context:
    ctx = Context()
    for s in SIZES:
        ctx.bind(Binding("size", s, s, meaning="a size"))
    ctx.index_letters.update(INDEX_LETTERS)
    for name, (shape, meaning) in MATRICES.items():
        ctx.bind(Binding("array", name, name, shape=tuple(_sz(s) for s in shape), meaning=meaning))
    for name, meaning in VECTORS.items():
        length = unknown_size("x" if name == "p" else name)  # p = softmax(x): x's length
        ctx.bind(Binding("array", name, label_of(name), shape=(sp.Integer(1), length), meaning=meaning))
    for name, (positive, meaning) in {**SCALARS, **ROPE_SCALARS}.items():
        ctx.bind(Binding("scalar", name, label_of(name), positive=positive, meaning=meaning))
    for name in LOSSES:
        ctx.bind(Binding("loss", name, "L", meaning="the loss"))
    ctx.bind(Binding("ones", "1", "ones", meaning="the all-ones vector"))
    for name, (label, meaning) in DIM_SIZES.items():
        ctx.dims[name] = Binding("size", name, label, meaning=meaning)
    n_ids = ctx.dims["V"].symbol()
    for name, meaning in IDS.items():
        ctx.bind(Binding("ids", name, label_of(name), shape=(size("n"), sp.Integer(1)), meaning=meaning, bound=n_ids))
    for name in GAINS:
        ctx.values[name].gain = True
    # the catalogue's definitions of the attention intermediates and the probabilities
    q, k, v = (ctx.value(n).array() for n in ("Q", "K", "V"))
    s, a = ctx.value("S").array(), ctx.value("A").array()
    ctx.define("S", Definition("array", MatMul(q, T(k)) / sp.sqrt(size("d_k")), source=r"S = QK^T/\sqrt{d_k}"))
    ctx.define("A", Definition("array", softmax_math(s), source=r"A = \mathrm{softmax}(S)"))
    ctx.define("O", Definition("array", MatMul(a, v), source="O = AV"))
    x = ctx.value("x").array()
    ctx.define("p", Definition("array", softmax_math(x), source=r"p = \mathrm{softmax}(x)"))
    _rope_names(ctx)
    install(ctx)
    _convention_definitions(ctx)
    return ctx


def _rope_names(ctx: Context) -> None:
    """ω and θ, one entry per pair (2i, 2i + 1) of a row, i counted from 0 (the pairs' own count):
    ω_i = base^{−2i/d} with d = 2 × the number of pairs (derivations/positional.py's `frequency`,
    the rope op's tables'), θ_i = pos·ω_i (seed B §15); θ is written bare for θ_i."""
    pairs = unknown_size("ω")  # the number of pairs: the first use fixes it
    k = sp.Symbol("i", integer=True)  # the pair (0-based, as the definitions' variables are)
    for name, meaning in ROPE_VECTORS.items():
        bare = ROPE_ANGLE[1] if name == ROPE_ANGLE[0] else ""
        ctx.bind(Binding("array", name, label_of(name), shape=(sp.Integer(1), pairs), meaning=meaning, bare=bare))
    omega = ctx.value("ω").array()
    pos, base = ctx.value("pos").symbol(), ctx.value("base").symbol()
    ctx.define("ω", Definition("entries", frequency(k, 2 * pairs, base), (k,), source=r"\omega_i = base^{-2i/d}"))
    ctx.define("θ", Definition("entries", pos * entry(omega, (0, k)), (k,), source=r"\theta_i = pos \cdot \omega_i"))


def _convention_definitions(ctx: Context) -> None:
    """The catalogue's definitions stated in LaTeX (context.CONVENTION_DEFINITIONS), read by the
    checker itself into `ctx`, marked as the convention's (each must read as a definition)."""
    from .verdict import Checker

    checker = Checker(ctx, "<convention>")
    for text in CONVENTION_DEFINITIONS:
        (v,) = checker.formula(text, 0, True)
        if v.verdict != "definition":  # pragma: no cover - the table is the project's own
            raise RuntimeError(f"the convention's definition {text!r} reads as {v.verdict}: {v.reason}")
        b = ctx.value(v.defines)
        b.origin, b.meaning = "convention", f"the catalogue's {v.defines} (derivations/optim.py)"
        d = ctx.defs[b.label]
        ctx.defs[b.label] = Definition(d.kind, d.expr, d.vars, "convention", text)
    ctx.mentioned.clear()


def make_context(context=None) -> tuple[Context, list[str]]:
    """The convention table plus `context`: None, a Context (copied), a `qed` block's text, or a
    dict {name: "matrix n x d" | "vector d" | "size" | "index" | "scalar" | "function"}.
    Returns the context and the problems of the declarations."""
    ctx = default_context()
    problems: list[str] = []
    if context is None:
        return ctx, problems
    if isinstance(context, Context):
        return context.copy(), problems
    if isinstance(context, dict):
        lines = []
        for name, decl in context.items():
            kind, _, rest = str(decl).partition(" ")
            lines.append(f"{kind} {name}" + (f": {rest}" if kind in ("matrix", "vector") else ""))
        context = "\n".join(lines)
    problems += apply_block(ctx, str(context), origin="context")
    return ctx, problems
