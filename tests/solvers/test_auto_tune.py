"""sv.Auto that measures: where a problem is solved more than once (a cache's first update,
``Auto(tune=True)``, a machine profile written by ``python -m linops tune``) the candidate
engines are timed on the real pattern and the fastest kept — at most one extra factorization
per candidate per pattern, counted and shown in ``cache.info`` — and a tuned choice answers as
the untuned one does, to the engines' rounding."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv
from solvers.internals import Measurement, Timing, is_hermitian, precision
from tests._cases.matrices import HAVE_PARDISO, needs_cholmod, needs_pardiso

def spd(nx=20, scale=1.0):
    fam, b = lo.testing.poisson_family(nx)
    return fam, fam(scale * np.linspace(0.5, 1.5, fam.n_params)), b


def forced(engines_seconds: dict, use="init") -> Measurement:
    """A measurement in which the engines took the given seconds (the fastest wins)."""
    return Measurement(tuple(Timing(e, s, s, 0.0) for e, s in engines_seconds.items()), use)


def key_of(A, asks=()):
    """The pattern key Auto files a measurement under (its fingerprint, precision, Hermitian,
    the queries asked)."""
    return (A.pattern.fingerprint, precision(A.dtype).name, is_hermitian(A), tuple(sorted(asks)))


@needs_cholmod
@needs_pardiso
def test_tune_true_measures_at_init_keeps_the_fastest_and_remembers_the_pattern():
    fam, K, b = spd()
    profile = sv.Profile()
    cache = sv.init(sv.LinearProblem(K, b, posdef=True), sv.Auto(tune=True, profile=profile))
    s = cache.stats
    assert (s.factorizations, s.tuning_factorizations) == (1, 2)    # CHOLMOD, PARDISO, SuperLU
    m = profile.measured(key_of(K))
    assert {t.engine for t in m.timings} == {"CHOLMOD", "PARDISO", "SuperLU"} and m.use == "init"
    winner = m.winner()
    assert cache.kind.split(" (")[0] == winner
    assert cache.info.startswith(f"{cache.kind} — chose {winner}: ")
    assert " s vs " in cache.info and "on this pattern" in cache.info
    assert "2 extra factorizations" in cache.info
    # the pattern is measured: other caches on it (other values too) start with the winner
    for scale in (1.0, 2.0):
        again = sv.init(sv.LinearProblem(spd(scale=scale)[1], b, posdef=True),
                        sv.Auto(tune=True, profile=profile))
        assert again.stats.tuning_factorizations == 0 and again.kind == cache.kind
        assert again.info.startswith(f"{cache.kind} — {m.text()}")
        assert again.factor.reused_analysis and again.stats.symbolic_analyses == 0


@needs_cholmod
@needs_pardiso
def test_the_first_update_of_a_pattern_measures_and_later_ones_refactorize():
    fam, K, b = spd()
    profile = sv.Profile()
    auto = sv.Auto(profile=profile, tune_min=100, pardiso_min=100)   # rules: PARDISO here
    cache = sv.init(sv.LinearProblem(K, b, posdef=True), auto)
    assert cache.kind == "PARDISO (mtype 2)" and "by rule" in cache.info
    assert cache.stats.tuning_factorizations == 0                     # init: today's cost
    cache.update(A=spd(scale=1.5)[1])
    s = cache.stats          # the kept trial and one per other candidate (CHOLMOD, PARDISO, SuperLU)
    assert (s.factorizations, s.numeric_refactorizations, s.tuning_factorizations) == (2, 0, 2)
    m = profile.measured(key_of(K))
    assert m.use == "update" and "numeric factorization" in cache.info
    for step in range(3):
        cache.update(A=spd(scale=1.6 + 0.1 * step)[1])
    assert (s.factorizations, s.numeric_refactorizations, s.tuning_factorizations) == (2, 3, 2)
    K2 = spd(scale=1.8)[1]
    np.testing.assert_allclose(cache.solve(), np.linalg.solve(K2.to_scipy().toarray(), b),
                               rtol=1e-12)
    # a second loop on the pattern measures nothing: one extra factorization per candidate
    other = sv.init(sv.LinearProblem(K, b, posdef=True), auto)
    other.update(A=K2)
    assert other.stats.tuning_factorizations == 0 and other.stats.numeric_refactorizations == 1


def test_a_plain_solve_and_small_loops_keep_todays_cost():
    fam, K, b = spd(100)                                # n = 10 100 >= tune_min
    sol = sv.solve(sv.LinearProblem(K, b, posdef=True))
    assert sol.stats.factorizations == 1 and sol.stats.tuning_factorizations == 0
    small = spd(20)[1]                                  # n = 420 < tune_min: rules
    cache = sv.init(sv.LinearProblem(small, b[:420], posdef=True))
    cache.update(A=spd(20, scale=2.0)[1])
    assert cache.stats.tuning_factorizations == 0 and cache.stats.numeric_refactorizations == 1
    never = sv.init(sv.LinearProblem(K, b, posdef=True), sv.Auto(tune=False))
    never.update(A=spd(100, scale=2.0)[1])
    assert never.stats.tuning_factorizations == 0 and never.stats.numeric_refactorizations == 1


def _answers(cache, fam, theta, b, a):
    """Everything a tuned choice must answer as the untuned one: solves in every mode, log det,
    the solve pullback's θ-gradient and the log-det gradient."""
    u = cache.solve()
    g = fam.pullback(ad.solve_pullback(cache, a).A)
    return {"u": u, "adj": cache.solve_adjoint(a), "tr": cache.solve_transpose(a),
            "logdet": np.array([cache.logdet().logabsdet]), "grad": g,
            "logdet grad": fam.pullback(ad.logdet_pullback(cache))}


