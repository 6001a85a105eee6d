"""Optimisers: SGD (seed B §19), Adam (seed B §20) and AdamW (named at the end of seed B's flow).

The update rules are written **once**, as functions that build SymPy expressions
(`sgd_update`, `adam_update`, `adamw_update` and their pieces). They work on any SymPy objects,
elementwise: the claims below call them with scalar Symbols; `STEPS` calls them with `Array`s of
the array language, which is what the code generator prints as `sgd_step`, `adam_step`,
`adamw_step`. An optimiser step has no backward, and `ops.Op` requires one gradient per input,
so these are not `Op`s: `OPS` is empty and `STEPS` describes each step instead (see `Step`).

Convention (PyTorch's): `t` is the 1-based number of the step being taken — the runtime
increments its counter *before* calling the step — and `m`, `v` start at zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import sympy as sp

from .language.arrays import Array, Assign, entry
from .language.ops import Option, RangeLimit
from .proof.core import Claim, Mutant, Proof, Setting, prove_index_identity

# =============================================================================================
# The update rules: the one place where they are written.


def sgd_update(theta, g, lr):
    """W_new = W_old − η ∂L/∂W  (seed B §19)."""
    return theta - lr * g


def adam_moments(g, m, v, beta1, beta2):
    """m_t = β₁ m_{t−1} + (1 − β₁) g_t,  v_t = β₂ v_{t−1} + (1 − β₂) g_t²  (seed B §20)."""
    return beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * g**2


def adam_bias_correction(m, v, t, beta1, beta2):
    """m̂_t = m_t / (1 − β₁^t),  v̂_t = v_t / (1 − β₂^t)."""
    return m / (1 - beta1**t), v / (1 - beta2**t)


def adam_direction(m_hat, v_hat, eps):
    """m̂ / (√v̂ + ε): the step per unit learning rate."""
    return m_hat / (sp.sqrt(v_hat) + eps)


def adam_param_update(theta, m_new, v_new, t, lr, beta1, beta2, eps):
    """θ_t = θ_{t−1} − η m̂_t / (√v̂_t + ε), from the already updated moments."""
    m_hat, v_hat = adam_bias_correction(m_new, v_new, t, beta1, beta2)
    return theta - lr * adam_direction(m_hat, v_hat, eps)


def adamw_param_update(theta, m_new, v_new, t, lr, beta1, beta2, eps, weight_decay):
    """θ_t = θ_{t−1} − η (m̂_t / (√v̂_t + ε) + λ θ_{t−1}): decay decoupled from the moments."""
    m_hat, v_hat = adam_bias_correction(m_new, v_new, t, beta1, beta2)
    return theta - lr * (adam_direction(m_hat, v_hat, eps) + weight_decay * theta)


def adam_update(theta, g, m, v, t, lr, beta1, beta2, eps):
    """One Adam step: (θ_t, m_t, v_t) from (θ_{t−1}, g_t, m_{t−1}, v_{t−1})."""
    m_new, v_new = adam_moments(g, m, v, beta1, beta2)
    return adam_param_update(theta, m_new, v_new, t, lr, beta1, beta2, eps), m_new, v_new


def adamw_update(theta, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    """One AdamW step (Loshchilov & Hutter; torch.optim.AdamW): (θ_t, m_t, v_t)."""
    m_new, v_new = adam_moments(g, m, v, beta1, beta2)
    return (adamw_param_update(theta, m_new, v_new, t, lr, beta1, beta2, eps, weight_decay), m_new, v_new)


# =============================================================================================
# The steps the code generator prints.


@dataclass
class Step:
    """An optimiser step for codegen: `<name>_step(*inputs, *, options) -> outputs`.

    Elementwise over arrays of any shape (the declared (r, n) is only nominal). `assigns` are
    printed in order; an output refers to the new moments by name, and `value()` expands it back
    to the very expression that `*_update` builds (which the claims prove).

    `spec` states the sources' rule once, in the document's form (seed B §20's m_t, v_t, m̂_t,
    v̂_t, θ_t as separate assignments, in a scope of their own: intermediates such as m̂_t are
    arrays of the spec only); the generated claim `<name>.update` (derivations/proof/tables_steps.py)
    proves every output of the printed `assigns` equal to the spec's, elementwise and exactly.
    The step's LaTeX is printed from the spec, each array and option as `names` writes it.
    """

    name: str
    title: str
    claims: list[str]
    inputs: list[Array]  # param, grad, then state (m, v): positional, in this order
    options: list[Option]  # step count and hyperparameters: keyword-only
    assigns: list[Assign]
    outputs: list[Array]  # new param, then new state, in the order of the inputs
    doc: str = ""
    state: list[Array] = field(default_factory=list)
    spec: list[Assign] = field(default_factory=list)  # the sources' rule (document's form)
    source: str = ""  # where the sources state it ("seed B §20")
    # classic mistakes: name -> (what is wrong, target name of a printed line, wrong value)
    mistakes: dict = field(default_factory=dict)
    # where counterexamples are searched: {"scalars": {option name: value}, "t": (1, 2, 3),
    # "nonnegative": (input names drawn >= 0: Adam's v)}
    check: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)  # Array / option Symbol -> its LaTeX
    latex: str = ""  # printed from `spec` (never given by hand)
    module: str = __name__
    # where the printed step stops giving the exact value at large inputs (ops.RangeLimit)
    range_limit: RangeLimit | None = None

    def __post_init__(self):
        if self.spec:
            if self.latex:
                raise ValueError(
                    f"step {self.name}: its LaTeX is printed from the specification; give `spec`, not `latex`"
                )
            defined = set(self.inputs)
            symbols = {o.symbol for o in self.options if o.symbol is not None}
            for a in self.spec:
                free = sp.sympify(a.expr).free_symbols
                extra = {x for x in free if isinstance(x, Array)} - defined
                extra |= {x for x in free if not isinstance(x, Array)} - symbols
                if extra:
                    raise ValueError(
                        f"step {self.name}: the specification's line for {a.target.name} "
                        f"reads {sorted(map(str, extra))}, neither an input, an earlier "
                        "line nor an option"
                    )
                defined.add(a.target)
            missing = [o.name for o in self.outputs if o not in defined]
            if missing:
                raise ValueError(f"step {self.name}: the specification does not define {missing}")
            self.latex = self._spec_latex()
        targets = {a.target.name for a in self.assigns}
        for mname, (_, target, _) in self.mistakes.items():
            if target not in targets:
                raise ValueError(f"step {self.name}: mistake {mname} names no printed line ({target})")

    def _spec_latex(self) -> str:
        """`target = value` per line of the spec, joined by `, \\quad` (as latex.assigns_latex
        prints an op's spec), every array and option printed as `names` gives it (factors in
        SymPy's "old" order: β₁ m_{t−1}, not m_{t−1} β₁)."""
        from .language.latex import ArrayLatexPrinter

        printer = ArrayLatexPrinter({"symbol_names": dict(self.names), "order": "old"})
        return r", \quad ".join(f"{printer.doprint(a.target)} = {printer.doprint(a.expr)}" for a in self.spec)

    def env(self) -> dict:
        env: dict = {}
        for a in self.assigns:
            env[a.target] = a.expr.xreplace(env)
        return env

    def value(self, target: Array) -> sp.Expr:
        """The expression the generated code computes for `target`, intermediates expanded."""
        return self.env()[target]


r_, n_ = sp.Symbol("r", integer=True, positive=True), sp.Symbol("n", integer=True, positive=True)
P, G, M, V = (Array(nm, (r_, n_)) for nm in ("p", "g", "m", "v"))
P_new, M_new, V_new = (Array(nm, (r_, n_)) for nm in ("p_new", "m_new", "v_new"))

t_s = sp.Symbol("t", integer=True, positive=True)
lr_s = sp.Symbol("lr", positive=True)
beta1_s, beta2_s = sp.Symbol("beta1", nonnegative=True), sp.Symbol("beta2", nonnegative=True)
eps_s = sp.Symbol("eps", positive=True)
wd_s = sp.Symbol("weight_decay", nonnegative=True)

_T = Option(t_s, "t", None, "1-based number of this step (incremented before the call)")
_LR = Option(lr_s, "lr", 1e-3, "learning rate η")
# 0 ≤ β < 1 (torch.optim's range): with t ≥ 1 the bias corrections' 1 − β^t lie in (0, 1], so no
# denominator of the update is 0 (β = 1 would divide by 0, β > 1 take the root of a negative v̂)
_BETA = sp.Interval.Ropen(0, 1)
_B1 = Option(beta1_s, "beta1", 0.9, "decay of the first moment β₁", domain=_BETA)
_B2 = Option(beta2_s, "beta2", 0.999, "decay of the second moment β₂", domain=_BETA)
_EPS = Option(eps_s, "eps", 1e-8, "ε added to √v̂")
_WD = Option(wd_s, "weight_decay", 1e-2, "decoupled weight decay λ")


G_scaled = Array("g_scaled", (r_, n_))  # (1 − β₂) g: the printed second moment's first factor


def _moment_assigns():
    """m_t, v_t as `adam_moments` states them, v_t printed in the order that does not overflow:
    v_t = β₂ v_{t−1} + ((1 − β₂) g) g, never g·g first (g² is out of range for |g| > 1.8e19 in
    float32 where (1 − β₂) g² is not). `<step>.update` proves the lines equal to the spec."""
    m_expr, v_expr = adam_moments(G, M, V, beta1_s, beta2_s)
    assert sp.expand(v_expr - (beta2_s * V + (1 - beta2_s) * G * G)) == 0
    return [Assign(M_new, m_expr), Assign(G_scaled, (1 - beta2_s) * G), Assign(V_new, beta2_s * V + G_scaled * G)]


def _stable_direction(m_new, v_new, t, beta1, beta2, eps):
    """m̂ / (√v̂ + ε) as printed: √v̂ = √v_t / √(1 − β₂^t), the root taken before the division
    by 1 − β₂^t (v_t / (1 − β₂^t) overflows first: 1 − β₂ = 1e-3 at t = 1). Equal to
    `adam_direction` of `adam_bias_correction` for v_t ≥ 0 and 1 − β₂^t > 0 (0 ≤ β₂ < 1,
    t ≥ 1, the options' domain); `<step>.update` proves it under exactly that."""
    return (m_new / (1 - beta1**t)) / (sp.sqrt(v_new) / sp.sqrt(1 - beta2**t) + eps)


def _adam_p_new(theta, m_new, v_new, t, lr, beta1, beta2, eps, weight_decay=None):
    """θ_t of `adam_param_update` / `adamw_param_update`, with the direction as printed."""
    direction = _stable_direction(m_new, v_new, t, beta1, beta2, eps)
    if weight_decay is None:
        return theta - lr * direction
    return theta - lr * (direction + weight_decay * theta)


# ---------------------------------------------------------------------------------------------
# The sources' rules, once, in the document's form (not through the *_update functions): what
# the generated claims `<step>.update` prove the printed lines equal to.
M_hat, V_hat = Array("m_hat", (r_, n_)), Array("v_hat", (r_, n_))  # the spec's m̂_t, v̂_t

SGD_SPEC = [Assign(P_new, P - lr_s * G)]  # W_new = W_old − η ∂L/∂W  (§19)
ADAM_MOMENTS_SPEC = [
    Assign(M_new, beta1_s * M + (1 - beta1_s) * G),  # m_t = β₁ m_{t−1} + (1 − β₁) g_t
    Assign(V_new, beta2_s * V + (1 - beta2_s) * G**2),  # v_t = β₂ v_{t−1} + (1 − β₂) g_t²
    Assign(M_hat, M_new / (1 - beta1_s**t_s)),  # m̂_t = m_t / (1 − β₁^t)
    Assign(V_hat, V_new / (1 - beta2_s**t_s)),  # v̂_t = v_t / (1 − β₂^t)
]
ADAM_SPEC = ADAM_MOMENTS_SPEC + [
    Assign(P_new, P - lr_s * M_hat / (sp.sqrt(V_hat) + eps_s)),  # θ_t = θ_{t−1} − η m̂_t/(√v̂_t + ε)
]
ADAMW_SPEC = ADAM_MOMENTS_SPEC + [  # θ_t = θ_{t−1} − η(m̂_t/(√v̂_t + ε) + λθ_{t−1})
    Assign(P_new, P - lr_s * (M_hat / (sp.sqrt(V_hat) + eps_s) + wd_s * P)),
]

_HYPER_NAMES = {
    lr_s: r"\eta",
    beta1_s: r"\beta_{1}",
    beta2_s: r"\beta_{2}",
    eps_s: r"\epsilon",
    wd_s: r"\lambda",
    t_s: "t",
}
SGD_NAMES = {P: r"W_{\mathrm{old}}", G: r"\frac{\partial L}{\partial W}", P_new: r"W_{\mathrm{new}}", lr_s: r"\eta"}
ADAM_NAMES = {
    P: r"\theta_{t-1}",
    G: r"g_{t}",
    M: r"m_{t-1}",
    V: r"v_{t-1}",
    P_new: r"\theta_{t}",
    M_new: r"m_{t}",
    V_new: r"v_{t}",
    M_hat: r"\hat{m}_{t}",
    V_hat: r"\hat{v}_{t}",
    **_HYPER_NAMES,
}

# the classic wrong versions of a printed line (the generated claims refute each)
_m, _v = M_new / (1 - beta1_s**t_s), V_new / (1 - beta2_s**t_s)
ADAM_MISTAKES = {
    "no-bias-correction": (
        "Adam without bias correction: θ − η m_t/(√v_t + ε)",
        "p_new",
        P - lr_s * M_new / (sp.sqrt(V_new) + eps_s),
    ),
    "bias-exponent-t-minus-1": (
        "bias correction 1 − β^{t−1}",
        "p_new",
        P - lr_s * (M_new / (1 - beta1_s ** (t_s - 1))) / (sp.sqrt(V_new / (1 - beta2_s ** (t_s - 1))) + eps_s),
    ),
    "eps-inside-sqrt": ("ε inside the root: √(v̂ + ε)", "p_new", P - lr_s * _m / sp.sqrt(_v + eps_s)),
    "v-with-g": ("second moment fed g instead of g²", "v_new", beta2_s * V + (1 - beta2_s) * G),
    "betas-swapped": ("m_t = (1 − β₁) m_{t−1} + β₁ g_t", "m_new", (1 - beta1_s) * M + beta1_s * G),
    "ascent": ("θ + η m̂/(√v̂ + ε): the sign of the step", "p_new", P + lr_s * _m / (sp.sqrt(_v) + eps_s)),
}
ADAMW_MISTAKES = {
    "decay-in-moments": (
        "L2 instead of decoupled decay: λθ added to the gradient in m_t",
        "m_new",
        beta1_s * M + (1 - beta1_s) * (G + wd_s * P),
    ),
    "decay-through-denominator": (
        "decay added to m̂ and divided by √v̂ + ε with it",
        "p_new",
        P - lr_s * (_m + wd_s * P) / (sp.sqrt(_v) + eps_s),
    ),
    "decay-without-lr": (
        "θ − η m̂/(√v̂ + ε) − λθ: the decay not scaled by η",
        "p_new",
        P - lr_s * _m / (sp.sqrt(_v) + eps_s) - wd_s * P,
    ),
    "no-bias-correction": (
        "AdamW without bias correction",
        "p_new",
        P - lr_s * (M_new / (sp.sqrt(V_new) + eps_s) + wd_s * P),
    ),
}


STEPS: dict[str, Step] = {
    "sgd": Step(
        name="sgd",
        title="Stochastic gradient descent step",
        claims=["sgd.update", "sgd.first_order"],
        inputs=[P, G],
        options=[_LR],
        assigns=[Assign(P_new, sgd_update(P, G, lr_s))],
        outputs=[P_new],
        spec=SGD_SPEC,
        source="seed B §19",
        names=SGD_NAMES,
        mistakes={
            "ascent": ("W + η ∂L/∂W: the sign of the step", "p_new", P + lr_s * G),
            "no-lr": ("W − ∂L/∂W: the learning rate dropped", "p_new", P - G),
        },
    ),
    "adam": Step(
        name="adam",
        range_limit=RangeLimit(
            {"float32": 1e30, "float64": 1e300},
            (
                "adam: beyond |g| ~ 6e20 (float32) / 1e300 (float64) v_new = β₂v + (1 − β₂)g² "
                "is itself out of range (not required) and √v_new = inf drops the step, "
                "although the exact p_new ≈ p − lr·sign g is in range: it would need √v_new "
                "from a scaled form (hypot(√(β₂v), √(1 − β₂)|g|)); up to there v_new = β₂v + "
                "((1 − β₂)g)g and √v̂ = √v_new/√(1 − β₂^t) stay in range"
            ),
        ),
        title="Adam step (seed B §20)",
        claims=["adam.update", "adam.geometric", "adam.bias_correction", "adam.step_bound"],
        inputs=[P, G, M, V],
        options=[_T, _LR, _B1, _B2, _EPS],
        assigns=_moment_assigns() + [Assign(P_new, _adam_p_new(P, M_new, V_new, t_s, lr_s, beta1_s, beta2_s, eps_s))],
        outputs=[P_new, M_new, V_new],
        state=[M, V],
        spec=ADAM_SPEC,
        source="seed B §20",
        names=ADAM_NAMES,
        mistakes=ADAM_MISTAKES,
        check={"nonnegative": ("v",)},
    ),
    "adamw": Step(
        name="adamw",
        range_limit=RangeLimit(
            {"float32": 1e30, "float64": 1e300},
            ("adamw: as adam — v_new out of range, √v_new = inf and the step is lost"),
        ),
        title="AdamW step: Adam with decoupled weight decay",
        claims=["adamw.update", "adamw.decoupled", "adamw.vs_l2"],
        inputs=[P, G, M, V],
        options=[_T, _LR, _B1, _B2, _EPS, _WD],
        assigns=_moment_assigns()
        + [Assign(P_new, _adam_p_new(P, M_new, V_new, t_s, lr_s, beta1_s, beta2_s, eps_s, wd_s))],
        outputs=[P_new, M_new, V_new],
        state=[M, V],
        spec=ADAMW_SPEC,
        source="seed B (flow) §20; Loshchilov & Hutter (decoupled decay)",
        names=ADAM_NAMES,
        mistakes=ADAMW_MISTAKES,
        check={"nonnegative": ("v",)},
    ),
}

OPS: list = []  # an optimiser step has no backward; see STEPS

# =============================================================================================
# Symbols for the claims (scalars: every rule is elementwise).

theta, g = sp.symbols("theta g", real=True)
m, v = sp.Symbol("m", real=True), sp.Symbol("v", nonnegative=True)
eta, eps, lam = (
    sp.Symbol("eta", positive=True),
    sp.Symbol("epsilon", positive=True),
    sp.Symbol("lambda", nonnegative=True),
)
beta1, beta2 = sp.Symbol("beta_1", positive=True), sp.Symbol("beta_2", positive=True)
t = sp.Symbol("t", integer=True, positive=True)
i = sp.Symbol("i", integer=True)

ADAM_ASSUMPTIONS = [
    "0 < β₁ < 1, 0 < β₂ < 1",
    "t a symbolic positive integer (1-based step)",
    "m_0 = v_0 = 0",
    "ε > 0, η > 0",
]


def _is_zero(expr) -> bool:
    """Exact zero test: put the inside of every square root in lowest terms (so √(g²·c/c)
    becomes |g|), then expand and cancel. No `simplify`."""
    expr = sp.sympify(expr)
    expr = expr.replace(
        lambda e: isinstance(e, sp.Pow) and e.exp == sp.S.Half, lambda e: sp.sqrt(sp.factor(sp.cancel(e.base)))
    )
    return sp.cancel(sp.expand(sp.together(expr))) == 0


def _num(x):
    x = sp.nsimplify(x) if not isinstance(x, (int, Fraction)) else sp.Rational(x)
    if x.is_Integer:
        return int(x)
    return float(x) if x.is_number else str(x)


def _report(values: dict) -> dict:
    return {str(k): _num(val) for k, val in values.items()}


# =============================================================================================
# sgd: first-order decrease.

w = sp.symbols("w1:5", real=True)
gs = sp.symbols("g1:5", real=True)
L = sp.Function("L")
SGD_DIMS = (1, 2, 3, 4)  # numbers of coordinates at which the generic-L identity is proved


def _taylor(update, loss, order: int, nvars: int = 3) -> list:
    """Coefficients c_0..c_order of `loss(update(w, g, η))` in η, with g held fixed."""
    moved = loss(*[update(wi, gi, eta) for wi, gi in zip(w[:nvars], gs[:nvars])])
    return [(sp.diff(moved, eta, n).subs(eta, 0) / sp.factorial(n)).doit() for n in range(order + 1)]


def _first_order(update, nvars: int = 3) -> sp.Expr:
    """c_0 − L(W) and c_1 + ‖∇L‖² for an arbitrary smooth L of `nvars` variables, g = ∇L(W)."""
    c0, c1 = _taylor(update, L, 1, nvars)
    grad = {gi: sp.diff(L(*w[:nvars]), wi) for wi, gi in zip(w[:nvars], gs[:nvars])}
    return sp.expand(c0 - L(*w[:nvars])), sp.expand(c1.xreplace(grad) + sum(d**2 for d in grad.values()))


# a generic cubic polynomial in w1, w2 (symbolic coefficients) for the exact η² term
def _cubic(*x):
    monomials = [sp.Integer(1)] + list(x)
    monomials += [x[a] * x[b] for a in range(2) for b in range(a, 2)]
    monomials += [x[a] * x[b] * x[c] for a in range(2) for b in range(a, 2) for c in range(b, 2)]
    return sp.Add(*[sp.Symbol(f"a{n}", real=True) * mono for n, mono in enumerate(monomials)])


def _prove_sgd() -> Proof:
    for nvars in SGD_DIMS:
        r0, r1 = _first_order(sgd_update, nvars)
        leaked = (r0.free_symbols | r1.free_symbols) - set(w[:nvars])
        if r0 != 0 or r1 != 0 or leaked:
            return Proof(
                "unproven", f"Taylor coefficients of L(W − ηg), {nvars} coordinates", residual=sp.sstr([r0, r1])
            )
    # exact second-order term for a generic cubic (SymPy's doit of mixed-partial Subs of an
    # undefined Function leaks symbols, so the η² term is checked on a polynomial instead)
    c = _taylor(sgd_update, _cubic, 2, nvars=2)
    grad = {gi: sp.diff(_cubic(*w[:2]), wi) for wi, gi in zip(w[:2], gs[:2])}
    hess = sp.hessian(_cubic(*w[:2]), w[:2])
    gvec = sp.Matrix(list(grad.values()))
    r0 = sp.expand(c[0] - _cubic(*w[:2]))
    r1 = sp.expand(c[1].xreplace(grad) + (gvec.T * gvec)[0])
    r2 = sp.expand(c[2].xreplace(grad) - (gvec.T * hess * gvec)[0] / 2)
    if (r0, r1, r2) != (0, 0, 0):
        return Proof("unproven", "Taylor coefficients of a generic cubic", residual=sp.sstr([r0, r1, r2]))
    # symbolic sizes: the step that codegen prints moves W along −g, so by the chain rule
    # d/dη L(W + η d)|₀ = Σ_ab ∂L/∂W_ab d_ab = −Σ_ab g_ab² for an (r × n) parameter
    a_, b_ = sp.Symbol("a", integer=True), sp.Symbol("b", integer=True)
    direction = entry((STEPS["sgd"].value(P_new) - P) / lr_s, (a_, b_))
    slope = sp.Sum(entry(G, (a_, b_)) * direction, (a_, 0, r_ - 1), (b_, 0, n_ - 1))
    direction_proof = prove_index_identity(  # the gate: normal form, guard, spot-check
        slope,
        -sp.Sum(entry(G, (a_, b_)) ** 2, (a_, 0, r_ - 1), (b_, 0, n_ - 1)),
        Setting(sizes={r_: 2, n_: 3}, scalars={lr_s: sp.Rational(1, 10)}),
    )
    if direction_proof.status != "proved-general":
        return Proof(
            "unproven", f"direction of the generated step: {direction_proof.method}", residual=direction_proof.residual
        )
    return Proof(
        "proved-general",
        "chain rule with the generated step's direction d = (sgd_step(W) − W)/η = −g in index form, "
        "normalised for a symbolic (r × n) parameter: Σ g∘d = −‖g‖²; the chain rule itself checked "
        "by the η-derivative at η = 0 of L(W − ηg) for an undefined smooth Function L at "
        f"{', '.join(map(str, SGD_DIMS))} coordinates; the η² term ½ gᵀ∇²L g checked exactly on a "
        "generic cubic in 2 variables (10 symbolic coefficients)",
        [
            "L differentiable (twice for the η² term), otherwise arbitrary",
            "g = ∇L(W), held fixed during the step",
            "η > 0",
            "r, n symbolic sizes of the parameter",
        ],
        "0",
        spot_check={"generic-L coordinates": list(SGD_DIMS)},
    )


def _refute_first_order(update, label) -> dict | None:
    """The first-order coefficient of a wrong update, for a concrete L at a concrete point."""
    concrete = sp.Lambda(w[:3], w[0] ** 2 + 3 * w[1] ** 2 + w[0] * w[1] * w[2] + w[2] ** 3)
    point = {w[0]: 1, w[1]: -1, w[2]: 2}
    c1 = _taylor(update, lambda *x: concrete(*x), 1, nvars=3)[1]
    grad = {gi: sp.diff(concrete(*w[:3]), wi) for wi, gi in zip(w[:3], gs[:3])}
    got = c1.xreplace(grad).subs(point)
    claimed = -sum(d**2 for d in grad.values()).subs(point)
    if got == claimed:
        return None
    return {
        "L": sp.sstr(concrete.expr),
        "at": {str(k): v for k, v in point.items()},
        "update": label,
        "eta^1 coefficient": _num(got),
        "claimed -|g|^2": _num(claimed),
    }


sgd_first_order = Claim(
    id="sgd.first_order",
    title="A gradient step decreases the loss to first order",
    source="seed B §19",
    latex=r"L(W - \eta g) = L(W) - \eta \| g \|^{2} + \frac{\eta^{2}}{2} g^{T} \nabla^{2} L\, g "
    r"+ O(\eta^{3}), \quad g = \frac{\partial L}{\partial W}",
    prove=_prove_sgd,
    mutants=[
        Mutant(
            "ascent",
            "update W + ηg (sign flipped): the η coefficient is +‖g‖²",
            lambda: _refute_first_order(lambda x, gx, lr: x + lr * gx, "W + eta*g"),
        ),
        Mutant(
            "half-step",
            "update W − ηg/2 presented as the gradient step: coefficient −‖g‖²/2",
            lambda: _refute_first_order(lambda x, gx, lr: x - lr * gx / 2, "W - eta*g/2"),
        ),
    ],
)

# =============================================================================================
# adam: the geometric sum, the bias correction, the step bound.

geo_lhs = (1 - beta1) * sp.Sum(beta1 ** (t - i), (i, 1, t))
geo_rhs = 1 - beta1**t


def _decide_sum(lhs, rhs):
    """`Sum.doit()` gives a Piecewise on β = 1; decide every branch under its condition."""
    done = sp.piecewise_fold(lhs.doit())
    branches = done.args if isinstance(done, sp.Piecewise) else [(done, sp.true)]
    notes = []
    for value, cond in branches:
        if cond is sp.true:
            ok = _is_zero(sp.powsimp(sp.expand(value - rhs), force=True))
            notes.append("general branch (β₁ ≠ 1)")
        else:
            # the β = 1 branch: substitute the value the condition pins down
            sol = sp.solve(cond, beta1, dict=True) if isinstance(cond, sp.Eq) else []
            ok = bool(sol) and all(_is_zero((value - rhs).subs(s)) for s in sol)
            notes.append(f"branch {sp.sstr(cond)}")
        if not ok:
            return False, notes
    return True, notes


def _prove_geometric() -> Proof:
    ok, notes = _decide_sum(geo_lhs, geo_rhs)
    # independent: the closed form of the moment recurrence of the code, by rsolve and induction
    mf = sp.Function("m")
    rec = mf(t) - adam_moments(g, mf(t - 1), v, beta1, beta2)[0]
    solved = sp.rsolve(rec, mf(t), {mf(0): 0})
    by_rsolve = solved is not None and _is_zero(solved - g * geo_rhs)
    if not (ok and by_rsolve):
        return Proof("unproven", "Sum.doit / rsolve", residual=sp.sstr([notes, solved]))
    return Proof(
        "proved-general",
        "Sum(...).doit() decided branch by branch (" + "; ".join(notes) + "); "
        "rsolve of the code's recurrence m_t = β₁m_{t−1} + (1−β₁)g, m_0 = 0 gives g(1 − β₁^t)",
        ["t a symbolic positive integer", "β₁ > 0 (the β₁ = 1 branch holds too: both sides 0)"],
        "0",
        spot_check=_geometric_numbers(),
    )


def _geometric_numbers() -> dict:
    b = Fraction(9, 10)
    rows = {}
    for tt in (1, 2, 5):
        s = (1 - b) * sum(b ** (tt - k) for k in range(1, tt + 1))
        rows[tt] = [float(s), float(1 - b**tt)]
    return {"beta_1": 0.9, "t: [lhs, rhs]": rows}


def _refute_geometric(wrong_lhs, wrong_rhs) -> dict | None:
    for bb in (Fraction(1, 2), Fraction(9, 10)):
        for tt in (1, 2, 3):
            a = wrong_lhs(bb, tt)
            b = wrong_rhs(bb, tt)
            if a != b:
                return {"at": {"beta_1": float(bb), "t": tt}, "lhs": float(a), "rhs": float(b)}
    return None


adam_geometric = Claim(
    id="adam.geometric",
    title="The weights of Adam's moving average sum to 1 − β^t",
    source="seed B §20",
    latex=r"(1 - \beta_{1}) \sum_{i=1}^{t} \beta_{1}^{t-i} = 1 - \beta_{1}^{t}",
    prove=_prove_geometric,
    mutants=[
        Mutant(
            "no-one-minus-beta",
            "the (1 − β) factor dropped: Σ β^{t−i} = 1 − β^t",
            lambda: _refute_geometric(
                lambda b, tt: sum(b ** (tt - k) for k in range(1, tt + 1)), lambda b, tt: 1 - b**tt
            ),
        ),
        Mutant(
            "exponent-t-minus-1",
            "the weights claimed to sum to 1 − β^{t−1}",
            lambda: _refute_geometric(
                lambda b, tt: (1 - b) * sum(b ** (tt - k) for k in range(1, tt + 1)), lambda b, tt: 1 - b ** (tt - 1)
            ),
        ),
    ],
)


# --- constant gradient: bias correction is exact -------------------------------------------
def m_closed(tt):
    return g * (1 - beta1**tt)


def v_closed(tt):
    return g**2 * (1 - beta2**tt)


def _prove_bias_correction() -> Proof:
    m_new, v_new = adam_moments(g, m_closed(t - 1), v_closed(t - 1), beta1, beta2)
    checks = {
        "m_0 = 0": m_closed(0),
        "v_0 = 0": v_closed(0),
        "m_t = β₁ m_{t−1} + (1−β₁) g": m_new - m_closed(t),
        "v_t = β₂ v_{t−1} + (1−β₂) g²": v_new - v_closed(t),
    }
    m_hat, v_hat = adam_bias_correction(m_new, v_new, t, beta1, beta2)
    checks["m̂_t = g"] = m_hat - g
    checks["v̂_t = g²"] = v_hat - g**2
    bad = {k: sp.sstr(e) for k, e in checks.items() if not _is_zero(e)}
    if bad:
        return Proof("unproven", "induction on t", residual=str(bad))
    return Proof(
        "proved-general",
        "induction on symbolic t: the closed forms g(1 − β₁^t), g²(1 − β₂^t) are 0 at t = 0 and "
        "satisfy the recurrence of adam_moments (the code's own expression); then "
        "adam_bias_correction divides the factor out exactly",
        ADAM_ASSUMPTIONS + ["g_t = g constant"],
        "0",
        spot_check={
            "iterated exactly, β₁ = 9/10, β₂ = 999/1000, g = 3/2, t = 1..4": _iterate(
                adam_moments, adam_bias_correction
            )
        },
    )


def _iterate(moments, correction, steps=4, b1=Fraction(9, 10), b2=Fraction(999, 1000), gg=Fraction(3, 2)):
    """Run the (possibly wrong) moment and correction rules exactly with a constant gradient."""
    mm, vv, rows = Fraction(0), Fraction(0), []
    for tt in range(1, steps + 1):
        mm, vv = moments(gg, mm, vv, b1, b2)
        try:
            mh, vh = correction(mm, vv, tt, b1, b2)
        except ZeroDivisionError:
            rows.append({"t": tt, "m_hat": "division by zero", "v_hat": "division by zero"})
            continue
        rows.append({"t": tt, "m_hat": float(mh), "v_hat": float(vh), "g": float(gg), "g^2": float(gg**2)})
    return rows


def _refute_adam(moments, correction) -> dict | None:
    rows = _iterate(moments, correction)
    for row in rows:
        if row["m_hat"] == "division by zero" or row["m_hat"] != row["g"] or row["v_hat"] != row["g^2"]:
            return {"at": {"beta_1": 0.9, "beta_2": 0.999, "g": 1.5}, "first_bad_step": row, "trace": rows}
    return None


adam_bias = Claim(
    id="adam.bias_correction",
    title="With a constant gradient, bias-corrected moments are exact",
    source="seed B §20",
    latex=r"g_{t} = g \;\Rightarrow\; m_{t} = g\left(1 - \beta_{1}^{t}\right), \; "
    r"\hat{m}_{t} = \frac{m_{t}}{1 - \beta_{1}^{t}} = g, \; \hat{v}_{t} = \frac{v_{t}}{1 - \beta_{2}^{t}} = g^{2}",
    prove=_prove_bias_correction,
    mutants=[
        Mutant(
            "no-bias-correction",
            "Adam without bias correction: m̂_1 = (1 − β₁)g ≠ g",
            lambda: _refute_adam(adam_moments, lambda mm, vv, tt, b1, b2: (mm, vv)),
        ),
        Mutant(
            "v-with-g",
            "second moment fed g instead of g²: v̂_t = g ≠ g²",
            lambda: _refute_adam(
                lambda gg, mm, vv, b1, b2: (b1 * mm + (1 - b1) * gg, b2 * vv + (1 - b2) * gg), adam_bias_correction
            ),
        ),
        Mutant(
            "exponent-t-minus-1",
            "bias correction 1 − β^{t−1}: undefined at t = 1, m̂_2 = g(1 + β₁)",
            lambda: _refute_adam(
                adam_moments, lambda mm, vv, tt, b1, b2: (mm / (1 - b1 ** (tt - 1)), vv / (1 - b2 ** (tt - 1)))
            ),
        ),
    ],
)


# --- the step is bounded by η ---------------------------------------------------------------
def _prove_step_bound() -> Proof:
    a, s = sp.Symbol("a", positive=True), sp.Symbol("s", positive=True)  # a = |m̂|, s = √v̂
    gap = sp.factor(sp.together(a / s - a / (s + eps)))
    # constant gradient: the code's update from the closed-form moments at step t
    theta_new, _, _ = adam_update(theta, g, m_closed(t - 1), v_closed(t - 1), t, eta, beta1, beta2, eps)
    delta = theta_new - theta
    exact = -eta * g / (sp.Abs(g) + eps)
    same = _is_zero(delta - exact)
    margin = sp.factor(sp.together(eta - eta * sp.Abs(g) / (sp.Abs(g) + eps)))
    if not (gap.is_positive and same and margin.is_positive):
        return Proof("unproven", "sign of factored differences", residual=sp.sstr([gap, delta - exact, margin]))
    return Proof(
        "proved-general",
        f"|m̂|/√v̂ − |m̂/(√v̂+ε)| = {sp.sstr(gap)} > 0 and η − |Δθ_t| = {sp.sstr(margin)} > 0, "
        "signs decided by SymPy's assumptions on the factored differences; Δθ_t computed by "
        "adam_update from the closed-form moments (symbolic t) equals −ηg/(|g| + ε) exactly",
        ADAM_ASSUMPTIONS + ["m̂ ≠ 0, v̂ > 0 for the first inequality", "g_t = g constant, g ≠ 0 real"],
        "0",
        spot_check=_step_numbers(),
    )


def _step_numbers() -> dict:
    out = {}
    for gg in (sp.Rational(1, 1000), 1, 1000):
        d = adam_update(
            0, gg, 0, 0, 1, sp.Rational(1, 1000), sp.Rational(9, 10), sp.Rational(999, 1000), sp.Rational(1, 10**8)
        )[0]
        out[str(gg)] = float(abs(d))
    return {"|Δθ_1| at η = 1e-3, ε = 1e-8, for g =": out}


def _refute_step(wrong) -> dict | None:
    for gg, ee in ((sp.Integer(4), sp.Rational(1, 10)), (sp.Integer(1), sp.Rational(1, 10))):
        pt = {g: gg, eps: ee, eta: sp.Rational(1, 100), t: 3, beta1: sp.Rational(9, 10), beta2: sp.Rational(999, 1000)}
        theta_new = adam_update(theta, g, m_closed(t - 1), v_closed(t - 1), t, eta, beta1, beta2, eps)[0]
        actual = sp.nsimplify(sp.Abs(theta_new - theta).subs(pt))
        claimed = wrong.subs(pt)
        if actual != claimed:
            return {"at": _report(pt), "|delta theta|": _num(actual), "claimed": _num(claimed)}
    return None


adam_step_bound = Claim(
    id="adam.step_bound",
    title="Adam's step is below η (ε > 0); constant gradient: η|g|/(|g|+ε)",
    source="seed B §20",
    latex=r"\left|\frac{\hat{m}}{\sqrt{\hat{v}} + \epsilon}\right| < \frac{|\hat{m}|}{\sqrt{\hat{v}}}, \quad "
    r"g_{t} = g \;\Rightarrow\; |\Delta\theta_{t}| = \frac{\eta |g|}{|g| + \epsilon} < \eta",
    prove=_prove_step_bound,
    mutants=[
        Mutant(
            "sgd-like",
            "the Adam step claimed to scale with the gradient like SGD: |Δθ| = η|g|",
            lambda: _refute_step(eta * sp.Abs(g)),
        ),
        Mutant(
            "eps-ignored", "ε ignored: |Δθ_t| = η exactly (the bound is strict for ε > 0)", lambda: _refute_step(eta)
        ),
    ],
)

# =============================================================================================
# adamw: decoupled weight decay.

ADAMW_ARGS = (theta, g, m, v, t, eta, beta1, beta2, eps)


def _prove_decoupled() -> Proof:
    w_new = adamw_update(*ADAMW_ARGS, lam)
    a_new = adam_update(*ADAMW_ARGS)
    checks = {f"λ = 0 gives Adam ({name})": wn.subs(lam, 0) - an for name, wn, an in zip(("θ", "m", "v"), w_new, a_new)}
    # PyTorch's order: θ ← θ(1 − ηλ), then the Adam step from the same moments
    m_new, v_new = adam_moments(g, m, v, beta1, beta2)
    m_hat, v_hat = adam_bias_correction(m_new, v_new, t, beta1, beta2)
    torch_form = theta * (1 - eta * lam) - eta * adam_direction(m_hat, v_hat, eps)
    checks["θ(1 − ηλ) − η m̂/(√v̂+ε)"] = w_new[0] - torch_form
    checks["moments independent of λ"] = sp.Add(*[sp.diff(x, lam) for x in w_new[1:]])
    # the step generated for codegen expands to this very expression
    step = STEPS["adamw"]
    sub = dict(zip((P, G, M, V), (theta, g, m, v)))
    sub.update({t_s: t, lr_s: eta, beta1_s: beta1, beta2_s: beta2, eps_s: eps, wd_s: lam})
    # the printed √v̂ = √v_t / √(1 − β₂^t) is √(v_t / (1 − β₂^t)) where 1 − β₂^t > 0, which
    # 0 < β₂ < 1 and t ≥ 1 give (β₂^t ∈ (0, β₂]): 1 − β₂^t is that positive number below
    positive = {beta2**t: 1 - sp.Dummy("c", positive=True)}
    checks["STEPS['adamw'] prints this expression"] = (step.value(P_new).xreplace(sub) - w_new[0]).xreplace(positive)
    bad = {k: sp.sstr(e) for k, e in checks.items() if not _is_zero(e)}
    if bad:
        return Proof("unproven", "exact algebra", residual=str(bad))
    return Proof(
        "proved-general",
        "exact algebra on the update functions (symbolic θ, g, m, v, t, η, β, ε, λ): " + "; ".join(checks),
        ["v ≥ 0", "ε > 0", "λ ≥ 0", "1 − β₂^t > 0 (0 < β₂ < 1, t ≥ 1)"],
        "0",
    )


def _refute_decoupled(wrong_update) -> dict | None:
    pt = {
        theta: 2,
        g: sp.Rational(1, 2),
        m: 0,
        v: 0,
        t: 1,
        eta: sp.Rational(1, 10),
        beta1: sp.Rational(9, 10),
        beta2: sp.Rational(999, 1000),
        eps: sp.Rational(1, 1000),
        lam: sp.Rational(1, 10),
    }
    right = adamw_update(*ADAMW_ARGS, lam)[0].subs(pt)
    wrong = wrong_update().subs(pt)
    if sp.nsimplify(right - wrong) == 0:
        return None
    return {"at": _report(pt), "adamw theta_1": _num(right), "mutant theta_1": _num(wrong)}


def _decay_through_denominator():
    m_new, v_new = adam_moments(g, m, v, beta1, beta2)
    m_hat, v_hat = adam_bias_correction(m_new, v_new, t, beta1, beta2)
    return theta - eta * (m_hat + lam * theta) / (sp.sqrt(v_hat) + eps)


adamw_decoupled = Claim(
    id="adamw.decoupled",
    title="AdamW: decoupled decay; λ = 0 is Adam",
    source="seed B (flow) §20",
    latex=r"\theta_{t} = \theta_{t-1} - \eta\left(\frac{\hat{m}_{t}}{\sqrt{\hat{v}_{t}} + \epsilon} + "
    r"\lambda \theta_{t-1}\right) = (1 - \eta\lambda)\theta_{t-1} - \eta \frac{\hat{m}_{t}}"
    r"{\sqrt{\hat{v}_{t}} + \epsilon}, \quad \lambda = 0 \Rightarrow \mathrm{Adam}",
    prove=_prove_decoupled,
    mutants=[
        Mutant(
            "decay-through-denominator",
            "decay added to m̂ and divided by √v̂ + ε with it",
            lambda: _refute_decoupled(_decay_through_denominator),
        ),
        Mutant(
            "l2-as-adamw",
            "weight decay folded into the gradient (Adam on g + λθ) presented as AdamW",
            lambda: _refute_decoupled(lambda: adam_update(theta, g + lam * theta, m, v, t, eta, beta1, beta2, eps)[0]),
        ),
    ],
)


# --- AdamW versus L2 in the gradient, one step from zero moments ----------------------------
def _first_steps():
    l2 = adam_update(theta, g + lam * theta, 0, 0, 1, eta, beta1, beta2, eps)[0] - theta
    decoupled = adamw_update(theta, g, 0, 0, 1, eta, beta1, beta2, eps, lam)[0] - theta
    return l2, decoupled


VS_L2_DIFF = eta * (g / (sp.Abs(g) + eps) + lam * theta - (g + lam * theta) / (sp.Abs(g + lam * theta) + eps))
_WITNESS = {theta: 1, g: 1, lam: sp.Rational(1, 10), eta: sp.Rational(1, 1000), eps: sp.Rational(1, 10**8)}


def _prove_vs_l2() -> Proof:
    l2, decoupled = _first_steps()
    if not _is_zero(l2 - decoupled - VS_L2_DIFF):
        return Proof("unproven", "closed form of the difference", residual=sp.sstr(l2 - decoupled - VS_L2_DIFF))
    at_witness = VS_L2_DIFF.subs(_WITNESS)
    if at_witness == 0:
        return Proof("unproven", "difference vanishes at the witness point", residual="0")
    # ε → 0 with g > 0 and g + λθ > 0: the L2 term is normalised away entirely
    gp, c = sp.Symbol("g", positive=True), sp.Symbol("c", positive=True)  # c = λθ > 0
    limit = sp.limit(VS_L2_DIFF.subs(g, gp).subs(lam, c / theta), eps, 0)
    if not _is_zero(limit - eta * c):
        return Proof("unproven", "ε → 0 limit", residual=sp.sstr(limit))
    return Proof(
        "proved-general",
        "exact algebra at t = 1 from m_0 = v_0 = 0 (m̂_1 = g, v̂_1 = g²): the closed-form difference "
        "of the two updates; non-zero at a witness point; for ε → 0 with g > 0, g + λθ > 0 the "
        "difference is ηλθ — Adam normalises the L2 term away, AdamW keeps it",
        ["t = 1, m_0 = v_0 = 0", "ε > 0", "λ ≥ 0"],
        "0",
        spot_check={
            "witness": _report(_WITNESS),
            "difference": _num(at_witness),
            "limit eps->0 (g>0, g+lambda*theta>0)": "eta*lambda*theta",
        },
    )


def _refute_vs_l2_same() -> dict | None:
    l2, decoupled = _first_steps()
    a, b = l2.subs(_WITNESS), decoupled.subs(_WITNESS)
    if a == b:
        return None
    return {"at": _report(_WITNESS), "L2 step": _num(a), "AdamW step": _num(b)}


adamw_vs_l2 = Claim(
    id="adamw.vs_l2",
    title="Decoupled decay differs from L2 regularisation under Adam",
    source="seed B (flow) §20",
    latex=r"\Delta\theta^{\mathrm{L2}}_{1} - \Delta\theta^{\mathrm{W}}_{1} = \eta\left(\frac{g}{|g| + \epsilon} "
    r"+ \lambda\theta - \frac{g + \lambda\theta}{|g + \lambda\theta| + \epsilon}\right) \neq 0",
    prove=_prove_vs_l2,
    mutants=[
        Mutant("l2-equals-adamw", "L2 in the gradient claimed to give the same step as AdamW", _refute_vs_l2_same),
    ],
)

CLAIMS: list[Claim] = [sgd_first_order, adam_geometric, adam_bias, adam_step_bound, adamw_decoupled, adamw_vs_l2]
