"""``bench jax --section base`` measures as on the base install: neither scikit-sparse nor
pypardiso can be imported in its children, so sv.Auto runs SuperLU (the numpy path's row here:
no JAX compilation in the test; the same child, the same blocking as adj auto's)."""

from __future__ import annotations

import json

from linops._app import jax as bench_jax


def test_the_base_section_runs_without_cholmod_and_pardiso(tmp_path, capsys):
    bench_jax.main(["--section", "base", "--sizes", "8", "--repeat", "1", "--methods",
                    "numpy path", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "jax-base.json").read_text())["results"]
    assert [r["method"] for r in rows] == ["numpy path"], rows
    # in the child: neither CHOLMOD nor PARDISO importable, one factorization per gradient
    assert rows[0]["base_install"] is True and rows[0]["factorizations"] == 1
    assert "--section base (the base install" in capsys.readouterr().out