@pytest.mark.parametrize("winner", ["CHOLMOD", "PARDISO", "SuperLU"])
@pytest.mark.parametrize("kind", ["spd", "nonsymmetric"])
def test_a_tuned_choice_answers_as_the_untuned_one(kind, winner):
    if winner == "CHOLMOD" and (kind != "spd" or not sv.cholmod_available()):
        pytest.skip("CHOLMOD: Hermitian matrices, scikit-sparse installed")
    if winner == "PARDISO" and not HAVE_PARDISO:
        pytest.skip("pypardiso missing")
    make = lo.testing.poisson_family if kind == "spd" else lo.testing.convection_diffusion_family
    fam, b = make(16)
    theta = np.linspace(0.5, 1.5, fam.n_params)
    K = fam(theta)
    a = np.random.default_rng(0).standard_normal(K.shape[0])
    profile = sv.Profile()
    engines = ["CHOLMOD", "PARDISO", "SuperLU"] if kind == "spd" else ["PARDISO", "SuperLU"]
    profile.record(key_of(K), forced({e: (0.1 if e == winner else 1.0) for e in engines}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sv.HintWarning)   # PARDISO answers the selinv by SuperLU
        tuned = sv.init(sv.LinearProblem(K, b), sv.Auto(profile=profile))
        assert tuned.kind.split(" (")[0] == winner
        got = _answers(tuned, fam, theta, b, a)
        untuned = sv.init(sv.LinearProblem(K, b), sv.Auto(tune=False))
        want = _answers(untuned, fam, theta, b, a)
    D = K.to_scipy().toarray()
    dense = {"u": np.linalg.solve(D, b), "adj": np.linalg.solve(D.T, a),
             "tr": np.linalg.solve(D.T, a), "logdet": np.array([np.linalg.slogdet(D)[1]])}
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-11, atol=1e-13,
                                   err_msg=f"{name}: tuned ({tuned.kind}) vs untuned "
                                           f"({untuned.kind})")
        if name in dense:
            np.testing.assert_allclose(got[name], dense[name], rtol=1e-11, err_msg=name)


