"""The PETSc/MPI backend, run for real: pytest launches `mpirun -n P` on the scripts in
tests/mpi/ and asserts on the JSON lines they print (values, gradients, counters, errors).

Without petsc4py/mpirun these tests skip with the reason, unless LINOPS_REQUIRE_PETSC=1 (set
in CI), where a missing PETSc FAILS them instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

MPI_DIR = Path(__file__).resolve().parent
REQUIRED = os.environ.get("LINOPS_REQUIRE_PETSC") == "1"
TIMEOUT = 240


def _missing() -> str | None:
    try:
        import mpi4py  # noqa: F401
        import petsc4py  # noqa: F401
    except ImportError as e:
        return f"petsc4py/mpi4py not installed ({e}); see the README's PETSc install lines"
    if shutil.which("mpirun") is None:
        return "mpirun not found (apt-get install openmpi-bin)"
    return None


@pytest.fixture(scope="session", autouse=False)
def petsc_available():
    reason = _missing()
    if reason is not None:
        if REQUIRED:
            pytest.fail(f"LINOPS_REQUIRE_PETSC=1 but {reason}")
        pytest.skip(reason)


@lru_cache(maxsize=None)
def _run(script: str, ranks: int, *args: str) -> tuple:
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(ranks), sys.executable,
           str(MPI_DIR / script), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(MPI_DIR.parent.parent), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=MPI_DIR)
    results = tuple(json.loads(line[len("RESULT "):]) for line in p.stdout.splitlines()
                    if line.startswith("RESULT "))
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {p.returncode}\nstdout:\n"
                             f"{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return results


def run(script: str, ranks: int, *args: str) -> list[dict]:
    return list(_run(script, ranks, *args))


# ----- values and gradients independent of the number of ranks -----------------------------------
FAMILY_CASES = [("poisson", "mumps"), ("poisson", "cg+gamg"), ("mbb", "mumps"), ("mbb", "cg+gamg"),
                ("convection", "mumps"), ("convection", "gmres+gamg")]


@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("problem,solver", FAMILY_CASES)
def test_family_matches_serial_through_cache(petsc_available, ranks, problem, solver):
    """NEEDS the cache's local_shape contract (solvers/_cache.py checks right-hand sides
    against getattr(A, "local_shape", A.shape)) for ranks > 1."""
    (r,) = [r for r in run("family_check.py", ranks, "cache")
            if r["problem"] == problem and r["solver"] == solver]
    assert r["ranks"] == ranks and sum(r["local_n"]) == r["n"] and len(r["local_n"]) == ranks
    assert r["rel_value"] < 1e-10, r
    assert r["rel_grad"] < 1e-10, r
    assert r["stats"]["factorizations"] == 1 and r["stats"]["adjoint_solves"] == 1
    # the cotangent stays on this rank's slice: RankOne(-λ_local, u_local)
    assert r["cotangent_shape"] == [r["local_n"][0]] * 2
    # all setup work happens in init; the forward and the adjoint solve set up nothing
    assert r["init"]["PCSetUp"] >= 1
    for phase in ("solve", "adjoint"):
        assert all(r[phase][e] == 0 for e in ("KSPSetUp", "PCSetUp", "MatLUFactorSym",
                                              "MatLUFactorNum", "MatTranspose")), r[phase]
    assert r["transpose_setups"] == 0
    if problem == "convection":   # nonsymmetric: the adjoint runs KSPSolveTranspose
        assert r["mode"] == "reuse", r["note"]
    else:                          # symmetric family (flagged on the Mat) or a CG method
        assert r["mode"] == "forward", r["note"]


@pytest.mark.parametrize("ranks", [1, 2])
def test_family_matches_serial_factor_directly(petsc_available, ranks):
    """The same, driving the factor (setup/solve(B, trans)) without the cache."""
    for r in run("family_check.py", ranks, "factor"):
        assert r["rel_value"] < 1e-10 and r["rel_grad"] < 1e-10, r
        assert all(r["adjoint"][e] == 0 for e in ("KSPSetUp", "PCSetUp", "MatLUFactorNum")), r


# ----- transposed solves ------------------------------------------------------------------------
def _combos(ranks: int) -> dict:
    out = {}
    for group in ("mumps,gamg,tfqmr", "superlu", "hypre"):  # separate processes: see the script
        for r in run("transpose_check.py", ranks, group):
            out[r.get("combo", r["check"])] = r
    return out


@pytest.mark.parametrize("ranks", [1, 2])
def test_transpose_table_and_verification(petsc_available, ranks):
    c = _combos(ranks)
    d = c["dottest"]
    assert d["type"] == "PETScMatrix" and d["shape"] == [2000, 2000]
    assert abs(d["lhs"] - d["rhs"]) <= 1e-12 * abs(d["lhs"])
    assert [ls[0] for ls in d["local_shape"]] == [2000 // ranks] * ranks
    for name in ("mumps (table: verified)", "gmres+gamg (table: verified)",
                 "tfqmr+jacobi (not in table)"):
        r = c[name]
        assert r["mode"] == "reuse", r
        assert r["adjoint_residual"] < 1e-10 and r["transpose_residual"] < 1e-10, r
        assert r["transpose_setups"] == 0 and r["factorizations"] == 1
        assert r["adjoint_events"]["KSPSetUp"] == 0 and r["adjoint_events"]["PCSetUp"] == 0
    assert c["mumps (table: verified)"]["setup_check"] is None      # the table vouches
    ok = c["tfqmr+jacobi (not in table)"]["setup_check"]            # checked once at setup
    assert ok[2] is True and ok[0] < 1e-9


@pytest.mark.parametrize("ranks", [1, 2])
def test_known_bad_transposes_are_routed_or_refused(petsc_available, ranks):
    c = _combos(ranks)
    # SuperLU_dist (PETSc 3.18): wrong transposes, and a second instance corrupts the heap
    for name in ("superlu_dist (table: wrong) routed", "superlu_dist (table: wrong) refused"):
        r = c[name]
        assert r["error"] == "BackendNotSupported" and r["at"] == "init", r
        assert "heap" in r["message"] and "factor_solver_type='mumps'" in r["message"]
    # hypre is bad in every measured combination: with options too it is routed without ever
    # running its transposed solve (not even the setup check: it overwrites memory)
    hyp = c["gmres+hypre tuned (not in table)"]
    assert hyp["setup_check"] is None and "hypre" in hyp["note"]
    assert hyp["mode"] == "route" and hyp["adjoint_residual"] < 1e-10
    assert hyp["transpose_setups"] == 1          # one explicit-transpose setup, for both solves
    assert hyp["adjoint_events"]["MatTranspose"] == 1
    refused = c["gmres+hypre refused"]
    assert refused["error"] == "TransposeNotSupportedError"
    assert "hypre" in refused["message"] and "mumps" in refused["message"]


def test_modified_mat_is_detected(petsc_available):
    (r,) = [r for r in run("transpose_check.py", 1, "mumps") if r["check"] == "modified"]
    assert r["error"] == "MatrixModifiedError" and "lo.aslinop(mat)" in r["message"]


# ----- update and failures ----------------------------------------------------------------------
@pytest.mark.parametrize("ranks", [1, 2])
def test_update_is_numeric_and_failures_are_named(petsc_available, ranks):
    res = run("update_check.py", ranks)
    upd = {r["solver"]: r for r in res if r["check"] == "update"}
    for r in upd.values():
        assert r["key_equal"] and r["key_from_csr_equal"]
        assert r["stats"]["factorizations"] == 1 and r["stats"]["numeric_refactorizations"] == 1
        assert r["rel_value"] < 1e-10 and r["rel_grad"] < 1e-10, r
    assert upd["mumps"]["update_events"]["MatLUFactorSym"] == 0       # symbolic analysis kept
    assert upd["mumps"]["update_events"]["MatLUFactorNum"] == 1
    assert [r for r in res if r["check"] == "other_pattern"][0]["key_equal"] is False
    fail = {r["case"]: r for r in res if r["check"] == "failure"}
    assert fail["singular"]["error"] == "SingularMatrixError"
    assert fail["maxiter"]["error"] == "ConvergenceError" and fail["maxiter"]["history_len"] > 0
    assert fail["bad_rhs_shape"]["error"] == "ShapeError"
    assert fail["theta_shape"]["error"] == "ShapeError"
    if ranks > 1:
        assert fail["sequential_factor"]["error"] == "BackendNotSupported"
        assert "mumps" in fail["sequential_factor"]["message"]


@pytest.mark.parametrize("ranks", [1, 2])
def test_update_follows_symmetry_of_the_new_values(petsc_available, ranks):
    """A factor set up on a matrix flagged symmetric solves adjoints as forward solves; after
    update(A=K2) with K2 of the same pattern but NOT symmetric, adjoints must go through the
    transpose (before the fix: forward solves, ‖K2ᵀλ − a‖/‖a‖ ≈ 0.4 with no error). The factor's
    private copy carries the symmetry flag (MatDuplicate drops it, and GAMG then builds a
    symmetrized graph), and each solve's convergence history is its own."""
    sym = {r["solver"]: r for r in run("update_check.py", ranks) if r["check"] == "symmetry"}
    assert set(sym) == {"mumps", "gmres+gamg"}
    for r in sym.values():
        assert r["key_equal"] and r["flag_after_init"] == [True, True], r
        assert r["mode_init"] == "forward" and r["mode_after_update"] == "reuse", r
        assert r["flag_after_update"] == [True, False], r
        assert r["adjoint_residual"] < 1e-10, r
        h1, h2 = r["history_lens"]
        assert h1 == h2 >= 1, r     # not accumulated over the solves
    g = sym["gmres+gamg"]
    assert g["iterations_last_solve"] + 2 <= g["history_lens"][1] <= g["iterations_last_solve"] + 8


