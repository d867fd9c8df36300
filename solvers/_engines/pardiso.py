"""PARDISO (Intel oneMKL) as a sparse direct solver: one solver handle per pattern, reordering
and symbolic factorization once (phase 11), numeric (re)factorization (phase 22) per matrix
into one of the handle's factor slots, solves with A, Aᴴ and Aᵀ from the same factors (phase 33
with ``iparm(12)`` = 0, 1, 2).

MKL comes with pypardiso (``pip install "linops[pardiso]"``); the PARDISO entry points are called
directly (pypardiso's own wrapper is float64-only), so float32/float64/complex64/complex128 all
work: real or complex unsymmetric types (mtype 11 / 13) for general matrices, real symmetric /
complex Hermitian positive definite types (mtype 2 / 4, half the work) for Hermitian problems
(``sv.Auto`` checks), single precision through ``iparm(28) = 1``. Indices are passed 0-based
(``iparm(35) = 1``) as 32-bit integers (PARDISO's LP64 interface; a matrix with more than
2³¹ − 1 stored entries raises BackendNotSupported).

Transposed solves were verified against dense references for every type above (see
tests/solvers/test_pardiso.py): ``iparm(12) = 1`` solves Aᴴx = b and ``iparm(12) = 2`` solves Aᵀx = b
for mtypes 11 and 13; the Hermitian types solve Aᴴ = A with the forward solve and Aᵀ = conj(A)
by conjugating.
"""

from __future__ import annotations

import ctypes
import math
import pathlib
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

import linops as lo
from linops.internals import to_numpy

from .._checks import backend_of_problem, cast_rhs, hint_text, is_hermitian, precision, \
    rcond_tol
from .._contract import Algorithm, Factor
from .direct import check_rtol, not_posdef
from .._errors import BackendNotSupported, HintWarning, SingularMatrixError, SolveError, \
    warn_caller
from .._factors.logdet import pardiso_logdet
from .._analyses import analyses
from .._registry import Case, register

INSTALL = 'pip install "linops[pardiso]"'
ANALYSIS, NUMERIC, SOLVE, RELEASE_ONE, RELEASE = 11, 22, 33, 0, -1
MAX_FACTORS = 64  # maxfct: numeric factorizations one analysis can hold at once (like=)
_IPARM_TRANS = {"N": 0, "H": 1, "T": 2}  # iparm(12): A x = b, Aᴴ x = b, Aᵀ x = b
_ERRORS = {-1: "input inconsistent", -2: "not enough memory", -3: "reordering problem",
           -4: "zero pivot, numerical factorization or iterative refinement problem",
           -5: "unclassified (internal) error", -6: "reordering failed",
           -7: "diagonal matrix is singular", -8: "32-bit integer overflow problem",
           -9: "not enough memory for out-of-core", -10: "error opening out-of-core files",
           -11: "read/write error with out-of-core files"}


# ----- the MKL entry points ----------------------------------------------------------------------
@lru_cache(maxsize=1)
def _mkl():
    """(library, None) or (None, reason). The library is the MKL runtime pypardiso loads."""
    try:
        from pypardiso.pardiso_wrapper import PyPardisoSolver  # optional: the pardiso extra
    except ImportError:
        return None, (f"PARDISO needs pypardiso (Intel oneMKL): {INSTALL}; or use sv.LU() "
                      f"(SuperLU) or sv.Cholesky() (CHOLMOD)")
    try:
        lib = PyPardisoSolver().libmkl
    except Exception as e:  # pypardiso raises ImportError when mkl_rt cannot be found
        return None, (f"pypardiso is installed but MKL could not be loaded ({e}); reinstall with "
                      f"{INSTALL}, or use sv.LU() / sv.Cholesky()")
    i32 = ctypes.POINTER(ctypes.c_int32)
    ptr = ctypes.c_void_p
    lib.pardiso.argtypes = [ptr, i32, i32, i32, i32, i32, ptr, ptr, ptr, ptr, i32, ptr, i32,
                            ptr, ptr, i32]
    lib.pardiso.restype = None
    lib.pardisoinit.argtypes = [ptr, i32, ptr]
    lib.pardisoinit.restype = None
    lib.pardiso_getdiag.argtypes = [ptr, ptr, ptr, i32, i32]
    lib.pardiso_getdiag.restype = None
    return lib, None


