"""The measured methods of ``python -m linops bench``: each computes the value and gradient of
f(θ) = aᵀK(θ)⁻¹b with respect to θ (one parameter per cell of a 2-D Q4 heat-conduction family)
and with respect to K's stored values.

Two kinds of method:

* one per algorithm of the solver registry that takes sparse matrices, named as
  ``sv.solve(prob, name)`` names it (``lu``, ``cholesky``, ``pardiso``, ``cg``, ``auto``, ...;
  an engine registered later is a bench method without an edit here), plus ``cg-amg``
  (``sv.CG(precond=sv.AMG())``, named by :func:`slug_of` from its algorithm and
  preconditioner) and ``jax`` (the same f under ``jax.jit(jax.value_and_grad)``);
* the references: ``scipy`` (the adjoint written by hand), ``dense-gradient`` (what an AD system
  materialises), ``jax-spsolve`` and ``dense-jax``.

A method is built from the problem and returns three callables: ``forward()`` (the value only),
``full()`` (value + both gradients; returns what ``extra`` reads) and ``extra(result)`` (the
factorization count, the bytes of the gradient it produced, and for linops methods the engine
the cache reports).

>>> sorted(set(DEFAULT) - set(METHODS))       # every default is a method
[]
>>> METHODS["lu"].label, METHODS["cg-amg"].label
('linops LU', 'linops CG + AMG (pyamg)')
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import adjoints as ad
import linops as lo
import solvers as sv
from solvers.internals import entries


def installed(dist: str) -> bool:
    """Whether distribution ``dist`` is installed (its metadata; nothing is imported)."""
    try:
        importlib.metadata.version(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@dataclass(frozen=True)
class Method:
    """A benchmarked way to compute value + gradient.

    Attributes
    ----------
    slug : str
        What you type (``--methods lu jax``); matched as the registry matches names.
    label : str
        The table's wording (linops rows add the engine that ran, see :func:`row_label`).
    build : callable
        ``build(fam, b, theta, a) -> (forward, full, extra)``.
    summary : str
        One line for ``--help`` (a registry method: the registry's summary).
    needs : tuple of str
        Distributions that must be installed, else the row says "not installed".
    requires : callable or None
        For registry methods, the entry's ``unavailable`` (None when it runs here).
    dense_bytes : int
        Bytes of n×n arrays per unknown² it allocates (0 for lazy methods), used to skip sizes
        that do not fit.
    dense_solve : bool
        It factorizes a dense n×n matrix (O(n³)).
    jit : bool
        Its first call at a new shape compiles (JAX), so that call is never a timing.
    engine : bool
        Its rows name the engine the cache ran (registry methods).
    spd_only : bool
        It runs the SPD problem only (a Cholesky by hand).
    hand : bool
        A hand-written adjoint: the references ``sv.Auto`` is compared with.
    """

    slug: str
    label: str
    build: Callable
    summary: str = ""
    needs: tuple[str, ...] = ()
    requires: Callable[[], str | None] | None = None
    dense_bytes: int = 0
    dense_solve: bool = False
    jit: bool = False
    engine: bool = False
    spd_only: bool = False
    hand: bool = False

    def unavailable(self) -> str | None:
        """None when the method can run here, else why not (a missing optional dependency)."""
        missing = [d for d in self.needs if not installed(d)]
        if missing:
            return f"needs {', '.join(missing)}"
        return self.requires() if self.requires is not None else None


def slug_of(alg) -> str:
    """The name of an algorithm object: its registry name, and its preconditioner's after a
    '-' (``sv.CG(precond=sv.AMG())`` is ``cg-amg``).

    >>> slug_of(sv.LU()), slug_of(sv.CG(precond=sv.AMG())), slug_of(sv.GMRES(precond=sv.ILU()))
    ('lu', 'cg-amg', 'gmres-ilu')
    """
    precond = getattr(alg, "precond", None)
    if precond is None:
        return alg.name
    return f"{alg.name}-{getattr(type(precond), 'name', '') or type(precond).__name__.lower()}"


def engine_name(kind: str) -> str:
    """The engine in a cache's ``kind`` without its details: 'PARDISO (mtype 2)' → 'PARDISO',
    'CG + AMG(sa): 2 levels, ...' → 'CG + AMG(sa)'.

    >>> engine_name("PETSc preonly+lu(mumps) on 1 rank(s); transposed solves: ...")
    'PETSc preonly+lu(mumps)'
    """
    return re.split(r" \(|:|;| \[| on ", kind, maxsplit=1)[0].strip()


def row_label(method: Method, kind: str | None) -> str:
    """The table label of a measured row: a registry method adds the engine that ran when the
    algorithm's name does not already say it ('linops LU (SuperLU)', 'linops Auto (CHOLMOD)',
    'linops Pardiso').

    >>> row_label(METHODS["lu"], "SuperLU"), row_label(METHODS["pardiso"], "PARDISO (mtype 2)")
    ('linops LU (SuperLU)', 'linops Pardiso')
    """
    if not method.engine or not kind:
        return method.label
    engine = engine_name(kind)
    if engine.lower() in method.label.lower():
        return method.label
    return f"{method.label} ({engine})"


PROBLEMS = ("spd", "nonsymmetric")


def problem(nx: int, kind: str = "spd"):
    """(fam, b, θ, a) for an nx×nx grid: n = nx(nx+1) unknowns, about 9n stored entries; the
    heat-conduction family (``kind="spd"``, ``lo.testing.poisson_family``) or its
    convection–diffusion twin (``"nonsymmetric"``, Péclet 1 per cell, the same pattern).

    Cost: O(n) to build the family.

    >>> fam, b, theta, a = problem(3)
    >>> fam.shape, theta.shape, a.shape
    ((12, 12), (9,), (12,))
    """
    make = {"spd": lo.testing.poisson_family,
            "nonsymmetric": lo.testing.convection_diffusion_family}[kind]
    fam, b = make(nx)
    rng = np.random.default_rng(0)
    return fam, b, 0.5 + rng.random(fam.n_params), rng.standard_normal(fam.shape[0])


def _linops(make_alg: Callable):
    """The linops method for the algorithm ``make_alg()`` makes: ``sv.solve`` with the posdef
    hint, one ``ad.solve_pullback`` (one adjoint solve, same factors), the gradient on K's
    stored values by ``lo.project`` (an SDDMM) and its θ-gradient by ``fam.pullback``."""
    def build(fam, b, theta, a, spd=True):
        alg = make_alg()
        hint = True if spd else None      # the nonsymmetric problem gives no hint

        def forward():
            return sv.solve(sv.LinearProblem(fam(theta), b, posdef=hint), alg).u

        def full():
            K = fam(theta)
            sol = sv.solve(sv.LinearProblem(K, b, posdef=hint), alg)
            g = ad.solve_pullback(sol, a)          # Ā = RankOne(−λ, u): one adjoint solve
            gK = lo.project(g.A, like=K)           # gradient w.r.t. K's stored values (SDDMM)
            return a @ sol.u, fam.pullback(gK), g, sol

        return forward, full, lambda r: {"factorizations": r[3].stats.factorizations,
                                         "payload_bytes": lo.payload_nbytes(r[2].A),
                                         "kind": r[3].cache.kind}
    return build


def _linops_jax(fam, b, theta, a, spd=True):
    """``jax.jit(jax.value_and_grad(f))`` with f through ``adjoints.jax.solve`` (Auto, posdef
    hint): one host factorization per evaluation, counted by ``adj.stats()``."""
    import jax  # optional dependencies: imported only by the methods that use them

    jax.config.update("jax_enable_x64", True)
    # optional: jax (the jax extra)
    import jax.numpy as jnp

    import adjoints.jax as adj

    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)

    def f(th):
        return jnp.dot(aj, adj.solve(fam(th), bj, posdef=True if spd else None))  # as numpy

    vg, fj = jax.jit(jax.value_and_grad(f)), jax.jit(f)

    def full():
        adj.reset_stats()
        v, g = vg(tj)
        g.block_until_ready()
        return v, g, adj.stats()

    return (lambda: fj(tj).block_until_ready()), full, \
        lambda r: {"factorizations": r[2].factorizations, "payload_bytes": int(r[1].nbytes)}


def _scipy_by_hand(fam, b, theta, a, spd=True):
    """What a careful scipy user writes: assemble K = M θ on the pattern, ``splu`` once, solve
    with K and (``trans='T'``) with Kᵀ, the gradient on the stored entries −λᵢuⱼ, θ̄ = Mᵀ gK.

    One factorization per evaluation, like linops; the gradient it keeps is the nnz values
    (a dense array of the stored entries), against linops's RankOne of 2n values."""

    P = fam.pattern
    M = fam.MH.to_scipy().T.tocsr()  # θ ↦ values, as a hand-written script would keep it

    def assemble():
        return sp.csc_matrix(sp.csr_matrix((M @ theta, P.indices, P.indptr), shape=P.shape))

    def full():
        lu = spl.splu(assemble())
        u = lu.solve(b)
        lam = lu.solve(a, trans="T")
        gK = -lam[P.rows] * u[P.indices]
        return a @ u, M.T @ gK, gK

    return (lambda: spl.splu(assemble()).solve(b)), full, \
        lambda r: {"factorizations": 1, "payload_bytes": int(r[2].nbytes)}