# ----- python -m linops bench petsc ----------------------------------------------------------------
def _bench(tmp_path, launcher: list[str], *args: str):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(MPI_DIR.parent.parent), os.environ.get("PYTHONPATH", "")])}
    cmd = launcher + [sys.executable, "-m", "linops", "bench", "petsc", *args, "--out",
                      str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, f"{' '.join(cmd)}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    data = json.loads((tmp_path / "petsc.json").read_text())
    return p, data["meta"], {(r["method"], r["ranks"]): r for r in data["results"]}


def _same_answers(a: dict, b: dict) -> None:
    for key in ("value", "grad_norm", "grad_dot"):
        assert abs(a[key] - b[key]) <= 1e-10 * abs(b[key]), (key, a[key], b[key])


def _sane(r: dict, ranks: int, n: int) -> None:
    assert r["ranks"] == ranks and r["n"] == n and "skipped" not in r, r
    assert r["iterations"] == r["iterations_fwd"] + r["iterations_adj"] and r["iterations_fwd"] > 0
    assert r["residual_fwd"] <= 1.5 * r["rtol"] and r["residual_adj"] <= 1.5 * r["rtol"], r
    assert len(r["peak_mb_per_rank"]) == ranks and r["peak_mb"] == max(r["peak_mb_per_rank"])
    assert r["time_s"] > 0 and r["build_s"] >= 0 and r["peak_isolated"] is True


MPIRUN2 = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2"]


def test_bench_petsc_under_mpirun(petsc_available, tmp_path):
    """`mpirun -n 2 python -m linops bench petsc --nx 20`: linops and the hand-written petsc4py
    script give the same value and θ-gradient with the same iterations (same GAMG setup, same
    stopping test); rank 0 alone prints the table and writes petsc.md / petsc.json."""
    p, meta, rows = _bench(tmp_path, MPIRUN2, "--nx", "20")
    assert set(rows) == {("linops", 2), ("hand", 2)}
    lin, hand = rows["linops", 2], rows["hand", 2]
    for r in (lin, hand):
        _sane(r, 2, 20 * 21)
    _same_answers(lin, hand)
    assert (lin["iterations_fwd"], lin["iterations_adj"]) == \
        (hand["iterations_fwd"], hand["iterations_adj"])
    assert hand["time_ratio"] == 1.0 and lin["time_ratio"] > 0 and lin["mem_ratio"] > 0
    assert meta["command"].startswith("mpirun -n 2 python -m linops bench petsc --nx 20")
    assert sum(line.startswith("| 420 ") for line in p.stdout.splitlines()) == 2   # rank 0 only
    assert "hand" in (tmp_path / "petsc.md").read_text()


def test_bench_petsc_driver_launches_one_mpirun_per_measurement(petsc_available, tmp_path):
    """`python -m linops bench petsc --ranks 1 2`: one fresh mpirun per measurement, one
    table; answers do not depend on the number of ranks, and the serial path agrees."""
    _, meta, rows = _bench(tmp_path, [], "--nx", "12", "--ranks", "1", "2")
    assert set(rows) == {("hand", 1), ("linops", 1), ("serial", 1), ("hand", 2), ("linops", 2)}
    for (method, ranks), r in rows.items():
        _sane(r, ranks, 12 * 13)
        assert abs(r["value"] - rows["hand", 1]["value"]) <= 1e-6 * abs(rows["hand", 1]["value"])
    _same_answers(rows["linops", 1], rows["hand", 1])
    _same_answers(rows["linops", 2], rows["hand", 2])
    assert "--ranks 1 2" in meta["command"]


@pytest.mark.parametrize("args,message", [
    (["--nx", "1"], "nx must be in"), (["--rtol", "2"], "--rtol must be in (0, 1)"),
    (["--option=-pc_type=lu"], "without the leading '-'"),
    (["--repeat", "0"], "positive integer"), (["--out", "/proc/linops-bench"], "cannot write")])
def test_bench_petsc_validates_before_running(petsc_available, capsys, args, message):
    from linops._app.petsc import main

    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_info_lines_name_the_verified_solvers(petsc_available):
    from solvers._engines.petsc import transpose_support

    lines = transpose_support()
    text = "\n".join(lines)
    assert "preonly+lu(mumps)" in text and "verified" in text
    assert "superlu_dist" in text and "wrong" in text and "hypre" in text


# ----- log det from MUMPS, and options that are read at PCSetUp -----------------------------------
@pytest.mark.parametrize("ranks", [1, 2])
def test_logdet_from_mumps_in_every_state(petsc_available, ranks):
    """cache.logdet() on MUMPS LU and Cholesky equals numpy's slogdet of the serial matrix: fresh,
    after update, after a failed update (a fresh KSP restores the old values), nonsymmetric,
    and indefinite with det < 0 (the sign); no factorization beyond the cache's own."""
    res = run("logdet_check.py", ranks)
    cases = {r["case"]: r for r in res if r["check"] == "logdet"}
    assert len(cases) == 8, sorted(cases)
    for case, r in cases.items():
        assert r["sign"] == r["ref_sign"], case
        assert abs(r["logabsdet"] - r["ref"]) <= 1e-12 * abs(r["ref"]), (case, r)
        assert r["factorizations"] == 1, case
    assert cases["lu indefinite"]["sign"] == -1.0
    failed = {r["case"]: r["error"] for r in res if r["check"] == "failed_update"}
    assert failed == {"lu": "SingularMatrixError", "cholesky": "SingularMatrixError"}
    refused = {r["case"]: r for r in res if r["check"] == "refused"}
    assert refused["iterative"]["error"] == "BackendNotSupported"
    assert "sv.logdet_estimate" in refused["iterative"]["message"]
    assert refused["icntl_33 off"]["error"] == "BackendNotSupported"
    assert "mat_mumps_icntl_33=0" in refused["icntl_33 off"]["message"]


def test_options_read_at_setup_reach_the_factor_and_the_levels(petsc_available):
    """options={...} that PETSc reads at PCSetUp, not at KSPSetFromOptions — MUMPS's ICNTL
    values, the multigrid levels' smoothers — take effect (they were deleted from the options
    database before the setup and silently ignored)."""
    (r,) = [r for r in run("logdet_check.py", 1) if r["check"] == "options"]
    assert r["icntl14"] == 77
    assert r["level_max_it"] and all(k == 3 for k in r["level_max_it"])


def _laplacian(n=50):
    import scipy.sparse as sp

    return sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tocsr()


def test_logdet_refuses_what_mumps_did_not_factorize(petsc_available):
    """In-process: null pivots (ICNTL(24)) mean det A = 0, never the determinant of the rest;
    a closed factor refuses instead of touching destroyed PETSc objects; options that replace
    MUMPS are refused by name."""
    import solvers as sv

    T = _laplacian().tolil()
    T[0, :] = 0
    T[:, 0] = 0
    cache = sv.init(sv.LinearProblem(T.tocsr()), sv.PETSc(options={"mat_mumps_icntl_24": 1}))
    with pytest.raises(sv.SingularMatrixError, match="1 null pivot"):
        cache.logdet()
    L = _laplacian()
    cache = sv.init(sv.LinearProblem(L), sv.PETSc())
    assert abs(cache.logdet().logabsdet - np.linalg.slogdet(L.toarray())[1]) < 1e-12
    factor = cache.factor
    factor.close()
    with pytest.raises(RuntimeError, match="closed"):
        factor.logdet()
    for options in ({"pc_type": "cholesky"}, {"pc_factor_mat_solver_type": "petsc"}):
        cache = sv.init(sv.LinearProblem(L), sv.PETSc(options=options))
        with pytest.raises(sv.BackendNotSupported, match="'petsc' factorization"):
            cache.logdet()


# ----- a KSP that stops on its own norm keeps iterating; atol shared by complex parts ----------
@pytest.mark.parametrize("ranks", [1, 2])
def test_petsc_krylov_success_means_the_true_tolerance(petsc_available, ranks):
    """GMRES/BiCGStab with a left preconditioner stop on the preconditioned residual: above the
    true tolerance they must keep iterating (restarts from the iterate, the target scaled by
    the gap measured in the KSP's own norm) rather than report STAGNATION; an atol-bound solve
    needs its atol scaled too (a tighter rtol changes nothing); a complex right-hand side on a
    real build is solved as two parts that share atol. Every case must succeed, with the true
    residual within max(rtol·‖b‖, atol)."""
    results = run("precond_stop_check.py", ranks)
    assert len(results) == 68
    bad = [r for r in results if r["status"] != "SUCCESS" or r["true"] is None
           or r["true"] > r.get("rtol", r.get("atol"))]
    assert not bad, bad
