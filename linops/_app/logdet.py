"""``python -m linops bench logdet``: log-determinants, selected inversion and eigenvalue
gradients, each measurement in its own process.

    python -m linops bench logdet [--nx 500] [--nx-workaround 200] [--lattice 316]
                                  [--engines cholmod superlu] [--fraction 0.05]

Rows and the targets they print:

- ``value+grad``: at n = nx·(nx+1) (default 250 500, the 2-D Q4 family
  ``lo.testing.poisson_family``), ``cache.logdet()`` and the θ-gradient
  ``fam.pullback(ad.logdet_pullback(cache))`` (selected inversion) against one factorization
  ``sv.init`` of the same engine: time ratios (value + gradient alone, and with its own
  factorization) — target ≤ 5× — and peak RSS during them (the factor included) over the RSS the
  factor holds — target ≤ 3×;
- ``vs n solves``: at n = 40 200 the same gradient against the workaround
  ``fam.pullback(cache.as_operator().H)`` (one solve per column, 32 MB blocks), timed on the
  columns of a ``--fraction`` of the unknowns and scaled linearly to all n (its cost is one
  block solve per column); the entries it produced are compared with the selected inverse's —
  target ≥ 100×;
- ``eigsh``: the lowest eigenvalue of a disordered 2-D tight-binding family H(ε) = hopping +
  diag(ε) at n = lattice² (default 99 856) by ``sv.eigsh(H, 1, sigma=...)``, its gradient
  ∂λ/∂εᵢ = |vᵢ|² through ``fam.pullback(ad.eigsh_pullback(...))`` (one factorization),
  checked against central differences at three sites (each a new eigsh).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv

from . import docs
from .child import hwm, in_child, reset_peak, rss_now
from .legends import legend
from .names import Names
from .report import closing_lines, markdown_table, publish

ENGINES = ("cholmod", "superlu", "pardiso", "auto", "auto-asks")
#: the rows of sv.Auto: the plain user code (the gradient's query chooses the engine), and the
#: problem that declares what it will be asked (``asks=``)
ASKS = {"auto": (), "auto-asks": ("logdet", "selected_inverse")}


def _alg(engine: str):
    """The algorithm object of ``engine`` (one of :data:`ENGINES`).

    >>> [_alg(e).name for e in ENGINES]            # the names sv.solve gives them
    ['cholesky', 'lu', 'pardiso', 'auto', 'auto']
    """
    return {"cholmod": sv.Cholesky(), "superlu": sv.LU(), "pardiso": sv.Pardiso(posdef=True),
            "auto": sv.Auto(), "auto-asks": sv.Auto()}[engine]


def engine_names() -> dict[str, tuple[str, ...]]:
    """Each engine and the name sv.solve gives its algorithm, which ``--engines`` takes too
    (``auto-asks`` has only its own)."""
    return {e: (_alg(e).name,) if e != "auto-asks" else () for e in ENGINES}


def _theta(fam):
    """θ uniform in [0.5, 2.0) per cell, the same in every process (seed 0)."""
    return np.random.default_rng(0).uniform(0.5, 2.0, fam.n_params)


def _warm(engine: str) -> None:
    """Imports and numba's compiled kernels, on a tiny problem (not measured): the first
    selected inversion compiles its kernels, seconds that belong to no measurement."""
    fam, _ = lo.testing.poisson_family(6)
    # Auto's rows meet PARDISO (loading MKL) and CHOLMOD: both are warmed
    algs = [sv.Pardiso(posdef=True), sv.Cholesky()] if engine in ASKS else [_alg(engine)]
    for alg in algs:
        try:
            c = sv.init(sv.LinearProblem(fam(_theta(fam)), posdef=True), alg)
        except sv.BackendNotSupported:      # not installed here: nothing to warm
            continue
        c.logdet()
        if alg.name != "pardiso":
            fam.pullback(ad.logdet_pullback(c))


def measure_value_grad(engine: str, nx: int) -> dict:
    """One factorization, then log det + θ-gradient on it (run in a fresh process).

    Times the factorization (``sv.init``), ``cache.logdet()`` and the θ-gradient
    ``fam.pullback(ad.logdet_pullback(cache))`` by selected inversion on the same factors, and
    the peak RSS of each over the RSS before the factorization; returns the ``value+grad``
    row (the columns of the legend's timing table).
    """
    _warm(engine)
    fam, _ = lo.testing.poisson_family(nx)
    K = fam(_theta(fam))
    base = rss_now()
    reset_peak()
    t = time.perf_counter()
    cache = sv.init(sv.LinearProblem(K, posdef=True, asks=ASKS.get(engine, ())), _alg(engine))
    t_fact = time.perf_counter() - t
    kind_at_init = cache.kind
    fact_peak = hwm() - base
    held = rss_now() - base
    reset_peak()
    t = time.perf_counter()
    sign, logabsdet = cache.logdet()
    t_val = time.perf_counter() - t
    grad = fam.pullback(ad.logdet_pullback(cache))
    t_vg = time.perf_counter() - t
    vg_peak = hwm() - base
    s = cache.stats
    engine_label = cache.kind if kind_at_init == cache.kind else f"{kind_at_init} → {cache.kind}"
    if engine in ASKS:
        engine_label = f"Auto{' (asks)' if ASKS[engine] else ''}: {engine_label}"
    return {"row": "value+grad", "engine": engine_label, "n": K.shape[0], "nnz": K.pattern.nnz,
            "fact_s": t_fact, "value_s": t_val, "value_grad_s": t_vg,
            "ratio_vg": t_vg / t_fact, "ratio_total": (t_fact + t_vg) / t_fact,
            "factor_mb": held / 2**20, "fact_peak_mb": fact_peak / 2**20,
            "vg_peak_mb": vg_peak / 2**20, "mem_ratio": vg_peak / max(held, 1),
            "factorizations": s.factorizations, "solves": s.solves + s.adjoint_solves,
            "logabsdet": logabsdet, "sign": float(np.real(sign)), "grad_norm": float(np.linalg.norm(grad))}


def measure_workaround(nx: int, fraction: float) -> dict:
    """Selected inversion against the n-solve workaround on a fraction of the columns.

    The workaround samples ``cache.as_operator().H`` (A⁻ᴴ by unit-vector solves, in 32 MB
    blocks) on the pattern's entries in the first ``fraction`` of the columns, timed and scaled
    linearly to all n; its entries are compared with the selected inverse's. Returns the
    ``vs n solves`` row (speedup, block solves, max relative difference).
    """
    _warm("cholmod")
    fam, _ = lo.testing.poisson_family(nx)
    K = fam(_theta(fam))
    n = K.shape[0]
    cache = sv.init(sv.LinearProblem(K, posdef=True), sv.Cholesky())
    t = time.perf_counter()
    cache.logdet()
    grad = fam.pullback(ad.logdet_pullback(cache))
    t_ours = time.perf_counter() - t
    P = K.pattern
    ncols = max(1, int(round(fraction * n)))
    sel = P.indices < ncols            # the positions in the first ncols columns
    rows, cols = P.rows[sel], P.indices[sel]
    work = cache.as_operator().H
    s0 = cache.stats.adjoint_solves
    t = time.perf_counter()
    part = lo.sample(work, rows, cols)  # the workaround's own kernel: unit-vector solves
    t_part = time.perf_counter() - t
    t_full = t_part * n / ncols
    ours = lo.sample(ad.logdet_pullback(cache), rows, cols)
    err = float(np.abs(part - ours).max() / np.abs(part).max())
    return {"row": "vs n solves", "engine": cache.kind, "n": n, "ours_s": t_ours,
            "workaround_cols": ncols, "workaround_part_s": t_part, "workaround_s": t_full,
            "speedup": t_full / t_ours, "block_solves": cache.stats.adjoint_solves - s0,
            "max_rel_diff": err, "grad_norm": float(np.linalg.norm(grad))}


def tight_binding_family(L: int, seed: int = 0):
    """H(ε) = hopping (−1 between neighbours of an L×L square lattice) + diag(ε): one parameter
    per site (``AffineSparse.from_elements`` with 1×1 elements); ε uniform in [−1, 1]."""
    n = L * L
    idx = np.arange(n).reshape(L, L)
    i = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    j = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    T = sp.csr_array((-np.ones(i.size), (i, j)), shape=(n, n))
    fam = lo.AffineSparse.from_elements(np.ones((n, 1, 1)), np.arange(n)[:, None], n,
                                        offset=(T + T.T).tocsr())
    return fam, np.random.default_rng(seed).uniform(-1, 1, n)


def measure_eigsh(L: int) -> dict:
    """The lowest eigenvalue of :func:`tight_binding_family` by ``sv.eigsh`` (shift-invert on one
    factorization), ∂λ/∂ε by ``ad.eigsh_pullback`` + ``fam.pullback``, and central differences
    at three sites (each a new eigsh) as the check; returns the ``eigsh`` row."""
    fam, eps = tight_binding_family(L)
    sigma = float(eps.min()) - 4.5     # below the Gershgorin bound: A − σI positive definite
    H = fam(eps)
    t = time.perf_counter()
    e = sv.eigsh(H, 1, sigma=sigma)
    t_eig = time.perf_counter() - t
    t = time.perf_counter()
    grad = fam.pullback(ad.eigsh_pullback(e, values_bar=np.ones(1)))
    t_grad = time.perf_counter() - t
    facts = e.cache.stats.factorizations
    h = 1e-4
    worst = 0.0
    sites = [int(np.argmax(grad)), 0, fam.n_params // 2]
    for i in sites:
        d = np.zeros_like(eps)
        d[i] = h
        lp = sv.eigsh(fam(eps + d), 1, sigma=sigma).values[0]
        lm = sv.eigsh(fam(eps - d), 1, sigma=sigma).values[0]
        fd = (lp - lm) / (2 * h)
        worst = max(worst, abs(grad[i] - fd) / max(abs(grad).max(), 1e-300))
    return {"row": "eigsh", "engine": e.cache.kind, "n": H.shape[0], "eigsh_s": t_eig,
            "grad_s": t_grad, "factorizations": facts, "lambda0": float(e.values[0]),
            "fd_sites": sites, "fd_max_rel_err": worst}


# ----- exactness against dense numpy -------------------------------------------------------------
def _exact_family(kind: str, dtype):
    """SPD ('spd'), Hermitian positive definite ('hpd') or general families on a 6×6 Q4 mesh.

    'spd' is the Q4 family itself; 'hpd' adds 0.1i·(S − Sᵀ) for a random S on its pattern (a
    Hermitian imaginary part); 'general' adds S − 1.5 I (and a random imaginary part for
    complex dtypes): not Hermitian, for the LU engines only. n = 42 unknowns, 36 parameters."""
    fam, _ = lo.testing.poisson_family(6)
    if kind == "spd":
        return fam
    n, P = fam.shape[0], fam.pattern
    rng = np.random.default_rng(7)
    terms = [fam(np.eye(fam.n_params)[i]).to_scipy() for i in range(fam.n_params)]
    S = sp.csr_array((rng.uniform(-1, 1, P.nnz), P.indices, P.indptr), shape=(n, n))
    if kind == "hpd":
        off = 0.1j * (S - S.T)
    else:
        off = S - 1.5 * sp.eye_array(n)
        if np.dtype(dtype).kind == "c":
            off = off + 1j * sp.csr_array((rng.uniform(-1, 1, P.nnz), P.indices, P.indptr),
                                          shape=(n, n))
    return lo.AffineSparse.from_terms(terms, offset=sp.csr_array(off))


def exactness() -> list[dict]:
    """Max errors against dense numpy: engine × dtype × matrix kind, for log|det|, the selected
    inverse on A's pattern and the θ-gradient of log|det| (relative to their largest values).
    Cost: 60-odd factorizations of n = 42 and their dense references (a few seconds, most of it
    numba compiling the selected-inversion kernels)."""
    rows = []
    for engine in ("dense LU", "dense Cholesky", "SuperLU", "CHOLMOD", "PARDISO"):
        for kind in ("spd", "hpd", "general"):
            for dtype in (np.float64, np.complex128, np.float32, np.complex64):
                if kind == "hpd" and np.dtype(dtype).kind != "c":
                    continue
                if kind == "general" and engine in ("dense Cholesky", "CHOLMOD", "PARDISO"):
                    continue
                fam = _exact_family(kind, dtype)
                theta = np.random.default_rng(3).uniform(0.5, 2.0, fam.n_params)
                K = fam(theta)
                K = lo.Sparse(np.asarray(K.values).astype(dtype), K.pattern)
                A = K.to_scipy()
                try:
                    if engine == "dense LU":
                        c = sv.init(sv.LinearProblem(A.toarray()), sv.LU())
                    elif engine == "dense Cholesky":
                        c = sv.init(sv.LinearProblem(A.toarray()), sv.Cholesky())
                    elif engine == "SuperLU":
                        c = sv.init(sv.LinearProblem(K), sv.LU())
                    elif engine == "CHOLMOD":
                        c = sv.init(sv.LinearProblem(K), sv.Cholesky())
                    else:
                        c = sv.init(sv.LinearProblem(K, posdef=True), sv.Pardiso(posdef=True))
                except sv.BackendNotSupported as e:
                    rows.append({"engine": engine, "kind": kind, "dtype": np.dtype(dtype).name,
                                 "skipped": str(e)[:60]})
                    continue
                a = A.toarray().astype(np.complex128 if np.dtype(dtype).kind == "c"
                                       else np.float64)
                Z = np.linalg.inv(a)
                _, ref = np.linalg.slogdet(a)
                r = {"engine": engine, "kind": kind, "dtype": np.dtype(dtype).name,
                     "logdet": abs(c.logdet().logabsdet - ref) / abs(ref)}
                if engine != "PARDISO":
                    P = K.pattern
                    S = sv.selected_inverse(c)
                    r["selinv"] = float(np.abs(S.sample(P.indices, P.rows) - Z[P.indices, P.rows])
                                        .max() / np.abs(Z).max())
                    g = fam.pullback(ad.logdet_pullback(c))
                    M = fam.M.to_scipy()
                    gref = np.array([np.real(np.sum(Z.T[P.rows, P.indices] * M[:, [i]].toarray()[:, 0]))
                                     for i in range(fam.n_params)])
                    r["gradient"] = float(np.abs(g - gref).max() / np.abs(gref).max())
                rows.append(r)
    return rows


def format_exactness(rows) -> str:
    """The exactness table (Markdown; its columns are in ``legends.LOGDET``) with its title."""
    cells = [{"engine": r["engine"], "matrix": r["kind"], "dtype": r["dtype"],
              "log-det rel. err": f"{r['logdet']:.1e}" if "logdet" in r else r.get("skipped", ""),
              "A⁻¹ on pattern": f"{r['selinv']:.1e}" if "selinv" in r else "—",
              "θ-gradient": f"{r['gradient']:.1e}" if "gradient" in r else "—"} for r in rows]
    return ("exactness against dense numpy (n = 42, 6×6 Q4 mesh; errors relative to max|A⁻¹| / "
            "max|gradient|)\n" + markdown_table(cells, list(cells[0])))


def _child(call: str, timeout: float) -> dict:
    """``m.<call>`` evaluated in a fresh interpreter (its peak RSS its own); a failure or a
    timeout becomes a row with ``skipped``.

    ``call`` is Python source, such as ``"measure_eigsh(316)"``; the child prints the result
    as one JSON line prefixed with ``@@``, the last line of its stderr is kept on failure."""
    return in_child("logdet", call, {"row": call}, timeout, keep=120)


def format_rows(rows: list[dict]) -> str:
    """The timing table and one sentence per other row (the workaround, eigsh, what did not
    run), and the load average at the end."""
    out = []
    vg = [r for r in rows if r.get("row") == "value+grad"]
    if vg:
        cells = [{"n": f"{r['n']:,}", "engine": r["engine"], "factorize s": f"{r['fact_s']:.2f}",
                  "logdet s": f"{r['value_s']:.3f}", "value+grad s": f"{r['value_grad_s']:.2f}",
                  "(v+g)/fact": f"{r['ratio_vg']:.2f}", "(fact+v+g)/fact": f"{r['ratio_total']:.2f}",
                  "factor MB": f"{r['factor_mb']:.0f}", "v+g peak MB": f"{r['vg_peak_mb']:.0f}",
                  "peak/factor": f"{r['mem_ratio']:.2f}",
                  "fact./solves": f"{r['factorizations']}/{r['solves']}"}
                 for r in vg if "skipped" not in r]
        cols = list(cells[0]) if cells else []
        out.append("log det + θ-gradient against one factorization (targets: (fact+v+g)/fact ≤ 5, "
                   "peak/factor ≤ 3)\n" + (markdown_table(cells, cols) if cells else ""))
    wa = [r for r in rows if r.get("row") == "vs n solves" and "skipped" not in r]
    for r in wa:
        out.append(f"θ-gradient of log det at n = {r['n']:,} ({r['engine']}): selected inversion "
                   f"{r['ours_s']:.2f} s; the n-solve workaround fam.pullback(cache.as_operator()"
                   f".H) {r['workaround_part_s']:.1f} s on {r['workaround_cols']:,} columns "
                   f"({r['block_solves']} block solves), {r['workaround_s']:.0f} s scaled to all "
                   f"{r['n']:,}: speedup {r['speedup']:.0f}× (target ≥ 100×); entries agree to "
                   f"{r['max_rel_diff']:.1e}")
    for r in [r for r in rows if r.get("row") == "eigsh" and "skipped" not in r]:
        out.append(f"lowest eigenvalue of a 2-D tight-binding family at n = {r['n']:,} "
                   f"({r['engine']}): eigsh {r['eigsh_s']:.2f} s, ∂λ/∂ε (n values) "
                   f"{r['grad_s'] * 1e3:.1f} ms, {r['factorizations']} factorization; central "
                   f"differences at sites {r['fd_sites']}: max relative error "
                   f"{r['fd_max_rel_err']:.1e}")
    out += closing_lines(rows)
    return "\n\n".join(out)


def main(argv=None) -> list[dict]:
    """``python -m linops bench logdet``: the tables with their legend, printed and written to
    ``--out``; returns the rows.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``bench logdet`` (default: the process's own).

    Returns
    -------
    list of dict
        The ``value+grad`` rows (one per engine), the ``vs n solves`` row, the ``eigsh`` row
        and the exactness cells (under ``{"row": "exactness"}``), each measured in a fresh
        process (:func:`_child`).

    Notes
    -----
    Cost: the defaults (n = 250 500, 40 200 and a 316² lattice) take minutes; even the
    smallest sizes took about a minute here (two loaded cores), most of it numba compiling the
    selected-inversion kernels in every child.
    """
    ap = argparse.ArgumentParser(prog="python -m linops bench logdet",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description=__doc__.split("\n\n")[0].replace("``", ""),
                                 epilog=legend("logdet"))
    ap.add_argument("--nx", type=int, default=500, help="Q4 grid side (n = nx·(nx+1)); 500")
    ap.add_argument("--nx-workaround", type=int, default=200, help="grid side of the n-solve "
                    "comparison; 200 (n = 40 200)")
    ap.add_argument("--fraction", type=float, default=0.05,
                    help="share of the columns the workaround is timed on; 0.05")
    ap.add_argument("--lattice", type=int, default=316, help="tight-binding lattice side; 316")
    ap.add_argument("--engines", nargs="+", action=Names, names=engine_names(), what="engine",
                    default=["cholmod", "superlu"], metavar="NAME",
                    help="factorizations of the value+grad rows, any case, comma or space "
                         "separated: cholmod (cholesky), superlu (lu), pardiso (log det only: "
                         "no row), auto (sv.Auto() and the plain code: the gradient's query "
                         "factorizes once more where Auto's engine has no selected inverse), "
                         "auto-asks (sv.Auto() on a problem that declares asks=); default "
                         "cholmod superlu")
    ap.add_argument("--timeout", type=float, default=900.0, metavar="S",
                    help="seconds per measurement (default 900)")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                    help="folder for logdet.md and logdet.json (default bench-out/)")
    docs.add_option(ap)
    args = ap.parse_args(argv)
    docs.check(ap, args.write_docs, "logdet")
    rows = []
    for eng in args.engines:
        if eng == "pardiso":
            continue  # PARDISO gives log det, not a selected inverse: see solvers._factors.selinv
        print(f"[{time.strftime('%H:%M:%S')}] value+grad {eng} nx={args.nx}", file=sys.stderr)
        rows.append(_child(f"measure_value_grad({eng!r}, {args.nx})", args.timeout))
    print(f"[{time.strftime('%H:%M:%S')}] workaround nx={args.nx_workaround}", file=sys.stderr)
    rows.append(_child(f"measure_workaround({args.nx_workaround}, {args.fraction})", args.timeout))
    print(f"[{time.strftime('%H:%M:%S')}] eigsh lattice={args.lattice}", file=sys.stderr)
    rows.append(_child(f"measure_eigsh({args.lattice})", args.timeout))
    print(f"[{time.strftime('%H:%M:%S')}] exactness", file=sys.stderr)
    exact = _child("exactness()", args.timeout)
    text = format_rows(rows)
    if isinstance(exact, list):
        text = format_exactness(exact) + "\n\n" + text
        rows = rows + [{"row": "exactness", "cells": exact}]
    publish(args.out, "logdet", text, rows, argv, args.write_docs)
    return rows


if __name__ == "__main__":
    main()
