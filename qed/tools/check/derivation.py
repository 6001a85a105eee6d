"""`qed.derive`: a formula's derivative, its proved backward and the code codegen prints for it.

    >>> d = qed.derive(r"\\log(1 + e^{x})")
    >>> d.derivative            # LaTeX of dy/dx
    '\\\\frac{e^{x}}{e^{x} + 1}'
    >>> print(d.numpy)          # what `make codegen` prints for an op of this formula

The formula is read by `qed check`'s front end (the same whitelisted grammar, the same context:
the catalogue's names, or `context=`), as a function of one variable `wrt` (by default the one
name the formula reads that is not a function), an array `x` of shape (r, n). It becomes an op
of the array language declared by its forward alone (derivations/language/ops.py, as
derivations/softplus.py is): the backward is derived by reverse mode
(derivations/language/autodiff.py), the printed forward and backward are stabilised where a
proved rewrite applies, and the op's generated claims (derivations/proof/obligations.py) are
run here — the printed forward equals the formula, the printed backward equals its derivative,
for symbolic sizes. The derivative shown is `sympy.diff` of the formula entry by entry, and is
itself proved equal to the printed backward (per unit upstream gradient). A formula whose
backward cannot be proved is refused (`DeriveError`), never printed.

Only formulas of one variable: another name (a scalar such as ε, a second array) is refused
with the names found; numbers, π and e are constants.
"""

from __future__ import annotations

import html as _html
import re
from dataclasses import dataclass, field

import sympy as sp

from derivations.language.arrays import Array, ArrayNode, Assign, document_form, entry, size

from . import parser as P
from .context import label_of
from .elaborate import Elaborator, FnRef, Val, doc_name
from .grammar import NotUnderstood
from .transcript import _UNICODE_GREEK, latex, name_latex


class DeriveError(ValueError):
    """A formula that `derive` cannot read, differentiate, prove or print: the reason."""


@dataclass
class Derivation:
    """What `qed.derive` returns. Strings are LaTeX (`function`, `derivative`, `backward`) or
    Python source (`numpy`, `torch`); `proofs` maps each generated claim to its status."""

    formula: str
    variable: str
    function: str  # y = … as read
    derivative: str | None  # dy/dx, entry by entry (None for an op that is not elementwise)
    backward: str  # the printed backward: dx = …
    proofs: dict = field(default_factory=dict)  # claim id -> status ("proved-general")
    cited: list = field(default_factory=list)  # the catalogue's claims the printed lines rely on
    numpy: str = ""
    torch: str = ""
    expr: object = field(default=None, repr=False)  # the function, SymPy, of `symbol`
    derivative_expr: object = field(default=None, repr=False)  # its derivative, SymPy
    symbol: object = field(default=None, repr=False)
    op: object = field(default=None, repr=False)  # the op (derivations.language.ops.Op)

    @property
    def proved(self) -> bool:
        return bool(self.proofs) and all(s == "proved-general" for s in self.proofs.values())

    def code(self, backend: str = "numpy") -> str:
        return {"numpy": self.numpy, "torch": self.torch}[backend]

    def _repr_markdown_(self) -> str:
        out = [f"$${self.function}$$", ""]
        if self.derivative is not None:
            v = name_latex(self.variable)
            out += [f"$$\\frac{{\\partial y}}{{\\partial {v}}} = {self.derivative}$$", ""]
        out += [f"backward (printed): ${self.backward}$", ""]
        out += [f"- `{k}`: {s}" for k, s in self.proofs.items()]
        if self.cited:
            out.append(f"- cited catalogue claims: {', '.join(f'`{c}`' for c in self.cited)}")
        out += ["", "```python", self.numpy.rstrip(), "```", "", "```python", self.torch.rstrip(), "```"]
        return "\n".join(out) + "\n"

    def _repr_html_(self) -> str:
        out = [f"<p>\\[{_html.escape(self.function)}\\]</p>"]
        if self.derivative is not None:
            v = name_latex(self.variable)
            out.append(
                f"<p>\\[\\frac{{\\partial y}}{{\\partial {_html.escape(v)}}} = {_html.escape(self.derivative)}\\]</p>"
            )
        out.append(f"<p>backward (printed): \\({_html.escape(self.backward)}\\)</p><ul>")
        out += [f"<li><code>{_html.escape(k)}</code>: {_html.escape(s)}</li>" for k, s in self.proofs.items()]
        out.append("</ul>")
        for title, code in (("NumPy", self.numpy), ("PyTorch", self.torch)):
            out.append(f"<details><summary>{title}</summary><pre>{_html.escape(code)}</pre></details>")
        return "".join(out)