def _hand_parts(fam):
    """What every hand-written reference builds once: the assembly map M (θ ↦ K's values, scipy
    CSR, the same map linops uses), ``assemble()`` → scipy CSR K(θ) and ``grad(u, λ)`` →
    θ̄ = −Mᵀ(λᵢuⱼ) on the pattern."""

    P = fam.pattern
    M = fam.MH.to_scipy().T.tocsr()
    MT = sp.csr_matrix(M.T)

    def assemble(theta):
        return sp.csr_matrix((M @ theta, P.indices, P.indptr), shape=P.shape)

    def grad(u, lam):
        return -(MT @ (lam[P.rows] * u[P.indices]))

    return assemble, grad


def _superlu_symmetric_by_hand(fam, b, theta, a, spd=True):
    """A scipy user who reads SuperLU's guide: ``splu`` in symmetric mode (MMD on Aᵀ + A,
    ``diag_pivot_thresh=0.01``, ``SymmetricMode``) for this structurally symmetric pattern, the
    adjoint by ``trans='T'``."""

    assemble, grad = _hand_parts(fam)
    mode = dict(permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.01,
                options=dict(SymmetricMode=True))

    def full():
        lu = spl.splu(assemble(theta).tocsc(), **mode)
        u = lu.solve(b)
        lam = lu.solve(a, trans="T")
        return a @ u, grad(u, lam), u

    return (lambda: spl.splu(assemble(theta).tocsc(), **mode).solve(b)), full, \
        lambda r: {"factorizations": 1, "payload_bytes": int(r[2].nbytes) * 2}


