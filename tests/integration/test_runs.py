"""Double texting: `saver.runs(graph)` with multitask strategies (issue 15).

The competing runs are in separate processes (`runs_worker.py`; eight of them
are started once for the module and reused), against real Postgres, with and
without the Redis hot head. Every run sends one message; the graph appends
``msg:think`` and ``msg:answer``. The invariants:

* reject: the second run never writes (no trace of its message anywhere);
* enqueue: both runs' messages are on the head's branch, in arrival order;
* interrupt: the first run's completed steps are kept, the second starts from
  them, and the first's caller gets RunInterruptedError;
* rollback: nothing of the first run remains, in Postgres or Redis;
* eight processes racing to one thread under each strategy: every accepted
  message is on the head's branch, whole and in one piece (no lost update),
  and every refused one is reported to its sender and leaves no trace; and
  they did race (a refusal, or a run queued while another ran);
* eight waiters in eight processes drain in arrival order, each waking only
  for its own turn: at most two TAKEs and one listening connection each.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import operator
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import psycopg
import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typer.testing import CliRunner
from typing_extensions import TypedDict

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core import multitask
from langgraph_colosseum._core import threads as thread_ops
from langgraph_colosseum.cli import app
from langgraph_colosseum.errors import (
    CheckpointDeletedError,
    InvalidConfigError,
    RunInterruptedError,
    RunNotFoundError,
    RunQueueTimeoutError,
    ThreadBusyError,
)
from tests.conftest import CACHE_PREFIX, cache_options, redis_url, truncate
from tests.integration.locks import wait_until

WORKER = Path(__file__).with_name("runs_worker.py")
WAIT = 60.0  # seconds any one expected event may take on a loaded machine


class Worker:
    """A `runs_worker.py` process: commands on its stdin, events from its stdout."""

    def __init__(self, script: Path = WORKER) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.events: queue.Queue[dict] = queue.Queue()
        self._seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.put(json.loads(line))

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def expect(self, **match: Any) -> dict:
        """The first event (seen or coming) with these fields."""
        for i, event in enumerate(self._seen):
            if all(event.get(k) == v for k, v in match.items()):
                return self._seen.pop(i)
        while True:
            event = self.events.get(timeout=WAIT)
            if all(event.get(k) == v for k, v in match.items()):
                return event
            if event.get("event") == "done" and event.get("id") == match.get("msg"):
                raise AssertionError(f"the run ended before {match}: {event}")
            self._seen.append(event)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def workers() -> Iterator[list[Worker]]:
    started = [Worker() for _ in range(8)]
    yield started
    for worker in started:
        worker.stop()


@pytest.fixture(params=["postgres", "redis"])
def mode(request: pytest.FixtureRequest, pg_url: str) -> str:
    truncate(pg_url)
    return request.param


class Race:
    """One test's thread, and the commands it sends."""

    def __init__(self, url: str, mode: str) -> None:
        self.url = url
        self.mode = mode
        self.thread = f"t-{uuid.uuid4().hex[:8]}"
        self.cache = [redis_url(), CACHE_PREFIX] if mode == "redis" else None

    def run(self, worker: Worker, msg: str, strategy: str, **extra: Any) -> None:
        worker.send(
            cmd="run", id=msg, url=self.url, redis=self.cache, thread=self.thread, msg=msg,
            strategy=strategy, **extra,
        )  # fmt: skip

    def saver(self) -> Any:
        options = cache_options(self.mode)
        return ColosseumSaver.from_conn_string(self.url, pool_size=2, **options)

    def head(self) -> list[str]:
        """The messages on the head's branch (through Redis when it is on)."""
        with self.saver() as saver:
            found = saver.get_tuple({"configurable": {"thread_id": self.thread}})
        return list(found.checkpoint["channel_values"]["messages"]) if found else []

    def records(self) -> dict[str, Any]:
        """run_id -> RunInfo."""
        with self.saver() as saver:
            return {r.run_id: r for r in saver.runs.list(self.thread)}

    def traces(self, text: str) -> list[str]:
        """Where `text` is stored: Postgres rows and Redis keys that hold it."""
        found = []
        with psycopg.connect(self.url, autocommit=True) as conn:
            for table in ("checkpoints", "channel_values", "writes", "delta_histories",
                          "threads", "tool_calls"):  # fmt: skip
                hits = conn.execute(
                    f"SELECT count(*) FROM colosseum_{table} t "
                    "WHERE t.thread_id = %s AND position(%s in t::text) > 0",
                    (self.thread, text),
                ).fetchone()[0]
                if hits:
                    found.append(f"postgres {table}: {hits}")
        client = redis.Redis.from_url(redis_url())
        try:
            for key in client.scan_iter(match=f"{CACHE_PREFIX}*{self.thread}*", count=1000):
                kind = client.type(key)
                if kind == b"hash":
                    blob = b"".join(k + v for k, v in client.hgetall(key).items())
                elif kind == b"string":
                    blob = client.get(key) or b""
                else:
                    blob = client.dump(key) or b""
                if text.encode() in blob:
                    found.append(f"redis {key!r}")
        finally:
            client.close()
        return found


