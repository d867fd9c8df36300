"""The live-factorization store of adjoints.jax: every host factorization, its counters, the
one host thread, and the policy that decides when a factorization is reused and when it is
freed (methods of :class:`Store`; no other module touches the entries).

A factorization (a ``solvers.LinearCache``) is stored under an int32 key that travels through
JAX as an array (only arrays cross the XLA boundary between host callbacks). Key 0 is never
issued: it marks a failed factorization. Correctness never depends on how long an entry lives:
every consumer also receives A's values, checks them against the entry (a fingerprint of the
values) and refactorizes from them when the key names nothing (``stats().misses``).

What keeps an entry alive (it is freed, on the host thread, when none holds):

* **holders** — Python objects: the key array of an eager ``factorize`` and every
  :class:`adjoints.jax.Factorization` with a concrete key (made eagerly, returned from
  ``jax.jit``, carried out of a loop, sliced out of a batch); ``weakref.finalize`` drops one;
* **refs** — an *exact* site (its factorize and every consumer straight in the module's entry
  function, its Factorization never flattened) hands each factorization one reference per
  consumer operation; the last consumer of the run frees it;
* **pins** — any other operation pins the keys it made or used last (a factorize in a loop
  body, a solve in a loop, a ``cond`` branch, a nested function); the pin moves when the
  operation runs with other keys, and a run's pins end with the run;
* **pending** — the uses a backward pass will still make: each factorization gets the site's
  share of cotangent consumers, released as each of them moves on to another key;
* **awaiting** — a factorization whose Factorization escaped (stacked out of a ``lax.map``, ...)
  is kept until some consumer used it;
* **the pool** — when a run ends, what it left (its pins, its pending uses: a backward pass in
  another computation, as eager ``jax.grad`` of an eager loop runs) goes to a pool of at most
  :data:`POOL_KEEP` entries, found again by key or by values, and freed when pushed out.

A run is one execution of a compiled computation; the callbacks know which one by XLA's
RunId (:mod:`adjoints.jax._ffi`), and a callback of another run ends the current one. The
capacities never change a result: a consumer that finds no factorization refactorizes.

One host thread. Every factorization is made, used and dropped on ONE thread (:data:`HOST`):
scipy's SuperLU keeps per-thread bookkeeping of its allocations, and a factor made on one
thread and freed on another never returns its memory (measured: +17 MB per n = 14 520
factorization, for ever). One thread also keeps glibc from spreading the factors over one
malloc arena per XLA thread. Solves run on the thread XLA calls them on.

>>> s = Store()
>>> s.stats().live, s.live()
(0, 0)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from solvers.internals import Factor

from .._host_common import HOST, alg_key

__all__ = ["Stats", "Spec", "Entry", "Store", "STORE", "HOST", "POOL_KEEP", "probe_of",
           "stats", "reset_stats", "live"]

POOL_KEEP = 2       # factorizations kept after their run ended (found again by key or values)
_EPS = 1e-9         # shares are fractions (a site's consumers over its factorize operations)
_PROBES = 64        # values compared cheaply before all of them




@dataclass
class Stats:
    """Counters of the host factorizations made by ``adjoints.jax`` (a snapshot).

    ``factorizations``: ``solvers.init`` calls (misses included); ``symbolic_analyses``: how
    many of them analysed the pattern (the others reused the analysis of a live factorization
    of the same pattern: a ``vmap`` batch, a loop over values); ``forward_solves`` /
    ``transpose_solves``: host solve calls with A / Aᵀ (one call may carry many columns);
    ``reuses``: factorizations found again by their values instead of being redone (a loop body
    or a Python loop that builds the same matrix again, a log-determinant of a matrix a solve
    factorized); ``misses``: consumers that found no factorization and refactorized;
    ``live``: factorizations alive now (those the native table's loop slots hold included:
    :mod:`adjoints.jax._native`); ``peak_live``: the most alive at once since the last reset,
    the loop slots' included (a loop slot holds at most one per step of its run, freed as the
    backward loop moves on, and what a run left is freed when the next run starts); ``queries``:
    host log-determinant and inverse-entry queries.

    Returned by ``adjoints.jax.stats()``. ``misses`` > 0 means a factorization was made twice
    for one linearization point — usually ``jax.grad(jax.jit(f))``, where ``jax.jit(jax.grad(f))``
    would share it.

    Attributes
    ----------
    factorizations, symbolic_analyses, forward_solves, transpose_solves, reuses, misses,
    live, peak_live, queries : int

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
    queries: int = 0


