"""Checks users and our own suite run on any operator: ``dottest``, ``check_against_dense``,
and the operator zoo (named constructors × backend × dtype).

Write a new operator (a LinearOperator subclass, a MatrixFree), then run ``dottest`` on it:
a wrong adjoint is the most common bug in hand-written operators, and it silently corrupts
every adjoint solve and gradient built on it. ``check_against_dense`` then compares every
query with the dense computation. The zoo gives one small instance of every operator kind, in
any backend and dtype, for property tests; ``poisson_family`` a finite-element family with its
load, for examples and benchmarks (``convection_diffusion_family`` its nonsymmetric twin); ``check_family`` compares a family with an assembly of your
own finite-element code (and tells you when the element blocks went in transposed);
``tight_binding`` a lattice Hamiltonian family for eigenvalue and log-det examples;
``membrane_families`` the stiffness and mass families of a vibrating plate (K v = λ M v).

Examples
--------
>>> import numpy as np, linops as lo
>>> A = lo.testing.zoo("sum_with_lowrank", dtype=np.complex128)
>>> A, lo.testing.dottest(A), lo.testing.check_against_dense(A)
(Sum(shape=(7, 7), dtype=complex128), True, True)
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp

from . import _queries as q
from ._family.affine import AffineSparse
from ._backend import namespace, to_numpy
from ._convert import aslinop
from ._errors import ShapeError
from ._operators.dense import Dense
from ._operators.diagonal import Diagonal, Identity, Zero
from ._generics import _dense_by_products
from ._operators.lowrank import LowRank, RankOne
from ._operators.masked import MaskedOuter
from ._operators.matrixfree import MatrixFree
from ._operators.pattern import Pattern
from ._pytree import array_leaves
from ._operators.sparse import Sparse

__all__ = ["dottest", "check_against_dense", "zoo", "ZOO_NAMES", "tolerance", "random_array",
           "poisson_family", "grid_dofs", "q4_laplace_stiffness", "check_family",
           "tight_binding", "q4_mass", "membrane_families", "convection_diffusion_family",
           "q4_advection"]


def tolerance(dtype) -> float:
    """The default relative tolerance of the checks: 2e-4 in single precision, 1e-11 in double.

    Examples
    --------
    >>> tolerance(np.float32), tolerance(np.complex128)
    (0.0002, 1e-11)
    """
    return 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11


def random_array(rng, shape, dtype):
    """Standard normal entries of ``dtype`` (real and imaginary parts independent), numpy.

    Examples
    --------
    >>> random_array(np.random.default_rng(0), (2,), np.complex64).dtype
    dtype('complex64')
    """
    dtype = np.dtype(dtype)
    a = rng.standard_normal(shape)
    if dtype.kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def _tonp(x):
    """Any backend's array (or a scalar) as numpy, for comparisons."""
    if hasattr(x, "dtype") and not isinstance(x, np.ndarray):
        return to_numpy(x)
    return np.asarray(x)