# ------------------------------------------------------------------------------ reading
def _names(node, ctx) -> list[str]:
    """The names a formula reads that are not functions (in order of first use)."""
    out: list[str] = []

    def add(name):
        if name not in out:
            out.append(name)

    def walk(n, applied: bool = False):
        if isinstance(n, P.Juxt):
            items = list(n.items)
            for k, it in enumerate(items):
                nxt = items[k + 1] if k + 1 < len(items) else None
                name = doc_name(it)
                is_fn = name is not None and ctx.function(name) is not None and ctx.value(name) is None
                walk(it, applied=is_fn and isinstance(nxt, (P.Paren, P.Script)))
            return
        if isinstance(n, P.Letters):
            if not applied and not (n.text == "e" and ctx.value("e") is None):
                if ctx.function(n.text) is None or ctx.value(n.text) is not None:
                    add(n.text)
            return
        if isinstance(n, P.Greek):
            name = doc_name(n)
            if not applied and n.name != "pi" and (ctx.function(name) is None or ctx.value(name) is not None):
                add(name)
            return
        if isinstance(n, (P.Script, P.Accent, P.Prime)) and doc_name(n) is not None and not applied:
            if isinstance(n, P.Script) and isinstance(n.base, P.Greek) and n.base.name == "delta":
                pass
            else:
                add(doc_name(n))
                return
        if isinstance(n, P.Sum):
            inner = _names(n.body, ctx)
            for name in inner:
                if name not in n.vars:
                    add(name)
            for b in (n.lo, n.hi):
                if b is not None:
                    walk(b)
            return
        for value in vars(n).values() if hasattr(n, "__dict__") else ():
            for child in value if isinstance(value, tuple) else (value,):
                if isinstance(child, P.Node):
                    walk(child)
                elif isinstance(child, tuple):
                    for c in child:
                        if isinstance(c, P.Node):
                            walk(c)

    walk(node)
    return out


def _identifier(name: str) -> str:
    """A Python name for a document name: x → x, θ → theta, x_1 → x_1."""
    out = "".join(_UNICODE_GREEK.get(c, c) for c in name)
    out = re.sub(r"\W", "_", out)
    if not out.isidentifier() or out.startswith("_"):
        raise DeriveError(f"the variable {name!r} has no name a Python function could take")
    return out


def _read(formula: str, wrt: str | None, context):
    from .builtins import make_context

    ctx, problems = make_context(context)
    if problems:
        raise DeriveError("; ".join(problems))
    statements = P.split(formula)
    if len(statements) != 1 or statements[0].relations or statements[0].error:
        why = statements[0].error if len(statements) == 1 and statements[0].error else None
        raise DeriveError(
            f"not understood: {why}" if why else "derive takes an expression (the right side of y = …), not an equation"
        )
    try:
        tree = P.parse(formula)
    except NotUnderstood as e:
        raise DeriveError(f"not understood: {e}") from None
    names = _names(tree, ctx)
    if wrt is None:
        if len(names) != 1:
            found = ", ".join(names) or "none"
            raise DeriveError(f"derive takes a formula of one variable (names found: {found}); give wrt=")
        wrt = names[0]
    elif set(names) - {wrt}:
        raise DeriveError(
            f"derive takes a formula of one variable: it reads {', '.join(n for n in names if n != wrt)} besides {wrt}"
        )
    r, n = size("r"), size("n")
    ident = _identifier(wrt)
    x = Array(ident, (r, n), latex=name_latex(wrt))
    # an elementwise formula: the variable read as a scalar u, the op applies it entry by entry
    u = sp.Dummy(ident, real=True)
    elab = Elaborator(ctx, scope={wrt: Val(u, ())})
    try:
        v = elab.value(tree)
        if not isinstance(v, FnRef) and v.is_scalar and not elab.free and v.expr.has(u):
            return wrt, x, v.expr.xreplace({u: x})
    except NotUnderstood:
        pass
    # a row-wise formula (softmax(x)): the variable read as an array (r, n)
    elab = Elaborator(ctx, scope={wrt: Val(x, (r, n))})
    try:
        v = elab.value(tree)
    except NotUnderstood as e:
        raise DeriveError(f"not understood: {e}") from None
    if isinstance(v, FnRef) or elab.free:
        raise DeriveError("not understood: free indices in the formula (derive takes an array expression)")
    if v.is_scalar or not v.expr.has(x):
        raise DeriveError(f"the formula does not depend on {wrt} as an array (a constant?)")
    shape = tuple(elab.resolve(s) for s in v.shape)
    if shape != (r, n):
        raise DeriveError(f"the formula's shape {shape} is not its variable's (r, n): derive takes row-wise formulas")
    return wrt, x, v.expr


