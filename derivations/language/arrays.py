"""A tiny array language on top of SymPy.

Every formula qed proves and prints is written once, in this language:

* an `Array` is a SymPy Symbol that stands for a whole array whose last two axes have a
  declared shape `(rows, cols)` (leading batch/head axes are implicit and broadcast);
  a row vector such as LayerNorm's gamma has shape `(1, n)` and is stored as `(n,)`;
* `+ - * / **`, `exp`, `log`, `sqrt`, `tanh`, `erf`, `Max`, `Heaviside`, `Sigmoid`, `NormalCDF`, `Gaussian` and `Hypot` act
  elementwise, with NumPy broadcasting between `(r, c)`, `(r, 1)` and `(1, c)`;
* a handful of nodes do what elementwise algebra cannot: `MatMul`, `T` (swap the last two
  axes), row reductions over the last axis that keep it (`RowSum`, `RowMax`, `RowMean`),
  `ColSum` and `Contract` (reductions over rows *and* every leading axis, which is what a
  parameter gradient is), `CausalMask`, `Gather`/`OneHot` for integer ids.

Two readers consume the same object:

* `entry(expr, (i, j))` expands it into index form (`IndexedBase`, `Sum`) for the proofs;
* the printers in `codegen/` print it as NumPy or PyTorch code.

So the expression the verifier proves is the very expression the generator prints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import sympy as sp

__all__ = [
    "Array",
    "MatMul",
    "T",
    "RowSum",
    "RowMax",
    "RowMean",
    "ColSum",
    "Contract",
    "CausalMask",
    "Gather",
    "OneHot",
    "Take",
    "Sigmoid",
    "NormalCDF",
    "Gaussian",
    "HalfStep",
    "Hypot",
    "DocumentFunction",
    "DOCUMENT_NODES",
    "document_form",
    "shape_of",
    "entry",
    "index",
    "size",
    "Assign",
    "ArrayError",
    "is_scalar",
]


class ArrayError(ValueError):
    """An expression of the array language is ill-formed (shapes do not line up, ...)."""


def size(name: str) -> sp.Symbol:
    """A symbolic size (n, d_k, ...): a positive integer."""
    return sp.Symbol(name, integer=True, positive=True)


def index(name: str) -> sp.Symbol:
    """An index symbol (i, j, ...): an integer."""
    return sp.Symbol(name, integer=True)


class Array(sp.Symbol):
    """A named array with a declared shape over its last two axes.

    `Array("Q", (m, d_k))`. Unlike a plain Symbol, two Arrays with the same name but
    different shapes are different objects (the shape is part of the hashable content).
    """

    is_real = True
    is_commutative = True

    def __new__(cls, name: str, shape: tuple, integer: bool = False, latex: str = ""):
        if len(shape) != 2:
            raise ArrayError(f"Array {name!r}: shape must have two entries, got {shape!r}")
        obj = sp.Symbol.__xnew__(cls, name, real=True)
        obj._shape = tuple(sp.sympify(s) for s in shape)
        obj._integer_valued = bool(integer)
        obj._latex_name = latex  # how the documents write it (\hat{x})
        return obj

    def __getnewargs_ex__(self):
        return ((self.name, self._shape, self._integer_valued, self._latex_name), {})

    @property
    def latex_name(self) -> str:
        return self._latex_name

    def _hashable_content(self):
        # the LaTeX name too: SymPy's cache would otherwise hand back an expression built with an
        # equal-looking array of another name in print (a spec's x̂ is not the forward's xhat)
        return super()._hashable_content() + self._shape + (self._latex_name,)

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def integer_valued(self) -> bool:
        return self._integer_valued

    @property
    def base(self) -> sp.IndexedBase:
        """The IndexedBase that carries this array's entries in index form."""
        return sp.IndexedBase(self.name, real=True)


