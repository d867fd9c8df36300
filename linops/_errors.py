"""The exception classes shared by linops, solvers and adjoints.

Each names one kind of failure and subclasses the builtin a caller would already catch for it
(``ShapeError`` is a ``ValueError``, ``UnsupportedOperandError`` a ``TypeError``), so generic
handlers keep working. Messages name the offending shapes or values and, where there is one,
the alternative to use.
"""

from __future__ import annotations


class ShapeError(ValueError):
    """Operands whose shapes do not fit together.

    Raised where the shapes meet: an operator checks its arrays once at construction, ``A @ X``
    checks X against ``A.shape``, ``A + B`` and ``A @ B`` check each other, and the queries
    check their arguments. The message names both shapes.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> lo.Dense(np.eye(2)) @ np.ones(3)
    Traceback (most recent call last):
    ...
    linops._errors.ShapeError: A @ X with A.shape=(2, 2) but X.shape=(3,)
    """


class DensificationError(MemoryError):
    """``to_dense`` refused to build an m×n array of more than 2**26 entries.

    The message gives the shape and the bytes it would take. Pass ``allow_dense=True`` if you
    mean it, or ask a lazy query instead (``sample``, ``project``, ``inner``).

    Examples
    --------
    >>> import linops as lo
    >>> lo.to_dense(lo.Identity(100_000))
    Traceback (most recent call last):
    ...
    linops._errors.DensificationError: to_dense of a 100000×100000 operator (Identity) ...
    """


class PatternError(ValueError):
    """A malformed CSR pattern: bad ``indptr``, column indices out of range, unsorted or
    duplicated within a row, or two patterns of different shapes combined.

    ``Pattern.from_coo`` and ``Sparse.from_scipy`` canonicalise (sort, merge duplicates), so
    only hand-built index arrays can raise it.

    Examples
    --------
    >>> import linops as lo
    >>> lo.Pattern([0, 2], [1, 0], (1, 2))
    Traceback (most recent call last):
    ...
    linops._errors.PatternError: pattern is not canonical: row 0 has column 1 followed by 0 ...
    """


class BackendNotSupported(NotImplementedError):
    """A capability or dtype that an array backend (numpy, cupy, jax) does not have.

    Raised, for example, for float16 in a solve, for AMG on cupy, for a host-only operation on a
    jax tracer, or for mixing cupy and jax arrays; the message names the alternative.

    Examples
    --------
    >>> import numpy as np
    >>> from linops.internals import backend_of
    >>> backend_of(np.ones(2)).require_dtype(np.float16, "solve")
    Traceback (most recent call last):
    ...
    linops._errors.BackendNotSupported: solve: dtype float16 is not supported on numpy; ...
    """


class UnsupportedOperandError(TypeError):
    """An input that linops cannot wrap as an operator; the message lists the accepted types.

    Raised by ``aslinop`` and by every function that wraps its arguments through it (the
    queries, ``A + x``).

    Examples
    --------
    >>> import linops as lo
    >>> lo.aslinop("A")
    Traceback (most recent call last):
    ...
    linops._errors.UnsupportedOperandError: cannot wrap builtins.str; accepted: ...
    """
