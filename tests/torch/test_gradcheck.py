"""torch's own judges on complex and real leaves: ``gradcheck`` and ``gradgradcheck`` (central
finite differences, Wirtinger derivatives for complex inputs, so a missing conjugate fails) for
every entry point, ``torch.sparse.as_sparse_gradcheck`` in both of its modes, and the two
gradient meanings — the pattern gradient on the stored values and the full lazy gradient
``F.grad`` — against dense torch autodiff, with tight tolerances (float64: 1e-12 relative).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp

from tests.torch.cases import close, make_case, torch

import linops as lo  # noqa: E402
import adjoints.torch as at  # noqa: E402

gradcheck = functools.partial(torch.autograd.gradcheck, atol=1e-8, rtol=1e-7)
# second order by random projections (torch's fast mode: every entry of the Hessian enters,
# at a fraction of the evaluations)
gradgradcheck = functools.partial(torch.autograd.gradgradcheck, atol=1e-8, rtol=1e-7,
                                  fast_mode=True)
DOUBLE = [torch.float64, torch.complex128]


def _leaves(kind, dtype, k=None, seed=0):
    case = make_case(kind, dtype, seed=seed)
    v = case.values(case.params).detach().clone().requires_grad_()
    shape = (case.n,) if k is None else (case.n, k)
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(shape, dtype=dtype, generator=g).requires_grad_()
    return case, v, b


ENTRIES = {
    "solve": lambda P, v, b: at.solve(lo.Sparse(v, P), b),
    "solve_transpose": lambda P, v, b: at.factorize(lo.Sparse(v, P)).solve_transpose(b),
    "solve_adjoint": lambda P, v, b: at.factorize(lo.Sparse(v, P)).solve_adjoint(b),
    "matmul": lambda P, v, b: at.matmul(lo.Sparse(v, P), b),
    "rmatmul": lambda P, v, b: at.matmul(b.T, lo.Sparse(v, P)),
    "logdet": lambda P, v, b: at.logdet(lo.Sparse(v, P)) * b.sum(),
    "slogdet sign": lambda P, v, b: at.slogdet(lo.Sparse(v, P))[0] * b.sum(),
    "inv_sample": lambda P, v, b: at.inv_sample(lo.Sparse(v, P), [0, 2, 4], [1, 2, 0]) * b[0, 0],
}


SCALAR = ("logdet", "slogdet sign", "inv_sample")


@pytest.mark.parametrize("dtype", DOUBLE, ids=str)
@pytest.mark.parametrize("name", list(ENTRIES))
def test_gradcheck_and_gradgradcheck(name, dtype):
    """First and second derivatives by finite differences, real and complex leaves (for
    complex values torch checks both Wirtinger derivatives: a missing conjugate fails)."""
    if name == "slogdet sign" and not dtype.is_complex:
        pytest.skip("the sign of a real determinant is piecewise constant")
    case, v, b = _leaves("sparse-LU", dtype, k=2)
    if name in SCALAR:                 # b only scales the value: one entry is enough
        b = b[:1, :1].detach().clone().requires_grad_()
    f = lambda v, b: ENTRIES[name](case.P, v, b)   # noqa: E731
    assert gradcheck(f, (v, b))
    assert gradgradcheck(f, (v, b))


@pytest.mark.parametrize("kind", ["sparse-Cholesky", "sparse-Auto", "family"])
def test_gradcheck_other_factorizations(kind):
    """CHOLMOD (explicit and through Auto) and a family's θ."""
    case = make_case(kind, torch.complex128 if kind != "family" else torch.float64)
    b = torch.randn(case.n, dtype=case.dtype).requires_grad_()
    p = tuple(x.detach().clone().requires_grad_() for x in case.params)
    f = lambda b, *p: at.solve(case.operand(p), b, case.alg, posdef=case.posdef)  # noqa: E731
    assert gradcheck(f, (b, *p))
    assert gradgradcheck(f, (b, *p))


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "full"])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_as_sparse_gradcheck_both_modes(layout, masked):
    """torch.sparse.as_sparse_gradcheck with a sparse A: masked=True perturbs the stored
    entries (the pattern gradient); masked=False re-stores A on the FULL pattern, so what is
    checked is the gradient on every entry (the full gradient), structural zeros included."""
    rng = np.random.default_rng(3)
    D = rng.standard_normal((5, 5)) * (rng.random((5, 5)) < 0.4) + 4 * np.eye(5)
    A = torch.tensor(D).to_sparse_coo()
    A = (A if layout == "coo" else A.to_sparse_csr()).requires_grad_()
    b = torch.randn(5, dtype=torch.float64).requires_grad_()
    check = torch.sparse.as_sparse_gradcheck(gradcheck)
    assert check(lambda A, b: at.solve(A, b), (A, b), masked=masked)
    assert check(lambda A: at.logdet(A), (A,), masked=masked)
    assert check(lambda A, b: at.matmul(A, b), (A, b), masked=masked)


