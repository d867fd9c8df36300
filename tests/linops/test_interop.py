"""Conversions in and out, pattern semantics, jax pytrees, and error messages."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator as ScipyLO

import linops as lo


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr", "lil", "dok", "dia"])
def test_from_scipy_any_format_with_duplicates(fmt):
    rows = np.array([0, 0, 1, 2, 2, 0])
    cols = np.array([1, 1, 0, 2, 0, 2])
    vals = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    S = sp.coo_matrix((vals, (rows, cols)), shape=(3, 3))
    A = lo.Sparse.from_scipy(S.asformat(fmt))
    np.testing.assert_array_equal(lo.to_dense(A), S.toarray())
    assert A.pattern.nnz == 5
    back = A.to_scipy()
    assert back.format == "csr"
    np.testing.assert_array_equal(back.toarray(), S.toarray())


def test_pattern_hash_eq_and_immutability():
    P = lo.Pattern([0, 1, 3], [1, 0, 1], (2, 2))
    Q = lo.Pattern(np.array([0, 1, 3]), np.array([1, 0, 1]), (2, 2))
    assert P == Q and hash(P) == hash(Q) and P is not Q
    assert P != lo.Pattern([0, 1, 2], [1, 0], (2, 2))
    with pytest.raises(AttributeError):
        P.shape = (3, 3)
    with pytest.raises(ValueError):
        P.indices[0] = 0


@pytest.mark.parametrize("indptr,indices,shape,msg", [
    ([0, 1, 2], [0, 5], (2, 3), r"out of range \[0, 3\).*indices\[1\]=5"),
    ([0, 2, 2], [1, 0], (2, 3), r"not canonical: row 0 has column 1 followed by 0"),
    ([0, 1], [0], (2, 2), r"length m\+1=3"),
    ([0, 2, 1], [0, 1], (2, 2), r"end at nnz=2"),
])
def test_bad_patterns_name_the_offending_values(indptr, indices, shape, msg):
    with pytest.raises(lo.PatternError, match=msg):
        lo.Pattern(indptr, indices, shape)


def test_shape_mismatch_names_both_shapes():
    A = lo.Dense(np.ones((3, 4)))
    B = lo.Dense(np.ones((5, 2)))
    with pytest.raises(lo.ShapeError, match=r"A.shape=\(3, 4\) but B.shape=\(5, 2\)"):
        A @ B
    with pytest.raises(lo.ShapeError, match=r"A.shape=\(3, 4\) but B.shape=\(5, 2\)"):
        A + B
    with pytest.raises(lo.ShapeError, match=r"A.shape=\(3, 4\) but X.shape=\(5,\)"):
        A @ np.ones(5)
    with pytest.raises(lo.ShapeError, match=r"values.shape=\(2,\)"):
        lo.Sparse(np.ones(2), lo.Pattern.diagonal(3))
    with pytest.raises(lo.ShapeError, match=r"rows out of range \[0, 3\)"):
        lo.sample(A, np.array([3]), np.array([0]))


def test_unsupported_input_names_accepted_types():
    with pytest.raises(lo.UnsupportedOperandError, match=r"cannot wrap builtins.str.*accepted:.*scipy.sparse"):
        lo.aslinop("matrix")
    with pytest.raises(lo.UnsupportedOperandError, match="2-D"):
        lo.aslinop(np.ones(3))


def test_aslinop_scipy_linear_operator_and_back():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
    L = ScipyLO((4, 3), matvec=lambda x: a @ x, rmatvec=lambda y: a.conj().T @ y, dtype=complex)
    A = lo.aslinop(L)
    assert isinstance(A, lo.MatrixFree)
    assert lo.testing.check_against_dense(A, a)
    S = lo.aslinearoperator(lo.Sparse.from_scipy(sp.csr_matrix(a)))
    x, y = rng.standard_normal(3), rng.standard_normal(4) + 1j
    np.testing.assert_allclose(S.matvec(x), a @ x)
    np.testing.assert_allclose(S.rmatvec(y), a.conj().T @ y)
    np.testing.assert_allclose(S.matmat(np.eye(3)), a)
    np.testing.assert_allclose(S.rmatmat(np.eye(4)), a.conj().T)
    np.testing.assert_allclose(S.H.matvec(y), a.conj().T @ y)


def test_jax_bcoo_and_jit_pytrees():
    import jax
    import jax.numpy as jnp
    from jax.experimental import sparse as jsp

    a = np.array([[2.0, 0, 1], [0, 3, 0], [1, 0, 4]])
    B = jsp.BCOO.fromdense(jnp.asarray(a))
    A = lo.aslinop(B)
    assert isinstance(A, lo.Sparse) and A.pattern.nnz == 5
    f = jax.jit(lambda A, x: (A.H @ x, (2.0 * A + lo.RankOne(x, x)) @ x))
    y1, y2 = f(A, jnp.ones(3))
    np.testing.assert_allclose(y1, a.T @ np.ones(3))
    np.testing.assert_allclose(y2, 2 * a @ np.ones(3) + 3 * np.ones(3))
    leaves = jax.tree_util.tree_leaves(A)
    assert len(leaves) == 1 and leaves[0].shape == (5,)
    g = jax.grad(lambda v: jnp.sum(lo.Sparse(v, A.pattern) @ jnp.arange(3.0)))(A.values)
    np.testing.assert_allclose(g, np.arange(3.0)[A.pattern.indices])


def test_jax_traced_bcoo_indices_raise_clear_error():
    import jax
    import jax.numpy as jnp
    from jax.experimental import sparse as jsp

    B = jsp.BCOO.fromdense(jnp.eye(3))
    with pytest.raises(lo.BackendNotSupported, match="outside jax.jit"):
        jax.jit(lambda B: lo.aslinop(B) @ jnp.ones(3))(B)


def test_matrix_free_without_rmatmat_explains():
    M = lo.MatrixFree((2, 2), np.float64, lambda X: X)
    with pytest.raises(NotImplementedError, match="rmatmat"):
        M.H
