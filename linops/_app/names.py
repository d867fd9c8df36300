"""Method names on the command line: one rule for every bench section, the registry's.

``sv.solve(prob, "LU")`` matches algorithm names ignoring case, '-', '_' and spaces; the bench
sections match theirs the same way (and ignore any other punctuation, so a table label such as
``CG+AMG`` or ``spsolve + grad`` is a name too). A list of names may be given as separate
arguments or comma-separated, or both: ``--methods LU``, ``--methods lu,jax``, ``--methods lu
jax``. An unknown name is refused before anything runs, with the list of names.

>>> import argparse
>>> ap = argparse.ArgumentParser(prog="demo")
>>> _ = ap.add_argument("--methods", action=Names, names={"lu": (), "cg-amg": ("CG+AMG",)},
...                     nargs="+")
>>> ap.parse_args(["--methods", "LU,cg_amg"]).methods
['lu', 'cg-amg']
>>> ap.parse_args(["--methods", "cg+amg", "lu"]).methods
['cg-amg', 'lu']
>>> pick(["cholesky"], {"lu": ()})
Traceback (most recent call last):
...
ValueError: unknown method 'cholesky'; names: lu (any case; several: comma or space separated)
"""

from __future__ import annotations

import argparse
import re

_SEPARATORS = re.compile(r"\s+")


def key(name: str) -> str:
    """The form names are compared in: lower case, letters and digits only.

    For the registry's names (letters and digits) this is exactly the registry's rule, so a
    name ``sv.solve`` accepts is accepted here in the same spellings.

    >>> key("Bi-CG_Stab"), key("spsolve + grad")
    ('bicgstab', 'spsolvegrad')
    """
    return "".join(ch for ch in name.lower() if ch.isalnum())


def slug(label: str) -> str:
    """A name one can type for a label with spaces: lower case, runs of other characters as
    one '-' (``key(slug(x)) == key(x)``).

    >>> slug("adj jit value_and_grad"), slug("spsolve + grad")
    ('adj-jit-value-and-grad', 'spsolve-grad')
    """
    return re.sub(r"[^0-9a-z]+", "-", label.lower()).strip("-")


def tokens(values, known=()) -> list[str]:
    """Every name in ``values`` (strings, each possibly comma- or space-separated), in order.

    A comma-separated part that is itself one of the ``known`` names (compared by :func:`key`)
    stays whole, so a label with spaces can still be given quoted (``--methods "fam jit"``).

    >>> tokens(["lu,jax", "scipy", " dense-jax , "])
    ['lu', 'jax', 'scipy', 'dense-jax']
    >>> tokens(["fam jit, lu jax"], known={"famjit"})
    ['fam jit', 'lu', 'jax']
    """
    out = []
    for v in [values] if isinstance(values, str) else values:
        for part in (p.strip() for p in v.split(",")):
            if part and key(part) in known:
                out.append(part)
            else:
                out += [t for t in _SEPARATORS.split(part) if t]
    return out


def pick(values, names, what: str = "method") -> list[str]:
    """The canonical names meant by ``values``, in the order given, each once.

    Parameters
    ----------
    values : str or iterable of str
        What the user typed (see :func:`tokens`).
    names : dict or sequence
        The canonical names; a dict maps each to its aliases (other spellings that mean it,
        such as a table label or the registry name of its algorithm).
    what : str
        The word for one name in the message ("method", "solver").

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        For a name that is none of them (or no name at all), listing the canonical names.

    Notes
    -----
    Cost: O(number of names + number of values).
    """
    table = names if isinstance(names, dict) else {n: () for n in names}
    index = {}
    for canonical, aliases in table.items():
        for spelling in (canonical, *aliases):
            index.setdefault(key(spelling), canonical)
    def shown(canonical, aliases):
        other = [a for a in aliases if key(a) != key(canonical)]
        return f"{canonical} ({', '.join(other)})" if other else canonical

    listing = (f"names: {', '.join(shown(c, a) for c, a in table.items())} (any case; several: "
               f"comma or space separated)")
    out = []
    given = tokens(values, index)
    if not given:
        raise ValueError(f"no {what} given; {listing}")
    for t in given:
        if key(t) not in index:
            raise ValueError(f"unknown {what} {t!r}; {listing}")
        if index[key(t)] not in out:
            out.append(index[key(t)])
    return out


class Names(argparse.Action):
    """An argparse action that stores :func:`pick`'s canonical names, refusing an unknown name
    with argparse's usage error (exit status 2) that lists the names.

    Takes ``names=`` (as :func:`pick`) and ``what=`` besides argparse's own keywords; use it
    with ``nargs="+"``.
    """

    def __init__(self, option_strings, dest, names=None, what: str = "method", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.names, self.what = names, what

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            setattr(namespace, self.dest, pick(values, self.names, self.what))
        except ValueError as e:
            parser.error(f"{option_string}: {e}")