# ------------------------------------------------------------------------------ deriving
def derive(formula: str, wrt: str | None = None, context=None, name: str = "f") -> Derivation:
    """See the module docstring."""
    from codegen.render import render_op
    from derivations.language.ops import Op
    from derivations.proof.core import Setting, prove_index_identity
    from derivations.proof.obligations import backward_scope, obligations

    if not name.isidentifier() or name.startswith("_"):
        raise DeriveError(f"name {name!r}: the op's name must be a Python identifier")
    wrt, x, expr = _read(formula, wrt, context)
    r, n = x.shape
    y = Array("z" if x.name == "y" else "y", (r, n))
    elementwise = not any(isinstance(node, ArrayNode) for node in sp.preorder_traversal(expr))
    try:
        op = Op(
            name=name,
            module="qed.derive",
            title=f"{name}: qed.derive",
            source="qed.derive",
            inputs=[x],
            outputs=[y],
            spec=[Assign(y, expr)],
            optional_axes=2 if elementwise else 1,
        )
    except Exception as e:  # the op cannot be built: its forward is outside the array language
        raise DeriveError(f"the formula cannot be made an op: {type(e).__name__}: {e}") from None
    proofs = {}
    for ob in obligations(op):
        proofs[ob.id] = ob.prove().status
    if any(s != "proved-general" for s in proofs.values()):
        raise DeriveError(f"the derived backward is not proved: {proofs}")
    (backward,) = [a for a in op.backward if a.target in op.grads] or op.backward[:1]
    i, j = sp.Symbol("i", integer=True), sp.Symbol("j", integer=True)
    derivative = derivative_expr = symbol = scalar = None
    if elementwise:
        symbol = sp.Symbol(x.name, real=True)
        scalar = entry(expr, (i, j)).xreplace({x.base[i, j]: symbol})
        if scalar.has(sp.Indexed):
            raise DeriveError("the formula is not elementwise in its variable")
        derivative_expr = _derivative(scalar, symbol)
        # the derivative shown is proved equal to the printed backward per unit upstream gradient
        dy = Array("d" + y.name, (r, n))
        printed = entry(backward.target, (i, j), backward_scope(op)).xreplace({dy.base[i, j]: 1})
        setting = Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)})
        shown = derivative_expr.xreplace({symbol: x.base[i, j]})
        proof = prove_index_identity(printed, shown, setting, "the derivative shown against the printed backward")
        proofs["derivative shown = printed backward"] = proof.status
        if proof.status != "proved-general":
            raise DeriveError(f"the derivative shown does not match the printed backward ({proof.status})")
        derivative = latex(derivative_expr.xreplace({symbol: sp.Symbol(wrt)}))
    codes = {}
    for backend in ("numpy", "torch"):
        try:
            codes[backend] = _relabel(render_op(op, backend), backend)
        except Exception as e:  # codegen's refusal, reported rather than raised
            codes[backend] = f"# codegen cannot print this op for {backend}: {type(e).__name__}: {e}\n"
    return Derivation(
        formula=formula,
        variable=wrt,
        function=f"{latex(y)} = {latex(expr)}",
        derivative=derivative,
        backward=f"{latex(backward.target)} = {latex(backward.expr)}",
        proofs=proofs,
        cited=[c for c in op.claims if c not in proofs],
        numpy=codes["numpy"],
        torch=codes["torch"],
        expr=scalar,
        derivative_expr=derivative_expr,
        symbol=symbol,
        op=op,
    )


def _derivative(scalar, symbol):
    """d scalar / d symbol, in its shortest form: σ, Φ differentiated by their own rules
    (σ' = σ(1 − σ)) or as the formulas they stand for — `derive` proves whichever is shown."""
    candidates = [sp.diff(scalar, symbol), sp.diff(document_form(scalar), symbol)]
    candidates += [sp.cancel(sp.together(c)) for c in candidates]
    return min(candidates, key=lambda c: (sp.count_ops(c), len(str(c))))


def _relabel(text: str, backend: str) -> str:
    """The module's header says where it comes from: qed.derive, not a file of derivations/."""
    lines = text.split("\n")
    head = [
        f"# Printed by qed.derive with codegen's template {backend}_op.py.j2: the module `make codegen` would",
        "# write for an op of this formula (its imports are relative: save it in generated/<backend>/).",
    ]
    if len(lines) > 2 and lines[0].startswith("# Generated by"):
        lines = head + lines[2:]
    return "\n".join(lines)


__all__ = ["derive", "Derivation", "DeriveError", "label_of"]
