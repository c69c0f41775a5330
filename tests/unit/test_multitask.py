"""The run-taking operation of `saver.runs`, driven without services (sans-IO).

What each strategy asks the database, and what it does with the answers: the
statements themselves are exercised against Postgres in
tests/integration/test_runs.py.
"""

from __future__ import annotations

import uuid
from typing import Any

from langgraph_colosseum._core import io, multitask
from langgraph_colosseum._core.io import AwaitNotify, Listen, Query, Transaction
from langgraph_colosseum.errors import (
    InvalidConfigError,
    RunInterruptedError,
    RunQueueTimeoutError,
    ThreadBusyError,
)


class NoStore:
    def delete_for_runs(self, run_ids: Any) -> Any:
        raise AssertionError("nothing to roll back")
        yield


def take_result(token: int | None, me: str | None = None, again: bool = False) -> list[Any]:
    """What the TAKE transaction answers: (token, stopped, its status, my status,
    whether this run had taken the thread already)."""
    return [None, [(1,)], [(token, None, None, me, again)]]


def drive(op: Any, answers: list[Any]) -> tuple[list[Any], Any]:
    """Run `op`, answering its requests in order, and those of the operation a
    `Listen` runs as a driver does; (the requests, its result or error)."""
    asked: list[Any] = []

    def perform(request: Any) -> Any:
        asked.append(request)
        if isinstance(request, Listen):
            return io.run(request.op, perform)
        return answers.pop(0)

    try:
        return asked, io.run(op, perform)
    except Exception as exc:  # the operation's own error
        return asked, exc


def start(strategy: str, timeout: float | None = None) -> Any:
    return multitask.start(NoStore(), "t1", "r1", strategy, "here:1", 30.0, timeout)


def test_reject_asks_once_and_records_nothing_when_busy() -> None:
    asked, outcome = drive(start("reject"), [take_result(None)])
    assert isinstance(outcome, ThreadBusyError) and outcome.thread_id == "t1"
    assert len(asked) == 1 and isinstance(asked[0], Transaction)
    assert asked[0].queries[-1].params["steal"] is False


def test_interrupt_and_rollback_take_the_thread_whoever_holds_it() -> None:
    for strategy in ("interrupt", "rollback"):
        asked, token = drive(start(strategy), [take_result(7), []])
        assert token == 7
        assert asked[0].queries[-1].params["steal"] is True
        assert asked[1].sql == multitask.ROLLBACKS_DUE


def test_a_take_that_finds_its_own_earlier_take_drops_the_heads() -> None:
    """A TAKE whose reply was lost, sent again, no longer knows whether it
    stopped a run whose last put may not have reached the Redis head."""

    class Heads(NoStore):
        def __init__(self) -> None:
            self.dropped: list[Any] = []

        def _drop_heads(self, thread_ids: Any) -> Any:
            self.dropped.append(list(thread_ids))
            yield from ()

    store = Heads()
    op = multitask.start(store, "t1", "r1", "reject", "here:1", 30.0, None)
    _, token = drive(op, [take_result(4, "running", again=True), []])
    assert token == 4 and store.dropped == [["t1"]]


def test_enqueue_records_its_place_then_waits_on_notify() -> None:
    """Its place first, then TAKEs on its own channel, a wait between them."""
    answers = [None, take_result(None, "pending"), None, take_result(3, "pending"), []]
    asked, token = drive(start("enqueue"), answers)
    assert token == 3
    assert isinstance(asked[0], Query) and asked[0].sql == multitask.ENQUEUE
    assert isinstance(asked[1], Listen) and asked[1].channel == multitask.run_channel("r1")
    take, wait, again = asked[2:5]
    assert isinstance(take, Transaction) and take.queries[-1].sql == multitask.TAKE
    assert isinstance(wait, AwaitNotify) and 0 < wait.seconds <= 10.0  # a third of the lease
    assert again == take
    assert asked[5].sql == multitask.ROLLBACKS_DUE


def test_run_channels_are_names_postgres_takes() -> None:
    """Distinct per run, whatever the run id, and under the 63 bytes of a name."""
    ids = ["r1", "r2", "é" * 200, str(uuid.uuid4())]
    channels = [multitask.run_channel(i) for i in ids]
    assert len(set(channels)) == len(ids)
    assert all(len(c.encode()) <= 63 and c == c.lower() for c in channels)


def test_a_cancelled_waiter_is_told_so() -> None:
    answers = [None, take_result(None, "interrupted"), [("r1",) + (None,) * 8 + ("cancel",)]]
    _, outcome = drive(start("enqueue"), answers)
    assert isinstance(outcome, RunInterruptedError) and outcome.stopped_by == "cancel"


def test_a_waiter_gives_up_after_its_timeout() -> None:
    asked, outcome = drive(
        start("enqueue", timeout=0.0), [None, take_result(None, "pending"), [[(1,)], None, [], []]]
    )
    assert isinstance(outcome, RunQueueTimeoutError)
    leave = [q.sql for q in asked[-1].queries]
    assert leave[0] == multitask.LOCK_THREAD and multitask.GIVE_UP in leave
    assert leave[-1] == multitask.WAKE


def test_unknown_strategy_is_refused_before_any_io() -> None:
    asked, outcome = drive(start("latest"), [])
    assert asked == [] and isinstance(outcome, InvalidConfigError)
    assert "multitask_strategy" in str(outcome)
