"""Every example runs to the end against the test database, and shows what it is for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.py"))

# What each example prints once it has shown its point (each also asserts it).
SHOWS = {
    "double_texting": "rollback: nothing of the first run remains",
    "idempotent_tools": "run 1: ",  # and runs 2 and 3 below it; the bank executed 1 payment
    "multi_agent_committee": "the broker received 1 order(s)",
    "quickstart": "SQL: latest ticker of this thread = TSLA (reviewed)",
    "resume_after_crash": "no step lost, none run twice",
    "state_migrations": "every thread at state version 2",
    "time_travel": "checkpoints in all, three branches",
}


def test_every_example_is_checked() -> None:
    assert sorted(SHOWS) == [p.stem for p in EXAMPLES]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(example: Path, pg_url: str) -> None:
    env = {**os.environ, "COLOSSEUM_DATABASE_URL": pg_url}
    done = subprocess.run(
        [sys.executable, str(example)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert SHOWS[example.stem] in done.stdout, done.stdout[-3000:]
    if example.stem == "idempotent_tools":  # every run is shown, the payment made once
        for shown in ("run 1: ", "run 2: ", "run 3: ", "the bank executed 1 payment(s)"):
            assert shown in done.stdout, done.stdout
