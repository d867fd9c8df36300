"""The queries the oracle asks of one (matrix, form, engine), each judged (``judge.py``).

``run`` asks, in order: ``init``; ``solve`` (the problem's b, and a block of three right-hand
sides, complex for a real A); ``solve_adjoint``, ``solve_transpose``; ``logdet``; the selected
inverse (diagonal, A's pattern and its transpose); the entries of ``sv.inverse(cache)`` and of
A⁻ᴴ (``lo.diagonal``, ``lo.sample``, ``lo.project``); every pullback of ``adjoints`` that uses a
cache (``solve_pullback``, ``inv_pullback``, ``logdet_pullback``, ``inv_sample_pullback``) and
``trace_pullback``, densely and through ``lo.project`` / ``fam.pullback`` / ``lo.inner``,
optionally against 4th-order central differences of the exact (long double) function; then
``update`` — same pattern new values, the other dtype kind, a failed update and the cache's
reuse after it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv
from linops.internals import abs_apply
from solvers.internals import default_rtol

from . import cases as C
from . import reference as R
from .judge import Judge, accuracy, dense_of, solve_result

DIRECT_MUST_SOLVE = {"lu", "klu", "qr", "cholesky", "pardiso", "petsc-mumps", "auto"}
#: direct engines that must refuse a singular matrix at init
DIRECT_REFUSE_SINGULAR = {"lu", "klu", "qr", "cholesky", "pardiso"}


def _rng(*key):
    return np.random.default_rng([abs(hash(k)) % (2 ** 32) for k in key])


def _vec(rng, n, dtype, k=None):
    shape = (n,) if k is None else (n, k)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(np.result_type(dtype, np.float32))


def cache_rtol(cache, dtype):
    """The relative tolerance an iterative cache works to (its spec's, or the default for the
    precision), None for a direct one — whatever ``Auto`` chose."""
    f = cache.factor
    if lstsq(cache):                                   # LSMR: its own rtol; QR: direct
        return getattr(f, "rtol", None)
    spec = getattr(f, "spec", None)
    if spec is None:
        return None
    if hasattr(spec, "iterative"):                     # PETSc: preonly is direct
        return spec.rtol if spec.iterative else None
    if hasattr(f, "_run") and hasattr(spec, "rtol"):   # Krylov methods and AMG's cycles
        return default_rtol(dtype) if spec.rtol is None else spec.rtol
    return None


def lstsq(cache) -> bool:
    """True for an iterative least-squares cache (LSMR): its SUCCESS is judged on the
    normal-equation residual ‖Aᴴ(b − Ax)‖ ≤ rtol·‖Aᴴb‖, the rule it documents, and its
    accuracy is κ times that of a residual-accepted method."""
    f = cache.factor
    return bool(getattr(getattr(f, "alg", None), "least_squares", False)) and hasattr(f, "rtol")


def hints(m):
    return {k: True for k, v in (("hermitian", m.hermitian), ("posdef", m.posdef)) if v}


def run(m, kind: str, eng, *, pullbacks: bool = True, fd: bool = False,
        updates: bool = True, hint=None) -> Judge:
    """Every judged query for the matrix ``m`` in form ``kind`` with engine ``eng``."""
    j = Judge(f"{m.name} [{kind}, n={m.n}, {m.dtype.name}] with {eng.label}")
    a, n = m.a, m.n
    u = R.eps(a.dtype)
    rtol = eng.rtol(a.dtype)
    kappa = R.cond(a)
    rng = _rng(m.name, kind, eng.label)
    b = _vec(rng, n, a.dtype)
    prob = sv.LinearProblem(C.form(m, kind), b, **(hints(m) if hint is None else hint))
    cache, err = j.attempt("init", lambda: sv.init(prob, eng.make(a.dtype)))
    _expect_init(j, m, kind, eng, err, kappa, u)
    if cache is None:
        return j
    rtol = cache_rtol(cache, a.dtype)
    x = _solves(j, m, cache, b, u, rtol, eng, kappa)
    # what the entries and gradients from this cache may lose: LSMR's accepted normal-equation
    # residual costs one more factor κ
    acc_rtol = rtol * max(kappa, 1.0) if rtol is not None and lstsq(cache) else rtol
    _factor_queries(j, m, kind, cache, u, acc_rtol, eng, kappa)
    if pullbacks:
        _pullbacks(j, m, kind, cache, b, x, u, acc_rtol, kappa, fd)
    if updates:
        _updates(j, m, kind, cache, b, u, rtol, eng)
    return j


def _well_conditioned(m, kappa, u) -> bool:
    return not m.singular and np.isfinite(kappa) and kappa * R.backward_bound(m.n, u) < 1e-3


def _expect_init(j, m, kind, eng, err, kappa, u) -> None:
    """Refusals must be the right ones where the answer is known."""
    if m.n == 0:
        # exactly, by every engine that takes the dtype (a declared capability limit, e.g. a
        # real PETSc build and a complex A, is a refusal whatever the size)
        j.expect("init", err is None or isinstance(err, sv.BackendNotSupported),
                 f"n = 0 is solved exactly by every engine, got {err!r}")
        return
    structural = kind in ("dense", "sparse")
    if eng.name == "lu" and structural and _well_conditioned(m, kappa, u):
        j.expect("init", err is None, f"LU refused a regular matrix (κ = {kappa:.2g}): {err!r}")
    if eng.name == "cholesky" and structural:
        if not m.hermitian:
            j.expect("init", isinstance(err, sv.NotHermitianError),
                     f"Cholesky of a non-Hermitian matrix must raise NotHermitianError, got {err!r}")
        elif not m.posdef and not m.singular:
            j.expect("init", isinstance(err, sv.SingularMatrixError),
                     f"Cholesky of a Hermitian indefinite matrix must raise "
                     f"NotPositiveDefiniteError, got {err!r}")
        elif m.posdef and _well_conditioned(m, kappa, u):
            j.expect("init", err is None or isinstance(err, sv.BackendNotSupported),
                     f"Cholesky refused an HPD matrix (κ = {kappa:.2g}): {err!r}")
    if m.singular and eng.name in DIRECT_REFUSE_SINGULAR and structural:
        j.expect("init", isinstance(err, (sv.SingularMatrixError, sv.NotHermitianError,
                                          sv.BackendNotSupported)),
                 f"a singular matrix must be refused at init, got {err!r}")


def _entries(cache) -> bool:
    """Whether the acceptance rule could judge the cache's operator componentwise: it needs
    |A| (``abs_apply``); operators without it (matrix-free, a Diagonal + LowRank sum) are
    judged normwise, as solvers._acceptance documents."""
    A = cache.A
    return abs_apply(A, np.zeros((A.shape[1], 1), dtype=A.dtype), False) is not None


def _solves(j, m, cache, b, u, rtol, eng, kappa):
    a, n = m.a, m.n
    rng = _rng(m.name, "solves", eng.label)
    must = eng.label in DIRECT_MUST_SOLVE and rtol is None and _well_conditioned(m, kappa, u)
    x, err = j.attempt("solve", cache.solve)
    if x is not None:
        solve_result(j, "solve", a, b, x, u=u, rtol=rtol, status=cache.status, a_dtype=a.dtype,
                     lstsq=lstsq(cache), entries=_entries(cache))
        j.expect("solve", cache.u is x and not np.asarray(cache.u).flags.writeable,
                 "cache.u is not the (read-only) solution")
    elif must:
        j.fail("solve", f"a direct method failed on a regular matrix: {err!r}")
    B = _vec(rng, n, np.result_type(a.dtype, np.complex64), 3)
    if n:
        B[:, 1] = 0.0
        B[:, 2] = B[:, 2].real                      # a real column in a complex block
    X, err = j.attempt("solve(B)", lambda: cache.solve(B))
    if X is not None:
        solve_result(j, "solve(B)", a, B, X, u=u, rtol=rtol, status=cache.status,
                     a_dtype=a.dtype, lstsq=lstsq(cache), entries=_entries(cache))
    elif must:
        j.fail("solve(B)", f"a direct method failed: {err!r}")
    c = _vec(rng, n, a.dtype)
    for name, M, fn in (("solve_adjoint", a.conj().T, cache.solve_adjoint),
                        ("solve_transpose", a.T, cache.solve_transpose)):
        y, err = j.attempt(name, lambda fn=fn: fn(c))
        if y is not None:
            solve_result(j, name, M, c, y, u=u, rtol=rtol, status=cache.status, a_dtype=a.dtype,
                     lstsq=lstsq(cache), entries=_entries(cache))
        elif must and not isinstance(err, sv.BackendNotSupported):
            j.fail(name, f"a direct method failed: {err!r}")
    return x


def _factor_queries(j, m, kind, cache, u, rtol, eng, kappa):
    a, n = m.a, m.n
    eta = R.backward_bound(n, u)
    ld, err = j.attempt("logdet", cache.logdet)
    if ld is not None:
        sign, logabs = R.slogdet(a)
        j.expect("logdet", isinstance(ld, sv.LogDet), f"returned {type(ld).__name__}")
        if not np.isfinite(logabs):
            j.fail("logdet", f"a singular matrix got log|det| = {ld.logabsdet} (sign "
                             f"{ld.sign}) instead of SingularMatrixError")
        elif np.isfinite(kappa) and n * kappa * eta < 0.5:
            bound = 2 * n * kappa * eta
            j.close("logdet.logabsdet", ld.logabsdet, logabs, bound, 1.0)
            j.close("logdet.sign", complex(ld.sign), complex(sign), 2 * bound if np.iscomplexobj(a)
                    else 1e-12)
    elif eng.name in ("lu",) and kind in ("dense", "sparse") and _well_conditioned(m, kappa, u):
        j.fail("logdet", f"LU holds factors: {err!r}")
    Z = R.inverse(a) if np.isfinite(kappa) else None
    if Z is None:
        return
    zn = R.norm2(Z.astype(np.complex128))
    acc = accuracy(n, u, None, kappa)
    S, err = j.attempt("selected_inverse", lambda: sv.selected_inverse(cache))
    if S is not None:
        j.close("selected_inverse.diagonal()", S.diagonal(), np.diagonal(Z), acc, zn)
        r, c = C.stored(m, kind)
        for what, (rr, cc) in (("A's pattern", (r, c)), ("Aᵀ's pattern", (c, r))):
            vals, found = S.lookup(rr, cc)
            j.expect(f"selected_inverse on {what}", bool(np.all(found)),
                     f"{int((~found).sum())} positions of {what} missing (e.g. "
                     f"{(int(rr[~found][0]), int(cc[~found][0])) if (~found).any() else None})")
            j.close(f"selected_inverse on {what}", np.where(found, vals, Z[rr, cc]), Z[rr, cc],
                    acc, zn)
    elif eng.name in ("lu",) and kind in ("dense", "sparse") and _well_conditioned(m, kappa, u):
        j.fail("selected_inverse", f"LU holds factors: {err!r}")
    acc_it = accuracy(n, u, rtol, kappa)
    inv = sv.inverse(cache)
    d, err = j.attempt("lo.diagonal(sv.inverse(cache))", lambda: lo.diagonal(inv))
    if d is not None:
        j.close("lo.diagonal(sv.inverse(cache))", d, np.diagonal(Z), acc_it, zn)
    if n:
        rng = _rng(m.name, kind, "sample")
        rr, cc = rng.integers(0, n, 5), rng.integers(0, n, 5)
        v, err = j.attempt("lo.sample(sv.inverse(cache))", lambda: lo.sample(inv, rr, cc))
        if v is not None:
            j.close("lo.sample(sv.inverse(cache))", v, Z[rr, cc], acc_it, zn)
        v, err = j.attempt("lo.sample(sv.inverse(cache).H)", lambda: lo.sample(inv.H, rr, cc))
        if v is not None:
            j.close("lo.sample(sv.inverse(cache).H)", v, Z.conj().T[rr, cc], acc_it, zn)
    if kind == "sparse":
        K = C.form(m, kind)
        P = K.pattern
        r, c = np.asarray(P.rows), np.asarray(P.indices)
        for adj in (False, True):
            what = f"lo.project(sv.inverse(cache{', adjoint=True' if adj else ''}), like=A)"
            G = sv.inverse(cache, adjoint=adj)
            proj, err = j.attempt(what, lambda G=G: lo.project(G, like=K))
            if proj is not None:
                want = (Z.conj().T if adj else Z)[r, c]
                j.close(what, np.asarray(proj.values), want, acc_it, zn)


def _split_family(m, K: lo.Sparse, groups: int = 3):
    """K = Σᵢ Kᵢ with the stored entries (explicit zeros included) dealt into groups: a
    family with θ = 1 at K, for fam.pullback."""
    S = K.to_scipy().tocsr()
    S.sort_indices()
    g = np.arange(S.nnz) % groups
    terms = []
    for i in range(groups):
        data = np.where(g == i, S.data, 0)
        T = sp.csr_array((data, S.indices.copy(), S.indptr.copy()), shape=S.shape)
        terms.append(T)
    return lo.AffineSparse.from_terms(terms), terms


def _pullbacks(j, m, kind, cache, b, x, u, rtol, kappa, fd):
    a, n = m.a, m.n
    if not np.isfinite(kappa) or x is None:
        return
    acc = accuracy(n, u, rtol, kappa)
    Z = R.inverse(a)
    rng = _rng(m.name, kind, "pullbacks")
    dt = np.result_type(a.dtype, np.float32)
    ubar = _vec(rng, n, a.dtype)
    xr = R.solve(a, b)
    # solve_pullback: λ = A⁻ᴴū, Ā = −λuᴴ (of the problem's b: cache.u was the block's)
    x, err = j.attempt("solve (again)", cache.solve)
    if x is None:
        return
    g, err = j.attempt("solve_pullback", lambda: ad.solve_pullback(cache, ubar))
    if g is not None:
        lam = R.solve(a.conj().T, ubar)
        ln, xn = float(np.linalg.norm(lam.astype(np.complex128))), float(
            np.linalg.norm(xr.astype(np.complex128)))
        j.close("solve_pullback.b (λ)", np.asarray(g.b), lam, acc, ln)
        Abar = -np.outer(lam, xr.conj())
        D, err = j.attempt("lo.to_dense(solve_pullback.A)", lambda: dense_of(g.A, n))
        if D is not None:
            j.close("solve_pullback.A (dense)", D, Abar, None if acc is None else 3 * acc, ln * xn)
        if kind == "sparse":
            K = C.form(m, kind)
            P = K.pattern
            r, c = np.asarray(P.rows), np.asarray(P.indices)
            proj, err = j.attempt("project(solve_pullback.A, like=A)", lambda: ad.project(g.A, like=K))
            if proj is not None:
                j.close("project(solve_pullback.A, like=A)", np.asarray(proj.values), Abar[r, c],
                        None if acc is None else 3 * acc, ln * xn)
            fam, terms = _split_family(m, K)
            tb, err = j.attempt("fam.pullback(solve_pullback.A)", lambda: fam.pullback(g.A))
            if tb is not None:
                want = np.array([np.real(np.sum(np.conj(T.toarray()) * Abar)) for T in terms])
                scale = ln * xn * max(float(np.abs(a).sum()), 1e-300)
                j.close("fam.pullback(solve_pullback.A)", np.asarray(tb), want,
                        None if acc is None else 3 * acc, scale)
        if fd:
            E = _vec(rng, n, a.dtype, n).astype(a.dtype if a.dtype.kind == "c" else np.float64)

            def f(A):
                return float(np.real(np.vdot(ubar.astype(np.clongdouble), R.solve(A, b))))

            ip, err = j.attempt("lo.inner(solve_pullback.A, E)",
                                lambda: float(np.real(lo.inner(g.A, lo.aslinop(E)))))
            if ip is not None:
                _fd(j, "solve_pullback.A vs central differences", f, a, E, Z, ip, acc)
    # inv_pullback with a low-rank and a sparse Ȳ: Ā = −A⁻ᴴȲA⁻ᴴ
    p, q = _vec(rng, n, a.dtype), _vec(rng, n, a.dtype)
    zn = R.norm2(Z.astype(np.complex128))
    G, err = j.attempt("inv_pullback(RankOne)", lambda: ad.inv_pullback(cache, lo.RankOne(p, q)))
    G, err = (G, err) if G is None else j.attempt("lo.to_dense(inv_pullback(RankOne))",
                                                  lambda: dense_of(G, n))
    if G is not None:
        want = -(Z.conj().T @ np.outer(p, q.conj()) @ Z.conj().T)
        j.close("inv_pullback(RankOne)", G, want, None if acc is None else 3 * acc,
                zn ** 2 * float(np.linalg.norm(p) * np.linalg.norm(q)))
        if fd:
            Yb = np.outer(p, q.conj())
            E = _vec(rng, n, a.dtype, n).astype(a.dtype if a.dtype.kind == "c" else np.float64)

            def f(A):
                return float(np.real(np.sum(np.conj(Yb) * R.inverse(A))))

            _fd(j, "inv_pullback vs central differences", f, a, E, Z,
                float(np.real(np.sum(np.conj(G) * E))), acc)
    if kind == "sparse" and n:
        K = C.form(m, kind)
        Yv = _vec(rng, K.pattern.nnz, a.dtype)
        Ysp = lo.Sparse(Yv.astype(dt), K.pattern)
        G, err = j.attempt("inv_pullback(Sparse)",
                           lambda: dense_of(ad.inv_pullback(cache, Ysp), n))
        if G is not None:
            Yd = np.asarray(lo.to_dense(Ysp))
            want = -(Z.conj().T @ Yd @ Z.conj().T)
            j.close("inv_pullback(Sparse)", G, want, None if acc is None else 3 * acc,
                    zn ** 2 * float(np.linalg.norm(Yd)))
    # logdet_pullback: Ā = A⁻ᴴ
    G, err = j.attempt("logdet_pullback", lambda: ad.logdet_pullback(cache))
    if G is not None:
        d, err = j.attempt("lo.diagonal(logdet_pullback)", lambda: lo.diagonal(G))
        if d is not None:
            j.close("lo.diagonal(logdet_pullback)", d, np.diagonal(Z).conj(), acc, zn)
        if fd and R.slogdet(a)[1] > -np.inf:
            E = _vec(rng, n, a.dtype, n).astype(a.dtype if a.dtype.kind == "c" else np.float64)
            Gd, err = j.attempt("lo.to_dense(logdet_pullback)", lambda: dense_of(G, n))
            if Gd is not None:
                _fd(j, "logdet_pullback vs central differences", lambda A: R.slogdet(A)[1], a, E,
                    Z, float(np.real(np.sum(np.conj(Gd) * E))), acc)
    # inv_sample_pullback: f = Re Σ conj(v̄ₖ) A⁻¹[rₖ, cₖ]
    if n:
        rr, cc = rng.integers(0, n, 3), rng.integers(0, n, 3)
        vb = _vec(rng, 3, a.dtype)
        G, err = j.attempt("inv_sample_pullback",
                           lambda: dense_of(ad.inv_sample_pullback(cache, rr, cc, vb), n))
        if G is not None:
            Yb = np.zeros((n, n), dtype=np.result_type(dt, np.complex64))
            np.add.at(Yb, (rr, cc), vb)
            want = -(Z.conj().T @ Yb @ Z.conj().T)
            j.close("inv_sample_pullback", G, want, None if acc is None else 3 * acc,
                    zn ** 2 * float(np.linalg.norm(vb)))
            if fd:
                E = _vec(rng, n, a.dtype, n).astype(a.dtype if a.dtype.kind == "c" else np.float64)

                def f(A):
                    return float(np.real(np.sum(np.conj(vb) * R.inverse(A)[rr, cc])))

                _fd(j, "inv_sample_pullback vs central differences", f, a, E, Z,
                    float(np.real(np.sum(np.conj(G) * E))), acc)
    # trace_pullback (no cache): f = Re tr(A R), R low rank
    U, V = _vec(rng, n, a.dtype, 2), _vec(rng, n, a.dtype, 2)
    Rlr = lo.LowRank(U, V)
    res, err = j.attempt("trace_pullback", lambda: ad.trace_pullback(C.form(m, kind), Rlr))
    if res is not None:
        Lb, Rb = res
        Rd = U @ V.conj().T
        j.close("trace_pullback L̄ = Rᴴ", dense_of(Lb, n), Rd.conj().T, 8 * u,
                max(float(np.abs(Rd).max()) if n else 1.0, 1e-300))
        j.close("trace_pullback R̄ = Aᴴ", dense_of(Rb, n), a.conj().T, 8 * u,
                max(float(np.abs(a).max()) if n else 1.0, 1e-300))


def _fd(j, what, f, a, E, Z, got: float, acc=None) -> None:
    """4th-order central differences of the exact f along E against the pullback's
    directional derivative Re⟨Ā, E⟩. Step: ‖A⁻¹‖‖E‖h = 1e-3 (truncation ≈ 1e-12 relative);
    f in long double (rounding negligible). Bound: 1e-8 relative, or three times the cache's
    accuracy where that is coarser (an iterative engine: κ times its rtol)."""
    zn = R.norm2(Z.astype(np.complex128))
    en = R.norm2(E)
    if en == 0:
        return
    h = 1e-3 / (zn * en)
    Eld = E.astype(np.clongdouble if E.dtype.kind == "c" else np.longdouble)
    al = a.astype(np.clongdouble if a.dtype.kind == "c" else np.longdouble)
    fp1, fm1 = f(al + h * Eld), f(al - h * Eld)
    fp2, fm2 = f(al + 2 * h * Eld), f(al - 2 * h * Eld)
    want = (8 * (fp1 - fm1) - (fp2 - fm2)) / (12 * h)
    scale = max(abs(want), abs(got), 1e-300)
    j.checked += 1
    if abs(got - want) > max(1e-8, 0.0 if acc is None else 3 * acc) * scale:
        j.fail(what, f"Re⟨Ā, E⟩ = {got:.12g} but the central differences give {want:.12g} "
                     f"(relative {abs(got - want) / scale:.2g})")


def _perturbed(m, rng):
    """New values on m's pattern that keep its symmetry and definiteness: a ∘ F with F = 11ᵀ +
    0.2·ggᵀ (positive semidefinite, so a Schur product keeps a positive definite a so)."""
    n = m.n
    g = rng.uniform(0.0, 1.0, n)
    F = 1.0 + 0.2 * np.outer(g, g)
    return (m.a * F).astype(m.a.dtype)


def _other_kind(m, a2, rng):
    """a2 in the other dtype kind, keeping Hermitian (and definite) matrices so: a real one
    gets i·S with S real antisymmetric and ‖S‖ below a tenth of λ_min; a complex one loses its
    imaginary part (the real part of an HPD matrix is SPD)."""
    n = m.n
    if a2.dtype.kind == "c":
        return np.real(a2).astype(np.float32 if a2.dtype == np.complex64 else np.float64)
    mask = a2 != 0
    T = rng.standard_normal((n, n)) * mask
    S = T - T.T if m.hermitian else T
    cplx = np.complex64 if a2.dtype == np.float32 else np.complex128
    if m.hermitian and n:
        w = np.linalg.eigvalsh(a2.astype(np.float64))
        size = 0.1 * max(float(np.min(np.abs(w))), 0.0) / max(R.norm2(S), 1e-300)
    else:
        size = 0.3 * max(float(np.abs(a2).max()) if n else 1.0, 1e-300) / max(
            float(np.abs(S).max()) if n else 1.0, 1e-300)
    return (a2 + 1j * size * S).astype(cplx)


def _updates(j, m, kind, cache, b, u, rtol, eng):
    n = m.n
    rng = _rng(m.name, kind, eng.label, "update")
    a2 = _perturbed(m, rng)
    gen = cache.generation
    done, err = j.attempt("update(same pattern)", lambda: cache.update(A=C.same_pattern(m, kind, a2)))
    current = m.a
    if done is not None:
        j.expect("update(same pattern)", cache.generation == gen + 1 and cache.u is None,
                 "generation not bumped or u not forgotten")
        current = a2
        x, err = j.attempt("solve after update", cache.solve)
        if x is not None:
            solve_result(j, "solve after update", a2, b, x, u=R.eps(a2.dtype),
                         rtol=cache_rtol(cache, a2.dtype), status=cache.status, a_dtype=a2.dtype,
                     lstsq=lstsq(cache), entries=_entries(cache))
    a3 = _other_kind(m, a2, rng)
    done, err = j.attempt("update(other dtype kind)",
                          lambda: cache.update(A=C.same_pattern(m, kind, a3)))
    if done is not None:
        current = a3
        b3 = b.astype(np.result_type(b.dtype, a3.dtype))
        x, err = j.attempt("solve after a kind-changing update", lambda: cache.solve(b3))
        if x is not None:
            solve_result(j, "solve after a kind-changing update", a3, b3, x, u=R.eps(a3.dtype),
                         rtol=cache_rtol(cache, a3.dtype), status=cache.status, a_dtype=a3.dtype,
                     lstsq=lstsq(cache), entries=_entries(cache))
    if n == 0:
        return
    # a failed update keeps everything: the same answers after it
    bb = b.astype(np.result_type(b.dtype, current.dtype))
    before, err = j.attempt("solve before a failing update", lambda: cache.solve(bb))
    if before is None:
        return
    before = np.array(before)
    gen = cache.generation
    bad = current.copy()
    bad[0, :] = 0
    done, err = j.attempt("update(singular)", lambda: cache.update(A=C.same_pattern(m, kind, bad)))
    if done is None and err is not None and isinstance(err, sv.SolveError):
        j.expect("failed update", cache.generation == gen, "a failed update bumped the generation")
        again, err = j.attempt("solve after a failed update", lambda: cache.solve(bb))
        if again is not None:
            scale = max(float(np.abs(before).max()), 1e-300)
            r_now = cache_rtol(cache, current.dtype)
            j.close("solve after a failed update (unchanged)", again, before, 1e-12 if r_now is None
                    else 4 * r_now * max(R.cond(current), 1.0), scale)
    elif done is not None:                     # not detected at update: judged on the new A
        x, err = j.attempt("solve after an accepted singular update", lambda: cache.solve(bb))
        if x is not None:
            solve_result(j, "solve after an accepted singular update", bad, bb, x,
                         u=R.eps(bad.dtype), rtol=cache_rtol(cache, bad.dtype),
                         status=cache.status, a_dtype=bad.dtype,
                     lstsq=lstsq(cache), entries=_entries(cache))
