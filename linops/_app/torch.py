"""adjoints.torch against the numpy path and torch-sla, its batches and a GNN layer.

    python -m linops bench torch                # the sizes of the targets (minutes)
    python -m linops bench torch --quick        # small sizes (a minute)
    (also: python benchmarks/torch_bench.py ...)

Rows (each (method, size) in a fresh subprocess, one BLAS/OpenMP/numba thread):

* ``numpy path``: value + θ-gradient of f(θ) = aᵀK(θ)⁻¹b for the heat-conduction family
  ``lo.testing.poisson_family(nx)`` (n = nx(nx+1)): sv.solve (Auto, posdef → CHOLMOD) +
  ad.solve_pullback + fam.pullback.
* ``torch autograd``: the same f written the PyTorch way, ``a @ at.solve(fam(θ), b,
  posdef=True)`` and ``.backward()`` (target ≤ 1.10× the numpy path, 1 factorization).
* ``torch-sla``: the same f through ``torch_sla.spsolve(values, row, col, shape, b,
  backend="scipy", method="lu")`` (0.4.0, in its OWN virtual environment, which this section
  creates on first use with ``pip install torch-sla==0.4.0``; never in this environment). Its
  factorizations are counted by wrapping scipy's ``spsolve``/``splu``: it refactorizes Aᴴ for
  the backward. (``at lu``: adjoints.torch with the same SuperLU, for a like-for-like ratio.)
* ``vmap32`` / ``32 separate``: ``torch.func.vmap`` of ``at.solve`` over 32 value sets of one
  pattern against 32 separate ``at.solve`` calls (target ≤ 0.8×, 1 symbolic analysis).
* ``jacrev``: ``torch.func.jacrev`` of u = A⁻¹b with respect to b (1 factorization, one
  multi-column solve).
* ``gnn forward`` / ``gnn backward``: the layer X ↦ A(w) X W with learnable edge weights w on
  a random graph (``--edges``, 10⁶ by default; 32 features in and out): the forward, and the
  backward for w, X and W — w's gradient an SDDMM (target backward ≤ 2× forward).

Time: the best of three warm calls (one when a call takes over 30 s), wall and CPU; the
ratios are of CPU time (one thread: steadier than wall time on a shared machine); memory: the
peak RSS increase of a warm call over the RSS before it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import docs
from .child import hwm, in_child, positive, reset_peak, rss_now
from .legends import legend
from .report import markdown_table as table
from .report import publish

SOLVE_METHODS = ["numpy path", "torch autograd", "at lu", "torch-sla"]
BATCH_METHODS = ["vmap32", "32 separate", "jacrev"]
GNN_METHODS = ["gnn forward", "gnn backward"]
METHODS = SOLVE_METHODS + BATCH_METHODS + GNN_METHODS
PEER = "torch-sla==0.4.0"
DEFAULT_VENV = Path.home() / ".cache" / "linops-bench" / "torch-sla-0.4.0"
FEATURES = 32


# ----- problems (child process) ------------------------------------------------------------------
def _problem(nx: int):
    """(fam, b, θ, a): the Q4 family at nx, a load b, θ in [0.5, 1.5) per cell and a random a
    (seeded: every child builds the same problem)."""
    import numpy as np  # child only: torch/numba stay out of --help

    import linops as lo  # child only: torch/numba stay out of --help

    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    return fam, b, 0.5 + rng.random(fam.n_params), rng.standard_normal(fam.shape[0])


def _numpy_path(nx):
    """The reference: sv.solve + one adjoint solve + fam.pullback of the lazy −λuᵀ."""
    import solvers as sv  # child only: torch/numba stay out of --help
    import adjoints as ad  # child only: torch/numba stay out of --help

    fam, b, theta, a = _problem(nx)

    def run():
        """One value + θ-gradient: factorize (CHOLMOD through Auto), one adjoint solve, the
        family's pullback of the lazy rank-one cotangent."""
        sol = sv.solve(sv.LinearProblem(fam(theta), b, posdef=True))
        g = ad.solve_pullback(sol, a)
        return {"value": float(a @ sol.u), "grad0": float(fam.pullback(g.A)[0]),
                "factorizations": sol.stats.factorizations}
    return run


def _torch_autograd(alg):
    """``a @ at.solve(fam(θ), b)`` and ``backward()``: one factorization, one adjoint solve."""
    def build(nx):
        """The row's ``run`` at grid side ``nx`` (imports torch in the child only)."""
        import torch  # child only: torch/numba stay out of --help

        import adjoints.torch as at  # child only: torch/numba stay out of --help

        fam, b, theta, a = _problem(nx)
        bt, at_, th0 = (torch.as_tensor(x) for x in (b, a, theta))
        kw = {"posdef": True} if alg is None else {}

        def run():
            """A fresh leaf θ, the forward through fam(θ) and at.solve, backward(); the
            factorization count of that one call."""
            th = th0.clone().requires_grad_()
            at.reset_stats()
            y = at_ @ at.solve(fam(th), bt, alg, **kw)
            y.backward()
            s = at.stats()
            return {"value": float(y), "grad0": float(th.grad[0]),
                    "factorizations": s.factorizations}
        return run
    return build


