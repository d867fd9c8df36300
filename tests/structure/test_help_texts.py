"""Help texts are for users, not for the project's history: no issue numbers and no dates in
``help(linops)``, ``help(solvers)``, ``help(adjoints)``, ``help(adjoints.jax)``, ``python -m
linops --help``, the ``--help`` of ``bench`` and of every section, and in any string of the
three packages' source (every docstring, every argparse help and epilog). Benchmark tables in
docs/benchmarks.md carry their dates: that is data, written by ``--write-docs``, not help text.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import pathlib
import pydoc
import re

import pytest

from linops.__main__ import main
from linops._app.bench import SECTIONS

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("linops", "solvers", "adjoints")
ISSUE = re.compile(r"\bissues?\s*#?\d+|(?<![\w&])#\d+\b", re.I)
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
DATE = re.compile(rf"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b"
                  rf"|\b{_MONTH} (?:\d{{1,2}}, )?(?:19|20)\d\d\b|\b\d{{1,2}} {_MONTH} (?:19|20)\d\d\b")


def _offences(text: str) -> list[str]:
    return [m.group(0) for pattern in (ISSUE, DATE) for m in pattern.finditer(text)]


def test_the_patterns_catch_what_they_are_for():
    assert _offences("fixed in issue 18; see #476") == ["issue 18", "#476"]
    assert _offences("measured 2026-12-01, or 1 December 2026, or Dec 1, 2026") == \
        ["2026-12-01", "1 December 2026", "Dec 1, 2026"]
    assert _offences("PETSc error 56, 2·10⁴ unknowns, seed 2024, mtype 11, &#8203;") == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_string_in_the_source_carries_an_issue_number_or_a_date(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {o!r}"
                        for o in _offences(node.value)]
    assert bad == [], "\n".join(bad)


NAMESPACES = PACKAGES + (("adjoints.jax",) if importlib.util.find_spec("jax") else ())


@pytest.mark.parametrize("ns", NAMESPACES)
def test_help_of_every_namespace_is_clean(ns):
    text = pydoc.render_doc(importlib.import_module(ns), renderer=pydoc.plaintext)
    assert _offences(text) == []


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"],
                                  *(["bench", s, "--help"] for s in sorted(SECTIONS))],
                         ids=lambda a: " ".join(a))
def test_every_command_line_help_is_clean(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(argv)
    text = out.getvalue()
    assert "usage: python -m linops" in text
    assert _offences(text) == []
