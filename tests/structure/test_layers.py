"""The import layers of linops, solvers and adjoints, read from the source (``ast``), never by
importing it.

The data flow of DESIGN.md is a layering: linops (operators) <- solvers <- adjoints. The rules:

1. linops imports nothing from solvers or adjoints, except ``linops/__main__.py`` and
   ``linops/_app/``: the application layer, the one place allowed to use all three;
2. solvers never imports adjoints;
3. the module-level imports inside each package form no cycle (a module that imports, while it
   loads, a module that imports it back runs half-initialised);
4. inside linops, an import that closes a cycle is on :data:`ALLOWED_UPWARD`, with the reason.
   Such an import is "upward": it sits in a function (so it runs after both modules loaded) and
   its target imports the importer at module level, directly or through other modules. Every
   other function-level import is merely deferred, and does not tie the layers in a knot;
5. solvers and adjoints reach linops through its public modules (``linops``, ``linops.petsc``,
   ``linops.testing``) and ``linops.internals``, the seam that lets linops reorganise its private
   modules; exceptions are on :data:`ALLOWED_PRIVATE`;
6. the application layer (``linops/_app``, ``__main__``) uses the public modules and the
   ``internals`` seams only, and the solvers' frame never imports an engine;
7. every import inside a function — of any module, ours or not — says why it is not at module
   level (an optional dependency, the one cycle, a benchmark child whose memory is measured):
   a ``#`` comment on its line or above its run of imports.

Every import counts: module-level and inside functions or methods, ``import a.b``, ``from a
import b``, ``from . import b``, ``from ..a import b``, and ``importlib.import_module("a.b")``
with a literal name. Imports under ``if TYPE_CHECKING:`` never run and are not counted.

The scanner (:func:`scan`, :func:`upward_imports`) is also what ``benchmarks/code_metrics.py``
measures with, so the table there and this test count the same things.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("linops", "solvers", "adjoints")
# where linops may import solvers and adjoints: the application layer (DESIGN.md)
APPLICATION = ("linops.__main__", "linops._app")

# The upward imports linops keeps: (importer, target, the function that holds the import).
# Strict: an entry whose import is gone fails too, so the list never outlives its reasons.
ALLOWED_UPWARD: dict[tuple[str, str, str], str] = {
    # the arithmetic of the base class (A + B, A @ B, c * A) is the simplification rules, which
    # build Sum, Product, Scaled and LowRank: subclasses of LinearOperator, whose modules import
    # _base. The base class asks for the rules when it first combines operators (_base._algebra)
    ("linops._base", "linops._algebra", "_algebra"):
        "operator arithmetic builds the concrete subclasses",
}

# Imports of private linops modules by solvers and adjoints: (importer, target) -> why.
ALLOWED_PRIVATE: dict[tuple[str, str], str] = {}


# ----- the scanner -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Import:
    """One imported module: ``importer`` imports ``target`` (both dotted module names) at
    ``path:line``, inside ``function`` (its qualified name) or at module level (None)."""

    importer: str
    target: str
    path: str
    line: int
    function: str | None

    def __str__(self) -> str:
        where = f"in {self.function}()" if self.function else "at module level"
        return f"{self.path}:{self.line}: {self.importer} imports {self.target} {where}"


def module_files(root: pathlib.Path, packages=PACKAGES) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py file of the packages under ``root``."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def scan(root: pathlib.Path = ROOT, packages=PACKAGES) -> list[Import]:
    """Every import, in the packages under ``root``, of a module of those packages."""
    files = module_files(root, packages)
    out: list[Import] = []
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        visitor = _Visitor(name, package, str(path.relative_to(root)), files, packages)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        out.extend(dict.fromkeys(visitor.found))  # ``from m import a, b``: m once
    return out


class _Visitor(ast.NodeVisitor):
    """Collects the imports of one module, with the function (if any) each one sits in."""

    def __init__(self, module, package, path, files, packages):
        self.module, self.package, self.path = module, package, path
        self.files, self.packages = files, packages
        self.scope: list[str] = []       # enclosing classes and functions, outermost first
        self.functions = 0               # how many of them are functions
        self.found: list[Import] = []

    def _add(self, node, target: str) -> None:
        # the deepest module of the tree that the dotted name starts with (``a.b.name`` -> a.b)
        while target and target not in self.files:
            target = target.rpartition(".")[0]
        if target and target.split(".")[0] in self.packages:
            self.found.append(Import(self.module, target, self.path, node.lineno,
                                     ".".join(self.scope) if self.functions else None))

    def _scoped(self, node, is_function: bool) -> None:
        self.scope.append(getattr(node, "name", "<lambda>"))
        self.functions += is_function
        self.generic_visit(node)
        self.functions -= is_function
        self.scope.pop()

    def visit_ClassDef(self, node):
        self._scoped(node, False)

    def visit_FunctionDef(self, node):
        self._scoped(node, True)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_If(self, node):
        test = node.test
        if getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
            for child in node.orelse:  # the body runs for type checkers only
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node):
        if node.level:
            parts = self.package.split(".")
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            # ``from pkg import sub`` imports the module pkg.sub when there is one
            sub = f"{base}.{alias.name}"
            self._add(node, sub if sub in self.files else base)

    def visit_Call(self, node):
        f = node.func
        if (getattr(f, "attr", getattr(f, "id", None)) in ("import_module", "__import__")
                and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            self._add(node, node.args[0].value)
        self.generic_visit(node)


# ----- the rules ---------------------------------------------------------------------------------
def _package(module: str) -> str:
    return module.split(".")[0]


def _in(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_violations(imports: list[Import]) -> list[Import]:
    """Imports against the data flow: linops -> solvers/adjoints outside the application
    layer, solvers -> adjoints."""
    out = []
    for imp in imports:
        src, dst = _package(imp.importer), _package(imp.target)
        if src == "linops" and dst in ("solvers", "adjoints") and not _in(imp.importer, APPLICATION):
            out.append(imp)
        elif src == "solvers" and dst == "adjoints":
            out.append(imp)
    return out


def private_imports(imports: list[Import], allowed=ALLOWED_PRIVATE) -> tuple[list, list]:
    """(imports of a private linops module by solvers or adjoints not on ``allowed``, entries of
    ``allowed`` that no longer occur)."""
    found = [i for i in imports if _package(i.importer) in ("solvers", "adjoints")
             and _package(i.target) == "linops"
             and any(part.startswith("_") for part in i.target.split("."))]
    keys = {(i.importer, i.target) for i in found}
    return [i for i in found if (i.importer, i.target) not in allowed], \
        sorted(k for k in allowed if k not in keys)


def module_graph(imports: list[Import], package: str) -> dict[str, set[str]]:
    """importer -> the modules of the same package it imports while it loads."""
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for imp in imports:
        if (imp.function is None and imp.importer != imp.target
                and _package(imp.importer) == package == _package(imp.target)):
            graph[imp.importer].add(imp.target)
    return graph


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def module_cycles(imports: list[Import], package: str) -> list[str]:
    """The modules of ``package`` that import themselves back at module level (sorted)."""
    graph = module_graph(imports, package)
    return sorted(m for m in graph if m in _reach(graph, m))


def upward_imports(imports: list[Import], package: str) -> list[Import]:
    """Function-level imports inside ``package`` whose target imports the importer (directly
    or indirectly) at module level: the imports that close an import cycle."""
    graph = module_graph(imports, package)
    return [imp for imp in imports
            if imp.function is not None and imp.importer != imp.target
            and _package(imp.importer) == package == _package(imp.target)
            and imp.importer in _reach(graph, imp.target)]


def unexplained_upward(imports: list[Import], allowed=ALLOWED_UPWARD) -> tuple[list, list]:
    """(upward imports of linops not on ``allowed``, entries of ``allowed`` that no longer
    occur)."""
    up = upward_imports(imports, "linops")
    keys = {(i.importer, i.target, i.function) for i in up}
    return [i for i in up if (i.importer, i.target, i.function) not in allowed], \
        sorted(k for k in allowed if k not in keys)


# ----- the tests on this repository -------------------------------------------------------------
@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return scan(ROOT)


def test_the_scanner_sees_this_repository(imports):
    # a scanner that found nothing would pass every rule below
    assert len(module_files(ROOT)) > 40 and len(imports) > 200


def test_linops_imports_solvers_and_adjoints_only_in_the_application_layer(imports):
    bad = [str(i) for i in layer_violations(imports) if _package(i.importer) == "linops"]
    assert bad == [], "linops is the foundation; only linops/__main__.py and linops/_app/ may " \
                      "import solvers or adjoints:\n" + "\n".join(bad)


def test_solvers_never_imports_adjoints(imports):
    bad = [str(i) for i in layer_violations(imports) if _package(i.importer) == "solvers"]
    assert bad == [], "solvers comes before adjoints:\n" + "\n".join(bad)


def test_solvers_and_adjoints_reach_linops_through_its_seam(imports):
    new, stale = private_imports(imports)
    assert new == [], "import it from linops.internals (add the name there if it is missing):\n" \
        + "\n".join(map(str, new))
    assert stale == [], f"ALLOWED_PRIVATE entries whose import is gone (delete them): {stale}"


@pytest.mark.parametrize("package", PACKAGES)
def test_module_level_imports_form_no_cycle(imports, package):
    assert module_cycles(imports, package) == []


def test_every_upward_import_in_linops_is_allowed_with_a_reason(imports):
    new, stale = unexplained_upward(imports)
    assert new == [], "an import that closes an import cycle (its target imports this module " \
                      "back): move the code to the layer it belongs to, or add it to " \
                      "ALLOWED_UPWARD with the reason:\n" + "\n".join(map(str, new))
    assert stale == [], f"ALLOWED_UPWARD entries whose import is gone (delete them): {stale}"


def test_the_generics_sit_below_the_operator_classes(imports):
    # the singledispatch generics are the bottom layer: every operator module registers on them,
    # so they may not import an operator module, not even in a function
    graph = module_graph(imports, "linops")
    below = _reach(graph, "linops._generics")
    assert "linops._base" not in below, sorted(below)
    assert [str(i) for i in imports if i.importer == "linops._generics" and i.function] == []


# ----- the tests of the test: a synthetic tree with known faults ---------------------------------
def _tree(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return tmp_path


def test_the_scanner_resolves_every_import_form(tmp_path):
    root = _tree(tmp_path, {
        "linops/_a.py": "from . import _b\nfrom ._c import f\nimport linops._d as d\n"
                        "from linops import _e\n",
        "linops/sub/__init__.py": "from .. import _b\nfrom ..sub.x import y\n",
        "linops/sub/x.py": "y = 1\n",
        "linops/_b.py": "import importlib\n\ndef g():\n    importlib.import_module('linops._c')\n",
        "linops/_c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from ._a import nothing\n\ndef f():\n    pass\n",
        "linops/_d.py": "", "linops/_e.py": "",
    })
    got = {(i.importer, i.target, i.function) for i in scan(root)}
    assert got == {
        ("linops._a", "linops._b", None), ("linops._a", "linops._c", None),
        ("linops._a", "linops._d", None), ("linops._a", "linops._e", None),
        ("linops.sub", "linops._b", None), ("linops.sub", "linops.sub.x", None),
        ("linops._b", "linops._c", "g"),
    }


def test_the_rules_report_a_new_upward_import(tmp_path):
    # _low is imported by _high at module level; a method of _low importing _high closes a cycle
    root = _tree(tmp_path, {
        "linops/_low.py": "class A:\n    def f(self):\n        from ._high import g\n"
                          "        return g()\n",
        "linops/_high.py": "from ._low import A\n\ndef g():\n    from . import _side\n",
        "linops/_side.py": "",  # deferred, but _side does not import _high back: not upward
    })
    new, stale = unexplained_upward(scan(root), allowed={})
    assert [(i.importer, i.target, i.function, i.line) for i in new] == \
        [("linops._low", "linops._high", "A.f", 3)]
    assert stale == []
    allowed = {("linops._low", "linops._high", "A.f"): "why", ("linops._x", "linops._y", "h"): ""}
    new, stale = unexplained_upward(scan(root), allowed=allowed)
    assert new == [] and stale == [("linops._x", "linops._y", "h")]


def test_the_rules_report_an_indirect_upward_import(tmp_path):
    # _a <- _b <- _c at module level; _a importing _c in a function closes the cycle
    root = _tree(tmp_path, {
        "linops/_a.py": "def f():\n    import linops._c\n",
        "linops/_b.py": "from . import _a\n",
        "linops/_c.py": "from ._b import x\n",
    })
    new, _ = unexplained_upward(scan(root), allowed={})
    assert [(i.importer, i.target) for i in new] == [("linops._a", "linops._c")]


def test_the_rules_report_imports_against_the_data_flow(tmp_path):
    root = _tree(tmp_path, {
        "linops/_x.py": "def f():\n    import solvers\n",
        "linops/_app/__init__.py": "", "linops/_app/bench.py": "import solvers, adjoints\n",
        "linops/__main__.py": "def main():\n    from adjoints import jax\n",
        "solvers/_y.py": "from adjoints import z\n",
        "adjoints/_z.py": "import linops, solvers\n",
    })
    bad = sorted((i.importer, i.target) for i in layer_violations(scan(root)))
    assert bad == [("linops._x", "solvers"), ("solvers._y", "adjoints")]


def test_the_rules_report_private_imports_of_linops(tmp_path):
    root = _tree(tmp_path, {
        "linops/_p.py": "", "linops/internals.py": "from ._p import x\n",
        "solvers/_a.py": "from linops._p import x\nfrom linops.internals import y\nimport linops\n",
        "adjoints/_b.py": "def f():\n    from linops import _p\n",
    })
    new, stale = private_imports(scan(root), allowed={("solvers._a", "linops._p"): "why",
                                                      ("solvers._c", "linops._p"): "gone"})
    assert [(i.importer, i.target) for i in new] == [("adjoints._b", "linops._p")]
    assert stale == [("solvers._c", "linops._p")]


def solvers_private_imports(imports: list[Import]) -> list:
    """Imports of a private solvers module (``solvers._x``) by adjoints: it reaches solvers
    through ``solvers`` and ``solvers.internals`` only, as solvers reaches linops."""
    return [i for i in imports if _package(i.importer) == "adjoints"
            and _package(i.target) == "solvers"
            and any(part.startswith("_") for part in i.target.split("."))]


def test_adjoints_reaches_solvers_through_its_seam(imports):
    bad = solvers_private_imports(imports)
    assert bad == [], "import it from solvers.internals (add the name there if it is missing):\n" \
        + "\n".join(map(str, bad))


def test_the_rules_report_private_imports_of_solvers(tmp_path):
    root = _tree(tmp_path, {
        "solvers/_p.py": "", "solvers/internals.py": "from ._p import x\n",
        "adjoints/_a.py": "from solvers.internals import x\nimport solvers\n",
        "adjoints/_b.py": "def f():\n    from solvers._p import x\n",
    })
    assert [(i.importer, i.target) for i in solvers_private_imports(scan(root))] == \
        [("adjoints._b", "solvers._p")]


def test_the_rules_report_a_module_level_cycle(tmp_path):
    root = _tree(tmp_path, {
        "solvers/_p.py": "from ._q import x\n",
        "solvers/_q.py": "from . import _p\n",
        "solvers/_r.py": "from . import _p\n",
    })
    assert module_cycles(scan(root), "solvers") == ["solvers._p", "solvers._q"]


# ----- the application layer and the solvers' frame -------------------------------------------
#: what linops/_app and linops/__main__.py may import of the three packages: the public modules
#: and the ``internals`` seams (a private module is reorganised freely by its package)
PUBLIC = ("linops", "linops.petsc", "linops.testing", "linops.internals", "solvers",
          "solvers.internals", "adjoints", "adjoints.jax", "adjoints.torch")


def application_private_imports(imports: list[Import]) -> list[Import]:
    """Imports by the application layer of anything but the public modules, the seams and the
    application layer's own modules."""
    return [i for i in imports if _in(i.importer, APPLICATION)
            and not _in(i.target, APPLICATION) and i.target not in PUBLIC]


