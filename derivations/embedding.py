"""Token embedding: X = E[ids] = onehot(ids) E, and dE = onehot(ids)ᵀ dX.

Seed B §1. The backward is a one-hot matrix product rather than a scatter: it accumulates
repeated ids by construction (Σ_r δ(ids_r, a) dX_r), and it is a single BLAS call.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, ColSum, Contract, Gather, MatMul, OneHot, T, entry, index, size
from .language.ops import Op, Quote, grad_of
from .proof.core import Claim, Setting, index_claim

t, V, d = size("T"), size("V"), size("d")
i, j, a, b, c = (index(s) for s in "ijabc")

ids = Array("ids", (t, 1), integer=True, latex=r"\mathrm{ids}")
weight = Array("weight", (V, d), latex="E")
x = Array("x", (t, d), latex="X")
dx, dweight = grad_of(x), grad_of(weight)

# The document's lookup (seed B §1: X = E[token_ids]), in a scope of its own. The printed
# forward gathers rows too; the generated backward claim differentiates this gather, so the
# printed one-hot product dE = onehot(ids)ᵀ dX is checked against ∂E[ids]/∂E itself.
EMBEDDING_SPEC = [
    Assign(x, Gather(weight, ids)),  # X = E[ids]
]

EMBEDDING = Op(
    name="embedding",
    module=__name__,
    title="Token embedding lookup",
    spec=EMBEDDING_SPEC,
    source="seed B §1",
    # the ids are the sources' token ids, the table their E (V × d_model, as stored)
    quotes=(Quote("seed B §1", "X", r"X = E[token\_ids]", args=(r"token\_ids",), params=(("weight", "E"),)),),
    mistakes={
        "off-by-one": ("row ids + 1 looked up", "forward", "x", Gather(weight, ids + 1)),
        "averaged": (
            "repeated ids averaged instead of accumulated",
            "backward",
            "dweight",
            Contract(OneHot(ids, V), dx) / sp.Max(1, T(ColSum(OneHot(ids, V)))),
        ),
    },
    # counterexamples with T = 4 tokens over V = 3 ids, so that some id repeats
    check={"sizes": {"T": 4, "V": 3, "d": 2}, "integers": {"ids": (0, 2)}},
    claims=["embedding.forward", "embedding.lookup", "embedding.dE"],
    inputs=[ids],
    params=[weight],
    integer_inputs=[ids],
    sizes={V: (weight, 0)},
    forward=[Assign(x, Gather(weight, ids))],
    outputs=[x],
    saved=[ids],
    backward=[Assign(dweight, Contract(OneHot(ids, V), dx))],  # dE = onehot(ids)ᵀ dX
    grads=[dweight],
    optional_axes=1,  # ids: any shape, 0-D too (one id: one row)
    cache_doc="the token ids (and the vocabulary size V, read off the weight).",
)
OPS = [EMBEDDING]

setting = Setting(
    sizes={t: 4, V: 3, d: 2},
    indices={i: (0, t - 1), j: (0, d - 1), a: (0, V - 1), b: (0, d - 1)},
    integer_arrays={"ids": (0, V - 1)},
)
code = EMBEDDING.env()

lookup = index_claim(
    "embedding.lookup",
    "Embedding lookup equals a one-hot matrix product",
    "seed B §1",
    r"X = E[\mathrm{ids}] = \mathrm{onehot}(\mathrm{ids}) \cdot E",
    lhs=entry(x, (i, j), code),
    rhs=entry(MatMul(OneHot(ids, V), weight), (i, j)),
    setting=setting,
    mutants={
        "off-by-one": ("row ids+1 looked up", weight.base[ids.base[i] + 1, j]),
        "transposed": ("column lookup E[:, ids]", weight.base[j, ids.base[i]]),
    },
)

L = sp.Sum(dx.base[i, j] * entry(x, (i, j), code), (i, 0, t - 1), (j, 0, d - 1))
dE = index_claim(
    "embedding.dE",
    "Embedding gradient: repeated ids accumulate",
    "seed B §1",
    r"\frac{\partial L}{\partial E} = \mathrm{onehot}(\mathrm{ids})^{T} \frac{\partial L}{\partial X}",
    lhs=sp.diff(L, weight.base[a, b]),
    rhs=entry(dweight, (a, b), code),
    setting=setting,
    mutants={
        "no-transpose": (
            "onehot(ids) dX instead of onehot(ids)ᵀ dX",
            sp.Sum(sp.KroneckerDelta(ids.base[a], c) * dx.base[c, b], (c, 0, t - 1)),
        ),
        "averaged": (
            "repeated ids averaged instead of accumulated",
            sp.Sum(sp.KroneckerDelta(ids.base[c], a) * dx.base[c, b], (c, 0, t - 1))
            / sp.Max(1, sp.Sum(sp.KroneckerDelta(ids.base[c], a), (c, 0, t - 1))),
        ),
    },
)

CLAIMS: list[Claim] = [lookup, dE]
