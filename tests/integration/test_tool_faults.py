"""Fault tests for IdempotentToolNode: crashes, races, failures, timeouts.

Side effects are counted in an external witness table (`witness_tool_effects`)
that the tools write through their own autocommit connections, never through
the ledger. The ledger (`colosseum_tool_calls`) is only read to check its
bookkeeping and to know when a killed worker reached a given point.

Crash tests run the graph in a worker process (`tool_worker.py`) and kill it
with SIGKILL; the test process then resumes the thread with a fresh saver.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import ToolMessage

from langgraph_colosseum import (
    AsyncColosseumSaver,
    ColosseumSaver,
    ToolFailedError,
    ToolOutcomeUnknownError,
    ToolTimeoutError,
)
from tests.conftest import connection_options
from tests.integration.processes import sigkill, spawn
from tests.integration.tool_worker import (
    SCENARIOS,
    START_INPUT,
    build_graph,
    ensure_witness,
    make_tools,
)

WORKER = Path(__file__).with_name("tool_worker.py")


# --------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def url(pg_url: str) -> str:
    ensure_witness(pg_url)
    return pg_url


def new_tid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


def cfg(tid: str) -> dict:
    return {"configurable": {"thread_id": tid}}


def witnesses(url: str, tid: str, tool: str) -> list[tuple[str | None, str]]:
    """(key, note) of every side effect `tool` had on this thread."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT key, note FROM witness_tool_effects WHERE thread_id = %s AND tool = %s "
            "ORDER BY id",
            (tid, tool),
        ).fetchall()


