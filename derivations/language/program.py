"""A model as a program over the registry's ops: the sources' flow, declared once.

A `Program` is three straight-line sections of statements in single-assignment form:

    embed   ids -> x                      (once)
    block   x -> y                        (n_layer times, its parameters under h.<layer>.)
    head    x -> logits, loss             (once)

Each `Stmt` computes one value (or three, `split3`) from values already computed, by a rule of
one of the `KINDS`: a call of a registry op by its role in the model (norm, activation, MLP op,
attention, positions, linear, embedding, loss, dropout), a residual add, an index map (the head split and
merge, the three-way split of the fused projection) or an alias. A statement may be guarded by
model options (`when`): pre- or post-norm, the positions, an activation or a whole MLP op; two
statements may define the same name under exclusive guards.

The backward is not declared: `reverse(section)` derives it by the composition rule (reverse
mode over the statements, each node's adjoint rule once, `ADJOINTS`), and codegen prints both.
`guard_holds` is the one reading of a guard, shared by the printer and the interpreters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# kind: (what it computes, its adjoint rule: which inputs receive what)
KINDS: dict[str, tuple[str, str]] = {
    "embedding": ("x = W[ids]: rows of the parameter W", "dW += scatter-add of dx at ids"),
    "linear": ("y = x Wᵀ + b (b with bias=True)", "the linear op's backward: dx, dW, db"),
    "linear_nobias": ("y = x Wᵀ", "the linear_nobias op's backward: dx, dW"),
    "norm": ("y = the norm op of the model (its parameters by name)", "the norm op's backward"),
    "activation": ("y = f(x), the activation of the model", "the activation op's backward"),
    "mlp": ("y = the MLP op of the model (its weights by name)", "the MLP op's backward"),
    "scale": ("y = the residual scale op of the model (LayerScale: γ ⊙ x)", "the scale op's backward"),
    "dropout": (
        "y = x ⊙ m/(1 − p), m the call's keep mask (training; y = x without one: eval, sampling)",
        "the dropout op's backward: dx = dy ⊙ m/(1 − p)",
    ),
    "attention": ("o = softmax(q kᵀ/√d + causal mask) v, per head", "the attention op's backward"),
    "attention_dropout": (
        "o = (softmax(q kᵀ/√d + causal mask) ⊙ m/(1 − p)) v, per head, m the call's keep mask (training; "
        "the model's attention without one)",
        "the attention_dropout op's backward (the attention op's without a mask)",
    ),
    "scores": ("s = q kᵀ/√d, per head (attention's first half)", "the attention_scores op's backward"),
    "score_transform": ("s ← f(s), the model's score transform (soft-capping, …)", "the transform op's backward"),
    "attend": (
        "o = softmax(s + causal mask) v, per head (attention's second half)",
        "the attention_softmax op's backward",
    ),
    "rope": ("y = x rotated by the position's angle (constant tables)", "the rope op's backward"),
    "add": ("y = a + b (a residual)", "da += dy, db += dy (fan-out)"),
    "add_table": ("y = a + PE[:T] (a constant table)", "da += dy"),
    "same": ("y = x (an alias: the option leaves x as it is)", "dx += dy"),
    "split3": ("(q, k, v) = the three column blocks of x", "dx = concat(dq, dk, dv)"),
    "heads": ("(B, T, C) -> (B, h, T, C/h): column block i is head i", "dx = merge(dy)"),
    "merge": ("(B, h, T, d) -> (B, T, h·d): the inverse of heads", "dx = heads(dy)"),
    "loss": ("the loss op of the model (cross_entropy, …): its mean over the scored targets", "the loss op's backward"),
}

PARAMETERISED = {"embedding", "linear", "linear_nobias", "norm", "mlp", "scale"}


@dataclass(frozen=True)
class Stmt:
    kind: str
    out: tuple[str, ...]
    args: tuple[str, ...]
    scope: str | None = None  # the parameters' scope ("ln_1", "attn.c_attn"); None: none
    when: tuple = ()  # ((option, (allowed values, ...)), ...): all must hold
    note: str = ""  # the formula in the sources' notation (the printed comment)
    # a norm statement: the model option that names its op ("norm": the model's norm; "qk_norm")
    which: str = "norm"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown statement kind {self.kind!r}; known: {', '.join(KINDS)}")
        if (self.scope is None) == (self.kind in PARAMETERISED):
            raise ValueError(f"{self.kind} statement {self.out}: a scope is needed exactly for {sorted(PARAMETERISED)}")


def stmt(
    kind: str, out, *args: str, scope: str | None = None, when: dict | None = None, note: str = "", which: str = "norm"
) -> Stmt:
    """A statement: `out` a name or a tuple of names, `args` the values it reads, `when` the
    options under which it runs ({option: value or tuple of values}), `which` the model option
    that names a norm statement's op."""
    outs = (out,) if isinstance(out, str) else tuple(out)
    guard = tuple(sorted((k, v if isinstance(v, tuple) else (v,)) for k, v in (when or {}).items()))
    return Stmt(kind, outs, tuple(args), scope, guard, note, which)


