"""AffineSparse: parameterised sparse families K(θ) = K₀ + Σᵢ θᵢ Kᵢ on one fixed pattern.

Finite elements (one θ per element: density, conductivity), topology optimisation and
parameterised Hamiltonians all assemble a sparse matrix linearly from parameters. The family
stores that assembly once, as a sparse matrix M from parameters to values, so that building
K(θ) and pulling a gradient back to θ are each one sparse matrix-vector product: O(nnz), with
no n×n array and no ∂f/∂K in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

import numpy as np

from ._backend import backend_of
from ._base import seal
from ._errors import ShapeError
from ._pattern import Pattern
from ._queries import _operator, sample_pattern
from ._sparse import Sparse


@dataclass(frozen=True, eq=False)
class AffineSparse:
    """K(θ) = K₀ + Σᵢ θᵢ Kᵢ, stored as the union pattern plus the linear map θ ↦ values.

    The map is itself a sparse nnz×p matrix ``M`` (a :class:`Sparse`), so ``fam(θ)`` is one SpMV,
    O(nnz(M)), and the pullback of a cotangent G is ``θ̄ = Mᴴ g`` with g = G sampled on the
    pattern: O(nnz·rank(G)) for lazy G (SDDMM), O(nnz) for a Sparse G on the same pattern.
    Nothing forms an n×n array. Works for numpy, cupy and jax θ (inside ``jax.jit`` too).

    Gradient convention: θ̄ᵢ = ⟨Kᵢ, G⟩_F; for real θ (``pullback(G)``, the default) the real part.

    Build a family with :meth:`from_terms` (explicit sparse terms) or :meth:`from_elements`
    (finite-element assembly with Dirichlet elimination); the constructor itself takes the
    stored form and is not meant to be called directly.

    Parameters
    ----------
    pattern : Pattern
        The union of the terms' (and the offset's) patterns: every K(θ) lives on it.
    MH : Sparse of shape (p, pattern.nnz)
        Mᴴ, where column i of M holds Kᵢ's values on the pattern. Only Mᴴ is stored: the
        pullback is Mᴴ g, and ``fam(θ)`` = M θ is the same arrays read as their transpose (the
        backend's native CSC view), so M costs no memory; ``fam.M`` builds it on request.
    offset : ndarray of shape (pattern.nnz,), optional
        K₀'s values on the pattern.
    free : ndarray of int, optional
        From ``from_elements``: the original index of each free dof.
    n_full : int, optional
        From ``from_elements``: the number of dofs before elimination.

    Attributes
    ----------
    shape : tuple of two ints
        The shape of every K(θ).
    n_params : int
        p, the length of θ.

    See Also
    --------
    testing.poisson_family : a ready-made 2-D heat-conduction family.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo
    >>> K1 = sp.csr_array(np.array([[2.0, -1.0], [-1.0, 2.0]]))
    >>> fam = AffineSparse.from_terms([K1, sp.eye(2)])          # K(θ) = θ₀ K₁ + θ₁ I
    >>> fam(np.array([1.0, 3.0])).to_scipy().toarray()
    array([[ 5., -1.],
           [-1.,  5.]])
    >>> G = lo.RankOne(np.array([1.0, 0.0]), np.array([1.0, 1.0]))   # a lazy cotangent
    >>> fam.pullback(G)                                         # ⟨K₁, G⟩, ⟨I, G⟩
    array([1., 1.])
    """

    pattern: Pattern
    MH: Sparse
    offset: Any = None
    free: Any = None        # for from_elements: original index of each free dof
    n_full: int | None = None

    @property
    def n_params(self) -> int:
        """p, the number of parameters (the length of θ; one per element for from_elements)."""
        return self.MH.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        """The shape of every K(θ): (n, n) over the free dofs for from_elements."""
        return self.pattern.shape

    # ----- constructors -------------------------------------------------------------------------
    @classmethod
    def from_terms(cls, terms: Sequence, offset=None) -> "AffineSparse":
        """The family K(θ) = K₀ + Σᵢ θᵢ Kᵢ from explicit sparse terms.

        Cost: O(N log N) once, for N the total nnz of the terms (the union pattern and each
        term's slots in it); then ``fam(θ)`` and ``pullback`` cost O(N) each.

        Parameters
        ----------
        terms : sequence of sparse matrices
            K₁ … Kₚ: scipy sparse matrices or arrays, or ``lo.Sparse``, all of one shape. Their
            patterns may differ; explicitly stored zeros stay in the union pattern.
        offset : sparse matrix, optional
            The constant K₀, of the same shape.

        Returns
        -------
        AffineSparse
            With ``n_params == len(terms)``.

        Raises
        ------
        ValueError
            If ``terms`` is empty.
        ShapeError
            If the terms, or the offset, differ in shape.
        TypeError
            If a term or the offset is not sparse (a dense array is refused: its pattern would
            be full).

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp
        >>> K0 = sp.csr_array([[0.0, 1.0], [1.0, 0.0]])
        >>> fam = AffineSparse.from_terms([sp.eye(2)], offset=K0)
        >>> fam(np.array([5.0])).to_scipy().toarray()
        array([[5., 1.],
               [1., 5.]])
        """
        import scipy.sparse as sp

        ops = [_as_sparse(K, f"terms[{i}]") for i, K in enumerate(terms)]
        if not ops:
            raise ValueError("from_terms needs at least one term")
        shape = ops[0].shape
        for i, K in enumerate(ops):
            if K.shape != shape:
                raise ShapeError(f"all terms must share one shape: terms[0].shape={shape} but "
                                 f"terms[{i}].shape={K.shape}")
        pats = [K.pattern for K in ops]
        pattern = pats[0].union(*pats[1:]) if len(pats) > 1 else pats[0]
        slots, params, coefs = [], [], []
        for i, K in enumerate(ops):
            s, _ = pattern.locate(K.pattern.rows, K.pattern.indices)
            slots.append(s)
            params.append(np.full(s.shape, i))
            coefs.append(np.asarray(K.values))
        dtype = np.result_type(*[c.dtype for c in coefs])
        M = sp.csr_array((np.concatenate(coefs).astype(dtype),
                          (np.concatenate(slots), np.concatenate(params))),
                         shape=(pattern.nnz, len(ops)))
        return cls._with_offset(pattern, M, offset)

    @classmethod
    def _with_offset(cls, pattern: Pattern, M, offset, free=None, n_full=None) -> "AffineSparse":
        """Family on pattern ∪ pattern(offset): M's rows move to their slots in the union."""
        import scipy.sparse as sp

        if offset is None:
            return cls(pattern, _adjoint_of_scipy(M), None, free, n_full)
        off = _as_sparse(offset, "offset")
        if off.shape != pattern.shape:
            raise ShapeError(f"offset.shape={off.shape} but the family's shape={pattern.shape}")
        union = pattern.union(off.pattern)
        slot, _ = union.locate(pattern.rows, pattern.indices)
        C = sp.coo_array(M)
        Mu = sp.csr_array((C.data, (slot[C.row], C.col)), shape=(union.nnz, M.shape[1]))
        off_vals = np.zeros(union.nnz, dtype=np.result_type(M.dtype, off.dtype))
        s_off, _ = union.locate(off.pattern.rows, off.pattern.indices)
        off_vals[s_off] = np.asarray(off.values)
        return cls(union, _adjoint_of_scipy(Mu), off_vals, free, n_full)

    @classmethod
    def from_elements(cls, Ke, dofs, n: int, fixed=None, offset=None) -> "AffineSparse":
        """Finite-element family K(θ) = K₀ + Σₑ θₑ Pₑᵀ Keₑ Pₑ with Dirichlet dofs eliminated.

        Pₑ picks element e's k dofs out of n; θₑ scales its stiffness. The family acts on the
        free dofs in their original order (``fam.free`` lists them; ``fam.expand(u)`` scatters
        a free vector back to length n). Eliminating a Dirichlet dof removes its row and column,
        which is right for homogeneous conditions (u = 0 there); move a non-zero prescribed
        value to the right-hand side yourself.

        Parameters
        ----------
        Ke : array of shape (k, k) or (ne, k, k)
            One element matrix shared by all elements, or one per element.
        dofs : integer array of shape (ne, k)
            Global dof numbers in [0, n) of each element's k local dofs, in Ke's order.
        n : int
            The number of dofs before elimination.
        fixed : array_like of int, optional
            Dofs to eliminate (repeats are harmless).
        offset : sparse matrix of shape (n_free, n_free), optional
            A constant K₀ on the free dofs (e.g. z·I for a resolvent).

        Returns
        -------
        AffineSparse
            Of shape (n_free, n_free), with ``n_params == ne``, ``free`` and ``n_full == n``.

        Raises
        ------
        ShapeError
            If dofs is not a 2-D integer array, Ke's shape does not match it, a dof or a fixed
            dof is outside [0, n), or the offset's shape is not (n_free, n_free).

        Notes
        -----

        The scatter indices are computed once, here, without a global sort: K's pattern is the
        pattern of E Eᵀ (E the dof-element incidence, a sparse product), each element entry
        finds its slot by a binary search within its row (rows hold a few entries), and since
        CSR slots grow with (row, column), sorting each element's k dofs orders its k² slots —
        so Mᴴ (elements × slots) is written directly in CSR and is the only map kept:
        ``pullback`` is Mᴴ g and ``fam(θ)`` reads the same arrays transposed. Elements that repeat a
        dof take the general route (one sort of all ne·k² entries). Cost O(ne·k²) time and
        memory; ``fam(θ)`` and ``pullback`` are one SpMV each.

        Examples
        --------
        Two 1-D bar elements on three nodes, node 0 clamped:

        >>> import numpy as np
        >>> fam = AffineSparse.from_elements(np.array([[1.0, -1.0], [-1.0, 1.0]]),
        ...                                  np.array([[0, 1], [1, 2]]), 3, fixed=[0])
        >>> fam(np.array([1.0, 2.0])).to_scipy().toarray().tolist()
        [[3.0, -2.0], [-2.0, 2.0]]
        """
        dofs = np.asarray(dofs)
        if dofs.ndim != 2 or not np.issubdtype(dofs.dtype, np.integer):
            raise ShapeError(f"dofs must be an integer array (ne, k), got shape={dofs.shape}, "
                             f"dtype={dofs.dtype}")
        ne, k = dofs.shape
        Ke = np.asarray(Ke)
        if Ke.shape not in ((k, k), (ne, k, k)):
            raise ShapeError(f"Ke must be (k, k)=({k}, {k}) or (ne, k, k)=({ne}, {k}, {k}) for "
                             f"dofs.shape={dofs.shape}, got Ke.shape={Ke.shape}")
        if dofs.size and (dofs.min() < 0 or dofs.max() >= n):
            raise ShapeError(f"dofs out of range [0, {n}): min={dofs.min()}, max={dofs.max()}")
        is_free = np.ones(n, dtype=bool)
        if fixed is not None:
            fixed = np.asarray(fixed, dtype=np.int64).reshape(-1)
            if fixed.size and (fixed.min() < 0 or fixed.max() >= n):
                raise ShapeError(f"fixed dofs out of range [0, {n}): min={fixed.min()}, "
                                 f"max={fixed.max()}")
            is_free[fixed] = False
        free = np.flatnonzero(is_free)
        newidx = np.full(n, -1, dtype=np.int64)
        newidx[free] = np.arange(free.size)
        d = newidx[dofs]                                   # (ne, k), -1 for fixed dofs
        order = np.argsort(d, axis=1, kind="stable")       # each element's dofs, ascending
        ds = np.take_along_axis(d, order, axis=1)
        if k > 1 and bool(np.any((ds[:, 1:] == ds[:, :-1]) & (ds[:, 1:] >= 0))):
            return cls._from_elements_general(Ke, dofs, is_free, newidx, free, n, offset)
        pattern, MH = _element_family(Ke, d, order, ds, free.size)
        if offset is not None:
            return cls._with_offset(pattern, MH.to_scipy().conj().T, offset, free, int(n))
        return cls(pattern, MH, None, free, int(n))  # Mᴴ built directly: nothing transposed

    @classmethod
    def _from_elements_general(cls, Ke, dofs, is_free, newidx, free, n, offset):
        """Elements with repeated dofs: all ne·k² entries through one sort (duplicates summed)."""
        import scipy.sparse as sp

        ne, k = dofs.shape
        r = np.broadcast_to(dofs[:, :, None], (ne, k, k))
        c = np.broadcast_to(dofs[:, None, :], (ne, k, k))
        e = np.broadcast_to(np.arange(ne)[:, None, None], (ne, k, k))
        keep = is_free[r] & is_free[c]
        pattern, pos = Pattern.from_coo_with_map(newidx[r[keep]], newidx[c[keep]],
                                                 (free.size, free.size))
        coef = np.broadcast_to(Ke, (ne, k, k))[keep]
        M = sp.csr_array((coef, (pos, e[keep])), shape=(pattern.nnz, ne))
        return cls._with_offset(pattern, M, offset, free, int(n))

    # ----- use ----------------------------------------------------------------------------------
    def __call__(self, theta) -> Sparse:
        """K(θ) as a Sparse on the family's pattern: values = M θ (+ K₀), one SpMV, O(nnz(M)).

        The values are in θ's backend: numpy, cupy (M is copied to the device once per
        family), or jax, where this is traceable (``jax.jit``, ``jax.grad`` with respect to
        θ), and the result is a pytree whose values are the differentiable leaf.

        Parameters
        ----------
        theta : array of shape (n_params,)

        Returns
        -------
        Sparse
            On ``self.pattern``, the same pattern object for every θ: a solver cache updated
            with ``cache.update(A=fam(θ₂))`` sees an unchanged structure.

        Raises
        ------
        ShapeError
            If theta is not 1-D of length n_params.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp
        >>> fam = AffineSparse.from_terms([sp.eye(2), sp.csr_array([[0.0, 1.0], [0.0, 0.0]])])
        >>> fam(np.array([2.0, 7.0])).values
        array([2., 7., 2.])
        """
        if getattr(theta, "ndim", None) != 1 or theta.shape[0] != self.n_params:
            raise ShapeError(f"theta must have shape ({self.n_params},), got "
                             f"shape={tuple(getattr(theta, 'shape', ()))}")
        be = backend_of(theta)
        MH = self._on(be, "MH")
        values = be.spmm_adjoint(MH.values, MH.pattern, theta)  # M θ = (Mᴴ)ᴴ θ
        if self.offset is not None:
            values = values + self._on(be, "offset")
        return Sparse(seal(values), self.pattern)

    def pullback(self, G, *, real: bool = True):
        """θ̄ᵢ = ⟨Kᵢ, G⟩_F for a cotangent G (lazy, sparse or dense operator). Real part when
        ``real`` (real θ). Cost O(nnz·rank(G) + nnz(M)); never forms an n×n array.

        This is the chain rule through K(θ): given G = ∂f/∂K (e.g. ``RankOne(-λ, u)`` from
        ``adjoints.solve_pullback``), it returns ∂f/∂θ. Only G's entries on the family's
        pattern matter, so G is sampled there (SDDMM for a low-rank G) and contracted with Mᴴ,
        which is transposed once per family and kept.

        Parameters
        ----------
        G : operator or anything ``aslinop`` accepts
            Of the family's shape.
        real : bool, default True
            Return the real part, the gradient for real θ; False gives the complex
            ⟨Kᵢ, G⟩ (for complex θ, or to keep both parts).

        Returns
        -------
        array of shape (n_params,)
            In the backend of G's arrays.

        Raises
        ------
        ShapeError
            If G's shape is not the family's.
        UnsupportedOperandError
            If G cannot be wrapped as an operator.

        Examples
        --------
        For f(θ) = a·K(θ)b the cotangent is G = a bᴴ, so ∂f/∂θᵢ = aᵀKᵢb:

        >>> import numpy as np, scipy.sparse as sp, linops as lo
        >>> K1, K2 = sp.eye(2), sp.csr_array([[0.0, 1.0], [0.0, 0.0]])
        >>> fam = AffineSparse.from_terms([K1, K2])
        >>> a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
        >>> fam.pullback(lo.RankOne(a, b)), float(a @ K1 @ b), float(a @ K2 @ b)
        (array([11.,  4.]), 11.0, 4.0)
        """
        G = _operator(G, "AffineSparse.pullback")
        if G.shape != self.shape:
            raise ShapeError(f"pullback: G.shape={G.shape} but the family's shape={self.shape}")
        g = sample_pattern(G, self.pattern)
        be = backend_of(g)
        out = self._on(be, "MH") @ g
        return be.xp.real(out) if real else out

    @cached_property
    def M(self) -> Sparse:
        """M (nnz × p): column i holds Kᵢ's values on the pattern. Built on first request from
        Mᴴ (O(nnz(M)), then kept); ``fam(θ)`` and ``pullback`` never need it."""
        return self.MH.adjoint()

    def _on(self, be, name: str):
        """Mᴴ or the offset for backend ``be``: numpy/jax use the host arrays (jax embeds them
        as constants); where indices live on a device (cupy) a device copy is made once per
        family and kept."""
        host = {"MH": self.MH, "offset": self.offset}[name]
        if not be.device_indices:
            return host if name != "offset" else be.from_host(host)
        cache = self.__dict__.setdefault("_device", {})
        if name not in cache:
            cache[name] = (be.from_host(host) if name == "offset"
                           else Sparse(be.from_host(host.values), host.pattern))
        return cache[name]

    def expand(self, u_free, fill=0.0):
        """Scatter a vector on the free dofs back to all n dofs (fixed ones get ``fill``).

        For plotting or post-processing a solution of K(θ) u = b on the full mesh. A family
        without eliminated dofs (``from_terms``) returns ``u_free`` itself.

        Parameters
        ----------
        u_free : array of shape (n_free,) or (n_free, k)
        fill : scalar, default 0.0
            The value at the fixed dofs (the homogeneous Dirichlet value).

        Returns
        -------
        array of shape (n,) or (n, k)
            A new array in u_free's backend and dtype.

        Examples
        --------
        >>> import numpy as np
        >>> fam = AffineSparse.from_elements(np.array([[1.0, -1.0], [-1.0, 1.0]]),
        ...                                  np.array([[0, 1], [1, 2]]), 3, fixed=[0])
        >>> fam.free, fam.expand(np.array([5.0, 6.0]))
        (array([1, 2]), array([0., 5., 6.]))
        """
        if self.free is None:
            return u_free
        be = backend_of(u_free)
        out = be.xp.full((self.n_full,) + tuple(u_free.shape[1:]), fill, dtype=u_free.dtype)
        return be.put(out, self.free, u_free)


def _element_family(Ke, d, order, ds, nf: int):
    """(pattern, Mᴴ) of an element family whose elements have distinct dofs. ``d``: free
    index of each element dof (-1: fixed), ``order``/``ds``: each row of d sorted."""
    import scipy.sparse as sp

    ne, k = d.shape
    live = ds >= 0                                         # free dofs, in ascending order
    nlive = live.sum(axis=1)
    e_of = np.repeat(np.arange(ne, dtype=np.int64), nlive)
    dof_of = ds[live]
    # K's pattern = pattern(E Eᵀ), E: free dofs × elements incidence; scipy's sparse product
    E = sp.csr_array((np.ones(dof_of.size, dtype=np.int8), (dof_of, e_of)), shape=(nf, ne))
    del e_of, dof_of
    KP = (E @ E.T).tocsr()
    del E
    KP.sort_indices()
    indptr, indices = KP.indptr, KP.indices
    del KP
    # slots of the live (i, j) pairs, element by element in CSR order (rows then columns)
    dsi = ds.astype(indices.dtype)
    rr = np.broadcast_to(dsi[:, :, None], (ne, k, k))
    cc = np.broadcast_to(dsi[:, None, :], (ne, k, k))
    pair_live = (live[:, :, None] & live[:, None, :])
    all_live = bool(pair_live.all())
    rr = rr.reshape(-1) if all_live else rr[pair_live]
    cc = cc.reshape(-1) if all_live else cc[pair_live]
    slots = _csr_offsets(indptr, indices, nf, rr, cc)
    del rr, cc
    if Ke.ndim == 2:
        coef = Ke[order[:, :, None], order[:, None, :]]
    else:
        eix = np.arange(ne)[:, None, None]
        coef = Ke[eix, order[:, :, None], order[:, None, :]]
    coef = coef.reshape(-1) if all_live else coef[pair_live]
    per_element = nlive.astype(np.int64) ** 2
    mh_indptr = np.zeros(ne + 1, dtype=np.int64)
    np.cumsum(per_element, out=mh_indptr[1:])
    pattern = Pattern(indptr, indices, (nf, nf))
    del indices
    MH = Sparse(seal(np.conj(coef) if np.iscomplexobj(coef) else coef),
                _lean(Pattern._trusted(mh_indptr, slots, (ne, pattern.nnz))))
    return pattern, MH


def _adjoint_of_scipy(M) -> Sparse:
    """Mᴴ as a lo.Sparse from a scipy nnz × p matrix (one counting-sort transposition)."""
    MH = M.conj().T if np.iscomplexobj(M.data) else M.T
    return Sparse.from_scipy(MH)


def _lean(P: Pattern) -> Pattern:
    """P without its cached row index (8 bytes per entry; the numpy products of M and Mᴴ never
    read it, and ``P.rows`` recomputes it on demand): M and Mᴴ hold 2·ne·k² entries."""
    P.__dict__.pop("rows", None)
    return P


def _csr_offsets(indptr, indices, n: int, rows, cols) -> np.ndarray:
    """Slot of each (row, col) in a canonical CSR pattern (all present): a binary search within
    each row (scipy's compiled csr_sample_offsets), or one global searchsorted without it."""
    try:
        from scipy.sparse._sparsetools import csr_sample_offsets
    except ImportError:  # pragma: no cover - scipy private API moved
        csr_sample_offsets = None
    it = indices.dtype
    if csr_sample_offsets is not None and it in (np.int32, np.int64):
        out = np.empty(rows.size, dtype=it)
        csr_sample_offsets(n, n, indptr.astype(it, copy=False), indices, rows.size,
                           rows.astype(it, copy=False), cols.astype(it, copy=False), out)
        return out
    keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr)) * n + indices
    return np.searchsorted(keys, rows.astype(np.int64) * n + cols)


def _as_sparse(K, name: str) -> Sparse:
    op = _operator(K, f"AffineSparse {name}")
    if not isinstance(op, Sparse):
        raise TypeError(f"AffineSparse {name} must be sparse (scipy sparse or lo.Sparse), got "
                        f"{type(op).__name__}")
    return op
