"""The factorization queries of :mod:`._queries` as ``torch.autograd.Function`` s (``jvp``,
``vmap``) and ``torch.library.custom_op`` s (fake kernels, ``register_autograd``,
``register_vmap``), and the front end: :func:`logdet`, :func:`slogdet`, :func:`inv_sample`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from linops.internals import ShapeError

from . import _solve_ops
from ._factorization import Factorization, implicit
from ._queries import (inv_sample_backward, inv_sample_jvp, inv_sample_kernel, slogdet_backward,
                       slogdet_jvp, slogdet_kernel)

__all__ = ["SlogdetFn", "InvSampleFn", "slogdet", "logdet", "inv_sample", "slogdet_of",
           "inv_sample_of"]

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _lift(t, d):
    return t.unsqueeze(0) if d is None else t.movedim(d, 0)


class SlogdetFn(torch.autograd.Function):
    """(sign, log|det A|) of the factorization ``key`` names."""

    @staticmethod
    def forward(key, values, spec, nbatch):
        return slogdet_kernel(key, values, spec, nbatch)

    @staticmethod
    def setup_context(ctx, inputs, output):
        key, values, spec, nbatch = inputs
        ctx.meta = (spec, nbatch)
        if not values.is_complex():
            ctx.mark_non_differentiable(output[0])
        ctx.save_for_backward(key, values, output[0])
        ctx.save_for_forward(key, values, output[0])

    @staticmethod
    def backward(ctx, g_sign, g_ld):
        key, values, sign = ctx.saved_tensors
        spec, nbatch = ctx.meta
        gv = slogdet_backward(FN, key, values, sign, g_sign if values.is_complex() else None,
                              g_ld, spec, nbatch)
        return None, gv, None, None

    @staticmethod
    def jvp(ctx, dkey, dvalues, dspec, dnb):
        key, values, sign = ctx.saved_tensors
        ds, dld = slogdet_jvp(FN, key, values, sign, dvalues, *ctx.meta)
        return (ds if values.is_complex() else None), dld

    @staticmethod
    def vmap(info, in_dims, key, values, spec, nbatch):
        out = SlogdetFn.apply(_lift(key, in_dims[0]), _lift(values, in_dims[1]), spec, nbatch + 1)
        return out, (0, 0)


class InvSampleFn(torch.autograd.Function):
    """A⁻¹[rows[k], cols[k]] of the factorization ``key`` names."""

    @staticmethod
    def forward(key, values, rows, cols, spec, nbatch):
        return inv_sample_kernel(key, values, rows, cols, spec, nbatch)

    @staticmethod
    def setup_context(ctx, inputs, output):
        key, values, rows, cols, spec, nbatch = inputs
        ctx.meta = (spec, nbatch)
        ctx.save_for_backward(key, values, rows, cols, output)
        ctx.save_for_forward(key, values, rows, cols, output)

    @staticmethod
    def backward(ctx, g):
        key, values, rows, cols, z = ctx.saved_tensors
        gv = inv_sample_backward(FN, key, values, rows, cols, z, g, *ctx.meta)
        return None, gv, None, None, None, None

    @staticmethod
    def jvp(ctx, dkey, dvalues, drows, dcols, dspec, dnb):
        key, values, rows, cols, z = ctx.saved_tensors
        return inv_sample_jvp(FN, key, values, rows, cols, z, dvalues, *ctx.meta)

    @staticmethod
    def vmap(info, in_dims, key, values, rows, cols, spec, nbatch):
        if in_dims[2] is not None or in_dims[3] is not None:
            raise NotImplementedError("vmap over the positions of inv_sample: pass them "
                                      "concatenated in one call instead")
        return InvSampleFn.apply(_lift(key, in_dims[0]), _lift(values, in_dims[1]), rows, cols,
                                 spec, nbatch + 1), 0


@torch.library.custom_op("linops::slogdet", mutates_args=())
def slogdet_op(key: torch.Tensor, values: torch.Tensor, spec: int,
               nbatch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det A|) (see :class:`SlogdetFn`)."""
    return slogdet_kernel(key, values, spec, nbatch)


