"""The operator types: one module per family, each a frozen ``@operator`` dataclass with
``matmat`` and ``adjoint`` and, beside it, its rules on the single-dispatch queries of
``linops._generics`` (dense, sparse and its CSR pattern, diagonal, lowrank, masked, composite
sums/products/scalings, matrixfree, petsc)."""