def dottest(A, *, k: int = 3, rtol: float | None = None, seed: int = 0) -> bool:
    """The dot test: ⟨A x, y⟩ = ⟨x, Aᴴ y⟩ for random x (n, k), y (m, k) in A's dtype and backend.

    It checks that ``adjoint`` is the adjoint of ``matmat``, and that ``.T`` agrees with
    conj(``.H``). Cost: one product each with A, Aᴴ and Aᵀ on k columns.

    Parameters
    ----------
    A : operator or anything ``aslinop`` accepts
    k : int, default 3
        Number of random columns.
    rtol : float, optional
        Relative to ‖Ax‖‖y‖ + ‖Aᴴy‖‖x‖ (default: :func:`tolerance` of A's dtype).
    seed : int, default 0

    Returns
    -------
    True

    Raises
    ------
    AssertionError
        With both values, when they differ by more than ``rtol``; or when the transpose does
        not agree.
    NotImplementedError
        If A has no adjoint (a MatrixFree without ``frmatmat``).

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> wrong = lo.MatrixFree((2, 2), np.float64, lambda X: X, lambda X: 2 * X)
    >>> dottest(wrong)
    Traceback (most recent call last):
    ...
    AssertionError: dottest failed for MatrixFree(shape=(2, 2), dtype=float64): ...
    >>> dottest(lo.Dense(np.array([[1.0, 2j], [3.0, 4.0]])))
    True
    """
    A = aslinop(A)
    m, n = A.shape
    rng = np.random.default_rng(seed)
    dtype = np.result_type(A.dtype, np.float32)
    rtol = tolerance(dtype) if rtol is None else rtol
    xp = namespace(*array_leaves(A))
    x = xp.asarray(random_array(rng, (n, k), dtype))
    y = xp.asarray(random_array(rng, (m, k), dtype))
    Ax = _tonp(A @ x)
    AHy = _tonp(A.H @ y)
    ATy = _tonp(A.T @ y)
    lhs = np.vdot(_tonp(y), Ax)
    rhs = np.vdot(AHy, _tonp(x))
    xy = np.linalg.norm(_tonp(x)) * np.linalg.norm(_tonp(y))
    # relative to the products, with a floor for operators that are numerically zero (A − A)
    scale = np.linalg.norm(Ax) * np.linalg.norm(_tonp(y)) + np.linalg.norm(AHy) * np.linalg.norm(_tonp(x)) + 1e-3 * xy
    if abs(lhs - rhs) > rtol * scale:
        raise AssertionError(f"dottest failed for {A!r}: <Ax, y>={lhs} but <x, Aᴴy>={rhs}")
    yc = _tonp(y).conj()
    ATy_ref = np.conj(_tonp(A.H @ xp.asarray(yc)))
    if np.linalg.norm(ATy - ATy_ref) > rtol * 10 * (np.linalg.norm(ATy_ref) + 1e-3 * np.linalg.norm(_tonp(y))):
        raise AssertionError(f"transpose test failed for {A!r}: Aᵀy != conj(Aᴴ conj(y))")
    return True


