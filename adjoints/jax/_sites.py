"""What lowering tells about the host operations of one compiled module: the static half of
the live-factorization store's policy.

Every host operation (a factorize, or a consumer: a solve, a log-determinant, entries of the
inverse) is lowered into a module as one callback; :class:`Op` records, once per lowering, what
the store needs to decide when a factorization is no longer needed:

* ``kind``: ``'factorize'`` or ``'consumer'``;
* ``site``: the :class:`Site` (the traced factorization) whose key a consumer was handed
  directly, or None when the key came through a pytree flatten (a loop carry, a ``cond``
  output, a ``jit`` argument: an *unlinked* consumer);
* ``link``: the :class:`Link` shared by a user-level call and the operations JAX derives from it
  (its tangent solve, its transposed solve); ``role``: ``'primal'``, ``'tangent'`` or
  ``'cotangent'`` (made by a transpose rule: it runs in a backward pass);
* ``straight``: the operation sits directly in the module's entry function, so it runs exactly
  once per run (not inside a loop body, a ``cond`` branch or a nested function);
* ``native``: a consumer lowered to the native XLA FFI solve (:mod:`adjoints.jax._native`); a
  factorize whose site has one lets the default algorithm prefer an engine that call solves
  with (:meth:`ModuleInfo.loop_solved`). A factorize lowered to the FFI factorize (a loop
  slot of the native table, ``ModuleInfo.native_slots``) is native too: the table, not the
  store, decides when its factorizations die.

:class:`ModuleInfo` holds a module's operations; :meth:`ModuleInfo.freeze` derives, at the first
run (lowering is complete by then), the shares the store uses:

* a site is *exact* when its factorize and all its consumers are straight and it never
  escaped (its Factorization was never flattened): each factorization then gets one reference
  per consumer operation and the last consumer of the run frees it;
* otherwise each factorization gets, per factorize operation, a *pending* share of the site's
  cotangent consumers (the backward pass that will come back for it), and a consumer whose
  site this module does not factorize adopts its factorization for its link's cotangent
  operations (``link_share``).

The run-time half (pins, pending uses, runs, the pool) is :class:`adjoints.jax._live.Store`.

>>> s = Site(); s.escaped
False
>>> Link() is not Link()
True
"""

from __future__ import annotations

import itertools

from jax._src.lib.mlir import ir

__all__ = ["Site", "Link", "Op", "ModuleInfo", "module_info", "straight"]

ROLES = ("primal", "tangent", "cotangent")


class Site:
    """One traced factorization (a factorize operation and the consumers handed its key).

    ``escaped``: its Factorization was flattened (into a loop carry, a ``cond`` output, a
    ``jit`` output, ...): some consumers of its keys cannot be linked to it statically.
    ``solves_only``: every consumer bound with it is a solve (no log det or entries of A⁻¹;
    both known once tracing is done, before any lowering)."""

    __slots__ = ("id", "escaped", "solves_only", "__weakref__")
    _ids = itertools.count(1)

    def __init__(self):
        self.id = next(Site._ids)
        self.escaped = False
        self.solves_only = True   # no log det or inverse-entry query was bound with its key

    def __repr__(self) -> str:
        return f"site{self.id}"


class Link:
    """One user-level consumer call; the tangent and transposed operations JAX derives from it
    carry the same link (a primitive parameter, hashed by identity)."""

    __slots__ = ("id", "__weakref__")
    _ids = itertools.count(1)

    def __init__(self):
        self.id = next(Link._ids)

    def __repr__(self) -> str:
        return f"link{self.id}"


class Op:
    """One host operation lowered into one module (see the module docstring), plus the
    run-time state the store keeps for it: the keys it used or made last (``cur``, and
    ``prev`` for an escaped site's factorize) and the run they belong to."""

    __slots__ = ("id", "kind", "site", "link", "role", "straight", "module", "native", "exact",
                 "linked", "refs_share", "pending_share", "link_share", "cur", "prev", "run",
                 "__weakref__")
    _ids = itertools.count(1)

    def __init__(self, kind, site, link, role, straight, module):
        self.id = next(Op._ids)
        self.kind, self.site, self.link, self.role = kind, site, link, role
        self.straight, self.module = straight, module
        self.native = self.exact = self.linked = False
        self.refs_share = self.pending_share = self.link_share = 0.0
        self.cur: frozenset = frozenset()
        self.prev: frozenset = frozenset()
        self.run = None

    def __repr__(self) -> str:
        return (f"Op({self.kind}, {self.site}, {self.link}, {self.role}, "
                f"{'straight' if self.straight else 'nested'})")


class ModuleInfo:
    """The host operations of one lowered module (kept alive by that module's callbacks)."""

    def __init__(self):
        self.ops: list[Op] = []
        self.frozen = False
        self.native_slots: dict = {}   # site -> loop slots of its FFI factorize operations

    def add(self, kind, site, link=None, role="primal", straight=False) -> Op:
        op = Op(kind, site, link, role, straight, self)
        self.ops.append(op)
        self.frozen = False
        return op

    def loop_solved(self, op: Op) -> bool:
        """Whether factorize operation ``op``'s factorizations are solved by native loop
        consumers of this module: of its site, or unlinked ones (a key through a carry)."""
        return any(o.kind == "consumer" and o.native and (o.site is None or o.site is op.site)
                   for o in self.ops)

    def freeze(self) -> None:
        """Derive exactness and shares from the complete list of operations (idempotent)."""
        if self.frozen:
            return
        facts: dict = {}
        for op in self.ops:
            if op.kind == "factorize":
                facts.setdefault(op.site, ([], []))[0].append(op)
        for op in self.ops:
            if op.kind == "consumer" and op.site in facts:
                facts[op.site][1].append(op)
        for site, (fs, cs) in facts.items():
            exact = not site.escaped and all(o.straight for o in fs + cs)
            cot = sum(o.role == "cotangent" for o in cs)
            for f in fs:
                f.exact = exact
                f.refs_share = len(cs) / len(fs)
                f.pending_share = cot / len(fs)
            for c in cs:
                c.exact, c.linked = exact, True
        links: dict = {}
        for op in self.ops:
            if op.kind == "consumer" and op.link is not None:
                links.setdefault(op.link, []).append(op)
        for ops in links.values():
            cot = sum(o.role == "cotangent" for o in ops)
            other = len(ops) - cot
            for o in ops:
                o.link_share = cot / other if other else 0.0
        self.frozen = True


def module_info(ctx) -> ModuleInfo:
    """The :class:`ModuleInfo` of the module being lowered (one per module: kept in the
    module context's own cache, shared by every lowering rule of that module)."""
    store = ctx.module_context.cached_primitive_lowerings
    key = ("adjoints.jax", "module")
    info = store.get(key)
    if info is None:
        info = store[key] = ModuleInfo()
    return info


def straight() -> bool:
    """The operation being lowered sits directly in the module's entry function (not in a loop
    body, a cond branch or a nested function: JAX lowers those as regions or private functions):
    it runs exactly once per run."""
    try:
        owner = ir.InsertionPoint.current.block.owner
        op = owner.operation
        return (op.name == "func.func"
                and ir.StringAttr(op.attributes["sym_name"]).value == "main")
    except Exception:  # pragma: no cover - unknown lowering context: assume the worst
        return False
