"""The acceptance rule for iterative results, one for every engine (scipy, cupyx, jax, PETSc).

An iterate x of A x = b (or of Aᴴ x = c) is judged on its TRUE residual r = ‖b − A x‖, never on
the method's own estimate, with tol = max(rtol·‖b‖, atol):

* ``SUCCESS`` when r ≤ tol — no slack.
* ``ACCURACY_LIMIT`` when r > tol but the tolerance is below what the precision can deliver:
  every equation is satisfied to the rounding level, i.e. the componentwise backward error
  (Oettli–Prager) ω = maxᵢ |b − A x|ᵢ / (|A| |x| + |b|)ᵢ is at most ``ATTAINABLE``·√n·eps
  (x then solves a system whose every entry differs from A's and b's by that relative amount),
  AND the iterate settled: one more run from x does not move it by more than √eps·‖x‖, AND
  r < ‖b‖. If that one more run reaches the tolerance, the tolerance was within reach: its
  iterate is returned as ``SUCCESS`` (its iterations are counted). A method that merely ran out
  of iterations fails these tests (its equations are far from the rounding level, or the
  rerun converges); an iterate of a singular or inconsistent system fails one of them (an
  equation it cannot satisfy has ω ≈ 1; a null-space component keeps drifting; its residual
  exceeds ‖b‖). Operators that store no entries (matrix-free) use the normwise
  r / (‖A x‖ + ‖b‖) for ω.
* anything else is a failure: ``MAX_ITERATIONS`` (ran out), ``STAGNATION`` (claimed convergence
  that the true residual denies), ``BREAKDOWN``, ``NONFINITE``.

>>> import numpy as np
>>> backward_error(np.array([1e-17, 0.0]), np.array([1.0, 0.0]))
1e-17
>>> backward_error(np.array([0.5]), np.array([0.0]))             # an equation with no A-part
inf
>>> verdict(1e-9, 1.0, 1e-8, 1.0, 1e-15, "converged", lambda: None, "float64")[0].name
'SUCCESS'
>>> verdict(1e-7, 1.0, 1e-8, 1e-9, 1e-15, "maxiter", lambda: None, "float64")[0].name
'MAX_ITERATIONS'
>>> verdict(1e-7, 1.0, 1e-8, 1e-17, 1e-15, "maxiter", lambda: (9e-8, 1e-20, 1.0), "float64")
(<Status.ACCURACY_LIMIT: ...>, False)
>>> verdict(1e-7, 1.0, 1e-8, 1e-17, 1e-15, "maxiter", lambda: (1e-9, 1e-7, 1.0), "float64")[1]
True
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ._checks import eps
from ._results import Status

ATTAINABLE = 16.0  # c in the backward-error bound c·√n·eps


def attainable(n: int, dtype) -> float:
    """The backward error rounding alone leaves: ``ATTAINABLE``·√n·eps of the working
    precision of ``dtype``."""
    return ATTAINABLE * math.sqrt(max(int(n), 1)) * eps(dtype)


def backward_error(residual_abs, scale) -> float:
    """maxᵢ |rᵢ| / sᵢ with s = |A||x| + |b| (host arrays); an equation with sᵢ = 0 but rᵢ ≠ 0
    is not satisfied at all (inf); 0/0 counts as satisfied."""
    r = np.asarray(residual_abs, dtype=np.float64).ravel()
    s = np.asarray(scale, dtype=np.float64).ravel()
    if r.size == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(s > 0, r / np.where(s > 0, s, 1.0), np.where(r > 0, np.inf, 0.0))
    return float(np.max(w))


def verdict(rnorm: float, bnorm: float, tol: float, omega, limit: float, outcome: str,
            rerun: Callable[[], tuple[float, float, float]], dtype) -> tuple[Status, bool]:
    """The status of an iterate (see the module docstring), and whether the acceptance rerun's
    iterate is to be returned instead (it reached the tolerance).

    Parameters
    ----------
    rnorm, bnorm, tol : float
        The true residual norm, ‖b‖ and max(rtol·‖b‖, atol).
    omega : float or callable
        Its backward error, or a function computing it: called only for an iterate that
        missed ``tol`` (it costs an O(nnz) |A| product and, on PETSc, a |A| matrix; a
        converged solve never pays it).
    limit : float
        :func:`attainable` for the system.
    outcome : {'converged', 'maxiter', 'breakdown'}
        How the method's own loop ended.
    rerun : callable
        Runs the method once more from the iterate; returns (its true residual, ‖x₂ − x‖,
        ‖x‖). Called only when the other tests pass.
    dtype
        The working precision (for √eps).

    Returns
    -------
    (Status, bool)
        ``SUCCESS`` / ``ACCURACY_LIMIT`` / a failure; True when the rerun reached ``tol`` (then
        its iterate is the answer, a ``SUCCESS``: the tolerance was within reach after all).
    """
    if not math.isfinite(rnorm):
        return Status.NONFINITE, False
    if rnorm <= tol:
        return Status.SUCCESS, False
    failure = {"converged": Status.STAGNATION, "breakdown": Status.BREAKDOWN}.get(
        outcome, Status.MAX_ITERATIONS)
    # an iterate that explains less than b itself is never a solution, whatever its backward
    # error (a singular inconsistent system's iterate: huge x, residual ≥ ‖b‖)
    if callable(omega):
        omega = omega()
    if not (rnorm < bnorm and omega <= limit):
        return failure, False
    r2, move, xnorm = rerun()
    if math.isfinite(r2) and r2 <= tol:
        return Status.SUCCESS, True
    settled = math.isfinite(move) and move <= math.sqrt(eps(dtype)) * xnorm
    return (Status.ACCURACY_LIMIT if settled else failure), False
