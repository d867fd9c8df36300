"""Child process of test_jax_memory.py: run one pattern many times, print RSS growth as JSON.

    python tests/jax/jax_memory_child.py PATTERN CALLS

Memory is the process's CURRENT resident set after ``gc.collect()`` (not the peak, not the
registry's counters), measured after a warm-up and again after CALLS more calls.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import linops as lo  # noqa: E402
import adjoints.jax as adj  # noqa: E402

NX = 40          # n = 1640: a SuperLU factor of ~1 MB, so a leak of one per call is 300 MB
T = 5
FAM, B = lo.testing.poisson_family(NX)
P = FAM.pattern
N = P.shape[0]
DIAG = (P.rows == P.indices).astype(float)
BJ = jnp.asarray(B)
ALG = "lu"       # SuperLU: the engine that leaked when freed on another thread
HOST: list = []  # host-product lowerings, counted in the "-host" and "-native" patterns
NATIVE: list = []  # native SDDMM lowerings, counted in the "-native" patterns
WRAPPED: list = []  # the lowerings above are wrapped once per process


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def A_of(th):
    return lo.Sparse(DIAG + 0.05 * FAM(th).values, P)


def heat(step_loop):
    def loss(th):
        A = A_of(th)
        return jnp.sum(step_loop(A, th) ** 2)
    return loss


def _scan(unroll):
    return lambda A, th: jax.lax.scan(lambda u, _: (adj.solve(A, u + BJ, ALG), None),
                                      jnp.zeros(N), None, length=T, unroll=unroll)[0]


def _fori(A, th):
    return jax.lax.fori_loop(0, T, lambda i, u: adj.solve(A, u + BJ, ALG), jnp.zeros(N))


def _python(A, th):
    u = jnp.zeros(N)
    for _ in range(T):
        u = adj.solve(A, u + BJ, ALG)
    return u


def _factorize(A, th):
    F = adj.factorize(A, ALG)
    return jax.lax.scan(lambda u, _: (F.solve(u + BJ), None), jnp.zeros(N), None, length=T)[0]


def _carried(A, th):
    F = adj.factorize(A, ALG)
    return jax.lax.fori_loop(0, T, lambda i, s: (s[1].solve(s[0] + BJ), s[1]),
                             (jnp.zeros(N), F))[0]


def _in_body(A, th):
    return jax.lax.scan(lambda u, _: (adj.solve(A_of(th), u + BJ, ALG), None), jnp.zeros(N),
                        None, length=T)[0]


def _stepped(A, th):   # a matrix per step (time-dependent): one factorization per step
    return jax.lax.scan(lambda u, t: (adj.solve(A_of(th * (1 + 0.01 * t)), u + BJ, ALG), None),
                        jnp.zeros(N), jnp.arange(T) * 1.0)[0]


def _while(A, th):
    def body(s):
        i, u = s
        M = lo.Sparse(A.values * (1 + 0.01 * jnp.tanh(u[P.rows])), P)
        return i + 1, u - adj.solve(M, M @ u - BJ, ALG)
    return jax.lax.while_loop(lambda s: s[0] < 3, body, (0, jnp.zeros(N)))[1]


def _raise(x):
    raise RuntimeError("a user's callback failed")


def patterns():
    th0 = jnp.asarray(0.5 + np.random.default_rng(0).random(FAM.n_params))
    grad = lambda loop: jax.jit(jax.grad(heat(loop)))
    out = {
        "jit-forward": jax.jit(lambda th: adj.solve(A_of(th), BJ, ALG)),
        "jit-grad": jax.jit(jax.grad(lambda th: jnp.sum(adj.solve(A_of(th), BJ, ALG) ** 2))),
        "scan-unroll1": grad(_scan(1)), "scan-unroll2": grad(_scan(2)),
        "scan-unrollTrue": grad(_scan(True)), "fori_loop": grad(_fori),
        "python-jit": grad(_python), "factorize": grad(_factorize), "carried": grad(_carried),
        "built-in-body": grad(_in_body), "while-newton": jax.jit(heat(_while)),
        "stepped-in-body": grad(_stepped),
        "eager-scan": jax.grad(heat(_scan(1))),
        "factorize-eager-loop": jax.grad(heat(_python_eager_factorize)),
        # three batch members, three matrices (an unbatched th would be one matrix, one
        # factorization shared by the members)
        "vmap-grad-cond": jax.jit(jax.vmap(jax.grad(lambda th, p: jax.lax.cond(
            p > 0, lambda: jnp.sum(adj.solve(A_of(th), BJ, ALG)), lambda: 0.0)), (0, 0))),
    }

    def failing(th):
        u = adj.solve(A_of(th), BJ, ALG)
        bad = jax.pure_callback(_raise, jax.ShapeDtypeStruct((), u.dtype),
                               jax.lax.stop_gradient(u[0]))
        return jnp.sum(u ** 2) + bad
    out["failing-callback"] = jax.jit(jax.grad(failing))
    out.update(_more_forms())
    return out, th0


def _eager_form(kind):
    """Eager loops and branches (no jit): each call compiles a module JAX keeps cached."""
    def run(th):
        A = A_of(th)
        u0 = jnp.zeros(N)
        if kind == "fori":
            return jax.lax.fori_loop(0, T, lambda i, u: adj.solve(A, u + BJ, ALG), u0)
        if kind == "while":
            return jax.lax.while_loop(lambda s: s[0] < T, lambda s: (
                s[0] + 1, adj.solve(A, s[1] + BJ, ALG)), (0, u0))[1]
        if kind == "cond":
            return jax.lax.cond(th[0] > 0, lambda: adj.solve(A, BJ, ALG), lambda: BJ)
        if kind == "switch":
            return jax.lax.switch(1, [lambda: BJ, lambda: adj.solve(A, BJ, ALG)])
        if kind == "map":
            return jax.lax.map(lambda t: adj.solve(A_of(t), BJ, ALG), jnp.stack([th, 2 * th]))
        raise ValueError(kind)
    return run


def _more_forms():
    """The lifetime forms of review finding 7-10: eager loops, re-jitted closures, returned,
    carried and sliced Factorizations, more matrices than any capacity."""
    out = {f"eager-{k}": _eager_form(k) for k in ("fori", "while", "cond", "switch", "map")}

    def rejit(th):   # a new jitted closure at every call, dropped after it
        f = jax.jit(jax.grad(lambda t: jnp.sum(jax.lax.fori_loop(
            0, T, lambda i, u: adj.solve(A_of(t), u + BJ * th[0], ALG), jnp.zeros(N)) ** 2)))
        return f(th)

    make = jax.jit(lambda th: adj.factorize(A_of(th), ALG))

    def returned(th):   # F made under jit, returned, used eagerly and under jit, dropped
        F = make(th)
        return F.solve(BJ) + jax.jit(lambda F: F.solve_transpose(BJ))(F)

    @jax.jit
    def carried(th):   # a while_loop carrying F and refactorizing at every step
        def body(s):
            i, F, u = s
            G = adj.factorize(A_of(th * (1 + 0.01 * i)), ALG)
            return i + 1, G, F.solve(u + BJ)

        return jax.lax.while_loop(lambda s: s[0] < T, body,
                                  (0, adj.factorize(A_of(th), ALG), jnp.zeros(N)))[2]

    batch = jax.jit(jax.vmap(lambda t: adj.factorize(A_of(t), ALG)))

    def sliced(th):     # a vmapped batch of 3, one member sliced out and used
        Fs = batch(jnp.stack([th, 2 * th, 3 * th]))
        G = jax.tree.map(lambda x: x[1], Fs)
        del Fs
        return G.solve(BJ)

    many = jax.jit(jax.grad(lambda Ts: jnp.sum(jax.lax.map(
        lambda t: jnp.sum(adj.solve(A_of(t), BJ, ALG) ** 2), Ts))))

    def over_capacity(th):
        return many(th[None] * (1 + 0.001 * jnp.arange(MANY))[:, None])

    out.update({"rejit-closure": rejit, "returned-F": returned, "carried-refactorize": carried,
                "sliced-F": sliced, "map-over-capacity": over_capacity})
    return out


MANY = 70   # matrices in one gradient: more than the old per-site capacity of 64
# factorizations per call of the forms above (the test checks the counters)
MORE = {"eager-fori": 1, "eager-while": 1, "eager-cond": 1, "eager-switch": 1, "eager-map": 2,
        "rejit-closure": 1, "returned-F": 1, "carried-refactorize": T, "sliced-F": 3,
        "map-over-capacity": MANY}


def _python_eager_factorize(A, th):
    F = adj.factorize(A, ALG)
    u = jnp.zeros(N)
    for _ in range(T):
        u = F.solve(u + BJ)
    return u


def call(fn, name, th, i):
    th = th * (1 + 1e-3 * (i % 7))
    try:
        if name == "vmap-grad-cond":
            out = fn(th[None] * jnp.asarray([[1.0], [1.1], [1.2]]), jnp.asarray([1.0, -1.0, 2.0]))
        else:
            out = fn(th)
        jax.block_until_ready(out)
    except Exception as e:  # only the failing pattern may fail, and only with its own error
        if name != "failing-callback" or "a user's callback failed" not in str(e):
            raise


def main(name: str, calls: int) -> dict:
    fns, th = patterns()
    pattern = name
    forced = name.rpartition("-")[2]
    if forced in ("host", "native"):
        # the large-pattern products forced (adjoints.jax._spmm): "host", every SDDMM and SpMM
        # in a Python callback; "native", the SDDMM as the native FFI call (its pattern held
        # by the executable), the SpMM still on the host
        from adjoints.jax import _native as _jax_native
        from adjoints.jax import _spmm as _jax_spmm

        _jax_spmm.HOST_MIN_NNZ = 0
        _jax_native.ENABLED = forced == "native"
        if not WRAPPED:
            WRAPPED.append(True)
            real = _jax_spmm._host_callback
            _jax_spmm._host_callback = lambda *a: HOST.append(1) or real(*a)
            real_native = _jax_native.lower_sddmm
            _jax_native.lower_sddmm = lambda *a, **k: NATIVE.append(1) or real_native(*a, **k)
        pattern = name[:-len(forced) - 1]
    fn = fns[pattern]
    name = pattern
    host0, native0 = len(HOST), len(NATIVE)
    for i in range(min(30, max(calls // 5, 10))):
        call(fn, name, th, i)
        if name.startswith("eager"):
            jax.clear_caches()
    gc.collect()
    before = rss()
    adj.reset_stats()
    t0 = time.perf_counter()
    for i in range(calls):
        call(fn, name, th, i)
        if name.startswith("eager"):   # JAX itself retraces and recompiles an eager loop
            jax.clear_caches()           # every call (~1.6 MB kept per call, adjoints or not)
    gc.collect()
    s = adj.stats()
    return {"pattern": pattern, "calls": calls, "grown_mb": (rss() - before) / 2**20,
            "factorizations": s.factorizations, "misses": s.misses, "live": s.live,
            "host_lowerings": len(HOST) - host0, "native_sddmm_lowerings": len(NATIVE) - native0,
            "seconds": time.perf_counter() - t0}


if __name__ == "__main__":
    # one pattern, or several (comma-separated) measured one after the other in this process
    # (a "-host" or "-native" pattern forces the large-pattern products for the rest of the
    # process: put them last)
    for one in sys.argv[1].split(","):
        print("@@" + json.dumps(main(one, int(sys.argv[2]))), flush=True)
