"""The structured forms: ``lo.Diagonal`` (DiagonalSolve, Auto, the Krylov methods) and
``Diagonal + LowRank`` (Woodbury, Auto, Krylov), every query judged as for the corpus; and
``sv.logdet_estimate`` on the Hermitian positive definite corpus: its interval covers the
exact log det, or it refuses by name."""

from __future__ import annotations

import numpy as np
import pytest

import linops as lo
import solvers as sv

from . import cases as C
from . import reference as R
from .engines import engines
from .judge import Judge
from .runner import run


def _params(kind, matrices):
    return [pytest.param(m, kind, e, id=f"{m.name}-{e.label}") for m in matrices
            for e in engines(kind)]


@pytest.mark.parametrize("m, kind, eng", _params("diagonal", C.diagonal_cases()))
def test_diagonal(m, kind, eng):
    j = run(m, kind, eng, pullbacks=True)
    if eng.name == "diagonal" and m.singular:
        j.expect("init", not j.failures, "")
    j.done()


@pytest.mark.parametrize("m, kind, eng", _params("lowrank", C.lowrank_cases()))
def test_lowrank(m, kind, eng):
    run(m, kind, eng, pullbacks=True, updates=False).done()


def test_the_diagonal_engine_names_a_zero():
    m = C.diagonal_cases()[4]
    with pytest.raises(sv.SingularMatrixError, match=r"zero at A\[1, 1\]"):
        sv.init(sv.LinearProblem(C.form(m, "diagonal")), sv.DiagonalSolve())


@pytest.mark.parametrize("m", [m for m in C.corpus() if m.posdef and m.n >= 2],
                         ids=lambda m: m.name)
def test_logdet_estimate_covers_or_refuses(m):
    """At 99.9 % the interval must hold (one seed per matrix: a miss is a 1-in-1000 event or a
    wrong error bar); refusals must be the named ones."""
    j = Judge(f"logdet_estimate on {m.name}")
    sign, exact = R.slogdet(m.a)
    for kind in ("dense", "matrixfree"):
        est, err = j.attempt(f"logdet_estimate [{kind}]",
                             lambda: sv.logdet_estimate(C.form(m, kind), probes=24,
                                                        steps=min(m.n, 40), seed=7))
        if est is None:
            j.expect(f"logdet_estimate [{kind}]", isinstance(err, sv.ConvergenceError) and
                     "quadrature error cannot be bounded" in str(err) or
                     isinstance(err, sv.SingularMatrixError), f"refused with {err!r}")
            continue
        low, high = est.interval(0.999)
        slack = 64 * R.eps(m.dtype) * m.n * abs(exact)        # the single-precision operator
        j.expect(f"logdet_estimate [{kind}]", low - slack <= exact <= high + slack,
                 f"interval [{low:.8g}, {high:.8g}] misses log det = {exact:.8g} ({est!r})")
    j.done()


@pytest.mark.parametrize("m", [m for m in C.corpus() if not m.hermitian and m.n >= 2],
                         ids=lambda m: m.name)
def test_logdet_estimate_refuses_non_hermitian(m):
    for kind in ("sparse", "matrixfree"):
        with pytest.raises(sv.NotHermitianError):
            sv.logdet_estimate(C.form(m, kind), probes=4, steps=3)