def _torch_sla(nx):
    """torch-sla's spsolve (scipy SuperLU) in its own environment; factorizations counted by
    wrapping scipy's solvers. K(θ)'s values come from the family's map M (θ̄ = Mᵀ v̄): the peer
    has no families."""
    import numpy as np  # child only: torch/numba stay out of --help
    import scipy.sparse.linalg as spl  # child only: torch/numba stay out of --help
    import torch  # child only: torch/numba stay out of --help
    import torch_sla  # the peer's own environment only

    class FamilyMap(torch.autograd.Function):
        """values = M θ (scipy), θ̄ = Mᵀ v̄: the family's map written for the peer."""

        @staticmethod
        def forward(ctx, th, M):
            ctx.M = M
            return torch.as_tensor(M @ th.detach().numpy())

        @staticmethod
        def backward(ctx, g):
            return torch.as_tensor(ctx.M.T @ g.numpy()), None

    fam, b, theta, a = _problem(nx)
    P = fam.pattern
    count = [0]
    for name in ("spsolve", "splu", "factorized"):
        original = getattr(spl, name)

        def counted(*args, _f=original, **kw):
            count[0] += 1
            return _f(*args, **kw)
        setattr(spl, name, counted)
    row = torch.as_tensor(np.array(P.rows, np.int64))
    col = torch.as_tensor(np.array(P.indices, np.int64))
    bt, at_, th0 = (torch.as_tensor(x) for x in (b, a, theta))
    M = fam.M.to_scipy().tocsr()

    def run():
        """A fresh θ, torch-sla's spsolve and backward; scipy's factorizations counted."""
        count[0] = 0
        th = th0.clone().requires_grad_()
        u = torch_sla.spsolve(FamilyMap.apply(th, M), row, col, P.shape, bt, backend="scipy",
                              method="lu")
        y = at_ @ u
        y.backward()
        return {"value": float(y), "grad0": float(th.grad[0]), "factorizations": count[0]}
    return run


def _thetas(fam, k=32):
    import numpy as np  # child only: torch/numba stay out of --help

    return 0.5 + np.random.default_rng(0).random((k, fam.n_params))


def _vmap32(nx):
    """One torch.func.vmap of at.solve over 32 value sets (one symbolic analysis)."""
    import torch  # child only: torch/numba stay out of --help

    import linops as lo  # child only: torch/numba stay out of --help
    import adjoints.torch as at  # child only: torch/numba stay out of --help

    fam, b, _, _ = _problem(nx)
    V = torch.stack([torch.as_tensor(fam(th).values) for th in _thetas(fam)])
    bt = torch.as_tensor(b)
    P = fam.pattern
    f = torch.func.vmap(lambda v: at.solve(lo.Sparse(v, P), bt))

    def run():
        """One vmapped call over the 32 value sets; its factorizations and analyses."""
        at.reset_stats()
        f(V)
        s = at.stats()
        return {"factorizations": s.factorizations, "symbolic_analyses": s.symbolic_analyses}
    return run


def _separate32(nx):
    """32 separate at.solve calls of the same value sets (32 symbolic analyses)."""
    import torch  # child only: torch/numba stay out of --help

    import linops as lo  # child only: torch/numba stay out of --help
    import adjoints.torch as at  # child only: torch/numba stay out of --help

    fam, b, _, _ = _problem(nx)
    V = [torch.as_tensor(fam(th).values) for th in _thetas(fam)]
    bt = torch.as_tensor(b)
    P = fam.pattern

    def run():
        """The 32 value sets one call each; their factorizations and analyses."""
        at.reset_stats()
        for v in V:
            at.solve(lo.Sparse(v, P), bt)
        s = at.stats()
        return {"factorizations": s.factorizations, "symbolic_analyses": s.symbolic_analyses}
    return run


def _jacrev(nx):
    """torch.func.jacrev of u = A⁻¹b in b: one factorization, one n-column transposed solve."""
    import torch  # child only: torch/numba stay out of --help

    import adjoints.torch as at  # child only: torch/numba stay out of --help

    fam, b, theta, _ = _problem(nx)
    A = fam(torch.as_tensor(theta))
    J = torch.func.jacrev(lambda b: at.solve(A, b, posdef=True))
    bt = torch.as_tensor(b)

    def run():
        """One jacrev: the n×n Jacobian A⁻¹ by one multi-column transposed solve."""
        at.reset_stats()
        J(bt)
        s = at.stats()
        return {"factorizations": s.factorizations,
                "solve_calls": s.forward_solves + s.transpose_solves}
    return run