def check_against_dense(A, dense=None, *, seed: int = 0, rtol: float | None = None) -> bool:
    """Compare every lazy query of A with the same computation on a dense reference.

    Checks matmat, matvec, adjoint, transpose, x @ A, to_dense, diagonal, trace, sample,
    project onto a random pattern, and inner with a dense, a sparse and a low-rank operand
    (both orders). For operators up to a few hundred rows: it builds m×n arrays.

    Parameters
    ----------
    A : operator or anything ``aslinop`` accepts
    dense : array of shape (m, n), optional
        The reference. Default: A applied to the identity, so that the registered
        ``to_dense`` rule is checked against the products.
    seed : int, default 0
    rtol : float, optional
        Relative to the largest entry (default: :func:`tolerance` of A's dtype).

    Returns
    -------
    True

    Raises
    ------
    AssertionError
        Naming the first query that disagrees and its error.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> check_against_dense(lo.Dense(np.eye(2)), dense=np.zeros((2, 2)))
    Traceback (most recent call last):
    ...
    AssertionError: matmat: max error ... for Dense(shape=(2, 2), dtype=float64)
    >>> check_against_dense(lo.RankOne(np.ones(3), np.arange(4.0)))
    True
    """
    A = aslinop(A)
    D = _tonp(_dense_by_products(A)) if dense is None else np.asarray(dense)
    m, n = A.shape
    if D.shape != (m, n):
        raise AssertionError(f"reference shape {D.shape} != A.shape {A.shape}")
    rng = np.random.default_rng(seed)
    dtype = np.result_type(A.dtype, np.float32)
    rtol = tolerance(dtype) if rtol is None else rtol
    xp = namespace(*array_leaves(A))
    scale = max(np.abs(D).max(initial=0.0), 1.0)

    def close(name, got, want, s=1.0):
        got, want = _tonp(got), np.asarray(want)
        if got.shape != want.shape:
            raise AssertionError(f"{name}: shape {got.shape} != {want.shape} for {A!r}")
        err = np.abs(got - want).max(initial=0.0)
        if err > rtol * scale * s * 10:
            raise AssertionError(f"{name}: max error {err:.3g} for {A!r}")

    X = random_array(rng, (n, 2), dtype)
    Y = random_array(rng, (m, 2), dtype)
    close("matmat", A @ xp.asarray(X), D @ X, np.abs(X).sum())
    close("matvec", A @ xp.asarray(X[:, 0]), D @ X[:, 0], np.abs(X).sum())
    close("adjoint", A.H @ xp.asarray(Y), D.conj().T @ Y, np.abs(Y).sum())
    close("transpose", A.T @ xp.asarray(Y), D.T @ Y, np.abs(Y).sum())
    close("rmatmul", xp.asarray(Y.T) @ A, Y.T @ D, np.abs(Y).sum())
    close("to_dense", q.to_dense(A), D)
    close("diagonal", q.diagonal(A), np.diagonal(D))
    close("trace", q.trace(A), np.trace(D), min(m, n))
    k = 9 if m and n else 0  # an empty operator has no entries to sample
    rows, cols = rng.integers(0, max(m, 1), k), rng.integers(0, max(n, 1), k)
    close("sample", q.sample(A, rows, cols), D[rows, cols])
    mask = rng.random((m, n)) < 0.4
    P = Pattern.from_coo(*np.nonzero(mask), (m, n))
    close("project", q.project(A, pattern=P).values, D[P.rows, P.indices])
    Kd = random_array(rng, (m, n), dtype)
    close("inner dense", q.inner(A, xp.asarray(Kd)), np.vdot(D, Kd), m * n)
    Ks = Sparse(xp.asarray(Kd[P.rows, P.indices]), P)
    close("inner sparse", q.inner(A, Ks), np.vdot(D[P.rows, P.indices], Kd[P.rows, P.indices]), m * n)
    close("inner sparse (swapped)", q.inner(Ks, A), np.vdot(Kd[P.rows, P.indices], D[P.rows, P.indices]), m * n)
    U, V = random_array(rng, (m, 2), dtype), random_array(rng, (n, 2), dtype)
    close("inner lowrank", q.inner(A, LowRank(xp.asarray(U), xp.asarray(V))), np.vdot(D, U @ V.conj().T), m * n)
    close("inner lowrank (swapped)", q.inner(LowRank(xp.asarray(U), xp.asarray(V)), A),
          np.vdot(U @ V.conj().T, D), m * n)
    return True


# ----- the zoo -------------------------------------------------------------------------------
def _zoo_builders() -> dict[str, Callable]:
    def sparse_np(rng, m, n, dtype, density=0.35):
        mask = rng.random((m, n)) < density
        mask[np.arange(min(m, n)), np.arange(min(m, n))] = True
        P = Pattern.from_coo(*np.nonzero(mask), (m, n))
        return random_array(rng, (P.nnz,), dtype), P

    def dense(rng, xp, dtype, n, m):
        return Dense(xp.asarray(random_array(rng, (n, n), dtype)))

    def dense_rect(rng, xp, dtype, n, m):
        return Dense(xp.asarray(random_array(rng, (m, n), dtype)))

    def sparse(rng, xp, dtype, n, m):
        v, P = sparse_np(rng, n, n, dtype)
        return Sparse(xp.asarray(v), P)

    def sparse_rect(rng, xp, dtype, n, m):
        v, P = sparse_np(rng, m, n, dtype)
        return Sparse(xp.asarray(v), P)

    def diagonal(rng, xp, dtype, n, m):
        return Diagonal(xp.asarray(random_array(rng, (n,), dtype)))

    def identity(rng, xp, dtype, n, m):
        return Identity(n, dtype=dtype)

    def zero(rng, xp, dtype, n, m):
        return Zero((m, n), dtype=dtype)

    def rank_one(rng, xp, dtype, n, m):
        return RankOne(xp.asarray(random_array(rng, (m,), dtype)), xp.asarray(random_array(rng, (n,), dtype)))

    def low_rank(rng, xp, dtype, n, m):
        return LowRank(xp.asarray(random_array(rng, (m, 3), dtype)), xp.asarray(random_array(rng, (n, 3), dtype)))

    def masked_outer(rng, xp, dtype, n, m):
        _, P = sparse_np(rng, m, n, dtype)
        return MaskedOuter(xp.asarray(random_array(rng, (m, 2), dtype)),
                           xp.asarray(random_array(rng, (n, 2), dtype)), P)

    def sum_(rng, xp, dtype, n, m):
        return sparse(rng, xp, dtype, n, m) + dense(rng, xp, dtype, n, m) + diagonal(rng, xp, dtype, n, m)

    def product(rng, xp, dtype, n, m):
        return sparse_rect(rng, xp, dtype, n, m) @ dense(rng, xp, dtype, n, m)

    def scaled(rng, xp, dtype, n, m):
        c = (1.5 - 0.5j) if np.dtype(dtype).kind == "c" else -1.5
        return c * sparse(rng, xp, dtype, n, m)

    def adjoint_node(rng, xp, dtype, n, m):
        return (dense_rect(rng, xp, dtype, m, n) + sparse_rect(rng, xp, dtype, m, n)).H

    def transpose_node(rng, xp, dtype, n, m):
        return scaled(rng, xp, dtype, n, m).T @ diagonal(rng, xp, dtype, n, m)

    def matrix_free(rng, xp, dtype, n, m):
        a = xp.asarray(random_array(rng, (m, n), dtype))
        return MatrixFree((m, n), dtype, lambda X: a @ X, lambda X: xp.conj(a).T @ X)

    def sum_with_lowrank(rng, xp, dtype, n, m):
        return sparse(rng, xp, dtype, n, m) + rank_one(rng, xp, dtype, n, n) + rank_one(rng, xp, dtype, n, n)

    return {f.__name__.rstrip("_"): f for f in (
        dense, dense_rect, sparse, sparse_rect, diagonal, identity, zero, rank_one, low_rank,
        masked_outer, sum_, product, scaled, adjoint_node, transpose_node, matrix_free,
        sum_with_lowrank)}


