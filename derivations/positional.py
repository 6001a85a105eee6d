"""Positions: rotary embeddings (RoPE) and sine-cosine positional encodings.

Seed B §15: for dimensions (2i, 2i+1), x' = R(θ) x with R(θ) = [[cos θ, −sin θ], [sin θ, cos θ]]
and θ = pos·ω_i; RoPE is applied to queries and keys. Seed B does not define ω_i; qed uses the
RoFormer choice ω_i = base^{−2i/d} (base = 10000), the frequencies of seed A §5.
Seed A §5: PE(pos, 2i) = sin(pos/10000^{2i/d}), PE(pos, 2i+1) = cos(pos/10000^{2i/d}).

Per-pair facts (norm, relative position, backward = rotation by −θ, PE(pos+k) = M(k)PE(pos))
are proved for symbolic angles, positions and frequencies by one exact rewrite: expand the
trigonometric functions of sums, hide sin a, cos a behind symbols s_a, c_a, and reduce the
polynomial modulo s_a² + c_a² − 1 (a Gröbner basis: the remainder is 0 iff the identity holds
for independent angles). The `rope` op is written in the array language as

    y = x ⊙ cos + (x @ rot) ⊙ sin,        dx = dy ⊙ cos + (dy ⊙ sin) @ rotᵀ,

with tables `cos`, `sin` (T × d, each pair's frequency repeated) and the block-diagonal pair
rotation `rot` (d × d, blocks [[0, 1], [−1, 0]], so (x @ rot)_{2i} = −x_{2i+1} and
(x @ rot)_{2i+1} = x_{2i}). The VJP is proved for arbitrary tables; with the table formulas
below, the op is proved to be seed B's rotation by θ, and its backward the rotation by −θ.
"""

from __future__ import annotations

import random

import sympy as sp

from .language.arrays import Array, Assign, MatMul, T, entry, index, size
from .language.ops import Op, Option, Quote, Table, TableArray, grad_of
from .proof import numeric
from .proof.core import Claim, Mutant, Proof, Setting, index_claim, prove_index_identity, refute_identity

# ------------------------------------------------------------------------- the formulas
BASE = sp.Symbol("base", positive=True)  # 10000 in both sources' convention


def rotation(theta) -> sp.Matrix:
    """Seed B §15: the 2 × 2 rotation by θ applied to (x_{2i}, x_{2i+1})."""
    return sp.Matrix([[sp.cos(theta), -sp.sin(theta)], [sp.sin(theta), sp.cos(theta)]])


def frequency(i, d, base=BASE):
    """ω_i = base^{−2i/d}: seed A §5's pos/10000^{2i/d} is pos·ω_i."""
    return base ** (-2 * i / d)


def _even(c):
    return (1 + (-1) ** c) / 2


def _odd(c):
    return (1 - (-1) ** c) / 2


def pair_index(c):
    """i for column c ∈ {2i, 2i + 1}: floor(c/2), written (c − odd(c))/2 so that it stays a
    polynomial in c and (−1)^c (the numeric evaluator and the printers need no floor)."""
    return (c - _odd(c)) / 2


def sinusoidal_table(pos, col, d, base=BASE):
    """PE[pos, col]: sin(pos·ω_i) in column 2i, cos(pos·ω_i) in column 2i + 1 (seed A §5)."""
    w = frequency(pair_index(col), d, base)
    return _even(col) * sp.sin(pos * w) + _odd(col) * sp.cos(pos * w)


def rope_cos_table(t, col, d, base=BASE):
    """cos[t, col] = cos(t·ω_i) for col ∈ {2i, 2i + 1}: each pair's angle repeated."""
    return sp.cos(t * frequency(pair_index(col), d, base))


def rope_sin_table(t, col, d, base=BASE):
    """sin[t, col] = sin(t·ω_i) for col ∈ {2i, 2i + 1}."""
    return sp.sin(t * frequency(pair_index(col), d, base))


def rope_rot_table(row, col):
    """rot[row, col]: 1 at (2i, 2i+1), −1 at (2i+1, 2i), 0 elsewhere — blockdiag([[0, 1], [−1, 0]]).
    Row form (the row's parity decides): rot[j, k] = even(j)·δ(k, j+1) − odd(j)·δ(k, j−1)."""
    return _even(row) * sp.KroneckerDelta(col, row + 1) - _odd(row) * sp.KroneckerDelta(col, row - 1)


def rope_rot_table_by_column(row, col):
    """The same matrix in column form (the column's parity decides):
    rot[j, k] = odd(k)·δ(j, k−1) − even(k)·δ(j, k+1). Used where the row index is summed, so
    that the normaliser can sift the delta; `rope.pairs` checks that both forms agree."""
    return _odd(col) * sp.KroneckerDelta(row, col - 1) - _even(col) * sp.KroneckerDelta(row, col + 1)


# --------------------------------------------------------------------------------- the op
n_tok, d = size("T"), size("d")
X = Array("x", (n_tok, d))
COS, SIN = Array("cos", (n_tok, d), latex="C"), Array("sin", (n_tok, d), latex="S")
ROT = Array("rot", (d, d), latex="R")
Y = Array("y", (n_tok, d))
dY, dX = grad_of(Y), grad_of(X)


