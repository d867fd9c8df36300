"""AffineSparse: parameterised sparse families K(θ) = K₀ + Σᵢ θᵢ Kᵢ on one fixed pattern.

Finite elements (one θ per element: density, conductivity), topology optimisation and
parameterised Hamiltonians all assemble a sparse matrix linearly from parameters. The family
stores that assembly once, as a sparse matrix M from parameters to values, so that building
K(θ) and pulling a gradient back to θ are each one sparse matrix-vector product: O(nnz), with
no n×n array and no ∂f/∂K in between.

Three ways in: explicit terms (``from_terms``), element matrices with their dof numbers
(``from_elements``), and the COO triplets a finite-element code already produces
(``from_coo``: top88's ``iK, jK, sK``, scikit-fem's ``COOData``). Dirichlet dofs are eliminated,
and non-zero prescribed values are lifted into the right-hand side (``fam.rhs``), with their
share of the θ-gradient (``fam.pullback(G, bbar=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

import numpy as np

from ._algebra import as_operator
from ._backend import backend_of, seal
from ._errors import ShapeError
from ._generics import sample_pattern
from ._pattern import Pattern, index_dtype
from ._sparse import Sparse

#: samples per call of the slot search (bounds the temporaries of from_elements to a few MB)
_CHUNK = 1 << 18


@dataclass(frozen=True, eq=False)
class AffineSparse:
    """K(θ) = K₀ + Σᵢ θᵢ Kᵢ, stored as the union pattern plus the linear map θ ↦ values.

    The map is itself a sparse nnz×p matrix ``M`` (a :class:`Sparse`), so ``fam(θ)`` is one SpMV,
    O(nnz(M)), and the pullback of a cotangent G is ``θ̄ = Mᴴ g`` with g = G sampled on the
    pattern: O(nnz·rank(G)) for lazy G (SDDMM), O(nnz) for a Sparse G on the same pattern.
    Nothing forms an n×n array. Works for numpy, cupy and jax θ (inside ``jax.jit`` too).

    Gradient convention: θ̄ᵢ = ⟨Kᵢ, G⟩_F; for real θ (``pullback(G)``, the default) the real part.

    Build a family with :meth:`from_terms` (explicit sparse terms), :meth:`from_elements`
    (element matrices and dof numbers) or :meth:`from_coo` (assembly triplets); the last two
    eliminate Dirichlet dofs and lift prescribed values (``fixed_values``) into
    :meth:`rhs`. The constructor itself takes the stored form and is not meant to be called
    directly.

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
        With eliminated dofs: the original index of each free dof.
    n_full : int, optional
        With eliminated dofs: the number of dofs before elimination.
    lift : Sparse of shape (p, n_free), optional
        Bᴴ, where column i of B is Kᵢ's free × fixed block times the prescribed values g:
        the θ-dependent part of the lifted right-hand side f − B θ − b₀.
    lift0 : ndarray of shape (n_free,), optional
        b₀, the offset's free × fixed block times g (an offset given on all n dofs).
    fixed_values : ndarray of shape (n_full,), optional
        g at the fixed dofs, zero at the free ones (what ``expand`` fills in).

    Attributes
    ----------
    shape : tuple of two ints
        The shape of every K(θ).
    n_params : int
        p, the length of θ.

    See Also
    --------
    testing.poisson_family : a ready-made 2-D heat-conduction family.
    testing.check_family : a family against an assembly of your own (catches transposed
        element blocks).

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
    free: Any = None        # with eliminated dofs: original index of each free dof
    n_full: int | None = None
    lift: Any = None        # Bᴴ (p × n_free): θ ↦ Σᵢ θᵢ Kᵢ,fd g, read transposed
    lift0: Any = None       # K₀,fd g (n_free,)
    fixed_values: Any = None  # (n_full,): g on the fixed dofs, 0 on the free ones

    @property
    def n_params(self) -> int:
        """p, the number of parameters (the length of θ; one per element for from_elements)."""
        return self.MH.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        """The shape of every K(θ): (n, n) over the free dofs for from_elements/from_coo."""
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
        off = None
        if offset is not None:
            off = _as_sparse(offset, "offset")
            if off.shape != shape:
                raise ShapeError(f"offset.shape={off.shape} but the family's shape={shape}")
        return cls._assembled(pattern, _adjoint_of_scipy(M), None if off is None else (off, None))

    @classmethod
    def from_elements(cls, Ke, dofs, n: int, fixed=None, offset=None, *,
                      fixed_values=None) -> "AffineSparse":
        """Finite-element family K(θ) = K₀ + Σₑ θₑ Pₑᵀ Keₑ Pₑ with Dirichlet dofs eliminated.

        Pₑ picks element e's k dofs out of n; θₑ scales its stiffness. **Orientation:**
        ``Ke[e][a, b]`` is added to ``K[dofs[e, a], dofs[e, b]]`` — row a is the *test*
        function, column b the *trial* function, ``Ke[e][a, b] = a(φ_b, φ_a)`` for the
        bilinear form a(u, v). For a nonsymmetric form the transpose gives Kᵀ without any
        error; scikit-fem's ``COOData.tolocal()`` returns exactly that transpose (use
        :meth:`from_coo` on the ``COOData`` instead, or ``np.swapaxes(local, 1, 2)``), and
        ``linops.testing.check_family`` tells a transposed family from a wrong one.

        The family acts on the free dofs in their original order (``fam.free`` lists them;
        ``fam.expand(u)`` scatters a free vector back to length n). Eliminating a Dirichlet dof
        removes its row and column; prescribed values ``fixed_values`` = g move to the
        right-hand side, ``fam.rhs(θ, f)`` = f − K_fd(θ) g, and ``fam.pullback(G, bbar=...)``
        adds their share of the θ-gradient.

        Parameters
        ----------
        Ke : array of shape (k, k) or (ne, k, k)
            One element matrix shared by all elements, or one per element (row = test,
            column = trial, as above).
        dofs : integer array of shape (ne, k)
            Global dof numbers in [0, n) of each element's k local dofs, in Ke's order.
        n : int
            The number of dofs before elimination.
        fixed : array_like of int, or boolean mask of length n, optional
            Dofs to eliminate (repeats are harmless).
        offset : sparse matrix, optional
            A constant K₀ (e.g. z·I for a resolvent), either on the free dofs,
            (n_free, n_free), or on all n dofs, (n, n), eliminated like the elements (its
            free × fixed block then enters ``rhs``).
        fixed_values : scalar or array, optional
            g, the prescribed values: one per entry of ``fixed``, or a length-n vector read at
            the fixed dofs (when both lengths agree, one per entry of ``fixed``); needs
            ``fixed``. Default: homogeneous conditions (g = 0, no lift).

        Returns
        -------
        AffineSparse
            Of shape (n_free, n_free), with ``n_params == ne``, ``free`` and ``n_full == n``.

        Raises
        ------
        ShapeError
            If dofs is not a 2-D integer array, Ke's shape does not match it, a dof or a fixed
            dof is outside [0, n), fixed_values does not match ``fixed``, or the offset's
            shape is neither (n_free, n_free) nor (n, n).
        ValueError
            If ``fixed_values`` is given without ``fixed``, or gives one dof two values.

        Notes
        -----
        Cost O(ne·k²) time, and memory for little more than what the family keeps (Mᴴ: one
        index and one value per element entry; the pattern). K's pattern is the pattern of
        E Eᵀ (E the dof-element incidence, a boolean sparse product: no count that could
        wrap), each element entry finds its slot by a search within its row, in chunks, and
        since CSR slots grow with (row, column), ordering each element's dofs orders its
        slots: Mᴴ (elements × slots) is written directly in CSR. A mesh whose elements all
        list their dofs in one relative order (a structured grid) skips the per-element sort.
        Elements that repeat a dof take the general route of :meth:`from_coo` (a sort within
        each row). ``fam(θ)`` and ``pullback`` are one SpMV each.

        Examples
        --------
        Two 1-D bar elements on three nodes, node 0 clamped:

        >>> import numpy as np
        >>> fam = AffineSparse.from_elements(np.array([[1.0, -1.0], [-1.0, 1.0]]),
        ...                                  np.array([[0, 1], [1, 2]]), 3, fixed=[0])
        >>> fam(np.array([1.0, 2.0])).to_scipy().toarray().tolist()
        [[3.0, -2.0], [-2.0, 2.0]]

        The same bar with u = 1 prescribed at node 0: the lifted right-hand side.

        >>> lifted = AffineSparse.from_elements(np.array([[1.0, -1.0], [-1.0, 1.0]]),
        ...                                     np.array([[0, 1], [1, 2]]), 3, fixed=[0],
        ...                                     fixed_values=[1.0])
        >>> lifted.rhs(np.array([1.0, 2.0])).tolist()          # f − K_fd(θ) g with f = 0
        [1.0, 0.0]
        """
        dofs, Ke = _check_elements(Ke, dofs, n)
        bc = _Dirichlet(n, fixed, fixed_values)
        pattern, MH, lift = _element_maps(Ke, dofs, bc, dofs.shape[0])
        return cls._assembled(pattern, MH, _offset(offset, bc), bc, lift)

    @classmethod
    def from_coo(cls, rows, cols=None, values=None, param=None, *, shape=None,
                 n_params: int | None = None, offset=None, fixed=None,
                 fixed_values=None) -> "AffineSparse":
        """The family K(θ) = K₀ + Σᵢ θᵢ Kᵢ from assembly triplets: entry k adds
        ``θ[param[k]] · values[k]`` to ``K[rows[k], cols[k]]``.

        This is the form finite-element codes already produce, taken as it is: top88's
        ``iK, jK, sK`` (``sK`` at θ = 1, i.e. ``KE`` tiled, with ``param`` the element of each
        triplet), or scikit-fem's ``COOData`` (``form.elemental(basis)``, or ``asm(form,
        basis, to=list)``), passed alone: ``from_coo(coo)`` takes its indices, data and shape
        and gives each element its own parameter. Rows are test functions and columns trial
        functions, as in every assembled matrix, so no element block can be transposed on
        the way. Repeated positions are summed; explicit zeros stay in the pattern. Fixed
        dofs are eliminated and prescribed values lifted as in :meth:`from_elements`.

        Parameters
        ----------
        rows : integer array of shape (N,), or a ``COOData``
            Row (test dof) of each triplet, in [0, n); or an object with ``indices`` (2, N),
            ``data`` (N,), ``shape`` and ``local_shape`` (scikit-fem's ``COOData``), in which
            case ``cols`` and ``values`` are not given.
        cols : integer array of shape (N,)
            Column (trial dof) of each triplet.
        values : array of shape (N,)
            The triplets' values at θ = 1 (real or complex).
        param : integer array of shape (N,), optional
            The parameter that scales each triplet, in [0, n_params). Required for plain
            triplets; for a ``COOData`` with ``local_shape`` it defaults to the element of
            each triplet (one θ per element, element order of the mesh).
        shape : int or (n, n), optional
            K's shape before elimination; required for plain triplets (a ``COOData`` carries
            it).
        n_params : int, optional
            p, the length of θ (default ``max(param) + 1``).
        offset, fixed, fixed_values
            As in :meth:`from_elements`.

        Returns
        -------
        AffineSparse
            Of shape (n_free, n_free), ``n_params`` parameters, ``free`` and ``n_full == n``.

        Raises
        ------
        ShapeError
            Triplet arrays of different lengths, an index or parameter out of range, a
            non-square or missing ``shape``, or the inputs of ``fixed``/``offset`` as in
            :meth:`from_elements`.
        TypeError
            Non-integer indices or parameters, a ``COOData`` together with ``cols``/``values``,
            or ``param`` missing where it cannot be inferred.

        Notes
        -----
        Triplets that come in element blocks — each parameter owning the k² entries of k
        dofs, laid out element after element (top88) or entry after entry (scikit-fem) — are
        recognised in O(N) and take :meth:`from_elements`' route. Anything else is sorted
        within rows (scipy's compiled COO → CSR, then a per-row sort of column × parameter
        keys): O(N) plus short sorts. Either way ``fam(θ)`` and ``pullback`` are one SpMV each.

        Examples
        --------
        top88's triplets for two 1-D bar elements (``sK`` at θ = 1):

        >>> import numpy as np
        >>> KE = np.array([[1.0, -1.0], [-1.0, 1.0]])
        >>> edof = np.array([[0, 1], [1, 2]])
        >>> iK, jK = np.kron(edof, np.ones((2, 1), int)).ravel(), np.kron(edof, np.ones((1, 2), int)).ravel()
        >>> sK = np.tile(KE.ravel(order="F"), 2)
        >>> fam = AffineSparse.from_coo(iK, jK, sK, np.repeat([0, 1], 4), shape=3, fixed=[0])
        >>> fam(np.array([1.0, 2.0])).to_scipy().toarray().tolist()
        [[3.0, -2.0], [-2.0, 2.0]]
        """
        rows, cols, values, param, n = _check_coo(rows, cols, values, param, shape)
        bc = _Dirichlet(n, fixed, fixed_values)
        blocks = _element_blocks(rows, cols, values, param, n_params)
        if blocks is not None:          # the ranges follow from the blocks' dofs and count
            Ke, dofs = blocks
            P = dofs.shape[0] if n_params is None else int(n_params)
            _check_range("rows and cols", dofs, n, f"shape={(n, n)}")
            pattern, MH, lift = _element_maps(Ke, dofs, bc, P)
        else:
            P = _check_coo_ranges(rows, cols, param, n, n_params)
            pattern, MH, lift = _coo_maps(rows, cols, values, param, bc, P)
        return cls._assembled(pattern, MH, _offset(offset, bc), bc, lift)

    @classmethod
    def _assembled(cls, pattern: Pattern, MH: Sparse, offset, bc=None, lift=None) -> "AffineSparse":
        """The family from its parts: the offset's pattern joins K's (Mᴴ's columns move to
        their slots in the union, an order-preserving map: no sort)."""
        free = n_full = g = lift0 = None
        if bc is not None:
            free, n_full, g = bc.free, bc.n, bc.g
        off_vals = None
        if offset is not None:
            off, lift0 = offset
            if off.pattern != pattern:
                union = pattern.union(off.pattern)
                slot, _ = union.locate(pattern.rows, pattern.indices)
                MH = Sparse(MH.values, Pattern._trusted(MH.pattern.indptr,
                                                        slot[MH.pattern.indices],
                                                        (MH.shape[0], union.nnz)))
                pattern = union
            off_vals = np.zeros(pattern.nnz, dtype=np.result_type(MH.dtype, off.dtype))
            s_off, _ = pattern.locate(off.pattern.rows, off.pattern.indices)
            off_vals[s_off] = np.asarray(off.values)
            off_vals = seal(off_vals)
        return cls(pattern, MH, off_vals, free, n_full, lift, lift0, g)

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
        self._check_theta(theta)
        be = backend_of(theta)
        MH = self._on(be, "MH")
        values = be.spmm_adjoint(MH.values, MH.pattern, theta)  # M θ = (Mᴴ)ᴴ θ
        if self.offset is not None:
            values = values + self._on(be, "offset")
        return Sparse(seal(values), self.pattern)

    def rhs(self, theta, f=None):
        """The right-hand side on the free dofs, with the prescribed values lifted:
        b(θ) = f − K_fd(θ) g, where K_fd is K's free × fixed block and g ``fixed_values``.

        Solving K(θ) u = b(θ) gives the free dofs of the solution with u = g on the fixed
        ones (``fam.expand(u)`` puts g there). Without ``fixed_values`` this is f on the free
        dofs. Cost: one SpMV with the lift map, O(entries of elements that touch a fixed dof).
        Linear in θ: its gradient is ``pullback(..., bbar=b̄)``.

        Parameters
        ----------
        theta : array of shape (n_params,)
            numpy, cupy or jax (traceable, like ``fam(θ)``).
        f : array of shape (n_free,) or (n_full,), optional
            The load: on the free dofs, or on all dofs (read at the free ones). A second axis
            (several loads with the same prescribed values) is kept. Default 0.

        Returns
        -------
        array of shape (n_free,) (or (n_free, k))
            In θ's backend.

        Raises
        ------
        ShapeError
            If theta is not of length n_params, or f is neither n_free nor n_full long.

        Examples
        --------
        A bar clamped at node 0 with u₀ = 2 prescribed, unit loads elsewhere:

        >>> import numpy as np
        >>> fam = AffineSparse.from_elements(np.array([[1.0, -1.0], [-1.0, 1.0]]),
        ...                                  np.array([[0, 1], [1, 2]]), 3, fixed=[0],
        ...                                  fixed_values=2.0)
        >>> fam.rhs(np.array([3.0, 1.0]), np.ones(3)).tolist()    # f − θ₀·(−1)·2 at node 1
        [7.0, 1.0]
        """
        self._check_theta(theta)
        be = backend_of(theta)
        xp = be.xp
        nf = self.shape[0]
        if f is None:
            out = xp.zeros(nf, dtype=np.result_type(theta.dtype, self.MH.dtype))
        else:
            f = xp.asarray(f) if not hasattr(f, "shape") else f
            if f.ndim not in (1, 2) or f.shape[0] not in (nf, self.n_full or nf):
                raise ShapeError(f"rhs: f.shape={tuple(f.shape)} but the family has {nf} free "
                                 f"dofs of {self.n_full or nf}")
            out = f.copy() if f.shape[0] == nf else f[be.index(self.free)]
        if self.lift is None and self.lift0 is None:
            return out
        lift = 0
        if self.lift is not None:
            L = self._on(be, "lift")
            lift = be.spmm_adjoint(L.values, L.pattern, theta)       # B θ
        if self.lift0 is not None:
            lift = lift + self._on(be, "lift0")
        return out - (lift[:, None] if out.ndim == 2 else lift)

    def pullback(self, G, *, bbar=None, real: bool = True):
        """θ̄ᵢ = ⟨Kᵢ, G⟩_F for a cotangent G (lazy, sparse or dense operator), plus the
        lifted right-hand side's share −⟨Kᵢ,fd g, b̄⟩ when ``bbar`` is given. Real part when
        ``real`` (real θ). Cost O(nnz·rank(G) + nnz(M)); never forms an n×n array.

        This is the chain rule through K(θ) (and b(θ) = ``rhs(θ, f)``): given G = ∂f/∂K
        (``g.A`` of ``adjoints.solve_pullback``, e.g. ``RankOne(−λ, u)``) and b̄ = ∂f/∂b
        (``g.b`` = λ), it returns ∂f/∂θ. Only G's entries on the family's pattern matter, so G
        is sampled there (SDDMM for a low-rank G) and contracted with Mᴴ.

        Parameters
        ----------
        G : operator or anything ``aslinop`` accepts
            Of the family's shape: the cotangent of K (``g.A``, not the ``SolveCotangent``).
        bbar : array of shape (n_free,), or 0, optional
            The cotangent of the right-hand side b(θ) = ``fam.rhs(θ, f)`` (``g.b``). Required
            for a family with ``fixed_values`` (its right-hand side depends on θ); pass 0 if
            your right-hand side does not come from ``fam.rhs``.
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
            If G's or bbar's shape is not the family's.
        TypeError
            If G is a ``SolveCotangent`` (pass ``g.A``, and ``bbar=g.b`` for a lifted family).
        ValueError
            If the family lifts prescribed values and ``bbar`` is missing.
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
        if hasattr(G, "A") and hasattr(G, "b") and type(G).__name__ == "SolveCotangent":
            more = (" and bbar=g.b (this family lifts fixed_values into its right-hand side)"
                    if self.lift is not None else "")
            raise TypeError(f"fam.pullback takes the cotangent of K, an operator; got a "
                            f"SolveCotangent: pass g.A{more}, as in fam.pullback(g.A"
                            f"{', bbar=g.b' if more else ''})")
        if self.lift is not None and bbar is None:
            raise ValueError("this family lifts fixed_values into the right-hand side "
                             "b(θ) = fam.rhs(θ, f), which depends on θ: pass bbar=g.b (the "
                             "cotangent of b, e.g. SolveCotangent.b), or bbar=0 if your "
                             "right-hand side does not come from fam.rhs")
        G = as_operator(G, "AffineSparse.pullback")
        if G.shape != self.shape:
            raise ShapeError(f"pullback: G.shape={G.shape} but the family's shape={self.shape}")
        g = sample_pattern(G, self.pattern)
        be = backend_of(g)
        out = self._on(be, "MH") @ g
        if self.lift is not None and not _is_zero(bbar):
            if not hasattr(bbar, "shape") or tuple(bbar.shape) != (self.shape[0],):
                raise ShapeError(f"pullback: bbar.shape={tuple(getattr(bbar, 'shape', ()))} "
                                 f"but the right-hand side has shape ({self.shape[0]},)")
            out = out - self._on(backend_of(bbar), "lift") @ bbar       # −Bᴴ b̄
        return be.xp.real(out) if real else out

    @cached_property
    def M(self) -> Sparse:
        """M (nnz × p): column i holds Kᵢ's values on the pattern. Built on first request from
        Mᴴ (O(nnz(M)), then kept); ``fam(θ)`` and ``pullback`` never need it."""
        return self.MH.adjoint()

    def _check_theta(self, theta) -> None:
        if getattr(theta, "ndim", None) != 1 or theta.shape[0] != self.n_params:
            raise ShapeError(f"theta must have shape ({self.n_params},), got "
                             f"shape={tuple(getattr(theta, 'shape', ()))}")

    def _on(self, be, name: str):
        """A stored map (Mᴴ, Bᴴ) or vector (offset, b₀) for backend ``be``: numpy/jax use the
        host arrays (jax embeds them as constants); where indices live on a device (cupy) a
        device copy is made once per family and kept."""
        host = getattr(self, name)
        is_map = isinstance(host, Sparse)
        if not be.device_indices:
            return host if is_map else be.from_host(host)
        cache = self.__dict__.setdefault("_device", {})
        if name not in cache:
            cache[name] = (Sparse(be.from_host(host.values), host.pattern) if is_map
                           else be.from_host(host))
        return cache[name]

    def expand(self, u_free, fill=None):
        """Scatter a vector on the free dofs back to all n dofs (fixed ones get ``fill``, by
        default the prescribed values ``fixed_values``, or 0).

        For plotting or post-processing a solution of K(θ) u = b on the full mesh. A family
        without eliminated dofs (``from_terms``) returns ``u_free`` itself.

        Parameters
        ----------
        u_free : array of shape (n_free,) or (n_free, k)
        fill : scalar, optional
            The value at the fixed dofs; default the family's ``fixed_values`` (0 without).

        Returns
        -------
        array of shape (n,) or (n, k)
            A new array in u_free's backend and dtype (promoted to hold ``fixed_values``).

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
        shape = (self.n_full,) + tuple(u_free.shape[1:])
        if fill is None and self.fixed_values is not None:
            g = self.fixed_values.astype(np.result_type(u_free.dtype, self.fixed_values.dtype))
            out = be.from_host(np.repeat(g[:, None], shape[1], axis=1) if len(shape) == 2 else g)
        else:
            out = be.xp.full(shape, 0.0 if fill is None else fill, dtype=u_free.dtype)
        return be.put(out, be.index(self.free), u_free)


