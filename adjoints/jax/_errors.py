"""Runtime errors for adjoints.jax: named exceptions when eager, a clean first line under jit.

A check is a status array (int32, 0 = fine, else a message id) plus an optional ``info`` array
of numbers the message quotes. Eager (concrete values), :func:`check` raises the named
exception itself (``solvers.SingularMatrixError``, ``ValueError``, ...), exactly as the numpy
path does. Under ``jax.jit`` the check is an XLA FFI custom call (side-effecting, so XLA never
drops it) whose CPU handler returns an FFI error carrying our message; XLA turns that into
``JaxRuntimeError`` whose FIRST line is ``FAILED_PRECONDITION: solvers.SingularMatrixError:
<what happened, with the numbers>``. (An exception raised inside a ``jax.pure_callback`` would
put ``INTERNAL: CpuCallback error calling callback: Traceback ...`` first and the message last;
equinox's ``error_if`` has the same limitation under plain ``jax.jit``.)

The handler is a ctypes function registered with ``jax.ffi.register_ffi_target``; it reads the
status buffer through the documented XLA FFI C ABI (``xla/ffi/api/c_api.h``). On other platforms
(GPU) the check is a host callback that raises, so the message arrives but is not on line one.

Host callbacks (sparse factorizations in :mod:`adjoints.jax._host`) never raise inside XLA:
they record the exception with :func:`record` and return its id as their status.

Messages are registered once, at import or trace time (:func:`register_message`), and only their
id travels through XLA; the numbers they quote travel as ``info``. So a jitted computation
carries no strings, and the message text costs nothing until something fails.

>>> import jax.numpy as jnp, solvers as sv
>>> msg = register_message(sv.SingularMatrixError, "pivot {0} is {1:.3g}")
>>> guard(jnp.ones(2), 0).tolist()                       # status 0: x passes through
[1.0, 1.0]
>>> guard(jnp.ones(2), msg, jnp.array([3.0, 0.0]))
Traceback (most recent call last):
...
solvers._errors.SingularMatrixError: pivot 3 is 0
"""

from __future__ import annotations

import ctypes as C
import itertools
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from . import _ffi

__all__ = ["check", "guard", "record", "register_message", "raise_for", "qualified_name",
           "add_error_hook"]

# ----- the message table -------------------------------------------------------------------------
_LOCK = threading.Lock()
_STATIC: dict[tuple, int] = {}           # (exception class, template) -> id
_MESSAGES: dict[int, tuple[type, str, bool]] = {}   # id -> (class, template or text, one-shot)
_IDS = itertools.count(1)
# XLA error codes (absl::StatusCode): 3 INVALID_ARGUMENT; everything else 9 FAILED_PRECONDITION
_ERRC = {"ValueError": 3, "ShapeError": 3}


_HOOKS: list = []


def add_error_hook(fn) -> None:
    """``fn()`` runs whenever a failure is recorded or raised (e.g. to free what a failing
    computation will no longer use)."""
    _HOOKS.append(fn)


def _run_hooks() -> None:
    """Run every hook; a failing hook is ignored (the error being reported matters more)."""
    for fn in _HOOKS:
        try:
            fn()
        except Exception:  # pragma: no cover - a hook must never mask the real error
            pass


def qualified_name(cls: type) -> str:
    """``solvers.SingularMatrixError`` rather than ``solvers._errors.SingularMatrixError``."""
    mod = cls.__module__.split(".")[0]
    return cls.__name__ if mod == "builtins" else f"{mod}.{cls.__name__}"


def register_message(cls: type, template: str) -> int:
    """Id of a static message; ``template`` is formatted with the check's ``info`` numbers."""
    key = (cls, template)
    with _LOCK:
        if key not in _STATIC:
            _STATIC[key] = i = next(_IDS)
            _MESSAGES[i] = (cls, template, False)
        return _STATIC[key]


def record(exc: BaseException) -> int:
    """Id for an exception a host callback caught (one-shot: forgotten once reported).

    The hooks run now: the computation that will fail with this id will not run its
    remaining consumers, so what they would have freed must be freed here."""
    with _LOCK:
        i = next(_IDS)
        _MESSAGES[i] = (type(exc), str(exc), True)
    _run_hooks()
    return i


def _message(i: int, info) -> tuple[type, str]:
    """(exception class, text) for id ``i``, the template formatted with ``info``; a template
    that does not fit its numbers is shown unformatted rather than hiding the error."""
    with _LOCK:
        cls, text, once = _MESSAGES.get(int(i), (RuntimeError, f"unknown adjoints.jax error {i}",
                                                 False))
        if once:
            _MESSAGES.pop(int(i), None)
    if info is not None and not once and len(info):
        try:
            text = text.format(*[_num(x) for x in info])
        except (IndexError, KeyError, ValueError):
            pass
    return cls, text


def _num(x):
    """An info number as an int where it is one (indices travel as floats)."""
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def raise_for(status, info=None) -> None:
    """Raise the named exception for the first nonzero entry of ``status`` (host arrays)."""
    status = np.asarray(status).reshape(-1)
    bad = np.flatnonzero(status)
    if bad.size == 0:
        return
    k = int(bad[0])
    row = None
    if info is not None:
        info = np.asarray(info)
        row = info.reshape(-1, info.shape[-1])[k] if info.size else None
    cls, text = _message(int(status[k]), row)
    _run_hooks()
    raise _make(cls, text)