def turn(msg: str) -> list[str]:
    return [msg, f"{msg}:think", f"{msg}:answer"]


def test_reject_the_second_run_never_writes(workers: list[Worker], pg_url: str, mode: str) -> None:
    race, (a, b) = Race(pg_url, mode), workers[:2]
    race.run(a, "qa1", "reject", gate=True)
    a.expect(event="entered", msg="qa1")
    race.run(b, "qb1", "reject")
    assert b.expect(event="done", id="qb1")["outcome"] == "ThreadBusyError"
    a.send(cmd="open", name="qa1")
    first = a.expect(event="done", id="qa1")
    assert first["outcome"] == "success"
    assert race.head() == turn("qa1")
    assert race.traces("qb1") == []
    assert [(r.run_id, r.status) for r in race.records().values()] == [(first["run_id"], "success")]


def test_enqueue_runs_the_second_after_the_first(
    workers: list[Worker], pg_url: str, mode: str
) -> None:
    race, (a, b) = Race(pg_url, mode), workers[:2]
    race.run(a, "qa1", "reject", gate=True)
    a.expect(event="entered", msg="qa1")
    race.run(b, "qb1", "enqueue")
    with race.saver() as saver:  # b1 is queued before a1 may finish
        wait_until(lambda: saver.runs.list(race.thread, status="pending"))
    a.send(cmd="open", name="qa1")
    first, second = a.expect(event="done", id="qa1"), b.expect(event="done", id="qb1")
    assert (first["outcome"], second["outcome"]) == ("success", "success")
    assert race.head() == turn("qa1") + turn("qb1")
    records = race.records()
    one, two = records[first["run_id"]], records[second["run_id"]]
    assert (one.status, two.status, two.strategy) == ("success", "success", "enqueue")
    assert one.seq < two.seq and two.started_at >= one.ended_at


def test_interrupt_keeps_the_first_runs_steps(
    workers: list[Worker], pg_url: str, mode: str
) -> None:
    race, (a, b) = Race(pg_url, mode), workers[:2]
    race.run(a, "qa1", "reject", gate=True)  # stopped in `answer`: `think` is stored
    a.expect(event="entered", msg="qa1")
    race.run(b, "qb1", "interrupt")
    second = b.expect(event="done", id="qb1")
    assert second["outcome"] == "success"
    a.send(cmd="open", name="qa1")  # its next write is refused
    first = a.expect(event="done", id="qa1")
    assert first["outcome"] == "RunInterruptedError"
    assert race.head() == ["qa1", "qa1:think", *turn("qb1")]
    assert race.traces("qa1:answer") == []
    stopped = race.records()[first["run_id"]]
    assert (stopped.status, stopped.stopped_by) == ("interrupted", second["run_id"])
    with race.saver() as saver:
        assert saver.threads.get(race.thread).status == "idle"


def test_rollback_leaves_nothing_of_the_first_run(
    workers: list[Worker], pg_url: str, mode: str
) -> None:
    race, (a, b) = Race(pg_url, mode), workers[:2]
    race.run(a, "qa0", "reject")
    assert a.expect(event="done", id="qa0")["outcome"] == "success"
    race.run(a, "qa1", "reject", gate=True)
    a.expect(event="entered", msg="qa1")
    race.run(b, "qb1", "rollback")
    second = b.expect(event="done", id="qb1")
    assert second["outcome"] == "success"
    a.send(cmd="open", name="qa1")
    first = a.expect(event="done", id="qa1")
    assert first["outcome"] == "RunRolledBackError"
    assert race.head() == turn("qa0") + turn("qb1")
    assert race.traces("qa1") == []  # Postgres and Redis
    assert race.records()[first["run_id"]].status == "rolled_back"