def pardiso_available() -> bool:
    """True when pypardiso and its MKL runtime can be loaded."""
    return _mkl()[0] is not None


def _unavailable() -> str | None:
    return _mkl()[1]


def _int(v: int):
    return ctypes.byref(ctypes.c_int32(v))


@lru_cache(maxsize=None)
def _no_spin(lib_path: str, thread: int) -> None:
    """Intel OpenMP's worker threads, once PARDISO has run, keep spinning for its blocktime
    (200 ms) after every parallel region: on a machine with few cores that CPU is taken from
    whatever runs next — CHOLMOD or SuperLU in the same process, measured or not (at n = 250 500
    on 2 cores, CHOLMOD after PARDISO took 2.4× the CPU and 4× the time it takes alone). Sets
    the blocktime to 0 for the teams this thread starts (``kmp_set_blocktime`` of the
    libiomp5 that MKL loads beside it; nothing where there is none), once per thread."""
    try:
        omp = ctypes.CDLL(str(pathlib.Path(lib_path).with_name("libiomp5.so")))
        omp.kmp_set_blocktime(ctypes.c_int(0))
    except (OSError, AttributeError):   # another OpenMP runtime, or none beside MKL
        pass


def _call(lib, pt, mtype: int, phase: int, mnum: int, n: int, a, ia, ja, iparm, B, X) -> int:
    """One ``pardiso`` call; returns its error code (0: success)."""
    _no_spin(getattr(lib, "_name", ""), threading.get_ident())
    err = ctypes.c_int32(0)
    lib.pardiso(pt.ctypes.data, _int(MAX_FACTORS), _int(mnum), _int(mtype), _int(phase),
                _int(n), a.ctypes.data, ia.ctypes.data, ja.ctypes.data, None, _int(B.shape[1]),
                iparm.ctypes.data, _int(0), B.ctypes.data, X.ctypes.data, ctypes.byref(err))
    return int(err.value)


def _release(lib, pt, mtype: int, iparm, phase: int = RELEASE, mnum: int = 1) -> None:
    """Phase −1 (all of the handle's memory) or 0 (slot ``mnum``'s factors): a finalizer, never
    raises."""
    if not pt.any():
        return
    ia = np.zeros(2, dtype=np.int32)
    z = np.zeros((1, 1))
    _call(lib, pt, mtype, phase, mnum, 1, z, ia, ia, iparm, z, z)


