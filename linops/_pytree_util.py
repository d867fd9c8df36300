"""Walk an operator's array fields without jax (for backend detection and memory accounting)."""

from __future__ import annotations

from ._base import LinearOperator, is_array


def array_leaves(A: LinearOperator) -> list:
    out: list = []
    _walk(A, out)
    return out


def _walk(x, out: list) -> None:
    if isinstance(x, LinearOperator):
        for name in type(x)._leaves:
            _walk(getattr(x, name), out)
        pat = getattr(x, "pattern", None)
        if pat is not None and hasattr(pat, "indptr"):
            out.extend([pat.indptr, pat.indices])
    elif isinstance(x, (tuple, list)):
        for y in x:
            _walk(y, out)
    elif is_array(x):
        out.append(x)
