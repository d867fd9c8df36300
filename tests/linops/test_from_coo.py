"""AffineSparse.from_coo against a dense assembly, and the element-block routes (top88's and
scikit-fem's layouts) against the general sort."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
from linops._family.assembly_input import element_blocks

rng = np.random.default_rng(19)


def dense_terms(rows, cols, values, param, n, P):
    """K_i as dense n×n arrays: the definition of from_coo, one np.add.at per parameter."""
    out = np.zeros((P, n, n), dtype=np.result_type(values.dtype, np.float64))
    np.add.at(out, (param, rows, cols), values)
    return out


def reduced(Ks, free):
    return Ks[:, free][:, :, free]


def random_triplets(n, P, N, complex_=False):
    rows, cols = rng.integers(0, n, N), rng.integers(0, n, N)
    param = rng.integers(0, P, N)
    # repeat some triplets exactly and some positions with another parameter
    rep = rng.integers(0, N, N // 4)
    rows, cols = np.concatenate([rows, rows[rep]]), np.concatenate([cols, cols[rep]])
    param = np.concatenate([param, np.where(np.arange(rep.size) % 2, param[rep], (param[rep] + 1) % P)])
    values = rng.standard_normal(rows.size) + (1j * rng.standard_normal(rows.size) if complex_ else 0)
    return rows, cols, values, param


def contraction(Ks, G):
    Gd = lo.to_dense(G)
    return np.array([np.vdot(K, Gd) for K in Ks])


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("with_fixed", [False, True], ids=["all-free", "fixed"])
def test_from_coo_equals_the_dense_assembly(complex_, with_fixed):
    n, P = 13, 7
    rows, cols, values, param = random_triplets(n, P - 2, 60, complex_)   # two empty params
    fixed = np.array([0, 5, 5, 12]) if with_fixed else None
    fam = lo.AffineSparse.from_coo(rows, cols, values, param, shape=n, n_params=P, fixed=fixed)
    free = np.setdiff1d(np.arange(n), [] if fixed is None else fixed)
    Ks = reduced(dense_terms(rows, cols, values, param, n, P), free)
    assert fam.shape == (free.size, free.size) and fam.n_params == P
    assert np.array_equal(fam.free, free) and fam.n_full == n
    theta = rng.standard_normal(P)
    np.testing.assert_allclose(lo.to_dense(fam(theta)), np.einsum("p,pij->ij", theta, Ks),
                               atol=1e-13)
    nf = free.size
    for G in (lo.RankOne(rng.standard_normal(nf) + 1j * rng.standard_normal(nf), rng.standard_normal(nf)),
              lo.LowRank(rng.standard_normal((nf, 2)), rng.standard_normal((nf, 2))),
              lo.Dense(rng.standard_normal((nf, nf)))):
        want = contraction(Ks, G)
        np.testing.assert_allclose(fam.pullback(G, real=False), want, atol=1e-12)
        np.testing.assert_allclose(fam.pullback(G), want.real, atol=1e-12)
    # the stored map is canonical: Mᴴ's pattern passes Pattern's own validation
    P_ = fam.MH.pattern
    assert lo.Pattern(P_.indptr, P_.indices, P_.shape) == P_
    assert lo.Pattern(fam.pattern.indptr, fam.pattern.indices, fam.shape) == fam.pattern


@pytest.mark.parametrize("where", ["free", "full"])
def test_from_coo_offset_on_the_free_or_all_dofs(where):
    n = 9
    rows, cols, values, param = random_triplets(n, 4, 40)
    fixed = [2, 7]
    free = np.setdiff1d(np.arange(n), fixed)
    K0 = sp.random(n, n, 0.3, random_state=3, format="csr") + sp.eye(n)
    off = K0[free][:, free] if where == "free" else K0
    fam = lo.AffineSparse.from_coo(rows, cols, values, param, shape=n, fixed=fixed, offset=off)
    Ks = reduced(dense_terms(rows, cols, values, param, n, 4), free)
    theta = rng.standard_normal(4)
    want = K0.toarray()[np.ix_(free, free)] + np.einsum("p,pij->ij", theta, Ks)
    np.testing.assert_allclose(lo.to_dense(fam(theta)), want, atol=1e-13)


def grid_blocks(nx, ny):
    """Q4 Laplace element blocks and their dofs on an nx×ny grid (each element its parameter)."""
    dofs = lo.testing.grid_dofs(nx, ny)
    Ke = np.array([[4.0, -1, -2, -1], [-1, 4, -1, -2], [-2, -1, 4, -1], [-1, -2, -1, 4]]) / 6
    # a nonsymmetric part (convection-like), so that a transposed block would show
    Ke = Ke + np.array([[0, 1, 0, -1], [-1, 0, 1, 0], [0, -1, 0, 1], [1, 0, -1, 0]]) * 0.25
    scale = 1 + rng.random(dofs.shape[0])
    return scale[:, None, None] * Ke, dofs


def top88_triplets(Ke, dofs):
    """top88.m's layout: iK = kron(edofMat, ones(k,1)), jK = kron(edofMat, ones(1,k)),
    sK = KE(:) per element (column-major)."""
    ne, k = dofs.shape
    iK = np.kron(dofs, np.ones((k, 1), dtype=int)).ravel()
    jK = np.kron(dofs, np.ones((1, k), dtype=int)).ravel()
    sK = Ke.transpose(0, 2, 1).reshape(ne, -1).ravel()      # KE(:) of each element
    return iK, jK, sK, np.repeat(np.arange(ne), k * k)


def skfem_triplets(Ke, dofs):
    """scikit-fem's COOData layout: entry (j·k + i)·ne + e is (test dof i, trial dof j) of e."""
    ne, k = dofs.shape
    rows = np.empty((k, k, ne), dtype=np.int32)
    cols = np.empty((k, k, ne), dtype=np.int32)
    data = np.empty((k, k, ne))
    for j in range(k):
        for i in range(k):
            rows[j, i], cols[j, i], data[j, i] = dofs[:, i], dofs[:, j], Ke[:, i, j]
    return rows.ravel(), cols.ravel(), data.ravel(), np.tile(np.arange(ne), k * k)


