"""Documentation is part of the contract.

- the examples in every module of linops, solvers and adjoints run as doctests (one case per
  module; ``adjoints.jax`` and its helpers only where jax is installed);
- every name in ``linops.__all__`` carries a runnable example, every public method of a public
  class has a docstring, and ``help(linops)`` lists the whole public API;
- the linops package keeps at least 0.5 documentation lines per code line.

``python tests/test_doctests.py`` prints the documentation density of every file of the three
packages (solvers and adjoints are reported, not yet asserted).
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import io
import pathlib
import re
import sys
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("linops", "solvers", "adjoints")
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
DENSITY_FLOOR = 0.5
# tool directives are not documentation: "# noqa: E402" teaches a linter, not a reader
_DIRECTIVE = re.compile(r"#\s*(noqa|type:\s*ignore|pragma|fmt:|isort:)")


# ----- discovery ---------------------------------------------------------------------------------
def _module_files(package: str) -> dict[str, pathlib.Path]:
    """Module name -> file, read from the file system: finding a module must not import it
    (``linops.petsc`` initialises MPI on import)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = {name: path for pkg in PACKAGES for name, path in _module_files(pkg).items()}


# ----- doctests ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_doctests(name):
    source = MODULES[name].read_text(encoding="utf-8")
    if ">>>" not in source:
        return  # no examples: nothing to run, and no reason to import (MPI, jax) for it
    if name == "adjoints.jax" or name.startswith("adjoints._jax"):
        pytest.importorskip("jax")
    try:
        module = importlib.import_module(name)
    except ImportError as e:  # an optional extra (petsc4py, ...) that this machine lacks
        pytest.skip(f"{name} needs an optional dependency: {e}")
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    found = 0
    for test in doctest.DocTestFinder().find(module, name):
        found += len(test.examples)  # "# doctest: +SKIP" examples count here, not as attempted
        runner.run(test, out=out.write)
    failed, attempted = runner.summarize(verbose=False)
    assert found > 0, f"{name} has '>>>' lines but doctest found no example (in a docstring " \
                      f"doctest does not collect, such as a cached_property's?)"
    assert failed == 0, f"{failed} of {attempted} examples failed in {name}:\n{out.getvalue()}"


# ----- the public API of linops ------------------------------------------------------------------
def _public_names():
    import linops

    return sorted(linops.__all__)


def test_all_lists_every_public_reexport():
    import linops

    bound = {n for n, v in vars(linops).items()
             if not n.startswith("_") and not inspect.ismodule(v)}
    assert bound - set(linops.__all__) == set(), "public names missing from linops.__all__"
    missing = [n for n in linops.__all__ if not hasattr(linops, n)]
    assert missing == [], f"linops.__all__ names that do not exist: {missing}"
    # the semi-public interface of solvers/adjoints stays out of the user API
    assert "internals" not in linops.__all__


@pytest.mark.parametrize("name", _public_names())
def test_public_name_has_an_example(name):
    import linops

    obj = getattr(linops, name)
    doc = obj.__doc__ or ""  # not inspect.getdoc: an inherited docstring does not count
    assert doc.strip(), f"linops.{name} has no docstring"
    assert ">>>" in doc, f"linops.{name}'s docstring has no example (an Examples section with >>>)"


@pytest.mark.parametrize("name", [n for n in _public_names()
                                  if inspect.isclass(getattr(__import__("linops"), n))])
def test_public_methods_have_docstrings(name):
    import linops

    cls = getattr(linops, name)
    undocumented = []
    for attr, value in vars(cls).items():
        if attr.startswith("_") and attr != "__call__":
            continue
        func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        func = getattr(func, "func", func)  # functools.cached_property keeps the function here
        # dataclass field defaults (dtype=np.float64) are class attributes too, but not methods
        if inspect.isfunction(func) or isinstance(value, property):
            if not (value.__doc__ or func.__doc__ or "").strip():
                undocumented.append(attr)
    assert undocumented == [], f"linops.{name}: public methods without a docstring: {undocumented}"


def test_help_lists_the_public_api():
    import linops

    doc = linops.__doc__
    missing = [n for n in linops.__all__ if not re.search(rf"\b{re.escape(n)}\b", doc)]
    assert missing == [], f"help(linops) does not mention {missing}"


# ----- documentation density ---------------------------------------------------------------------
def count_lines(path: pathlib.Path) -> tuple[int, int]:
    """(documentation lines, code lines) of one file.

    Documentation: non-blank lines of docstrings (module, class, function) plus lines that carry
    a comment (an inline comment counts as both). Code: every other non-blank line."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    doc = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                doc.update(range(first.lineno, first.end_lineno + 1))
    comments = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT and not _DIRECTIVE.match(tok.string)}
    n_doc = sum(1 for i in doc if lines[i - 1].strip()) + len(comments - doc)
    n_code = sum(1 for i, line in enumerate(lines, 1)
                 if line.strip() and i not in doc and not line.strip().startswith("#"))
    return n_doc, n_code


def density(package: str) -> tuple[float, list[tuple[str, int, int]]]:
    """Documentation lines / code lines over every .py file of ``package``, and the rows."""
    rows = [(str(path.relative_to(ROOT)), *count_lines(path))
            for path in _module_files(package).values()]
    n_doc = sum(r[1] for r in rows)
    n_code = sum(r[2] for r in rows)
    return n_doc / max(n_code, 1), rows


def _table(package: str) -> str:
    ratio, rows = density(package)
    body = "\n".join(f"  {f:32s} {d:5d} {c:5d}  {d / max(c, 1):5.2f}" for f, d, c in rows)
    total = f"  {package + ' (all files)':32s} {sum(r[1] for r in rows):5d} " \
            f"{sum(r[2] for r in rows):5d}  {ratio:5.2f}"
    return f"  {'file':32s} {'doc':>5s} {'code':>5s}  ratio\n{body}\n{total}"


def test_linops_documentation_density():
    ratio, _ = density("linops")
    assert ratio >= DENSITY_FLOOR, \
        f"linops has {ratio:.2f} documentation lines per code line (floor {DENSITY_FLOOR}):\n" \
        f"{_table('linops')}"


if __name__ == "__main__":
    for pkg in PACKAGES:
        print(_table(pkg), end="\n\n")
    sys.exit(0)
