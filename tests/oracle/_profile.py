"""The oracle's profile, set once by ``tests/oracle/conftest.py`` from ``--oracle``.

``bounded`` (the default, run by the ordinary suite): the named corpus in full and a few
derandomized hypothesis examples per property, the folder within about a minute on 2 cores.
``long`` (``pytest tests/oracle --oracle=long``): many random examples per property, larger
generated matrices; hypothesis shrinks every failure to a minimal counterexample and prints
the ``@reproduce_failure`` blob. Nothing here touches hypothesis's global settings, so other
folders keep theirs.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

PROFILE = {"name": "bounded", "examples": None}


def long() -> bool:
    """True under ``--oracle=long``."""
    return PROFILE["name"] == "long"


def examples(bounded: int, long_: int) -> settings:
    """Per-test hypothesis settings for this profile (``--oracle-examples=N`` overrides the
    long count)."""
    if long():
        n = PROFILE["examples"] or long_
        return settings(max_examples=n, deadline=None, derandomize=False, database=None,
                        print_blob=True,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                               HealthCheck.filter_too_much])
    return settings(max_examples=bounded, deadline=None, derandomize=True, database=None,
                    print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def max_n() -> int:
    """The largest generated n: 10 bounded, 40 long."""
    return 40 if long() else 10
