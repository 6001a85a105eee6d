"""Matrices written out (bmatrix, pmatrix) and seed B §15's RoPE rotation, step by step.

A matrix written out is read entry by entry: products of such matrices, columns and scalars, their
sums, and equations between two of them (one statement per row). A column of one name's entries
2i and 2i + 1 on the left defines that vector by its pairs — counted from 0, the only counting in
which the pairs (2i, 2i + 1) cover a vector. The convention names RoPE's quantities as the
catalogue computes them: pos (the row's position), ω_i = base^{−2i/d} and the angle θ_i = pos·ω_i,
which the sources write bare. Every wrong variant of the rotation is refuted with a counterexample;
what has no one reading is refused with its reason."""

from __future__ import annotations

import re

import pytest

from qed.tools.check import check_text

R = r"\begin{bmatrix} \cos\theta & -\sin\theta\\ \sin\theta & \cos\theta \end{bmatrix}"
X = r"\begin{bmatrix} x_{2i}\\ x_{2i+1} \end{bmatrix}"
LEFT = r"\begin{bmatrix} x'_{2i}\\ x'_{2i+1} \end{bmatrix}"
ROTATION = f"{LEFT} = {R} {X}"  # seed B §15, line 221, as printed
ANGLE = r"\theta = pos \cdot \omega_i"  # seed B §15, line 225


def doc(*lines: str) -> str:
    return "".join(f"$${line}$$\n\n" for line in lines)


def verdicts(*lines: str) -> list:
    return check_text(doc(*lines))


def test_the_seeds_rotation_defines_x_prime_by_its_pairs_and_the_angle_is_the_catalogues():
    rotation, angle = verdicts(ROTATION, ANGLE)
    assert rotation.verdict == "definition" and rotation.defines == "x'"
    assert "by its pairs (2i, 2i+1), i = 0 … n_ω - 1 (dimensions counted from 0" in rotation.reason
    assert angle.verdict == "proved" and "agrees with θ as the catalogue defines it" in angle.reason
    assert angle.scope.startswith("all sizes")


def test_the_rotation_is_the_catalogues_rope_of_the_row_at_its_position():
    """x' = RoPE(x): the rope op's tables at the row's position pos, compared pair by pair."""
    *_, v = verdicts(ROTATION, ANGLE, "x' = RoPE(x)")
    assert v.verdict == "proved", v.reason
    assert "at the even columns (c = 2·c_pair) and at the odd columns (c = 2·c_pair + 1), each" in v.reason
    # restated pair by pair, both rows hold
    *_, v = verdicts(ROTATION, ROTATION)
    assert v.verdict == "proved" and v.reason.startswith("row 1 and row 2, each"), v.reason


WRONG = {
    # the sign of −sin θ moved to the other row: the rotation by −θ
    "minus theta": r"\begin{bmatrix} \cos\theta & \sin\theta\\ -\sin\theta & \cos\theta \end{bmatrix}" + f" {X}",
    "cos and sin swapped": r"\begin{bmatrix} \sin\theta & -\cos\theta\\ \cos\theta & \sin\theta \end{bmatrix}"
    + f" {X}",
    "the column's rows swapped": f"{R} " + r"\begin{bmatrix} x_{2i+1}\\ x_{2i} \end{bmatrix}",
}


@pytest.mark.parametrize("wrong", list(WRONG), ids=list(WRONG))
def test_a_wrong_rotation_restated_is_refuted_with_a_counterexample(wrong):
    *_, v = verdicts(ROTATION, f"{LEFT} = {WRONG[wrong]}")
    assert v.verdict == "refuted", (v.verdict, v.reason)
    cx = v.counterexample
    assert v.reason.startswith("row ") and cx["lhs"] != cx["rhs"]


@pytest.mark.parametrize("wrong", list(WRONG), ids=list(WRONG))
def test_a_wrong_rotation_is_not_the_catalogues_rope(wrong):
    *_, v = verdicts(f"{LEFT} = {WRONG[wrong]}", "x' = RoPE(x)")
    assert v.verdict == "definition" and "redefines x': differs" in v.reason, v.reason
    assert v.counterexample is not None and v.counterexample["lhs"] != v.counterexample["rhs"]