def _graph(edges: int):
    """A random graph with ~``edges`` stored entries on edges/10 nodes, weights, features."""
    import numpy as np  # child only: torch/numba stay out of --help
    import torch  # child only: torch/numba stay out of --help

    import linops as lo  # child only: torch/numba stay out of --help

    n = max(edges // 10, 2)
    rng = np.random.default_rng(0)
    P = lo.Pattern.from_coo(rng.integers(0, n, edges), rng.integers(0, n, edges), (n, n))
    g = torch.Generator().manual_seed(0)
    w = torch.rand(P.nnz, generator=g, dtype=torch.float32)
    X = torch.randn(n, FEATURES, generator=g, dtype=torch.float32)
    W = torch.randn(FEATURES, FEATURES, generator=g, dtype=torch.float32) / FEATURES ** 0.5
    G = torch.randn(n, FEATURES, generator=g, dtype=torch.float32)
    return P, w, X, W, G


def _gnn(which: str):
    """The GNN layer's forward, or its backward (w̄ by SDDMM, X̄ and W̄), float32."""
    def build(edges):
        """The row's ``run`` on a graph of ``edges`` stored entries."""
        import linops as lo  # child only: torch/numba stay out of --help
        import adjoints.torch as at  # child only: torch/numba stay out of --help

        P, w0, X0, W0, G = _graph(edges)

        def forward():
            """Y = A(w) (X W) with fresh leaves w, X, W."""
            w, X, W = (t.clone().requires_grad_() for t in (w0, X0, W0))
            return at.matmul(lo.Sparse(w, P), X @ W), (w, X, W)

        def run():
            """The forward, or a forward and the timed backward (wall and CPU time of the
            backward alone, which run_one reports instead of the call's)."""
            if which == "forward":
                Y, _ = forward()
                return {"nnz": P.nnz}
            Y, (w, X, W) = forward()
            t, c = time.perf_counter(), time.process_time()
            Y.backward(G)
            return {"nnz": P.nnz, "backward_s": time.perf_counter() - t,
                    "backward_cpu": time.process_time() - c}
        return run
    return build


_BUILD = {"numpy path": _numpy_path, "torch autograd": _torch_autograd(None),
          "at lu": _torch_autograd("lu"), "torch-sla": _torch_sla, "vmap32": _vmap32,
          "32 separate": _separate32, "jacrev": _jacrev, "gnn forward": _gnn("forward"),
          "gnn backward": _gnn("backward")}


def run_one(method: str, size: int) -> dict:
    """One measurement in this (child) process: build ``method`` at ``size`` (nx, or edges for
    the GNN rows), call it once (the first call) and then warm three times; the row."""
    import numba  # child only: torch/numba stay out of --help
    import torch  # child only: torch/numba stay out of --help

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    run = _BUILD[method](size)
    out = {"method": method, "size": size}
    t = time.perf_counter()
    res = run()
    out["first_call_s"] = time.perf_counter() - t
    times, cpus, peak = [], [], 0.0
    for _ in range(3):
        base = rss_now()
        reset_peak()
        t, c = time.perf_counter(), time.process_time()
        res = run()
        dt, dc = time.perf_counter() - t, time.process_time() - c
        times.append(res.pop("backward_s", dt))
        cpus.append(res.pop("backward_cpu", dc))
        peak = max(peak, max(hwm() - base, 0) / 2**20)
        if dt > 30:
            break
    out.update(res)
    out["time_s"], out["cpu_s"] = min(times), min(cpus)
    out["peak_warm_mb"] = peak
    return out


# ----- the peer's environment --------------------------------------------------------------------
def peer_python(venv: Path, install: bool = True) -> tuple[str | None, str | None]:
    """(python of the peer's virtual environment, None) — created with this interpreter's
    packages visible and ``pip install torch-sla==0.4.0`` on first use — or (None, why not)."""
    import subprocess  # only when the peer's environment is created

    py = venv / "bin" / "python"
    if not py.exists():
        if not install:
            return None, f"no peer environment at {venv} (run without --no-install)"
        sys.stderr.write(f"creating the peer environment {venv} ({PEER}) ...\n")
        try:
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                           check=True, capture_output=True, text=True, timeout=300)
            subprocess.run([str(py), "-m", "pip", "install", "-q", PEER], check=True,
                           capture_output=True, text=True, timeout=900)
        except (subprocess.SubprocessError, OSError) as e:
            why = getattr(e, "stderr", "") or str(e)
            return None, f"could not install {PEER}: {why.strip().splitlines()[-1][:120]}"
    return str(py), None


