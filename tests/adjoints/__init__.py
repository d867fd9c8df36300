"""Tests: adjoints."""
