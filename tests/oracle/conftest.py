"""Profiles of the oracle harness: ``pytest tests/oracle`` (bounded, also part of the whole
suite) and ``pytest tests/oracle --oracle=long`` (many generated cases; ``--oracle-examples=N``
sets how many per property). The option is this folder's own: it is registered here and read
only by the oracle's tests (``tests/oracle/_profile.py``), so no other folder changes.
"""

from __future__ import annotations

from tests.oracle import _profile


def pytest_addoption(parser):
    group = parser.getgroup("oracle", "the differential oracle harness (tests/oracle)")
    group.addoption("--oracle", choices=("bounded", "long"), default="bounded",
                    help="oracle profile: bounded (default) or long (many generated cases)")
    group.addoption("--oracle-examples", type=int, default=None,
                    help="hypothesis examples per property in the long profile")


def pytest_configure(config):
    _profile.PROFILE["name"] = config.getoption("--oracle", default="bounded")
    _profile.PROFILE["examples"] = config.getoption("--oracle-examples", default=None)
