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

This module is the family and what it does (products, right-hand side, pullbacks). How the
constructors build its pattern and maps is :mod:`linops._family.assembly` (their input checked and
element blocks recognised in :mod:`linops._family.assembly_input`); the eliminated dofs and
prescribed values are :mod:`linops._family.dirichlet`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, singledispatch
from typing import Any, Sequence

import numpy as np

from .._algebra import as_operator
from .assembly import assemble_coo, assemble_elements, assemble_terms
from .._backend import backend_of, seal
from .._errors import ShapeError
from .._generics import sample_pattern
from .._operators.pattern import Pattern
from .._operators.sparse import Sparse


@dataclass(frozen=True, eq=False)
class AffineSparse:
    """K(θ) = K₀ + Σᵢ θᵢ Kᵢ, stored as the union pattern plus the linear map θ ↦ values.

    The map is itself a sparse nnz×p matrix ``M`` (a :class:`Sparse`), so ``fam(θ)`` is one SpMV,
    O(nnz(M)), and the pullback of a cotangent G is ``θ̄ = Mᴴ g`` with g = G sampled on the
    pattern: O(nnz·rank(G)) for lazy G (SDDMM), O(nnz) for a Sparse G on the same pattern.
    Nothing forms an n×n array. Works for numpy, cupy and jax θ (inside ``jax.jit`` too), and for
    torch θ once ``adjoints.torch`` is imported (a differentiable torch operation).

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
        return cls(**assemble_terms(terms, offset)._asdict())

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
            Global dof numbers in [0, n) of each element's k local dofs, in Ke's order
            (k = 0 is allowed: elements without dofs contribute nothing).
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
            If ``fixed_values`` is given without ``fixed``, gives one dof two values, or
            holds NaN/Inf at a fixed dof.

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
        return cls(**assemble_elements(Ke, dofs, n, fixed, offset,
                                       fixed_values)._asdict())

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
        return cls(**assemble_coo(rows, cols, values, param, shape=shape, n_params=n_params,
                                  offset=offset, fixed=fixed,
                                  fixed_values=fixed_values)._asdict())

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
        own = family_call(theta, self)
        if own is not None:   # θ of a library that computes K(θ) itself (adjoints.torch)
            return own
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


@singledispatch
def family_call(theta, fam: AffineSparse):
    """``fam(θ)`` for a θ whose own library computes it (a rule registered by that library's
    front end, e.g. ``adjoints.torch`` for torch tensors: one differentiable operation from θ
    to K's values); None (the default) lets the backend table's SpMV do it."""
    return None


def _is_zero(x) -> bool:
    """Whether x is the scalar 0 (``bbar=0``: a right-hand side that does not use ``rhs``)."""
    return np.ndim(x) == 0 and not isinstance(x, bool) and x == 0
