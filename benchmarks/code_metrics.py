"""Static measures of where code lives and which way imports point (the table of issue 17).

    python benchmarks/code_metrics.py [--root PATH]

Reads the source of linops/, solvers/ and adjoints/ under ``--root`` (default: this checkout;
give an extracted older commit to compare, e.g. ``git archive 0f46115 | tar -x -C /tmp/old``)
and prints one markdown row per measure. Nothing is imported from the measured tree. The
counting is that of the tests, loaded from this checkout: imports are read by
``tests/structure/test_layers.py``'s scanner, documentation lines by ``tests/structure/test_doctests.py``'s
``count_lines`` (the floor of the documentation test). What each row counts:

- cycle-closing imports: function-level imports inside linops (the application layer left
  out) whose target imports the importer back at module level, counted once per (importer,
  target) pair, in the largest strongly connected component of linops's import graph;
- imports inside functions: import statements in a function body naming a module of linops,
  solvers or adjoints;
- imports up into solvers/adjoints: import statements in linops naming solvers or adjoints;
- isinstance on concrete operator types: ``isinstance`` calls in solvers/ and adjoints/ whose
  class argument names an ``@operator`` class of linops (Dense, Sparse, ..., PETScMatrix; the
  issue's 38 counted the ``lo.``-qualified names, and PETScMatrix is imported under its own);
- documentation density: documentation lines per code line, as the documentation test counts
  them (non-blank docstring lines and comments), and in parentheses with the blank lines inside
  docstrings counted too (how the issue's 0.97 was measured);
- long modules: files of the three packages over 400 lines.
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib.util
import io
import pathlib
import re
import subprocess
import sys
import tokenize

HERE = pathlib.Path(__file__).resolve().parent.parent
LONG = 400


def _load(name: str):
    """A module of this checkout's tests/ folder, by path (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_metrics_{name}", HERE / "tests" / "structure" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _count_lines():
    """``count_lines`` of tests/structure/test_doctests.py, taken out of its source: importing that test
    module would import the three packages (it collects their doctests)."""
    tree = ast.parse((HERE / "tests" / "structure" / "test_doctests.py").read_text(encoding="utf-8"))
    keep = [n for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name == "count_lines")
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "_DIRECTIVE"
                                                  for t in n.targets))]
    namespace = {"ast": ast, "io": io, "pathlib": pathlib, "re": re, "tokenize": tokenize}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "tests/structure/test_doctests.py", "exec"),
         namespace)
    return namespace["count_lines"]


layers = _load("test_layers")
count_lines = _count_lines()

# the groups the table reports: linops without its application layer, the application layer
# (linops/_app/ and linops/__main__.py, the one part of linops allowed to import the others),
# solvers, adjoints
GROUPS = ("linops", "application", "solvers", "adjoints")
LABELS = {"linops": "linops/", "application": "linops/_app/ + __main__.py",
          "solvers": "solvers/", "adjoints": "adjoints/"}


def group(module: str) -> str:
    if any(module == p or module.startswith(p + ".") for p in layers.APPLICATION):
        return "application"
    return module.split(".")[0]


def _short(module: str) -> str:
    return module.rpartition(".")[2]


def _ranked(counts: collections.Counter) -> list:
    """(name, count), most first, ties by name (a set's order would change from run to run)."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components (Kosaraju; the graphs here have a few dozen nodes)."""
    nodes = set(graph) | {t for ts in graph.values() for t in ts}
    reach = {n: layers._reach(graph, n) | {n} for n in nodes}
    out, done = [], set()
    for n in sorted(nodes):
        if n not in done:
            comp = {m for m in reach[n] if n in reach[m]}
            done |= comp
            out.append(comp)
    return out


def cycle_row(imports) -> str:
    core = [i for i in imports if group(i.importer) == group(i.target) == "linops"]
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for i in core:
        if i.importer != i.target:
            graph[i.importer].add(i.target)
    biggest = max(_components(graph), key=len)
    up = [i for i in layers.upward_imports(core, "linops")
          if i.importer in biggest and i.target in biggest]
    pairs = sorted({(i.importer, i.target) for i in up})
    by = collections.Counter(_short(a) for a, _ in pairs)
    parts = ", ".join(f"`{m}` {c}" for m, c in _ranked(by))
    return (f"{len(pairs)} ({parts}) in a {len(biggest)}-module cycle; {len(up)} import "
            f"statements" if len(biggest) > 1 else "0 (no import cycle)")