ZOO_NAMES = tuple(_zoo_builders())  # every operator kind, and every node of an expression tree


def zoo(name: str, xp=np, dtype=np.float64, *, n: int = 7, m: int = 5, seed: int = 0):
    """Build the zoo operator ``name`` with arrays of namespace ``xp`` and ``dtype``.

    One small random instance of each operator kind and of each combination node (sum,
    product, scaled, adjoint, transpose, a sum with merged low-rank terms): what the test suite
    runs its property tests on, for every backend and dtype.

    Parameters
    ----------
    name : str
        One of ``ZOO_NAMES``.
    xp : module, default numpy
        The array namespace (``numpy``, ``jax.numpy``, ``cupy``).
    dtype : dtype, default float64
    n, m : int
        Square kinds are n×n; the rectangular ones (``*_rect``, ``rank_one``, ``low_rank``,
        ``masked_outer``, ``zero``, ``product``, ``matrix_free``, ``adjoint_node``) m×n.
    seed : int, default 0
        The same seed gives the same operator.

    Returns
    -------
    LinearOperator

    Raises
    ------
    KeyError
        For an unknown name.

    Examples
    --------
    >>> import numpy as np
    >>> zoo("masked_outer"), zoo("low_rank", dtype=np.complex64, n=4, m=3)
    (MaskedOuter(shape=(5, 7), dtype=float64), LowRank(shape=(3, 4), dtype=complex64))
    """
    rng = np.random.default_rng(seed)
    return _zoo_builders()[name](rng, xp, np.dtype(dtype), n, m)


# ----- a finite-element gallery ----------------------------------------------------------------
def q4_laplace_stiffness():
    """Element stiffness of the Laplacian on a unit bilinear (Q4) square, nodes counter-clockwise.

    Symmetric positive semi-definite, rows summing to zero (constants are its null space).

    Examples
    --------
    >>> (q4_laplace_stiffness() * 6).astype(int)[0].tolist()
    [4, -1, -2, -1]
    """
    return np.array([[4.0, -1.0, -2.0, -1.0], [-1.0, 4.0, -1.0, -2.0],
                     [-2.0, -1.0, 4.0, -1.0], [-1.0, -2.0, -1.0, 4.0]]) / 6.0


