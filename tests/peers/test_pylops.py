"""PyLops' own operator test cases, ported to our API (numpy backend).

Sources (PyLops/pylops, ``pytests/``, read for the cases and re-expressed here):
``test_linearoperator.py``, ``test_basicoperators.py``, ``test_diagonal.py``,
``test_transpose.py``, ``test_combine.py`` and ``pylops/utils/dottest.py`` (its
``complexflag`` 0–3: real or complex model/data vectors, also for real operators).

PyLops operators we do not have are expressed as the matrices they are (Flip, Roll,
Symmetrize, Sum, Transpose, Diagonal along an axis, Regression): the case is the same
forward/adjoint identity, run through ``lo.Sparse`` / ``lo.Dense`` / ``lo.Diagonal``.
PyLops' ``lsqr`` inversions become CG on the lazy normal equations ``(AᴴA) x = Aᴴy``
(we have no least-squares solver).

Not portable (deliberate differences): rectangular ``Identity(ny, nx)`` (ours is square),
``A ** k`` and ``A * x`` application (ours: ``A @ A``, ``A @ x``), R-linear operators
(``Real``, ``Imag``, ``toreal``), ``dims``/``dimsd`` and N-d model arrays (ours take (n,) or
(n, k) only: tested as a ShapeError), call counters on operators (our STYLE forbids state
mutated on every matvec), ``eigs``/``cond``, ``apply_columns``, block operators
(VStack/HStack/Block).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_almost_equal, assert_array_equal
from scipy.sparse.linalg import LinearOperator as ScipyLO

import linops as lo
import solvers as sv
from linops.testing import check_against_dense, dottest, random_array, tolerance

PAR1 = dict(ny=11, nx=11, imag=0, dtype="float64")  # square real
PAR2 = dict(ny=21, nx=11, imag=0, dtype="float64")  # overdetermined real
PAR1J = dict(ny=11, nx=11, imag=1j, dtype="complex128")  # square complex
PAR2J = dict(ny=21, nx=11, imag=1j, dtype="complex128")  # overdetermined complex
PAR3 = dict(ny=11, nx=21, imag=0, dtype="float64")  # underdetermined real
PARS = [pytest.param(p, id=i) for p, i in ((PAR1, "par1"), (PAR2, "par2"), (PAR1J, "par1j"),
                                            (PAR2J, "par2j"), (PAR3, "par3"))]


def pylops_dottest(A, complexflag: int, rtol: float | None = None, seed: int = 10) -> bool:
    """PyLops' dottest: u (model) and v (data) real or complex by ``complexflag`` (0: both real,
    1: complex model, 2: complex data, 3: both complex), in the operator's real precision;
    (Au)ᴴv = uᴴ(Aᴴv)."""
    rng = np.random.default_rng(seed)
    m, n = A.shape
    rdtype = np.ones(1, A.dtype).real.dtype
    u = rng.standard_normal(n).astype(rdtype)
    v = rng.standard_normal(m).astype(rdtype)
    if complexflag in (1, 3):
        u = u + 1j * rng.standard_normal(n).astype(rdtype)
    if complexflag in (2, 3):
        v = v + 1j * rng.standard_normal(m).astype(rdtype)
    y, x = A @ u, A.H @ v
    assert y.shape == (m,) and x.shape == (n,)
    if complexflag in (1, 3):
        assert np.iscomplexobj(y), "a complex model vector lost its imaginary part"
    yy, xx = np.vdot(y, v), np.vdot(u, x)
    rtol = tolerance(np.result_type(A.dtype, np.float32)) if rtol is None else rtol
    scale = np.linalg.norm(y) * np.linalg.norm(v) + np.linalg.norm(x) * np.linalg.norm(u) + 1e-30
    if abs(yy - xx) > rtol * scale:
        raise AssertionError(f"Dot test failed, v^H(Opu)={yy} - u^H(Op^Hv)={xx}")
    return True


def lsqr_like(A, y, *, rtol=1e-12):
    """PyLops' lsqr inversion, as CG on the lazy normal equations (AᴴA) x = Aᴴ y."""
    N = A.H @ A
    return sv.solve(sv.LinearProblem(N, A.H @ y, hermitian=True, posdef=True),
                    sv.CG(rtol=rtol, maxiter=2000)).u