def test_the_application_layer_uses_the_public_api_and_the_seams(imports):
    bad = application_private_imports(imports)
    assert bad == [], "linops/_app and __main__ reach the packages through their public " \
                      "modules and internals:\n" + "\n".join(map(str, bad))


def test_the_rules_report_a_private_import_of_the_application_layer(tmp_path):
    root = _tree(tmp_path, {
        "linops/_app/__init__.py": "", "linops/_app/x.py": "from solvers._engines import y\n"
        "import solvers.internals\nfrom . import z\n", "linops/_app/z.py": "",
        "solvers/internals.py": "", "solvers/_engines/__init__.py": "",
        "solvers/_engines/y.py": "",
    })
    assert [(i.importer, i.target) for i in application_private_imports(scan(root))] == \
        [("linops._app.x", "solvers._engines.y")]


#: the solvers' frame: the modules at the top of solvers/ (problem, cache, contract, registry,
#: checks, acceptance, results, errors, the entry points); engines register themselves and are
#: imported by solvers/__init__.py (and re-exported by the seam, solvers/internals.py) only
def frame_engine_imports(imports: list[Import]) -> list[Import]:
    return [i for i in imports if _package(i.importer) == "solvers"
            and i.importer.count(".") == 1 and i.importer != "solvers.internals"
            and _in(i.target, ("solvers._engines",))]