def grid_dofs(nx: int, ny: int) -> np.ndarray:
    """Q4 connectivity of an nx×ny cell grid with (nx+1)(ny+1) nodes, one dof per node.

    Nodes are numbered row by row (x fastest); each row of the result lists one cell's four
    nodes counter-clockwise from the lower left, cells also row by row.

    Examples
    --------
    >>> grid_dofs(2, 1).tolist()
    [[0, 1, 4, 3], [1, 2, 5, 4]]
    """
    ix = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    return np.stack([ix[:-1, :-1].ravel(), ix[:-1, 1:].ravel(), ix[1:, 1:].ravel(),
                     ix[1:, :-1].ravel()], axis=1)


def q4_mass():
    """Consistent element mass of a unit bilinear (Q4) square, nodes counter-clockwise.

    Symmetric positive definite, entries summing to the cell's area (1).

    Examples
    --------
    >>> (q4_mass() * 36).astype(int)[0].tolist(), float(q4_mass().sum())
    ([4, 2, 1, 2], 1.0)
    """
    return np.array([[4.0, 2.0, 1.0, 2.0], [2.0, 4.0, 2.0, 1.0],
                     [1.0, 2.0, 4.0, 2.0], [2.0, 1.0, 2.0, 4.0]]) / 36.0


def membrane_families(nx: int, ny: int | None = None):
    """Stiffness and mass families of a clamped membrane (a scalar plate model) on the unit
    square, nx×ny Q4 cells, boundary fixed: K(θ) = Σₑ θₑ Kₑ (θ the cells' stiffness) and
    M(ρ) = Σₑ ρₑ Mₑ (ρ the cells' density), both symmetric positive definite for θ, ρ > 0.

    K v = λ M v gives the vibration modes, λ = ω² (``sv.eigsh(K, k, M=M, sigma=0)``); the
    lowest λ is π²·2 for θ = ρ = 1 as the mesh is refined. (nx − 1)(ny − 1) unknowns, about 9
    stored entries per row in each.

    Returns
    -------
    (fam_K, fam_M) : AffineSparse, AffineSparse
        On the same free dofs, ``n_params`` = nx·ny each.

    Examples
    --------
    >>> fam_K, fam_M = membrane_families(4)
    >>> fam_K.shape, fam_M.shape, fam_M.n_params
    ((9, 9), (9, 9), 16)
    >>> round(float(fam_M(np.ones(16)).to_scipy().sum()), 12)   # the interior nodes' share
    0.444444444444
    """
    ny = nx if ny is None else ny
    ix = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    nodes = np.concatenate([ix[0], ix[-1], ix[1:-1, 0], ix[1:-1, -1]])
    dofs, n = grid_dofs(nx, ny), (nx + 1) * (ny + 1)
    hx, hy = 1.0 / nx, 1.0 / ny
    Ke = np.array([[2 * (hy / hx + hx / hy), hx / hy - 2 * hy / hx, -(hx / hy + hy / hx),
                    hy / hx - 2 * hx / hy],
                   [hx / hy - 2 * hy / hx, 2 * (hy / hx + hx / hy), hy / hx - 2 * hx / hy,
                    -(hx / hy + hy / hx)],
                   [-(hx / hy + hy / hx), hy / hx - 2 * hx / hy, 2 * (hy / hx + hx / hy),
                    hx / hy - 2 * hy / hx],
                   [hy / hx - 2 * hx / hy, -(hx / hy + hy / hx), hx / hy - 2 * hy / hx,
                    2 * (hy / hx + hx / hy)]]) / 6.0
    return (AffineSparse.from_elements(Ke, dofs, n, fixed=nodes),
            AffineSparse.from_elements(q4_mass() * hx * hy, dofs, n, fixed=nodes))


