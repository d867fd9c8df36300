"""``python -m linops bench eig``: the modes of K v = λ M v and their gradients, each
measurement in its own process.

    python -m linops bench eig [--nx 317] [--k 6] [--step 1e-3] [--repeat 1]

A clamped plate (``lo.testing.membrane_families(nx)``, Q4, n = (nx−1)² free dofs, random
stiffness θ and density ρ per cell). Rows and the targets they print:

- ``linops``: ``sv.eigsh(K, k, sigma=0, M=M)`` (one factorization of K − 0·M, the engine its
  default picks), then the k mode gradients for K AND M — per mode ``ad.eigsh_pullback`` with
  λ̄ = eᵢ, ``fam_K.pullback`` and ``fam_M.pullback`` — target: all of them ≤ 10 % of the
  eigensolve's time;
- ``linops, alg=Pardiso``: the same eigensolve on PARDISO (what ``sv.Auto`` alone picks from
  n = 20 000), for the engine's share of the time;
- ``scipy``: ``scipy.sparse.linalg.eigsh(K, k, M, sigma=0)`` (SuperLU), the reference for
  time and values (target: values to 1e-10);
- ``central differences``: the gradients along one random direction (signs mixed) over every
  cell, for θ and for ρ, against 4-point central differences of the eigenvalues (each a new
  eigensolve; truncation error O(h⁴), so the reference is good to ~1e-10 at h = 1e-3 where the
  2-point one is not) — target 1e-7.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse.linalg as sla

import adjoints as ad
import linops as lo
import solvers as sv

from . import docs
from .child import in_child, positive
from .legends import legend
from .report import closing_lines, markdown_table, publish

METHODS = ("linops", "linops, alg=Pardiso", "scipy")


def plate(nx: int):
    """(fam_K, fam_M, θ, ρ): the clamped plate's families and the same random stiffness and
    density per cell (uniform in [0.5, 1.5), seed 0) in every process."""
    fK, fM = lo.testing.membrane_families(nx)
    rng = np.random.default_rng(0)
    return fK, fM, rng.uniform(0.5, 1.5, fK.n_params), rng.uniform(0.5, 1.5, fM.n_params)


def _timed(fn):
    """(result, wall seconds, CPU seconds) of one call of ``fn``."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def _mode_gradients(e, fK, fM):
    """[(∂λᵢ/∂θ, ∂λᵢ/∂ρ) for every mode i]: one pullback per mode, contracted per family."""
    k = e.values.size
    out = []
    for i in range(k):
        g = ad.eigsh_pullback(e, values_bar=np.eye(k)[i])
        out.append((fK.pullback(g.K), fM.pullback(g.M)))
    return out


def _alg(method: str):
    """None (eigsh's default) or PARDISO as Auto picks it for a Hermitian positive definite
    matrix (mtype 2)."""
    return sv.Pardiso(posdef=True) if method.endswith("Pardiso") else None


def measure(method: str, nx: int, k: int) -> dict:
    """One eigensolve by ``method`` (one of :data:`METHODS`) in this process; for ``linops``
    also the k mode gradients for K and M. Wall and CPU seconds after a warm-up on a tiny
    plate (imports, MKL's loading); the 1-minute load when done.

    Parameters
    ----------
    method : str
        ``'linops'`` (eigsh's default engine), ``'linops, alg=Pardiso'`` or ``'scipy'``.
    nx : int
        Plate grid side: n = (nx − 1)² free dofs.
    k : int
        Modes.

    Returns
    -------
    dict
        ``method``, ``n``, ``nnz``, ``k``, ``time_s``, ``cpu_s``, ``kind`` (the engine),
        ``factorizations``, ``solves`` (linops), ``values`` (ascending), ``load``; for
        ``'linops'`` also ``grad_s``, ``grad_cpu_s`` (the k mode gradients) and
        ``factorizations_after`` (after the gradients: still 1).
    """
    if method != "scipy":        # imports, MKL's loading (PARDISO), numba: not measured
        fK, fM, th, rho = plate(6)
        sv.eigsh(fK(th), 2, sigma=0.0, M=fM(rho), alg=_alg(method))
    fK, fM, th, rho = plate(nx)
    K, M = fK(th), fM(rho)
    row = {"method": method, "n": K.shape[0], "nnz": K.pattern.nnz, "k": k}
    if method == "scipy":
        Ks, Ms = K.to_scipy().tocsc(), M.to_scipy().tocsc()
        (w, _), wall, cpu = _timed(lambda: sla.eigsh(Ks, k, Ms, sigma=0.0))
        row.update(time_s=wall, cpu_s=cpu, kind="SuperLU (scipy)", factorizations=1,
                   values=np.sort(w).tolist())
    else:
        alg = _alg(method)
        e, wall, cpu = _timed(lambda: sv.eigsh(K, k, sigma=0.0, M=M, alg=alg))
        st = e.cache.stats
        row.update(time_s=wall, cpu_s=cpu, kind=e.cache.kind, factorizations=st.factorizations,
                   solves=st.solves, values=e.values.tolist())
        if alg is None:
            _, gw, gc = _timed(lambda: _mode_gradients(e, fK, fM))
            row.update(grad_s=gw, grad_cpu_s=gc, factorizations_after=st.factorizations)
    row["load"] = os.getloadavg()[0]
    return row