@dataclass(frozen=True)
class Spec:
    """What to factorize: the static pattern, the ``solvers`` algorithm, the problem hints,
    what it must answer (``needs``: ``'solve'``, or ``'logdet'``: log det and entries of the
    inverse, so a factorization with selected inversion) and whether the algorithm was the
    caller's choice (``auto=True``: it was not, so any factorization of the same values that
    answers the question is as good). Equal specs make equal Factorization pytree structures.
    """

    pattern: lo.Pattern
    alg: Any
    hermitian: bool | None = None
    posdef: bool | None = None
    needs: str = "solve"
    auto: bool = False

    @property
    def key(self) -> tuple:
        """Hashable identity of the factorization this spec makes."""
        return (self.pattern, alg_key(self.alg), self.hermitian, self.posdef)

    def __eq__(self, other) -> bool:
        return (isinstance(other, Spec) and self.key == other.key and self.needs == other.needs
                and self.auto == other.auto)

    def __hash__(self) -> int:
        return hash((self.key, self.needs, self.auto))

    def accepts(self, e: "Entry") -> bool:
        """A live factorization ``e`` (of the same values) serves this spec."""
        if e.spec.pattern != self.pattern:
            return False
        if e.spec.key == self.key:
            return True
        if not self.auto:
            return False
        return e.selinv if self.needs == "logdet" else e.direct

    def __repr__(self) -> str:
        return (f"Spec(n={self.pattern.shape[0]}, nnz={self.pattern.nnz}, alg={self.alg!r}, "
                f"needs={self.needs!r})")


def probe_of(values: np.ndarray) -> tuple:
    """A cheap fingerprint: shape, dtype and up to 64 values at fixed positions."""
    v = np.asarray(values)
    n = v.shape[-1] if v.ndim else 0
    idx = np.unique(np.linspace(0, max(n - 1, 0), num=min(n, _PROBES)).astype(np.int64)) if n \
        else []
    return (v.shape, v.dtype.str, v[..., idx].tobytes() if n else b"")


class Entry:
    """One live factorization and what keeps it alive (see the module docstring)."""

    __slots__ = ("key", "cache", "spec", "probe", "holders", "refs", "pins", "pending",
                 "awaiting", "released", "adopted", "pooled", "direct", "selinv", "__weakref__")

    def __init__(self, key, cache, spec: Spec, probe):
        self.key, self.cache, self.spec, self.probe = key, cache, spec, probe
        self.holders = 0
        self.refs = 0.0
        self.pins: set = set()
        self.pending = 0.0
        self.awaiting = False
        self.released: set = set()
        self.adopted: set = set()
        self.pooled = False
        factor = type(cache.factor)
        self.direct = factor.logdet is not Factor.logdet
        self.selinv = factor.selected_inverse is not Factor.selected_inverse

    @property
    def values(self) -> np.ndarray:
        """The values the cache factorized (its snapshot of A)."""
        return self.cache.A.values

    def same_values(self, values: np.ndarray, probe: tuple) -> bool:
        """Exactly the values this entry was made from (bit for bit; NaNs never match)."""
        return self.probe == probe and np.array_equal(self.values, values)

    def _claims(self) -> bool:
        return (self.holders > 0 or self.refs > _EPS or bool(self.pins) or self.pending > _EPS
                or self.awaiting or self.pooled)

    def _clear_run(self) -> None:
        self.refs, self.pending, self.awaiting = 0.0, 0.0, False
        self.pins.clear()
        self.released.clear()
        self.adopted.clear()


