"""docs/torch.md runs: its ```python blocks, in order, in one namespace (what a reader types),
and what they print is what the page says they print where it says so."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

pytest.importorskip("torch", reason="adjoints.torch needs torch (pip install \"linops[torch]\")")

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "torch.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def test_every_code_block_runs():
    code = blocks()
    assert len(code) >= 7
    ns: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(code):
            exec(compile(block, f"{PAGE.name}[block {i}]", "exec"), ns)  # noqa: S102
    text = out.getvalue()
    import torch

    torch._dynamo.reset()       # the compiled block's cache holds the page's namespace
    ns.clear()
    assert "1 1 1 0" in text                       # one factorization, freed by backward
    assert "RankOne" in text and "True" in text    # the full gradient projects to v.grad
    assert "ReleasedFactorizationError" in text