def test_a_wrong_angle_is_refuted_at_a_point_where_every_entry_exists():
    (v,) = verdicts(r"\theta = pos \cdot \omega_{i+1}")
    assert v.verdict == "refuted", v.reason
    at = v.counterexample["at"]
    assert 1 <= at["i"] < at["n_ω"]  # ω_{i+1} lies inside ω (i counted from 1 here)


def test_pairs_written_from_1_are_the_same_pairs():
    """(2i − 1, 2i), counted from 1, pair the dimensions as (2i, 2i + 1) from 0 do."""
    one = (
        r"\begin{bmatrix} y_{2i-1}\\ y_{2i} \end{bmatrix} = " + R + r" \begin{bmatrix} x_{2i-1}\\ x_{2i} \end{bmatrix}"
    )
    first, second, same = verdicts(ROTATION, one, "x' = y")
    assert second.verdict == "definition" and "(2i-1, 2i), i = 1 …" in second.reason
    assert same.verdict == "proved", same.reason
    mixed = r"\begin{bmatrix} y_{2i}\\ y_{2i+1} \end{bmatrix} = \begin{bmatrix} x_{2i-1}\\ x_{2i} \end{bmatrix}"
    (v,) = verdicts(mixed)
    assert v.verdict == "not understood" and "counted from 0 or from 1" in v.reason


def test_adams_theta_t_is_the_documents_own_theta():
    """θ is RoPE's angle only written bare; θ_t = … (Adam's parameters) is another θ."""
    *_, v = verdicts(ANGLE, r"\theta_t = \theta_{t-1} - \eta g_t")
    assert v.verdict == "definition" and "defines θ by a recurrence" in v.reason
    assert "no longer" in v.reason  # the angle was read before: said so
    (v,) = verdicts(r"\cos\theta_t = 1")
    assert v.verdict == "not understood" and "written bare" in v.reason


@pytest.mark.parametrize(
    "text, verdict",
    [
        (r"\begin{bmatrix} 1 & 2 \end{bmatrix} \begin{bmatrix} 3 \\ 4 \end{bmatrix} = 11", "proved"),
        (r"\begin{bmatrix} 1 & 2 \end{bmatrix} \begin{bmatrix} 3 \\ 4 \end{bmatrix} = 10", "refuted"),
        (
            r"\begin{bmatrix} 1 \\ 2 \end{bmatrix} + \begin{bmatrix} 3 \\ 4 \end{bmatrix} = \begin{bmatrix} 4 \\ 6 \end{bmatrix}",
            "proved",
        ),
        (
            r"\begin{pmatrix} 0 & 1\\ 1 & 0 \end{pmatrix} \begin{pmatrix} 0 & 1\\ 1 & 0 \end{pmatrix} = \begin{pmatrix} 1 & 0\\ 0 & 1 \end{pmatrix}",
            "proved",
        ),
        (
            r"\begin{bmatrix} 0 & 1\\ 1 & 0 \end{bmatrix} \begin{bmatrix} 0 & 1\\ 1 & 1 \end{bmatrix} = \begin{bmatrix} 1 & 0\\ 0 & 1 \end{bmatrix}",
            "refuted",
        ),
        (
            r"-\begin{bmatrix} \epsilon \\ \eta \end{bmatrix} = \begin{bmatrix} -\epsilon \\ -\eta \end{bmatrix}",
            "proved",
        ),
    ],
)
def test_matrices_written_out_multiply_and_add_entry_by_entry(text, verdict):
    (v,) = check_text(text)
    assert v.verdict == verdict, (v.verdict, v.reason)


