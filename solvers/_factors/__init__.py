"""Kernels the engines call on the factors they hold: log det from a factorization (logdet),
selected inversion by the Takahashi recurrences (selinv, with its compiled loops in
selinv_kernels)."""


def kernels():
    """:mod:`solvers._factors.selinv_kernels`, imported at its first use: its compiled loops
    need numba (53 MB of RSS and 0.3 s at import), which then loads with the first selected
    inversion or log-determinant sign, not with ``import solvers``.

    >>> kernels().cycle_count(__import__("numpy").array([1, 0, 2]))
    2
    """
    from . import selinv_kernels  # numba at first use, not at `import solvers` (53 MB, 0.3 s)

    return selinv_kernels