def _stencil(lam, p, d, h):
    """(2-point, 4-point) central differences of ``lam`` at p along d, step h."""
    f1, fm1 = lam(p + h * d), lam(p - h * d)
    f2, fm2 = lam(p + 2 * h * d), lam(p - 2 * h * d)
    return (f1 - fm1) / (2 * h), (8 * (f1 - fm1) - (f2 - fm2)) / (12 * h)


def measure_fd(nx: int, k: int, step: float) -> dict:
    """The k mode gradients along one random direction (uniform in [−1, 1) times the
    parameter, every cell) for θ and for ρ against central differences with step h.

    The direction mixes signs, so the directional derivative is ~√(cells) smaller than its
    terms and a 2-point difference at a step small enough for its truncation error is
    dominated by the eigensolver's rounding; the 4-point stencil lets the step be 1e-3
    (truncation O(h⁴)). Eight eigensolves (two families × four points).

    Returns
    -------
    dict
        ``row`` = ``'fd'``, ``n``, ``k``, ``step``, ``theta_err4`` / ``rho_err4`` (max relative
        error of the gradients against the 4-point differences), ``theta_err2`` /
        ``rho_err2`` (against the 2-point differences at the same step), ``load``.
    """
    fK, fM, th, rho = plate(nx)
    K, M = fK(th), fM(rho)
    e = sv.eigsh(K, k, sigma=0.0, M=M)
    G = _mode_gradients(e, fK, fM)
    row = {"row": "fd", "n": K.shape[0], "k": k, "step": step}
    for name, j, p in (("theta", 0, th), ("rho", 1, rho)):
        d = np.random.default_rng(10 + j).uniform(-1, 1, p.size) * p
        got = np.array([G[i][j] @ d for i in range(k)])

        def lam(q, name=name):
            KK, MM = (fK(q), M) if name == "theta" else (K, fM(q))
            return sv.eigsh(KK, k, sigma=0.0, M=MM).values

        c2, c4 = _stencil(lam, p, d, step)
        row[f"{name}_err4"] = float(np.abs(got - c4).max() / np.abs(c4).max())
        row[f"{name}_err2"] = float(np.abs(got - c2).max() / np.abs(c2).max())
    row["load"] = os.getloadavg()[0]
    return row


def _child(call: str, timeout: float) -> dict:
    """``m.<call>`` in a fresh interpreter (its memory and its caches its own); a failure or a
    timeout comes back as a row with ``skipped``."""
    return in_child("eig", call, {"row": call}, timeout)


