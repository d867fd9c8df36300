"""Walk an operator's array fields without jax (for backend detection and memory accounting).

jax's own tree utilities would do, but importing jax costs seconds and is optional; this walk
follows the same ``_leaves`` declaration the pytree registration uses, so the two agree.
"""

from __future__ import annotations

from ._base import LinearOperator, is_array


def array_leaves(A: LinearOperator, *, patterns: bool = True) -> list:
    """Every array an operator holds; ``patterns=False`` leaves out the (immutable) index arrays
    of its patterns, i.e. returns only the arrays a user could edit in place."""
    out: list = []
    _walk(A, out, patterns)
    return out


def _walk(x, out: list, patterns: bool) -> None:
    # operators recurse through their leaf fields (Sum.terms is a tuple of operators); a
    # pattern's index arrays are not leaves (static under jax) and are added explicitly
    if isinstance(x, LinearOperator):
        for name in type(x)._leaves:
            _walk(getattr(x, name), out, patterns)
        pat = getattr(x, "pattern", None)
        if patterns and pat is not None and hasattr(pat, "indptr"):
            out.extend([pat.indptr, pat.indices])
    elif isinstance(x, (tuple, list)):
        for y in x:
            _walk(y, out, patterns)
    elif is_array(x):
        out.append(x)