def rope_forward(x, cos, sin, rot):
    return x * cos + MatMul(x, rot) * sin


def rope_backward(dy, cos, sin, rot):
    """dx = dy ⊙ cos + (dy ⊙ sin) @ rotᵀ: the transpose Jacobian (rotation by −θ per pair)."""
    return dy * cos + MatMul(dy * sin, T(rot))


# Seed B §15 per pair, in a scope of its own: (x'_{2i}, x'_{2i+1}) = R(θ)(x_{2i}, x_{2i+1}) is
# x' = cos θ · x + sin θ · x^⊥ with x^⊥ = (−x_{2i+1}, x_{2i}) the pair turned by 90°, i.e.
# x^⊥ = x rot for the table rot = blockdiag([[0, 1], [−1, 0]]); cos θ, sin θ per column are the
# tables cos, sin (their entries are proved by rope.pairs and the tables' own claims).
XPERP_S = Array("xperp", (n_tok, d), latex=r"x^{\perp}")
ROPE_SPEC = [
    Assign(XPERP_S, MatMul(X, ROT)),  # x^⊥_{2i} = −x_{2i+1}, x^⊥_{2i+1} = x_{2i}
    Assign(Y, COS * X + SIN * XPERP_S),  # x' = cos θ x + sin θ x^⊥ = R(θ) x per pair
]

# Seed B §15 as printed: the pair (2i, 2i+1) of the row x turned by θ, and θ = pos·ω_i. `qed prove`
# reads these lines with `qed check` (x' defined by its pairs, θ restated: the catalogue's θ_i =
# pos·ω_i, ω_i = base^{−2i/d}, which seed B leaves open) and decides Spec(x) = x', Spec the op's
# spec with its tables as rope_tables computes them, the row x at position pos
ROPE_QUOTE = Quote(
    "seed B §15",
    "x'",
    r"\begin{bmatrix} x'_{2i}\\ x'_{2i+1} \end{bmatrix} = \begin{bmatrix} \cos\theta & -\sin\theta\\ "
    r"\sin\theta & \cos\theta \end{bmatrix} \begin{bmatrix} x_{2i}\\ x_{2i+1} \end{bmatrix}"
    "\n"
    r"\theta = pos \cdot \omega_i",
    args=("x",),
)

ROPE = Op(
    name="rope",
    module=__name__,
    title="Rotary position embedding (interleaved pairs)",
    spec=ROPE_SPEC,
    source="seed B §15",
    quotes=(ROPE_QUOTE,),
    mistakes={
        "tables-swapped": ("cos and sin swapped: x ⊙ S + (x R) ⊙ C", "forward", "y", X * SIN + MatMul(X, ROT) * COS),
        "forward-transposed": ("x Rᵀ instead of x R: rotates by −θ", "forward", "y", X * COS + MatMul(X, T(ROT)) * SIN),
        "no-transpose": (
            "dx = dy ⊙ C + (dy ⊙ S) R: R not transposed (rotates by +θ)",
            "backward",
            "dx",
            dY * COS + MatMul(dY * SIN, ROT),
        ),
        "sin-outside": (
            "dx = dy ⊙ C + (dy Rᵀ) ⊙ S: equal only when S is constant on pairs",
            "backward",
            "dx",
            dY * COS + MatMul(dY, T(ROT)) * SIN,
        ),
        "cos-dropped": ("dx = (dy ⊙ S) Rᵀ: the dy ⊙ C term dropped", "backward", "dx", MatMul(dY * SIN, T(ROT))),
    },
    check={"sizes": {"T": 2, "d": 4}},
    claims=["rope.forward", "rope.vjp", "rope.pairs", "rope.backward", "rope.norm", "rope.relative"],
    inputs=[X, COS, SIN, ROT],
    constant_inputs=[COS, SIN, ROT],
    forward=[Assign(Y, rope_forward(X, COS, SIN, ROT))],
    outputs=[Y],
    saved=[COS, SIN, ROT],
    backward=[Assign(dX, rope_backward(dY, COS, SIN, ROT))],
    grads=[dX],
    broadcast=True,  # the tables broadcast against x's leading (batch, head) axes
    cache_doc="the tables cos, sin, rot (constant inputs: no gradient is computed for them; they are "
    "expected expanded to x's leading axes, broadcast views will do). The backward does not need x.",
)
OPS = [ROPE]

# -------------------------------------------------------------- trigonometric decision
theta, omega = sp.Symbol("theta", real=True), sp.Symbol("omega", real=True)
pos_m, pos_n = sp.Symbol("m", real=True), sp.Symbol("n", real=True)
pos, shift = sp.Symbol("pos", real=True), sp.Symbol("k", real=True)
i = index("i")
qv, kv, xv = (sp.IndexedBase(s, real=True) for s in ("q", "k", "x"))


def _pair(v):
    return sp.Matrix([v[2 * i], v[2 * i + 1]])


