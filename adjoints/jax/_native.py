"""Native lowering of ``host_solve_p``: a solve with an existing KLU or CHOLMOD factorization as
an XLA FFI call, so that a step of ``lax.scan`` / ``fori_loop`` / ``while_loop`` never enters Python.

Only the LOWERING of the solve primitive changes: its jvp, transpose and vmap rules, the
factorize primitive, the live store (:class:`adjoints.jax._live.Store`) and its lifetime policy
are the ones of :mod:`adjoints.jax._host`. The hook there (``_solve_lowering``) asks
:func:`applies` and, when it says yes, emits :func:`lower_solve` instead of the Python callback.

When it applies: the native extension ``solvers._native`` is built (against the XLA FFI API
this jaxlib serves), the computation runs on the CPU, the algorithm is ``sv.KLU`` or
``sv.Cholesky`` (factors the FFI handler can solve with: KLU's, and a native copy of a real
double-precision CHOLMOD factor, ``cholmod_solve2``; a complex one keeps the callback), and the
solve sits inside a loop body or a branch of a
compiled module whose factorizations of that key are NOT made inside a loop of that module
(one made straight before the loop, or an ``adj.factorize`` passed in). Those factorizations
are kept by claims that do not depend on the consumer's callback — the pins of a straight
factorize operation last until its run ends, a passed-in Factorization is held by its Python
object — so skipping the Python callback frees nothing early. Straight-line solves (run once
per call, whose references an exact site counts) and solves with a factorization made inside
the loop keep the callback, which frees or recycles the factorization exactly as before.

The handle is a value XLA passes: the int32 key of the live store. The native table maps keys
to native factor handles (``solvers._native.alias``, ``Factor.native_handle``); the alias is
made by the factorization itself when this module's loop solves consume its keys (so that the
loop's first step is native too: one Python fallback per call less, ~1 ms at n = 1 024), else
by the first call that meets the key (through the fallback below), and removed, under the
live store's lock, when the store releases the key — the native factor itself is freed with its
``solvers`` factor (KLU's, or the CHOLMOD factor whose copy it is), i.e. when the store drops
the entry. A call the native side cannot answer exactly as the Python
callback would — a key without a native factor (a miss, an expired ``adj.factorize``, key 0 of
a failed factorization), a non-finite right-hand side or result — is answered by the Python
callback's own function (``_solve_host``) through a ctypes fallback, with its counters, its
refactorization on a miss and its named errors; nothing else enters Python.

Counters: the native solves count in ``solvers._native`` (atomically) and are drained into
``adjoints.jax.stats()`` whenever it is read or reset, so ``forward_solves`` and
``transpose_solves`` count the same calls on both paths.

>>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo, solvers as sv
>>> import adjoints.jax as adj
>>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
>>> alg = sv.KLU() if available() else sv.LU()
>>> F = adj.factorize(K, alg)
>>> run = jax.jit(lambda u: jax.lax.scan(lambda u, _: (F.solve(u), None), u, None, length=3)[0])
>>> run(jnp.array([1.0, 2.0])).tolist()          # three steps, no Python callback with KLU
[0.015625, 0.03125]
"""

from __future__ import annotations

import ctypes as C
import itertools
import re
import threading
from functools import lru_cache
from pathlib import Path

import jax
import numpy as np
from jax._src.lib.mlir import ir

import solvers as sv
from solvers.internals import KLU_PIVOT_TOL, klu_symbolic, native, native_available, \
    precision, rcond_tol

from . import _live
from ._errors import _ERRC, _message, qualified_name, record

__all__ = ["ENABLED", "available", "applies", "lower_solve", "alias_keys",
           "factorize_available", "factorize_applies", "lower_factorize"]

TARGET = "linops_klu_solve"
#: switch for tests and comparisons: False lowers every solve (and every large SDDMM: the host
#: products' callback) to the Python callback (a module
#: global, as ``HOST_MIN_NNZ`` is for the host products)
ENABLED = True

