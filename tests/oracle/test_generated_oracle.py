"""Generated matrices (hypothesis): kind, size, dtype, condition, density, explicit zeros and
seed are drawn, and so are the form and the engine; every query is judged as for the corpus.
A violation fails with the drawn parameters, shrunk to a minimal counterexample (smaller n,
seed 0, milder conditioning, the simplest engine). Bounded profile: a few derandomized
examples per property; ``--oracle=long``: many random ones, n up to 40."""

from __future__ import annotations

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

from . import _profile
from . import cases as C
from .engines import FORMS, engines
from .runner import run

ENGINES = {kind: engines(structure) for kind, structure in FORMS.items()}


@st.composite
def _case(draw, kinds=C.KINDS):
    m = draw(C.matrices(kinds=kinds))
    kind = draw(st.sampled_from(sorted(FORMS)), label="form")
    eng = draw(st.sampled_from(ENGINES[kind]), label="engine")
    hint = draw(st.sampled_from([None, {}, {"posdef": True}, {"hermitian": True}]), label="hints")
    return m, kind, eng, hint


@_profile.examples(bounded=25, long_=4000)
@given(_case())
def test_generated_solves_updates_and_entries(case):
    """Solves in every mode and shape, updates, log det, selected entries and A⁻¹'s entries.
    Hints are drawn too, true or not: a wrong hint may cost speed, never a wrong number."""
    m, kind, eng, hint = case
    note(f"{m.name} [{kind}] with {eng.label}, hints={hint}\n{np.array2string(m.a, precision=3)}")
    run(m, kind, eng, pullbacks=False, hint=hint).done()


@_profile.examples(bounded=15, long_=2000)
@given(_case(kinds=("general", "pivoting", "hermitian", "hpd", "complex-symmetric", "hub")))
def test_generated_pullbacks(case):
    """Every cache pullback against the dense reference, and (double precision, κ < 1e4,
    assembled forms) against central differences of the exact function."""
    m, kind, eng, hint = case
    fd = (kind != "matrixfree" and m.dtype in (np.float64, np.complex128) and m.cond < 1e4
          and not m.singular)
    note(f"{m.name} [{kind}] with {eng.label}")
    run(m, kind, eng, pullbacks=True, fd=fd, updates=False, hint=hint).done()