@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_eight_processes_race_to_one_thread(
    workers: list[Worker], pg_url: str, mode: str, strategy: str
) -> None:
    race = Race(pg_url, mode)
    barrier = f"go-{race.thread}"
    sent = [f"qm{i}" for i in range(len(workers))]
    for worker, msg in zip(workers, sent):
        race.run(worker, msg, strategy, barrier=barrier)
    for worker, msg in zip(workers, sent):
        worker.expect(event="ready", id=msg)
    for worker in workers:
        worker.send(cmd="open", name=barrier)
    done = {msg: w.expect(event="done", id=msg) for w, msg in zip(workers, sent)}
    outcome = {msg: d["outcome"] for msg, d in done.items()}
    accepted = [m for m in sent if outcome[m] == "success"]
    refused = [m for m in sent if m not in accepted]
    head = race.head()
    records = race.records()

    # No lost update: every accepted message is on the head's branch, whole.
    assert accepted
    for msg in accepted:
        at = head.index(msg)
        assert head[at : at + 3] == turn(msg), head
    assert head[-1] == f"{max(accepted, key=head.index)}:answer"
    # Every refused one was reported to its sender, as its strategy says.
    expected_refusal = {
        "reject": {"ThreadBusyError"},
        "enqueue": set(),
        "interrupt": {"RunInterruptedError"},
        "rollback": {"RunRolledBackError"},
    }[strategy]
    assert {outcome[m] for m in refused} <= expected_refusal, outcome
    # And they raced: runs that went one after another would pass the rest.
    if strategy == "enqueue":
        by_seq = sorted(records.values(), key=lambda r: r.seq)
        waited = [b for a, b in itertools.pairwise(by_seq) if b.created_at < a.ended_at]
        assert waited, "no run was queued while another ran"
    else:
        assert refused, f"no run was refused: {outcome}"
    if strategy in ("reject", "rollback"):
        # Never written (reject), or deleted (rollback): nowhere, Redis included.
        assert head == [line for m in sorted(accepted, key=head.index) for line in turn(m)]
        for msg in refused:
            assert race.traces(msg) == [], msg
    if strategy == "interrupt":
        # A stopped run's completed steps stay, and nothing else of anyone.
        assert set(head) <= {line for m in sent for line in turn(m)}
        for msg in refused:
            assert f"{msg}:answer" not in head
    if strategy == "enqueue":
        # All of them, one after another in arrival order.
        by_arrival = sorted(records.values(), key=lambda r: r.seq)
        runs_of = {d["run_id"]: msg for msg, d in done.items()}
        assert head == [line for r in by_arrival for line in turn(runs_of[r.run_id])]
    # The records agree with what each sender was told.
    final = {"success": "success", "ThreadBusyError": None, "RunInterruptedError": "interrupted",
             "RunRolledBackError": "rolled_back"}  # fmt: skip
    for msg, d in done.items():
        status = records[d["run_id"]].status if d["run_id"] in records else None
        assert status == final[d["outcome"]], (msg, d, status)
    with race.saver() as saver:
        assert saver.threads.get(race.thread).status == "idle"


def test_a_queue_of_eight_drains_in_arrival_order_waking_only_the_next(
    workers: list[Worker], pg_url: str
) -> None:
    """Eight runs queue behind a holder, one per process, in a known order. As
    each run lets go, only the next in line may ask for the thread: a waiter
    sends one TAKE when it arrives and one when its turn comes (8 waiters: 16
    TAKEs), on one listening connection for its whole wait (8 connections).
    Waking every waiter at every release costs n(n+1)/2 more of both.

    Their leases (600 s) renew every 200 s, so no renewal falls in the test:
    every TAKE after a waiter's first is one it was woken for."""
    truncate(pg_url)
    race = Race(pg_url, "postgres")
    race.run(workers[0], "qh", "reject", gate=True)
    workers[0].expect(event="entered", msg="qh")
    sent = [f"qw{i}" for i in range(len(workers))]
    with race.saver() as saver:
        for queued, (worker, msg) in enumerate(zip(workers, sent), start=1):
            race.run(worker, msg, "enqueue", lease=600)
            wait_until(lambda n=queued: len(saver.runs.list(race.thread, status="pending")) == n)
    workers[0].send(cmd="open", name="qh")
    assert workers[0].expect(event="done", id="qh")["outcome"] == "success"
    done = {msg: w.expect(event="done", id=msg) for w, msg in zip(workers, sent)}
    assert {msg: d["outcome"] for msg, d in done.items()} == dict.fromkeys(sent, "success")
    # Arrival order, across processes.
    assert race.head() == turn("qh") + [line for msg in sent for line in turn(msg)]
    records = race.records()
    starts = [records[done[msg]["run_id"]].started_at for msg in sent]
    assert starts == sorted(starts)
    # The cost: per waiter, two TAKEs at most (one if its turn came before it
    # first asked) and one connection of its own.
    cost = {msg: (d["takes"], d["connections"]) for msg, d in done.items()}
    seen = (
        f"(TAKEs, connections) per waiter: {cost}; in all "
        f"{sum(t for t, _ in cost.values())} TAKEs, {sum(c for _, c in cost.values())} connections"
    )
    assert all(takes <= 2 for takes, _ in cost.values()), seen
    assert all(connections == 1 for _, connections in cost.values()), seen