def guard_holds(when: tuple, options: dict) -> bool:
    return all(options[k] in values for k, values in when)


@dataclass(frozen=True)
class Section:
    name: str  # embed, block, head
    inputs: tuple[str, ...]  # values given to it (ids, x; the data: targets)
    outputs: tuple[str, ...]
    body: tuple[Stmt, ...]

    def check(self) -> None:
        """Single assignment under every guard, every read after its definition."""
        defined: dict[str, list[tuple]] = {n: [()] for n in self.inputs}
        for s in self.body:
            for a in s.args:
                if a not in defined:
                    raise ValueError(f"{self.name}: {s.kind} {s.out} reads {a!r} before it is defined")
            for o in s.out:
                for w in defined.get(o, []):
                    if not exclusive(w, s.when):
                        raise ValueError(f"{self.name}: {o!r} defined twice under guards that can both hold")
                defined.setdefault(o, []).append(s.when)
        for o in self.outputs:
            if o not in defined:
                raise ValueError(f"{self.name}: output {o!r} is never defined")


def exclusive(a: tuple, b: tuple) -> bool:
    """Guards that cannot hold together: some option allowed different values by each."""
    da, db = dict(a), dict(b)
    return any(set(da[k]).isdisjoint(db[k]) for k in da.keys() & db.keys())


@dataclass(frozen=True)
class Program:
    name: str
    title: str
    options: dict  # option -> its values (the guards' domain)
    embed: Section
    block: Section
    head: Section
    ties: dict = field(default_factory=dict)  # scope -> (option, the scope it reads instead)
    decay_min_axes: int = 2  # AdamW's weight decay on the parameters with at least this many axes

    def sections(self) -> tuple[Section, ...]:
        return (self.embed, self.block, self.head)

    def check(self) -> None:
        for s in self.sections():
            s.check()
            for st in s.body:
                clash = RESERVED.intersection(st.out)
                if clash:
                    raise ValueError(f"{s.name}: value name(s) {sorted(clash)} are the printed program's own")
            for st in s.body:
                for k, values in st.when:
                    if k not in self.options or not set(values) <= set(self.options[k]):
                        raise ValueError(f"{s.name}: guard {k}={values} outside the options {self.options}")


# --------------------------------------------------------------------------- reverse mode
@dataclass(frozen=True)
class Adjoint:
    """One statement of the derived backward: `stmt`'s adjoint rule, reading d<out> and
    adding into d<arg> for every argument that carries a gradient (`grads`)."""

    stmt: Stmt
    grads: tuple[str, ...]  # the arguments that receive an adjoint, in the order of `stmt.args`


# names the printed program uses for itself (the kernels, parameters, gradients, options, the
# block's prefix and tape, the attention backward's three results)
RESERVED = {"ops", "P", "G", "o", "p", "c", "tape", "layer", "dq", "dk", "dv", "np", "weight", "targets", "noise"}

NO_GRADIENT = {"ids", "pos", "targets"}  # integer data: no adjoint


def reverse(section: Section) -> tuple[Adjoint, ...]:
    """The backward of a section by the composition rule: the statements in reverse order, each
    adding its inputs' adjoints (a value read twice gets the sum: the fan-out rule)."""
    out = []
    for s in reversed(section.body):
        grads = tuple(a for a in s.args if a not in NO_GRADIENT)
        out.append(Adjoint(s, grads))
    return tuple(out)


def adjoint_names(section: Section) -> tuple[str, ...]:
    """Every value of a section that receives an adjoint (inputs and statement outputs read by
    a statement with a gradient), in order of definition."""
    seen: list[str] = []
    for a in reverse(section):
        for g in a.grads:
            if g not in seen:
                seen.append(g)
        for o in a.stmt.out:
            if o not in seen:
                seen.append(o)
    return tuple(n for n in list(section.inputs) + [o for s in section.body for o in s.out] if n in seen)
