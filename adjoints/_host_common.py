"""What the framework front ends (``adjoints.jax``, ``adjoints.torch``) share about host
factorizations: the one thread that makes and frees them (one for both front ends), the key of
an algorithm, and the exact comparison of the values a factorization was made from.

One host thread. scipy's SuperLU keeps per-thread bookkeeping of its allocations: a factor
made on one thread and freed on another never returns its memory (measured under JAX: +17 MB
per n = 14 520 factorization). Autograd engines and garbage collection can drop the last
reference on any thread, so every factorization is made and freed on :data:`HOST`'s thread.

Exact values. A factorization is found again only for exactly the values it was made from:
a cheap probe (shape, dtype and 16 values at fixed positions) rules most candidates out, and
``numpy.array_equal`` on all of them decides. Never a sampled fingerprint alone: two matrices
that agree on the sampled positions must not share a factorization.

>>> import numpy as np
>>> v = np.arange(40.0)
>>> w = v.copy(); w[3] = -1.0              # differs at a position the probe does not read
>>> probe_of(v) == probe_of(w), same_values(v, probe_of(v), w, probe_of(w))
(True, False)
>>> HOST.call(lambda x: x + 1, 41)
42
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["HostThread", "HOST", "alg_key", "probe_of", "same_values"]


class HostThread:
    """Runs host work on one dedicated thread (inline when already on it).

    Cost: one hand-off per call (tens of microseconds), nothing when called from the thread
    itself.
    """

    def __init__(self, name: str = "adjoints-host"):
        self._name = name
        self._pool = None
        self._lock = threading.Lock()
        self._ident = None

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=self._name)
                self._ident = self._pool.submit(threading.get_ident).result()
            return self._pool

    def on_host(self) -> bool:
        """Whether the caller is the host thread."""
        return self._ident is not None and threading.get_ident() == self._ident

    def call(self, fn, *args):
        """``fn(*args)`` on the host thread; its result returned and its exceptions raised
        here."""
        if self.on_host():
            return fn(*args)
        return self._executor().submit(fn, *args).result()

    def discard(self, objs: list) -> None:
        """Drop the last references to the objects in ``objs`` on the host thread, without
        waiting for it."""
        if not objs:
            return
        if self.on_host():
            objs.clear()
            return
        try:
            self._executor().submit(objs.clear)
        except RuntimeError:   # interpreter shutdown: the executor is gone; nothing to keep
            objs.clear()


HOST = HostThread()


def alg_key(alg):
    """``alg`` itself as a dictionary key where it is hashable (a frozen algorithm dataclass),
    else its identity."""
    try:
        hash(alg)
        return alg
    except TypeError:
        return ("id", id(alg))


def probe_of(values: np.ndarray) -> tuple:
    """A cheap first test: shape, dtype and up to 16 values at fixed positions."""
    v = np.asarray(values)
    n = v.shape[-1] if v.ndim else 0
    if not n:
        return (v.shape, v.dtype.str, b"")
    idx = np.unique(np.linspace(0, n - 1, num=min(n, 16)).astype(np.int64))
    return (v.shape, v.dtype.str, np.ascontiguousarray(v[..., idx]).tobytes())


def same_values(a: np.ndarray, probe_a: tuple, b: np.ndarray, probe_b: tuple) -> bool:
    """Exactly the same values: shape, dtype and every number equal (NaN never matches). The
    probes only rule out quickly."""
    return probe_a == probe_b and np.array_equal(a, b)
