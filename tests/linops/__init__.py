"""Tests: linops."""
