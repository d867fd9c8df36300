"""XLA FFI handlers written with ctypes: the C ABI mirror, and the run-id operation.

The structures below mirror ``xla/ffi/api/c_api.h`` (API version 0.1, the fields up to
``XLA_FFI_DeviceOrdinal_Get``) field for field; only the fields the handlers read are used.
Writing them in ctypes avoids shipping a compiled extension. Two handlers use them: the error
check of :mod:`adjoints.jax._errors`, and :func:`emit_run_id` here.

The run id. XLA gives every execution of a compiled computation a ``RunId``, the same for every
operation of that execution (inside loops and branches too) and different for the next one;
``XLA_FFI_RunId_Get`` reads it from the execution context. :func:`emit_run_id` emits a custom
call that writes it into an int32[2] buffer, which the host callbacks of
:mod:`adjoints.jax._host` receive as their first operand: that is how the live-factorization
store (:mod:`adjoints.jax._live`) knows which run a callback belongs to, and so when a run has
ended (a callback of another run arrives). The CPU only; other platforms get a constant run id
(run boundaries are then unknown, and the store falls back to its other release rules).

>>> run_id_of_buffer(np.array([7, 0], np.int32))
7
"""

from __future__ import annotations

import ctypes as C

import jax
import numpy as np
from jax.interpreters import mlir

__all__ = ["Buffer", "CallFrame", "ErrorArgs", "FFI_DTYPES", "answer_metadata", "view",
           "register", "emit_run_id", "run_id_of_buffer", "RUN_ID_AVAL"]


class _ExtBase(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("type", C.c_int), ("next", C.c_void_p)]


class _ApiVersion(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.c_void_p),
                ("major_version", C.c_int), ("minor_version", C.c_int)]


class _Metadata(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("api_version", _ApiVersion),
                ("traits", C.c_uint32)]


class _MetadataExt(C.Structure):
    _fields_ = [("extension_base", _ExtBase), ("metadata", C.POINTER(_Metadata))]


class Buffer(C.Structure):
    """``XLA_FFI_Buffer``."""
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.c_void_p), ("dtype", C.c_int),
                ("data", C.c_void_p), ("rank", C.c_int64), ("dims", C.POINTER(C.c_int64))]


class _Args(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.c_void_p),
                ("size", C.c_int64), ("types", C.c_void_p), ("args", C.POINTER(C.c_void_p))]


class _Attrs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.c_void_p),
                ("size", C.c_int64), ("types", C.c_void_p), ("names", C.c_void_p),
                ("attrs", C.c_void_p)]


class ErrorArgs(C.Structure):
    """``XLA_FFI_Error_Create_Args``."""
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.c_void_p),
                ("message", C.c_char_p), ("errc", C.c_int)]


class _RunIdArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.c_void_p),
                ("ctx", C.c_void_p), ("run_id", C.c_int64)]


ErrorCreate = C.CFUNCTYPE(C.c_void_p, C.POINTER(ErrorArgs))
_RunIdGet = C.CFUNCTYPE(C.c_void_p, C.POINTER(_RunIdArgs))


class _Api(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.c_void_p),
                ("api_version", _ApiVersion), ("internal_api", C.c_void_p),
                ("error_create", ErrorCreate), ("error_get_message", C.c_void_p),
                ("error_destroy", C.c_void_p), ("handler_register", C.c_void_p),
                ("stream_get", C.c_void_p), ("type_register", C.c_void_p),
                ("execution_context_get", C.c_void_p), ("state_set", C.c_void_p),
                ("state_get", C.c_void_p), ("device_memory_allocate", C.c_void_p),
                ("device_memory_free", C.c_void_p), ("thread_pool_schedule", C.c_void_p),
                ("thread_pool_num_threads", C.c_void_p), ("future_create", C.c_void_p),
                ("future_set_available", C.c_void_p), ("future_set_error", C.c_void_p),
                ("run_id_get", _RunIdGet), ("device_ordinal_get", C.c_void_p)]


class CallFrame(C.Structure):
    """``XLA_FFI_CallFrame``."""
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.POINTER(_ExtBase)),
                ("api", C.POINTER(_Api)), ("ctx", C.c_void_p), ("stage", C.c_int),
                ("args", _Args), ("rets", _Args), ("attrs", _Attrs), ("future", C.c_void_p)]


_FFI_METADATA = 1
FFI_DTYPES = {4: np.int32, 11: np.float32, 12: np.float64}


def answer_metadata(frame: CallFrame) -> bool:
    """Answer XLA's metadata query (API version 0.1, no traits); True if it was one."""
    if frame.extension_start and frame.extension_start.contents.type == _FFI_METADATA:
        ext = C.cast(frame.extension_start, C.POINTER(_MetadataExt)).contents
        md = ext.metadata.contents
        md.api_version.major_version = 0
        md.api_version.minor_version = 1
        md.traits = 0
        return True
    return False


def view(buf: Buffer) -> np.ndarray:
    """A numpy view of an FFI buffer (the caller copies it before XLA reuses the memory)."""
    shape = tuple(buf.dims[i] for i in range(buf.rank))
    dtype = np.dtype(FFI_DTYPES[buf.dtype])
    n = int(np.prod(shape)) if shape else 1
    if n == 0 or not buf.data:
        return np.zeros(shape, dtype)
    raw = (C.c_char * (n * dtype.itemsize)).from_address(buf.data)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


_KEEP: list = []   # the ctypes function objects must outlive every executable that calls them


def register(name: str, handler) -> None:
    """Register ``handler(frame_ptr) -> XLA_FFI_Error* or None`` as the CPU FFI target ``name``."""
    fn = C.CFUNCTYPE(C.c_void_p, C.POINTER(CallFrame))(handler)
    _KEEP.append(fn)
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(C.cast(fn, C.c_void_p).value),
                                platform="cpu")


# ----- the run id ----------------------------------------------------------------------------------
RUN_ID_AVAL = jax.core.ShapedArray((2,), np.int32)   # the int64 run id as two int32 words
_RUN_TARGET = "adjoints_jax_run_id"


def _run_id_handler(frame_ptr):
    """Write the execution's RunId into the int32[2] result (never raises into C)."""
    try:
        frame = frame_ptr.contents
        if answer_metadata(frame):
            return None
        args = _RunIdArgs(C.sizeof(_RunIdArgs), None, frame.ctx, 0)
        frame.api.contents.run_id_get(C.byref(args))
        out = C.cast(frame.rets.args[0], C.POINTER(Buffer)).contents
        C.cast(out.data, C.POINTER(C.c_int64))[0] = args.run_id
    except BaseException:  # pragma: no cover - a run id of 0: the store treats it as unknown
        pass
    return None


register(_RUN_TARGET, _run_id_handler)


def emit_run_id(ctx):
    """An MLIR value (int32[2]) holding the RunId of the execution it runs in (CPU), or a
    constant 0 on other platforms. ``ctx``: the lowering context of the primitive being
    lowered."""
    platform = ctx.module_context.platforms[0]
    if platform != "cpu":
        return mlir.ir_constant(np.zeros((2,), np.int32))
    rule = jax.ffi.ffi_lowering(_RUN_TARGET, has_side_effect=True)
    sub = ctx.replace(avals_in=[], avals_out=[RUN_ID_AVAL])
    (out,) = rule(sub)
    return out


def run_id_of_buffer(buf) -> int:
    """The run id from the int32[2] buffer :func:`emit_run_id` fills."""
    return int(np.ascontiguousarray(np.asarray(buf, np.int32)).view(np.int64)[0])
