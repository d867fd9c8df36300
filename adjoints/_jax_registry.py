"""The registry of host factorizations made by adjoints.jax, and its counters.

A factorization (a ``solvers.LinearCache``) is stored under an int32 key that travels through
JAX as an array. Each entry has an owner: ``None`` (eager: the key array owns it, through
``weakref.finalize``) or a per-module consumer counter (jit: ``refs`` consumers will each drop
one reference; the last one frees it). See :mod:`adjoints._jax_host`.

Why a registry and not a closure: a factorization made inside a traced computation must cross
the XLA boundary between host callbacks, and only arrays cross it. The int32 key is that array;
the registry is the only place that holds the ``LinearCache`` itself, so the counters here see
every factorization that is alive. One process-wide registry, guarded by a lock (XLA may run
callbacks on several threads). Key 0 is never issued: it marks a failed factorization.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Stats", "REGISTRY", "stats", "reset_stats", "live"]


@dataclass
class Stats:
    """Counters of the host factorizations made by ``adjoints.jax`` (a snapshot).

    ``factorizations``: ``solvers.init`` calls (misses included); ``forward_solves`` /
    ``transpose_solves``: host solve calls with A / Aᵀ (one call may carry many columns);
    ``misses``: consumers that found no factorization and refactorized; ``live``: factorizations
    alive now; ``peak_live``: the most alive at once since the last reset.

    Returned by ``adjoints.jax.stats()``. ``misses`` > 0 means a factorization was made twice
    for one linearization point — usually ``jax.grad(jax.jit(f))``, where ``jax.jit(jax.grad(f))``
    would share it; ``live`` that keeps growing means factorizations are kept alive by
    something that holds their key arrays (e.g. stored ``jax.vjp`` functions).

    Attributes
    ----------
    factorizations, forward_solves, transpose_solves, misses, live, peak_live : int

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
    forward_solves: int = 0
    transpose_solves: int = 0
    misses: int = 0
    live: int = 0
    peak_live: int = 0


class _Entry:
    """A cache, its remaining consumer references (None: owned by a key array) and its owner."""

    __slots__ = ("cache", "refs", "owner")

    def __init__(self, cache, refs, owner):
        self.cache, self.refs, self.owner = cache, refs, owner


@dataclass
class _Registry:
    """Key -> _Entry, the counters, and the lock that guards both."""

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

    def add(self, cache, refs: int | None, owner) -> int:
        """Store ``cache`` under a fresh key (not stored when ``refs == 0``: nobody would use
        it). ``owner``: None (the key array owns it) or the counter whose consumers drop it."""
        with self.lock:
            k = self._key()
            if refs is None or refs > 0:
                self.entries[k] = _Entry(cache, refs, owner)
                if owner is not None:
                    owner.live.add(k)
                self.stats.live = len(self.entries)
                self.stats.peak_live = max(self.stats.peak_live, self.stats.live)
            return k

    def get(self, k: int):
        """The cache under key ``k``, or None (never made, freed, or evicted)."""
        with self.lock:
            e = self.entries.get(int(k))
            return None if e is None else e.cache

    def _drop(self, k: int) -> None:
        """Forget key ``k`` (caller holds the lock); the cache dies with its last reference."""
        e = self.entries.pop(k, None)
        if e is not None and e.owner is not None:
            e.owner.live.discard(k)

    def consume(self, keys, owner) -> None:
        """One consumer of ``owner`` ran for each of ``keys``: drop a reference each."""
        with self.lock:
            for k in keys:
                e = self.entries.get(int(k))
                # another owner's entry with the same key (a key reused after a wrap-around,
                # or an eager entry) is not this consumer's to drop
                if e is not None and e.owner is owner and e.refs is not None:
                    e.refs -= 1
                    if e.refs <= 0:
                        self._drop(int(k))
            self.stats.live = len(self.entries)

    def release(self, keys) -> None:
        """Drop ``keys`` whatever their references (finalizers, evictions, failures)."""
        with self.lock:
            for k in keys:
                self._drop(int(k))
            self.stats.live = len(self.entries)

    def release_owned(self) -> None:
        """Drop every factorization a compiled computation owns (called when a computation
        fails: its remaining consumers will never run)."""
        with self.lock:
            for k in [k for k, e in self.entries.items() if e.owner is not None]:
                self._drop(k)
            self.stats.live = len(self.entries)


REGISTRY = _Registry()


def stats() -> Stats:
    """A snapshot of the counters (see :class:`Stats`)."""
    with REGISTRY.lock:
        s = REGISTRY.stats
        return Stats(s.factorizations, s.forward_solves, s.transpose_solves, s.misses,
                     len(REGISTRY.entries), s.peak_live)


def reset_stats() -> None:
    """Zero the counters (live factorizations are not touched; ``peak_live`` restarts)."""
    with REGISTRY.lock:
        REGISTRY.stats = Stats(live=len(REGISTRY.entries), peak_live=len(REGISTRY.entries))


def live() -> int:
    """Number of factorizations alive now."""
    with REGISTRY.lock:
        return len(REGISTRY.entries)
