"""Lazy means lazy: payload sizes, tracemalloc peaks, refusal to densify."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import linops as lo


def test_rank_one_payload_is_O_n():
    for n in (10, 10_000, 1_000_000):
        G = lo.RankOne(np.ones(n), np.ones(n))
        assert lo.payload_nbytes(G) == 2 * n * 8
    L = lo.RankOne(np.ones(100), np.ones(100)) + lo.RankOne(np.ones(100), np.ones(100))
    assert lo.payload_nbytes(L) == 4 * 100 * 8


def test_to_dense_refuses_huge_operator():
    n = 100_000
    G = lo.RankOne(np.ones(n), np.ones(n))
    with pytest.raises(lo.DensificationError, match=r"100000×100000.*80 GB"):
        lo.to_dense(G)


def _random_pattern(n, nnz, seed=0):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, n, nnz)
    cols = rng.integers(0, n, nnz)
    return lo.Pattern.from_coo(rows, cols, (n, n))


@pytest.mark.slow
def test_sddmm_memory_bounded_at_scale():
    n, k = 200_000, 32
    P = _random_pattern(n, 1_000_000)
    rng = np.random.default_rng(1)
    U = rng.standard_normal((n, k))
    V = rng.standard_normal((n, k))
    G = lo.LowRank(U, V)
    P.rows, P.keys  # derived index arrays are part of the pattern, not of the product
    tracemalloc.start()
    S = lo.project(G, pattern=P)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    i = np.random.default_rng(2).integers(0, P.nnz, 50)
    ref = np.einsum("ij,ij->i", U[P.rows[i]], V[P.indices[i]])
    np.testing.assert_allclose(S.values[i], ref, rtol=1e-12)


def test_sddmm_chunking_gives_the_same_values():
    rng = np.random.default_rng(0)
    U = rng.standard_normal((50, 4)) + 1j * rng.standard_normal((50, 4))
    V = rng.standard_normal((40, 4)) + 1j * rng.standard_normal((40, 4))
    rows, cols = rng.integers(0, 50, 300), rng.integers(0, 40, 300)
    full = lo.sddmm(U, V, rows, cols)
    tiny = lo.sddmm(U, V, rows, cols, chunk_bytes=1)
    np.testing.assert_allclose(full, (U @ V.conj().T)[rows, cols], atol=1e-12)
    np.testing.assert_array_equal(full, tiny)
    import jax.numpy as jnp

    jx = lo.sddmm(jnp.asarray(U), jnp.asarray(V), rows, cols, chunk_bytes=1000)
    np.testing.assert_allclose(np.asarray(jx), full, atol=1e-12)


def test_inner_lowrank_sparse_never_densifies():
    n = 300_000
    P = _random_pattern(n, 5 * n)
    K = lo.Sparse(np.ones(P.nnz), P)
    G = lo.LowRank(np.ones((n, 4)), np.ones((n, 4)))
    P.rows
    tracemalloc.start()
    v = lo.inner(G, K)
    w = lo.inner(K, G)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert v == pytest.approx(4 * P.nnz) and w == pytest.approx(4 * P.nnz)
    assert peak < 64 * 2**20
