"""The README is the front door: at most 250 lines, its quickstart reaches a first gradient in
10 lines and runs as written (and says what happens without x64), and its test command is
.ci/run's. Everything else it used to hold lives in docs/ (tests/app/test_docs.py runs those
pages) and CONTRIBUTING.md (tests/app/test_contributing.py applies its two paths)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests._cases.docs import blocks

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
HAVE_JAX = importlib.util.find_spec("jax") is not None


def _quickstart() -> list[str]:
    """The README's python blocks: the numpy path, then the same gradient through JAX."""
    return [b.body for b in blocks(README) if b.lang == "python"]


def test_readme_is_short():
    assert len(README.splitlines()) <= 250


def test_quickstart_reaches_a_first_gradient_in_ten_lines():
    numpy_path = _quickstart()[0].splitlines()
    first = next(i for i, line in enumerate(numpy_path, 1) if "fam.pullback(" in line)
    assert first <= 10, f"the first gradient is on line {first} of the quickstart"


def test_quickstart_runs(capsys):
    namespace: dict = {}
    for block in _quickstart():
        exec(compile(block, "README.md quickstart", "exec"), namespace)
    out = capsys.readouterr().out
    assert "RankOne 1 1" in out and "float64 True" in out


@pytest.mark.skipif(not HAVE_JAX, reason="the quickstart's last part needs jax")
def test_quickstart_without_x64_says_float32_as_the_readme_says():
    line = 'jax.config.update("jax_enable_x64", True)'
    code = "\n".join(_quickstart())
    assert line in code
    code = code.replace(line, "pass") + (
        "\nprint('loose', np.allclose(g_jax, dtheta, atol=1e-3 * abs(dtheta).max()))\n")
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "float32 False" in p.stdout and "`float32 False`" in README
    assert "loose True" in p.stdout


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    bash = re.findall(r"```bash\n(.*?)```", README, re.S)
    test_cmd = [b.strip() for b in bash if "pytest" in b][0]
    assert test_cmd in ci
    assert any("python -m linops bench" in b for b in bash)
    assert any(b.strip().startswith("python3 -m venv .venv && . .venv/bin/activate")
               for b in bash)