def test_killed_holders_the_queue_moves_on_and_interrupt_does_not_wait(
    workers: list[Worker], pg_url: str, mode: str
) -> None:
    """Issue 15 item 4. A holder SIGKILLed with a short lease: once it lapses its
    run is marked error and an enqueued run proceeds. A holder SIGKILLed with a
    long lease: `interrupt` takes the thread at once, well within the lease."""
    lapsing, lasting = Race(pg_url, mode), Race(pg_url, mode)
    doomed = [Worker(), Worker()]
    try:
        lapsing.run(doomed[0], "qa1", "reject", gate=True, lease=1.5)
        lasting.run(doomed[1], "qa2", "reject", gate=True, lease=300)
        for worker, msg in zip(doomed, ("qa1", "qa2")):
            worker.expect(event="entered", msg=msg)
            os.killpg(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()
        lapsing.run(workers[0], "qb1", "enqueue", lease=1.5)
        lasting.run(workers[1], "qb2", "interrupt")
        assert workers[1].expect(event="done", id="qb2")["outcome"] == "success"
        assert workers[0].expect(event="done", id="qb1")["outcome"] == "success"
    finally:
        for worker in doomed:
            worker.stop()
    assert lapsing.head() == ["qa1", "qa1:think", *turn("qb1")]
    statuses = sorted((r.status, r.error or "") for r in lapsing.records().values())
    assert statuses[0][0] == "error" and "stopped renewing its lease" in statuses[0][1]
    assert statuses[1] == ("success", "")
    # Taken while the dead holder's lease was live: recorded as interrupted, not lapsed.
    assert lasting.head() == ["qa2", "qa2:think", *turn("qb2")]
    assert sorted(r.status for r in lasting.records().values()) == ["interrupted", "success"]
    with lapsing.saver() as saver:
        assert saver.threads.get(lapsing.thread).status == "idle"
        assert saver.threads.get(lasting.thread).status == "idle"


def lease_lapsed(url: str, thread_id: str) -> bool:
    """The thread's holder's lease has run out, by Postgres's clock."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT run_lease_until < now() FROM colosseum_threads WHERE thread_id = %s",
            (thread_id,),
        ).fetchone()
    return bool(row and row[0])


def stored_run_statuses(url: str, thread_id: str) -> list[str]:
    """The run records' status column as stored, bypassing every reader."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT status FROM colosseum_runs WHERE thread_id = %s ORDER BY seq", (thread_id,)
        ).fetchall()
    return [row[0] for row in rows]


