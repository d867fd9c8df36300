"""A stochastic estimate of log det A for operators that cannot be factorized (matrix-free,
too large), with an error bar that includes the quadrature error: stochastic Lanczos
quadrature (SLQ) with Gauss and Gauss–Radau rules.

For Rademacher probes z (E[zzᴴ] = I), log det A = tr log A = E[zᴴ log(A) z], and each zᴴ log(A) z
is approximated by m Lanczos steps started from z: ‖z‖² e₁ᵀ log(T) e₁ (the Gauss quadrature of
the Ritz values of the Lanczos tridiagonal T). Two errors, both in ``stderr``:

* the Monte-Carlo error: the sample standard deviation over √probes;
* the quadrature error (a bias, the same sign for every probe): log's even derivatives are
  negative, so each Gauss rule is an UPPER bound of zᴴ log(A) z, and the Gauss–Radau rule with
  a node at a lower bound a ≤ λ_min(A) is a LOWER bound (Golub–Meurant). Each probe's value is
  the middle of its bracket, and the mean half-width bounds the bias of the mean. The lower
  bound a is the user's (``lower_bound=``) or the tightest one the Lanczos runs resolved: some
  probe's smallest Ritz value θ minus its residual ρ = β_m·|s_m| (an eigenvalue lies within ρ
  of θ), among those consistent with the smallest Ritz value of all. When no probe resolved
  the bottom of the spectrum (θ − ρ ≤ 0), the quadrature error cannot be bounded: the estimate
  refuses (ConvergenceError) instead of reporting an error bar that does not hold.

The bias falls like exp(−2·steps/√κ): ill-conditioned operators need steps of the order of
√κ. Never exact, and never presented as exact: for a factorizable A use ``cache.logdet()``.
"""

from __future__ import annotations

import numpy as np

import linops as lo
from linops.internals import ShapeError, to_numpy

from ._checks import require_hermitian_operator
from ._errors import ConvergenceError, SingularMatrixError
from ._results import LogDetEstimate, Status


