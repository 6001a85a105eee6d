"""Reverse mode over the array language: one vector-Jacobian rule per node, and the derivation of
an op's backward from its forward.

For a node Y = f(A, B, …) of a forward pass and its adjoint G = ∂L/∂Y (Y's shape), a rule gives
each operand's share of the operand's adjoint, ∂L/∂A += Σ_ij G_ij ∂Y_ij/∂A:

    Y = A B              dA += G Bᵀ               dB += Aᵀ G
                         (an operand without leading axes — a weight — sums over them: Contract)
    Y = Aᵀ               dA += Gᵀ
    Y = rowsum(A)        dA += G 1ᵀ                (broadcast back along the row)
    Y = mean(A)          dA += G 1ᵀ / c
    Y = Σ_rows A         dA += 1 G                 (broadcast back over rows and leading axes)
    Y = Σ_rows Aᵀ B      dA += B Gᵀ                dB += A G
    Y = rowmax(A)        none: its adjoint is *proved* 0 where it is used (a shift that the
                         result does not depend on: the stable softmax's and log-sum-exp's max)
    Y = mask(A)          dA += [j ≤ i] G, which is G once G is proved 0 above the diagonal
    Y = E[ids]           dE += onehot(ids)ᵀ G
    Y = A[i, ids_i]      dA += G ⊙ onehot(ids)
    Y = f(A, B, …)       dA += reduce_A(G ⊙ ∂f/∂A) for an elementwise f, ∂f/∂A by `sp.diff`;
                         reduce_A sums over the axes A was broadcast along: rowsum for an (r, 1)
                         operand, Σ_rows for a (1, c) one (a bias, a gain)

Integer arrays (ids, targets, masks) and constant inputs (tables) get no adjoint. Each rule is a
claim of derivations/autodiff.py (`ad.matmul`, `ad.rowsum`, …), proved for symbolic sizes
against `sp.diff` of the node's index form, with the very functions below.

`derive` applies the rules to a forward pass, last line first, and returns array-language
assignments:

* the adjoint of every forward array that more than one later line reads is a line of its own,
  `d<name>` (a single use is written in place); repeated costly subexpressions are shared as
  temporaries;
* a forward value that appears in an adjoint is read from the forward (recognised: e^{s−m}/Σe^{s−m}
  is `att`), never recomputed from its parts; the cache is what the backward reads (or, where the
  op declares `saved`, what the backward reads outside it is recomputed from it);
* the row max's adjoint and the causal mask's masked entries are proved 0 by the index
  normaliser, for symbolic sizes and every flag (`Derivation.lemmas`); a derivation that cannot
  prove them is refused, never assumed.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from dataclasses import dataclass, field

import sympy as sp

from .arrays import (
    Array,
    ArrayError,
    ArrayNode,
    Assign,
    CausalMask,
    ColSum,
    Contract,
    Gather,
    HalfStep,
    MatMul,
    OneHot,
    RowMax,
    RowMean,
    RowSum,
    T,
    Take,
    entry,
    index,
    is_scalar,
    shape_of,
)
from .stabilise import hypot_distributed, hypot_reduced, quotients_combined, stabilise, stabilise_assigns

__all__ = [
    "derive_op",
    "Derivation",
    "derive",
    "vjp",
    "elementwise_vjp",
    "reduce_to",
    "transpose",
    "matmul",
    "contract",
    "recognise",
    "derivative",
]


# ---------------------------------------------------------------------------------------------
# Constructors that keep adjoints in the form a person writes them (Tᵀ = identity, scalars out).


def _split_scalar(x):
    """x = c · rest with c scalar (sizes, constants) and rest array-valued."""
    if isinstance(x, sp.Mul):
        c = sp.Mul(*[a for a in x.args if is_scalar(a)])
        rest = sp.Mul(*[a for a in x.args if not is_scalar(a)])
        return c, rest
    return sp.Integer(1), x


def transpose(x):
    """xᵀ, with (Aᵀ)ᵀ = A, (A B)ᵀ = Bᵀ Aᵀ, (Σ_rows Aᵀ B)ᵀ = Σ_rows Bᵀ A, scalars pulled out."""
    c, x = _split_scalar(sp.sympify(x))
    if isinstance(x, T):
        out = x.args[0]
    elif isinstance(x, MatMul):
        out = matmul(transpose(x.args[1]), transpose(x.args[0]))
    elif isinstance(x, Contract):
        out = Contract(x.args[1], x.args[0])
    else:
        out = T(x)
    return c * out


def matmul(a, b):
    """A B with scalar factors of either operand pulled out of the product."""
    ca, a = _split_scalar(sp.sympify(a))
    cb, b = _split_scalar(sp.sympify(b))
    return ca * cb * MatMul(a, b)


def contract(a, b):
    """Σ_rows Aᵀ B with scalar factors pulled out."""
    ca, a = _split_scalar(sp.sympify(a))
    cb, b = _split_scalar(sp.sympify(b))
    return ca * cb * Contract(a, b)


def _pull(x, outside) -> tuple:
    """x = out · inside, `out` the factors for which `outside(factor)` holds."""
    if not isinstance(x, sp.Mul):
        return (x, sp.Integer(1)) if outside(x) else (sp.Integer(1), x)
    out = [a for a in x.args if outside(a)]
    inside = [a for a in x.args if not outside(a)]
    return sp.Mul(*out), sp.Mul(*inside)


def _row_constant(f) -> bool:
    return shape_of(f) == () or shape_of(f)[1] == 1


def _centred(x) -> bool:
    """Σ_j x_ij = 0 identically: x's terms k_i u_ij and their row means −k_i mean_j(u_ij) cancel
    (the chain rule through a variance's inner mean leaves Σ_j 2(mean x − x_ij) = 0, which
    would be printed as a row sum of rounding noise). Exact algebra: each term's row sum is
    k·Σ_j u, a row-constant term's is n·k, and mean(v) is Σ v / n."""
    terms = sp.Add.make_args(sp.expand(x))
    shape = shape_of(x)
    if len(terms) < 2 or shape == () or shape[1] == 1:
        return False
    n = shape[1]
    total = sp.Integer(0)
    for t in terms:
        k, u = _pull(t, _row_constant)
        total += n * k if u == 1 else k * RowSum(u)
    total = total.replace(lambda e: isinstance(e, RowMean), lambda e: RowSum(e.args[0]) / shape_of(e.args[0])[1])
    return sp.expand(total) == 0


