"""Tests: mpi."""
