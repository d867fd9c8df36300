"""The code blocks of the Markdown pages (README.md, CONTRIBUTING.md, docs/**/*.md) and the
convention that says which of them run.

Every fenced block names its language, and the language says what the tests do with it:

- ```` ```python ````: runs. A page's python blocks run in order in one namespace, as a reader
  would paste them (tests/app/test_docs.py). A block whose first line is ``# needs: MODULE``
  (``# needs: cupy``, ``# needs: petsc4py``) is skipped, with the blocks after it, where that
  module cannot run (cupy: no CUDA device either); the skip says so.
- ```` ```python title="path/to/file.py" ````: a file (or the lines to add to one) that the page
  tells you to write; CONTRIBUTING.md's are applied to a copy of the repository and tested
  there (tests/app/test_contributing.py). The title is shown above the block on the site.
- ```` ```text title="output" ````: what the python block before it prints, compared as doctest
  compares (``...`` matches anything, whitespace is normalised).
- ```` ```text ````: output, tables and legends, not run. ```` ```bash ````: shell commands, not
  run here (the README's two commands are checked against .ci/run). ```` ```toml ````,
  ```` ```yaml ````: configuration, not run.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[2]
LANGUAGES = ("python", "text", "bash", "toml", "yaml")
_FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                    re.M | re.S)
_TITLE = re.compile(r'title="([^"]*)"')


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its ``title=`` (or None), its text and first line."""

    lang: str
    title: str | None
    body: str
    line: int

    @property
    def needs(self) -> str | None:
        """The module named by a first line ``# needs: MODULE``, or None."""
        m = re.match(r"#\s*needs:\s*([\w.]+)", self.body)
        return m.group(1) if m else None


def pages() -> list[pathlib.Path]:
    """README.md, CONTRIBUTING.md and every page under docs/, in that order."""
    top = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    return [p for p in top if p.exists()] + sorted((ROOT / "docs").rglob("*.md"))


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, their indentation removed (blocks inside an
    admonition are indented by four spaces)."""
    out = []
    for m in _FENCE.finditer(text):
        info = m.group("info").strip()
        lang = info.split()[0] if info else ""
        title = _TITLE.search(info)
        indent = len(m.group("indent"))
        body = "".join(line[indent:] if line.startswith(" " * indent) else line
                       for line in m.group("body").splitlines(keepends=True))
        out.append(Block(lang, title.group(1) if title else None, body,
                         text.count("\n", 0, m.start()) + 1))
    return out


def without_blocks(text: str) -> str:
    """The text with every fenced block's body removed (the prose and inline code)."""
    return _FENCE.sub("", text)


def titled(path: pathlib.Path) -> dict[str, Block]:
    """The python blocks of a page that carry a ``title=`` (files to write), by title."""
    return {b.title: b for b in blocks(path.read_text(encoding="utf-8"))
            if b.lang == "python" and b.title}
