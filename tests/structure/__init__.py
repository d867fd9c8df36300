"""Tests: structure."""
