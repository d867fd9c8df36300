"""Host-constant sparse products under JAX (linops._jax_constant): a family's fam(θ) and
fam.pullback under jit/grad/jvp/vmap equal the numpy path, in both layouts (row groups and the
segment_sum fallback), real and complex, and neither direction compiles to a scatter."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import linops as lo  # noqa: E402
import linops._jax_constant as jc  # noqa: E402


def _families():
    fam, _ = lo.testing.poisson_family(5)  # 3 distinct row lengths: row groups
    yield "poisson", fam
    rng = np.random.default_rng(3)
    terms = [sp.csr_array(sp.random(9, 9, density=0.4, random_state=i)
                          + 1j * sp.random(9, 9, density=0.3, random_state=10 + i))
             for i in range(3)]
    yield "complex", lo.AffineSparse.from_terms(terms, offset=sp.csr_array(sp.eye(9)))
    # more distinct row lengths than MAX_GROUPS in both directions: the segment_sum fallback
    # (term i touches the first i + 1 diagonal entries)
    terms = [sp.diags(np.r_[rng.random(i + 1) + 0.5, np.zeros(13 - i)]).tocsr() for i in range(14)]
    yield "irregular", lo.AffineSparse.from_terms(terms, offset=sp.csr_array(sp.eye(14)))

FAMILIES = dict(_families())


@pytest.fixture(params=sorted(FAMILIES))
def fam(request):
    return FAMILIES[request.param]


def _theta(fam, seed=0):
    return np.random.default_rng(seed).random(fam.n_params) + 0.5


def test_layouts_cover_both_paths():
    for trans in "NT":
        layouts = {name: jc._ConstantSparse(f.MH.values, f.MH.pattern).layout(trans)
                   for name, f in FAMILIES.items()}
        assert layouts["poisson"].groups is not None
        assert layouts["irregular"].groups is None


def test_values_match_numpy_under_jit_and_vmap(fam):
    th = _theta(fam)
    got = jax.jit(lambda t: fam(t).values)(jnp.asarray(th))
    np.testing.assert_allclose(np.asarray(got), fam(th).values, rtol=0, atol=1e-14)
    V = np.stack([_theta(fam, s) for s in range(3)])
    batched = jax.vmap(lambda t: fam(t).values)(jnp.asarray(V))
    np.testing.assert_allclose(np.asarray(batched), np.stack([fam(v).values for v in V]),
                               rtol=0, atol=1e-14)


def test_pullback_matches_numpy(fam):
    rng = np.random.default_rng(1)
    g = rng.standard_normal(fam.pattern.nnz)
    if np.iscomplexobj(fam.MH.values):
        g = g + 1j * rng.standard_normal(fam.pattern.nnz)
    for real in (True, False):
        want = fam.pullback(lo.Sparse(g, fam.pattern), real=real)
        got = jax.jit(lambda g: fam.pullback(lo.Sparse(g, fam.pattern), real=real))(
            jnp.asarray(g))
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-13)


def test_every_derivative_order_and_mode(fam):
    th = jnp.asarray(_theta(fam))
    # finite differences (eps 1e-4) judge the modes; the exact Jacobian below judges the values
    check_grads(lambda t: jnp.abs(fam(t).values) ** 2, (th,), order=2, modes=("fwd", "rev"),
                atol=1e-6, rtol=1e-6)
    J = jax.jacfwd(lambda t: fam(t).values)(th)
    Jrev = [jax.jacrev(lambda t: part(fam(t).values))(th) for part in (jnp.real, jnp.imag)]
    np.testing.assert_allclose(np.asarray(J), np.asarray(Jrev[0] + 1j * Jrev[1]), atol=1e-14)
    # the Jacobian of θ ↦ values is M itself
    np.testing.assert_allclose(np.asarray(J), fam.M.to_scipy().toarray(), atol=1e-14)


def test_float32_theta_promotes_to_the_values_dtype():
    fam = FAMILIES["poisson"]
    th = jnp.asarray(_theta(fam), dtype=jnp.float32)
    assert jax.jit(lambda t: fam(t).values)(th).dtype == jnp.float64  # host values are float64
    g = jnp.ones(fam.pattern.nnz, jnp.float32)
    out = fam.pullback(lo.Sparse(g, fam.pattern))
    np.testing.assert_allclose(np.asarray(out), fam.pullback(
        lo.Sparse(np.ones(fam.pattern.nnz), fam.pattern)), rtol=1e-6)


def test_no_scatter_in_either_direction():
    """The point of the primitive: value and gradient both compile to gathers (XLA's CPU scatter
    is ~3.5x slower than scipy's product), and the transposed layout is the cached one."""
    fam = FAMILIES["poisson"]
    th, c = jnp.asarray(_theta(fam)), jnp.ones(fam.pattern.nnz)
    fwd = jax.jit(lambda t: fam(t).values).lower(th).as_text()
    bwd = jax.jit(lambda t, c: jax.grad(lambda t: jnp.dot(c, fam(t).values))(t)).lower(
        th, c).as_text()
    assert "gather" in fwd and "scatter" not in fwd
    assert "scatter" not in bwd


def test_one_op_per_array_and_no_leak():
    values = np.arange(4.0)
    P = lo.Pattern.from_coo([0, 0, 1, 1], [0, 1, 0, 1], (2, 2))
    before = len(jc._OPS)
    op = jc._op_for(values, P)
    assert jc._op_for(values, P) is op
    del values, op
    gc.collect()
    assert len(jc._OPS) == before


def test_host_product_for_large_matrices_equals_the_gather(monkeypatch):
    """Finding 20: on the CPU a large constant matrix multiplies in a host callback (scipy),
    so that XLA does not embed it in the compiled module; every transform gives the same
    numbers as the gather path and no large constant is left in the lowered module."""
    for name, fam in FAMILIES.items():
        th = jnp.asarray(_theta(fam))
        c = jnp.asarray(np.random.default_rng(2).standard_normal(fam.pattern.nnz))
        f = lambda t, c: jnp.sum(jnp.abs(fam(t).values * c) ** 2)
        want = (jax.jit(lambda t: fam(t).values)(th), jax.jit(jax.grad(f))(th, c),
                jax.jit(jax.vmap(lambda t: fam(t).values))(jnp.stack([th, 2 * th])))
        monkeypatch.setattr(jc, "HOST_MIN_NNZ", 0)
        got = (jax.jit(lambda t: fam(t).values)(th), jax.jit(jax.grad(f))(th, c),
               jax.jit(jax.vmap(lambda t: fam(t).values))(jnp.stack([th, 2 * th])))
        text = jax.jit(jax.grad(f)).lower(th, c).as_text()
        monkeypatch.setattr(jc, "HOST_MIN_NNZ", 1 << 16)
        gathered = jax.jit(jax.grad(f)).lower(th, c).as_text()
        for x, y in zip(got, want):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-13, atol=1e-13)
        # the matrix is not embedded: the gather's module holds it (as hex constants, 2 chars a
        # byte, values of both directions and their indices), the host product's does not
        assert "callback" in text and "callback" not in gathered
        assert len(text) + 2 * fam.MH.values.nbytes < len(gathered), (name, len(text))