@pytest.mark.parametrize("layout", [top88_triplets, skfem_triplets], ids=["top88", "skfem"])
def test_element_block_layouts_take_the_element_route_and_agree_with_the_sort(layout):
    Ke, dofs = grid_blocks(5, 4)
    n = 6 * 5
    fixed = np.arange(0, n, 6)                       # the left edge
    rows, cols, vals, param = layout(Ke, dofs)
    blocks = element_blocks(rows, cols, vals, param, dofs.shape[0])
    assert blocks is not None
    np.testing.assert_array_equal(blocks[1], dofs)
    np.testing.assert_array_equal(blocks[0], Ke)     # row = test, column = trial
    fam = lo.AffineSparse.from_coo(rows, cols, vals, param, shape=n, fixed=fixed)
    ref = lo.AffineSparse.from_elements(Ke, dofs, n, fixed=fixed)
    perm = rng.permutation(rows.size)                # shuffled: no block structure left
    assert element_blocks(rows[perm], cols[perm], vals[perm], param[perm], dofs.shape[0]) is None
    shuffled = lo.AffineSparse.from_coo(rows[perm], cols[perm], vals[perm], param[perm],
                                        shape=n, fixed=fixed)
    for other in (ref, shuffled):
        assert fam.pattern == other.pattern and fam.MH.pattern == other.MH.pattern
        np.testing.assert_allclose(fam.MH.values, other.MH.values, rtol=1e-15)
    K = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    assert lo.testing.check_family(fam, K)


def test_from_coo_takes_top88s_triplets_as_they_are():
    path = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "top88.py"
    spec = importlib.util.spec_from_file_location("top88_ref", path)
    top88 = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = top88                 # its dataclass looks its module up
    spec.loader.exec_module(top88)
    nelx, nely = 12, 4
    KE, edofMat = top88.element_stiffness(0.3), top88.edof_matrix(nelx, nely)
    iK = np.kron(edofMat, np.ones((8, 1), dtype=int)).ravel()
    jK = np.kron(edofMat, np.ones((1, 8), dtype=int)).ravel()
    F, fixeddofs, freedofs = top88.mbb_supports(nelx, nely)
    xPhys = rng.uniform(0.2, 1.0, nelx * nely)
    theta = 1e-9 + xPhys**3 * (1 - 1e-9)
    sK1 = (KE.reshape(-1, order="F")[:, None] * np.ones(nelx * nely)).reshape(-1, order="F")
    fam = lo.AffineSparse.from_coo(iK, jK, sK1, np.repeat(np.arange(nelx * nely), 64),
                                   shape=F.size, fixed=fixeddofs)
    sK = (KE.reshape(-1, order="F")[:, None] * theta).reshape(-1, order="F")
    K = sp.coo_matrix((sK, (iK, jK)), shape=(F.size, F.size)).tocsc()
    assert np.array_equal(fam.free, freedofs)
    assert lo.testing.check_family(fam, K, theta)