def _cholmod_by_hand(fam, b, theta, a, spd=True):
    """scikit-sparse as its documentation shows it: ``cholmod.cholesky(K)``, ``F(b)``, and the
    adjoint ``F(a)`` (K is symmetric); SPD problems only."""
    if not spd:
        raise ValueError("CHOLMOD by hand: a Cholesky factorization needs the SPD problem")
    from sksparse import cholmod  # the optional dependency: only this method needs it

    assemble, grad = _hand_parts(fam)

    def full():
        F = cholmod.cholesky(assemble(theta).tocsc())
        u, lam = F(b), F(a)
        return a @ u, grad(u, lam), u

    return (lambda: cholmod.cholesky(assemble(theta).tocsc())(b)), full, \
        lambda r: {"factorizations": 1, "payload_bytes": int(r[2].nbytes) * 2}


def _pardiso_by_hand(fam, b, theta, a, spd=True):
    """pypardiso as a script uses it: one ``PyPardisoSolver`` made once (its constructor's
    search for MKL is a one-time cost, outside the timing), ``factorize`` + ``solve``; SPD:
    the real symmetric positive definite type on the upper triangle (mtype 2), whose adjoint is
    a forward solve; nonsymmetric: mtype 11, the adjoint by ``iparm(12) = 2`` (Aᵀx = b) on the
    same factors."""
    from pypardiso import PyPardisoSolver  # the optional dependency: only this method needs it

    assemble, grad = _hand_parts(fam)
    ps = PyPardisoSolver(mtype=2 if spd else 11)

    def factor():
        K = assemble(theta)
        A = sp.triu(K, format="csr") if spd else K
        A.sort_indices()
        ps.factorize(A)
        return A

    def full():
        A = factor()
        u = ps.solve(A, b)
        if not spd:
            ps.set_iparm(12, 2)
        lam = ps.solve(A, a)
        ps.set_iparm(12, 0)
        return a @ u, grad(u, lam), u

    def forward():
        A = factor()
        return ps.solve(A, b)

    return forward, full, lambda r: {"factorizations": 1, "payload_bytes": int(r[2].nbytes) * 2}


def _dense_gradient(fam, b, theta, a, spd=True):
    """The same solves, but the gradient w.r.t. K written out as the dense n×n −λuᵀ (what an AD
    system materialises): n² memory, skipped where it does not fit.

    8·n² bytes: 0.8 GB at n = 10 100, 206 GB at n = 160 400 (the runner reports that instead of
    running it, ``runner.DENSE_BUDGET``)."""

    P = fam.pattern
    M = fam.M.to_scipy()

    def full():
        lu = spl.splu(fam(theta).to_scipy().tocsc())
        u, lam = lu.solve(b), lu.solve(a, trans="T")
        G = -np.outer(lam, u)  # what an AD system materialises
        gK = G[P.rows, P.indices]
        return a @ u, M.T @ gK, G

    return (lambda: spl.splu(fam(theta).to_scipy().tocsc()).solve(b)), full, \
        lambda r: {"factorizations": 1, "payload_bytes": int(r[2].nbytes)}