# ----- Dirichlet data ---------------------------------------------------------------------------
class _Dirichlet:
    """Which dofs are free, their new numbers, and the prescribed values g (or None)."""

    def __init__(self, n: int, fixed, fixed_values):
        n = int(n)
        is_free = np.ones(n, dtype=bool)
        fixed_idx = None
        if fixed is not None:
            fx = np.asarray(fixed)
            if fx.dtype == bool:
                if fx.shape != (n,):
                    raise ShapeError(f"a boolean fixed mask must have shape ({n},), got "
                                     f"fixed.shape={fx.shape}")
                fixed_idx = np.flatnonzero(fx)
            elif fx.size == 0 or np.issubdtype(fx.dtype, np.integer):
                fixed_idx = fx.astype(np.int64).reshape(-1)
            else:
                raise ShapeError(f"fixed must hold integer dof numbers (or be a boolean mask), "
                                 f"got dtype={fx.dtype}")
            if fixed_idx.size and (fixed_idx.min() < 0 or fixed_idx.max() >= n):
                raise ShapeError(f"fixed dofs out of range [0, {n}): min={fixed_idx.min()}, "
                                 f"max={fixed_idx.max()}")
            is_free[fixed_idx] = False
        self.g = None
        if fixed_values is not None:
            if fixed_idx is None:
                raise ValueError("fixed_values needs fixed= (the dofs the values belong to)")
            fv = np.asarray(fixed_values)
            if fv.dtype.kind not in "biufc":
                raise ShapeError(f"fixed_values must be numbers, got dtype={fv.dtype}")
            g = np.zeros(n, dtype=np.result_type(fv.dtype, np.float64))
            if fv.ndim == 0:
                g[fixed_idx] = fv
            elif fv.shape == (fixed_idx.size,):
                g[fixed_idx] = fv
                if not np.array_equal(g[fixed_idx], fv):
                    k = int(np.flatnonzero(g[fixed_idx] != fv)[0])
                    raise ValueError(f"fixed dof {fixed_idx[k]} is listed twice with different "
                                     f"fixed_values ({fv[k]} and {g[fixed_idx[k]]})")
            elif fv.shape == (n,):
                g[~is_free] = fv[~is_free]
            else:
                raise ShapeError(f"fixed_values.shape={fv.shape} but fixed lists "
                                 f"{fixed_idx.size} dofs of n={n}: give one value per entry of "
                                 f"fixed, a length-{n} vector, or a scalar")
            g.setflags(write=False)
            self.g = g
        self.n, self.is_free = n, is_free
        self.free = np.flatnonzero(is_free)
        self.nf = int(self.free.size)
        self.newidx = np.full(n, -1, dtype=index_dtype(0, (n, n)))
        self.newidx[self.free] = np.arange(self.nf)
        self.free.setflags(write=False)


