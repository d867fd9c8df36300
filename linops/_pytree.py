"""Operators as frozen dataclasses and jax pytrees, and the walk over the arrays they hold.

Every concrete operator of linops is a frozen dataclass decorated with :func:`operator`, which
also registers it as a jax pytree as soon as jax is in use, in either import order
(:func:`install_jax_hook`): the fields named in the class's ``_leaves`` are pytree leaves,
every other field is static aux data. Unflattening bypasses ``__init__``, so jax may put
tracers or placeholders in the leaves without running the construction checks.

:func:`array_leaves` follows the same ``_leaves`` declaration without jax (importing jax costs
seconds and is optional), for backend detection and memory accounting, so the two agree. An
operator is recognised by that declaration (``LinearOperator`` declares ``_leaves = ()``), which
keeps this module below the operator base class.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

from ._backend import Backend, backend_of, is_array

_OPERATOR_CLASSES: list[type] = []
_REGISTERED: set[type] = set()


def operator(cls):
    """Class decorator for a concrete operator: a frozen dataclass, and a jax pytree.

    ``eq=False`` keeps identity equality and hashing: ``==`` on array fields would compare
    elementwise, and a jax array cannot be hashed. ``repr=False`` keeps the short
    ``LinearOperator`` repr instead of printing the arrays.
    """
    cls = dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
    _OPERATOR_CLASSES.append(cls)
    if "jax" in sys.modules:
        ensure_jax_pytrees()
    return cls


def _set(obj, **kw) -> None:
    """Set derived fields of a frozen dataclass inside ``__post_init__``."""
    for k, v in kw.items():
        object.__setattr__(obj, k, v)


def ensure_jax_pytrees() -> None:
    """Register every operator class with jax.tree_util (idempotent; imports jax)."""
    # optional: jax, imported only when a jax array is seen
    import jax

    for cls in _OPERATOR_CLASSES:
        if cls in _REGISTERED:
            continue
        names = tuple(f.name for f in dataclasses.fields(cls))
        leaves = tuple(n for n in names if n in cls._leaves)
        static = tuple(n for n in names if n not in cls._leaves)

        # default arguments bind this class's field names (a closure would see the last class)
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

        # leave sys.meta_path before asking the real finders, so that find_spec below does not
        # come back here; the hook fires once
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


# ----- the arrays an operator holds, without jax ------------------------------------------------
def array_leaves(A, *, patterns: bool = True) -> list:
    """Every array an operator holds; ``patterns=False`` leaves out the (immutable) index arrays
    of its patterns, i.e. returns only the arrays a user could edit in place."""
    out: list = []
    _walk(A, out, patterns)
    return out


def backend_of_operator(A) -> Backend:
    """The backend of the arrays an operator holds (numpy for operators that hold none)."""
    return backend_of(*array_leaves(A, patterns=False))


def _walk(x, out: list, patterns: bool) -> None:
    # operators recurse through their leaf fields (Sum.terms is a tuple of operators); a
    # pattern's index arrays are not leaves (static under jax) and are added explicitly
    leaves = getattr(type(x), "_leaves", None)
    if leaves is not None:
        for name in leaves:
            _walk(getattr(x, name), out, patterns)
        pat = getattr(x, "pattern", None)
        if patterns and pat is not None and hasattr(pat, "indptr"):
            out.extend([pat.indptr, pat.indices])
    elif isinstance(x, (tuple, list)):
        for y in x:
            _walk(y, out, patterns)
    elif is_array(x):
        out.append(x)
