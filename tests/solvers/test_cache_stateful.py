"""Stateful property test of LinearCache (hypothesis RuleBasedStateMachine).

Random sequences of init / solve / solve_adjoint / update (same pattern, new pattern, singular,
complex values, non-Hermitian values) / in-place edits of the user's arrays / failed solves /
pullbacks (of the cache and of an earlier Solution), over LU, Cholesky (dense and CHOLMOD), CG,
GMRES+ILU, Auto, PARDISO and PETSc (in-process). After every step each result equals a fresh
dense computation of the state the cache should be in, or a named error was raised — never a
number from a mixed state.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import adjoints as ad
import linops as lo
import solvers as sv
from solvers.internals import entry

N = 8
ALGS = {"LU": sv.LU, "Cholesky": sv.Cholesky, "CG": lambda: sv.CG(rtol=1e-12),
        "GMRES+ILU": lambda: sv.GMRES(rtol=1e-12, precond=sv.ILU()), "Auto": sv.Auto}
if entry("pardiso").unavailable() is None:
    ALGS["PARDISO"] = sv.Pardiso
if entry("petsc").unavailable() is None:
    ALGS["PETSc"] = sv.PETSc
SPARSE_ONLY = ("GMRES+ILU", "PARDISO", "PETSc")
# what an update to non-Hermitian values does, per algorithm (the posdef hint is on)
NON_HERMITIAN = {"Cholesky": "raises", "Auto": "warns", "PARDISO": "warns", "LU": "takes",
                 "GMRES+ILU": "takes", "PETSc": "takes"}


def _complex_petsc_refused() -> bool:
    from petsc4py import PETSc

    return np.dtype(PETSc.ScalarType).kind != "c"


def spd(seed: int, pattern_seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mask = np.random.default_rng(pattern_seed).random((N, N)) < 0.3
    mask = mask | mask.T
    np.fill_diagonal(mask, True)
    B = np.where(mask, rng.standard_normal((N, N)), 0.0)
    D = (B + B.T) / 2
    D[np.diag_indices(N)] = np.abs(D).sum(axis=1) + 1.0
    return D


class CacheMachine(RuleBasedStateMachine):
    @initialize(alg=st.sampled_from(sorted(ALGS)), sparse=st.booleans(),
                seed=st.integers(0, 10_000))
    def start(self, alg, sparse, seed):
        if alg in SPARSE_ONLY:
            sparse = True
        self.alg, self.sparse = alg, sparse
        self.A_model = spd(seed)                       # what the cache must be solving with
        self.user = sp.csr_matrix(self.A_model) if sparse else self.A_model.copy()
        self.b = np.random.default_rng(seed + 1).standard_normal(N)
        self.sol = sv.solve(sv.LinearProblem(self.user, self.b, hermitian=True, posdef=True),
                            ALGS[alg]())
        self.cache = self.sol.cache
        self.sol_generation = 0
        self.u_rhs = self.b                            # rhs of the solution the cache holds
        self.check(self.sol.u, np.linalg.solve(self.A_model, self.b))

    def check(self, got, want, what="solve"):
        got = np.asarray(got)
        assert got.shape == want.shape
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-300)
        assert err < 1e-9, f"{what}: relative error {err:.2e} (alg {self.alg})"

    # ----- solves ---------------------------------------------------------------------------------
    @rule(k=st.integers(1, 3), seed=st.integers(0, 100))
    def solve(self, k, seed):
        rhs = np.random.default_rng(seed).standard_normal((N, k) if k > 1 else N)
        self.check(self.cache.solve(rhs), np.linalg.solve(self.A_model, rhs))
        self.u_rhs = rhs

    @rule(seed=st.integers(0, 100))
    def solve_adjoint(self, seed):
        c = np.random.default_rng(seed).standard_normal(N)
        self.check(self.cache.solve_adjoint(c), np.linalg.solve(self.A_model.conj().T, c),
                   "adjoint")

    @rule()
    def failed_solve_nan(self):
        bad = np.ones(N)
        bad[3] = np.nan
        with pytest.raises(sv.NonFiniteInputError, match=r"index \(3,\)"):
            self.cache.solve(bad)

    @rule()
    def failed_solve_shape(self):
        with pytest.raises(lo.ShapeError, match=rf"n={N}"):
            self.cache.solve(np.ones(N + 1))

    # ----- state changes --------------------------------------------------------------------------
    @rule(scale=st.floats(0.5, 2.0), seed=st.integers(0, 1000))
    def update_same_pattern(self, scale, seed):
        rng = np.random.default_rng(seed)
        mask = self.A_model != 0
        New = np.where(mask, self.A_model * scale + 0.01 * rng.standard_normal((N, N)), 0.0)
        New = (New + New.conj().T) / 2
        New[np.diag_indices(N)] = np.abs(New).sum(axis=1) + 1.0
        gen = self.cache.generation
        self.cache.update(A=sp.csr_matrix(New) if self.sparse else New)
        self.A_model = New
        assert self.cache.generation == gen + 1 and self.cache.u is None

    @rule(seed=st.integers(0, 1000), pattern_seed=st.integers(1, 50))
    def update_new_pattern(self, seed, pattern_seed):
        New = spd(seed, pattern_seed)
        self.cache.update(A=sp.csr_matrix(New) if self.sparse else New)
        self.A_model = New
        assert self.cache.u is None

    @rule()
    def update_singular_fails_and_keeps_state(self):
        gen, u = self.cache.generation, self.cache.u
        S = self.A_model.copy()
        S[:, 2] = 0.0
        S[2, :] = 0.0
        with pytest.raises((sv.SingularMatrixError, sv.ConvergenceError, sv.SolveError)):
            self.cache.update(A=sp.csr_matrix(S) if self.sparse else S)
            self.cache.solve(self.b)  # iterative methods fail at the solve, not the setup
        if self.cache.generation != gen:  # the update itself went through (iterative setup)
            self.cache.update(A=sp.csr_matrix(self.A_model) if self.sparse else self.A_model)
        else:
            assert self.cache.u is u

    @rule(seed=st.integers(0, 1000))
    def update_complex_values(self, seed):
        """Another dtype kind, same pattern: a full setup in complex (never a real factor fed
        complex values), or BackendNotSupported with nothing changed (a real PETSc build)."""
        if np.iscomplexobj(self.A_model):
            return
        rng = np.random.default_rng(seed)
        mask = self.A_model != 0
        S = np.where(np.triu(mask, 1), 0.2j * rng.standard_normal((N, N)), 0)
        New = self.A_model + S + S.conj().T                     # Hermitian, same pattern
        New[np.diag_indices(N)] = np.abs(New).sum(axis=1) + 1.0
        gen, fact = self.cache.generation, self.cache.stats.factorizations
        user = sp.csr_matrix(New) if self.sparse else New
        if self.alg == "PETSc" and _complex_petsc_refused():
            with pytest.raises(lo.BackendNotSupported, match="complex PETSc build"):
                self.cache.update(A=user)
            assert self.cache.generation == gen
            return
        self.cache.update(A=user)
        self.A_model = New
        assert self.cache.stats.factorizations == fact + 1      # never numeric reuse

    @rule(seed=st.integers(0, 1000))
    def update_non_hermitian(self, seed):
        """The check init makes, update makes: Cholesky refuses, Auto/PARDISO warn and take LU."""
        rule_ = NON_HERMITIAN.get(self.alg)
        if rule_ is None:
            return
        rng = np.random.default_rng(seed)
        mask = np.triu(self.A_model != 0, 1)
        New = self.A_model + np.where(mask, 0.3 + rng.random((N, N)), 0)
        gen = self.cache.generation
        user = sp.csr_matrix(New) if self.sparse else New
        if rule_ == "raises":
            with pytest.raises(sv.NotHermitianError):
                self.cache.update(A=user)
            assert self.cache.generation == gen
            return
        if rule_ == "warns":
            with pytest.warns(sv.HintWarning, match="not Hermitian"):
                self.cache.update(A=user)
        else:
            self.cache.update(A=user)
        self.A_model = New

    @rule(seed=st.integers(0, 100))
    def update_b(self, seed):
        self.b = np.random.default_rng(seed).standard_normal(N)
        self.cache.update(b=self.b)
        assert self.cache.u is None

    @rule(factor=st.floats(-3.0, 3.0))
    def edit_user_array_in_place(self, factor):
        """The snapshot rule: editing the array the user passed never reaches the cache."""
        if self.sparse:
            self.user.data *= factor
        else:
            self.user *= factor

    @rule()
    def operator_arrays_are_read_only(self):
        A = self.cache.A
        arr = A.values if isinstance(A, lo.Sparse) else A.a
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1.0
        if self.cache.u is not None:
            with pytest.raises(ValueError, match="read-only"):
                self.cache.u[0] = 1.0

    # ----- pullbacks ------------------------------------------------------------------------------
    @rule(seed=st.integers(0, 100))
    def pullback_cache(self, seed):
        u = self.cache.u
        ubar = np.random.default_rng(seed).standard_normal(np.shape(u) if u is not None else N)
        if u is None:
            with pytest.raises(sv.StaleSolutionError):
                ad.solve_pullback(self.cache, ubar)
            return
        g = ad.solve_pullback(self.cache, ubar)
        lam = np.linalg.solve(self.A_model.conj().T, ubar)
        uref = np.linalg.solve(self.A_model, self.u_rhs)
        self.check(g.b, lam, "pullback b")
        self.check(lo.to_dense(g.A), -(lam.reshape(N, -1) @ uref.reshape(N, -1).conj().T),
                   "pullback A")

    @rule(seed=st.integers(0, 100))
    def pullback_first_solution(self, seed):
        ubar = np.random.default_rng(seed).standard_normal(N)
        if self.cache.generation != self.sol_generation:
            with pytest.raises(sv.StaleSolutionError, match="earlier A"):
                ad.solve_pullback(self.sol, ubar)
            return
        g = ad.solve_pullback(self.sol, ubar)  # still the A it was solved with
        self.check(g.b, np.linalg.solve(self.A_model.conj().T, ubar), "pullback of the Solution")

    @invariant()
    def solution_belongs_to_current_state(self):
        if getattr(self, "cache", None) is not None and self.cache.u is not None:
            self.check(self.cache.u, np.linalg.solve(self.A_model, self.u_rhs), "cache.u")

    @invariant()
    def never_refactorizes_behind_our_back(self):
        if getattr(self, "cache", None) is not None:
            s = self.cache.stats
            assert s.factorizations + s.numeric_refactorizations == 1 + self.cache.generation


TestCache = CacheMachine.TestCase
TestCache.settings = settings(max_examples=100, stateful_step_count=20, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