class _Handle:
    """One PARDISO solver instance (``pt`` + ``iparm``), the CSR structure it was analysed with
    (0-based int32) and its factor slots. Factors hold their handle; the handle holds only weak
    references to them (``owners``), so dropping the last factor frees everything, without the
    cyclic garbage collector. ``phases`` counts the calls per phase."""

    def __init__(self, lib, mtype: int, n: int, ia, ja, single: bool):
        self.lib, self.mtype, self.n, self.ia, self.ja = lib, mtype, n, ia, ja
        self.pt = np.zeros(64, dtype=np.int64)
        self.iparm = np.zeros(64, dtype=np.int32)
        lib.pardisoinit(self.pt.ctypes.data, _int(mtype), self.iparm.ctypes.data)
        self.iparm[34] = 1            # iparm(35): 0-based indices
        self.iparm[27] = int(single)  # iparm(28): single precision
        self.iparm[55] = 1            # iparm(56): pardiso_getdiag enabled (pivot check)
        self.phases: Counter = Counter()
        self.owners: dict[int, weakref.ref] = {}   # slot -> the factor it holds now
        # caches of one pattern share a kept handle (solvers._analyses), maybe across threads
        # (JAX's host callbacks): one call at a time, with the iparm it set and reads back
        self.lock = threading.RLock()
        self._finalizer = weakref.finalize(self, _release, lib, self.pt, mtype,
                                           self.iparm.copy())

    def call(self, phase: int, a, mnum: int = 1, B=None, X=None) -> int:
        """Run one phase on slot ``mnum``; returns PARDISO's error code (0: success)."""
        if B is None:
            B = X = np.zeros((self.n, 1), dtype=a.dtype)
        with self.lock:
            err = _call(self.lib, self.pt, self.mtype, phase, mnum, self.n, a, self.ia, self.ja,
                        self.iparm, B, X)
            self.phases[phase] += 1
        return err

    def _spawn_into(self, A, be, dtype, upper, pivot_rtol) -> "PardisoFactor | None":
        """A numeric factorization of A into a free slot (claimed under the lock), or None
        when every slot is in use."""
        with self.lock:
            slot = self.free_slot()
            return None if slot is None else PardisoFactor(self, slot, A, be, dtype, upper,
                                                            pivot_rtol)

    def free_slot(self) -> int | None:
        """A slot no live factor holds, or None when all ``MAX_FACTORS`` are in use."""
        for m in range(1, MAX_FACTORS + 1):
            ref = self.owners.get(m)
            if ref is None or ref() is None:
                return m
        return None

    def holds(self, factor, mnum: int) -> bool:
        ref = self.owners.get(mnum)
        return ref is not None and ref() is factor

    def pivots(self, dtype, mnum: int):
        """The diagonal of slot ``mnum``'s factorization (PARDISO's pivots), length n."""
        df = np.zeros(self.n, dtype=dtype)
        da = np.zeros(self.n, dtype=dtype)
        err = ctypes.c_int32(0)
        self.lib.pardiso_getdiag(self.pt.ctypes.data, df.ctypes.data, da.ctypes.data,
                                 _int(mnum), ctypes.byref(err))
        return df if err.value == 0 else None

    def close(self) -> None:
        self._finalizer()


# ----- the algorithm -----------------------------------------------------------------------------
@register("pardiso", "Intel oneMKL PARDISO: multithreaded supernodal LU / Cholesky",
          ("sparse",), direct=True, backends=("numpy", "jax"), adjoint="the same factors (iparm(12))",
          jax=True, requires=_unavailable,
          cases=(Case("PARDISO"), Case("PARDISO posdef", dict(posdef=True), posdef=True,
                                       queries=("logdet",))))
