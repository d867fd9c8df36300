"""What every column of every ``python -m linops bench`` table means: one legend per section.

Each legend is printed under its table, written beside it (``bench-out/<section>.md``) and shown
at the end of the section's ``--help``. ``tests/app/test_cli.py`` runs every section at its
smallest size and checks that each column header of the printed table is explained in the
legend printed under it, so a new column cannot go out unexplained.

A legend is plain text: ``columns:`` and then one entry per column, the header at two spaces,
its explanation after it (continuation lines indented further).

>>> from linops._app.legends import legend, LEGENDS
>>> sorted(LEGENDS)
['eig', 'jax', 'logdet', 'loop', 'lstsq', 'main', 'petsc', 'scale', 'torch']
>>> legend("loop").splitlines()[0]
'columns:'
>>> legend("nosuch")
Traceback (most recent call last):
...
KeyError: "no legend for section 'nosuch'; sections: eig, jax, logdet, loop, lstsq, main, petsc, scale, torch"
"""

from __future__ import annotations

MAIN = """columns:
  n               unknowns (free dofs) of the 2-D Q4 family; about 9n stored entries
  method          what computed it (linops methods: the algorithm, and in parentheses the engine
                  it ran, as the cache reports it)
  time s          value + gradient w.r.t. θ and w.r.t. K's stored values, best of 2 to 5
                  runs (the cold one and more while they total under 1 s; JAX: after the run
                  that compiled)
  grad/fwd        that time divided by the value alone (1.0 = the gradient is free)
  fact.           factorizations per value + gradient (linops: 1; jax spsolve: 2)
  peak MB         peak RSS increase of the first (cold) run, in its own process
  gradient bytes  bytes of the gradient object the method keeps (lazy: O(n); dense: n²·8)"""

LOOP = """columns:
  n             unknowns (free dofs) of the Q4 family, nx·(nx+1)
  method        solver: variant. fresh (hand): a hand-written script that factorizes every step;
                symbolic reuse (hand): one that keeps what the library allows (CHOLMOD analyze,
                SuperLU's column order, PARDISO phase 11, pyamg's aggregation);
                linops update: cache.update(A=fam(θ)) + solve + solve_pullback + fam.pullback
  time s        wall time of the whole loop (steps × value + θ-gradient), best of --repeat
                interleaved runs, each in a fresh process
  s/step        time s / steps
  cpu s         CPU time of the loop (steadier than wall time on a shared machine)
  fact/num      full factorizations (AMG: setups) / numeric refactorizations over the loop
  fill          stored entries of the factors (SuperLU: L+U; CHOLMOD: L; PARDISO: iparm(18))
  its/step      Krylov iterations of each step, forward + adjoint solve (CG+AMG)
  peak MB       peak RSS of the loop's process over its RSS just before the loop
  vs best hand  time / the best hand-written loop of the same solver (Auto: / fresh CHOLMOD),
                the target in parentheses
  cpu vs hand   the same ratio in CPU time
  load          1-minute load average when the run ended"""

SCALE = """columns:
  n                               unknowns (free dofs) of the Q4 Poisson family
  method                          hand CG+AMG: the numpy + scipy + pyamg script; linops CG+AMG:
                                  the family, sv.CG(precond=sv.AMG()), solve_pullback, pullback
  time s                          wall time of all the parts below, building the family included
  build/asm/amg/solve/adj/grad s  the parts: mesh + family (or COO indices) build / assembly
                                  of K(θ) / AMG setup / forward CG solve / adjoint CG solve /
                                  θ-gradient
  its                             CG iterations, forward + adjoint
  peak GB                         peak RSS over the process after its imports and a warm-up
  peak B/unknown                  that peak per unknown, in bytes
  kept B/unknown                  bytes per unknown of what the path keeps alive (listed below
                                  the table, structure by structure)
  linops/hand t, mem              linops's time and peak over the hand script's, same n
  load                            1-minute load average when the run ended
family-build table (--only build):
  build                           plain: the numpy/scipy COO assembly of one K (connectivity,
                                  elimination, int32 indices, csr_matrix); from_elements /
                                  from_coo: the family K(θ) built by linops (from_coo's time
                                  includes making the full iK, jK, sK, param arrays)
  wall s                          wall time of the build, best of --build-repeats fresh processes
  cpu s (sys)                     its CPU time, user + system (system: page faults of fresh memory)
  vs plain: wall, cpu, peak       wall time, CPU time and peak memory over the plain assembly's
                                  (target ≤ 1.10)"""

