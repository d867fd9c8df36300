"""The abstract operator: subclasses supply ``matmat`` and ``adjoint``; the rest is derived.

Every concrete operator is a frozen dataclass decorated with :func:`operator`, which also
registers it as a jax pytree (array fields are leaves, everything else is static) the first time
jax is in use. Unflattening bypasses ``__init__`` so jax may put tracers or placeholders there.
"""

from __future__ import annotations

import abc
import dataclasses
import sys
from typing import Any, ClassVar

import numpy as np

from ._errors import ShapeError

_OPERATOR_CLASSES: list[type] = []
_REGISTERED: set[type] = set()


def operator(cls):
    """Class decorator: freeze as a dataclass (identity equality) and remember for pytrees."""
    cls = dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
    _OPERATOR_CLASSES.append(cls)
    if "jax" in sys.modules:
        ensure_jax_pytrees()
    return cls


def ensure_jax_pytrees() -> None:
    """Register every operator class with jax.tree_util (idempotent; imports jax)."""
    import jax

    for cls in _OPERATOR_CLASSES:
        if cls in _REGISTERED:
            continue
        names = tuple(f.name for f in dataclasses.fields(cls))
        leaves = tuple(n for n in names if n in cls._leaves)
        static = tuple(n for n in names if n not in cls._leaves)

        def flatten(op, leaves=leaves, static=static):
            return (tuple(getattr(op, n) for n in leaves),
                    tuple(getattr(op, n) for n in static))

        def unflatten(aux, children, cls=cls, leaves=leaves, static=static):
            op = object.__new__(cls)
            for n, v in zip(leaves, children):
                object.__setattr__(op, n, v)
            for n, v in zip(static, aux):
                object.__setattr__(op, n, v)
            return op

        jax.tree_util.register_pytree_node(cls, flatten, unflatten)
        _REGISTERED.add(cls)


class _JaxImportHook:
    """A one-shot ``sys.meta_path`` finder: when jax is imported after linops, the operator
    classes become pytrees as soon as jax's own import finishes, so ``jax.jit`` over an
    ``lo.Sparse`` works in either import order without importing jax eagerly."""

    def find_spec(self, name, path=None, target=None):
        if name != "jax":
            return None
        import importlib.util

        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            ensure_jax_pytrees()

        loader.exec_module = exec_module
        return spec


