"""Factorize once, and no longer than needed: the counters of adjoints.torch.

* a factorization lives exactly as long as the autograd graph (or handle) that needs it: freed
  by ``backward()`` even while the solution tensor lives, by dropping an unused graph, by
  ``F.release()``;
* a backward pass run twice is torch's named error, one after ``F.release()`` is
  ``ReleasedFactorizationError`` — never a wrong number, never a silent refactorization;
* double backward and Hessian-vector products run solves on the one factorization;
* factorizations are found again only for exactly the same values: a matrix that differs from
  a live one only where a sampled fingerprint does not look is factorized anew;
* failures leave nothing behind. RSS over hundreds of steps: test_memory.py.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import scipy.sparse as sp

from tests.torch.cases import close, make_case, torch

import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
import adjoints.torch as at  # noqa: E402
from adjoints.torch import _store  # noqa: E402


@pytest.fixture(autouse=True)
def _no_garbage():
    """Earlier tests' reference cycles (a raised exception's frames holding a Factorization)
    are collected first, so that ``live`` counts this test's factorizations only (a full
    collection costs about a second in a process holding torch: only when something lives)."""
    if at.stats().live:
        gc.collect()
    assert at.stats().live == 0


@pytest.fixture
def case():
    c = make_case("sparse-LU", torch.float64)
    v = c.values(c.params).detach().clone().requires_grad_()
    return c, v, torch.ones(c.n, dtype=torch.float64)


def test_backward_frees_the_factorization_while_the_solution_lives(case):
    c, v, b = case
    at.reset_stats()
    u = at.solve(lo.Sparse(v, c.P), b)
    loss = (u ** 2).sum()
    assert at.stats().live == 1
    loss.backward()
    s = at.stats()
    assert (s.live, s.factorizations, s.transpose_solves, s.misses) == (0, 1, 1, 0), s
    assert u.shape == (c.n,)          # the solution is still here; its factors are not
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_an_unused_graph_frees_it_when_dropped(case):
    c, v, b = case
    at.reset_stats()
    u = at.solve(lo.Sparse(v, c.P), b)
    assert at.stats().live == 1
    del u
    assert at.stats().live == 0


def test_retain_graph_keeps_it_for_a_second_backward(case):
    c, v, b = case
    at.reset_stats()
    loss = at.solve(lo.Sparse(v, c.P), b).sum()
    loss.backward(retain_graph=True)
    g1 = v.grad.clone()
    loss.backward()
    close(v.grad, 2 * g1, 1e-14, "second backward")
    s = at.stats()
    assert (s.factorizations, s.transpose_solves, s.live) == (1, 2, 0), s


def test_release_makes_every_later_use_a_named_error(case):
    c, v, b = case
    F = at.factorize(lo.Sparse(v, c.P))
    loss = F.solve(b).sum() + F.logdet()
    live = at.stats().live
    F.release()
    assert at.stats().live == live - 1
    with pytest.raises(at.ReleasedFactorizationError, match="released"):
        loss.backward()
    with pytest.raises(at.ReleasedFactorizationError):
        F.solve(b)
    with pytest.raises(at.ReleasedFactorizationError):
        F.selected_inverse()
    assert v.grad is None                # nothing was accumulated from a half-run backward


def test_a_handle_keeps_it_across_backward_passes(case):
    c, v, b = case
    at.reset_stats()
    F = at.factorize(lo.Sparse(v, c.P))
    for _ in range(3):
        F.solve(b).sum().backward()
    s = at.stats()
    assert (s.factorizations, s.forward_solves, s.transpose_solves, s.live) == (1, 3, 3, 1), s
    del F
    assert at.stats().live == 0


def test_double_backward_and_hvp_cost_solves_not_factorizations(case):
    c, v, b = case
    at.reset_stats()
    u = at.solve(lo.Sparse(v, c.P), b)
    g, = torch.autograd.grad((u ** 3).sum(), v, create_graph=True)
    direction = torch.linspace(-1, 1, v.shape[0], dtype=torch.float64)
    hvp, = torch.autograd.grad(g @ direction, v)
    s = at.stats()
    assert (s.factorizations, s.misses) == (1, 0), s
    assert s.forward_solves + s.transpose_solves >= 4
    D = c.dense((v.detach(),))
    r, cc = torch.as_tensor(np.array(c.P.rows)), torch.as_tensor(np.array(c.P.indices))

    def dense_loss(w):
        Dw = torch.zeros_like(D).index_put((r, cc), w)
        return (torch.linalg.solve(Dw, b) ** 3).sum()
    _, want = torch.func.jvp(torch.func.grad(dense_loss), (v.detach(),), (direction,))
    close(hvp, want, 1e-12, "Hessian-vector product")


def test_exact_values_reuse_and_a_fingerprint_collision_does_not(case):
    """Two solves with the same values share one factorization (``reuses``); values that
    agree with a live factorization's on every sampled position but one unsampled entry get
    their own (a sampled fingerprint would have reused the wrong one)."""
    c, v, b = case
    at.reset_stats()
    A = lo.Sparse(v, c.P)
    u1, u2 = at.solve(A, b), at.solve(lo.Sparse(v.detach().clone(), c.P), 2 * b)
    s = at.stats()
    assert (s.factorizations, s.reuses) == (1, 1), s
    close(u2, 2 * u1, 1e-14, "reused factorization")
    w = v.detach().clone()
    probe = set(np.unique(np.linspace(0, w.shape[0] - 1, min(w.shape[0], 16)).astype(int)))
    free = next(i for i in range(w.shape[0]) if i not in probe)
    assert _store.probe(w.numpy()) == _store.probe(v.detach().numpy())
    w[free] += 0.5                       # off the probe: same fingerprint, other matrix
    assert _store.probe(w.numpy()) == _store.probe(v.detach().numpy())
    u3 = at.solve(lo.Sparse(w, c.P), b)
    s = at.stats()
    assert (s.factorizations, s.reuses) == (2, 1), s
    close(u3, torch.linalg.solve(c.dense((w,)), b), 1e-12, "own factorization")


def test_a_singular_matrix_fails_named_and_leaves_nothing(case):
    c, v, b = case
    live = at.stats().live
    w = torch.zeros_like(v.detach())
    with pytest.raises(sv.SingularMatrixError):
        at.solve(lo.Sparse(w, c.P), b)
    with pytest.raises(sv.NonFiniteInputError):
        at.solve(lo.Sparse(v.detach() * float("nan"), c.P), b)
    assert at.stats().live == live
    close(at.solve(lo.Sparse(v.detach(), c.P), b),
          torch.linalg.solve(c.dense((v.detach(),)), b), 1e-12, "after a failure")


def test_vmap_makes_one_symbolic_analysis_for_all_members(case):
    c, v, b = case
    at.reset_stats()
    V = torch.stack([v.detach() * (1 + 0.01 * k) for k in range(6)])
    U = torch.func.vmap(lambda w: at.solve(lo.Sparse(w, c.P), b, sv.LU()))(V)
    s = at.stats()
    assert (s.factorizations, s.symbolic_analyses, s.live) == (6, 1, 0), s
    for k in range(6):
        close(U[k], torch.linalg.solve(c.dense((V[k],)), b), 1e-12, f"member {k}")


def test_vmap_over_right_hand_sides_is_one_multicolumn_solve(case):
    c, v, b = case
    at.reset_stats()
    B = torch.randn(5, c.n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    A = lo.Sparse(v.detach(), c.P)
    J = torch.func.jacrev(lambda b: at.solve(A, b))(b)
    U = torch.func.vmap(lambda b: at.solve(A, b))(B)
    s = at.stats()
    assert (s.factorizations, s.forward_solves, s.transpose_solves) == (2, 2, 1), s
    assert s.solve_columns == 1 + c.n + 5
    close(J, torch.linalg.inv(c.dense((v.detach(),))), 1e-12, "jacrev = A⁻¹")
    close(U, torch.linalg.solve(c.dense((v.detach(),)), B.T).T, 1e-12, "vmap over b")


def test_idle_specs_are_bounded():
    """A stream of new patterns keeps the spec table bounded (memory flat)."""
    rng = np.random.default_rng(0)
    for k in range(_store.IDLE_SPECS + 20):
        S = lo.Sparse.from_scipy(sp.random(6, 6, 0.3, random_state=k, format="csr")
                                 + sp.eye(6))
        at.solve(lo.Sparse(torch.tensor(S.values), S.pattern), torch.tensor(rng.random(6)))
    assert len(_store.SPECS.by_id) <= _store.IDLE_SPECS + at.stats().live + 1
