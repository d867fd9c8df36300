"""CONTRIBUTING.md's two paths work as written: its files and edits (the python blocks titled
with a path) are applied to a copy of the repository, and the tests that hold them run there —
a solver engine in two files, an operator type in three."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

from tests._cases.docs import titled

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = titled(ROOT / "CONTRIBUTING.md")
# every file the guide asks for, and what this test does with it
APPLIED = {"solvers/_engines/myengine.py", "solvers/__init__.py", "linops/_operators/reverse.py",
           "linops/__init__.py", "linops/testing.py"}


def test_every_file_the_guide_asks_for_is_applied_here():
    assert set(FILES) == APPLIED


def _block(title: str) -> str:
    return FILES[title].body


def _copy(tmp_path: pathlib.Path) -> pathlib.Path:
    dst = tmp_path / "repo"
    # __pycache__ travels (copy2 keeps the mtimes): the copy's imports and numba's cached
    # kernels are then as warm as the checkout's, and its tests pay no recompilation
    ignore = shutil.ignore_patterns("bench-out")
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
    """The three lines of an ``__init__.py`` the guide names: the import (after the last
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


def _doctests(*modules: str) -> list[str]:
    """The doctest items of the modules a path edits (the package's own checks its __all__ and
    docstring list; the new module's runs its examples)."""
    return [f"tests/structure/test_doctests.py::test_module_doctests[{m}]" for m in modules]


def _pytest(repo: pathlib.Path, *args: str, k: str) -> list[str]:
    """One pytest run in the copy (one interpreter start, one import of JAX and the suite's
    conftest, where a run per group of tests paid them each time): ``args`` and
    tests/structure/test_layers.py, the tests of ``args`` filtered by ``k``; the node ids that
    passed (a failure fails :func:`_run`)."""
    out = _run(repo, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *args,
               "tests/structure/test_layers.py", "-k", f"{k} or test_layers or module_doctests")
    passed = re.findall(r"^PASSED (\S+)", out, re.M)
    layers = [t for t in passed if t.startswith("tests/structure/test_layers.py::")]
    assert layers, out[-500:]                  # the layer rules ran too (matched by -k)
    return passed


def test_contributing_a_solver_engine_takes_two_files(tmp_path):
    repo = _copy(tmp_path)
    (repo / "solvers" / "_engines" / "myengine.py").write_text(
        _block("solvers/_engines/myengine.py"))
    _export(repo / "solvers" / "__init__.py", _block("solvers/__init__.py"), "MyLU",
            "Algorithms")
    # the conformance matrices are generated from the registry: no edit there
    docs = _doctests("solvers", "solvers._engines.myengine")
    passed = _pytest(repo, "tests/solvers/test_conformance_states.py",
                     "tests/solvers/test_conformance.py", *docs, k="MyLU or size")
    cells = [t for t in passed if "MyLU" in t and "/test_conformance" in t]
    sizes = [t for t in passed if t.endswith("matrix_size")]
    assert len(cells) >= 28 and len(sizes) == 2, passed   # 5 states × 4 dtypes, 1 × 2 × 4 cells
    assert set(docs) <= set(passed), passed
    info = _run(repo, "-m", "linops", "info")
    assert re.search(r"^  mylu +sparse +any +the same factors", info, re.M)
    bench = _run(repo, "-m", "linops", "bench", "--sizes", "3", "--methods", "MyLU",
                 "--no-plot", "--out", str(tmp_path / "out"))
    assert "| linops MyLU (SuperLU) |" in bench


def test_contributing_an_operator_type_takes_three_files(tmp_path):
    repo = _copy(tmp_path)
    (repo / "linops" / "_operators" / "reverse.py").write_text(
        _block("linops/_operators/reverse.py"))
    _export(repo / "linops" / "__init__.py", _block("linops/__init__.py"), "Reverse",
            "Construct")
    zoo = _block("linops/testing.py")
    imp = next(ln for ln in zoo.splitlines() if ln.startswith("from "))
    builder = zoo.split(imp, 1)[1].strip("\n")
    testing = repo / "linops" / "testing.py"
    text = _insert_after(testing.read_text(), r"^from \._operators\.diagonal import [^\n]*$", imp)
    m = re.search(r"^    return \{f\.__name__[^\n]*\n", text, re.M)
    end = text.index(")}", m.end())
    text = text[:m.start()] + builder + "\n\n" + text[m.start():end] + ", reverse" + text[end:]
    testing.write_text(text)
    docs = _doctests("linops", "linops._operators.reverse", "linops.testing")
    passed = _pytest(repo, "tests/linops/test_operators.py", *docs, k="reverse")
    assert [t for t in passed if t.startswith("tests/linops/") and "reverse" in t], passed
    assert set(docs) <= set(passed), passed
