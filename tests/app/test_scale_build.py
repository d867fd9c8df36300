"""The family-build comparison of ``python -m linops bench scale``: its three builds make the
same matrix (so the timings compare the same work), and the section runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from linops._app import scale


def test_the_three_builds_make_the_same_matrix():
    K = scale.build_plain(30)
    assert K.shape == (29 ** 2, 29 ** 2)
    for fam in (scale.build_from_elements(30), scale.build_from_coo(30)):
        D = fam(np.ones(fam.n_params)).to_scipy() - K
        assert fam.shape == K.shape and fam.pattern.nnz == K.nnz
        assert abs(D).max() < 1e-15


def test_the_build_section_runs(tmp_path):
    p = subprocess.run([sys.executable, "-m", "linops", "bench", "scale", "--only", "build",
                        "--sizes", "21", "--build-repeats", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = json.loads((tmp_path / "scale.json").read_text())["results"]
    assert [r["impl"] for r in rows] == ["plain", "from_elements", "from_coo"]
    assert all(r["n"] == 400 and r["wall_s"] > 0 for r in rows)
    assert "wall_ratio" in rows[1] and "family build (target" in p.stdout
