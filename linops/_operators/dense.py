"""Dense: an explicit m×n array (numpy, cupy or jax), and its rules for the queries.

The fallback of the library: ``aslinop`` wraps any 2-D array as a Dense, and ``to_dense`` of a
Dense is its own array (no copy). Every other operator is there to avoid holding one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._backend import conj, namespace, snapshot
from .._base import LinearOperator
from .._errors import ShapeError
from .._generics import (_sample, _to_dense, abs_apply, conjugate, dense_array, structure,
                        structure_key, with_dtype)
from .._pytree import _set, operator


@operator
class Dense(LinearOperator):
    """The operator of an explicit m×n array ``a``: A X = a @ X.

    Memory O(m·n). Apply: O(m·n·k) for X of shape (n, k), one matrix product in a's backend.
    Adjoint: ``Dense(conj(a).T)``, a view for real ``a`` and O(m·n) to conjugate a complex one.
    ``to_dense`` returns ``a`` itself, read-only; ``sample`` indexes it.

    Parameters
    ----------
    a : array of shape (m, n)
        numpy, cupy or jax; any dtype (integer arrays give an integer operator). A nested list
        is not accepted here: ``aslinop`` converts one.

    Raises
    ------
    ShapeError
        If ``a`` is not a 2-D array.

    Notes
    -----
    ``a`` is snapshotted (the mutation rule of ``linops._backend``): a writeable numpy array
    is copied once into a private read-only one, so later edits of the array you passed do not
    change the operator, nor anything solved with it. jax arrays (immutable) are kept as they
    are.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> A = Dense(a)
    >>> A @ np.ones(2), np.ones(2) @ A              # A x and xᵀ A
    (array([3., 7.]), array([4., 6.]))
    >>> a[0, 0] = 100.0                             # the operator holds its own copy
    >>> A @ np.ones(2)
    array([3., 7.])
    """

    a: Any
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("a",)

    def __post_init__(self):
        a = snapshot(self.a)
        if not hasattr(a, "ndim") or a.ndim != 2:
            raise ShapeError(f"Dense needs a 2-D array, got shape={getattr(a, 'shape', type(a))}")
        _set(self, a=a, shape=(int(a.shape[0]), int(a.shape[1])), dtype=np.dtype(a.dtype))

    def matmat(self, X):
        """a @ X for X of shape (n, k): O(m·n·k)."""
        return self.a @ X

    def adjoint(self) -> "Dense":
        """``Dense(conj(a).T)``: a transposed view for real ``a``, kept without a copy."""
        return Dense(conj(self.a).T)


@conjugate.register
def _(A: Dense):
    return Dense(conj(A.a))


@_to_dense.register
def _(A: Dense):
    return A.a


@_sample.register
def _(A: Dense, rows, cols):
    return A.a[rows, cols]


@structure.register
def _(A: Dense):
    return "dense"


@dense_array.register
def _(A: Dense):
    return A.a


@abs_apply.register
def _(A: Dense, X, adjoint: bool = False):
    xp = namespace(A.a)
    a = xp.abs(A.a)
    return (a.T if adjoint else a) @ xp.abs(X)


@with_dtype.register
def _(A: Dense, dtype):
    return Dense(A.a.astype(dtype))


@structure_key.register
def _(A: Dense):
    return ("dense", A.shape)
