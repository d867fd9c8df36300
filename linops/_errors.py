"""Exception and warning classes shared by linops, solvers and adjoints."""

from __future__ import annotations


class ShapeError(ValueError):
    """Operands whose shapes do not fit together; the message names both shapes."""


class DensificationError(MemoryError):
    """`to_dense` refused to build an array above the size limit (pass ``allow_dense=True``)."""


class PatternError(ValueError):
    """A CSR pattern is malformed: indices out of range, unsorted, duplicated, bad indptr."""


class BackendNotSupported(NotImplementedError):
    """A capability does not exist for this array backend; the message names the alternative."""


class UnsupportedOperandError(TypeError):
    """An input type linops cannot wrap; the message lists the accepted types."""
