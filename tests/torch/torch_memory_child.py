"""Lifetime patterns of adjoints.torch interleaved in this fresh process (called by
test_memory.py): step i runs pattern i mod len(PATTERNS), STEPS steps in all; prints one
'@@' + JSON line with the growth of the resident set after gc between the end of the warm-up
(a tenth of the steps) and the end, the counters, and each pattern's factorizations.

    python tests/torch/torch_memory_child.py STEPS PATTERN [PATTERN ...]
"""

from __future__ import annotations

import gc
import json
import os
import sys

import torch

import linops as lo
import solvers as sv
import adjoints.torch as at

torch.set_num_threads(1)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(patterns: list[str], steps: int) -> None:
    fam, load = lo.testing.poisson_family(30)       # n = 930: ~0.5 MB per SuperLU factorization
    b = torch.tensor(load)
    target = torch.linspace(0, 1, fam.shape[0], dtype=torch.float64)
    theta = torch.ones(fam.n_params, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=1e-4)
    F0 = at.factorize(fam(theta.detach()), sv.LU())
    zeros = lo.Sparse(torch.zeros(fam.pattern.nnz, dtype=torch.float64), fam.pattern)

    def step(pattern, i):
        opt.zero_grad()
        if pattern == "train":                           # autograd: loss.backward()
            loss = ((at.solve(fam(theta), b, sv.LU()) - target) ** 2).sum()
            loss.backward()
        elif pattern == "train-logdet":
            K = fam(theta)
            loss = at.logdet(K, sv.LU()) + at.solve(K, b, sv.LU()).sum()
            loss.backward()
        elif pattern == "func-grad":                     # torch.func.grad, no graph kept
            theta.grad = torch.func.grad(
                lambda th: ((at.solve(fam(th), b, sv.LU()) - target) ** 2).sum())(theta.detach())
        elif pattern == "hvp":                           # double backward
            u = at.solve(fam(theta), b, sv.LU())
            g, = torch.autograd.grad((u ** 2).sum(), theta, create_graph=True)
            (g.sum()).backward()
        elif pattern == "forward-only":                  # a graph that is never used
            at.solve(fam(theta), b, sv.LU())
        elif pattern == "handle":                        # a Factorization reused each step
            F0.solve(b + i).sum()
        elif pattern == "failing":                       # a failed factorization each step
            try:
                at.solve(zeros, b, sv.LU())
            except sv.SingularMatrixError:
                pass
        else:
            raise ValueError(f"unknown pattern {pattern!r}")
        opt.step()

    warm = max(len(patterns), steps // 10)
    for i in range(warm):
        step(patterns[i % len(patterns)], i)
    gc.collect()
    before = rss_mb()
    at.reset_stats()
    per = dict.fromkeys(patterns, 0)
    for i in range(warm, steps):
        p = patterns[i % len(patterns)]
        n0 = at.stats().factorizations
        step(p, i)
        per[p] += at.stats().factorizations - n0
    gc.collect()
    s = at.stats()
    print("@@" + json.dumps({"grown_mb": rss_mb() - before, "factorizations": per,
                             "misses": s.misses, "live": s.live, "steps": steps - warm}))


if __name__ == "__main__":
    main(sys.argv[2:], int(sys.argv[1]))
