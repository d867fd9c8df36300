"""MatrixFree: an operator given by callables (or a scipy LinearOperator, or a PyLops operator).

The escape hatch for maps that have no matrix worth storing (a stencil, an FFT, a PDE solve):
two functions, X ↦ A X and X ↦ Aᴴ X, and the algebra, queries and solvers work through them.
It is also what ``.T`` and ``.conj()`` fall back to for operators that linops does not know.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import numpy as np
from scipy.sparse.linalg import LinearOperator as Base

from .._backend import namespace
from .._base import LinearOperator, check_shape
from .._generics import conjugate
from .._pytree import _set, operator


@operator
class MatrixFree(LinearOperator):
    """The operator A given by two callables: ``fmatmat`` (X ↦ A X) and ``frmatmat`` (X ↦ Aᴴ X).

    Memory: nothing but the callables. Apply and adjoint apply: the callables' cost. Adjoint:
    a MatrixFree with the two callables swapped, so ``.H``, ``.T`` and ``.conj()`` need no new
    code from you. Queries that have no structure to use go through products: ``to_dense``
    applies A to the identity (n products), ``sample`` to the unit vectors of the distinct
    columns asked for.

    Parameters
    ----------
    shape : tuple of two ints
        (m, n).
    dtype : dtype
        The dtype of the results for inputs of that dtype.
    fmatmat : callable
        X (n, k) ↦ A X (m, k). It receives 2-D arrays of the caller's backend.
    frmatmat : callable, optional
        X (m, k) ↦ Aᴴ X (n, k). Without it the operator can be applied but ``.H``, ``.T``,
        adjoint solves and ``dottest`` raise NotImplementedError.
    conjugated : bool, default False
        The operator is conj(A), applied as X ↦ conj(A conj(X)); what ``.conj()`` sets.

    Raises
    ------
    TypeError
        If ``fmatmat`` is not callable.
    ShapeError
        If ``shape`` is not two non-negative integers.

    Notes
    -----
    The callables are outside the snapshot rule: if they read state that you change, the
    operator changes with it, and a preconditioner or factorization built from it keeps what
    it saw at setup. The backend of a solve with a MatrixFree operator is that of the
    right-hand side.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> a = np.array([[1.0, 2.0], [0.0, 1j]])
    >>> M = MatrixFree((2, 2), np.complex128, lambda X: a @ X, lambda X: a.conj().T @ X)
    >>> M @ np.ones(2), M.H @ np.ones(2)
    (array([3.+0.j, 0.+1.j]), array([1.+0.j, 2.-1.j]))
    >>> lo.testing.dottest(M)
    True
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
        """Wrap a ``scipy.sparse.linalg.LinearOperator`` through its matmat and rmatmat.

        Operators that implement only ``_matvec`` (scipy's default ``_matmat`` loops over
        columns, and many user operators — PyLops' included — expect 1-D input) are applied a
        column at a time through ``matvec``; those with their own ``_matmat`` get whole blocks.
        An operator defined by matvec alone has no adjoint: ``.H`` then raises
        NotImplementedError naming what to add. ``aslinop`` calls this for scipy operators.

        Examples
        --------
        >>> import numpy as np, scipy.sparse.linalg as sla, linops as lo
        >>> F = MatrixFree.from_scipy(sla.aslinearoperator(np.diag([2.0, 3.0])))
        >>> F @ np.ones(2), lo.diagonal(F)
        (array([2., 3.]), array([2., 3.]))
        """
        def pick(block: str, vec: str):
            own = getattr(type(L), f"_{block}") is not getattr(Base, f"_{block}")
            custom = getattr(L, f"_CustomLinearOperator__{block}_impl", None)
            if own and (custom is not None or not hasattr(L, f"_CustomLinearOperator__{block}_impl")):
                return getattr(L, block)
            return lambda X: _columnwise(getattr(L, vec), X)

        has_adjoint = (getattr(L, "_CustomLinearOperator__rmatvec_impl", None) is not None
                       or getattr(L, "_CustomLinearOperator__rmatmat_impl", None) is not None
                       or not hasattr(L, "_CustomLinearOperator__rmatvec_impl"))
        return cls(L.shape, L.dtype, pick("matmat", "matvec"),
                   pick("rmatmat", "rmatvec") if has_adjoint else None)

    @classmethod
    def from_duck(cls, op) -> "MatrixFree":
        """Wrap any object with ``shape``, ``dtype`` and ``matvec``/``rmatvec`` (or
        ``matmat``/``rmatmat``) methods, such as a PyLops operator.

        ``matmat`` is preferred; given only ``matvec``, a product with k columns calls it k
        times. Without rmatvec/rmatmat the adjoint is unknown (``.H`` raises, naming what to
        add). ``aslinop`` calls this for such objects.

        Examples
        --------
        >>> import numpy as np
        >>> class Twice:                         # any object with shape, dtype, matvec
        ...     shape, dtype = (2, 2), np.float64
        ...     def matvec(self, x):
        ...         return 2 * x
        >>> MatrixFree.from_duck(Twice()) @ np.ones((2, 3))
        array([[2., 2., 2.],
               [2., 2., 2.]])
        """
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
        """conj(A) for any operator, through A's own products: X ↦ conj(A conj(X)).

        The fallback of ``.conj()`` and ``.T`` for operators that have no conjugation rule of
        their own (subclasses of LinearOperator written outside linops). Cost: one product
        with A plus two conjugations of complex arrays."""
        return cls(A.shape, A.dtype, A.matmat, lambda X: A.adjoint().matmat(X), conjugated=True)

    def matmat(self, X):
        """``fmatmat(X)``, or conj(fmatmat(conj(X))) when ``conjugated``."""
        if not self.conjugated:
            return self.fmatmat(X)
        xp = namespace(X)
        return xp.conj(self.fmatmat(xp.conj(X)))

    def adjoint(self) -> "MatrixFree":
        """The same callables, swapped (conj(A)ᴴ keeps ``conjugated``).

        Raises
        ------
        NotImplementedError
            If the operator was built without ``frmatmat``.
        """
        if self.frmatmat is None:
            raise NotImplementedError(
                "this MatrixFree operator was built without frmatmat, so its adjoint is unknown; "
                "pass frmatmat=... (X ↦ Aᴴ X), or rmatvec=... to the scipy LinearOperator")
        return MatrixFree((self.shape[1], self.shape[0]), self.dtype, self.frmatmat,
                          self.fmatmat, self.conjugated)


def _columnwise(f, X):
    """Apply a matvec to every column of X."""
    xp = namespace(X)
    if X.ndim == 1:
        return f(X)
    return xp.stack([xp.asarray(f(X[:, j])) for j in range(X.shape[1])], axis=1)


@conjugate.register
def _(A: MatrixFree) -> MatrixFree:
    return MatrixFree(A.shape, A.dtype, A.fmatmat, A.frmatmat, not A.conjugated)


@conjugate.register
def _(A: LinearOperator) -> MatrixFree:
    # the rule for every operator without its own (subclasses written outside linops)
    return MatrixFree.conjugate_of(A)
