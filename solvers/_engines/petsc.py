"""sv.PETSc: KSP + PC through petsc4py, distributed over MPI, with verified transposed solves.

``init`` = one KSPSetUp (a factorization, or an AMG hierarchy) on the factor's own copy of the
Mat; ``solve`` = KSPSolve; ``solve_adjoint``/``solve_transpose`` = KSPSolveTranspose with the
SAME setup; ``update(A=...)`` on the same pattern copies the values into that Mat and re-runs
KSPSetUp, which PETSc then does numerically (SAME_NONZERO_PATTERN: symbolic factorization /
GAMG interpolation kept). Right-hand sides and solutions are each rank's owned slice.

Transposed solves are not trusted blindly: in PETSc 3.18 SuperLU_dist and hypre return WRONG
transposed solutions without an error, SOR and ML have none. :data:`TRANSPOSE_TABLE` holds what
was measured; a known-bad combination is routed through an explicit transpose with its own
KSPSetUp (``factor.transpose_setups`` counts them) or refused (``route_transpose=False``:
:class:`TransposeNotSupportedError`); a combination not in the table is verified at setup with
one random right-hand side. Real PETSc builds solve Aᴴ = Aᵀ; for a complex build
Aᴴx = c is solved as conj(A⁻ᵀ conj(c)) with the same setup.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

import linops as lo
from linops.internals import ShapeError, structure
from linops.petsc import PETScMatrix

from .._acceptance import attainable, backward_error, verdict
from .._checks import hermitian_defect, hermitian_tol, rcond_tol
from .._contract import Algorithm, Factor
from .._errors import BackendNotSupported, ConvergenceError, SingularMatrixError, SolveError
from .petsc_table import (BAD_COMPONENTS, SEQUENTIAL_FACTOR, SYMMETRIC_KSP, TABLE_VERSION,
                           TRANSPOSE_TABLE)
from .._factors.logdet import LogDet
from .._registry import Case, register
from .._results import Status

DIRECT_BACKWARD_TOL = 1e-8   # ‖b − A x‖ / (‖A‖·‖x‖ + ‖b‖) accepted from a direct (preonly) solve
RESTARTS = 3

class TransposeNotSupportedError(BackendNotSupported):
    """A transposed/adjoint solve was asked of a PETSc combination whose transposed solve is
    known to be wrong or missing, with ``route_transpose=False``.

    Raised by ``solve_adjoint``/``solve_transpose`` (and by ``init`` when the transpose must be
    checked and cannot be); the forward solve of the same cache keeps working. The message names
    the combination and what was measured for it. With ``route_transpose=True`` (the default)
    such combinations solve adjoints with an explicit Aᵀ and its own setup instead.

    It is a :class:`BackendNotSupported`, so code that handles "this backend cannot do that"
    catches it too.

    >>> import solvers as sv
    >>> issubclass(sv.TransposeNotSupportedError, sv.BackendNotSupported)
    True
    """


_INSTALL = ('sv.PETSc needs petsc4py and mpi4py: apt-get install libpetsc-real-dev openmpi-bin, '
            'then pip install "linops[petsc]" (see the README)')


def _lib():
    try:
        from petsc4py import PETSc as lib  # optional: the petsc extra
    except ImportError:
        raise BackendNotSupported(_INSTALL) from None
    return lib


def _unavailable() -> str | None:
    try:
        _lib()
    except BackendNotSupported as e:
        return str(e)
    return None


def _real_build() -> bool:
    return np.dtype(_lib().ScalarType).kind != "c"


def _real_build_refuses(dtype) -> str | None:
    """Why this PETSc build cannot take ``dtype`` (a complex dtype on a real build), or None."""
    if _unavailable() is None and np.dtype(dtype).kind == "c" and _real_build():
        return (f"this PETSc build is real (ScalarType {np.dtype(_lib().ScalarType).name}) and A "
                f"is {np.dtype(dtype).name}: its imaginary part would be dropped. A complex A "
                f"needs a complex PETSc build (apt-get install libpetsc-complex-dev, then "
                f"PETSC_DIR=/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-complex pip install "
                f"petsc4py), or use sv.LU() / sv.Pardiso() on one process")
    return None


def _combo(ksp: str, pc: str, fst: str | None) -> str:
    return f"{ksp}+{pc}" + (f"({fst})" if fst else "")


@register("petsc", "PETSc KSP + PC over MPI (MUMPS, GAMG, ...), transposes verified",
          ("sparse", "petsc"), backends=("numpy", "jax"),
          adjoint="KSPSolveTranspose where verified, else Aᵀ's setup", requires=_unavailable,
          unsupported=lambda dtype: _real_build_refuses(dtype),
          cases=(Case("PETSc mumps", direct=True, queries=("logdet",)),
                 Case("PETSc cg+gamg", dict(ksp_type="cg", pc_type="gamg", rtol=1e-11), posdef=True),
                 Case("PETSc gmres+gamg", dict(ksp_type="gmres", pc_type="gamg", rtol=1e-11))))
@dataclass(frozen=True)
class PETSc(Algorithm):
    """PETSc KSP with a PC: ``sv.PETSc(ksp_type="cg", pc_type="gamg")``, or a direct solver
    ``sv.PETSc()`` = preonly + LU with MUMPS (the default: transposes verified).

    Parameters: ``ksp_type``, ``pc_type``, ``factor_solver_type`` (mumps, superlu_dist, ...;
    for pc_type lu/cholesky, default mumps), ``options`` (a mapping of further PETSc options
    without the leading '-', applied under a private prefix: ``{"pc_gamg_threshold": 0.02}``),
    ``rtol``/``atol``/``maxiter`` (iterative KSPs: the TRUE residual must satisfy
    ‖b − A x‖ ≤ max(rtol‖b‖, atol); the KSP is restarted from its iterate with a tighter
    tolerance when its own test was looser), ``route_transpose`` (known-bad transposes:
    True = solve with an explicit Aᵀ and its own setup, False = refuse), ``check_transpose``
    (verify combinations missing from the table at setup; one extra pair of solves).

    Cost: ``init`` = one MatDuplicate (the factor's copy, symmetry flag kept) + one KSPSetUp
    (+ O(nnz) norms and one solve for the conditioning check of direct solvers); each solve =
    one KSPSolve(Transpose) + one MatMult for the true-residual check. Adjoint: the same
    setup (KSPSolveTranspose), never a new factorization unless routed (counted).

    >>> import solvers as sv
    >>> sv.PETSc(ksp_type="cg", pc_type="gamg", rtol=1e-12).combo
    'cg+gamg'
    """

    ksp_type: str = "preonly"
    pc_type: str = "lu"
    factor_solver_type: str | None = None
    options: Any = None
    rtol: float = 1e-10
    atol: float = 0.0
    maxiter: int = 10000
    route_transpose: bool = True
    check_transpose: bool = True

    def __post_init__(self):
        for name in ("ksp_type", "pc_type"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise TypeError(f"{name} must be a PETSc type name such as 'cg', got {v!r}")
            object.__setattr__(self, name, v.lower())
        fst = self.factor_solver_type
        if fst is None and self.pc_type in ("lu", "cholesky"):
            fst = "mumps"
        if fst is not None and self.pc_type not in ("lu", "cholesky", "ilu", "icc"):
            raise ValueError(f"factor_solver_type={fst!r} needs a factorization PC (lu, "
                             f"cholesky, ilu, icc), got pc_type={self.pc_type!r}")
        object.__setattr__(self, "factor_solver_type", None if fst is None else fst.lower())
        opts = dict(self.options or {})
        if not isinstance(self.options or {}, Mapping):
            raise TypeError(f"options must be a mapping of PETSc option names to values, got "
                            f"{type(self.options).__name__}")
        bad = [k for k in opts if not isinstance(k, str) or k.startswith("-")]
        if bad:
            raise ValueError(f"option names are given without the leading '-': {bad}")
        object.__setattr__(self, "options", tuple(sorted((k, _optval(v)) for k, v in opts.items())))
        if not (self.rtol >= 0 and self.atol >= 0 and self.maxiter >= 1):
            raise ValueError(f"need rtol >= 0, atol >= 0, maxiter >= 1; got rtol={self.rtol}, "
                             f"atol={self.atol}, maxiter={self.maxiter}")

    @property
    def combo(self) -> str:
        """The combination's name as in :data:`TRANSPOSE_TABLE` and ``python -m linops info``:
        ``"ksp+pc"``, with the factorization package in parentheses when there is one.

        >>> import solvers as sv
        >>> sv.PETSc().combo
        'preonly+lu(mumps)'
        """
        return _combo(self.ksp_type, self.pc_type, self.factor_solver_type)

    @property
    def iterative(self) -> bool:
        """True for a Krylov KSP (its true residual is checked against rtol/atol and it may be
        restarted), False for ``preonly`` (a direct solve, checked by its backward error).

        >>> import solvers as sv
        >>> sv.PETSc().iterative, sv.PETSc(ksp_type="cg", pc_type="gamg").iterative
        (False, True)
        """
        return self.ksp_type != "preonly"

    def needs_hermitian(self, A, prob) -> bool:
        """A Cholesky factorization is valid only for a symmetric A (checked, O(nnz))."""
        return self.pc_type == "cholesky"

    def _setup(self, A, prob=None) -> "_PETScFactor":
        """Set up the KSP on a private copy of A (``sv.init`` calls it, through the contract).

        Parameters
        ----------
        A : PETSc operator (``lo.aslinop(petsc4py Mat)``, a PETSc element family's value) or
            ``lo.Sparse`` (copied into a sequential AIJ on this process).
        prob : the LinearProblem, for its hints (``posdef``/``hermitian`` set the symmetry flag).

        Returns
        -------
        The factor that the cache keeps: forward and transposed solves on one KSPSetUp.

        Raises
        ------
        BackendNotSupported
            petsc4py missing, a sequential factorization asked on several ranks, SuperLU_dist
            on PETSc 3.18, a complex matrix on a real PETSc build, or an operand PETSc cannot
            hold.
        NotHermitianError
            ``pc_type="cholesky"`` on a nonsymmetric A (‖A − Aᵀ‖∞ named).
        SingularMatrixError
            a zero pivot, or a direct factorization with rcond below ~1e3·eps.

        Cost: one MatDuplicate + one KSPSetUp (+ one random transposed check for a combination
        missing from :data:`TRANSPOSE_TABLE`).
        """
        if self.factor_solver_type == "superlu_dist" and \
                tuple(_lib().Sys.getVersion()[:2]) == TABLE_VERSION:
            raise BackendNotSupported(
                "SuperLU_dist in PETSc 3.18 returns wrong transposed solves (relative residual "
                "0.82 / 1.2) and a second SuperLU_dist factorization in the same process corrupts "
                "the heap (malloc aborts at exit, in plain petsc4py too): use "
                "factor_solver_type='mumps', which is verified for adjoint solves")
        op, temporary = _as_petsc_operator(A)
        try:
            return _PETScFactor(self, op, prob)
        finally:
            if temporary:  # the factor keeps its own copy
                op.mat.destroy()


def _destroy(*objs) -> None:
    """Destroy petsc4py objects now. petsc4py 3.18 does not free a dropped object (it keeps it
    as "garbage" until a collective ``PETSc.garbage_cleanup``): temporaries are destroyed where
    they were made — collectively, as they were made — and what a factor owns is destroyed by
    :meth:`_PETScFactor.close` or collected at the next PETSc setup (``_collect``)."""
    for o in objs:
        if o is not None:
            o.destroy()


def _collect(comm) -> None:
    """Free the PETSc objects Python dropped (earlier factors, a family's matrices). Called at
    setups — init and update are collective — so every rank frees at the same point."""
    _lib().garbage_cleanup(comm)


def _transposed_copy(mat):
    """A NEW Mat holding matᴴ (matᵀ on a real build). petsc4py's ``mat.transpose()`` and
    ``mat.hermitianTranspose()`` without an output argument transpose ``mat`` IN PLACE (an
    earlier version of this module transposed the factor's own Mat, and the caller's for a
    conjugate-transposed operator, that way)."""
    lib = _lib()
    out = lib.Mat()
    return mat.transpose(out) if _real_build() else mat.hermitianTranspose(out)


def _petsc_hermitian_defect(A) -> tuple[float, float, None]:
    """(‖A − Aᴴ‖∞, ‖A‖∞, None) of a PETSc operator: ``sv.Cholesky``'s check in O(nnz),
    collective (no entry-wise maximum and position: PETSc has no max-abs matrix norm)."""
    lib = _lib()
    if hasattr(A, "check_current"):
        A.check_current()
    T = _transposed_copy(A.mat)
    D = A.mat.duplicate(copy=True)
    D.axpy(-1.0, T, structure=lib.Mat.Structure.DIFFERENT_NONZERO_PATTERN)
    defect, scale = D.norm(lib.NormType.INFINITY), A.mat.norm(lib.NormType.INFINITY)
    T.destroy()
    D.destroy()
    return float(defect), float(scale), None


def _register_defect() -> None:
    hermitian_defect.register(PETScMatrix, _petsc_hermitian_defect)


_register_defect()


def _optval(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _as_petsc_operator(A):
    """(PETScMatrix, temporary): A itself, or a sequential AIJ copy of a ``lo.Sparse`` on this
    process (temporary: the caller destroys it once the factor copied it)."""
    A = lo.aslinop(A)
    kind = structure(A)
    if kind == "petsc":
        return A, False
    if kind == "sparse":  # serial data: a sequential AIJ copy on this process
        lib = _lib()
        why = _real_build_refuses(A.dtype)
        if why is not None:
            raise BackendNotSupported(why)
        S = A.to_scipy().tocsr()
        S.sort_indices()
        M = lib.Mat().createAIJ(S.shape, csr=(S.indptr.astype(lib.IntType),
                                              S.indices.astype(lib.IntType),
                                              S.data.astype(lib.ScalarType)), comm=lib.COMM_SELF)
        M.assemble()
        return PETScMatrix(M), True
    raise BackendNotSupported(f"sv.PETSc solves a PETSc matrix (lo.aslinop(petsc4py Mat), a "
                              f"PETScElementFamily) or a sparse lo.Sparse; got {type(A).__name__}")


def _mumps_factorization(spec: PETSc) -> bool:
    """True when the PC is a MUMPS LU or Cholesky factorization of A (it knows det A)."""
    return spec.pc_type in ("lu", "cholesky") and spec.factor_solver_type == "mumps"


def _setup_error(e, spec, what: str) -> Exception:
    code = getattr(e, "ierr", None)
    combo = spec.combo
    if code == 92:
        return BackendNotSupported(
            f"{what}: PETSc has no '{spec.factor_solver_type}' factorization for this matrix "
            f"(error 92); {sorted(SEQUENTIAL_FACTOR)} run on ONE rank only: use "
            f"factor_solver_type='mumps' in parallel")
    if code in (71, 81, 76):
        return SingularMatrixError(
            f"{what} with {combo} failed (PETSc error {code}: zero pivot or the factorization "
            f"library's error); {Status.SINGULAR.message}")
    if code in (56, 86):
        lib = _lib()
        names = lambda kind: ", ".join(sorted(v for k, v in vars(kind).items()  # noqa: E731
                                              if k.isupper() and isinstance(v, str)))
        return BackendNotSupported(f"{what}: PETSc does not support {combo} here (error {code}: "
                                   f"unknown type or unsupported operation). KSP types: "
                                   f"{names(lib.KSP.Type)} (BiCGStab is 'bcgs'); PC types: "
                                   f"{names(lib.PC.Type)}")
    return SolveError(f"{what} with {combo} failed with PETSc error {code}")


def _setup_levels(ksp) -> None:
    """Multigrid (GAMG/MG) sets up its smoothers and coarse solver lazily, at the first
    PCApply; do it now so that init holds all setup work (and its failures)."""
    pc = ksp.getPC()
    if pc.getType() not in ("gamg", "mg"):
        return
    for level in range(1, pc.getMGLevels()):
        smoother = pc.getMGSmoother(level)
        smoother.setUp()
        smoother.setUpOnBlocks()
    coarse = pc.getMGCoarseSolve()
    coarse.setUp()
    coarse.setUpOnBlocks()


class _PETScFactor(Factor):
    """One KSP (and, when routed, a second one on Aᵀ) set up once on the factor's own Mat."""

    def __init__(self, spec: PETSc, A, prob):
        lib = _lib()
        A.check_current()
        _collect(A.mat.getComm())
        self.spec = spec
        self.comm = A.mat.getComm()
        self.size = self.comm.getSize()
        self.iterations = 0
        self.transpose_setups = 0
        self.last_status = Status.SUCCESS
        self.history: list[float] = []
        self._retired = False
        self.dtype = np.dtype(lib.ScalarType)
        self.requires_hermitian = spec.pc_type == "cholesky"
        # the factor's own copy: user edits never reach it; update() copies new values into it
        self.mat = _transposed_copy(A.mat) if A.conjugate_transposed else A.mat.duplicate(copy=True)
        # symmetry is VERIFIED (MatIsSymmetric, O(nnz)), never taken from a hint or a flag; a
        # symmetric Mat is flagged so (MatDuplicate drops the flag, and without it GAMG
        # symmetrizes its graph: 88 MB instead of 71 MB at n = 2.5·10⁵, Poisson Q4)
        self._flag_symmetry()
        self.structure_key = A.structure_key
        self.ksp = self._make_ksp(self.mat, "setup")
        self._anorm = {}
        self._absmat = None
        if not spec.iterative:
            self._rcond_check()
        self._tmat = self._tksp = None
        self.transpose_mode, self.transpose_note = self._decide_transpose()
        self.kind = (f"PETSc {spec.combo} on {self.size} rank(s); transposed solves: "
                     f"{self.transpose_note}")

    # ----- setup ----------------------------------------------------------------------------------
    def _make_ksp(self, mat, what: str):
        """A KSP + PC on ``mat`` as the spec says (its options under a prefix of its own), set
        up (``what`` names the step in errors); destroyed again if the setup fails."""
        lib, spec = _lib(), self.spec
        ksp = lib.KSP().create(mat.getComm())
        ksp.setOperators(mat)
        try:  # an unknown type name is PETSc error 86: BackendNotSupported, not a bare Error
            ksp.setType(spec.ksp_type)
            pc = ksp.getPC()
            pc.setType(spec.pc_type)
            if spec.factor_solver_type:
                pc.setFactorSolverType(spec.factor_solver_type)
        except lib.Error as e:
            ksp.destroy()
            raise _setup_error(e, spec, what) from None
        ksp.setTolerances(rtol=spec.rtol, atol=spec.atol, max_it=spec.maxiter)
        names = dict(spec.options)
        if spec.pc_type == "gamg" and "pc_gamg_reuse_interpolation" not in names:
            names["pc_gamg_reuse_interpolation"] = "true"        # update(): keep the hierarchy
        if _mumps_factorization(spec) and "mat_mumps_icntl_33" not in names:
            names["mat_mumps_icntl_33"] = "1"    # MUMPS computes det A with the factors (logdet)
        prefix = f"linops{id(ksp):x}_"
        opts = lib.Options(prefix)
        for k, v in names.items():
            opts[k] = v
        ksp.setOptionsPrefix(prefix)
        try:
            ksp.setFromOptions()
            if spec.ksp_type == "cg" and "ksp_norm_type" not in names:  # after setFromOptions
                ksp.setNormType(lib.KSP.NormType.UNPRECONDITIONED)  # rtol on ‖b − Ax‖, not ‖M(b − Ax)‖
            ksp.setConvergenceHistory(reset=True)   # each solve's own history, not all solves'
            # set up while the options are still in the database: the factor matrix (MUMPS's
            # mat_mumps_* options) and GAMG's levels read theirs at PCSetUp, not at
            # KSPSetFromOptions
            self._setup(ksp, what)
        except Exception:
            ksp.destroy()
            raise
        finally:
            for k in names:
                opts.delValue(k)
        return ksp

    def _setup(self, ksp, what: str) -> None:
        lib = _lib()
        ksp.setErrorIfNotConverged(True)  # a failed factorization raises here, not at a solve
        try:
            ksp.setOperators(*ksp.getOperators())  # new values in the same Mat: PCSetUp runs now,
            ksp.setUp()                            # numerically (SAME_NONZERO_PATTERN)
            ksp.setUpOnBlocks()                    # block factorizations too, not at solve 1
            _setup_levels(ksp)
        except lib.Error as e:
            raise _setup_error(e, self.spec, what) from None
        finally:
            ksp.setErrorIfNotConverged(False)

    def _flag_symmetry(self) -> None:
        """Check whether the factor's Mat is symmetric (Hermitian on a complex build) to the
        tolerance of ``sv.Cholesky`` and flag it accordingly (a stale flag from the previous
        values is replaced: MatCopy keeps flags). Collective, O(nnz)."""
        lib = _lib()
        scale = self.mat.norm(lib.NormType.INFINITY)
        # MatIsSymmetric returns the Mat's symmetry FLAG when one is set, and MatCopy keeps the
        # flag of the previous values: compare with the transpose itself instead
        if _real_build():
            self.symmetric = bool(self.mat.isTranspose(self.mat, hermitian_tol(self.dtype) * scale))
        else:
            defect, _, _ = _petsc_hermitian_defect(self)
            self.symmetric = defect <= hermitian_tol(self.dtype) * max(scale, 1e-300)
        self.mat.setOption(lib.Mat.Option.SYMMETRIC, self.symmetric)

    @property
    def norm_inf(self) -> float:
        """‖A‖∞ = ‖Aᵀ‖₁ (O(nnz), computed once per A: direct solvers and failure messages)."""
        if "inf" not in self._anorm:
            self._anorm["inf"] = self.mat.norm(_lib().NormType.INFINITY)
        return self._anorm["inf"]

    @property
    def norm_one(self) -> float:
        """‖A‖₁ = ‖Aᵀ‖∞ (O(nnz), computed once per A)."""
        if "one" not in self._anorm:
            self._anorm["one"] = self.mat.norm(_lib().NormType.NORM_1)
        return self._anorm["one"]

    def _rcond_check(self, seed: int = 12345) -> None:
        """Direct solvers: reciprocal condition estimate from one solve with a random r,
        rcond ≈ ‖r‖∞ / (‖A‖∞ ‖A⁻¹r‖∞); at or below ``rcond_tol`` (sv.LU's threshold) the
        factorization is singular to working precision (MUMPS does not report null pivots by
        default). Collective."""
        lib = _lib()
        r, x = self.mat.createVecLeft(), self.mat.createVecRight()
        try:
            r.array[:] = np.random.default_rng([seed, self.comm.getRank()]).standard_normal(
                r.getLocalSize())
            self.ksp.solve(r, x)
            inf = lib.NormType.INFINITY
            xmax, rmax = x.norm(inf), r.norm(inf)
        finally:
            _destroy(r, x)
        tol = rcond_tol(self.dtype)
        if not np.isfinite(xmax) or rmax <= tol * self.norm_inf * xmax:
            est = rmax / (self.norm_inf * xmax) if np.isfinite(xmax) and xmax else 0.0
            raise SingularMatrixError(
                f"PETSc {self.spec.combo}: the matrix is singular to working precision: estimated "
                f"reciprocal condition number {est:.3g} <= {tol:.3g}. "
                f"{Status.SINGULAR.message}")

    def logdet(self):
        """log|det A| and its sign from MUMPS's determinant, O(1) after the factorization.

        For a MUMPS LU or Cholesky PC (the one the KSP holds, whatever ``options`` changed), the
        factorization runs with ICNTL(33) = 1 (MUMPS multiplies the pivots as it factorizes;
        no measurable cost: 1.24 s either way at n = 160 000, 2-D Laplacian, one rank), and
        det A = (RINFOG(12) + i·RINFOG(13))·2^INFOG(34), global on every rank. A factorization
        with null pivots (INFOG(28) > 0, e.g. with ICNTL(24) on) is singular: det A = 0 is
        refused as on every engine, never the determinant of the rest. Other combinations
        hold no factorization of A (BackendNotSupported naming a direct solver); a complex
        build's Cholesky is refused (MUMPS factorizes complex matrices as symmetric LDLᵀ, not
        Hermitian: not verified here)."""
        if self._retired:
            raise RuntimeError("this PETSc factor was replaced by update() or closed; use the "
                               "cache's factor")
        pc = self.ksp.getPC()
        kind = pc.getType()
        if kind not in ("lu", "cholesky"):
            return super().logdet()
        if pc.getFactorSolverType() != "mumps":
            raise BackendNotSupported(
                f"logdet: this cache's PC is {kind} with the {pc.getFactorSolverType()!r} "
                f"factorization (options changed the spec's {self.spec.combo}), whose "
                f"determinant PETSc does not expose; use factor_solver_type='mumps'")
        if kind == "cholesky" and not _real_build():
            raise BackendNotSupported(
                "logdet: MUMPS's Cholesky on a complex PETSc build factorizes A as complex "
                "symmetric (LDLᵀ), not Hermitian; use pc_type='lu' for log det")
        F = pc.getFactorMatrix()
        if F.getMumpsIcntl(33) != 1:
            raise BackendNotSupported(
                f"logdet: this cache's MUMPS factorization ran with mat_mumps_icntl_33="
                f"{F.getMumpsIcntl(33)} (given in options), so MUMPS computed no determinant; "
                f"drop that option")
        mant = complex(F.getMumpsRinfog(12), 0.0 if _real_build() else F.getMumpsRinfog(13))
        nulls = F.getMumpsInfog(28)
        if nulls > 0 or mant == 0 or not np.isfinite(abs(mant)):
            raise SingularMatrixError(
                f"logdet: A is singular (MUMPS found {nulls} null pivot(s); determinant "
                f"{mant}·2^{F.getMumpsInfog(34)}): log det A = −inf and its gradient A⁻ᴴ does "
                f"not exist")
        logabs = float(np.log(abs(mant)) + F.getMumpsInfog(34) * np.log(2.0))
        sign = mant / abs(mant)
        return LogDet(float(sign.real) if _real_build() else sign, logabs)

    def _decide_transpose(self) -> tuple[str, str]:
        lib, spec = _lib(), self.spec
        if self.symmetric:
            return "forward", ("A is symmetric (checked, MatIsSymmetric): Aᵀ solves are forward "
                               "solves, accepted against the true Aᵀ")
        bad = [c for c in (spec.pc_type, spec.factor_solver_type) if c in BAD_COMPONENTS]
        if bad:
            return self._bad(f"{bad[0]}: {BAD_COMPONENTS[bad[0]]}, whatever the options")
        key = (spec.ksp_type, spec.pc_type, spec.factor_solver_type)
        entry = TRANSPOSE_TABLE.get(key)
        tuned = any(k.startswith(("pc_", "mat_")) for k, _ in spec.options)
        same_version = tuple(lib.Sys.getVersion()[:2]) == TABLE_VERSION
        if entry is not None and same_version and not tuned:
            measured = entry[1]
            if entry[0] == "verified":
                return "reuse", f"KSPSolveTranspose on the same setup (verified: {measured})"
            return self._bad(f"known {entry[0]} in PETSc 3.18 ({measured})")
        if not spec.check_transpose:
            return "reuse", "KSPSolveTranspose on the same setup (NOT verified: check_transpose=False)"
        ok, rel_t, rel_n = self.verify_transpose()
        self.transpose_check = (rel_t, rel_n, ok)
        if ok:
            return "reuse", (f"KSPSolveTranspose on the same setup (verified at setup: "
                             f"‖Aᵀy − c‖/‖c‖ = {rel_t:.1e}, forward {rel_n:.1e})")
        return self._bad(f"failed the check at setup: ‖Aᵀy − c‖/‖c‖ = {rel_t:.1e} against "
                         f"{rel_n:.1e} forward")

    def _bad(self, why: str) -> tuple[str, str]:
        if self.spec.route_transpose:
            return "route", f"explicit Aᵀ with its own setup, built at the first adjoint solve ({why})"
        return "refuse", f"refused ({why})"

    def verify_transpose(self, seed: int = 2024) -> tuple[bool, float, float]:
        """One random c: (ok, ‖Aᵀy − c‖/‖c‖ with y from KSPSolveTranspose, the same for a forward
        solve). ok when the transposed residual is within 100× the forward one (or 1e-10, or
        10·rtol for iterative KSPs) and the KSP converged. Collective."""
        lib, spec = _lib(), self.spec
        rng = np.random.default_rng([seed, self.comm.getRank()])
        c_np = rng.standard_normal(self.mat.getLocalSize()[0])
        rels = []
        for trans in (True, False):
            c, y, r = self.mat.createVecLeft(), self.mat.createVecRight(), self.mat.createVecLeft()
            try:
                c.array[:] = c_np
                try:
                    (self.ksp.solveTranspose if trans else self.ksp.solve)(c, y)
                except lib.Error:
                    return False, float("inf"), float("nan")
                if self.ksp.getConvergedReason() < 0:
                    rels.append(float("inf"))
                    continue
                (self.mat.multTranspose if trans else self.mat.mult)(y, r)
                r.array[:] -= c_np
                c.array[:] = c_np
                rels.append(r.norm() / max(c.norm(), 1e-300))
            finally:
                _destroy(c, y, r)
        rel_t, rel_n = rels
        bound = max(100 * rel_n, 1e-10, 10 * spec.rtol if spec.iterative else 0.0)
        return bool(rel_t <= bound), rel_t, rel_n

    def _transposed(self):
        """The routed solver: explicit Aᵀ (Aᴴ for complex) with its own KSP and setup."""
        if self._tksp is None:
            self._tmat = _transposed_copy(self.mat)
            self._tksp = self._make_ksp(self._tmat, "setup of the explicit transpose")
            self.transpose_setups += 1
        return self._tksp

    # ----- solves ---------------------------------------------------------------------------------
    def solve(self, B, trans: str):
        if self._retired:
            raise RuntimeError("this PETSc factor was replaced by update(); use the cache's factor")
        lib = _lib()
        B = np.asarray(B)
        nl = self.mat.getLocalSize()[0]
        if B.ndim != 2 or B.shape[0] != nl:
            raise ShapeError(f"B must be this rank's owned slice, shape ({nl}, k); got {B.shape}")
        if B.dtype.kind == "c" and np.dtype(lib.ScalarType).kind != "c":
            # real and imaginary parts apart, each with its share of atol (‖part‖ / ‖column‖,
            # global norms): together they meet max(rtol‖b‖, atol), not √2·atol
            mpi = self.comm.tompi4py()
            sq = mpi.allreduce(np.stack([np.sum(B.real ** 2, axis=0), np.sum(B.imag ** 2, axis=0)]))
            tot = np.sqrt(sq[0] + sq[1])
            shares = [np.where(tot > 0, np.sqrt(q) / np.where(tot > 0, tot, 1.0), 1.0) for q in sq]
            re = self._solve_columns(B.real.copy(), trans, shares[0])
            weakest = self.last_status
            X = re + 1j * self._solve_columns(B.imag.copy(), trans, shares[1])
            if weakest is Status.ACCURACY_LIMIT:
                self.last_status = weakest
            return X
        return self._solve_columns(B, trans, np.ones(B.shape[1]))

    def _solve_columns(self, B, trans: str, shares):
        lib = _lib()
        nl = B.shape[0]
        if trans in ("T", "H") and self.transpose_mode == "refuse":
            raise TransposeNotSupportedError(
                f"{'adjoint' if trans == 'H' else 'transposed'} solve refused: {self.spec.combo} "
                f"{self.transpose_note}. Use factor_solver_type='mumps' (or a GAMG/Jacobi/ASM "
                f"preconditioner), or sv.PETSc(..., route_transpose=True) to solve with an "
                f"explicit transpose (one extra setup)")
        conj = trans == "H" and np.dtype(lib.ScalarType).kind == "c"
        X = np.empty((nl, B.shape[1]), dtype=lib.ScalarType)
        statuses, failure = [], None
        for j in range(B.shape[1]):
            b = np.conj(B[:, j]) if conj else B[:, j]
            try:
                x = self._solve_one(np.ascontiguousarray(b, dtype=lib.ScalarType), trans != "N",
                                    float(shares[j]))
                statuses.append(self.last_status)
            except ConvergenceError as e:  # the other columns still run: the iterate is whole
                if e.iterate is None:
                    raise
                failure, x = failure or e, e.iterate
            X[:, j] = np.conj(x) if conj else x
        if failure is not None:
            raise ConvergenceError(str(failure), failure.history, X, failure.status)
        self.last_status = (Status.ACCURACY_LIMIT if Status.ACCURACY_LIMIT in statuses
                            else Status.SUCCESS)
        return X

    def _solve_one(self, b_np, transposed: bool, share: float = 1.0):
        """One column (``share``: of atol, for a part of a complex column; see ``solve``)."""
        lib, spec = _lib(), self.spec
        mode = self.transpose_mode if transposed else "N"
        ksp = self._transposed() if mode == "route" else self.ksp
        run = ksp.solveTranspose if mode == "reuse" else ksp.solve
        # the residual is always the TRUE one: Aᵀ for a transposed solve, however it was run
        op = self.mat.multTranspose if transposed else self.mat.mult
        b, x, r = self.mat.createVecLeft(), self.mat.createVecRight(), self.mat.createVecLeft()
        b.array[:] = b_np
        bnorm = b.norm()
        if bnorm == 0:
            return np.zeros_like(b_np)
        atol = spec.atol * share
        tol = max(spec.rtol * bnorm, atol)
        history: list[float] = []
        ksp.setInitialGuessNonzero(False)
        own = {}  # the KSP's own norm: of its right-hand side (run from 0) and at its last stop

        def once(initial_nonzero: bool, rt: float, at: float):
            """One KSP run (from x when ``initial_nonzero``); the true residual norm."""
            b.array[:] = b_np           # some PCs (hypre) overwrite the right-hand side
            ksp.setTolerances(rtol=rt, atol=at)
            ksp.setInitialGuessNonzero(initial_nonzero)
            run(b, x)
            reason = ksp.getConvergedReason()
            self.iterations += ksp.getIterationNumber() if spec.iterative else 0
            raw = ksp.getConvergenceHistory()
            if not initial_nonzero and len(raw):
                own["rhs"] = float(raw[0])
            own["last"] = float(ksp.getResidualNorm())
            history.extend(float(h) / bnorm for h in raw)
            op(x, r)
            r.array[:] = b_np - r.array
            return reason, r.norm()

        try:
            reason, rnorm = once(False, spec.rtol, atol)
            history.append(rnorm / bnorm)
            if reason < 0 and reason != lib.KSP.ConvergedReason.DIVERGED_MAX_IT:
                raise self._failure(reason, history, x.array.copy(), transposed)
            if not spec.iterative:
                self._check_direct(rnorm, bnorm, x, transposed)
                return x.array.copy()
            outcome = "maxiter" if reason < 0 else "converged"
            best = (rnorm, x.array.copy())
            # the KSP's own test (on the preconditioned norm for GMRES/BiCGStab with a left PC)
            # was met above the true tolerance: keep iterating from x, asking its own norm for
            # what it reached times the measured gap (rtol relative to its own norm of b —
            # PETSc's test with a nonzero initial guess — and atol alike: an atol-bound test
            # ignores a tighter rtol), while each restart lowers the true residual at all
            for _ in range(RESTARTS):
                if best[0] <= tol or outcome != "converged":
                    break
                target = own["last"] * max(0.5 * tol / best[0], 1e-6)
                reason, rnorm = once(True, target / own.get("rhs", bnorm), target)
                history.append(rnorm / bnorm)
                improved = rnorm < best[0]
                if rnorm < best[0]:
                    best = (rnorm, x.array.copy())
                else:
                    x.array[:] = best[1]
                outcome = "maxiter" if reason < 0 else "converged"
                if not improved:
                    break
            rnorm, xbest = best
            x.array[:] = xbest
            omega = functools.cache(lambda: self._backward_error(b_np, x, r, transposed))
            limit = attainable(self.mat.getSize()[0], self.dtype)

            again = []

            def rerun():
                _, r2 = once(True, spec.rtol, atol)
                again.append(x.array.copy())
                move = float(np.linalg.norm(x.array - xbest))
                move, xn = (float(np.sqrt(v)) for v in self.comm.tompi4py().allreduce(
                    np.array([move ** 2, float(np.linalg.norm(xbest)) ** 2])))
                x.array[:] = xbest
                return r2, move, xn

            status, rerun_won = verdict(rnorm, bnorm, tol, omega, limit, outcome, rerun,
                                        self.dtype)
            if rerun_won:
                xbest = again[0]
            self.last_status = status if status.ok else Status.SUCCESS
            if not status.ok:
                raise ConvergenceError(
                    f"PETSc {spec.combo}{' (transposed)' if transposed else ''}: true residual "
                    f"‖b − A x‖/‖b‖ = {rnorm / bnorm:.3g} > rtol={spec.rtol:g}, atol={atol:g} (backward error "
                    f"{omega():.2g}, attainable ≈ {limit:.2g}); {status.message}", history,
                    xbest.copy(), status)
        finally:
            ksp.setTolerances(rtol=spec.rtol, atol=spec.atol)
            ksp.setInitialGuessNonzero(False)
            self.history = history
            _destroy(b, x, r)
        return xbest.copy()

    def _backward_error(self, b_np, x, r, transposed: bool) -> float:
        """Componentwise ω = max |b − op(A)x|ᵢ / (|op(A)||x| + |b|)ᵢ with a |A| Mat built on
        first use: only for an iterate that missed the tolerance (``verdict`` asks). Collective:
        every rank gets the same residual norm, so all of them ask or none."""
        if self._absmat is None:
            M = self.mat.duplicate(copy=True)
            ai, aj, av = M.getValuesCSR()
            M.setValuesCSR(ai, aj, np.abs(av))
            M.assemble()
            self._absmat = M
        ax, y = x.duplicate(), r.duplicate()
        try:
            ax.array[:] = np.abs(x.array)
            (self._absmat.multTranspose if transposed else self._absmat.mult)(ax, y)
            local = backward_error(np.abs(r.array), y.array + np.abs(b_np))
        finally:
            _destroy(ax, y)
        # optional: mpi4py (the petsc extra)
        from mpi4py import MPI

        return float(self.comm.tompi4py().allreduce(local, op=MPI.MAX))

    def _check_direct(self, rnorm, bnorm, x, transposed: bool) -> None:
        lib = _lib()
        anorm = self.norm_one if transposed else self.norm_inf
        eta = rnorm / (anorm * x.norm(lib.NormType.INFINITY) + bnorm)
        if eta <= DIRECT_BACKWARD_TOL:
            return
        if transposed:
            raise SolveError(
                f"the transposed solve of {self.spec.combo} is wrong: backward error {eta:.2e} > "
                f"{DIRECT_BACKWARD_TOL:g} (‖Aᵀx − c‖/‖c‖ = {rnorm / bnorm:.2e}); this "
                f"combination does not transpose correctly here: use mumps, or "
                f"route_transpose=True with a table entry", Status.BREAKDOWN)
        raise SingularMatrixError(
            f"{self.spec.combo}: backward error {eta:.2e} > {DIRECT_BACKWARD_TOL:g} "
            f"(‖b − A x‖/‖b‖ = {rnorm / bnorm:.2e}); {Status.SINGULAR.message}")

    def _failure(self, reason: int, history, iterate, transposed: bool) -> Exception:
        lib = _lib()
        R = lib.KSP.ConvergedReason
        names = {v: k for k, v in vars(R).items() if k.isupper()}
        what = f"PETSc {self.spec.combo}{' (transposed)' if transposed else ''}: {names.get(reason, reason)}"
        if reason == R.DIVERGED_PCSETUP_FAILED:
            return SingularMatrixError(f"{what}; {Status.SINGULAR.message}")
        if reason == R.DIVERGED_MAX_IT:
            return ConvergenceError(f"{what} after {self.spec.maxiter} iterations, relative "
                                    f"residual {history[-1]:.3g} > rtol={self.spec.rtol:g}; "
                                    f"{Status.MAX_ITERATIONS.message}", history, iterate)
        if reason == R.DIVERGED_NANORINF:
            return ConvergenceError(f"{what}; {Status.NONFINITE.message}", history, None,
                                    Status.NONFINITE)
        return ConvergenceError(f"{what}; {Status.BREAKDOWN.message}", history, iterate,
                                Status.BREAKDOWN)

    # ----- update ---------------------------------------------------------------------------------
    def _refactor(self, A_new) -> "_PETScFactor":
        """Numeric refactorization for a matrix with the same structure_key: its values are
        copied into the factor's Mat (SAME_NONZERO_PATTERN) and KSPSetUp reruns numerically;
        the symmetry of the NEW values is checked again and decides how adjoints are solved.
        On failure the old values are restored and this factor stays usable."""
        lib = _lib()
        if self._retired:  # its Mat and KSP may be destroyed: touching them aborts MPI
            raise RuntimeError("this PETSc factor was replaced by update() or closed; use the "
                               "cache's factor")
        A_new, temporary = _as_petsc_operator(A_new)
        try:
            A_new.check_current()
            if A_new.structure_key != self.structure_key or A_new.conjugate_transposed:
                raise ValueError("refactor needs a matrix with the same structure_key (pattern "
                                 "and layout); call setup() for a new structure")
            _collect(self.comm)
            same = lib.Mat.Structure.SAME_NONZERO_PATTERN
            backup, old_flag = self.mat.duplicate(copy=True), self.symmetric
            A_new.mat.copy(self.mat, structure=same)
        finally:
            if temporary:
                A_new.mat.destroy()
        self._flag_symmetry()
        norms, self._anorm = self._anorm, {}
        try:
            self._setup(self.ksp, "numeric refactorization")
            if not self.spec.iterative:
                self._rcond_check()
            if self._tksp is not None:
                self._tmat.destroy()
                self._tmat = _transposed_copy(self.mat)
                self._tksp.setOperators(self._tmat)
                self._setup(self._tksp, "numeric refactorization of the explicit transpose")
                self.transpose_setups += 1
        except Exception:
            backup.copy(self.mat, structure=same)
            self.symmetric = old_flag
            self.mat.setOption(lib.Mat.Option.SYMMETRIC, old_flag)
            # a KSP whose PCSetUp failed keeps MUMPS in a failed state (the next solve stops
            # with INFOG(1) = -3): the previous values get a fresh KSP, set up from scratch
            self.ksp.destroy()
            self.ksp = self._make_ksp(self.mat, "restoring the previous factorization")
            if self._tksp is not None:  # the routed transpose: rebuilt on its next use
                self._tksp.destroy()
                self._tmat.destroy()
                self._tksp = self._tmat = None
            self._anorm = norms
            raise
        finally:
            backup.destroy()
        new = object.__new__(_PETScFactor)
        new.__dict__.update(self.__dict__)
        new.iterations, new.history, new._absmat = self.iterations, [], None
        # the new values decide how adjoints are solved: a symmetric matrix at init may be
        # followed by a nonsymmetric one with the same pattern (its adjoint is then no longer a
        # forward solve)
        if new.symmetric != old_flag:
            new.transpose_mode, new.transpose_note = new._decide_transpose()
            new.kind = (f"PETSc {self.spec.combo} on {self.size} rank(s); transposed solves: "
                        f"{new.transpose_note}")
        self._retired = True
        return new

    def close(self) -> None:
        """Destroy the factor's PETSc objects now (collective); the factor cannot solve after."""
        _destroy(self.ksp, self._tksp, self._tmat, self._absmat, self.mat)
        self._tksp = self._tmat = self._absmat = None
        self._retired = True


def transpose_support() -> list[str]:
    """Lines for ``python -m linops info``: which PETSc solvers transpose correctly here."""
    try:
        lib = _lib()
    except BackendNotSupported:
        return ["PETSc: petsc4py not installed (pip install \"linops[petsc]\" after apt-get "
                "install libpetsc-real-dev openmpi-bin)"]
    v = ".".join(str(i) for i in lib.Sys.getVersion())
    kind = "complex" if np.dtype(lib.ScalarType).kind == "c" else "real"
    lines = [f"PETSc {v} ({kind}) transposed/adjoint solves (‖Aᵀy − b‖/‖b‖ measured on 1 / 2 "
             f"ranks with PETSc {'.'.join(map(str, TABLE_VERSION))}):"]
    for (ksp, pc, fst), (result, measured) in TRANSPOSE_TABLE.items():
        action = {"verified": "reuses the setup",
                  "wrong": "routed via explicit Aᵀ (or refused)",
                  "unsupported": "routed via explicit Aᵀ (or refused)"}[result]
        if ksp in SYMMETRIC_KSP:
            action = "on a symmetric A (checked) a forward solve; else as measured"
        lines.append(f"  {_combo(ksp, pc, fst):<24} {result:<11} {measured:<40} {action}")
    lines.append("  a matrix checked symmetric (MatIsSymmetric): Aᵀ solves are forward solves; every "
                 "transposed result is accepted against the true Aᵀ only")
    lines.append("  any other combination: verified at setup with one random right-hand side")
    if tuple(lib.Sys.getVersion()[:2]) != TABLE_VERSION:
        lines.append(f"  (PETSc {v} differs from the measured version: every combination is "
                     f"verified at setup)")
    return lines
