"""A fence is checked where the write happens; a dead holder does not leave a thread busy.

1. Fencing (issue 12 item 2). Holder H1 (a worker process, `fence_worker.py`)
   takes `run_guard` with a short lease and is paused by SIGSTOP inside a node,
   heartbeat included. Once its lease has lapsed (read from Postgres, no
   sleeping on luck), H2 takes the guard, runs a turn and, in one case,
   releases it. H1 is then continued: its next write must be refused with
   LeaseLostError, nothing of it stored, and H2's step is still the head.
2. Status (issue 12 item 5). A guard holder is SIGKILLed; once its lease has
   lapsed the thread is no longer busy for any reader (before anything else
   writes it), and unguarded runs set the status again (idle / interrupted /
   error), so `search(status=...)` finds the thread.

Both run on the blocking and the asyncio saver, with and without Redis.
"""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum.errors import LeaseLostError, ThreadBusyError
from tests.conftest import CACHE_PREFIX, redis_url
from tests.integration.processes import sigkill, spawn

WORKER = Path(__file__).with_name("fence_worker.py")
HOLDER = Path(__file__).with_name("threads_worker.py")


class Deal(TypedDict, total=False):
    ticker: str
    seen: Annotated[list[str], operator.add]


def fence_graph(saver: Any, hold: Callable[[dict], dict]) -> Any:
    """START -> quote -> hold -> END."""

    def quote(state: Deal) -> dict:
        return {"seen": [state["ticker"]]}

    builder = StateGraph(Deal)
    builder.add_node("quote", quote)
    builder.add_node("hold", hold)
    builder.add_edge(START, "quote")
    builder.add_edge("quote", "hold")
    builder.add_edge("hold", END)
    return builder.compile(checkpointer=saver)


def passing(state: dict) -> dict:
    return {"seen": ["passed"]}


def cfg(tid: str) -> dict:
    return {"configurable": {"thread_id": tid}}


def checkpoint_count(url: str, tid: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM colosseum_checkpoints WHERE thread_id = %s", (tid,)
        ).fetchone()[0]