def test_a_killed_holder_is_no_longer_busy_or_running_for_any_reader(
    pg_url: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: "the thread's status is busy while a run's lease is live", and a
    run whose process dies "is marked error once its lease lapses". Both hold
    for whoever reads first: nothing that could settle the run records runs
    before these readers (threads.get / search / count, `colosseum runs`, the
    web inspector, saver.runs.get / list), and none of them writes."""
    from starlette.testclient import TestClient

    from langgraph_colosseum.inspection import Inspector
    from langgraph_colosseum.ui.app import create_app

    race = Race(pg_url, mode)
    doomed = Worker()
    try:
        race.run(doomed, "qa1", "reject", gate=True, lease=1.5)
        doomed.expect(event="entered", msg="qa1")
        os.killpg(doomed.proc.pid, signal.SIGKILL)
        doomed.proc.wait()
    finally:
        doomed.stop()
    wait_until(lambda: lease_lapsed(pg_url, race.thread))
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", pg_url)
    shown = CliRunner().invoke(app, ["runs", race.thread, "--json"])
    assert shown.exit_code == 0, shown.output
    (cli_run,) = json.loads(shown.output)["items"]
    assert cli_run["status"] == "error" and "stopped renewing its lease" in cli_run["error"]
    with race.saver() as saver:
        page = TestClient(create_app(Inspector(saver), read_only=True)).get(
            "/thread", params={"id": race.thread}
        )
        assert page.status_code == 200
        assert 'class="status status-busy"' not in page.text
        assert "<td>running</td>" not in page.text and "<td>error</td>" in page.text
        assert saver.threads.get(race.thread).status == "idle"
        assert saver.threads.search(status="busy", prefix=race.thread) == []
        assert saver.threads.count(status="busy", prefix=race.thread) == 0
        assert [t.thread_id for t in saver.threads.search(status="idle", prefix=race.thread)] == [
            race.thread
        ]
        assert saver.threads.count(status="idle", prefix=race.thread) == 1
        (record,) = saver.runs.list(race.thread)
        assert (record.status, record.stopped_by) == ("error", "lease")
        assert "stopped renewing its lease" in record.error
        assert saver.runs.get(record.run_id) == record
        # The inspector's runs table: run, status, strategy, ..., process, stopped by, error.
        cells = [f"<td>{v}</td>" for v in (record.run_id, "error", "reject", record.holder,
                                          "lease", html.escape(record.error))]  # fmt: skip
        assert all(cell in page.text for cell in cells), page.text
        assert saver.runs.list(race.thread, status="running") == []
        assert saver.runs.cancel(thread_id=race.thread) == []  # nothing of it is active
    # No reader wrote: the record is as the dead process left it.
    assert stored_run_statuses(pg_url, race.thread) == ["running"]


def test_the_thread_is_busy_exactly_while_a_runs_lease_is_live(pg_url: str) -> None:
    """`busy` in threads.get, search and count while a saver.runs run holds the
    thread with a live lease; not once the lease has lapsed (even before anyone
    took the thread), and `busy` again when its process, only paused, renews
    it, also after a put outside any run wrote the thread meanwhile."""
    truncate(pg_url)
    thread_id = "busy-t"
    config = {"configurable": {"thread_id": thread_id}}
    entered, release = threading.Event(), threading.Event()

    def hold(msg: str) -> None:
        if msg == "a":
            entered.set()
            release.wait(WAIT)

    def busy(saver: Any) -> tuple[str, list[str], int]:
        found = saver.threads.search(status="busy", prefix=thread_id)
        return (saver.threads.get(thread_id).status, [t.thread_id for t in found],
                saver.threads.count(status="busy", prefix=thread_id))  # fmt: skip

    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        graph = echo_graph(saver, hold)
        # A lease nobody renews during the test: its lapse is set below, by hand.
        runs = saver.runs(graph, "reject", lease=timedelta(hours=1))
        outcome: list[Any] = []
        first = threading.Thread(
            target=lambda: outcome.append(runs.invoke({"messages": ["a"]}, config))
        )
        first.start()
        assert entered.wait(WAIT)
        (running,) = saver.runs.list(thread_id)
        assert busy(saver) == ("busy", [thread_id], 1)
        assert running.status == "running"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_threads SET run_lease_until = now() - interval '1 second' "
                "WHERE thread_id = %s",
                (thread_id,),
            )
        assert busy(saver) == ("idle", [], 0)
        assert saver.runs.get(running.run_id).status == "error"
        graph.invoke({"messages": ["p"]}, config)  # outside any run: the fence lets it write
        assert busy(saver) == ("idle", [], 0)
        saver._run(thread_ops.renew(thread_id, running.run_id, 3600))  # it was only paused
        assert busy(saver) == ("busy", [thread_id], 1)
        assert saver.runs.get(running.run_id).status == "running"
        release.set()
        first.join(WAIT)
        assert outcome and outcome[0]["messages"][-1] == "a:answer", outcome
        assert busy(saver) == ("idle", [], 0)


# In-process: the asyncio driver, PgBouncer, and the guards' own tests.


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


def gated_graph(saver: Any, gates: dict[str, Any]) -> Any:
    """START -> answer -> END; `answer` waits for gates[msg] when there is one."""

    async def answer(state: Chat) -> dict:
        msg = state["messages"][-1]
        if msg in gates:
            gates[msg][0].set()
            await gates[msg][1].wait()
        return {"messages": [f"{msg}:answer"]}

    builder = StateGraph(Chat)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def echo_graph(saver: Any, hold: Callable[[str], None] = lambda msg: None) -> Any:
    """START -> answer -> END, blocking: `answer` calls hold(msg) first."""

    def answer(state: Chat) -> dict:
        hold(state["messages"][-1])
        return {"messages": [f"{state['messages'][-1]}:answer"]}

    builder = StateGraph(Chat)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


async def test_async_enqueue_then_interrupt(pg_url: str) -> None:
    truncate(pg_url)
    config = {"configurable": {"thread_id": "async-t"}}
    async with AsyncColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        gates = {m: (asyncio.Event(), asyncio.Event()) for m in ("a", "c")}
        runs = saver.runs(gated_graph(saver, gates), "enqueue")
        # durability="sync": a step's checkpoint is stored before the next step
        # begins, so the interrupted run's stored steps are known exactly.
        run = partial(runs.ainvoke, config=config, durability="sync")
        first = asyncio.ensure_future(run({"messages": ["a"]}))
        await gates["a"][0].wait()
        second = asyncio.ensure_future(run({"messages": ["b"]}))
        while not await saver.runs.alist("async-t", status="pending"):
            await asyncio.sleep(0.01)
        # A waiter whose caller gives up leaves the queue at once (not when its lease lapses).
        quitter = asyncio.ensure_future(run({"messages": ["w"]}))
        while len(await saver.runs.alist("async-t", status="pending")) < 2:
            await asyncio.sleep(0.01)
        quitter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await quitter
        (left,) = await saver.runs.alist("async-t", status="error")
        assert "stopped waiting (CancelledError)" in left.error
        gates["a"][1].set()
        await first
        assert (await second)["messages"] == ["a", "a:answer", "b", "b:answer"]

        third = asyncio.ensure_future(run({"messages": ["c"]}))
        await gates["c"][0].wait()
        chunks = [c async for c in runs.astream({"messages": ["d"]}, config,
                                                multitask_strategy="interrupt")]  # fmt: skip
        assert chunks[-1] == {"answer": {"messages": ["d:answer"]}}
        gates["c"][1].set()
        with pytest.raises(RunInterruptedError):
            await third
        state = await runs.aget_state(config)
        assert state.values["messages"] == ["a", "a:answer", "b", "b:answer", "c", "d",
                                            "d:answer"]  # fmt: skip
        statuses = [r.status for r in await saver.runs.alist("async-t")]
        assert statuses == ["success", "success", "error", "interrupted", "success"]
        last = (await saver.runs.alist("async-t"))[-1].run_id
        assert (await saver.runs.ajoin(last)).status == "success"
        assert (await runs.ajoin(last)).values["messages"][-1] == "d:answer"
        assert await runs.ajoin((await saver.runs.alist("async-t"))[3].run_id) is not None


@pytest.mark.parametrize("kind", ["async", "blocking"])
async def test_aget_and_acancel_are_the_awaitable_get_and_cancel(pg_url: str, kind: str) -> None:
    """saver.runs.aget / acancel on both savers: the record as get reads it
    (None for an unknown run; a run past its lease reads as error), and a
    cancel by run id or by thread that stops what is active, and only that."""
    truncate(pg_url)
    saver_class = AsyncColosseumSaver if kind == "async" else ColosseumSaver

    async def start(saver: Any, thread_id: str, run_id: str, lease: float = 60) -> None:
        op = multitask.start(saver._store, thread_id, run_id, "enqueue", "elsewhere:9", lease, None)
        if kind == "async":
            await saver._arun(op)
        else:
            saver._run(op)

    def opened() -> Any:
        if kind == "async":
            return AsyncColosseumSaver.from_conn_string(pg_url, pool_size=2)
        return _Entered(ColosseumSaver.from_conn_string(pg_url, pool_size=2))

    async with opened() as saver:
        assert isinstance(saver, saver_class)
        await start(saver, "twins-a", "ra1")
        with psycopg.connect(pg_url, autocommit=True) as conn:  # queued behind ra1
            conn.execute(
                multitask.ENQUEUE,
                {"thread_id": "twins-a", "run_id": "ra2", "holder": "elsewhere:9", "lease": 60},
            )
        assert await saver.runs.aget("nobody") is None
        held = await saver.runs.aget("ra1")
        assert (held.run_id, held.thread_id, held.status, held.holder) == (
            "ra1", "twins-a", "running", "elsewhere:9")  # fmt: skip
        assert (await saver.runs.aget("ra2")).status == "pending"
        assert await saver.runs.acancel("ra2") == ["ra2"]
        assert [(r.status, r.stopped_by) for r in [await saver.runs.aget("ra2")]] == [
            ("interrupted", "cancel")]  # fmt: skip
        assert await saver.runs.acancel("ra2") == []  # stopped already
        assert await saver.runs.acancel(thread_id="twins-a") == ["ra1"]
        assert (await saver.runs.aget("ra1")).status == "interrupted"
        with pytest.raises(RunNotFoundError):
            await saver.runs.acancel("nobody")
        with pytest.raises(InvalidConfigError):
            await saver.runs.acancel()
        # A run whose lease lapsed reads as error, and there is nothing to cancel.
        await start(saver, "twins-b", "rb1", lease=60)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_threads SET run_lease_until = now() - interval '1 second' "
                "WHERE thread_id = 'twins-b'"
            )
        lapsed = await saver.runs.aget("rb1")
        assert (lapsed.status, lapsed.stopped_by) == ("error", "lease")
        assert await saver.runs.acancel(thread_id="twins-b") == []
        assert await saver.runs.acancel("rb1") == []


class _Entered:
    """A blocking saver's context manager, entered with `async with`."""

    def __init__(self, context: Any) -> None:
        self._context = context

    async def __aenter__(self) -> Any:
        return self._context.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)


