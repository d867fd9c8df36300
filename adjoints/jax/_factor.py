"""A host factorization as a JAX value: :class:`Factorization` and where factorizations are made.

``Factorization`` is a pytree whose leaves are the key (int32, shape (..., 1)) and A's values;
its structure is the :class:`~adjoints.jax._live.Spec` only (pattern, algorithm, hints), so
two factorizations of one pattern have the same structure: a ``while_loop`` can carry one and
refactorize, a ``cond`` can return one of two, a batch can be stacked, and a jitted function
taking a new F does not recompile. It can be closed over, carried through ``scan``,
``fori_loop``, ``while_loop`` and ``cond``, passed into and out of ``jax.jit``, vmapped and
differentiated through its values. ``F.solve(b)`` is ``host_solve_p`` with F's key: every
solve, tangent and cotangent uses the one factorization.

Lifetime: a Factorization with a concrete key holds its factorizations (every such object:
one made eagerly, returned from ``jax.jit``, carried out of a loop, sliced out of a batch);
inside a traced computation the live-factorization store's policy applies
(:mod:`adjoints.jax._live`).

Where the factorization happens (:func:`factorize_keyed`): in the trace that owns A's values,
not necessarily the current one, and once per (values, spec) in that trace. So a solve inside a
loop body with a matrix built outside the loop factorizes once, before the loop, and 50 solves
with one A in a Python loop under jit make one factorize. A consequence worth knowing: a solve
inside a ``lax.cond`` branch whose matrix comes from outside the cond is factorized before the
cond, whether or not the branch runs (a singular matrix then fails the computation even when
that branch is not taken).

>>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo, solvers as sv
>>> from adjoints.jax._live import Spec
>>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
>>> F = make(jnp.asarray(K.values), Spec(K.pattern, sv.LU()))
>>> F.solve(jnp.array([1.0, 2.0])).tolist(), F.solve_transpose(jnp.array([1.0, 1.0])).tolist()
([0.25, 0.5], [0.5, 0.125])
"""

from __future__ import annotations

import weakref

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as _core

import linops as lo
from linops.internals import ShapeError

from . import _host
from ._live import STORE
from ._sites import Link, Site

__all__ = ["Factorization", "factorize_keyed", "make", "solve_dtype"]

# (id(values tracer), spec, dtype) -> (weakref to it, key, site): an entry lives exactly as long
# as the values tracer (its callback removes it); the key is held strongly, the values weakly,
# so the memo never keeps a trace alive
_MEMO: dict = {}


def _owning_trace(x):
    """The trace a tracer belongs to, if it is still being traced; None for concrete arrays."""
    if not isinstance(x, _core.Tracer):
        return None
    t = getattr(x, "_trace", None)
    return t if t is not None and t.is_valid() else None


def factorize_keyed(values, spec, ident=None):
    """(key, site) of the factorization of ``Sparse(values, spec.pattern)``, bound in the trace
    that owns ``values`` and memoized per (values, spec) while ``values`` lives (concrete values:
    in the current trace, not memoized). ``ident``: the object the caller got the
    values from (``jnp.asarray`` of a tracer may be a new tracer)."""
    ident = values if ident is None or not isinstance(ident, _core.Tracer) else ident
    trace = _owning_trace(values)
    if trace is None:   # concrete values: now if eager, else staged into the current trace
        site = Site()
        return _host.factorize(values, spec, site), site
    mkey = (id(ident), spec, jnp.asarray(values).dtype.str)
    hit = _MEMO.get(mkey)
    if hit is not None and hit[0]() is ident:
        return hit[1], hit[2]
    site = Site()
    with _core.set_current_trace(trace):
        key = _host.factorize(values, spec, site)
    ref = weakref.ref(ident, lambda _, k=mkey, memo=_MEMO: memo.pop(k, None))
    _MEMO[mkey] = (ref, key, site)
    return key, site


def make(values, spec, ident=None) -> "Factorization":
    """A Factorization of ``Sparse(values, spec.pattern)`` (values: a jax array or tracer)."""
    if spec.pattern.shape[0] == 0:   # nothing to factorize: an empty system
        key = jnp.zeros(tuple(values.shape[:-1]) + (1,), jnp.int32)
        return Factorization(key, values, spec)
    key, site = factorize_keyed(values, spec, ident)
    return Factorization(key, values, spec, site)


def _concrete_keys(key):
    """The key values of a concrete key array (None for tracers and placeholders)."""
    if isinstance(key, _core.Tracer) or not hasattr(key, "dtype"):
        return None
    if not np.issubdtype(np.dtype(key.dtype), np.integer):
        return None
    try:
        return [int(k) for k in np.asarray(key).reshape(-1) if k]
    except Exception:  # pragma: no cover - an array that cannot be read here
        return None


def _hold(obj, key) -> None:
    """``obj`` holds the factorizations its concrete key names, for as long as it lives."""
    keys = _concrete_keys(key)
    if keys:
        held = STORE.hold(keys)
        if held:
            weakref.finalize(obj, STORE.unhold, held)


