"""Simplification at construction, and random expression trees (hypothesis) lazy vs dense."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import linops as lo
from linops.testing import zoo

rng = np.random.default_rng(0)
n = 6


def vec(k=None):
    return rng.standard_normal(n if k is None else (n, k))


def test_rank_one_plus_rank_one_is_low_rank():
    G = lo.RankOne(vec(), vec()) + lo.RankOne(vec(), vec())
    assert isinstance(G, lo.LowRank) and G.rank == 2
    G3 = G + lo.RankOne(vec(), vec())
    assert isinstance(G3, lo.LowRank) and G3.rank == 3


def test_nested_sums_flatten_and_zeros_drop():
    A, B, C = (zoo(k) for k in ("dense", "diagonal", "sparse"))
    S = (A + B) + (C + lo.Zero((7, 7)))
    assert isinstance(S, lo.Sum) and len(S.terms) == 3
    assert not any(isinstance(t, lo.Sum) for t in S.terms)


def test_sparse_terms_on_one_pattern_merge():
    S = zoo("sparse")
    T = S + 2.0 * lo.Sparse(S.values, S.pattern)
    assert isinstance(T, lo.Sum)  # 2·S stays lazily scaled
    U = S + lo.Sparse(3 * S.values, S.pattern)
    assert isinstance(U, lo.Sparse)
    np.testing.assert_allclose(U.values, 4 * S.values)


def test_scalings_merge_and_identities_drop():
    A = zoo("sparse")
    B = 2.0 * (3.0 * A)
    assert isinstance(B, lo.Scaled) and B.c == 6.0 and B.A is A
    assert (lo.Identity(7) @ A) is A and (A @ lo.Identity(7)) is A
    assert 1 * A is A
    assert isinstance(0 * A, lo.Zero)
    assert isinstance(A @ lo.Zero((7, 3)), lo.Zero) and (A @ lo.Zero((7, 3))).shape == (7, 3)


def test_products_with_low_rank_stay_low_rank_with_smaller_rank():
    A = zoo("dense")
    L = lo.LowRank(rng.standard_normal((7, 4)), rng.standard_normal((7, 4)))
    R1 = lo.RankOne(rng.standard_normal(7), rng.standard_normal(7))
    assert isinstance(A @ L, lo.LowRank) and (A @ L).rank == 4
    assert isinstance(L @ A, lo.LowRank) and (L @ A).rank == 4
    assert isinstance(L @ R1, lo.RankOne)
    assert isinstance(R1 @ L, lo.RankOne)
    L2 = lo.LowRank(rng.standard_normal((7, 2)), rng.standard_normal((7, 2)))
    assert (L @ L2).rank == 2 and (L2 @ L).rank == 2
    np.testing.assert_allclose(lo.to_dense(L @ L2), lo.to_dense(L) @ lo.to_dense(L2), atol=1e-12)
    np.testing.assert_allclose(lo.to_dense(L2 @ L), lo.to_dense(L2) @ lo.to_dense(L), atol=1e-12)
    np.testing.assert_allclose(lo.to_dense(L @ A), lo.to_dense(L) @ lo.to_dense(A), atol=1e-12)
    c = 2.0 - 1.0j
    assert isinstance(c * R1, lo.RankOne)
    np.testing.assert_allclose(lo.to_dense(c * R1), c * lo.to_dense(R1), atol=1e-13)


def test_adjoint_and_transpose_are_pushed_to_leaves():
    S = zoo("sum")
    H = S.H
    assert isinstance(H, lo.Sum)
    assert {type(t) for t in H.terms} == {type(t) for t in S.terms}
    P = zoo("product").T
    assert isinstance(P, lo.Product) and all(isinstance(f, (lo.Dense, lo.Sparse)) for f in P.factors)


# ----- hypothesis: random expression trees ------------------------------------------------------
LEAVES = ["dense", "sparse", "diagonal", "identity", "zero", "rank_one", "low_rank", "masked_outer",
          "matrix_free"]


def leaf(name, seed, dtype):
    return zoo(name, np, dtype, n=5, m=5, seed=seed)


@st.composite
def trees(draw, depth=4, dtype=np.complex128):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(LEAVES).map(lambda k: leaf(k, draw(st.integers(0, 5)), dtype)))
    kind = draw(st.sampled_from(["add", "matmul", "scale", "H", "T", "conj", "neg", "sub"]))
    a = draw(trees(depth=depth - 1, dtype=dtype))
    if kind in ("add", "matmul", "sub"):
        b = draw(trees(depth=depth - 1, dtype=dtype))
        return {"add": a + b, "matmul": a @ b, "sub": a - b}[kind]
    if kind == "scale":
        c = draw(st.sampled_from([2.0, -0.5, 1.5 - 2.0j, 1j]))
        return c * a
    return {"H": a.H, "T": a.T, "conj": a.conj(), "neg": -a}[kind]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_random_trees_lazy_vs_dense(A):
    from linops._generics import _dense_by_products

    D = np.asarray(_dense_by_products(A))
    scale = max(1.0, np.abs(D).max())
    np.testing.assert_allclose(lo.to_dense(A), D, atol=1e-10 * scale)
    np.testing.assert_allclose(lo.to_dense(A.H), D.conj().T, atol=1e-10 * scale)
    np.testing.assert_allclose(lo.to_dense(A.T), D.T, atol=1e-10 * scale)
    np.testing.assert_allclose(lo.diagonal(A), np.diagonal(D), atol=1e-10 * scale)
    P = zoo("sparse", n=5).pattern
    np.testing.assert_allclose(lo.project(A, pattern=P).values, D[P.rows, P.indices], atol=1e-10 * scale)
    K = lo.LowRank(np.ones((5, 1)), np.arange(5.0)[:, None])
    np.testing.assert_allclose(lo.inner(A, K), np.vdot(D, lo.to_dense(K)), atol=1e-9 * scale)
    assert lo.testing.dottest(A)
