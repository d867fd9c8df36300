"""griffe extensions for the API reference (mkdocs.yml loads every extension in this file).

- :class:`RuntimeDocstrings`: the Krylov classes of ``solvers._engines.krylov`` build their
  docstrings from one shared template (``__doc__ = ... + _COMMON_DOC.format(...)``), which
  static analysis cannot read. For a public class without a docstring in its source, this
  imports its module and takes the class's ``__doc__``; a module that cannot be imported here
  (an optional dependency) is left as the source has it.
- :class:`ListingSections`: the package docstrings (what ``help(linops)`` prints) group the
  public names under headings such as ``Construct`` and ``Query``, one name and its summary per
  line, aligned in columns. Markdown would reflow those lines into one paragraph; this renders
  each such section as its heading and a ``text`` block, as ``help()`` shows it. Sections of
  prose and the standard numpydoc sections (Parameters, Notes, Examples, ...) are left alone.
"""

from __future__ import annotations

import importlib
import inspect
import re

import griffe

_STANDARD = {"parameters", "other parameters", "returns", "yields", "receives", "raises",
             "warns", "warnings", "see also", "notes", "references", "examples", "attributes",
             "methods", "functions", "classes", "modules"}
_COLUMNS = re.compile(r"\S {2,}\S")


class RuntimeDocstrings(griffe.Extension):
    """Fill a public class's missing docstring from the imported class."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs) -> None:
        if cls.docstring is not None or cls.name.startswith("_"):
            return
        try:
            obj = getattr(importlib.import_module(cls.module.path), cls.name, None)
        except ImportError:
            return
        doc = getattr(obj, "__doc__", None)
        if doc and doc is not getattr(type(obj), "__doc__", None):
            cls.docstring = griffe.Docstring(inspect.cleandoc(doc), parent=cls)


def listing_sections(text: str) -> str:
    """``text`` with every non-standard numpydoc section whose lines are mostly aligned
    columns turned into a bold heading and a ``text`` code block.

    >>> print(listing_sections("Intro.\\n\\nQuery\\n-----\\nf(x)    what f does\\ng(x)    and g"))
    Intro.
    <BLANKLINE>
    **Query**
    <BLANKLINE>
    ```text
    f(x)    what f does
    g(x)    and g
    ```
    <BLANKLINE>
    """
    lines = text.splitlines()
    heads = [i for i in range(len(lines) - 1)
             if lines[i].strip() and re.fullmatch(r"-{3,}", lines[i + 1].strip())
             and len(lines[i + 1].strip()) >= len(lines[i].strip())]
    out, start = [], 0
    for k, i in enumerate(heads):
        end = heads[k + 1] if k + 1 < len(heads) else len(lines)
        body = lines[i + 2:end]
        while body and not body[-1].strip():
            body = body[:-1]
        filled = [ln for ln in body if ln.strip()]
        title = lines[i].strip()
        listing = (title.lower() not in _STANDARD and filled
                   and sum(bool(_COLUMNS.search(ln.strip())) for ln in filled) * 2 >= len(filled))
        out += lines[start:i]
        if listing:
            out += [f"**{title}**", "", "```text", *body, "```", ""]
        else:
            out += lines[i:end]
        start = end
    out += lines[start:]
    return "\n".join(out)


class ListingSections(griffe.Extension):
    """Render the listing sections of module docstrings as ``help()`` shows them."""

    def on_module_members(self, *, mod: griffe.Module, **kwargs) -> None:
        if mod.docstring is not None and "\n---" in mod.docstring.value:
            mod.docstring.value = listing_sections(mod.docstring.value)
