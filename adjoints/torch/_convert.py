"""Tensors to the arrays the host engines take and back.

CPU tensors become numpy arrays without a copy (``Tensor.numpy()`` on the detached tensor; a
lazily conjugated tensor is resolved first). CUDA tensors go to cupy through DLPack, also
without a copy, so a factorization of a CUDA matrix runs on cupy's path (cupyx's SuperLU: host
factorization, solves on the device) and its results come back zero-copy. Results of solves
are read-only numpy arrays (the solvers' snapshot rule), so on the CPU they are copied once into
a fresh tensor, O(n·k).
"""

from __future__ import annotations

import numpy as np
import torch

from linops.internals import BackendNotSupported

__all__ = ["to_host", "from_host", "np_dtype", "torch_dtype", "SUPPORTED"]

SUPPORTED = (torch.float32, torch.float64, torch.complex64, torch.complex128)
_TO_NP = {torch.float32: np.float32, torch.float64: np.float64,
          torch.complex64: np.complex64, torch.complex128: np.complex128}
_TO_TORCH = {np.dtype(v): k for k, v in _TO_NP.items()}


def np_dtype(dt: torch.dtype) -> np.dtype:
    """The numpy dtype of a supported torch dtype (BackendNotSupported otherwise)."""
    try:
        return np.dtype(_TO_NP[dt])
    except KeyError:
        raise BackendNotSupported(f"adjoints.torch: dtype {dt} is not supported; supported: "
                                  f"float32, float64, complex64, complex128 (convert with "
                                  f".to(torch.float64))") from None


def torch_dtype(dt) -> torch.dtype:
    """The torch dtype of a numpy dtype (of the four supported)."""
    return _TO_TORCH[np.dtype(dt)]


def to_host(t: torch.Tensor):
    """The tensor's numbers as numpy (CPU, shared memory) or cupy (CUDA, DLPack, no copy)."""
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.device.type == "cpu":
        return t.numpy()
    if t.device.type == "cuda":
        try:
            import cupy  # optional dependency: only CUDA tensors reach here
        except ImportError:
            raise BackendNotSupported('CUDA tensors need cupy for the GPU path: pip install '
                                      '"linops[gpu]" (cupy-cuda12x), or move the tensors to '
                                      'the CPU with .cpu()') from None
        return cupy.from_dlpack(t.contiguous())
    raise BackendNotSupported(f"adjoints.torch runs on CPU and CUDA tensors, got device "
                              f"{t.device}; move them with .cpu()")


def from_host(x, device: torch.device) -> torch.Tensor:
    """An engine's result as a tensor on ``device`` (a private copy on the CPU: the engines'
    results are read-only; DLPack without a copy from cupy)."""
    if isinstance(x, np.ndarray):
        t = torch.from_numpy(np.array(x, copy=True, order="C"))
        return t if device.type == "cpu" else t.to(device)
    return torch.from_dlpack(x)
