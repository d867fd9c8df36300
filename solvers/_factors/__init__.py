"""Kernels the engines call on the factors they hold: log det from a factorization (logdet),
selected inversion by the Takahashi recurrences (selinv, with its compiled loops in
selinv_kernels)."""
