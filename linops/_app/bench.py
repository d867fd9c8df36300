"""``python -m linops bench``: value + gradient of aᵀK(θ)⁻¹b through every method, side by side
in one run, each measurement in its own process; writes a table, JSON and a plot.

``python -m linops bench SECTION ...`` runs one of the longer sections instead (:data:`SECTIONS`:
loop, scale, jax, torch, petsc, logdet, eig, lstsq), each with its own ``--help``;
``--write-docs`` (every section has it) also writes the table into its region of
``docs/benchmarks.md`` (:mod:`.docs`). Method names are typed as ``sv.solve(prob, name)`` takes
them, in any case, comma or space separated (:mod:`.names`); every table is followed by its
column legend (:mod:`.legends`), in ``--help`` too.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import sys
import textwrap
import time
from pathlib import Path

import solvers as sv

from . import docs, report
from .legends import JAX_BASE, legend
from .methods import DEFAULT, METHODS, PROBLEMS, installed
from .names import Names, pick, slug
from .runner import progress, run_in_child

DEFAULT_SIZES = (100, 400)  # n = 10 100 and 160 400
MAX_NX = 3200               # n ≈ 10⁷
SECTIONS = {"loop": "optimisation loops: steps × value + θ-gradient through cache.update, "
                    "against hand-written loops of the same solvers",
            "scale": "CG + AMG value + θ-gradient at n = 10⁶ … 10⁷ against a hand-written script",
            "jax": "the jax path against jax spsolve and the numpy path",
            "torch": "adjoints.torch against the numpy path and torch-sla, vmap over value "
                     "sets, jacrev, a GNN layer's backward",
            "petsc": "distributed CG + GAMG under MPI against a hand-written petsc4py script "
                     "(mpirun -n 2 python -m linops bench petsc)",
            "logdet": "log det + θ-gradient by selected inversion against n solves; the eigsh "
                      "gradient",
            "eig": "K v = λ M v: eigsh with M and the mode gradients for K and M against "
                   "scipy's eigsh and central differences",
            "lstsq": "sparse least squares: QR value + ∂A against the QR solve; the normal "
                     "equations at cond 1e10; LinearSolve.jl's square ∂A rule"}


def _nx(text: str) -> int:
    """argparse type of a grid side: an integer in [2, MAX_NX] (n = nx·(nx+1) unknowns).

    >>> _nx("400")
    400
    >>> _nx("1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: grid side nx must be in [2, 3200] (n = nx·(nx+1) unknowns), got 1
    """
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"grid side must be an integer, got {text!r}") from None
    if not 2 <= v <= MAX_NX:
        raise argparse.ArgumentTypeError(f"grid side nx must be in [2, {MAX_NX}] (n = nx·(nx+1) "
                                         f"unknowns), got {v}")
    return v


def method_listing() -> str:
    """The ``methods:`` block of ``--help``: every name with its label and summary, ``*`` on
    the ones run by default. Generated from :data:`.methods.METHODS` (so from the registry).

    >>> print(method_listing().splitlines()[0])
    methods (--methods NAME ..., any case, comma or space separated; * = run by default):
    """
    lines = ["methods (--methods NAME ..., any case, comma or space separated; * = run by "
             "default):"]
    for m in METHODS.values():
        mark = "*" if m.slug in DEFAULT else " "
        lines += textwrap.wrap(f"{m.label}: {m.summary}", width=100,
                               initial_indent=f"  {m.slug + mark:<16}",
                               subsequent_indent=" " * 18)
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m linops bench``.

    Its ``--help`` lists every method by name (:func:`method_listing`, generated from the
    registry), the sections, and the column legend; ``--methods`` takes names as ``sv.solve``
    does (:class:`.names.Names`) and refuses an unknown one before anything runs.

    >>> parser().parse_args(["--methods", "LU,Cholesky", "--sizes", "3"]).methods
    ['lu', 'cholesky']
    """
    sections = "\n".join(textwrap.fill(v, width=100, initial_indent=f"  {k:<7} ",
                                       subsequent_indent=" " * 10) for k, v in SECTIONS.items())
    ap = argparse.ArgumentParser(
        prog="python -m linops bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Value + gradient of f(θ) = aᵀK(θ)⁻¹b w.r.t. θ (one per cell of a 2-D Q4 "
                    "heat-conduction mesh) and w.r.t. K's stored values, by each method, side by "
                    "side in one run, each measurement in its own process.",
        epilog=f"{method_listing()}\n\nsections (python -m linops bench SECTION --help):\n"
               f"{sections}\n\n{legend('main')}")
    ap.add_argument("--sizes", type=_nx, nargs="+", metavar="NX",
                    help=f"grid sides (n = nx·(nx+1)); default {' '.join(map(str, DEFAULT_SIZES))}")
    ap.add_argument("--quick", action="store_true", help="sizes 30 60: a few seconds")
    ap.add_argument("--methods", nargs="+", action=Names, names=list(METHODS), metavar="NAME",
                    default=list(DEFAULT),
                    help="methods to run, by name (listed below; default: those marked *)")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                    help="folder for bench.md, bench.json and bench.png (default bench-out/)")
    ap.add_argument("--no-plot", action="store_true", help="do not draw bench.png")
    ap.add_argument("--timeout", type=float, default=120.0, metavar="S",
                    help="seconds per measurement (default 120)")
    ap.add_argument("--problems", nargs="+", choices=PROBLEMS, default=["spd"],
                    help="spd: the heat-conduction family (default); nonsymmetric: its "
                         "convection-diffusion twin on the same pattern (no posdef hint)")
    docs.add_option(ap)
    return ap


