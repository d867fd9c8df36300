"""The test suite of linops, solvers and adjoints: one folder per package and concern, the
shared builders in ``tests._cases``."""
