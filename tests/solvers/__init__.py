"""Tests: solvers."""