def _prepare_out(ap, out: Path) -> None:
    """Fail before measuring when the results cannot be written: create ``out`` and write and
    remove a probe file there; an OSError becomes the parser's usage error (exit 2) naming the
    folder and the reason, so a two-minute run never ends in a traceback."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        ap.error(f"cannot write results to {out}/: {e.strerror or e}")


def _section_methods(module) -> list[str]:
    """The method names a section module declares: every module-level list or tuple of strings
    whose name ends in ``METHODS`` (``linops._app.jax.METHODS``, ...), in order, each once.

    Read from the module rather than listed here, so that a method the section adds is a
    name ``--methods`` accepts without an edit to this file.
    """
    names: list[str] = []
    for attr, value in vars(module).items():
        if attr.endswith("METHODS") and isinstance(value, (list, tuple)) \
                and all(isinstance(v, str) for v in value):
            names += [v for v in value if v not in names]
    return names


def jax_argv(module, argv: list[str]) -> list[str]:
    """``bench jax``'s arguments with its ``--methods`` names made canonical.

    The jax section's own parser (``linops/_app/jax.py``) takes its labels exactly
    (``"adj jit value_and_grad"``, with spaces). Here they are accepted as every other section's
    are: any case, comma or space separated, as typeable slugs (``adj-jit-value-and-grad``),
    and an unknown name is refused with the list. Everything else passes through unchanged.

    >>> import types
    >>> jx = types.SimpleNamespace(METHODS=["numpy path", "fam jit"])
    >>> jax_argv(jx, ["--sizes", "4", "--methods", "FAM-JIT,numpy-path"])
    ['--sizes', '4', '--methods', 'fam jit', 'numpy path']
    """
    names = {label: (slug(label),) for label in _section_methods(module)}
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--methods" or arg.startswith("--methods="):
            values = [arg.partition("=")[2]] if "=" in arg else []
            i += 1
            while "=" not in arg and i < len(argv) and not argv[i].startswith("-"):
                values.append(argv[i])
                i += 1
            try:
                out += ["--methods", *pick(values, names)]
            except ValueError as e:
                listing = ", ".join(slug(n) for n in names)
                argparse.ArgumentParser(prog="python -m linops bench jax").error(
                    f"--methods: {str(e).split(';')[0]}; names: {listing} (any case; several: "
                    f"comma or space separated)")
            continue
        out.append(arg)
        i += 1
    return out


def _jax_help(module) -> str:
    """What ``bench jax --help`` adds below the jax parser's own help: the typeable names and
    the column legend."""
    names = ", ".join(slug(n) for n in _section_methods(module))
    return (f"\nmethod names (--methods NAME ..., any case, comma or space separated): "
            f"{names}\n\n{legend('jax')}\n{JAX_BASE}")


def run_section(name: str, argv: list[str]):
    """Run section ``name`` (a key of :data:`SECTIONS`) with its arguments; returns its rows.

    The jax section's ``--methods`` goes through :func:`jax_argv` first, and its ``--help`` is
    followed by :func:`_jax_help` (its parser lives in ``linops/_app/jax.py``, which this layer
    does not own; the other sections' parsers carry their names and legends themselves).
    """
    module = importlib.import_module(f"linops._app.{name}")
    if name != "jax":
        return module.main(argv)
    try:
        return module.main(jax_argv(module, argv))
    except SystemExit as e:
        if e.code in (0, None) and any(a in ("-h", "--help") for a in argv):
            print(_jax_help(module))
        raise


def auto_summary(rows: list[dict]) -> str:
    """One line per size where both ran: ``sv.Auto``'s time over the fastest hand-written
    adjoint's (the methods marked ``hand``), with both engines named; '' when there is none.

    >>> rows = [{"method": "auto", "label": "linops Auto (CHOLMOD)", "n": 20, "time_s": 0.9},
    ...         {"method": "scipy", "label": "scipy, adjoint written by hand", "n": 20,
    ...          "time_s": 1.0}]
    >>> print(auto_summary(rows))
    <BLANKLINE>
    n = 20: linops Auto (CHOLMOD) 0.900 s = 0.90× the best hand-written adjoint (scipy, adjoint written by hand, 1.000 s)
    """
    lines = []
    for n in sorted({r["n"] for r in rows}):
        at = [r for r in rows if r["n"] == n and "time_s" in r]
        auto = [r for r in at if r["method"] == "auto"]
        hand = [r for r in at if METHODS[r["method"]].hand]
        if auto and hand:
            best = min(hand, key=lambda r: r["time_s"])
            ratio = auto[0]["time_s"] / best["time_s"]
            lines.append(f"n = {n:,}: {auto[0]['label']} {auto[0]['time_s']:.3f} s = "
                         f"{ratio:.2f}× the best hand-written adjoint ({best['label']}, "
                         f"{best['time_s']:.3f} s)")
    return ("\n\n" + "\n".join(lines)) if lines else ""


def auto_profile_line(profile: sv.Profile | None = None) -> str:
    """Which machine profile the ``auto`` rows' ``sv.Auto()`` read (``profile``: default the
    user's file, as the children read it): its path, date and classes, or that there is none
    and Auto chose by its fixed rules.

    >>> auto_profile_line(sv.Profile(path="p.json")).startswith("sv.Auto's machine profile: none")
    True
    """
    p = sv.Profile.load() if profile is None else profile
    if not p.entries:
        return (f"sv.Auto's machine profile: none ({p.path}): Auto chose by its fixed rules; "
                f"`python -m linops tune` measures this machine's engines once and writes it")
    classes = sorted({f"{e.get('class')} n = {e.get('n'):,}" for e in p.entries})
    return (f"sv.Auto's machine profile: {p.path}, measured {p.meta.get('date', '?')} "
            f"({', '.join(classes)})")


def bench(argv=None) -> list[dict]:
    """Run the benchmark; returns the result rows (also written to ``--out``).

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``bench`` (default: the process's own). When the first one names a
        section (:data:`SECTIONS`), that section runs instead, with the rest.

    Returns
    -------
    list of dict
        One row per (method, size): the method's slug and label, n, and either the measured
        ``time_s``, ``forward_s``, ``ratio``, ``peak_mb``, ``factorizations``,
        ``payload_bytes`` or ``skipped`` (why it did not run: "not installed", "needs 206 GB").

    Notes
    -----
    Cost: one fresh interpreter per (method, size), each building the problem, a warm-up on a
    tiny one and two timed runs (the cold one and one more); the default run takes
    about two minutes on two cores. Writes ``bench.md``, ``bench.json`` and (with matplotlib)
    ``bench.png`` under ``--out``.
    """
    argv = list(sys.argv[2:] if argv is None else argv)
    if argv and argv[0] in SECTIONS:
        return run_section(argv[0], argv[1:])
    ap = parser()
    args = ap.parse_args(argv)
    if args.timeout <= 0:
        ap.error(f"--timeout must be positive, got {args.timeout}")
    sizes = args.sizes or ([30, 60] if args.quick else list(DEFAULT_SIZES))
    _prepare_out(ap, args.out)
    docs.check(ap, args.write_docs, "main")
    plot = not args.no_plot and installed("matplotlib")
    jobs = [(m, nx, kind) for kind in args.problems for nx in sizes for m in args.methods]
    results, t0 = [], time.time()
    for i, (name, nx, kind) in enumerate(jobs):
        progress(i, len(jobs), f"{name}, nx={nx}, {kind}")
        why = METHODS[name].unavailable()
        if why is not None:
            r = {"method": name, "label": METHODS[name].label, "n": nx * (nx + 1),
                 "problem": kind, "skipped": "not installed", "why": why}
        else:
            r = run_in_child(name, nx, args.timeout, kind)
        r["load_average"] = round(os.getloadavg()[0], 2)
        results.append(r)
    elapsed = time.time() - t0
    progress(len(jobs), len(jobs), f"done in {elapsed:.0f} s")
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(["python -m linops bench", *argv]),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "seconds": round(elapsed, 1)}
    title = ("value + gradient of f(θ) = aᵀK(θ)⁻¹b w.r.t. θ (one per cell) and K's stored "
             "values")
    parts = []
    for kind in args.problems:
        rows = [r for r in results if r.get("problem", "spd") == kind]
        head = f"{kind} problem:\n" if len(args.problems) > 1 else ""
        parts.append(head + report.table(rows) + auto_summary(rows))
    if any(r["method"] == "auto" and "time_s" in r for r in results):
        parts.append(auto_profile_line())
    body = "\n\n".join(parts)
    print(f"{title}\n{body}\n{legend('main')}")
    md = (f"# python -m linops bench\n\n{title}.\n\nMeasured {meta['date']} on {meta['machine']} "
          f"(load average {meta['load_average']}) in {meta['seconds']} s with "
          f"`{meta['command']}`.\n\n{body}\n\n```\n{legend('main')}\n```\n")
    (args.out / "bench.md").write_text(md)
    report.write_json(results, args.out / "bench.json", meta)
    written = ["bench.md", "bench.json"]
    if plot:
        report.plot(results, args.out / "bench.png", meta)
        written.append("bench.png")
    note = "" if plot or args.no_plot else " (no plot: pip install \"linops[bench]\" for matplotlib)"
    print(f"results written to {args.out}/: {', '.join(written)}{note}")
    if args.write_docs is not None:
        docs.write(args.write_docs, "main", f"{body}\n\n{legend('main')}", meta["command"],
                   meta["seconds"])
    return results
