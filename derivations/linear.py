"""Linear layers: Y = X Wᵀ + b (PyTorch's weight layout, out × in).

Seed B §2 and §16: Q = X W_Q, K = X W_K, V = X W_V, Logits = H W_vocab + b. The document writes
X W with W of shape in × out; qed stores `weight` as out × in like `torch.nn.Linear`, so the
document's W is `weightᵀ`. Backward (llm.c's matmul_backward):

    dX = dY W        dW = Σ_rows dYᵀ X        db = Σ_rows dY
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, ColSum, Contract, MatMul, T, entry, index, size
from .language.ops import Op, Quote, grad_of
from .proof.core import Claim, Setting, index_claim

r, n_in, n_out = size("r"), size("n_in"), size("n_out")
i, j, e, f, c = (index(s) for s in "ijefc")

x = Array("x", (r, n_in), latex="X")
weight = Array("weight", (n_out, n_in), latex=r"\mathrm{weight}")
bias = Array("bias", (1, n_out), latex="b")
y = Array("y", (r, n_out), latex="Y")
dy, dx, dweight, dbias = grad_of(y), grad_of(x), grad_of(weight), grad_of(bias)

_backward_x_w = [
    Assign(dx, MatMul(dy, weight)),  # dX = dY W          (r×out)(out×in)
    Assign(dweight, Contract(dy, x)),  # dW = Σ_rows dYᵀ X  (out×in)
]

# The document's linear layer (seed B §2, §16), in a scope of its own: Y = X W + b with the
# document's W (in × out), which is the stored weight transposed.
w_doc = Array("W", (n_in, n_out), latex="W")
LINEAR_SPEC = [
    Assign(w_doc, T(weight)),  # the document's W = weightᵀ (in × out)
    Assign(y, MatMul(x, w_doc) + bias),  # Y = X W + b
]
LINEAR_NOBIAS_SPEC = [
    Assign(w_doc, T(weight)),  # the document's W = weightᵀ (in × out)
    Assign(y, MatMul(x, w_doc)),  # Y = X W
]
# Classic mistakes that type-check (W untransposed, dY Wᵀ, Xᵀ dY are shape errors for
# n_in ≠ n_out, which the array language rejects when the op is built).
_mistakes_x_w = {
    "dW-batch-mean": ("dW averaged over the rows instead of summed", "backward", "dweight", Contract(dy, x) / r),
}

LINEAR = Op(
    name="linear",
    module=__name__,
    title="Linear layer with bias",
    spec=LINEAR_SPEC,
    source="seed B §2, §16",
    # the logits of seed B §16: H times the vocabulary projection, plus b (the stored weight is
    # out × in: the sources' W_{vocab} is its transpose)
    quotes=(
        Quote(
            "seed B §16",
            "Logits",
            "Logits = HW_{vocab}+b",
            args=("H",),
            params=(("weight", "W_{vocab}^T"), ("bias", "b")),
        ),
    ),
    mistakes={
        "no-bias": ("bias forgotten", "forward", "y", MatMul(x, T(weight))),
        **_mistakes_x_w,
        "db-mean": ("mean over rows instead of the sum", "backward", "dbias", ColSum(dy) / r),
    },
    claims=["linear.forward", "linear.dX", "linear.dW", "linear.db"],
    inputs=[x],
    params=[weight, bias],
    forward=[Assign(y, MatMul(x, T(weight)) + bias)],
    outputs=[y],
    saved=[x, weight],
    backward=_backward_x_w + [Assign(dbias, ColSum(dy))],  # db = Σ_rows dY
    grads=[dx, dweight, dbias],
    optional_axes=1,  # x: any shape with at least one axis (torch's F.linear)
    cache_doc="x and weight (the bias gradient needs only dy).",
)
LINEAR_NOBIAS = Op(
    name="linear_nobias",
    module=__name__,
    title="Linear layer without bias",
    spec=LINEAR_NOBIAS_SPEC,
    source="seed B §2",
    # seed B §2's projections and §6's output projection, each the stored weight transposed
    quotes=(
        Quote("seed B §2", "Q", "Q = XW_Q", args=("X",), params=(("weight", "W_Q^T"),)),
        Quote("seed B §2", "K", "K = XW_K", args=("X",), params=(("weight", "W_K^T"),)),
        Quote(
            "seed B §6", "MultiHeadAttention", "MultiHeadAttention = HW_O", args=("H",), params=(("weight", "W_O^T"),)
        ),
    ),
    mistakes=dict(_mistakes_x_w),
    claims=["linear_nobias.forward"],  # its own generated claims (linear.dX, linear.dW read linear)
    inputs=[x],
    params=[weight],
    forward=[Assign(y, MatMul(x, T(weight)))],
    outputs=[y],
    saved=[x, weight],
    backward=_backward_x_w,
    grads=[dx, dweight],
    optional_axes=1,  # x: any shape with at least one axis (torch's F.linear)
    cache_doc="x and weight.",
)
OPS = [LINEAR, LINEAR_NOBIAS]

setting = Setting(
    sizes={r: 3, n_in: 2, n_out: 2}, indices={i: (0, r - 1), j: (0, n_out - 1), e: (0, r - 1), f: (0, n_in - 1)}
)
code = LINEAR.env()
L = sp.Sum(dy.base[i, j] * entry(y, (i, j), code), (i, 0, r - 1), (j, 0, n_out - 1))

dX = index_claim(
    "linear.dX",
    "Gradient of a linear layer with respect to its input",
    "seed B §2, §16",
    r"\frac{\partial L}{\partial X} = \frac{\partial L}{\partial Y} W",
    lhs=sp.diff(L, x.base[e, f]),
    rhs=entry(dx, (e, f), code),
    setting=setting,
    mutants={
        "transposed": ("dY Wᵀ index order", sp.Sum(dy.base[e, c] * weight.base[f, c], (c, 0, n_out - 1))),
        "with-bias": ("the bias leaks into dX", entry(dx, (e, f), code) + bias.base[f]),
    },
)

dW = index_claim(
    "linear.dW",
    "Gradient of a linear layer with respect to its weight",
    "seed B §2, §16",
    r"\frac{\partial L}{\partial W} = \left(\frac{\partial L}{\partial Y}\right)^{T} X",
    lhs=sp.diff(L, weight.base[e, f]),
    rhs=entry(dweight, (e, f), code),
    setting=Setting(sizes=setting.sizes, indices={e: (0, n_out - 1), f: (0, n_in - 1)}),
    mutants={
        "swapped": ("Xᵀ dY (in × out) instead of dYᵀ X", sp.Sum(x.base[c, e] * dy.base[c, f], (c, 0, r - 1))),
        "one-row": ("only the last row's outer product", dy.base[r - 1, e] * x.base[r - 1, f]),
    },
)

db = index_claim(
    "linear.db",
    "Gradient of a linear layer with respect to its bias",
    "seed B §16",
    r"\frac{\partial L}{\partial b} = \sum_{i} \left(\frac{\partial L}{\partial Y}\right)_{i}",
    lhs=sp.diff(L, bias.base[f]),
    rhs=entry(dbias, (0, f), code),
    setting=Setting(sizes=setting.sizes, indices={f: (0, n_out - 1)}),
    mutants={
        "mean": ("mean over rows instead of the sum", entry(dbias, (0, f), code) / r),
        "row-sum": ("summed over the output axis", sp.Sum(dy.base[f, c], (c, 0, n_out - 1))),
    },
)

CLAIMS: list[Claim] = [dX, dW, db]
