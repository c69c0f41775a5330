"""The README's quickstart is a complete script: it runs as written (issue 13, item 8)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import truncate

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart() -> str:
    """The first Python block of the README's Quickstart section, as written."""
    section = README.read_text().split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no python block in the Quickstart section"
    return match.group(1)


def test_the_readme_quickstart_runs_as_written(pg_url: str, tmp_path: Path) -> None:
    truncate(pg_url)
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart())
    env = {**os.environ, "COLOSSEUM_DATABASE_URL": pg_url}
    env.pop("COLOSSEUM_REDIS_URL", None)
    for _ in range(2):  # and again: the script can be run twice
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120,
            cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "['hello', 'You said: hello', 'and again', 'You said: and again']"
    assert lines[1] == "['hello', 'You said: hello', '(a note)']"
    assert "update_state added (a note)" in lines
    assert lines[-1] == "5 messages"


def test_the_readme_is_one_line_about_the_package_then_the_two_commands() -> None:
    head = README.read_text().split("\n")
    assert head[0] == "# langgraph-colosseum"
    assert "LangGraph checkpointer" in head[2]
    assert head[4:8] == [
        "```bash",
        'python3 -m venv .venv && .venv/bin/pip install -e ".[dev,embedded]" && .venv/bin/colosseum demo',
        ".venv/bin/python -m pytest",
        "```",
    ]
    text = " ".join(README.read_text().split())  # line breaks are only layout
    assert "pip install langgraph-colosseum" in text
    assert "PostgreSQL 14 or later" in text and "Redis 6.2+" in text
    signatures = set(re.findall(r"Retention\(thread_ttl[^)]*\)", text))
    assert signatures == {
        'Retention(thread_ttl, keep_last=None, strategy="delete", batch_size=500)'
    }