def lease_state(url: str, tid: str) -> tuple[Any, ...] | None:
    """(owner, lease lapsed) of the thread's guard, or None without a row."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT run_owner, run_lease_until < now() FROM colosseum_threads WHERE thread_id = %s",
            (tid,),
        ).fetchone()


def no_statement_in_flight(url: str) -> bool:
    """No other session of this (per-test-session) database is in a statement or transaction."""
    with psycopg.connect(url, autocommit=True) as conn:
        return not conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state <> 'idle'"
        ).fetchone()[0]


def wait_for(check: Callable[[], bool], what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"worker exited before {what}: {log.read_text()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {log.read_text()}"
        time.sleep(0.02)


def cache_args(saver: Any) -> list[str]:
    return [redis_url(), CACHE_PREFIX] if saver.cache is not None else []


class PausedHolder:
    """H1: a worker holding the guard, stopped (SIGSTOP) inside its `hold` node
    until its lease has lapsed in Postgres."""

    def __init__(self, saver: Any, url: str, tid: str, mode: str, tmp: Path) -> None:
        self.url, self.tid, self.log, self.go = url, tid, tmp / "h1.log", tmp / "go"
        self.proc = spawn(
            WORKER, url, tid, "1.0", str(self.go), mode, *cache_args(saver), log=self.log
        )

    def __enter__(self) -> PausedHolder:
        wait_for(lambda: "IN_NODE" in self.log.read_text(), "H1 in its node", self.proc, self.log)
        h1_owner = lease_state(self.url, self.tid)[0]
        assert h1_owner is not None
        # Stopped between statements: a stopped process inside a transaction
        # would hold its row locks, and H2 would wait for it, not race it. Once
        # its `hold` step is stored (input, quote, hold), H1 sends only its
        # heartbeat, single autocommit statements.
        wait_for(
            lambda: checkpoint_count(self.url, self.tid) == 3 and no_statement_in_flight(self.url),
            "H1's steps stored",
            self.proc,
            self.log,
        )
        os.kill(self.proc.pid, signal.SIGSTOP)  # the node, and its heartbeat, stop
        deadline = time.monotonic() + 30
        while not lease_state(self.url, self.tid)[1]:
            assert time.monotonic() < deadline, "H1's lease never lapsed"
            time.sleep(0.05)
        return self

    def resume(self) -> str:
        """Let H1 go on; what it reports once its turn ends."""
        self.go.touch()
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.wait(timeout=60)
        return self.log.read_text()

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        sigkill(self.proc)


# ================================================================ 1. fencing


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stale_holder_loses_its_lease_to_a_released_successor(
    saver: ColosseumSaver, pg_url: str, tmp_path: Path, mode: str
) -> None:
    tid = f"fence-{uuid.uuid4().hex[:8]}"
    graph = fence_graph(saver, passing)
    with PausedHolder(saver, pg_url, tid, mode, tmp_path) as h1:
        # H2 takes the lapsed guard (reject: it must be free), runs a turn, releases.
        with saver.run_guard(tid, on_busy="reject", lease=timedelta(seconds=30)):
            out = graph.invoke({"ticker": "H2"}, cfg(tid))
        assert out["seen"][-2:] == ["H2", "passed"]
        h2_head = saver.get_tuple(cfg(tid))
        stored = checkpoint_count(pg_url, tid)
        report = h1.resume()
    assert "REFUSED LeaseLostError" in report, report
    assert "lease lost" in report and tid in report
    # Nothing of H1's late step is stored; H2's step is the head.
    assert checkpoint_count(pg_url, tid) == stored
    head = saver.get_tuple(cfg(tid))
    assert head is not None and head.config == h2_head.config
    assert graph.get_state(cfg(tid)).values["seen"][-2:] == ["H2", "passed"]
    assert "held" not in graph.get_state(cfg(tid)).values["seen"]
    assert saver.threads.get(tid).status == "idle"


def test_stale_holder_refused_while_its_successor_holds(
    saver: ColosseumSaver, pg_url: str, tmp_path: Path
) -> None:
    tid = f"fence-held-{uuid.uuid4().hex[:8]}"
    graph = fence_graph(saver, passing)
    with PausedHolder(saver, pg_url, tid, "sync", tmp_path) as h1:
        with saver.run_guard(tid, on_busy="reject"):
            graph.invoke({"ticker": "H2"}, cfg(tid))
            h2_head = saver.get_tuple(cfg(tid))
            stored = checkpoint_count(pg_url, tid)
            report = h1.resume()
            assert "REFUSED LeaseLostError" in report, report
            assert issubclass(LeaseLostError, ThreadBusyError)
            assert checkpoint_count(pg_url, tid) == stored
            assert saver.get_tuple(cfg(tid)).config == h2_head.config
    assert saver.get_tuple(cfg(tid)).config == h2_head.config


async def test_stale_holder_loses_its_lease_async(
    asaver: AsyncColosseumSaver, pg_url: str, tmp_path: Path
) -> None:
    tid = f"afence-{uuid.uuid4().hex[:8]}"
    graph = fence_graph(asaver, passing)
    with PausedHolder(asaver, pg_url, tid, "async", tmp_path) as h1:
        async with asaver.run_guard(tid, on_busy="reject"):
            await graph.ainvoke({"ticker": "H2"}, cfg(tid))
        h2_head = await asaver.aget_tuple(cfg(tid))
        stored = checkpoint_count(pg_url, tid)
        report = h1.resume()
    assert "REFUSED LeaseLostError" in report, report
    assert checkpoint_count(pg_url, tid) == stored
    assert (await asaver.aget_tuple(cfg(tid))).config == h2_head.config


# ================================================== 2. status after a dead holder


def killed_holder(saver: Any, url: str, tid: str, tmp: Path) -> None:
    """A guard holder SIGKILLed while it holds `tid`; returns once its lease lapsed."""
    log = tmp / "holder.log"
    proc = spawn(HOLDER, url, tid, "1.0", log=log)
    try:
        wait_for(lambda: "HELD" in log.read_text(), "the holder holds the thread", proc, log)
    finally:
        sigkill(proc)
    deadline = time.monotonic() + 30
    while not lease_state(url, tid)[1]:
        assert time.monotonic() < deadline, "the dead holder's lease never lapsed"
        time.sleep(0.05)
    assert saver is not None


def test_status_follows_runs_after_a_dead_holder(
    saver: ColosseumSaver, pg_url: str, tmp_path: Path
) -> None:
    from tests.integration.test_threads import Boom, approval_graph, flaky_graph, ticker_graph

    tid = f"dead-holder-{uuid.uuid4().hex[:8]}"
    killed_holder(saver, pg_url, tid, tmp_path)
    # Its lease lapsed: not busy for any reader, before any run wrote the thread.
    assert saver.threads.get(tid).status == "idle"
    assert tid not in [t.thread_id for t in saver.threads.search(status="busy")]
    assert saver.threads.count(status="busy", prefix=tid) == 0
    assert tid in [t.thread_id for t in saver.threads.search(status="idle", prefix=tid)]
    ticker = ticker_graph(saver)
    for symbol in ("AAPL", "MSFT", "NVDA"):
        ticker.invoke({"ticker": symbol}, cfg(tid))
    assert saver.threads.get(tid).status == "idle"
    assert tid in [t.thread_id for t in saver.threads.search(status="idle")]
    assert tid not in [t.thread_id for t in saver.threads.search(status="busy")]
    # What the row itself says, not only what readers make of its lapsed
    # lease: the runs after the dead holder set it, so a search's first,
    # cheaper read takes it as it is (threads._quick_page).
    with psycopg.connect(pg_url) as conn:
        stored = conn.execute("SELECT status FROM colosseum_threads WHERE thread_id = %s", [tid])
        assert stored.fetchone() == ("idle",)

    approval_graph(saver).invoke({"ticker": "AAPL"}, cfg(tid))
    assert tid in [t.thread_id for t in saver.threads.search(status="interrupted")]
    flaky = flaky_graph(saver, {"fail": True})
    with pytest.raises(Boom):
        flaky.invoke({"ticker": "AAPL"}, cfg(f"{tid}-err"))
    other = f"{tid}-err2"
    killed_holder(saver, pg_url, other, tmp_path)
    with pytest.raises(Boom):
        flaky.invoke({"ticker": "AAPL"}, cfg(other))
    assert saver.threads.get(other).status == "error"
    assert other in [t.thread_id for t in saver.threads.search(status="error")]


async def test_status_follows_runs_after_a_dead_holder_async(
    asaver: AsyncColosseumSaver, pg_url: str, tmp_path: Path
) -> None:
    from tests.integration.test_threads import approval_graph, ticker_graph

    tid = f"adead-holder-{uuid.uuid4().hex[:8]}"
    killed_holder(asaver, pg_url, tid, tmp_path)
    assert (await asaver.threads.get(tid)).status == "idle"
    assert await asaver.threads.search(status="busy", prefix=tid) == []
    ticker = ticker_graph(asaver)
    for symbol in ("AAPL", "MSFT", "NVDA"):
        await ticker.ainvoke({"ticker": symbol}, cfg(tid))
    assert (await asaver.threads.get(tid)).status == "idle"
    assert tid in [t.thread_id for t in await asaver.threads.search(status="idle")]
    await approval_graph(asaver).ainvoke({"ticker": "AAPL"}, cfg(tid))
    assert (await asaver.threads.get(tid)).status == "interrupted"
