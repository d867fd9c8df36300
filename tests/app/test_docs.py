"""The documentation is tested like code.

- the site builds with ``mkdocs build --strict`` (every warning an error: a broken link, a page
  missing from the navigation, a docstring griffe cannot parse), and its API reference has a
  section for every public name of linops, solvers, adjoints and adjoints.jax;
- every python block of README.md, CONTRIBUTING.md and docs/**/*.md runs, page by page, and a
  block's ``output`` block is what it prints (the convention: tests/_cases/docs.py);
- every repository path (``solvers/_engines/auto.py``, ``docs/``) and every dotted name of the
  three packages (``linops.internals``, ``sv.Auto.choose``, ``adj.factorize``) those pages
  mention exists;
- docs/benchmarks.md holds one region per benchmark table, each written by ``python -m linops
  bench ... --write-docs`` or marked as not regenerated, with the legend the code prints.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import importlib.util
import io
import os
import re
import subprocess
import sys

import pytest

from linops._app import docs as bench_docs
from linops._app.legends import legend
from tests._cases.docs import LANGUAGES, ROOT, blocks, pages

PAGES = pages()
IDS = [str(p.relative_to(ROOT)) for p in PAGES]
HAVE_MKDOCS = all(importlib.util.find_spec(m) is not None
                  for m in ("mkdocs", "mkdocstrings_handlers.python", "material"))
NAMESPACES = {"linops": "linops", "solvers": "solvers", "adjoints": "adjoints",
              "adjoints-jax": "adjoints.jax"}
# paths the pages name that land with another branch: strict, so each entry goes once it exists
PENDING_PATHS: dict[str, str] = {}
# folders the commands create (outputs), not part of the repository
OUTPUT_DIRS = ("bench-out/", ".venv/", "site/")
# compiled modules setup.py builds only where their libraries are found (an install without
# SuiteSparse has none): a page may name them; where one is not built, its source must exist
OPTIONAL_EXTENSIONS = {"solvers._native": "native/linops_native.cpp"}


# ----- the site ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not HAVE_MKDOCS:
        pytest.skip('the docs build needs mkdocs, mkdocstrings-python and mkdocs-material: '
                    'pip install ".[docs]"')
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                        str(ROOT / "mkdocs.yml"), "-d", str(out)], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=300)
    return p, out


def test_the_site_builds_without_a_warning(site):
    p, out = site
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-4000:]
    warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
    assert warnings == [], "\n".join(warnings)
    assert (out / "index.html").exists() and (out / "benchmarks" / "index.html").exists()


@pytest.mark.parametrize("page, ns", sorted(NAMESPACES.items()))
def test_the_api_reference_documents_every_public_name(site, page, ns):
    _, out = site
    html = (out / "api" / page / "index.html").read_text(encoding="utf-8")
    module = importlib.import_module(ns) if ns != "adjoints.jax" else _jax_namespace()
    missing = [n for n in module.__all__ if f'id="{ns}.{n}"' not in html]
    assert missing == [], f"api/{page}.md renders no section for {missing}"


def _jax_namespace():
    pytest.importorskip("jax")
    return importlib.import_module("adjoints.jax")


# ----- every python block runs -------------------------------------------------------------------
def _runnable(module: str) -> str | None:
    """None when ``module`` can run here, else why not."""
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    if module == "cupy":
        import cupy

        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                return None
        except Exception:  # noqa: BLE001  (no driver: cupy raises its own CUDA errors)
            pass
        return "no CUDA device"
    return None


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_python_block_runs_and_prints_its_output(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    found = blocks(page.read_text(encoding="utf-8"))
    unknown = [(b.line, b.lang) for b in found if b.lang not in LANGUAGES]
    assert unknown == [], f"{page.name}: blocks without a known language (line, language): " \
                          f"{unknown}; use one of {LANGUAGES}"
    namespace: dict = {"__name__": "__docs__"}
    printed, ran, skipped = None, 0, None
    for b in found:
        if b.lang == "text" and b.title == "output":
            assert printed is not None, f"{page.name}:{b.line}: an output block after no " \
                                        f"python block"
            if skipped:
                continue
            checker = doctest.OutputChecker()
            flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
            assert checker.check_output(b.body, printed, flags), \
                f"{page.name}:{b.line}: the block before prints\n{printed}\nnot\n{b.body}"
            continue
        if b.lang != "python" or b.title:
            continue
        if skipped is None and b.needs and _runnable(b.needs):
            skipped = f"{page.name}:{b.line} onwards needs {b.needs}: {_runnable(b.needs)}"
        if skipped:
            printed = ""
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(b.body, f"{page.relative_to(ROOT)}:{b.line}", "exec"), namespace)
        printed, ran = out.getvalue(), ran + 1
    if skipped:
        pytest.skip(f"{ran} blocks ran; {skipped}")


# ----- every path and name the pages mention exists ----------------------------------------------
_ALIASES = {"lo": "linops", "sv": "solvers", "ad": "adjoints", "adj": "adjoints.jax"}
_NAME = re.compile(r"(?<![\w./-])(linops|solvers|adjoints|lo|sv|ad|adj)((?:\.[A-Za-z_]\w*)+)")
_TOKEN = re.compile(r"[\w./-]+")
# a repository path: folders ending in "/", or a file with one of these extensions
_PATH = re.compile(r"(?:\.?[\w-]+/)+(?:[\w.-]+\.(?:py|md|sh|toml|yml|yaml|ipynb|json|txt|cfg))?")


def _created(text: str) -> tuple[set, set]:
    """The paths a page tells you to create (its python blocks' titles) and the names they
    define (classes and functions of those blocks)."""
    paths, names = set(), set()
    for b in blocks(text):
        if b.lang == "python" and b.title:
            paths.add(b.title)
            names.update(re.findall(r"^\s*(?:class|def)\s+(\w+)", b.body, re.M))
    return paths, names


def _resolves(dotted: str, created: set) -> str | None:
    """None when ``dotted`` names a module or an attribute that exists, else what is missing."""
    for ext, source in OPTIONAL_EXTENSIONS.items():
        if dotted == ext or dotted.startswith(ext + "."):
            if importlib.util.find_spec(ext) is None:
                return None if (ROOT / source).is_file() else f"no {source} to build {ext} from"
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            if importlib.util.find_spec(module) is not None:
                break
        except (ImportError, ValueError):
            continue
    else:
        return f"no module {parts[0]}"
    if i == len(parts):
        return None
    try:
        obj = importlib.import_module(module)
    except ImportError as e:  # an optional dependency of that module (petsc4py, jax)
        pytest.skip(f"{module} cannot be imported here to check {dotted}: {e}")
    for j, part in enumerate(parts[i:], start=i):
        fields = getattr(obj, "__dataclass_fields__", {})
        if part in fields:   # a dataclass field without a default is no class attribute
            return None
        if not hasattr(obj, part):
            if part in created:
                return None
            return f"{'.'.join(parts[:j])} has no attribute {part!r}"
        obj = getattr(obj, part)
    return None


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_path_and_name_the_page_mentions_exists(page):
    text = page.read_text(encoding="utf-8")
    created_paths, created_names = _created(text)
    bad = []
    for m in _TOKEN.finditer(text):
        path = m.group(0).rstrip(".")            # a sentence may end right after a path
        if "/" not in path or path.startswith(("/", "http")) or not _PATH.fullmatch(path):
            continue   # not a path ("numpy/scipy", "build/asm/amg"), or a system one
        after = text[m.start() + len(path):m.start() + len(path) + 1]
        if path.endswith("/") and after and not re.match(r"[\s`)\],;:*.]", after):
            continue   # "∂f/∂θ": mathematics, not a folder
        if path.startswith(OUTPUT_DIRS) or path in created_paths or path in PENDING_PATHS:
            continue
        if not ((ROOT / path).exists() or (page.parent / path).exists()):
            bad.append(f"line {text.count(chr(10), 0, m.start()) + 1}: path {path}")
    for m in _NAME.finditer(text):
        alias, rest = m.group(1), m.group(2)
        why = _resolves(_ALIASES.get(alias, alias) + rest, created_names)
        if why:
            bad.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {alias}{rest}: {why}")
    assert bad == [], f"{page.name} names what does not exist:\n" + "\n".join(bad)


def test_pending_paths_do_not_exist_yet():
    """Strict: once the branch that builds it is merged, drop its entry from PENDING_PATHS."""
    here = [p for p in PENDING_PATHS if (ROOT / p).exists()]
    assert here == [], f"{here} exist now; remove them from PENDING_PATHS"


# ----- the benchmarks page -----------------------------------------------------------------------
BENCH_PAGE = ROOT / "docs" / "benchmarks.md"


@pytest.mark.parametrize("key", bench_docs.KEYS)
def test_every_benchmark_table_is_generated_or_marked_with_its_legend(key):
    text = BENCH_PAGE.read_text(encoding="utf-8")
    start, end = bench_docs._span(text, key)
    region = text[start:end]
    first = region.split("\n", 1)[0]
    generated = re.match(r"Measured \d{4}-\d\d-\d\d \d\d:\d\d UTC on .+ \(load average [\d., ]+\)"
                         r".* by `(mpirun -n \d+ )?python -m linops bench.* --write-docs.*`:$",
                         first)
    kept = re.search(r'!!! warning "Not regenerated in this revision"\n    Measured \d{4}-\d\d-\d\d '
                     r"\d\d:\d\d UTC .+ by `(mpirun -n \d+ )?python -m linops bench[^`]*`", region)
    assert generated or kept, f"region {key} is neither written by --write-docs nor marked as " \
                              f"not regenerated:\n{region[:500]}"
    section = {"jax-loops": "jax", "jax-native": "jax"}.get(key, key)
    assert f"```text\n{legend(section)}\n```" in region, f"region {key} lacks its legend"
    assert "|---" in region, f"region {key} holds no table"
