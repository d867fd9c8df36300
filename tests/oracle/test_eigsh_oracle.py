"""sv.eigsh (values, vectors) and ad.eigsh_pullback against numpy's dense eigendecomposition,
on the Hermitian corpus (repeated and clustered eigenvalues, indefinite, complex, single
precision, n = 1) and on generated Hermitian matrices. Eigenvalues within the residual bound
(Hermitian: |λ − λ*| ≤ ‖Av − λv‖), vectors orthonormal with the residual eigsh promises and
inside the reference eigenspace of their cluster; gradients: Σ λ̄ᵢvᵢvᵢᴴ where it is defined
(λ̄ constant on every cluster: a function of the cluster's projector), eigenvector cotangents
of a gauge-invariant f = Σ|aᴴvᵢ|² against the dense first-order formula on well-separated
spectra; the gradient of one of several equal eigenvalues, and a cotangent at an eigenvalue
whose equal partner was not computed, refused by name. What the oracle found in eigsh (a
complex A with k ≥ n − 2: a bare TypeError of scipy's, also inside a repeated eigenvalue) has
its own test below."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st

import adjoints as ad
import linops as lo
import solvers as sv

from . import _profile
from . import cases as C
from . import reference as R
from .judge import Judge, dense_of

NAMED_EIG = (sv.SolveError, sv.BackendNotSupported, ValueError, lo.ShapeError)


def _residual_tol(dtype) -> float:
    return 1e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-8


def _clusters(w, tol):
    """Labels of eigenvalue clusters: neighbours closer than tol share one."""
    lab = np.zeros(w.size, dtype=int)
    for i in range(1, w.size):
        lab[i] = lab[i - 1] + (w[i] - w[i - 1] > tol)
    return lab


def check_eigsh(j: Judge, m, kind: str, k: int, sigma, which="LM") -> None:
    a, n = m.a, m.n
    u = R.eps(a.dtype)
    A = C.form(m, kind)
    e, err = j.attempt(f"eigsh(k={k}, sigma={sigma}, which={which})",
                       lambda: sv.eigsh(A, k, sigma=sigma, which=which), named=NAMED_EIG)
    if e is None:
        return
    wref, Vref = np.linalg.eigh(a.astype(np.complex128))
    anorm = R.norm2(a)
    a1 = float(np.abs(a).sum(axis=0).max())
    bound = _residual_tol(a.dtype) * a1 + R.backward_bound(n, u) * anorm
    w, V = np.asarray(e.values), np.asarray(e.vectors)
    if w.shape != (k,) or V.shape != (n, k):
        j.fail("eigsh", f"shapes {w.shape}, {V.shape} for k={k}")
        return
    # each value is an eigenvalue, and they are the k wanted (ties at the edge: by distance)
    pick = np.array([int(np.argmin(np.abs(wref - wi))) for wi in w])
    j.close("eigsh.values", w, wref[pick], bound, 1.0)
    if sigma is not None:
        j.close("eigsh.values nearest sigma", np.sort(np.abs(w - sigma)),
                np.sort(np.abs(wref - sigma))[:k], 2 * bound, 1.0)
    else:
        want = wref[:k] if which == "SA" else wref[n - k:]
        j.close(f"eigsh.values ({which})", np.sort(w), want, 2 * bound, 1.0)
    j.close("eigsh.vectors orthonormal", V.conj().T @ V, np.eye(k), 100 * n * u + bound /
            max(anorm, 1e-300), 1.0)
    res = np.linalg.norm(a @ V - V * w, axis=0)
    j.expect("eigsh residuals", bool(np.all(res <= bound * (1 + 1e-6))),
             f"‖Av − λv‖ = {res.max():.3g} > {bound:.3g}")
    # each vector inside its cluster's reference eigenspace (the cluster: eigenvalues within
    # twice the bound, which is what the residual can resolve)
    lab = _clusters(wref, 2 * bound)
    for i in range(k):
        near = np.flatnonzero(np.abs(wref - w[i]) <= 2 * bound)
        if near.size == 0:
            continue
        members = np.flatnonzero(np.isin(lab, lab[near]))
        others = np.setdiff1d(np.arange(n), members)
        if others.size == 0:
            continue
        gap = float(np.min(np.abs(wref[others] - w[i])))
        out = float(np.linalg.norm(Vref[:, others].conj().T @ V[:, i]))
        # Davis–Kahan for v, plus the reference's own eigenvector error (LAPACK: n·u·‖A‖/gap)
        allowed = (res[i] + 100 * n * R.eps(np.float64) * anorm) / max(gap, 1e-300) + 100 * n * u
        if out > allowed:
            j.fail(f"eigsh.vectors[:, {i}]", f"{out:.3g} of it outside the eigenspace of "
                                             f"λ = {w[i]:.8g} (allowed {allowed:.3g})")
    # the gradient of Σ λ̄ᵢλᵢ with λ̄ constant on every cluster of the computed values
    wl = _clusters(w, 2 * bound)
    lbar = np.array([1.0 + 0.5 * wl[i] for i in range(k)])
    G, err = j.attempt("eigsh_pullback(values_bar)", lambda: dense_of(
        ad.eigsh_pullback(e, values_bar=lbar), n), named=NAMED_EIG)
    complete = all(np.sum(np.abs(wref - w[i]) <= 2 * bound) == np.sum(np.abs(w - w[i]) <= 2 * bound)
                   for i in range(k))
    if G is not None and complete:           # every cluster computed whole: a projector sum
        want = np.zeros((n, n), dtype=np.complex128)
        for c in np.unique(wl):
            idx = np.flatnonzero(np.abs(wref - w[wl == c][0]) <= 2 * bound)
            want += lbar[wl == c][0] * Vref[:, idx] @ Vref[:, idx].conj().T
        gaps = [float(np.min(np.abs(np.delete(wref, np.flatnonzero(np.abs(wref - wi) <= 2 * bound))
                                    - wi), initial=np.inf)) for wi in w]
        tol = 4 * np.max(lbar) * k * (res.max() + 100 * n * u * anorm) / max(min(gaps), 1e-300)
        j.close("eigsh_pullback(values_bar)", G, want, tol if tol < 0.1 else None, 1.0)
    # eigenvector cotangents of f = Σ|aᴴvᵢ|² on a well separated spectrum
    sep = np.min(np.diff(wref)) if n > 1 else np.inf
    if e.cache is not None and sep > 1e-3 * max(anorm, 1e-300) and m.dtype in (np.float64,
                                                                              np.complex128):
        rng = np.random.default_rng(5)
        av = rng.standard_normal(n) + (1j * rng.standard_normal(n) if a.dtype.kind == "c" else 0)
        Vb = 2 * av[:, None] * (av.conj() @ V)[None, :]
        G, err = j.attempt("eigsh_pullback(vectors_bar)", lambda: dense_of(
            ad.eigsh_pullback(e, vectors_bar=Vb), n), named=NAMED_EIG)
        if G is not None:
            want = np.zeros((n, n), dtype=np.complex128)
            for i in range(k):
                ii = int(pick[i])
                for jj in range(n):
                    if jj != ii:
                        vj = Vref[:, jj]
                        want += (vj.conj() @ Vb[:, i]) / (wref[ii] - wref[jj]) * np.outer(vj, V[:, i].conj())
            scale = float(np.abs(want).max()) + 1e-300
            j.close("eigsh_pullback(vectors_bar)", G, want, 1e-6 + 1e3 * bound / sep, scale)


def _hermitian_corpus():
    out = []
    for m in C.corpus():
        if not m.hermitian or m.n < 2:
            continue
        for kind in ("dense", "sparse", "matrixfree"):
            out.append(pytest.param(m, kind, id=f"{m.name}-{kind}"))
    return out


@pytest.mark.parametrize("m, kind", _hermitian_corpus())
def test_eigsh_corpus(m, kind):
    j = Judge(f"{m.name} [{kind}, n={m.n}, {m.dtype.name}]")
    w = np.linalg.eigvalsh(m.a.astype(np.complex128))
    spread = max(float(w[-1] - w[0]), 1.0)
    ks = sorted({1, min(3, m.n - 1)})
    for k in ks:
        if kind != "matrixfree":
            check_eigsh(j, m, kind, k, float(w[0] - 0.1 * spread))           # below: definite
            check_eigsh(j, m, kind, k, float(np.median(w)) + 1e-3 * spread)  # interior
        check_eigsh(j, m, kind, k, None, which="LA")
    j.done()


@st.composite
def _hermitian(draw):
    m = draw(C.matrices(kinds=("hermitian", "hpd", "hub"), dtypes=(np.float64, np.complex128)))
    return m, draw(st.sampled_from(["dense", "sparse"]), label="form")


@_profile.examples(bounded=10, long_=1500)
@given(_hermitian(), st.integers(1, 4), st.floats(-1.5, 1.5))
def test_eigsh_generated(case, k, where):
    m, kind = case
    if m.n < 2:
        return
    k = min(k, m.n - 1)
    w = np.linalg.eigvalsh(m.a.astype(np.complex128))
    sigma = float(np.median(w) + where * (w[-1] - w[0] + 1e-3))
    # equal eigenvalues among the wanted ones: shift-invert ARPACK returns vectors that are not
    # orthonormal (the xfail below), not asked of the property until that is fixed
    wanted = np.sort(w[np.argsort(np.abs(w - sigma), kind="stable")[:k + 1]])
    assume(np.all(np.diff(wanted) > 1e-6 * max(abs(w).max(), 1.0)))
    note(f"{m.name} [{kind}] k={k} sigma={sigma}")
    j = Judge(f"{m.name} [{kind}] k={k} sigma={sigma:.6g}")
    check_eigsh(j, m, kind, k, sigma)
    j.done()


def test_gradient_of_one_degenerate_eigenvalue_is_refused():
    m = C.CORPUS["repeated-eigenvalues"]                      # eigenvalue 1 three times
    e = sv.eigsh(m.sparse(), 3, sigma=0.0)
    with pytest.raises(NAMED_EIG):
        ad.eigsh_pullback(e, values_bar=np.array([1.0, 0.0, 0.0]))


def test_vector_cotangent_next_to_an_uncomputed_partner_is_named():
    m = C.CORPUS["repeated-eigenvalues"]                      # 1, 1, 1, 2, 3, 3, ...
    e = sv.eigsh(m.sparse(), 1, sigma=0.0)                   # one of the three
    with pytest.raises(ValueError, match="equal|degenerate|coincide"):
        ad.eigsh_pullback(e, vectors_bar=np.ones((m.n, 1)), maxiter=20)


def test_complex_eigsh_with_k_n_minus_2_is_answered_densely():
    """ARPACK's complex mode needs k + 1 < n − 1: such a small A is answered by a dense
    eigendecomposition (it raised scipy's bare TypeError)."""
    a = np.array([[-2.53, -2.95 - 0.32j, -0.69 - 1.03j], [-2.95 + 0.32j, -0.44, -1.79 + 0.26j],
                  [-0.69 + 1.03j, -1.79 - 0.26j, -0.63]])   # shrunk by the long profile
    e = sv.eigsh(a, 1, sigma=7.1)
    assert abs(e.values[0] - np.linalg.eigvalsh(a)[2]) < 1e-10


def test_eigsh_vectors_of_a_repeated_eigenvalue_are_orthonormal():
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4)))
    a = (q * np.ones(4)) @ q.conj().T                 # I up to rounding: one eigenvalue, 4 times
    a = (a + a.conj().T) / 2
    e = sv.eigsh(a, 2, sigma=1.001)
    V = np.asarray(e.vectors)
    assert np.abs(V.conj().T @ V - np.eye(2)).max() < 1e-8
