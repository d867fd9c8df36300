"""The backend table: one entry per array library — numpy + scipy, cupy + cupyx, jax; and the
array helpers that carry the mutation rule into the operators.

Every backend-specific call in linops, solvers and adjoints goes through the entry that owns the
arrays at hand: host/device transfer, snapshots (the mutation rule), sparse products, the dense
and sparse linear-algebra modules, and what each backend supports
(``capability`` and ``dtypes``). The table holds kernels and facts only: the Krylov DRIVER
lives in ``solvers._engines.krylov`` (one runner per backend, looked up by ``name``). Modules ask the
table; they do not branch on the backend. The
backend is read from the arrays (:func:`backend_of`), never from global state or the environment.

Mutation rule (one rule for every input type): operators **snapshot** the arrays they are given.
A numpy array is copied into a private read-only array unless it is already read-only all the
way down (then it cannot change and is kept as is); a cupy array is copied on its device; jax
arrays are immutable and kept. Editing the array you passed in therefore never changes an
operator, a factorization or a solution made from it. Cost: one copy per construction, O(bytes),
and nothing per solve. The helpers at the end apply the rule to any array: :func:`snapshot`
copies a user's array once, at construction; :func:`seal` marks an array that linops has just
computed as immutable, so an operator can keep it without that copy.

>>> import numpy as np
>>> be = backend_of(np.ones(3))
>>> be.name, be.capability("amg") is None
('numpy', True)
"""

from __future__ import annotations

import sys
from functools import cached_property
from typing import Any

import array_api_compat as aac
import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from ._errors import BackendNotSupported
from ._jax_constant import constant_spmm

__all__ = ["Backend", "backend_of", "backend_named", "BACKEND_NAMES", "namespace", "to_numpy",
           "is_jax", "is_cupy", "is_torch", "dtype_of", "is_array", "snapshot", "seal", "conj",
           "DTYPES", "CAPABILITIES"]

DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))
CAPABILITIES = ("dense_lu", "dense_cholesky", "sparse_lu", "sparse_cholesky", "cg", "minres",
                "gmres", "bicgstab", "amg", "ilu", "jacobi")
BACKEND_NAMES = ("numpy", "cupy", "jax")


def is_jax(x: Any) -> bool:
    return "jax" in sys.modules and aac.is_jax_array(x)


def is_cupy(x: Any) -> bool:
    return "cupy" in sys.modules and aac.is_cupy_array(x)


