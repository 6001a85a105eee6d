"""The symbol context of `qed check`: what each name means, where that was said.

A document's formulas are read against:

1. the **convention table** (`CONVENTION` below, stated on docs/check.md): the catalogue's names
   with their kinds and shapes (Q, K, V, X matrices; n, d_k, T sizes; i, j, k indices; softmax,
   σ, Φ functions; S, A, O with the catalogue's definitions; RoPE's pos, ω_i and the angle θ),
   so that the source documents check with no annotation;
2. a **`qed` block** in the document (a fenced ```` ```qed ```` block, or the lines of a front
   matter `---` block that start with a kind), one declaration a line:

       size n, d_k             index i, j          scalar eps positive
       matrix Q: n x d_k       vector x: d         function f

3. the document's own **declarations and definitions**, in order (`Q \\in \\mathbb{R}^{n \\times
   d_k}`, `S = QK^T/\\sqrt{d_k}`, `A_{ij} = …`, `f(x) = …`): the latest one wins.

Nothing here evaluates user text: the declarations of a `qed` block are split into words.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp

from derivations.language.arrays import Array, size
from derivations.proof.expectation import RandomVector

from .grammar import NotUnderstood

UNKNOWN = "?"  # the prefix of a size not known yet (a vector "of some length")


def basic(x) -> sp.Basic:
    """A SymPy object from a SymPy object or a Python number — never from text: nothing a document
    says is handed to `sympify` (which parses strings)."""
    if isinstance(x, str):
        raise TypeError("basic() takes SymPy objects and numbers, not text")
    return sp.sympify(x)


def unknown_size(name: str) -> sp.Symbol:
    return sp.Symbol(UNKNOWN + name, integer=True, positive=True)


def is_unknown(s) -> bool:
    return isinstance(s, sp.Symbol) and s.name.startswith(UNKNOWN)


@dataclass
class Binding:
    """What a name of the value namespace stands for."""

    kind: str  # "size", "scalar", "array", "ids", "loss", "ones", "family", "poisoned"
    name: str  # how the document writes it (the key): "Q", "W_Q", "d_k", "x̂", "∂L/∂O"
    label: str = ""  # the SymPy name of its Symbol or IndexedBase
    shape: tuple | None = None  # arrays: (rows, cols); a vector is a row (1, n)
    positive: bool = False  # scalars
    origin: str = "convention"  # "convention", "qed block", "line 23"
    meaning: str = ""  # in words, for the report
    reason: str = ""  # poisoned: why every use is refused
    opaque: str = ""  # a definition that was not understood: why no counterexample may use it
    gain: bool = False  # a per-feature gain (LayerNorm's γ): γx̂ written side by side is γ ⊙ x̂
    bound: object = None  # ids: the number of ids (their entries are 0 … bound − 1)
    # a vector the sources write bare for its entry at one index letter: RoPE's angle θ is θ_i,
    # the angle of the pair (2i, 2i + 1) (only ever read bare; θ_t is another name)
    bare: str = ""

    def symbol(self) -> sp.Symbol:
        if self.kind == "size":
            return size(self.label)
        if self.positive:
            return sp.Symbol(self.label, positive=True)
        return sp.Symbol(self.label, real=True)

    def array(self) -> Array:
        return Array(self.label, self.shape, integer=self.kind == "ids")


@dataclass
class Definition:
    """A name's meaning: an array expression, entries (vars → body), a scalar expression; or,
    never expanded, a recurrence, a family of arrays (one per index: `head_i = …`) or an argmax
    (an index: `token = \\arg\\max_i …`)."""

    kind: str  # "array", "entries", "scalar" (unfolded); "recurrence", "family", "argmax" (never unfolded)
    expr: object = None
    vars: tuple = ()  # entries: the 0-based index symbols of the left side
    origin: str = "convention"
    source: str = ""
    # sizes that must be even for the definition to mean anything: a vector defined by its pairs
    # (x'_{2i}, x'_{2i+1}) has an even length; a step that reads it holds for even lengths
    even: tuple = ()


@dataclass
class FunctionSpec:
    """A function: built in (the catalogue's) or defined by the document (a macro of its body)."""

    name: str
    kind: str  # "builtin", "document", "family" (defined on a family's members: P(token_i) = …)
    arity: int = 1
    apply: Callable | None = None  # builtin: (elaborator, [Val], [Node]) -> Val
    params: tuple = ()
    body: object = None  # document: the body's syntax tree
    scalar: bool = False  # elementwise (its body reads its argument as a scalar)
    origin: str = "convention"
    meaning: str = ""
    table: str = ""  # family: the vector whose entry i is its value at the i-th member
    reads_ids: bool = False  # builtin: an argument that names token ids is passed as the ids (a lookup's)


# the kinds of definition that `expand` unfolds (the others are kept opaque)
UNFOLDED = ("array", "entries", "scalar")


# ------------------------------------------------------------------------------ the convention
# (name, kind, shape or None, meaning). Sizes are positive integers; vectors are rows (1, n);
# "?" marks a length that the first use fixes.
SIZES = ("n", "d", "d_k", "d_v", "d_model", "d_ff", "h", "T")
# sizes whose name is also a value's: read as the size only where a size is written (the exponent
# of ℝ^{…}); V is the values matrix, and the vocabulary size (derivations/loss.py, embedding.py)
DIM_SIZES = {"V": ("V_vocab", "the vocabulary size")}
INDEX_LETTERS = ("i", "j", "k", "l", "t")
MATRICES = {
    "Q": (("n", "d_k"), "queries"),
    "K": (("n", "d_k"), "keys"),
    "V": (("n", "d_v"), "values"),
    "X": (("n", "d_model"), "the input rows"),
    "S": (("n", "n"), "the scores Q Kᵀ/√d_k"),
    "A": (("n", "n"), "the attention weights softmax(S)"),
    "O": (("n", "d_v"), "the attention output A V"),
    "M": (("n", "n"), "a mask added to the scores"),
    "W_Q": (("d_model", "d_k"), "the query projection"),
    "W_K": (("d_model", "d_k"), "the key projection"),
    "W_V": (("d_model", "d_v"), "the value projection"),
    "W_1": (("d_model", "d_ff"), "the first FFN weight"),
    "W_2": (("d_ff", "d_model"), "the second FFN weight"),
    "b_1": ((1, "d_ff"), "the first FFN bias"),
    "b_2": ((1, "d_model"), "the second FFN bias"),
    "W_g": (("d_model", "d_ff"), "the gate projection"),
    "W_u": (("d_model", "d_ff"), "the up projection"),
    "W_d": (("d_ff", "d_model"), "the down projection"),
    "W_O": (("d_model", "d_model"), "the output projection"),
    "H": (("T", "d_model"), "the final hidden states, one row per token (derivations/loss.py)"),
    "E": (("V_vocab", "d_model"), "the embedding matrix, one row per token id (derivations/embedding.py)"),
    "W_vocab": (("d_model", "V_vocab"), "the vocabulary projection (derivations/loss.py)"),
    # gradient descent's weight, before and after a step (derivations/optim.py's sgd: any parameter)
    "W": (("d_model", "d_model"), "a weight: any parameter of the model (derivations/optim.py)"),
    "W_old": (("d_model", "d_model"), "the weight before a step"),
    "W_new": (("d_model", "d_model"), "the weight after a step"),
}
IDS = {  # integer ids: a column of n ids, each in 0 … V − 1 (only read through a lookup E[ids])
    "token_ids": "the token ids",
}
GAINS = ("γ",)  # per-feature gains: γx̂ written side by side is γ ⊙ x̂ (LayerNorm, derivations/normalization.py)
VECTORS = {  # row vectors of a length fixed by their first use
    "x": "an input vector",
    "γ": "a scale vector",
    "β": "a shift vector",
    "p": "the probabilities softmax(x)",
    "y": "a target (or output) vector",
    "g": "the gradients g_t of Adam, one per step",
    "b": "a bias (the logits' bias b of derivations/loss.py)",
    # derivations/loss.py: P(token_j) = e^{logit_j}/Σ_k e^{logit_k}, logit one row of the logits
    "logit": "the logits of one position",
}
SCALARS = {  # name -> (positive, meaning)
    "ε": (True, "a small positive constant"),
    "η": (True, "the learning rate"),
    "β_1": (False, "Adam's first decay rate"),
    "β_2": (False, "Adam's second decay rate"),
}
# RoPE (seed B §15, derivations/positional.py): a row x at position pos is turned pair by pair,
# (x_{2i}, x_{2i+1}) by the angle θ_i = pos·ω_i, with the catalogue's frequencies ω_i = base^{−2i/d}
# (seed B leaves ω_i open; the op uses RoFormer's, seed A §5's), i counted from 0, d = 2 × the number
# of pairs. The sources write the angle bare (θ): θ is read only so, as θ_i (builtins.py)
ROPE_SCALARS = {  # name -> (positive, meaning)
    "pos": (False, "the position of the row x in the sequence (the rope op's row t)"),
    "base": (True, "the RoPE frequency base (10000 in the sources)"),
}
ROPE_VECTORS = {  # name -> meaning; one entry per pair, the same number of pairs
    "ω": "the RoPE frequencies ω_i = base^{−2i/d}, one per pair (2i, 2i+1), i from 0",
    "θ": "the RoPE angle θ_i = pos·ω_i of the pair (2i, 2i+1), written bare",
}
ROPE_ANGLE = ("θ", "i")  # the name written bare, and the index it stands at
# the catalogue's definitions written as the sources write them, read by this front end itself
# (builtins.default_context): Adam's moments and their bias correction (derivations/optim.py);
# a document that states them is checked against these (a recurrence: its step function)
CONVENTION_DEFINITIONS = (
    r"m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t",
    r"v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2",
    r"\hat{m}_t = \frac{m_t}{1 - \beta_1^t}",
    r"\hat{v}_t = \frac{v_t}{1 - \beta_2^t}",
)
LOSSES = ("L", "𝓛")
# any parameter of the model: the loss depends on it through the model, which a document states
# without writing it out (∂L/∂W of gradient descent is then the opaque gradient, as ∂L/∂O is)
PARAMETERS = ("W",)
# the convention's definitions come in groups: using one name of a group brings the whole group
_ATTENTION = ("S", "A", "O")
_ADAM = ("m", "v", "mhat", "vhat")
CONVENTION_GROUPS = {
    "S": _ATTENTION,
    "A": _ATTENTION,
    "O": _ATTENTION,
    "p": ("p",),
    **{label: _ADAM for label in _ADAM},
}  # the loss: a scalar function of every output, not given unless defined


def _sz(s):
    return sp.Integer(s) if isinstance(s, int) else size(s)


class Context:
    """Names → meanings, in order; `copy()` gives an independent context."""

    def __init__(self):
        self.values: dict[str, Binding] = {}
        self.functions: dict[str, FunctionSpec] = {}
        self.defs: dict[str, Definition] = {}  # by label
        self.index_letters: set[str] = set()
        self.random: dict[str, RandomVector] = {}  # by label
        self.size_values: dict = {}  # size Symbol -> its value (a document's example numbers)
        self.labels: dict[str, Binding] = {}  # label -> binding
        self.mentioned: set[str] = set()  # labels the document has read or defined
        self.dims: dict[str, Binding] = {}  # sizes read only in a size's place (DIM_SIZES)

    def copy(self) -> Context:
        new = Context()
        new.values = {k: copy.copy(v) for k, v in self.values.items()}
        new.labels = {b.label: b for b in new.values.values() if b.label}
        new.functions = dict(self.functions)
        new.defs = dict(self.defs)
        new.index_letters = set(self.index_letters)
        new.random = {k: copy.copy(v) for k, v in self.random.items()}
        new.size_values = dict(self.size_values)
        new.mentioned = set(self.mentioned)
        new.dims = {k: copy.copy(v) for k, v in self.dims.items()}
        return new

    # ---------------------------------------------------------------- bindings
    def bind(self, b: Binding) -> Binding:
        if not b.label:
            b.label = label_of(b.name)
        old = self.values.get(b.name)
        if old is not None and old.label != b.label:
            self.labels.pop(old.label, None)
        self.values[b.name] = b
        self.labels[b.label] = b
        return b

    def value(self, name: str) -> Binding | None:
        return self.values.get(name)

    def function(self, name: str) -> FunctionSpec | None:
        return self.functions.get(name)

    def definition(self, label: str) -> Definition | None:
        return self.defs.get(label)

    def active(self, label: str) -> bool:
        """Does the definition of `label` belong to the document's world? Its own do; one of the
        convention table once a name of its group was used."""
        d = self.defs.get(label)
        if d is None:
            return False
        if d.origin != "convention":
            return True
        group = CONVENTION_GROUPS.get(label, (label,))
        return any(g in self.mentioned for g in group)

    def define(self, label: str, d: Definition) -> None:
        self.defs[label] = d
        if d.origin != "convention":
            self.mentioned.add(label)

    def is_default(self, name: str) -> bool:
        """Is `name` the convention's, and not used by the document yet? Then a declaration of
        the document (a `qed` block, `x \\in \\mathbb{R}^{…}`, a size in ℝ^{…}) replaces it."""
        b = self.values.get(name)
        return b is not None and b.origin == "convention" and b.label not in self.mentioned

    def forget(self, name: str) -> None:
        """Drop the convention's meaning of `name` (see `is_default`)."""
        b = self.values.pop(name, None)
        if b is not None:
            self.labels.pop(b.label, None)
            self.defs.pop(b.label, None)

    def size_symbol(self, name: str) -> sp.Symbol:
        b = self.values.get(name)
        if b is None or b.kind != "size":
            raise NotUnderstood(f"{name} is not a size")
        return b.symbol()

    def binding_of_label(self, label: str) -> Binding | None:
        return self.labels.get(label)

    def poison(self, name: str, reason: str, origin: str) -> None:
        """`name`'s definition was not understood. A name that had a shape keeps it, as an
        arbitrary array or scalar: a proof about it holds whatever it is, but no counterexample
        may use it (its meaning is unknown). A name that had none: every later use is refused."""
        old = self.values.get(name)
        if old is not None and old.kind in ("array", "scalar"):
            self.bind(
                Binding(
                    old.kind,
                    name,
                    old.label,
                    shape=old.shape,
                    positive=old.positive,
                    origin=origin,
                    meaning=old.meaning,
                    opaque=f"its definition ({origin}) was not understood: {reason}",
                )
            )
            self.defs.pop(old.label, None)
            return
        self.bind(Binding("poisoned", name, label_of(name), origin=origin, reason=reason))

    def poison_function(self, name: str, reason: str, origin: str) -> None:
        self.functions[name] = FunctionSpec(name, "poisoned", origin=origin, meaning=reason)


def label_of(name: str) -> str:
    """A SymPy-safe label for a document name, kept readable: 'W_Q', "x'", 'xhat' for x̂."""
    return (
        name.replace(" ", "")
        .replace("\u0302", "hat")
        .replace("\u0303", "tilde")
        .replace("\u0304", "bar")
        .replace("𝓛", "L")
    )


# ------------------------------------------------------------------------------ qed blocks
_DECL = re.compile(r"^\s*(size|sizes|index|indices|scalar|scalars|vector|matrix|function)\s+(.*)$")


def apply_block(ctx: Context, text: str, origin: str = "qed block") -> list[str]:
    """Apply the declarations of a `qed` block; returns the problems (one per bad line)."""
    problems = []
    for no, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _DECL.match(line)
        if not m:
            problems.append(f"{origin} line {no}: not a declaration: {line!r}")
            continue
        kind, rest = m.group(1).rstrip("s") if m.group(1) != "indices" else "index", m.group(2).strip()
        try:
            _declare(ctx, kind, rest, origin)
        except NotUnderstood as e:
            problems.append(f"{origin} line {no}: {e}")
    return problems


_NAME = re.compile(r"^[A-Za-z\u0370-\u03ff][A-Za-z0-9_\u0370-\u03ff']*$")
_GREEK_NAMES = None


def _doc_name(word: str) -> str:
    """'eps' and '\\epsilon' -> 'ε'; 'd_{model}' -> 'd_model'."""
    global _GREEK_NAMES
    if _GREEK_NAMES is None:
        from .grammar import GREEK

        _GREEK_NAMES = dict(GREEK)
        _GREEK_NAMES["eps"] = "ε"
    w = word.strip().lstrip("\\").replace("{", "").replace("}", "")
    base, _, sub = w.partition("_")
    base = _GREEK_NAMES.get(base, base)
    out = base + ("_" + sub if sub else "")
    if not _NAME.match(out):
        raise NotUnderstood(f"not a name: {word!r}")
    return out


def _dims(ctx: Context, text: str) -> tuple:
    parts = [p.strip() for p in re.split(r"\s*(?:x|×|\\times)\s*", text.strip()) if p.strip()]
    out = []
    for p in parts:
        if p.isdigit():
            out.append(sp.Integer(int(p)))
            continue
        name = _doc_name(p)
        b = ctx.value(name)
        if b is not None and b.kind != "size" and ctx.is_default(name):
            ctx.forget(name)
            b = None
        if b is None:
            b = ctx.bind(Binding("size", name, label_of(name), origin="qed block", meaning="a size"))
        if b.kind != "size":
            raise NotUnderstood(f"{name} is a {b.kind}, not a size")
        out.append(b.symbol())
    return tuple(out)


def _declare(ctx: Context, kind: str, rest: str, origin: str) -> None:
    if kind in ("size", "index", "scalar", "function"):
        positive = False
        if kind == "scalar" and rest.endswith(" positive"):
            positive, rest = True, rest[: -len(" positive")]
        for word in [w for w in re.split(r"[,\s]+", rest) if w]:
            name = _doc_name(word)
            if ctx.is_default(name):
                ctx.forget(name)
            if kind == "size":
                ctx.bind(Binding("size", name, label_of(name), origin=origin, meaning="a size"))
            elif kind == "index":
                ctx.index_letters.add(name)
                if name in ctx.values and ctx.values[name].kind != "array":
                    ctx.values.pop(name)
            elif kind == "scalar":
                ctx.bind(Binding("scalar", name, label_of(name), positive=positive, origin=origin, meaning="a scalar"))
            else:
                ctx.functions[name] = FunctionSpec(name, "opaque", origin=origin, meaning="declared, no definition")
        return
    name, _, dims = rest.partition(":")
    name = _doc_name(name)
    shape = _dims(ctx, dims)
    if ctx.is_default(name):
        ctx.forget(name)
    if kind == "vector":
        if len(shape) != 1:
            raise NotUnderstood(f"vector {name}: one length expected")
        shape = (sp.Integer(1), shape[0])
    elif len(shape) != 2:
        raise NotUnderstood(f"matrix {name}: two sizes expected (rows x cols)")
    ctx.bind(Binding("array", name, label_of(name), shape=shape, origin=origin, meaning=kind))
    ctx.defs.pop(label_of(name), None)