# ----- test_linearoperator.py ---------------------------------------------------------------------
@pytest.mark.parametrize("par", [PAR1, PAR2, PAR1J], ids=["par1", "par2", "par1j"])
def test_overloads(par):
    # ports pylops test_linearoperator.py::test_overloads (.H, -, scalar *, +, -, composition)
    diag = np.arange(par["nx"], dtype=float) + par["imag"] * np.arange(par["nx"])
    Dop = lo.Diagonal(diag)
    D = np.diag(diag)
    x = np.arange(1.0, par["nx"] + 1) + 0.5j * par["imag"]
    for op, ref in ((Dop.H, D.conj().T), (-Dop, -D), (2 * Dop, 2 * D), (Dop + Dop, 2 * D),
                    (Dop - 2 * Dop, -D), (Dop @ Dop, D @ D)):  # scipy's Dop * Dop / Dop ** 2
        assert isinstance(op, lo.LinearOperator)
        assert_allclose(op @ x, ref @ x, rtol=1e-14)


@pytest.mark.parametrize("par", [PAR1, PAR1J], ids=["par1", "par1j"])
def test_scaled_keeps_dtype(par):
    # ports pylops test_linearoperator.py::test_scaled (python-scalar scaling keeps the dtype)
    for dtype in (np.float32, np.float64):
        diag = np.arange(par["nx"], dtype=dtype) + par["imag"] * np.arange(par["nx"], dtype=dtype)
        Dop = lo.Diagonal(diag)
        for S in (3.0 * Dop, -3.0 * Dop, Dop * 3.0, Dop * -3.0, Dop / 3.0):
            assert S.dtype == diag.dtype
            assert (S @ np.ones(par["nx"], dtype)).dtype == diag.dtype


class _SpDiag(ScipyLO):
    """PyLops' spDiag: a scipy LinearOperator whose _matvec handles 1-D vectors only."""

    def __init__(self, x):
        self.x = x
        self.shape = (len(x), len(x))
        self.dtype = x.dtype

    def _matvec(self, x):
        return x * self.x

    def _rmatvec(self, x):
        return x * self.x


def test_scipyop_wrapped():
    # ports pylops test_linearoperator.py::test_scipyop (sum and product with a scipy operator;
    # our route: wrap it with lo.aslinop first)
    Dop = lo.Diagonal(np.ones(5))
    Dsp = _SpDiag(2 * np.ones(5))
    assert_array_equal(Dsp @ np.arange(5.0), 2 * np.arange(5.0))  # scipy itself is fine
    W = lo.aslinop(Dsp)
    assert_array_equal(W @ np.arange(5.0), 2 * np.arange(5.0))
    assert_array_equal((Dop + W) @ np.ones(5), 3 * np.ones(5))
    assert_array_equal((Dop @ W) @ np.ones(5), 2 * np.ones(5))


def test_scipyop_direct_mixing():
    # ports pylops test_linearoperator.py::test_scipyop without the explicit wrap: PyLops
    # composes; ours must compose correctly or refuse with a TypeError — never scipy internals
    Dop = lo.Diagonal(np.ones(5))
    Dsp = ScipyLO((5, 5), matvec=lambda x: 2 * x, rmatvec=lambda x: 2 * x, dtype=np.float64)
    for f, want in ((lambda: Dop + Dsp, 3.0), (lambda: Dop @ Dsp, 2.0), (lambda: Dsp @ Dop, 2.0)):
        try:
            R = f()
        except TypeError:
            continue
        assert_allclose(np.asarray(R @ np.ones(5)).ravel(), want * np.ones(5))


@pytest.mark.parametrize("par", [PAR1, PAR1J], ids=["par1", "par1j"])
def test_dense(par):
    # ports pylops test_linearoperator.py::test_dense (todense of a Diagonal)
    diag = np.arange(par["nx"], dtype=float) + par["imag"] * np.arange(par["nx"])
    assert_array_equal(lo.to_dense(lo.Diagonal(diag)), np.diag(diag))


@pytest.mark.parametrize("par", [PAR1, PAR2, PAR1J, PAR2J], ids=["par1", "par2", "par1j", "par2j"])
def test_conj(par):
    # ports pylops test_linearoperator.py::test_conj
    M = 1j * np.ones((par["ny"], par["nx"]))
    Opconj = lo.Dense(M).conj()
    x = np.arange(par["nx"]) + par["imag"] * np.arange(par["nx"])
    y = Opconj @ x
    assert_array_almost_equal(y, M.conj() @ x)
    assert_array_almost_equal(Opconj.H @ y, M.T @ y)
    assert pylops_dottest(Opconj, 3)