def solve_dtype(f_dtype, b_dtype):
    """The dtype of F.solve(b): JAX's promotion of F's and b's dtypes, in F's precision (a
    float32 factorization answers in float32 even for a float64 b: it has no more digits)."""
    out = jnp.result_type(f_dtype, b_dtype)
    real = jnp.finfo(f_dtype).dtype
    if jnp.finfo(out).bits > jnp.finfo(real).bits:
        out = jnp.result_type(real, 1j) if jnp.issubdtype(out, jnp.complexfloating) else real
    return out


@jax.tree_util.register_pytree_node_class
class Factorization:
    """A factorization of a sparse matrix as a JAX value (made by ``adjoints.jax.factorize``).

    Leaves: ``key`` (int32, (..., 1): which host factorization) and ``values`` (A's stored
    values, the differentiable leaf); static: the pattern, the ``solvers`` algorithm, the hints
    (two factorizations of one pattern with one algorithm have the same pytree structure).

    Cost: making it is one ``solvers.init`` (per vmap member); each solve is two triangular
    solves (or one Krylov run) per column; right-hand sides of one call are solved together.
    Adjoint: ``solve``'s cotangent is ``solve_transpose`` with the same factors, and A's values
    get −λᵣ u_c on the pattern (JAX's convention: plain transposes). A Factorization with a
    concrete key keeps its factorization alive for as long as it lives.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo, adjoints.jax as adj
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> F = adj.factorize(K)
    >>> F.solve(jnp.array([1.0, 2.0])).tolist(), F.shape
    ([0.25, 0.5], (2, 2))
    >>> F.solve_adjoint(jnp.array([1.0, 1.0])).tolist()         # Aᴴλ = c, same factors
    [0.5, 0.125]
    >>> G = adj.factorize(lo.Sparse(2 * jnp.asarray(K.values), K.pattern))
    >>> jax.tree.structure(F) == jax.tree.structure(G)          # one pattern: one structure
    True
    """

    def __init__(self, key, values, spec, site=None):
        self.key, self.values, self.spec, self.site = key, values, spec, site
        _hold(self, key)

    # pytree protocol -------------------------------------------------------------------------
    def tree_flatten(self):
        """Leaves (key, values); static: the spec. Flattening inside a traced computation
        marks its factorization as escaped: its later consumers are not linked to it."""
        if self.site is not None:
            self.site.escaped = True
        return (self.key, self.values), (self.spec,)

    @classmethod
    def tree_unflatten(cls, aux, leaves):
        """Rebuild from :meth:`tree_flatten`'s parts (JAX calls it); a concrete key is held."""
        obj = cls.__new__(cls)
        obj.key, obj.values = leaves
        (obj.spec,) = aux
        obj.site = None
        _hold(obj, obj.key)
        return obj

    # queries -----------------------------------------------------------------------------------
    @property
    def pattern(self) -> lo.Pattern:
        """A's sparsity pattern (static)."""
        return self.spec.pattern

    @property
    def shape(self) -> tuple:
        """A's shape (n, n)."""
        return tuple(self.spec.pattern.shape)

    @property
    def dtype(self):
        """The dtype of A's values."""
        return jnp.asarray(self.values).dtype

    def __repr__(self) -> str:
        n = self.spec.pattern.shape[0]
        return (f"Factorization(n={n}, nnz={self.spec.pattern.nnz}, dtype={self.dtype}, "
                f"alg={self.spec.alg!r})")

    # solves ------------------------------------------------------------------------------------
    def _check(self, b, name: str):
        nnz = self.spec.pattern.nnz
        if jnp.shape(self.values)[-1:] != (nnz,):
            raise ShapeError(
                f"this Factorization was made for a pattern with nnz={nnz} but holds values "
                f"of shape {tuple(jnp.shape(self.values))}; factorize the new matrix "
                f"(adj.factorize(A)) instead of replacing a Factorization's values")
        b = jnp.asarray(b)
        if not jnp.issubdtype(b.dtype, jnp.inexact):
            b = b.astype(jnp.result_type(float))
        n = self.spec.pattern.shape[0]
        if b.ndim not in (1, 2) or b.shape[0] != n:
            raise ShapeError(f"{name} needs b of shape (n,) or (n, k) with n={n}: "
                             f"A.shape={self.shape}, b.shape={tuple(b.shape)}")
        return b.astype(solve_dtype(self.values.dtype, b.dtype))

    def _run(self, b, trans: str, name: str):
        b = self._check(b, name)
        if b.size == 0:
            return jnp.zeros(b.shape, b.dtype)
        return _host.host_solve(self.key, self.values, b, self.spec, self.site, trans,
                                link=Link())

    def solve(self, b):
        """u = A⁻¹ b (b: (n,) or (n, k)); differentiable in b and in A's values. The result's
        dtype promotes F's and b's, in F's precision."""
        return self._run(b, "N", "solve")

    def solve_transpose(self, b):
        """λ = A⁻ᵀ b with the same factorization (the plain transpose)."""
        return self._run(b, "T", "solve_transpose")

    def solve_adjoint(self, b):
        """λ = A⁻ᴴ b = conj(A⁻ᵀ conj(b)) with the same factorization."""
        return jnp.conj(self._run(jnp.conj(jnp.asarray(b)), "T", "solve_adjoint"))
