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
#: engines answer the same pullback code through the same cache methods); bounded: one
#: direct, one iterative
PULLBACK_ENGINES = {"lu", "cholesky", "auto", "gmres", "cg", "pardiso", "petsc-mumps"}
BOUNDED_PULLBACK_ENGINES = {"lu", "gmres"}
FD_ENGINES = {"lu"}
#: the bounded profile asks every engine in its sparse form and, of the dense and matrix-free
#: forms, only the engines with code of their own there (LAPACK's LU, Cholesky and QR; Auto's
#: choice and the densifying LU for an operator of products, two Krylov methods); the long
#: profile asks every engine in every form it takes
BOUNDED_FORMS = {"dense": {"lu", "cholesky", "qr"}, "matrixfree": {"auto", "gmres", "cg", "lu"}}
#: bounded: SuperLU answers every matrix; every other (form, engine) a fixed third of the
#: corpus, a different third for each, so every matrix meets a third of the engines
BOUNDED_EVERY = {("sparse", "lu")}
BOUNDED_SHARE = 3


def _params():
    """Every corpus matrix × form × engine; bounded: the forms above, the shares above, and
    the iterative engines skip the matrices with κ > 1e4 (where they mostly run out of
    iterations, slowly, and are refused by name). The long profile asks everything."""
    out = []
    for i, m in enumerate(C.corpus()):
        for kind, structure in FORMS.items():
            for k, eng in enumerate(engines(structure)):
                if not _profile.long():
                    if eng.iterative and m.cond > 1e4:
                        continue
                    if kind in BOUNDED_FORMS and eng.label not in BOUNDED_FORMS[kind]:
                        continue
                    if (kind, eng.label) not in BOUNDED_EVERY and \
                            (i + k + len(kind)) % BOUNDED_SHARE:
                        continue
                out.append(pytest.param(m, kind, eng, id=f"{m.name}-{kind}-{eng.label}"))
    return out


@pytest.mark.parametrize("m, kind, eng", _params())
def test_corpus(m, kind, eng):
    fd = eng.label in FD_ENGINES and kind != "matrixfree" and \
        m.dtype in (np.float64, np.complex128) and not m.singular and m.cond < 1e4
    pull = PULLBACK_ENGINES if _profile.long() else BOUNDED_PULLBACK_ENGINES
    j = run(m, kind, eng, pullbacks=eng.label in pull, fd=fd)
    j.done()
