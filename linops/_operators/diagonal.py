"""Diagonal, Identity and Zero: the operators whose structure is their whole story.

``Identity`` and ``Zero`` hold no arrays, only a shape and a dtype, so they cost nothing to keep;
the algebra uses them to simplify (an Identity drops out of a product, a Zero out of a sum, and
a Zero absorbs a product). Their query rules are here too.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._backend import backend_of, conj, snapshot
from .._base import LinearOperator, check_shape
from .._errors import ShapeError
from .._generics import _sample, _to_dense, abs_apply, conjugate, diagonal_of, structure, with_dtype
from .._pytree import _set, operator


@operator
class Diagonal(LinearOperator):
    """The n×n diagonal matrix diag(d): (A X)ᵢⱼ = dᵢ Xᵢⱼ.

    Memory O(n). Apply: O(n·k), a broadcast product. Adjoint: ``Diagonal(conj(d))``; transpose:
    itself. ``sample``, ``diagonal`` and ``trace`` read ``d`` directly, O(len).

    Parameters
    ----------
    d : array of shape (n,)
        numpy, cupy or jax; snapshotted at construction (the mutation rule of
        ``linops._backend``).

    Raises
    ------
    ShapeError
        If ``d`` is not a 1-D array.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> D = Diagonal(np.array([1.0, 2.0]))
    >>> D @ np.array([3.0, 3.0])
    array([3., 6.])
    >>> lo.sample(D, [0, 1], [1, 1])                    # off-diagonal entries are zero
    array([0., 2.])
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
        """d[:, None] * X: O(n·k)."""
        return self.d[:, None] * X

    def adjoint(self) -> "Diagonal":
        """diag(conj(d)); the same array, not copied, when d is real."""
        return Diagonal(conj(self.d))


@operator
class Identity(LinearOperator):
    """The n×n identity I.

    Holds no arrays (``payload_nbytes`` is 0). Apply: a copy of X, O(n·k), so that the result
    never aliases the caller's array (jax arrays, immutable, are returned as they are).
    Adjoint and transpose: itself. In products it disappears: ``I @ B`` is ``B``.

    Parameters
    ----------
    n : int
    dtype : dtype, optional
        Default float64. It takes part in dtype promotion of sums (``I + A``).

    Raises
    ------
    ShapeError
        If n is negative or not convertible to int.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> D = lo.Diagonal(np.array([1.0, 2.0]))
    >>> Identity(2) @ D is D
    True
    >>> lo.to_dense(D + 3 * Identity(2))
    array([[4., 0.],
           [0., 5.]])
    """

    n: int
    dtype: Any = np.float64
    shape: tuple[int, int] = None
    _leaves: ClassVar = ()

    def __post_init__(self):
        n = check_shape((self.n, self.n))[0]
        _set(self, n=n, shape=(n, n), dtype=np.dtype(self.dtype))

    def matmat(self, X):
        """A copy of X (numpy, cupy); X itself for jax, whose arrays cannot change."""
        be = backend_of(X)
        return be.xp.array(X, copy=True) if be.mutable else X  # never alias the caller's array

    def adjoint(self) -> "Identity":
        """The identity is self-adjoint: returns ``self``."""
        return self


@operator
class Zero(LinearOperator):
    """The m×n zero map.

    Holds no arrays. Apply: new zeros of shape (m, k) in X's backend, dtype the promotion of
    the operator's and X's, O(m·k). Adjoint: ``Zero((n, m))``. ``0 * A`` simplifies to a Zero,
    a Zero drops out of sums, and a product with a Zero factor is a Zero.

    Parameters
    ----------
    shape : tuple of two ints
    dtype : dtype, optional
        Default float64.

    Raises
    ------
    ShapeError
        If shape is not two non-negative integers.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> D = lo.Diagonal(np.array([1.0, 2.0]))
    >>> Zero((2, 2)) + D is D, 0 * D
    (True, Zero(shape=(2, 2), dtype=float64))
    >>> Zero((2, 3)) @ np.ones(3)
    array([0., 0.])
    """

    shape: tuple[int, int]
    dtype: Any = np.float64
    _leaves: ClassVar = ()

    def __post_init__(self):
        _set(self, shape=check_shape(self.shape), dtype=np.dtype(self.dtype))

    def matmat(self, X):
        """Zeros of shape (m, k) in X's backend."""
        xp = backend_of(X).xp
        return xp.zeros((self.shape[0],) + tuple(X.shape[1:]), dtype=np.result_type(self.dtype, X.dtype))

    def adjoint(self) -> "Zero":
        """``Zero((n, m))`` of the same dtype."""
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
    # no arrays to take a backend from: Identity and Zero densify to numpy
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


@structure.register(Diagonal)
@structure.register(Identity)
def _(A):
    return "diagonal"


@diagonal_of.register
def _(A: Diagonal):
    return A.d


@diagonal_of.register
def _(A: Identity):
    return None


@abs_apply.register
def _(A: Diagonal, X, adjoint: bool = False):
    xp = backend_of(A.d).xp
    d = xp.abs(A.d)
    return d * xp.abs(X) if X.ndim == 1 else d[:, None] * xp.abs(X)


@with_dtype.register
def _(A: Diagonal, dtype):
    return Diagonal(A.d.astype(dtype))


@with_dtype.register
def _(A: Identity, dtype):
    return Identity(A.n, dtype=dtype)
