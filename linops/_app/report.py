"""Rendering bench results: the table with its legend, JSON, and the time/memory plot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

COLUMNS = ["n", "method", "time s", "grad/fwd", "fact.", "peak MB", "gradient bytes"]
LEGEND = """columns:
  n               unknowns (free dofs) of the 2-D Q4 family; about 9n stored entries
  time s          value + gradient w.r.t. θ and w.r.t. K's stored values, best of 2 runs
                  (1 when over 1 s; JAX: after the run that compiled)
  grad/fwd        that time divided by the value alone (1.0 = the gradient is free)
  fact.           factorizations per value + gradient (linops: 1; jax spsolve: 2)
  peak MB         peak RSS increase of the first (cold) run, in its own process
  gradient bytes  bytes of the gradient object the method keeps (lazy: O(n); dense: n²·8)"""


def _cell(r: dict) -> dict:
    if "skipped" in r:
        return {"n": f"{r['n']:,}", "method": r["label"], "time s": r["skipped"]}
    return {"n": f"{r['n']:,}", "method": r["label"], "time s": f"{r['time_s']:.3f}",
            "grad/fwd": f"{r['ratio']:.2f}", "fact.": r["factorizations"],
            "peak MB": f"{r['peak_mb']:.0f}", "gradient bytes": f"{r['payload_bytes']:,}"}


def table(results: list[dict], columns=COLUMNS) -> str:
    """A Markdown table of the results (skipped rows say why in the time column)."""
    return markdown_table([_cell(r) for r in results], columns)


def write_json(results: list[dict], path: Path, meta: dict) -> None:
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1))


def plot(results: list[dict], path: Path) -> None:
    """Time and peak memory against n, log-log, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label in dict.fromkeys(r["label"] for r in results):
        pts = sorted((r["n"], r["time_s"], r["peak_mb"]) for r in results
                     if r["label"] == label and "time_s" in r)
        if not pts:
            continue
        n, t, mem = zip(*pts)
        ax1.loglog(n, t, "o-", label=label)
        ax2.loglog(n, np.maximum(mem, 0.1), "o-", label=label)
    ax1.set(xlabel="n (unknowns)", ylabel="value + gradient time [s]", title="time")
    ax2.set(xlabel="n (unknowns)", ylabel="peak RSS increase [MB]", title="memory")
    ax1.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A Markdown table of already formatted cells."""
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    out = ["| " + " | ".join(c.ljust(widths[c]) for c in columns) + " |",
           "|-" + "-|-".join("-" * widths[c] for c in columns) + "-|"]
    out += ["| " + " | ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns) + " |"
            for r in rows]
    return "\n".join(out)


def publish(out: Path, name: str, text: str, rows: list[dict], argv) -> None:
    """Print a section's table and write it (``write_section``) with the command that made it:
    ``python -m linops bench <name>`` and its arguments (``argv``, or the process's own)."""
    import sys

    print(text)
    args = argv if argv is not None else sys.argv[3:]
    write_section(out, name, text, rows, " ".join([f"python -m linops bench {name}", *args]))


def write_section(out: Path, name: str, text: str, rows: list[dict], command: str) -> None:
    """``<out>/<name>.md`` (the table with when, where and how it was measured) and
    ``<out>/<name>.json``; says where."""
    import datetime
    import os
    import platform

    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "command": command,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "load_average": [round(x, 2) for x in os.getloadavg()]}
    (out / f"{name}.md").write_text(f"# {command}\n\nMeasured {meta['date']} on {meta['machine']} "
                                    f"(load average {meta['load_average']}).\n\n{text}\n")
    write_json(rows, out / f"{name}.json", meta)
    print(f"results written to {out}/: {name}.md, {name}.json")
