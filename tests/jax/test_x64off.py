"""Runs ``x64off_jax.py`` (and ``x64off_native.py`` where the native extension is built) in ONE
fresh interpreter with jax_enable_x64 OFF.

tests/conftest.py switches x64 on for the whole session at import, so the x64-off cases cannot
live in this process: they are collected only by ``-o python_files='x64off_*.py'`` with
``--noconftest``, and this test fails when any of them fails (or when none ran).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from adjoints.jax import _native

HERE = Path(__file__).resolve().parent


def test_x64_off_suite_passes_in_a_fresh_interpreter():
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_ENABLE_X64")}
    env["JAX_ENABLE_X64"] = "0"
    env["JAX_PLATFORMS"] = env.get("JAX_PLATFORMS", "cpu")
    # file -> fewest passing tests ("they really ran"); the native one only where it is built
    files = {"x64off_jax.py": 15, **({"x64off_native.py": 6} if _native.available() else {})}
    cmd = [sys.executable, "-m", "pytest", "--noconftest", "-o", "python_files=x64off_*.py",
           "-p", "no:cacheprovider", "-q", "-rA", *(str(HERE / f) for f in files)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=HERE.parents[1],
                       env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert not re.search(r"\d+ failed", out), out[-3000:]
    for f, least in files.items():
        passed = len(re.findall(rf"^PASSED \S*{re.escape(f)}::", out, re.M))
        assert passed >= least, (f, passed, out[-3000:])
    assert not re.search(r"^SKIPPED .*x64off_native", out, re.M), out[-3000:]