def row_sum(x):
    """rowsum(x), with the factors constant along a row (scalars, (r, 1) arrays) outside:
    Σ_j c_i X_ij = c_i Σ_j X_ij; 0 where the row sums cancel (`_centred`)."""
    out, inside = _pull(x, _row_constant)
    if _centred(inside):
        return sp.Integer(0)
    return out * RowSum(inside)


def col_sum(x, batched) -> sp.Expr:
    """Σ over rows and leading axes of x, with the factors constant over them (scalars, (1, c)
    arrays without leading axes) outside."""
    out, inside = _pull(x, lambda f: shape_of(f) == () or (shape_of(f)[0] == 1 and not batched(f)))
    return out * ColSum(inside)


def reduce_to(x, shape: tuple, batched, target_batched: bool):
    """The adjoint contribution `x` summed over the axes its operand was broadcast along: the
    columns for an (r, 1) operand (rowsum), the rows and every leading axis for a (1, c) operand
    without leading axes (Σ_rows). `batched(expr)` says whether an expression has leading axes."""
    got = shape_of(x)
    if got == ():
        raise ArrayError(f"a scalar adjoint {x} for an operand of shape {shape}")
    rows, cols = shape
    if cols == 1 and got[1] != 1:
        x = row_sum(x)
    if rows == 1 and (got[0] != 1 or (batched(x) and not target_batched)):
        x = col_sum(x, batched)
    elif batched(x) and not target_batched:
        raise ArrayError(
            f"an operand of shape {shape} without leading axes broadcast against "
            f"{x}: no node sums over the leading axes alone"
        )
    return x


# ---------------------------------------------------------------------------------------------
# The rules. Each returns [(operand position, contribution)] for the float operands.


def vjp(node, G, batched) -> list[tuple[int, sp.Expr]]:
    """The contributions of the node's adjoint G to its operands' adjoints (every node but
    RowMax and CausalMask, which `derive` treats with a proof, and the elementwise ones:
    `elementwise_vjp`). `batched(expr)`: whether an operand has leading axes."""
    if isinstance(node, MatMul):
        A, B = node.args
        # a weight without leading axes, multiplied into a batched operand, is shared by every
        # slice: its adjoint sums over the leading axes (Contract) instead of a batched product
        dA = contract(transpose(G), transpose(B)) if (batched(B) and not batched(A)) else matmul(G, transpose(B))
        dB = contract(A, G) if (batched(A) and not batched(B)) else matmul(transpose(A), G)
        return [(0, dA), (1, dB)]
    if isinstance(node, T):
        return [(0, transpose(G))]
    if isinstance(node, RowSum):
        return [(0, G)]  # (r, 1) broadcast back along the row
    if isinstance(node, RowMean):
        return [(0, G / shape_of(node.args[0])[1])]
    if isinstance(node, ColSum):
        return [(0, G)]  # (1, c) broadcast back over the rows
    if isinstance(node, Contract):
        A, B = node.args
        return [(0, matmul(B, transpose(G))), (1, matmul(A, G))]
    if isinstance(node, Gather):
        E, ids = node.args
        hot = OneHot(ids, shape_of(E)[0])
        return [(0, contract(hot, G) if not batched(E) else matmul(transpose(hot), G))]
    if isinstance(node, Take):
        A, ids = node.args
        return [(0, G * OneHot(ids, shape_of(A)[1]))]
    if isinstance(node, OneHot):
        return []  # of integer ids: no float operand
    raise ArrayError(f"no vector-Jacobian rule for {type(node).__name__}")


def _leaves(expr) -> list:
    """The operands of an elementwise expression: its maximal array-valued subterms that are not
    elementwise (Arrays and the non-elementwise nodes), in a fixed order."""
    found: dict = {}

    def walk(e):
        if isinstance(e, (Array, ArrayNode)):
            found.setdefault(e, None)
            return
        for a in e.args:
            if not is_scalar(a):
                walk(a)

    walk(sp.sympify(expr))
    return sorted(found, key=sp.default_sort_key)


def _kinks(d):
    """SymPy's derivative of max(0, u) is H(u) with H(0) = ½, of |u| sign(u) with sign(0) = 0:
    the one-sided derivatives' midpoints, the derivative itself where the kinks cancel
    (softplus' max(x, 0) + log(1 + e^{−|x|}) has the derivative ½ at 0). H(u) with H(0) = ½ is the
    `HalfStep` node, (1 + sign u)/2 to the proofs and one `heaviside` call to the printers; a
    derivative of a step (DiracDelta) is 0 away from the step. Whatever is printed at a kink is
    checked, not assumed: the gate admits a kink only where the specification has one and
    requires the printed value there between its one-sided derivatives (proof/kinks.py), so a
    step taken as H(u, 0) here refutes softplus' backward at x = 0 (tests/test_hypotheses.py)."""
    d = d.replace(
        lambda e: isinstance(e, sp.Heaviside) and (len(e.args) == 1 or e.args[1] == sp.S.Half),
        lambda e: HalfStep(e.args[0]),
    )
    return d.replace(lambda e: isinstance(e, sp.DiracDelta), lambda e: sp.Integer(0))


