"""``sv.inverse(cache)``: A⁻¹ (and A⁻ᴴ, A⁻ᵀ) as a lazy operator whose ENTRIES come by selected
inversion, so that ``lo.project``, ``lo.sample``, ``lo.diagonal``, ``lo.inner`` with a sparse
matrix and ``fam.pullback`` cost about one factorization instead of n solves.

Applying it is a solve with the cache's factors (counted in ``cache.stats``); its entries on
the filled pattern of the factorization come from :func:`solvers.selected_inverse`, computed
once per query (keep a :class:`SelectedInverse` to query many times), and entries outside that
pattern by solving for their distinct columns. It belongs to the cache's current A: after
``cache.update`` it raises :class:`StaleSolutionError`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

import linops as lo
from linops.internals import conjugate, namespace, operator, sample_generic, to_numpy

from ._checks import backend_of_problem
from ._errors import BackendNotSupported
from ._results import SelectedInverse


_ADJOINT = {"N": "H", "H": "N", "T": "C", "C": "T"}
_CONJ = {"N": "C", "C": "N", "H": "T", "T": "H"}
_NAMES = {"N": "A⁻¹", "H": "A⁻ᴴ", "T": "A⁻ᵀ", "C": "conj(A⁻¹)"}
#: a cache without a selected inverse answers entries by solves for at most this many columns
_MAX_SOLVED_COLUMNS = 64


@operator
class Inverse(lo.LinearOperator):
    """A⁻¹ (``op='N'``), A⁻ᴴ ('H'), A⁻ᵀ ('T') or conj(A⁻¹) ('C') of a factorized cache, lazily.

    Apply: one solve per call with the cache's factors (``solve``, ``solve_adjoint``,
    ``solve_transpose``), counted in ``cache.stats``; no factorization. Adjoint: the same cache
    with ``op`` swapped (A⁻¹ ↔ A⁻ᴴ), O(1). Entries (``lo.sample``, ``lo.diagonal``,
    ``lo.project``, ``lo.inner`` with a Sparse, ``fam.pullback``): selected inversion of the
    factor (O(nnz(L)) memory, about twice the factorization's flops), positions outside the
    factor's filled pattern by one solve per distinct column. A cache without a selected inverse
    (iterative, PARDISO, PETSc) answers entries by solves for at most 64 distinct columns and
    raises ``BackendNotSupported`` beyond (``fam.pullback`` would be n solves). ``lo.to_dense``:
    n solves, refused above its size limit like any operator.

    Made by :func:`inverse` (and ``adjoints.logdet_pullback``); the fields are public but a
    direct construction must pass the cache's current ``generation``.

    Raises
    ------
    StaleSolutionError
        On use after ``cache.update`` replaced A.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo, solvers as sv
    >>> A = sp.csr_array(np.array([[4.0, 1.0], [2.0, 3.0]]))
    >>> cache = sv.init(sv.LinearProblem(A), sv.LU())
    >>> Ainv = sv.inverse(cache)
    >>> (lo.diagonal(Ainv) * 10).round(12).tolist()               # diag(A⁻¹), no solve
    [3.0, 4.0]
    >>> (Ainv.H @ np.ones(2) * 10).round(12).tolist(), cache.stats.adjoint_solves
    ([1.0, 3.0], 1)
    """

    cache: Any
    op: str = "N"
    generation: int = 0
    _leaves: ClassVar = ()

    def __post_init__(self):
        if self.op not in _ADJOINT:
            raise ValueError(f"Inverse: op must be one of 'N', 'H', 'T', 'C', got {self.op!r}")

    @property
    def shape(self):
        """The cache's A.shape (n, n)."""
        return self.cache.A.shape

    @property
    def dtype(self):
        """The dtype of the solves: A's, at least float32."""
        return np.dtype(np.result_type(self.cache.A.dtype, np.float32))

    def __repr__(self) -> str:
        n = self.shape[0]
        return f"Inverse({_NAMES[self.op]}, n={n}, {self.cache.kind})"

    def check_current(self) -> None:
        """StaleSolutionError unless the cache still holds the A this operator belongs to."""
        self.cache.check_current(self.generation, f"this {_NAMES[self.op]} operator")

    def matmat(self, X):
        """A⁻¹X (or A⁻ᴴX, A⁻ᵀX, conj(A⁻¹)X): one solve with the cache's factors, counted."""
        self.check_current()
        c = self.cache
        if self.op == "C":
            xp = namespace(X)
            return xp.conj(c._run(xp.conj(X), "N", "x"))
        return c._run(X, self.op, "x")

    def adjoint(self) -> "Inverse":
        """The same cache, A⁻¹ ↔ A⁻ᴴ (A⁻ᵀ ↔ conj(A⁻¹)); O(1)."""
        return Inverse(self.cache, _ADJOINT[self.op], self.generation)


def inverse(cache, *, adjoint: bool = False) -> Inverse:
    """A⁻¹ of a cache as a lazy operator with cheap entries (A⁻ᴴ with ``adjoint=True``).

    Parameters
    ----------
    cache : LinearCache
        Any cache applies it; entries by selected inversion need CHOLMOD, SuperLU or dense
        factors (other caches answer ``lo.sample`` by solves, one per distinct column).
    adjoint : bool
        Return A⁻ᴴ, the gradient of log|det A| with respect to A.

    Returns
    -------
    Inverse

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo, solvers as sv
    >>> A = sp.csr_array(np.array([[2.0, 1.0], [1.0, 2.0]]))
    >>> cache = sv.init(sv.LinearProblem(A), sv.LU())
    >>> (lo.project(sv.inverse(cache), like=A).values * 3).round(12).tolist()
    [2.0, -1.0, -1.0, 2.0]
    >>> cache.stats.solves                       # entries without a single solve
    0
    """
    return Inverse(cache, "H" if adjoint else "N", cache.generation)


def _entries(A: Inverse, rows, cols):
    """Entries of an Inverse: selected inversion, solves for positions outside its pattern."""
    A.check_current()
    rows = np.asarray(to_numpy(rows), dtype=np.int64)
    cols = np.asarray(to_numpy(cols), dtype=np.int64)
    transposed = A.op in ("H", "T")
    r, c = (cols, rows) if transposed else (rows, cols)  # positions of A⁻¹ itself
    try:
        S = A.cache.factor.selected_inverse(A.cache.A.shape)
    except BackendNotSupported as e:
        ncols = np.unique(c).size
        S = None
        if ncols > _MAX_SOLVED_COLUMNS:  # never n solves behind a query's back
            try:   # Auto factorizes once more with an engine that has a selected inverse
                S = selected_inverse(A.cache)
            except BackendNotSupported:
                raise BackendNotSupported(
                    f"{e}. Without a selected inverse these {r.size} entries would take {ncols} "
                    f"solves (one per distinct column; at most {_MAX_SOLVED_COLUMNS} are done "
                    f"silently)") from None
    if S is not None:
        vals, found = S.lookup(r, c)
        del S
    else:
        vals = np.zeros(r.shape[0], dtype=A.dtype)
        found = np.zeros(r.shape[0], dtype=bool)
    if not found.all():  # outside the filled pattern: one solve per distinct column of A⁻¹
        miss = np.flatnonzero(~found)
        plain = Inverse(A.cache, "N", A.generation)
        vals = vals.astype(np.result_type(vals.dtype, A.dtype))
        vals[miss] = _by_solves(plain, r[miss], c[miss])
    if A.op in ("H", "C"):
        vals = np.conj(vals)
    out_dtype = np.result_type(A.cache.A.dtype, np.float32)
    vals = vals.astype(out_dtype, copy=False)

    be = backend_of_problem(A.cache.A)
    return be.from_host(vals) if be.host_factors else be.xp.asarray(vals)


def _by_solves(Ainv: Inverse, r, c):
    # the generic rule (unit-vector products in bounded chunks), not Inverse's own
    return to_numpy(sample_generic.dispatch(lo.LinearOperator)(Ainv, r, c))


sample_generic.register(Inverse, _entries)
conjugate.register(Inverse, lambda A: Inverse(A.cache, _CONJ[A.op], A.generation))


def selected_inverse(cache) -> SelectedInverse:
    """The selected inverse of a cache's factorization: A⁻¹ on its filled pattern, once.

    No solve and no new factorization (``cache.stats`` does not change): the Takahashi
    recurrences run on the factor the cache holds. Cost: about twice the factorization's
    flops; memory one copy of the factor's values (see the module notes). Keep the result to
    query it many times; ``lo.sample`` / ``lo.project`` of :func:`solvers.inverse` compute one
    per call.

    Parameters
    ----------
    cache : LinearCache
        With CHOLMOD, SuperLU, dense LU or dense Cholesky factors. A ``sv.Auto`` cache that
        holds another factor (PARDISO) factorizes once more with one of these first (counted in
        ``cache.stats.factorizations``, warned with a ``HintWarning``; declare
        ``LinearProblem(..., asks="selected_inverse")`` to have it chosen at ``init``).

    Returns
    -------
    SelectedInverse

    Raises
    ------
    BackendNotSupported
        An iterative cache, PARDISO (MKL exposes no factor), or a cupy/jax-device factor that
        an algorithm of your choice made; the message names a factorization that works.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.csr_array(np.array([[2.0, 1.0], [1.0, 2.0]]))
    >>> S = selected_inverse(sv.init(sv.LinearProblem(A), sv.LU()))
    >>> (S.diagonal() * 3).round(12).tolist()             # A⁻¹ = [[2, -1], [-1, 2]] / 3
    [2.0, 2.0]
    """
    cache.require_open("selected_inverse")
    return cache._answering("selected_inverse", lambda f: f.selected_inverse(cache.A.shape))
