"""Build of the optional native extension ``solvers._native`` (the rest is in pyproject.toml).

``solvers._native`` (native/linops_native.cpp) is SuiteSparse's KLU for ``sv.KLU()`` plus the XLA
FFI handlers through which ``adjoints.jax`` solves with an existing KLU factorization without a
Python callback. It needs a C++17 compiler and the SuiteSparse headers and libraries (Debian/
Ubuntu: ``apt-get install libsuitesparse-dev``, which the README's commands install). Where
either is missing, the extension is skipped with a warning — never a build failure — and
linops runs without it: ``sv.KLU()`` then raises ``BackendNotSupported`` naming the install,
and ``adjoints.jax`` keeps its Python callbacks.

Where SuiteSparse lives: ``SUITESPARSE_INCLUDE_DIR`` / ``SUITESPARSE_LIBRARY_DIR`` if set, else
``$CONDA_PREFIX``, /usr/include/suitesparse, /usr/local/include/suitesparse. The XLA FFI headers
come from ``jax.ffi.include_dir()`` when jax can be imported while building, else from the copy
in native/xla_ffi. ``LINOPS_NO_NATIVE=1`` skips the extension on purpose.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def _suitesparse() -> tuple[list[str], list[str]] | None:
    """(include dirs, library dirs) of a SuiteSparse with klu.h, or None."""
    incs, libs = [], []
    if os.environ.get("SUITESPARSE_INCLUDE_DIR"):
        incs.append(os.environ["SUITESPARSE_INCLUDE_DIR"])
    if os.environ.get("SUITESPARSE_LIBRARY_DIR"):
        libs.append(os.environ["SUITESPARSE_LIBRARY_DIR"])
    for prefix in filter(None, [os.environ.get("CONDA_PREFIX"), sys.prefix, "/usr/local", "/usr"]):
        incs += [f"{prefix}/include/suitesparse", f"{prefix}/include"]
        libs += [f"{prefix}/lib", f"{prefix}/lib64"]
        libs.append(f"{prefix}/lib/{sysconfig.get_config_var('MULTIARCH') or ''}".rstrip("/"))
    found = [d for d in incs if (Path(d) / "klu.h").is_file()]
    if not found:
        return None
    return found[:1], [d for d in dict.fromkeys(libs) if Path(d).is_dir()]


def _xla_ffi_include() -> str:
    """jax's own XLA FFI headers when jax is importable here, else the vendored copy."""
    try:
        import jax.ffi

        inc = jax.ffi.include_dir()
        if (Path(inc) / "xla" / "ffi" / "api" / "ffi.h").is_file():
            return inc
    except Exception:   # no jax in the build environment (pip's isolated build): the copy
        pass
    return str(HERE / "native" / "xla_ffi")


class OptionalBuildExt(build_ext):
    """build_ext that skips an extension it cannot build instead of failing the install."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # compiler or linker errors: the package works without it
            self.warn(f"skipping the optional native extension {ext.name} ({e}); sv.KLU() and "
                      f"the native JAX solves are then unavailable (apt-get install "
                      f"libsuitesparse-dev and a C++17 compiler, then reinstall)")


def _extensions() -> list[Extension]:
    if os.environ.get("LINOPS_NO_NATIVE"):
        return []
    ss = _suitesparse()
    if ss is None:
        sys.stderr.write("linops: SuiteSparse (klu.h) not found; building without the optional "
                         "native extension solvers._native (apt-get install "
                         "libsuitesparse-dev, then reinstall)\n")
        return []
    inc, libdirs = ss
    return [Extension(
        "solvers._native",
        sources=["native/linops_native.cpp"],
        include_dirs=inc + [_xla_ffi_include()],
        library_dirs=libdirs,
        libraries=["klu", "btf", "cholmod", "amd", "colamd", "suitesparseconfig"],
        define_macros=[("LINOPS_WITH_XLA_FFI", "1")],
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
        language="c++",
    )]


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
