"""The README is the truth: its quickstart runs as written, and its test command is .ci/run's."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).parent.parent


def test_quickstart_runs(capsys):
    text = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    exec(compile(code, "README.md quickstart", "exec"), {})
    out = capsys.readouterr().out
    assert "RankOne" in out and "1 1" in out and "True" in out


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    bash = re.findall(r"```bash\n(.*?)```", readme, re.S)
    test_cmd = [b.strip() for b in bash if "pytest" in b][0]
    assert test_cmd in ci
    assert any("python -m linops bench" in b for b in bash)
