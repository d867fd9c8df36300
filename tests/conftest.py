"""Shared fixtures: the backend axis (numpy, jax; cupy when a GPU is present) and dtypes."""

from __future__ import annotations

import gc
import os

# The suite compiles thousands of tiny XLA programs: compiling dominates, running does not.
# Without backend optimisations the suite ran 945 s instead of 1073 s (2 cores). XLA:CPU's
# older elemental emitters instead of its fusion emitters then halve what is left of a tiny
# program's compile (~35 instead of ~73 ms a jitted function, ~22 instead of ~36 ms an eager
# op; tests/jax 655 -> 505 s and tests/jax/test_transforms.py 153 -> 72 s, run serially).
# The values are the same programs' (tolerances, not bit patterns of fused kernels, are what
# the tests compare).
# Subprocesses the tests start inherit both, except the notebooks' kernels (fixture
# ``xla_defaults``: they run real work, as a user would). ``python -m linops bench`` outside the
# suite keeps XLA's defaults.
SUITE_XLA_FLAG = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
USER_XLA_FLAGS = os.environ.get("XLA_FLAGS")
os.environ["XLA_FLAGS"] = " ".join([USER_XLA_FLAGS or "", SUITE_XLA_FLAG]).strip()


def _mkl_runtime() -> str | None:
    """The MKL runtime pypardiso would load, found once: where ``ctypes.util.find_library``
    knows none, pypardiso searches ``sys.prefix/lib*/**`` (jax, torch, ...) at EVERY
    ``PyPardisoSolver()``: one at its import, one where solvers loads PARDISO (a process that
    checks PARDISO took 2.7 instead of 1.0 s here), in every worker and every process a test
    starts (bench children, notebooks' kernels, mpirun ranks). The same file, shortest path
    first as pypardiso orders them; None (pypardiso searches as usual) where the library is on
    the loader's path or not directly in lib/."""
    import ctypes.util
    import glob
    import sys

    if ctypes.util.find_library("mkl_rt") is not None:
        return None
    found = sorted(glob.glob(os.path.join(sys.prefix, "[Ll]ib*", "*mkl_rt*")), key=len)
    return found[0] if found else None


MKL_RUNTIME = None if "PYPARDISO_MKL_RT" in os.environ else _mkl_runtime()
if MKL_RUNTIME is not None:
    os.environ["PYPARDISO_MKL_RT"] = MKL_RUNTIME


import numpy as np  # noqa: E402
import pytest  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # gradient tests need float64

import solvers as sv  # noqa: E402
from solvers.internals import use_profile  # noqa: E402
from tests._cases.backends import BACKENDS, DTYPES, namespace_for  # noqa: E402


@pytest.fixture
def xla_defaults(monkeypatch):
    """XLA_FLAGS as the user had them (without the suite's no-optimisation flag), for the
    processes this test starts."""
    if USER_XLA_FLAGS is None:
        monkeypatch.delenv("XLA_FLAGS", raising=False)
    else:
        monkeypatch.setenv("XLA_FLAGS", USER_XLA_FLAGS)


@pytest.fixture(params=BACKENDS)
def xp(request):
    return namespace_for(request.param)


@pytest.fixture(params=DTYPES)
def dtype(request):
    return np.dtype(request.param)


@pytest.fixture(autouse=True)
def _auto_profile():
    """Every test starts with an empty sv.Auto profile: no machine profile a developer wrote with
    ``python -m linops tune``, no pattern measured by an earlier test."""
    old = use_profile(sv.Profile())
    sv.analyses.clear()   # and no symbolic analysis an earlier test's cache left (sv.analyses)
    yield
    use_profile(old)


@pytest.fixture(autouse=True, scope="module")
def _freeze_survivors():
    """What earlier modules left alive is frozen out of the cyclic collector (``gc.freeze``)
    while this module runs: the lifetime tests' ``gc.collect()`` calls then scan only what this
    module made. A worker that ran thousands of tests holds ~500 000 tracked objects (jax's
    caches, compiled functions), and a full collection over them took 0.4 s; the lifetime tests
    make hundreds. At each module's start everything is unfrozen and collected once, so garbage
    of earlier modules (cycles that died after they were frozen) is freed as before and absolute
    counts (``stats().live``) start where they would without the freeze."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    yield