def test_the_two_gradient_meanings_against_dense_autodiff():
    """values.grad is the gradient on the stored entries (explicit zeros among them);
    F.grad (full_grad=True) is the full gradient −Σλuᴴ of the dense matrix, lazy (RankOne /
    LowRank), equal to torch's dense gradient on every entry and projecting to values.grad."""
    rng = np.random.default_rng(5)
    D = rng.standard_normal((6, 6)) * (rng.random((6, 6)) < 0.4) + 5 * np.eye(6) \
        + 1j * rng.standard_normal((6, 6)) * (rng.random((6, 6)) < 0.4)
    S = sp.csr_array(D)
    S[0, 5] = 0.0                     # an explicit zero, stored
    K = lo.Sparse.from_scipy(S)
    assert 0 in K.values
    v = torch.tensor(K.values, requires_grad=True)
    b = torch.tensor(rng.standard_normal((6, 2)) + 0j)
    c = torch.tensor(rng.standard_normal(6) + 1j)
    F = at.factorize(lo.Sparse(v, K.pattern), full_grad=True)
    loss = (F.solve(b).abs() ** 2).sum() + (c @ F.solve_adjoint(c)).real \
        + (F.solve_transpose(c) ** 2).sum().real + F.logdet() * 0
    loss.backward()
    Dt = torch.tensor(S.toarray(), requires_grad=True)
    ref = (torch.linalg.solve(Dt, b).abs() ** 2).sum() + (c @ torch.linalg.solve(Dt.mH, c)).real \
        + (torch.linalg.solve(Dt.T, c) ** 2).sum().real
    ref.backward()
    G = F.grad
    assert isinstance(G, lo.LowRank) and G.shape == (6, 6)
    close(torch.as_tensor(lo.to_dense(G)), Dt.grad, 1e-12, "full gradient")
    P = K.pattern
    close(v.grad, Dt.grad[torch.as_tensor(P.rows), torch.as_tensor(P.indices)], 1e-12,
          "pattern gradient")
    close(torch.as_tensor(lo.project(G, like=K).values), v.grad, 1e-12, "project(F.grad)")
    assert float(Dt.grad[0, 5].abs()) > 1e-3     # the explicit zero has a gradient
    F.grad = None
    assert F.grad is None


def test_full_gradient_of_a_family_reaches_theta():
    """fam.pullback(F.grad) is the θ-gradient torch computes through fam(θ)."""
    fam, load = lo.testing.poisson_family(4)
    theta = torch.tensor(0.5 + np.random.default_rng(0).random(fam.n_params),
                         requires_grad=True)
    F = at.factorize(fam(theta), full_grad=True)
    a = torch.tensor(np.random.default_rng(1).standard_normal(fam.shape[0]))
    (a @ F.solve(torch.tensor(load))).backward()
    close(torch.as_tensor(fam.pullback(F.grad)), theta.grad, 1e-12, "fam.pullback(F.grad)")


def test_full_grad_is_refused_inside_transforms():
    case = make_case("sparse-LU", torch.float64)

    def f(v):
        return at.factorize(lo.Sparse(v, case.P), full_grad=True).solve(torch.ones(case.n,
                                                                        dtype=v.dtype)).sum()
    with pytest.raises(ValueError, match="not available inside torch.func"):
        torch.func.vmap(f)(torch.stack([case.values(case.params)] * 2))
