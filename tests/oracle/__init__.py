"""The differential oracle harness: every public query against a dense reference (see
``conftest.py`` for the profiles and ``judge.py`` for the rule)."""