JAX = """columns:
  n                unknowns (free dofs) of the Q4 family, nx·(nx+1)
  method           numpy path: sv.solve + solve_pullback + fam.pullback; adj jit
                   value_and_grad: jax.jit(jax.value_and_grad(f)) through adj.solve;
                   spsolve + grad: the same f through jax.experimental.sparse's spsolve;
                   fam numpy / fam jit: assembling K(θ)'s values; hvp jit: Hessian-vector
                   products through the sparse solve
  time s           best of three warm calls (one when a call takes over 30 s)
  first call s     the first call, JIT compilation included
  peak MB (warm)   peak RSS increase of a warm call over the RSS before it
  peak MB (first)  the same for the first call
  factorizations   factorizations per call (adjoints.jax counts them; spsolve: 2)
  ratio            against the row it is compared with (named), or products per second
  memory           warm peak against the numpy path's"""

PETSC = """columns:
  n              unknowns (free dofs) of the Q4 family, nx·(nx+1), left edge fixed
  ranks          MPI ranks of the launch
  method         hand: the hand-written petsc4py script; linops: sv.PETSc(cg, gamg) on a
                 PETScElementFamily; serial: sv.CG(precond=sv.AMG()) with pyamg, one process
  time s         assembly K(θ) + setup + solve + adjoint solve + θ-gradient + value (not the
                 build)
  vs hand        time / the hand-written petsc4py script's, same n and ranks (target ≤ 1.10)
  peak MB/rank   each rank's peak RSS over its RSS before building the problem
  mem vs hand    max-over-ranks peak / the hand-written script's
  iters fwd+adj  Krylov iterations of the forward and the adjoint solve
  ‖b−Ku‖/‖b‖     achieved true relative residual of the forward solve (stopping test:
                 ‖b − Kx‖ ≤ rtol‖b‖ for all)
  ‖a−Kλ‖/‖a‖     the same for the adjoint solve
  build s        mesh numbering + family / preallocation structure (once per optimisation)
  load           1-minute load average when the run ended"""

LOGDET = """columns:
  engine             the factorization (the exactness table: dense LU / dense Cholesky through
                     LAPACK, SuperLU, CHOLMOD, PARDISO's definite types; the timing table: the
                     engine --engines named, as the cache reports it)
  matrix             spd: the Q4 family; hpd: plus a Hermitian imaginary part; general: not
                     Hermitian
  dtype              the matrix's dtype (single precision factorizes in single, CHOLMOD in double)
  log-det rel. err   relative error of log|det A| from cache.logdet() against numpy's slogdet
  A⁻¹ on pattern     max error of the selected inverse on A's pattern / max|A⁻¹| (— PARDISO:
                     log det only)
  θ-gradient         max error of fam.pullback(ad.logdet_pullback(cache)) against the dense
                     trace formula / max|gradient|
  n                  unknowns of the Q4 family, nx·(nx+1)
  factorize s        one sv.init with the engine: the factorization every later column reuses
  logdet s           cache.logdet() on those factors
  value+grad s       cache.logdet() + the θ-gradient by selected inversion, on those factors
  (v+g)/fact         value+grad s / factorize s
  (fact+v+g)/fact    (factorize s + value+grad s) / factorize s (target ≤ 5)
  factor MB          RSS the factorization holds
  v+g peak MB        peak RSS during value+grad over the RSS before the factorization
  peak/factor        v+g peak MB / factor MB (target ≤ 3)
  fact./solves       factorizations / solves the cache counted (the θ-gradient by selected
                     inversion needs no solve)"""

