"""The oracle's rule: every answer is a correct number or a NAMED error.

A query's answer is judged against the dense reference (``reference.py``) with a bound from
the working precision and the condition number; an exception is acceptable only when it is
one the library names for the situation — a :class:`solvers.SolveError` (singular, not
Hermitian, no convergence, non-finite ...) or :class:`solvers.BackendNotSupported` (this
engine cannot answer this query) — never a bare ``IndexError``/``ZeroDivisionError``/... and
never SUCCESS with a wrong number. A :class:`Judge` collects every violation of one case with
its context and fails once, listing them all (and hypothesis shrinks that failure).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

import linops as lo
import solvers as sv

from . import reference as R

NAMED = (sv.SolveError, sv.BackendNotSupported)


class Judge:
    """Violations of one case (``where``: the case, form and engine), raised by :meth:`done`."""

    def __init__(self, where: str):
        self.where = where
        self.failures: list[str] = []
        self.checked = 0

    def fail(self, what: str, why: str) -> None:
        self.failures.append(f"{what}: {why}")

    def attempt(self, what: str, fn, named=NAMED):
        """(value, None) or (None, the named exception); an unnamed exception is a violation
        (returned as the second item too, so the caller stops)."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # HintWarning and friends are not answers
                return fn(), None
        except named as e:
            return None, e
        except Exception as e:  # noqa: BLE001 - the point: anything else is a finding
            self.fail(what, f"raised an unnamed {type(e).__name__}: {e}")
            return None, e

    def close(self, what: str, got, want, bound: float | None, scale: float = 1.0) -> None:
        """max|got − want| ≤ bound·scale (None: the bound is vacuous; shapes still checked)."""
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            self.fail(what, f"shape {got.shape}, the reference's {want.shape}")
            return
        if not np.all(np.isfinite(got)):
            self.fail(what, "holds NaN/Inf")
            return
        self.checked += 1
        if bound is None or got.size == 0:
            return
        err = float(np.max(np.abs(got.astype(np.clongdouble) - want)))
        if err > bound * scale:
            k = int(np.argmax(np.abs(got.astype(np.clongdouble) - want)))
            self.fail(what, f"error {err:.3g} > bound {bound * scale:.3g} (at flat index {k}: got "
                            f"{complex(got.reshape(-1)[k]):.10g}, reference "
                            f"{complex(want.reshape(-1)[k]):.10g})")

    def expect(self, what: str, ok: bool, why: str) -> None:
        if not ok:
            self.fail(what, why)

    def done(self) -> None:
        if self.failures:
            raise AssertionError(f"{self.where}: {len(self.failures)} wrong answer(s):\n  - "
                                 + "\n  - ".join(self.failures))


def quiet():
    """Warnings off (hints that do not hold warn; the oracle judges answers, not warnings)."""
    cm = warnings.catch_warnings()
    cm.__enter__()
    warnings.simplefilter("ignore")
    return cm


