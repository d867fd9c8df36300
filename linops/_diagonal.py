"""Diagonal, Identity and Zero: the operators whose structure is their whole story."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._backend import namespace
from ._base import LinearOperator, _set, check_shape, operator
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
        if not hasattr(self.d, "ndim") or self.d.ndim != 1:
            raise ShapeError(f"Diagonal needs a 1-D array, got shape={getattr(self.d, 'shape', None)}")
        n = int(self.d.shape[0])
        _set(self, shape=(n, n), dtype=np.dtype(self.d.dtype))

    def matmat(self, X):
        return self.d[:, None] * X

    def adjoint(self) -> "Diagonal":
        return Diagonal(namespace(self.d).conj(self.d))


@operator
class Identity(LinearOperator):
    """I (n×n). Apply: a copy-free return of X. Adjoint: itself. Holds no arrays."""

    n: int
    dtype: Any = np.float64
    shape: tuple[int, int] = None
    _leaves: ClassVar = ()

    def __post_init__(self):
        n = check_shape((self.n, self.n))[0]
        _set(self, n=n, shape=(n, n), dtype=np.dtype(self.dtype))

    def matmat(self, X):
        return X

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
        xp = namespace(X)
        return xp.zeros((self.shape[0],) + tuple(X.shape[1:]), dtype=np.result_type(self.dtype, X.dtype))

    def adjoint(self) -> "Zero":
        return Zero((self.shape[1], self.shape[0]), self.dtype)


@conjugate.register
def _(A: Diagonal):
    return Diagonal(namespace(A.d).conj(A.d))


@conjugate.register(Identity)
@conjugate.register(Zero)
def _(A):
    return A


@_to_dense.register
def _(A: Diagonal):
    xp = namespace(A.d)
    n = A.shape[0]
    return xp.eye(n, dtype=A.dtype) * A.d[None, :]


@_to_dense.register
def _(A: Identity):
    return np.eye(A.n, dtype=A.dtype)


@_to_dense.register
def _(A: Zero):
    return np.zeros(A.shape, dtype=A.dtype)


@_sample.register
def _(A: Diagonal, rows, cols):
    xp = namespace(A.d)
    from ._sparse import _ix

    vals = A.d[_ix(rows, xp)] if namespace(rows) is np else A.d[rows]
    same = rows == cols
    return xp.where(_ix(same, xp) if namespace(same) is np else same, vals, xp.zeros((), dtype=A.dtype))


@_sample.register
def _(A: Identity, rows, cols):
    xp = namespace(rows)
    return xp.asarray(rows == cols).astype(A.dtype)


@_sample.register
def _(A: Zero, rows, cols):
    xp = namespace(rows)
    return xp.zeros(rows.shape, dtype=A.dtype)