#: the algorithms whose factors live in the native table (``Factor.native_handle``): KLU's own,
#: CHOLMOD's real factors as a native copy; their solves in loops lower to the FFI call
NATIVE_ALGORITHMS = (sv.KLU, sv.Cholesky)
_FALLBACKS: dict = {}     # fallback id -> the Python callback's function for one solve site
_IDS = itertools.count(1)
_DTYPES = {4: np.int32, 11: np.float32, 12: np.float64, 15: np.complex64, 18: np.complex128}


class _LxBuf(C.Structure):
    """One buffer as the native handler hands it to the fallback (native/linops_native.cpp)."""

    _fields_ = [("data", C.c_void_p), ("rank", C.c_int64), ("dims", C.POINTER(C.c_int64)),
                ("dtype", C.c_int32)]


def _view(buf: _LxBuf) -> np.ndarray:
    """A numpy view of a buffer XLA owns (valid during the call only)."""
    shape = tuple(buf.dims[i] for i in range(buf.rank))
    dtype = np.dtype(_DTYPES[buf.dtype])
    n = int(np.prod(shape)) if shape else 1
    if n == 0 or not buf.data:
        return np.zeros(shape, dtype)
    raw = (C.c_char * (n * dtype.itemsize)).from_address(buf.data)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def alias_keys(keys: np.ndarray) -> None:
    """Alias every key whose live entry holds a native-capable factor (KLU's, a real CHOLMOD
    one) to that factor's native handle (under the store's lock: a release cannot pass in
    between); later calls stay native. Called by a factorization whose keys native loop
    solves consume (so that the loop's first step finds its factor too), and by the fallback
    for a key that came another way (a Factorization passed in, a refactorized miss)."""
    mod = native()

    def alias(k, cache):
        native_handle = getattr(getattr(cache, "factor", None), "native_handle", None)
        handle = native_handle() if native_handle is not None else 0
        if handle:
            mod.alias(k, handle)

    _live.STORE.each_cache(np.unique(keys), alias)


def _fallback(fid, bufs, nbufs, msg, cap, errc) -> int:
    """The ctypes fallback: one call of the Python function registered for this FFI call
    (its buffers: the operands, then the result it writes); 0, or 1 with the error's message
    (``module.Exception: text``) and XLA error code written for the handler."""
    try:
        fn = _FALLBACKS.get(int(fid))
        if fn is None:
            raise RuntimeError("adjoints.jax native call: its compiled module is gone")
        fn(*(_view(bufs[i]) for i in range(int(nbufs))))
        return 0
    except BaseException as exc:   # never into C: the message travels back instead
        cls, text = _message(record(exc), None)
        data = f"{qualified_name(cls)}: {text}".encode("utf-8", "replace")[:max(int(cap), 0)]
        C.memmove(msg, data, len(data))
        C.memset(msg + len(data), 0, 1)
        errc[0] = _ERRC.get(cls.__name__, 9)
        return 1


_C_FALLBACK = C.CFUNCTYPE(C.c_int32, C.c_int64, C.POINTER(_LxBuf), C.c_int64, C.c_void_p,
                          C.c_int64, C.POINTER(C.c_int32))(_fallback)


def _unalias(k: int) -> None:
    native().unalias(int(k))


#: FFI solve calls, fallbacks and FFI factorizations drained so far (diagnostics: what ran
#: without Python)
TOTALS = {"native_calls": 0, "fallbacks": 0, "factorizations": 0}


def _drain() -> dict:
    """Native solve and loop-factorization counts since the last drain (zeroed), for
    ``adjoints.jax.stats()``."""
    got = native().drain_counts()
    TOTALS["native_calls"] += got["native_calls"]
    TOTALS["fallbacks"] += got["fallbacks"]
    TOTALS["factorizations"] += got["factorizations"]
    return {"forward_solves": got["forward_solves"], "transpose_solves": got["transpose_solves"],
            "factorizations": got["factorizations"], "reuses": got["reuses"],
            "peak_live": got["peak_live"]}


