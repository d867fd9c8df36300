"""The backend table: array namespace detection and the few kernels that differ per backend.

The backend is always read from the arrays themselves (``array_api_compat``); nothing here is
global state except the one-time registration of pytrees with jax (``ensure_jax_pytrees``).
Backend-specific kernels: sparse CSR times dense (``spmm``), dense <-> host conversion.
"""

from __future__ import annotations

import sys
from typing import Any

import array_api_compat as aac
import numpy as np

from ._errors import BackendNotSupported

__all__ = ["namespace", "backend_name", "is_jax", "is_cupy", "to_numpy", "spmm"]


def is_jax(x: Any) -> bool:
    return "jax" in sys.modules and aac.is_jax_array(x)


def is_cupy(x: Any) -> bool:
    return "cupy" in sys.modules and aac.is_cupy_array(x)


def namespace(*arrays: Any):
    """Array namespace of the given arrays (numpy when all are numpy or python scalars).

    jax wins over numpy when mixed (numpy constants such as a pattern's index arrays are then
    lifted into jax); mixing cupy and jax raises.
    """
    arrs = [a for a in arrays if a is not None and not isinstance(a, (int, float, complex))]
    if any(is_jax(a) for a in arrs):
        if any(is_cupy(a) for a in arrs):
            raise BackendNotSupported("cannot mix cupy and jax arrays in one operation; "
                                      "convert one side with DLPack first")
        import jax.numpy as jnp

        return jnp
    if any(is_cupy(a) for a in arrs):
        import cupy

        return cupy
    return np


def backend_name(xp) -> str:
    mod = getattr(xp, "__name__", "")
    if mod.startswith("jax"):
        return "jax"
    if mod.startswith("cupy"):
        return "cupy"
    return "numpy"


def to_numpy(x: Any) -> np.ndarray:
    """Host copy (a documented device->host transfer for cupy; jax arrays must be concrete)."""
    if is_cupy(x):
        return x.get()
    return np.asarray(x)


def spmm(values, pattern, X):
    """CSR(values on pattern) @ X for X of shape (n,) or (n, k), in X's/values' backend.

    numpy: scipy CSR (compiled SpMM). cupy: cupyx CSR (cuSPARSE SpMM; the pattern's index arrays
    live on the device once per pattern). jax: gather + ``segment_sum`` (differentiable,
    jit-able; O(nnz·k) work and memory).
    """
    xp = namespace(values, X)
    name = backend_name(xp)
    shape = pattern.shape
    if name == "numpy":
        import scipy.sparse as sp

        S = sp.csr_matrix((values, pattern.indices, pattern.indptr), shape=shape)
        return np.asarray(S @ X)
    if name == "cupy":
        import cupyx.scipy.sparse as csp

        S = csp.csr_matrix((xp.asarray(values), pattern.on(xp, "indices"),
                            pattern.on(xp, "indptr")), shape=shape)
        return S @ X
    import jax

    values = xp.asarray(values)
    X = xp.asarray(X)
    indices = pattern.indices
    if X.ndim == 1:
        contrib = values * X[indices]
    else:
        contrib = values[:, None] * X[indices]
    return jax.ops.segment_sum(contrib, pattern.rows, num_segments=shape[0], indices_are_sorted=True)