@pytest.mark.parametrize(
    "text, why",
    [
        # rows of different lengths
        (
            f"{LEFT} = " + r"\begin{bmatrix} \cos\theta & -\sin\theta\\ \sin\theta \end{bmatrix}" + f" {X}",
            "rows of different lengths",
        ),
        # a 2×2 matrix times a column of 3
        (
            f"{LEFT} = {R} " + r"\begin{bmatrix} x_{2i}\\ x_{2i+1}\\ x_{2i+2} \end{bmatrix}",
            "a 2×2 matrix and a 3×1 column written out: 2 columns against 3 rows",
        ),
        (f"{LEFT} = {R} {R}", "the right side must be one"),  # a pair is a column of two
        (f"{LEFT} = " + r"\begin{bmatrix} x & 0\\ 0 & x \end{bmatrix}" + f" {X}", "not a scalar"),  # a block matrix
        (r"y = \begin{bmatrix} 1 \end{bmatrix}", "1×1 matrix"),  # a scalar or a 1×1 array?
        (r"y = \begin{bmatrix} 1 \\ 2 \end{bmatrix}", "read only in a product"),  # no vector of the array language
        (r"\begin{bmatrix} \epsilon \\ \eta \end{bmatrix} = x", "on one side and an array on the other"),
        (r"\begin{bmatrix} 1 \\ 2 \end{bmatrix} = \begin{bmatrix} 1 \\ 2 \\ 3 \end{bmatrix}", "a 2×1 and a 3×1"),
        (f"{LEFT} = {R} \\cdot {X}", "with a matrix written out"),  # a product is written side by side
        (f"{LEFT} = ({X})^T", "read only in a product"),  # a transpose of one
        (r"\begin{bmatrix} 1\\2\\3\\4\\5 \end{bmatrix} = \begin{bmatrix} 1\\2\\3\\4\\5 \end{bmatrix}", "at most 4×4"),
        # counted from 0, a fixed entry or a sum's bounds would mean other entries than from 1
        (
            r"\begin{bmatrix} y_{2i}\\ y_{2i+1} \end{bmatrix} = \begin{bmatrix} x_1\\ x_{2i} \end{bmatrix}",
            "a fixed position",
        ),
        (
            r"\begin{bmatrix} y_{2i}\\ y_{2i+1} \end{bmatrix} = \begin{bmatrix} \sum_{j=1}^{n} x_j\\ x_{2i} \end{bmatrix}",
            "a sum with bounds in a statement that counts from 0",
        ),
        # θ written bare is θ_i: pairs indexed by j leave i free
        (
            r"\begin{bmatrix} x'_{2j}\\ x'_{2j+1} \end{bmatrix} = "
            + R
            + r" \begin{bmatrix} x_{2j}\\ x_{2j+1} \end{bmatrix}",
            r"free index i on the right only \(θ written bare is θ_i\)",
        ),
    ],
)
def test_a_matrix_written_out_with_no_one_reading_is_not_understood(text, why):
    (v,) = check_text(text)
    assert v.verdict == "not understood" and re.search(why, v.reason), (v.verdict, v.reason)


def test_pairs_of_a_vector_of_known_length_make_it_even():
    """x of length n (seed B's LayerNorm fixed it): x' by its pairs holds for even n, as stated."""
    fixed = r"\mu = \frac{1}{n} \sum_{i=1}^{n}x_i"
    _, rotation, angle, same = verdicts(fixed, ROTATION, ANGLE, "x' = RoPE(x)")
    assert rotation.verdict == "definition" and "i = 0 … n/2 - 1" in rotation.reason and "x' ∈ ℝ^n" in rotation.reason
    assert angle.verdict == "proved" and same.verdict == "proved", (angle.reason, same.reason)
    assert any("n even" in a for a in same.assumptions), same.assumptions


def test_theta_as_a_documents_own_scalar_stays_its_own():
    """θ = 0.5 reads no pair: where the document has not read RoPE's angle, it is its own scalar."""
    (v,) = verdicts(r"\theta = 0.5")
    assert v.verdict == "definition" and "defines the scalar θ" in v.reason
    *_, v = verdicts(ANGLE, r"\theta = 2")  # after the angle: a claim about θ_i, false
    assert v.verdict == "refuted"