def _make(cls: type, text: str) -> BaseException:
    """``cls(text)``, for exception classes that need more arguments too."""
    try:
        return cls(text)
    except TypeError:   # e.g. solvers.ConvergenceError(message, history)
        return cls(text, ())


# ----- the check primitive -----------------------------------------------------------------------
check_p = Primitive("adjoints_jax_check")


def check(status, info=None):
    """Raise (eager) or arrange to raise at run time (jit) when any ``status`` is nonzero.

    Returns ``status`` unchanged; make the guarded result depend on it (``jnp.where``) so that
    the check lives exactly as long as the value it guards.
    """
    status = jnp.asarray(status, jnp.int32)
    if info is None:
        info = jnp.zeros(status.shape + (0,), jnp.float32)
    info = jnp.asarray(info)
    if info.dtype not in (jnp.float32, jnp.float64):   # the FFI handler reads f32/f64 buffers
        info = jnp.real(info).astype(jnp.float32)        # (float16/bfloat16 numbers, say)
    info = jax.lax.stop_gradient(info)
    return check_p.bind(jax.lax.stop_gradient(status), info)


def guard(x, status, info=None):
    """``x`` where every ``status`` is 0; raises (eager) / fails the computation (jit) otherwise.

    The NaN branch is never seen: it only makes ``x`` depend on the check, so that XLA cannot
    reorder the check after a use of ``x`` nor drop it."""
    ok = check(status, info) == 0
    return jnp.where(ok, x, jnp.asarray(jnp.nan, dtype=x.dtype))


def _check_impl(status, info):
    """Eager: raise now."""
    raise_for(np.asarray(status), np.asarray(info))
    return status


check_p.def_impl(_check_impl)
check_p.def_abstract_eval(lambda status, info: jax.core.ShapedArray(status.shape, status.dtype))


def _check_jvp(primals, tangents):
    """A check has no derivative (its inputs are stop_gradient'ed); it must still run."""
    out = check_p.bind(*primals)
    return out, ad.Zero.from_primal_value(out)


ad.primitive_jvps[check_p] = _check_jvp


def _check_batch(args, dims):
    """vmap: status and info get a common leading batch axis (broadcast if unbatched)."""
    status, info = args
    ds, di = dims
    size = status.shape[ds] if ds is not None else info.shape[di]
    status = jnp.moveaxis(status, ds, 0) if ds is not None else jnp.broadcast_to(
        status, (size,) + status.shape)
    info = jnp.moveaxis(info, di, 0) if di is not None else jnp.broadcast_to(
        info, (size,) + info.shape)
    return check_p.bind(status, info), 0


batching.primitive_batchers[check_p] = _check_batch


# ----- CPU: an XLA FFI handler written with ctypes (the C ABI mirror is adjoints.jax._ffi) ------
_keep_messages: list[bytes] = []   # XLA copies the message, but keep it alive through the call


def _handler(frame_ptr):
    """The FFI handler: answers XLA's metadata query, else raises for a nonzero status by
    returning an XLA error whose message is ``<module>.<Exception>: <text>``."""
    frame = frame_ptr.contents
    try:
        if _ffi.answer_metadata(frame):
            return None
        status = _ffi.view(C.cast(frame.args.args[0], C.POINTER(_ffi.Buffer)).contents)
        info = _ffi.view(C.cast(frame.args.args[1], C.POINTER(_ffi.Buffer)).contents)
        raise_for(status.copy(), info.copy())
        return None
    except BaseException as e:  # never let an exception escape into C (ctypes would swallow it)
        name = qualified_name(type(e))
        msg = f"{name}: {e}".encode("utf-8", "replace")
        _keep_messages[:] = [msg]
        args = _ffi.ErrorArgs(C.sizeof(_ffi.ErrorArgs), None, msg, _ERRC.get(type(e).__name__, 9))
        return frame.api.contents.error_create(C.byref(args))


_TARGET = "adjoints_jax_check"
_ffi.register(_TARGET, _handler)


def _check_lowering_cpu(ctx, status, info):
    """The FFI custom call; aliasing status to the output keeps it in the dataflow."""
    rule = jax.ffi.ffi_lowering(_TARGET, has_side_effect=True, operand_output_aliases={0: 0})
    return rule(ctx, status, info)


def _check_lowering_other(ctx, status, info):
    """Other platforms: a host callback that raises (the message is not on the first line)."""
    def host(s, i):
        raise_for(s, i)
        return (s,)

    out, _, _ = mlir.emit_python_callback(ctx, host, None, [status, info], ctx.avals_in,
                                          ctx.avals_out, has_side_effect=True,
                                          returns_token=False)
    return out


mlir.register_lowering(check_p, _check_lowering_cpu, platform="cpu", cacheable=False)
mlir.register_lowering(check_p, _check_lowering_other, cacheable=False)


def emit_check(ctx, status_value, status_aval) -> None:
    """Emit a check of ``status_value`` (an MLIR value with ``status_aval``) inside another
    primitive's lowering rule (used by the host-callback primitives)."""
    info_aval = jax.core.ShapedArray(tuple(status_aval.shape) + (0,), np.float32)
    info = mlir.ir_constant(np.zeros(info_aval.shape, np.float32))
    sub = ctx.replace(primitive=check_p, avals_in=[status_aval, info_aval],
                      avals_out=[status_aval])
    platform = ctx.module_context.platforms[0]
    rule = _check_lowering_cpu if platform == "cpu" else _check_lowering_other
    rule(sub, status_value, info)
