"""Shared cases for the adjoints.jax tests (no tests here; imported by ``test_jax_*.py`` and by
``x64off_jax.py``, which runs with x64 OFF).

A *case* is an operator built from real parameter arrays (complex matrices from their real and
imaginary parts, Hermitian ones by construction so that any perturbation stays Hermitian), the
same matrix built densely with ``jnp`` (the reference: ``jnp.linalg.solve`` autodiff), and the
``solvers`` algorithm to use. :func:`battery` evaluates every JAX transform through a case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints.jax as adj

N = 8
KINDS = ("sparse-LU", "sparse-Cholesky", "sparse-CG", "sparse-GMRES", "sparse-Auto", "bcoo",
         "dense", "dense-Cholesky", "family", "diagonal", "woodbury", "matrixfree")
JIT_KINDS = tuple(k for k in KINDS if k != "bcoo")  # a BCOO built under jit has traced indices
SINGLE = (np.dtype(np.float32), np.dtype(np.complex64))


def is_complex(dtype) -> bool:
    return np.dtype(dtype).kind == "c"


def real_of(dtype):
    return np.float32 if np.dtype(dtype) in SINGLE else np.float64


def rtol_for(dtype, kind: str = "") -> float:
    """Agreement with dense jnp autodiff: ~1e-12 of the scale in double precision (1e-10 for
    iterative solves), ~1e-4 in single."""
    if np.dtype(dtype) in SINGLE:
        return 2e-4 if kind not in ("sparse-CG", "sparse-GMRES", "matrixfree") else 1e-3
    return 1e-10 if kind in ("sparse-CG", "sparse-GMRES", "matrixfree") else 1e-12


def _sym_pattern(n: int, seed: int) -> lo.Pattern:
    rng = np.random.default_rng(seed)
    mask = rng.random((n, n)) < 0.3
    mask = mask | mask.T | np.eye(n, dtype=bool)
    return lo.Pattern.from_coo(*np.nonzero(mask), (n, n))


@dataclass
class Case:
    kind: str
    dtype: np.dtype
    params: tuple                      # real arrays: the matrix's parameters
    build: Callable                    # params -> operator for adj.solve
    dense: Callable                    # params -> dense jnp array (the reference)
    alg: object = None
    posdef: bool | None = None

    def solve(self, params, b):
        return adj.solve(self.build(params), b, self.alg, posdef=self.posdef)

    def solve_dense(self, params, b):
        return jnp.linalg.solve(self.dense(params), b)


def _cplx(re, im, dtype):
    return (re + 1j * im).astype(dtype) if is_complex(dtype) else re.astype(dtype)


def _split(x, dtype):
    """Real parameter arrays for x (re, im for complex dtypes)."""
    r = real_of(dtype)
    if is_complex(dtype):
        return (jnp.asarray(np.real(x), r), jnp.asarray(np.imag(x), r))
    return (jnp.asarray(np.real(x), r), jnp.zeros(np.shape(x), r))


def make_case(kind: str, dtype, n: int = N, seed: int = 0) -> Case:
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    cx = is_complex(dtype)
    P = _sym_pattern(n, seed)
    rows, cols = P.rows, P.indices
    _, permT = P.transpose()
    diag = (rows == cols)

    def scatter(v):
        return jnp.zeros((n, n), v.dtype).at[rows, cols].set(v)

    def general_values():
        v = rng.standard_normal(P.nnz) + (1j * rng.standard_normal(P.nnz) if cx else 0)
        return np.where(diag, 6.0 + 0j if cx else 6.0, v * 0.8)

    def herm(w):       # (S + Sᴴ)/2 + 4I on a symmetric pattern: Hermitian for every w
        return 0.5 * (w + jnp.conj(w[permT])) + 4.0 * jnp.asarray(diag, w.dtype)

    if kind.startswith("sparse") or kind in ("bcoo", "woodbury"):
        hermitian = kind in ("sparse-Cholesky", "sparse-CG", "sparse-Auto")
        params = _split(general_values(), dtype)
        if hermitian:
            alg = {"sparse-Cholesky": sv.Cholesky(), "sparse-Auto": None}.get(
                kind, sv.CG(rtol=1e-6 if dtype in SINGLE else 1e-13))

            def values(p):
                return herm(_cplx(*p, dtype))
        else:
            alg = {"sparse-LU": sv.LU(), "sparse-GMRES": sv.GMRES(
                rtol=1e-6 if dtype in SINGLE else 1e-13)}.get(kind)

            def values(p):
                return _cplx(*p, dtype)

        if kind == "bcoo":
            from jax.experimental import sparse as jsp

            idx = np.stack([rows, cols], 1)

            def build(p):
                return jsp.BCOO((values(p), jnp.asarray(idx)), shape=(n, n))
            return Case(kind, dtype, params, build, lambda p: scatter(values(p)))
        if kind == "woodbury":
            u = rng.standard_normal(n) + (1j * rng.standard_normal(n) if cx else 0)
            w = rng.standard_normal(n) + (1j * rng.standard_normal(n) if cx else 0)
            params = params + _split(0.5 * u, dtype) + _split(0.5 * w, dtype)

            def build(p):
                return lo.Sparse(values(p[:2]), P) + lo.RankOne(_cplx(*p[2:4], dtype),
                                                                 _cplx(*p[4:6], dtype))

            def dense(p):
                return scatter(values(p[:2])) + jnp.outer(_cplx(*p[2:4], dtype),
                                                          jnp.conj(_cplx(*p[4:6], dtype)))
            return Case(kind, dtype, params, build, dense, sv.Woodbury(sv.LU()))
        return Case(kind, dtype, params, lambda p: lo.Sparse(values(p), P),
                    lambda p: scatter(values(p)), alg,
                    posdef=True if kind == "sparse-Auto" else None)  # Auto picks CHOLMOD
    if kind in ("dense", "dense-Cholesky", "matrixfree"):
        a = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if cx else 0)
        a = a * 0.5 + 6 * np.eye(n)
        params = _split(a, dtype)
        if kind == "dense-Cholesky":
            def dense(p):
                g = _cplx(*p, dtype)
                return 0.5 * (g + jnp.conj(g).T) + 2.0 * jnp.eye(n, dtype=dtype)
            return Case(kind, dtype, params, dense, dense, sv.Cholesky())
        if kind == "dense":
            def dense(p):
                return _cplx(*p, dtype)
            return Case(kind, dtype, params, dense, dense, sv.LU())

        def dense_mf(p):   # Hermitian positive definite for every p: jax CG applies
            g = _cplx(*p, dtype)
            return 0.5 * (g + jnp.conj(g).T) + 2.0 * jnp.eye(n, dtype=dtype)

        def build_mf(p):
            g = dense_mf(p)
            return lo.MatrixFree((n, n), dtype, lambda X: g @ X, lambda X: jnp.conj(g).T @ X)
        return Case(kind, dtype, params, build_mf, dense_mf,
                    sv.CG(rtol=1e-6 if dtype in SINGLE else 1e-13))
    if kind == "diagonal":
        d = rng.standard_normal(n) + 3 * np.sign(rng.standard_normal(n)) + (
            1j * rng.standard_normal(n) if cx else 0)
        params = _split(d, dtype)
        return Case(kind, dtype, params, lambda p: lo.Diagonal(_cplx(*p, dtype)),
                    lambda p: jnp.diag(_cplx(*p, dtype)))
    if kind == "family":
        fam, _ = family(dtype)
        theta = jnp.asarray(0.5 + rng.random(fam.n_params), real_of(dtype))

        def fam_values(p):
            return fam(p[0]).values.astype(dtype)
        Pf = fam.pattern
        return Case(kind, dtype, (theta,), lambda p: lo.Sparse(fam_values(p), Pf),
                    lambda p: jnp.zeros(Pf.shape, dtype).at[Pf.rows, Pf.indices].set(
                        fam_values(p)), sv.LU())
    raise ValueError(kind)


def family(dtype, nx: int = 3):
    """A small heat-conduction family; complex dtypes get a complex resolvent shift z·I."""
    fam, b = lo.testing.poisson_family(nx)
    if is_complex(dtype):
        M = fam.M.to_scipy().toarray()
        P = fam.pattern
        terms = [sp.csr_matrix((M[:, i], P.indices, P.indptr), shape=P.shape)
                 for i in range(fam.n_params)]
        fam = lo.AffineSparse.from_terms(terms, offset=sp.eye(P.shape[0], format="csr")
                                         * (0.3 + 0.7j))
    return fam, b


def rhs(case: Case, seed: int = 1, k: int | None = None):
    """Real parameter arrays (re, im) of a right-hand side, and the function building it."""
    rng = np.random.default_rng(seed)
    shape = (case.dense(case.params).shape[0],) + (() if k is None else (k,))
    b = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if is_complex(case.dtype)
                                      else 0)
    return _split(b, case.dtype)


def make_b(q, dtype):
    return _cplx(q[0], q[1], dtype)


def scalar_loss(u):
    """A nonlinear real function of u (so that Hessians are not trivial)."""
    return jnp.sum(jnp.sin(jnp.real(u))) + 0.5 * jnp.real(jnp.vdot(u, u)) + jnp.sum(
        jnp.cos(jnp.imag(u)))


FULL = ("value_and_grad", "jvp", "jacfwd", "jacrev", "hessian", "vmap_grad", "vmap_jvp",
        "vmap_jacrev", "vmap_hessian", "vmap_matrices", "linear_transpose")
CORE = ("value_and_grad", "jvp", "hessian", "vmap_grad", "linear_transpose")


def battery(case: Case, solve: Callable, p, q, tp, tq, Q, Pb, which=FULL):
    """Every transform in ``which`` through ``solve(params, b)``; returns a dict of arrays.

    p/q: matrix and rhs parameters (real arrays); tp/tq: tangents; Q: a batch of rhs
    parameters (vmap over right-hand sides); Pb: a batch of matrix parameters (vmap over
    matrices)."""
    dt = case.dtype

    def u_of(p, q):
        return solve(p, make_b(q, dt))

    def F(p, q):
        return scalar_loss(u_of(p, q))

    def ureal(p, q):
        u = u_of(p, q)
        return jnp.concatenate([jnp.real(u), jnp.imag(u)])

    fns = {
        "value_and_grad": lambda: jax.value_and_grad(F, (0, 1))(p, q),
        "jvp": lambda: jax.jvp(ureal, (p, q), (tp, tq))[1],
        "jacfwd": lambda: jax.jacfwd(ureal, 0)(p, q),
        "jacrev": lambda: jax.jacrev(ureal, 1)(p, q),
        "hessian": lambda: jax.hessian(F, 0)(p, q),
        "vmap_grad": lambda: jax.vmap(jax.grad(F, 0), (None, 0))(p, Q),
        "vmap_jvp": lambda: jax.vmap(lambda t: jax.jvp(lambda q: ureal(p, q), (q,), (t,))[1])(Q),
        "vmap_jacrev": lambda: jax.vmap(jax.jacrev(ureal, 1), (None, 0))(p, Q),
        "vmap_hessian": lambda: jax.vmap(jax.hessian(F, 0), (None, 0))(
            p, jax.tree.map(lambda x: x[:2], Q)),
        "vmap_matrices": lambda: jax.vmap(jax.value_and_grad(F, 0), (0, None))(Pb, q),
        "linear_transpose": lambda: jax.linear_transpose(
            lambda r: solve(p, r), make_b(q, dt))(jnp.cos(make_b(q, dt)))[0],
    }
    return {k: fns[k]() for k in which}


def jit_both(case: Case, args, which=FULL, solve=None, dense=None):
    """(ours, dense reference) of :func:`battery`, both inside ONE jax.jit (compiled without
    backend optimisations: these are tiny problems and compile time dominates)."""
    solve = case.solve if solve is None else solve
    dense = case.solve_dense if dense is None else dense

    def both(*a):
        return battery(case, solve, *a, which=which), battery(case, dense, *a, which=which)

    compiled = jax.jit(both).lower(*args).compile(
        compiler_options={"xla_backend_optimization_level": 0})
    return compiled(*args)


def battery_inputs(case: Case, nb: int = 3, nm: int = 3, seed: int = 7):
    rng = np.random.default_rng(seed)
    p = case.params
    q = rhs(case)
    r = real_of(case.dtype)
    tp = tuple(jnp.asarray(rng.standard_normal(x.shape), r) for x in p)
    tq = tuple(jnp.asarray(rng.standard_normal(x.shape), r) for x in q)
    Q = tuple(jnp.asarray(np.stack([x] * nb) + 0.3 * rng.standard_normal((nb,) + x.shape), r)
              for x in q)
    scale = np.linspace(1.0, 1.2, nm).astype(r)
    Pb = tuple(jnp.asarray(np.stack([np.asarray(x) * s for s in scale]), r) for x in p)
    return p, q, tp, tq, Q, Pb


def compare(got: dict, want: dict, rtol: float, label: str = "") -> None:
    """Every entry agrees to rtol relative to its own scale (a missing conjugate is O(1))."""
    for key in want:
        g = jax.tree.leaves(got[key])
        w = jax.tree.leaves(want[key])
        assert len(g) == len(w), key
        for a, b_ in zip(g, w):
            a, b_ = np.asarray(a), np.asarray(b_)
            assert a.shape == b_.shape, f"{label} {key}: shape {a.shape} != {b_.shape}"
            scale = max(np.abs(b_).max(initial=0.0), 1e-30)
            err = np.abs(a - b_).max(initial=0.0)
            assert err <= rtol * scale, f"{label} {key}: max error {err:.3g} > {rtol:g}·{scale:.3g}"