def derivative(expr, leaf):
    """∂expr/∂leaf for an elementwise expression, by `sp.diff` with every operand a real symbol
    (so that |u|′ = sign u, σ′ = σ(1 − σ) and Φ′ = φ by the nodes' own `fdiff`, proved in
    `ad.sigmoid`, `ad.normal_cdf`); with a hypot in it, over one denominator and reduced by
    hypot(u, s)² = u² + s² (`stabilise.hypot_reduced`); terms over powers of one sum over the
    highest where they cancel (`stabilise.quotients_combined`)."""
    leaves = _leaves(expr)
    symbols = {a: sp.Dummy(f"u{n}", real=True) for n, a in enumerate(leaves)}
    # a shift the value does not depend on (e^{x − m}/(e^{x − m} + e^{z − m} + e^{−m}), m = max(0, x, z))
    # is held constant: its steps would cancel, and be printed
    shifts = {m: sp.Dummy(f"m{n}", real=True) for n, m in enumerate(shifts_of(expr))}
    # a branch's clamp (g(max(x, t)) beside the step H(x − t, c) that weighs it) has slope 1 where
    # the weight is not 0, and where it is 0 so is every term it enters: differentiated as x
    clamps = {
        m: sp.Function(f"clamp{n}")(m.args[1] if m.args[0].is_number else m.args[0])
        for n, m in enumerate(clamps_of(expr))
    }
    d = sp.diff(sp.sympify(expr).xreplace(shifts).xreplace(clamps).xreplace(symbols), symbols[leaf])
    held = {c.xreplace(symbols) for c in clamps.values()}
    d = d.replace(lambda e: isinstance(e, sp.Derivative) and e.expr in held, lambda e: sp.S.One)
    d = d.xreplace({c.xreplace(symbols): m.xreplace(symbols) for m, c in clamps.items()})
    # a root's quotient rule reduced by hypot² = u² + s² (1/h − u²/h³ = s²/h³: no cancellation)
    d = hypot_distributed(quotients_combined(hypot_reduced(_kinks(d))))
    return d.xreplace({v: k for k, v in symbols.items()}).xreplace({v: k for k, v in shifts.items()})


def clamps_of(expr) -> list:
    """The clamps max(x, t), min(x, t) (x an array, t a number) that `stability.branch_clamp` put
    inside the functions of a branch weighted by a step at x = t, and nowhere else."""
    from .arrays import Sigmoid
    from .stabilise import _GROWING

    expr = sp.sympify(expr)
    steps = [h.args[0] for h in expr.atoms(sp.Heaviside)]
    found = []
    for m in sorted(expr.atoms(sp.Max, sp.Min), key=sp.default_sort_key):
        if len(m.args) != 2:
            continue
        x, t = (m.args[1], m.args[0]) if m.args[0].is_number else m.args
        if not (isinstance(x, Array) and t.is_number):
            continue
        inside = {f for f in expr.atoms(*_GROWING, Sigmoid) if f.has(m)}
        outside = expr.xreplace({f: sp.Dummy() for f in inside})
        if (
            inside
            and not outside.has(m)
            and any(sp.expand(u).coeff(x) != 0 and sp.expand(u).subs(x, t) == 0 for u in steps)
        ):
            found.append(m)
    return found


def shifts_of(expr) -> list:
    """The max nodes m in the exponents of `expr` that its value does not depend on: ∂expr/∂m = 0
    identically, with m replaced by a free symbol (the shift of `stability.exp_sum_shift`:
    e^{pm}(S e^{−m})^{p} and m + log(S e^{−m}) are S^{p} and log S for every m). Exact: the
    derivative, its exponentials of sums split, cancels to 0 as a rational function of them."""
    expr = sp.sympify(expr)
    found = []
    for m in sorted({a for f in expr.atoms(sp.exp) for a in f.args[0].atoms(sp.Max)}, key=sp.default_sort_key):
        s = sp.Dummy("s", real=True)
        held = expr.xreplace({m: s})
        if held.has(s) and sp.cancel(sp.expand_power_exp(sp.diff(held, s))) == 0:
            found.append(m)
    return found


def elementwise_vjp(expr, G, batched, recognised=None, stable: set | None = None) -> list[tuple[sp.Expr, sp.Expr]]:
    """[(operand, contribution)] for an elementwise expression with adjoint G: G ⊙ ∂expr/∂operand,
    summed over the operand's broadcast axes. `recognised(e)` rewrites forward values by name
    before the sum (so that a row-constant factor is seen as one)."""
    out = []
    for leaf in _leaves(expr):
        d = derivative(expr, leaf)
        if d == 0:
            continue
        if stable is not None:
            # overflow-free before the forward's values are read by name: 1 − tanh²(x) must be
            # seen as a sech² (derivations/language/stabilise.py), not as 1 − y² with y = tanh x
            d, lemmas = stabilise(d)
            stable |= lemmas
        share = _widened(G * d, shape_of(expr), shape_of(leaf), batched)
        if recognised is not None:
            share = recognised(share)
        out.append((leaf, reduce_to(share, shape_of(leaf), batched, batched(leaf))))
    return out


