"""PETSc (petsc4py + MPI): a distributed matrix as an operator (the FEM family that assembles
one is in ``linops._family.petsc_family``).

Layout rule: shapes are GLOBAL; the arrays that flow in and out on each rank are that rank's
OWNED slice, numpy arrays of shape (n_local,) or (n_local, k) (``A.local_shape`` gives the owned
(rows, columns)). Nothing here gathers an n-vector. Every call that touches a Mat is collective:
all ranks of the matrix's communicator make it, in the same order.

Mutation rule for ``aslinop(mat)``: the operator ALIASES the Mat (a distributed matrix is not
copied) and records its PETSc object state; any use after an edit of the Mat raises
:class:`MatrixModifiedError` (O(1) per use). Solvers (``sv.PETSc``) keep their own copy.
"""

from __future__ import annotations

import zlib
from typing import Any, ClassVar

import numpy as np

from .._base import LinearOperator
from .._errors import BackendNotSupported, ShapeError, UnsupportedOperandError
from .._generics import _to_dense, conjugate, structure
from .._pytree import _set, operator


class MatrixModifiedError(RuntimeError):
    """The PETSc Mat behind an operator was edited after the operator was made."""


def _petsc():
    try:
        # optional: petsc4py (the petsc extra)
        from petsc4py import PETSc
    except ImportError:  # pragma: no cover - exercised only without petsc4py
        raise BackendNotSupported(
            'the PETSc backend needs petsc4py and mpi4py: apt-get install libpetsc-real-dev '
            'openmpi-bin, then pip install "linops[petsc]" (see the README)') from None
    return PETSc


def _mpi(comm):
    """The mpi4py communicator of a petsc4py (or mpi4py) communicator."""
    return comm.tompi4py() if hasattr(comm, "tompi4py") else comm


def _pattern_key(indptr, indices, shape, row_ranges, comm) -> tuple:
    """Hashable, rank-identical description of a distributed CSR pattern (collective).
    ``indices``: the column indices, as one array or as consecutive pieces of it (the CRC runs
    over the pieces in order: the same key, without an nnz-long int64 copy)."""
    crc = zlib.crc32(np.ascontiguousarray(indptr, dtype=np.int64).view(np.uint8))
    for part in ([indices] if isinstance(indices, np.ndarray) else indices):
        crc = zlib.crc32(np.ascontiguousarray(part, dtype=np.int64).view(np.uint8), crc)
    crcs = tuple(_mpi(comm).allgather(int(crc)))
    return ("petsc-aij", tuple(shape), tuple(int(r) for r in row_ranges), crcs)


def structure_key_of(mat) -> tuple:
    """``structure_key`` of a PETSc AIJ Mat: equal for two Mats with the same global shape, row
    layout and nonzero pattern. Collective; O(local nnz) (one pass over the owned rows)."""
    indptr, indices, _ = mat.getValuesCSR()
    return _pattern_key(indptr, indices, mat.getSize(), mat.getOwnershipRanges(), mat.getComm())


