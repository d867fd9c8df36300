"""Symbolic analyses kept per pattern across caches: the second one-shot solve of a pattern
skips the engine's reordering and symbolic factorization.

A script that calls ``sv.solve(LinearProblem(K(θ), b))`` once per optimization step makes a new
cache every step; ``update`` would reuse the analysis, a fresh cache could not. Engines whose
analysis depends on the pattern only (CHOLMOD's ``analyze``, KLU's ``klu_analyze``, PARDISO's
phase 11 for the Hermitian definite types, and for its unsymmetric types under the guard its
module states; SuperLU's column order, per mode) put
it here after a full setup and look it up before the next one: the numeric factorization
follows on the kept analysis, ``factor.symbolic_analyses`` is 0 and ``cache.info`` says so.
For the structural analyses the answer is the one a fresh analysis gives (the same ordering: a
function of the pattern). PARDISO's unsymmetric types are the exception: their matching and
scaling come from the values the kept analysis saw, so an answer may differ from a fresh one's
by rounding (backward errors of the same order; a perturbed pivot means a fresh analysis).

The store is bounded (entries and bytes, least recently used evicted first) and holds analyses
only, never numeric factors: a factorization still lives exactly as long as its cache.
``sv.analyses.limit(entries=0)`` turns it off; ``sv.analyses.clear()`` frees what it holds.

>>> store = Analyses(entries=2)
>>> store.put(("demo", 1), object(), nbytes=10); store.put(("demo", 2), object(), nbytes=10)
>>> store.put(("demo", 3), object(), nbytes=10)          # evicts the least recently used
>>> store.get(("demo", 1)) is None, store.stats().kept, store.stats().evicted
(True, 2, 1)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Hashable

ENTRIES = 8            # analyses kept at once (a few patterns an optimization alternates)
NBYTES = 512 << 20     # and at most this many bytes of them (engine estimates)


@dataclass(frozen=True)
class AnalysisStats:
    """What :class:`Analyses` holds and did: ``kept`` analyses of ``nbytes`` (the engines'
    estimates), ``hits`` (setups that reused one), ``misses`` (setups that ran their own),
    ``evicted`` (dropped for room), ``entries``/``limit_bytes`` its bounds.

    >>> s = Analyses(entries=4).stats()
    >>> s.kept, s.entries
    (0, 4)
    """

    kept: int
    nbytes: int
    hits: int
    misses: int
    evicted: int
    entries: int
    limit_bytes: int


class Analyses:
    """A bounded, thread-safe map (engine key, pattern) → symbolic analysis, least recently used
    first out. Keys are hashable tuples an engine builds from what its analysis depends on (the
    ``lo.Pattern``, hashed by its fingerprint, the matrix type, the precision). Cost: O(1) per
    lookup beyond the pattern's fingerprint (computed once per pattern).

    >>> store = Analyses(entries=1)
    >>> store.put(("demo", "p"), "analysis", nbytes=8)
    >>> store.get(("demo", "p")), store.get(("demo", "q")), store.stats().hits
    ('analysis', None, 1)
    """

    def __init__(self, entries: int = ENTRIES, nbytes: int = NBYTES):
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._entries, self._limit = int(entries), int(nbytes)
        self._hits = self._misses = self._evicted = 0

    def get(self, key: Hashable) -> Any | None:
        """The analysis kept for ``key`` (now the most recently used), or None (counted as a
        miss: the caller runs its own and may :meth:`put` it)."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self._misses += 1
                return None
            self._items.move_to_end(key)
            self._hits += 1
            return item[0]

    def obtain(self, key: Hashable, make, nbytes) -> tuple[Any, bool]:
        """(analysis, reused): the kept one for ``key``, else ``make()`` kept under it with
        ``nbytes(analysis)`` bytes — the structural engines' whole use of the store."""
        analysis = self.get(key)
        if analysis is not None:
            return analysis, True
        analysis = make()
        self.put(key, analysis, nbytes(analysis))
        return analysis, False

    def put(self, key: Hashable, analysis: Any, nbytes: int) -> None:
        """Keep ``analysis`` for ``key`` (replacing an older one), then evict down to the bounds;
        an analysis larger than the byte bound alone is not kept."""
        with self._lock:
            self._items.pop(key, None)
            if self._entries <= 0 or nbytes > self._limit:
                return
            self._items[key] = (analysis, int(nbytes))
            self._shrink()

    def drop(self, key: Hashable) -> None:
        """Forget ``key``'s analysis (an engine found it unfit for the values at hand)."""
        with self._lock:
            self._items.pop(key, None)

    def _shrink(self) -> None:
        total = sum(b for _, b in self._items.values())
        while self._items and (len(self._items) > self._entries or total > self._limit):
            _, (_, b) = self._items.popitem(last=False)
            total -= b
            self._evicted += 1

    def limit(self, entries: int | None = None, nbytes: int | None = None) -> None:
        """Set the bounds (``entries=0``: keep nothing, i.e. every setup analyses afresh) and
        evict down to them now."""
        with self._lock:
            if entries is not None:
                self._entries = int(entries)
            if nbytes is not None:
                self._limit = int(nbytes)
            self._shrink()

    def clear(self) -> None:
        """Free every kept analysis now (the counters stay)."""
        with self._lock:
            self._items.clear()

    def stats(self) -> AnalysisStats:
        """The counts and bounds, as :class:`AnalysisStats`."""
        with self._lock:
            return AnalysisStats(len(self._items), sum(b for _, b in self._items.values()),
                                 self._hits, self._misses, self._evicted, self._entries,
                                 self._limit)


#: the process's store, read by the engines' setups (``sv.analyses``)
analyses = Analyses()
