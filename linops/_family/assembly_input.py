"""The assembly's input as it comes: element blocks and COO triplets, checked, and the layout of
triplets that are element blocks recognised.

``from_elements`` and ``from_coo`` take what finite-element codes produce (top88's ``iK, jK,
sK``, scikit-fem's ``COOData``, element matrices with their dof numbers). The functions here
turn it into flat arrays of checked lengths, dtypes and ranges, with the offending values in
the message, and tell triplets laid out in element blocks (each parameter owning the k²
entries of k dofs) from general ones, in O(N) and without N-sized temporaries, so that
:mod:`linops._family.assembly` can give them the element route.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._errors import ShapeError
from .._operators.pattern import index_dtype
from .._operators.sparse import Sparse

#: entries per slice of the element-block comparisons (bounds their temporaries to a few MB)
_SLICE = 1 << 18


def check_elements(Ke, dofs, n):
    """(dofs, Ke) of ``from_elements`` checked: dofs an integer (ne, k) array in [0, n), Ke one
    (k, k) matrix or (ne, k, k) of them (integers become float64). O(ne·k) for the range.

    Examples
    --------
    >>> dofs, Ke = check_elements(np.eye(2, dtype=int), [[0, 1], [1, 2]], 3)
    >>> dofs.shape, Ke.dtype
    ((2, 2), dtype('float64'))
    """
    dofs = np.asarray(dofs)
    if dofs.ndim != 2 or not np.issubdtype(dofs.dtype, np.integer):
        raise ShapeError(f"dofs must be an integer array (ne, k), got shape={dofs.shape}, "
                         f"dtype={dofs.dtype}")
    ne, k = dofs.shape
    Ke = np.asarray(Ke)
    if Ke.shape not in ((k, k), (ne, k, k)):
        raise ShapeError(f"Ke must be (k, k)=({k}, {k}) or (ne, k, k)=({ne}, {k}, {k}) for "
                         f"dofs.shape={dofs.shape}, got Ke.shape={Ke.shape}")
    if Ke.dtype.kind in "biu":
        Ke = Ke.astype(np.float64)
    if dofs.size and (dofs.min() < 0 or dofs.max() >= n):
        raise ShapeError(f"dofs out of range [0, {n}): min={dofs.min()}, max={dofs.max()}")
    return dofs, Ke


def check_coo(rows, cols, values, param, shape):
    """Flat (rows, cols, values, param) of checked lengths and dtypes, and n; a COOData is
    unpacked here. Index ranges are checked by the route that takes them."""
    if sp.issparse(rows) or isinstance(rows, Sparse):
        raise TypeError(f"from_coo takes triplets (rows, cols, values, param) or a scikit-fem "
                        f"COOData, got a sparse matrix ({type(rows).__name__}): for a family of "
                        f"whole matrices use AffineSparse.from_terms([K1, K2, ...])")
    if hasattr(rows, "indices") and hasattr(rows, "data") and not isinstance(rows, np.ndarray):
        coo = rows
        if cols is not None or values is not None:
            raise TypeError("from_coo: pass a COOData alone (its indices and data are the "
                            "triplets), not together with cols/values")
        ind = np.asarray(coo.indices)
        if ind.ndim != 2 or ind.shape[0] != 2:
            raise ShapeError(f"from_coo: COOData.indices must have shape (2, N), got "
                             f"{ind.shape} (a bilinear form's data, not a linear form's)")
        rows, cols, values = ind[0], ind[1], np.asarray(coo.data)
        if shape is None:
            shape = tuple(coo.shape)
        if param is None:
            local = getattr(coo, "local_shape", None)
            if local is None:
                raise TypeError("from_coo: this COOData has no local_shape (a sum of forms?), "
                                "so its element of each triplet is unknown: pass param=")
            per = int(np.prod(local))
            if per == 0 or values.size % per:
                raise ShapeError(f"from_coo: COOData with local_shape={tuple(local)} holds "
                                 f"{values.size} triplets, not a multiple of {per}")
            ne = values.size // per
            param = np.tile(np.arange(ne, dtype=index_dtype(0, (ne, ne))), per)
    elif cols is None or values is None or param is None:
        missing = [nm for nm, x in (("cols", cols), ("values", values), ("param", param))
                   if x is None]
        raise TypeError(f"from_coo(rows, cols, values, param, shape=...) is missing "
                        f"{', '.join(missing)}")
    if shape is None:
        raise ShapeError("from_coo needs shape=n (or (n, n)): K's size before elimination")
    shape = (int(shape), int(shape)) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(f"from_coo builds square families: shape={shape}")
    n = shape[0]
    arrays = {}
    for name, a in (("rows", rows), ("cols", cols), ("values", values), ("param", param)):
        a = np.asarray(a)
        if a.ndim != 1:
            a = a.reshape(-1)
        if a.size == 0 and name != "values":
            a = a.astype(np.int64)
        arrays[name] = a
    N = arrays["rows"].size
    sizes = {k: v.size for k, v in arrays.items()}
    if len(set(sizes.values())) != 1:
        raise ShapeError(f"from_coo: the triplet arrays differ in length: {sizes}")
    for name in ("rows", "cols", "param"):
        a = arrays[name]
        if not (np.issubdtype(a.dtype, np.integer) or (a.size == 0)):
            raise TypeError(f"from_coo: {name} must be integers, got dtype={a.dtype}")
    vals = arrays["values"]
    if vals.dtype.kind not in "biufc":
        raise TypeError(f"from_coo: values must be numbers, got dtype={vals.dtype}")
    if vals.dtype.kind in "biu":
        arrays["values"] = vals.astype(np.float64)
    return arrays["rows"], arrays["cols"], arrays["values"], arrays["param"], n


def check_range(name: str, a, n: int, what: str) -> None:
    """Raise ShapeError naming ``name`` if an entry of ``a`` is outside [0, n)."""
    if a.size and (a.min() < 0 or a.max() >= n):
        raise ShapeError(f"from_coo: {name} out of range [0, {n}) for {what}: min={a.min()}, "
                         f"max={a.max()}")


def check_coo_ranges(rows, cols, param, n: int, n_params) -> int:
    """Range checks of general triplets; returns p (``max(param) + 1`` by default)."""
    check_range("rows", rows, n, f"shape={(n, n)}")
    check_range("cols", cols, n, f"shape={(n, n)}")
    pmax = int(param.max()) if param.size else -1
    P = pmax + 1 if n_params is None else int(n_params)
    if param.size and (param.min() < 0 or pmax >= P):
        raise ShapeError(f"from_coo: param out of range [0, {P}) (n_params={n_params}): "
                         f"min={param.min()}, max={pmax}")
    return P


def element_blocks(rows, cols, values, param, P):
    """(Ke (ne, k, k) view, dofs (ne, k)) when the triplets are element blocks: parameter e
    owns the k² pairs of k dofs, element after element (top88: param = e repeated k² times)
    or entry after entry (scikit-fem: param = 0 … ne−1 repeated); else None. O(N) checks."""
    N = rows.size
    ne = int(param[-1]) + 1 if N else 0
    if ne < 1 or N % ne or (P is not None and ne > P):
        return None
    L = N // ne
    k = int(round(L ** 0.5))
    if k * k != L:
        return None
    e = np.arange(ne, dtype=param.dtype)
    if np.array_equal(param[::L], e) and _all_equal(param.reshape(ne, L), param[::L, None]):
        R, C, V = (a.reshape(ne, k, k) for a in (rows, cols, values))
    elif np.array_equal(param[:ne], e) and _all_equal(param.reshape(L, ne), param[None, :ne]):
        R, C, V = (a.reshape(k, k, ne).transpose(2, 0, 1) for a in (rows, cols, values))
    else:
        return None
    # (x, y) ↦ (row, col) = (d[x], d[y]) or (d[y], d[x]): Ke = V or its transpose per element
    if _all_equal(R, R[:, :, :1]) and _all_equal(C, C[:, :1, :]):
        d = np.ascontiguousarray(R[:, :, 0])
        if np.array_equal(d, C[:, 0, :]):
            return V, d
    elif _all_equal(R, R[:, :1, :]) and _all_equal(C, C[:, :, :1]):
        d = np.ascontiguousarray(R[:, 0, :])
        if np.array_equal(d, C[:, :, 0]):
            return V.transpose(0, 2, 1), d
    return None


def _all_equal(a, b) -> bool:
    """(a == b).all() for a broadcast b, in slices along axis 0 (no N-sized temporary)."""
    step = max(1, _SLICE // max(1, int(np.prod(a.shape[1:]))))
    for i in range(0, a.shape[0], step):
        bi = b[i:i + step] if b.shape[0] == a.shape[0] else b
        if not np.array_equal(a[i:i + step], np.broadcast_to(bi, a[i:i + step].shape)):
            return False
    return True
