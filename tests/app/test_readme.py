"""The README is the truth: its quickstart runs as written (and says what happens without x64),
its other examples print what their comments say, its test command is .ci/run's, its column
legends are the ones the code prints, and its contributing paths — a solver engine in two files, an
operator type in three — work as written."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from linops._app.legends import LEGENDS

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
HAVE_JAX = importlib.util.find_spec("jax") is not None


def _quickstart() -> str:
    return re.findall(r"```python\n(.*?)```", README, re.S)[0]


def test_quickstart_runs(capsys):
    exec(compile(_quickstart(), "README.md quickstart", "exec"), {})
    out = capsys.readouterr().out
    assert "RankOne" in out and "1 1" in out and "float64 True" in out


@pytest.mark.skipif(not HAVE_JAX, reason="the quickstart's last part needs jax")
def test_quickstart_without_x64_says_float32_as_the_readme_says():
    line = 'jax.config.update("jax_enable_x64", True)'
    assert line in _quickstart()
    code = _quickstart().replace(line, "pass") + (
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


@pytest.mark.parametrize("section", sorted(LEGENDS))
def test_readme_legends_are_the_printed_ones(section):
    assert f"```text\n{LEGENDS[section]}\n```" in README


def _examples() -> list[str]:
    """The python blocks before Contributing other than the quickstart."""
    return re.findall(r"```python\n(.*?)```", README.split("## Contributing", 1)[0], re.S)[1:]


def test_every_example_runs_and_prints_what_its_comments_say(capsys):
    blocks = _examples()
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, "README.md example", "exec"), {})
    out = capsys.readouterr().out
    assert "[-0.5        -0.04166667  0.04166667  0.5       ]" in out   # the FEM block's dJ/dθ
    assert "LogDet(sign=1.0, logabsdet=2953.24" in out and "\n1 0\n" in out


# ----- the contributing paths, applied to a copy of the repository -------------------------------
def _contributing_blocks() -> list[str]:
    part = README.split("## Contributing", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", part, re.S)


def _block(marker: str) -> str:
    return next(b for b in _contributing_blocks() if marker in b)


def _copy(tmp_path: pathlib.Path) -> pathlib.Path:
    dst = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "bench-out")
    for name in ("linops", "solvers", "adjoints", "tests"):
        shutil.copytree(ROOT / name, dst / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def _insert_after(text: str, pattern: str, new: str, last: bool = False) -> str:
    matches = list(re.finditer(pattern, text, re.M))
    assert matches, f"no line matches {pattern!r}"
    m = matches[-1] if last else matches[0]
    return text[:m.end()] + "\n" + new + text[m.end():]


def _export(init: pathlib.Path, block: str, name: str, heading: str) -> None:
    """The three lines of an ``__init__.py`` the README names: the import (after the last
    plain re-export), the name in ``__all__``, the docstring line under ``heading``."""
    text = init.read_text()
    imp = next(ln for ln in block.splitlines() if ln.startswith("from "))
    doc = next(ln for ln in block.splitlines() if ln.startswith(f"# {name}(")).lstrip("# ")
    text = _insert_after(text, r"^from \.\_\w+ import \w+ as \w+$", imp, last=True)
    text = _insert_after(text, r"^__all__ = \[$", f'    "{name}",')
    text = _insert_after(text, rf"^{heading}[^\n]*\n-+$", doc)
    init.write_text(text)


def _run(repo: pathlib.Path, *args: str, timeout: float = 600) -> str:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=repo,
                       env=env, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(args)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def test_contributing_a_solver_engine_takes_two_files(tmp_path):
    repo = _copy(tmp_path)
    module = _block("@register(")
    (repo / "solvers" / "_engines" / "myengine.py").write_text(module)
    _export(repo / "solvers" / "__init__.py", _block("# solvers/__init__.py"), "MyLU",
            "Algorithms")
    # the conformance matrices are generated from the registry: no edit there
    out = _run(repo, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "tests/solvers/test_conformance_states.py", "tests/solvers/test_conformance.py",
               "-k", "MyLU or size")
    passed = re.search(r"(\d+) passed", out)   # 5 states × 4 dtypes, 1 × 2 × 4 cells, sizes
    assert passed and int(passed.group(1)) >= 30 and "failed" not in out, out[-500:]
    _run(repo, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/structure/test_layers.py",
         "tests/structure/test_doctests.py", "-k", "test_layers or solvers")
    info = _run(repo, "-m", "linops", "info")
    assert re.search(r"^  mylu +sparse +any +the same factors", info, re.M)
    bench = _run(repo, "-m", "linops", "bench", "--sizes", "3", "--methods", "MyLU",
                 "--no-plot", "--out", str(tmp_path / "out"))
    assert "| linops MyLU (SuperLU) |" in bench


def test_contributing_an_operator_type_takes_three_files(tmp_path):
    repo = _copy(tmp_path)
    (repo / "linops" / "_reverse.py").write_text(_block("@operator"))
    _export(repo / "linops" / "__init__.py", _block("# linops/__init__.py"), "Reverse",
            "Construct")
    zoo = _block("# linops/testing.py")
    imp = next(ln for ln in zoo.splitlines() if ln.startswith("from "))
    builder = zoo.split(imp, 1)[1].strip("\n")
    testing = repo / "linops" / "testing.py"
    text = _insert_after(testing.read_text(), r"^from \._operators\.diagonal import [^\n]*$", imp)
    m = re.search(r"^    return \{f\.__name__[^\n]*\n", text, re.M)
    end = text.index(")}", m.end())
    text = text[:m.start()] + builder + "\n\n" + text[m.start():end] + ", reverse" + text[end:]
    testing.write_text(text)
    out = _run(repo, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/linops/test_operators.py",
               "-k", "reverse")
    assert re.search(r"\b\d+ passed", out) and " failed" not in out, out[-500:]
    _run(repo, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/structure/test_layers.py",
         "tests/structure/test_doctests.py", "-k",
         "test_layers or (linops and not _app and not solvers and not adjoints)")