def _grid_family(m):
    """K(θ) = θ₀ L + θ₁ I + θ₂ diag(x) on an m×m grid: Mᴴ has three long rows (nnz(L), n, n
    entries), the shape that compiled for minutes when each position of a row was an op."""
    n = m * m
    D = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    L = (sp.kron(sp.eye(m), D) + sp.kron(D, sp.eye(m))).tocsr()
    return lo.AffineSparse.from_terms([L, sp.eye(n, format="csr"),
                                       sp.diags(np.linspace(0, 1, n)).tocsr()])


def test_family_gradient_module_has_a_fixed_number_of_operations():
    """jit(grad(a·solve(fam(θ), b))) lowers to the same number of operations whatever n (the
    rows of the family's pullback are one gather and one sum each), and matches numpy."""
    import adjoints.jax as adj

    counts = {}
    for m in (8, 16):
        fam = _grid_family(m)
        b = jnp.asarray(np.random.default_rng(m).standard_normal(m * m))
        assert fam.MH.pattern.nnz < jc.HOST_MIN_NNZ       # the gather layout, not the host
        f = jax.jit(jax.grad(lambda th: b @ adj.solve(fam(th), b)))
        th = jnp.array([1.0, 0.5, 0.2])
        text = f.lower(th).as_text()
        counts[m] = text.count(" = ")
        g = f(th)
        K = fam(np.asarray(th)).to_scipy().toarray()
        lam = np.linalg.solve(K.T, np.asarray(b))
        u = np.linalg.solve(K, np.asarray(b))
        ref = np.array([-lam @ (T @ u) for T in (fam(np.eye(3)[i]).to_scipy() for i in range(3))])
        np.testing.assert_allclose(np.asarray(g), ref, rtol=1e-10)
    assert counts[8] == counts[16], counts