def logdet_estimate(A, *, probes: int = 32, steps: int = 40, seed: int | None = 0,
                    lower_bound: float | None = None) -> LogDetEstimate:
    """Estimate log det A of a Hermitian positive definite operator by SLQ, with an error bar
    that holds: Monte-Carlo error and quadrature error (Gauss / Gauss–Radau bracket).

    Parameters
    ----------
    A : operator or anything ``lo.aslinop`` accepts (``lo.MatrixFree`` included)
        Hermitian positive definite; only products with A are used. Hermitian is checked
        (O(nnz) for a stored matrix, one product with two random vectors otherwise).
    probes : int
        Rademacher probes (≥ 2 for a standard error); the Monte-Carlo error falls like
        1/√probes.
    steps : int
        Lanczos steps per probe (with full reorthogonalization: O(n·steps) memory per probe);
        the quadrature error falls like exp(−2·steps/√κ).
    seed : int or None
        For the probes (reproducible by default).
    lower_bound : float, optional
        A lower bound a of A's spectrum (0 < a ≤ λ_min), e.g. a regularisation σ² of
        A = B + σ²I; the Gauss–Radau bounds then hold without resolving λ_min. Default: the
        bound the Lanczos runs resolve (see the module notes).

    Returns
    -------
    LogDetEstimate
        ``stderr`` = √(mc_stderr² + bias_bound²) combines the Monte-Carlo standard error and
        the bound of the quadrature error: ``value ± 2·stderr`` is about a 95 % interval,
        ``est.interval(level)`` one at any level.

    Raises
    ------
    ShapeError
        A not square, probes < 2 or steps < 1.
    NotHermitianError
        A is not Hermitian (log det of a general operator is not estimated here; use
        ``cache.logdet()`` of an LU factorization).
    SingularMatrixError
        A Ritz value ≤ 0: A is not positive definite.
    ConvergenceError
        No probe resolved the bottom of A's spectrum in ``steps`` steps (its smallest Ritz value
        θ and residual ρ give θ − ρ ≤ 0), so the quadrature error cannot be bounded: raise
        ``steps`` (the message says how far θ is from resolved) or pass ``lower_bound``.
    ValueError
        ``lower_bound`` not positive, or above a Ritz value (then it bounds nothing).

    Notes
    -----
    Cost: probes·steps products with A (blocks of all probes at once), O(n·steps·probes)
    work for the reorthogonalization, O(steps³) per probe for the two quadratures. The
    gradient, tr(A⁻¹dA) by Hutchinson with the same probes and its standard error:
    ``adjoints.logdet_estimate_pullback``.

    Examples
    --------
    >>> import numpy as np, linops as lo, solvers as sv
    >>> fam, _ = lo.testing.poisson_family(8)
    >>> K = fam(np.ones(fam.n_params))
    >>> est = sv.logdet_estimate(lo.MatrixFree(K.shape, K.dtype, K.matmat, K.matmat), probes=50)
    >>> exact = sv.init(sv.LinearProblem(K), sv.LU()).logdet().logabsdet
    >>> bool(abs(est.value - exact) < 2 * est.stderr), est.bias_bound < est.mc_stderr
    (True, True)

    An ill-conditioned operator and too few steps: refused, not an error bar 10× too small.

    >>> w = np.logspace(-6, 0, 300)
    >>> sv.logdet_estimate(lo.Diagonal(w), steps=40)
    Traceback (most recent call last):
    ...
    solvers._errors.ConvergenceError: logdet_estimate: the quadrature error cannot be bounded ...
    """
    A = lo.aslinop(A)
    n, m = A.shape
    if n != m:
        raise ShapeError(f"logdet_estimate needs a square operator, got A.shape={A.shape}")
    if probes < 2 or steps < 1:
        raise ShapeError(f"logdet_estimate: probes={probes} must be ≥ 2 (for a standard error) "
                         f"and steps={steps} ≥ 1")
    if lower_bound is not None and not (np.isfinite(lower_bound) and lower_bound > 0):
        raise ValueError(f"logdet_estimate: lower_bound must be a positive number (a lower bound "
                         f"of A's spectrum), got {lower_bound!r}")
    require_hermitian_operator(A, "logdet_estimate")
    steps = min(steps, n)
    rng = np.random.default_rng(seed)
    dtype = np.result_type(A.dtype, np.float64)
    Z = rng.choice([-1.0, 1.0], size=(n, probes)).astype(dtype)
    alpha, beta, m_eff = _lanczos(A, Z, steps, dtype)
    gauss, change, theta, rho, eig = [], 0.0, [], [], []
    for p in range(probes):
        mm = int(m_eff[p])
        th, U = _tridiagonal_eig(alpha[:mm, p], beta[:mm - 1, p])
        if th.min() <= 0:
            raise SingularMatrixError(f"logdet_estimate: a Ritz value is {th.min():.3g} ≤ 0: A "
                                      f"is not positive definite (the estimate needs a "
                                      f"Hermitian positive definite A)")
        eig.append((th, U))
        gauss.append(n * float(np.sum(np.abs(U[0]) ** 2 * np.log(th))))
        if mm > 1:
            change = max(change, abs(gauss[-1] - _gauss(alpha[:mm - 1, p], beta[:mm - 2, p], n)))
        theta.append(float(th[0]))
        rho.append(float(beta[mm - 1, p] * abs(U[mm - 1, 0])) if mm < n else 0.0)
    theta, rho = np.array(theta), np.array(rho)
    a = _spectrum_floor(theta, rho, lower_bound, steps, max(float(th[-1]) for th, _ in eig))
    radau = np.array([gauss[p] if rho[p] == 0 or beta[int(m_eff[p]) - 1, p] == 0 else
                      _radau(alpha[:int(m_eff[p]), p], beta[:int(m_eff[p]), p], n,
                             min(a, theta[p] * (1 - 1e-12)))
                      for p in range(probes)])
    gauss = np.array(gauss)
    radau = np.minimum(radau, gauss)          # rounding: the bracket is never inverted
    samples = 0.5 * (gauss + radau)
    value = float(samples.mean())
    mc = float(samples.std(ddof=1) / np.sqrt(probes))
    # plus the rounding of the quadratures (an exact bracket, e.g. a diagonal A and Rademacher
    # probes, still has it): the Ritz values carry an absolute error of ~u·θ_max, so
    # n·Σ τ² log θ is off by n·Σ τ²·u·θ_max/θ, and the sum by n·u·max|log θ|
    u = 32 * float(np.finfo(float).eps)
    rounding = np.mean([n * u * (float(np.sum(np.abs(U[0]) ** 2 * th[-1] / th))
                                 + float(np.abs(np.log(th)).max())) for th, U in eig])
    bias = float(np.mean(0.5 * (gauss - radau))) + float(rounding)
    Z.setflags(write=False)
    return LogDetEstimate(value, float(np.hypot(mc, bias)), samples, Z, steps, change, A,
                          mc_stderr=mc, bias_bound=bias, lower_bound=float(a))