def poisson_family(nx: int, ny: int | None = None, *, fixed: str = "left"):
    """2-D heat-conduction family K(θ) = Σₑ θₑ Kₑ on an nx×ny grid of Q4 cells (one θ per cell),
    temperature fixed on the left edge (or on the whole boundary). Returns (fam, b) with b a
    uniform heat load on the free dofs. About 9 stored entries per unknown.

    K(θ) is symmetric positive definite for θ > 0 (the fixed nodes remove the constants), so
    it suits Cholesky, CG and AMG. The load is 1/(nx·ny) per free node.

    Parameters
    ----------
    nx : int
        Cells along x.
    ny : int, optional
        Cells along y (default nx).
    fixed : {"left", "boundary"}, default "left"
        Which nodes are held at zero: the left edge (n = nx·(ny + 1) unknowns), or every
        boundary node (n = (nx − 1)·(ny − 1), the problem of ``python -m linops bench scale``).

    Returns
    -------
    fam : AffineSparse
        Of shape (n, n) and ``n_params == nx·ny``; built by ``AffineSparse.from_elements``,
        so ``fam.expand`` gives the full grid.
    b : ndarray of shape (n,)

    Raises
    ------
    ValueError
        If ``fixed`` is neither "left" nor "boundary".

    Examples
    --------
    >>> fam, b = poisson_family(4)
    >>> fam.shape, fam.n_params, b.shape
    ((20, 20), 16, (20,))
    >>> K = fam(np.ones(fam.n_params))
    >>> bool(np.all(np.linalg.eigvalsh(K.to_scipy().toarray()) > 0))
    True
    >>> poisson_family(4, fixed="boundary")[0].shape
    (9, 9)
    """
    ny = nx if ny is None else ny
    ix = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    if fixed == "left":
        nodes = ix[:, 0]
    elif fixed == "boundary":
        nodes = np.concatenate([ix[0], ix[-1], ix[1:-1, 0], ix[1:-1, -1]])
    else:
        raise ValueError(f"poisson_family: fixed={fixed!r}; use 'left' or 'boundary'")
    fam = AffineSparse.from_elements(q4_laplace_stiffness(), grid_dofs(nx, ny),
                                     (nx + 1) * (ny + 1), fixed=nodes)
    return fam, np.full(fam.shape[0], 1.0 / (nx * ny))


def q4_advection(velocity=(1.0, 0.5)):
    """Element advection matrix Cᵢⱼ = ∫ Nᵢ (v·∇Nⱼ) of a unit bilinear (Q4) square (nodes
    counter-clockwise from the lower left), by 2×2 Gauss quadrature (exact here).

    Not symmetric; rows sum to zero (v·∇ of a constant vanishes).

    Examples
    --------
    >>> (q4_advection((1.0, 0.0)) * 12).round(12)[0].tolist()
    [-2.0, 2.0, 1.0, -1.0]
    """
    vx, vy = (float(v) for v in velocity)
    gauss = np.array([0.5 - 0.5 / np.sqrt(3.0), 0.5 + 0.5 / np.sqrt(3.0)])
    C = np.zeros((4, 4))
    for x in gauss:
        for y in gauss:
            N = np.array([(1 - x) * (1 - y), x * (1 - y), x * y, (1 - x) * y])
            dNdx = np.array([-(1 - y), 1 - y, y, -y])
            dNdy = np.array([-(1 - x), -x, x, 1 - x])
            C += 0.25 * np.outer(N, vx * dNdx + vy * dNdy)
    return C


def convection_diffusion_family(nx: int, ny: int | None = None, *, peclet: float = 1.0):
    """2-D convection–diffusion family K(θ) = Σₑ θₑ (Kₑ + Pe·Cₑ) on an nx×ny grid of Q4 cells:
    the heat-conduction element of :func:`poisson_family` plus the advection element
    :func:`q4_advection` for the velocity (1, 0.5), scaled by the cell Péclet number ``peclet``,
    temperature fixed on the left (inflow) edge. Returns (fam, b) as :func:`poisson_family`
    does.

    The pattern is that of :func:`poisson_family` (structurally symmetric, about 9 stored
    entries per unknown); the values are not symmetric: the general (LU) counterpart of the
    heat-conduction benchmark. Regular for θ > 0.

    Examples
    --------
    >>> fam, b = convection_diffusion_family(4)
    >>> K = fam(np.ones(fam.n_params)).to_scipy().toarray()
    >>> fam.shape, bool(np.abs(K - K.T).max() > 0.1), bool(abs(np.linalg.det(K)) > 0)
    ((20, 20), True, True)
    """
    ny = nx if ny is None else ny
    ix = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    Ke = q4_laplace_stiffness() + float(peclet) * q4_advection()
    fam = AffineSparse.from_elements(Ke, grid_dofs(nx, ny), (nx + 1) * (ny + 1), fixed=ix[:, 0])
    return fam, np.full(fam.shape[0], 1.0 / (nx * ny))


