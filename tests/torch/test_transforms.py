"""Every transform through every entry point of adjoints.torch, against dense torch.linalg.

The battery (grad, vjp, jvp, jacrev, jacfwd, hessian, vmap over right-hand sides, vmap over
value sets, vmap of grad, and torch.autograd's backward) runs on functions of REAL parameter
tensors (complex matrices from their real and imaginary parts), so that every transform
applies in every dtype; the dense oracle is the same function through ``torch.linalg``. Each
transform of a sparse solve makes exactly one factorization (one per member when vmapping over
value sets) and leaves none alive. torch.compile is in test_compile.py; gradcheck and
gradgradcheck on complex leaves (Wirtinger) in test_gradcheck.py.
"""

from __future__ import annotations

import pytest

from tests.torch.cases import (DTYPES, ITERATIVE, close, join, make_case, rhs, rtol_for, torch)

import adjoints.torch as at  # noqa: E402

tf = torch.func
ROWS, COLS = [0, 3, 3, 6, 1], [2, 3, 0, 6, 1]


def _real(x):
    return torch.view_as_real(x) if x.is_complex() else x


def entry(name, case):
    """(f, f_dense, number of b parameters): real parameter tensors -> real output."""
    dt, na = case.dtype, len(case.params)

    def parts(p):
        return p[:na], (join(p[na:], dt) if len(p) > na else None)

    def sparse(*p):
        a, b = parts(p)
        A = case.operand(a)
        if name == "solve":
            out = at.solve(A, b, case.alg, posdef=case.posdef)
        elif name in ("solve_transpose", "solve_adjoint", "factorize"):
            F = at.factorize(A, case.alg, posdef=case.posdef)
            out = {"factorize": F.solve, "solve_transpose": F.solve_transpose,
                   "solve_adjoint": F.solve_adjoint}[name](b)
        elif name == "matmul":
            out = at.matmul(A, b)
        elif name == "rmatmul":
            out = at.matmul(b, A)
        elif name == "logdet":
            out = at.logdet(A, case.alg, posdef=case.posdef).reshape(1)
        else:
            out = at.inv_sample(A, ROWS, COLS, case.alg, posdef=case.posdef)
        return _real(out)

    def dense(*p):
        a, b = parts(p)
        D = case.dense(a)
        out = {"solve": lambda: torch.linalg.solve(D, b),
               "factorize": lambda: torch.linalg.solve(D, b),
               "solve_transpose": lambda: torch.linalg.solve(D.T, b),
               "solve_adjoint": lambda: torch.linalg.solve(D.mH, b),
               "matmul": lambda: D @ b, "rmatmul": lambda: b @ D,
               "logdet": lambda: torch.linalg.slogdet(D)[1].reshape(1),
               "inv_sample": lambda: torch.linalg.inv(D)[ROWS, COLS]}[name]()
        return _real(out)

    nb = 0 if name in ("logdet", "inv_sample") else (2 if dt.is_complex else 1)
    return sparse, dense, nb


def loss(out):
    return (torch.sin(out) + 0.5 * out ** 2).sum()


TRANSFORMS = ("grad", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap_b", "vmap_A",
              "vmap_grad", "autograd")


