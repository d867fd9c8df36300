"""The measured methods of ``python -m linops bench``: each computes the value and gradient of
f(θ) = aᵀK(θ)⁻¹b with respect to θ (one parameter per cell of a 2-D Q4 heat-conduction family)
and with respect to K's stored values.

A method is built from the problem and returns three callables: ``forward()`` (the value only),
``full()`` (value + both gradients; returns what ``extra`` reads) and ``extra(result)`` (the
factorization count and the bytes of the gradient it produced).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Method:
    """A benchmarked way to compute value + gradient.

    ``slug``: what you type (``--methods lu jax``); ``label``: the table's wording; ``needs``:
    distributions that must be installed (else the row says "not installed"); ``dense_bytes``:
    bytes of n×n arrays per unknown² it allocates (0 for lazy methods), used to skip sizes that
    do not fit; ``dense_solve``: it factorizes a dense n×n matrix (O(n³)); ``jit``: its first
    call at a new shape compiles (JAX), so that call is never a timing.
    """

    slug: str
    label: str
    build: Callable
    needs: tuple[str, ...] = ()
    dense_bytes: int = 0
    dense_solve: bool = False
    jit: bool = False


def problem(nx: int):
    """(fam, b, θ, a) for an nx×nx grid: n = nx(nx+1) unknowns, about 9n stored entries."""
    import linops as lo

    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    return fam, b, 0.5 + rng.random(fam.n_params), rng.standard_normal(fam.shape[0])


def _linops(alg_factory):
    def build(fam, b, theta, a):
        import adjoints as ad
        import linops as lo
        import solvers as sv

        alg = alg_factory(sv)

        def forward():
            return sv.solve(sv.LinearProblem(fam(theta), b, posdef=True), alg).u

        def full():
            K = fam(theta)
            sol = sv.solve(sv.LinearProblem(K, b, posdef=True), alg)
            g = ad.solve_pullback(sol, a)          # Ā = RankOne(−λ, u): one adjoint solve
            gK = lo.project(g.A, like=K)           # gradient w.r.t. K's stored values (SDDMM)
            return a @ sol.u, fam.pullback(gK), g, sol.stats

        return forward, full, lambda r: {"factorizations": r[3].factorizations,
                                         "payload_bytes": lo.payload_nbytes(r[2].A)}
    return build


def _linops_jax(fam, b, theta, a):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import adjoints.jax as adj

    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)

    def f(th):
        return jnp.dot(aj, adj.solve(fam(th), bj, posdef=True))  # as the numpy rows

    vg, fj = jax.jit(jax.value_and_grad(f)), jax.jit(f)

    def full():
        adj.reset_stats()
        v, g = vg(tj)
        g.block_until_ready()
        return v, g, adj.stats()

    return (lambda: fj(tj).block_until_ready()), full, \
        lambda r: {"factorizations": r[2].factorizations, "payload_bytes": int(r[1].nbytes)}


def _scipy_by_hand(fam, b, theta, a):
    import scipy.sparse as sp
    import scipy.sparse.linalg as spl

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


def _dense_gradient(fam, b, theta, a):
    import scipy.sparse.linalg as spl

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


def _jax_spsolve(fam, b, theta, a):
    import jax

    jax.config.update("jax_enable_x64", True)
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


def _dense_jax(fam, b, theta, a):
    import jax

    jax.config.update("jax_enable_x64", True)
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


METHODS: dict[str, Method] = {m.slug: m for m in (
    Method("lu", "linops LU (SuperLU)", _linops(lambda sv: sv.LU())),
    Method("cholesky", "linops Cholesky (CHOLMOD)", _linops(lambda sv: sv.Cholesky()),
           needs=("scikit-sparse",)),
    Method("pardiso", "linops PARDISO (MKL)", _linops(lambda sv: sv.Pardiso()),
           needs=("pypardiso",)),
    Method("cg-amg", "linops CG + AMG (pyamg)",
           _linops(lambda sv: sv.CG(rtol=1e-10, precond=sv.AMG()))),
    Method("jax", "linops jax (jit(value_and_grad))", _linops_jax, needs=("jax",), jit=True),
    Method("scipy", "scipy, adjoint written by hand", _scipy_by_hand),
    Method("dense-gradient", "dense n×n gradient (scipy)", _dense_gradient, dense_bytes=8),
    Method("jax-spsolve", "jax spsolve + jax.grad", _jax_spsolve, needs=("jax",), jit=True),
    Method("dense-jax", "dense jax.grad", _dense_jax, needs=("jax",), dense_bytes=24,
           dense_solve=True, jit=True),
)}
DEFAULT = ("lu", "cholesky", "pardiso", "jax", "scipy", "dense-gradient", "jax-spsolve",
           "dense-jax")
