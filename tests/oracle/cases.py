"""Cases: the named corpus (``tests/_cases/corpus.py``) and generated matrices (hypothesis), in
the operator forms the engines take (dense array, ``lo.Sparse`` with the explicit zeros stored,
``lo.MatrixFree``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

import linops as lo
from tests._cases.corpus import CORPUS, Matrix  # noqa: F401 (CORPUS: for the tests)

from . import _profile

DTYPES = (np.float64, np.complex128, np.float32, np.complex64)


#: the factors of the low-rank cases: name -> (d, U, V) with a = diag(d) + U Vᴴ
LOWRANK: dict = {}


def form(m: Matrix, kind: str):
    """The operator of ``m`` in one form: 'dense' (the array), 'sparse' (lo.Sparse with its
    explicit zeros), 'matrixfree' (products only), 'diagonal' (lo.Diagonal of a diagonal m),
    'lowrank' (lo.Diagonal + lo.LowRank of a case made by :func:`lowrank_case`)."""
    if kind == "dense":
        return m.a.copy()
    if kind == "sparse":
        return lo.Sparse.from_scipy(m.sparse())
    if kind == "diagonal":
        return lo.Diagonal(np.diagonal(m.a).copy())
    if kind == "lowrank":
        d, U, V = LOWRANK[m.name]
        return lo.Diagonal(d.copy()) + lo.LowRank(U.copy(), V.copy())
    a = m.a.copy()
    return lo.MatrixFree(a.shape, a.dtype, lambda X: a @ X, lambda X: a.conj().T @ X)


def stored(m: Matrix, kind: str):
    """(rows, cols) of the positions an operator of this form stores: the sparse pattern, or
    every position of a dense/matrix-free one."""
    if kind == "sparse":
        P = lo.Sparse.from_scipy(m.sparse()).pattern
        return np.asarray(P.rows, dtype=np.int64), np.asarray(P.indices, dtype=np.int64)
    if kind == "diagonal":
        i = np.arange(m.n, dtype=np.int64)
        return i, i
    r, c = np.nonzero(np.ones((m.n, m.n), dtype=bool))
    return r.astype(np.int64), c.astype(np.int64)


def same_pattern(m: Matrix, kind: str, values):
    """An operator of m's form with the dense ``values`` on m's pattern (for ``update``)."""
    if kind == "dense":
        return np.asarray(values)
    if kind == "diagonal":
        return lo.Diagonal(np.diagonal(np.asarray(values)).copy())
    S = m.sparse()
    P = lo.Sparse.from_scipy(S).pattern
    v = np.asarray(values)[np.asarray(P.rows), np.asarray(P.indices)]
    if kind == "sparse":
        return lo.Sparse(v.astype(np.asarray(values).dtype), P)
    a = np.asarray(values).copy()
    return lo.MatrixFree(a.shape, a.dtype, lambda X: a @ X, lambda X: a.conj().T @ X)


def facts(name: str, a: np.ndarray, zeros=(), singular: bool = False, tags=()) -> Matrix:
    """A Matrix with its facts computed from the array (exact symmetry, definiteness)."""
    n = a.shape[0]
    herm = bool(np.array_equal(a, a.conj().T))
    cs = a.dtype.kind == "c" and bool(np.array_equal(a, a.T)) and not herm
    pd = False
    if herm and n and not singular:
        w = np.linalg.eigvalsh(a.astype(np.complex128))
        pd = bool(w.min() > 1e3 * np.finfo(np.float64).eps * max(abs(w).max(), 1e-300))
    return Matrix(name, a, hermitian=herm or n == 0, posdef=pd or n == 0, singular=singular,
                  complex_symmetric=cs, explicit_zeros=tuple(zeros), tags=tuple(tags))


KINDS = ("general", "pivoting", "hermitian", "hpd", "complex-symmetric", "conditioned",
         "singular", "hub")


@st.composite
def matrices(draw, kinds=KINDS, dtypes=DTYPES, max_n=None):
    """A generated Matrix: kind, size, dtype, condition, density, explicit zeros and a seed are
    drawn (each shrinks: smaller n, fewer zeros, seed 0, milder conditioning)."""
    n = draw(st.integers(0, max_n or _profile.max_n()), label="n")
    kind = draw(st.sampled_from(kinds), label="kind")
    dtype = np.dtype(draw(st.sampled_from(dtypes), label="dtype"))
    seed = draw(st.integers(0, 2 ** 16), label="seed")
    single = dtype in (np.float32, np.complex64)
    log_cond = draw(st.floats(0.0, 4.0 if single else 11.0), label="log10_cond")
    density = draw(st.floats(0.15, 1.0), label="density")
    nzeros = draw(st.integers(0, 3), label="explicit_zeros")
    rng = np.random.default_rng(seed)
    cplx = dtype.kind == "c"

    def rand(*shape):
        x = rng.standard_normal(shape)
        return x + 1j * rng.standard_normal(shape) if cplx else x

    mask = (rng.random((n, n)) < density) | np.eye(n, dtype=bool)
    singular = False
    if kind == "conditioned" and n:
        u, _ = np.linalg.qr(rand(n, n))
        v, _ = np.linalg.qr(rand(n, n))
        a = (u * np.logspace(0, -log_cond, n)) @ v.conj().T
    elif kind == "hpd" and n:
        q, _ = np.linalg.qr(rand(n, n))
        a = (q * np.logspace(0, -log_cond, n)) @ q.conj().T
        a = (a + a.conj().T) / 2
    else:
        a = rand(n, n) * mask
        if kind == "pivoting":
            np.fill_diagonal(a, 0.0)
            if n > 1:
                a[np.arange(n), (np.arange(n) + 1) % n] += 3.0      # a cyclic shift: regular
        elif kind == "hermitian":
            a = a + a.conj().T
        elif kind == "complex-symmetric":
            a = a + a.T
        elif kind == "hub" and n:
            a = np.eye(n) * 4.0 + 0 * a
            a[0, :] = a[:, 0] = 1.0
            a[0, 0] = 2.0 * n
        elif kind == "singular" and n:
            a[rng.integers(n)] = 0.0                                # an empty row
            singular = True
        if kind in ("general",) and n:
            a = a + np.eye(n) * rng.uniform(0, 2) * np.sqrt(n)
    a = np.asarray(a).astype(dtype) if n else np.zeros((0, 0), dtype=dtype)
    if kind in ("hermitian", "hpd", "hub") and n:
        a = ((a + a.conj().T) / 2).astype(dtype)                   # exactly, after the cast
    if kind == "complex-symmetric" and n:
        a = ((a + a.T) / 2).astype(dtype)
    off = [(i, k) for i in range(n) for k in range(n) if a[i, k] == 0]
    zeros = [off[i] for i in rng.permutation(len(off))[:nzeros]] if off else []
    return facts(f"generated-{kind}-n{n}-{dtype.name}-seed{seed}", a, zeros, singular, (kind,))


def corpus(*, tags=None, exclude=()) -> list[Matrix]:
    """The named corpus (optionally only entries with one of ``tags``)."""
    return [m for m in CORPUS.values()
            if (tags is None or set(tags) & set(m.tags)) and m.name not in exclude]


def as_scipy(m: Matrix):
    return sp.csr_array(m.sparse())


def lowrank_case(name: str, d, U, V) -> Matrix:
    """The case a = diag(d) + U Vᴴ, its factors kept for the 'lowrank' form."""
    d, U, V = (np.asarray(x) for x in (d, U, V))
    LOWRANK[name] = (d, U, V)
    a = (np.diag(d) + U @ V.conj().T).astype(np.result_type(d.dtype, U.dtype, V.dtype))
    return facts(name, a, tags=("lowrank",))


def diagonal_cases() -> list[Matrix]:
    """Diagonals: graded, negative, complex, single precision, with a zero (singular), n = 0/1."""
    return [facts("diag-graded", np.diag(np.logspace(-8, 0, 7))),
            facts("diag-indefinite", np.diag([3.0, -1.0, 0.5, -2.0])),
            facts("diag-complex", np.diag(np.array([1 + 2j, -0.5j, 3.0, 1e-6 + 1e-6j]))),
            facts("diag-float32", np.diag(np.array([1.0, 2.0, 1e-3], dtype=np.float32))),
            facts("diag-zero", np.diag([1.0, 0.0, 2.0]), singular=True),
            facts("diag-n0", np.zeros((0, 0))), facts("diag-n1", np.array([[-4.0]]))]


def lowrank_cases() -> list[Matrix]:
    """diag(d) + U Vᴴ: rank 1 and 2, real and complex, a near-cancelling update, single."""
    rng = np.random.default_rng(31)
    out = [lowrank_case("lr-rank1", np.linspace(1, 2, 8), rng.standard_normal((8, 1)),
                        rng.standard_normal((8, 1))),
           lowrank_case("lr-rank2-complex", np.linspace(1, 3, 9) + 0.5j,
                        rng.standard_normal((9, 2)) + 1j * rng.standard_normal((9, 2)),
                        rng.standard_normal((9, 2)))]
    u = np.ones((6, 1)) / np.sqrt(6)
    out.append(lowrank_case("lr-nearly-singular", np.ones(6), u, -(1 - 1e-9) * u))   # I − (1−ε)uuᵀ
    out.append(lowrank_case("lr-float32", np.linspace(1, 2, 5).astype(np.float32),
                            rng.standard_normal((5, 1)).astype(np.float32),
                            rng.standard_normal((5, 1)).astype(np.float32)))
    d = np.linspace(1, 2, 6)
    d[2] = 0.0                                  # B singular, B + uvᴴ regular: Woodbury refuses
    e = np.zeros((6, 1))
    e[2] = 1.0
    out.append(lowrank_case("lr-singular-base", d, e, e))
    return out