def function_imports_row(imports) -> str:
    stmts = {(i.importer, i.line) for i in imports if i.function is not None}
    by = collections.Counter(group(m) for m, _ in stmts)
    return ", ".join(f"{by[g]} in {LABELS[g]}" for g in GROUPS)


def upward_packages_row(imports, files) -> str:
    hits = {(i.importer, i.line) for i in imports
            if i.importer.startswith("linops") and i.target.split(".")[0] in ("solvers", "adjoints")}
    outside = sorted(m for m, _ in hits if group(m) == "linops")
    app = [m for m in files if m == "linops._app" or m.startswith("linops._app.")]
    by = collections.Counter(m for m, _ in hits if m.startswith("linops._app."))
    detail = ", ".join(f"`{_short(m)}` {c}" for m, c in _ranked(by))
    main = sum(1 for m, _ in hits if m == "linops.__main__")
    return (f"{sum(by.values())} from {len(by)} of the {len(app)} files of linops/_app "
            f"({detail}); {main} in linops/__main__.py; {len(outside)} elsewhere in linops")


def operator_classes(files) -> set[str]:
    """Names of the concrete operator classes of linops (``@operator``-decorated)."""
    out = set()
    for module, path in files.items():
        if group(module) != "linops":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(d, "id", getattr(d, "attr", None)) == "operator"
                    for d in node.decorator_list):
                out.add(node.name)
    return out


def isinstance_row(files) -> str:
    concrete = operator_classes(files)
    by = collections.Counter()
    for module, path in files.items():
        if group(module) not in ("solvers", "adjoints"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                    and len(node.args) == 2
                    and any(getattr(n, "id", getattr(n, "attr", None)) in concrete
                            for n in ast.walk(node.args[1]))):
                by[module] += 1
    detail = ", ".join(f"`{m}` {c}" for m, c in _ranked(by))
    return f"{sum(by.values())} ({detail})"


def _blank_docstring_lines(path: pathlib.Path) -> int:
    """Blank lines inside docstrings (``count_lines`` leaves them out; the issue counted them)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    blank = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            blank.update(i for i in range(first.lineno, first.end_lineno + 1)
                         if not lines[i - 1].strip())
    return len(blank)


def density_row(root, files) -> str:
    doc, code, blank = collections.Counter(), collections.Counter(), collections.Counter()
    for module, path in files.items():
        d, c = count_lines(path)
        doc[group(module)] += d
        code[group(module)] += c
        blank[group(module)] += _blank_docstring_lines(path)
    return ", ".join(f"{LABELS[g]} {doc[g] / max(code[g], 1):.2f} "
                     f"({(doc[g] + blank[g]) / max(code[g], 1):.2f} with blank docstring lines)"
                     for g in GROUPS)


def long_modules_row(root, files) -> str:
    sizes = {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines())
             for p in files.values()}
    long = sorted(((n, f) for f, n in sizes.items() if n > LONG), reverse=True)
    return f"{len(long)}: " + ", ".join(f"{f} {n}" for n, f in long)


def _commit(root: pathlib.Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %cs"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"


def table(root: pathlib.Path) -> str:
    files = layers.module_files(root)
    imports = layers.scan(root)
    rows = [
        ("imports that close the big import cycle (function-level, upward)", cycle_row(imports)),
        ("own-package imports inside functions", function_imports_row(imports)),
        ("module-level import cycles", ", ".join(
            f"{len(layers.module_cycles(imports, p))} modules in {p}/" for p in layers.PACKAGES)),
        ("imports from linops up into solvers/adjoints", upward_packages_row(imports, files)),
        ("`isinstance` on concrete operator types in solvers/ and adjoints/",
         isinstance_row(files)),
        ("doc lines per code line", density_row(root, files)),
        (f"modules over {LONG} lines", long_modules_row(root, files)),
    ]
    w = max(len(r[0]) for r in rows)
    head = f"| {'measure'.ljust(w)} | {root} ({_commit(root)}) |\n|{'-' * (w + 2)}|---|"
    return head + "\n" + "\n".join(f"| {m.ljust(w)} | {v} |" for m, v in rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=HERE,
                    help="the checkout to measure (default: this one)")
    args = ap.parse_args(argv)
    print(table(args.root.resolve()))


if __name__ == "__main__":
    main()