def _loop_factors() -> int:
    """Factorizations the FFI factorize holds now (they count in ``stats().live``)."""
    return native().counts()["loop_factors"]


@lru_cache(maxsize=1)
def available() -> bool:
    """True when the native solve can be used here: ``solvers._native`` is built with its XLA
    FFI handler (registered with XLA on the first call, with the fallback and the live store's
    hooks).

    Examples
    --------
    >>> available() in (True, False)
    True
    """
    if not _register(TARGET):
        return False
    mod = native()
    mod.set_fallback(C.cast(_C_FALLBACK, C.c_void_p).value)
    _live.STORE.on_release(_unalias)
    _live.STORE.on_count(_drain)
    _live.STORE.on_gauge(_loop_factors)
    _live.STORE.on_run(mod.enter_run)
    _live.STORE.on_size(mod.set_store_live)
    mod.set_store_live(len(_live.STORE.keys()))
    return True


def _register(target: str) -> bool:
    """Register the extension's FFI handler ``target`` with XLA for the CPU; False when the
    extension is not built, lacks that handler, or was built for another XLA FFI API."""
    if not native_available():
        return False
    mod = native()
    handlers = mod.ffi_handlers()
    if target not in handlers or not _same_ffi_api(mod.versions()["xla_ffi"]):
        return False
    jax.ffi.register_ffi_target(target, handlers[target], platform="cpu")
    return True


def _same_ffi_api(built) -> bool:
    """The handler was compiled against an XLA FFI API this jaxlib serves: the same major
    version and a minor version no newer than jaxlib's own headers say (read from
    ``jax.ffi.include_dir()``; where they cannot be read, the build's is trusted)."""
    try:
        text = (Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h").read_text()
        major = int(re.search(r"#define XLA_FFI_API_MAJOR (\d+)", text).group(1))
        minor = int(re.search(r"#define XLA_FFI_API_MINOR (\d+)", text).group(1))
    except (OSError, AttributeError, ValueError):
        return True
    return built[0] == major and built[1] <= minor


def applies(ctx, spec, op) -> bool:
    """Whether consumer operation ``op`` (an :class:`adjoints.jax._sites.Op`, just lowered)
    lowers to the FFI solve (see the module docstring): not straight, KLU, real CHOLMOD or the
    default algorithm (which then factorizes with one of them), the CPU, and no
    factorize operation of its site (of the module, for a key that came through a carry or an
    argument) inside a loop or branch."""
    if not (ENABLED and not op.straight and isinstance(spec.alg, NATIVE_ALGORITHMS + (sv.Auto,))
            and tuple(ctx.module_context.platforms) == ("cpu",)):
        return False
    # CHOLMOD's complex factors have no native copy: they keep the callback, never a fallback
    # per step (the default algorithm picks KLU for them, see factor_on_host)
    if isinstance(spec.alg, sv.Cholesky) and np.dtype(ctx.avals_in[1].dtype).kind == "c":
        return False
    made = [o for o in op.module.ops if o.kind == "factorize"
            and (op.site is None or o.site is op.site)]
    return all(o.straight or o.native for o in made) and available()


class _Ticket:
    """Kept alive by the compiled executable: its fallback goes with it, and so do the loop
    slot of a factorize (its factorizations) and a releasing consumer's last keys.

    Registered as one of the module's host callbacks (never called): XLA keeps those until a
    computation still running has finished, where the Python executable's keep-alives die with
    it — ``jax.jit(f)(x)`` drops f's executable while its run may still be in flight, and a
    slot freed then left the running loop without its factorizations and fallbacks."""

    def __init__(self, fid: int, slot: int = 0, consumer: bool = False, keep=None):
        self.fid, self.slot, self.consumer, self.keep = fid, slot, consumer, keep

    def __call__(self, *args):  # pragma: no cover - registered as a host callback, never called
        raise RuntimeError("adjoints.jax: a native call's keep-alive was called")

    def __del__(self):
        _FALLBACKS.pop(self.fid, None)
        try:
            if self.slot:
                native().free_slot(self.slot)
            if self.consumer:
                native().forget_consumer(self.fid)
        except Exception:  # pragma: no cover - interpreter shutdown: the table goes anyway
            pass


def _hold(ctx, ticket: _Ticket) -> None:
    """Tie ``ticket`` to the executable being compiled, for as long as any of its runs lasts."""
    ctx.module_context.add_host_callback(ticket)


def lower_solve(ctx, keys, values, b, *, trans: str, nbatch: int, fallback, op):
    """The FFI custom call ``linops_klu_solve(keys, values, b) -> x``; ``fallback(keys, values,
    b)`` is the Python callback's function for this site, called only where the native side
    cannot answer (see the module docstring). A cotangent solve of a site whose factorize
    lowered to the FFI factorize releases the pending uses of the keys it moved on from."""
    fid = next(_IDS)

    def answer(k, v, rhs, x):
        alias_keys(k)
        x[...] = fallback(k.copy(), v, rhs)

    _FALLBACKS[fid] = answer
    slots = op.module.native_slots.get(op.site, ()) if op.site is not None else ()
    release = op.role == "cotangent" and bool(slots)
    if release:
        # the factorizations it consumes: a slot of its own block (a body recomputed by
        # jax.checkpoint factorizes again next to its cotangent solves), else the site's slot
        # lowered last before it (the forward loop's; with jax.checkpoint around a whole loop,
        # the loop recomputed for this backward pass). A wrong guess frees early: a counted
        # miss that refactorizes, never a wrong factor
        here = _block()
        mine = [slot for slot, block in slots if block is not None and block == here]
        for slot in mine or [slots[-1][0]]:
            native().slot_pending(slot, 1)
    _hold(ctx, _Ticket(fid, consumer=release))
    rule = jax.ffi.ffi_lowering(TARGET, has_side_effect=True)
    return rule(ctx, keys, values, b, trans=np.int64(0 if trans == "N" else 1),
                nbatch=np.int64(nbatch), fallback=np.int64(fid), release=np.int64(release))


def _block():
    """The MLIR block being lowered into (a loop body's, a branch's), or None."""
    try:
        return ir.InsertionPoint.current.block
    except Exception:  # pragma: no cover - no insertion point: no block to compare
        return None


# ----- factorizations in loop bodies: the FFI factorize -------------------------------------------
FACTORIZE_TARGET = "linops_klu_factorize"
_FACTOR_DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))


