"""Tests: jax."""
