"""Shared cases for the adjoints.torch tests (no tests here).

A *case* is an entry point of ``adjoints.torch`` written as a function of REAL parameter
tensors (a complex matrix from its real and imaginary parts, so that every ``torch.func``
transform applies — jacrev/jacfwd/hessian refuse complex inputs), and the same function
written densely with ``torch.linalg`` (the oracle). :func:`battery` runs the transforms on both.

Matrix kinds: ``sparse-LU`` (nonsymmetric, needs pivoting: a zero diagonal entry),
``sparse-Cholesky`` / ``sparse-CG`` / ``sparse-Auto`` (Hermitian positive definite for every
parameter value, by construction), ``sparse-GMRES``, ``coo`` / ``csr`` (torch sparse tensors at
the boundary), ``family`` (``fam(θ)``), ``dense`` (``torch.linalg``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch", reason="adjoints.torch needs torch (pip install "
                                            "\"linops[torch]\")")

import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
import adjoints.torch  # noqa: E402,F401  (registers fam(θ) for torch θ)

N = 7
SINGLE = (torch.float32, torch.complex64)
REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}
DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
ITERATIVE = ("sparse-CG", "sparse-GMRES")


def rtol_for(dtype, kind: str = "") -> float:
    """Agreement with the dense oracle: ~1e-12 of the scale in double precision (1e-9 for
    iterative solves at rtol 1e-13), ~1e-4 in single."""
    if dtype in SINGLE:
        return 1e-3 if kind in ITERATIVE else 2e-4
    return 1e-9 if kind in ITERATIVE else 1e-12


def close(got, want, rtol, what=""):
    """max |got − want| ≤ rtol · max(|want|, 1) over every leaf of two pytrees."""
    gl = torch.utils._pytree.tree_leaves(got)
    wl = torch.utils._pytree.tree_leaves(want)
    assert len(gl) == len(wl), what
    for g, w in zip(gl, wl):
        assert tuple(g.shape) == tuple(w.shape), (what, g.shape, w.shape)
        g, w = g.detach().to(torch.complex128), w.detach().to(torch.complex128)
        scale = max(float(w.abs().max()) if w.numel() else 0.0, 1.0)
        err = float((g - w).abs().max()) if w.numel() else 0.0
        assert err <= rtol * scale, f"{what}: error {err:.3e} > {rtol:g} x {scale:.3g}"


def pattern(n: int = N, seed: int = 0) -> lo.Pattern:
    """A symmetric random pattern with the diagonal (the same for every case of one n)."""
    rng = np.random.default_rng(seed)
    mask = rng.random((n, n)) < 0.3
    mask = mask | mask.T | np.eye(n, dtype=bool)
    if n > 1:   # (0, 1) and (1, 0): the partners of a zero (0, 0) entry that LU must pivot on
        mask[0, 1] = mask[1, 0] = True
    return lo.Pattern.from_coo(*np.nonzero(mask), (n, n))


@dataclass
class Case:
    """A matrix A(p) of real parameters p (values on ``P``) with its dense oracle."""

    kind: str
    dtype: torch.dtype
    P: lo.Pattern
    params: tuple               # real tensors
    values: Callable            # params -> values tensor of ``dtype`` (on P)
    alg: object = None
    posdef: bool | None = None

    @property
    def n(self) -> int:
        return self.P.shape[0]

    def operand(self, p):
        """A as ``adjoints.torch`` takes it for this kind."""
        v = self.values(p)
        if self.kind in ("coo", "csr"):
            r, c = (torch.as_tensor(np.array(x)) for x in (self.P.rows, self.P.indices))
            S = torch.sparse_coo_tensor(torch.stack([r, c]), v, (self.n, self.n))
            return S if self.kind == "coo" else S.to_sparse_csr()
        if self.kind == "dense":
            return self.dense(p)
        return lo.Sparse(v, self.P)

    def dense(self, p):
        v = self.values(p)
        r, c = (torch.as_tensor(np.array(x)) for x in (self.P.rows, self.P.indices))
        return torch.zeros((self.n, self.n), dtype=v.dtype).index_put((r, c), v)


def cplx(re, im, dtype):
    return torch.complex(re, im).to(dtype) if dtype.is_complex else re.to(dtype)


def split(x: np.ndarray, dtype) -> tuple:
    """Real parameter tensors of x: (re, im) for complex dtypes, (re,) for real ones."""
    r = REAL.get(dtype, dtype)
    if dtype.is_complex:
        return (torch.tensor(np.real(x), dtype=r), torch.tensor(np.imag(x), dtype=r))
    return (torch.tensor(np.real(x), dtype=r),)


def join(p, dtype):
    return cplx(p[0], p[1], dtype) if dtype.is_complex else p[0].to(dtype)


def make_case(kind: str, dtype, n: int = N, seed: int = 0) -> Case:
    """The case ``kind`` in ``dtype`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    P = pattern(n, seed)
    rows, cols = np.array(P.rows), np.array(P.indices)
    _, permT = P.transpose()
    diag = torch.as_tensor(rows == cols)
    cx = dtype.is_complex
    w0 = rng.standard_normal(P.nnz) + (1j * rng.standard_normal(P.nnz) if cx else 0)
    hermitian = kind in ("sparse-Cholesky", "sparse-CG", "sparse-Auto")
    if hermitian:
        perm = torch.as_tensor(np.array(permT))

        def values(p):   # (W + Wᴴ)/2 + 4I on a symmetric pattern: HPD for every p near p0
            w = join(p, dtype)
            w = 0.5 * (w + w[perm].conj()) if cx else 0.5 * (w + w[perm])
            return w * 0.5 + 4.0 * diag.to(dtype)
        alg = {"sparse-Cholesky": sv.Cholesky(), "sparse-Auto": None}.get(
            kind, sv.CG(rtol=1e-6 if dtype in SINGLE else 1e-13))
        return Case(kind, dtype, P, split(w0, dtype), values, alg,
                    posdef=True if kind == "sparse-Auto" else None)
    if kind == "family":
        fam = family(dtype)
        theta = torch.tensor(0.5 + rng.random(fam.n_params), dtype=REAL.get(dtype, dtype))
        return Case(kind, dtype, fam.pattern, (theta,), lambda p: fam(p[0]).values.to(dtype),
                    sv.LU())
    # general: a zero at the first diagonal entry (LU must pivot), a strong diagonal elsewhere
    d = np.where(rows == cols, np.where(rows == 0, 0.0, 5.0), 0.0)
    w0 = np.where(rows == cols, d, w0 * 0.8)
    if n > 1:   # the zero diagonal's partners in its row and column
        w0 = np.where(((rows == 0) & (cols == 1)) | ((rows == 1) & (cols == 0)), 3.0, w0)
    alg = {"sparse-LU": sv.LU(), "sparse-GMRES": sv.GMRES(
        rtol=1e-6 if dtype in SINGLE else 1e-13)}.get(kind)
    if kind == "sparse-GMRES":   # no pivoting in a Krylov method: a full diagonal there
        w0 = np.where(rows == cols, 5.0, w0)
    return Case(kind, dtype, P, split(w0, dtype), lambda p: join(p, dtype), alg)


def family(dtype, nx: int = 3) -> lo.AffineSparse:
    """A small heat-conduction family; complex dtypes get a complex resolvent shift z·I."""
    fam, _ = lo.testing.poisson_family(nx)
    if not dtype.is_complex:
        return fam
    M = fam.M.to_scipy().toarray()
    P = fam.pattern
    terms = [sp.csr_matrix((M[:, i], P.indices, P.indptr), shape=P.shape)
             for i in range(fam.n_params)]
    return lo.AffineSparse.from_terms(terms, offset=sp.eye(P.shape[0], format="csr")
                                      * (0.3 + 0.7j))


def rhs(case: Case, k: int | None = None, seed: int = 1) -> tuple:
    """Real parameter tensors of a right-hand side (n,) or (n, k)."""
    rng = np.random.default_rng(seed)
    shape = (case.n,) + (() if k is None else (k,))
    x = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if case.dtype.is_complex
                                       else 0)
    return split(x, case.dtype)
