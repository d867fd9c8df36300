"""The live-factorization store of ``adjoints.torch``: specs, keys, counters, lifetimes.

A factorization (a ``solvers.LinearCache``) is stored under an int64 key that travels through
torch as a tensor (``key``: shape (..., 1), one key per batch member). Tensors are the only
thing every transform (``torch.func.vmap``/``grad``/``jvp``) and ``torch.compile`` carry
between operations, so a batched key says which member uses which factorization.

Lifetime: the key tensor owns its factorizations. When the storage of a key tensor is freed
(``weakref.finalize`` on its ``untyped_storage()``, which every view of the key shares), its
keys lose a holder, and a factorization with no holder is freed. The holders are whatever
keeps the key: the autograd graph (every solve saves its key for backward, so the
factorization lives exactly until the graph's saved tensors are released — after
``backward()``, or when the outputs are dropped), a :class:`Factorization` handle, a user's
variable. ``F.release()`` frees a handle's factorizations at once; any later solve with them,
a backward pass included, raises :class:`ReleasedFactorizationError` instead of computing.

Specs: what to factorize (pattern, algorithm, hints, explicit or not) has an int id, because
custom operators take ints, not objects. Equal specs share one id; ids are never reused; at
most ``IDLE_SPECS`` specs without a live factorization are kept (least recently used first out),
so a stream of new patterns keeps memory flat. A compiled graph that still names an evicted
spec refuses (:class:`ReleasedFactorizationError`), never guesses.

Exact keys: a factorization is found again (``stats().reuses``) only for exactly the values it
was made from (``adjoints._host_common.same_values``), never by a sampled fingerprint.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import linops as lo
import solvers as sv

from .._host_common import HOST, alg_key, probe_of, same_values

__all__ = ["Stats", "Spec", "spec_id", "spec_of", "spec_const", "REGISTRY", "ReleasedFactorizationError",
           "stats", "reset_stats", "live"]

IDLE_SPECS = 64


class ReleasedFactorizationError(RuntimeError):
    """A solve needed a factorization that is gone: a :class:`~adjoints.torch.Factorization`
    released with ``F.release()`` (also by a backward pass that runs afterwards), or a compiled
    graph whose spec was evicted. Never answered with a refactorization or a stale number.

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> v = torch.tensor(K.values, requires_grad=True)
    >>> F = at.factorize(lo.Sparse(v, K.pattern))
    >>> loss = F.solve(torch.ones(2, dtype=torch.float64)).sum()
    >>> F.release()
    >>> loss.backward()
    Traceback (most recent call last):
    ...
    adjoints.torch._store.ReleasedFactorizationError: this factorization was released ...
    """


RELEASED = ("this factorization was released (F.release()) before a solve that needs it ran "
            "(a backward pass counts); keep F until backward() has run, or factorize again")


@dataclass
class Stats:
    """Counters of the host factorizations made by ``adjoints.torch`` (a snapshot).

    ``factorizations``: ``solvers.init`` calls (misses included); ``symbolic_analyses``: how
    many of them analysed the pattern (a ``vmap`` batch analyses it once); ``forward_solves`` /
    ``transpose_solves``: host solve calls with A / Aᵀ (one call carries every column and
    batch member that shares the factorization); ``solve_columns``: the right-hand sides those
    calls solved; ``reuses``: factorizations found again by their exact values instead of
    being redone; ``misses``: solves that found no factorization and refactorized (0 in every
    path the library takes itself); ``live``: factorizations alive now; ``peak_live``: the
    most alive at once since the last reset.

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> v = torch.tensor(K.values, requires_grad=True)
    >>> at.reset_stats()
    >>> alive = at.stats().live             # alive before (other code's factorizations too)
    >>> at.solve(lo.Sparse(v, K.pattern), torch.ones(2, dtype=torch.float64)).sum().backward()
    >>> s = at.stats()
    >>> s.factorizations, s.forward_solves, s.transpose_solves, s.live - alive
    (1, 1, 1, 0)
    """

    factorizations: int = 0
    symbolic_analyses: int = 0
    forward_solves: int = 0
    transpose_solves: int = 0
    solve_columns: int = 0
    reuses: int = 0
    misses: int = 0
    live: int = 0
    peak_live: int = 0


@dataclass(frozen=True, eq=False)
class Spec:
    """What to factorize: the static pattern, the ``solvers`` algorithm, the hints, and whether
    a :class:`Factorization` handle owns it (``explicit``: a missing factorization is then an
    error, never a refactorization). ``id`` names it in custom operators."""

    pattern: lo.Pattern
    alg: Any
    hermitian: bool | None = None
    posdef: bool | None = None
    explicit: bool = False
    id: int = 0

    @property
    def n(self) -> int:
        return self.pattern.shape[0]

    def __repr__(self) -> str:
        return (f"Spec(id={self.id}, n={self.n}, nnz={self.pattern.nnz}, alg={self.alg!r}, "
                f"explicit={self.explicit})")


class _Specs:
    """id <-> Spec, least recently used last out; idle ones beyond IDLE_SPECS are dropped."""

    def __init__(self):
        self.by_key: OrderedDict = OrderedDict()
        self.by_id: dict[int, Spec] = {}
        self.ids = itertools.count(1)
        self.lock = threading.RLock()

    def intern(self, pattern, alg, hermitian, posdef, explicit) -> Spec:
        key = (pattern, alg_key(alg), hermitian, posdef, explicit)
        with self.lock:
            spec = self.by_key.get(key)
            if spec is None:
                spec = Spec(pattern, alg, hermitian, posdef, explicit, next(self.ids))
                self.by_key[key] = spec
                self.by_id[spec.id] = spec
                self._trim()
            self.by_key.move_to_end(key)
            return spec

    def get(self, i: int) -> Spec:
        with self.lock:
            spec = self.by_id.get(int(i))
        if spec is None:
            raise ReleasedFactorizationError(
                f"spec {int(i)} is no longer known: a compiled graph outlived the "
                f"{IDLE_SPECS} most recent patterns; call torch._dynamo.reset() (recompile)")
        return spec

    def _trim(self) -> None:
        busy = REGISTRY.busy_specs()
        idle = [k for k, s in self.by_key.items() if s.id not in busy]
        for k in idle[:max(0, len(idle) - IDLE_SPECS)]:
            self.by_id.pop(self.by_key.pop(k).id, None)


SPECS = _Specs()


def spec_of(pattern, alg, hermitian=None, posdef=None, explicit=False) -> Spec:
    """The interned spec of (pattern, alg, hints, explicit)."""
    return SPECS.intern(pattern, alg, hermitian, posdef, explicit)


def spec_const(pattern, alg, hermitian=None, posdef=None, explicit=False) -> int:
    """The id of (pattern, alg, hints, explicit); under torch.compile a constant of the graph
    (``torch.compiler.assume_constant_result``: evaluated once, at trace time)."""
    return _spec_const(pattern, alg, hermitian, posdef, explicit)


def _spec_const_impl(pattern, alg, hermitian, posdef, explicit) -> int:
    return spec_of(pattern, alg, hermitian, posdef, explicit).id


def spec_id(i: int) -> Spec:
    """The spec named ``i`` (ReleasedFactorizationError when evicted)."""
    return SPECS.get(i)


class Entry:
    """A cache, its spec, its holders (live key storages) and the values it was made from."""

    __slots__ = ("cache", "spec", "holders", "probe")

    def __init__(self, cache, spec: Spec):
        self.cache, self.spec, self.holders = cache, spec, 0
        self.probe = probe(self.values)

    @property
    def values(self):
        """The values the cache factorized (its snapshot: numpy, or cupy on a GPU)."""
        return self.cache.A.values


def probe(v) -> tuple:
    """``probe_of`` for host or device values (16 values copied off a device)."""
    if isinstance(v, np.ndarray):
        return probe_of(v)
    n = v.shape[-1]
    idx = np.unique(np.linspace(0, max(n - 1, 0), num=min(n, 16)).astype(np.int64))
    return (tuple(v.shape), np.dtype(v.dtype).str, v[idx].get().tobytes() if n else b"")


def equal(a, probe_a, b, probe_b) -> bool:
    """Exactly equal values, on the host (numpy) or on one device (cupy)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return same_values(a, probe_a, b, probe_b)
    if probe_a != probe_b or type(a) is not type(b):
        return False
    import cupy  # optional dependency: only CUDA tensors reach here

    return bool(cupy.array_equal(a, b))