class DocumentFunction(sp.Function):
    """An elementwise function of one argument that stands for a formula of the documents,
    with a node of its own so that the printers can call a library function for it. The proofs
    see the formula (`document_form`): the normaliser rewrites the node to it and the numeric
    evaluator evaluates it. Subclasses give the formula, the derivative and the LaTeX name; both
    here are positive for real arguments and equal ½ at 0."""

    nargs = 1
    latex_name = ""

    @classmethod
    def eval(cls, arg):
        if arg.is_zero:
            return sp.S.Half
        return None

    def fdiff(self, argindex=1):
        if argindex != 1:
            raise sp.ArgumentIndexError(self, argindex)
        return self.derivative()

    def derivative(self) -> sp.Expr:  # pragma: no cover - abstract
        raise NotImplementedError

    def document_form(self) -> sp.Expr:  # pragma: no cover - abstract
        raise NotImplementedError

    def _eval_is_real(self):
        return self.args[0].is_real

    def _eval_is_positive(self):
        return True if self.args[0].is_real else None

    def _latex(self, printer) -> str:
        return rf"{self.latex_name}\left({printer._print(self.args[0])}\right)"


class Sigmoid(DocumentFunction):
    """The logistic function σ(u) = 1/(1 + e^{−u}), elementwise.

    Printed as the library's numerically stable form (`scipy.special.expit`, `torch.sigmoid`:
    no overflow of e^{−u} for u ≪ 0). Its derivative is σ(u)(1 − σ(u)).
    """

    latex_name = r"\sigma"

    def derivative(self):
        return self * (1 - self)

    def document_form(self) -> sp.Expr:
        """The document's formula 1/(1 + e^{−u}) (seed B §13), this node alone rewritten."""
        return 1 / (1 + sp.exp(-self.args[0]))

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return 1 / (1 + sp.exp(-arg))


class NormalCDF(DocumentFunction):
    """The standard normal CDF Φ(u) = (1 + erf(u/√2))/2, elementwise (GELU's Φ).

    Printed as one call where the backend has a fast one (NumPy: `_special.ndtr`, whose float32
    erf blocks also do the scaling and the affine map) instead of four array passes. Its
    derivative is the Gaussian G(u)/√(2π) = e^{−u²/2}/√(2π).
    """

    latex_name = r"\Phi"

    def derivative(self):
        return Gaussian(self.args[0]) / sp.sqrt(2 * sp.pi)

    def document_form(self) -> sp.Expr:
        """The document's formula (1 + erf(u/√2))/2 (seed B §12), this node alone rewritten."""
        return (1 + sp.erf(self.args[0] / sp.sqrt(2))) / 2

    def _eval_rewrite_as_erf(self, arg, **kwargs):
        return (1 + sp.erf(arg / sp.sqrt(2))) / 2


class Gaussian(DocumentFunction):
    """The Gaussian G(u) = e^{−u²/2}, elementwise: the normal density without its 1/√(2π)
    (Φ′ = G/√(2π), GELU's backward).

    A node of its own so that SymPy keeps it whole: the printers call the backend's
    `_support.gaussian(u)`, which forms u² once and exponentiates in place (three passes; the
    earlier overflow-free (e^{−|u|/2})^{|u|} took a `pow`, 4.7 ns an element against 0.8 for an
    `exp`). u² overflows to ∞ for |u| > 1.8e19 in float32, where e^{−∞} = 0 is the correctly
    rounded value (e^{−u²/2} underflows from |u| > 14): NumPy's helper expects that overflow and
    does not report it. Even (G(−u) = G(u)), G(0) = 1, and G′(u) = −u G(u).
    """

    @classmethod
    def eval(cls, arg):
        if arg.is_zero:
            return sp.S.One
        if arg.could_extract_minus_sign():
            return cls(-arg)
        return None

    def derivative(self):
        return -self.args[0] * self

    def document_form(self) -> sp.Expr:
        return sp.exp(-(self.args[0] ** 2) / 2)

    def _latex(self, printer, exp=None) -> str:
        body = printer._print(self.document_form())
        return body if exp is None else rf"\left({body}\right)^{{{exp}}}"


