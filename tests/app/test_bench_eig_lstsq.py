"""``bench eig`` and ``bench lstsq`` measure what they claim: their measurement functions
(each of which the section runs in a child process) at small sizes — the eigenvalues against
scipy's, the mode gradients against 4-point central differences, one factorization; least
squares' one factorization and rank-2 cotangent, QR right and the normal equations wrong at
cond 1e10 against 50-digit differences, LinearSolve.jl #1309's ∂A right where the square
rule is not — and their tables are explained by the legend under them."""

from __future__ import annotations

import numpy as np
import pytest

from linops._app import eig, lstsq
from linops._app.legends import explained, legend


def _headers(text: str) -> list[str]:
    lines = text.splitlines()
    heads = [ln for ln, nxt in zip(lines, lines[1:]) if ln.startswith("|") and nxt.startswith("|-")]
    return [c.strip() for ln in heads for c in ln.strip("|").split("|")]


def test_eig_rows_values_gradients_and_their_legend():
    ours = eig.measure("linops", 10, 3)
    ref = eig.measure("scipy", 10, 3)
    assert ours["factorizations"] == ours["factorizations_after"] == 1
    assert ours["kind"] in ("CHOLMOD", "SuperLU")          # not PARDISO: many solves
    w, wr = np.array(ours["values"]), np.array(ref["values"])
    assert np.abs(w - wr).max() <= 1e-10 * np.abs(wr).max()
    fd = eig.measure_fd(10, 3, 1e-3)
    assert fd["theta_err4"] <= 1e-7 and fd["rho_err4"] <= 1e-7
    text = eig.format_rows([ours, ref, fd, {"row": "measure('x')", "skipped": "not installed"}])
    assert "θ-grad vs FD" in text and "measure('x'): not installed" in text
    assert [c for c in _headers(text) if c not in explained(legend("eig"))] == []


def test_lstsq_rows_and_their_legend():
    pytest.importorskip("sparseqr")
    pytest.importorskip("mpmath")
    rows = [lstsq.measure(v, 400, 100, 1e8) for v in lstsq.VARIANTS]
    assert all(r["factorizations"] == 1 for r in rows)
    assert rows[1]["cotangent"] == "LowRank rank 2"
    assert rows[1]["cotangent_bytes"] == 2 * (400 + 100) * 8
    assert "grad_s" not in rows[0] and all(r["grad_s"] > 0 for r in rows[1:])
    assert all(r["solve_s"] <= r["time_s"] for r in rows)
    cond = lstsq.measure_cond(1e10)
    ref = cond["reference"]
    assert abs(cond["QR (SuiteSparseQR)"] - ref) <= 1e-6 * abs(ref)
    assert "fails" in str(cond["normal equations (Cholesky of AᵀA)"])
    assert abs(cond["normal equations (LU of AᵀA)"] - ref) >= 0.1 * abs(ref)
    ls = lstsq.measure_square_rule()
    assert [c["shape"] for c in ls["cases"]] == ["7×4", "4×7"]
    assert all(c["ours"] <= 1e-7 and c["square rule"] >= 0.1 for c in ls["cases"])
    text = lstsq.format_rows(rows + [cond, ls])
    assert [c for c in _headers(text) if c not in explained(legend("lstsq"))] == []
    assert np.isclose(lstsq.matrix(40, 10, 1e6).toarray().shape[0], 40)