def test_from_coo_bad_input_is_named():
    r, c, v, p = np.array([0, 1]), np.array([1, 0]), np.array([1.0, 2.0]), np.array([0, 0])
    with pytest.raises(lo.ShapeError, match=r"differ in length: \{'rows': 2, 'cols': 2, 'values': 3"):
        lo.AffineSparse.from_coo(r, c, np.ones(3), p, shape=2)
    with pytest.raises(lo.ShapeError, match=r"rows out of range \[0, 2\).*max=5"):
        lo.AffineSparse.from_coo(np.array([0, 5]), c, v, p, shape=2)
    with pytest.raises(lo.ShapeError, match=r"param out of range \[0, 1\) \(n_params=1\).*max=3"):
        lo.AffineSparse.from_coo(r, c, v, np.array([0, 3]), shape=2, n_params=1)
    with pytest.raises(TypeError, match="param must be integers, got dtype=float64"):
        lo.AffineSparse.from_coo(r, c, v, np.array([0.0, 1.0]), shape=2)
    with pytest.raises(lo.ShapeError, match="needs shape=n"):
        lo.AffineSparse.from_coo(r, c, v, p)
    with pytest.raises(lo.ShapeError, match=r"square families: shape=\(2, 3\)"):
        lo.AffineSparse.from_coo(r, c, v, p, shape=(2, 3))
    with pytest.raises(TypeError, match="missing param"):
        lo.AffineSparse.from_coo(r, c, v, shape=2)
    with pytest.raises(lo.ShapeError, match=r"fixed dofs out of range \[0, 2\)"):
        lo.AffineSparse.from_coo(r, c, v, p, shape=2, fixed=[2])
    iK, jK, sK, pK = top88_triplets(np.ones((2, 2, 2)), np.array([[0, 1], [1, 2]]))
    with pytest.raises(lo.ShapeError, match=r"rows and cols out of range \[0, 2\).*max=2"):
        lo.AffineSparse.from_coo(iK, jK, sK, pK, shape=2)             # element blocks
    with pytest.raises(TypeError, match="got a sparse matrix \\(csr_array\\).*from_terms"):
        lo.AffineSparse.from_coo(sp.csr_array(np.eye(2)), shape=2)
    with pytest.raises(lo.ShapeError, match=r"offset.shape=\(3, 3\) but the family's shape=\(1, 1\)"):
        lo.AffineSparse.from_coo(r, c, v, p, shape=2, fixed=[0], offset=sp.eye(3))


def test_from_coo_empty_and_all_fixed():
    fam = lo.AffineSparse.from_coo(np.array([], int), np.array([], int), np.array([]),
                                   np.array([], int), shape=3, n_params=2)
    assert fam.shape == (3, 3) and fam.pattern.nnz == 0 and fam.n_params == 2
    np.testing.assert_array_equal(fam.pullback(lo.Identity(3)), [0.0, 0.0])
    allfixed = lo.AffineSparse.from_coo(np.array([0, 1]), np.array([1, 1]), np.ones(2),
                                        np.array([0, 1]), shape=2, fixed=[0, 1])
    assert allfixed.shape == (0, 0) and allfixed(np.ones(2)).pattern.nnz == 0


@pytest.mark.parametrize("shared", [True, False], ids=["one Ke", "Ke per element"])
def test_element_route_on_a_larger_mesh_equals_the_sort(shared):
    """48 × 40 cells with the left edge and scattered interior dofs fixed: chunks mix runs of
    whole elements with a few partial ones (the copy-by-runs path) — against the general sort."""
    nx, ny = 48, 40
    dofs = lo.testing.grid_dofs(nx, ny)
    n = (nx + 1) * (ny + 1)
    fixed = np.concatenate([np.arange(0, n, nx + 1), rng.choice(n, 7, replace=False)])
    base = lo.testing.q4_laplace_stiffness() + 0.1j * np.arange(16).reshape(4, 4)
    Ke = base if shared else base * (1 + rng.random(dofs.shape[0]))[:, None, None]
    fam = lo.AffineSparse.from_elements(Ke, dofs, n, fixed=fixed)
    ne, k = dofs.shape
    r = np.broadcast_to(dofs[:, :, None], (ne, k, k)).ravel()
    c = np.broadcast_to(dofs[:, None, :], (ne, k, k)).ravel()
    v = np.broadcast_to(Ke, (ne, k, k)).ravel()
    perm = rng.permutation(r.size)
    ref = lo.AffineSparse.from_coo(r[perm], c[perm], v[perm], np.repeat(np.arange(ne), k * k)[perm],
                                   shape=n, fixed=fixed)
    assert fam.pattern == ref.pattern and fam.MH.pattern == ref.MH.pattern
    np.testing.assert_allclose(fam.MH.values, ref.MH.values, rtol=1e-15)
