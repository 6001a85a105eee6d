"""The formula catalogue (shared/FORMULAS.md) as data: one `Row` per line of its table.

The documentation has one page per row; a claim belongs to the row whose id is the claim's id
or its longest dotted prefix (`attention.variance.dot_var` → `attention.variance`,
`layernorm.dx` → `layernorm`), else to the only row of the same first segment
(`embedding.dE` → `embedding.lookup`). Claims that fit no row (work beyond the two source
documents, e.g. `attention_lse.*`) get a page per first segment of their id (`extra_row`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    ids: tuple[str, ...]
    source: str
    statement: str  # the catalogue's own summary (Markdown, LaTeX in $…$)
    op: bool
    slug: str = ""

    @property
    def page(self) -> str:
        return self.slug or self.ids[0]

    @property
    def label(self) -> str:
        return ", ".join(self.ids)


def _r(ids, source, statement, op=False, slug=""):
    ids = (ids,) if isinstance(ids, str) else tuple(ids)
    return Row(ids, source, statement, op, slug)


ROWS: tuple[Row, ...] = (
    _r(
        "embedding.lookup",
        "B1",
        r"$X = E[\mathrm{ids}]$ equals $\mathrm{onehot}(\mathrm{ids})\, E$; "
        r"backward $dE = \mathrm{onehot}(\mathrm{ids})^{T} dX$ (repeated ids accumulate)",
        True,
    ),
    _r(
        "linear",
        "B2, B16",
        r"$Y = XW + b$; $dX = dY\, W^{T}$, $dW = X^{T} dY$, "
        r"$db = \sum_{\mathrm{rows}} dY$ (Q/K/V projections and logits)",
        True,
    ),
    _r(
        "attention.index_form",
        "A1, B3",
        r"the matrix form $\mathrm{softmax}(QK^{T}/\sqrt{d_{k}})V$ "
        r"equals the index forms of $S_{ij}$, $A_{ij}$, $O_{ij}$",
    ),
    _r(
        "attention.variance",
        "A1.B",
        r"q, k with i.i.d. components of mean 0 and variance 1: "
        r"$\mathbb{E}[q_i k_i] = 0$, $\mathrm{Var}(q_i k_i) = 1$, $\mathbb{E}[q \cdot k] = 0$, "
        r"$\mathrm{Var}(q \cdot k) = d_{k}$, $\mathrm{Var}(q \cdot k / \sqrt{d_{k}}) = 1$ — for "
        r"symbolic $d_{k}$ and any distribution with those moments",
    ),
    _r(
        "attention.saturation",
        "A1.B",
        r"without scaling, the softmax Jacobian vanishes as $d_{k}$ "
        r"grows (numeric evidence and a figure, not a proof)",
    ),
    _r("softmax.normalised", "B4", r"$\sum_j \mathrm{softmax}(x)_j = 1$, entries in $(0, 1)$"),
    _r(
        "softmax.shift",
        "stability",
        r"$\mathrm{softmax}(x - c) = \mathrm{softmax}(x)$ for any "
        r"scalar $c$ per row — justifies subtracting the row max",
    ),
    _r("softmax.jacobian", "A6.C", r"$\partial A_{ij} / \partial S_{ik} = A_{ij}(\delta_{jk} - A_{ik})$", True),
    _r("attention.dV", "A6.A", r"$\partial L / \partial V = A^{T}\, \partial L / \partial O$", True),
    _r("attention.dA", "A6.B", r"$\partial L / \partial A = \partial L / \partial O\; V^{T}$", True),
    _r(
        "attention.dS",
        "A6.C",
        r"$\partial L / \partial S = A \odot (\partial L / \partial A - "
        r"\mathrm{rowsums}(\partial L / \partial A \odot A)\, \mathbf{1}^{T})$",
        True,
    ),
    _r(
        "attention.delta",
        "FlashAttention",
        r"$\mathrm{rowsums}(\partial L / \partial A \odot A) = "
        r"\mathrm{rowsums}(\partial L / \partial O \odot O)$ — backward need not store $A$",
        True,
    ),
    _r(
        ("attention.dQ", "attention.dK"),
        "A6.D",
        r"$\partial L / \partial Q = \partial L / \partial S\, "
        r"K / \sqrt{d_{k}}$, $\partial L / \partial K = (\partial L / \partial S)^{T} Q / \sqrt{d_{k}}$",
        True,
        slug="attention.dQ-dK",
    ),
    _r(
        "attention.causal",
        "B5",
        r"with $M_{ij} = -\infty$ for $j > i$: masked weights are exactly 0, "
        r"rows still sum to 1, gradients to masked logits are 0, output row $i$ depends on no "
        r"$V$ row after $i$",
        True,
    ),
    _r(
        "mha.concat",
        "A2, B6",
        r"per-head projections equal one fused projection split into heads; "
        r"$\mathrm{Concat}(\mathrm{heads})\, W^{O} = \sum_i \mathrm{head}_i W^{O}_{i}$",
        True,
    ),
    _r(
        "mha.head_dim",
        "B7",
        r"$d_{k} = d_{\mathrm{model}} / h$ ($768 / 12 = 64$); a config that "
        r"breaks it is a clear error",
    ),
    _r(
        "layernorm",
        "A3, B8",
        r"$\mu$, $\sigma^{2}$, $\hat{x}$, $y = \gamma \odot \hat{x} + \beta$; "
        r"$\mathrm{mean}(\hat{x}) = 0$, $\mathrm{mean}(\hat{x}^{2}) = \sigma^{2}/(\sigma^{2}+\epsilon)$; "
        r"backward for $x$, $\gamma$, $\beta$ in closed form",
        True,
    ),
    _r(
        "rmsnorm",
        "B9",
        r"$\mathrm{RMS}(x) = \sqrt{\mathrm{mean}(x^{2}) + \epsilon}$, "
        r"$y = x / \mathrm{RMS}(x) \odot \gamma$; backward for $x$, $\gamma$",
        True,
    ),
    _r(
        "residual",
        "B10",
        r"$X' = X + f(X)$: $\partial L/\partial X = \partial L/\partial X' + "
        r"J_{f}^{T}\, \partial L/\partial X'$; the document's post-norm flow and the pre-norm flow",
    ),
    _r("ffn.relu", "A4, B11", r"$\max(0, xW_1 + b_1) W_2 + b_2$ and its backward (subgradient 0 at 0)", True),
    _r(
        ("gelu.exact", "gelu.tanh"),
        "B12",
        r"$x \Phi(x)$, the tanh approximation (exact constants), "
        r"both derivatives, and a bound on their difference",
        True,
        slug="gelu",
    ),
    _r("silu", "B13", r"$x \sigma(x) = x / (1 + e^{-x})$, derivative $\sigma(x)(1 + x(1 - \sigma(x)))$", True),
    _r(
        "swiglu",
        "B14",
        r"$\mathrm{SiLU}(x W_{g}) \odot (x W_{u})$ then $W_{d}$; backward for $x$, "
        r"$W_{g}$, $W_{u}$, $W_{d}$",
        True,
    ),
    _r(
        "rope",
        "B15",
        r"rotation of each pair by $\theta = \mathrm{pos} \cdot \omega_i$: norm preserved; "
        r"the inner product of rotated $q$, $k$ depends only on $m - n$; backward rotates by $-\theta$",
        True,
    ),
    _r(
        "sinusoidal",
        "A5",
        r"$\mathrm{PE}(\mathrm{pos}, 2i) = \sin(\mathrm{pos} / 10000^{2i/d})$, "
        r"$\mathrm{PE}(\mathrm{pos}, 2i+1) = \cos(\ldots)$; a shift by $k$ is a fixed rotation per "
        r"frequency pair",
        True,
    ),
    _r(
        "logits.softmax",
        "B16, B17",
        r"$P = \mathrm{softmax}(HW + b)$, shape $T \times V$; greedy "
        r"$\arg\max$",
        True,
    ),
    _r(
        "cross_entropy",
        "B18",
        r"$L = -\sum_i y_i \log p_i = -\log p_{\mathrm{correct}}$; "
        r"$\partial L / \partial \mathrm{logits} = p - y$; the log-sum-exp form equals the naive "
        r"one; $L \ge 0$",
        True,
    ),
    _r(
        "sgd",
        "B19",
        r"$W \leftarrow W - \eta\, \partial L / \partial W$; first-order decrease "
        r"$L(W - \eta g) = L(W) - \eta \lVert g \rVert^{2} + O(\eta^{2})$",
        True,
    ),
    _r(
        "adam",
        "B20",
        r"moments, bias correction, update; for symbolic $t$: "
        r"$(1-\beta)\sum_{i \le t} \beta^{t-i} = 1 - \beta^{t}$",
        True,
    ),
    _r(
        "adamw",
        "B end",
        r"decoupled weight decay $\theta \leftarrow \theta - \eta(\hat{m}/(\sqrt{\hat{v}}"
        r" + \epsilon) + \lambda \theta)$, and how it differs from L2 added to the gradient",
        True,
    ),
)

EXTRA_SOURCE = "beyond the catalogue"
# Claims whose id shares its first segment with several rows: the row they belong to.
ALIASES = {"softmax.vjp": "softmax.jacobian"}
# The claims generated from an op's, table's or step's specification (`<unit>.forward`,
# `<unit>.backward.<grad>`, `<unit>.entries`, `<unit>.update`) whose first segment is no row's:
# the row of the formula the unit prints.
UNIT_ROWS = {
    "attention": "attention.dQ",
    "softmax": "softmax.jacobian",
    "relu": "ffn.relu",
    "ffn_relu": "ffn.relu",
    "gelu_tanh": "gelu.tanh",
    "gelu": "gelu.exact",
    "linear_nobias": "linear",
    "rope_tables": "rope",
    "sinusoidal_table": "sinusoidal",
}
_GENERATED = (".forward", ".backward.", ".entries", ".update")


def row_of(claim_id: str) -> Row | None:
    """The catalogue row a claim belongs to (see the module docstring), or None."""
    if claim_id in ALIASES:
        return next(r for r in ROWS if ALIASES[claim_id] in r.ids)
    unit = claim_id.split(".")[0]
    if unit in UNIT_ROWS and any(g in claim_id[len(unit) :] + "." for g in _GENERATED):
        return next(r for r in ROWS if UNIT_ROWS[unit] in r.ids)
    best: tuple[int, Row] | None = None
    for row in ROWS:
        for rid in row.ids:
            if claim_id == rid or claim_id.startswith(rid + "."):
                if best is None or len(rid) > best[0]:
                    best = (len(rid), row)
    if best:
        return best[1]
    head = claim_id.split(".")[0]
    same = [r for r in ROWS if any(rid.split(".")[0] == head for rid in r.ids)]
    return same[0] if len(same) == 1 else None


def extra_row(claim_id: str) -> Row:
    """The page of a claim that fits no catalogue row: one per first segment of its id."""
    head = claim_id.split(".")[0]
    return Row(
        (head,),
        EXTRA_SOURCE,
        f"the claims whose id starts with `{head}` go beyond the formulas of the two source documents",
        False,
    )


def is_catalogue_page(page: str) -> bool:
    return any(r.page == page for r in ROWS)


# The site's sections: each page under the topic of its first id segment (a page whose segment is
# named nowhere goes under "Beyond the catalogue"), in this order.
TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Embedding and projections", ("embedding", "linear", "linear_nobias", "residual")),
    ("Attention", ("attention", "attention_lse", "attention_tiled", "mha")),
    ("Softmax", ("softmax",)),
    ("Normalisation", ("layernorm", "rmsnorm")),
    (
        "Activations and feed-forward networks",
        (
            "relu",
            "gelu",
            "gelu_tanh",
            "silu",
            "swiglu",
            "geglu",
            "ffn",
            "ffn_relu",
            "mish",
            "softplus",
            "squared_relu",
            "squareplus",
            "softcap",
        ),
    ),
    ("Positions", ("sinusoidal", "rope")),
    ("Logits and loss", ("logits", "cross_entropy")),
    ("Optimisers", ("sgd", "adam", "adamw")),
    ("The whole GPT", ("gpt",)),
    ("Numerics and reverse mode", ("stability", "special", "ad")),
)


def topic_of(page: str) -> str:
    """The site section of a derivation page (its file stem), by the page's first id segment."""
    head = page.split(".")[0]
    return next((title for title, heads in TOPICS if head in heads), "Beyond the catalogue")
