"""Execute the tutorial notebooks in place, so that they are stored with their outputs and figures.

    python notebooks/execute.py                 # every notebook in notebooks/
    python notebooks/execute.py notebooks/02_quantum_green_function.ipynb   # only these

Each notebook runs top to bottom in a fresh ``python3`` kernel (nbclient), with notebooks/ as
its working directory. On the first error the script prints the failing cell's traceback, leaves
that notebook's file untouched and exits with status 1. A notebook that ran is written back with
its outputs (figures as image/png) and a digest of its code cells in its metadata
(``metadata.linops.code_sha256``), which ``tests/app/test_notebooks.py`` compares against the code
to tell stored outputs that no longer belong to the code.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import re
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent

#: the line each notebook prints after an assertion of its own has passed
CHECK_LINE = re.compile(r"^CHECK (.+): passed$", re.M)


def notebooks() -> list[pathlib.Path]:
    return sorted(HERE.glob("[0-9][0-9]_*.ipynb"))


def code_sha256(nb) -> str:
    """Digest of the code cells' sources, in order (outputs and prose excluded)."""
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    return hashlib.sha256(json.dumps(code).encode()).hexdigest()


def execute(nb, timeout: int = 600):
    """Run ``nb`` (an nbformat notebook, modified in place) in a fresh kernel; return seconds.

    Raises ``nbclient.exceptions.CellExecutionError`` on the first failing cell.
    """
    import os

    import nbclient

    # the kernel imports linops from this checkout (not from an installed copy of another one)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parent)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     record_timing=False,
                                     resources={"metadata": {"path": str(HERE)}})
    t = time.perf_counter()
    client.execute()
    return time.perf_counter() - t


def stream_text(nb) -> str:
    """All text a notebook printed (stdout/stderr streams and text/plain results)."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o.get("text", ""))
            elif "data" in o and "text/plain" in o["data"]:
                out.append(o["data"]["text/plain"])
    return "".join(out)


def main(argv: list[str]) -> int:
    import nbclient
    import nbformat

    paths = [pathlib.Path(a).resolve() for a in argv] or notebooks()
    if not paths:
        print(f"no notebooks found in {HERE}", file=sys.stderr)
        return 1
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        print(f"executing {path.name} ...", flush=True)
        try:
            seconds = execute(nb)
        except nbclient.exceptions.CellExecutionError as err:
            print(f"\nFAILED: {path.name} (file left unchanged)\n{err}", file=sys.stderr)
            return 1
        nb.metadata["linops"] = {"code_sha256": code_sha256(nb)}
        nbformat.write(nb, path)
        checks = CHECK_LINE.findall(stream_text(nb))
        images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
        print(f"  ok in {seconds:.1f} s: {len(checks)} checks passed, {images} figures")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