@operator
class PETScMatrix(LinearOperator):
    """A (distributed) PETSc Mat. Apply: MatMult, O(local nnz) per column and rank plus the
    halo exchange. Adjoint: MatMultHermitianTranspose on the same Mat (no copy).

    ``shape`` is global; ``local_shape`` = (owned rows, owned columns); arrays in and out are
    each rank's owned slice. ``structure_key``: equal for Mats with the same pattern and layout.

    >>> import linops as lo, numpy as np                               # doctest: +SKIP
    >>> A = lo.aslinop(mat)              # mat: an assembled petsc4py Mat  # doctest: +SKIP
    >>> y_local = A @ x_local            # x_local: this rank's owned slice  # doctest: +SKIP
    """

    mat: Any
    conjugate_transposed: bool = False
    base_key: Any = None
    state: Any = None
    shape: tuple[int, int] = None
    dtype: Any = None
    local_shape: tuple[int, int] = None
    _leaves: ClassVar = ()

    def __post_init__(self):
        PETSc = _petsc()
        if not isinstance(self.mat, PETSc.Mat):
            raise UnsupportedOperandError(f"PETScMatrix needs a petsc4py Mat, got "
                                          f"{type(self.mat).__name__}")
        (m, n), (ml, nl) = self.mat.getSize(), self.mat.getLocalSize()
        shape, local = ((n, m), (nl, ml)) if self.conjugate_transposed else ((m, n), (ml, nl))
        _set(self, shape=(int(shape[0]), int(shape[1])), local_shape=(int(local[0]), int(local[1])),
             dtype=np.dtype(PETSc.ScalarType))
        if self.state is None:
            _set(self, state=self.mat.stateGet())
        if self.base_key is None:
            _set(self, base_key=structure_key_of(self.mat))

    @property
    def structure_key(self):
        return ("conjugate transpose", self.base_key) if self.conjugate_transposed else self.base_key

    @property
    def comm(self):
        return self.mat.getComm()

    def check_current(self) -> None:
        """MatrixModifiedError when the Mat was edited after this operator was made (O(1))."""
        now = self.mat.stateGet()
        if now != self.state:
            raise MatrixModifiedError(
                f"the PETSc Mat behind this operator (shape={self.shape}) was modified after it "
                f"was wrapped (object state {self.state} -> {now}); wrap it again with "
                f"lo.aslinop(mat) and pass that to cache.update(A=...) so solves follow the edit")

    def matmat(self, X):
        self.check_current()
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[0] != self.local_shape[1]:
            raise ShapeError(f"A @ X on this rank needs the owned slice of X: X.shape[0] = "
                             f"{self.local_shape[1]} (local_shape={self.local_shape}, global "
                             f"shape={self.shape}), got X.shape={X.shape}")
        if X.dtype.kind == "c" and self.dtype.kind != "c":
            return self.matmat(X.real.copy()) + 1j * self.matmat(X.imag.copy())
        right, left = self.mat.createVecs()
        x, y = (left, right) if self.conjugate_transposed else (right, left)
        out = np.empty((self.local_shape[0], X.shape[1]), dtype=np.result_type(self.dtype, X.dtype))
        apply = self.mat.multHermitian if self.conjugate_transposed else self.mat.mult
        for j in range(X.shape[1]):
            x.array[:] = X[:, j]
            apply(x, y)
            out[:, j] = y.array
        x.destroy(), y.destroy()
        return out

    def adjoint(self) -> "PETScMatrix":
        return PETScMatrix(self.mat, not self.conjugate_transposed, self.base_key, self.state)


@conjugate.register
def _(A: PETScMatrix):
    if A.dtype.kind != "c":
        return A
    A.check_current()
    M = A.mat.duplicate(copy=True)
    M.conjugate()
    return PETScMatrix(M, A.conjugate_transposed, A.base_key)


@_to_dense.register
def _(A: PETScMatrix):
    raise UnsupportedOperandError(
        f"to_dense of a distributed PETSc matrix (shape={A.shape}) is not provided: every rank "
        f"holds only its rows. Use lo.inner / fam.pullback, or A.mat.convert('dense') yourself")


def aslinop_petsc(x: Any) -> PETScMatrix:
    """``lo.aslinop`` for petsc4py objects: a Mat becomes a :class:`PETScMatrix` (aliased, edits
    detected); anything else raises UnsupportedOperandError. Collective (computes the
    structure key: O(local nnz))."""
    PETSc = _petsc()
    if isinstance(x, PETSc.Mat):
        return PETScMatrix(x)
    if isinstance(x, PETSc.Vec):
        raise UnsupportedOperandError("a PETSc Vec is not an operator; pass its owned slice "
                                      "(vec.array) where an array is expected")
    raise UnsupportedOperandError(f"cannot wrap petsc4py {type(x).__name__}; only Mat is an operator")


@structure.register
def _(A: PETScMatrix):
    return "petsc"
