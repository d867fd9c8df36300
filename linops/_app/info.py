"""``python -m linops info``: versions, available backends, and which factorizations serve
adjoint solves on each."""

from __future__ import annotations

import platform


def version(dist: str) -> str | None:
    """Installed version of distribution ``dist``, or None."""
    try:
        from importlib.metadata import version as v

        return v(dist)
    except Exception:
        return None


def _gpu() -> str:
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode() if n else "none"
        return f"cupy {cupy.__version__}, {n} device(s): {name}"
    except Exception as e:
        return f"not available ({type(e).__name__})"


def info() -> str:
    """The report printed by ``python -m linops info`` (one string)."""
    from linops.internals import CAPABILITIES, backend_named

    lines = [f"linops {version('linops') or 'source tree'} on Python "
             f"{platform.python_version()} ({platform.machine()})"]
    for dist in ("numpy", "scipy", "array-api-compat", "pyamg", "jax", "jaxlib", "scikit-sparse",
                 "pypardiso", "petsc4py", "mpi4py", "matplotlib"):
        lines.append(f"  {dist:<17} {version(dist) or 'not installed'}")
    lines += ["backends (the backend table; 'no' names the alternative):"]
    for name, present in (("numpy", True), ("jax", version("jax") is not None),
                          ("cupy", _gpu())):
        be = backend_named(name)
        head = {"numpy": "numpy/scipy (default)", "jax": "jax", "cupy": f"cupy (GPU): {present}"}
        lines.append(f"  {head[name]}" + ("" if present else " — not installed "
                                           '(pip install "linops[jax]")'))
        missing = [c for c in CAPABILITIES if be.capability(c) is not None]
        lines.append(f"    available: {', '.join(c for c in CAPABILITIES if c not in missing)}")
        for c in missing:
            lines.append(f"    no {c}: {be.capability(c)}")
    lines += ["factorizations that serve adjoint solves (same factors, no refactorization):",
              "  numpy: LU (LAPACK getrs trans / SuperLU trans='H','T'), Cholesky (LAPACK, CHOLMOD),",
              "         PARDISO (iparm transposed solves) when installed; Krylov + AMG/ILU/Jacobi",
              "         (hierarchy of Aᴴ built once when A is not Hermitian)",
              "  cupy:  dense LU/Cholesky (cupyx), sparse LU via cupyx splu (host factorization, "
              "GPU solves)",
              "  jax:   dense jax.scipy LU; sparse via host callbacks into the numpy solvers"]
    lines += _petsc_lines()
    return "\n".join(lines)


def _petsc_lines() -> list[str]:
    if version("petsc4py") is None:
        return ["PETSc: not installed (optional: see README, 'Beyond one machine')"]
    try:
        from solvers._petsc import transpose_support
    except Exception as e:  # the backend module failed to import: say so, do not hide it
        return [f"PETSc: petsc4py {version('petsc4py')} installed, backend unavailable "
                f"({type(e).__name__}: {e})"]
    return ["PETSc transposed solves (adjoints):"] + [f"  {s}" for s in transpose_support()]