@pytest.mark.parametrize("par", [PAR1, PAR2], ids=["par1", "par2"])
def test_nd_model_arrays_are_refused(par):
    # ports pylops test_linearoperator.py::test_non_flattened_arrays: PyLops reshapes N-d
    # models by dims; ours take (n,) or (n, k) only, so an N-d array is a named ShapeError
    n = par["ny"] * par["nx"]
    D = lo.Diagonal(np.arange(1.0, n + 1))
    x_nd = np.random.default_rng(0).standard_normal((par["ny"], par["nx"]))
    assert_array_equal(D @ x_nd.ravel(), np.arange(1.0, n + 1) * x_nd.ravel())
    with pytest.raises(lo.ShapeError, match=rf"A.shape=\({n}, {n}\)"):
        D @ x_nd
    with pytest.raises(lo.ShapeError):
        D @ np.repeat(x_nd[..., None], 4, axis=-1)


# ----- test_basicoperators.py ---------------------------------------------------------------------
def _regression_matrix(t, order):
    return np.stack([t ** i for i in range(order + 1)], axis=1)


@pytest.mark.parametrize("par", [PAR1, PAR2], ids=["par1", "par2"])
def test_regression(par):
    # ports pylops test_basicoperators.py::test_Regression and ::test_LinearRegression (the
    # operator is the Vandermonde matrix of t; inversion by lsqr -> CG on normal equations)
    t = np.arange(par["ny"], dtype=np.float64) / par["ny"]
    for order, x in ((4, np.array([1.0, 2.0, 0.0, 3.0, -1.0])), (1, np.array([1.0, 2.0]))):
        LRop = lo.Dense(_regression_matrix(t, order))
        assert dottest(LRop) and pylops_dottest(LRop, 0)
        assert_allclose(LRop @ x, np.polynomial.polynomial.polyval(t, x), rtol=1e-12)
        assert_array_almost_equal(lsqr_like(LRop, LRop @ x, rtol=1e-14), x, decimal=3)


def _pylops_matrix(par, seed=10):
    rng = np.random.RandomState(seed)
    G = rng.normal(0, 10, (par["ny"], par["nx"])).astype("float32")
    return G + par["imag"] * rng.normal(0, 10, (par["ny"], par["nx"])).astype("float32")


@pytest.mark.parametrize("par", [PAR1, PAR2, PAR1J, PAR2J], ids=["par1", "par2", "par1j", "par2j"])
def test_matrixmult(par):
    # ports pylops test_basicoperators.py::test_MatrixMult (dottest + lsqr inversion)
    G = _pylops_matrix(par).astype(par["dtype"])
    Gop = lo.aslinop(G)
    flag = 0 if par["imag"] == 0 else 3
    assert pylops_dottest(Gop, flag) and dottest(Gop) and check_against_dense(Gop, G)
    x = np.ones(par["nx"]) + par["imag"] * np.ones(par["nx"])
    assert_array_almost_equal(lsqr_like(Gop, Gop @ x), x, decimal=4)


@pytest.mark.parametrize("par", [PAR1, PAR2, PAR1J, PAR2J], ids=["par1", "par2", "par1j", "par2j"])
def test_matrixmult_sparse(par):
    # ports pylops test_basicoperators.py::test_MatrixMult_sparse (scipy sparse input)
    G = sp.random(par["ny"], par["nx"], density=0.75, random_state=10).astype("float32")
    if par["imag"]:
        G = G + 1j * sp.random(par["ny"], par["nx"], density=0.75, random_state=11).astype("float32")
    G = G.astype(par["dtype"]) + sp.eye(par["ny"], par["nx"], dtype=par["dtype"])  # full rank
    Gop = lo.aslinop(G)
    assert isinstance(Gop, lo.Sparse)
    for flag in range(4):
        assert pylops_dottest(Gop, flag)
    assert dottest(Gop) and check_against_dense(Gop, G.toarray())
    x = np.ones(par["nx"]) + par["imag"] * np.ones(par["nx"])
    assert_array_almost_equal(lsqr_like(Gop, Gop @ x), x, decimal=4)


