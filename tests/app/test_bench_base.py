"""``bench jax --section base`` measures as on the base install: neither scikit-sparse nor
pypardiso can be imported in its children, so sv.Auto's JAX path runs SuperLU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_base_section_runs_without_cholmod_and_pardiso(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "linops", "bench", "jax", "--section", "base",
                        "--sizes", "8", "--repeat", "1", "--methods", "adj-auto",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                       env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads((tmp_path / "jax-base.json").read_text())["results"]
    assert [r["method"] for r in rows] == ["adj auto"]
    assert rows[0]["base_install"] is True and rows[0]["factorizations"] == 1
    assert "--section base (the base install" in p.stdout


def test_run_one_blocks_the_optional_engines_in_its_process():
    code = ("from linops._app import jax as m; m.run_one('fam numpy', 4, base=True);"
            "import solvers as sv; from solvers.internals import entry;"
            "print(sv.cholmod_available(), entry('pardiso').unavailable() is None)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["False", "False"]
