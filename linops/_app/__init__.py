"""The application layer behind ``python -m linops``: the ``info`` report and the ``bench``
command (measured methods, the subprocess runner, reports).

This subpackage and ``linops/__main__.py`` are the only parts of ``linops`` allowed to import
``solvers`` and ``adjoints`` (the library itself depends on nothing here).
"""
