"""Builders shared by the test folders (backends, operator and JAX cases)."""