@pytest.mark.parametrize("par", [PAR1J, PAR2J], ids=["par1j", "par2j"])
def test_matrixmult_complexcast(par):
    # ports pylops test_basicoperators.py::test_MatrixMult_complexcast (float32 + 1j·float32
    # data -> complex64 operator; our dtype follows the data)
    G = sp.random(par["ny"], par["nx"], density=0.75, random_state=10).astype("float32") + \
        par["imag"] * sp.random(par["ny"], par["nx"], density=0.75, random_state=11).astype("float32")
    assert lo.aslinop(G).dtype == np.complex64
    assert lo.aslinop(G.toarray()).dtype == np.complex64


@pytest.mark.parametrize("par", [PAR1, PAR1J], ids=["par1", "par1j"])
def test_identity(par):
    # ports pylops test_basicoperators.py::test_Identity_inplace / _noinplace (square only:
    # our Identity is n×n; the rectangular zero-padding variant is not in our API)
    n = par["nx"]
    Iop = lo.Identity(n, dtype=par["dtype"])
    flag = 0 if par["imag"] == 0 else 3
    assert pylops_dottest(Iop, flag) and dottest(Iop)
    x = np.ones(n) + par["imag"] * np.ones(n)
    y = Iop @ x
    x1 = Iop.H @ y
    assert_array_equal(y, x)
    assert_array_equal(x1, x)
    x[0] = 10  # not in place: y does not change with x
    assert x[0] != y[0]
    Y = Iop @ np.ones((n, 3))
    Y[0, 0] = 5.0
    assert (Iop @ np.ones((n, 3)))[0, 0] == 1.0


@pytest.mark.parametrize("par", PARS)
def test_zero(par):
    # ports pylops test_basicoperators.py::test_Zero (all shapes, real and complex)
    Zop = lo.Zero((par["ny"], par["nx"]), dtype=par["dtype"])
    assert pylops_dottest(Zop, 0) and pylops_dottest(Zop, 3) and dottest(Zop)
    x = np.ones(par["nx"]) + par["imag"] * np.ones(par["nx"])
    y = Zop @ x
    x1 = Zop.H @ y
    assert_array_equal(y, np.zeros(par["ny"]))
    assert_array_equal(x1, np.zeros(par["nx"]))
    assert y.shape == (par["ny"],) and x1.shape == (par["nx"],)
    assert np.iscomplexobj(Zop @ (x + 1j))  # the result type of the product, as numpy's


def _perm(p, shape=None):
    """The matrix with a one at (i, p[i])."""
    n = len(p)
    return lo.aslinop(sp.csr_matrix((np.ones(n), (np.arange(n), p)), shape=shape or (n, n)))


@pytest.mark.parametrize("par", [PAR1, PAR2, PAR1J, PAR2J], ids=["par1", "par2", "par1j", "par2j"])
def test_flip_and_roll(par):
    # ports pylops test_basicoperators.py::test_Flip1D/2D and ::test_Roll1D/2D (as permutation
    # matrices: Flip and Roll are orthogonal, so the adjoint undoes them)
    ny, nx = par["ny"], par["nx"]
    x = np.arange(ny) + par["imag"] * np.arange(ny)
    Fop = _perm(np.arange(ny)[::-1])
    assert pylops_dottest(Fop, 3) and dottest(Fop)
    assert_array_equal(Fop @ x, x[::-1])
    assert_array_equal(Fop.H @ (Fop @ x), x)
    Rop = _perm(np.roll(np.arange(ny), -2))  # y[i] = x[i + 2]  (np.roll(x, -2))
    assert_array_equal(Rop @ x, np.roll(x, -2))
    assert_array_equal(Rop.H @ (Rop @ x), x)
    X = np.outer(np.arange(ny), np.ones(nx)) + par["imag"] * np.outer(np.ones(ny), np.arange(nx))
    idx = np.arange(ny * nx).reshape(ny, nx)
    for axis in (0, 1):
        F2 = _perm(np.flip(idx, axis=axis).ravel())
        assert pylops_dottest(F2, 3)
        assert_array_equal((F2 @ X.ravel()).reshape(ny, nx), np.flip(X, axis=axis))
        assert_array_equal((F2.H @ (F2 @ X.ravel())).reshape(ny, nx), X)


