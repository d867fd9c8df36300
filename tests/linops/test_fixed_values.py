"""Non-homogeneous Dirichlet values (issue 19, item 2): ``fixed_values=`` lifts g into
b(θ) = f − K_fd(θ) g, and ``fam.pullback(g.A, bbar=g.b)`` adds that term's θ-gradient.
Checked against a dense partitioned solve, central finite differences and the dense
adjoint formula, real and complex; plus the misuse messages of the first hour."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv

rng = np.random.default_rng(2)


def q4_problem(nx, ny, complex_):
    """Per-element Q4 matrices with a nonsymmetric (convection) part, and a complex shift."""
    dofs = lo.testing.grid_dofs(nx, ny)
    Ke = lo.testing.q4_laplace_stiffness()
    Ke = Ke + 0.3 * np.array([[0, 1, 0, -1], [-1, 0, 1, 0], [0, -1, 0, 1], [1, 0, -1, 0]])
    if complex_:
        Ke = Ke + 0.2j * np.array([[4, 2, 1, 2], [2, 4, 2, 1], [1, 2, 4, 2], [2, 1, 2, 4]]) / 36
    Ke = Ke * (1 + rng.random(dofs.shape[0]))[:, None, None]
    n = (nx + 1) * (ny + 1)
    ix = np.arange(n).reshape(ny + 1, nx + 1)
    fixed = np.unique(np.concatenate([ix[0], ix[-1], ix[:, 0], ix[:, -1]]))   # all boundary
    g = np.sin(fixed.astype(float)) + (1j * np.cos(fixed.astype(float)) if complex_ else 0)
    return Ke, dofs, n, fixed, g


def dense_full(Ke, dofs, n, theta):
    K = np.zeros((n, n), dtype=Ke.dtype)
    for e in range(dofs.shape[0]):
        K[np.ix_(dofs[e], dofs[e])] += theta[e] * Ke[e]
    return K


def dense_solution(Ke, dofs, n, fixed, g, theta, f):
    K = dense_full(Ke, dofs, n, theta)
    free = np.setdiff1d(np.arange(n), fixed)
    b = f[free] - K[np.ix_(free, fixed)] @ g
    return np.linalg.solve(K[np.ix_(free, free)], b), K, free


def build(route, Ke, dofs, n, fixed, g, **kw):
    if route == "elements":
        return lo.AffineSparse.from_elements(Ke, dofs, n, fixed=fixed, fixed_values=g, **kw)
    ne, k = dofs.shape
    r = np.broadcast_to(dofs[:, :, None], (ne, k, k)).ravel()
    c = np.broadcast_to(dofs[:, None, :], (ne, k, k)).ravel()
    perm = rng.permutation(r.size)  # no element structure left: the general sort route
    return lo.AffineSparse.from_coo(r[perm], c[perm], Ke.ravel()[perm],
                                    np.repeat(np.arange(ne), k * k)[perm], shape=n,
                                    fixed=fixed, fixed_values=g, **kw)


@pytest.mark.parametrize("route", ["elements", "coo"])
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_lifted_solve_equals_the_dense_partitioned_solve(route, complex_):
    Ke, dofs, n, fixed, g = q4_problem(4, 3, complex_)
    fam = build(route, Ke, dofs, n, fixed, g)
    theta = 0.5 + rng.random(dofs.shape[0])
    f = rng.standard_normal(n)
    u_ref, K, free = dense_solution(Ke, dofs, n, fixed, g, theta, f)
    b = fam.rhs(theta, f)                              # f on all dofs, read at the free ones
    np.testing.assert_allclose(b, f[free] - K[np.ix_(free, fixed)] @ g, atol=1e-13)
    np.testing.assert_allclose(fam.rhs(theta, f[free]), b, atol=0)   # or on the free dofs
    sol = sv.solve(sv.LinearProblem(fam(theta), b), sv.LU())
    np.testing.assert_allclose(sol.u, u_ref, rtol=1e-12)
    full = fam.expand(sol.u)                           # fixed dofs get g
    np.testing.assert_allclose(full[fixed], g, atol=0)
    np.testing.assert_allclose((K @ full - f)[free], 0, atol=1e-11)   # the free dofs' equations
    B = np.stack([f, 2 * f], axis=1)                  # two loads, one boundary data
    np.testing.assert_allclose(fam.rhs(theta, B)[:, 1], fam.rhs(theta, 2 * f), atol=1e-13)


@pytest.mark.parametrize("route", ["elements", "coo"])
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_theta_gradient_with_fixed_values(route, complex_):
    """J(θ) = Re(aᴴu) + ‖u‖²/2 with K(θ) u = f − K_fd(θ) g: value and θ-gradient."""
    Ke, dofs, n, fixed, g = q4_problem(4, 3, complex_)
    fam = build(route, Ke, dofs, n, fixed, g)
    ne = dofs.shape[0]
    f = rng.standard_normal(n)
    a = rng.standard_normal(fam.shape[0]) + (1j * rng.standard_normal(fam.shape[0]) if complex_ else 0)

    def J(theta):
        u = dense_solution(Ke, dofs, n, fixed, g, theta, f)[0]
        return np.real(np.vdot(a, u)) + 0.5 * np.vdot(u, u).real

    theta = 0.5 + rng.random(ne)
    sol = sv.solve(sv.LinearProblem(fam(theta), fam.rhs(theta, f)), sv.LU())
    assert J(theta) == pytest.approx(np.real(np.vdot(a, sol.u)) + 0.5 * np.vdot(sol.u, sol.u).real,
                                     rel=1e-12)
    gc = ad.solve_pullback(sol, a + sol.u)           # ū = ∂J/∂ū
    grad = fam.pullback(gc.A, bbar=gc.b)
    assert sol.stats.factorizations == 1 and sol.stats.adjoint_solves == 1
    # dense adjoint formula: dJ/dθₑ = Re λᴴ(−K_fd,e g − K_ff,e u)
    u, K, free = dense_solution(Ke, dofs, n, fixed, g, theta, f)
    lam = np.linalg.solve(K[np.ix_(free, free)].conj().T, a + u)
    want = np.empty(ne)
    for e in range(ne):
        Ee = dense_full(Ke[e:e + 1], dofs[e:e + 1], n, np.ones(1))
        want[e] = np.real(np.vdot(lam, -Ee[np.ix_(free, fixed)] @ g - Ee[np.ix_(free, free)] @ u))
    np.testing.assert_allclose(grad, want, rtol=1e-11, atol=1e-13 * np.abs(want).max())
    h = 1e-6
    for e in rng.choice(ne, 4, replace=False):
        d = np.zeros(ne)
        d[e] = h
        fd = (J(theta + d) - J(theta - d)) / (2 * h)
        assert grad[e] == pytest.approx(fd, rel=1e-7, abs=1e-9 * np.abs(grad).max())
    # without the lift term the gradient is wrong: the test can fail
    assert np.abs(fam.pullback(gc.A, bbar=0) - want).max() > 1e-3 * np.abs(want).max()
    # complex θ̄ (real=False) is −Bᴴλ + Mᴴ sample(Ā): its real part is the real gradient
    np.testing.assert_allclose(fam.pullback(gc.A, bbar=gc.b, real=False).real, grad, atol=1e-14)


def test_a_full_size_offset_is_lifted_too():
    Ke, dofs, n, fixed, g = q4_problem(3, 3, False)
    K0 = sp.random(n, n, 0.2, random_state=5, format="csr") + 4 * sp.eye(n)
    fam = lo.AffineSparse.from_elements(Ke, dofs, n, fixed=fixed, fixed_values=g, offset=K0)
    theta = 0.5 + rng.random(dofs.shape[0])
    K = dense_full(Ke, dofs, n, theta) + K0.toarray()
    free = fam.free
    np.testing.assert_allclose(lo.to_dense(fam(theta)), K[np.ix_(free, free)], atol=1e-13)
    np.testing.assert_allclose(fam.rhs(theta), -K[np.ix_(free, fixed)] @ g, atol=1e-13)


def test_fixed_values_forms_and_bad_values():
    Ke = np.array([[1.0, -1.0], [-1.0, 1.0]])
    dofs = np.array([[0, 1], [1, 2], [2, 3]])
    theta = np.array([1.0, 2.0, 3.0])
    per_entry = lo.AffineSparse.from_elements(Ke, dofs, 4, fixed=[3, 0], fixed_values=[5.0, 7.0])
    full = lo.AffineSparse.from_elements(Ke, dofs, 4, fixed=[0, 3],
                                         fixed_values=np.array([7.0, 0, 0, 5.0]))
    mask = lo.AffineSparse.from_elements(Ke, dofs, 4, fixed=np.array([True, False, False, True]),
                                         fixed_values=[7.0, 5.0])
    for fam in (per_entry, full, mask):
        np.testing.assert_allclose(fam.rhs(theta), [7.0 * 1, 5.0 * 3])   # −K_fd g
        np.testing.assert_allclose(fam.expand(np.zeros(2)), [7.0, 0, 0, 5.0])
    scalar = lo.AffineSparse.from_elements(Ke, dofs, 4, fixed=[0, 3], fixed_values=1.0)
    np.testing.assert_allclose(scalar.rhs(theta), [1.0, 3.0])
    assert scalar.expand(np.zeros((2, 3))).shape == (4, 3)
    np.testing.assert_allclose(scalar.expand(np.zeros(2), fill=0.0), 0.0)
    with pytest.raises(ValueError, match="fixed_values needs fixed="):
        lo.AffineSparse.from_elements(Ke, dofs, 4, fixed_values=[1.0])
    with pytest.raises(ValueError, match="fixed dof 0 is listed twice with different fixed_values"):
        lo.AffineSparse.from_elements(Ke, dofs, 4, fixed=[0, 0], fixed_values=[1.0, 2.0])
    with pytest.raises(lo.ShapeError, match=r"fixed_values.shape=\(3,\) but fixed lists 2 dofs of n=4"):
        lo.AffineSparse.from_elements(Ke, dofs, 4, fixed=[0, 3], fixed_values=[1.0, 2.0, 3.0])
    with pytest.raises(lo.ShapeError, match="fixed must hold integer dof numbers"):
        lo.AffineSparse.from_elements(Ke, dofs, 4, fixed=[0.0, 3.0])
    with pytest.raises(lo.ShapeError, match=r"rhs: f.shape=\(3,\) but the family has 2 free dofs of 4"):
        scalar.rhs(theta, np.ones(3))


def test_pullback_says_what_to_pass():
    """First hour: fam.pullback(g) with the SolveCotangent, and a lifted family without b̄."""
    fam, b = lo.testing.poisson_family(4)
    sol = sv.solve(sv.LinearProblem(fam(np.ones(fam.n_params)), b))
    g = ad.solve_pullback(sol, b)
    with pytest.raises(TypeError, match=r"got a SolveCotangent: pass g\.A, as in fam\.pullback\(g\.A\)"):
        fam.pullback(g)
    np.testing.assert_allclose(fam.pullback(g.A), fam.pullback(g.A, bbar=np.ones(b.size)))  # no lift
    lifted = lo.AffineSparse.from_elements(lo.testing.q4_laplace_stiffness(),
                                           lo.testing.grid_dofs(4, 4), 25, fixed=np.arange(5),
                                           fixed_values=1.0)
    sol = sv.solve(sv.LinearProblem(lifted(np.ones(16)), lifted.rhs(np.ones(16))))
    g = ad.solve_pullback(sol, np.ones(lifted.shape[0]))
    with pytest.raises(TypeError, match=r"pass g\.A and bbar=g\.b .*fam\.pullback\(g\.A, bbar=g\.b\)"):
        lifted.pullback(g)
    with pytest.raises(ValueError, match="lifts fixed_values into the right-hand side.*pass bbar=g.b"):
        lifted.pullback(g.A)
    with pytest.raises(lo.ShapeError, match=r"bbar.shape=\(3,\) but the right-hand side has shape \(20,\)"):
        lifted.pullback(g.A, bbar=np.ones(3))
    assert lifted.pullback(g.A, bbar=0).shape == (16,)


def test_rhs_and_its_gradient_under_jax():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    Ke, dofs, n, fixed, g = q4_problem(3, 2, False)
    fam = lo.AffineSparse.from_elements(Ke, dofs, n, fixed=fixed, fixed_values=g)
    f = rng.standard_normal(n)
    w = rng.standard_normal(fam.shape[0])
    theta = 0.5 + rng.random(dofs.shape[0])

    def loss(t):
        return jnp.sum(w * fam.rhs(t, f))

    got = jax.jit(jax.grad(loss))(jnp.asarray(theta))
    np.testing.assert_allclose(np.asarray(got), fam.pullback(lo.Zero(fam.shape), bbar=w), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(jax.jit(fam.rhs)(jnp.asarray(theta), jnp.asarray(f))),
                               fam.rhs(theta, f), rtol=1e-13)


@pytest.mark.parametrize("values, where", [([np.nan, 1.0], "at fixed dof 0"),
                                           (np.inf, r"\(the scalar\)"),
                                           ([0.0, 1.0, 2.0, np.nan], "at fixed dof 3")])
def test_non_finite_fixed_values_are_named(values, where):
    Ke = np.array([[1.0, -1.0], [-1.0, 1.0]])
    dofs = np.array([[0, 1], [1, 2], [2, 3]])
    with pytest.raises(ValueError, match=f"fixed_values must be finite, got (nan|inf) {where}"):
        lo.AffineSparse.from_elements(Ke, dofs, 4, fixed=[0, 3], fixed_values=values)


def test_a_length_n_vector_ignores_non_finite_free_entries():
    """A length-n g is read at the fixed dofs only: NaN placeholders at free dofs are fine."""
    Ke = np.array([[1.0, -1.0], [-1.0, 1.0]])
    fam = lo.AffineSparse.from_elements(Ke, np.array([[0, 1], [1, 2], [2, 3]]), 4, fixed=[0, 3],
                                        fixed_values=[7.0, np.nan, np.nan, 5.0])
    np.testing.assert_allclose(fam.rhs(np.array([1.0, 2.0, 3.0])), [7.0, 15.0])


def test_check_family_compares_the_lifted_free_by_fixed_block():
    """A dof-map slip onto another fixed dof leaves the free × free block intact: only the lifted
    right-hand side (u = 0 instead of the linear profile) shows it, and check_family must."""
    Ke = np.array([[1.0, -1.0], [-1.0, 1.0]])
    good = np.array([[0, 1], [1, 2], [2, 3], [3, 4]])
    slip = np.array([[0, 1], [1, 2], [2, 3], [3, 0]])     # the last element: dof 0, not 4
    K = np.zeros((5, 5))
    for d in good:
        K[np.ix_(d, d)] += Ke
    K = sp.csr_array(K)
    theta = np.ones(4)
    right = lo.AffineSparse.from_elements(Ke, good, 5, fixed=[0, 4], fixed_values=[0.0, 1.0])
    wrong = lo.AffineSparse.from_elements(Ke, slip, 5, fixed=[0, 4], fixed_values=[0.0, 1.0])
    np.testing.assert_allclose(sv.solve(sv.LinearProblem(right(theta), right.rhs(theta))).u,
                               [0.25, 0.5, 0.75], rtol=1e-14)
    assert lo.testing.check_family(right, K)
    with pytest.raises(AssertionError, match=r"fam.rhs\(θ\) differs from −K_fd g .* at free dof "
                                             r"2 \(dof 3 of all\): fam 0, reference 1"):
        lo.testing.check_family(wrong, K)
    with pytest.raises(lo.ShapeError, match="lifts fixed_values .* Pass K on all 5 dofs"):
        lo.testing.check_family(right, K[[1, 2, 3]][:, [1, 2, 3]])
    # homogeneous conditions: nothing is lifted, the free block alone decides (as before)
    plain = lo.AffineSparse.from_elements(Ke, slip, 5, fixed=[0, 4])
    assert lo.testing.check_family(plain, K)
