"""MatrixFree: an operator given by callables (or a scipy LinearOperator)."""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import numpy as np

from ._backend import namespace
from ._base import LinearOperator, _set, check_shape, operator


@operator
class MatrixFree(LinearOperator):
    """A given by ``matmat(X)`` and ``rmatmat(X)`` (= Aᴴ X) callables.

    ``conjugated=True`` means the operator is conj(A): X ↦ conj(A conj(X)). Adjoint swaps the
    callables, so ``.H`` and ``.T`` need no new code from the user. Cost: the callables'.

    The callables are used as they are: they are outside the snapshot rule (if they read state
    that you change, the operator changes; a preconditioner or factorization built from it
    keeps what it saw at setup). The backend of a solve with a MatrixFree operator is that of
    the right-hand side.

    >>> import numpy as np
    >>> M = MatrixFree((2, 2), np.float64, lambda X: 2 * X, lambda X: 2 * X)
    >>> (M @ np.ones(2)).tolist()
    [2.0, 2.0]
    """

    shape: tuple[int, int]
    dtype: Any
    fmatmat: Callable
    frmatmat: Callable | None = None
    conjugated: bool = False
    _leaves: ClassVar = ()

    def __post_init__(self):
        _set(self, shape=check_shape(self.shape), dtype=np.dtype(self.dtype))
        if not callable(self.fmatmat):
            raise TypeError(f"MatrixFree needs a callable matmat, got {type(self.fmatmat).__name__}")

    @classmethod
    def from_scipy(cls, L) -> "MatrixFree":
        """Wrap a ``scipy.sparse.linalg.LinearOperator`` (its matmat and rmatmat)."""
        return cls(L.shape, L.dtype, L.matmat, L.rmatmat)

    @classmethod
    def from_duck(cls, op) -> "MatrixFree":
        """Wrap any object with ``shape``, ``dtype`` and ``matvec``/``rmatvec`` (or
        ``matmat``/``rmatmat``) methods, such as a PyLops operator. Without rmatvec/rmatmat the
        adjoint is unknown (``.H`` raises, naming what to add)."""
        def pick(mat, vec):
            f = getattr(op, mat, None)
            if callable(f):
                return f
            g = getattr(op, vec, None)
            if not callable(g):
                return None
            return lambda X: _columnwise(g, X)

        fm, fr = pick("matmat", "matvec"), pick("rmatmat", "rmatvec")
        return cls(tuple(op.shape), np.dtype(op.dtype), fm, fr)

    @classmethod
    def conjugate_of(cls, A: LinearOperator) -> "MatrixFree":
        """conj(A) for any operator, through A's own products."""
        return cls(A.shape, A.dtype, A.matmat, lambda X: A.adjoint().matmat(X), conjugated=True)

    def matmat(self, X):
        if not self.conjugated:
            return self.fmatmat(X)
        xp = namespace(X)
        return xp.conj(self.fmatmat(xp.conj(X)))

    def adjoint(self) -> "MatrixFree":
        if self.frmatmat is None:
            raise NotImplementedError(
                "this MatrixFree operator was built without rmatmat, so its adjoint is unknown; "
                "pass rmatmat=... (X ↦ Aᴴ X)")
        return MatrixFree((self.shape[1], self.shape[0]), self.dtype, self.frmatmat,
                          self.fmatmat, self.conjugated)


def _columnwise(f, X):
    """Apply a matvec to every column of X."""
    xp = namespace(X)
    if X.ndim == 1:
        return f(X)
    return xp.stack([xp.asarray(f(X[:, j])) for j in range(X.shape[1])], axis=1)


def _conj_mf(A: MatrixFree) -> MatrixFree:
    return MatrixFree(A.shape, A.dtype, A.fmatmat, A.frmatmat, not A.conjugated)


from ._queries import conjugate  # noqa: E402

conjugate.register(MatrixFree, _conj_mf)