def _offset(offset, bc: _Dirichlet):
    """(K₀ on the free dofs as a Sparse, b₀ = K₀,fd g or None), or None without an offset."""
    if offset is None:
        return None
    off = _as_sparse(offset, "offset")
    nf, n = bc.nf, bc.n
    if off.shape == (nf, nf):
        return off, None
    if off.shape != (n, n):
        raise ShapeError(f"offset.shape={off.shape} but the family's shape=({nf}, {nf}) on the "
                         f"free dofs (or ({n}, {n}) on all dofs, eliminated like the elements)")
    S = off.to_scipy().tocsr()
    rows = S[bc.free]
    lift0 = None
    if bc.g is not None:
        fixed = np.flatnonzero(~bc.is_free)
        lift0 = seal(np.asarray(rows[:, fixed] @ bc.g[fixed]))
    return Sparse.from_scipy(rows[:, bc.free]), lift0


# ----- element blocks ---------------------------------------------------------------------------
def _check_elements(Ke, dofs, n):
    dofs = np.asarray(dofs)
    if dofs.ndim != 2 or not np.issubdtype(dofs.dtype, np.integer):
        raise ShapeError(f"dofs must be an integer array (ne, k), got shape={dofs.shape}, "
                         f"dtype={dofs.dtype}")
    ne, k = dofs.shape
    Ke = np.asarray(Ke)
    if Ke.shape not in ((k, k), (ne, k, k)):
        raise ShapeError(f"Ke must be (k, k)=({k}, {k}) or (ne, k, k)=({ne}, {k}, {k}) for "
                         f"dofs.shape={dofs.shape}, got Ke.shape={Ke.shape}")
    if Ke.dtype.kind in "biu":
        Ke = Ke.astype(np.float64)
    if dofs.size and (dofs.min() < 0 or dofs.max() >= n):
        raise ShapeError(f"dofs out of range [0, {n}): min={dofs.min()}, max={dofs.max()}")
    return dofs, Ke


