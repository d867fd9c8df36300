"""The named corpus × every form × every registered engine that takes the form: every numpy
query (solves in every mode and shape, updates, log det, selected entries, A⁻¹'s entries,
every pullback) judged against the dense long-double reference. See ``runner.py`` for the
queries and ``judge.py`` for the rule."""

from __future__ import annotations

import numpy as np
import pytest

from . import _profile
from . import cases as C
from .engines import FORMS, engines
from .runner import run

#: engines whose pullbacks the corpus checks (each pullback costs solves; the rest of the
#: engines answer the same pullback code through the same cache methods)
PULLBACK_ENGINES = {"lu", "cholesky", "auto", "gmres", "cg", "pardiso", "petsc-mumps"}
FD_ENGINES = {"lu"}


def _params():
    """Every corpus matrix × form × engine; in the bounded profile iterative engines skip the
    matrices with κ > 1e4 (where they mostly run out of iterations, slowly, and are refused
    by name: the long profile asks them)."""
    out = []
    for m in C.corpus():
        for kind, structure in FORMS.items():
            for eng in engines(structure):
                if eng.iterative and m.cond > 1e4 and not _profile.long():
                    continue
                out.append(pytest.param(m, kind, eng, id=f"{m.name}-{kind}-{eng.label}"))
    return out


@pytest.mark.parametrize("m, kind, eng", _params())
def test_corpus(m, kind, eng):
    fd = eng.label in FD_ENGINES and kind != "matrixfree" and \
        m.dtype in (np.float64, np.complex128) and not m.singular and m.cond < 1e4
    j = run(m, kind, eng, pullbacks=eng.label in PULLBACK_ENGINES, fd=fd)
    j.done()