def ledger(url: str, tid: str) -> dict[str, dict[str, Any]]:
    """The ledger rows of a thread, by tool_call_id."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(
            "SELECT tool_call_id, tool_name, idempotency_key, status, attempts, error, "
            "lease_until < now() AS lapsed FROM colosseum_tool_calls WHERE thread_id = %s",
            (tid,),
        )
        names = [c.name for c in cur.description or ()]
        return {row[0]: dict(zip(names, row)) for row in cur.fetchall()}


def poll(check: Callable[[], bool], *, timeout: float, what: str, proc: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"worker exited (rc {proc.returncode}) before: {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        time.sleep(0.05)


async def apoll(check: Callable[[], bool], *, timeout: float, what: str, proc: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"worker exited (rc {proc.returncode}) before: {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        await asyncio.sleep(0.05)


def spawn_worker(scenario: str, url: str, tid: str, kind: str, log: Path) -> subprocess.Popen:
    return spawn(WORKER, scenario, url, tid, kind, log=log)


def kill_when(proc: subprocess.Popen, log: Path, reached: Callable[[], bool], what: str) -> None:
    """SIGKILL the worker as soon as `reached()`; its output goes into any failure."""
    try:
        poll(reached, timeout=30, what=what, proc=proc)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nworker output:\n{fmt(log)}") from None
    finally:
        sigkill(proc)


def tool_messages(state: dict) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


def fmt(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


# ------------------------------------------- 1. crash after the side effect


def _crash_after_pay_reached(url: str, tid: str) -> bool:
    rows = ledger(url, tid)
    pay, slow = rows.get("call-0-pay"), rows.get("call-1-slow")
    return (
        len(witnesses(url, tid, "pay")) == 1
        and pay is not None
        and pay["status"] == "SUCCESS"
        and slow is not None
        and slow["status"] == "RUNNING"
        and len(witnesses(url, tid, "slow")) == 1
    )


def _check_crash_after_pay(url: str, tid: str, state: dict) -> None:
    assert len(witnesses(url, tid, "pay")) == 1, "the payment happened twice"
    msgs = tool_messages(state)
    assert set(msgs) == {"call-0-pay", "call-1-slow"}
    assert msgs["call-0-pay"].content == "paid 100"
    assert msgs["call-1-slow"].content == "slow done"
    assert state["messages"][-1].content == "done"
    rows = ledger(url, tid)
    assert rows["call-0-pay"]["status"] == "SUCCESS"
    assert rows["call-0-pay"]["attempts"] == 1
    # slow's dead claim was taken over (on_unknown="retry") and ran again.
    assert rows["call-1-slow"]["status"] == "SUCCESS"
    assert rows["call-1-slow"]["attempts"] == 2
    assert len(witnesses(url, tid, "slow")) == 2


RESUME_PAY_AND_SLOW: dict[str, Any] = {
    "on_unknown": {"slow": "retry"},
    "lease": timedelta(seconds=2),
    "wait": timedelta(seconds=10),
}


def test_crash_after_side_effect_sync(url: str, tmp_path: Path) -> None:
    tid = new_tid("crash-pay-sync")
    log = tmp_path / "worker.log"
    proc = spawn_worker("pay_and_slow", url, tid, "sync", log)
    kill_when(
        proc, log, lambda: _crash_after_pay_reached(url, tid), "pay done and recorded, slow running"
    )
    assert proc.returncode == -signal.SIGKILL

    tools = make_tools(url, slow_seconds=0.05)
    calls = SCENARIOS["pay_and_slow"]["calls"]
    with ColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        graph = build_graph(saver, tools, calls, **RESUME_PAY_AND_SLOW)
        # The tools step never reached the checkpoint.
        assert graph.get_state(cfg(tid)).next == ("tools",)
        state = graph.invoke(None, cfg(tid))
        assert graph.get_state(cfg(tid)).next == ()
    _check_crash_after_pay(url, tid, state)


async def test_crash_after_side_effect_async(url: str, tmp_path: Path) -> None:
    tid = new_tid("crash-pay-async")
    log = tmp_path / "worker.log"
    proc = spawn_worker("pay_and_slow", url, tid, "async", log)
    kill_when(
        proc, log, lambda: _crash_after_pay_reached(url, tid), "pay done and recorded, slow running"
    )
    assert proc.returncode == -signal.SIGKILL

    tools = make_tools(url, slow_seconds=0.05)
    calls = SCENARIOS["pay_and_slow"]["calls"]
    async with AsyncColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        graph = build_graph(saver, tools, calls, **RESUME_PAY_AND_SLOW)
        assert (await graph.aget_state(cfg(tid))).next == ("tools",)
        state = await graph.ainvoke(None, cfg(tid))
        assert (await graph.aget_state(cfg(tid))).next == ()
    _check_crash_after_pay(url, tid, state)


# ----------------------------------------------------------------- 2. race

RACE_CALLS: list[tuple[str, dict[str, Any]]] = [("pay", {"amount": 1}), ("pay", {"amount": 2})]
RACE_WORKERS = 4


def _check_race(url: str, tid: str, outcomes: list[Any]) -> None:
    """Every worker finishes the run with both payments answered, each paid once.

    A worker that loses a claim waits for the winner's result (wait=10 s against
    a 0.3 s payment) and answers with it: no worker may raise, not even one of
    our own errors (ToolOutcomeUnknownError, ToolWaitTimeoutError would mean a
    live claim was judged dead, or a wait was cut short).
    """
    notes = [note for _, note in witnesses(url, tid, "pay")]
    assert sorted(notes) == ["paid 1", "paid 2"], f"each payment must run once, got {notes}"
    assert len(outcomes) == RACE_WORKERS
    raised = [o for o in outcomes if isinstance(o, BaseException)]
    assert not raised, f"workers raised: {raised!r}"
    for state in outcomes:
        msgs = tool_messages(state)
        assert {k: m.content for k, m in msgs.items()} == {
            "call-0-pay": "paid 1",
            "call-1-pay": "paid 2",
        }
        assert state["messages"][-1].content == "done"
    rows = ledger(url, tid)
    assert {k: (r["status"], r["attempts"]) for k, r in rows.items()} == {
        "call-0-pay": ("SUCCESS", 1),
        "call-1-pay": ("SUCCESS", 1),
    }


# Also through PgBouncer in transaction mode: the claim is a row, so a tool still runs once.
VIAS = ["postgres", "pgbouncer"]


@pytest.mark.parametrize("via", VIAS)
def test_race_resume_sync(url: str, via: str, request: pytest.FixtureRequest) -> None:
    tid = new_tid("race-sync")
    tools = make_tools(url, pay_seconds=0.3)
    saver_url, options = connection_options(via, url, request)
    with ColosseumSaver.from_conn_string(saver_url, pool_size=2, **options) as saver:
        graph = build_graph(saver, tools, RACE_CALLS, interrupt_before=["tools"])
        graph.invoke(START_INPUT, cfg(tid))
        assert graph.get_state(cfg(tid)).next == ("tools",)

    barrier = threading.Barrier(RACE_WORKERS, timeout=30)

    def worker(_: int) -> Any:
        with ColosseumSaver.from_conn_string(saver_url, pool_size=4, **options) as saver:
            graph = build_graph(
                saver, tools, RACE_CALLS, interrupt_before=["tools"], wait=timedelta(seconds=10)
            )
            graph.get_state(cfg(tid))  # warm the pool before the start line
            barrier.wait()
            try:
                return graph.invoke(None, cfg(tid))
            except Exception as exc:
                return exc

    with ThreadPoolExecutor(RACE_WORKERS) as pool:
        outcomes = list(pool.map(worker, range(RACE_WORKERS)))
    _check_race(url, tid, outcomes)


@pytest.mark.parametrize("via", VIAS)
async def test_race_resume_async(url: str, via: str, request: pytest.FixtureRequest) -> None:
    tid = new_tid("race-async")
    tools = make_tools(url, pay_seconds=0.3)
    saver_url, options = connection_options(via, url, request)
    async with AsyncColosseumSaver.from_conn_string(saver_url, pool_size=2, **options) as saver:
        graph = build_graph(saver, tools, RACE_CALLS, interrupt_before=["tools"])
        await graph.ainvoke(START_INPUT, cfg(tid))
        assert (await graph.aget_state(cfg(tid))).next == ("tools",)

    async with AsyncExitStack() as stack:
        graphs = []
        for _ in range(RACE_WORKERS):
            saver = await stack.enter_async_context(
                AsyncColosseumSaver.from_conn_string(saver_url, pool_size=4, **options)
            )
            graph = build_graph(
                saver, tools, RACE_CALLS, interrupt_before=["tools"], wait=timedelta(seconds=10)
            )
            await graph.aget_state(cfg(tid))
            graphs.append(graph)
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(g.ainvoke(None, cfg(tid)) for g in graphs), return_exceptions=True),
            timeout=30,
        )
    _check_race(url, tid, list(outcomes))


# ------------------------------------------------------- 3. crash mid-tool


def _hang_reached(url: str, tid: str) -> bool:
    row = ledger(url, tid).get("call-0-charge")
    return (
        len(witnesses(url, tid, "charge")) == 1 and row is not None and row["status"] == "RUNNING"
    )


def _lease_lapsed(url: str, tid: str) -> bool:
    return bool(ledger(url, tid)["call-0-charge"]["lapsed"])


def _check_unknown_error(url: str, tid: str, err: ToolOutcomeUnknownError) -> None:
    key = ledger(url, tid)["call-0-charge"]["idempotency_key"]
    message = str(err)
    assert "call-0-charge" in message, message
    assert key in message, message
    assert err.idempotency_key == key
    assert err.tool_call_id == "call-0-charge"
    assert err.tool_name == "charge"
    assert len(witnesses(url, tid, "charge")) == 1, "on_unknown='raise' must not run the tool"


def _check_retried(url: str, tid: str, state: dict) -> None:
    assert [note for _, note in witnesses(url, tid, "charge")] == ["started", "started"]
    assert tool_messages(state)["call-0-charge"].content == "charged"
    assert state["messages"][-1].content == "done"
    row = ledger(url, tid)["call-0-charge"]
    assert (row["status"], row["attempts"]) == ("SUCCESS", 2)


HANG_CALLS = SCENARIOS["hang"]["calls"]


def test_crash_mid_tool_sync(url: str, tmp_path: Path) -> None:
    tid = new_tid("crash-mid-sync")
    log = tmp_path / "worker.log"
    proc = spawn_worker("hang", url, tid, "sync", log)
    kill_when(proc, log, lambda: _hang_reached(url, tid), "charge running")
    assert ledger(url, tid)["call-0-charge"]["status"] == "RUNNING"
    time.sleep(1.5)  # the 1 s lease lapses: nobody renews it
    poll(lambda: _lease_lapsed(url, tid), timeout=5, what="the lease to lapse")

    tools = make_tools(url, hang_seconds=0.0)
    with ColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        raising = build_graph(
            saver, tools, HANG_CALLS, on_unknown="raise", lease=timedelta(seconds=1)
        )
        with pytest.raises(ToolOutcomeUnknownError) as info:
            raising.invoke(None, cfg(tid))
        _check_unknown_error(url, tid, info.value)

        retrying = build_graph(
            saver, tools, HANG_CALLS, on_unknown="retry", lease=timedelta(seconds=1)
        )
        state = retrying.invoke(None, cfg(tid))
    _check_retried(url, tid, state)


async def test_crash_mid_tool_async(url: str, tmp_path: Path) -> None:
    tid = new_tid("crash-mid-async")
    log = tmp_path / "worker.log"
    proc = spawn_worker("hang", url, tid, "async", log)
    kill_when(proc, log, lambda: _hang_reached(url, tid), "charge running")
    assert ledger(url, tid)["call-0-charge"]["status"] == "RUNNING"
    await asyncio.sleep(1.5)
    await apoll(lambda: _lease_lapsed(url, tid), timeout=5, what="the lease to lapse")

    tools = make_tools(url, hang_seconds=0.0)
    async with AsyncColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        raising = build_graph(
            saver, tools, HANG_CALLS, on_unknown="raise", lease=timedelta(seconds=1)
        )
        with pytest.raises(ToolOutcomeUnknownError) as info:
            await raising.ainvoke(None, cfg(tid))
        _check_unknown_error(url, tid, info.value)

        retrying = build_graph(
            saver, tools, HANG_CALLS, on_unknown="retry", lease=timedelta(seconds=1)
        )
        state = await retrying.ainvoke(None, cfg(tid))
    _check_retried(url, tid, state)


# ------------------------------------------------- 4. failed, then policy

FLAKY_CALLS: list[tuple[str, dict[str, Any]]] = [("flaky", {})]


def _check_first_failure(url: str, tid: str) -> None:
    assert len(witnesses(url, tid, "flaky")) == 1
    row = ledger(url, tid)["call-0-flaky"]
    assert row["status"] == "FAILED"
    assert "flaky fails on its first call" in row["error"]


def _check_failed_raised(url: str, tid: str, err: ToolFailedError) -> None:
    assert len(witnesses(url, tid, "flaky")) == 1, "on_failed='raise' must not call the tool"
    assert "flaky fails on its first call" in str(err)
    assert err.tool_call_id == "call-0-flaky"
    assert ledger(url, tid)["call-0-flaky"]["status"] == "FAILED"


def _check_failed_retried(url: str, tid: str, state: dict) -> None:
    assert len(witnesses(url, tid, "flaky")) == 2
    assert tool_messages(state)["call-0-flaky"].content == "flaky ok"
    assert state["messages"][-1].content == "done"
    row = ledger(url, tid)["call-0-flaky"]
    assert (row["status"], row["attempts"]) == ("SUCCESS", 2)


def test_failed_then_policy_sync(url: str) -> None:
    tid = new_tid("failed-sync")
    tools = make_tools(url)
    with ColosseumSaver.from_conn_string(url, pool_size=4) as saver:

        def graph(on_failed: str) -> Any:
            return build_graph(
                saver, tools, FLAKY_CALLS, handle_tool_errors=False, on_failed=on_failed
            )

        with pytest.raises(RuntimeError, match="flaky fails on its first call"):
            graph("raise").invoke(START_INPUT, cfg(tid))
        _check_first_failure(url, tid)

        with pytest.raises(ToolFailedError) as info:
            graph("raise").invoke(None, cfg(tid))
        _check_failed_raised(url, tid, info.value)

        state = graph("retry").invoke(None, cfg(tid))
    _check_failed_retried(url, tid, state)


async def test_failed_then_policy_async(url: str) -> None:
    tid = new_tid("failed-async")
    tools = make_tools(url)
    async with AsyncColosseumSaver.from_conn_string(url, pool_size=4) as saver:

        def graph(on_failed: str) -> Any:
            return build_graph(
                saver, tools, FLAKY_CALLS, handle_tool_errors=False, on_failed=on_failed
            )

        with pytest.raises(RuntimeError, match="flaky fails on its first call"):
            await graph("raise").ainvoke(START_INPUT, cfg(tid))
        _check_first_failure(url, tid)

        with pytest.raises(ToolFailedError) as info:
            await graph("raise").ainvoke(None, cfg(tid))
        _check_failed_raised(url, tid, info.value)

        state = await graph("retry").ainvoke(None, cfg(tid))
    _check_failed_retried(url, tid, state)


# --------------------------------------------------------------- 5. timeout

SLOW_CALLS: list[tuple[str, dict[str, Any]]] = [("slow", {})]
TIMEOUTS = {"slow": timedelta(seconds=0.5)}


def _check_timed_out(url: str, tid: str, err: ToolTimeoutError) -> None:
    assert err.tool_call_id == "call-0-slow"
    row = ledger(url, tid)["call-0-slow"]
    assert row["status"] == "TIMED_OUT"
    assert err.idempotency_key == row["idempotency_key"]
    assert len(witnesses(url, tid, "slow")) == 1


def test_timeout_sync(url: str) -> None:
    tid = new_tid("timeout-sync")
    # The tool returns only when the test lets it: the error can only come
    # from the timeout (without it the invoke would end with "slow done").
    release = threading.Event()
    tools = make_tools(url, slow_until=release)
    with ColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        graph = build_graph(saver, tools, SLOW_CALLS, handle_tool_errors=False, timeouts=TIMEOUTS)
        try:
            with pytest.raises(ToolTimeoutError) as info:
                graph.invoke(START_INPUT, cfg(tid))
        finally:
            release.set()
    _check_timed_out(url, tid, info.value)


async def test_timeout_async(url: str) -> None:
    tid = new_tid("timeout-async")
    release = threading.Event()
    tools = make_tools(url, slow_until=release)
    async with AsyncColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        graph = build_graph(saver, tools, SLOW_CALLS, handle_tool_errors=False, timeouts=TIMEOUTS)
        try:
            with pytest.raises(ToolTimeoutError) as info:
                await graph.ainvoke(START_INPUT, cfg(tid))
        finally:
            release.set()
    _check_timed_out(url, tid, info.value)


# ---------------------------------------------------- 6. the key reaches the tool

KEY_CALLS: list[tuple[str, dict[str, Any]]] = [("whoami", {}), ("pay", {"amount": 7})]


def _check_keys(url: str, tid: str, state: dict) -> None:
    rows = ledger(url, tid)
    whoami_key = rows["call-0-whoami"]["idempotency_key"]
    pay_key = rows["call-1-pay"]["idempotency_key"]
    assert whoami_key and pay_key and whoami_key != pay_key
    assert witnesses(url, tid, "whoami") == [(whoami_key, f"key={whoami_key}")]
    assert witnesses(url, tid, "pay") == [(pay_key, "paid 7")]
    assert tool_messages(state)["call-0-whoami"].content == f"key={whoami_key}"


def test_key_reaches_tool_sync(url: str) -> None:
    tid = new_tid("key-sync")
    with ColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        graph = build_graph(saver, make_tools(url), KEY_CALLS)
        state = graph.invoke(START_INPUT, cfg(tid))
    _check_keys(url, tid, state)


async def test_key_reaches_tool_async(url: str) -> None:
    tid = new_tid("key-async")
    async with AsyncColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        graph = build_graph(saver, make_tools(url), KEY_CALLS)
        state = await graph.ainvoke(START_INPUT, cfg(tid))
    _check_keys(url, tid, state)


# ---------------------------------------- 5. a copy of a crashed thread (issue 12 item 3)


def _check_copy_resumed(url: str, source: str, copy: str, state: dict) -> None:
    """The copy answered the source's recorded payment without paying again, and the
    call it had to run again (slow: outcome unknown) carried the source's key."""
    assert len(witnesses(url, source, "pay")) == 1, "the copy paid again"
    msgs = tool_messages(state)
    assert msgs["call-0-pay"].content == "paid 100"
    assert msgs["call-1-slow"].content == "slow done"
    assert state["messages"][-1].content == "done"
    slow_keys = [key for key, _ in witnesses(url, source, "slow")]
    # The downstream API sees the same idempotency key from the copy as from the
    # source, so it can deduplicate the side effect run again under on_unknown="retry".
    assert len(slow_keys) == 2 and slow_keys[0] == slow_keys[1], slow_keys
    assert slow_keys[0] == ledger(url, source)["call-1-slow"]["idempotency_key"]