@contextlib.contextmanager
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ----- the judged queries ------------------------------------------------------------------------
def solve_result(j: Judge, what: str, M, b, x, *, u: float, rtol: float | None, status,
                 a_dtype, lstsq: bool = False, entries: bool = True) -> None:
    """x answers M x = b: right shape and dtype, finite, and within the backward-error bound —
    c·n·u for a direct method, the tolerance for an iterative one reporting SUCCESS (plus the
    rounding of the residual it computed), the attainable 16·√n·u componentwise for
    ACCURACY_LIMIT (normwise ‖b − Mx‖ / (‖Mx‖ + ‖b‖) for an operator that stores no entries,
    ``entries=False``: the measure ``solvers._acceptance`` documents for matrix-free operators,
    which have no |A|) — and the forward error that backward error allows. ``lstsq``: an iterative
    least-squares method (LSMR), accepted on ‖b − Mx‖ ≤ rtol·‖b‖ or on the normal-equation
    residual ‖Mᴴ(b − Mx)‖ ≤ rtol·‖Mᴴb‖ (the minimum-norm least-squares solution of a singular
    M is its answer); its forward error is then κ times larger."""
    M = np.asarray(M)
    b = np.asarray(b)
    x = np.asarray(x)
    n = M.shape[0]
    want_dtype = np.result_type(a_dtype, b.dtype, np.float32)
    if x.shape != b.shape:
        j.fail(what, f"shape {x.shape} for b of shape {b.shape}")
        return
    if x.dtype != want_dtype:
        j.fail(what, f"dtype {x.dtype}, expected result_type(A, b, float32) = {want_dtype}")
    if not np.all(np.isfinite(x)):
        j.fail(what, "holds NaN/Inf")
        return
    j.checked += 1
    if n == 0 or x.size == 0:
        return
    X = x.reshape(n, -1).astype(np.clongdouble)
    B = b.reshape(n, -1).astype(np.clongdouble)
    Ml = M.astype(np.clongdouble)
    res = B - Ml @ X
    anorm = R.norm2(M)
    for k in range(X.shape[1]):
        r = float(np.linalg.norm(res[:, k].astype(np.complex128)))
        xn = float(np.linalg.norm(X[:, k].astype(np.complex128)))
        bn = float(np.linalg.norm(B[:, k].astype(np.complex128)))
        scale = anorm * xn + bn
        eta = r / scale if scale > 0 else 0.0
        col = f"{what}[:, {k}]" if X.shape[1] > 1 else what
        if rtol is None:
            allowed = R.backward_bound(n, u)
            if eta > allowed:
                j.fail(col, f"backward error {eta:.3g} > c·n·u = {allowed:.3g} (‖b − Ax‖ = "
                            f"{r:.3g}, status {getattr(status, 'name', status)})")
        elif status is sv.Status.ACCURACY_LIMIT:
            allowed = 2 * 16 * np.sqrt(n) * u
            if entries:
                w = np.abs(res[:, k]) / (np.abs(Ml) @ np.abs(X[:, k]) + np.abs(B[:, k]))
                omega, how = float(np.max(np.where(np.isfinite(w), w, 0.0)).real), "componentwise"
            else:
                mx = float(np.linalg.norm((Ml @ X[:, k]).astype(np.complex128)))
                omega, how = (r / (mx + bn) if mx + bn > 0 else 0.0), "normwise"
            if omega > allowed:
                j.fail(col, f"ACCURACY_LIMIT with {how} backward error {omega:.3g} > "
                            f"2·16·√n·u = {allowed:.3g}")
        else:
            tol = rtol * bn + R.backward_bound(n, u) * scale
            if lstsq and r > tol:
                g = float(np.linalg.norm((Ml.conj().T @ res[:, k]).astype(np.complex128)))
                g0 = float(np.linalg.norm((Ml.conj().T @ B[:, k]).astype(np.complex128)))
                gtol = rtol * g0 + R.backward_bound(n, u) * anorm * scale
                if g > gtol:
                    j.fail(col, f"{getattr(status, 'name', status)} with ‖Aᴴ(b − Ax)‖ = {g:.6g}"
                                f" > rtol·‖Aᴴb‖ = {rtol * g0:.6g} and ‖b − Ax‖ = {r:.6g} > "
                                f"rtol·‖b‖ = {rtol * bn:.6g}")
            elif r > tol:
                j.fail(col, f"{getattr(status, 'name', status)} with ‖b − Ax‖ = {r:.6g} > "
                            f"rtol·‖b‖ = {rtol * bn:.6g} (ratio {r / (rtol * bn):.3g})")
    kappa = R.cond(M)
    if not np.isfinite(kappa):
        return                          # singular: a consistent solution is a solution
    ref = R.solve(M, B)
    eta_allowed = R.backward_bound(n, u) + (0.0 if rtol is None else
                                            2 * rtol * (kappa if lstsq else 1.0))
    fb = R.forward_bound(kappa, eta_allowed)
    if fb is not None and ref is not None:
        for k in range(X.shape[1]):
            num = float(np.linalg.norm((X[:, k] - ref[:, k]).astype(np.complex128)))
            den = float(np.linalg.norm(ref[:, k].astype(np.complex128)))
            if den > 0 and num / den > fb:
                j.fail(f"{what}[:, {k}]", f"forward error {num / den:.3g} > {fb:.3g} allowed by "
                                          f"κ = {kappa:.3g}")


def accuracy(n: int, u: float, rtol: float | None, kappa: float) -> float | None:
    """The relative accuracy of anything computed from one factorization (or one converged
    Krylov run per column) of A: κ·(c·n·u + 2·rtol), None when that is not below ½."""
    eta = R.backward_bound(n, u) + (0.0 if rtol is None else 2 * rtol)
    return R.forward_bound(kappa, eta)


def dense_of(G, n: int):
    """lo.to_dense of a lazy cotangent (the oracle's matrices are small)."""
    return np.asarray(lo.to_dense(G, allow_dense=True)) if n else np.zeros((0, 0))
