"""Rendering bench results: Markdown tables, the column legend under each, JSON, and the
time/memory plot of the main table.

Every section goes through :func:`publish` (or :func:`write_section`), which prints the table
with its legend and writes ``<out>/<section>.md`` and ``.json`` with the date, the machine and
the command that made them, and with ``--write-docs`` the table's region of the benchmarks
page (:mod:`.docs`).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

from .docs import write as write_docs
from .legends import LEGENDS, legend

COLUMNS = ["n", "method", "time s", "grad/fwd", "fact.", "peak MB", "gradient bytes"]
LEGEND = legend("main")  # the main table's (kept under its old name)


def _cell(r: dict) -> dict:
    """One row of the main table, formatted (thousands separated, times to the millisecond,
    ratios to two digits); a row that did not run says why under time s."""
    if "skipped" in r:
        return {"n": f"{r['n']:,}", "method": r["label"], "time s": r["skipped"]}
    return {"n": f"{r['n']:,}", "method": r["label"], "time s": f"{r['time_s']:.3f}",
            "grad/fwd": f"{r['ratio']:.2f}", "fact.": r["factorizations"],
            "peak MB": f"{r['peak_mb']:.0f}", "gradient bytes": f"{r['payload_bytes']:,}"}


def table(results: list[dict], columns=COLUMNS) -> str:
    """The main table of ``python -m linops bench`` (Markdown) from its result rows.

    >>> print(table([{"n": 20, "label": "dense n×n gradient (scipy)", "skipped": "needs 9 GB"}],
    ...             ["n", "method", "time s"]))
    | n  | method                     | time s     |
    |----|----------------------------|------------|
    | 20 | dense n×n gradient (scipy) | needs 9 GB |
    """
    return markdown_table([_cell(r) for r in results], columns)


def write_json(results: list[dict], path: Path, meta: dict) -> None:
    """``{"meta": meta, "results": results}`` to ``path``, indented (one key per line)."""
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1))


def figure(results: list[dict], meta: dict | None = None):
    """The bench plot as a matplotlib figure: time (left) and peak memory (right) against n,
    log-log, one line per method, a legend on each panel.

    A method that could not run at some size (too large for memory, not installed, timed out)
    is drawn as an 'x' at that n on the top edge of both panels, labelled with the reason
    ("needs 206 GB"), and its legend entry says so. The title carries the date and the machine
    from ``meta`` (the run's ``bench.json`` meta).

    Parameters
    ----------
    results : list of dict
        Rows as ``bench`` returns them (``method``, ``label``, ``n`` and ``time_s``/``peak_mb``
        or ``skipped``).
    meta : dict, optional
        ``date`` and ``machine`` for the title.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> rows = [{"method": "lu", "label": "linops LU (SuperLU)", "n": n, "time_s": t,
    ...          "peak_mb": m} for n, t, m in ((110, 0.01, 2.0), (420, 0.03, 5.0))]
    >>> rows.append({"method": "dense-jax", "label": "dense jax.grad", "n": 420,
    ...              "skipped": "needs 617 GB"})
    >>> import datetime
    >>> when = datetime.datetime.now().isoformat(timespec="seconds")
    >>> fig = figure(rows, {"date": when, "machine": "x86_64, 2 cores"})
    >>> [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    ['linops LU (SuperLU)', 'dense jax.grad (× could not run)']
    >>> sorted({t.get_text() for ax in fig.axes for t in ax.texts})
    ['needs 617 GB']
    >>> when.replace("T", " ") in fig.get_suptitle() and "2 cores" in fig.get_suptitle()
    True
    """
    # optional: matplotlib (the bench extra), its Agg backend chosen before pyplot
    import matplotlib

    matplotlib.use("Agg")
    # optional: matplotlib (the bench extra)
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, name in enumerate(dict.fromkeys(r["method"] for r in results)):
        rows = [r for r in results if r["method"] == name]
        ran = sorted((r["n"], r["time_s"], r["peak_mb"]) for r in rows if "time_s" in r)
        failed = [r for r in rows if "time_s" not in r]
        label = next((r["label"] for r in rows if "time_s" in r), rows[0]["label"])
        label += " (× could not run)" if failed else ""
        color = colors[i % len(colors)]
        for ax, col, floor in ((ax1, 1, 1e-4), (ax2, 2, 0.1)):  # floors: log axes, 0 values
            if ran:
                ax.loglog([p[0] for p in ran], np.maximum([p[col] for p in ran], floor), "o-",
                          color=color, label=label)
            for r in failed:  # on the top edge: x in data coordinates, y in axes coordinates
                ax.plot([r["n"]], [0.97], "x", color=color, markersize=9, mew=2,
                        transform=ax.get_xaxis_transform(), clip_on=False,
                        label=None if ran or r is not failed[0] else label)
                ax.annotate(r["skipped"], (r["n"], 0.97), xycoords=ax.get_xaxis_transform(),
                            xytext=(-6, -4), textcoords="offset points", fontsize=7,
                            color=color, ha="right", va="top")
    ax1.set(xlabel="n (unknowns)", ylabel="value + gradient time [s]", title="time")
    ax2.set(xlabel="n (unknowns)", ylabel="peak RSS increase [MB]", title="memory")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    meta = meta or {}
    fig.suptitle(f"python -m linops bench: value + gradient of aᵀK(θ)⁻¹b — "
                 f"{meta.get('date', '?').replace('T', ' ')}, {meta.get('machine', '?')}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot(results: list[dict], path: Path, meta: dict | None = None) -> None:
    """:func:`figure`, saved to ``path`` (PNG, 110 dpi) and closed."""
    # optional: matplotlib (the bench extra)
    import matplotlib.pyplot as plt

    fig = figure(results, meta)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A Markdown table of already formatted cells (a missing cell is empty).

    >>> print(markdown_table([{"a": 1, "b": "x"}, {"a": 22}], ["a", "b"]))
    | a  | b |
    |----|---|
    | 1  | x |
    | 22 |   |
    """
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    out = ["| " + " | ".join(c.ljust(widths[c]) for c in columns) + " |",
           "|-" + "-|-".join("-" * widths[c] for c in columns) + "-|"]
    out += ["| " + " | ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns) + " |"
            for r in rows]
    return "\n".join(out)


def closing_lines(rows: list[dict], label: str = "row") -> list[str]:
    """The lines a section's report ends with: each row that did not run (its ``label`` field,
    else its ``row``) with why, then the load average and the cores."""
    out = [f"{r.get(label, r['row'])}: {r['skipped']}" for r in rows if "skipped" in r]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return out + [f"load average at the end: {load} ({os.cpu_count()} cores)"]


def publish(out: Path, name: str, text: str, rows: list[dict], argv, docs: Path | None = None,
            section: str | None = None) -> None:
    """Print a section's table with its column legend and write both (:func:`write_section`)
    with the command that made them: ``python -m linops bench <section>`` (default ``name``)
    and its arguments (``argv``, or the process's own).

    The legend is the section's entry of ``legends.LEGENDS`` (none for a section without
    one); a table that already ends with a legend of its own keeps it and gets no second one.
    With ``docs`` (``--write-docs``), the same text also replaces region ``name`` of that page
    (:func:`.docs.write`).
    """
    text = _with_legend(name, text)
    print(text)
    args = argv if argv is not None else sys.argv[3:]
    command = " ".join([f"python -m linops bench {section or name}", *args])
    write_section(out, name, text, rows, command, docs)


def _with_legend(name: str, text: str) -> str:
    """``text`` followed by the section's legend, unless it has one or there is none."""
    if name not in LEGENDS or "\ncolumns:" in text:
        return text
    return f"{text}\n\n{legend(name)}"


def write_section(out: Path, name: str, text: str, rows: list[dict], command: str,
                  docs: Path | None = None) -> None:
    """``<out>/<name>.md`` (the table with when, where and how it was measured) and
    ``<out>/<name>.json``; says where. With ``docs``, also region ``name`` of that page
    (:func:`.docs.write`; checked before the run by :func:`.docs.check`).

    Cost: two small files (and one read and write of the page); ``out`` is created when
    missing.
    """
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "command": command,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "load_average": [round(x, 2) for x in os.getloadavg()]}
    (out / f"{name}.md").write_text(f"# {command}\n\nMeasured {meta['date']} on {meta['machine']} "
                                    f"(load average {meta['load_average']}).\n\n{text}\n")
    write_json(rows, out / f"{name}.json", meta)
    print(f"results written to {out}/: {name}.md, {name}.json")
    if docs is not None:
        write_docs(docs, name, text, command)
