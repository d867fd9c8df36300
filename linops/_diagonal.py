"""Diagonal, Identity and Zero: the operators whose structure is their whole story."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._backend import backend_of
from ._base import LinearOperator, _set, check_shape, conj, operator, snapshot
from ._errors import ShapeError
from ._queries import _sample, _to_dense, conjugate


@operator
class Diagonal(LinearOperator):
    """diag(d), n×n. Apply: O(n·k). Adjoint: diag(conj(d)).

    >>> import numpy as np
    >>> (Diagonal(np.array([1.0, 2.0])) @ np.ones(2)).tolist()
    [1.0, 2.0]
    """

    d: Any
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("d",)

    def __post_init__(self):
        d = snapshot(self.d)
        if not hasattr(d, "ndim") or d.ndim != 1:
            raise ShapeError(f"Diagonal needs a 1-D array, got shape={getattr(d, 'shape', None)}")
        n = int(d.shape[0])
        _set(self, d=d, shape=(n, n), dtype=np.dtype(d.dtype))

    def matmat(self, X):
        return self.d[:, None] * X

    def adjoint(self) -> "Diagonal":
        return Diagonal(conj(self.d))


@operator
class Identity(LinearOperator):
    """I (n×n). Apply: a copy of X (O(n·k); jax arrays are returned as they are). Adjoint:
    itself. Holds no arrays."""

    n: int
    dtype: Any = np.float64
    shape: tuple[int, int] = None
    _leaves: ClassVar = ()

    def __post_init__(self):
        n = check_shape((self.n, self.n))[0]
        _set(self, n=n, shape=(n, n), dtype=np.dtype(self.dtype))

    def matmat(self, X):
        be = backend_of(X)
        return be.xp.array(X, copy=True) if be.mutable else X  # never alias the caller's array

    def adjoint(self) -> "Identity":
        return self


@operator
class Zero(LinearOperator):
    """The m×n zero map. Apply: zeros of shape (m, k). Adjoint: Zero((n, m))."""

    shape: tuple[int, int]
    dtype: Any = np.float64
    _leaves: ClassVar = ()

    def __post_init__(self):
        _set(self, shape=check_shape(self.shape), dtype=np.dtype(self.dtype))

    def matmat(self, X):
        xp = backend_of(X).xp
        return xp.zeros((self.shape[0],) + tuple(X.shape[1:]), dtype=np.result_type(self.dtype, X.dtype))

    def adjoint(self) -> "Zero":
        return Zero((self.shape[1], self.shape[0]), self.dtype)


@conjugate.register
def _(A: Diagonal):
    return Diagonal(conj(A.d))


@conjugate.register(Identity)
@conjugate.register(Zero)
def _(A):
    return A


@_to_dense.register
def _(A: Diagonal):
    xp = backend_of(A.d).xp
    return xp.eye(A.shape[0], dtype=A.dtype) * A.d[None, :]


@_to_dense.register
def _(A: Identity):
    return np.eye(A.n, dtype=A.dtype)


@_to_dense.register
def _(A: Zero):
    return np.zeros(A.shape, dtype=A.dtype)


@_sample.register
def _(A: Diagonal, rows, cols):
    be = backend_of(A.d)
    rows, cols = be.index(rows), be.index(cols)
    return be.xp.where(rows == cols, A.d[rows], be.xp.zeros((), dtype=A.dtype))


@_sample.register
def _(A: Identity, rows, cols):
    xp = backend_of(rows).xp
    return xp.asarray(rows == cols).astype(A.dtype)


@_sample.register
def _(A: Zero, rows, cols):
    xp = backend_of(rows).xp
    return xp.zeros(rows.shape, dtype=A.dtype)
