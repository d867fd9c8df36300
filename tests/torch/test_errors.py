"""Bad input to adjoints.torch fails with a specific exception that names the offending
shapes, dtypes or values — never a silently wrong number; edge sizes give exact results."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tests.torch.cases import close, make_case, torch

import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
import adjoints.torch as at  # noqa: E402
from linops.internals import ShapeError  # noqa: E402


@pytest.fixture
def case():
    c = make_case("sparse-LU", torch.float64)
    return c, c.values(c.params).detach(), torch.ones(c.n, dtype=torch.float64)


def test_shapes_are_named(case):
    c, v, b = case
    A = lo.Sparse(v, c.P)
    with pytest.raises(ShapeError, match=r"b.shape=\(3,\)"):
        at.solve(A, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ShapeError, match=r"b.shape=\(7, 2, 2\)"):
        at.factorize(A).solve(torch.ones(7, 2, 2, dtype=torch.float64))
    rect = lo.Sparse(torch.ones(2, dtype=torch.float64), lo.Pattern.from_coo([0, 1], [0, 2], (2, 3)))
    with pytest.raises(ShapeError, match=r"square A, got A.shape=\(2, 3\)"):
        at.solve(rect, torch.ones(2, dtype=torch.float64))
    with pytest.raises(ShapeError, match=r"X.shape=\(5,\)"):
        at.matmul(A, torch.ones(5, dtype=torch.float64))
    with pytest.raises(ShapeError, match=r"X.shape=\(2, 5\)"):
        at.matmul(torch.ones(2, 5, dtype=torch.float64), A)
    with pytest.raises(ShapeError, match="Sparse values must have shape"):
        lo.Sparse(torch.ones(3), c.P)
    with pytest.raises(ShapeError, match=r"positions must lie in \[0, 7\)"):
        at.inv_sample(A, [0, 9], [0, 0])
    fam, _ = lo.testing.poisson_family(3)
    with pytest.raises(ShapeError, match=r"theta must have shape \(9,\)"):
        fam(torch.ones(4, dtype=torch.float64))


def test_types_dtypes_devices_are_named(case):
    c, v, b = case
    A = lo.Sparse(v, c.P)
    with pytest.raises(TypeError, match="A must be a lo.Sparse"):
        at.solve("not a matrix", b)
    with pytest.raises(TypeError, match="two sparse operands"):
        at.matmul(A, A)
    with pytest.raises(TypeError, match="factorize needs a sparse A"):
        at.factorize(torch.eye(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="uses F's own algorithm"):
        at.solve(at.factorize(A), b, sv.LU())
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        at.solve(A, b, "nope")
    with pytest.raises(lo.BackendNotSupported, match="bfloat16"):
        at.solve(lo.Sparse(v.to(torch.bfloat16), c.P), b)
    with pytest.raises(ValueError, match="on meta but A's values are on cpu"):
        at.solve(A, torch.ones(c.n, device="meta"))
    with pytest.raises(lo.BackendNotSupported, match="adjoints.torch"):
        A @ np.ones(c.n)                              # linops does not compute with torch
    with pytest.raises(lo.BackendNotSupported, match="dense torch A is solved by torch.linalg"):
        at.solve(torch.eye(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), sv.CG())
    F = at.factorize(A, full_grad=True)
    with pytest.raises(ValueError, match="can only be reset"):
        F.grad = lo.RankOne(np.ones(c.n), np.ones(c.n))


def test_solver_errors_are_solvers_errors(case):
    c, v, b = case
    A = lo.Sparse(v, c.P)
    with pytest.raises(sv.NonFiniteInputError):
        at.solve(A, torch.full((c.n,), float("nan"), dtype=torch.float64))
    with pytest.raises(sv.NotHermitianError):
        at.solve(A, b, sv.Cholesky())
    with pytest.raises(sv.SingularMatrixError):
        at.logdet(lo.Sparse(torch.zeros_like(v), c.P))


def test_empty_and_tiny_systems_are_exact():
    P0 = lo.Pattern.from_coo([], [], (0, 0))
    v0 = torch.zeros(0, dtype=torch.float64, requires_grad=True)
    at.reset_stats()
    u = at.solve(lo.Sparse(v0, P0), torch.zeros(0, dtype=torch.complex128))
    assert u.shape == (0,) and u.dtype == torch.complex128
    assert at.stats().factorizations == 0
    F = at.factorize(lo.Sparse(v0, P0))
    assert F.solve(torch.zeros(0, 3, dtype=torch.float64)).shape == (0, 3)
    assert float(F.logdet()) == 0.0
    c = make_case("sparse-LU", torch.float64)
    A = lo.Sparse(c.values(c.params).detach(), c.P)
    assert at.solve(A, torch.zeros(c.n, 0, dtype=torch.float64)).shape == (c.n, 0)
    a = torch.tensor([-2.0], dtype=torch.float64, requires_grad=True)
    u = at.solve(lo.Sparse(a, lo.Pattern.from_coo([0], [0], (1, 1))),
                 torch.tensor([3.0], dtype=torch.float64))
    u.sum().backward()
    assert u.tolist() == [-1.5] and a.grad.tolist() == [-0.75]     # d(3/a)/da = −3/a²


def test_the_values_of_a_sparse_are_a_private_clone_that_gradients_pass(case):
    """The mutation rule for torch: lo.Sparse clones the tensor (an edit of the caller's
    tensor does not reach the operator) and the clone is differentiable."""
    c, v, b = case
    w = v.clone().requires_grad_()
    A = lo.Sparse(w, c.P)
    with torch.no_grad():
        w.mul_(2.0)
    close(at.solve(A, b), torch.linalg.solve(c.dense((v,)), b), 1e-12, "snapshot")
    at.solve(A, b).sum().backward()
    assert w.grad is not None and w.grad.shape == w.shape


def test_dtype_promotion(case):
    """Real A with complex b: a real factorization and a complex solution; float32 values with
    a float64 b: solved in float64."""
    c, v, b = case
    bc = torch.tensor(np.linspace(1, 2, c.n) + 1j, dtype=torch.complex128)
    u = at.solve(lo.Sparse(v, c.P), bc)
    assert u.dtype == torch.complex128
    close(u, torch.linalg.solve(c.dense((v,)).to(torch.complex128), bc), 1e-12, "real A, complex b")
    u = at.solve(lo.Sparse(v.float(), c.P), b)
    assert u.dtype == torch.float64
    close(u, torch.linalg.solve(c.dense((v.float().double(),)), b), 1e-12, "f32 A, f64 b")
    S = sp.csr_array(c.dense((v,)).numpy())
    close(at.solve(S, b), torch.linalg.solve(c.dense((v,)), b), 1e-12, "scipy A")