@dataclass
class _Registry:
    """key -> Entry, per-spec indexes for exact reuse, the counters, and their lock."""

    entries: dict = field(default_factory=dict)
    by_spec: dict = field(default_factory=dict)
    stats: Stats = field(default_factory=Stats)
    lock: Any = field(default_factory=threading.RLock)
    keys: Any = field(default_factory=lambda: itertools.count(1))

    def busy_specs(self) -> set:
        with self.lock:
            return {s for s, ks in self.by_spec.items() if ks}

    def add(self, entry: Entry) -> int:
        with self.lock:
            k = next(self.keys)
            self.entries[k] = entry
            self.by_spec.setdefault(entry.spec.id, set()).add(k)
            entry.holders += 1
            self.stats.live = len(self.entries)
            self.stats.peak_live = max(self.stats.peak_live, self.stats.live)
            return k

    def get(self, k: int) -> Entry | None:
        with self.lock:
            return self.entries.get(int(k))

    def find(self, spec: Spec, values, probe_v: tuple) -> int | None:
        """A live key of exactly these values under ``spec`` (one more holder), or None."""
        with self.lock:
            for k in self.by_spec.get(spec.id, ()):
                e = self.entries[k]
                if equal(e.values, e.probe, values, probe_v):
                    e.holders += 1
                    self.stats.reuses += 1
                    return k
        return None

    def unhold(self, keys) -> None:
        """A key storage holding ``keys`` died: one holder less each; the last frees."""
        free = []
        with self.lock:
            for k in keys:
                e = self.entries.get(int(k))
                if e is None:
                    continue
                e.holders -= 1
                if e.holders <= 0:
                    free.append(int(k))
        self.release(free)

    def release(self, keys) -> None:
        """Drop ``keys`` now, whoever holds them (their caches die on the host thread)."""
        dead = []
        with self.lock:
            for k in keys:
                e = self.entries.pop(int(k), None)
                if e is not None:
                    dead.append(e)
                    self.by_spec.get(e.spec.id, set()).discard(int(k))
            self.stats.live = len(self.entries)
        e = None
        HOST.discard(dead)

    def count(self, **incr) -> None:
        with self.lock:
            for name, n in incr.items():
                setattr(self.stats, name, getattr(self.stats, name) + n)


