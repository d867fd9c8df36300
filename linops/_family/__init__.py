"""Parameter families K(θ) = K₀ + Σ θᵢKᵢ: the family (affine), the assembly routes that build
its pattern and maps (assembly, with the element input recognised in assembly_input), the
eliminated and prescribed dofs (dirichlet), and the per-rank PETSc assembly (petsc_family)."""
