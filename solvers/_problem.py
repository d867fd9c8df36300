"""LinearProblem: A and b, checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from linops.internals import ShapeError, is_array, snapshot


@dataclass(frozen=True, eq=False)
class LinearProblem:
    """A u = b with A square (anything ``lo.aslinop`` accepts) and b of shape (n,) or (n, k).

    Parameters
    ----------
    A : operator or array-like
        Wrapped with ``lo.aslinop`` (arrays are snapshotted: later edits of yours do not reach
        the problem). Integer and boolean matrices are solved in float64.
    b : array of shape (n,) or (n, k), optional
        The right-hand side (a list is converted with ``np.asarray``; snapshotted too).
    hermitian, posdef : bool or None
        Hints (None: unknown) that ``Auto`` uses to pick Cholesky or CG. They are verified where
        they choose an algorithm and never switch off a check (see ``sv.Auto``, ``sv.Cholesky``).

    Raises
    ------
    ShapeError
        A not square, or b not of shape (n,) / (n, k); the message names both shapes.

    >>> import numpy as np
    >>> LinearProblem(np.eye(2), [1.0, 2.0]).b.tolist()
    [1.0, 2.0]
    """

    A: Any
    b: Any = None
    hermitian: bool | None = None
    posdef: bool | None = None

    def __post_init__(self):
        A = _as_inexact(lo.aslinop(self.A))
        object.__setattr__(self, "A", A)
        m, n = A.shape
        if m != n:
            raise ShapeError(f"LinearProblem needs a square A, got A.shape={A.shape}")
        for name in ("hermitian", "posdef"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{name} must be True, False or None, got {name}={v!r}")
        if self.posdef and self.hermitian is None:
            object.__setattr__(self, "hermitian", True)
        if self.b is not None:
            object.__setattr__(self, "b", snapshot(as_rhs(A, self.b, "b")))


def _as_inexact(A: lo.LinearOperator) -> lo.LinearOperator:
    """Integer/boolean Dense, Sparse, Diagonal and Identity operators in float64 (others must be
    inexact)."""
    if np.dtype(A.dtype).kind in "fc":
        return A
    if isinstance(A, lo.Dense):
        return lo.Dense(A.a.astype(np.float64))
    if isinstance(A, lo.Sparse):
        return lo.Sparse(A.values.astype(np.float64), A.pattern)
    if isinstance(A, lo.Diagonal):
        return lo.Diagonal(A.d.astype(np.float64))
    if isinstance(A, lo.Identity):
        return lo.Identity(A.n, dtype=np.float64)
    raise TypeError(f"A has dtype {A.dtype}; linear solves need a floating or complex operator")


def as_rhs(A, b, name: str):
    """b as an array of shape (n,) or (n, k) with n = A's (local) row count, else ShapeError."""
    if isinstance(b, (list, tuple)):
        b = np.asarray(b)
    if not is_array(b):
        raise ShapeError(f"{name} must be an array of shape (n,) or (n, k) for A.shape="
                         f"{A.shape}, got {type(b).__name__}")
    n = getattr(A, "local_shape", A.shape)[0]
    shape = tuple(b.shape)
    if b.ndim not in (1, 2) or shape[0] != n:
        raise ShapeError(f"{name} must have shape (n,) or (n, k) with n={n} for A.shape="
                         f"{A.shape}, got {name}.shape={shape}")
    return b
