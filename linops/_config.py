"""``lo.show_config()``: the versions this installation runs on and the backend table, as the
code sees them (nothing here is written by hand: the dependencies come from the distribution's
own declaration, the backends from ``linops._backend``'s table).

Solvers have their own table, generated from the algorithm registry: ``sv.show_config()``;
``python -m linops info`` prints both.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import pathlib
import platform
import re
import sys
import textwrap

from ._backend import BACKEND_NAMES, CAPABILITIES, backend_named

_ROOT = pathlib.Path(__file__).resolve().parent.parent   # the checkout, when run from one
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)(?:;(.*))?$")
_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def _source_tree() -> pathlib.Path | None:
    """The checkout linops is imported from (its pyproject.toml names linops), else None."""
    path = _ROOT / "pyproject.toml"
    if path.is_file() and re.search(r'^name\s*=\s*"linops"', path.read_text(encoding="utf-8"),
                                    re.M):
        return _ROOT
    return None


def _declared() -> tuple[str, str, list[tuple[str, str]]]:
    """(where it was read, linops's version, [(extra or "", requirement), ...] in the order
    declared): the checkout's pyproject.toml when linops runs from one, else the installed
    distribution's metadata (the same list, as pip recorded it). Cost: one small file read."""
    tree = _source_tree()
    if tree is not None:
        try:
            import tomllib  # Python 3.11+ only
        except ImportError:  # Python 3.10: no tomllib; the metadata path below may still work
            tomllib = None
        if tomllib is not None:
            text = (tree / "pyproject.toml").read_text(encoding="utf-8")
            project = tomllib.loads(text).get("project", {})
            out = [("", r) for r in project.get("dependencies", [])]
            for extra, reqs in project.get("optional-dependencies", {}).items():
                out += [(extra, r) for r in reqs]
            return "pyproject.toml", project.get("version", "?"), out
    try:
        reqs = importlib.metadata.requires("linops") or []
        version = importlib.metadata.version("linops")
    except importlib.metadata.PackageNotFoundError:
        return "nowhere (neither a checkout nor an installed distribution)", "?", []
    out = []
    for r in reqs:
        m = _EXTRA.search(r)
        out.append((m.group(1) if m else "", r.split(";")[0].strip()))
    return "the installed distribution's metadata", version, out


def _version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _module_version(module: str) -> str | None:
    """The version of whatever distribution provides top-level ``module`` (cupy comes as
    cupy-cuda12x, cupy-cuda11x, ...), or None when no installed distribution provides it."""
    for dist in importlib.metadata.packages_distributions().get(module, [module]):
        v = _version(dist)
        if v is not None:
            return v
    return None


def _requirement_cell(req: str) -> str:
    """'numpy 2.4.6' / 'cupy-cuda12x not installed'; a reference to linops's own extras
    ('linops[jax,bench]') reads '+[jax,bench]'."""
    m = _NAME.match(req)
    if m is None:
        return req
    name, extras = m.group(1), m.group(2)
    if name == "linops":
        return f"+{extras or ''}"
    v = _version(name)
    return f"{name} {v}" if v else f"{name} not installed"


def _dependency_lines() -> list[str]:
    where, _, declared = _declared()
    groups: dict[str, list[str]] = {}
    for extra, req in declared:
        groups.setdefault(extra, []).append(_requirement_cell(req))
    lines = [f"dependencies (as {where} declares them; extras: pip install \"linops[NAME]\"):"]
    width = max([len(e) + 2 for e in groups] + [8])
    for extra, cells in groups.items():
        head = (f"[{extra}]" if extra else "required").ljust(width)
        # a name and its version stay on one line: wrap at the commas only (no-break spaces)
        cells = [c.replace(" ", "\u00a0") for c in cells]
        lines += [line.replace("\u00a0", " ") for line in
                  textwrap.wrap(", ".join(cells), width=100, initial_indent=f"  {head}  ",
                                subsequent_indent=" " * (width + 4), break_on_hyphens=False)]
    return lines


def _install_hint(backend: str) -> str:
    """'pip install "linops[gpu]"' for the extra that declares a distribution named after the
    backend's module (cupy-cuda12x for cupy), else a plain pip hint."""
    for extra, req in _declared()[2]:
        m = _NAME.match(req)
        if extra and m and m.group(1).startswith(backend):
            return f'pip install "linops[{extra}]"'
    return f"pip install {backend}"


def _devices(name: str) -> str:
    """For cupy only (its arrays need a GPU): how many CUDA devices it sees. Imports cupy."""
    if name != "cupy":
        return ""
    try:
        # optional: cupy (the gpu extra)
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        first = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode() if n else "none"
        return f", {n} device(s): {first}"
    except Exception as e:  # a cupy without a driver or a GPU: say so, do not fail the report
        return f", no usable device ({type(e).__name__})"


def _backend_lines() -> list[str]:
    lines = ["backends (the table in linops._backend; for what one lacks: why, and what to use "
             "instead):"]
    for name in BACKEND_NAMES:
        be = backend_named(name)
        importable = name == "numpy" or importlib.util.find_spec(name) is not None
        v = _module_version(name)
        state = (f"{name} {v or '(version unknown)'}{_devices(name)}" if importable
                 else f"not installed ({_install_hint(name)}); once it is:")
        lines.append(f"  {name}: {state}")
        lines.append(f"    dtypes: {', '.join(str(d) for d in be.dtypes)}")
        has = [c for c in CAPABILITIES if all(be.capability(c, d) is None for d in be.dtypes)]
        lines += textwrap.wrap(", ".join(has), width=100, initial_indent="    has: ",
                               subsequent_indent="         ")
        for c in CAPABILITIES:
            if c in has:
                continue
            reason = be.capability(c)
            if reason is not None:
                lines.append(f"    no {c}: {reason}")
                continue
            missing = [d for d in be.dtypes if be.capability(c, d) is not None]
            lines.append(f"    no {c} for {', '.join(str(d) for d in missing)}: "
                         f"{be.capability(c, missing[0])}")
    return lines


def show_config() -> str:
    """What this installation of linops runs on: versions, and what each array backend can do.

    Three parts, all generated: the first line (linops's version, where it is imported from,
    Python and the platform); the dependencies with their installed versions, grouped as the
    distribution declares them (the checkout's ``pyproject.toml``, or the installed metadata),
    required first, then each extra; and the backend table (numpy + scipy, jax, cupy): whether
    its library is installed, its dtypes, the capabilities it has, and for each one it lacks —
    for every dtype or for some — the table's reason, which names the alternative.
    ``sv.show_config()`` is the companion table of solver algorithms;
    ``python -m linops info`` prints both.

    Returns
    -------
    str
        The report, one fact per line (print it).

    Notes
    -----
    Cost: reading package metadata and one small file; jax is not imported (its presence and
    version come from the metadata), cupy only when it is installed (to count devices).

    Examples
    --------
    >>> import linops as lo
    >>> report = lo.show_config()
    >>> report.splitlines()[0].startswith("linops ")
    True
    >>> print("\\n".join(l for l in report.splitlines() if "no bicgstab" in l))   # cupy's entry
        no bicgstab: cupyx.scipy.sparse.linalg has no bicgstab; use sv.GMRES()
    """
    tree = _source_tree()
    where = f"source tree {tree}" if tree is not None else "installed"
    head = (f"linops {_declared()[1]} ({where}) on Python "
            f"{platform.python_version()} ({sys.implementation.name}), {platform.system()} "
            f"{platform.machine()}")
    return "\n".join([head, *_dependency_lines(), *_backend_lines()])