def test_the_solvers_frame_never_imports_an_engine(imports):
    bad = frame_engine_imports(imports)
    assert bad == [], "the frame reaches engines through the registry:\n" + "\n".join(map(str, bad))


def test_the_rules_report_a_frame_that_imports_an_engine(tmp_path):
    root = _tree(tmp_path, {
        "solvers/_cache.py": "def f():\n    from ._engines.auto import Auto\n",
        "solvers/_engines/__init__.py": "", "solvers/_engines/auto.py": "from .._cache import f\n",
    })
    assert [(i.importer, i.target) for i in frame_engine_imports(scan(root))] == \
        [("solvers._cache", "solvers._engines.auto")]


# ----- imports inside functions ------------------------------------------------------------------
def _is_import(line: str) -> bool:
    s = line.lstrip()
    return s.startswith("import ") or (s.startswith("from ") and " import " in s)


def unreasoned_function_imports(root: pathlib.Path = ROOT, packages=PACKAGES) -> list[str]:
    """``path:line: statement`` of every import inside a function (of any module, ours or not)
    that does not say why it is there: a run of consecutive import lines is reasoned when one of
    its lines carries a ``#`` comment or the line above the run is a comment. Module-level is the
    default; an import moves into a function for a reason (an optional dependency, an import
    cycle, a child process whose memory is measured), and the reason belongs beside it."""
    bad = []
    for path in sorted(p for pkg in packages for p in (root / pkg).rglob("*.py")):
        lines = path.read_text(encoding="utf-8").split("\n")
        tree = ast.parse("\n".join(lines), str(path))
        seen: set[int] = set()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in seen:
                    continue
                seen.add(node.lineno)
                first = node.lineno - 1          # the run of import (and blank) lines it is in
                while first > 0 and (_is_import(lines[first - 1]) or not lines[first - 1].strip()):
                    first -= 1
                run = [line for line in lines[first:node.end_lineno] if _is_import(line)]
                if not (any("#" in line for line in run)
                        or (first > 0 and lines[first - 1].strip().startswith("#"))):
                    bad.append(f"{path.relative_to(root)}:{node.lineno}: "
                               f"{lines[node.lineno - 1].strip()}")
    return bad


def test_every_function_level_import_states_its_reason():
    bad = unreasoned_function_imports()
    assert bad == [], "move these imports to module level, or say why they cannot be there " \
                      "(a trailing or preceding # comment):\n" + "\n".join(bad)


def test_the_rules_report_an_import_in_a_function_without_a_reason(tmp_path):
    root = _tree(tmp_path, {"solvers/_a.py": (
        "import numpy\n\n"
        "def f():\n    import json\n    return json\n\n"
        "def g():\n    import cupy  # optional: the gpu extra\n    import jax\n\n"
        "def h():\n    # import cycle: _b imports this module\n    from . import _b\n\n"
        "    from . import _c\n"
        "def k():\n    x = 1\n    from . import _d\n")})
    assert unreasoned_function_imports(root) == [
        "solvers/_a.py:4: import json", "solvers/_a.py:18: from . import _d"]
