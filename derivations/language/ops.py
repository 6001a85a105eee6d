"""Ops: the forward and backward formulas that `codegen` prints.

An op is declared once, in the derivation module whose claims prove it. It lists, in the array
language of `arrays.py`:

* `inputs` and `params` (positional arguments of `<op>_forward`, in that order),
* `options` (keyword-only arguments: flags such as `causal`, hyperparameters such as `eps`),
* `sizes` (size symbols read off argument shapes at run time: `d_k = q.shape[-1]`),
* `forward` assignments, `outputs`, the `saved` arrays that go into the cache,
* `backward` assignments from the upstream gradients `d<output>` and the cache, and `grads`
  (one per float input and parameter, except the `constant_inputs`: float inputs that the
  backward treats as constants, such as RoPE's cos/sin tables, and returns no gradient for).
  An op may omit the backward (and `saved`, `grads`): it is then derived from the forward by
  reverse mode (`autodiff.py`), and the generated claims prove it like a hand-written one.

The claims prove these very expressions (through `Op.env`), and the printers print them.

A `Table` is a constant array built from sizes alone (RoPE's cos/sin/rot tables, the sinusoidal
positional encoding): each of its arrays is a formula `entry(row, col)` in two index symbols over
a (rows, cols) grid, printed elementwise over integer grids of the row and column indices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from .arrays import Array, ArrayError, Assign, shape_of


@dataclass(frozen=True)
class Option:
    """A keyword-only argument: a flag (`causal`) or a scalar hyperparameter (`eps`).

    The generated code refuses a value outside `domain()`: `domain` if given, else what the
    symbol's assumptions say (the proofs' domain: `eps` positive is ε > 0, `t` a positive
    integer is t ≥ 1). A `domain` given must lie inside the assumptions' set (it only narrows
    what the proofs cover: 0 ≤ β < 1, where 1 − β^t is a denominator).
    """

    symbol: sp.Symbol | None
    name: str
    default: object
    doc: str = ""
    domain: sp.Set | None = None

    def __post_init__(self):
        if self.domain is not None and not self.domain.is_subset(assumed_set(self.symbol)):
            raise ArrayError(
                f"option {self.name}: domain {self.domain} is not inside what the "
                f"symbol's assumptions allow ({assumed_set(self.symbol)})"
            )

    def allowed(self) -> sp.Set:
        """The values the generated code accepts."""
        return self.domain if self.domain is not None else assumed_set(self.symbol)


def assumed_set(symbol) -> sp.Set:
    """The set of real values a symbol's assumptions allow (all reals without assumptions)."""
    if symbol is None:
        return sp.S.Reals
    lo = (
        sp.Interval.open(0, sp.oo)
        if symbol.is_positive
        else sp.Interval(0, sp.oo)
        if symbol.is_nonnegative
        else sp.S.Reals
    )
    if symbol.is_integer:
        return sp.Range(1 if symbol.is_positive else 0, sp.oo) if lo != sp.S.Reals else sp.S.Integers
    return lo


@dataclass(frozen=True)
class RangeLimit:
    """Where an op's printed kernels stop giving the exact value within floating-point range:
    from `first[dtype]` (an input magnitude) up, on `backends`, they return inf or NaN where the
    exact value is finite, for the reason given. The numerical-edge tests read it (an expected
    failure from there up, a pass below), so a new op declares its own edge behaviour here and
    no test needs a hand-kept list; fixing a kernel turns its expected failure into an XPASS."""

    first: dict  # dtype ("float32", "float64") -> the smallest magnitude that fails
    reason: str
    backends: tuple = ("numpy", "torch")
    # dtype -> the largest magnitude that fails, where above it the exact value is itself out of
    # range (nothing finite is required there); absent: every magnitude from `first` up fails
    last: dict = field(default_factory=dict)

    def fails(self, dtype: str, magnitude: float) -> bool:
        """Whether the kernels are declared to fail at this magnitude in this dtype."""
        return dtype in self.first and self.first[dtype] <= magnitude <= self.last.get(dtype, float("inf"))


@dataclass(frozen=True)
class Quote:
    """A formula of the sources, verbatim: `where` (document and section), `name` the function
    it defines as the document writes it (`GELU`), `latex` the formula's lines as printed there.

    Where the sources state the op as a value rather than a function (`Logits = HW_{vocab}+b`,
    `Attention = softmax(QK^T/\\sqrt{d_k} + M)V`), `name` is that value's name and `args` the
    arrays it is computed from, in the sources' names and the op's input order (("H",),
    ("Q", "K", "V")); `when` names the op's flag the formula states (the causal mask)."""

    where: str
    name: str
    latex: str
    # the op's parameters as the sources write them, when the op has any: (parameter, LaTeX in
    # the sources' names), e.g. ("w1", "W_1^T") where the sources multiply x W₁ and the op
    # stores the weight out × in
    params: tuple = ()
    args: tuple = ()
    when: str = ""