def trig_residual(lhs, rhs) -> sp.Expr:
    """lhs − rhs reduced exactly: expand trig functions of sums, write s_a, c_a for sin a, cos a,
    reduce modulo s_a² + c_a² − 1 for every angle a. 0 iff the identity holds for all real values
    (independent angles). Raises if the result has free symbols the claim did not have."""
    diff = sp.sympify(lhs) - sp.sympify(rhs)
    e = sp.expand(diff, trig=True)
    angles = sorted({f.args[0] for f in e.atoms(sp.sin, sp.cos)}, key=sp.default_sort_key)
    table, relations = {}, []
    for n_, a in enumerate(angles):
        s_a, c_a = sp.Symbol(f"_s{n_}"), sp.Symbol(f"_c{n_}")
        table[sp.sin(a)], table[sp.cos(a)] = s_a, c_a
        relations.append((s_a, s_a**2 + c_a**2 - 1))
    e = e.xreplace(table)
    if e.has(sp.sin, sp.cos, sp.tan, sp.exp):
        raise ValueError(f"trig_residual: leftover transcendental atoms in {e}")
    for s_a, rel in relations:
        e = sp.rem(sp.expand(e), rel, s_a)
    e = sp.expand(e)
    if e == 0:
        return sp.Integer(0)
    back = e.xreplace({v: k for k, v in table.items()})
    leaked = back.free_symbols - diff.free_symbols
    if leaked:
        raise ValueError(f"trig_residual: leaked symbols {leaked}")
    return back


def _draw(symbols, seed):
    rng = random.Random(seed)
    return {s: sp.Rational(rng.choice([-1, 1]) * rng.randint(1, 24), 8) for s in symbols}


_FIXED = {i: 1}  # the pair index at which numeric checks read x_{2i}, x_{2i+1}


def numeric_cx(lhs, rhs, symbols, tries: int = 8, fixed=None) -> dict | None:
    """A counterexample to lhs = rhs (scalars or matrices) at random rational values of
    `symbols` and the `fixed` values (Indexed entries are drawn by the numeric evaluator)."""
    fixed = _FIXED if fixed is None else fixed
    lhs_l = list(lhs) if isinstance(lhs, sp.MatrixBase) else [lhs]
    rhs_l = list(rhs) if isinstance(rhs, sp.MatrixBase) else [rhs]
    for seed in range(tries):
        point = numeric.Point(symbols={**_draw(symbols, seed), **fixed}, seed=seed)
        for a, b in zip(lhs_l, rhs_l, strict=True):
            va, vb = numeric.evaluate(a, point), numeric.evaluate(b, point)
            if numeric.relative_gap(va, vb) > 1e-20:
                return {"at": point.report(), "seed": seed, "lhs": float(va), "rhs": float(vb)}
    return None


def _trig_proof(pairs, method, assumptions, symbols, fixed=None) -> Proof:
    """Prove every (lhs, rhs) pair with trig_residual; spot-check numerically beside it."""
    for lhs, rhs in pairs:
        lhs_l = list(lhs) if isinstance(lhs, sp.MatrixBase) else [lhs]
        rhs_l = list(rhs) if isinstance(rhs, sp.MatrixBase) else [rhs]
        for a, b in zip(lhs_l, rhs_l, strict=True):
            res = trig_residual(a, b)
            if res != 0:
                cx = numeric_cx(a, b, symbols, fixed=fixed)
                return Proof("refuted" if cx else "unproven", method, assumptions, sp.sstr(res), counterexample=cx)
    worst = 0.0
    fixed = _FIXED if fixed is None else fixed
    for seed in (101, 202):
        point = numeric.Point(symbols={**_draw(symbols, seed), **fixed}, seed=seed)
        for lhs, rhs in pairs:
            lhs_l = list(lhs) if isinstance(lhs, sp.MatrixBase) else [lhs]
            rhs_l = list(rhs) if isinstance(rhs, sp.MatrixBase) else [rhs]
            for a, b in zip(lhs_l, rhs_l, strict=True):
                worst = max(worst, float(numeric.relative_gap(numeric.evaluate(a, point), numeric.evaluate(b, point))))
    return Proof("proved-general", method, assumptions, "0", spot_check={"points": 2, "max_relative_gap": worst})


TRIG_METHOD = "expand(trig=True), sin/cos of each angle as s, c reduced modulo s² + c² − 1 (exact)"
_PAIR_SYMBOLS = [theta, omega, pos_m, pos_n, pos, shift]

# --------------------------------------------------------------------------- RoPE: math
q2, k2, x2 = _pair(qv), _pair(kv), _pair(xv)


def _dot(u, v):
    return (u.T * v)[0, 0]