def tight_binding(L: int, complex_hop: bool = False, *, seed: int = 0):
    """Tight-binding Hamiltonian family H(ε) = Σᵢ εᵢ eᵢeᵢᵀ + T on an L×L square lattice.

    T is the nearest-neighbour hopping (−1 per bond, times a random Peierls phase e^{iφ} when
    ``complex_hop``), Hermitian; the on-site energies ε are the family's parameters (one per
    site). Returns (fam, eps) with eps uniform in [−1, 1): ``fam(eps)`` is a disordered
    Hamiltonian (Anderson model), real symmetric or complex Hermitian, 5 entries per row.

    Examples
    --------
    >>> fam, eps = tight_binding(3, True)
    >>> H = fam(eps).to_scipy()
    >>> H.shape, H.dtype, bool(abs(H - H.conj().T).max() == 0)
    ((9, 9), dtype('complex128'), True)
    """
    n = L * L
    idx = np.arange(n).reshape(L, L)
    i = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    j = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    t = -np.ones(i.size, dtype=complex if complex_hop else float)
    if complex_hop:
        t = t * np.exp(1j * np.random.default_rng(seed).uniform(0, 1, i.size))
    T = sp.csr_array((t, (i, j)), shape=(n, n))
    hop = (T + T.conj().T).tocsr()
    fam = AffineSparse.from_elements(np.ones((n, 1, 1)), np.arange(n)[:, None], n, offset=hop)
    return fam, np.random.default_rng(seed + 1).uniform(-1, 1, n)


def _check_lift(fam, full, theta, rtol: float) -> None:
    """AssertionError unless ``fam.rhs(θ)`` (f = 0) is −K_fd g of the reference K on all dofs:
    the free × fixed block that ``fixed_values`` lifts (a dof-map slip on a fixed dof leaves
    the free × free block intact and shows only here)."""
    free = np.asarray(fam.free)
    fixed = np.setdiff1d(np.arange(fam.n_full), free)
    g = np.asarray(fam.fixed_values)[fixed]
    Kfd = full[free][:, fixed]
    want = -(Kfd @ g)
    got = np.asarray(fam.rhs(theta))
    bound = abs(Kfd) @ np.abs(g)
    scale = max(float(np.max(bound, initial=0.0)), np.finfo(float).tiny)
    dev = np.abs(got - want)
    if dev.size and float(dev.max()) > rtol * scale:
        i = int(np.argmax(dev))
        raise AssertionError(
            f"fam.rhs(θ) differs from −K_fd g of the reference: the free × fixed block that "
            f"fixed_values lifts is wrong (a dof map that sends an entry to the wrong fixed "
            f"dof, or a missed element touching a fixed dof): max deviation {dev[i]:.3g} "
            f"(relative {dev[i] / scale:.3g} > rtol={rtol:g}) at free dof {i} (dof {free[i]} "
            f"of all): fam {got[i]:.6g}, reference {want[i]:.6g}")