def _element_maps(Ke, dofs, bc: _Dirichlet, n_params: int):
    """(pattern, Mᴴ, Bᴴ or None) of an element family; elements that repeat a dof go through
    the general COO route."""
    ne, k = dofs.shape
    order, ds = _sorted_dofs(dofs, bc.newidx)            # free numbers, -1 for fixed dofs
    if order is None:                                    # an element repeats a dof
        return _coo_maps(*_element_triplets(Ke, dofs), bc, n_params)
    pattern = _element_pattern(ds, bc.nf)
    MH = _element_map(Ke, order, ds, pattern, n_params)
    lift = _element_lift(Ke, dofs, bc, n_params) if bc.g is not None else None
    return pattern, MH, lift


def _sorted_dofs(dofs, newidx):
    """(order, ds): each element's dofs in ascending order — one (k,) permutation when all
    elements share it (structured meshes: no per-element sort), else (ne, k) — and their
    free numbers ``newidx[dofs]`` in that order; (None, None) if an element repeats a dof.
    The common order is checked column pair by column pair (no sorted copy of dofs)."""
    ne, k = dofs.shape
    p0 = np.argsort(dofs[0], kind="stable") if ne else np.arange(k)
    if k < 2 or all(bool(np.all(dofs[:, p0[a + 1]] > dofs[:, p0[a]])) for a in range(k - 1)):
        return p0, np.take(newidx, dofs)[:, p0]
    order = np.argsort(dofs, axis=1, kind="stable")
    sd = np.take_along_axis(dofs, order, axis=1)
    if bool(np.any(sd[:, 1:] == sd[:, :-1])):
        return None, None
    return order, newidx[sd]