@pytest.mark.parametrize("par", [PAR1, PAR2], ids=["par1", "par2"])
def test_symmetrize(par):
    # ports pylops test_basicoperators.py::test_Symmetrize1D: y = [x[::-1][:-1], x], (2n-1)×n,
    # and its least-squares inverse
    n = par["ny"]
    rows = np.arange(2 * n - 1)
    cols = np.r_[np.arange(n - 1, 0, -1), np.arange(n)]
    Sop = lo.aslinop(sp.csr_matrix((np.ones(2 * n - 1), (rows, cols)), shape=(2 * n - 1, n)))
    x = np.arange(n, dtype=float) + 1.0
    assert pylops_dottest(Sop, 0) and pylops_dottest(Sop, 3) and dottest(Sop)
    assert_array_equal(Sop @ x, np.r_[x[::-1][:-1], x])
    assert_array_almost_equal(lsqr_like(Sop, Sop @ x), x, decimal=3)


@pytest.mark.parametrize("par", [PAR1, PAR2, PAR1J, PAR2J], ids=["par1", "par2", "par1j", "par2j"])
def test_sum_along_axis(par):
    # ports pylops test_basicoperators.py::test_Sum2D: summing an (ny, nx) model along an axis
    ny, nx = par["ny"], par["nx"]
    X = np.arange(ny * nx).reshape(ny, nx) + par["imag"] * np.ones((ny, nx))
    for axis in (0, 1):
        S = np.kron(np.ones((1, ny)), np.eye(nx)) if axis == 0 else np.kron(np.eye(ny), np.ones((1, nx)))
        Sop = lo.aslinop(sp.csr_matrix(S))
        assert pylops_dottest(Sop, 3) and dottest(Sop)
        assert_allclose(Sop @ X.ravel(), X.sum(axis=axis), rtol=1e-14)
        y = np.arange(Sop.shape[0], dtype=float)
        assert_allclose((Sop.H @ y).reshape(ny, nx),
                        np.broadcast_to(y[None, :] if axis == 0 else y[:, None], (ny, nx)))


@pytest.mark.parametrize("imag, dtype", [(0, "float64"), (1j, "complex128")])
def test_transpose_2d(imag, dtype):
    # ports pylops test_transpose.py::test_Transpose_2dsignal (axes (1, 0) as a permutation)
    ny, nx = 21, 11
    x = (np.arange(ny * nx) + imag * np.arange(ny * nx)).reshape(ny, nx)
    Top = _perm(np.arange(ny * nx).reshape(ny, nx).T.ravel())
    assert pylops_dottest(Top, 0 if imag == 0 else 3) and dottest(Top)
    y = Top @ x.ravel()
    assert_array_equal(y.reshape(nx, ny), x.T)
    assert_array_equal((Top.H @ y).reshape(ny, nx), x)


# ----- test_diagonal.py --------------------------------------------------------------------------
@pytest.mark.parametrize("imag, dtype", [(0, "float32"), (1j, "complex64")])
def test_diagonal_1d_2d_3d(imag, dtype):
    # ports pylops test_diagonal.py::test_Diagonal_1dsignal / _2dsignal / _3dsignal (a diagonal
    # along one axis of an N-d model is the Diagonal of the broadcast, flattened): dottest and
    # inversion (exact: our DiagonalSolve)
    ny, nx, nt = 21, 11, 20
    flag = 0 if imag == 0 else 3
    dims_list = [((nx,), 0), ((nt,), 0), ((nx, nt), 0), ((nx, nt), 1),
                 ((ny, nx, nt), 0), ((ny, nx, nt), 1), ((ny, nx, nt), 2)]
    for dims, axis in dims_list:
        ddim = dims[axis]
        d = (np.arange(ddim) + 1.0 + imag * (np.arange(ddim) + 1.0)).astype(dtype)
        shape = [1] * len(dims)
        shape[axis] = ddim
        full = np.broadcast_to(d.reshape(shape), dims).ravel()
        Dop = lo.Diagonal(full)
        assert Dop.dtype == np.dtype(dtype)
        assert pylops_dottest(Dop, flag) and dottest(Dop)
        x = (np.ones(dims) + imag * np.ones(dims)).astype(dtype).ravel()
        sol = sv.solve(sv.LinearProblem(Dop, Dop @ x))
        assert sol.u.dtype == np.dtype(dtype)
        assert_array_almost_equal(sol.u, x, decimal=4)
        assert_array_almost_equal(lsqr_like(Dop, Dop @ x, rtol=1e-6), x, decimal=3)