@slogdet_op.register_fake
def _(key, values, spec, nbatch):
    lead = tuple(torch.broadcast_shapes(key.shape[:nbatch], values.shape[:nbatch]))
    return (values.new_empty(lead), values.new_empty(lead, dtype=_REAL.get(values.dtype,
                                                                            values.dtype)))


def _slogdet_setup(ctx, inputs, output):
    key, values, spec, nbatch = inputs
    ctx.meta = (spec, nbatch)
    ctx.save_for_backward(key, values, output[0])


def _slogdet_op_backward(ctx, g_sign, g_ld):
    key, values, sign = ctx.saved_tensors
    gv = slogdet_backward(OP, key, values, sign, g_sign if values.is_complex() else None, g_ld,
                          *ctx.meta)
    return None, gv, None, None


slogdet_op.register_autograd(_slogdet_op_backward, setup_context=_slogdet_setup)
slogdet_op.register_vmap(lambda info, in_dims, key, values, spec, nbatch: (
    slogdet_op(_lift(key, in_dims[0]), _lift(values, in_dims[1]), spec, nbatch + 1), (0, 0)))


@torch.library.custom_op("linops::inv_sample", mutates_args=())
def inv_sample_op(key: torch.Tensor, values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                  spec: int, nbatch: int) -> torch.Tensor:
    """A⁻¹[rows[k], cols[k]] (see :class:`InvSampleFn`)."""
    return inv_sample_kernel(key, values, rows, cols, spec, nbatch)


@inv_sample_op.register_fake
def _(key, values, rows, cols, spec, nbatch):
    lead = tuple(torch.broadcast_shapes(key.shape[:nbatch], values.shape[:nbatch]))
    return values.new_empty(lead + (rows.shape[0],))


def _inv_setup(ctx, inputs, output):
    key, values, rows, cols, spec, nbatch = inputs
    ctx.meta = (spec, nbatch)
    ctx.save_for_backward(key, values, rows, cols, output)


def _inv_op_backward(ctx, g):
    key, values, rows, cols, z = ctx.saved_tensors
    return None, inv_sample_backward(OP, key, values, rows, cols, z, g, *ctx.meta), None, None, \
        None, None


inv_sample_op.register_autograd(_inv_op_backward, setup_context=_inv_setup)
inv_sample_op.register_vmap(lambda info, in_dims, key, values, rows, cols, spec, nbatch: (
    inv_sample_op(_lift(key, in_dims[0]), _lift(values, in_dims[1]), rows, cols, spec,
                  nbatch + 1), 0))

# each world: (solve, spmm, sddmm, inv_sample)
FN = _solve_ops.FN + (InvSampleFn.apply,)
OP = _solve_ops.OP + (inv_sample_op,)


