"""CUDA tensors through the CuPy path (DLPack, no copy) with the same contract as on the CPU:
values, gradients and counters against dense torch.linalg on the device. Every test skips,
with its reason, where torch sees no CUDA device or cupy is missing."""

from __future__ import annotations

import pytest

from tests.torch.cases import close, make_case, torch

import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
import adjoints.torch as at  # noqa: E402


def _reason():
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # ImportError, no driver
        return f"cupy is not usable here ({type(e).__name__}: {e})"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_reason() is not None, reason=str(_reason()))]


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128, torch.float32], ids=str)
def test_solve_and_gradient_on_the_device(dtype):
    case = make_case("sparse-LU", dtype)
    v = case.values(case.params).detach().cuda().requires_grad_()
    b = torch.randn(case.n, dtype=dtype, device="cuda")
    at.reset_stats()
    u = at.solve(lo.Sparse(v, case.P), b, sv.LU())
    assert u.device.type == "cuda"
    (u.abs() ** 2).sum().backward()
    vr = v.detach().cpu().requires_grad_()
    ur = torch.linalg.solve(case.dense((vr,)), b.cpu())
    (ur.abs() ** 2).sum().backward()
    tol = 2e-4 if dtype == torch.float32 else 1e-11
    close(u.cpu(), ur, tol, "device solve")
    close(v.grad.cpu(), vr.grad, tol, "device values gradient")
    s = at.stats()
    assert (s.factorizations, s.misses, s.live) == (1, 0, 0), s


def test_matmul_and_family_on_the_device():
    fam, load = lo.testing.poisson_family(4)
    theta = torch.rand(fam.n_params, dtype=torch.float64, device="cuda", requires_grad=True)
    K = fam(theta)
    X = torch.randn(fam.shape[0], 3, dtype=torch.float64, device="cuda")
    Y = at.matmul(K, X)
    Y.square().sum().backward()
    tr = theta.detach().cpu().requires_grad_()
    Yr = at.matmul(fam(tr), X.cpu())
    Yr.square().sum().backward()
    close(Y.cpu(), Yr, 1e-12, "device matmul")
    close(theta.grad.cpu(), tr.grad, 1e-12, "device θ-gradient")