norm = Claim(
    id="rope.norm",
    title="A RoPE rotation preserves the norm of each pair",
    source="seed B §15",
    latex=r"\left\| R(\theta) \begin{pmatrix} x_{2i} \\ x_{2i+1} \end{pmatrix} \right\|^{2} = "
    r"x_{2i}^{2} + x_{2i+1}^{2}, \quad R(\theta) = "
    r"\begin{pmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta \end{pmatrix}",
    prove=lambda: _trig_proof(
        [(_dot(rotation(theta) * x2, rotation(theta) * x2), _dot(x2, x2))],
        TRIG_METHOD,
        ["θ real", "x real"],
        _PAIR_SYMBOLS,
    ),
    mutants=[
        Mutant(
            "no-minus",
            "rotation matrix without the minus sign ([[c, s], [s, c]])",
            lambda: numeric_cx(
                _dot(
                    rotation(theta).subs(-sp.sin(theta), sp.sin(theta)) * x2,
                    rotation(theta).subs(-sp.sin(theta), sp.sin(theta)) * x2,
                ),
                _dot(x2, x2),
                _PAIR_SYMBOLS,
            ),
        ),
        Mutant(
            "half-angle",
            "θ applied to one component, 2θ to the other (cos θ, −sin 2θ)",
            lambda: numeric_cx(
                _dot(
                    sp.Matrix([[sp.cos(theta), -sp.sin(2 * theta)], [sp.sin(theta), sp.cos(theta)]]) * x2,
                    sp.Matrix([[sp.cos(theta), -sp.sin(2 * theta)], [sp.sin(theta), sp.cos(theta)]]) * x2,
                ),
                _dot(x2, x2),
                _PAIR_SYMBOLS,
            ),
        ),
    ],
)

_rel_lhs = _dot(rotation(pos_m * omega) * q2, rotation(pos_n * omega) * k2)


def _relative_rhs(sign=1, angle=None):
    angle = (pos_m - pos_n) * omega if angle is None else angle
    return (q2[0] * k2[0] + q2[1] * k2[1]) * sp.cos(angle) + sign * (q2[0] * k2[1] - q2[1] * k2[0]) * sp.sin(angle)


def _relative() -> Proof:
    rhs = _relative_rhs()
    delta = sp.Symbol("delta", real=True)
    # the right side depends on m and n only through m − n: substitute m = n + δ, n must vanish
    if pos_n in rhs.xreplace({pos_m: pos_n + delta}).free_symbols:
        return Proof("unproven", "right side is not a function of m − n", [], sp.sstr(rhs))
    proof = _trig_proof(
        [
            (_rel_lhs, rhs),
            # second, independent check: the score is invariant under m, n → m + s, n + s
            (sp.diff(_rel_lhs, pos_m) + sp.diff(_rel_lhs, pos_n), sp.Integer(0)),
        ],
        TRIG_METHOD + "; plus (∂_m + ∂_n)⟨·,·⟩ = 0 and rhs(m = n + δ) free of n",
        ["m, n, ω real", "q, k real"],
        _PAIR_SYMBOLS,
    )
    return proof


relative = Claim(
    id="rope.relative",
    title="RoPE scores depend only on the relative position m − n",
    source="seed B §15",
    latex=r"\left\langle R(m\omega) q, R(n\omega) k \right\rangle = \left(q_{2i} k_{2i} + q_{2i+1} k_{2i+1}\right)"
    r"\cos\left((m - n)\omega\right) + \left(q_{2i} k_{2i+1} - q_{2i+1} k_{2i}\right)\sin\left((m - n)\omega\right)",
    prove=_relative,
    mutants=[
        Mutant(
            "sin-sign",
            "sign error in the sin((m − n)ω) term",
            lambda: numeric_cx(_rel_lhs, _relative_rhs(sign=-1), _PAIR_SYMBOLS),
        ),
        Mutant(
            "m-plus-n",
            "angle (m + n)ω instead of (m − n)ω",
            lambda: numeric_cx(_rel_lhs, _relative_rhs(angle=(pos_m + pos_n) * omega), _PAIR_SYMBOLS),
        ),
        Mutant(
            "n-minus-m",
            "angle (n − m)ω (the sin term's sign depends on the order)",
            lambda: numeric_cx(_rel_lhs, _relative_rhs(angle=(pos_n - pos_m) * omega), _PAIR_SYMBOLS),
        ),
    ],
)

_jac = (rotation(theta) * x2).jacobian(list(x2))


backward = Claim(
    id="rope.backward",
    title="RoPE backward is the rotation by −θ (the transpose)",
    source="seed B §15",
    latex=r"\left(\frac{\partial\, R(\theta) x}{\partial x}\right)^{T} = R(\theta)^{T} = R(-\theta), "
    r"\quad R(-\theta) R(\theta) = I",
    prove=lambda: _trig_proof(
        [(_jac.T, rotation(-theta)), (rotation(-theta) * rotation(theta), sp.eye(2))],
        "Jacobian of R(θ)x by sympy; " + TRIG_METHOD,
        ["θ real"],
        _PAIR_SYMBOLS,
    ),
    mutants=[
        Mutant(
            "plus-theta",
            "backward rotates by +θ (Jacobian used without the transpose)",
            lambda: numeric_cx(_jac.T, rotation(theta), _PAIR_SYMBOLS),
        ),
        Mutant("negated", "backward is −R(θ)ᵀ", lambda: numeric_cx(_jac.T, -rotation(-theta), _PAIR_SYMBOLS)),
    ],
)

