"""Sum, Product and Scaled: lazy combinations. Build them with ``+``, ``@`` and ``*``, which
simplify first (see ``_algebra``); the constructors only check shapes."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._backend import namespace
from ._base import LinearOperator, _set, operator, snapshot
from ._errors import ShapeError
from ._queries import _inner, _sample, _to_dense, conjugate


def conj_scalar(c):
    if isinstance(c, (int, float)):
        return c
    if isinstance(c, (complex, np.number)):
        return np.conj(c)
    return namespace(c).conj(c)


def scalar_dtype(c):
    if isinstance(c, (int, float, complex)):
        return c  # python scalars are weak: they do not promote float32 to float64
    return c.dtype


@operator
class Sum(LinearOperator):
    """A₁ + … + Aₚ. Apply: the sum of the terms' costs. Adjoint: Σ Aᵢᴴ."""

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
        out = self.terms[0].matmat(X)
        for t in self.terms[1:]:
            out = out + t.matmat(X)
        return out

    def adjoint(self) -> "Sum":
        return Sum(tuple(t.adjoint() for t in self.terms))


@operator
class Product(LinearOperator):
    """A₁ A₂ … Aₚ. Apply: right to left, the sum of the factors' costs. Adjoint: Aₚᴴ … A₁ᴴ."""

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
        for f in reversed(self.factors):
            X = f.matmat(X)
        return X

    def adjoint(self) -> "Product":
        return Product(tuple(f.adjoint() for f in reversed(self.factors)))


@operator
class Scaled(LinearOperator):
    """c·A for a scalar c (python number or 0-d array, also a jax tracer). Adjoint: conj(c)·Aᴴ;
    transpose: c·Aᵀ (``.T`` never conjugates the scalar)."""

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
        return self.c * self.A.matmat(X)

    def adjoint(self) -> "Scaled":
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
    return conj_scalar(G.c) * _inner(G.A, K)
