"""``python -m linops info | bench``: argument validation before any work, method names as the
registry spells them in every section, results written to a folder, a legend under every
section's table and in its ``--help``, "not installed" rows, the plot's legends and marks, and
an ``info`` report generated from the code's own tables."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import linops as lo
import solvers as sv
from linops.__main__ import main
from linops._app import bench as bench_mod
from linops._app import docs as bench_docs
from linops._app import loop, petsc
from linops._app.legends import LEGENDS, explained, legend
from linops._app.methods import DEFAULT, METHODS
from linops._app.names import key, pick
from linops.internals import BACKEND_NAMES, CAPABILITIES, backend_named
from solvers.internals import entries, entry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HAVE = {m: importlib.util.find_spec(m) is not None
        for m in ("jax", "matplotlib", "petsc4py", "pypardiso", "sparseqr", "torch")}


def run(*args, cwd=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "linops", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout, env=env)


# ----- validation before any work ----------------------------------------------------------------
@pytest.mark.parametrize("args,msg", [
    (["--sizes", "0"], "grid side nx must be in [2, 3200]"),
    (["--sizes", "-3"], "grid side nx must be in [2, 3200]"),
    (["--sizes", "x"], "grid side must be an integer"),
    (["--methods", "dense gradient (n×n)"], "--methods: unknown method 'dense'; names: "),
    (["--methods", "lu,"], None),                 # a trailing comma is no name: fine
    (["--methods", ","], "no method given"),
    (["--timeout", "0"], "--timeout must be positive"),
    (["--out", "/etc/passwd/sub"], "cannot write results to /etc/passwd/sub/"),
])
def test_bad_arguments_fail_before_running(args, msg, capsys):
    if msg is None:
        assert bench_mod.parser().parse_args(args).methods == ["lu"]
        return
    with pytest.raises(SystemExit) as e:
        main(["bench", *args])
    assert e.value.code == 2
    assert msg in capsys.readouterr().err


def test_an_unknown_method_lists_every_name(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--methods", "lu", "frobnicate"])
    err = capsys.readouterr().err
    listed = err.split("names: ")[1].split(" (any case")[0].split(", ")
    assert listed == list(METHODS)


# ----- names: the registry's, in any case, comma or space separated ------------------------------
@pytest.mark.parametrize("typed,meant", [
    (["LU"], ["lu"]),
    (["lu,jax"], ["lu", "jax"]),
    (["lu", "jax"], ["lu", "jax"]),
    (["Cholesky, PARDISO", "dense_gradient"], ["cholesky", "pardiso", "dense-gradient"]),
    (["CG+AMG", "Jax-SpSolve", "lu", "LU"], ["cg-amg", "jax-spsolve", "lu"]),
])
def test_method_names_any_case_comma_or_space(typed, meant):
    assert bench_mod.parser().parse_args(["--methods", *typed]).methods == meant


def test_every_registry_algorithm_for_sparse_matrices_is_a_bench_method_by_its_name():
    sparse = [e for e in entries() if "sparse" in e.structures]
    assert len(sparse) >= 8
    for e in sparse:
        m = METHODS[e.name]
        assert e.summary in m.summary and m.label == f"linops {e.cls.__name__}"
        for typed in (e.name.upper(), "-".join(e.name), f" {e.name.title()}_"):
            # the same spelling means the same algorithm to sv.solve and to the bench
            assert entry(typed).name == pick([typed], list(METHODS))[0] == e.name
    assert set(DEFAULT) <= set(METHODS)


def test_loop_takes_the_registry_names_and_its_table_names():
    ap = loop.parser()
    assert ap.parse_args(["--methods", "cholesky,LU", "CG-AMG"]).solvers == \
        ["CHOLMOD", "SuperLU", "CG+AMG"]
    assert ap.parse_args(["--solvers", "superlu", "Pardiso", "auto"]).solvers == \
        ["SuperLU", "PARDISO", "Auto"]
    for solver, (alias,) in loop.solver_names().items():
        # the alias is the name sv.solve gives the loop's own algorithm
        alg = loop.linops_alg(solver)
        assert alias.split("-")[0] == type(alg).name == entry(alias.split("-")[0]).name


def test_loop_refuses_an_unknown_solver_with_the_list(capsys):
    with pytest.raises(SystemExit) as e:
        loop.parser().parse_args(["--methods", "umfpack"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unknown solver 'umfpack'" in err
    assert all(s in err for s in loop.SOLVERS)


def test_petsc_section_names_any_case():
    assert petsc.parser().parse_args(["--methods", "LINOPS,Hand"]).methods == ["linops", "hand"]


@pytest.mark.skipif(not HAVE["jax"], reason="the jax section needs jax")
def test_jax_section_takes_typeable_names(capsys):
    from linops._app import jax as jax_section

    argv = bench_mod.jax_argv(jax_section, ["--sizes", "3", "--methods", "FAM-NUMPY,fam jit",
                                            "adj-jit-value-and-grad", "--timeout", "9"])
    assert argv == ["--sizes", "3", "--methods", "fam numpy", "fam jit",
                    "adj jit value_and_grad", "--timeout", "9"]
    with pytest.raises(SystemExit) as e:
        main(["bench", "jax", "--methods", "numpy-path,nope"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unknown method 'nope'" in err and "numpy-path" in err


# ----- legends: under every section's table, and in its --help ------------------------------------
def _headers(stdout: str) -> list[str]:
    """The column headers of every Markdown table in ``stdout``."""
    lines = stdout.splitlines()
    heads = [ln for ln, nxt in zip(lines, lines[1:]) if ln.startswith("|") and nxt.startswith("|-")]
    assert heads, "no table in the output"
    return [c.strip() for ln in heads for c in ln.strip("|").split("|")]


SECTION_RUNS = {
    "main": (["--sizes", "3", "--methods", "lu", "scipy", "--no-plot"], None),
    "loop": (["loop", "--sizes", "3", "--steps", "2", "--repeat", "1", "--methods", "lu"], None),
    "scale": (["scale", "--sizes", "4", "--build-repeats", "1"], None),   # one child per build
    "jax": (["jax", "--sizes", "3", "--methods", "fam-numpy"], "jax"),
    "torch": (["torch", "--quick", "--nx", "4", "--jacrev-nx", "4", "--edges", "200",
               "--methods", "torch autograd", "jacrev", "gnn backward"], "torch"),
    "petsc": (["petsc", "--nx", "4", "--methods", "hand,linops"], "petsc4py"),
    "eig": (["eig", "--nx", "8", "--k", "3", "--repeat", "1"], None),
    "lstsq": (["lstsq", "--m", "400", "--n", "100", "--repeat", "1"], "sparseqr"),
}


def test_every_section_has_a_legend_and_a_run_here():
    assert set(LEGENDS) == set(bench_mod.SECTIONS) | {"main"}
    assert set(SECTION_RUNS) | {"logdet"} == set(LEGENDS)  # logdet: formatted below (slow run)


@pytest.mark.parametrize("section", sorted(SECTION_RUNS))
def test_every_section_prints_and_writes_a_legend_for_each_column(section, tmp_path):
    args, needs = SECTION_RUNS[section]
    if needs and not HAVE[needs]:
        pytest.skip(f"the {section} section needs {needs}")
    page = tmp_path / "benchmarks.md"
    before = (pathlib.Path(ROOT) / "docs" / "benchmarks.md").read_text()
    page.write_text(before)
    p = run("bench", *args, "--out", str(tmp_path), "--write-docs", str(page), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    text = legend(section)
    assert text in p.stdout                                   # printed under the table
    missing = [c for c in _headers(p.stdout) if c not in explained(text)]
    assert missing == [], f"{section}: columns without a legend entry: {missing}"
    md = (tmp_path / f"{'bench' if section == 'main' else section}.md").read_text()
    assert text in md                                         # and written beside it
    # --write-docs: this section's region of the page now holds the run, nothing else changed
    after = page.read_text()
    start, end = bench_docs._span(after, section)
    region = after[start:end]
    assert region.startswith("Measured ") and "--write-docs" in region.split("\n", 1)[0]
    assert f"```text\n{text}\n```" in region and "|---" in region
    old_start, old_end = bench_docs._span(before, section)
    assert after[:start] == before[:old_start] and after[end:] == before[old_end:]


def test_write_docs_is_checked_before_anything_runs(tmp_path, capsys):
    page = tmp_path / "benchmarks.md"
    page.write_text("# no regions here\n")
    for argv, key in ((["bench", "--sizes", "3"], "main"), (["bench", "loop"], "loop"),
                      (["bench", "jax", "--section", "loops"], "jax-loops")):
        with pytest.raises(SystemExit) as e:
            main([*argv, "--write-docs", str(page)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"<!-- BEGIN bench {key}:" in err and f"<!-- END bench {key} -->" in err
    with pytest.raises(SystemExit):
        main(["bench", "scale", "--only", "build", "--write-docs", str(page)])
    assert "run without --only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "--sizes", "3", "--write-docs", str(tmp_path / "missing.md")])
    assert "missing.md" in capsys.readouterr().err


def test_logdet_tables_are_explained_by_the_legend_under_them(tmp_path, capsys):
    """The logdet section at its smallest still takes a minute (numba compiles its kernels in
    every child): its two tables are formatted here from rows of the shape it measures."""
    from linops._app import logdet

    exact = [{"engine": "SuperLU", "kind": "spd", "dtype": "float64", "logdet": 1e-16,
              "selinv": 5e-16, "gradient": 4e-16}]
    rows = [{"row": "value+grad", "engine": "SuperLU", "n": 20, "fact_s": 0.1, "value_s": 0.01,
             "value_grad_s": 0.2, "ratio_vg": 2.0, "ratio_total": 3.0, "factor_mb": 1.0,
             "vg_peak_mb": 2.0, "mem_ratio": 2.0, "factorizations": 1, "solves": 0}]
    text = logdet.format_exactness(exact) + "\n\n" + logdet.format_rows(rows)
    logdet.publish(tmp_path, "logdet", text, rows, [])
    out = capsys.readouterr().out
    assert legend("logdet") in out and legend("logdet") in (tmp_path / "logdet.md").read_text()
    assert [c for c in _headers(out) if c not in explained(legend("logdet"))] == []
    assert logdet.main.__module__ == "linops._app.logdet"
    ap_engines = logdet.engine_names()
    assert {a for aliases in ap_engines.values() for a in aliases} == \
        {"cholesky", "lu", "pardiso", "auto"}                  # auto-asks: its own name only


@pytest.mark.parametrize("section", sorted(LEGENDS))
def test_every_help_is_complete_and_ends_with_its_legend(section):
    p = run("bench", *([] if section == "main" else [section]), "--help")
    assert p.returncode == 0, p.stderr
    assert legend(section) in p.stdout
    assert "(issue" not in p.stdout
    description = p.stdout.split("\n\n")[1]                   # after the usage block
    assert description.rstrip().endswith("."), description    # no sentence cut mid-way
    if section == "main":
        assert all(f"  {m}" in p.stdout for m in METHODS)     # every method, by name


def test_every_legend_entry_names_a_real_column():
    cols = {"main": bench_mod.report.COLUMNS, "loop": loop.COLUMNS, "petsc": petsc.COLUMNS}
    for section, columns in cols.items():
        assert explained(legend(section)) == set(columns), section


# ----- the main job's outputs --------------------------------------------------------------------
def test_bench_writes_table_json_plot_with_legend(tmp_path):
    p = run("bench", "--sizes", "4", "--methods", "LU", "scipy,dense-gradient",
            "--out", str(tmp_path / "res"))
    assert p.returncode == 0, p.stderr
    assert "grad/fwd" in p.stdout and "gradient bytes  bytes of the gradient" in p.stdout
    assert f"results written to {tmp_path / 'res'}/" in p.stdout
    data = json.loads((tmp_path / "res" / "bench.json").read_text())
    rows = {r["method"]: r for r in data["results"]}
    assert set(rows) == {"lu", "scipy", "dense-gradient"}
    assert rows["lu"]["factorizations"] == 1 and rows["lu"]["n"] == 20
    assert rows["lu"]["payload_bytes"] == 2 * 20 * 8          # RankOne(−λ, u)
    assert rows["lu"]["kind"] == "SuperLU (symmetric mode)"           # a Q4 pattern
    assert rows["lu"]["label"] == "linops LU (SuperLU)"
    assert rows["dense-gradient"]["payload_bytes"] == 20 * 20 * 8
    md = (tmp_path / "res" / "bench.md").read_text()
    assert "python -m linops bench --sizes 4 --methods LU scipy,dense-gradient" in md
    assert "| linops LU (SuperLU)" in md
    if HAVE["matplotlib"]:
        assert (tmp_path / "res" / "bench.png").stat().st_size > 1000


@pytest.mark.skipif(not HAVE["matplotlib"], reason="the plot needs matplotlib")
def test_plot_has_both_legends_a_dated_title_and_marks_what_could_not_run():
    from linops._app.report import figure

    rows = [{"method": m, "label": label, "n": n, "time_s": 0.1 * n, "peak_mb": n}
            for m, label in (("lu", "linops LU (SuperLU)"), ("dense-gradient", "dense n×n"))
            for n in (10, 100)]
    rows += [{"method": "dense-gradient", "label": "dense n×n", "n": 1000,
              "skipped": "needs 206 GB"},
             {"method": "cholesky", "label": "linops Cholesky", "n": 10,
              "skipped": "not installed"}]
    meta = {"date": "2026-12-01T09:30:00", "machine": "x86_64, 2 cores, Python 3.11.7"}
    fig = figure(rows, meta)
    for ax in fig.axes:                                      # time and memory panels alike
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["linops LU (SuperLU)", "dense n×n (× could not run)",
                          "linops Cholesky (× could not run)"]
        assert sorted(t.get_text() for t in ax.texts) == ["needs 206 GB", "not installed"]
        marks = [ln for ln in ax.lines if ln.get_marker() == "x"]
        assert sorted(float(ln.get_xdata()[0]) for ln in marks) == [10.0, 1000.0]
    assert "2026-12-01 09:30:00" in fig.get_suptitle() and "2 cores" in fig.get_suptitle()


# ----- info: generated from the tables -----------------------------------------------------------
def test_info_is_the_two_show_configs_and_the_petsc_table():
    p = run("info")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    rows = {ln.split()[0] for ln in out.splitlines() if ln.startswith("  ") and ln.strip()}
    assert {e.name for e in entries()} <= rows               # every registered algorithm
    for e in entries():
        why = e.unavailable()
        line = next(ln for ln in out.splitlines() if ln.startswith(f"  {e.name} "))
        assert line.rstrip().endswith("available" if why is None else why)
        assert e.adjoint in line
    assert "PETSc transposed solves" in out or "PETSc: " in out
    # no hand-written capability text: every line about a backend comes from its table entry
    for name in BACKEND_NAMES:
        be = backend_named(name)
        for c in CAPABILITIES:
            reason = be.capability(c)
            if reason is not None:
                assert f"no {c}: {reason}" in out
    assert "no minres: jax.scipy.sparse.linalg has no minres" in out


def test_show_config_lists_every_declared_dependency_and_backend():
    import tomllib

    text = lo.show_config()
    project = tomllib.loads(open(os.path.join(ROOT, "pyproject.toml")).read())["project"]
    declared = list(project["dependencies"])
    for extra, reqs in project["optional-dependencies"].items():
        assert f"[{extra}]" in text
        declared += [r for r in reqs if not r.startswith("linops[")]
    for req in declared:
        name = re.match(r"[A-Za-z0-9._-]+", req).group(0)
        assert re.search(rf"\b{re.escape(name)} (\d|not installed)", text), name
    for name in BACKEND_NAMES:
        assert f"\n  {name}: " in text
        be = backend_named(name)
        for c in CAPABILITIES:
            for dt in be.dtypes:
                if be.capability(c, dt) is not None:
                    assert be.capability(c, dt) in text, (name, c, dt)
    assert sv.show_config().splitlines()[0] not in text      # solvers' table is its own


# ----- the loop's PARDISO reference: pypardiso's own solver --------------------------------------
@pytest.mark.skipif(not HAVE["pypardiso"], reason="the PARDISO loops need pypardiso")
def test_loop_pardiso_reference_is_pypardiso_and_agrees_with_linops():
    rows = {v: loop.run_one("PARDISO", v, 6, 3) for v in loop.VARIANTS}
    counts = {v: (r["factorizations"], r["numeric_refactorizations"]) for v, r in rows.items()}
    assert counts == {"fresh (hand)": (3, 0), "symbolic reuse (hand)": (1, 2),
                      "linops update": (1, 2)}
    values = np.array([r["value"] for r in rows.values()])
    assert np.ptp(values) <= 1e-12 * abs(values[0])
    assert rows["fresh (hand)"]["fill"] == rows["linops update"]["fill"] > 0
    source = open(loop.__file__).read()
    assert "ctypes" not in source and "libmkl" not in source   # no binding of MKL by hand


def test_usage_and_unknown_command(capsys):
    assert main([]) == 0 and "info" in capsys.readouterr().out
    assert main(["frobnicate"]) == 2 and "unknown command" in capsys.readouterr().err


@pytest.mark.skipif(not HAVE["jax"], reason="the native section's linops rows need jax")
def test_native_rows_compare_the_gradient_of_one_theta_however_many_warm_calls(monkeypatch):
    """Each call of a native-section row scales θ by 1 + 1e-9·i; the gradient a row reports is
    its first call's, so two rows that made different numbers of warm calls compare the same
    θ (the last call's differed by 3e-9 at n = 10 000: a CHOLMOD row faster than the numpy
    path made more calls)."""
    from linops._app import jax_native

    got = []
    for calls in (3, 5):
        monkeypatch.setattr(jax_native, "MIN_CALLS", calls)
        monkeypatch.setattr(jax_native, "MAX_CALLS", calls)
        got.append(jax_native.run_pair("numpy path", 4, [2, 20]))
    for a, b in zip(*got):
        np.testing.assert_array_equal(a["grad"], b["grad"])