# ----- front end ---------------------------------------------------------------------------------
def slogdet_of(F) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det A|) of a Factorization, differentiable in its values."""
    F._check_live()
    if F.shape[0] == 0:
        return (torch.ones((), dtype=F.values.dtype),
                torch.zeros((), dtype=_REAL.get(F.values.dtype, F.values.dtype)))
    if torch.compiler.is_compiling():
        return slogdet_op(F.key, F.values, F.spec, 0)
    return SlogdetFn.apply(F.key, F.values, F.spec, 0)


def inv_sample_of(F, rows=None, cols=None) -> torch.Tensor:
    """A⁻¹ at (rows, cols) (default: A's pattern) of a Factorization, differentiable."""
    F._check_live()
    if (rows is None) != (cols is None):
        raise TypeError("selected_inverse takes rows and cols together (or neither: A's "
                        "pattern)")
    if rows is None:
        rows, cols = F.pattern.rows, F.pattern.indices
    if isinstance(rows, torch.Tensor):
        rows = rows.detach().cpu().numpy()
    if isinstance(cols, torch.Tensor):
        cols = cols.detach().cpu().numpy()
    r, c = _positions(rows, cols, F.shape[0])
    if r.numel() == 0:
        return torch.zeros(tuple(F.values.shape[:-1]) + (0,), dtype=F.values.dtype)
    if torch.compiler.is_compiling():
        return inv_sample_op(F.key, F.values, r, c, F.spec, 0)
    return InvSampleFn.apply(F.key, F.values, r, c, F.spec, 0)


@torch.compiler.assume_constant_result
def _positions(rows, cols, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Checked int64 tensors of host positions (constants of a compiled graph)."""
    r, c = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (rows, cols))
    if r.shape != c.shape:
        raise ShapeError(f"selected_inverse: rows.shape={r.shape} but cols.shape={c.shape}")
    if r.size and (r.min() < 0 or c.min() < 0 or r.max() >= n or c.max() >= n):
        raise ShapeError(f"selected_inverse: positions must lie in [0, {n}), got rows in "
                         f"[{r.min()}, {r.max()}], cols in [{c.min()}, {c.max()}]")
    return torch.from_numpy(r.copy()), torch.from_numpy(c.copy())


def slogdet(A: Any, alg: Any = None, *, hermitian: bool | None = None,
            posdef: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det A|) of a sparse A, differentiable in its values (or a dense tensor:
    ``torch.linalg.slogdet``).

    Parameters
    ----------
    A : lo.Sparse (torch values), fam(θ), a torch sparse tensor, a Factorization, or dense
    alg : solvers algorithm or name, optional
        A direct method (default ``sv.Auto()``: CHOLMOD for ``posdef=True``, else SuperLU).
    hermitian, posdef : bool, optional

    Returns
    -------
    (sign, logabsdet) : tensors
        ``sign`` of A's dtype (±1 or a unit complex number), ``logabsdet`` real.

    Raises
    ------
    solvers.SingularMatrixError, solvers.BackendNotSupported
        A singular A; an iterative method (no determinant: use ``solvers.logdet_estimate``).

    Notes
    -----
    Cost: one factorization; the value reads the factors. Gradient: A⁻ᴴ on A's pattern by
    selected inversion of the same factors (about two factorizations' flops, no solve); the
    second derivative costs 2n solves with the same factors (small n).

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [1.0, 3.0]]))
    >>> v = torch.tensor(K.values, requires_grad=True)
    >>> sign, ld = at.slogdet(lo.Sparse(v, K.pattern))
    >>> float(sign), round(float(ld.detach().exp()), 10)
    (1.0, 5.0)
    >>> ld.backward()
    >>> (v.grad * 5).round(decimals=10).tolist()                 # A⁻ᵀ on the pattern, × det
    [3.0, -1.0, -1.0, 2.0]
    """
    if isinstance(A, torch.Tensor) and A.layout == torch.strided:
        return torch.linalg.slogdet(A)
    F = A if isinstance(A, Factorization) else implicit(A, alg, hermitian, posdef, "slogdet")
    return slogdet_of(F)


def logdet(A: Any, alg: Any = None, *, hermitian: bool | None = None,
           posdef: bool | None = None) -> torch.Tensor:
    """log|det A| (= log det A for a positive determinant): ``slogdet(A, ...)[1]``.

    Examples
    --------
    >>> import math, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 0.0], [0.0, -3.0]]))
    >>> abs(float(at.logdet(K)) - math.log(6.0)) < 1e-14
    True
    """
    return slogdet(A, alg, hermitian=hermitian, posdef=posdef)[1]


def inv_sample(A: Any, rows=None, cols=None, alg: Any = None, *, hermitian: bool | None = None,
               posdef: bool | None = None) -> torch.Tensor:
    """Entries A⁻¹[rows[k], cols[k]] (default: on A's pattern), differentiable in A's values.

    Values by selected inversion of one factorization (positions outside the factor's filled
    pattern by a solve per distinct column); derivative −(A⁻¹ dA A⁻¹)ᵣ꜀ by |R| + |C| solves with
    the same factorization (R, C: the distinct rows and columns asked for), so derivatives of a
    few entries (a Green's function element, a local density of states) are cheap.

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [1.0, 2.0]]))
    >>> (at.inv_sample(K, [0, 1], [0, 0]) * 3).round(decimals=12).tolist()   # A⁻¹ = [[2,−1],[−1,2]]/3
    [2.0, -1.0]
    """
    F = A if isinstance(A, Factorization) else implicit(A, alg, hermitian, posdef, "inv_sample")
    return inv_sample_of(F, rows, cols)
