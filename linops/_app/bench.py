"""``python -m linops bench``: value + gradient of aᵀK(θ)⁻¹b through every method, side by side
in one run, each measurement in its own process; writes a table, JSON and a plot."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

from . import report
from .info import version
from .methods import DEFAULT, METHODS
from .runner import progress, run_in_child

DEFAULT_SIZES = (100, 400)  # n = 10 100 and 160 400
MAX_NX = 3200               # n ≈ 10⁷


def _nx(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"grid side must be an integer, got {text!r}") from None
    if not 2 <= v <= MAX_NX:
        raise argparse.ArgumentTypeError(f"grid side nx must be in [2, {MAX_NX}] (n = nx·(nx+1) "
                                         f"unknowns), got {v}")
    return v


def parser() -> argparse.ArgumentParser:
    methods = "\n".join(f"  {m.slug:<15} {m.label}" for m in METHODS.values())
    ap = argparse.ArgumentParser(
        prog="python -m linops bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="value + gradient of f(θ) = aᵀK(θ)⁻¹b w.r.t. θ (one per cell of a 2-D Q4 "
                    "heat-conduction mesh) and w.r.t. K's stored values, by each method, side by "
                    "side in one run",
        epilog=f"methods:\n{methods}\n\nsections (python -m linops bench SECTION --help):\n"
               + "\n".join(f"  {k:<7} {v}" for k, v in SECTIONS.items()) + f"\n\n{report.LEGEND}")
    ap.add_argument("--sizes", type=_nx, nargs="+", metavar="NX",
                    help=f"grid sides (n = nx·(nx+1)); default {' '.join(map(str, DEFAULT_SIZES))}")
    ap.add_argument("--quick", action="store_true", help="sizes 30 60: a few seconds")
    ap.add_argument("--methods", nargs="+", choices=list(METHODS), metavar="SLUG",
                    default=list(DEFAULT), help="methods to run (default: all but cg-amg)")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                    help="folder for bench.md, bench.json and bench.png (default bench-out/)")
    ap.add_argument("--no-plot", action="store_true", help="do not draw bench.png")
    ap.add_argument("--timeout", type=float, default=120.0, metavar="S",
                    help="seconds per measurement (default 120)")
    return ap


def _prepare_out(ap, out: Path) -> None:
    """Fail before measuring when the results cannot be written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        ap.error(f"cannot write results to {out}/: {e.strerror or e}")


SECTIONS = {"loop": "optimisation loops: 10 × value + θ-gradient with cache.update (issue 12)",
            "scale": "CG + AMG value + θ-gradient at n = 10⁶ … 10⁷ against a hand-written script",
            "jax": "the jax path against jax spsolve and the numpy path",
            "petsc": "distributed CG+GAMG / MUMPS under mpirun (mpirun -n 2 python -m linops "
                     "bench petsc)",
            "logdet": "log det + θ-gradient by selected inversion, vs n solves; eigsh gradient"}


def bench(argv=None) -> list[dict]:
    """Run the benchmark; returns the result rows (also written to ``--out``).

    ``python -m linops bench`` is the headline table; ``python -m linops bench SECTION ...``
    runs one of the longer sections (``SECTIONS``), each with its own ``--help``."""
    argv = list(sys.argv[2:] if argv is None else argv)
    if argv and argv[0] in SECTIONS:
        import importlib

        return importlib.import_module(f"linops._app.{argv[0]}").main(argv[1:])
    ap = parser()
    args = ap.parse_args(argv)
    if args.timeout <= 0:
        ap.error(f"--timeout must be positive, got {args.timeout}")
    sizes = args.sizes or ([30, 60] if args.quick else list(DEFAULT_SIZES))
    _prepare_out(ap, args.out)
    plot = not args.no_plot and version("matplotlib") is not None
    jobs = [(m, nx) for nx in sizes for m in args.methods]
    results, t0 = [], time.time()
    for i, (slug, nx) in enumerate(jobs):
        progress(i, len(jobs), f"{slug}, nx={nx}")
        missing = [d for d in METHODS[slug].needs if version(d) is None]
        if missing:
            r = {"method": slug, "label": METHODS[slug].label, "n": nx * (nx + 1),
                 "skipped": "not installed"}
        else:
            r = run_in_child(slug, nx, args.timeout)
        results.append(r)
    elapsed = time.time() - t0
    progress(len(jobs), len(jobs), f"done in {elapsed:.0f} s")
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": "python -m linops bench " + " ".join(sys.argv[2:] if argv is None
                                                             else argv),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "seconds": round(elapsed, 1)}
    title = ("value + gradient of f(θ) = aᵀK(θ)⁻¹b w.r.t. θ (one per cell) and K's stored "
             "values")
    body = report.table(results)
    print(f"{title}\n{body}\n{report.LEGEND}")
    md = (f"# python -m linops bench\n\n{title}.\n\nMeasured {meta['date']} on {meta['machine']} "
          f"(load average {meta['load_average']}) in {meta['seconds']} s with "
          f"`{meta['command'].strip()}`.\n\n{body}\n\n```\n{report.LEGEND}\n```\n")
    (args.out / "bench.md").write_text(md)
    report.write_json(results, args.out / "bench.json", meta)
    written = ["bench.md", "bench.json"]
    if plot:
        report.plot(results, args.out / "bench.png")
        written.append("bench.png")
    note = "" if plot or args.no_plot else " (no plot: pip install \"linops[bench]\" for matplotlib)"
    print(f"results written to {args.out}/: {', '.join(written)}{note}")
    return results