def _live(lines: list, needed: set) -> list:
    """The lines whose value is needed (an output, a value the backward reads, or one a needed
    line reads), in order: a softmax line that a log-softmax rewrite no longer reads is not
    printed (a loss's p = softmax(z), computed and never used)."""
    kept = []
    for a in reversed(lines):
        if a.target in needed:
            kept.append(a)
            needed |= {s for s in sp.sympify(a.expr).free_symbols if isinstance(s, Array)}
    return kept[::-1]


@dataclass
class Op:
    name: str
    # the declaring module (the generated header's provenance): set by the registry to the
    # topic module whose `OPS` lists the op; one given here must be that module
    module: str = ""
    title: str = ""
    inputs: list[Array] = field(default_factory=list)
    outputs: list[Array] = field(default_factory=list)
    # the forward that codegen prints (default: the specification's own lines)
    forward: list[Assign] = field(default_factory=list)
    # the backward that codegen prints; omitted, it is derived from the forward by the rules of
    # reverse mode (derivations/language/autodiff.py), with `saved` the cache it reads (or, where
    # `saved` is given, recomputing from it what else it reads) and `grads` one per float input
    # and parameter that is not a constant input
    backward: list[Assign] = field(default_factory=list)
    saved: list[Array] | None = None
    grads: list[Array] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    # the sources' formula, once, in the array language and in a scope of its own: the
    # generated claims prove the printed forward equal to it and the printed backward equal to
    # its derivative (derivations/proof/obligations.py); the op's LaTeX is printed from it
    spec: list[Assign] = field(default_factory=list)
    source: str = ""  # where the sources state it ("seed A §3, seed B §8")
    # the sources' own formula for it, quoted verbatim (`Quote`): `qed prove` reads each with
    # `qed check`'s front end, the quoted function bound to this op's `spec`, and requires the
    # step proved, so a specification that is not the sources' formula fails (an op the sources
    # do not state has none, and docs/trusted.md lists it)
    quotes: tuple = ()
    # classic mistakes: name -> (what is wrong, "forward" | "backward", target name, wrong value)
    mistakes: dict = field(default_factory=dict)
    # where counterexamples are searched: {"sizes": {name: int}, "scalars": {name: value},
    # "integers": {input name: (lo, hi)}} (defaults: small distinct sizes, scalars 1/10, ids 0..1)
    check: dict = field(default_factory=dict)
    latex: str = field(default="", init=False)  # printed from `spec` (never given by hand)
    params: list[Array] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    sizes: dict = field(default_factory=dict)  # size Symbol -> (Array, axis) to read it from
    integer_inputs: list[Array] = field(default_factory=list)  # token ids, targets
    # float inputs that get no gradient (constants: position tables); the backward returns
    # nothing for them and the torch autograd.Function returns None
    constant_inputs: list[Array] = field(default_factory=list)
    cache_doc: str = ""
    # torch nn.Module wrapper (codegen): PyTorch-style attribute names of the params
    # ({"gamma": "weight", "beta": "bias"}; default: the param's own name) and their
    # initialisers, one of "zeros", "ones", "normal" (std 0.02), "fan_in" (uniform ±1/√fan_in);
    # default: "normal" for matrices, "zeros" for row vectors.
    module_params: dict = field(default_factory=dict)
    param_init: dict = field(default_factory=dict)
    # Shapes beyond the declared (rows, cols) (codegen does the rest, the same for every op):
    # `optional_axes`: how many of the declared axes of every batched input, from the first, may
    # be absent; an absent axis is read as one of length 1 (a reshaped view, torch's convention)
    # and the outputs drop it again. 0: both axes required; 1: rows may be absent (a row op or a
    # linear map takes any shape with at least one axis; integer ids (T, 1) may then be 0-D);
    # 2: both (elementwise: any shape, 0-D included).
    optional_axes: int = 0
    # `broadcast`: the inputs' leading axes broadcast against each other (torch's matmul and
    # scaled_dot_product_attention); the backward sums each gradient back to its input's shape.
    # Otherwise the batched inputs must have identical leading axes.
    broadcast: bool = False
    # set when the backward was derived (not written by hand): what the derivation proved on the
    # way (the row max carries no gradient, ...)
    derived: bool = False
    derivation_lemmas: list[str] = field(default_factory=list)
    # the stable rewrites applied to the printed lines (derivations/language/stabilise.py): their
    # claim ids, cited with the op's claims
    stability: list[str] = field(default_factory=list)
    # PyTorch's own function for the op, `reference(torch, *tensors, **options)`: the independent
    # check of the tests and the `torch.nn` reference model (None: the specification is evaluated
    # with torch's autograd instead)
    reference: object = None
    # where the model can use the op: "activation" (elementwise, between the MLP's two linear
    # maps), "ffn" (the whole MLP: x (r, d) and weights over d and the hidden width f, no
    # biases), "norm" (a row op with per-feature parameters), "residual_scale" (elementwise with
    # per-feature parameters, on each residual branch), "loss" (logits (T, V), integer targets
    # and a 0/1 mask (T, 1) -> a (1, 1) mean, as cross_entropy) or "" (not in the model); None:
    # inferred from the signature (`model_role`)
    role: str | None = None
    # where its printed kernels stop giving the exact value at large inputs (`RangeLimit`); None:
    # finite and close at every magnitude the numerical-edge check tries
    range_limit: RangeLimit | None = None

    def __post_init__(self):
        if not self.outputs:
            raise ArrayError(f"op {self.name}: no outputs")
        self.title = self.title or self.name
        if not self.spec:
            raise ArrayError(
                f"op {self.name}: no specification (`spec`): the sources' formula, "
                "which the generated claims prove the printed lines against"
            )
        from .latex import assigns_latex

        for where, assigns in (("spec", self.spec), ("forward", self.forward), ("backward", self.backward)):
            for a in assigns:
                refuse_unprintable(self.name, where, a.target.name, a.expr)
        refuse_undefined(self)
        self.latex = assigns_latex(self.spec)
        stable: set = set()
        printed_from_spec = not self.forward
        if printed_from_spec:
            # the specification printed, every line in its overflow-free form where a proved
            # rewrite applies (log(1 + e^{x}) is printed max(x, 0) + log1p(e^{−|x|})); lines
            # written by hand are printed as written, and the numerical-edges check judges them
            from .stabilise import stabilise_assigns

            self.forward, stable = stabilise_assigns(list(self.spec))
        if not self.backward:
            self._derive_backward()
        if printed_from_spec and self.saved is not None:
            self.forward = _live(self.forward, set(self.outputs) | set(self.saved))
        if self.saved is None:
            raise ArrayError(f"op {self.name}: a hand-written backward needs its cache (`saved`)")
        from ..proof.obligations import check_scopes

        defined = set(self.inputs) | set(self.params)
        for a in self.forward:
            defined.add(a.target)
        for a in self.outputs + self.saved:
            if a not in defined:
                raise ArrayError(f"op {self.name}: {a.name} is output/saved but never defined")
        for line in self.spec + self.forward:
            got = shape_of(line.expr)
            if line.target in self.outputs and got not in ((), line.target.shape):
                # an intermediate may hold a broadcast value (the printed array broadcasts where it
                # is read); an output is returned as printed, so its value must have its shape
                raise ArrayError(
                    f"op {self.name}: output {line.target.name} is declared {line.target.shape} but its "
                    f"value has shape {got}: declare {line.target.name} with shape {got}"
                )
        for a in self.constant_inputs:
            if a not in self.inputs:
                raise ArrayError(f"op {self.name}: constant input {a.name} is not an input")
            if a in self.integer_inputs:
                raise ArrayError(
                    f"op {self.name}: {a.name} is both an integer and a constant "
                    "input (integer inputs get no gradient anyway)"
                )
        if len(set(self.constant_inputs)) != len(self.constant_inputs):
            raise ArrayError(f"op {self.name}: constant_inputs repeat")
        expected = len(self.inputs) + len(self.params) - len(self.integer_inputs) - len(self.constant_inputs)
        if len(self.grads) != expected:
            raise ArrayError(
                f"op {self.name}: one gradient per float input and parameter that "
                f"is not a constant input: expected {expected}, got {len(self.grads)}"
            )
        if self.optional_axes not in (0, 1, 2):
            raise ArrayError(
                f"op {self.name}: optional_axes is 0, 1 or 2 (of the declared (rows, cols)), got {self.optional_axes!r}"
            )
        check_scopes(self)
        if self.role is not None:
            if self.role not in ROLES:
                raise ArrayError(f"op {self.name}: role {self.role!r} is not one of {ROLES}")
            if self.role and inferred_role(self) not in SIGNATURES.get(self.role, (self.role,)):
                raise ArrayError(
                    f"op {self.name}: role {self.role!r} needs its signature: "
                    + (
                        "one elementwise input and output of the same shape (optional_axes=2), no parameters"
                        if self.role == "activation"
                        else "x (r, d) -> y (r, d), weight matrices (f, d) and one (d, f), no biases"
                        if self.role == "ffn"
                        else "a row op x (r, n) -> y (r, n) with parameters (1, n) only"
                        if self.role == "norm"
                        else "logits (T, V), integer targets (T, 1) and an integer mask (T, 1) -> loss (1, 1), no parameters"
                        if self.role == "loss"
                        else "x (r, n) -> y (r, n) with parameters (1, n) only: a row op or an elementwise one"
                        if self.role == "qk_transform"
                        else "an elementwise x (r, n) -> y (r, n) with parameters (1, n) only, no row reduction"
                    )
                )
        if self.derived:  # a derived op is proved by its generated claims, then any about it
            from ..proof.obligations import obligations

            generated = [ob.id for ob in obligations(self)]
            self.claims = generated + [c for c in self.claims if c not in generated]
        self.stability = sorted(stable | set(self.stability))
        self.claims = list(self.claims) + [c for c in self.stability if c not in self.claims]

    def _derive_backward(self) -> None:
        """The backward by reverse mode over the forward (derivations/language/autodiff.py)."""
        from .autodiff import derive_op

        if self.grads:
            raise ArrayError(
                f"op {self.name}: `grads` without a `backward`: the derived backward "
                "computes one gradient per float input and parameter"
            )
        d = derive_op(self, flag_combinations(self.forward))
        self.backward, self.saved, self.grads = d.backward, d.saved, d.grads
        self.derived, self.derivation_lemmas = True, d.lemmas
        self.stability = sorted(set(self.stability) | set(d.stability))
        if not self.cache_doc:
            self.cache_doc = (
                ", ".join(a.name for a in self.saved) or "nothing"
            ) + " (the cache of the derived backward: what it reads of the forward)."

    def call(self, *args, **options):
        """This op's specification applied to `args` (array expressions, in the order of its inputs
        and then its parameters) and `options` (by name; an option not given keeps its symbol):
        the output's expression, or a tuple for several outputs. So a specification may call a
        registered op — QK-norm's `y = RMSNORM.call(q, g)` — instead of retyping its formula; the
        callee's sizes become the argument's (its n is the argument's width)."""
        formals = list(self.inputs) + list(self.params)
        if len(args) != len(formals):
            raise ArrayError(
                f"op {self.name} called with {len(args)} argument(s); it takes {', '.join(a.name for a in formals)}"
            )
        mapping: dict = {}
        for formal, actual in zip(formals, args):
            have = shape_of(actual)
            for s_formal, s_actual in zip(formal.shape, have or (1, 1)):
                if isinstance(s_formal, sp.Symbol):
                    if mapping.get(s_formal, s_actual) != s_actual:
                        raise ArrayError(
                            f"op {self.name}: size {s_formal} is {mapping[s_formal]} and {s_actual} in this call"
                        )
                    mapping[s_formal] = s_actual
                elif s_formal != s_actual and not (s_formal == 1 and have == ()):
                    raise ArrayError(f"op {self.name}: {formal.name} has {s_formal} where the argument has {s_actual}")
        by_name = {o.name: o for o in self.options}
        for name, value in options.items():
            if name not in by_name or by_name[name].symbol is None:
                raise ArrayError(f"op {self.name} has no option {name!r} with a value")
            mapping[by_name[name].symbol] = sp.sympify(value)
        mapping.update(zip(formals, args))
        env: dict = {}
        for a in self.spec:
            env[a.target] = a.expr.xreplace(mapping).xreplace(env)
        outs = tuple(env[o] for o in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    @property
    def upstream(self) -> list[Array]:
        """The upstream gradients d<output>, one per output, same shape."""
        return [grad_of(o) for o in self.outputs]

    def env(self, when: frozenset | set = frozenset()) -> dict:
        """Definitions of every forward and backward intermediate, for index expansion.

        `when` names the flags that are on (e.g. {"causal"}); an assignment guarded by a
        flag that is off is skipped, exactly as the generated code skips it.
        """
        env: dict = {}
        for a in self.forward + self.backward:
            if a.when is not None and a.when not in when:
                continue
            expr = a.expr
            if a.target in env:  # a redefinition (S = mask(S)) refers to the previous value
                expr = expr.xreplace({a.target: env[a.target]})
            env[a.target] = expr
        return env

    def value(self, target: Array, when=frozenset()) -> sp.Expr:
        """The expression that the generated code computes for `target`."""
        return self.env(when)[target]


ROLES = ("activation", "ffn", "norm", "residual_scale", "qk_transform", "loss", "")
# the signatures a declared role accepts (`inferred_role`): a q/k transform acts on each head's q
# and k, a row op (a norm) or an elementwise one with per-feature parameters
SIGNATURES = {"qk_transform": ("norm", "residual_scale")}


def refuse_unprintable(op: str, where: str, target: str, expr) -> None:
    """What the proofs accept, codegen prints: a construct that one of them would read otherwise is
    refused here, where the op is declared, with what to write instead.

    * a float (`0.5*x`): the proofs are exact, the printed constant would be the float's, so
      constants are SymPy rationals (`sp.Rational(1, 2)`), or symbols such as `sp.pi`;
    * `sp.Heaviside(u)` with no value at 0: SymPy leaves H(0) undecided, the printer must choose;
      `sp.Heaviside(u, 0)` (ReLU's mask), `sp.Heaviside(u, sp.S.Half)`, or `HalfStep(u)`
      ((1 + sign u)/2, the derivative of a smooth max) say what it is;
    * `sp.Piecewise`: written as max/min and steps (ELU: `sp.Max(x, 0) + sp.exp(sp.Min(x, 0)) − 1`),
      every branch is printed from an expression the proofs and the stable rewrites read."""
    for node in sp.preorder_traversal(expr):
        if isinstance(node, sp.Float):
            exact = sp.nsimplify(node, rational=True)
            raise ArrayError(
                f"op {op}: the float {node} in {where} line {target} = {expr}: constants are exact "
                f"(the proofs read {exact}, the printed code would hold a float) — write "
                f"sp.Rational({exact.p}, {exact.q})"
                if exact.is_Rational
                else f"op {op}: the float {node} in {where} line {target}: constants are exact"
            )
        if isinstance(node, sp.Heaviside) and len(node.args) == 1:
            raise ArrayError(
                f"op {op}: Heaviside({node.args[0]}) in {where} line {target} has no value at 0 — write "
                f"sp.Heaviside({node.args[0]}, 0), sp.Heaviside({node.args[0]}, sp.S.Half) or HalfStep({node.args[0]})"
            )
        if isinstance(node, sp.Function) and not _printable_function(node):
            from .functions import FUNCTIONS

            raise ArrayError(
                f"op {op}: {type(node).__name__}(…) in {where} line {target} is no function the printers know: "
                f"the one table (derivations/language/functions.py) has {', '.join(FUNCTIONS)}; "
                "the array language's nodes (derivations/language/arrays.py) and Max, Min, Heaviside are printed too"
            )
        if isinstance(node, sp.Piecewise):
            raise ArrayError(
                f"op {op}: a Piecewise in {where} line {target}: write its branches with sp.Max, sp.Min "
                "and sp.Heaviside(u, value at 0) (ELU: sp.Max(x, 0) + sp.exp(sp.Min(x, 0)) - 1), "
                "which are proved and printed alike"
            )


def refuse_undefined(op: Op) -> None:
    """Every logarithm and fractional power that the op's lines take is defined for every input:
    the argument of a log provably > 0, the base of a fractional power provably ≥ 0 (the sign
    analysis of derivations/language/denominators.py: sums of exps, squares, |·|, positive
    options, k v + k √(v² + c); `_signed` tries it on other forms too). Otherwise the printed code would return NaN where the argument
    is negative, a value the proofs say nothing about, so the op is refused here. The
    specification is read: a forward, derived or written, is proved equal to it."""
    from .denominators import expanded

    positive = {
        o.symbol for o in op.options if o.symbol is not None and o.allowed().is_subset(sp.Interval.open(0, sp.oo))
    }
    env: dict = {}
    for a in op.spec:
        full = a.expr.xreplace(env)  # the lines above it substituted: a function of the inputs
        env[a.target] = full
        sizes = {s for s in sp.sympify(full).free_symbols if s.is_integer and s.is_positive}
        for node in sp.preorder_traversal(full):
            if isinstance(node, sp.log):
                arg, need, ok = node.args[0], "> 0", ("+",)
            elif isinstance(node, sp.Pow) and node.exp.is_Rational and not node.exp.is_integer:
                arg, need, ok = node.base, ">= 0", ("+", "0+")
            else:
                continue
            if not _signed(expanded(arg, {}, {}), positive | sizes, ok):
                raise ArrayError(
                    f"op {op.name}: {sp.sstr(node)} in spec line {a.target.name} needs {sp.sstr(arg)} "
                    f"{need} for every input, which is not provable from the formula: the printed code "
                    "would give NaN where it is not — take it of a quantity that is (x**2 + c and "
                    "sp.exp(x) are positive, sp.Abs(x) and x**2 are ≥ 0, a positive option; "
                    "log(1 + e^x) is a softplus)"
                )


def _signed(arg, positive: set, ok: tuple) -> bool:
    """Whether the sign analysis gives `arg` a sign in `ok`: as written, over one denominator
    (1 − σ(x) = 1 − 1/(1 + e^{−x}) is e^{−x}/(1 + e^{−x})), or with tanh, sinh and cosh written
    by their exponentials first (1 + tanh x = 2e^{x}/(e^{x} + e^{−x}))."""
    from .denominators import sign

    if sign(arg, positive, {}) in ok:
        return True
    for form in (lambda a: sp.together(a), lambda a: sp.together(a.rewrite(sp.exp))):
        try:
            if sign(form(arg), positive, {}) in ok:
                return True
        except (TypeError, ValueError, NotImplementedError):  # a node SymPy cannot rewrite
            continue
    return _bounded_away(arg, positive, strict=ok == ("+",))


def _bounded_away(arg, positive: set, strict: bool) -> bool:
    """Interval arithmetic (SymPy's AccumBounds): each bounded function replaced by its range
    (tanh, erf in [−1, 1], σ in [0, 1], sin and cos by SymPy), each input by (−∞, ∞), each
    positive option and size by [0, ∞); 2 − tanh² x lies in [1, 2]. True when the lower end is > 0
    (≥ 0 if not strict)."""
    from .arrays import Array, Sigmoid

    unit = sp.AccumBounds(-1, 1)
    bounded = {sp.tanh: unit, sp.erf: unit, Sigmoid: sp.AccumBounds(0, 1)}
    try:
        e = arg.replace(lambda n: type(n) in bounded, lambda n: bounded[type(n)])
        e = e.xreplace(
            {
                s: sp.AccumBounds(0, sp.oo) if s in positive else sp.AccumBounds(-sp.oo, sp.oo)
                for s in e.free_symbols
                if isinstance(s, Array) or s in positive
            }
        )
        e = sp.simplify(e) if not isinstance(e, sp.AccumBounds) else e
    except (TypeError, ValueError, NotImplementedError, AttributeError):
        return False
    if e.free_symbols or not isinstance(e, sp.AccumBounds) and not e.is_number:
        return False
    low = e.min if isinstance(e, sp.AccumBounds) else e
    return bool(low > 0) if strict else bool(low >= 0)


def index_bounds(op: Op, assigns=None) -> list:
    """[(integer input, bound)]: each integer input that indexes an axis (a row of a table in
    Gather, a class in OneHot, a column in Take) with that axis' length B, in the order met. The
    generated kernel refuses ids outside 0 … B − 1 (`_validate.in_range`), and the proofs take
    the same range as the ids' (`proof/obligations.setting_for`): one rule read by both."""
    from .arrays import Gather, OneHot, Take

    ints = set(op.integer_inputs)
    out: list = []
    for asg in op.spec + op.forward + op.backward if assigns is None else assigns:
        for node in sp.preorder_traversal(asg.expr):
            found = None
            if isinstance(node, Gather) and node.args[1] in ints:
                found = (node.args[1], shape_of(node.args[0])[0])
            elif isinstance(node, OneHot) and node.args[0] in ints:
                found = (node.args[0], node.args[1])
            elif isinstance(node, Take) and node.args[1] in ints:
                found = (node.args[1], shape_of(node.args[0])[1])
            if found is not None and found not in out:
                out.append(found)
    return out


def _printable_function(node) -> bool:
    """A function node codegen prints: a row of the one table of functions, a node of the array
    language (a class of this project), or one of SymPy's order and case nodes."""
    from .functions import by_sympy

    cls = type(node)
    if cls.__module__.startswith("derivations."):
        return True
    return by_sympy(cls) is not None or cls in (sp.Max, sp.Min, sp.Heaviside, sp.KroneckerDelta, sp.Piecewise)


def inferred_role(op: Op) -> str:
    """The role an op's signature fits in a GPT: "activation" (one elementwise input, an output
    of its shape, no parameters), "ffn" (x (r, d) -> y (r, d) through weight matrices over d and
    one hidden width f, no biases), "norm" (a row op x (r, n) -> y (r, n) with per-feature
    parameters (1, n): gains and shifts), "residual_scale" (an elementwise op with per-feature
    parameters (1, n)), "loss" (the cross-entropy's signature, `_loss_signature`), else ""."""
    if _loss_signature(op):
        return "loss"
    if len(op.inputs) != 1 or len(op.outputs) != 1 or op.integer_inputs or op.constant_inputs:
        return ""
    (x,), (y,) = op.inputs, op.outputs
    if x.shape != y.shape:
        return ""
    if op.params and all(w.shape == (1, x.shape[1]) for w in op.params):
        from .arrays import RowMax, RowMean, RowSum

        row_op = any(
            isinstance(node, (RowMean, RowSum, RowMax)) for a in op.spec for node in sp.preorder_traversal(a.expr)
        )
        if op.optional_axes < 1:
            return ""
        # a row op is a norm; an elementwise one with per-feature parameters scales a residual
        # branch (LayerScale)
        return "norm" if row_op else "residual_scale"
    if not op.params:
        from .arrays import ArrayNode

        elementwise = not any(isinstance(node, ArrayNode) for a in op.spec for node in sp.preorder_traversal(a.expr))
        return "activation" if op.optional_axes == 2 and elementwise else ""
    d = x.shape[1]
    dims = {dim for w in op.params for dim in w.shape}
    hidden = dims - {d}
    if len(hidden) != 1 or any(w.shape not in ((d, *hidden), (*hidden, d)) for w in op.params):
        return ""
    if sum(w.shape == (d, *hidden) for w in op.params) != 1:  # one output projection
        return ""
    return "ffn"


def _loss_signature(op: Op) -> bool:
    """The cross-entropy's signature: logits (T, V), integer targets (T, 1) and an integer 0/1
    mask (T, 1) in that order -> one (1, 1) loss, no parameters; the model calls
    `<name>_forward(logits, targets, mask)` (qed/config.py's `loss`)."""
    if len(op.inputs) != 3 or len(op.outputs) != 1 or op.params or op.constant_inputs:
        return False
    z, t, w = op.inputs
    return (
        z not in op.integer_inputs
        and t in op.integer_inputs
        and w in op.integer_inputs
        and len(op.integer_inputs) == 2
        and len(z.shape) == 2
        and t.shape == w.shape == (z.shape[0], 1)
        and op.outputs[0].shape == (1, 1)
    )


def model_role(op: Op) -> str:
    """The op's role in the model: the declared `role`, else the one its signature fits."""
    return inferred_role(op) if op.role is None else op.role


def flag_combinations(assigns) -> list[frozenset]:
    """Every combination of the flags that some line is guarded by (none first)."""
    import itertools

    flags = sorted({a.when for a in assigns if a.when is not None})
    return [frozenset(c) for k in range(len(flags) + 1) for c in itertools.combinations(flags, k)]


def grad_of(a: Array) -> Array:
    """The array `d<name>` that carries ∂L/∂<name>: same shape (printed ∂<name> in LaTeX)."""
    from .latex import array_latex

    return Array("d" + a.name, a.shape, latex=rf"\partial {array_latex(a)}")


def check_shapes(op: Op) -> None:
    """Every assignment's shape must be computable (raises ArrayError otherwise)."""
    for a in op.forward + op.backward:
        shape_of(a.expr)


@dataclass(frozen=True)
class TableArray:
    """One array of a table: entry [row, col] is `entry` for integers 0 <= row < rows,
    0 <= col < cols, where (rows, cols) = `shape` (expressions of the table's sizes)."""

    name: str
    shape: tuple
    index: tuple  # (row symbol, column symbol): integer Symbols
    entry: sp.Expr

    def __post_init__(self):
        if len(self.shape) != 2 or len(self.index) != 2:
            raise ArrayError(f"table array {self.name}: shape and index need two entries each")
        row, col = self.index
        if row == col or not (row.is_integer and col.is_integer):
            raise ArrayError(
                f"table array {self.name}: the row and column indices must be two "
                f"distinct integer symbols, got {row}, {col}"
            )


@dataclass
class Table:
    """A constant table built from sizes alone (no inputs, no backward), printed by codegen as

        <name>(<sizes>, *, <options>, dtype[, device]) -> one array, or a tuple of them

    into generated/<backend>/<file>.py (next to the op of that name, or a module of its own).
    The entry expressions use +, ×, powers (of −1 too), sin, cos, exp, KroneckerDelta, floor
    and Mod; the claims in `claims` prove them.

    `spec` states the sources' formula once, per array: array name -> the document's entry
    in the same (row, col) index symbols (floor, Mod and Piecewise allowed: ω_{⌊col/2⌋}, "sin in
    even columns"); the generated claim `<name>.entries` (derivations/proof/tables_steps.py) proves every
    printed entry equal to it for symbolic sizes, rows and columns, and the table's LaTeX is
    printed from it.
    """

    name: str
    file: str
    module: str
    title: str
    sizes: tuple  # size Symbols: the positional arguments, in order
    arrays: list  # TableArray, in the order they are returned
    options: list = field(default_factory=list)  # Option (base = 10000.0, ...)
    claims: list = field(default_factory=list)
    doc: str = ""
    spec: dict = field(default_factory=dict)  # array name -> the sources' entry formula
    source: str = ""  # where the sources state it ("seed A §5")
    # classic mistakes: name -> (what is wrong, array name, wrong printed entry)
    mistakes: dict = field(default_factory=dict)
    # where counterexamples are searched: {"sizes": {name: int}, "options": {name: value}}
    check: dict = field(default_factory=dict)
    latex: str = ""  # printed from `spec` (never given by hand)
    # sizes that must be even, with why (RoPE's d: its columns rotate in pairs (2i, 2i + 1)); the
    # printed table function refuses an odd one instead of returning a table of another meaning
    even: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.arrays:
            raise ArrayError(f"table {self.name}: no arrays")
        if set(self.even) - set(self.sizes):
            raise ArrayError(f"table {self.name}: even sizes {sorted(map(str, self.even))} are not all its sizes")
        names = [a.name for a in self.arrays]
        if len(set(names)) != len(names):
            raise ArrayError(f"table {self.name}: array names repeat: {names}")
        known = set(self.sizes) | {o.symbol for o in self.options if o.symbol is not None}
        for a in self.arrays:
            for dim in a.shape:
                extra = sp.sympify(dim).free_symbols - set(self.sizes)
                if extra:
                    raise ArrayError(
                        f"table {self.name}: the shape of {a.name} uses "
                        f"{sorted(map(str, extra))}, which are not its sizes"
                    )
            extra = sp.sympify(a.entry).free_symbols - known - set(a.index)
            if extra:
                raise ArrayError(
                    f"table {self.name}: the entry of {a.name} uses "
                    f"{sorted(map(str, extra))}, which are neither its indices, "
                    "sizes nor options"
                )
        if self.spec:
            if self.latex:
                raise ArrayError(
                    f"table {self.name}: its LaTeX is printed from the specification; give `spec`, not `latex`"
                )
            if set(self.spec) != set(names):
                raise ArrayError(
                    f"table {self.name}: the specification must give every array "
                    f"once: arrays {names}, spec {sorted(self.spec)}"
                )
            for a in self.arrays:
                extra = sp.sympify(self.spec[a.name]).free_symbols - known - set(a.index)
                if extra:
                    raise ArrayError(
                        f"table {self.name}: the specification of {a.name} uses "
                        f"{sorted(map(str, extra))}, which are neither its "
                        "indices, sizes nor options"
                    )
            self.latex = self._spec_latex()
        for mname, (_, target, _) in self.mistakes.items():
            if target not in names:
                raise ArrayError(f"table {self.name}: mistake {mname} names no array ({target})")

    def _spec_latex(self) -> str:
        """`name_{row, col} = <the sources' entry>` per array, by derivations/language/latex.py's printer;
        multi-letter indices and options print upright (\\mathrm{base})."""
        from .latex import ArrayLatexPrinter

        symbols = {i for a in self.arrays for i in a.index}
        symbols |= {o.symbol for o in self.options if o.symbol is not None}
        names = {s: rf"\mathrm{{{s.name}}}" for s in symbols if len(s.name) > 1}
        printer = ArrayLatexPrinter({"symbol_names": names})
        parts = []
        for a in self.arrays:
            row, col = (printer.doprint(i) for i in a.index)
            parts.append(rf"\mathrm{{{a.name}}}_{{{row}, {col}}} = " + printer.doprint(sp.sympify(self.spec[a.name])))
        return r", \quad ".join(parts)

    def value(self, array: str, row: int, col: int, sizes: dict, options: dict | None = None):
        """The exact SymPy value of entry [row, col] of `array` at concrete sizes (name -> int)
        and options (name -> value; defaults otherwise)."""
        a = next(x for x in self.arrays if x.name == array)
        subs = {s: sp.Integer(sizes[s.name]) for s in self.sizes}
        for o in self.options:
            if o.symbol is not None:
                subs[o.symbol] = sp.nsimplify((options or {}).get(o.name, o.default))
        subs[a.index[0]], subs[a.index[1]] = sp.Integer(row), sp.Integer(col)
        return a.entry.xreplace(subs)


@dataclass
class Composite:
    """A layer assembled from generated kernels only (no formula of its own): its template
    lays out the calls, in order, and the backward calls their `_backward`s in reverse.

    `kernels` are the ops it calls; `claims` are what justify the assembly (for multi-head
    attention: `mha.concat`, that the heads are column blocks of one fused projection).
    """

    name: str
    module: str
    title: str
    latex: str
    claims: list[str]
    kernels: list[str]
    template: str  # codegen/templates/<backend>_<template>.py.j2
    # loops over blocks whose lines codegen prints into the template (derivations/attention_tiled.py's
    # BlockLoop: init, body, end, the carried state, the rows each block writes)
    loops: tuple = ()