JAX_LOOPS = """--section loops:
  n                unknowns: n = nx·nx for the heat rows (A = I + Δt·K(θ)), nx·(nx+1) otherwise
  method           heat numpy: sv.init once + the reverse loop by hand (lazy LowRank ∂A);
                   heat scipy hand: a hand-written scipy adjoint (one splu, trans='T');
                   heat scan / fori / factorize: jit(value_and_grad) of the loop with lax.scan,
                   lax.fori_loop, or adj.factorize + scan; vmap32 / 32 separate: one vmapped
                   solve over 32 value sets of one pattern / 32 separate sv.init; jacrev:
                   jit(jacrev) of u = A⁻¹b in b; adj lu / adj cholesky / klujax / splineax KLU:
                   jit(value_and_grad) of aᵀK(θ)⁻¹b through adjoints.jax and the JAX peers
  time s           best of three warm calls (one when a call takes over 30 s)
  cpu s            the CPU time of that call (steadier than wall time on a shared machine)
  first call s     the first call, JIT compilation included
  peak MB (first)  peak RSS increase of the first call over the RSS before it
  peak MB (warm)   the same for a warm call
  factorizations   host factorizations per call (adjoints.jax counts them; klujax: 2)
  symbolic         symbolic analyses per call (one per pattern with sv.init(like=))
  solve calls      host solve calls per call (jacrev: one multi-column transposed solve)
  cpu ratio        CPU time over the row named (and over the hand-written scipy adjoint)"""

JAX_BASE = """--section base (the base install: sksparse and pypardiso blocked in every child):
  round            the round of interleaved rows (--repeat)
  method           adj auto: jit(value_and_grad) of aᵀK(θ)⁻¹b through adj.solve(posdef=True),
                   sv.Auto (SuperLU in symmetric mode here); klujax, splineax KLU, spsolve +
                   grad: the JAX peers on the same f, a new θ per call
  vs linops        the row's time over adj auto's in the same round (≥ 1.2: the target)
  cpu vs linops    the same for CPU time (steadier on a loaded machine)
  load             1-minute load average when the row ended"""

EIG = """columns:
  n                unknowns (free dofs) of the clamped Q4 plate, (nx−1)²
  method           linops: sv.eigsh(K, k, sigma=0, M=M) with its default engine; linops,
                   alg=Pardiso: the same on PARDISO (Auto's choice from n = 20 000); scipy:
                   scipy.sparse.linalg.eigsh(K, k, M, sigma=0) (SuperLU); in parentheses the
                   engine that factorized K − σM
  time s           wall time of the eigensolve (factorization, M check and Lanczos), best of
                   --repeat runs each in a fresh process
  cpu s            its CPU time (steadier than wall time on a shared machine)
  vs scipy         time s / scipy's
  cpu vs scipy     cpu s / scipy's
  fact.            factorizations (of K − σM; the gradients add none)
  solves           solves with that factorization (one per Lanczos step)
  load             1-minute load average when the measurement ended
  modes            eigenpairs k
  eigsh s          the linops eigensolve's wall time (as above)
  gradients s      wall time of the k mode gradients for K and M: per mode ad.eigsh_pullback
                   (λ̄ = eᵢ) + fam_K.pullback + fam_M.pullback
  grad/eigsh       gradients s / eigsh s (target ≤ 0.10)
  cpu grad/eigsh   the same ratio in CPU time
  values vs scipy  max |λ − λ_scipy| / max |λ_scipy| (target ≤ 1e-10)
  θ-grad vs FD     max relative error of the k gradients along a random direction over every
                   cell against 4-point central differences (target ≤ 1e-7)
  ρ-grad vs FD     the same for the density family"""

LSTSQ = """columns:
  m×n           shape of A (stacked banded blocks, columns scaled to cond ≈ --cond)
  nnz           stored entries of A
  method        QR solve: sv.init(sv.LeastSquares(A, b), sv.QR()) + x = A⁺b (SuiteSparseQR);
                value + ∂A: the same + ad.solve_pullback (the rank-2 lazy cotangent, its λ by
                R⁻ᴴ then R⁻¹ from the same factors); on pattern: + lo.project onto A's
                pattern (SDDMM). Lower tables: the method of the gradient
  time s        wall time, factorization included, best of --repeat interleaved runs, each in
                a fresh process
  cpu s         the best CPU time of those runs
  vs solve      time s / the QR solve's (target ≤ 1.3 for value + ∂A)
  cpu vs solve  cpu s / the QR solve's
  ∂A s          the best run's pullback (and projection) part alone
  in-run ratio  (its sv.solve part + its ∂A part) / its sv.solve part: the same ratio within
                one run, free of the run-to-run spread of a loaded machine (target ≤ 1.3)
  fact.         factorizations per run (1: the pullback reuses the QR)
  cotangent     the type of ∂A and its rank
  cotangent MB  bytes of ∂A's factors (O(m + n))
  peak MB       peak RSS of the run over the RSS after building A
  load          1-minute load average when the run ended
  cond          cond(A) of the normal-equations comparison
  ∂f/∂t         the directional derivative of f = Σx along dA = A₁ (t: the step along A₁)
  rel. error    |∂f/∂t − reference| / |reference| (target ≤ 1e-6 for QR)
  case          the shape of A in the square-rule case of LinearSolve.jl (tall, and the wide one)
  ∂A error      max |∂A − central differences| / max |central differences| over every entry"""