def test_enqueue_through_pgbouncer_polls(pg_url: str, bouncer_url: str) -> None:
    truncate(pg_url)
    config = {"configurable": {"thread_id": "bouncer-t"}}
    with ColosseumSaver.from_conn_string(bouncer_url, pool_size=4, pgbouncer=True) as saver:
        entered, release = threading.Event(), threading.Event()

        def hold(msg: str) -> None:
            if msg == "a":
                entered.set()
                release.wait(WAIT)

        runs = saver.runs(echo_graph(saver, hold), "enqueue")
        first = threading.Thread(target=runs.invoke, args=({"messages": ["a"]}, config))
        first.start()
        entered.wait(WAIT)
        results: list[Any] = []
        second = threading.Thread(
            target=lambda: results.append(runs.invoke({"messages": ["b"]}, config))
        )
        second.start()
        wait_until(lambda: saver.runs.list("bouncer-t", status="pending"))
        release.set()
        first.join(WAIT)
        second.join(WAIT)
        assert results[0]["messages"] == ["a", "a:answer", "b", "b:answer"]
        cancelled = saver.runs.cancel(thread_id="bouncer-t")
        assert cancelled == []  # nothing left running


def test_enqueue_on_a_single_connection_saver_polls(pg_url: str) -> None:
    """A saver built on one connection (not a pool) has none to spare for LISTEN:
    its queued run polls, and still runs once the holder lets go."""
    truncate(pg_url)
    config = {"configurable": {"thread_id": "single-t"}}
    entered, release = threading.Event(), threading.Event()

    def hold(msg: str) -> None:
        if msg == "a":
            entered.set()
            release.wait(WAIT)

    with (
        ColosseumSaver.from_conn_string(pg_url, pool_size=2) as pooled,
        psycopg.connect(pg_url, autocommit=True) as conn,
    ):
        single = ColosseumSaver(conn)
        first_runs = pooled.runs(echo_graph(pooled, hold), "enqueue")
        queued_runs = single.runs(echo_graph(single), "enqueue")
        first = threading.Thread(target=first_runs.invoke, args=({"messages": ["a"]}, config))
        first.start()
        assert entered.wait(WAIT)
        results: list[Any] = []
        second = threading.Thread(
            target=lambda: results.append(queued_runs.invoke({"messages": ["b"]}, config))
        )
        second.start()
        wait_until(lambda: pooled.runs.list("single-t", status="pending"))
        release.set()
        first.join(WAIT)
        second.join(WAIT)
        assert results[0]["messages"] == ["a", "a:answer", "b", "b:answer"]