@lru_cache(maxsize=1)
def factorize_available() -> bool:
    """True when the FFI factorize handler is built and registered (with the solve's)."""
    return available() and _register(FACTORIZE_TARGET)


def factorize_applies(ctx, spec, op) -> bool:
    """Whether factorize operation ``op`` (just added to its module) lowers to the FFI
    factorize: inside a loop body or branch (not straight), ``sv.KLU`` chosen by the caller or
    the default algorithm where it picks KLU (``sv.Auto.loop_factorize``), the CPU, a site
    whose Factorization never escaped and that only solves consume (known from tracing,
    before lowering), a non-empty pattern. Its solves then lower natively too
    (:func:`applies`), so a step of the loop never enters Python."""
    site = op.site
    dtype = np.dtype(ctx.avals_in[0].dtype)
    if not (ENABLED and not op.straight and site is not None and not site.escaped
            and site.solves_only and tuple(ctx.module_context.platforms) == ("cpu",)
            and dtype in _FACTOR_DTYPES and spec.pattern.shape[0] > 0 and spec.pattern.nnz > 0
            and factorize_available()):
        return False
    return type(spec.alg) is sv.KLU or (
        type(spec.alg) is sv.Auto
        and spec.alg.loop_factorize(spec.pattern, dtype, bool(spec.posdef)) is not None)