def check_family(fam, K, theta=None, *, rtol: float = 1e-12) -> bool:
    """Check a family against a reference assembly of the same problem: ``fam(θ)`` equals K,
    and for a family with ``fixed_values`` its lifted right-hand side ``fam.rhs(θ)`` equals
    −K_fd g (K's free × fixed block times the prescribed values).

    Use it once when gluing a finite-element code to :class:`AffineSparse`: a wrong dof map,
    a missed element or a transposed element block (row = test function, column = trial
    function; scikit-fem's ``COOData.tolocal()`` returns the transpose) all show here. For a
    nonsymmetric form a transposed block gives Kᵀ, which solves without any error; this check
    names that case. Cost O(nnz): nothing is densified.

    Parameters
    ----------
    fam : AffineSparse
    K : scipy sparse matrix, ``lo.Sparse`` or 2-D array
        The reference matrix at ``theta``: on all n dofs (it is then restricted to
        ``fam.free``) or on the free dofs. A family that lifts ``fixed_values`` needs K on all
        n dofs (the lift is K's free × fixed block).
    theta : array of shape (fam.n_params,), optional
        Default: all ones (the plain assembly).
    rtol : float, default 1e-12
        Relative to the largest entry of K.

    Returns
    -------
    True

    Raises
    ------
    AssertionError
        Naming the largest deviation and where it is, and saying so when ``fam(θ)`` is the
        transpose of K or when only the lifted right-hand side differs.
    ShapeError
        If K fits neither the family's nor the full shape, or a lifting family gets K on the
        free dofs only.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo
    >>> Ke = np.array([[1.0, -1.0], [0.0, 1.0]])                   # a nonsymmetric element
    >>> dofs = np.array([[0, 1], [1, 2]])
    >>> K = sp.csr_array(np.array([[1.0, -1, 0], [0, 2, -1], [0, 0, 1]]))
    >>> check_family(lo.AffineSparse.from_elements(Ke, dofs, 3), K)
    True
    >>> check_family(lo.AffineSparse.from_elements(Ke.T, dofs, 3), K)
    Traceback (most recent call last):
    ...
    AssertionError: fam(θ) is the TRANSPOSE of the reference ...
    """
    theta = np.ones(fam.n_params) if theta is None else np.asarray(theta)
    R = K.to_scipy() if hasattr(K, "to_scipy") else K
    R = sp.csr_array(R)
    n = fam.shape[0]
    lifts = fam.free is not None and fam.fixed_values is not None
    full = None
    if R.shape != fam.shape or (lifts and fam.shape == (fam.n_full, fam.n_full)):
        if fam.free is None or R.shape != (fam.n_full, fam.n_full):
            raise ShapeError(f"check_family: K.shape={R.shape} but the family's shape="
                             f"{fam.shape}" + (f" (or ({fam.n_full}, {fam.n_full}) on all dofs)"
                                               if fam.n_full else ""))
        full, R = R, R[fam.free][:, fam.free]
    elif lifts:
        raise ShapeError(
            f"check_family: this family lifts fixed_values into its right-hand side, which "
            f"depends on K's free × fixed block; K.shape={R.shape} holds the free dofs only, so "
            f"that block cannot be compared. Pass K on all {fam.n_full} dofs")
    F = sp.csr_array(fam(theta).to_scipy())
    scale = max(float(abs(R).max()) if R.nnz else 0.0, np.finfo(float).tiny)

    def worst(D):
        D = sp.coo_array(D)
        if D.nnz == 0:
            return 0.0, None
        i = int(np.argmax(np.abs(D.data)))
        return float(abs(D.data[i])), (int(D.row[i]), int(D.col[i]))

    err, where = worst(F - R)
    if err <= rtol * scale:
        if full is not None and lifts:
            _check_lift(fam, full, theta, rtol)
        return True
    errT, _ = worst(F - R.T)
    if errT <= rtol * scale:
        raise AssertionError(
            f"fam(θ) is the TRANSPOSE of the reference (max deviation {err:.3g} from K, "
            f"{errT:.3g} from Kᵀ, relative to max|K| = {scale:.3g}): the element blocks went in "
            f"transposed. from_elements adds Ke[e][a, b] to K[dofs[e, a], dofs[e, b]]: row = "
            f"test function, column = trial function; scikit-fem's COOData.tolocal() returns "
            f"the transpose, so pass np.swapaxes(coo.tolocal(), 1, 2), or give the COOData to "
            f"AffineSparse.from_coo directly")
    i, j = where
    raise AssertionError(f"fam(θ) differs from the reference: max deviation {err:.3g} "
                         f"(relative {err / scale:.3g} > rtol={rtol:g}) at free dofs ({i}, {j}): "
                         f"fam {F[i, j]:.6g}, reference {R[i, j]:.6g}; of {n} free dofs")