def test_a_queued_run_waits_behind_an_earlier_live_one(pg_url: str) -> None:
    """Guard: a run may not take a free thread while a live run queued before it."""
    truncate(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            multitask.ENQUEUE,
            {"thread_id": "queued-t", "run_id": "earlier", "holder": "elsewhere:1", "lease": 60},
        )
    config = {"configurable": {"thread_id": "queued-t"}}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        runs = saver.runs(echo_graph(saver), "enqueue", queue_timeout=timedelta(seconds=0.3))
        with pytest.raises(ThreadBusyError):
            runs.invoke({"messages": ["x"]}, config, multitask_strategy="reject")
        with pytest.raises(RunQueueTimeoutError):
            runs.invoke({"messages": ["y"]}, config)
        assert saver.runs.cancel(thread_id="queued-t") == ["earlier"]
        assert runs.invoke({"messages": ["z"]}, config)["messages"] == ["z", "z:answer"]
        statuses = {r.run_id: r.status for r in saver.runs.list("queued-t")}
        assert statuses["earlier"] == "interrupted"
        assert sorted(statuses.values()) == ["error", "interrupted", "success"]


def test_a_stopped_run_never_ends_as_success(pg_url: str) -> None:
    """Guard: a run stopped by another one cannot record success afterwards, even
    when it has nothing left to write (its fence is never met again)."""
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        token = saver._run(
            multitask.start(saver._store, "stop-t", "first", "reject", "here:1", 30, None)
        )
        saver._run(multitask.start(saver._store, "stop-t", "second", "interrupt", "here:1", 30,
                                   None))  # fmt: skip
        ended, status, by = saver._run(multitask.finish("stop-t", "first", token, "success", None))
        assert (ended, status, by) == (False, "interrupted", "second")
        assert saver.runs.get("first").status == "interrupted"
        with pytest.raises(TimeoutError):
            saver.runs.join("second", timeout=0.2)
        second = saver.runs.get("second")
        saver._run(multitask.finish("stop-t", "second", 2, "success", None))
        assert saver.runs.join("second", timeout=WAIT).status == "success"
        assert second.status == "running"