def format_rows(rows: list[dict]) -> str:
    """The eigensolve table, the gradient table (their columns are in ``legends.EIG``) and
    what did not run.

    The eigensolve table has one line per method, its best wall time over the repeats (and
    the best CPU time beside it), each against scipy's; the gradient table one line for the
    linops row, with the values' agreement with scipy and the central differences' verdict;
    then the differences' own numbers (both stencils) and the load average at the end.
    """
    by = {}
    for r in rows:
        if "time_s" in r:
            by.setdefault(r["method"], []).append(r)
    best = {m: min(rs, key=lambda r: r["time_s"]) for m, rs in by.items()}
    ref = best.get("scipy")
    cells = []
    for m in METHODS:
        if m not in best:
            continue
        r = best[m]
        cells.append({"n": f"{r['n']:,}", "method": f"{m} ({r['kind']})",
                      "time s": f"{r['time_s']:.2f}", "cpu s": f"{r['cpu_s']:.2f}",
                      "vs scipy": f"{r['time_s'] / ref['time_s']:.2f}" if ref else "—",
                      "cpu vs scipy": f"{r['cpu_s'] / ref['cpu_s']:.2f}" if ref else "—",
                      "fact.": r["factorizations"], "solves": r.get("solves", "—"),
                      "load": f"{r['load']:.1f}"})
    out = []
    if cells:
        k = next(iter(best.values()))["k"]
        out.append(f"eigsh(K, {k}, M, sigma=0): the {k} lowest modes of the clamped plate "
                   f"(best of {max(len(v) for v in by.values())})\n"
                   + markdown_table(cells, list(cells[0])))
    ours = best.get("linops")
    fd = next((r for r in rows if r.get("row") == "fd" and "skipped" not in r), None)
    if ours is not None and "grad_s" in ours:
        vals = "—"
        if ref is not None:
            w, wr = np.asarray(ours["values"]), np.asarray(ref["values"])
            vals = f"{np.abs(w - wr).max() / np.abs(wr).max():.1e}"
        g = {"n": f"{ours['n']:,}", "modes": ours["k"], "eigsh s": f"{ours['time_s']:.2f}",
             "gradients s": f"{ours['grad_s']:.3f}",
             "grad/eigsh": f"{ours['grad_s'] / ours['time_s']:.3f}",
             "cpu grad/eigsh": f"{ours['grad_cpu_s'] / ours['cpu_s']:.3f}",
             "fact.": ours["factorizations_after"], "values vs scipy": vals,
             "θ-grad vs FD": f"{fd['theta_err4']:.1e}" if fd else "—",
             "ρ-grad vs FD": f"{fd['rho_err4']:.1e}" if fd else "—",
             "load": f"{ours['load']:.1f}"}
        out.append(f"the {ours['k']} mode gradients for K and M (targets: grad/eigsh ≤ 0.10, "
                   f"values vs scipy ≤ 1e-10, gradients vs FD ≤ 1e-7)\n"
                   + markdown_table([g], list(g)))
    if fd is not None:
        out.append(f"central differences (step h = {fd['step']:g} along one random direction "
                   f"per family, every cell): 4-point θ {fd['theta_err4']:.1e}, ρ "
                   f"{fd['rho_err4']:.1e}; the 2-point stencil at the same h: θ "
                   f"{fd['theta_err2']:.1e}, ρ {fd['rho_err2']:.1e} (its own truncation error; "
                   f"load {fd['load']:.1f})")
    out += closing_lines(rows)
    return "\n\n".join(out)


def main(argv=None) -> list[dict]:
    """``python -m linops bench eig``: the tables with their legend, printed and written to
    ``--out``; returns the rows.

    Notes
    -----
    Cost at the defaults (n = 99 856): three eigensolves per repeat (about 20 s each on two
    loaded cores) and nine for the differences (one more for the gradients), each row in a
    fresh process: some five minutes.
    """
    ap = argparse.ArgumentParser(prog="python -m linops bench eig",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description=__doc__.split("\n\n")[0].replace("``", ""),
                                 epilog=legend("eig"))
    ap.add_argument("--nx", type=positive, default=317,
                    help="plate grid side (n = (nx−1)² free dofs); 317: n = 99 856")
    ap.add_argument("--k", type=positive, default=6, help="modes; 6")
    ap.add_argument("--step", type=float, default=1e-3,
                    help="relative step of the central differences; 1e-3")
    ap.add_argument("--repeat", type=positive, default=1,
                    help="interleaved repeats of the eigensolve rows (best kept); 1")
    ap.add_argument("--no-fd", action="store_true", help="skip the central differences")
    ap.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                    help="seconds per measurement (default 1800)")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                    help="folder for eig.md and eig.json (default bench-out/)")
    docs.add_option(ap)
    args = ap.parse_args(argv)
    docs.check(ap, args.write_docs, "eig")
    if not args.step > 0:
        ap.error(f"--step must be positive, got {args.step}")
    rows = []
    for rep in range(args.repeat):
        for m in METHODS:
            print(f"[{time.strftime('%H:%M:%S')}] {m} nx={args.nx} ({rep + 1}/{args.repeat})",
                  file=sys.stderr)
            rows.append(_child(f"measure({m!r}, {args.nx}, {args.k})", args.timeout))
    if not args.no_fd:
        print(f"[{time.strftime('%H:%M:%S')}] central differences nx={args.nx}",
              file=sys.stderr)
        rows.append(_child(f"measure_fd({args.nx}, {args.k}, {args.step!r})", args.timeout))
    publish(args.out, "eig", format_rows(rows), rows, argv, args.write_docs)
    return rows


if __name__ == "__main__":
    main()
