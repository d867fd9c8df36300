"""LinearProblem: A and b, shape-checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import linops as lo
from linops._errors import ShapeError


@dataclass(frozen=True, eq=False)
class LinearProblem:
    """A u = b with A square (anything ``lo.aslinop`` accepts) and b of shape (n,) or (n, k).

    ``hermitian`` and ``posdef`` are hints (None: unknown) that ``Auto`` uses to pick Cholesky
    or CG; they are not verified except where an algorithm needs them.

    >>> import numpy as np
    >>> LinearProblem(np.eye(2), np.ones(2)).A.shape
    (2, 2)
    """

    A: Any
    b: Any = None
    hermitian: bool | None = None
    posdef: bool | None = None

    def __post_init__(self):
        A = lo.aslinop(self.A)
        object.__setattr__(self, "A", A)
        m, n = A.shape
        if m != n:
            raise ShapeError(f"LinearProblem needs a square A, got A.shape={A.shape}")
        if self.posdef and self.hermitian is None:
            object.__setattr__(self, "hermitian", True)
        if self.b is not None:
            check_rhs(A, self.b, "b")


def check_rhs(A, b, name: str) -> None:
    shape = tuple(getattr(b, "shape", ()))
    if not hasattr(b, "ndim") or b.ndim not in (1, 2) or shape[0] != A.shape[0]:
        raise ShapeError(f"{name} must have shape (n,) or (n, k) with n={A.shape[0]} for "
                         f"A.shape={A.shape}, got {name}.shape={shape}")