# ------------------------------------------------------------------ RoPE: the op, in index form
t, a, b, p, q = (index(s) for s in "tabpq")
vjp_setting = Setting(
    sizes={n_tok: 2, d: 4},
    indices={t: (0, n_tok - 1), a: (0, n_tok - 1), b: (0, d - 1), p: (0, d - 1), q: (0, d - 1), i: (0, d / 2 - 1)},
    scalars={BASE: 10000},
)
code = ROPE.env()
_y = entry(Y, (t, q), code)


def _vjp_lhs(wrt):
    return sp.Sum(dY.base[t, q] * sp.diff(_y, wrt), (t, 0, n_tok - 1), (q, 0, d - 1))


_vjp_lhs_dx = _vjp_lhs(X.base[a, b])
_vjp_rhs_dx = entry(dX, (a, b), code)

vjp = index_claim(
    "rope.vjp",
    "RoPE op backward = transpose Jacobian (arbitrary tables, symbolic T and d)",
    "seed B §15",
    r"y = x \odot C + (x R) \odot S \;\Rightarrow\; \frac{\partial L}{\partial x} = "
    r"\frac{\partial L}{\partial y} \odot C + \left(\frac{\partial L}{\partial y} \odot S\right) R^{T}",
    lhs=_vjp_lhs_dx,
    rhs=_vjp_rhs_dx,
    setting=vjp_setting,
    mutants={
        "no-transpose": (
            "dx = dy ⊙ C + (dy ⊙ S) R: R not transposed (rotates by +θ)",
            entry(dY * COS + MatMul(dY * SIN, ROT), (a, b)),
        ),
        "sin-outside": (
            "dx = dy ⊙ C + (dy Rᵀ) ⊙ S: equal only when S is constant on pairs, not in general",
            entry(dY * COS + MatMul(dY, T(ROT)) * SIN, (a, b)),
        ),
        "cos-dropped": ("dx = (dy ⊙ S) Rᵀ: the dy ⊙ C term dropped", entry(MatMul(dY * SIN, T(ROT)), (a, b))),
    },
    method="index normaliser: the op's dx vs Σ dy ∂y/∂x, symbolic T and d, arbitrary tables C, S, R "
    "(constant inputs of the op: no gradient is taken for them)",
)


def _tables(expr, rot=None, cos=rope_cos_table, sin=rope_sin_table):
    """Substitute the table formulas for the entries of cos, sin and rot. For rot, the form
    whose Kronecker delta has the summed index bare is used (row form when the column is
    summed, column form when the row is)."""

    def rot_entry(row, col):
        if rot is not None:
            return rot(row, col)
        if isinstance(row, sp.Dummy) and not isinstance(col, sp.Dummy):
            return rope_rot_table_by_column(row, col)
        return rope_rot_table(row, col)

    def sub(e):
        name = e.base.label.name
        r_, c_ = e.indices
        if name == "cos":
            return cos(r_, c_, d)
        if name == "sin":
            return sin(r_, c_, d)
        return rot_entry(r_, c_)

    return expr.replace(lambda e: isinstance(e, sp.Indexed) and e.base.label.name in ("cos", "sin", "rot"), sub)


_angle = t * frequency(i, d)
_xpair = sp.Matrix([X.base[t, 2 * i], X.base[t, 2 * i + 1]])
_dypair = sp.Matrix([dY.base[t, 2 * i], dY.base[t, 2 * i + 1]])


def _op_pairs(env=code, **kw):
    """The op's y and dx at columns 2i, 2i+1, with the table formulas substituted."""
    return [
        _tables(entry(Y, (t, 2 * i), env), **kw),
        _tables(entry(Y, (t, 2 * i + 1), env), **kw),
        _tables(entry(dX, (t, 2 * i), env), **kw),
        _tables(entry(dX, (t, 2 * i + 1), env), **kw),
    ]


_pairs_rhs = list(rotation(_angle) * _xpair) + list(rotation(-_angle) * _dypair)


def _rot_forms_agree(max_d: int = 16) -> bool:
    """Both index forms of rot are blockdiag([[0, 1], [−1, 0]]) — checked entrywise for every
    even d ≤ max_d (the forms only test parity and adjacency, so this is their whole content)."""
    for dd in range(2, max_d + 1, 2):
        for j in range(dd):
            for k in range(dd):
                want = 1 if (j % 2 == 0 and k == j + 1) else (-1 if (j % 2 == 1 and k == j - 1) else 0)
                if (
                    rope_rot_table(sp.Integer(j), sp.Integer(k)) != want
                    or rope_rot_table_by_column(sp.Integer(j), sp.Integer(k)) != want
                ):
                    return False
    return True


pairs_setting = Setting(sizes={n_tok: 3, d: 8}, indices={t: (0, n_tok - 1), i: (0, d / 2 - 1)}, scalars={BASE: 10000})