def is_torch(x: Any) -> bool:
    """A torch tensor (also one wrapped by torch.func or traced by torch.compile). linops does
    not compute with torch tensors: a ``Sparse`` may hold them as its values, and
    ``adjoints.torch`` does the arithmetic (its functions are torch operations)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


TORCH_NOT_A_BACKEND = ("linops operators do not compute with torch tensors; use adjoints.torch "
                       "(import adjoints.torch as at: at.solve, at.matmul, at.factorize, "
                       "at.logdet; fam(θ) with a torch θ once it is imported), or convert with "
                       "tensor.detach().cpu().numpy()")


def dtype_of(x: Any) -> np.dtype:
    """x.dtype as a numpy dtype (torch dtypes by name: torch.float64 -> float64)."""
    if is_torch(x):
        name = str(x.dtype).removeprefix("torch.")
        try:
            return np.dtype(name)
        except TypeError:
            raise BackendNotSupported(f"torch dtype {x.dtype} has no numpy counterpart; "
                                      f"supported: float32, float64, complex64, complex128") from None
    return np.dtype(x.dtype)


def _cholmod_reason() -> str | None:
    try:
        from sksparse import cholmod  # noqa: F401
    except ImportError:
        return ('sparse Cholesky needs CHOLMOD: pip install "linops[cholmod]" (scikit-sparse; on '
                'Debian/Ubuntu first apt-get install libsuitesparse-dev), or use sv.LU() or '
                'sv.CG(precond=sv.AMG())')
    return None


class Backend:
    """One array library's entry. Subclasses fill in the kernels that differ.

    Attributes: ``name``; ``mutable`` (arrays can change in place, so operators snapshot them);
    ``host_factors`` (sparse factorizations run on the host and move results back, as for jax);
    ``dtypes``; ``xp`` (the array namespace); ``linalg`` (dense LU/Cholesky/triangular solves);
    ``sparse_linalg`` (the module whose ``splu``/``spilu`` factor :meth:`csr` matrices).
    """

    name: str = ""
    mutable: bool = True
    host_factors: bool = True
    device_indices: bool = False  # index arrays must live on the device (cupy)
    dtypes: tuple = DTYPES
    _unsupported: dict = {}

    # ----- identity --------------------------------------------------------------------------------
    def owns(self, x) -> bool:
        raise NotImplementedError

    @property
    def xp(self):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"Backend({self.name})"

    # ----- what exists ----------------------------------------------------------------------------
    _unsupported_kinds: dict = {}  # (capability, dtype kind 'f' | 'c') -> reason

    def capability(self, name: str, dtype=None) -> str | None:
        """None when ``name`` (one of CAPABILITIES) exists here — for ``dtype`` if given — else
        the reason and the alternative."""
        if name not in CAPABILITIES:
            raise KeyError(f"unknown capability {name!r}; known: {CAPABILITIES}")
        if name == "sparse_cholesky" and self.host_factors:
            reason = _cholmod_reason()
            if reason:
                return reason
        if dtype is not None and (name, np.dtype(dtype).kind) in self._unsupported_kinds:
            return self._unsupported_kinds[(name, np.dtype(dtype).kind)]
        return self._unsupported.get(name)

    def require(self, name: str, who: str = "", dtype=None) -> None:
        """Raise BackendNotSupported naming the alternative when ``name`` does not exist here."""
        reason = self.capability(name, dtype)
        if reason is not None:
            what = f" for {np.dtype(dtype).name}" if dtype is not None else ""
            raise BackendNotSupported(f"{who or name} is not available{what} for {self.name} "
                                      f"arrays: {reason}")

    def require_dtype(self, dtype, who: str) -> np.dtype:
        dt = np.dtype(dtype)
        if dt not in self.dtypes:
            raise BackendNotSupported(
                f"{who}: dtype {dt} is not supported on {self.name}; supported: "
                f"{', '.join(str(d) for d in self.dtypes)}. Convert with .astype(np.float64)")
        return dt

    # ----- data movement --------------------------------------------------------------------------
    def to_host(self, x) -> np.ndarray:
        return np.asarray(x)

    def from_host(self, x):
        return self.xp.asarray(x)

    def index(self, ix):
        """A host index array made usable for indexing this backend's arrays."""
        return ix

    def snapshot(self, x):
        """A private copy of a user array that nobody else can change (see the mutation rule)."""
        return x

    def seal(self, x):
        """Mark an array this library just created as immutable (no copy)."""
        return x

    def freeze(self, x):
        """An immutable version of a result this library computed: sealed in place when it owns
        its memory, else a sealed copy."""
        return x

    # ----- kernels --------------------------------------------------------------------------------
    def spmm(self, values, pattern, X):
        """CSR(values on pattern) @ X for X of shape (n,) or (n, k)."""
        return self.csr(values, pattern) @ X

    def spmm_adjoint(self, values, pattern, X):
        """CSR(values on pattern)ᴴ @ X without forming the transposed pattern (the native CSC
        view of the CSR arrays): O(nnz·k), no sort, no extra index arrays."""
        xp = self.xp
        complex_ = np.dtype(values.dtype).kind == "c"
        Y = self.csr(values, pattern).T @ (xp.conj(X) if complex_ else X)
        return xp.conj(Y) if complex_ else Y

    def scatter(self, shape, rows, cols, values, dtype):
        """Dense array of ``shape`` with ``values`` at (rows, cols) and zeros elsewhere."""
        out = self.xp.zeros(shape, dtype=dtype)
        out[self.index(rows), self.index(cols)] = values
        return out

    def rowdot(self, A, B):
        """Σⱼ A[i, j]·B[i, j] for every row i (the SDDMM inner loop)."""
        return self.xp.sum(A * B, axis=1)

    def put(self, out, ix, values):
        """``out[ix] = values``, returned (in place where arrays are mutable)."""
        out[self.index(ix)] = values
        return out

    def csr(self, values, pattern):
        """The library's native CSR matrix (scipy on the host for numpy and jax)."""
        return sp.csr_matrix((self.to_host(values), pattern.indices, pattern.indptr),
                             shape=pattern.shape)

    @property
    def linalg(self):
        return la

    @property
    def sparse_linalg(self):
        return spl

    krylov_rtol_keyword = "rtol"  # the relative-tolerance keyword of its Krylov module
    sparse_lu_name = "SuperLU"
    sparse_lu_keeps_order = True  # splu exposes perm_c, so a numeric refactorization reuses it

    def to_factor(self, x):
        """An array as this backend's sparse factorizations take it (the host for numpy/jax:
        SuperLU, CHOLMOD and spilu run there; the device for cupy's cupyx splu)."""
        return self.to_host(x)

    def from_factor(self, x):
        """A factorization's result back in this backend's arrays."""
        return self.from_host(x)

    def factor_layout(self, x):
        """The memory layout the backend's SuperLU solves want (Fortran order on the host)."""
        return np.asfortranarray(x)

    def fresh(self, y, x):
        """``y`` as a new array of this backend that does not alias ``x`` (scipy's Krylov
        methods update the vectors they are given in place)."""
        y = self.xp.asarray(y)
        return self.xp.array(y, copy=True) if y is x else y