def _element_pattern(ds, nf: int) -> Pattern:
    """K's pattern = pattern(E Eᵀ), E the free-dof × element incidence, as a boolean sparse
    product (logical or: a dof shared by any number of elements cannot wrap to zero)."""
    import scipy.sparse as sp

    ne = ds.shape[0]
    live = ds >= 0
    nlive = live.sum(axis=1)
    it = index_dtype(int(nlive.sum()), (ne, nf))
    indptr = np.zeros(ne + 1, dtype=it)
    np.cumsum(nlive, out=indptr[1:])
    Et = sp.csr_array((np.ones(int(indptr[-1]), dtype=bool), ds[live].astype(it, copy=False),
                       indptr), shape=(ne, nf))
    KP = Et.T.tocsr() @ Et
    del Et
    KP.sort_indices()               # in place: a transposed copy would be one more fresh K
    return Pattern._trusted(KP.indptr, KP.indices, (nf, nf))


def _element_map(Ke, order, ds, pattern: Pattern, n_params: int) -> Sparse:
    """Mᴴ (parameters × slots) in CSR: element e's live pairs, in sorted-dof order, are its
    row; their slots ascend with (row, column), so the row is canonical as written.

    Chunks of ``_CHUNK`` samples through buffers allocated once (a fresh large array per
    chunk would pay its page faults every time); the outputs are written in place."""
    ne, k = ds.shape
    kk = k * k
    live = ds >= 0
    nlive = live.sum(axis=1).astype(np.int64)
    N = int((nlive * nlive).sum())
    mit = index_dtype(N, (n_params, pattern.nnz))
    mh_indptr = np.full(n_params + 1, N, dtype=mit)
    mh_indptr[0] = 0
    np.cumsum(nlive * nlive, out=mh_indptr[1:ne + 1])
    slots = np.empty(N, dtype=mit)
    coef = np.empty(N, dtype=Ke.dtype)
    pit = pattern.indices.dtype
    search = _slot_search(pattern)
    step = max(1, _CHUNK // kk)
    nb = min(step, ne)
    found = np.empty(nb * kk, dtype=pit)
    mask = np.empty(nb * kk, dtype=bool)
    kbuf = np.empty((nb, kk), dtype=Ke.dtype)
    flat = (order[..., :, None] * k + order[..., None, :]).reshape(order.shape[:-1] + (kk,))
    if order.ndim == 1 and Ke.ndim == 2:
        kbuf[...] = Ke.reshape(-1)[flat]                # one element matrix, one dof order
    part_none = np.zeros(0, dtype=np.int64)
    for e0 in range(0, ne, step):
        e1 = min(ne, e0 + step)
        nc = e1 - e0
        o0, o1 = int(mh_indptr[e0]), int(mh_indptr[e1])
        d = ds[e0:e1].astype(pit, copy=False)
        r, c, f = np.repeat(d, k, axis=1).reshape(-1), np.tile(d, (1, k)).reshape(-1), found[:nc * kk]
        search(r, c, f)                                 # a fixed dof (-1) finds some slot: masked
        kc = kbuf[:nc]
        if order.ndim == 2 and Ke.ndim == 2:
            np.take(Ke.reshape(-1), flat[e0:e1], out=kc)
        elif order.ndim == 1 and Ke.ndim == 3:
            np.take(Ke[e0:e1].reshape(nc, kk), flat, axis=1, out=kc)
        elif Ke.ndim == 3:
            kc[...] = np.take_along_axis(Ke[e0:e1].reshape(nc, kk), flat[e0:e1], axis=1)
        kf = kc.reshape(-1)
        part = np.flatnonzero(nlive[e0:e1] < k) if o1 - o0 < nc * kk else part_none
        if part.size * 8 > nc:                          # many elements touch fixed dofs
            m = mask[:nc * kk]
            np.minimum(r, c, out=r)                     # r is spent
            np.greater_equal(r, 0, out=m)
            np.compress(m, f, out=slots[o0:o1])
            np.compress(m, kf, out=coef[o0:o1])
            continue
        # runs of full elements are copied whole; the few partial ones keep their live pairs
        lo_ = 0
        for hi in (*part.tolist(), nc):
            if hi > lo_:
                a, b = int(mh_indptr[e0 + lo_]), int(mh_indptr[e0 + hi])
                slots[a:b] = f[lo_ * kk:hi * kk]
                coef[a:b] = kf[lo_ * kk:hi * kk]
            lo_ = hi + 1
        if part.size:
            ix = (part[:, None] * kk + np.arange(kk)).reshape(-1)
            lm = np.minimum(r[ix], c[ix]) >= 0
            counts = (nlive[e0 + part] ** 2).astype(np.int64)
            start = mh_indptr[e0 + part].astype(np.int64) - (np.cumsum(counts) - counts)
            dest = np.arange(int(counts.sum())) + np.repeat(start, counts)
            slots[dest] = f[ix][lm]
            coef[dest] = kf[ix][lm]
    if N and int(slots.min()) < 0:  # pragma: no cover - an internal invariant
        raise RuntimeError("from_elements: an element entry has no slot in the pattern")
    if Ke.dtype.kind == "c":
        np.conjugate(coef, out=coef)
    return Sparse(seal(coef), Pattern._trusted(mh_indptr, slots, (n_params, pattern.nnz)))


def _slot_search(pattern: Pattern):
    """out[k] = slot of (rows[k], cols[k]) in the canonical pattern (all present): scipy's
    compiled per-row search (csr_sample_offsets), or a global searchsorted without it."""
    indptr, indices = pattern.indptr, pattern.indices
    n_row, n_col = pattern.shape
    try:
        from scipy.sparse._sparsetools import csr_sample_offsets
    except ImportError:  # pragma: no cover - scipy private API moved
        keys = pattern.rows.astype(np.int64) * n_col + indices

        def search(rows, cols, out):
            out[...] = np.searchsorted(keys, rows.astype(np.int64) * n_col + cols)
        return search

    def search(rows, cols, out):
        csr_sample_offsets(n_row, n_col, indptr, indices, rows.size, rows, cols, out)
    return search


def _element_lift(Ke, dofs, bc: _Dirichlet, n_params: int) -> Sparse:
    """Bᴴ for the prescribed values: column e of B is element e's free × fixed block times g,
    from the elements that touch both kinds of dof only."""
    import scipy.sparse as sp

    fx = ~bc.is_free[dofs]
    touch = np.flatnonzero(fx.any(axis=1) & ~fx.all(axis=1))
    d = dofs[touch]
    Kt = Ke[touch] if Ke.ndim == 3 else Ke
    gl = np.where(fx[touch], bc.g[d], 0)
    contrib = np.einsum("eab,eb->ea", np.broadcast_to(Kt, (touch.size,) + Ke.shape[-2:]), gl)
    r = bc.newidx[d]
    keep = r >= 0
    e = np.broadcast_to(touch[:, None], d.shape)
    B = sp.csr_array((contrib[keep], (r[keep], e[keep])), shape=(bc.nf, n_params))
    return _adjoint_of_scipy(B)


def _element_triplets(Ke, dofs):
    """All ne·k² (row, col, value, element) triplets of an element family."""
    ne, k = dofs.shape
    r = np.broadcast_to(dofs[:, :, None], (ne, k, k)).reshape(-1)
    c = np.broadcast_to(dofs[:, None, :], (ne, k, k)).reshape(-1)
    v = np.broadcast_to(Ke, (ne, k, k)).reshape(-1)
    p = np.repeat(np.arange(ne), k * k)
    return r, c, v, p


# ----- COO triplets -----------------------------------------------------------------------------
def _check_coo(rows, cols, values, param, shape):
    """Flat (rows, cols, values, param) of checked lengths and dtypes, and n; a COOData is
    unpacked here. Index ranges are checked by the route that takes them."""
    import scipy.sparse as sp

    if sp.issparse(rows) or isinstance(rows, Sparse):
        raise TypeError(f"from_coo takes triplets (rows, cols, values, param) or a scikit-fem "
                        f"COOData, got a sparse matrix ({type(rows).__name__}): for a family of "
                        f"whole matrices use AffineSparse.from_terms([K1, K2, ...])")
    if hasattr(rows, "indices") and hasattr(rows, "data") and not isinstance(rows, np.ndarray):
        coo = rows
        if cols is not None or values is not None:
            raise TypeError("from_coo: pass a COOData alone (its indices and data are the "
                            "triplets), not together with cols/values")
        ind = np.asarray(coo.indices)
        if ind.ndim != 2 or ind.shape[0] != 2:
            raise ShapeError(f"from_coo: COOData.indices must have shape (2, N), got "
                             f"{ind.shape} (a bilinear form's data, not a linear form's)")
        rows, cols, values = ind[0], ind[1], np.asarray(coo.data)
        if shape is None:
            shape = tuple(coo.shape)
        if param is None:
            local = getattr(coo, "local_shape", None)
            if local is None:
                raise TypeError("from_coo: this COOData has no local_shape (a sum of forms?), "
                                "so its element of each triplet is unknown: pass param=")
            per = int(np.prod(local))
            if per == 0 or values.size % per:
                raise ShapeError(f"from_coo: COOData with local_shape={tuple(local)} holds "
                                 f"{values.size} triplets, not a multiple of {per}")
            ne = values.size // per
            param = np.tile(np.arange(ne, dtype=index_dtype(0, (ne, ne))), per)
    elif cols is None or values is None or param is None:
        missing = [nm for nm, x in (("cols", cols), ("values", values), ("param", param))
                   if x is None]
        raise TypeError(f"from_coo(rows, cols, values, param, shape=...) is missing "
                        f"{', '.join(missing)}")
    if shape is None:
        raise ShapeError("from_coo needs shape=n (or (n, n)): K's size before elimination")
    shape = (int(shape), int(shape)) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(f"from_coo builds square families: shape={shape}")
    n = shape[0]
    arrays = {}
    for name, a in (("rows", rows), ("cols", cols), ("values", values), ("param", param)):
        a = np.asarray(a)
        if a.ndim != 1:
            a = a.reshape(-1)
        if a.size == 0 and name != "values":
            a = a.astype(np.int64)
        arrays[name] = a
    N = arrays["rows"].size
    sizes = {k: v.size for k, v in arrays.items()}
    if len(set(sizes.values())) != 1:
        raise ShapeError(f"from_coo: the triplet arrays differ in length: {sizes}")
    for name in ("rows", "cols", "param"):
        a = arrays[name]
        if not (np.issubdtype(a.dtype, np.integer) or (a.size == 0)):
            raise TypeError(f"from_coo: {name} must be integers, got dtype={a.dtype}")
    vals = arrays["values"]
    if vals.dtype.kind not in "biufc":
        raise TypeError(f"from_coo: values must be numbers, got dtype={vals.dtype}")
    if vals.dtype.kind in "biu":
        arrays["values"] = vals.astype(np.float64)
    return arrays["rows"], arrays["cols"], arrays["values"], arrays["param"], n


def _check_range(name: str, a, n: int, what: str) -> None:
    if a.size and (a.min() < 0 or a.max() >= n):
        raise ShapeError(f"from_coo: {name} out of range [0, {n}) for {what}: min={a.min()}, "
                         f"max={a.max()}")


def _check_coo_ranges(rows, cols, param, n: int, n_params) -> int:
    """Range checks of general triplets; returns p (``max(param) + 1`` by default)."""
    _check_range("rows", rows, n, f"shape={(n, n)}")
    _check_range("cols", cols, n, f"shape={(n, n)}")
    pmax = int(param.max()) if param.size else -1
    P = pmax + 1 if n_params is None else int(n_params)
    if param.size and (param.min() < 0 or pmax >= P):
        raise ShapeError(f"from_coo: param out of range [0, {P}) (n_params={n_params}): "
                         f"min={param.min()}, max={pmax}")
    return P


def _element_blocks(rows, cols, values, param, P):
    """(Ke (ne, k, k) view, dofs (ne, k)) when the triplets are element blocks: parameter e
    owns the k² pairs of k dofs, element after element (top88: param = e repeated k² times)
    or entry after entry (scikit-fem: param = 0 … ne−1 repeated); else None. O(N) checks."""
    N = rows.size
    ne = int(param[-1]) + 1 if N else 0
    if ne < 1 or N % ne or (P is not None and ne > P):
        return None
    L = N // ne
    k = int(round(L ** 0.5))
    if k * k != L:
        return None
    e = np.arange(ne, dtype=param.dtype)
    if np.array_equal(param[::L], e) and _all_equal(param.reshape(ne, L), param[::L, None]):
        R, C, V = (a.reshape(ne, k, k) for a in (rows, cols, values))
    elif np.array_equal(param[:ne], e) and _all_equal(param.reshape(L, ne), param[None, :ne]):
        R, C, V = (a.reshape(k, k, ne).transpose(2, 0, 1) for a in (rows, cols, values))
    else:
        return None
    # (x, y) ↦ (row, col) = (d[x], d[y]) or (d[y], d[x]): Ke = V or its transpose per element
    if _all_equal(R, R[:, :, :1]) and _all_equal(C, C[:, :1, :]):
        d = np.ascontiguousarray(R[:, :, 0])
        if np.array_equal(d, C[:, 0, :]):
            return V, d
    elif _all_equal(R, R[:, :1, :]) and _all_equal(C, C[:, :, :1]):
        d = np.ascontiguousarray(R[:, 0, :])
        if np.array_equal(d, C[:, :, 0]):
            return V.transpose(0, 2, 1), d
    return None


def _all_equal(a, b) -> bool:
    """(a == b).all() for a broadcast b, in slices along axis 0 (no N-sized temporary)."""
    step = max(1, _CHUNK // max(1, int(np.prod(a.shape[1:]))))
    for i in range(0, a.shape[0], step):
        bi = b[i:i + step] if b.shape[0] == a.shape[0] else b
        if not np.array_equal(a[i:i + step], np.broadcast_to(bi, a[i:i + step].shape)):
            return False
    return True


def _coo_maps(rows, cols, values, param, bc: _Dirichlet, P: int):
    """(pattern, Mᴴ, Bᴴ or None) of general triplets: eliminate, then sort within rows."""
    import scipy.sparse as sp

    lift = None
    if bc.nf < bc.n:
        fr, fc = bc.is_free[rows], bc.is_free[cols]
        if bc.g is not None:
            s = np.flatnonzero(fr & ~fc)
            B = sp.csr_array((values[s] * bc.g[cols[s]], (bc.newidx[rows[s]], param[s])),
                             shape=(bc.nf, P))
            lift = _adjoint_of_scipy(B)
        keep = fr & fc
        del fr, fc
        rows, cols = bc.newidx[rows[keep]], bc.newidx[cols[keep]]
        values, param = values[keep], param[keep]
    pattern, MH = _coo_core(rows, cols, values, param, bc.nf, P)
    return pattern, MH, lift


def _coo_core(rows, cols, values, param, n: int, P: int):
    """(pattern, Mᴴ) of the triplets (rows, cols, values, param) on an n×n pattern.

    scipy's compiled COO → CSR buckets the triplets by row, carrying their positions; a
    per-row sort orders the columns; equal neighbours share a slot (the pattern). Mᴴ is then
    one more COO → CSR, by parameter: the triplets arrive in slot order, so each parameter's
    row is already sorted and repeated (parameter, slot) pairs are summed by scipy."""
    import scipy.sparse as sp
    from scipy.sparse import _sparsetools as st

    N = rows.size
    it = index_dtype(max(N, n), (n, n))
    indptr = np.empty(n + 1, dtype=it)
    scol = np.empty(N, dtype=it)
    sid = np.empty(N, dtype=it)
    st.coo_tocsr(n, n, N, rows.astype(it, copy=False), cols.astype(it, copy=False),
                 np.arange(N, dtype=it), indptr, scol, sid)
    st.csr_sort_indices(n, indptr, scol, sid)
    first = np.ones(N, dtype=bool)               # first triplet of a slot (row, col)
    if N:
        np.not_equal(scol[1:], scol[:-1], out=first[1:])
        first[indptr[:-1][indptr[:-1] < N]] = True
    slot = np.cumsum(first, dtype=np.int64)
    nnz = int(slot[-1]) if N else 0
    pattern = Pattern._trusted(np.concatenate(([0], slot))[indptr], scol[first], (n, n))
    del scol, first
    slot -= 1
    v = values[sid]
    if v.dtype.kind == "c":
        np.conjugate(v, out=v)
    MH = sp.csr_array((v, (param[sid], slot)), shape=(P, nnz))
    MH.sum_duplicates()
    return pattern, Sparse(seal(MH.data), Pattern._trusted(MH.indptr, MH.indices, (P, nnz)))


# ----- small helpers ----------------------------------------------------------------------------
def _adjoint_of_scipy(M) -> Sparse:
    """Mᴴ as a lo.Sparse from a scipy matrix (one counting-sort transposition)."""
    MH = M.conj().T if np.iscomplexobj(M.data) else M.T
    return Sparse.from_scipy(MH)


def _is_zero(x) -> bool:
    return np.ndim(x) == 0 and not isinstance(x, bool) and x == 0


def _as_sparse(K, name: str) -> Sparse:
    op = as_operator(K, f"AffineSparse {name}")
    if not isinstance(op, Sparse):
        raise TypeError(f"AffineSparse {name} must be sparse (scipy sparse or lo.Sparse), got "
                        f"{type(op).__name__}")
    return op
