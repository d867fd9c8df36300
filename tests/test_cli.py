"""``python -m linops info | bench``: argument validation before any work, results written to a
folder, a legend in the output, "not installed" rows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from linops.__main__ import main


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "linops", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("args,msg", [
    (["--sizes", "0"], "grid side nx must be in [2, 3200]"),
    (["--sizes", "-3"], "grid side nx must be in [2, 3200]"),
    (["--sizes", "x"], "grid side must be an integer"),
    (["--methods", "dense gradient (n×n)"], "invalid choice"),
    (["--timeout", "0"], "--timeout must be positive"),
    (["--out", "/etc/passwd/sub"], "cannot write results to /etc/passwd/sub/"),
])
def test_bad_arguments_fail_before_running(args, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", *args])
    assert e.value.code == 2
    assert msg in capsys.readouterr().err


def test_bench_writes_table_json_plot_with_legend(tmp_path):
    p = run("bench", "--sizes", "4", "--methods", "lu", "scipy", "dense-gradient",
            "--out", str(tmp_path / "res"))
    assert p.returncode == 0, p.stderr
    assert "grad/fwd" in p.stdout and "gradient bytes  bytes of the gradient" in p.stdout
    assert f"results written to {tmp_path / 'res'}/" in p.stdout
    data = json.loads((tmp_path / "res" / "bench.json").read_text())
    rows = {r["method"]: r for r in data["results"]}
    assert set(rows) == {"lu", "scipy", "dense-gradient"}
    assert rows["lu"]["factorizations"] == 1 and rows["lu"]["n"] == 20
    assert rows["lu"]["payload_bytes"] == 2 * 20 * 8          # RankOne(−λ, u)
    assert rows["dense-gradient"]["payload_bytes"] == 20 * 20 * 8
    md = (tmp_path / "res" / "bench.md").read_text()
    assert "python -m linops bench --sizes 4" in md and "| linops LU (SuperLU)" in md
    assert (tmp_path / "res" / "bench.png").stat().st_size > 1000


def test_info_lists_the_backend_table():
    p = run("info")
    assert p.returncode == 0
    assert "available: dense_lu" in p.stdout
    assert "no minres: jax.scipy.sparse.linalg has no minres" in p.stdout


def test_usage_and_unknown_command(capsys):
    assert main([]) == 0 and "info" in capsys.readouterr().out
    assert main(["frobnicate"]) == 2 and "unknown command" in capsys.readouterr().err
