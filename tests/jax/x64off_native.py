"""The native JAX solves with jax_enable_x64 OFF: float32/complex64 through the FFI handler.

Run by ``tests/jax/test_x64off.py`` in a fresh interpreter (``--noconftest``: tests/conftest.py
forces x64 on). The same loops as there, against the callback path (bit for bit) and dense jnp
autodiff at single-precision tolerances.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", False)

import dataclasses  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import solvers as sv  # noqa: E402
from adjoints.jax import _native  # noqa: E402
from solvers.internals import native  # noqa: E402
from tests._cases.jax_cases import (battery, battery_inputs, compare, make_case,  # noqa: E402
                                    rtol_for)
from tests.jax.test_native import loop_solve  # noqa: E402

WHICH = ("value_and_grad", "jvp", "vmap_grad", "vmap_matrices", "linear_transpose")


def test_x64_is_really_off():
    assert not jax.config.jax_enable_x64 and jnp.ones(2).dtype == jnp.float32


@pytest.mark.parametrize("form,dtype,kind", [
    ("scan", np.float32, "sparse-LU"), ("cond", np.complex64, "sparse-LU"),
    ("factorize-in-body", np.float32, "sparse-LU"),
    ("factorize-in-body", np.float32, "sparse-Auto"),
    ("factorize-in-body", np.complex64, "sparse-Auto")],
    ids=["scan-float32", "cond-complex64", "factorize-in-body-float32",
         "factorize-in-body-auto-float32", "factorize-in-body-auto-complex64"])
def test_native_single_precision(form, dtype, kind):
    """sv.KLU, or the default algorithm on an HPD matrix (in a loop body: KLU's FFI factorize
    by Auto.loop_factorize; the callback path is Auto's rules' engine, so equal to rounding,
    not bit for bit)."""
    auto = kind == "sparse-Auto"
    case = make_case(kind, dtype) if auto else dataclasses.replace(make_case(kind, dtype),
                                                                   alg=sv.KLU())
    args = battery_inputs(case)

    def run(dense=False):
        fn = jax.jit(lambda *a: battery(case, loop_solve(case, form, dense=dense), *a,
                                        which=WHICH))
        compiled = fn.lower(*args).compile(
            compiler_options={"xla_backend_optimization_level": 0})
        return jax.tree.map(np.asarray, compiled(*args))

    native().drain_counts()
    got = run()
    assert native().counts()["native_calls"] > 0
    if form == "factorize-in-body":   # float32 values factorized by the FFI factorize (in double)
        assert native().counts()["factorizations"] > 0
    _native.ENABLED = False
    try:
        callback = run()
    finally:
        _native.ENABLED = True
    for key in WHICH:
        for a, b in zip(jax.tree.leaves(got[key]), jax.tree.leaves(callback[key])):
            assert a.dtype in (np.float32, np.complex64), a.dtype
            if auto:   # another engine's factors: rounding
                np.testing.assert_allclose(a, b, rtol=rtol_for(dtype), err_msg=f"{form} {key}")
            else:
                np.testing.assert_array_equal(a, b, err_msg=f"{form} {key}")
    compare(got, run(dense=True), rtol_for(dtype), f"{form}/{np.dtype(dtype).name}")