def run(T, f, params, na, nb, batch):
    """Transform T of f at params (batch: stacked parameter sets for the vmaps)."""
    idx = tuple(range(len(params)))
    g = lambda *p: loss(f(*p))   # noqa: E731
    if T == "grad":
        return tf.grad(g, idx)(*params)
    if T == "vjp":
        out, pull = tf.vjp(f, *params)
        return out, pull(torch.cos(out) + out)
    if T == "jvp":
        tang = tuple(torch.cos(3.0 * p) for p in params)
        return tf.jvp(f, params, tang)
    if T == "jacrev":
        return tf.jacrev(f, idx)(*params)
    if T == "jacfwd":
        return tf.jacfwd(f, idx)(*params)
    if T == "hessian":
        return tf.hessian(g, idx)(*params)
    if T == "vmap_b":
        if not nb:
            return ()
        dims = (None,) * na + (0,) * nb
        return tf.vmap(f, in_dims=dims)(*params[:na], *batch[na:])
    if T == "vmap_A":
        dims = (0,) * na + (None,) * nb
        return tf.vmap(f, in_dims=dims)(*batch[:na], *params[na:])
    if T == "vmap_grad":
        dims = (None,) * na + (0,) * nb if nb else (0,) * na
        args = (*params[:na], *batch[na:]) if nb else batch
        return tf.vmap(tf.grad(g, idx), in_dims=dims)(*args)
    leaves = [p.detach().clone().requires_grad_() for p in params]
    return torch.autograd.grad(g(*leaves), leaves)


def battery(name, kind, dtype, transforms=TRANSFORMS):
    case = make_case(kind, dtype)
    f, fd, nb = entry(name, case)
    na = len(case.params)
    b = rhs(case)[:nb] if nb else ()
    params = tuple(case.params) + tuple(b)
    scale = torch.tensor([1.0, 1.03, 0.97])
    batch = tuple(torch.stack([p * s for s in scale]) for p in params)
    rtol = rtol_for(dtype, kind)
    sparse = kind != "dense" and name not in ("matmul", "rmatmul")
    for T in transforms:
        at.reset_stats()
        base = at.stats().live          # factorizations other tests' garbage still holds
        got = run(T, f, params, na, nb, batch)
        s = at.stats()
        want = run(T, fd, params, na, nb, batch)
        close(got, want, 50 * rtol if T in ("hessian", "jacfwd") and dtype in
              (torch.float32, torch.complex64) else rtol, f"{name}/{kind}/{dtype}/{T}")
        if sparse and not (T == "vmap_b" and not nb):
            members = 3 if T == "vmap_A" or (T == "vmap_grad" and not nb) else 1
            assert (s.factorizations, s.misses, s.live) == (members, 0, base), (T, s)


ENTRIES = ("solve", "factorize", "solve_transpose", "solve_adjoint", "matmul", "rmatmul",
           "logdet", "inv_sample")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ENTRIES)
def test_every_transform_every_entry_point_sparse_lu(name, dtype):
    """The full battery through each entry point on a matrix LU must pivot for, in float32,
    float64, complex64 and complex128: one factorization per transform, none left alive."""
    battery(name, "sparse-LU", dtype)


@pytest.mark.parametrize("kind,dtype", [
    ("sparse-Cholesky", torch.float64), ("sparse-Cholesky", torch.complex128),
    ("sparse-CG", torch.float64), ("sparse-GMRES", torch.complex128),
    ("sparse-Auto", torch.float64), ("family", torch.float64), ("family", torch.complex128),
    ("sparse-Cholesky", torch.float32), ("dense", torch.float64), ("dense", torch.complex128)],
    ids=lambda x: str(x))
def test_solve_transforms_every_kind(kind, dtype):
    """at.solve under the battery with every algorithm kind and operand kind (the θ of a
    family is the differentiated parameter)."""
    battery("solve", kind, dtype,
            TRANSFORMS if kind not in ITERATIVE else ("grad", "jvp", "vmap_b", "autograd"))


@pytest.mark.parametrize("kind,dtype", [("coo", torch.float64), ("coo", torch.complex128),
                                        ("csr", torch.float64)], ids=str)
def test_torch_sparse_tensors_at_the_boundary(kind, dtype):
    """A torch sparse COO/CSR tensor is converted once: torch.autograd reaches its values
    (sparse tensors do not pass through torch.func transforms; lo.Sparse does). torch itself
    cannot differentiate building a complex CSR tensor, hence no complex CSR case."""
    battery("solve", kind, dtype, ("autograd",))
    battery("logdet", kind, dtype, ("autograd",))
