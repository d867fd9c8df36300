"""Dense references in extended precision, and the error bounds the judge allows.

Every reference is computed from the dense matrix itself in numpy's long double (x86: 64-bit
mantissa, eps ≈ 1.1e-19) by Gaussian elimination with partial pivoting, so that its own
error, about n·cond·1e-19, is negligible against any bound below for cond up to 1e14. The
bounds are the textbook ones, from the working precision u of the engine and the condition
number κ of A (never a fixed 1e-8):

* backward error of a backward-stable solve: ‖b − Ax‖ ≤ c·n·u·(‖A‖‖x‖ + ‖b‖);
* forward error: ‖x − x*‖/‖x*‖ ≤ 2κ·η/(1 − κη) for a backward error η (vacuous when κη ≥ ½);
* entries of A⁻¹: |δZᵢⱼ| ≤ ‖Z‖₂·κ·c·n·u (δZ ≈ −Z δA Z);
* log|det A|: |δ| ≤ n·κ·c·n·u (δ log det = Re tr(A⁻¹δA)).

c = ``C_BACKWARD`` (32): a growth-factor allowance, generous against rounding and tight
against what a wrong formula gives (a missing conjugate or transpose is an O(1) error on the
complex and nonsymmetric matrices, far above these bounds wherever κ·u is small).
"""

from __future__ import annotations

import numpy as np

LD = np.longdouble
CLD = np.clongdouble
C_BACKWARD = 32.0


def eps(dtype) -> float:
    """The unit roundoff of the working precision of ``dtype`` (integers: float64)."""
    dt = np.dtype(dtype)
    if dt.kind not in "fc" or dt.itemsize < 4:
        dt = np.dtype(np.float64)
    return float(np.finfo(dt).eps)


def working_eps(A_dtype, *others) -> float:
    """The engine's working precision: A's (a complex b of a real A is solved in A's
    precision, a float32 b of a float64 A in float64)."""
    return eps(A_dtype)


def _ld(a):
    a = np.asarray(a)
    return a.astype(CLD if a.dtype.kind == "c" else LD)


def lu(a):
    """(LU in place, pivots, sign of the permutation) of a square matrix in long double."""
    a = _ld(a).copy()
    n = a.shape[0]
    piv = np.arange(n)
    sign = 1
    for k in range(n):
        p = k + int(np.argmax(np.abs(a[k:, k])))
        if p != k:
            a[[k, p]] = a[[p, k]]
            piv[[k, p]] = piv[[p, k]]
            sign = -sign
        if a[k, k] == 0:
            continue
        a[k + 1:, k] /= a[k, k]
        a[k + 1:, k + 1:] -= np.outer(a[k + 1:, k], a[k, k + 1:])
    return a, piv, sign


def solve(a, b):
    """x with a x = b (b of shape (n,) or (n, k)), long double; None when a is singular."""
    a = np.asarray(a)
    n = a.shape[0]
    if n == 0:
        return np.zeros(np.shape(b), dtype=np.result_type(a.dtype, np.asarray(b).dtype, np.float64))
    f, piv, _ = lu(a)
    if np.any(np.diagonal(f) == 0):
        return None
    B = _ld(b)
    vec = B.ndim == 1
    B = (B[:, None] if vec else B)[piv].astype(np.result_type(f.dtype, B.dtype))
    for k in range(n):                       # L y = P b (unit lower)
        B[k + 1:] -= np.outer(f[k + 1:, k], B[k])
    for k in range(n - 1, -1, -1):           # U x = y
        B[k] /= f[k, k]
        B[:k] -= np.outer(f[:k, k], B[k])
    return B[:, 0] if vec else B


def inverse(a):
    """A⁻¹ in long double (None when singular)."""
    n = np.asarray(a).shape[0]
    return solve(a, np.eye(n))


def slogdet(a):
    """(sign, log|det a|) in long double; (0, -inf) when singular."""
    a = np.asarray(a)
    if a.shape[0] == 0:
        return 1.0, 0.0
    f, _, sign = lu(a)
    d = np.diagonal(f)
    if np.any(d == 0):
        return 0.0, -np.inf
    ph = np.prod(d / np.abs(d)) * sign
    return (complex(ph) if a.dtype.kind == "c" else float(np.real(ph))), float(np.sum(np.log(np.abs(d))))


def cond(a) -> float:
    """κ₂(a) (inf for a singular a, 1 for n = 0)."""
    a = np.asarray(a)
    if a.shape[0] == 0:
        return 1.0
    s = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else np.inf


def norm2(a) -> float:
    a = np.asarray(a)
    return float(np.linalg.norm(a.astype(np.complex128), 2)) if a.size else 0.0


def backward_bound(n: int, u: float) -> float:
    """η allowed for a backward-stable direct solve: c·n·u."""
    return C_BACKWARD * max(n, 1) * u


def forward_bound(kappa: float, eta: float) -> float | None:
    """The relative forward error a backward error η allows (None: vacuous, κη ≥ ½)."""
    ke = kappa * eta
    return None if not np.isfinite(ke) or ke >= 0.5 else 2 * ke / (1 - ke)