def test_an_indefinite_matrix_measures_what_factorizes_it():
    n = 120
    A = sp.csr_matrix(sp.diags([-1.0, 0.5, -1.0], [-1, 0, 1], shape=(n, n)))   # indefinite
    profile = sv.Profile()
    cache = sv.init(sv.LinearProblem(A, np.ones(n)), sv.Auto(tune=True, profile=profile))
    m = profile.measured(key_of(lo.aslinop(A)))
    failed = {t.engine: t.failed for t in m.timings if t.failed}
    if sv.cholmod_available():
        assert failed.get("CHOLMOD") == "not positive definite"
    assert "SuperLU" in {t.engine for t in m.timings if t.failed is None}
    np.testing.assert_allclose(cache.solve(), np.linalg.solve(A.toarray(), np.ones(n)),
                               rtol=1e-11)


@needs_cholmod
def test_the_machine_profile_decides_a_problem_of_its_class_and_size(tmp_path):
    fam, K, b = spd(20)
    path = tmp_path / "auto-profile.json"
    prof = sv.Profile(meta=sv.Profile.header())
    # SuperLU "wins" on the machine: distinguishable from every rule (CHOLMOD for this A)
    prof.add({"class": "hermitian", "dtype": "float64"},
             Measurement((Timing("CHOLMOD", 1.0, 1.0, 0.0), Timing("SuperLU", 0.1, 0.1, 0.0)),
                         "init"), problem="a test problem", n=K.shape[0], nnz=K.pattern.nnz)
    prof.save(path)
    cache = sv.init(sv.LinearProblem(K, b, posdef=True), sv.Auto(profile=path))
    assert cache.kind.startswith("SuperLU") and cache.stats.tuning_factorizations == 0
    assert "in this machine's profile" in cache.info and "a test problem" in cache.info
    # another size, another class: the rules
    big = spd(40)[1]
    assert sv.init(sv.LinearProblem(big), sv.Auto(profile=path)).kind == "CHOLMOD"
    N, _ = lo.testing.convection_diffusion_family(20)
    assert "PARDISO" in sv.init(sv.LinearProblem(N(np.ones(N.n_params))),
                                sv.Auto(profile=path, pardiso_min=1)).kind or not HAVE_PARDISO
    # another machine's profile, another version, a broken file: ignored
    data = json.loads(path.read_text())
    data["machine_id"] = {**data["machine_id"], "host": "elsewhere"}
    path.write_text(json.dumps(data))
    assert sv.Profile.load(path).entries == []
    path.write_text("{not json")
    with pytest.warns(RuntimeWarning, match="cannot be read"):
        assert sv.Profile.load(path).entries == []


def test_options_are_checked():
    with pytest.raises(ValueError, match="tune must be None, True or False"):
        sv.Auto(tune="yes")
    with pytest.raises(TypeError, match="profile must be None, a path or a solvers.Profile"):
        sv.Auto(profile=3)
    with pytest.raises(ValueError, match="times sparse host matrices"):
        sv.Auto().measure(sv.LinearProblem(np.eye(3)))


@needs_pardiso
def test_pardiso_leaves_no_spinning_threads_to_the_engines_measured_after_it():
    """Intel OpenMP's workers spin for 200 ms after each PARDISO phase unless the blocktime of
    the calling thread's teams is 0: CPU a candidate measured next (CHOLMOD, SuperLU) loses."""
    import ctypes  # the OpenMP runtime beside MKL, loaded only where PARDISO is
    import pathlib  # the same
    from solvers._engines.pardiso import _mkl  # the library PARDISO itself loaded

    fam, K, b = spd(nx=6)
    sv.init(sv.LinearProblem(K, b, posdef=True), sv.Pardiso(posdef=True)).solve()
    omp = ctypes.CDLL(str(pathlib.Path(_mkl()[0]._name).with_name("libiomp5.so")))
    assert omp.kmp_get_blocktime() == 0
