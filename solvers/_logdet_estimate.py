"""A stochastic estimate of log det A for operators that cannot be factorized (matrix-free,
too large), with its standard error: stochastic Lanczos quadrature (SLQ).

For Rademacher probes z (E[zzᴴ] = I), log det A = tr log A = E[zᴴ log(A) z], and each zᴴ log(A) z
is approximated by m Lanczos steps started from z: ‖z‖² Σₖ τₖ² log θₖ (the Gauss quadrature of
the Ritz values θₖ with weights τₖ², the first components of the eigenvectors of the Lanczos
tridiagonal T). The estimate is the mean over the probes; ``stderr`` is the sample standard
deviation over √probes — the Monte-Carlo error. The quadrature error (bias) falls exponentially
with ``steps`` (about exp(−2·steps/√κ)); it is not in ``stderr``, so the estimate reports
``steps`` and the largest change of the last two quadratures as ``quadrature_change``.

Never exact, and never presented as exact: for a factorizable A use ``cache.logdet()``.
"""

from __future__ import annotations

import numpy as np

import linops as lo
from linops.internals import ShapeError, to_numpy

from ._errors import SingularMatrixError
from ._results import LogDetEstimate


def logdet_estimate(A, *, probes: int = 32, steps: int = 40, seed: int | None = 0) -> LogDetEstimate:
    """Estimate log det A of a Hermitian positive definite operator by SLQ, with its standard error.

    Parameters
    ----------
    A : operator or anything ``lo.aslinop`` accepts (``lo.MatrixFree`` included)
        Hermitian positive definite; only products with A are used.
    probes : int
        Rademacher probes (≥ 2 for a standard error); the error falls like 1/√probes.
    steps : int
        Lanczos steps per probe (with full reorthogonalization: O(n·steps) memory per probe).
    seed : int or None
        For the probes (reproducible by default).

    Returns
    -------
    LogDetEstimate

    Raises
    ------
    ShapeError
        A not square, probes < 2 or steps < 1.
    SingularMatrixError
        A Ritz value ≤ 0: A is not positive definite (log det of an indefinite operator is not
        estimated here).

    Notes
    -----
    Cost: probes·steps products with A (blocks of all probes at once) and O(n·steps·probes)
    work for the reorthogonalization. The gradient, tr(A⁻¹dA) by Hutchinson with the same
    probes and its standard error: ``adjoints.logdet_estimate_pullback``.

    Examples
    --------
    >>> import numpy as np, linops as lo, solvers as sv
    >>> fam, _ = lo.testing.poisson_family(8)
    >>> K = fam(np.ones(fam.n_params))
    >>> est = sv.logdet_estimate(lo.MatrixFree(K.shape, K.dtype, K.matmat, K.matmat), probes=50)
    >>> exact = sv.init(sv.LinearProblem(K), sv.LU()).logdet().logabsdet
    >>> bool(abs(est.value - exact) < 4 * est.stderr)
    True
    """
    A = lo.aslinop(A)
    n, m = A.shape
    if n != m:
        raise ShapeError(f"logdet_estimate needs a square operator, got A.shape={A.shape}")
    if probes < 2 or steps < 1:
        raise ShapeError(f"logdet_estimate: probes={probes} must be ≥ 2 (for a standard error) "
                         f"and steps={steps} ≥ 1")
    steps = min(steps, n)
    rng = np.random.default_rng(seed)
    dtype = np.result_type(A.dtype, np.float64)
    Z = rng.choice([-1.0, 1.0], size=(n, probes)).astype(dtype)
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
        alpha[j] = a
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
    samples = np.empty(probes)
    change = 0.0
    for p in range(probes):
        mm = int(m_eff[p])
        quad = [_quadrature(alpha[:k, p], beta[:k - 1, p], n) for k in (mm, max(mm - 1, 1))]
        samples[p] = quad[0]
        change = max(change, abs(quad[0] - quad[1]) if mm > 1 else 0.0)
    value = float(samples.mean())
    stderr = float(samples.std(ddof=1) / np.sqrt(probes))
    Z.setflags(write=False)
    return LogDetEstimate(value, stderr, samples, Z, steps, change, A)


def _quadrature(alpha, beta, n):
    """‖z‖² Σ τₖ² log θₖ for the Lanczos tridiagonal (α, β), ‖z‖² = n (Rademacher)."""
    T = np.diag(alpha) + np.diag(beta, 1) + np.diag(beta, -1)
    theta, U = np.linalg.eigh(T)
    if theta.min() <= 0:
        raise SingularMatrixError(f"logdet_estimate: a Ritz value is {theta.min():.3g} ≤ 0: A is "
                                  f"not positive definite (the estimate needs a Hermitian "
                                  f"positive definite A)")
    return float(n * np.sum(U[0] ** 2 * np.log(theta)))
