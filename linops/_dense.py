"""Dense: an explicit m×n array (numpy, cupy or jax)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._base import LinearOperator, _set, conj, operator, snapshot
from ._errors import ShapeError
from ._queries import _sample, _to_dense, conjugate


@operator
class Dense(LinearOperator):
    """A ↦ the array ``a`` (m, n). Apply: O(m·n·k). Adjoint: ``Dense(conj(a).T)``.

    ``a`` is snapshotted (see the mutation rule in ``linops._backend``): later edits of the array
    you passed do not change the operator.

    >>> import numpy as np
    >>> (Dense(np.eye(2)) @ np.ones(2)).tolist()
    [1.0, 1.0]
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
        return self.a @ X

    def adjoint(self) -> "Dense":
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