# ----- driver ------------------------------------------------------------------------------------
def _rows(results: list[dict]) -> list[dict]:
    """Formatted rows with each target's ratio."""
    by = {r["method"]: r for r in results if "time_s" in r}
    refs = {"torch autograd": ("numpy path", "≤ 1.10"), "at lu": ("numpy path", ""),
            "torch-sla": ("at lu", ""), "vmap32": ("32 separate", "≤ 0.8"),
            "gnn backward": ("gnn forward", "≤ 2")}
    rows = []
    for r in results:
        size = r.get("n", r.get("size", ""))
        row = {"method": r["method"], "n / edges": f"{size:,}" if isinstance(size, int) else size}
        if "skipped" in r:
            row["time s"] = r["skipped"]
            rows.append(row)
            continue
        row.update({"time s": f"{r['time_s']:.3f}", "cpu s": f"{r['cpu_s']:.3f}",
                    "first call s": f"{r['first_call_s']:.2f}",
                    "peak MB (warm)": f"{r['peak_warm_mb']:.0f}",
                    "factorizations": r.get("factorizations", ""),
                    "symbolic": r.get("symbolic_analyses", ""),
                    "solve calls": r.get("solve_calls", "")})
        ref, target = refs.get(r["method"], (None, ""))
        if ref in by:
            x = r["cpu_s"] / max(by[ref]["cpu_s"], 1e-9)
            row["cpu ratio"] = f"{x:.2f}x {ref}" + (f" (target {target})" if target else "")
        rows.append(row)
    return rows


COLUMNS = ["method", "n / edges", "time s", "cpu s", "first call s", "peak MB (warm)",
           "factorizations", "symbolic", "solve calls", "cpu ratio"]


def main(argv=None, out=None) -> list[dict]:
    """``python -m linops bench torch``: the table, printed and written to ``--out``."""
    ap = argparse.ArgumentParser(prog="python -m linops bench torch",
                                 description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=_legend())
    ap.add_argument("--nx", type=positive, default=400,
                    help="grid side of the value+gradient rows (n = nx(nx+1)); default 400")
    ap.add_argument("--vmap-nx", type=positive, default=200, help="grid side of vmap32 rows")
    ap.add_argument("--jacrev-nx", type=positive, default=50, help="grid side of jacrev")
    ap.add_argument("--edges", type=positive, default=10**6, help="GNN graph edges")
    ap.add_argument("--quick", action="store_true", help="small sizes: nx 40, 20, 10, 10⁴ edges")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=None, metavar="NAME")
    ap.add_argument("--peer-venv", type=Path, default=DEFAULT_VENV, metavar="DIR",
                    help=f"virtual environment of the peer ({PEER}); default {DEFAULT_VENV}")
    ap.add_argument("--no-install", action="store_true",
                    help="do not create the peer's environment when it is missing")
    ap.add_argument("--out", type=Path, default=Path(out or "bench-out"), metavar="DIR")
    ap.add_argument("--timeout", type=float, default=900.0)
    docs.add_option(ap)
    args = ap.parse_args(argv)
    docs.check(ap, args.write_docs, "torch")
    if args.quick:
        args.nx, args.vmap_nx, args.jacrev_nx, args.edges = 40, 20, 10, 10**4
    sizes = {m: args.nx for m in SOLVE_METHODS}
    sizes.update({"vmap32": args.vmap_nx, "32 separate": args.vmap_nx,
                  "jacrev": args.jacrev_nx, "gnn forward": args.edges,
                  "gnn backward": args.edges})
    root = str(Path(__file__).resolve().parents[2])
    env = {"PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
           "NUMBA_NUM_THREADS": "1"}
    results = []
    for m in args.methods or METHODS:
        sys.stderr.write(f"{m}, size {sizes[m]} ...\n")
        python = None
        if m == "torch-sla":
            python, why = peer_python(args.peer_venv, not args.no_install)
            if python is None:
                results.append({"method": m, "n": sizes[m] * (sizes[m] + 1), "skipped": why})
                continue
        r = in_child("torch", f"run_one({m!r}, {sizes[m]})", {"method": m, "size": sizes[m]},
                     args.timeout, threads=1, python=python, env=env)
        if not m.startswith("gnn"):
            r.setdefault("n", sizes[m] * (sizes[m] + 1))
        results.append(r)
    publish(args.out, "torch", table(_rows(results), COLUMNS), results, argv, args.write_docs)
    return results


def _legend() -> str:
    """The section's column legend (the epilog of its --help)."""
    return legend("torch")


if __name__ == "__main__":
    main()