def _widened(share, full: tuple, leaf: tuple, batched):
    """A share whose shape is narrower than the expression's because the adjoint arrived
    broadcast (a rowsum's or row mean's (r, 1) adjoint G reaching x − m with m (r, 1)): each of
    the c columns the expression has contributes G ⊙ ∂, so an (r, 1) operand receives c times
    the share (Σ_{j<c} G_i ∂_i = c G_i ∂_i). Read off the shapes, never assumed: an implicit
    broadcast over rows or leading axes is refused (no rule for it is proved here)."""
    got = shape_of(share)
    if not got or not full or not leaf:
        return share
    if got[1] == 1 and full[1] != 1 and leaf[1] == 1:
        share = share * full[1]  # Σ over the c columns of a row-constant share
    if got[0] == 1 and full[0] != 1 and leaf[0] == 1:
        raise ArrayError(
            f"an adjoint {share} broadcast over the rows of a ({full[0]}, {full[1]}) expression reaches an operand "
            "of one row: sum the rows explicitly (ColSum) before the row-wise node"
        )
    return share


# ---------------------------------------------------------------------------------------------
# Recognising forward values inside an adjoint: the cache is read, not recomputed.


def recognise(expr, names: dict) -> sp.Expr:
    """`expr` with every subexpression that is the value of a forward array replaced by that
    array. A product matches when its factors contain the value's (e^{s−m} R^{−2} is att · R^{−1}
    for att = e^{s−m} R^{−1}), a power when it is a multiple of the value's ((v + ε)^{−3/2} is
    rstd³ for rstd = (v + ε)^{−1/2}), the value's numeric coefficient divided out (x²/(x² + 4) is
    y/2 for y = 2x²/(x² + 4)); exact algebra of commuting factors and powers."""
    products = sorted(
        (
            (a, _powers(v), v.as_coeff_Mul()[0])
            for v, a in names.items()
            if isinstance(v, (sp.Mul, sp.Pow)) and not _square_beside(v)
        ),
        key=lambda p: (-len(p[1]), p[0].name),
    )

    def walk(e):
        if e in names:
            return names[e]
        if isinstance(e, Array) or not e.args:
            return e
        new = e.func(*[walk(a) for a in e.args])
        if new in names:
            return names[new]
        if isinstance(new, (sp.Mul, sp.Pow)):
            new = _match_products(new, products)
        return new

    return walk(sp.sympify(expr))


def _square_beside(v) -> bool:
    """A forward value u^m·f (m ≥ 2, u and f reading arrays, nothing below), not read back by the
    backward: it overflows with u^m (|u| > 1.8e19 in float32 for u²) where f → 0 keeps the
    derivative's terms finite, and y·(1 − σ) of y = x²σ(x) is ∞·0 = NaN where x·σ·(1 − σ)·x,
    recomputed and printed spread, is 0."""
    powers = _powers(v)
    # a bounded function's square (σ(x)² of x²σ(x)², SiLU squared) is no u^m that overflows
    squares = [b for b, p in powers.items() if p.is_Integer and p >= 2 and _arrays(b) and not _bounded(b)]
    if any(p.is_negative for p in powers.values()):  # u²/(u² + 4) and the like: bounded, read back
        return False
    return bool(squares) and any(b not in squares and _arrays(b) for b in powers)


def _bounded(b) -> bool:
    """b is a function with values in a bounded interval whatever its argument (σ, tanh, erf, Φ,
    the Gaussian e^{−u²/2})."""
    from .arrays import Gaussian, NormalCDF, Sigmoid

    return isinstance(b, (Sigmoid, sp.tanh, sp.erf, NormalCDF, Gaussian, sp.sin, sp.cos))


def _powers(e) -> dict:
    """Factors and rational exponents of a product (the numeric coefficient left out: the match
    divides by it)."""
    out: dict = {}
    for f in sp.Mul.make_args(e):
        if f.is_Number:
            continue
        base, power = (f.base, f.exp) if isinstance(f, sp.Pow) else (f, sp.Integer(1))
        out[base] = out.get(base, 0) + power
    return out


def _match_products(e, products):
    coeff = sp.Integer(1)
    factors = []
    for f in sp.Mul.make_args(e):
        if f.is_Number:
            coeff *= f
        else:
            factors.append(f)
    have = _powers(sp.Mul(*factors))
    changed = False
    for name, want, scale in products:
        while True:
            times = None
            for base, power in want.items():
                got = have.get(base, 0)
                if not (power.is_Rational and sp.sympify(got).is_Rational) or got == 0 or got / power < 1:
                    times = None
                    break
                k = sp.floor(got / power)
                times = k if times is None else min(times, k)
            if not times:
                break
            for base, power in want.items():
                have[base] = have[base] - times * power
            have[name] = have.get(name, 0) + times
            coeff /= scale**times  # the value's own number: x²/(x² + 4) is y/2 for y = 2x²/(x² + 4)
            changed = True
    if not changed:
        return e
    return coeff * sp.Mul(*[b**p for b, p in have.items() if p != 0])


def _row_means(expr):
    """rowsum(X)/c → mean(X) where c is X's row length (as the documents write it)."""

    def is_mean(e):
        if not isinstance(e, sp.Mul):
            return False
        sums = [a for a in e.args if isinstance(a, RowSum)]
        return any(sp.Pow(shape_of(s.args[0])[1], -1) in e.args for s in sums)

    def to_mean(e):
        for s in (a for a in e.args if isinstance(a, RowSum)):
            c = sp.Pow(shape_of(s.args[0])[1], -1)
            if c in e.args:
                rest = [a for a in e.args if a is not s and a != c]
                return sp.Mul(*rest) * RowMean(s.args[0])
        return e

    return expr.replace(is_mean, to_mean)


def _factor(expr):
    """Common factors out of sums (f/R − g/R = (f − g)/R), leaving the arguments of functions
    and nodes as they are (the forward's own forms, so that they stay recognisable)."""
    table: dict = {}

    def hide(e):
        if isinstance(e, (ArrayNode, sp.Function)):
            return table.setdefault(e, sp.Dummy(f"h{len(table)}"))
        if not e.args or isinstance(e, Array):
            return e
        return e.func(*[hide(a) for a in e.args])

    out = sp.factor_terms(hide(sp.sympify(expr)))
    return out.xreplace({v: k for k, v in table.items()})


