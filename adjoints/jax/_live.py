"""The registry of host factorizations made by adjoints.jax, its counters, and the host thread.

A factorization (a ``solvers.LinearCache``) is stored under an int32 key that travels through
JAX as an array. Each entry has an owner:

* ``EAGER``: held by Python objects — the key arrays of eager calls and the
  :class:`adjoints.jax.Factorization` objects that carry them (``holders`` counts them; each
  one's ``weakref.finalize`` drops one);
* a compiled site (``adjoints.jax._host.SiteState``): the policy of that site decides when the
  entry goes (see :mod:`adjoints.jax._host`).

Why a registry and not a closure: a factorization made inside a traced computation must cross
the XLA boundary between host callbacks, and only arrays cross it. The int32 key is that array;
the registry is the only place that holds the ``LinearCache`` itself, so the counters here see
every factorization that is alive. Key 0 is never issued: it marks a failed factorization.

One host thread. Every factorization is made, used and dropped on ONE thread
(:data:`HOST`): scipy's SuperLU keeps per-thread bookkeeping of its allocations, and a factor
made on one thread and freed on another never returns its memory (measured: +17 MB per
n = 14 520 factorization, for ever; XLA runs callbacks on a pool of threads, so this was the
"memory that the counters say is freed" of a jitted forward solve). One thread also keeps
glibc from spreading the factors over one malloc arena per XLA thread.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Stats", "REGISTRY", "HOST", "EAGER", "stats", "reset_stats", "live"]


class _HostThread:
    """Runs host work on one dedicated thread (inline when already on it)."""

    def __init__(self):
        self._pool = None
        self._lock = threading.Lock()
        self._ident = None

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="adjoints-jax-host")
                self._ident = self._pool.submit(threading.get_ident).result()
            return self._pool

    def on_host(self) -> bool:
        return self._ident is not None and threading.get_ident() == self._ident

    def call(self, fn, *args):
        """``fn(*args)`` on the host thread; its exceptions are raised here."""
        if self.on_host():
            return fn(*args)
        return self._executor().submit(fn, *args).result()

    def discard(self, objs) -> None:
        """Drop the last references to ``objs`` on the host thread (not waiting for it)."""
        if not objs:
            return
        if self.on_host():
            objs.clear()
            return
        try:
            self._executor().submit(objs.clear)
        except RuntimeError:   # interpreter shutdown: the executor is gone; nothing to keep
            objs.clear()


HOST = _HostThread()
EAGER = "eager"

# ----- hook of the native solves (adjoints.jax._native; empty where it is not built) -----------
#: ``hook(key)`` for every released key, under the registry's lock (the native alias goes)
RELEASE_HOOKS: list = []
#: ``hook() -> {counter: increment}`` before the counters are read or reset (the solves that
#: ran without Python, drained into the counters)
COUNT_HOOKS: list = []


def _drain_native() -> None:
    """Fold the native solves' counts into the counters (call with the lock held)."""
    for hook in COUNT_HOOKS:
        for name, n in hook().items():
            setattr(REGISTRY.stats, name, getattr(REGISTRY.stats, name) + n)


@dataclass
class Stats:
    """Counters of the host factorizations made by ``adjoints.jax`` (a snapshot).

    ``factorizations``: ``solvers.init`` calls (misses included); ``symbolic_analyses``: how
    many of them analysed the pattern (the others reused the analysis of a factorization with
    the same pattern: a ``vmap`` batch, a loop over values); ``forward_solves`` /
    ``transpose_solves``: host solve calls with A / Aᵀ (one call may carry many columns);
    ``reuses``: factorizations found again by their values instead of being redone (a loop
    body that factorizes the same matrix at every step); ``misses``: consumers that found no
    factorization and refactorized; ``live``: factorizations alive now; ``peak_live``: the most
    alive at once since the last reset.

    Returned by ``adjoints.jax.stats()``. ``misses`` > 0 means a factorization was made twice
    for one linearization point — usually ``jax.grad(jax.jit(f))``, where ``jax.jit(jax.grad(f))``
    would share it.

    Attributes
    ----------
    factorizations, symbolic_analyses, forward_solves, transpose_solves, reuses, misses,
    live, peak_live : int

    Examples
    --------
    >>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo, adjoints.jax as adj
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> f = lambda v: adj.solve(lo.Sparse(v, K.pattern), jnp.array([1.0, 2.0])).sum()
    >>> v = jnp.asarray(K.values)
    >>> adj.reset_stats()
    >>> _ = jax.jit(jax.grad(f))(v)          # forward and transpose solve share one
    >>> s = adj.stats()
    >>> isinstance(s, adj.Stats), s.factorizations, s.transpose_solves, s.misses
    (True, 1, 1, 0)
    >>> adj.reset_stats()
    >>> _ = jax.grad(jax.jit(f))(v)          # jit inside grad: the backward pass refactorizes
    >>> s = adj.stats()
    >>> s.factorizations, s.misses
    (2, 1)
    """

    factorizations: int = 0
    symbolic_analyses: int = 0
    forward_solves: int = 0
    transpose_solves: int = 0
    reuses: int = 0
    misses: int = 0
    live: int = 0
    peak_live: int = 0


