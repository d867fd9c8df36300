"""One measurement in a fresh interpreter, and the memory readings it reports.

Every benchmark section runs each (method, size) in its own process so that its peak RSS is
its own and nothing an earlier run left (allocator state, MKL buffers, JIT caches) reaches
it. :func:`in_child` is that runner; :func:`rss_now` and :func:`peak_rss` are what the child
reads; :func:`positive` is the argparse type of the sections' size and count options.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

MARK = "@@"   # the child's result line on stdout starts with this
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def rss_now() -> int:
    """Resident set size of this process, in bytes (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """Peak resident set size of this process so far, in bytes (getrusage's ru_maxrss)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (/proc/self/clear_refs); False
    where the kernel does not allow it (the peaks then include what came before)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def hwm() -> int:
    """Peak RSS (VmHWM) of this process since the last :func:`reset_peak`, in bytes (Linux);
    :func:`peak_rss` is the peak since the process started, which no reset moves."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def in_child(module: str, call: str, row: dict, timeout: float, *,
             threads: int | None = None, keep: int = 160, path: str | None = None,
             python: str | None = None, env: dict | None = None) -> dict:
    """``linops._app.<module>.<call>`` evaluated in a fresh interpreter (warnings silenced
    there); its JSON-able result, or ``row`` with ``skipped`` saying what went wrong.

    ``call`` is Python source such as ``"run_one('lu', 400)"``; the child prints its result
    as one JSON line starting with ``@@``. A child past ``timeout`` seconds is killed
    ("timed out after … s"); one that fails leaves the last line of its stderr (``keep``
    characters of it) in ``skipped`` and whole under ``error``. ``threads`` sets the
    BLAS/OpenMP thread variables of the child (None: the environment's); ``path`` a folder
    put first on its module path (PYTHONPATH); ``python`` the interpreter to run it with
    (None: this one; e.g. a virtual environment that has a peer package this one lacks —
    linops must be importable there too), ``env`` more environment variables. Cost: one
    interpreter start with the imports (about a second) on top of the measurement.

    >>> in_child("child", "peak_rss() > 0", {"row": "x"}, 60)
    True
    """
    code = ("import json, warnings; warnings.simplefilter('ignore');"
            f"from linops._app import {module} as m;"
            f"print({MARK!r} + json.dumps(m.{call}))")
    environ = {**os.environ, **(env or {})}
    if threads:
        environ.update({var: str(threads) for var in THREAD_VARS})
    if path:
        environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (path, environ.get("PYTHONPATH")) if p)
    try:
        p = subprocess.run([python or sys.executable, "-c", code], capture_output=True,
                           text=True, timeout=timeout, env=environ)
    except subprocess.TimeoutExpired:
        return {**row, "skipped": f"timed out after {timeout:.0f} s"}
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    err = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {**row, "skipped": f"failed (rc {p.returncode}): {err[:keep]}", "error": err}


def positive(text: str) -> int:
    """argparse type: an integer ≥ 1, else an error naming what was given.

    >>> positive("3")
    3
    """
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return v
