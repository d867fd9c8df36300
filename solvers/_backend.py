"""Per-backend access to matrices and linear-algebra modules for the solvers.

numpy: scipy. cupy: cupyx.scipy (sparse LU: cupyx ``splu``, which factorizes on the HOST with
SuperLU and solves on the GPU). jax: dense through jax.scipy; sparse through the scipy path on
host copies (outside ``jax.jit``; the traced path lives in ``adjoints.jax``).
"""

from __future__ import annotations

import numpy as np

import linops as lo
from linops._backend import backend_name, namespace, to_numpy
from linops._pytree_util import array_leaves



def xp_of(A: lo.LinearOperator):
    return namespace(*array_leaves(A))


def name_of(A: lo.LinearOperator) -> str:
    return backend_name(xp_of(A))


def dense_linalg(xp):
    name = backend_name(xp)
    if name == "numpy":
        import scipy.linalg as la
    elif name == "cupy":
        import cupyx.scipy.linalg as la
    else:
        import jax.scipy.linalg as la
    return la


def host_csr(A: lo.Sparse):
    """scipy CSR with host values (a device->host copy for cupy/jax values)."""
    import scipy.sparse as sp

    p = A.pattern
    return sp.csr_matrix((to_numpy(A.values), p.indices, p.indptr), shape=A.shape)


def device_csr(A: lo.Sparse):
    import cupy
    import cupyx.scipy.sparse as csp

    p = A.pattern
    return csp.csr_matrix((A.values, p.on(cupy, "indices"), p.on(cupy, "indptr")), shape=A.shape)


def as_dense_array(A: lo.LinearOperator):
    if isinstance(A, lo.Dense):
        return A.a
    return lo.to_dense(A)


def finite_or_raise(x, name: str) -> None:
    """ValueError naming the first non-finite entry of x (host check; cheap, vectorised)."""
    xp = namespace(x)
    ok = xp.isfinite(x)
    if bool(xp.all(ok)):
        return
    bad = np.flatnonzero(~to_numpy(ok).reshape(-1))
    k = int(bad[0])
    idx = np.unravel_index(k, tuple(x.shape))
    val = to_numpy(x).reshape(-1)[k]
    raise ValueError(f"{name} contains {val} at index {tuple(int(i) for i in idx)} "
                     f"({bad.size} non-finite entries); check_finite=False skips this check")


def split_complex(fn, B, factor_dtype):
    """Apply a host solve ``fn`` of a REAL factorization to a possibly complex B (real and
    imaginary parts separately: SuperLU, CHOLMOD, spilu and pyamg refuse mixed dtypes)."""
    if np.dtype(B.dtype).kind == "c" and np.dtype(factor_dtype).kind != "c":
        xp = namespace(B)
        if xp is np:
            return fn(np.ascontiguousarray(B.real)) + 1j * fn(np.ascontiguousarray(B.imag))
        return fn(xp.real(B)) + 1j * fn(xp.imag(B))
    return fn(B)
