"""``--write-docs``: a benchmark table, with when, where and by which command it was measured,
written into its marked region of the benchmarks page (``docs/benchmarks.md``).

The page carries one region per table, delimited by two HTML comments (invisible on the
rendered page)::

    <!-- BEGIN bench loop: `python -m linops bench loop ... --write-docs` rewrites this region -->
    ...
    <!-- END bench loop -->

The keys are :data:`KEYS`: ``main`` for ``python -m linops bench`` itself, one per section, and
``jax-loops`` / ``jax-native`` for ``bench jax --section loops`` / ``native``. Everything outside the region is left as it
is, so the page's prose is written by hand and its numbers never are. The page and the region
are checked before anything is measured (:func:`check`), so that a run of an hour never ends
unable to write its table.

A section's text (what it prints: Markdown tables, sentences, the column legend) becomes
Markdown by :func:`markdown`: tables stay tables, indented blocks such as the legend become
``text`` code blocks, the rest paragraphs.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path

PAGE = Path("docs/benchmarks.md")
KEYS = ("main", "loop", "scale", "jax", "jax-loops", "jax-native", "torch", "petsc", "logdet",
        "eig", "lstsq")


def add_option(ap) -> None:
    """Add ``--write-docs [PAGE]`` to a section's argument parser (default page
    :data:`PAGE`, relative to the current directory: run from the repository root)."""
    ap.add_argument("--write-docs", nargs="?", const=PAGE, default=None, type=Path,
                    metavar="PAGE",
                    help=f"also write the table, with its date, machine, load average and "
                         f"command, into its marked region of PAGE (default {PAGE}, from the "
                         f"repository root); the page is checked before anything runs")


def markers(key: str) -> tuple[str, str]:
    """The start of the region's first line and its whole last line.

    >>> markers("loop")
    ('<!-- BEGIN bench loop:', '<!-- END bench loop -->')
    """
    return f"<!-- BEGIN bench {key}:", f"<!-- END bench {key} -->"


def _span(text: str, key: str) -> tuple[int, int]:
    """(start, end) of the region's content in ``text``: from the line after the BEGIN comment
    to the END comment. ValueError naming what is missing or repeated."""
    begin, end = markers(key)
    starts = [m.start() for m in re.finditer(re.escape(begin), text)]
    ends = [m.start() for m in re.finditer(re.escape(end), text)]
    if len(starts) != 1 or len(ends) != 1:
        raise ValueError(f"the page must hold the region {begin} ... --> … {end} exactly once "
                         f"(found {len(starts)} BEGIN and {len(ends)} END lines)")
    content = text.index("\n", starts[0]) + 1
    if ends[0] < content:
        raise ValueError(f"{end} comes before the line that starts with {begin}")
    return content, ends[0]


def check(ap, page: Path | None, key: str) -> None:
    """Fail before measuring when ``--write-docs`` cannot be done: ``page`` missing or not
    writable, or its region ``key`` absent or repeated; the parser's usage error (exit 2)
    names the page and the comment lines to add. Nothing to check when ``page`` is None.

    >>> import argparse, tempfile
    >>> ap = argparse.ArgumentParser(prog="bench")
    >>> check(ap, None, "loop")                        # no --write-docs: nothing to check
    >>> with tempfile.NamedTemporaryFile("w", suffix=".md") as f:
    ...     _ = f.write("<!-- BEGIN bench loop: ... -->\\nold\\n<!-- END bench loop -->\\n")
    ...     f.flush()
    ...     check(ap, Path(f.name), "loop")            # the region is there
    """
    if page is None:
        return
    try:
        text = page.read_text(encoding="utf-8")
        if not os.access(page, os.W_OK):
            raise PermissionError(f"{page} is not writable")
        _span(text, key)
    except (OSError, ValueError) as e:
        begin, end = markers(key)
        ap.error(f"--write-docs {page}: {e}. The page needs the lines '{begin} ... -->' and "
                 f"'{end}' around the table (run from the repository root for {PAGE})")


def markdown(text: str) -> str:
    """A section's printed text as Markdown: table rows (``|``) kept, indented blocks and the
    line that introduces them (``columns:``) fenced as ``text``, fences without a language
    given ``text``, other lines paragraphs; one blank line between blocks.

    >>> print(markdown("a sentence\\n| n |\\n|---|\\n| 1 |\\ncolumns:\\n  n  unknowns"))
    a sentence
    <BLANKLINE>
    | n |
    |---|
    | 1 |
    <BLANKLINE>
    ```text
    columns:
      n  unknowns
    ```
    """
    lines = text.strip("\n").splitlines()
    blocks: list[tuple[str, list[str]]] = []
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            kind = "fence"
            line = "```text" if line == "```" and not fenced else line
            fenced = not fenced
        elif fenced:
            kind = "fence"
        elif not line.strip():
            kind = "blank"
        elif line.startswith("|"):
            kind = "table"
        elif line.startswith("  ") or (line.rstrip().endswith(":") and i + 1 < len(lines)
                                       and lines[i + 1].startswith("  ")):
            kind = "pre"
        else:
            kind = "para"
        if blocks and blocks[-1][0] == kind and kind != "blank":
            blocks[-1][1].append(line)
        else:
            blocks.append((kind, [line]))
    out = []
    for kind, body in blocks:
        if kind == "blank":
            continue
        out.append("\n".join(["```text", *body, "```"] if kind == "pre" else body))
    return "\n\n".join(out)


def measured(command: str, seconds: float | None = None) -> str:
    """The sentence above a table: when (UTC), on what, under which load, by which command.

    >>> measured("python -m linops bench loop --write-docs").startswith("Measured 20")
    True
    """
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    return (f"Measured {now} on {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()} (load average {load}){took} by `{command}`:")


def write(page: Path, key: str, text: str, command: str, seconds: float | None = None) -> None:
    """Replace region ``key`` of ``page`` with :func:`measured` and :func:`markdown` of
    ``text``; says where. The rest of the page is kept byte for byte.

    Cost: one read and one write of the page.
    """
    old = page.read_text(encoding="utf-8")
    start, end = _span(old, key)
    body = f"{measured(command, seconds)}\n\n{markdown(text)}\n"
    page.write_text(old[:start] + body + old[end:], encoding="utf-8")
    print(f"table written to {page}, region {key}")
