"""Child process of tests/jax/test_native.py: jax_memory_child's patterns with sv.KLU, whose
solves inside loops run as XLA FFI calls; prints RSS growth and the native table's sizes.

    python tests/jax/native_memory_child.py PATTERN[,PATTERN...] CALLS [ALG]

ALG: ``klu`` (default) or ``cholesky`` (CHOLMOD's real factors, copied into the native table).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.jax import jax_memory_child as child  # noqa: E402
from adjoints.jax import _native  # noqa: E402
from solvers.internals import native  # noqa: E402

# read at call time by every pattern of jax_memory_child
child.ALG = sys.argv[3] if len(sys.argv) > 3 else "klu"
MADE = [0]   # FFI factorizations drained when the measured calls start (after the warm-up)
_reset = child.adj.reset_stats


def _reset_and_mark():
    _reset()   # drains the native counters into _native.TOTALS
    MADE[0] = _native.TOTALS["factorizations"]


child.adj.reset_stats = _reset_and_mark

if __name__ == "__main__":
    # one pattern, or several (comma-separated) measured one after the other in this process;
    # native_calls per pattern, the table's sizes after each
    for name in sys.argv[1].split(","):
        calls0 = _native.TOTALS["native_calls"] + native().counts()["native_calls"]
        r = child.main(name, int(sys.argv[2]))
        c = native().counts()
        r.update(native_factors=c["factors"], aliases=c["aliases"], loop_factors=c["loop_factors"],
                 native_calls=_native.TOTALS["native_calls"] + c["native_calls"] - calls0,
                 loop_factorizations=_native.TOTALS["factorizations"] + c["factorizations"]
                 - MADE[0])
        print("@@" + json.dumps(r), flush=True)