class Hypot(DocumentFunction):
    """√(u² + s²), elementwise, s a positive constant or an array expression (a pair's
    magnitude √(x² + z²)): the root of a sum of squares without forming the squares.

    A node of its own because √(u² + c) as written squares u first: u² = ∞ for |u| > 1.8e19 in
    float32 (1.3e154 in float64), where the root itself is about |u| and finite. The printers
    call the library's `hypot` (`np.hypot(u, s)`, `torch.hypot`), which scales before it
    squares. Even in u and s, positive where s ≠ 0, Hypot(0, s) = s for s ≥ 0; ∂/∂u = u/Hypot(u, s) (a ratio in [−1, 1]:
    no overflow either), ∂/∂s = s/Hypot(u, s)."""

    nargs = 2

    @classmethod
    def eval(cls, u, s):
        if u.is_zero and s.is_nonnegative:
            return s
        if u.could_extract_minus_sign():
            return cls(-u, s)
        if s.could_extract_minus_sign() and not s.is_number:
            return cls(u, -s)  # even in s too
        return None

    def fdiff(self, argindex=1):
        if argindex not in (1, 2):
            raise sp.ArgumentIndexError(self, argindex)
        return self.args[argindex - 1] / self

    def derivative(self):
        return self.args[0] / self

    def document_form(self) -> sp.Expr:
        u, s = self.args
        return sp.sqrt(u**2 + s**2)

    def _eval_is_real(self):
        return True if all(a.is_real for a in self.args) else None

    def _eval_is_positive(self):
        return True if self.args[0].is_real and self.args[1].is_positive else None

    def _latex(self, printer, exp=None) -> str:
        body = printer._print(self.document_form())
        return body if exp is None else rf"\left({body}\right)^{{{exp}}}"


class HalfStep(DocumentFunction):
    """The unit step with its midpoint at the jump, H(u) = (1 + sign u)/2: 0, ½, 1 for u < 0,
    u = 0, u > 0 (SymPy's own Heaviside(u), the derivative of max(0, u) that reverse mode takes).

    A node of its own so that the formulas read H(x); printed as (1 + sign u)/2. Its derivative
    is 0 (away from the jump, where it is taken)."""

    latex_name = r"H"

    def derivative(self):
        return sp.Integer(0)

    def document_form(self) -> sp.Expr:
        return (1 + sp.sign(self.args[0])) / 2

    def _eval_is_positive(self):
        return None

    def _eval_is_nonnegative(self):
        return True if self.args[0].is_real else None


DOCUMENT_NODES = (DocumentFunction,)  # nodes that stand for a document formula


def document_form(expr) -> sp.Expr:
    """`expr` with every σ(u) and Φ(u) written as the document's 1/(1 + e^{−u}) and
    (1 + erf(u/√2))/2: what a proof differentiates with SymPy's own rules (so that neither
    node's `fdiff` is taken on trust)."""
    return sp.sympify(expr).replace(lambda e: isinstance(e, DOCUMENT_NODES), lambda e: e.document_form())


class ArrayNode(sp.Function):
    """Base of the non-elementwise nodes. Never evaluates; subclasses define the math."""

    @classmethod
    def eval(cls, *args):
        return None

    def _sympystr(self, printer) -> str:
        # SymPy's printers dispatch on the class name; ours must not be taken for SymPy's own
        # MatMul or Transpose, so each node prints itself as a call.
        return f"{type(self).__name__}({', '.join(printer._print(a) for a in self.args)})"

    def _latex(self, printer) -> str:
        args = ", ".join(printer._print(a) for a in self.args)
        return rf"\operatorname{{{type(self).__name__}}}\left({args}\right)"

    def node_shape(self, shapes: list[tuple]) -> tuple:  # pragma: no cover - abstract
        raise NotImplementedError

    def node_entry(self, idx: tuple, env: dict) -> sp.Expr:  # pragma: no cover - abstract
        raise NotImplementedError


def _fresh(name: str = "k") -> sp.Dummy:
    return sp.Dummy(name, integer=True)


class MatMul(ArrayNode):
    """`A @ B` over the last two axes. Index form: C_ij = Σ_k A_ik B_kj."""

    nargs = 2

    def node_shape(self, shapes):
        (r, k1), (k2, c) = shapes
        if sp.simplify(k1 - k2) != 0:
            raise ArrayError(f"MatMul: inner sizes differ: {shapes[0]} @ {shapes[1]}")
        return (r, c)

    def node_entry(self, idx, env):
        A, B = self.args
        k = _fresh("k")
        inner = shape_of(A)[1]
        return sp.Sum(entry(A, (idx[0], k), env) * entry(B, (k, idx[1]), env), (k, 0, inner - 1))


