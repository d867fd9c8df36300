"""The corpus of hard matrices the oracle harness (tests/oracle/) and the feature tests use.

Each entry is a named, deterministic dense numpy matrix with the facts a test needs to decide
what the right answer is: which properties hold (Hermitian, positive definite, singular, ...)
and the dtype. The dense array IS the reference: every query is compared with numpy on it.
Kinds that kind matrices miss: LU that must pivot (zero diagonal), explicit zeros stored in the
sparse pattern, repeated and clustered eigenvalues, condition numbers 1e8–1e12, near-singular
and exactly singular, symmetric indefinite, complex symmetric (A = Aᵀ ≠ Aᴴ), empty rows and
columns (singular), hub rows, n = 0 and n = 1, float32/complex64.

>>> from tests._cases.corpus import CORPUS, get
>>> m = get("needs-pivoting")
>>> float(m.a[0, 0]), m.hermitian, m.singular
(0.0, False, False)
>>> sorted({m.dtype.name for m in CORPUS.values()}) == ['complex128', 'complex64', 'float32', 'float64']
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class Matrix:
    """A corpus entry: the dense matrix and what holds for it.

    ``explicit_zeros``: stored positions of the sparse form whose value is 0 (the pattern is
    ``a != 0`` plus these); ``sparse()`` builds that CSR matrix with the zeros kept.
    """

    name: str
    a: np.ndarray
    hermitian: bool = False
    posdef: bool = False
    singular: bool = False
    complex_symmetric: bool = False
    explicit_zeros: tuple = ()
    tags: tuple = field(default_factory=tuple)

    @property
    def n(self) -> int:
        return self.a.shape[0]

    @property
    def dtype(self) -> np.dtype:
        return self.a.dtype

    @property
    def cond(self) -> float:
        return float(np.linalg.cond(self.a.astype(np.complex128))) if self.n else 1.0

    def sparse(self) -> sp.csr_array:
        """The CSR form: every nonzero plus the explicit zeros, stored (sorted, no duplicates)."""
        rows, cols = np.nonzero(self.a)
        if self.explicit_zeros:
            zr, zc = (np.array(x, dtype=np.int64) for x in zip(*self.explicit_zeros))
            rows, cols = np.concatenate([rows, zr]), np.concatenate([cols, zc])
        vals = self.a[rows, cols]
        S = sp.csr_array((vals, (rows, cols)), shape=self.a.shape, dtype=self.dtype)
        S.sum_duplicates()
        S.sort_indices()
        return S


def _rng(seed):
    return np.random.default_rng(seed)


def _spd(n, cond, seed, dtype=np.float64):
    """Hermitian positive definite with eigenvalues log-spaced over [1/cond, 1]."""
    rng = _rng(seed)
    z = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        z = z + 1j * rng.standard_normal((n, n))
    q, _ = np.linalg.qr(z)
    w = np.logspace(-np.log10(cond), 0, n)
    a = (q * w) @ q.conj().T
    return ((a + a.conj().T) / 2).astype(dtype)


def _banded(n, seed, dtype=np.float64, density=0.3):
    rng = _rng(seed)
    mask = (rng.random((n, n)) < density) | np.eye(n, dtype=bool)
    mask |= np.eye(n, k=1, dtype=bool) | np.eye(n, k=-1, dtype=bool)
    a = rng.standard_normal((n, n)) * mask
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((n, n)) * mask
    return (a + n * np.eye(n) * 0.5).astype(dtype)


def _build() -> dict[str, Matrix]:
    out: list[Matrix] = []
    add = out.append
    # --- pivoting: LU without row exchanges breaks down
    a = np.array([[0.0, 2.0, 0.0, 1.0], [3.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 4.0],
                  [1.0, 0.0, 5.0, 0.0]])
    add(Matrix("needs-pivoting", a, tags=("pivoting", "zero-diagonal")))
    add(Matrix("antidiagonal-2", np.array([[0.0, 2.0], [3.0, 0.0]]), tags=("pivoting",)))
    r = _banded(12, 1)
    np.fill_diagonal(r, 0.0)
    r[np.arange(11), np.arange(1, 12)] += 3.0
    add(Matrix("zero-diagonal-12", r, tags=("pivoting", "zero-diagonal")))
    # --- explicit zeros in the stored pattern (θₑ = 0 in a family)
    e = _spd(10, 1e2, 2)
    e[np.abs(e) < 0.02] = 0.0
    e = (e + e.T) / 2
    off = [(i, j) for i in range(10) for j in range(10) if e[i, j] == 0][:6]
    add(Matrix("explicit-zeros-spd", e, hermitian=True, posdef=bool(np.all(np.linalg.eigvalsh(e) > 0)),
               explicit_zeros=tuple(off), tags=("explicit-zeros",)))
    # --- spectra: repeated and clustered eigenvalues
    q, _ = np.linalg.qr(_rng(3).standard_normal((10, 10)))
    w = np.array([1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    add(Matrix("repeated-eigenvalues", (q * w) @ q.T, hermitian=True, posdef=True,
               tags=("repeated-eigenvalues",)))
    w = np.array([1.0, 1.0 + 1e-9, 1.0 + 2e-9, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0])
    add(Matrix("clustered-eigenvalues", (q * w) @ q.T, hermitian=True, posdef=True,
               tags=("clustered-eigenvalues",)))
    # --- conditioning
    for c in (1e8, 1e10, 1e12):
        add(Matrix(f"spd-cond-1e{int(np.log10(c))}", _spd(12, c, 4), hermitian=True, posdef=True,
                   tags=("ill-conditioned",)))
    g = _banded(12, 5)
    u, s, vt = np.linalg.svd(g)
    s = np.logspace(0, -10, 12)
    add(Matrix("general-cond-1e10", (u * s) @ vt, tags=("ill-conditioned",)))
    # --- near-singular and singular
    ns = _spd(8, 10, 6)
    w, v = np.linalg.eigh(ns)
    w[0] = 1e-15 * w[-1]
    add(Matrix("near-singular", (v * w) @ v.T, hermitian=True, posdef=True,
               tags=("near-singular", "ill-conditioned")))
    s1 = _banded(8, 7)
    s1[3] = s1[1] + s1[2]
    add(Matrix("singular-dependent-rows", s1, singular=True, tags=("singular",)))
    s2 = _banded(8, 8)
    s2[5, :] = 0.0
    s2[:, 2] = 0.0
    add(Matrix("empty-row-and-column", s2, singular=True, tags=("singular", "empty-rows")))
    lap = np.diag([1.0, 2.0, 2.0, 2.0, 1.0]) - np.eye(5, k=1) - np.eye(5, k=-1)
    add(Matrix("neumann-laplacian", lap, hermitian=True, singular=True, tags=("singular",)))
    # --- symmetric indefinite
    q, _ = np.linalg.qr(_rng(9).standard_normal((10, 10)))
    w = np.array([-3.0, -1.0, -0.5, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0])
    add(Matrix("symmetric-indefinite", (q * w) @ q.T, hermitian=True, tags=("indefinite",)))
    B = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]])
    add(Matrix("saddle-point", np.block([[np.eye(4) * 2, B], [B.T, np.zeros((2, 2))]]),
               hermitian=True, tags=("indefinite", "zero-diagonal")))
    # --- complex: Hermitian positive definite, complex symmetric (not Hermitian), general
    add(Matrix("hpd-complex", _spd(10, 1e3, 10, np.complex128), hermitian=True, posdef=True,
               tags=("complex",)))
    rng = _rng(11)
    z = rng.standard_normal((10, 10)) + 1j * rng.standard_normal((10, 10))
    cs = (z + z.T) / 2 + 5 * np.eye(10)
    add(Matrix("complex-symmetric", cs, complex_symmetric=True, tags=("complex",)))
    add(Matrix("complex-general", _banded(10, 12, np.complex128), tags=("complex",)))
    # --- hub rows (one row/column coupled to everything)
    h = np.eye(16) * 4.0
    h[0, :] = h[:, 0] = 1.0
    h[0, 0] = 20.0
    add(Matrix("hub-row", h, hermitian=True, posdef=True, tags=("hub",)))
    # --- pivoting with explicit zeros: LU exchanges rows AND stored zeros sit off the factor
    pz = _banded(9, 16)
    np.fill_diagonal(pz, 0.0)
    pz[np.arange(8), np.arange(1, 9)] += 2.0
    pz[8, 0] += 2.0
    zeros = [(i, j) for i in range(9) for j in range(9) if pz[i, j] == 0 and i != j][:5]
    add(Matrix("explicit-zeros-pivoting", pz, explicit_zeros=tuple(zeros) + ((0, 0), (4, 4)),
               tags=("pivoting", "zero-diagonal", "explicit-zeros")))
    # --- complex Hermitian indefinite; complex symmetric that needs pivoting
    q, _ = np.linalg.qr(_rng(17).standard_normal((8, 8)) + 1j * _rng(18).standard_normal((8, 8)))
    w = np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0, 4.0])
    hi = (q * w) @ q.conj().T
    add(Matrix("hermitian-indefinite-complex", (hi + hi.conj().T) / 2, hermitian=True,
               tags=("complex", "indefinite")))
    cz = np.zeros((6, 6), dtype=np.complex128)
    cz[np.arange(5), np.arange(1, 6)] = 1.0 + 2.0j
    cz = cz + cz.T + np.diag([0, 0, 1e-3, 0, 0, 0]) + 0.5j * np.eye(6, k=3) + 0.5j * np.eye(6, k=-3)
    add(Matrix("complex-symmetric-pivoting", cz, complex_symmetric=True,
               tags=("complex", "pivoting", "zero-diagonal")))
    # --- moderately ill-conditioned SPD (reachable by Krylov methods), and a graded diagonal
    add(Matrix("spd-cond-1e6", _spd(14, 1e6, 19), hermitian=True, posdef=True,
               tags=("ill-conditioned",)))
    add(Matrix("graded-diagonal", np.diag(np.logspace(-8, 0, 7)), hermitian=True, posdef=True,
               tags=("ill-conditioned", "diagonal")))
    # --- tiny sizes
    add(Matrix("n0", np.zeros((0, 0)), hermitian=True, posdef=True, tags=("empty",)))
    add(Matrix("n1", np.array([[3.0]]), hermitian=True, posdef=True, tags=("tiny",)))
    add(Matrix("n1-negative", np.array([[-2.0]]), hermitian=True, tags=("tiny", "indefinite")))
    # --- single precision
    add(Matrix("spd-float32", _spd(10, 1e3, 13).astype(np.float32), hermitian=True, posdef=True,
               tags=("single",)))
    add(Matrix("general-float32", _banded(10, 14).astype(np.float32), tags=("single", "pivoting")))
    add(Matrix("hpd-complex64", _spd(10, 1e2, 15, np.complex64), hermitian=True, posdef=True,
               tags=("single", "complex")))
    add(Matrix("general-complex64", _banded(9, 20, np.complex128).astype(np.complex64),
               tags=("single", "complex")))
    add(Matrix("spd-float32-cond-1e5", _spd(10, 1e5, 21).astype(np.float32), hermitian=True,
               posdef=True, tags=("single", "ill-conditioned")))
    return {m.name: m for m in out}


CORPUS: dict[str, Matrix] = _build()


def get(name: str) -> Matrix:
    """The corpus entry called ``name`` (KeyError listing the names)."""
    if name not in CORPUS:
        raise KeyError(f"no corpus matrix {name!r}; names: {', '.join(CORPUS)}")
    return CORPUS[name]


def select(*, tags=None, hermitian=None, posdef=None, singular=None, complex_=None):
    """The corpus entries with every given property (None: either)."""
    out = []
    for m in CORPUS.values():
        if tags is not None and not set(tags) & set(m.tags):
            continue
        if hermitian is not None and m.hermitian != hermitian:
            continue
        if posdef is not None and m.posdef != posdef:
            continue
        if singular is not None and m.singular != singular:
            continue
        if complex_ is not None and (m.dtype.kind == "c") != complex_:
            continue
        out.append(m)
    return out