@dataclass(frozen=True)
class Pardiso(Algorithm):
    """Sparse direct solver PARDISO (Intel oneMKL, optional extra: ``pip install
    "linops[pardiso]"``). Multithreaded supernodal LU (or Cholesky for Hermitian positive
    definite problems), usually the fastest direct solver on one machine.

    One PARDISO handle per cache: ``init`` reorders (METIS) and analyses once (phase 11) and
    factorizes (phase 22); ``cache.update(A=...)`` with the same pattern runs phase 22 only;
    ``solve`` / ``solve_adjoint`` / ``solve_transpose`` run phase 33 on the SAME factors
    (``iparm(12)``: A, Aᴴ, Aᵀ). ``cache.factor.phases`` counts the phases run on the handle.

    Cost: fill-dependent factorization, O(nnz(L+U)) per solve; dtypes float32, float64,
    complex64, complex128 (single precision factorizes in single). numpy arrays (and jax arrays,
    through the host); other backends raise BackendNotSupported naming sv.LU().

    Parameters
    ----------
    posdef : bool, optional
        Use the Hermitian positive definite types (mtype 2 real, 4 complex; Cholesky, about half
        the work and memory). None (default): when the problem says ``posdef=True`` and A is
        Hermitian (an O(nnz) check; a wrong hint warns and uses LU, never a wrong answer).
        False: always unsymmetric LU (mtype 11 / 13).
    pivot_rtol : float, optional
        Singular when min|pivot| <= pivot_rtol·max|pivot| (PARDISO replaces tiny pivots by
        perturbed ones instead of failing; this check catches them). Default 1e3·eps in double
        precision, 1e2·eps in single; 0 disables it.

    Raises
    ------
    ValueError
        At construction: ``posdef`` not None/True/False, a bad ``pivot_rtol``.
    BackendNotSupported
        At ``init``: pypardiso/MKL not installed (the message gives the install command), A
        not an assembled sparse matrix, cupy arrays, or 2³¹ or more stored entries.
    SingularMatrixError
        At ``init``/``update``: an empty row or column, a missing diagonal entry with
        ``posdef=True``, PARDISO's zero-pivot errors (-4, -7), or a pivot below the threshold.
    NotHermitianError
        ``posdef=True`` given explicitly and A is not Hermitian.
    MemoryError
        PARDISO ran out of memory (errors -2, -9).
    SolveError
        Any other PARDISO error code (named in the message).

    Notes
    -----
    ``sv.Auto`` picks PARDISO for sparse numpy problems from n = 2·10⁴ when it is installed. A
    failed ``update`` restores the previous numeric factorization on the shared handle, so the
    cache stays usable (the state rule); an update to another dtype kind (real → complex) or
    precision is a full setup with the matching matrix type, never a real factor fed complex
    values. ``sv.init(prob, sv.Pardiso(), like=cache)`` factorizes into another of the handle's
    ``MAX_FACTORS`` slots (PARDISO's ``maxfct``/``mnum``): one analysis (phase 11) serves a
    batch of matrices on one pattern. A slot is released (phase 0) when its factor is garbage
    collected, the whole handle (phase −1) with its last factor; nothing references a factor
    back, so no reference cycle keeps one alive.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.csr_array(np.array([[4.0, 1.0], [2.0, 3.0]]))
    >>> try:
    ...     cache = sv.init(sv.LinearProblem(A), sv.Pardiso())
    ... except sv.BackendNotSupported:                   # pypardiso is not installed here
    ...     cache = sv.init(sv.LinearProblem(A), sv.LU())
    >>> cache.solve(np.array([1.0, 2.0])).round(3).tolist()
    [0.1, 0.6]
    >>> cache.solve_adjoint(np.ones(2)).round(3).tolist()    # phase 33 with iparm(12) = 1
    [0.1, 0.3]
    """

    posdef: bool | None = None
    pivot_rtol: float | None = None

    def __post_init__(self):
        check_rtol(self.pivot_rtol, "pivot_rtol")
        if self.posdef not in (None, True, False):
            raise ValueError(f"Pardiso: posdef must be None, True or False, got "
                             f"posdef={self.posdef!r}")

    @property
    def label(self) -> str:
        """'Pardiso', or with the matrix type family it was given (messages, fallbacks)."""
        return "Pardiso" if self.posdef is None else f"Pardiso(posdef={self.posdef})"

    def needs_hermitian(self, A, prob) -> bool:
        """``posdef=True`` given explicitly: the definite types read one triangle only."""
        return bool(self.posdef)

    def plan(self, A, prob) -> "Pardiso":
        """``posdef=None``: decided here from the problem's hint, verified (a hint that does
        not hold warns and plans the unsymmetric type) — at ``init`` and at every update."""
        if self.posdef is not None:
            return self
        posdef = bool(prob is not None and prob.posdef)
        if posdef and not is_hermitian(A):
            warn_caller(f"the problem says {hint_text(prob)} but A is not Hermitian; Pardiso "
                        f"uses its unsymmetric LU instead", HintWarning)
            posdef = False
        return Pardiso(posdef=posdef, pivot_rtol=self.pivot_rtol)

    def _setup(self, A: lo.LinearOperator, prob) -> "PardisoFactor":
        """Open a PARDISO handle for A's pattern, run the analysis (phase 11) and the numeric
        factorization (phase 22); the matrix type follows ``posdef`` (checked)."""
        lib, reason = _mkl()
        if lib is None:
            raise BackendNotSupported(reason)
        be = backend_of_problem(A)
        n = A.shape[0]
        if A.pattern.nnz >= 2**31:
            raise BackendNotSupported(f"Pardiso (LP64 interface) takes at most 2³¹−1 stored "
                                      f"entries, A has {A.pattern.nnz}; use sv.CG(precond="
                                      f"sv.AMG()) or sv.PETSc()")
        _structural_check(A)
        posdef = bool(self.plan(A, prob).posdef)
        dtype = precision(A.dtype)
        mtype = (4 if posdef else 13) if dtype.kind == "c" else (2 if posdef else 11)
        P = A.pattern
        # the symmetric types read the upper triangle only, with every diagonal entry stored
        upper = (P.indices >= P.rows) if posdef else None
        if upper is not None:
            ia = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(np.bincount(P.rows[upper], minlength=n), out=ia[1:])
            ja = P.indices[upper].astype(np.int32)
            if not np.array_equal(ja[ia[:-1]], np.arange(n, dtype=np.int32)):
                k = int(np.flatnonzero(ja[ia[:-1]] != np.arange(n))[0])
                raise SingularMatrixError(f"Pardiso: posdef=True but A[{k}, {k}] is not stored; "
                                          f"a positive definite matrix has a positive diagonal")
        else:
            ia, ja = P.indptr.astype(np.int32), P.indices.astype(np.int32)
        single = dtype in (np.float32, np.complex64)
        key = ("pardiso", P, mtype, single)
        kept = analyses.get(key)
        fallbacks = 0
        # the unsymmetric types' analysis matched and scaled the values it saw (iparm(11),
        # iparm(13)): kept for other values only where it serves them without a perturbed
        # pivot; else it is dropped and this A is analysed afresh (counted: a fallback)
        try:
            factor = kept._spawn_into(A, be, dtype, upper, self.pivot_rtol) if kept else None
        except SingularMatrixError:
            if mtype in (2, 4):       # the definite types' analysis is the pattern's alone
                raise
            factor, fallbacks = None, 1
            analyses.drop(key)
        if factor is not None:
            if mtype in (2, 4) or factor.perturbed_pivots == 0:
                factor.reused_analysis = True
                return factor
            factor.close()
            analyses.drop(key)
            fallbacks = 1
        handle = _Handle(lib, mtype, n, ia, ja, single)
        err = handle.call(ANALYSIS, _values(A, dtype, upper))
        if err:
            handle.close()
            raise _error(err, ANALYSIS, mtype)
        factor = PardisoFactor(handle, 1, A, be, dtype, upper, self.pivot_rtol)
        factor.symbolic_analyses, factor.fallbacks = 1, fallbacks
        if mtype in (2, 4) or factor.perturbed_pivots == 0:
            # iparm(16): the analysis' permanent memory in KB
            analyses.put(key, handle, 1024 * int(handle.iparm[15]) + 8 * (ia.size + ja.size))
        return factor


