"""docs/engines.md: every Python block runs, and each print line prints what its comment says
(the comment's words up to a colon start the printed line)."""

from __future__ import annotations

import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "engines.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_page_has_its_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_every_block_runs_and_prints_what_it_says(i, capsys):
    from solvers.internals import use_profile
    import solvers as sv

    old = use_profile(sv.Profile())
    try:
        exec(compile(BLOCKS[i], f"docs/engines.md block {i}", "exec"), {})
    finally:
        use_profile(old)
    printed = capsys.readouterr().out.splitlines()
    said = [line.split("#", 1)[1].strip() for line in BLOCKS[i].splitlines()
            if line.startswith("print(") and "#" in line]
    assert len(printed) == len(said)
    for got, comment in zip(printed, said):
        # a comment gives the printed line's start (up to a ':' that begins an explanation or
        # the measured numbers); one that starts with '...' a part of it
        if comment.startswith("..."):
            assert comment.lstrip(". ").split(":")[0] in got, (got, comment)
        else:
            assert got.startswith(comment.split(":")[0].strip()), (got, comment)
