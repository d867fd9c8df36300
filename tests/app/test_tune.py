"""``python -m linops tune``: the candidate engines measured on this machine, a profile written
where it is asked to be, and ``sv.Auto`` reading it for a problem of the same class and size.
Run in this process through ``linops.__main__.main`` (the measurement itself is in-process too)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import linops as lo
import solvers as sv
from linops.__main__ import main
from linops._app.legends import explained
from linops._app.tune import LEGEND


def test_tune_writes_a_profile_that_auto_reads(tmp_path, capsys):
    path = tmp_path / "profile.json"
    assert main(["tune", "--sizes", "12", "--repeat", "1", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"profile written to {path}" in out
    header = next(line for line in out.splitlines() if line.startswith("| problem"))
    columns = {c.strip() for c in header.strip("|").split("|")}
    assert columns <= explained(LEGEND)   # every column is in the legend under it
    assert LEGEND in out
    data = json.loads(path.read_text())
    assert data["version"] == 1 and len(data["entries"]) == 2      # 2 problems × 1 size
    assert {e["class"] for e in data["entries"]} == {"hermitian", "general"}
    for e in data["entries"]:
        engines = {t["engine"] for t in e["measurement"]["timings"]}
        assert "SuperLU" in engines or "CHOLMOD" in engines
        assert all(t["failed"] is None for t in e["measurement"]["timings"])
    # Auto reads it: a problem of a measured class and size starts with that machine's winner
    fam, b = lo.testing.poisson_family(12)
    K = fam(np.ones(fam.n_params))
    cache = sv.init(sv.LinearProblem(K, b, posdef=True), sv.Auto(profile=path))
    assert "in this machine's profile" in cache.info and "2-D Q4 heat conduction" in cache.info
    winner = sv.Profile.load(path).for_class({"class": "hermitian", "dtype": "float64"},
                                             K.shape[0], K.pattern.nnz)[1].winner("init")
    assert cache.kind.startswith({"PARDISO": "PARDISO", "CHOLMOD": "CHOLMOD",
                                  "SuperLU": "SuperLU"}[winner])
    assert main(["tune", "--show", "--out", str(path)]) == 0
    assert "2-D Q4 convection-diffusion" in capsys.readouterr().out


def test_tune_show_without_a_profile_says_so(tmp_path, capsys):
    assert main(["tune", "--show", "--out", str(tmp_path / "none.json")]) == 0
    assert "no profile for this machine" in capsys.readouterr().out


def test_tune_refuses_bad_sizes_before_measuring(capsys):
    with pytest.raises(SystemExit) as e:
        main(["tune", "--sizes", "0"])
    assert e.value.code == 2 and "must be a positive integer" in capsys.readouterr().err
