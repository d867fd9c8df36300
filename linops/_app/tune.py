"""``python -m linops tune``: measure ``sv.Auto``'s candidate engines on this machine and write
the per-machine profile that ``Auto`` reads (the user's cache directory).

    python -m linops tune [--sizes 100 200 400] [--repeat 2] [--out PATH] [--show]

Problems: the 2-D Q4 heat-conduction family (``lo.testing.poisson_family``: symmetric positive
definite) and its convection–diffusion twin (``lo.testing.convection_diffusion_family``:
nonsymmetric values on the same pattern), at n = nx·(nx+1) for each ``--sizes`` nx, in float64.
For each, every candidate engine installed here (CHOLMOD, PARDISO, SuperLU) factorizes the
matrix and solves once forward and once adjoint, ``--repeat`` times (the fastest kept), timed
in this process, with this process's threads (the environment's BLAS/MKL settings): the
conditions your programs meet. ``Auto`` then starts a problem of the same class and a similar
size (n within 2×, stored entries per row within 1.5×) with the winner — by full setup for an
``init``, by numeric factorization for a loop of updates — instead of its fixed order, and
``cache.info`` says so. A pattern measured in a process (a cache's first update) overrides the
profile for that pattern. ``--show`` prints the profile in force and exits.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

import linops as lo
import solvers as sv
from solvers.internals import Measurement, user_profile_path

from .child import positive
from .report import markdown_table

LEGEND = """columns:
  problem    the measured family: 2-D Q4 heat conduction (symmetric positive definite) or
             convection-diffusion (nonsymmetric values, the same pattern)
  n          unknowns, nx·(nx+1)
  engine     the candidate (SuperLU: symmetric mode for the structurally symmetric pattern)
  setup s    its full setup: ordering/analysis, numeric factorization and its checks
  numeric s  the numeric factorization alone (CHOLMOD cholesky, PARDISO phase 22; SuperLU: all)
  solves s   one forward and one adjoint solve
  one-shot   the winner by setup + solves: what Auto picks at init for this class and size
  loop       the winner by numeric + solves: what a loop of updates costs per step
  failed     why an engine could not take the matrix"""
DEFAULT_SIZES = (100, 200, 400)   # n = 10 100, 40 200, 160 400
PROBLEMS = {"spd": ("2-D Q4 heat conduction", lo.testing.poisson_family),
            "nonsymmetric": ("2-D Q4 convection-diffusion", lo.testing.convection_diffusion_family)}


def problem(kind: str, nx: int):
    """(description, LinearProblem) of ``kind`` (a key of :data:`PROBLEMS`) at grid side nx:
    θ uniform in [0.5, 1.5) per cell (seed 0), the family's load as b.

    >>> what, prob = problem("spd", 4)
    >>> what, prob.A.shape
    ('2-D Q4 heat conduction', (20, 20))
    """
    what, make = PROBLEMS[kind]
    fam, b = make(nx)
    theta = 0.5 + np.random.default_rng(0).random(fam.n_params)
    return what, sv.LinearProblem(fam(theta), b, posdef=True if kind == "spd" else None)


def measure(sizes, repeat: int, log=sys.stderr) -> tuple[sv.Profile, list[dict]]:
    """A new profile with one class entry per (problem, size), and the table's rows."""
    header = sv.Profile.header(
        linops=_version(), threads={v: os.environ.get(v) for v in
                                    ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
        load_average=[round(x, 2) for x in os.getloadavg()])
    profile = sv.Profile(meta=header)
    rows = []
    for kind in PROBLEMS:
        for nx in sizes:
            what, prob = problem(kind, nx)
            n, nnz = prob.A.shape[0], prob.A.pattern.nnz
            log.write(f"{what}, n = {n:,} ...\n")
            m = sv.Auto().measure(prob, repeat=repeat)
            sym = kind == "spd"
            profile.add({"class": "hermitian" if sym else "general", "dtype": "float64"}, m,
                        problem=what, n=n, nnz=nnz)
            init, update = m.winner("init"), m.winner("update")
            for t in m.timings:
                rows.append({"problem": what, "n": f"{n:,}", "engine": t.engine,
                             "setup s": "" if t.failed else f"{t.setup_s:.3f}",
                             "numeric s": "" if t.failed else f"{t.numeric_s:.3f}",
                             "solves s": "" if t.failed else f"{t.solve_s:.4f}",
                             "one-shot": "winner" if t.engine == init else "",
                             "loop": "winner" if t.engine == update else "",
                             "failed": t.failed or ""})
    return profile, rows


def _version() -> str:
    import importlib.metadata  # only the profile's header needs it

    try:
        return importlib.metadata.version("linops")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def show(path: Path) -> str:
    """The profile in force at ``path``, as a table (or why there is none)."""
    prof = sv.Profile.load(path)
    if not prof.entries:
        return (f"no profile for this machine at {path} (run `python -m linops tune`); "
                f"sv.Auto uses its rules and measures at a cache's first update")
    rows = []
    for e in prof.entries:
        m = Measurement.from_dict(e["measurement"])
        rows.append({"problem": e["problem"], "n": f"{e['n']:,}", "class": e["class"],
                     "one-shot": m.winner("init") or "", "loop": m.winner("update") or ""})
    head = f"profile {path} (measured {prof.meta.get('date', '?')}):"
    return head + "\n" + markdown_table(rows, ["problem", "n", "class", "one-shot", "loop"])


def main(argv=None) -> int:
    """``python -m linops tune``; returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="python -m linops tune", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0], epilog=LEGEND)
    ap.add_argument("--sizes", type=positive, nargs="+", default=list(DEFAULT_SIZES),
                    metavar="NX", help="grid sides nx (n = nx·(nx+1)); default 100 200 400")
    ap.add_argument("--repeat", type=positive, default=2,
                    help="trials per engine and problem, the fastest kept (default 2)")
    ap.add_argument("--out", type=Path, default=None, metavar="PATH",
                    help=f"the profile file (default {user_profile_path()})")
    ap.add_argument("--show", action="store_true", help="print the profile in force and exit")
    args = ap.parse_args(argv)
    path = args.out or user_profile_path()
    if args.show:
        print(show(path))
        return 0
    profile, rows = measure(args.sizes, args.repeat)
    written = profile.save(path)
    cols = ["problem", "n", "engine", "setup s", "numeric s", "solves s", "one-shot", "loop",
            "failed"]
    print(f"measured on {platform.machine()}, {os.cpu_count()} cores, load average "
          f"{profile.meta['load_average']}:\n{markdown_table(rows, cols)}\n\n{LEGEND}\n"
          f"profile written to {written}")
    return 0
