"""Conversions in (``aslinop``) and out (``aslinearoperator``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backend import is_cupy, is_jax, to_numpy
from ._base import LinearOperator, is_array
from ._dense import Dense
from ._errors import BackendNotSupported, UnsupportedOperandError
from ._matrixfree import MatrixFree
from ._pattern import Pattern
from ._sparse import Sparse

ACCEPTED = ("a linops operator, a 2-D numpy/cupy/jax array (or nested list), any scipy.sparse "
            "matrix or array, a cupyx.scipy.sparse matrix, a jax.experimental.sparse BCOO/BCSR, a "
            "scipy.sparse.linalg.LinearOperator, a petsc4py Mat, or any object with shape, dtype "
            "and matvec/rmatvec (or matmat/rmatmat) methods, such as a PyLops operator")


def aslinop(x: Any) -> LinearOperator:
    """Wrap ``x`` as a linops operator.

    Arrays and sparse data are snapshotted (the mutation rule in ``linops._backend``): editing
    ``x`` afterwards does not change the operator. Duck-typed operators (PyLops and others with
    ``matvec``/``rmatvec`` or ``matmat``/``rmatmat``) become :class:`MatrixFree`; their callables
    are used as they are. Anything else raises :class:`UnsupportedOperandError`.

    >>> import numpy as np, scipy.sparse as sp
    >>> type(aslinop(np.eye(2))).__name__, type(aslinop(sp.eye(2))).__name__
    ('Dense', 'Sparse')
    """
    if isinstance(x, LinearOperator):
        return x
    import scipy.sparse as sp

    if sp.issparse(x):
        return Sparse.from_scipy(x)
    mod = type(x).__module__
    if mod.startswith("petsc4py"):
        from ._petsc import aslinop_petsc

        return aslinop_petsc(x)
    if mod.startswith("cupyx.scipy.sparse"):
        return _from_cupyx(x)
    if mod.startswith("jax.experimental.sparse"):
        return _from_jax_sparse(x)
    from scipy.sparse.linalg import LinearOperator as ScipyLinearOperator

    if isinstance(x, ScipyLinearOperator):
        return MatrixFree.from_scipy(x)
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if is_array(x):
        if x.ndim != 2:
            raise UnsupportedOperandError(f"aslinop needs a 2-D array, got shape={tuple(x.shape)}")
        if isinstance(x, np.ndarray) or is_cupy(x) or is_jax(x):
            return Dense(np.asarray(x) if isinstance(x, np.matrix) else x)
        return Dense(np.asarray(x))
    if _is_duck_operator(x):
        return MatrixFree.from_duck(x)
    raise UnsupportedOperandError(f"cannot wrap {type(x).__module__}.{type(x).__name__}; "
                                  f"accepted: {ACCEPTED}")


def _is_duck_operator(x) -> bool:
    has = lambda *names: all(callable(getattr(x, n, None)) for n in names)  # noqa: E731
    return hasattr(x, "shape") and hasattr(x, "dtype") and (has("matvec") or has("matmat"))


def _from_cupyx(S) -> Sparse:
    """cupyx CSR: values stay on the GPU; the pattern's index arrays are copied to the host once
    (so that the pattern is hashable and can serve the SuperLU/SDDMM index logic)."""
    S = S.tocsr()
    if not S.has_canonical_format:
        S = S.copy()
        S.sum_duplicates()
    pat = Pattern(to_numpy(S.indptr), to_numpy(S.indices), S.shape)
    return Sparse(S.data, pat)


def _from_jax_sparse(M) -> Sparse:
    """BCOO/BCSR with concrete indices -> Sparse; the values stay differentiable jax arrays.
    Duplicate entries are summed (segment_sum), so the map data -> values is linear."""
    import jax
    from jax.experimental import sparse as jsp

    if isinstance(M, jsp.BCSR):
        M = M.to_bcoo()
    if not isinstance(M, jsp.BCOO) or M.n_batch or M.n_dense or M.ndim != 2:
        raise UnsupportedOperandError(f"only 2-D BCOO/BCSR without batch/dense dims are "
                                      f"supported, got {type(M).__name__} with shape={M.shape}")
    try:
        ind = np.asarray(M.indices)
    except jax.errors.TracerArrayConversionError:
        raise BackendNotSupported(
            "a BCOO whose indices are traced (passed as a jit argument) has no static pattern; "
            "build lo.aslinop(bcoo) outside jax.jit, or pass a lo.Sparse whose pattern is "
            "static") from None
    pat, pos = Pattern.from_coo_with_map(ind[:, 0], ind[:, 1], M.shape)
    values = jax.ops.segment_sum(M.data, pos, num_segments=pat.nnz)
    return Sparse(values, pat)


def aslinearoperator(A) -> "scipy.sparse.linalg.LinearOperator":  # noqa: F821
    """A scipy ``LinearOperator`` with matvec/rmatvec/matmat/rmatmat (rmat* apply Aᴴ).

    Host arrays only (numpy in, numpy out): for cupy/jax operators the products run in their
    backend and results are copied to the host. Results never alias the input, and are
    writeable (scipy's solvers update them in place). Picklable when A is.
    """
    return _AsScipy(aslinop(A))


def _host_result(y, x) -> np.ndarray:
    y = to_numpy(y)
    if not y.flags.writeable or np.may_share_memory(y, x):
        y = np.array(y)
    return y


def _scipy_base():
    from scipy.sparse.linalg import LinearOperator as ScipyLinearOperator

    return ScipyLinearOperator


class _AsScipy(_scipy_base()):
    """A linops operator seen through scipy's LinearOperator interface (a module-level class,
    so it pickles)."""

    def __init__(self, A: LinearOperator):
        self.A = A
        super().__init__(dtype=np.dtype(A.dtype), shape=A.shape)

    def _matvec(self, x):
        return _host_result(self.A @ x, x)

    def _rmatvec(self, x):
        return _host_result(self.A.adjoint() @ x, x)

    def _matmat(self, X):
        return _host_result(self.A @ X, X)

    def _rmatmat(self, X):
        return _host_result(self.A.adjoint() @ X, X)

    def _adjoint(self):
        return _AsScipy(self.A.adjoint())