REGISTRY = _Registry()


def own(key_tensor, keys) -> None:
    """Tie ``keys`` to the storage of ``key_tensor``: freed when it is (every view shares it)."""
    weakref.finalize(key_tensor.untyped_storage(), REGISTRY.unhold, list(keys))


def factorize_host(V, spec: Spec) -> list[int]:
    """Keys of factorizations of each row of ``V`` (members, nnz), made on the host thread:
    an exact live match is reused, the others share one symbolic analysis (``like=``)."""
    return HOST.call(_factorize_rows, V, spec)


def _factorize_rows(V, spec: Spec) -> list[int]:
    keys, like = [], None
    try:
        for v in V:
            k = REGISTRY.find(spec, v, probe(v))
            if k is None:
                if like is None:   # a live factorization of this pattern lends its analysis
                    like = _any_cache(spec)
                cache = make_cache(v, spec, like)
                like = cache if like is None else like
                k = REGISTRY.add(Entry(cache, spec))
            keys.append(k)
    except Exception:
        REGISTRY.unhold(keys)
        raise
    return keys


def _any_cache(spec: Spec):
    with REGISTRY.lock:
        for k in REGISTRY.by_spec.get(spec.id, ()):
            return REGISTRY.entries[k].cache
    return None


_spec_const = torch.compiler.assume_constant_result(_spec_const_impl)


def make_cache(v, spec: Spec, like=None):
    """``solvers.init`` of Sparse(v, spec.pattern) (``like``: reuse its symbolic analysis)."""
    prob = sv.LinearProblem(lo.Sparse(v, spec.pattern), hermitian=spec.hermitian,
                            posdef=spec.posdef)
    cache = sv.init(prob, spec.alg, like=like)
    REGISTRY.count(factorizations=1, symbolic_analyses=cache.stats.symbolic_analyses)
    return cache


def cache_for(k: int, values_thunk, spec: Spec):
    """(cache, temporary) for key ``k``: its live cache; for an implicit spec whose key is gone
    (a key tensor copied by something that dropped the original), a refactorization of the
    values ``values_thunk()`` gives (counted in ``misses``; ``temporary``: not kept). An
    explicit spec raises :class:`ReleasedFactorizationError` instead."""
    e = REGISTRY.get(k)
    if e is not None:
        return e.cache, False
    if spec.explicit:
        raise ReleasedFactorizationError(RELEASED)
    REGISTRY.count(misses=1)
    return HOST.call(make_cache, values_thunk(), spec), True


def stats() -> Stats:
    """A snapshot of the counters of the host factorizations (see :class:`Stats`); process-wide,
    so call :func:`reset_stats` before what you measure.

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> at.reset_stats()
    >>> F = at.factorize(K)
    >>> _ = F.solve(torch.eye(2, dtype=torch.float64))          # 2 columns, one call
    >>> s = at.stats()
    >>> s.factorizations, s.forward_solves, s.solve_columns, s.live >= 1
    (1, 1, 2, True)
    """
    with REGISTRY.lock:
        s = REGISTRY.stats
        return Stats(s.factorizations, s.symbolic_analyses, s.forward_solves, s.transpose_solves,
                     s.solve_columns, s.reuses, s.misses, len(REGISTRY.entries), s.peak_live)


def reset_stats() -> None:
    """Zero the counters (live factorizations are kept; ``peak_live`` restarts from them).

    Examples
    --------
    >>> import adjoints.torch as at
    >>> at.reset_stats()
    >>> s = at.stats()
    >>> s.factorizations, s.forward_solves, s.transpose_solves, s.misses
    (0, 0, 0, 0)
    """
    with REGISTRY.lock:
        n = len(REGISTRY.entries)
        REGISTRY.stats = Stats(live=n, peak_live=n)


def live() -> int:
    """Number of factorizations alive now."""
    with REGISTRY.lock:
        return len(REGISTRY.entries)