class T(ArrayNode):
    """Swap the last two axes. Index form: (Aᵀ)_ij = A_ji."""

    nargs = 1

    def node_shape(self, shapes):
        ((r, c),) = shapes
        return (c, r)

    def node_entry(self, idx, env):
        return entry(self.args[0], (idx[1], idx[0]), env)


class RowSum(ArrayNode):
    """Σ over the last axis, kept as a length-1 axis. Index form: Σ_k A_ik."""

    nargs = 1

    def node_shape(self, shapes):
        ((r, c),) = shapes
        return (r, sp.Integer(1))

    def node_entry(self, idx, env):
        A = self.args[0]
        k = _fresh("k")
        return sp.Sum(entry(A, (idx[0], k), env), (k, 0, shape_of(A)[1] - 1))


class RowMean(ArrayNode):
    """Mean over the last axis, kept. Index form: (1/c) Σ_k A_ik."""

    nargs = 1

    def node_shape(self, shapes):
        ((r, c),) = shapes
        return (r, sp.Integer(1))

    def node_entry(self, idx, env):
        A = self.args[0]
        k = _fresh("k")
        cols = shape_of(A)[1]
        return sp.Sum(entry(A, (idx[0], k), env), (k, 0, cols - 1)) / cols


class RowMax(ArrayNode):
    """Max over the last axis, kept.

    In index form it is an arbitrary per-row real number `max(A)[i]`: every identity that uses
    it (softmax shift invariance) must hold for *any* value, which is what the proof shows.
    """

    nargs = 1

    def node_shape(self, shapes):
        ((r, c),) = shapes
        return (r, sp.Integer(1))

    def node_entry(self, idx, env):
        name = "max_" + _label(self.args[0])
        return sp.IndexedBase(name, real=True)[idx[0]]


class ColSum(ArrayNode):
    """Σ over rows and every leading axis: the gradient of a broadcast row vector.

    Shape (1, c); stored as (c,). Index form (per 2-D slice): Σ_k A_kj.
    """

    nargs = 1

    def node_shape(self, shapes):
        ((r, c),) = shapes
        return (sp.Integer(1), c)

    def node_entry(self, idx, env):
        A = self.args[0]
        k = _fresh("r")
        return sp.Sum(entry(A, (k, idx[1]), env), (k, 0, shape_of(A)[0] - 1))


class Contract(ArrayNode):
    """Aᵀ B summed over rows and every leading axis: the gradient of a shared weight matrix.

    Index form (per 2-D slice): C_ij = Σ_r A_ri B_rj.
    """

    nargs = 2

    def node_shape(self, shapes):
        (r1, a), (r2, b) = shapes
        if sp.simplify(r1 - r2) != 0:
            raise ArrayError(f"Contract: row counts differ: {shapes[0]} vs {shapes[1]}")
        return (a, b)

    def node_entry(self, idx, env):
        A, B = self.args
        k = _fresh("r")
        return sp.Sum(entry(A, (k, idx[0]), env) * entry(B, (k, idx[1]), env), (k, 0, shape_of(A)[0] - 1))


class CausalMask(ArrayNode):
    """Entries above the diagonal become −∞ (M_ij = 0 for j ≤ i, −∞ for j > i)."""

    nargs = 1

    def node_shape(self, shapes):
        return shapes[0]

    def node_entry(self, idx, env):
        i, j = idx
        return sp.Piecewise((entry(self.args[0], idx, env), sp.Le(j, i)), (-sp.oo, True))


class Gather(ArrayNode):
    """Rows of a table picked by integer ids: X_ij = E[ids_i, j]. ids has shape (T, 1)."""

    nargs = 2

    def node_shape(self, shapes):
        (V, d), (t, one) = shapes
        return (t, d)

    def node_entry(self, idx, env):
        E, ids = self.args
        return entry(E, (entry(ids, (idx[0], 0), env), idx[1]), env)