def _pairs() -> Proof:
    if not _rot_forms_agree():
        return Proof("unproven", "the two index forms of rot disagree", [], "forms differ")
    proof = prove_index_identity(
        _op_pairs(),
        _pairs_rhs,
        pairs_setting,
        "index normaliser with the table formulas (symbolic T, d, i, t, base); the two "
        "index forms of rot checked entrywise equal to blockdiag([[0,1],[-1,0]]) for d ≤ 16",
    )
    proof.assumptions = [
        "d even, 0 ≤ i < d/2",
        "base > 0",
        "ω_i = base^(-2i/d) (RoFormer; seed B leaves ω_i open)",
    ] + proof.assumptions
    return proof


def _pairs_refute(wrong):
    return refute_identity(wrong, _pairs_rhs, pairs_setting)


_env_plus = dict(code)
_env_plus[dX] = dY * COS + MatMul(dY * SIN, ROT)

pairs = Claim(
    id="rope.pairs",
    title="The rope op with its tables is seed B's rotation by θ = t·ω_i; its backward rotates by −θ",
    source="seed B §15",
    latex=r"\begin{pmatrix} y_{t,2i} \\ y_{t,2i+1} \end{pmatrix} = R(t \omega_{i}) "
    r"\begin{pmatrix} x_{t,2i} \\ x_{t,2i+1} \end{pmatrix}, \quad "
    r"\begin{pmatrix} \frac{\partial L}{\partial x_{t,2i}} \\ \frac{\partial L}{\partial x_{t,2i+1}} \end{pmatrix}"
    r" = R(-t \omega_{i}) \begin{pmatrix} \frac{\partial L}{\partial y_{t,2i}} \\ "
    r"\frac{\partial L}{\partial y_{t,2i+1}} \end{pmatrix}, \quad \omega_{i} = \mathrm{base}^{-2i/d}",
    prove=_pairs,
    mutants=[
        Mutant(
            "partner-sign",
            "rot blocks transposed ([[0, −1], [1, 0]]): the forward rotates by −θ",
            lambda: _pairs_refute(
                _op_pairs(
                    rot=lambda r_, c_: (
                        -rope_rot_table(r_, c_) if isinstance(c_, sp.Dummy) else -rope_rot_table_by_column(r_, c_)
                    )
                )
            ),
        ),
        Mutant(
            "pairs-offset",
            "pairs (2i−1, 2i) instead of (2i, 2i+1)",
            lambda: _pairs_refute(
                _op_pairs(
                    rot=lambda r_, c_: (
                        (_odd(r_) * sp.KroneckerDelta(c_, r_ + 1) - _even(r_) * sp.KroneckerDelta(c_, r_ - 1))
                        if isinstance(c_, sp.Dummy)
                        else (_even(c_) * sp.KroneckerDelta(r_, c_ - 1) - _odd(c_) * sp.KroneckerDelta(r_, c_ + 1))
                    )
                )
            ),
        ),
        Mutant(
            "backward-plus-theta",
            "backward with rot instead of rotᵀ (rotates by +θ)",
            lambda: _pairs_refute(_op_pairs(env=_env_plus)),
        ),
        Mutant(
            "tables-swapped",
            "cos and sin tables swapped",
            lambda: _pairs_refute(_op_pairs(cos=rope_sin_table, sin=rope_cos_table)),
        ),
        Mutant(
            "frequency-i-over-d",
            "ω_i = base^(−i/d) instead of base^(−2i/d)",
            lambda: _pairs_refute(
                _op_pairs(
                    cos=lambda r_, c_, dd: sp.cos(r_ * BASE ** (-pair_index(c_) / dd)),
                    sin=lambda r_, c_, dd: sp.sin(r_ * BASE ** (-pair_index(c_) / dd)),
                )
            ),
        ),
    ],
)

# ------------------------------------------------------------------------- sinusoidal PE


def pe_shift_matrix(k, w) -> sp.Matrix:
    """M(kω) with (PE(pos+k, 2i), PE(pos+k, 2i+1)) = M (PE(pos, 2i), PE(pos, 2i+1))."""
    return sp.Matrix([[sp.cos(k * w), sp.sin(k * w)], [-sp.sin(k * w), sp.cos(k * w)]])


_w = frequency(i, d)
_pe = lambda at: sp.Matrix([sinusoidal_table(at, 2 * i, d), sinusoidal_table(at, 2 * i + 1, d)])  # noqa: E731
_PE_FIXED = {d: 8, i: 1, BASE: 10000}


def _pe_cx(lhs, rhs):
    """Counterexample at random pos, k, with base = 10000, d = 8 and i = 1."""
    return numeric_cx(lhs, rhs, [pos, shift], fixed=_PE_FIXED)


def _pe_shift() -> Proof:
    M = pe_shift_matrix(shift, _w)
    if pos in M.free_symbols:
        return Proof("unproven", "M depends on pos", [], sp.sstr(M))
    return _trig_proof(
        [(_pe(pos + shift), M * _pe(pos))],
        TRIG_METHOD + "; M's free symbols ⊆ {k, ω_i}",
        ["pos, k real", "d, i integers", "base > 0"],
        [pos, shift],
        fixed=_PE_FIXED,
    )


