"""The tutorial notebooks: stored executed with their figures, and still executing today.

For every notebook in notebooks/:

* ``test_stored_notebook`` reads the .ipynb on disk: it must have been executed top to bottom by
  ``python notebooks/execute.py`` for exactly its current code (execution counts 1..k, the code
  digest in its metadata), show its figures (image/png outputs), contain no error and print its
  ``CHECK ...: passed`` lines — each notebook asserts its own results against an independent
  reference, so a failed check would have stopped the run.
* ``test_notebook_executes`` runs a copy in a fresh kernel (nbclient): no error, under 60 s, and
  the same checks and number of figures as the stored file (stored outputs still current).
  The kernel sees ``LINOPS_NOTEBOOK_SIZE=small``: a notebook stored at a size that takes
  minutes (05, the 3-D cantilever at 3·10⁵ dofs) runs the same cells and checks on a small
  mesh here; the others ignore it.

``test_stored_check_rejects`` shows that the stored-file check fails on a notebook with cleared
outputs, edited code, an error, a failed check or no figure.
"""

from __future__ import annotations

import collections
import copy
import importlib.util
import pathlib
import re
import time

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NB_DIR = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
_spec = importlib.util.spec_from_file_location("notebooks_execute", NB_DIR / "execute.py")
execute = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute)

NOTEBOOKS = execute.notebooks()
TIME_LIMIT_S = 60


def outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def n_images(nb) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs(nb))


def checks(nb) -> collections.Counter:
    return collections.Counter(execute.CHECK_LINE.findall(execute.stream_text(nb)))


def problems_with_source(nb) -> list[str]:
    """What is wrong with the notebook's cells themselves (before any execution)."""
    out = []
    first = nb.cells[0] if nb.cells else None
    if first is None or first.cell_type != "markdown" or "What this demonstrates" not in first.source:
        out.append("first cell is not the 'What this demonstrates' markdown cell")
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    for private in ("linops._", "solvers._", "adjoints._", "adjoints.jax._"):
        if any(private in s for s in code):
            out.append(f"uses a private module ({private}...): public API only")
    if any("matplotlib.use(" in s for s in code):
        out.append("selects a matplotlib backend: figures must show inline")
    if not any(re.search(r"^%matplotlib inline\s*$", s, re.M) for s in code):
        out.append("no '%matplotlib inline' line")
    if sum(c.cell_type == "markdown" for c in nb.cells) < 3:
        out.append("fewer than 3 prose (markdown) cells")
    return out


def problems_with_stored(nb) -> list[str]:
    """What shows that a stored notebook is not a complete, current execution of its code."""
    out = problems_with_source(nb)
    counts = [c.get("execution_count") for c in nb.cells if c.cell_type == "code"]
    if counts != list(range(1, len(counts) + 1)):
        out.append(f"execution counts {counts} are not 1..{len(counts)} (not run top to bottom)")
    stored = nb.metadata.get("linops", {}).get("code_sha256")
    if stored != execute.code_sha256(nb):
        out.append("code changed since the outputs were stored: run python notebooks/execute.py")
    errors = [o for o in outputs(nb) if o.get("output_type") == "error"]
    if errors:
        out.append(f"stored outputs contain {len(errors)} error(s): {errors[0].get('ename')}")
    if n_images(nb) == 0:
        out.append("no figure (image/png output) stored")
    text = execute.stream_text(nb)
    if not checks(nb):
        out.append("no 'CHECK ...: passed' line stored")
    if "FAILED" in text:
        out.append("a check FAILED in the stored outputs")
    return out


def test_the_notebooks_are_numbered_without_gaps():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, len(NOTEBOOKS) + 1)]


def test_every_notebook_is_described_in_the_docs():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "notebooks.md").read_text()
    missing = [p.name for p in NOTEBOOKS if f"notebooks/{p.name}" not in page]
    assert missing == [], f"docs/notebooks.md does not describe {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_notebook(path):
    nb = nbformat.read(path, as_version=4)
    assert problems_with_stored(nb) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, monkeypatch, xla_defaults):
    monkeypatch.setenv("LINOPS_NOTEBOOK_SIZE", "small")   # inherited by the kernel
    if path.stem.startswith("06"):
        pytest.importorskip("skfem", reason="notebook 06 glues scikit-fem: pip install scikit-fem")
    stored = nbformat.read(path, as_version=4)
    nb = copy.deepcopy(stored)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    assert problems_with_source(nb) == []
    t = time.perf_counter()
    execute.execute(nb, timeout=TIME_LIMIT_S * 2)          # raises CellExecutionError on an error
    seconds = time.perf_counter() - t
    assert seconds < TIME_LIMIT_S, f"{path.name} took {seconds:.0f} s"
    assert not [o for o in outputs(nb) if o.get("output_type") == "error"]
    fresh = checks(nb)
    assert fresh, "a fresh run printed no check line"
    assert fresh == checks(stored), ("the stored outputs show other checks than a fresh run: "
                                     "run python notebooks/execute.py")
    assert n_images(nb) == n_images(stored) > 0


def test_stored_check_rejects():
    good = nbformat.read(NOTEBOOKS[-1], as_version=4)
    assert problems_with_stored(good) == []

    def variant(edit):
        nb = copy.deepcopy(good)
        edit(nb)
        return problems_with_stored(nb)

    code = [c for c in good.cells if c.cell_type == "code"]
    last = len(good.cells) - 1 - [c.cell_type for c in good.cells][::-1].index("code")

    def cleared(nb):
        for c in nb.cells:
            if c.cell_type == "code":
                c.outputs, c.execution_count = [], None

    def edited(nb):
        nb.cells[last].source += "\nprint('new line')"

    def errored(nb):
        nb.cells[last].outputs.append(nbformat.v4.new_output(
            "error", ename="AssertionError", evalue="", traceback=[]))

    def failed(nb):
        for c in nb.cells:
            for o in c.get("outputs", []):
                if o.get("output_type") == "stream":
                    o["text"] = o["text"].replace(": passed", ": FAILED")

    def no_figure(nb):
        for c in nb.cells:
            if c.cell_type == "code":
                c.outputs = [o for o in c.outputs if "image/png" not in o.get("data", {})]

    def private(nb):
        nb.cells[last].source = "import linops._operators.sparse\n" + nb.cells[last].source

    def agg(nb):
        nb.cells[last].source = "import matplotlib\nmatplotlib.use('Agg')\n" + nb.cells[last].source

    def commented_magic(nb):
        for c in nb.cells:
            if c.cell_type == "code":
                c.source = c.source.replace("%matplotlib inline", "# %matplotlib inline")

    def reordered(nb):
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        code_cells[0].execution_count, code_cells[1].execution_count = 2, 1

    for edit in (cleared, edited, errored, failed, no_figure, private, agg, commented_magic, reordered):
        assert variant(edit), f"{edit.__name__}: not detected"
    assert len(code) > 2
