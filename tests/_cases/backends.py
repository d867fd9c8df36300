"""The backend axis (numpy, jax; cupy when a GPU is present) and the dtype axis of the
operator tests, and the conversions they compare with."""

from __future__ import annotations

import numpy as np
import pytest


def _cupy_or_reason():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "cupy is installed but no CUDA device is visible"
        return cupy, None
    except Exception as e:  # ImportError, CUDARuntimeError without a driver
        return None, f"no usable cupy/GPU here ({type(e).__name__}: {e})"


CUPY, CUPY_REASON = _cupy_or_reason()

BACKENDS = [
    pytest.param("numpy", id="numpy"),
    pytest.param("jax", id="jax"),
    pytest.param("cupy", id="cupy", marks=pytest.mark.skipif(CUPY is None, reason=str(CUPY_REASON))),
]
DTYPES = [pytest.param(np.float32, id="f32"), pytest.param(np.float64, id="f64"),
          pytest.param(np.complex128, id="c128")]


def namespace_for(name):
    if name == "numpy":
        return np
    if name == "jax":
        import jax.numpy as jnp

        return jnp
    return CUPY


def to_np(x):
    from linops._backend import to_numpy

    return to_numpy(x)