_COMPLEX_MINRES = ("scipy's minres takes real square roots of complex inner products and fails "
                   "('indefinite preconditioner') or returns wrong iterates for complex Hermitian "
                   "matrices; use sv.CG() (Hermitian positive definite) or sv.GMRES()")


class _Numpy(Backend):
    name = "numpy"
    mutable = True
    host_factors = True
    _unsupported_kinds = {("minres", "c"): _COMPLEX_MINRES}

    def owns(self, x) -> bool:
        return isinstance(x, np.ndarray) or np.isscalar(x)

    @property
    def xp(self):
        return np

    def snapshot(self, x):
        x = np.asarray(x)
        if _frozen(x):
            return x
        c = np.array(x, copy=True)
        c.setflags(write=False)
        return c

    def seal(self, x):
        if isinstance(x, np.ndarray) and x.base is None:
            x.setflags(write=False)
        return x

    def freeze(self, x):
        return self.seal(x) if isinstance(x, np.ndarray) and x.base is None else self.snapshot(x)

    def spmm(self, values, pattern, X):
        return np.asarray(self.csr(values, pattern) @ X)

    def fresh(self, y, x):
        y = self.to_host(y)
        if not y.flags.writeable or np.may_share_memory(y, x):
            y = np.array(y)
        return y

    def rowdot(self, A, B):
        return np.einsum("ij,ij->i", A, B)


def _frozen(x: np.ndarray) -> bool:
    """True when neither x nor any array it views can be written (so it can never change)."""
    b = x
    while isinstance(b, np.ndarray):
        if b.flags.writeable:
            return False
        b = b.base
    return b is None or isinstance(b, bytes)