class Entry:
    """A cache, who owns it, its consumer references (a hint, see _jax_host) and the values it
    was made from (``probe``: a few of them, to compare values cheaply before comparing all)."""

    __slots__ = ("cache", "owner", "refs", "holders", "spec_key", "probe", "explicit")

    def __init__(self, cache, owner, refs, spec_key, explicit=False):
        self.cache, self.owner, self.refs = cache, owner, refs
        self.holders = 0
        self.spec_key = spec_key
        self.probe = probe_of(cache_values(cache))
        self.explicit = explicit

    @property
    def values(self) -> np.ndarray:
        return cache_values(self.cache)


def cache_values(cache) -> np.ndarray:
    """The values the cache factorized (its snapshot of A)."""
    return cache.A.values


def probe_of(values: np.ndarray) -> tuple:
    """A cheap fingerprint: shape, dtype and up to 16 values at fixed positions."""
    v = np.asarray(values)
    n = v.shape[-1] if v.ndim else 0
    idx = np.unique(np.linspace(0, max(n - 1, 0), num=min(n, 16)).astype(np.int64)) if n else []
    return (v.shape, v.dtype.str, v[..., idx].tobytes() if n else b"")


def same_values(entry: Entry, values: np.ndarray, probe: tuple) -> bool:
    """Exactly the values ``entry`` was made from (bit for bit; NaNs never match)."""
    return entry.probe == probe and np.array_equal(entry.values, values)


@dataclass
class _Registry:
    """Key -> Entry, the counters, and the lock that guards both."""

    entries: dict = field(default_factory=dict)
    stats: Stats = field(default_factory=Stats)
    lock: Any = field(default_factory=threading.RLock)
    _next: int = 1

    def _key(self) -> int:
        """The next free key in 1 .. 2³¹−2 (int32, never 0), wrapping around."""
        while True:
            k = self._next
            self._next = 1 if k >= 2**31 - 2 else k + 1
            if k not in self.entries:
                return k

    def add(self, entry: Entry) -> int:
        with self.lock:
            k = self._key()
            self.entries[k] = entry
            self.stats.live = len(self.entries)
            self.stats.peak_live = max(self.stats.peak_live, self.stats.live)
            return k

    def get(self, k: int) -> Entry | None:
        """The entry under key ``k``, or None (never made, or freed)."""
        with self.lock:
            return self.entries.get(int(k))

    def find(self, spec_key, values: np.ndarray, probe: tuple, owner=None):
        """(key, entry) of a live factorization of exactly these values, or None."""
        with self.lock:
            for k, e in self.entries.items():
                if (e.spec_key == spec_key and (owner is None or e.owner is owner)
                        and same_values(e, values, probe)):
                    return k, e
        return None

    def release(self, keys) -> None:
        """Drop ``keys`` (their caches die on the host thread)."""
        dead = []
        with self.lock:
            for k in keys:
                e = self.entries.pop(int(k), None)
                if e is not None:
                    dead.append(e)
                    for hook in RELEASE_HOOKS:   # native solves: the key's alias goes now
                        hook(int(k))
                    forget = getattr(e.owner, "forget", None)
                    if forget is not None:
                        forget(int(k))
            self.stats.live = len(self.entries)
        e = forget = None   # no reference left here: the caches die on the host thread
        HOST.discard(dead)

    def release_compiled(self) -> None:
        """Drop every factorization compiled sites own (a computation failed: what it would
        still have used will not be used)."""
        with self.lock:
            keys = [k for k, e in self.entries.items() if e.owner is not EAGER]
        self.release(keys)

    def hold(self, k: int) -> bool:
        """One more Python holder of ``k`` (it becomes eager-owned); False if ``k`` is gone."""
        with self.lock:
            e = self.entries.get(int(k))
            if e is None:
                return False
            if e.owner is not EAGER:
                forget = getattr(e.owner, "forget", None)
                if forget is not None:
                    forget(int(k))
                e.owner, e.refs = EAGER, None
            e.holders += 1
            return True

    def unhold(self, k: int) -> None:
        """A Python holder of ``k`` died; the last one frees it."""
        with self.lock:
            e = self.entries.get(int(k))
            if e is None or e.owner is not EAGER:
                return
            e.holders -= 1
            last = e.holders <= 0
        if last:
            self.release([k])

    def count(self, **incr) -> None:
        with self.lock:
            for name, n in incr.items():
                setattr(self.stats, name, getattr(self.stats, name) + n)


REGISTRY = _Registry()


def stats() -> Stats:
    """A snapshot of the counters (see :class:`Stats`)."""
    with REGISTRY.lock:
        _drain_native()
        s = REGISTRY.stats
        return Stats(s.factorizations, s.symbolic_analyses, s.forward_solves,
                     s.transpose_solves, s.reuses, s.misses, len(REGISTRY.entries), s.peak_live)


def reset_stats() -> None:
    """Zero the counters (live factorizations are not touched; ``peak_live`` restarts)."""
    with REGISTRY.lock:
        _drain_native()
        REGISTRY.stats = Stats(live=len(REGISTRY.entries), peak_live=len(REGISTRY.entries))


def live() -> int:
    """Number of factorizations alive now."""
    with REGISTRY.lock:
        return len(REGISTRY.entries)
