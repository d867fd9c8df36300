"""The checks and tolerances every solver shares: the problem's backend, precision-aware
thresholds, right-hand-side casting, finiteness checks and the Hermitian check.

All backend-specific calls go through ``linops.internals.Backend`` (the table); nothing here
branches on the backend.

The thresholds that make "singular", "Hermitian" and "converged" mean the same in every
algorithm live here, each scaled to the working precision:

================  ====================  ====================  =================================
                  double (f64, c128)    single (f32, c64)     used by
================  ====================  ====================  =================================
rcond_tol         1e3·eps ≈ 2.2e-13     1e2·eps ≈ 1.2e-5      pivot / condition checks
hermitian_tol     1e-10                 1e-4                  Cholesky, Auto's hint check
default_rtol      1e-8                  1e-5                  Krylov methods with rtol=None
================  ====================  ====================  =================================

>>> import numpy as np
>>> round(rcond_tol(np.float64) / np.finfo(np.float64).eps), hermitian_tol(np.complex64)
(1000, 0.0001)
>>> precision(np.int64), default_rtol(np.float32)            # integers work in float64
(dtype('float64'), 1e-05)
"""

from __future__ import annotations

import functools
import weakref

import numpy as np

import linops as lo
from linops.internals import Backend, array_leaves, backend_of, csr_parts, dense_array, to_numpy
from linops.internals import structure

from ._errors import NonFiniteInputError, NotHermitianError

SINGLE = (np.dtype(np.float32), np.dtype(np.complex64))


def backend_of_problem(A: lo.LinearOperator, *arrays) -> Backend:
    """The backend of A's arrays and the given right-hand sides (a MatrixFree operator holds no
    arrays, so its right-hand side decides)."""
    return backend_of(*array_leaves(A, patterns=False), *arrays)


def precision(dtype) -> np.dtype:
    """The working (factor) dtype for an operator of ``dtype``: float32/64, complex64/128.
    Integer and boolean operators work in float64."""
    dt = np.dtype(dtype)
    return dt if dt.kind in "fc" and dt.itemsize >= 4 else np.dtype(np.float64)


def eps(dtype) -> float:
    """Machine epsilon of the working precision of ``dtype``."""
    return float(np.finfo(precision(dtype)).eps)


def is_single(dtype) -> bool:
    """True when ``dtype`` works in single precision (float32, complex64)."""
    return precision(dtype) in SINGLE


def rcond_tol(dtype) -> float:
    """Default singularity threshold for pivots / reciprocal condition estimates: 1e3·eps in
    double precision (≈2.2e-13: fewer than ~3 digits left), 1e2·eps in single (≈1.2e-5)."""
    return (1e2 if is_single(dtype) else 1e3) * eps(dtype)


def hermitian_tol(dtype) -> float:
    """max|A − Aᴴ| allowed, relative to max|A|, for algorithms that need a Hermitian A."""
    return 1e-4 if is_single(dtype) else 1e-10


def default_rtol(dtype) -> float:
    """Iterative methods' default relative tolerance: 1e-8 (double), 1e-5 (single)."""
    return 1e-5 if is_single(dtype) else 1e-8


def cast_rhs(B, factor_dtype):
    """B in the factor's precision (a complex B stays complex; see ``split_complex``)."""
    fd = precision(factor_dtype)
    if np.dtype(B.dtype).kind == "c" and fd.kind != "c":  # keep the imaginary part
        target = np.result_type(fd, np.complex64)
    else:
        target = fd
    return B if np.dtype(B.dtype) == target else B.astype(target)


def split_complex(fn, B, factor_dtype):
    """Apply a solve ``fn`` of a REAL factorization to a possibly complex B (real and imaginary
    parts separately: SuperLU, CHOLMOD, spilu and pyamg refuse mixed dtypes)."""
    if np.dtype(B.dtype).kind == "c" and precision(factor_dtype).kind != "c":
        xp = backend_of(B).xp
        re, im = xp.real(B), xp.imag(B)
        if isinstance(B, np.ndarray):
            re, im = np.ascontiguousarray(re), np.ascontiguousarray(im)
        return fn(re) + 1j * fn(im)
    return fn(B)