class _Cupy(Backend):
    name = "cupy"
    mutable = True
    host_factors = False
    device_indices = True
    _unsupported_kinds = {("minres", "c"): "cupyx's minres is a port of scipy's, which fails for "
                                           "complex Hermitian matrices; use sv.CG() or sv.GMRES()"}
    _unsupported = {
        "sparse_cholesky": "cupyx has no sparse Cholesky; use sv.LU() (cupyx splu) or "
                           "sv.CG(precond=sv.Jacobi())",
        "bicgstab": "cupyx.scipy.sparse.linalg has no bicgstab; use sv.GMRES()",
        "amg": "pyamg is CPU-only and has no GPU counterpart; on cupy use sv.ILU() or "
               "sv.Jacobi(), or sv.LU()",
    }

    def owns(self, x) -> bool:
        return is_cupy(x)

    @cached_property
    def xp(self):
        # optional: cupy (the gpu extra)
        import cupy

        return cupy

    def to_host(self, x) -> np.ndarray:
        """Device -> host copy (documented transfer)."""
        return x.get() if is_cupy(x) else np.asarray(x)

    def index(self, ix):
        """Ad-hoc host index arrays move to the device (one copy); patterns keep theirs there."""
        return self.xp.asarray(ix)

    def snapshot(self, x):
        return self.xp.array(x, copy=True)

    def csr(self, values, pattern):
        # optional: cupy (the gpu extra)
        import cupyx.scipy.sparse as csp

        return csp.csr_matrix((self.xp.asarray(values), pattern.on(self, "indices"),
                               pattern.on(self, "indptr")), shape=pattern.shape)

    @property
    def linalg(self):
        # optional: cupy (the gpu extra)
        import cupyx.scipy.linalg as la

        return la

    @property
    def sparse_linalg(self):
        # optional: cupy (the gpu extra)
        import cupyx.scipy.sparse.linalg as cspl

        return cspl

    krylov_rtol_keyword = "tol"  # cupyx keeps scipy's older keyword
    sparse_lu_name = "cupyx SuperLU (host factorization, GPU solves)"
    sparse_lu_keeps_order = False

    def to_factor(self, x):
        return x  # cupyx splu solves on the device

    def from_factor(self, x):
        return x

    def factor_layout(self, x):
        return x


class _Jax(Backend):
    name = "jax"
    mutable = False
    host_factors = True
    _unsupported = {
        "minres": "jax.scipy.sparse.linalg has no minres; use sv.GMRES() or sv.CG()",
        "amg": "pyamg works on host numpy arrays and cannot run inside jax's Krylov loops; use "
               "sv.Jacobi(), a direct solver (sv.LU(), sv.Cholesky()), or numpy arrays",
        "ilu": "scipy's spilu works on host numpy arrays and cannot run inside jax's Krylov "
               "loops; use sv.Jacobi(), a direct solver (sv.LU()), or numpy arrays",
    }

    def owns(self, x) -> bool:
        return is_jax(x)

    @cached_property
    def xp(self):
        # optional: jax (the jax extra)
        import jax.numpy as jnp

        return jnp

    def to_host(self, x) -> np.ndarray:
        """Host copy of a concrete jax array (inside ``jax.jit`` use a callback instead)."""
        # optional: jax (the jax extra)
        import jax

        try:
            return np.asarray(x)
        except jax.errors.TracerArrayConversionError:
            raise BackendNotSupported(
                "this operation needs concrete (host) values but got a jax tracer inside "
                "jax.jit/grad/vmap; use adjoints.jax.solve for solves under jax transforms") from None

    def spmm(self, values, pattern, X):
        """Gather + ``segment_sum``: differentiable, jit-able; O(nnz·k) work and memory. With
        host-constant values (a family's map), one linear primitive that gathers in both
        directions (``linops._jax_constant``: about scipy's speed on the CPU)."""
        # optional: jax (the jax extra)
        import jax

        jnp = self.xp
        if isinstance(values, np.ndarray):
            return constant_spmm(values, pattern, jnp.asarray(X))
        values, X = jnp.asarray(values), jnp.asarray(X)
        contrib = (values * X[pattern.indices] if X.ndim == 1
                   else values[:, None] * X[pattern.indices])
        return jax.ops.segment_sum(contrib, pattern.rows, num_segments=pattern.shape[0],
                                   indices_are_sorted=True)

    def scatter(self, shape, rows, cols, values, dtype):
        return self.xp.zeros(shape, dtype=dtype).at[rows, cols].set(values)

    def spmm_adjoint(self, values, pattern, X):
        """Through the transposed pattern (cached on the pattern, host-side at trace time), so
        XLA's segment sum runs over sorted segments: faster than an unsorted scatter."""
        if isinstance(values, np.ndarray):  # host constants (a family's map): Aᴴ X = conj(Aᵀ conj X)

            X = self.xp.asarray(X)
            if values.dtype.kind != "c":
                return constant_spmm(values, pattern, X, "T")
            return self.xp.conj(constant_spmm(values, pattern, self.xp.conj(X), "T"))
        PT, perm = pattern.transpose()
        return self.spmm(self.xp.conj(self.xp.asarray(values))[perm], PT, X)

    def put(self, out, ix, values):
        return out.at[ix].set(values)

    @property
    def linalg(self):
        # optional: jax (the jax extra)
        import jax.scipy.linalg as la

        return la


