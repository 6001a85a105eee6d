"""A recursive-descent parser of the whitelisted LaTeX (grammar.py) into a small syntax tree.

The parser is context-free and fails closed: anything it does not know raises `NotUnderstood`
with the reason. It decides nothing that needs the meaning of a symbol — whether `QK` is a
product, whether `σ(x)` is an application, whether `A_{ij}` is an entry or a name: the tree keeps
what was written (a run of letters, a subscript, a parenthesised group next to a symbol) and the
elaborator (elaborate.py) reads it against the symbol context, or refuses.

It also cuts a formula into statements (`split`): `=` chains, `\\Rightarrow` consequences,
`\\quad`-separated equations, the rows of `aligned`-like environments (a row that starts with
a relation continues the chain of the row before), parenthesised remarks
(`(\\text{where } …)`, `(\\forall i = 1, \\dots, d_k)`) set aside.

Grammar (precedence from loose to tight):

    expr     := ['+'|'-'] term (('+'|'-') term)*
    term     := factor ((\\cdot | \\times | \\odot | '/') factor | factor)*     juxtaposition = product
    factor   := '-' factor | postfix
    postfix  := primary ( '_' script | '^' script | "'" )*                      ^T, ^\\top: transpose
    primary  := number | letters | greek | \\mathrm{word} | \\mathbf{…} | \\mathcal{L} | \\hat{x}
              | ( expr, … ) | [ expr ] | { expr } | \\frac{a}{b} | \\frac{\\partial a}{\\partial b}
              | \\sqrt{a} | \\sum_{i=lo}^{hi} term | \\exp(a) \\log a \\cos\\theta … | \\max(a, b)
              | \\arg\\max_i term | \\mathbb{E}[a] | \\mathrm{d}X | \\infty | \\dots
              | \\begin{cases} … \\end{cases} | \\begin{bmatrix} … \\end{bmatrix}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .grammar import (
    ACCENTS,
    ARGMAX_WORDS,
    ARROWS,
    CONSEQUENCE,
    ELLIPSES,
    FUNCTION_COMMANDS,
    GREEK,
    OPERATORS,
    OWN_FONTS,
    PAIR_COMMANDS,
    REFUSED,
    RELATIONS,
    ROW_ENVIRONMENTS,
    SEPARATORS,
    TRANSPARENT_FONTS,
    WORD_FONTS,
    NotUnderstood,
    Token,
    known_command,
    relation_of,
    tokenize,
)


# ------------------------------------------------------------------------------------- the tree
@dataclass(frozen=True)
class Node:
    pass


@dataclass(frozen=True)
class Num(Node):
    text: str


@dataclass(frozen=True)
class Letters(Node):
    text: str  # a run of letters as written: "softmax", "QK", "x", "token_ids"


@dataclass(frozen=True)
class Greek(Node):
    name: str  # the command: "sigma"


@dataclass(frozen=True)
class Word(Node):
    text: str  # \mathrm{softmax}, \text{model}, \operatorname{Var}


@dataclass(frozen=True)
class Own(Node):
    font: str  # "cal", "bb", ...
    text: str  # \mathcal{L}: ("cal", "L")


@dataclass(frozen=True)
class Accent(Node):
    kind: str  # "hat", "tilde", "bar"
    base: Node


@dataclass(frozen=True)
class Script(Node):
    base: Node
    sub: tuple  # the subscript's comma-separated items


@dataclass(frozen=True)
class Power(Node):
    base: Node
    exp: Node


@dataclass(frozen=True)
class Transpose(Node):
    base: Node


@dataclass(frozen=True)
class Prime(Node):
    base: Node


@dataclass(frozen=True)
class Paren(Node):
    items: tuple
    bracket: str  # "(" or "["


@dataclass(frozen=True)
class Group(Node):
    inner: Node  # { … } used as a factor


@dataclass(frozen=True)
class Frac(Node):
    num: Node
    den: Node


@dataclass(frozen=True)
class Partial(Node):
    num: Node  # \frac{\partial num}{\partial den}
    den: Node


@dataclass(frozen=True)
class Sqrt(Node):
    arg: Node


@dataclass(frozen=True)
class Sum(Node):
    vars: tuple  # index names (str)
    lo: Node | None
    hi: Node | None
    body: Node


@dataclass(frozen=True)
class Apply(Node):
    func: str  # a command function: "exp", "log", "max", ...
    args: tuple


@dataclass(frozen=True)
class Neg(Node):
    arg: Node


@dataclass(frozen=True)
class Bin(Node):
    op: str  # "+", "-", "cdot", "times", "odot", "/"
    a: Node
    b: Node


@dataclass(frozen=True)
class Juxt(Node):
    items: tuple


@dataclass(frozen=True)
class Cond(Node):
    a: Node
    rel: str
    b: Node


@dataclass(frozen=True)
class Cases(Node):
    rows: tuple  # ((value, Cond | None for "otherwise"), ...)


@dataclass(frozen=True)
class Matrix(Node):
    rows: tuple  # ((cell, ...), ...)


@dataclass(frozen=True)
class Expect(Node):
    arg: Node


@dataclass(frozen=True)
class Differential(Node):
    base: Node


@dataclass(frozen=True)
class Infinity(Node):
    pass


@dataclass(frozen=True)
class OnesVec(Node):
    """\\mathbf{1}: the all-ones vector."""


@dataclass(frozen=True)
class Ellipsis(Node):
    pass


@dataclass(frozen=True)
class ArgMax(Node):
    """\\arg\\max_i body (or \\arg\\min_i): the index i at which body is largest (smallest)."""

    kind: str  # "max" or "min"
    var: str  # the index (one letter)
    body: Node


# ------------------------------------------------------------------------------------ the parser
_STARTS = {"(", "[", "{"}


class Parser:
    def __init__(self, tokens: list[Token]):
        if not tokens or tokens[-1].kind != "end":
            tokens = list(tokens) + [Token("end", "", tokens[-1].pos if tokens else 0)]
        self.toks = tokens
        self.i = 0

    # ---------------------------------------------------------------- helpers
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def is_char(self, c: str, t: Token | None = None) -> bool:
        t = t or self.tok
        return t.kind == "char" and t.text == c

    def is_cmd(self, name: str, t: Token | None = None) -> bool:
        t = t or self.tok
        return t.kind == "cmd" and t.text == name

    def expect_char(self, c: str) -> None:
        if not self.is_char(c):
            raise NotUnderstood(f"expected {c!r} at {self._where()}")
        self.next()

    def _where(self) -> str:
        t = self.tok
        return "the end" if t.kind == "end" else f"{str(t)!r} (offset {t.pos})"

    def group_tokens(self) -> list[Token]:
        """The tokens of a braced group `{…}` (consumed), or of one token if there is no brace."""
        if self.is_char("{"):
            start = self.i + 1
            depth = 0
            while True:
                t = self.next()
                if t.kind == "end":
                    raise NotUnderstood("a '{' is never closed")
                if self.is_char("{", t):
                    depth += 1
                elif self.is_char("}", t):
                    depth -= 1
                    if depth == 0:
                        return self.toks[start : self.i - 1]
        t = self.next()
        if t.kind == "end":
            raise NotUnderstood("an argument is missing at the end of the formula")
        return [t]

    def sub_parse(self, tokens: list[Token], what: str) -> Node:
        if not tokens:
            raise NotUnderstood(f"empty {what}")
        p = Parser(tokens)
        node = p.expr()
        if p.tok.kind != "end":
            raise NotUnderstood(f"unexpected {p._where()} in {what}")
        return node

    def sub_items(self, tokens: list[Token], what: str) -> tuple:
        """Comma-separated expressions (a subscript, a function's arguments)."""
        if not tokens:
            raise NotUnderstood(f"empty {what}")
        p = Parser(tokens)
        items = [p.expr()]
        while p.is_char(","):
            p.next()
            items.append(p.expr())
        if p.tok.kind != "end":
            raise NotUnderstood(f"unexpected {p._where()} in {what}")
        return tuple(items)

    # ---------------------------------------------------------------- grammar
    def parse(self) -> Node:
        node = self.expr()
        if self.tok.kind != "end":
            raise NotUnderstood(f"unexpected {self._where()}")
        return node

    def expr(self) -> Node:
        if self.is_char("-"):
            self.next()
            node: Node = Neg(self.term())
        else:
            if self.is_char("+"):
                self.next()
            node = self.term()
        while self.is_char("+") or self.is_char("-"):
            op = self.next().text
            node = Bin(op, node, self.term())
        return node

    def term(self) -> Node:
        items = [self.factor()]
        node: Node | None = None
        while True:
            t = self.tok
            if t.kind == "cmd" and t.text in OPERATORS:
                self.next()
                left = items[0] if len(items) == 1 else Juxt(tuple(items))
                items = [Bin(OPERATORS[t.text], left, self.factor())]
                continue
            if self.is_char("/") or self.is_char("*"):
                self.next()
                left = items[0] if len(items) == 1 else Juxt(tuple(items))
                op = "/" if t.text == "/" else "cdot"
                items = [Bin(op, left, self.factor())]
                continue
            if self._starts_factor(t):
                prev = items[-1]
                if t.kind == "number" and not isinstance(prev, (Num, Bin)):
                    raise NotUnderstood(
                        f"a number right after a symbol ({t.text!r} at offset {t.pos}): a lost subscript? write X_{{{t.text}}}"
                    )
                if self.is_char("{", t) and isinstance(prev, (Letters, Script, Greek, Own, Accent)):
                    raise NotUnderstood(
                        f"a braced group right after a symbol (offset {t.pos}): a lost subscript? write X_{{…}}"
                    )
                if t.kind == "cmd" and t.text == "sum":
                    items.append(self.factor())  # a sum in a product takes the rest of the term
                    continue
                items.append(self.factor())
                continue
            break
        node = items[0] if len(items) == 1 else Juxt(tuple(items))
        return node

    def _starts_factor(self, t: Token) -> bool:
        if t.kind in ("letters", "number"):
            return True
        if t.kind == "char":
            return t.text in _STARTS
        if t.kind == "cmd":
            name = t.text
            if name in RELATIONS or name in OPERATORS or name in SEPARATORS or name in ("\\", " ", "end", "right"):
                return False
            return True
        return False

    def factor(self) -> Node:
        if self.is_char("-"):
            self.next()
            return Neg(self.factor())
        return self.postfix(self.primary())

    def postfix(self, node: Node) -> Node:
        while True:
            if self.is_char("'"):
                self.next()
                node = Prime(node)
                continue
            if self.is_cmd("prime"):
                self.next()
                node = Prime(node)
                continue
            if self.is_char("_"):
                self.next()
                if isinstance(node, (Script, Power, Transpose)):
                    raise NotUnderstood("a second subscript on one symbol")
                node = Script(node, self._script_items("subscript"))
                continue
            if self.is_char("^"):
                self.next()
                toks = self._script_tokens()
                if _is_transpose(toks):
                    node = Transpose(node)
                else:
                    node = Power(node, self.sub_parse(toks, "superscript"))
                continue
            return node

    def _script_tokens(self) -> list[Token]:
        """A sub- or superscript's tokens: a braced group, or ONE character of a run of
        letters or digits (LaTeX's own rule: W_attention lowers only the a)."""
        t = self.tok
        if t.kind in ("letters", "number") and len(t.text) > 1:
            first = Token(t.kind, t.text[0], t.pos)
            rest = t.text[1:]
            if t.kind == "letters" and rest.startswith("_"):
                raise NotUnderstood(f"subscript {t.text!r} is ambiguous")
            self.toks[self.i] = Token("letters" if t.kind == "letters" else "number", rest, t.pos + 1)
            if t.kind == "number" and "." in rest:
                raise NotUnderstood(f"a decimal number in a script: {t.text!r}")
            return [first]
        if t.kind == "cmd" and t.text in ("mathrm", "text", "mathbf", "operatorname", "mathit", "boldsymbol"):
            start = self.i
            self.next()
            self.group_tokens()
            return self.toks[start : self.i]
        return self.group_tokens()

    def _script_items(self, what: str) -> tuple:
        return self.sub_items(self._script_tokens(), what)

    def primary(self) -> Node:
        t = self.tok
        if t.kind == "end":
            raise NotUnderstood("an operand is missing at the end")
        if t.kind == "number":
            self.next()
            return Num(t.text)
        if t.kind == "letters":
            self.next()
            if t.text in ARGMAX_WORDS and self.is_char("_"):  # argmax_i f(i) written as a bare word
                return self._argmax(ARGMAX_WORDS[t.text])
            return Letters(t.text)
        if t.kind == "char":
            if t.text in ("(", "["):
                return self._paren()
            if t.text == "{":
                toks = self.group_tokens()
                return Group(self.sub_parse(toks, "group"))
            raise NotUnderstood(f"unexpected {str(t)!r} (offset {t.pos})")
        return self._command()

    def _paren(self) -> Node:
        open_ = self.next().text
        close = ")" if open_ == "(" else "]"
        start = self.i
        depth = 0
        while True:
            t = self.tok
            if t.kind == "end":
                raise NotUnderstood(f"a {open_!r} is never closed")
            if t.kind == "char" and t.text in "([{":
                depth += 1
            elif t.kind == "char" and t.text in ")]}":
                if depth == 0:
                    if t.text != close:
                        raise NotUnderstood(f"{open_!r} closed by {t.text!r}")
                    break
                depth -= 1
            self.next()
        inner = self.toks[start : self.i]
        self.next()
        return Paren(self.sub_items(inner, "parentheses"), open_)

    def _command(self) -> Node:
        t = self.next()
        name = t.text
        if name == "arg":
            if self.is_cmd("max") or self.is_cmd("min"):
                return self._argmax(self.next().text)
            raise NotUnderstood(
                "\\arg alone (a complex number's argument) is outside the grammar; \\arg\\max_i is read"
            )
        if name in ("argmax", "argmin"):
            return self._argmax(name[3:])
        if name == "operatorname*":  # \operatorname*{argmax}_i: argmax with its index set below
            text = _word_text(self.group_tokens())
            if text in ARGMAX_WORDS:
                return self._argmax(ARGMAX_WORDS[text])
            raise NotUnderstood(REFUSED[name])
        if name in REFUSED:
            raise NotUnderstood(REFUSED[name])
        if not known_command(name):
            raise NotUnderstood(f"unsupported command \\{name}")
        if name in GREEK:
            return Greek(name)
        if name in TRANSPARENT_FONTS:
            return self._font_arg()
        if name in WORD_FONTS:
            toks = self.group_tokens()
            text = _word_text(toks)
            if text == "d" and name in ("mathrm", "operatorname"):  # \mathrm{d}X: a differential
                return Differential(self.postfix(self.primary()))
            if text in ARGMAX_WORDS:  # \operatorname{argmax}_i, \mathrm{arg\,max}_i
                return self._argmax(ARGMAX_WORDS[text])
            if text is None:
                return Group(self.sub_parse(toks, f"\\{name}{{…}}"))
            return Word(text)
        if name in OWN_FONTS:
            toks = self.group_tokens()
            text = _word_text(toks)
            if text is None:
                raise NotUnderstood(f"\\{name}{{…}} of something other than letters")
            if OWN_FONTS[name] == "bb" and text == "E":
                return self._expectation()
            return Own(OWN_FONTS[name], text)
        if name in ACCENTS:
            toks = self.group_tokens()
            return Accent(ACCENTS[name], self.sub_parse(toks, f"\\{name}{{…}}"))
        if name in ("frac", "dfrac", "tfrac"):
            num = self.group_tokens()
            den = self.group_tokens()
            if num and num[0].kind == "cmd" and num[0].text == "partial":
                if not den or den[0].kind != "cmd" or den[0].text != "partial":
                    raise NotUnderstood("\\frac{\\partial …}{…} without \\partial in the denominator")
                if len(num) > 1 and num[1].kind == "char" and num[1].text == "^":
                    raise NotUnderstood("higher derivatives (\\partial^2) are outside the grammar")
                return Partial(self.sub_parse(num[1:], "∂ numerator"), self.sub_parse(den[1:], "∂ denominator"))
            return Frac(self.sub_parse(num, "numerator"), self.sub_parse(den, "denominator"))
        if name == "sqrt":
            if self.is_char("["):
                raise NotUnderstood("roots other than the square root (\\sqrt[n]) are outside the grammar")
            return Sqrt(self.sub_parse(self.group_tokens(), "\\sqrt{…}"))
        if name == "sum":
            return self._sum()
        if name in FUNCTION_COMMANDS:
            if self.is_char("^") or self.is_char("_"):
                raise NotUnderstood(f"\\{name} with a script (\\{name}^2 x) is outside the grammar")
            if self.is_char("("):
                arg = self._paren()
                if len(arg.items) != 1:
                    raise NotUnderstood(f"\\{name} of {len(arg.items)} arguments")
                return Apply(FUNCTION_COMMANDS[name], arg.items)
            return Apply(FUNCTION_COMMANDS[name], (self.postfix(self.primary()),))
        if name in PAIR_COMMANDS:
            if self.is_char("_"):
                raise NotUnderstood(f"\\{name} over an index (\\{name}_i) is outside the grammar")
            if not self.is_char("("):
                raise NotUnderstood(f"\\{name} without parentheses")
            arg = self._paren()
            if len(arg.items) != 2:
                raise NotUnderstood(f"\\{name} of {len(arg.items)} arguments (two are understood)")
            return Apply(PAIR_COMMANDS[name], arg.items)
        if name == "infty":
            return Infinity()
        if name in ELLIPSES:
            return Ellipsis()
        if name == "begin":
            return self._environment()
        if name == "partial":
            raise NotUnderstood("\\partial outside \\frac{\\partial …}{\\partial …}")
        if name in ("top", "intercal"):
            raise NotUnderstood(f"\\{name} outside a superscript")
        if name == "forall":
            raise NotUnderstood("\\forall inside an expression")
        raise NotUnderstood(f"\\{name} cannot start an operand")

    def _font_arg(self) -> Node:
        toks = self.group_tokens()
        if len(toks) == 1 and toks[0].kind == "number" and toks[0].text == "1":
            return OnesVec()
        return self.sub_parse(toks, "\\mathbf{…}")

    def _expectation(self) -> Node:
        if not self.is_char("["):
            raise NotUnderstood("\\mathbb{E} without brackets [ … ]")
        arg = self._paren()
        if len(arg.items) != 1:
            raise NotUnderstood("\\mathbb{E}[…] of a list")
        return Expect(arg.items[0])

    def _argmax(self, kind: str) -> Node:
        """After \\arg\\max (\\argmax, \\operatorname{argmax}): `_i` and the term it ranges over,
        which takes the rest of the term as a sum's body does. The index is one letter: a range
        or a set under it (\\arg\\max_{i \\in S}) is refused."""
        what = f"\\arg\\{kind}"
        if not self.is_char("_"):
            raise NotUnderstood(f"{what} without its index (write {what}_i …)")
        self.next()
        toks = self._script_tokens()
        if len(toks) != 1 or toks[0].kind != "letters" or len(toks[0].text) != 1:
            raise NotUnderstood(f"{what} over something other than one index letter (write {what}_i …)")
        if self.is_char("^"):
            raise NotUnderstood(f"{what} with an upper bound: write {what}_i and let the arrays fix its range")
        return ArgMax(kind, toks[0].text, self.term())

    def _sum(self) -> Node:
        vars_: tuple = ()
        lo = hi = None
        if self.is_char("_"):
            self.next()
            toks = self._script_tokens()
            eq = [k for k, t in enumerate(toks) if t.kind == "char" and t.text == "="]
            if eq:
                k = eq[0]
                var_toks, lo_toks = toks[:k], toks[k + 1 :]
                lo = self.sub_parse(lo_toks, "the sum's lower bound")
            else:
                var_toks = toks
            names = []
            for part in _split_commas(var_toks):
                if len(part) != 1 or part[0].kind != "letters":
                    raise NotUnderstood("a sum's index must be one letter (\\sum_{i=1}^{n}, \\sum_j)")
                names.extend(part[0].text)
            if eq and len(names) != 1:
                raise NotUnderstood("a sum with a lower bound must have one index")
            vars_ = tuple(names)
        if self.is_char("^"):
            self.next()
            hi = self.sub_parse(self._script_tokens(), "the sum's upper bound")
            if not vars_:
                raise NotUnderstood("\\sum^{…} without an index")
        if self.is_char("_"):
            raise NotUnderstood("\\sum^{hi}_{i=lo}: write the lower limit first")
        if not vars_:
            raise NotUnderstood("\\sum without an index")
        if (lo is None) != (hi is None):
            raise NotUnderstood("a sum with only one of its bounds")
        body = self.term()
        return Sum(vars_, lo, hi, body)

    def _environment(self) -> Node:
        toks = self.group_tokens()
        env = _word_text(toks)
        if env not in ("cases", "bmatrix", "pmatrix"):
            raise NotUnderstood(f"environment {env!r} inside an expression")
        start = self.i
        depth = 0
        while True:
            t = self.tok
            if t.kind == "end":
                raise NotUnderstood(f"\\begin{{{env}}} is never closed")
            if self.is_cmd("begin"):
                depth += 1
            elif self.is_cmd("end"):
                if depth == 0:
                    break
                depth -= 1
            self.next()
        body = self.toks[start : self.i]
        self.next()
        end_env = _word_text(self.group_tokens())
        if end_env != env:
            raise NotUnderstood(f"\\begin{{{env}}} closed by \\end{{{end_env}}}")
        rows = [r for r in _split_top(body, lambda t: t.kind == "cmd" and t.text == "\\")]
        if rows and not rows[-1]:
            rows = rows[:-1]
        cells = [_split_top(r, lambda t: t.kind == "char" and t.text == "&") for r in rows]
        if env == "cases":
            out = []
            for row in cells:
                if len(row) != 2:
                    raise NotUnderstood("a row of cases must be 'value & condition'")
                value = self.sub_parse(row[0], "a case's value")
                out.append((value, _condition(row[1])))
            return Cases(tuple(out))
        matrix = tuple(tuple(self.sub_parse(c, "a matrix entry") for c in row) for row in cells)
        if len({len(r) for r in matrix}) != 1:
            raise NotUnderstood("matrix rows of different lengths")
        return Matrix(matrix)


def _condition(toks: list[Token]) -> Cond | None:
    if toks and toks[0].kind == "cmd" and toks[0].text == "text":
        inner = "".join(t.text for t in toks[1:] if t.kind == "letters")
        if inner in ("otherwise", "else"):
            return None
        raise NotUnderstood(f"a case's condition in words ({inner!r})")
    rels = [k for k, t in enumerate(toks) if relation_of(t) in ("<", ">", "≤", "≥", "=", "≠")]
    if len(rels) != 1:
        raise NotUnderstood("a case's condition must be one comparison (j \\leq i)")
    k = rels[0]
    p = Parser(toks[:k])
    a = p.parse()
    q = Parser(toks[k + 1 :])
    b = q.parse()
    return Cond(a, relation_of(toks[k]), b)


def _is_transpose(toks: list[Token]) -> bool:
    if len(toks) == 1:
        t = toks[0]
        return (t.kind == "letters" and t.text == "T") or (t.kind == "cmd" and t.text in ("top", "intercal"))
    return False


def _word_text(toks: list[Token]) -> str | None:
    """The text of a group of letters (digits, '.', '-', '*' after the first letter allowed):
    \\text{model} -> "model", \\text{Q.E.D.} -> "Q.E.D."; None for anything else."""
    if not toks or toks[0].kind != "letters":
        return None
    if all(t.kind in ("letters", "number") or (t.kind == "char" and t.text in ".-*") for t in toks):
        return "".join(t.text for t in toks)
    return None


def _split_commas(toks: list[Token]) -> list[list[Token]]:
    return _split_top(toks, lambda t: t.kind == "char" and t.text == ",")


def _split_top(toks: list[Token], is_sep) -> list[list[Token]]:
    """Split at separators outside every group, parenthesis and environment."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in toks:
        if t.kind == "char" and t.text in "([{":
            depth += 1
        elif t.kind == "char" and t.text in ")]}":
            depth -= 1
        elif t.kind == "cmd" and t.text == "begin":
            depth += 1
        elif t.kind == "cmd" and t.text == "end":
            depth -= 1
        if depth == 0 and is_sep(t):
            parts.append([])
            continue
        parts[-1].append(t)
    return parts


def parse(text: str) -> Node:
    """The tree of one expression (no relation)."""
    return Parser(tokenize(text)).parse()


def parse_tokens(tokens: list[Token]) -> Node:
    return Parser(list(tokens)).parse()


# ---------------------------------------------------------------------------------- statements
@dataclass
class Statement:
    """One statement of a formula: a chain `e0 r1 e1 r2 e2 …` and the remarks set aside."""

    parts: list  # token lists, one per member of the chain
    relations: list  # "=", "≈", "∈", "→", ...
    remarks: list = field(default_factory=list)  # (kind, tokens): ("where", …), ("forall", …)
    source: str = ""  # the statement's LaTeX
    error: str | None = None  # the formula could not be cut into statements: why

    @property
    def is_flow(self) -> bool:
        return any(r in ARROWS for r in self.relations)


def _source(text: str, toks: list[Token]) -> str:
    toks = [t for t in toks if t.kind != "end"]
    if not toks:
        return ""
    last = toks[-1]
    end = last.pos + len(str(last)) if last.kind != "cmd" else last.pos + 1 + len(last.text)
    return text[toks[0].pos : end].strip()


def split(text: str) -> list[Statement]:
    """Cut one formula into statements (see the module docstring). A formula that cannot be
    tokenized is one statement with an `error`."""
    try:
        toks = [t for t in tokenize(text) if t.kind != "end"]
    except NotUnderstood as e:
        return [Statement([], [], source=text.strip(), error=str(e))]
    if "\\begin" not in text:
        with_relation = 0
        for line in text.split("\n"):
            try:
                if any(relation_of(t) is not None for t in tokenize(line)):
                    with_relation += 1
            except NotUnderstood:
                continue
        if with_relation > 1:
            return [
                Statement(
                    [],
                    [],
                    source=text.strip(),
                    error="equations on separate lines of one formula, with no \\\\ or environment between "
                    "them: they render as one line (put each in its own block, or use aligned)",
                )
            ]
    rows = _rows(toks)
    if isinstance(rows, str):
        return [Statement([], [], source=text.strip(), error=rows)]
    out: list[Statement] = []
    for row in rows:
        continues = bool(row) and relation_of(row[0]) is not None and relation_of(row[0]) not in CONSEQUENCE
        pieces = _pieces(row)
        for k, piece in enumerate(pieces):
            st = _statement(text, piece)
            if st is None:
                continue
            if not st.parts:  # a remark alone
                if out:
                    out[-1].remarks.extend(st.remarks)
                continue
            if k == 0 and continues and out and not out[-1].error and st.parts and not st.parts[0]:
                # "&= …" continues the chain of the row before
                prev = out[-1]
                prev.parts.extend(st.parts[1:])
                prev.relations.extend(st.relations)
                prev.remarks.extend(st.remarks)
                prev.source = prev.source + " \\\\ " + st.source
                continue
            out.append(st)
    return out


def _rows(toks: list[Token]):
    """The rows of the formula: those of one aligned-like environment around the whole of it, or
    the formula as one row. A control space `\\ ` where rows should be (seed A §5) is refused."""
    if toks and toks[0].kind == "cmd" and toks[0].text == "begin":
        p = Parser(toks + [Token("end", "", toks[-1].pos + 1)])
        p.next()
        env = _word_text(p.group_tokens())
        if env in ROW_ENVIRONMENTS:
            start = p.i
            depth = 0
            while p.tok.kind != "end":
                if p.is_cmd("begin"):
                    depth += 1
                elif p.is_cmd("end"):
                    if depth == 0:
                        break
                    depth -= 1
                p.next()
            if p.tok.kind == "end":
                return f"\\begin{{{env}}} is never closed"
            body = toks[start : p.i]
            p.next()
            if _word_text(p.group_tokens()) != env:
                return f"\\begin{{{env}}} is closed by another environment"
            if p.tok.kind != "end":
                return f"text after \\end{{{env}}}"
            rows = _split_top(body, lambda t: t.kind == "cmd" and t.text == "\\")
            out = []
            for row in rows:
                if any(t.kind == "cmd" and t.text == " " for t in row):
                    return (
                        f"a control space '\\ ' inside {env}: rows must be separated by \\\\ "
                        "(as written, every row collapses into one line)"
                    )
                amps = [t for t in row if t.kind == "char" and t.text == "&"]
                if len(amps) > 1:
                    return f"a row of {env} with {len(amps)} '&': rows separated by something other than \\\\?"
                row = [t for t in row if not (t.kind == "char" and t.text == "&")]
                if row:
                    out.append(row)
            return out
    if len(_split_top(toks, lambda t: t.kind == "cmd" and t.text == "\\")) > 1:
        return "a line break \\\\ outside an aligned environment"
    if len(_split_top(toks, lambda t: t.kind == "char" and t.text == "&")) > 1:
        return "an alignment '&' outside an aligned environment"
    return [[t for t in toks if not (t.kind == "cmd" and t.text == " ")] if not _is_flow_tokens(toks) else toks]


def _is_flow_tokens(toks) -> bool:
    return any(relation_of(t) in ARROWS for t in toks)


def _pieces(row: list[Token]) -> list[list[Token]]:
    """Split a row at ⇒ and \\quad (outside groups), then at commas that separate equations."""
    out: list[list[Token]] = []
    for part in _split_top(row, lambda t: relation_of(t) in CONSEQUENCE):
        for piece in _split_top(part, lambda t: t.kind == "cmd" and t.text in SEPARATORS):
            piece = _trim(piece)
            if not piece:
                continue
            commas = _split_commas(piece)
            if (
                len(commas) > 1
                and sum(1 for c in commas if _has_relation(c)) >= 2
                and all(_has_relation(c) for c in commas)
            ):
                out.extend(_trim(c) for c in commas)
            else:
                out.append(piece)
    return [p for p in out if p]


def _has_relation(toks: list[Token]) -> bool:
    depth = 0
    for t in toks:
        if t.kind == "char" and t.text in "([{":
            depth += 1
        elif t.kind == "char" and t.text in ")]}":
            depth -= 1
        elif depth == 0 and relation_of(t) is not None:
            return True
    return False


def _trim(toks: list[Token]) -> list[Token]:
    toks = list(toks)
    while toks and toks[-1].kind == "char" and toks[-1].text in ",.;":
        toks.pop()
    while toks and toks[0].kind == "char" and toks[0].text in ",;":
        toks.pop(0)
    return toks


_REMARK_WORDS = {"where", "for", "with", "and", "if", "then", "since", "so", "hence", "thus"}


def _statement(text: str, toks: list[Token]) -> Statement | None:
    remarks: list = []
    original = toks
    # a leading "\text{where }" is a remark word
    while len(toks) >= 2 and toks[0].kind == "cmd" and toks[0].text in ("text", "mathrm", "textrm"):
        p = Parser(toks + [Token("end", "", 0)])
        p.next()
        word = _word_text(p.group_tokens())
        if word is None or word.strip().lower() not in _REMARK_WORDS:
            break
        remarks.append(("word", word))
        toks = toks[p.i :]
    # trailing parenthesised remarks: (\text{where …}), (\forall i = 1, \dots, d_k)
    while toks and toks[-1].kind == "char" and toks[-1].text == ")":
        depth = 0
        start = None
        for k in range(len(toks) - 1, -1, -1):
            t = toks[k]
            if t.kind == "char" and t.text in ")]}":
                depth += 1
            elif t.kind == "char" and t.text in "([{":
                depth -= 1
                if depth == 0:
                    start = k
                    break
        if start is None:
            break
        inner = toks[start + 1 : -1]
        if inner and inner[0].kind == "cmd" and inner[0].text == "forall":
            remarks.append(("forall", inner[1:]))
        elif inner and inner[0].kind == "cmd" and inner[0].text in ("text", "mathrm", "textrm"):
            remarks.append(("where", _source(text, inner)))
        else:
            break
        toks = toks[:start]
    if not toks:  # a remark alone: it belongs to the statement before
        return Statement([], [], remarks, _source(text, original)) if remarks else None
    if all(t.kind == "cmd" and t.text in ("text", "mathrm") or t.kind in ("letters", "char") for t in toks) and (
        toks[0].kind == "cmd" and toks[0].text == "text"
    ):
        # only text (\text{Q.E.D.}): no statement
        if not any(relation_of(t) is not None for t in toks):
            return None
    parts: list[list[Token]] = [[]]
    rels: list[str] = []
    depth = 0
    for t in toks:
        if t.kind == "char" and t.text in "([{":
            depth += 1
        elif t.kind == "char" and t.text in ")]}":
            depth -= 1
        elif t.kind == "cmd" and t.text == "begin":
            depth += 1
        elif t.kind == "cmd" and t.text == "end":
            depth -= 1
        r = relation_of(t) if depth == 0 else None
        if r is not None:
            rels.append(r)
            parts.append([])
            continue
        parts[-1].append(t)
    return Statement(parts, rels, remarks, _source(text, toks))