def _tidy(expr, names):
    """Forward values by name, common factors out, then forward values again (a factor pulled
    out may complete one), row sums over c as means."""
    expr = _factor(recognise(expr, names))
    return _row_means(recognise(expr, names))


# ---------------------------------------------------------------------------------------------
# The derivation.


@dataclass
class Derivation:
    """A derived backward: its lines (the array language, backward scope), the cache it reads,
    the gradients it computes, and the facts proved on the way (the row max carries no
    gradient, the masked scores' adjoint is 0 above the diagonal)."""

    backward: list[Assign]
    saved: list[Array]
    grads: list[Array]
    lemmas: list[str] = field(default_factory=list)
    stability: list[str] = field(default_factory=list)  # the stable rewrites applied (claim ids)


@dataclass
class _Line:
    leaf: Array  # the SSA array this line defines (the target itself for its last definition)
    expr: sp.Expr  # its value, reading SSA arrays
    assign: Assign  # the line as written


class _Graph:
    """The forward as a graph over SymPy expressions (structurally equal subexpressions are one
    node): Arrays, the non-elementwise nodes and the elementwise clusters between them, each
    created after its operands (so that the reverse of creation order visits every node after
    all its users)."""

    def __init__(self, roles: dict):
        self.roles = dict(roles)  # input/param Array -> "input" | "param" | "constant" | "integer"
        self.order: list = []
        self.kind: dict = {}  # expr -> "leaf" | "target" | "node" | "cluster"
        self.defn: dict = {}  # target leaf -> its line's expression
        self.batch: dict = {}  # Array -> has leading axes

    def batched(self, e) -> bool:
        e = sp.sympify(e)
        if isinstance(e, Array):
            if e not in self.batch:
                raise ArrayError(f"array {e.name} is read but never defined")
            return self.batch[e]
        if isinstance(e, (ColSum, Contract)):
            return False
        return any(self.batched(a) for a in e.args if not is_scalar(a))

    def visit(self, e):
        e = sp.sympify(e)
        if e in self.kind or is_scalar(e):
            return
        if isinstance(e, Array):
            if e not in self.roles:
                raise ArrayError(f"array {e.name} is read before it is defined")
            self.kind[e] = "leaf"
            self.batch[e] = self.roles[e] != "param"
        elif isinstance(e, ArrayNode):
            for a in e.args:
                self.visit(a)
            self.kind[e] = "node"
        else:
            for a in _leaves(e):
                self.visit(a)
            self.kind[e] = "cluster"
        self.order.append(e)

    def define(self, leaf: Array, expr):
        self.visit(expr)
        self.kind[leaf] = "target"
        self.defn[leaf] = sp.sympify(expr)
        self.batch[leaf] = self.batched(expr) if not is_scalar(expr) else False
        self.roles[leaf] = "target"
        self.order.append(leaf)


def _ssa(forward: list[Assign], taken: set) -> list[_Line]:
    """Every definition its own array: a target defined twice (s = mask(s)) is read by the
    second line under a fresh name for the first value; the last definition keeps the name."""
    count = Counter(a.target for a in forward)
    seen: Counter = Counter()
    current: dict = {}
    lines = []
    for a in forward:
        expr = sp.sympify(a.expr).xreplace(current)
        seen[a.target] += 1
        if seen[a.target] == count[a.target]:
            leaf = a.target
        else:
            name = _fresh_name(f"{a.target.name}_{seen[a.target] - 1}", taken)
            leaf = Array(name, a.target.shape)
        if a.when is not None and a.target not in current:
            raise ArrayError(
                f"the line for {a.target.name} runs only when {a.when}: a flag may only "
                "guard a redefinition (s = mask(s))"
            )
        current[a.target] = leaf
        lines.append(_Line(leaf, expr, a))
    return lines


def _recomputable(lines: list[_Line], saved) -> set:
    """The forward arrays a backward can read with this cache: the cached ones, and those whose
    lines read only readable arrays."""
    readable = set(saved)
    for ln in lines:
        if all(a in readable or a == ln.assign.target for a in _arrays(ln.assign.expr)):
            readable.add(ln.assign.target)
        elif ln.assign.target not in saved:
            readable.discard(ln.assign.target)
    return readable


def _readable(body: list[Assign], lines: list[_Line], readable: set) -> list[Assign]:
    """A forward array recognised in an adjoint but neither cached nor recomputable from the
    cache is written out again by its definition (which may still reach the cache: att's
    e^{s − m}/Σ is read as the cached probabilities where e^{s − m} itself is not)."""
    values = {ln.leaf: ln.expr for ln in lines if ln.leaf == ln.assign.target and ln.leaf not in readable}
    if not values:
        return body
    out = []
    for a in body:
        e = a.expr
        for _ in range(len(values) + 1):
            new = e.xreplace(values)
            if new == e:
                break
            e = new
        out.append(dataclasses.replace(a, expr=e))
    return out


def _fresh_name(base: str, taken: set) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}{k}"
    taken.add(name)
    return name


