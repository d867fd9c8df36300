"""Tests: peers."""
