"""Sum, Product and Scaled: lazy combinations of operators, and their query rules.

Build them with ``+``, ``@`` and ``*``, which simplify first (see ``_algebra``): a sum or product
that can be one simpler operator never becomes one of these. The constructors only check shapes,
so calling them directly builds the combination as written, unsimplified. Queries distribute
over them (``sample``, ``to_dense`` and ``inner`` of a Sum are sums of the terms'; of a Scaled,
the scalar times the inner one's).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._backend import namespace, snapshot
from .._base import LinearOperator
from .._errors import ShapeError
from .._generics import (_inner, _inner_split_k, _sample, _to_dense, conjugate, low_rank_split,
                        scale_split, structure)
from .._pytree import _set, operator


def conj_scalar(c):
    """conj(c) for a python number, numpy scalar or 0-d array (a jax tracer too); python real
    numbers are returned unchanged so that they stay weakly typed."""
    if isinstance(c, (int, float)):
        return c
    if isinstance(c, (complex, np.number)):
        return np.conj(c)
    return namespace(c).conj(c)


def scalar_dtype(c):
    """What ``np.result_type`` should see for a scalar: python numbers themselves (weak),
    arrays their dtype; so ``2.0 * A`` keeps a float32 A float32, ``np.float64(2) * A`` not."""
    if isinstance(c, (int, float, complex)):
        return c  # python scalars are weak: they do not promote float32 to float64
    return c.dtype


@operator
class Sum(LinearOperator):
    """The sum A₁ + … + Aₚ of operators of one shape, kept as its terms.

    Apply: the sum of the terms' costs. Adjoint: Σ Aᵢᴴ, a Sum. ``A + B`` builds one after
    simplifying: nested sums flatten, Zero terms drop, low-rank terms merge into one LowRank,
    Sparse terms on one pattern add their values; a single remaining term is returned as is.

    Parameters
    ----------
    terms : sequence of LinearOperator
        At least one, all of one shape; dtype is their promotion.

    Raises
    ------
    ValueError
        If ``terms`` is empty.
    ShapeError
        If two terms differ in shape.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> A = lo.Dense(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> B = A + lo.Diagonal(np.array([10.0, 20.0]))
    >>> B, len(B.terms), B @ np.ones(2)
    (Sum(shape=(2, 2), dtype=float64), 2, array([13., 27.]))
    """

    terms: tuple
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("terms",)

    def __post_init__(self):
        terms = tuple(self.terms)
        if not terms:
            raise ValueError("Sum needs at least one term")
        shape = terms[0].shape
        for t in terms[1:]:
            if t.shape != shape:
                raise ShapeError(f"A + B with A.shape={shape} but B.shape={t.shape}")
        _set(self, terms=terms, shape=shape, dtype=np.result_type(*[t.dtype for t in terms]))

    def matmat(self, X):
        """Σ Aᵢ X, term by term."""
        out = self.terms[0].matmat(X)
        for t in self.terms[1:]:
            out = out + t.matmat(X)
        return out

    def adjoint(self) -> "Sum":
        """Σ Aᵢᴴ (built directly: the terms were simplified already)."""
        return Sum(tuple(t.adjoint() for t in self.terms))


@operator
class Product(LinearOperator):
    """The product A₁ A₂ … Aₚ, kept as its factors and applied right to left.

    Apply: A₁ (A₂ (… (Aₚ X))), the sum of the factors' costs; nothing of size m×n is formed.
    Adjoint: Aₚᴴ … A₁ᴴ, a Product. ``A @ B`` builds one after simplifying: identities drop,
    a Zero factor gives a Zero, scalars move out front (a Scaled of the product), nested
    products flatten, and a product with a low-rank factor becomes a LowRank of that rank.

    Parameters
    ----------
    factors : sequence of LinearOperator
        At least two, with ``factors[i].shape[1] == factors[i + 1].shape[0]``.

    Raises
    ------
    ValueError
        If fewer than two factors are given.
    ShapeError
        If two neighbours do not chain, naming both shapes.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> A = lo.Dense(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> P = A @ lo.Diagonal(np.array([1.0, -1.0]))
    >>> P, P @ np.ones(2)
    (Product(shape=(2, 2), dtype=float64), array([-1., -1.]))
    >>> P.H.factors
    (Diagonal(shape=(2, 2), dtype=float64), Dense(shape=(2, 2), dtype=float64))
    """

    factors: tuple
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("factors",)

    def __post_init__(self):
        fs = tuple(self.factors)
        if len(fs) < 2:
            raise ValueError("Product needs at least two factors")
        for a, b in zip(fs[:-1], fs[1:]):
            if a.shape[1] != b.shape[0]:
                raise ShapeError(f"A @ B with A.shape={a.shape} but B.shape={b.shape}")
        _set(self, factors=fs, shape=(fs[0].shape[0], fs[-1].shape[1]),
             dtype=np.result_type(*[f.dtype for f in fs]))

    def matmat(self, X):
        """Aₚ first, then each factor to its left: one product per factor."""
        for f in reversed(self.factors):
            X = f.matmat(X)
        return X

    def adjoint(self) -> "Product":
        """(A₁ … Aₚ)ᴴ = Aₚᴴ … A₁ᴴ."""
        return Product(tuple(f.adjoint() for f in reversed(self.factors)))


@operator
class Scaled(LinearOperator):
    """c·A for a scalar c and an operator A.

    Apply: A's cost plus one scaling of the result, O(m·k). Adjoint: conj(c)·Aᴴ; transpose:
    c·Aᵀ (``.T`` never conjugates the scalar). ``c * A`` builds one after simplifying:
    ``1 * A`` is A, ``0 * A`` a Zero, c·(d·A) is (c d)·A, and a low-rank A absorbs c into its
    first factor instead.

    Parameters
    ----------
    c : scalar
        A python number (weakly typed: ``2.0 * A`` keeps a float32 A float32), a numpy scalar
        or a 0-d array; a jax tracer under ``jax.grad`` too, so c is a pytree leaf.
    A : LinearOperator

    Raises
    ------
    TypeError
        If A is not an operator.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> A = lo.Dense(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> B = 2 * (3 * A)                                 # scalings merge
    >>> B, B.c, B @ np.ones(2)
    (Scaled(shape=(2, 2), dtype=float64), 6, array([18., 42.]))
    >>> complex((2j * A).H.c), complex((2j * A).T.c)  # .H conjugates c, .T does not
    (-2j, 2j)
    """

    c: Any
    A: LinearOperator
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("c", "A")

    def __post_init__(self):
        if not isinstance(self.A, LinearOperator):
            raise TypeError(f"Scaled needs an operator, got {type(self.A).__name__}")
        _set(self, c=snapshot(self.c))
        _set(self, shape=self.A.shape, dtype=np.result_type(self.A.dtype, scalar_dtype(self.c)))

    def matmat(self, X):
        """c (A X)."""
        return self.c * self.A.matmat(X)

    def adjoint(self) -> "Scaled":
        """conj(c) Aᴴ."""
        return Scaled(conj_scalar(self.c), self.A.adjoint())


@conjugate.register
def _(A: Sum):
    return Sum(tuple(conjugate(t) for t in A.terms))


@conjugate.register
def _(A: Product):
    return Product(tuple(conjugate(f) for f in A.factors))


@conjugate.register
def _(A: Scaled):
    return Scaled(conj_scalar(A.c), conjugate(A.A))


@_to_dense.register
def _(A: Sum):
    out = _to_dense(A.terms[0])
    for t in A.terms[1:]:
        out = out + _to_dense(t)
    return out


@_to_dense.register
def _(A: Scaled):
    return A.c * _to_dense(A.A)


@_sample.register
def _(A: Sum, rows, cols):
    out = _sample(A.terms[0], rows, cols)
    for t in A.terms[1:]:
        out = out + _sample(t, rows, cols)
    return out


@_sample.register
def _(A: Scaled, rows, cols):
    return A.c * _sample(A.A, rows, cols)


@_inner.register
def _(G: Sum, K: LinearOperator):
    out = _inner(G.terms[0], K)
    for t in G.terms[1:]:
        out = out + _inner(t, K)
    return out


@_inner.register
def _(G: Scaled, K: LinearOperator):
    # ⟨c G, K⟩ = conj(c) ⟨G, K⟩: the inner product is conjugate-linear in its first argument
    return conj_scalar(G.c) * _inner(G.A, K)


# a Sum or Scaled second operand is split before G's rules run (see _generics._inner_split_k)
@_inner_split_k.register
def _(K: Sum, G: LinearOperator):
    out = _inner_split_k(K.terms[0], G)
    for t in K.terms[1:]:
        out = out + _inner_split_k(t, G)
    return out


@_inner_split_k.register
def _(K: Scaled, G: LinearOperator):
    # ⟨G, c K⟩ = c ⟨G, K⟩: linear in the second argument
    return K.c * _inner_split_k(K.A, G)


@low_rank_split.register
def _(A: Sum):
    """(B, U, V) when exactly one term is low rank (two would need their sum's factors)."""
    # import cycle: lowrank's operators are composites' terms
    from .lowrank import LowRank, RankOne

    low = [t for t in A.terms if isinstance(t, (LowRank, RankOne))]
    if len(low) != 1:
        return None
    rest = [t for t in A.terms if t is not low[0]]
    B = rest[0] if len(rest) == 1 else Sum(tuple(rest))
    U, V = low[0].factors()
    return B, U, V


@structure.register
def _(A: Sum):
    return "lowrank" if low_rank_split(A) is not None else "matrixfree"


@scale_split.register
def _(A: Scaled):
    return A.c, A.A