def lower_factorize(ctx, values, *, spec, op, fallback):
    """The FFI custom call ``linops_klu_factorize(values) -> keys`` on a loop slot of the
    pattern's KLU analysis (``sv.analyses``: made here at lowering where no cache holds one,
    counted in ``stats().symbolic_analyses``); ``fallback(values) -> keys`` is the Python
    factorization (the named error of a matrix the native checks refuse)."""
    klu = spec.alg if type(spec.alg) is sv.KLU else sv.KLU()   # the default's KLU
    symbolic, reused = klu_symbolic(spec.pattern, klu.ordering)
    _live.STORE.count(symbolic_analyses=int(not reused))
    out = precision(ctx.avals_in[0].dtype)
    rtol = rcond_tol(out) if klu.pivot_rtol is None else klu.pivot_rtol
    slot = native().make_slot(symbolic.id, KLU_PIVOT_TOL, float(rtol))
    op.module.native_slots.setdefault(op.site, []).append((slot, _block()))
    fid = next(_IDS)

    def answer(v, keys):
        keys[...] = fallback(v)

    _FALLBACKS[fid] = answer
    _hold(ctx, _Ticket(fid, slot=slot, keep=symbolic))
    rule = jax.ffi.ffi_lowering(FACTORIZE_TARGET, has_side_effect=True)
    return rule(ctx, values, slot=np.int64(slot), fallback=np.int64(fid))


# ----- the values' cotangent: SDDMM on a registered pattern ---------------------------------------
SDDMM_TARGET = "linops_sddmm"


@lru_cache(maxsize=1)
def sddmm_available() -> bool:
    """True when the native SDDMM handler is built and registered with XLA (its own check: an
    extension built before it had only the solve)."""
    return _register(SDDMM_TARGET)


def sddmm_applies(ctx) -> bool:
    """Whether an SDDMM being lowered for the CPU runs natively: the handler is built, U, V and
    the result share one dtype, float64 or complex128 (others keep the host callback)."""
    u, v = ctx.avals_in
    out = ctx.avals_out[0]
    return (ENABLED and u.ndim in (1, 2) and u.ndim == v.ndim and u.dtype == v.dtype == out.dtype
            and np.dtype(out.dtype) in (np.float64, np.complex128) and sddmm_available())


#: the most bytes of pattern indices the native table holds (8 per stored entry); a pattern that
#: would exceed it keeps the host callback. Entries are never freed: a computation JAX still runs
#: after its Python executable was dropped must find its pattern (asynchronous dispatch).
PATTERN_BYTES_MAX = 256 * 2**20
_PATTERNS: dict = {}          # pattern fingerprint -> native id
_PATTERN_BYTES = [0]
_PATTERN_LOCK = threading.Lock()


def pattern_id(pattern, rows: np.ndarray, cols: np.ndarray) -> int | None:
    """The native table's id of ``pattern`` (registered by content once per process, its int32
    ``rows``/``cols`` copied), or None when it would take the table over
    :data:`PATTERN_BYTES_MAX`.

    Examples
    --------
    >>> import linops as lo
    >>> P = lo.Pattern.from_coo([0, 1], [1, 0], (2, 2))
    >>> r, c = P.rows.astype("int32"), P.indices.astype("int32")
    >>> not sddmm_available() or pattern_id(P, r, c) == pattern_id(P, r, c)
    True
    """
    key = pattern.fingerprint
    with _PATTERN_LOCK:
        pid = _PATTERNS.get(key)
        if pid is None:
            size = rows.nbytes + cols.nbytes
            if _PATTERN_BYTES[0] + size > PATTERN_BYTES_MAX:
                return None
            pid = native().register_pattern(rows, cols, int(pattern.shape[0]),
                                            int(pattern.shape[1]))
            _PATTERNS[key] = pid
            _PATTERN_BYTES[0] += size
        return pid


def lower_sddmm(ctx, U, V, *, pid: int):
    """The FFI custom call ``linops_sddmm(U, V) -> values``: out[e] = Σⱼ U[rows[e], j]
    V[cols[e], j] on the pattern registered as ``pid`` (no index constants in the module, no
    Python per call)."""
    return jax.ffi.ffi_lowering(SDDMM_TARGET)(ctx, U, V, pattern=np.int64(pid))