def _structural_check(A: lo.Sparse) -> None:
    """A zero row or column makes A singular (and crashes PARDISO): name it."""
    P = A.pattern
    empty = np.flatnonzero(np.diff(P.indptr) == 0)
    if empty.size:
        raise SingularMatrixError(f"Pardiso: row {int(empty[0])} of A is empty ({empty.size} "
                                  f"empty rows): A is singular. Check boundary conditions")
    cols = np.bincount(P.indices, minlength=A.shape[1])
    empty = np.flatnonzero(cols == 0)
    if empty.size:
        raise SingularMatrixError(f"Pardiso: column {int(empty[0])} of A is empty ({empty.size} "
                                  f"empty columns): A is singular. Check boundary conditions")


def _values(A: lo.Sparse, dtype, upper):
    """A's values as PARDISO reads them: contiguous, in the factor dtype, upper triangle only
    for the symmetric types."""
    v = to_numpy(A.values)
    if upper is not None:
        v = v[upper]
    return np.ascontiguousarray(v, dtype=dtype)


def _error(err: int, phase: int, mtype: int) -> Exception:
    """The exception for PARDISO error code ``err`` (singular, memory, or a SolveError)."""
    what = _ERRORS.get(err, "unknown error")
    if err in (-4, -7):
        if mtype in (2, 4):
            return not_posdef(f"Pardiso phase {phase} (mtype {mtype})", f" (error {err}, {what})")
        return SingularMatrixError(f"Pardiso phase {phase}: error {err}, {what}: the matrix is "
                                   f"singular. Check boundary conditions or regularise")
    if err in (-2, -9):
        return MemoryError(f"Pardiso phase {phase}: error {err}, {what}; use sv.CG(precond="
                           f"sv.AMG()) for very large problems")
    return SolveError(f"Pardiso phase {phase}: error {err}, {what} (mtype {mtype})")