_TABLE: dict[str, Backend] = {"numpy": _Numpy(), "cupy": _Cupy(), "jax": _Jax()}


def backend_named(name: str) -> Backend:
    """The table entry ``name`` ('numpy', 'cupy' or 'jax')."""
    try:
        return _TABLE[name]
    except KeyError:
        raise BackendNotSupported(f"unknown backend {name!r}; known: {BACKEND_NAMES}") from None


def backend_of(*arrays: Any) -> Backend:
    """The backend owning the given arrays (numpy when all are numpy or python scalars).

    jax wins over numpy when mixed (numpy constants such as a pattern's index arrays are then
    lifted into jax); mixing cupy and jax raises BackendNotSupported.
    """
    arrs = [a for a in arrays if a is not None and not isinstance(a, (int, float, complex))]
    if any(is_torch(a) for a in arrs):
        raise BackendNotSupported(TORCH_NOT_A_BACKEND)
    jax_ = any(is_jax(a) for a in arrs)
    cupy_ = any(is_cupy(a) for a in arrs)
    if jax_ and cupy_:
        raise BackendNotSupported("cannot mix cupy and jax arrays in one operation; convert one "
                                  "side with DLPack first")
    return _TABLE["jax" if jax_ else "cupy" if cupy_ else "numpy"]


def namespace(*arrays: Any):
    """Array namespace of the given arrays (``backend_of(*arrays).xp``)."""
    return backend_of(*arrays).xp


def to_numpy(x: Any) -> np.ndarray:
    """Host copy (a documented device->host transfer for cupy; jax arrays must be concrete)."""
    return backend_of(x).to_host(x)


# ----- the mutation rule, for any array ----------------------------------------------------------
def is_array(x: Any) -> bool:
    """An array of a backend in the table (numpy, cupy, jax, also tracers) or any array-API
    array. Objects that merely have ``shape`` and ``dtype`` (operators, of linops or of other
    libraries) are not arrays: they have no ``__array_namespace__``."""
    if isinstance(x, (np.ndarray, np.generic)):
        return True
    return is_jax(x) or is_cupy(x) or (hasattr(x, "__array_namespace__") and hasattr(x, "shape"))


def snapshot(x):
    """The mutation rule: a private, unchangeable version of a user array.

    A numpy array is copied once (O(bytes)) into a read-only array, unless it is read-only all
    the way down (itself and every array it views): then nobody can change it and it is kept.
    jax arrays are kept; cupy arrays are copied on their device; torch tensors are cloned
    (``x.clone()``: still differentiable, so autograd reaches the caller's tensor).
    ``np.matrix`` becomes an ndarray (its ``*`` and 2-D slicing rules would break the
    operators). Non-arrays (python scalars, operators) pass through unchanged.

    >>> a = np.ones(2)
    >>> s = snapshot(a)
    >>> a[0] = 5.0
    >>> s, s.flags.writeable, snapshot(s) is s
    (array([1., 1.]), False, True)
    """
    if is_torch(x):   # a private copy; differentiable, so gradients reach the caller's tensor
        return x.clone()
    if not is_array(x):
        return x
    if isinstance(x, np.matrix):
        x = np.asarray(x)
    return backend_of(x).snapshot(x)


def conj(x):
    """conj(x), without a copy for real arrays; the result is sealed."""
    if np.dtype(x.dtype).kind != "c":
        return x
    be = backend_of(x)
    return be.seal(be.xp.conj(x))


def seal(x):
    """Mark an array linops just created as immutable, so operators keep it without a copy.

    Only for arrays nobody else holds: sealing a user's array would make it read-only under
    their feet. A numpy view is left writeable (its base could still change), and the operator
    that receives it then copies it.
    """
    return backend_of(x).seal(x) if is_array(x) else x
