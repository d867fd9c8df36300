"""torch.compile through every entry point: ``fullgraph=True`` (a graph break is an error),
values and gradients equal to eager ones, the custom operators opaque in the graph (their fake
kernels give the shapes), one factorization per call and none left alive. ``aot_eager`` runs
AOTAutograd on the fake kernels and the registered backward; one test runs inductor."""

from __future__ import annotations

import gc

import numpy as np

from tests.torch.cases import close, make_case, torch

import linops as lo  # noqa: E402
import adjoints.torch as at  # noqa: E402


def _eager_and_compiled(f, args, backend="aot_eager"):
    """(eager value, grads), (compiled value, grads), the compiled call's stats."""
    def value_and_grads(fn):
        leaves = [a.detach().clone().requires_grad_() for a in args]
        y = fn(*leaves)
        y.backward()
        return y.detach(), [x.grad for x in leaves]
    torch._dynamo.reset()
    gc.collect()                        # other tests' cycles: live counts this test's only
    want = value_and_grads(f)
    cf = torch.compile(f, fullgraph=True, backend=backend)
    value_and_grads(cf)                        # compiles
    at.reset_stats()
    got = value_and_grads(cf)
    return want, got, at.stats()


def _case():
    case = make_case("sparse-LU", torch.complex128)
    v = case.values(case.params).detach()
    b = torch.randn(case.n, 2, dtype=torch.complex128, generator=torch.Generator().manual_seed(1))
    return case.P, v, b


def test_solve_and_factorize_compile_without_graph_breaks():
    P, v, b = _case()

    def f(v, b):
        F = at.factorize(lo.Sparse(v, P))
        u = at.solve(lo.Sparse(v, P), b)
        return ((u.abs() ** 2).sum() + (F.solve_adjoint(b[:, 0]) ** 2).sum().real
                + F.solve_transpose(b).sum().imag)
    want, got, s = _eager_and_compiled(f, (v, b))
    close(got, want, 1e-12, "compiled solve")
    assert (s.factorizations, s.misses, s.live) == (2, 0, 0), s


def test_family_matmul_logdet_selected_inverse_compile():
    fam, load = lo.testing.poisson_family(4)
    theta = torch.tensor(0.5 + np.random.default_rng(0).random(fam.n_params))
    b = torch.tensor(load)
    X = torch.randn(fam.shape[0], 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))

    def f(theta, X):
        K = fam(theta)
        F = at.factorize(K, posdef=True)
        return (F.solve(b).sum() + F.logdet() + F.selected_inverse().sum()
                + at.matmul(K, X).sum() + at.matmul(X.T, K).square().sum())
    want, got, s = _eager_and_compiled(f, (theta, X))
    close(got, want, 1e-11, "compiled family/matmul/logdet/selinv")
    assert (s.factorizations, s.misses, s.live) == (1, 0, 0), s


def test_inductor_training_step():
    """The real compiler: an optimizer loop over a compiled loss, one factorization per step."""
    fam, load = lo.testing.poisson_family(4)
    b = torch.tensor(load)
    target = torch.linspace(0, 1, fam.shape[0], dtype=torch.float64)
    theta = torch.ones(fam.n_params, dtype=torch.float64, requires_grad=True)
    loss = torch.compile(lambda th: ((at.solve(fam(th), b, posdef=True) - target) ** 2).sum(),
                         fullgraph=True, backend="inductor")
    opt = torch.optim.Adam([theta], lr=1e-2)
    torch._dynamo.reset()
    gc.collect()
    values = []
    for step in range(4):
        at.reset_stats()
        opt.zero_grad()
        y = loss(theta)
        y.backward()
        opt.step()
        values.append(float(y))
        s = at.stats()
        assert (s.factorizations, s.misses, s.transpose_solves) == (1, 0, 1), (step, s)
    assert values[-1] < values[0]
    ref = ((torch.linalg.solve(torch.as_tensor(lo.to_dense(fam(theta.detach().numpy()))), b)
            - target) ** 2).sum()
    close(loss(theta.detach()), ref, 1e-12, "inductor value")


def test_compiled_autograd_grad():
    """torch.autograd.grad inside the compiled function (the gradient as a graph output).
    (torch.compile around torch.func transforms is not supported: Dynamo cannot trace the
    numpy attribute reads of linops' Pattern inside them; call the transforms outside.)"""
    P, v, b = _case()

    def f(v):
        return (at.solve(lo.Sparse(v, P), b).abs() ** 2).sum()
    leaf = v.clone().requires_grad_()
    g = torch.autograd.grad(f(leaf), leaf)[0]
    torch._dynamo.reset()
    cg = torch.compile(lambda v: torch.autograd.grad(f(v), v)[0], backend="aot_eager")
    gc.collect()
    at.reset_stats()
    close(cg(v.clone().requires_grad_()), g, 1e-12, "compile(autograd.grad)")
    s = at.stats()
    assert (s.factorizations, s.transpose_solves, s.live) == (1, 1, 0), s


def test_custom_ops_pass_opcheck():
    """torch.library.opcheck: schema, fake kernel, autograd registration and aliasing of the
    operators the compiled graphs call."""
    P, v, b = _case()
    from adjoints.torch import _products, _solve_ops
    from adjoints.torch._store import spec_const

    spec = spec_const(P, None)
    key = _solve_ops.factorize_op(v, spec)
    ops = [(_solve_ops.solve_op, (key, v.requires_grad_(), b.requires_grad_(), spec, "N", 0)),
           (_products.spmm_op, (v, b, spec, "T", 0)),
           (_products.sddmm_op, (b, b, spec, 0))]
    for op, args in ops:
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor",
                                                    "test_aot_dispatch_dynamic"))