class Store:
    """Key -> Entry, the counters, the current run and the pool, behind one lock."""

    def __init__(self):
        self.lock = threading.RLock()
        self._entries: dict[int, Entry] = {}
        self._counts = Stats()
        self._next = 1
        self._run = None                 # the run id of the callbacks being served
        self._run_keys: set = set()      # entries the current run claimed
        self._pool: OrderedDict = OrderedDict()
        self._release_hooks: list = []   # hook(key) for every freed key, under the lock
        self._count_hooks: list = []     # hook() -> {counter: increment}, drained on reading
        self._gauge_hooks: list = []     # hook() -> factorizations alive elsewhere (native)
        self._run_hooks: list = []       # hook(run or None) when a run starts (None: settle)
        self._size_hooks: list = []      # hook(n): the store holds n factorizations now

    # ----- hooks of another lowering of the consumers (adjoints.jax._native) ------------------
    def on_release(self, hook) -> None:
        """Call ``hook(key)`` for every key freed from now on, under the store's lock (a native
        table's alias of the key goes with the factorization)."""
        with self.lock:
            self._release_hooks.append(hook)

    def on_count(self, hook) -> None:
        """Before the counters are read or reset, add ``hook()``'s ``{counter: increment}``
        (solves that ran without Python, counted elsewhere)."""
        with self.lock:
            self._count_hooks.append(hook)

    def on_gauge(self, hook) -> None:
        """``hook()`` counts factorizations held elsewhere (the native table's loop slots): they
        are part of ``live``."""
        with self.lock:
            self._gauge_hooks.append(hook)

    def on_run(self, hook) -> None:
        """``hook(run)`` when the callbacks of another run than the last one's start (what
        earlier runs left elsewhere can go, as the store's own leftovers go to its pool),
        ``hook(None)`` at :meth:`settle` (every run is over)."""
        with self.lock:
            self._run_hooks.append(hook)

    def on_size(self, hook) -> None:
        """``hook(n)`` whenever the store's number of factorizations changes (a peak of
        ``live`` reached elsewhere counts them)."""
        with self.lock:
            self._size_hooks.append(hook)

    def _sized(self) -> None:
        for hook in self._size_hooks:
            hook(len(self._entries))

    def _elsewhere(self) -> int:
        return sum(hook() for hook in self._gauge_hooks)

    def each_cache(self, keys, fn) -> None:
        """``fn(key, cache)`` for every live key of ``keys``, under the lock (no release can
        pass in between)."""
        with self.lock:
            for k in keys:
                e = self._entries.get(int(k))
                if e is not None:
                    fn(int(k), e.cache)

    def _drain(self) -> None:
        for hook in self._count_hooks:
            for name, n in hook().items():   # counts add up; a peak is the larger one
                old = getattr(self._counts, name)
                setattr(self._counts, name, max(old, n) if name == "peak_live" else old + n)

    # ----- counters ---------------------------------------------------------------------------
    def count(self, **incr) -> None:
        with self.lock:
            for name, n in incr.items():
                setattr(self._counts, name, getattr(self._counts, name) + n)

    def stats(self) -> Stats:
        """A snapshot of the counters (see :class:`Stats`)."""
        with self.lock:
            self._drain()
            s = Stats(**vars(self._counts))
            s.live = len(self._entries) + self._elsewhere()
            return s

    def reset_stats(self) -> None:
        """Zero the counters (live factorizations are not touched; ``peak_live`` restarts)."""
        with self.lock:
            self._drain()
            # live is never a counter
            self._counts = Stats(peak_live=len(self._entries) + self._elsewhere())

    def live(self) -> int:
        """Number of factorizations alive now (the native table's loop slots' included)."""
        with self.lock:
            return len(self._entries) + self._elsewhere()

    def keys(self) -> frozenset:
        """The keys of the factorizations alive now (what a measurement started with, so that
        what it leaves alive is told apart from older factorizations freed meanwhile)."""
        with self.lock:
            return frozenset(self._entries)

    # ----- making and finding -----------------------------------------------------------------
    def add(self, cache, spec: Spec, *, holders: int = 0) -> int:
        """Store a new factorization; its key (1 .. 2³¹−2, never 0). Without holders it
        belongs to the current run (a compiled operation claims it next)."""
        with self.lock:
            while True:
                k = self._next
                self._next = 1 if k >= 2**31 - 2 else k + 1
                if k not in self._entries:
                    break
            e = Entry(k, cache, spec, probe_of(cache.A.values))
            e.holders = holders
            self._entries[k] = e
            if not holders:
                self._run_keys.add(k)
            self._counts.peak_live = max(self._counts.peak_live,
                                         len(self._entries) + self._elsewhere())
            self._sized()
            return k

    def lookup(self, k: int, values: np.ndarray):
        """The cache under key ``k`` if it was made from ``values``, else None (never made,
        freed, or a key that does not belong to these values)."""
        with self.lock:
            e = self._entries.get(int(k))
            if e is None or e.probe != probe_of(values):
                return None
            self._touch(e)
            return e.cache

    def find(self, spec: Spec, values: np.ndarray, probe: tuple):
        """(key, cache) of a factorization of exactly these values that serves ``spec`` (the
        spec's own first) among those the current run made or uses, or None. (Not across runs:
        every computation makes its own, so counts do not depend on what ran before.)"""
        with self.lock:
            best = None
            for k in self._run_keys:
                e = self._entries.get(k)
                if e is None:
                    continue
                if e.probe == probe and spec.accepts(e) and np.array_equal(e.values, values):
                    if e.spec == spec or best is None:
                        best = e
                    if e.spec == spec:
                        break
            if best is None:
                return None
            self._touch(best)
            return best.key, best.cache

    def like(self, spec: Spec):
        """A cache of the same pattern, algorithm and hints that the current run made or uses,
        whose symbolic analysis a new factorization can reuse (``sv.init(..., like=)``), or
        None."""
        with self.lock:
            for k in sorted(self._run_keys, reverse=True):
                e = self._entries.get(k)
                if e is not None and e.spec.key == spec.key:
                    return e.cache
        return None

    def _touch(self, e: Entry) -> None:
        """An entry the current run uses leaves the pool."""
        if e.pooled:
            e.pooled = False
            self._pool.pop(e.key, None)

    # ----- holders ----------------------------------------------------------------------------
    def hold(self, keys) -> list:
        """One more Python holder of each live key; the keys held (the others are gone)."""
        out = []
        with self.lock:
            for k in keys:
                e = self._entries.get(int(k))
                if e is not None:
                    e.holders += 1
                    self._touch(e)
                    out.append(int(k))
        return out

    def unhold(self, keys) -> None:
        """A Python holder of each of ``keys`` died."""
        with self.lock:
            for k in keys:
                e = self._entries.get(int(k))
                if e is not None:
                    e.holders -= 1
            self._sweep(keys)

    # ----- runs --------------------------------------------------------------------------------
    def begin(self, run: int) -> None:
        """A callback of run ``run`` starts: if it is another run than the current one, the
        current one has ended — its claims end, and what is left goes to the pool."""
        with self.lock:
            if run == self._run:
                return
            self._retire()
            self._run = run
            for hook in self._run_hooks:
                hook(run)

    def trim_pool(self) -> None:
        """The current run makes a new factorization: what earlier runs left and this one did
        not use is freed first (no two generations of a factorization alive at once)."""
        with self.lock:
            keys = list(self._pool)
            for k in keys:
                self._entries[k].pooled = False
            self._pool.clear()
            self._sweep(keys)

    def _retire(self) -> None:
        old = list(self._pool)             # the run before's leftovers: this run did not use them
        for k in old:
            self._entries[k].pooled = False
        self._pool.clear()
        left = []
        for k in self._run_keys:
            e = self._entries.get(k)
            if e is None:
                continue
            e._clear_run()
            if e.holders <= 0:
                left.append(k)
        self._run_keys = set()
        for k in sorted(left):
            self._entries[k].pooled = True
            self._pool[k] = None
        while len(self._pool) > POOL_KEEP:
            k, _ = self._pool.popitem(last=False)
            self._entries[k].pooled = False
            old.append(k)
        self._sweep(old)

    def abandon(self) -> None:
        """The current run failed: what it claimed and nobody holds is freed now (its
        remaining consumers will not run)."""
        with self.lock:
            keys = list(self._run_keys)
            for k in keys:
                e = self._entries.get(k)
                if e is not None:
                    e._clear_run()
            self._run_keys = set()
            self._sweep(keys)

    # ----- the policy: what a factorize and a consumer operation do ---------------------------
    def factorized(self, op, keys) -> None:
        """Factorize operation ``op`` (an :class:`adjoints.jax._sites.Op`) produced ``keys``
        in the current run (made now or found by their values)."""
        keys = frozenset(int(k) for k in keys if k)
        with self.lock:
            self._run_keys |= keys
            for k in keys:
                e = self._entries[k]
                self._touch(e)
                if op.exact:
                    e.refs += op.refs_share
                    continue
                e.pins.add(op.id)
                if op.id not in e.adopted:         # once per entry: released once per user
                    e.adopted.add(op.id)
                    e.pending += op.pending_share
                if op.site is not None and op.site.escaped:
                    e.awaiting = True              # kept until some consumer used it
            if op.exact:
                return
            escaped = op.site is not None and op.site.escaped
            if op.run == self._run:
                # an escaped Factorization's previous key stays pinned too: a loop that carries
                # F and refactorizes solves with the previous F while it makes the next one
                prev = op.cur - keys if escaped else frozenset()
                drop = (op.cur | op.prev) - keys - prev
            else:   # the first run of this operation since its pins ended (see moved_on)
                prev, drop = frozenset(), frozenset()
            op.cur, op.prev, op.run = keys, prev, self._run
            for k in drop:
                e = self._entries.get(k)
                if e is not None:
                    e.pins.discard(op.id)
            self._sweep(drop)

    def moved_on(self, op, probes) -> None:
        """Before factorize operation ``op`` factorizes values with ``probes``: what it made
        before and no longer needs is released first, so that two generations are never alive
        at once — in an earlier run, everything it made (freed unless another claim holds it);
        in this run, its previous key (the one before, for an escaped Factorization, which a
        carry may still hand to a solve). Keys with one of these values stay (found again)."""
        with self.lock:
            if op.exact:
                return
            if op.run == self._run:
                old = op.prev if op.site is not None and op.site.escaped else op.cur
            else:
                old = op.cur | op.prev
            dead = []
            for k in old:
                e = self._entries.get(k)
                if e is None or e.probe in probes:
                    continue
                e.pins.discard(op.id)
                if e.pooled:
                    e.pooled = False
                    self._pool.pop(k, None)
                dead.append(k)
            if op.run != self._run:
                op.cur = op.prev = frozenset()
            self._sweep(dead)

    def consumed(self, op, keys) -> None:
        """Consumer operation ``op`` used ``keys`` (including ones a miss made) in the current
        run."""
        keys = frozenset(int(k) for k in keys if k)
        with self.lock:
            self._run_keys |= keys
            sweep = set()
            for k in keys:
                e = self._entries.get(k)
                if e is None:
                    continue
                self._touch(e)
                e.awaiting = False
                if op.exact and op.linked:
                    e.refs -= 1
                    sweep.add(k)
                    continue
                link = ("link", op.link.id if op.link is not None else op.id)
                if not op.linked and op.role != "cotangent" and link not in e.adopted:
                    e.adopted.add(link)             # its backward pass will come back for it
                    e.pending += op.link_share
                if op.straight:                      # runs once per run: done with it now
                    self._release_share(e, op)
                    sweep.add(k)
                else:
                    e.pins.add(op.id)
            if not op.straight and not (op.exact and op.linked):
                old = op.cur if op.run == self._run else frozenset()
                for k in old - keys:                 # moved on to other keys
                    e = self._entries.get(k)
                    if e is not None:
                        e.pins.discard(op.id)
                        self._release_share(e, op)
                        sweep.add(k)
                op.cur, op.run = keys, self._run
            self._sweep(sweep)

    @staticmethod
    def _release_share(e: Entry, op) -> None:
        """A cotangent operation is done with ``e``: its pending use is released (once)."""
        if op.role == "cotangent" and op.id not in e.released:
            e.released.add(op.id)
            e.pending -= 1.0

    def forget_op(self, op_id: int) -> None:
        """An operation's compiled module was dropped (its callbacks died): its pins end."""
        with self.lock:
            keys = [k for k, e in self._entries.items() if op_id in e.pins]
            for k in keys:
                self._entries[k].pins.discard(op_id)
            self._sweep(keys)

    def settle(self) -> None:
        """End the current run and free what runs left behind (what the next computations
        would do); for measuring what a computation leaves alive."""
        with self.lock:
            self._retire()
            self._run = None
            self.trim_pool()
            for hook in self._run_hooks:
                hook(None)

    # ----- freeing ----------------------------------------------------------------------------
    def drop(self, keys) -> None:
        """Free ``keys`` now, whatever claims them (tests; a failed eager batch)."""
        with self.lock:
            for k in keys:
                e = self._entries.get(int(k))
                if e is not None:
                    e.holders = 0
                    e._clear_run()
                    self._touch(e)
            self._free([int(k) for k in keys])

    def _sweep(self, keys) -> None:
        self._free([int(k) for k in keys
                    if int(k) in self._entries and not self._entries[int(k)]._claims()])

    def _free(self, keys) -> None:
        dead = []
        for k in keys:
            e = self._entries.pop(int(k), None)
            if e is not None:
                self._pool.pop(int(k), None)
                self._run_keys.discard(int(k))
                for hook in self._release_hooks:
                    hook(int(k))
                dead.append(e.cache)
        e = None   # no reference left here: the caches die on the host thread
        if dead:
            self._sized()
        HOST.discard(dead)


STORE = Store()


def stats() -> Stats:
    """A snapshot of the counters (see :class:`Stats`)."""
    return STORE.stats()


def reset_stats() -> None:
    """Zero the counters (live factorizations are not touched; ``peak_live`` restarts)."""
    STORE.reset_stats()


def live() -> int:
    """Number of factorizations alive now."""
    return STORE.live()