def as_dense_array(A: lo.LinearOperator):
    """A's array without a copy for a dense operator; ``lo.to_dense`` (size-limited)
    otherwise."""
    a = dense_array(A)
    return lo.to_dense(A) if a is None else a


def finite_or_raise(x, name: str) -> None:
    """NonFiniteInputError naming the first non-finite entry of x (vectorised, cheap)."""
    be = backend_of(x)
    ok = be.xp.isfinite(x)
    if bool(be.xp.all(ok)):
        return
    # the slow path runs only on failure, so it may move the mask to the host to name the entry
    bad = np.flatnonzero(~to_numpy(ok).reshape(-1))
    k = int(bad[0])
    idx = np.unravel_index(k, tuple(x.shape))
    val = to_numpy(x).reshape(-1)[k]
    raise NonFiniteInputError(f"{name} contains {val} at index {tuple(int(i) for i in idx)} "
                              f"({bad.size} non-finite entries); check_finite=False skips this "
                              f"check")


def check_finite_operator(A: lo.LinearOperator) -> None:
    """NonFiniteInputError naming the first NaN/Inf stored in A (its row and column for a
    sparse A)."""
    parts = csr_parts(A)
    for a in array_leaves(A, patterns=False):
        if not np.issubdtype(np.dtype(a.dtype), np.inexact):  # integers are always finite
            continue
        be = backend_of(a)
        if bool(be.xp.all(be.xp.isfinite(a))):
            continue
        if parts is not None and a is parts[0]:
            k = int(np.flatnonzero(~np.isfinite(to_numpy(a)))[0])
            r, c = int(parts[1].rows[k]), int(parts[1].indices[k])
            raise NonFiniteInputError(f"A contains {to_numpy(a)[k]} at stored entry {k} (row {r}, "
                                      f"column {c}); check_finite=False skips this check")
        finite_or_raise(a, "A")


@functools.singledispatch
def hermitian_defect(A: lo.LinearOperator) -> tuple[float, float, tuple[int, int] | None]:
    """(max|A − Aᴴ|, max|A|, position of the largest defect); O(n²) for a dense A. Engines
    register their own operator types (``lo.Sparse`` below, PETSc in ``solvers._engines.petsc``)."""
    a = to_numpy(as_dense_array(A))
    d = np.abs(a - a.conj().T)
    k = np.unravel_index(int(np.argmax(d)), d.shape) if d.size else None
    return float(d.max(initial=0.0)), float(np.abs(a).max(initial=0.0)), \
        (tuple(int(i) for i in k) if k is not None else None)


@hermitian_defect.register
def _(A: lo.Sparse):
    """O(nnz): a pattern that is not symmetric counts as a defect of the unmatched entry."""
    v = to_numpy(A.values)
    scale = float(np.abs(v).max(initial=0.0))
    AH = A.adjoint()
    # same pattern: compare values entry by entry in O(nnz); otherwise an unmatched entry is
    # a defect of its own size, and scipy's difference finds it
    if AH.pattern != A.pattern:
        S = A.to_scipy()
        D = (S - S.conj().T).tocoo()
        k = int(np.argmax(np.abs(D.data))) if D.nnz else 0
        return (float(np.abs(D.data).max(initial=0.0)), scale,
                (int(D.row[k]), int(D.col[k])) if D.nnz else None)
    d = np.abs(to_numpy(AH.values) - v)
    k = int(np.argmax(d)) if d.size else 0
    pos = (int(A.pattern.rows[k]), int(A.pattern.indices[k])) if d.size else None
    return float(d.max(initial=0.0)), scale, pos


_DEFECTS: dict = {}   # id(operator) -> (weakref to it, its hermitian_defect)


def hermitian_defect_of(A: lo.LinearOperator):
    """:func:`hermitian_defect`, computed once per stored operator: ``lo.Sparse`` and
    ``lo.Dense`` are immutable snapshots, so ``Auto``'s check and the chosen factorization's
    requirement share one O(nnz) pass (an entry dies with its operator). Other operators (a
    PETSc Mat can change under its wrapper) are checked every time."""
    if not isinstance(A, (lo.Sparse, lo.Dense)):
        return hermitian_defect(A)
    k = id(A)
    hit = _DEFECTS.get(k)
    if hit is not None and hit[0]() is A:
        return hit[1]
    value = hermitian_defect(A)
    _DEFECTS[k] = (weakref.ref(A, lambda _, k=k: _DEFECTS.pop(k, None)), value)
    return value


