"""The whitelisted LaTeX of `qed check`: its tokens and the commands it knows.

Every command the checker reads is listed here with its one role; any other command is
refused ("not understood: unsupported command \\foo"). Tokenizing never evaluates anything: it
cuts the text into `Token`s (a command, a run of letters, a number, one punctuation character),
folds `\\left(`/`\\right)`-style delimiters into plain ones and drops spacing commands.

Letter runs are kept whole (`softmax`, `QK`, `xW`): whether a run is a word (a name) or a
product of one-letter symbols is decided by the elaborator from the context, never here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class NotUnderstood(ValueError):
    """A formula outside the grammar, or whose reading is ambiguous: the reason is the message."""


@dataclass(frozen=True)
class Token:
    kind: str  # "cmd", "letters", "number", "char", "end"
    text: str  # the command without its backslash, the letters, the digits, the character
    pos: int  # offset in the formula

    def __str__(self) -> str:
        return "\\" + self.text if self.kind == "cmd" else self.text


GREEK = {
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "delta": "δ",
    "epsilon": "ε",
    "varepsilon": "ε",
    "zeta": "ζ",
    "eta": "η",
    "theta": "θ",
    "vartheta": "θ",
    "iota": "ι",
    "kappa": "κ",
    "lambda": "λ",
    "mu": "μ",
    "nu": "ν",
    "xi": "ξ",
    "pi": "π",
    "rho": "ρ",
    "sigma": "σ",
    "tau": "τ",
    "upsilon": "υ",
    "phi": "φ",
    "varphi": "φ",
    "chi": "χ",
    "psi": "ψ",
    "omega": "ω",
    "Gamma": "Γ",
    "Delta": "Δ",
    "Theta": "Θ",
    "Lambda": "Λ",
    "Xi": "Ξ",
    "Pi": "Π",
    "Sigma": "Σ",
    "Phi": "Φ",
    "Psi": "Ψ",
    "Omega": "Ω",
}

# commands that are functions of one argument, written \exp(x), \log x, \cos\theta
FUNCTION_COMMANDS = {
    "exp": "exp",
    "log": "log",
    "ln": "log",
    "sin": "sin",
    "cos": "cos",
    "tanh": "tanh",
    "cosh": "cosh",
    "sinh": "sinh",
}
# \max(a, b), \min(a, b): of two arguments (a subscript, \max_i, is a reduction: refused)
PAIR_COMMANDS = {"max": "max", "min": "min"}

# \arg\max_i f(i), \argmax_i f(i) (and min): the index at which f is largest (smallest); \arg
# alone (a complex number's argument) is refused
ARGMAX_COMMANDS = {"arg", "argmax", "argmin"}
ARGMAX_WORDS = {"argmax": "max", "argmin": "min"}  # \operatorname{argmax}, \mathrm{arg\,min}

# fonts that do not change a symbol's identity (\mathbf{Q} is Q)
TRANSPARENT_FONTS = {"mathbf", "boldsymbol", "bm", "mathit", "mathnormal", "pmb"}
# fonts that make a word (a name): \mathrm{softmax}, \text{model}, \operatorname{Var}
WORD_FONTS = {"mathrm", "text", "operatorname", "textrm", "mathsf", "textit", "texttt", "mathtt", "textbf"}
# fonts that make a symbol of their own: \mathcal{L} is not L, \mathbb{E} is expectation
OWN_FONTS = {"mathcal": "cal", "mathbb": "bb", "mathscr": "scr", "mathfrak": "frak"}
# accents: \hat{x} is a name of its own
ACCENTS = {"hat": "hat", "widehat": "hat", "tilde": "tilde", "widetilde": "tilde", "bar": "bar", "overline": "bar"}

OPERATORS = {"cdot": "cdot", "times": "times", "odot": "odot", "circ": "odot"}
RELATIONS = {
    "approx": "≈",
    "in": "∈",
    "rightarrow": "→",
    "to": "→",
    "longrightarrow": "→",
    "mapsto": "→",
    "leftarrow": "←",
    "Rightarrow": "⇒",
    "implies": "⇒",
    "Longrightarrow": "⇒",
    "iff": "⇔",
    "Leftrightarrow": "⇔",
    "leq": "≤",
    "le": "≤",
    "geq": "≥",
    "ge": "≥",
    "neq": "≠",
    "ne": "≠",
    "equiv": "≡",
    "sim": "∼",
    "propto": "∝",
    "coloneqq": ":=",
}
ARROWS = {"→", "←"}  # a flow written in math mode: notation
CONSEQUENCE = {"⇒", "⇔"}  # separates statements
SPACING = {",", ";", ":", "!", "thinspace", "medspace", "thickspace", "enspace", "displaystyle", "nonumber"}
SEPARATORS = {"quad", "qquad"}
ELLIPSES = {"dots", "ldots", "cdots", "vdots", "ddots", "dotsc", "dotsb"}
STRUCTURES = {
    "frac",
    "dfrac",
    "tfrac",
    "sqrt",
    "sum",
    "partial",
    "begin",
    "end",
    "infty",
    "top",
    "intercal",
    "forall",
    "prime",
    "left",
    "right",
}
SIZING = {"big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "Biggl", "Biggr"}
# known LaTeX that the grammar deliberately refuses, with the reason
REFUSED = {
    "prod": "a product over an index (\\prod) is outside the grammar",
    "int": "integrals are outside the grammar",
    "lim": "limits are outside the grammar",
    "nabla": "\\nabla is outside the grammar (write \\frac{\\partial L}{\\partial X})",
    "mid": "conditional bars are outside the grammar",
    "langle": "inner products ⟨·,·⟩ are outside the grammar",
    "rangle": "inner products ⟨·,·⟩ are outside the grammar",
    "otimes": "Kronecker/tensor products are outside the grammar",
    "oplus": "direct sums are outside the grammar",
    "det": "determinants are outside the grammar",
    "tr": "traces are outside the grammar",
    "operatorname*": "starred operators are outside the grammar",
    "sup": "suprema are outside the grammar",
    "inf": "infima are outside the grammar",
    "exists": "quantifiers are outside the grammar",
    "cup": "set operations are outside the grammar",
    "cap": "set operations are outside the grammar",
    "subset": "set relations are outside the grammar",
    "pm": "± is outside the grammar",
    "mp": "∓ is outside the grammar",
}

ROW_ENVIRONMENTS = {"aligned", "align", "align*", "gathered", "split", "equation", "equation*"}

_TOKEN = re.compile(
    r"(?P<cmd>\\(?:[A-Za-z]+\*?|.))"
    r"|(?P<number>[0-9]+(?:\.[0-9]+)?)"
    r"|(?P<letters>[A-Za-z]+)"
    r"|(?P<space>\s+)"
    r"|(?P<char>.)",
    re.S,
)
_DELIMS = {"(": "(", ")": ")", "[": "[", "]": "]", "\\{": "{", "\\}": "}", "|": "|", ".": "", "\\|": "‖"}


def tokenize(text: str) -> list[Token]:
    """The tokens of one formula. Comments (`%` to the end of the line) are dropped; `\\left(`
    becomes `(`; `\\,`, `\\!`, `\\displaystyle` and friends disappear; `token\\_ids` is one
    run of letters `token_ids`; a word font's group stays as tokens (the parser reads it)."""
    out: list[Token] = []
    pos = 0
    n = len(text)
    pending_delim = None  # after \left, \right, \big...
    while pos < n:
        m = _TOKEN.match(text, pos)
        assert m is not None  # the last alternative matches any character
        kind = m.lastgroup
        tok = m.group()
        start = pos
        pos = m.end()
        if kind == "space":
            continue
        if kind == "char" and tok == "%":
            end = text.find("\n", pos)
            pos = n if end < 0 else end
            continue
        if pending_delim is not None:
            side = pending_delim
            pending_delim = None
            key = tok if kind != "cmd" else tok
            if key not in _DELIMS:
                raise NotUnderstood(f"\\{side} followed by {tok!r}: not a delimiter the grammar knows")
            d = _DELIMS[key]
            if d == "":  # \left. or \right.: invisible
                continue
            if d in ("{", "}"):
                raise NotUnderstood("\\left\\{ … (a brace as a delimiter) is outside the grammar: use cases")
            if d in ("|", "‖"):
                raise NotUnderstood("absolute values and norms (|x|, ‖x‖) are outside the grammar")
            out.append(Token("char", d, start))
            continue
        if kind == "cmd":
            name = tok[1:]
            if name.isspace():  # "\ " or a backslash before a newline: a control space
                name = " "
            if name in ("left", "right") or name in SIZING:
                pending_delim = name
                continue
            if name in SPACING:
                continue
            if name == "_":  # token\_ids: an escaped underscore inside a word
                if out and out[-1].kind == "letters" and pos < n and text[pos].isalpha():
                    m2 = re.compile(r"[A-Za-z]+").match(text, pos)
                    prev = out.pop()
                    out.append(Token("letters", prev.text + "_" + m2.group(), prev.pos))
                    pos = m2.end()
                    continue
                raise NotUnderstood("an escaped underscore \\_ outside a word")
            if name in ("\\", " "):  # a row break; a control space (kept: a row separator by mistake?)
                out.append(Token("cmd", name, start))
                continue
            if name in ("{", "}"):
                raise NotUnderstood("literal braces \\{ \\} are outside the grammar (sets)")
            out.append(Token("cmd", name, start))
            continue
        if kind == "letters":
            out.append(Token("letters", tok, start))
            continue
        if kind == "number":
            out.append(Token("number", tok, start))
            continue
        if tok == "|":
            raise NotUnderstood("absolute values and norms (|x|, ‖x‖) are outside the grammar")
        if tok in "+-=<>,()[]{}^_&'/*!.:;":
            out.append(Token("char", tok, start))
            continue
        if tok == "−":
            out.append(Token("char", "-", start))
            continue
        if tok in ("×", "·", "⊙"):
            out.append(Token("cmd", {"×": "times", "·": "cdot", "⊙": "odot"}[tok], start))
            continue
        raise NotUnderstood(f"character {tok!r} is outside the grammar")
    if pending_delim is not None:
        raise NotUnderstood(f"\\{pending_delim} at the end of the formula")
    out.append(Token("end", "", n))
    return out


def relation_of(tok: Token) -> str | None:
    """The relation a token stands for (`=`, `≈`, `∈`, `→`, `⇒`, …), or None."""
    if tok.kind == "char" and tok.text in ("=", "<", ">"):
        return tok.text
    if tok.kind == "cmd" and tok.text in RELATIONS:
        return RELATIONS[tok.text]
    return None


def known_command(name: str) -> bool:
    """Is `\\name` in the grammar (with some role)?"""
    return (
        name in GREEK
        or name in FUNCTION_COMMANDS
        or name in PAIR_COMMANDS
        or name in ARGMAX_COMMANDS
        or name in TRANSPARENT_FONTS
        or name in WORD_FONTS
        or name in OWN_FONTS
        or name in ACCENTS
        or name in OPERATORS
        or name in RELATIONS
        or name in SEPARATORS
        or name in ELLIPSES
        or name in STRUCTURES
        or name == "\\"
    )