def _lanczos(A, Z, steps, dtype):
    """Block Lanczos, one run per probe (column), full reorthogonalization; (α, β, m_eff):
    β[j] is the norm after step j (the off-diagonal T[j, j+1]), a probe whose Krylov space
    closed early stops there (m_eff)."""
    n, probes = Z.shape
    Q = np.zeros((steps, n, probes), dtype=dtype)
    alpha = np.zeros((steps, probes))
    beta = np.zeros((steps, probes))
    q = Z / np.sqrt(n)
    done = np.zeros(probes, dtype=bool)
    m_eff = np.full(probes, steps)
    for j in range(steps):
        Q[j] = q
        w = np.asarray(to_numpy(A @ q))
        a = np.real(np.sum(np.conj(q) * w, axis=0))
        alpha[j] = np.where(done, alpha[j], a)
        w = w - q * a
        if j > 0:
            w = w - Q[j - 1] * beta[j - 1]
        for _ in range(2):  # full reorthogonalization, twice is enough
            w = w - np.einsum("jnp,jp->np", Q[:j + 1], np.einsum("jnp,np->jp", np.conj(Q[:j + 1]), w))
        b = np.linalg.norm(w, axis=0)
        newly = (b <= 1e-12 * np.maximum(np.abs(alpha[:j + 1]).max(axis=0), 1e-300)) & ~done
        m_eff[newly] = j + 1
        done |= newly
        beta[j] = np.where(done, 0.0, b)
        q = np.where(done, 0.0, w / np.where(b > 0, b, 1.0))
    return alpha, beta, m_eff


def _tridiagonal_eig(alpha, beta):
    """Eigenvalues and eigenvectors of the symmetric tridiagonal (α, β): LAPACK stev, O(m²)
    (a dense eigh of the m×m matrix paid BLAS thread start-ups per probe)."""
    from scipy.linalg import eigh_tridiagonal  # scipy.linalg: only the estimator needs it

    if alpha.size == 1:
        return alpha.copy(), np.ones((1, 1))
    return eigh_tridiagonal(alpha, beta)


def _gauss(alpha, beta, n):
    """‖z‖² e₁ᵀ log(T) e₁ for the Lanczos tridiagonal (α, β), ‖z‖² = n (Rademacher)."""
    th, U = _tridiagonal_eig(alpha, beta)
    return float(n * np.sum(U[0] ** 2 * np.log(np.maximum(th, 1e-300))))


def _radau(alpha, beta, n, a):
    """The Gauss–Radau rule with a node at a (< every Ritz value): T extended by one row,
    β_m and ω = a + β_m²·[(T − aI)⁻¹]ₘₘ, so that a is an eigenvalue; a lower bound of
    zᴴ log(A) z when a ≤ λ_min(A). ``beta`` holds β₁..β_m (β_m: after the last step).
    [(T − aI)⁻¹]ₘₘ is 1/dₘ of the pivots dᵢ = αᵢ − a − βᵢ₋₁²/dᵢ₋₁ (all > 0: T − aI is
    positive definite), O(m)."""
    m = alpha.size
    d = alpha[0] - a
    for i in range(1, m):
        d = alpha[i] - a - beta[i - 1] ** 2 / d
    omega = a + beta[m - 1] ** 2 / d
    th, U = _tridiagonal_eig(np.append(alpha, omega), beta[:m])
    th = np.maximum(th, a * (1 - 1e-12))   # the node a itself, up to rounding
    return float(n * np.sum(U[0] ** 2 * np.log(th)))


def _spectrum_floor(theta, rho, lower_bound, steps, top_ritz) -> float:
    """The node a of the Gauss–Radau rules: the user's bound (checked against the Ritz values,
    which are never below λ_min), or the tightest resolved one: max(θ_p − ρ_p) over the probes
    whose interval [θ_p − ρ_p, θ_p + ρ_p] reaches down to the smallest Ritz value of all (the
    others approximate a higher eigenvalue). ConvergenceError when it is not positive."""
    top = float(theta.min())
    if lower_bound is not None:
        if lower_bound > top * (1 + 1e-12):
            raise ValueError(f"logdet_estimate: lower_bound={lower_bound:.6g} is above a Ritz "
                             f"value of A ({top:.6g}), so it is not a lower bound of A's "
                             f"spectrum")
        return float(lower_bound)
    low = theta - rho
    a = float(low[low <= top].max())
    if a <= 0:
        k = int(np.argmin(theta))
        kappa = top_ritz / theta[k]
        raise ConvergenceError(
            f"logdet_estimate: the quadrature error cannot be bounded after steps={steps} "
            f"Lanczos steps: no probe resolved the bottom of A's spectrum (smallest Ritz value "
            f"{theta[k]:.3g} with residual {rho[k]:.3g}). The condition number is at least "
            f"{kappa:.3g}, and the steps needed grow like √κ ≥ {np.sqrt(kappa):.0f}: raise "
            f"steps, or pass lower_bound= (a positive lower bound of A's spectrum, e.g. a "
            f"regularisation)", [], status=Status.MAX_ITERATIONS)
    return a