def derive(
    forward: list[Assign],
    inputs: list[Array],
    outputs: list[Array],
    *,
    params=(),
    constants=(),
    integers=(),
    saved=None,
    flag_sets=(frozenset(),),
    name: str = "op",
    id_ranges: dict | None = None,
) -> Derivation:
    """The backward of `forward` by the rules: one gradient per float input and parameter that
    is not a constant. `saved` None: the cache is what the backward reads; a list: the backward
    reads only these (and the upstream gradients), recomputing any other forward array from them.
    `flag_sets`: the flag combinations the lemmas are proved for; `id_ranges`: each integer
    input's range (name -> (lo, hi)), which the kernel checks and the lemmas may use."""
    from .ops import grad_of

    params, constants, integers = list(params), list(constants), list(integers)
    roles = {a: "input" for a in inputs}
    roles.update({a: "param" for a in params})
    roles.update({a: "constant" for a in constants})
    roles.update({a: "integer" for a in integers + [a for a in inputs if a.integer_valued]})
    taken = {a.name for a in list(roles) + [x.target for x in forward]}
    taken |= {grad_of(a).name for a in list(roles) + list(outputs)}
    lines = _ssa(forward, taken)
    graph = _Graph(roles)
    for ln in lines:
        graph.define(ln.leaf, ln.expr)
    for o in outputs:
        if graph.kind.get(o) != "target":
            raise ArrayError(f"op {name}: output {o.name} is not defined by the forward")
    # forward values by name (the last definition of each array: an overwritten one is not readable)
    names = {
        ln.expr: ln.leaf
        for ln in lines
        if ln.leaf == ln.assign.target and not isinstance(ln.expr, Array) and not is_scalar(ln.expr)
    }
    wrt = [a for a in list(inputs) + params if roles[a] in ("input", "param")]
    state = _Sweep(graph, lines, names, outputs, name, taken)
    state.run()
    lemmas = state.prove_lemmas(flag_sets, id_ranges or {})
    grads, body = state.emit(wrt)
    if saved is not None:
        body = _readable(body, lines, _recomputable(lines, saved))
    upstream = {grad_of(o) for o in outputs}
    backward, cache = _with_cache(body, lines, graph, saved, upstream, name)
    taken = state.taken | {a.target.name for a in backward}
    # the derivative of a stable forward can still overflow (1 − tanh² u cancels, e^{u} − 1):
    # every line in its overflow-free form where a proved rewrite applies, before sharing
    backward, stable = stabilise_assigns(backward)
    stable |= state.stable
    backward = _share(backward, taken | {a.target.name for a in backward})
    return Derivation(backward=backward, saved=cache, grads=grads, lemmas=lemmas, stability=sorted(stable))