pe_shift = Claim(
    id="sinusoidal.shift",
    title="PE(pos + k) is a fixed rotation of PE(pos), per frequency pair",
    source="seed A §5",
    latex=r"\begin{pmatrix} \mathrm{PE}_{(\mathrm{pos}+k, 2i)} \\ \mathrm{PE}_{(\mathrm{pos}+k, 2i+1)} \end{pmatrix} = "
    r"\begin{pmatrix} \cos(k\omega_{i}) & \sin(k\omega_{i}) \\ -\sin(k\omega_{i}) & \cos(k\omega_{i}) \end{pmatrix}"
    r"\begin{pmatrix} \mathrm{PE}_{(\mathrm{pos}, 2i)} \\ \mathrm{PE}_{(\mathrm{pos}, 2i+1)} \end{pmatrix}, \quad \omega_{i} = 10000^{-2i/d_{\mathrm{model}}}",
    prove=_pe_shift,
    mutants=[
        Mutant(
            "wrong-sign",
            "M = R(kω) (seed B's sign convention) instead of R(−kω) for the (sin, cos) order",
            lambda: _pe_cx(_pe(pos + shift), rotation(shift * _w) * _pe(pos)),
        ),
        Mutant(
            "depends-on-pos",
            "M built from the angle (pos + k)ω",
            lambda: _pe_cx(_pe(pos + shift), pe_shift_matrix(pos + shift, _w) * _pe(pos)),
        ),
        Mutant("additive", "PE(pos + k) = PE(pos) + PE(k)", lambda: _pe_cx(_pe(pos + shift), _pe(pos) + _pe(shift))),
    ],
)

_seed_a = sp.Matrix([sp.sin(pos / sp.Integer(10000) ** (2 * i / d)), sp.cos(pos / sp.Integer(10000) ** (2 * i / d))])
table_setting = Setting(sizes={d: 8}, indices={i: (0, d / 2 - 1)}, scalars={pos: sp.Rational(7, 3)})

pe_table = index_claim(
    "sinusoidal.table",
    "The table formula gives seed A's PE in even and odd columns",
    "seed A §5",
    r"\mathrm{PE}_{(\mathrm{pos}, 2i)} = \sin\left(\frac{\mathrm{pos}}{10000^{2i/d_{\mathrm{model}}}}\right), \quad "
    r"\mathrm{PE}_{(\mathrm{pos}, 2i+1)} = \cos\left(\frac{\mathrm{pos}}{10000^{2i/d_{\mathrm{model}}}}\right)",
    lhs=list(_pe(pos).xreplace({BASE: 10000})),
    rhs=list(_seed_a),
    setting=table_setting,
    mutants={
        "parity-swapped": ("cos in even columns, sin in odd", [_seed_a[1], _seed_a[0]]),
        "exponent-i-over-d": (
            "10000^{i/d} instead of 10000^{2i/d}",
            [sp.sin(pos / sp.Integer(10000) ** (i / d)), sp.cos(pos / sp.Integer(10000) ** (i / d))],
        ),
    },
    method="index normaliser (symbolic i, d, pos): pair_index(2i+1) = i since (−1)^(2i) = 1 for integer i",
)

# claim-id prefixes besides this module's ops, tables and steps: the sinusoidal encoding's own properties, beside its table
TOPICS = ("sinusoidal",)

CLAIMS: list[Claim] = [norm, relative, backward, vjp, pairs, pe_shift, pe_table]


def _line_breaks(tex: str) -> str:
    """Seed A's LaTeX rule: `\\\\` ends its line (nothing after it on the line)."""
    return tex.replace("\\\\ ", "\\\\\n")


for _c in CLAIMS:
    _c.latex = _line_breaks(_c.latex)
for _o in OPS:
    _o.latex = _line_breaks(_o.latex)


# ------------------------------------------------------------------------------ the tables
# Printed by codegen as rope_tables(T, d, *, base, dtype[, device]) in generated/<backend>/rope.py
# and sinusoidal_table(T, d, *, base, dtype[, device]) in generated/<backend>/sinusoidal.py:
# each entry formula over integer row and column grids. `spec` states the sources' entries
# once, in the document's form (θ = pos·ω_i, ω_i = base^(−2i/d) with i = ⌊col/2⌋, sin in even and
# cos in odd columns, the pair rotation as a block diagonal); the generated claims
# `<table>.entries` (derivations/proof/tables_steps.py) prove every printed entry equal to it for symbolic
# T, d, base, row and col (split on the parity of the column); rope.pairs and sinusoidal.table
# prove what the entries are for.
_row, _col = index("row"), index("col")
_BASE_OPTION = Option(BASE, "base", 10000.0, "the frequency base: ω_i = base^(-2i/d)")


def _spec_angle(pos_, col):
    """θ = pos·ω_i with ω_i = 1/base^{2i/d} and i = ⌊col/2⌋ the column's pair (seed A §5)."""
    return pos_ / BASE ** (2 * sp.floor(col / 2) / d)