def _jax_spsolve(fam, b, theta, a, spd=True):
    """f through ``jax.experimental.sparse.linalg.spsolve`` and ``jax.value_and_grad``: JAX's
    own sparse path, a fresh factorization for the solve and another for its transpose."""
    # optional: jax (the jax extra)
    import jax

    jax.config.update("jax_enable_x64", True)
    # optional: jax (the jax extra)
    import jax.numpy as jnp
    from jax.experimental.sparse.linalg import spsolve

    P = fam.pattern
    ind, ptr = jnp.asarray(P.indices, dtype=jnp.int32), jnp.asarray(P.indptr, dtype=jnp.int32)
    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)

    def f(th):
        return jnp.dot(aj, spsolve(fam(th).values, ind, ptr, bj))

    vg = jax.value_and_grad(f)

    def full():
        v, g = vg(tj)
        return v, g.block_until_ready()

    return (lambda: f(tj).block_until_ready()), full, \
        lambda r: {"factorizations": 2, "payload_bytes": int(r[1].nbytes)}


def _dense_jax(fam, b, theta, a, spd=True):
    """f with K scattered into a dense n×n jax array and ``jnp.linalg.solve``: O(n²) memory,
    O(n³) time; only run for small n."""
    # optional: jax (the jax extra)
    import jax

    jax.config.update("jax_enable_x64", True)
    # optional: jax (the jax extra)
    import jax.numpy as jnp

    P = fam.pattern
    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)

    def f(th):
        K = jnp.zeros(P.shape).at[P.rows, P.indices].set(fam(th).values)
        return jnp.dot(aj, jnp.linalg.solve(K, bj))

    vg, fj = jax.jit(jax.value_and_grad(f)), jax.jit(f)

    def full():
        v, g = vg(tj)
        return v, g.block_until_ready()

    return (lambda: fj(tj).block_until_ready()), full, \
        lambda r: {"factorizations": 1, "payload_bytes": P.shape[0] ** 2 * 8}


def _registry_methods() -> list[Method]:
    """One method per registered algorithm that takes sparse matrices (``sv.show_config()``'s
    rows), with the registry's name, summary and availability check.

    Each runs ``cls()`` — the algorithm's defaults — through :func:`_linops`; an engine whose
    optional dependency is missing here gives "not installed" rows (its ``unavailable``), and
    one registered later is a method without an edit here.
    """
    def make(cls):
        return lambda: cls()

    return [Method(e.name, f"linops {e.cls.__name__}", _linops(make(e.cls)),
                   summary=f"sv.{e.cls.__name__}(): {e.summary}", requires=e.unavailable,
                   engine=True)
            for e in entries() if "sparse" in e.structures]


_CG_AMG = sv.CG(rtol=1e-10, precond=sv.AMG())
METHODS: dict[str, Method] = {m.slug: m for m in (
    *_registry_methods(),
    Method(slug_of(_CG_AMG), "linops CG + AMG (pyamg)", _linops(lambda: _CG_AMG),
           summary="sv.CG(rtol=1e-10, precond=sv.AMG()): CG preconditioned by pyamg's smoothed "
                   "aggregation"),
    Method("jax", "linops jax (jit(value_and_grad))", _linops_jax, needs=("jax",), jit=True,
           summary="adjoints.jax.solve under jax.jit(jax.value_and_grad)"),
    Method("scipy", "scipy, adjoint written by hand", _scipy_by_hand, hand=True,
           summary="splu once, solve with K and Kᵀ, the gradient by hand"),
    Method("scipy-symmetric", "scipy splu symmetric mode, by hand", _superlu_symmetric_by_hand,
           hand=True, summary="splu in SuperLU's symmetric mode (MMD_AT_PLUS_A, diag_pivot_thresh=0.01), "
                   "the adjoint by trans='T', by hand"),
    Method("cholmod-hand", "CHOLMOD (scikit-sparse), by hand", _cholmod_by_hand,
           needs=("scikit-sparse",), spd_only=True, hand=True,
           summary="cholmod.cholesky(K), F(b), F(a), the gradient by hand (SPD only)"),
    Method("pardiso-hand", "PARDISO (pypardiso), by hand", _pardiso_by_hand,
           needs=("pypardiso",), hand=True,
           summary="pypardiso factorize + solve (mtype 2 on the upper triangle; 11 with "
                   "iparm(12) for Kᵀ), the gradient by hand"),
    Method("dense-gradient", "dense n×n gradient (scipy)", _dense_gradient, dense_bytes=8,
           summary="the same solves, the gradient w.r.t. K as a dense n×n array"),
    Method("jax-spsolve", "jax spsolve + jax.grad", _jax_spsolve, needs=("jax",), jit=True,
           summary="jax.experimental.sparse.linalg.spsolve under jax.value_and_grad"),
    Method("dense-jax", "dense jax.grad", _dense_jax, needs=("jax",), dense_bytes=24,
           dense_solve=True, jit=True, summary="K as a dense jax array, jnp.linalg.solve"),
)}
DEFAULT = ("lu", "cholesky", "pardiso", "jax", "scipy", "dense-gradient", "jax-spsolve",
           "dense-jax")
