"""Dirichlet conditions of a family: the fixed dofs, the free ones renumbered, and the values
prescribed at the fixed ones.

Eliminating a fixed dof removes its row and column from K; a prescribed value g moves K's
free × fixed block times g to the right-hand side, b(θ) = f − K_fd(θ) g. :class:`Dirichlet`
holds what every assembly route of :mod:`linops._family.assembly` reads (which dofs are free, their
new numbers, g), and eliminates a constant offset K₀ given on all dofs, with its share
K₀,fd g of the lift. The θ-dependent share, Bᴴ, is built by the assembly beside Mᴴ, from the
same element blocks or triplets.
"""

from __future__ import annotations

import numpy as np

from .._backend import seal
from .._errors import ShapeError
from .._operators.pattern import index_dtype
from .._operators.sparse import Sparse


class Dirichlet:
    """Which dofs are free, their new numbers, and the prescribed values g (or None).

    Built once per family from ``fixed`` and ``fixed_values`` as ``from_elements`` and
    ``from_coo`` take them (checked here, with the offending values in the message), O(n).

    Attributes
    ----------
    n, nf : int
        The number of dofs before and after elimination.
    is_free : ndarray of bool, shape (n,)
    free : ndarray of int, shape (nf,), read-only
        The original number of each free dof, ascending.
    newidx : ndarray of int, shape (n,)
        The new number of each dof, −1 for a fixed one.
    g : ndarray of shape (n,), read-only, or None
        The prescribed values at the fixed dofs, 0 at the free ones; None without
        ``fixed_values`` (homogeneous conditions, nothing to lift).

    Examples
    --------
    >>> bc = Dirichlet(4, [0, 3], [1.0, 2.0])
    >>> bc.free.tolist(), bc.newidx.tolist(), bc.g.tolist()
    ([1, 2], [-1, 0, 1, -1], [1.0, 0.0, 0.0, 2.0])
    """

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
            _check_finite_values(fv, fixed_idx, n)
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

    def eliminate_offset(self, off: Sparse):
        """(K₀ on the free dofs, b₀ = K₀,fd g or None) for a constant K₀ (a Sparse) given either
        on the free dofs, (nf, nf), as it is, or on all n dofs, (n, n), whose fixed rows and
        columns are then dropped and whose free × fixed block times g is b₀, its share of the
        lifted right-hand side. Cost O(nnz(K₀)).

        Examples
        --------
        >>> import scipy.sparse as sp
        >>> K0 = Sparse.from_scipy(sp.csr_array(np.full((3, 3), 0.5)))   # on all 3 dofs
        >>> K0f, b0 = Dirichlet(3, [0], 2.0).eliminate_offset(K0)        # g = 2 at dof 0
        >>> K0f.shape, b0.tolist()
        ((2, 2), [1.0, 1.0])
        """
        nf, n = self.nf, self.n
        if off.shape == (nf, nf):
            return off, None
        if off.shape != (n, n):
            raise ShapeError(f"offset.shape={off.shape} but the family's shape=({nf}, {nf}) on "
                             f"the free dofs (or ({n}, {n}) on all dofs, eliminated like the "
                             f"elements)")
        S = off.to_scipy().tocsr()
        rows = S[self.free]
        lift0 = None
        if self.g is not None:
            fixed = np.flatnonzero(~self.is_free)
            lift0 = seal(np.asarray(rows[:, fixed] @ self.g[fixed]))
        return Sparse.from_scipy(rows[:, self.free]), lift0


def _check_finite_values(fv, fixed_idx, n: int) -> None:
    """ValueError naming the first NaN/Inf among the values that are read: the scalar, the
    per-entry values, or a length-n vector at the fixed dofs (its free entries are ignored)."""
    if fv.ndim == 0:
        read, dofs = fv.reshape(1), None
    elif fv.shape == (fixed_idx.size,):
        read, dofs = fv, fixed_idx
    elif fv.shape == (n,):
        read, dofs = fv[fixed_idx], fixed_idx
    else:
        return  # the shape error follows
    bad = ~np.isfinite(read)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        where = "(the scalar)" if dofs is None else f"at fixed dof {int(dofs[k])}"
        raise ValueError(f"fixed_values must be finite, got {read[k]} {where} "
                         f"({int(bad.sum())} non-finite of the {read.size} values read)")
