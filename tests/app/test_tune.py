"""``python -m linops tune``: the candidate engines measured on this machine, a profile written
where it is asked to be, and ``sv.Auto`` reading it for a problem of the same class and size."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

import linops as lo
import solvers as sv
from linops._app.legends import explained
from linops._app.tune import LEGEND

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "linops", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_tune_writes_a_profile_that_auto_reads(tmp_path):
    path = tmp_path / "profile.json"
    p = run("tune", "--sizes", "12", "24", "--repeat", "1", "--out", str(path))
    assert p.returncode == 0, p.stderr
    assert f"profile written to {path}" in p.stdout
    header = next(line for line in p.stdout.splitlines() if line.startswith("| problem"))
    columns = {c.strip() for c in header.strip("|").split("|")}
    assert columns <= explained(LEGEND)   # every column is in the legend under it
    assert LEGEND in p.stdout
    data = json.loads(path.read_text())
    assert data["version"] == 1 and len(data["entries"]) == 4      # 2 problems × 2 sizes
    assert {e["class"] for e in data["entries"]} == {"hermitian", "general"}
    for e in data["entries"]:
        engines = {t["engine"] for t in e["measurement"]["timings"]}
        assert "SuperLU" in engines or "CHOLMOD" in engines
        assert all(t["failed"] is None for t in e["measurement"]["timings"])
    # Auto reads it: a problem of a measured class and size starts with that machine's winner
    fam, b = lo.testing.poisson_family(24)
    K = fam(np.ones(fam.n_params))
    cache = sv.init(sv.LinearProblem(K, b, posdef=True), sv.Auto(profile=path))
    assert "in this machine's profile" in cache.info and "2-D Q4 heat conduction" in cache.info
    winner = sv.Profile.load(path).for_class({"class": "hermitian", "dtype": "float64"},
                                             K.shape[0], K.pattern.nnz)[1].winner("init")
    assert cache.kind.startswith({"PARDISO": "PARDISO", "CHOLMOD": "CHOLMOD",
                                  "SuperLU": "SuperLU"}[winner])
    shown = run("tune", "--show", "--out", str(path))
    assert shown.returncode == 0 and "2-D Q4 convection-diffusion" in shown.stdout


def test_tune_show_without_a_profile_says_so(tmp_path):
    p = run("tune", "--show", "--out", str(tmp_path / "none.json"))
    assert p.returncode == 0 and "no profile for this machine" in p.stdout


def test_tune_refuses_bad_sizes_before_measuring():
    p = run("tune", "--sizes", "0")
    assert p.returncode == 2 and "must be a positive integer" in p.stderr