class _Sweep:
    """The reverse sweep: adjoints accumulated node by node, last created first."""

    def __init__(self, graph: _Graph, lines: list[_Line], names: dict, outputs, name: str, taken: set):
        from .ops import grad_of

        self.g, self.lines, self.names, self.name = graph, lines, names, name
        self.outputs = list(outputs)
        self.adj: dict = {o: grad_of(o) for o in outputs}  # node -> its adjoint (an expression)
        for o in outputs:
            graph.batch[grad_of(o)] = graph.batch[o]
        self.defs: dict = {}  # placeholder array d<target> -> its adjoint's expression
        self.position: dict = {}  # placeholder -> sweep position (emission order)
        self.shifts: list = []  # (RowMax node, its adjoint): to be proved 0
        self.masks: list = []  # (CausalMask node, its adjoint, flag): 0 above the diagonal
        self.guarded = {ln.leaf: ln.assign.when for ln in lines if ln.assign.when is not None}
        self.origin = {ln.leaf: ln.assign.target for ln in lines}
        self.stable: set = set()  # the stable rewrites applied to the derivatives (claim ids)
        self.taken = taken
        self.touched: set = set()  # nodes that received a contribution (even one that cancelled)

    def recognised(self, e):
        return recognise(e, self.names)

    def constant(self, e) -> bool:
        """No adjoint: built from integer arrays and constant inputs alone (or scalars)."""
        arrays = _arrays(e)
        return all(self.g.roles.get(a) in ("integer", "constant") for a in arrays)

    def add(self, node, share):
        if share == 0 or self.constant(node):
            return
        self.touched.add(node)
        self.adj[node] = self.adj.get(node, sp.Integer(0)) + share

    def run(self):
        for pos, e in enumerate(reversed(self.g.order)):
            G = self.adj.get(e)
            if isinstance(e, RowMax) and e in self.touched and (G is None or G == 0):
                self.shifts.append((e, sp.Integer(0)))  # its contributions cancelled exactly
            if G is None or G == 0:
                continue
            kind = self.g.kind[e]
            if kind == "target":
                P = self._placeholder(e, G, pos)
                child = self.g.defn[e]
                if e in self.guarded:
                    # a flag-guarded redefinition (s = mask(s)): without the flag the adjoint
                    # passes to the previous value unchanged, so with it the rule must do the
                    # same: only the causal mask, once its masked entries' adjoint is proved 0
                    if not isinstance(child, CausalMask):
                        raise ArrayError(
                            f"op {self.name}: the line for {e.name} runs only when "
                            f"{self.guarded[e]}, and is not a causal mask: a guarded line's "
                            "adjoint must be the identity"
                        )
                    self.masks.append((child, P, self.guarded[e]))
                    self.add(child.args[0], P)
                else:
                    self.add(child, P)
            elif kind == "cluster":
                for leaf, share in elementwise_vjp(e, G, self.g.batched, self.recognised, self.stable):
                    self.add(leaf, share)
            elif kind == "node":
                if isinstance(e, RowMax):  # (its adjoint may also cancel to 0 exactly: below)
                    self.shifts.append((e, G))
                elif isinstance(e, CausalMask):
                    self.masks.append((e, G, None))
                    self.add(e.args[0], G)
                else:
                    self._node(e, G)

    def _node(self, e, G):
        if shape_of(G) not in ((), shape_of(e)) and isinstance(e, (MatMul, Contract, T, Gather)):
            raise ArrayError(f"op {self.name}: a broadcast adjoint {G} reaches {type(e).__name__}")
        for k, share in vjp(e, G, self.g.batched):
            operand = e.args[k]
            if is_scalar(operand) or self.constant(operand):
                continue
            share = self.recognised(share)
            self.add(operand, reduce_to(share, shape_of(operand), self.g.batched, self.g.batched(operand)))

    def _placeholder(self, leaf, G, pos):
        """The adjoint of a forward array, as an array of its own (d<name>); an output's adjoint
        is its upstream gradient (plus what later lines add to it)."""
        from .ops import grad_of

        up = grad_of(leaf) if leaf in self.outputs else None
        if up is not None and G == up:
            return up
        target = self.origin.get(leaf, leaf)  # an overwritten value's adjoint: d<its array>
        name = _fresh_name(("d" + target.name) if up is None else f"d{leaf.name}_total", self.taken)
        P = Array(name, leaf.shape)
        self.g.batch[P] = self.g.batch[leaf]
        self.defs[P] = G
        self.position[P] = pos
        return P

    # ------------------------------------------------------------------ lemmas
    def expanded(self, e, when) -> sp.Expr:
        """An adjoint with every placeholder and every forward array written out (the forward
        as it runs with the flags `when`)."""
        values: dict = {}
        for ln in self.lines:
            if ln.assign.when is not None and ln.assign.when not in when:
                values[ln.leaf] = ln.expr.args[0].xreplace(values)  # the line is skipped
                continue
            values[ln.leaf] = ln.expr.xreplace(values)
        defs = dict(self.defs)
        out = sp.sympify(e)
        for _ in range(len(defs) + 1):
            new = out.xreplace(defs)
            if new == out:
                break
            out = new
        return out.xreplace(values)

    def prove_lemmas(self, flag_sets, id_ranges: dict) -> list[str]:
        """The row max's adjoint is 0 and the masked entries' adjoint is 0 above the diagonal,
        for symbolic sizes, each flag combination; refused otherwise."""
        from ..proof.core import prove_index_identity

        out = []
        i, r = index("i"), sp.Symbol("r", integer=True, nonnegative=True)
        for node, G in self.shifts:
            if G == 0:
                out.append(
                    f"the adjoint of {sp.sstr(node)} cancels term by term (the result does not depend on the shift)"
                )
                continue
            for when in flag_sets:
                lhs = entry(self.expanded(G, when), (i, 0))
                rows = shape_of(node)[0]
                setting = _setting(lhs, {i: (0, rows - 1)}, integer_arrays=id_ranges)
                proof = prove_index_identity(lhs, sp.Integer(0), setting, "index normaliser: the row max's adjoint")
                if proof.status != "proved-general":
                    raise ArrayError(
                        f"op {self.name}: the row max {node} carries a gradient here (its "
                        f"adjoint is not proved 0: {proof.status}, {proof.residual}); "
                        "only a shift the result does not depend on is supported"
                    )
            out.append(
                f"the adjoint of {sp.sstr(node)} is 0 (the result does not depend on the shift): "
                f"proved for symbolic sizes{_flags_text(flag_sets)}"
            )
        for node, G, flag in self.masks:
            for when in flag_sets:
                if flag is not None and flag not in when:
                    continue
                lhs = entry(self.expanded(G, when), (i, i + 1 + r))
                rows, cols = shape_of(node)
                setting = _setting(lhs, {i: (0, rows - 1)}, {r: 0})
                proof = prove_index_identity(
                    lhs, sp.Integer(0), setting, "index normaliser: the masked entries' adjoint"
                )
                if proof.status != "proved-general":
                    raise ArrayError(
                        f"op {self.name}: the adjoint of the causal mask's output is not "
                        f"proved 0 above the diagonal ({proof.status}, {proof.residual})"
                    )
            out.append(
                f"the adjoint of {sp.sstr(node)} is 0 above the diagonal (j = i + 1 + r), so "
                f"the mask's rule [j ≤ i] G is G: proved for symbolic sizes"
            )
        return out

    # ------------------------------------------------------------------ emission
    def emit(self, wrt) -> tuple[list, list]:
        """The gradients' lines and the adjoint lines they need: an adjoint read once is
        written in place, the others are lines of their own, each before its first reader."""
        from .ops import grad_of

        grads, finals = [], {}
        for x in wrt:
            G = self.adj.get(x)
            if G is None or G == 0:
                raise ArrayError(f"op {self.name}: {x.name} gets no gradient (the outputs do not depend on it)")
            finals[grad_of(x)] = G
            grads.append(grad_of(x))
        uses: Counter = Counter()
        needed: list = []
        frontier = list(finals.values())
        while frontier:
            e = frontier.pop()
            for P in _arrays(e):
                if P in self.defs:
                    uses[P] += _count(e, P)
                    if P not in needed:
                        needed.append(P)
                        frontier.append(self.defs[P])
        inline = {P for P in needed if uses[P] == 1 or isinstance(self.defs[P], Array)}

        def written(e):
            for _ in range(len(inline) + 1):
                new = e.xreplace({P: self.defs[P] for P in inline})
                if new == e:
                    return e
                e = new
            return e

        named = sorted((P for P in needed if P not in inline), key=lambda P: self.position[P])
        body = [Assign(P, _tidy(written(self.defs[P]), self.names)) for P in named]
        for x in wrt:
            g = grad_of(x)
            value = _tidy(written(finals[g]), self.names)
            if shape_of(value) != x.shape:
                raise ArrayError(
                    f"op {self.name}: the gradient of {x.name} comes out of shape "
                    f"{shape_of(value)}, not {x.shape} (a broadcast the language cannot write)"
                )
            body.append(Assign(g, value))
        return grads, body