# ----- test_combine.py ---------------------------------------------------------------------------
def test_inconsistent_shapes_are_refused():
    # ports pylops test_combine.py::test_VStack_incosistent_columns / test_HStack_...: operators
    # whose shapes do not fit raise (ValueError there; our ShapeError is a ValueError)
    G1 = lo.aslinop(np.random.default_rng(0).normal(0, 10, (101, 101)))
    G2 = lo.aslinop(np.random.default_rng(1).normal(0, 10, (101, 102)))
    with pytest.raises(ValueError, match=r"A \+ B with A.shape=\(101, 101\) but B.shape=\(101, 102\)"):
        G1 + G2
    with pytest.raises(ValueError, match=r"A @ B with A.shape=\(101, 102\) but B.shape=\(101, 101\)"):
        G2 @ G1


# ----- every operator passes the dot test, real and complex, every shape --------------------------
SHAPES = [(1, 1), (1, 7), (7, 1), (11, 11), (21, 11), (11, 21)]
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _operators(m, n, dtype, seed=0):
    """PyLops' basic operators and their combinations, in our API, of shape (m, n)."""
    rng = np.random.default_rng(seed)
    cplx = np.dtype(dtype).kind == "c"
    S = sp.random(m, n, density=0.6, random_state=seed + 1, format="csr")
    S = (S + 1j * sp.random(m, n, density=0.6, random_state=seed + 2, format="csr") if cplx else S)
    a = random_array(rng, (m, n), dtype)
    P = lo.Pattern.from_coo(*np.nonzero(rng.random((m, n)) < 0.5), (m, n))
    ops = {
        "MatrixMult": lo.Dense(a),
        "MatrixMult-sparse": lo.aslinop(S.astype(dtype)),
        "Zero": lo.Zero((m, n), dtype),
        "RankOne": lo.RankOne(random_array(rng, (m,), dtype), random_array(rng, (n,), dtype)),
        "LowRank": lo.LowRank(random_array(rng, (m, 2), dtype), random_array(rng, (n, 2), dtype)),
        "MaskedOuter": lo.MaskedOuter(random_array(rng, (m, 2), dtype),
                                      random_array(rng, (n, 2), dtype), P),
        "FunctionOperator": lo.MatrixFree((m, n), dtype, lambda X: a @ X, lambda X: a.conj().T @ X),
        "scipy-LinearOperator": lo.aslinop(ScipyLO((m, n), matvec=lambda x: a @ x,
                                                   rmatvec=lambda y: a.conj().T @ y, dtype=dtype)),
        "Transpose": lo.Dense(random_array(rng, (n, m), dtype)).T,
        "Adjoint-of-adjoint": lo.Dense(a).H.H,
        "Conj": lo.Dense(a).conj(),
        "Sum": lo.Dense(a) + lo.aslinop(S.astype(dtype)) - 2 * lo.Zero((m, n), dtype),
        "Scaled": ((2 - 0.5j) if cplx else -2.0) * lo.Dense(a),
        "Product": lo.Dense(a) @ lo.Dense(random_array(rng, (n, n), dtype)),
        "Product-sparse": lo.aslinop(S.astype(dtype)) @ lo.Diagonal(random_array(rng, (n,), dtype)),
    }
    if m == n:
        ops["Diagonal"] = lo.Diagonal(random_array(rng, (n,), dtype))
        ops["Identity"] = lo.Identity(n, dtype=dtype)
        ops["Sum-diag-identity"] = lo.Diagonal(random_array(rng, (n,), dtype)) + lo.Identity(n, dtype=dtype)
    return ops


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_every_operator_dottest_every_complexflag(shape, dtype):
    # ports pylops pytests' dottest(Op, nr, nc, complexflag=0..3) applied to every basic operator
    # and combination, incl. 1×n and n×1, plus our check_against_dense for the lazy queries
    for name, op in _operators(*shape, dtype).items():
        assert op.shape == shape, name
        for flag in range(4):
            assert pylops_dottest(op, flag), (name, flag)
        assert dottest(op), name
        assert check_against_dense(op), name