def _spec_pair_rotation(row, col):
    """blockdiag([[0, 1], [−1, 0]]): the pair rotation that (x @ rot)_{2i} = −x_{2i+1},
    (x @ rot)_{2i+1} = x_{2i} needs for seed B's R(θ): entry [row, col] is, within one pair
    (⌊row/2⌋ = ⌊col/2⌋), the column's parity minus the row's."""
    return sp.KroneckerDelta(sp.floor(row / 2), sp.floor(col / 2)) * (sp.Mod(col, 2) - sp.Mod(row, 2))


def _omega(col, two=2, pair=True):
    """A (possibly wrong) printed frequency: base^(−two·i/d), i the column's pair (or, pair=False,
    the column itself) — for the classic mistakes below."""
    return BASE ** (-two * (pair_index(col) if pair else col) / d)


TABLES = [
    Table(
        name="rope_tables",
        file="rope",
        module=__name__,
        title="RoPE tables: cos, sin (T × d) and the pair rotation rot (d × d)",
        sizes=(n_tok, d),
        options=[_BASE_OPTION],
        arrays=[
            TableArray("cos", (n_tok, d), (_row, _col), rope_cos_table(_row, _col, d)),
            TableArray("sin", (n_tok, d), (_row, _col), rope_sin_table(_row, _col, d)),
            TableArray("rot", (d, d), (_row, _col), rope_rot_table(_row, _col)),
        ],
        spec={
            "cos": sp.cos(_spec_angle(_row, _col)),
            "sin": sp.sin(_spec_angle(_row, _col)),
            "rot": _spec_pair_rotation(_row, _col),
        },
        source="seed B §15 (θ = pos·ω_i, R(θ) per pair (2i, 2i+1)); ω_i = base^(−2i/d) as in seed A §5 (RoFormer)",
        mistakes={
            "omega-i": ("ω_i = base^(−i/d): i instead of 2i", "cos", sp.cos(_row * _omega(_col, two=1))),
            "omega-col": (
                "each column its own frequency base^(−2·col/d): the pair not shared",
                "sin",
                sp.sin(_row * _omega(_col, pair=False)),
            ),
            "sin-cos-swapped": ("the cos table holds sin(θ)", "cos", rope_sin_table(_row, _col, d)),
            "rotation-sign": (
                "rot blocks [[0, −1], [1, 0]]: the forward rotates by −θ",
                "rot",
                -rope_rot_table(_row, _col),
            ),
            "rotation-one-sign": (
                "rot's −1 entries written +1: not a rotation",
                "rot",
                _even(_row) * sp.KroneckerDelta(_col, _row + 1) + _odd(_row) * sp.KroneckerDelta(_col, _row - 1),
            ),
            "pairs-offset": (
                "pairs (2i − 1, 2i) instead of (2i, 2i + 1)",
                "rot",
                _odd(_row) * sp.KroneckerDelta(_col, _row + 1) - _even(_row) * sp.KroneckerDelta(_col, _row - 1),
            ),
        },
        claims=["rope_tables.entries", "rope.pairs"],
        even={d: "its columns rotate in pairs (2i, 2i + 1); an odd last column would only be scaled"},
        doc="The constant inputs of `rope_forward`: cos[t, 2i] = cos[t, 2i+1] = cos(t·ω_i), "
        "sin likewise, rot = blockdiag([[0, 1], [−1, 0]]), ω_i = base^(−2i/d).",
    ),
    Table(
        name="sinusoidal_table",
        file="sinusoidal",
        module=__name__,
        title="Sine-cosine positional encoding PE (T × d)",
        sizes=(n_tok, d),
        options=[_BASE_OPTION],
        arrays=[TableArray("pe", (n_tok, d), (_row, _col), sinusoidal_table(_row, _col, d))],
        spec={
            "pe": sp.Piecewise(
                (sp.sin(_spec_angle(_row, _col)), sp.Eq(sp.Mod(_col, 2), 0)), (sp.cos(_spec_angle(_row, _col)), True)
            )
        },
        source="seed A §5",
        mistakes={
            "omega-i": (
                "10000^{i/d} instead of 10000^{2i/d}",
                "pe",
                _even(_col) * sp.sin(_row * _omega(_col, two=1)) + _odd(_col) * sp.cos(_row * _omega(_col, two=1)),
            ),
            "parity-swapped": (
                "cos in even columns, sin in odd",
                "pe",
                _odd(_col) * sp.sin(_row * _omega(_col)) + _even(_col) * sp.cos(_row * _omega(_col)),
            ),
            "omega-col": (
                "the column in place of its pair index: 10000^{2·col/d}",
                "pe",
                _even(_col) * sp.sin(_row * _omega(_col, pair=False))
                + _odd(_col) * sp.cos(_row * _omega(_col, pair=False)),
            ),
        },
        claims=["sinusoidal_table.entries", "sinusoidal.table", "sinusoidal.shift"],
        doc="PE[pos, 2i] = sin(pos·ω_i), PE[pos, 2i+1] = cos(pos·ω_i), ω_i = base^(−2i/d) (seed A §5).",
    ),
]
