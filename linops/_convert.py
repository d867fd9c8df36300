"""Conversions in (``aslinop``) and out (``aslinearoperator``).

``aslinop`` is the single door into linops: every function that takes "an operator" (the
queries, ``A + x``, ``LinearProblem``) calls it, so each input type is understood in one place
and anything else fails with one message that lists what is accepted. ``aslinearoperator`` is
the door out, to scipy's solvers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator as ScipyLinearOperator

from ._backend import is_array, is_cupy, is_jax, to_numpy
from ._base import LinearOperator
from ._operators.dense import Dense
from ._errors import BackendNotSupported, UnsupportedOperandError
from ._operators.matrixfree import MatrixFree
from ._operators.pattern import Pattern
from ._operators.petsc import aslinop_petsc
from ._operators.sparse import Sparse

ACCEPTED = ("a linops operator, a 2-D numpy/cupy/jax array (or nested list), any scipy.sparse "
            "matrix or array, a cupyx.scipy.sparse matrix, a jax.experimental.sparse BCOO/BCSR, a "
            "scipy.sparse.linalg.LinearOperator, a petsc4py Mat, or any object with shape, dtype "
            "and matvec/rmatvec (or matmat/rmatmat) methods, such as a PyLops operator")


def aslinop(x: Any) -> LinearOperator:
    """Wrap ``x`` as a linops operator; an operator is returned as it is.

    ============================================  ======================================
    x                                             result
    ============================================  ======================================
    a linops operator                             x itself
    2-D numpy / cupy / jax array, nested list     :class:`Dense` (np.matrix as ndarray)
    scipy.sparse matrix or array, any format      :class:`Sparse` (``Sparse.from_scipy``)
    cupyx.scipy.sparse matrix                     Sparse with cupy values (host pattern)
    jax.experimental.sparse BCOO / BCSR           Sparse with jax values (duplicates summed)
    scipy.sparse.linalg.LinearOperator            :class:`MatrixFree` (``from_scipy``)
    petsc4py Mat                                  a PETSc operator (see ``linops.petsc``)
    shape + dtype + matvec/matmat (PyLops, ...)   MatrixFree (``MatrixFree.from_duck``)
    ============================================  ======================================

    Cost: O(size of x) for the snapshot of arrays and sparse data, O(nnz log nnz) when sparse
    data must be canonicalised; O(1) for operators.

    Parameters
    ----------
    x : object
        See the table.

    Returns
    -------
    LinearOperator

    Raises
    ------
    UnsupportedOperandError
        For any other type (the message lists the accepted ones), and for arrays that are not
        2-D.
    BackendNotSupported
        For a jax BCOO whose indices are traced (built inside ``jax.jit``): it has no static
        pattern; wrap it outside the jitted function.

    Notes
    -----
    Arrays and sparse data are snapshotted (the mutation rule of ``linops._backend``): editing
    ``x`` afterwards does not change the operator. The callables of duck-typed and scipy
    operators are used as they are. A PETSc Mat is the exception: it is aliased (not copied),
    and any use after an edit of the Mat raises.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> aslinop([[1.0, 2.0], [3.0, 4.0]]), aslinop(sp.eye(2, format="coo"))
    (Dense(shape=(2, 2), dtype=float64), Sparse(shape=(2, 2), dtype=float64))
    >>> A = aslinop(np.eye(2))
    >>> aslinop(A) is A
    True
    """
    if isinstance(x, LinearOperator):
        return x

    if sp.issparse(x):
        return Sparse.from_scipy(x)
    mod = type(x).__module__
    if mod.startswith("petsc4py"):
        return aslinop_petsc(x)
    if mod.startswith("cupyx.scipy.sparse"):
        return _from_cupyx(x)
    if mod.startswith("jax.experimental.sparse"):
        return _from_jax_sparse(x)

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
    """``shape`` and ``dtype`` attributes and a callable ``matvec`` or ``matmat``."""
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
    # optional: jax (the jax extra)
    import jax
    from jax.experimental import sparse as jsp

    kind = type(M).__name__
    if not isinstance(M, (jsp.BCOO, jsp.BCSR)) or M.n_batch or M.n_dense or M.ndim != 2:
        raise UnsupportedOperandError(f"only 2-D BCOO/BCSR without batch/dense dims are "
                                      f"supported, got {kind} with shape={M.shape}")
    try:   # the index arrays as host arrays (never through jnp: under jit that traces them)
        if isinstance(M, jsp.BCSR):
            indptr = np.asarray(M.indptr)
            cols = np.asarray(M.indices)[:indptr[-1]]
            rows = np.repeat(np.arange(M.shape[0]), np.diff(indptr))
            data = M.data[:indptr[-1]]
        else:
            ind = np.asarray(M.indices)
            rows, cols, data = ind[:, 0], ind[:, 1], M.data
    except jax.errors.TracerArrayConversionError:
        raise BackendNotSupported(
            f"a {kind} whose indices are traced (passed as a jit argument) has no static "
            f"pattern; build lo.aslinop(M) outside jax.jit, or pass a lo.Sparse whose pattern "
            f"is static") from None
    keep = (rows < M.shape[0]) & (cols < M.shape[1])   # JAX's padding: index = shape, value 0
    if not keep.all():
        rows, cols, data = rows[keep], cols[keep], data[np.flatnonzero(keep)]
    pat, pos = Pattern.from_coo_with_map(rows, cols, M.shape)
    values = jax.ops.segment_sum(data, pos, num_segments=pat.nnz)
    return Sparse(values, pat)


def aslinearoperator(A) -> "scipy.sparse.linalg.LinearOperator":  # noqa: F821
    """A as a ``scipy.sparse.linalg.LinearOperator``, for scipy's solvers and eigensolvers.

    matvec/matmat apply A; rmatvec/rmatmat apply Aᴴ; ``.H`` of the result wraps ``A.H``. Each
    call costs one product with A (no setup, nothing densified).

    Parameters
    ----------
    A : operator or anything :func:`aslinop` accepts

    Returns
    -------
    scipy.sparse.linalg.LinearOperator
        Of A's shape and dtype.

    Raises
    ------
    UnsupportedOperandError
        If A cannot be wrapped.

    Notes
    -----
    Host arrays only (numpy in, numpy out): for cupy/jax operators the products run in their
    backend and the results are copied to the host, one transfer per product. Results never
    alias the input, and are writeable (scipy's solvers update them in place). Picklable when
    A is.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, scipy.sparse.linalg as sla, linops as lo
    >>> L = aslinearoperator(lo.Sparse.from_scipy(sp.diags([2.0, 4.0])))
    >>> x, info = sla.cg(L, np.array([2.0, 4.0]))
    >>> x, info
    (array([1., 1.]), 0)
    """
    return _AsScipy(aslinop(A))


def _host_result(y, x) -> np.ndarray:
    """y on the host, writeable and not sharing memory with x (an Identity-like operator may
    return its input; a snapshot may be read-only), copied only when it must be."""
    y = to_numpy(y)
    if not y.flags.writeable or np.may_share_memory(y, x):
        y = np.array(y)
    return y


def _scipy_base():
    """scipy's LinearOperator class, imported when this module is (scipy is a dependency)."""
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