JAX_NATIVE = """--section native:
  n             unknowns of the heat problem (nx² for grid side nx)
  method        what ran the loop (see --help); the peers' versions are in the last column
  µs/step cpu   marginal CPU time per implicit step of jit(value_and_grad): (t(T) − t(T/10)) /
                (0.9·T), both in one process, each T the best of 3-15 warm calls (until it
                ran 1 s), one thread, the best of --repeat interleaved rounds
  µs/step wall  the same in wall-clock time
  ratio         µs/step cpu over the best native peer's at this n (klujax, sparsax, splineax)
  vs numpy      µs/step cpu over the numpy path's at this n
  grad rel.err  max|∇θ − ∇θ(numpy path)| / max|∇θ(numpy path)|, of each row's first call (one θ)
  fact.         factorizations per call (adjoints.jax counts its own; peers: by construction)
  version       the package that ran it"""

# one section, three tables written to the page (--section); JAX_BASE follows the base table
# and the help (its table has no region of the page)
JAX = JAX + "\n" + JAX_LOOPS + "\n" + JAX_NATIVE

TORCH = """columns:
  method          numpy path: sv.solve + solve_pullback + fam.pullback; torch autograd:
                  a @ at.solve(fam(θ), b, posdef=True) and backward(); at lu: the same with
                  sv.LU() (SuperLU, as the peer); torch-sla: torch_sla.spsolve(scipy, lu) in its
                  own environment; vmap32 / 32 separate: torch.func.vmap of at.solve over 32 value
                  sets / 32 separate calls; jacrev: torch.func.jacrev of u = A⁻¹b in b; gnn
                  forward / backward: X ↦ A(w) X W at the given edges (backward: w̄ by SDDMM, X̄, W̄)
  n / edges       unknowns of the Q4 family, nx·(nx+1), or stored edges of the GNN graph
  time s          best of three warm calls (gnn backward: the backward pass alone)
  cpu s           the CPU time of that call (one thread; steadier than wall time)
  first call s    the first call (imports of the kernels, numba's compiled SDDMM included)
  peak MB (warm)  peak RSS increase of a warm call over the RSS before it
  factorizations  factorizations per call (adjoints.torch counts them; torch-sla: calls of
                  scipy's spsolve/splu)
  symbolic        symbolic analyses per call (vmap32: one for the 32 members)
  solve calls     host solve calls per call (jacrev: one multi-column solve)
  cpu ratio       CPU time over the row named, with the issue's target"""

LEGENDS = {"main": MAIN, "loop": LOOP, "scale": SCALE, "jax": JAX, "torch": TORCH,
           "petsc": PETSC, "logdet": LOGDET, "eig": EIG, "lstsq": LSTSQ}


def legend(section: str) -> str:
    """The column legend of ``section`` ('main' for ``python -m linops bench`` itself).

    Parameters
    ----------
    section : str
        A key of :data:`LEGENDS`.

    Returns
    -------
    str
        ``columns:`` followed by one entry per column of that section's table.

    Raises
    ------
    KeyError
        For a section without a legend, naming the sections that have one.
    """
    try:
        return LEGENDS[section]
    except KeyError:
        raise KeyError(f"no legend for section {section!r}; sections: "
                       f"{', '.join(sorted(LEGENDS))}") from None


def explained(legend_text: str) -> set[str]:
    """The column headers a legend explains: the text of each entry line before the run of two
    or more spaces that starts its explanation.

    >>> sorted(explained(legend("petsc")))[:3]
    ['build s', 'iters fwd+adj', 'load']
    """
    heads = set()
    for line in legend_text.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("   "):
            heads.add(line.strip().split("  ")[0])
    return heads
