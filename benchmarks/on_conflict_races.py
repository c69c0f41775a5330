"""Barrier-started races of two runs on one thread, `on_conflict="raise"`
(issue 15 item 3): how often the outcome is not exactly one clean winner.

Not a test: nothing is forced (tests/integration/test_on_conflict_subgraphs.py
and test_on_conflict_in_flight.py force each order); this samples the orders
two threads reach on their own. Each trial prepares a thread whose subgraph
interrupted (tests/integration/graphs.subgraph_graph), then starts two runs
at one barrier, each on a saver of its own, both resuming it
(`Command(resume=<marker>)`, durability="sync"), or (`input`) both sending new
input with durability="async" on a thread with history. An outcome is

* `one winner`: one run succeeded, the other raised ThreadConflictError,
  the loser's marker is nowhere in Postgres (checkpoints, values, writes,
  registry) nor in the thread's state, and the winner's is in its state;
* `both refused`, `both succeeded`, `handed` (one succeeded, but the
  loser's marker is in the thread: it finished with the other's answer or
  the loser left something), or `other` (any other error).

    python -m benchmarks.on_conflict_races 110            # trials per mode, resume races
    python -m benchmarks.on_conflict_races 110 --input    # new input, durability="async"

Uses the Postgres of COLOSSEUM_TEST_POSTGRES_URL (else 127.0.0.1:5432), in a
database of its own it drops after, and the Redis of COLOSSEUM_TEST_REDIS_URL
(else 127.0.0.1:6379) under a key prefix of its own (nothing is flushed).
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections import Counter
from typing import Any

import psycopg
from langgraph.types import Command
from psycopg import conninfo

from langgraph_colosseum import ColosseumSaver, ThreadConflictError
from tests.conftest import redis_url, server_url
from tests.integration.graphs import subgraph_graph

TABLES = (
    ("colosseum_checkpoints", "checkpoint::text || metadata::text"),
    ("colosseum_channel_values", "value::text"),
    ("colosseum_writes", "value::text || task_path"),
    ("colosseum_threads", "state_values::text || metadata::text"),
)


def _mentioned(url: str, thread_id: str, marker: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        for table, column in TABLES:
            (count,) = conn.execute(  # type: ignore[misc]
                f"SELECT count(*) FROM {table} WHERE thread_id = %s AND {column} LIKE %s",
                (thread_id, f"%{marker}%"),
            ).fetchone()
            if count:
                return True
    return False


def trial(url: str, options: dict[str, Any], new_input: bool) -> str:
    thread_id = f"race-{uuid.uuid4().hex[:10]}"
    config = {"configurable": {"thread_id": thread_id}}
    markers = {name: f"from-{name}-{uuid.uuid4().hex[:6]}" for name in "AB"}
    outcomes: dict[str, str] = {}
    with (
        ColosseumSaver.from_conn_string(url, on_conflict="raise", **options) as a,
        ColosseumSaver.from_conn_string(url, on_conflict="raise", **options) as b,
    ):
        graphs = {"A": subgraph_graph(Counter()).compile(checkpointer=a),
                  "B": subgraph_graph(Counter()).compile(checkpointer=b)}  # fmt: skip
        graphs["A"].invoke({"topic": "owls", "notes": []}, config)
        if new_input:
            graphs["A"].invoke(Command(resume="approved"), config)
        start = threading.Barrier(2)

        def run(name: str) -> None:
            payload = (
                {"topic": markers[name], "notes": []}
                if new_input
                else Command(resume=markers[name])
            )
            start.wait()
            try:
                graphs[name].invoke(payload, config, durability="async" if new_input else "sync")
                outcomes[name] = "success"
            except ThreadConflictError:
                outcomes[name] = "refused"
            except Exception as exc:  # counted as `other`
                outcomes[name] = repr(exc)

        threads = [threading.Thread(target=run, args=(name,)) for name in "AB"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        state = repr(graphs["A"].get_state(config, subgraphs=True))
    kinds = sorted(outcomes.values())
    if kinds == ["refused", "refused"]:
        return "both refused"
    if kinds == ["success", "success"]:
        return "both succeeded"
    if kinds != ["refused", "success"]:
        return "other"
    won = next(name for name, outcome in outcomes.items() if outcome == "success")
    lost = markers["B" if won == "A" else "A"]
    if lost in state or _mentioned(url, thread_id, lost) or markers[won] not in state:
        return "handed"
    return "one winner"


def main(argv: list[str]) -> int:
    trials = int(next((a for a in argv if a.isdigit()), "110"))
    new_input = "--input" in argv
    admin = server_url()
    name = f"colosseum_races_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = conninfo.make_conninfo(admin, dbname=name)
    try:
        with ColosseumSaver.from_conn_string(url) as saver:
            saver.setup()
        prefix = f"races-{uuid.uuid4().hex[:6]}:"
        for mode, options in (
            ("postgres", {}),
            ("redis", {"redis_url": redis_url(), "cache_prefix": prefix}),
        ):
            counts = Counter(trial(url, options, new_input) for _ in range(trials))
            bad = trials - counts["one winner"]
            print(
                f"{'input' if new_input else 'resume'} {mode}: {bad} of {trials} not one clean "
                f"winner ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})",
                flush=True,
            )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