class OneHot(ArrayNode):
    """onehot(ids, V): Y_ij = δ(ids_i, j), shape (T, V). ids has shape (T, 1)."""

    nargs = 2

    def node_shape(self, shapes):
        (t, one), _ = shapes
        return (t, self.args[1])

    def node_entry(self, idx, env):
        ids = self.args[0]
        return sp.KroneckerDelta(entry(ids, (idx[0], 0), env), idx[1])


class Take(ArrayNode):
    """One entry per row, picked by integer ids: Y_i = A[i, ids_i], shape (T, 1)."""

    nargs = 2

    def node_shape(self, shapes):
        (t, c), (t2, one) = shapes
        return (t, sp.Integer(1))

    def node_entry(self, idx, env):
        A, ids = self.args
        return entry(A, (idx[0], entry(ids, (idx[0], 0), env)), env)


def _label(expr) -> str:
    """A readable, deterministic name for the argument of an opaque node."""
    if isinstance(expr, sp.Symbol):
        return expr.name
    return "e" + hashlib.sha256(sp.srepr(expr).encode()).hexdigest()[:8]


def is_scalar(expr) -> bool:
    """True if the expression involves no Array (sizes, hyperparameters, numbers)."""
    return not any(isinstance(s, Array) for s in sp.sympify(expr).free_symbols)


def _broadcast(shapes: Iterable[tuple], where) -> tuple:
    shapes = [s for s in shapes if s != ()]
    if not shapes:
        return ()
    rows, cols = sp.Integer(1), sp.Integer(1)
    for r, c in shapes:
        if r != 1:
            if rows != 1 and sp.simplify(rows - r) != 0:
                raise ArrayError(f"shapes do not broadcast in {where}: {shapes}")
            rows = r
        if c != 1:
            if cols != 1 and sp.simplify(cols - c) != 0:
                raise ArrayError(f"shapes do not broadcast in {where}: {shapes}")
            cols = c
    return (rows, cols)


def shape_of(expr) -> tuple:
    """The shape (rows, cols) of an array expression, or () for a scalar."""
    expr = sp.sympify(expr)
    if isinstance(expr, Array):
        return expr.shape
    if isinstance(expr, ArrayNode):
        return expr.node_shape([shape_of(a) for a in expr.args])
    if not expr.args:
        return ()
    return _broadcast([shape_of(a) for a in expr.args], expr)


def entry(expr, idx: tuple, env: dict | None = None) -> sp.Expr:
    """Index form of entry `idx = (i, j)` of an array expression.

    `env` maps an Array to the expression that defines it (an intermediate of a forward
    pass, say): such an Array is expanded through its definition rather than left as data.
    Broadcast axes of size 1 ignore their index.
    """
    env = env or {}
    expr = sp.sympify(expr)
    if isinstance(expr, Array):
        if expr in env:
            return entry(env[expr], idx, env)
        r, c = expr.shape
        i, j = idx
        if r == 1 and c == 1:
            return expr.base[0]
        if r == 1:
            return expr.base[j]
        if c == 1:
            return expr.base[i]
        return expr.base[i, j]
    if isinstance(expr, ArrayNode):
        return expr.node_entry(idx, env)
    if not expr.args or is_scalar(expr):
        return expr
    return expr.func(*[entry(a, idx, env) for a in expr.args])


@dataclass(frozen=True)
class Assign:
    """One line of a forward or backward pass: `target = expr` (only if `when` is true); `note`,
    the why of the line in a few words, is printed above it in the generated code (not compared)."""

    target: Array
    expr: sp.Expr
    when: str | None = None
    note: str = field(default="", compare=False)

    def __post_init__(self):
        got = shape_of(self.expr)
        if got != () and got != self.target.shape:
            # broadcasting to the target is allowed only along size-1 axes of the value
            rows_ok = got[0] == 1 or sp.simplify(got[0] - self.target.shape[0]) == 0
            cols_ok = got[1] == 1 or sp.simplify(got[1] - self.target.shape[1]) == 0
            if not (rows_ok and cols_ok):
                raise ArrayError(f"{self.target.name}: value has shape {got}, target {self.target.shape}")