class PardisoFactor(Factor):
    """The numeric factorization in slot ``mnum`` of a :class:`_Handle`."""

    def __init__(self, handle: _Handle, mnum: int, A: lo.Sparse, be, dtype, upper, pivot_rtol,
                 restore: "PardisoFactor | None" = None):
        self.handle, self.mnum, self.be, self.dtype, self.upper, self.pivot_rtol = \
            handle, mnum, be, np.dtype(dtype), upper, pivot_rtol
        self.kind = f"PARDISO (mtype {handle.mtype})"
        self.requires_hermitian = handle.mtype in (2, 4)
        self.a = _values(A, self.dtype, upper)  # PARDISO reads A again in phase 33 (refinement)
        with handle.lock:    # the slot's numeric phase and the iparm it reads back
            t = time.perf_counter()
            err = handle.call(NUMERIC, self.a, mnum)
            self.numeric_seconds = time.perf_counter() - t
            try:
                if err:
                    raise _error(err, NUMERIC, handle.mtype)
                self._pivot_check()
            except Exception:
                if restore is not None:  # a failed update leaves the cache's factorization intact
                    if handle.call(NUMERIC, restore.a, mnum) == 0:
                        handle.owners[mnum] = weakref.ref(restore)
                    else:
                        handle.owners.pop(mnum, None)
                else:
                    _release(handle.lib, handle.pt, handle.mtype, handle.iparm, RELEASE_ONE, mnum)
                raise
            handle.owners[mnum] = weakref.ref(self)
            # a dropped factor frees its slot's numeric factors (the handle: with its last factor)
            self._finalizer = weakref.finalize(self, _free_slot, handle, mnum, weakref.ref(self))
            self.nnz_factors = int(handle.iparm[17])      # iparm(18): nonzeros in the factors
            self.perturbed_pivots = int(handle.iparm[13])  # iparm(14)

    @property
    def phases(self) -> Counter:
        """Calls per PARDISO phase on this cache's handle (11: analysis, 22: numeric, 33: solve);
        the handle is shared by every cache of the pattern while ``sv.analyses`` keeps it, and so
        are its counts (``cache.stats`` counts one cache's work)."""
        return self.handle.phases

    def _pivot_check(self) -> None:
        rtol = rcond_tol(self.dtype) if self.pivot_rtol is None else self.pivot_rtol
        if rtol <= 0:
            return
        df = self.handle.pivots(self.dtype, self.mnum)
        if df is None or df.size == 0:
            return
        d = np.abs(df)
        dmax, dmin = float(d.max()), float(d.min())
        # every pivot perturbed (A = 0 on its pattern): the ratio of PARDISO's own
        # replacements is 1, yet it factorized nothing of A
        every = int(self.handle.iparm[13]) >= d.size
        if every and math.isfinite(dmax):
            raise SingularMatrixError(
                f"Pardiso: every one of the {d.size} pivots was below PARDISO's threshold and "
                f"replaced by a perturbation (largest {dmax:.3g}): A is zero on its pattern, "
                f"or so small in scale that nothing of it was factorized (rescale A)")
        if not math.isfinite(dmax) or dmin <= rtol * dmax:
            k = int(np.argmin(d))
            raise SingularMatrixError(
                f"Pardiso: the matrix is singular to working precision: pivot {k} is {dmin:.3g} "
                f"while the largest is {dmax:.3g} (ratio {dmin / dmax if dmax else 0:.3g} <= "
                f"pivot_rtol={rtol:.3g}; {int(self.handle.iparm[13])} pivots perturbed). Check "
                f"boundary conditions (a pure-Neumann problem needs one fixed dof) or regularise; "
                f"pivot_rtol=0 disables this check")

    def solve(self, B, trans: str):
        # a slot holds one numeric factorization; an older factor must not solve with a newer
        if not self.handle.holds(self, self.mnum):
            raise RuntimeError("this PARDISO factor was replaced by a later update (its slot "
                               "holds another matrix now); solve through the cache")
        be = self.be
        Bh = cast_rhs(be.to_host(B), self.dtype)
        if Bh.dtype.kind == "c" and self.dtype.kind != "c":  # real factors: one call, 2k columns
            k = Bh.shape[1]
            X = self._solve(np.concatenate([Bh.real, Bh.imag], axis=1), trans)
            return be.from_host(X[:, :k] + 1j * X[:, k:])
        return be.from_host(self._solve(Bh, trans))

    def _solve(self, R, trans: str):
        h = self.handle
        if h.mtype in (2, 4):  # Hermitian: Aᴴ = A, Aᵀ = conj(A)
            if trans == "T" and h.mtype == 4:
                return np.conj(self._solve(np.conj(R), "N"))
            trans = "N"
        B = np.asfortranarray(R, dtype=self.dtype)
        X = np.zeros_like(B, order="F")
        with h.lock:
            h.iparm[11] = _IPARM_TRANS[trans]
            try:
                err = h.call(SOLVE, self.a, self.mnum, B, X)
            finally:
                h.iparm[11] = 0
        if err:
            raise _error(err, SOLVE, h.mtype)
        return X

    def _refactor(self, A: lo.Sparse) -> "PardisoFactor":
        """Numeric refactorization (phase 22) into this factor's slot; this factor is retired
        (its solves refuse), or kept if the new factorization fails."""
        self._finalizer.detach()  # the slot passes to the new factor (or back to this one)
        try:
            return PardisoFactor(self.handle, self.mnum, A, self.be, self.dtype, self.upper,
                                 self.pivot_rtol, restore=self)
        except Exception:
            self._finalizer = weakref.finalize(self, _free_slot, self.handle, self.mnum,
                                               weakref.ref(self))
            raise

    def _spawn(self, A: lo.Sparse) -> "PardisoFactor | None":
        """A numeric factorization into a free slot of the same handle (no new analysis)."""
        return self.handle._spawn_into(A, self.be, self.dtype, self.upper, self.pivot_rtol)

    def logdet(self):
        """The Hermitian positive definite types: Σ log of the pivots (O(n)); the unsymmetric
        ones raise BackendNotSupported (MKL factorizes a scaled, matched matrix)."""
        return pardiso_logdet(self)

    def close(self) -> None:
        self._finalizer()


def _free_slot(handle: _Handle, mnum: int, ref) -> None:
    """Finalizer of a factor: release its slot's numeric factors if it still holds the slot."""
    with handle.lock:
        owner = handle.owners.get(mnum)
        if owner is ref or owner is None or owner() is None:
            handle.owners.pop(mnum, None)
            _release(handle.lib, handle.pt, handle.mtype, handle.iparm, RELEASE_ONE, mnum)