def install_jax_hook() -> None:
    """Register the pytrees now if jax is loaded, else right after jax's import (once)."""
    if "jax" in sys.modules:
        ensure_jax_pytrees()
    elif not any(isinstance(f, _JaxImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _JaxImportHook())


def _set(obj, **kw) -> None:
    """Set derived fields of a frozen dataclass inside ``__post_init__``."""
    for k, v in kw.items():
        object.__setattr__(obj, k, v)


def is_array(x: Any) -> bool:
    """An array of a backend in the table (numpy, cupy, jax, also tracers) or any array-API
    array. Objects that merely have ``shape`` and ``dtype`` (operators of other libraries) are
    not arrays."""
    if isinstance(x, (np.ndarray, np.generic)):
        return True
    if isinstance(x, LinearOperator):
        return False
    from ._backend import is_cupy, is_jax

    return is_jax(x) or is_cupy(x) or (hasattr(x, "__array_namespace__") and hasattr(x, "shape"))


def snapshot(x):
    """The mutation rule (see ``_backend``): a private, unchangeable version of a user array."""
    if not is_array(x):
        return x
    from ._backend import backend_of

    if isinstance(x, np.matrix):
        x = np.asarray(x)
    return backend_of(x).snapshot(x)


def conj(x):
    """conj(x), without a copy for real arrays; the result is sealed."""
    if np.dtype(x.dtype).kind != "c":
        return x
    from ._backend import backend_of

    be = backend_of(x)
    return be.seal(be.xp.conj(x))


def seal(x):
    """Mark an array linops just created as immutable, so operators keep it without a copy."""
    from ._backend import backend_of

    return backend_of(x).seal(x) if is_array(x) else x


class LinearOperator(abc.ABC):
    """A linear map of shape (m, n). Subclasses implement ``matmat`` and ``adjoint``.

    Derived: ``matvec``, ``@`` (with operators: lazy product; with arrays: application, also
    ``X @ A`` from the left), ``+``, ``-``, scalar ``*``, ``.H`` (conjugate transpose),
    ``.T`` (plain transpose, never conjugates), ``.conj()``.
    """

    _leaves: ClassVar[tuple[str, ...]] = ()
    __array_ufunc__ = None  # let numpy defer ``ndarray @ op`` to __rmatmul__
    __array_priority__ = 1000

    shape: tuple[int, int]
    dtype: np.dtype

    @abc.abstractmethod
    def matmat(self, X):
        """A @ X for a dense X of shape (n, k)."""

    @abc.abstractmethod
    def adjoint(self) -> "LinearOperator":
        """The conjugate transpose Aᴴ, pushed to the leaves."""

    # ----- derived ---------------------------------------------------------------------------
    @property
    def H(self) -> "LinearOperator":
        return self.adjoint()

    @property
    def T(self) -> "LinearOperator":
        from ._queries import conjugate

        return conjugate(self.adjoint())

    def conj(self) -> "LinearOperator":
        from ._queries import conjugate

        return conjugate(self)

    @property
    def ndim(self) -> int:
        return 2

    def matvec(self, x):
        _check_apply(self, x, 1)
        return self.matmat(x[:, None])[:, 0]

    def apply(self, X):
        """A @ X for X of shape (n,) or (n, k); shape-checked."""
        if getattr(X, "ndim", None) == 1:
            return self.matvec(X)
        _check_apply(self, X, 2)
        return self.matmat(X)

    def __matmul__(self, other):
        if isinstance(other, LinearOperator):
            from ._algebra import compose

            return compose(self, other)
        if is_array(other):
            return self.apply(other)
        return NotImplemented

    def __rmatmul__(self, other):
        if not is_array(other):
            return NotImplemented
        if other.ndim == 1:
            if other.shape[0] != self.shape[0]:
                raise ShapeError(f"x @ A with x.shape={tuple(other.shape)} but A.shape={self.shape}")
            return self.T.matvec(other)
        if other.ndim != 2 or other.shape[1] != self.shape[0]:
            raise ShapeError(f"X @ A with X.shape={tuple(other.shape)} but A.shape={self.shape}")
        return self.T.matmat(other.T).T

    def __add__(self, other):
        from ._algebra import add
        from ._convert import aslinop

        if isinstance(other, LinearOperator) or is_array(other):
            return add(self, aslinop(other))
        return NotImplemented

    def __radd__(self, other):
        from ._algebra import add
        from ._convert import aslinop

        if is_array(other):
            return add(aslinop(other), self)
        return NotImplemented

    def __sub__(self, other):
        if isinstance(other, LinearOperator) or is_array(other):
            return self + (-1) * (other if isinstance(other, LinearOperator) else _dense(other))
        return NotImplemented

    def __rsub__(self, other):
        if is_array(other):
            return _dense(other) + (-1) * self
        return NotImplemented

    def __mul__(self, c):
        from ._algebra import scale

        if _is_scalar(c):
            return scale(c, self)
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, c):
        if _is_scalar(c):
            return self * (1 / c)
        return NotImplemented

    def __neg__(self):
        return (-1) * self

    def __pos__(self):
        return self

    def __repr__(self) -> str:
        m, n = self.shape
        return f"{type(self).__name__}(shape=({m}, {n}), dtype={np.dtype(self.dtype).name})"


def _dense(a):
    from ._dense import Dense

    return Dense(a)


def _is_scalar(c) -> bool:
    if isinstance(c, (int, float, complex, np.number)):
        return True
    return is_array(c) and getattr(c, "ndim", 1) == 0


def _check_apply(A: LinearOperator, X, ndim: int) -> None:
    if not is_array(X) or X.ndim != ndim or X.shape[0] != A.shape[1]:
        shape = tuple(getattr(X, "shape", ())) if is_array(X) else type(X).__name__
        raise ShapeError(f"A @ X with A.shape={A.shape} but X.shape={shape}")


def check_shape(shape) -> tuple[int, int]:
    try:
        m, n = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"an operator shape must be two integers, got shape={shape!r}") from None
    if m < 0 or n < 0:
        raise ShapeError(f"negative dimension in shape={shape!r}")
    return (m, n)