def is_hermitian(A: lo.LinearOperator) -> bool:
    """max|A − Aᴴ| ≤ ``hermitian_tol``·max|A| (the test of ``require_hermitian``, as a bool)."""
    defect, scale, _ = hermitian_defect_of(A)
    return defect <= hermitian_tol(A.dtype) * max(scale, 1e-300)


def require_hermitian(A: lo.LinearOperator, who: str) -> None:
    """NotHermitianError with the size and position of the largest defect."""
    defect, scale, pos = hermitian_defect_of(A)
    if defect > hermitian_tol(A.dtype) * max(scale, 1e-300):
        raise NotHermitianError(
            f"{who} needs a Hermitian matrix, but max|A - Aᴴ| = {defect:.3g}"
            f"{f' at {pos}' if pos is not None else ''} "
            f"(max|A| = {scale:.3g}, allowed {hermitian_tol(A.dtype):.0e} relative); use "
            f"sv.LU() or sv.GMRES(). The hints hermitian=/posdef= never switch this check off")


def require_hermitian_operator(A: lo.LinearOperator, who: str, seed: int = 0) -> None:
    """NotHermitianError unless A is Hermitian: :func:`require_hermitian` (the largest defect
    and its position, O(nnz)) for an operator that stores its entries (dense, sparse, PETSc);
    for any other (matrix-free, sums, products, diagonal) a randomized test on four random
    vectors X (one product with A, one with Aᴴ where the operator has it): ‖AX − AᴴX‖ and the
    asymmetry of XᴴAX (the bilinear form), each against the precision's Hermitian tolerance.
    One random pair alone misses a defect of 40 % in single precision (measured)."""
    if structure(A) in ("dense", "sparse", "petsc"):
        require_hermitian(A, who)
        return
    n = A.shape[0]
    if n == 0:
        return
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    if np.dtype(A.dtype).kind == "c":
        X = X + 1j * rng.standard_normal((n, 4))
    X = X.astype(np.result_type(A.dtype, X.dtype))
    AX = np.asarray(to_numpy(A @ X))
    tol = hermitian_tol(A.dtype)
    scale = max(float(np.linalg.norm(AX)), 1e-300)
    try:
        AHX = np.asarray(to_numpy(A.H @ X))
    except NotImplementedError:   # a MatrixFree without its adjoint: the bilinear test alone
        AHX = None
    if AHX is not None:
        defect = float(np.linalg.norm(AX - AHX))
        if defect > 10 * tol * scale:
            raise NotHermitianError(
                f"{who} needs a Hermitian operator, but ‖AX − AᴴX‖/‖AX‖ = {defect / scale:.2g} "
                f"for random X (allowed {10 * tol:.0e})")
    W = X.conj().T @ AX
    defect = float(np.linalg.norm(W - W.conj().T))
    bound = 100 * tol * scale * float(np.linalg.norm(X))
    if defect > bound:
        raise NotHermitianError(
            f"{who} needs a Hermitian operator, but the form ⟨x, Ay⟩ of random x, y is not "
            f"conjugate-symmetric: ‖XᴴAX − (XᴴAX)ᴴ‖ = {defect:.3g} against ‖AX‖‖X‖ = "
            f"{scale * float(np.linalg.norm(X)):.3g} (allowed {100 * tol:.0e} relative)")


def hint_text(prob) -> str:
    """The hints as the user gave them (``posdef=True`` alone, not the ``hermitian=True`` it
    implies), for messages."""
    given = getattr(prob, "given_hints", None)
    if given is None:
        given = {k: getattr(prob, k) for k in ("hermitian", "posdef")
                 if getattr(prob, k, None) is not None}
    return ", ".join(f"{k}={v}" for k, v in given.items()) or "no hints"