def test_copy_of_a_crashed_thread_does_not_repeat_side_effects_sync(
    url: str, tmp_path: Path
) -> None:
    source = new_tid("copy-pay-sync")
    copy = f"{source}-copy"
    log = tmp_path / "worker.log"
    proc = spawn_worker("pay_and_slow", url, source, "sync", log)
    kill_when(
        proc, log, lambda: _crash_after_pay_reached(url, source), "pay recorded, slow running"
    )
    tools = make_tools(url, slow_seconds=0.05)
    calls = SCENARIOS["pay_and_slow"]["calls"]
    with ColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        saver.copy_thread(source, copy)
        graph = build_graph(saver, tools, calls, **RESUME_PAY_AND_SLOW)
        assert graph.get_state(cfg(copy)).next == ("tools",)
        state = graph.invoke(None, cfg(copy))
        _check_copy_resumed(url, source, copy, state)
        # Deleting the source afterwards: a copy of the copy still finds the ledger.
        again = f"{source}-copy2"
        saver.copy_thread(source, again)
        saver.delete_thread(source)
        assert graph.invoke(None, cfg(again))["messages"][-1].content == "done"
    assert len(witnesses(url, source, "pay")) == 1
    assert len(witnesses(url, source, "slow")) == 2


async def test_copy_of_a_crashed_thread_does_not_repeat_side_effects_async(
    url: str, tmp_path: Path
) -> None:
    source = new_tid("copy-pay-async")
    copy = f"{source}-copy"
    log = tmp_path / "worker.log"
    proc = spawn_worker("pay_and_slow", url, source, "async", log)
    kill_when(
        proc, log, lambda: _crash_after_pay_reached(url, source), "pay recorded, slow running"
    )
    tools = make_tools(url, slow_seconds=0.05)
    calls = SCENARIOS["pay_and_slow"]["calls"]
    async with AsyncColosseumSaver.from_conn_string(url, pool_size=4) as saver:
        await saver.acopy_thread(source, copy)
        graph = build_graph(saver, tools, calls, **RESUME_PAY_AND_SLOW)
        assert (await graph.aget_state(cfg(copy))).next == ("tools",)
        state = await graph.ainvoke(None, cfg(copy))
    _check_copy_resumed(url, source, copy, state)
