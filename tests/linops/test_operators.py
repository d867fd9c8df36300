"""The operator zoo × backend × dtype through dottest and every query against the dense matrix."""

from __future__ import annotations

import numpy as np
import pytest

import linops as lo
from linops.testing import ZOO_NAMES, check_against_dense, dottest, zoo


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_dottest(name, xp, dtype):
    assert dottest(zoo(name, xp, dtype))


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_against_dense(name, xp, dtype):
    assert check_against_dense(zoo(name, xp, dtype))


def test_against_dense_catches_a_wrong_operator():
    A = zoo("sparse")
    wrong = lo.to_dense(A) + 1e-3
    with pytest.raises(AssertionError, match="matmat"):
        check_against_dense(A, wrong)


def test_complex_T_never_conjugates_H_always_does():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))
    c = 2.0 - 3.0j
    A = c * lo.Dense(a)
    assert isinstance(A, lo.Scaled) and A.c == c
    np.testing.assert_allclose(lo.to_dense(A.T), c * a.T, atol=1e-14)
    np.testing.assert_allclose(lo.to_dense(A.H), np.conj(c) * a.conj().T, atol=1e-14)
    assert A.T.c == c and A.H.c == np.conj(c)
    np.testing.assert_allclose(lo.to_dense(A.T.T), c * a, atol=1e-14)
    np.testing.assert_allclose(lo.to_dense(A.conj()), np.conj(c * a), atol=1e-14)


def test_rmatmul_from_numpy_and_vectors():
    A = zoo("sparse_rect")
    D = lo.to_dense(A)
    x = np.arange(5.0)
    np.testing.assert_allclose(x @ A, x @ D, atol=1e-13)
    X = np.ones((3, 5))
    np.testing.assert_allclose(X @ A, X @ D, atol=1e-13)