def _arrays(e) -> set:
    return {s for s in sp.sympify(e).free_symbols if isinstance(s, Array)}


def _count(e, P) -> int:
    """How many times the array P is read in e (each occurrence in the tree)."""
    e = sp.sympify(e)
    if e == P:
        return 1
    return sum(_count(a, P) for a in e.args)


def _flags_text(flag_sets) -> str:
    flags = sorted({f for w in flag_sets for f in w})
    return f", with and without {', '.join(flags)}" if flags else ""


def _setting(expr, indices: dict, scalars: dict | None = None, integer_arrays: dict | None = None):
    """Where a derivation's lemma is proved and spot-checked: every size symbol at a small
    distinct value, every other scalar at 1/10, the integer inputs in their ranges."""
    from ..proof.core import Setting

    sizes, others = {}, dict(scalars or {})
    free = {s for s in sp.sympify(expr).free_symbols if isinstance(s, sp.Symbol) and not isinstance(s, sp.Dummy)}
    for lo, hi in list(indices.values()) + list((integer_arrays or {}).values()):
        free |= sp.sympify(lo).free_symbols | sp.sympify(hi).free_symbols
    values = itertools.cycle((3, 4, 2, 5))
    for s in sorted(free, key=lambda x: x.name):
        if s in indices or s in others:
            continue
        if s.is_integer and s.is_positive:
            sizes[s] = next(values)
        else:
            others[s] = sp.Rational(1, 10)
    return Setting(sizes=sizes, indices=dict(indices), scalars=others, integer_arrays=dict(integer_arrays or {}))


def _with_cache(body: list[Assign], lines: list[_Line], graph: _Graph, saved, upstream: set, name: str):
    """The cache and the lines that recompute what the backward reads outside it. Automatic
    (`saved` None): every forward array the backward reads is saved. Declared: any other forward
    array it reads is recomputed by the forward's own lines, in their order, from the cache."""
    defined = {a.target for a in body}
    reads: list = []
    for a in body:
        for x in sorted(_arrays(a.expr), key=lambda s: s.name):
            if x not in defined and x not in upstream and x not in reads:
                reads.append(x)
    forward_arrays = [x for x in graph.order if isinstance(x, Array)]
    finals = {ln.leaf for ln in lines if ln.leaf == ln.assign.target}
    for x in reads:
        if x not in graph.kind:
            raise ArrayError(f"op {name}: the derived backward reads {x.name}, which is neither forward nor upstream")
        if graph.kind[x] == "target" and x not in finals:
            raise ArrayError(f"op {name}: the derived backward reads {x.name}, an overwritten value")
    if saved is None:
        cache = [x for x in forward_arrays if x in reads]
        return body, cache
    saved = list(saved)
    need = [x for x in reads if x not in saved]
    recompute: set = set()
    while need:
        x = need.pop()
        if graph.kind.get(x) != "target":
            raise ArrayError(
                f"op {name}: the derived backward reads {x.name}, which is not saved and not computed by the forward"
            )
        if x in recompute:
            continue
        recompute.add(x)
        for ln in lines:
            if ln.assign.target == x:
                need.extend(y for y in _arrays(ln.assign.expr) if y not in saved and y not in recompute and y != x)
    replay = [ln.assign for ln in lines if ln.assign.target in recompute]
    return replay + body, saved


_COSTLY = (sp.exp, sp.log, sp.tanh, sp.erf, sp.Abs, sp.sign)


def _costly(e) -> bool:
    """A subexpression worth computing once: a non-elementwise node, a transcendental
    function, a root."""
    if is_scalar(e) or isinstance(e, Array):
        return False
    if isinstance(e, (ArrayNode, sp.Function)) and not isinstance(e, OneHot):
        return True
    # g^{−k} is not shared as a line of its own (g is): printed (1/g)^k, each 1/g beside a factor
    # of the numerator, where a line 1/g⁴ underflows (h > 1e10 in float32) while x⁴/g⁴ is ~1
    return isinstance(e, sp.Pow) and not (e.exp.is_Integer and (abs(e.exp) <= 2 or e.exp < 0))


def _share(lines: list[Assign], taken: set) -> list[Assign]:
    """Repeated costly subexpressions across the lines become temporaries, each computed once,
    just before the first line that reads it (largest first)."""
    lines = list(lines)
    for _ in range(50):
        counts: Counter = Counter()
        for a in lines:
            for sub in sp.preorder_traversal(a.expr):
                if _costly(sub):
                    counts[sub] += 1
        repeated = [e for e, k in counts.items() if k >= 2 and shape_of(e) != ()]
        if not repeated:
            return lines
        e = max(repeated, key=lambda x: (sp.count_ops(x), sp.default_sort_key(x)))
        head = type(e).__name__.lower()
        tmp = Array(_fresh_name(head + "0", taken), shape_of(e))
        first = next(k for k, a in enumerate(lines) if a.expr.has(e))
        lines = [dataclasses.replace(a, expr=a.expr.xreplace({e: tmp})) for a in lines]
        lines.insert(first, Assign(tmp, e))
    return lines


def derive_op(op, flag_sets) -> Derivation:
    """`derive` over an op's own forward, inputs, outputs, parameters, constants, integer inputs
    (with the ranges the kernel checks) and cache (the op's declared backward, if any, is not
    read)."""
    from .ops import index_bounds

    return derive(
        op.forward,
        op.inputs,
        op.outputs,
        params=op.params,
        constants=op.constant_inputs,
        integers=op.integer_inputs,
        saved=op.saved,
        flag_sets=flag_sets,
        name=op.name,
        id_ranges={a.name: (0, bound - 1) for a, bound in index_bounds(op, op.spec + op.forward)},
    )
