"""The abstract operator: :class:`LinearOperator`, and what every operator derives from it.

:class:`LinearOperator` asks a subclass for ``matmat`` and ``adjoint`` and derives the rest
(``matvec``, ``apply``, ``@``, ``+``, ``-``, ``*``, ``/``, ``.H``, ``.T``, ``.conj()``). The
concrete operators are frozen dataclasses and jax pytrees (``linops._pytree``); their arithmetic
is simplified at construction (``linops._algebra``); their queries are single-dispatch generics
(``linops._generics``), with the rule for the memory a generic operator holds registered here.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

from ._backend import backend_of, is_array
from ._errors import ShapeError
from ._generics import conjugate, payload_nbytes
from ._pytree import array_leaves


class LinearOperator(abc.ABC):
    """An m×n linear map, applied lazily: the base class of every linops operator.

    A subclass supplies ``shape``, ``dtype`` and exactly two methods, ``matmat(X)`` (A X for a
    2-D array X) and ``adjoint()`` (Aᴴ as an operator). Everything else is derived:

    - ``A @ x`` and ``A @ X`` apply A to an array of shape (n,) or (n, k), shape-checked;
      ``x @ A`` and ``X @ A`` apply it from the left, as (Aᵀ Xᵀ)ᵀ;
    - ``A @ B``, ``A + B``, ``A - B``, ``c * A``, ``A / c`` and ``-A`` build new operators
      (``Product``, ``Sum``, ``Scaled``), simplified at construction; an array operand of
      ``+`` or ``-`` is wrapped with ``aslinop``;
    - ``A.H`` is the conjugate transpose, ``A.T`` the plain transpose (it never conjugates),
      ``A.conj()`` the entrywise conjugate.

    The operators of linops are frozen dataclasses: they never change after construction, and
    applying one changes nothing. An application costs what the subclass's ``matmat`` costs;
    each operator states its cost and its adjoint in its docstring.

    Attributes
    ----------
    shape : tuple of two ints
        (m, n): A maps vectors of length n to vectors of length m.
    dtype : numpy.dtype
        The result type of the operator's arrays and scalars.

    Raises
    ------
    ShapeError
        From ``@``, ``+`` and ``-`` when the shapes do not fit, naming both.

    See Also
    --------
    MatrixFree : an operator from two callables, without writing a class.

    Examples
    --------
    A new operator is a subclass with ``shape``, ``dtype``, ``matmat`` and ``adjoint``; it then
    combines, applies and answers queries like any other:

    >>> import numpy as np, linops as lo
    >>> class Flip(lo.LinearOperator):           # reverses the order of the entries
    ...     shape, dtype = (3, 3), np.dtype("float64")
    ...     def matmat(self, X):
    ...         return X[::-1]
    ...     def adjoint(self):
    ...         return self                      # a symmetric permutation is its own adjoint
    >>> F = Flip()
    >>> F @ np.array([1.0, 2.0, 3.0])
    array([3., 2., 1.])
    >>> lo.to_dense(2 * F + lo.Identity(3))
    array([[1., 0., 2.],
           [0., 3., 0.],
           [2., 0., 1.]])
    >>> lo.testing.dottest(F)
    True
    """

    _leaves: ClassVar[tuple[str, ...]] = ()
    __array_ufunc__ = None  # let numpy defer ``ndarray @ op`` to __rmatmul__
    __array_priority__ = 1000

    shape: tuple[int, int]
    dtype: np.dtype

    @abc.abstractmethod
    def matmat(self, X):
        """A X for a 2-D array X of shape (n, k), in X's backend.

        The primitive every product goes through. It does not check X (``apply`` and ``@``
        do); it costs what the operator's docstring states.

        Parameters
        ----------
        X : array of shape (n, k)
            numpy, cupy or jax; the operator's arrays must be of the same backend.

        Returns
        -------
        array of shape (m, k)
            dtype: the promotion of the operator's and X's dtypes.

        Examples
        --------
        >>> import numpy as np, linops as lo
        >>> lo.Diagonal(np.array([1.0, 2.0])).matmat(np.ones((2, 3)))
        array([[1., 1., 1.],
               [2., 2., 2.]])
        """

    @abc.abstractmethod
    def adjoint(self) -> "LinearOperator":
        """The conjugate transpose Aᴴ (n×m), as an operator; nothing is computed.

        Operators push it to their arrays (the adjoint of a ``Sum`` is the sum of the adjoints;
        of a ``Dense``, a ``Dense`` of ``conj(a).T``), so ``A.H.H`` is an operator of A's own
        kind, not a wrapper of a wrapper. Cost: O(1), except O(nnz) for ``Sparse`` (its values
        are permuted onto the transposed pattern) and O(size) for complex arrays (conjugated).

        Returns
        -------
        LinearOperator of shape (n, m)

        Raises
        ------
        NotImplementedError
            For a ``MatrixFree`` built without ``rmatmat``: its adjoint is unknown.

        Examples
        --------
        >>> import numpy as np, linops as lo
        >>> A = lo.Dense(np.array([[1.0, 2j], [0.0, 3.0]]))
        >>> lo.to_dense(A.adjoint())
        array([[1.-0.j, 0.-0.j],
               [0.-2.j, 3.-0.j]])
        """

    # ----- derived ---------------------------------------------------------------------------
    @property
    def H(self) -> "LinearOperator":
        """The conjugate transpose Aᴴ: ``A.adjoint()``, the operator with ⟨A x, y⟩ = ⟨x, Aᴴ y⟩.

        Examples
        --------
        >>> import numpy as np, linops as lo
        >>> A = lo.Dense(np.array([[1.0, 1j]]))
        >>> A.shape, A.H.shape, A.H @ np.array([1.0])
        ((1, 2), (2, 1), array([1.+0.j, 0.-1.j]))
        """
        return self.adjoint()

    @property
    def T(self) -> "LinearOperator":
        """The plain transpose Aᵀ = conj(Aᴴ): it never conjugates, not even a ``Scaled``'s c.

        Complex symmetric problems (Aᵀ = A, as in Helmholtz or tight-binding resolvents) need
        this, not ``.H``. For a real operator the two agree. Cost: that of ``adjoint``, plus a
        conjugation of complex arrays; an operator outside linops becomes a ``MatrixFree``
        that conjugates around its products.

        Examples
        --------
        >>> import numpy as np, linops as lo
        >>> A = lo.Dense(np.array([[1.0, 1j]]))
        >>> A.T @ np.array([1.0])
        array([1.+0.j, 0.+1.j])
        """
        return conjugate(self.adjoint())

    def conj(self) -> "LinearOperator":
        """The entrywise complex conjugate conj(A), same shape (not a transpose).

        Operators of linops conjugate their arrays (a real array is kept, not copied); any
        other operator becomes a ``MatrixFree`` applying X ↦ conj(A conj(X)).

        Examples
        --------
        >>> import numpy as np, linops as lo
        >>> lo.to_dense(lo.Diagonal(np.array([1j, 2.0])).conj())
        array([[0.-1.j, 0.+0.j],
               [0.+0.j, 2.+0.j]])
        """
        return conjugate(self)

    @property
    def ndim(self) -> int:
        """Always 2: code written for matrices (``A.ndim == 2`` checks) accepts operators."""
        return 2

    def matvec(self, x):
        """A x for a 1-D array x of shape (n,); returns shape (m,).

        Raises
        ------
        ShapeError
            If x is not a 1-D array of length n.

        Examples
        --------
        >>> import numpy as np, linops as lo
        >>> lo.Dense(np.array([[1.0, 2.0], [3.0, 4.0]])).matvec(np.ones(2))
        array([3., 7.])
        """
        _check_apply(self, x, 1)
        return self.matmat(x[:, None])[:, 0]

    def apply(self, X):
        """A X for X of shape (n,) or (n, k), shape-checked: what ``A @ X`` calls.

        Parameters
        ----------
        X : array of shape (n,) or (n, k)

        Returns
        -------
        array of shape (m,) or (m, k)

        Raises
        ------
        ShapeError
            If X is not a 1-D or 2-D array with n rows; the message names both shapes.

        Examples
        --------
        >>> import numpy as np, linops as lo
        >>> lo.Identity(2).apply(np.ones((2, 3))).shape
        (2, 3)
        """
        if getattr(X, "ndim", None) == 1:
            return self.matvec(X)
        _check_apply(self, X, 2)
        return self.matmat(X)

    def __array__(self, dtype=None, copy=None):
        # numpy (and scipy's LinearOperator.dot) would otherwise wrap an operator as a 0-d
        # object array and fail later with an unrelated message
        raise TypeError(f"a linops operator ({type(self).__name__}, shape={self.shape}) is not "
                        f"an array: use lo.to_dense(A) for its entries, or compose from the "
                        f"linops side (lo.aslinop(scipy_op) @ A)")

    def __setstate__(self, state: dict) -> None:
        """Unpickling and ``copy.deepcopy``: the restored arrays are frozen again, so a copy of
        an operator keeps the snapshot rule (its arrays cannot be edited in place)."""
        for k, v in state.items():
            if is_array(v):
                v = backend_of(v).freeze(v)
            object.__setattr__(self, k, v)

    def __matmul__(self, other):
        if is_array(other):
            return self.apply(other)
        algebra = _algebra()
        other = algebra.as_operand(other)
        return NotImplemented if other is None else algebra.compose(self, other)

    def __rmatmul__(self, other):
        # X @ A = (Aᵀ Xᵀ)ᵀ: the plain transpose, no conjugation, exactly as for a matrix
        if not is_array(other):
            return NotImplemented
        rows = _local(self)[0]
        if other.ndim == 1:
            if other.shape[0] != rows:
                raise ShapeError(f"x @ A with x.shape={tuple(other.shape)} but A.shape={self.shape}")
            return self.T.matvec(other)
        if other.ndim != 2 or other.shape[1] != rows:
            raise ShapeError(f"X @ A with X.shape={tuple(other.shape)} but A.shape={self.shape}")
        return self.T.matmat(other.T).T

    def __add__(self, other):
        algebra = _algebra()
        other = algebra.as_operand(other, self, "+")
        return NotImplemented if other is None else algebra.add(self, other)

    def __radd__(self, other):
        algebra = _algebra()
        other = algebra.as_operand(other, self, "+")
        return NotImplemented if other is None else algebra.add(other, self)

    def __sub__(self, other):
        other = _algebra().as_operand(other, self, "-")
        return NotImplemented if other is None else self + (-1) * other

    def __rsub__(self, other):
        other = _algebra().as_operand(other, self, "-")
        return NotImplemented if other is None else other + (-1) * self

    def __mul__(self, c):
        # scalars only: an entrywise product of two operators has no lazy form, so ``A * B``
        # raises TypeError rather than silently densifying
        if _is_scalar(c):
            return _algebra().scale(c, self)
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, c):
        if _is_scalar(c):
            return self * (1 / c)
        return NotImplemented

    def __neg__(self):
        return (-1) * self

    def __pos__(self):
        return self

    def __repr__(self) -> str:
        m, n = self.shape
        return f"{type(self).__name__}(shape=({m}, {n}), dtype={np.dtype(self.dtype).name})"


@payload_nbytes.register
def _(A: LinearOperator) -> int:
    return sum(int(a.size) * np.dtype(a.dtype).itemsize for a in array_leaves(A))


def _algebra():
    """``linops._algebra``: the simplification rules behind ``@``, ``+``, ``-`` and ``*``, and
    the coercion of their operands.

    The one upward import of the operator code (``tests/structure/test_layers.py`` allows it): the rules
    build Sum, Product, Scaled and LowRank, subclasses of this class whose modules import this
    one, so the base class asks for them when it first combines operators, not when it loads."""
    # closes the cycle: _algebra's operators subclass LinearOperator
    from . import _algebra

    return _algebra


def _is_scalar(c) -> bool:
    """Python and numpy numbers and 0-d arrays (jax tracers under ``jax.grad`` too)."""
    if isinstance(c, (int, float, complex, np.number)):
        return True
    return is_array(c) and getattr(c, "ndim", 1) == 0


def _local(A: LinearOperator) -> tuple[int, int]:
    """The shape of the part of A this process holds (distributed operators set
    ``local_shape``; arrays applied to them are each process's owned slice)."""
    return getattr(A, "local_shape", A.shape)


def _check_apply(A: LinearOperator, X, ndim: int) -> None:
    if not is_array(X) or X.ndim != ndim or X.shape[0] != _local(A)[1]:
        shape = tuple(getattr(X, "shape", ())) if is_array(X) else type(X).__name__
        raise ShapeError(f"A @ X with A.shape={A.shape} but X.shape={shape}")


def check_shape(shape) -> tuple[int, int]:
    """``shape`` as a tuple of two python ints ≥ 0; ShapeError naming it otherwise."""
    try:
        m, n = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"an operator shape must be two integers, got shape={shape!r}") from None
    if m < 0 or n < 0:
        raise ShapeError(f"negative dimension in shape={shape!r}")
    return (m, n)