def test_the_cli_shows_runs(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    truncate(pg_url)
    config = {"configurable": {"thread_id": "cli-t"}}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        runs = saver.runs(echo_graph(saver), "reject")
        chunks = list(runs.stream({"messages": ["one"]}, config, stream_mode="values"))
        assert chunks[-1] == {"messages": ["one", "one:answer"]}
        (done,) = saver.runs.list("cli-t")
        assert runs.join(done.run_id).values == chunks[-1]
        saver._run(multitask.start(saver._store, "cli-t", "stuck", "enqueue", "elsewhere:7", 60,
                                   None))  # fmt: skip
        saver.runs.cancel("stuck")
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", pg_url)
    result = CliRunner().invoke(app, ["runs", "cli-t", "--json"])
    assert result.exit_code == 0, result.output
    shown = {r["run_id"]: r for r in json.loads(result.output)["items"]}
    assert sorted((r["status"], r["strategy"], r["checkpoints"] > 0) for r in shown.values()) == [
        ("interrupted", "enqueue", False), ("success", "reject", True)]  # fmt: skip
    assert shown["stuck"]["holder"] == "elsewhere:7" and shown["stuck"]["stopped_by"] == "cancel"
    text = CliRunner().invoke(app, ["runs", "cli-t"])
    assert text.exit_code == 0 and "interrupted" in text.output


def test_a_refused_put_of_a_deleted_run_leaves_the_holders_row(pg_url: str) -> None:
    """Guard: a put refused because its run was rolled back does not take away the
    registry row of a thread with no checkpoint left, when another run holds it:
    that row is the new run's fence (its writes would all be refused)."""
    truncate(pg_url)
    config = {"configurable": {"thread_id": "fresh-t", "checkpoint_ns": ""}}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        saver._run(multitask.start(saver._store, "fresh-t", "holder", "reject", "here:1", 30,
                                   None))  # fmt: skip
        saver.delete_for_runs(["rolled-back"])
        with pytest.raises(CheckpointDeletedError):
            saver.put(config, empty_checkpoint(), {"run_id": "rolled-back"}, {})
        with psycopg.connect(pg_url, autocommit=True) as conn:
            owner = conn.execute(
                "SELECT run_owner FROM colosseum_threads WHERE thread_id = 'fresh-t'"
            ).fetchall()
        assert owner == [("holder",)]


def test_a_run_that_stops_at_the_graphs_own_interrupt_succeeded(pg_url: str) -> None:
    """A run that ends at interrupt() did what the graph asked: its record is
    `success` (LangGraph Platform's `interrupted` means stopped by another run
    or cancelled, as ours), the thread waits as `interrupted`, and the run that
    resumes it ends the wait."""

    def ask(state: Chat) -> dict:
        return {"messages": [f"reply:{interrupt('your reply?')}"]}

    builder = StateGraph(Chat)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    truncate(pg_url)
    config = {"configurable": {"thread_id": "asks"}}
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        runs = saver.runs(builder.compile(checkpointer=saver), "reject")
        runs.invoke({"messages": ["hi"]}, config)
        [asked] = saver.runs.list("asks")
        assert asked.status == "success"
        assert saver.threads.get("asks").status == "interrupted"
        assert runs.invoke(Command(resume="yes"), config)["messages"] == ["hi", "reply:yes"]
        assert [r.status for r in saver.runs.list("asks")] == ["success", "success"]
        assert saver.threads.get("asks").status == "idle"
