"""Deleted stays deleted in Redis too: a write's late Redis script never brings
back what a deletion removed (issue 15, "the stopped run's late head").

A write commits to Postgres and only then runs its Redis script (ADVANCE after
a put, ADD_WRITES after put_writes). A deletion can commit in between
(`rollback`'s delete_for_runs, delete_thread, ...), drop the hash, and a reader
can refill it from Postgres, all before the script arrives. The script then
carried content Postgres no longer has. Each test stops the writer at exactly
that request (`Steered.before`, between its commit and its script; real Redis,
just later), runs the deletion and the refilling read there, lets the script
run, and then reads: nothing of what was deleted may come back, through
get_tuple, list, get_state, or in the hash itself. Each then writes again and
checks that the head follows that write (a guard that refused too much would
leave a stale head). No timers: the order is the hooks' order.
"""

from __future__ import annotations

import operator
import threading
import uuid
from typing import Annotated, Any

import pytest
import redis
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core import sql
from langgraph_colosseum._core.io import CacheCall, Query, Request, Transaction
from langgraph_colosseum.errors import RunInterruptedError
from tests.conftest import CACHE_PREFIX, redis_url, truncate
from tests.integration.test_guards import (
    AsyncSteered,
    Once,
    Steered,
    Steps,
    at,
    cache_script,
    latest,
    new_thread,
    read_from_redis_only,
    worker,
)

WAIT = 60.0
DELETED = "deleted-content"  # what every deleted value holds, to look for afterwards


def redis_hash(saver: Any, thread_id: str) -> dict[bytes, bytes]:
    """Everything the thread has in Redis (its one hash)."""
    client = redis.Redis.from_url(redis_url())
    try:
        return client.hgetall(saver._store.hot.thread_key(thread_id))
    finally:
        client.close()


def assert_nothing_deleted_is_readable(reader: Any, thread_id: str, url: str) -> None:
    """No read through `reader` (Redis on) returns DELETED, nor does the hash hold it,
    and the head read agrees with Postgres read alone."""
    head = reader.get_tuple(latest(thread_id))
    assert DELETED not in repr(head), head
    history = list(reader.list({"configurable": {"thread_id": thread_id}}))
    assert DELETED not in repr(history), history
    held = redis_hash(reader, thread_id)
    assert not any(DELETED.encode() in value for value in held.values()), held
    with worker(url, hot=False) as truth:
        want = truth.get_tuple(latest(thread_id))
    assert repr(head) == repr(want)


def of_run(config: dict, run_id: str) -> dict:
    """`config` as a run's put / put_writes sends it (the run recorded in its metadata)."""
    return {**config, "metadata": {"run_id": run_id}}


@pytest.fixture
def url(pg_url: str) -> str:
    truncate(pg_url)
    return pg_url


# ------------------------------------------------ rollback: delete_for_runs


def test_a_late_advance_of_a_deleted_run_is_never_served(url: str) -> None:
    """The stopped run's put committed; before its ADVANCE, the rollback deletes
    the run and a reader refills the head with the checkpoint before it. The
    late ADVANCE must not make the deleted checkpoint the head."""
    thread_id = new_thread("late-advance")
    run_id = str(uuid.uuid4())
    steps = Steps(thread_id)
    with worker(url) as stopped, worker(url) as rollback, worker(url) as reader:
        before = steps.put(stopped, "before the run")
        reader.get_tuple(latest(thread_id))  # the head in Redis: `before`
        config, checkpoint, metadata, versions = steps.next(stopped, DELETED)
        steps.ids.pop()  # deleted: the next step continues from `before`

        def rollback_then_read() -> None:
            rollback.delete_for_runs([run_id])
            seen = reader.get_tuple(latest(thread_id))  # a miss: refilled from Postgres
            assert seen is not None and seen.checkpoint["id"] == before

        stopped.before = hook = Once(cache_script("advance"), rollback_then_read)
        stopped.put(of_run(config, run_id), checkpoint, metadata, versions)
        assert hook.fired
        assert_nothing_deleted_is_readable(reader, thread_id, url)

        after = steps.put(rollback, "after the rollback")
        head = read_from_redis_only(reader, thread_id)
        assert head.checkpoint["id"] == after
        assert_nothing_deleted_is_readable(reader, thread_id, url)


def test_a_late_add_writes_of_a_deleted_run_is_never_served(url: str) -> None:
    """A resuming run wrote on a checkpoint not its own; before its ADD_WRITES,
    the rollback deletes its writes and a reader refills the head without them.
    The late ADD_WRITES must not put them back in the head."""
    thread_id = new_thread("late-writes")
    run_id = str(uuid.uuid4())
    steps = Steps(thread_id)
    with worker(url) as stopped, worker(url) as rollback, worker(url) as reader:
        resumed = steps.put(stopped, "resumed by the run")
        reader.get_tuple(latest(thread_id))

        def rollback_then_read() -> None:
            rollback.delete_for_runs([run_id])
            seen = reader.get_tuple(latest(thread_id))
            assert seen is not None and seen.pending_writes == []

        stopped.before = hook = Once(cache_script("add_writes"), rollback_then_read)
        stopped.put_writes(of_run(at(thread_id, resumed), run_id), [("x", DELETED)], "task-1")
        assert hook.fired
        assert_nothing_deleted_is_readable(reader, thread_id, url)

        rollback.put_writes(at(thread_id, resumed), [("x", "kept")], "task-2")
        head = read_from_redis_only(reader, thread_id)
        assert [w[1:] for w in head.pending_writes] == [("x", "kept")]
        assert_nothing_deleted_is_readable(reader, thread_id, url)


async def test_a_late_advance_of_a_deleted_run_is_never_served_async(url: str) -> None:
    """The same on the asyncio driver (its cache pipelines requests)."""
    thread_id = new_thread("late-advance-async")
    run_id = str(uuid.uuid4())
    steps = Steps(thread_id)
    options = {"pool_size": 2, "redis_url": redis_url(), "cache_prefix": CACHE_PREFIX}
    async with (
        AsyncSteered.from_conn_string(url, **options) as stopped,
        AsyncColosseumSaver.from_conn_string(url, **options) as other,
    ):
        await stopped.aput(*steps.next(stopped, "before the run"))
        before = steps.ids[-1]
        await other.aget_tuple(latest(thread_id))
        config, checkpoint, metadata, versions = steps.next(stopped, DELETED)
        steps.ids.pop()
        fired: list[Request] = []

        async def rollback_then_read(request: Request) -> None:
            if not fired and cache_script("advance")(request):
                fired.append(request)
                await other.adelete_for_runs([run_id])
                seen = await other.aget_tuple(latest(thread_id))
                assert seen is not None and seen.checkpoint["id"] == before

        stopped.before = rollback_then_read
        await stopped.aput(of_run(config, run_id), checkpoint, metadata, versions)
        assert fired
        head = await other.aget_tuple(latest(thread_id))
        assert DELETED not in repr(head) and head is not None
        assert head.checkpoint["id"] == before
        assert not any(DELETED.encode() in v for v in redis_hash(other, thread_id).values())
        after = steps.next(other, "after the rollback")
        await other.aput(*after)
        head = await other.aget_tuple(latest(thread_id))
        assert head is not None and head.checkpoint["id"] == steps.ids[-1]


# ------------------------------------------------ a refill against a deletion


def in_child(thread_id: str, checkpoint_id: str | None = None) -> dict:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "child",
            "checkpoint_id": checkpoint_id,
        }
    }


def test_a_refill_read_before_a_deletion_never_lands_after_one_read_after_it(url: str) -> None:
    """A reader misses on a subgraph's namespace and reads the deleted run's
    checkpoint there; before its REFILL, the run is deleted by a worker whose
    Redis is unreachable (its drop is only recorded stale, the hash stays) and
    another reader refills the namespace from Postgres. The first REFILL, of an
    older epoch, must not land; and the second, of a newer epoch than the
    hash, must not leave the deleted root head beside it."""
    thread_id = new_thread("late-refill")
    run_id = str(uuid.uuid4())
    steps = Steps(thread_id)
    unreachable = {"redis_url": "redis://127.0.0.1:1/0", "cache_prefix": CACHE_PREFIX}
    with (
        worker(url) as writer,
        worker(url) as early,
        worker(url) as late,
        worker(url, hot=False) as truth,
        ColosseumSaver.from_conn_string(url, pool_size=2, **unreachable) as deleter,
    ):
        steps.put(writer, "before the run")
        late.get_tuple(latest(thread_id))  # the hash, with the root head
        config, checkpoint, metadata, versions = steps.next(writer, DELETED)
        writer.put(of_run(config, run_id), checkpoint, metadata, versions)  # the root head
        root = checkpoint["id"]
        child = Steps(thread_id)
        config, checkpoint, metadata, versions = child.next(writer, DELETED)
        metadata["parents"] = {"": root}
        writer.put(of_run(in_child(thread_id), run_id), checkpoint, metadata, versions)

        def delete_then_refill_after_it() -> None:
            deleter.delete_for_runs([run_id])
            assert late.get_tuple(in_child(thread_id)) is None

        early.before = hook = Once(cache_script("refill"), delete_then_refill_after_it)
        seen = early.get_tuple(in_child(thread_id))  # read before the deletion
        assert hook.fired and DELETED in repr(seen)

        for ns_config in (in_child(thread_id), latest(thread_id)):
            head = late.get_tuple(ns_config)
            assert DELETED not in repr(head), head
            assert repr(head) == repr(truth.get_tuple(ns_config))
        held = redis_hash(late, thread_id)
        assert not any(DELETED.encode() in value for value in held.values()), held


# ------------------------------------------------ delete_thread


def test_a_late_advance_after_delete_thread_is_never_served(url: str) -> None:
    """A put committed; before its ADVANCE, the thread is deleted and a reader
    finds no checkpoint (the hash records that). The late ADVANCE must not
    make the deleted checkpoint the head of the deleted thread."""
    thread_id = new_thread("late-advance-deleted-thread")
    steps = Steps(thread_id)
    with worker(url) as writer, worker(url) as deleter, worker(url) as reader:
        steps.put(writer, "first")
        reader.get_tuple(latest(thread_id))
        config, checkpoint, metadata, versions = steps.next(writer, DELETED)

        def delete_then_read() -> None:
            deleter.delete_thread(thread_id)
            assert reader.get_tuple(latest(thread_id)) is None

        writer.before = hook = Once(cache_script("advance"), delete_then_read)
        writer.put(config, checkpoint, metadata, versions)
        assert hook.fired
        assert reader.get_tuple(latest(thread_id)) is None
        assert_nothing_deleted_is_readable(reader, thread_id, url)

        anew = Steps(thread_id)  # the same thread_id starts a fresh thread
        first = anew.put(deleter, "a new thread")
        head = read_from_redis_only(reader, thread_id)
        assert head.checkpoint["id"] == first
        assert_nothing_deleted_is_readable(reader, thread_id, url)


# ------------------------------------------------ the whole rollback, end to end


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


def echo_graph(saver: Any) -> Any:
    def answer(state: Chat) -> dict:
        return {"messages": [f"{state['messages'][-1]}:answer"]}

    builder = StateGraph(Chat)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def _carries(request: Request, text: bytes) -> bool:
    return isinstance(request, CacheCall) and any(
        isinstance(arg, bytes) and text in arg for arg in request.args
    )


def _is_put(request: Request, text: str) -> bool:
    """A put transaction whose values hold `text`."""
    return isinstance(request, Transaction) and any(
        isinstance(q, Query) and q.sql == sql.PUT and text in repr(q.params.get("jsons"))
        for q in request.queries
    )


def test_a_rollback_wins_over_the_stopped_runs_late_redis_head(url: str) -> None:
    """`multitask_strategy="rollback"`: the stopped run's put committed and its
    ADVANCE is held; the rollback run takes the thread, deletes the stopped run
    and reads (refilling Redis with the state before it); at its first put the
    held ADVANCE is let go and a third party reads the state. Nothing of the
    stopped run may be seen, then or after."""
    thread_id = new_thread("rollback-late-head")
    config = {"configurable": {"thread_id": thread_id}}
    options = {"pool_size": 4, "redis_url": redis_url(), "cache_prefix": CACHE_PREFIX}
    held, release, advanced = threading.Event(), threading.Event(), threading.Event()
    seen_between: list[Any] = []
    with (
        Steered.from_conn_string(url, **options) as saver,
        ColosseumSaver.from_conn_string(url, **options) as other,
    ):
        runs = saver.runs(echo_graph(saver), "reject")
        runs.invoke({"messages": ["one"]}, config, durability="sync")
        look = echo_graph(other)
        look.get_state(config)  # the head in Redis: after "one"

        held_request: list[Request] = []

        def hold_the_stopped_runs_advance(request: Request) -> None:
            if not held.is_set() and _carries(request, DELETED.encode()):
                held_request.append(request)
                held.set()
                release.wait(WAIT)

        def release_at_the_rollback_runs_first_put() -> None:
            release.set()
            assert advanced.wait(WAIT)
            state = look.get_state(config)
            seen_between.append((state.values, state.next, state.config))
            seen_between.append([s.values for s in look.get_state_history(config)])
            seen_between.append(other.get_tuple(latest(thread_id)))
            seen_between.append(redis_hash(other, thread_id))
            with ColosseumSaver.from_conn_string(url) as truth:  # Postgres alone
                seen_between.append(truth.get_tuple(latest(thread_id)))

        # The rollback run's first put: after its first read. LangGraph may put
        # in the background, so the stopped run can still be putting meanwhile;
        # the rollback run's put is the one carrying "two".
        first_put = Once(
            lambda r: held.is_set() and _is_put(r, "two"), release_at_the_rollback_runs_first_put
        )

        def before(request: Request) -> None:
            hold_the_stopped_runs_advance(request)
            first_put(request)

        def after(request: Request, result: Any) -> None:
            if held_request and request is held_request[0]:
                advanced.set()

        saver.before, saver.after = before, after
        outcome: list[Any] = []

        def stopped_run() -> None:
            try:
                runs.invoke({"messages": [DELETED]}, config, durability="sync")
                outcome.append("success")
            except Exception as exc:  # the outcome is asserted below
                outcome.append(exc)

        first = threading.Thread(target=stopped_run)
        first.start()
        assert held.wait(WAIT)  # its first put committed; its ADVANCE waits
        result = runs.invoke({"messages": ["two"]}, config, multitask_strategy="rollback")
        first.join(WAIT)
        assert first_put.fired
        # Stopped (RunRolledBackError, or RunInterruptedError when its refusal
        # came before the rollback run recorded it as rolled back).
        assert isinstance(outcome[0], RunInterruptedError), outcome
        assert result["messages"] == ["one", "one:answer", "two", "two:answer"]
        state, history, head, held_in_redis, want = seen_between
        assert DELETED not in repr(head), head  # the stopped run's input checkpoint
        assert not any(DELETED.encode() in v for v in held_in_redis.values()), held_in_redis
        assert repr(head) == repr(want)
        assert state == ({"messages": ["one", "one:answer"]}, (), want.config)
        assert DELETED not in repr(history), history
        assert DELETED not in repr(look.get_state(config).values)
        assert look.get_state(config).values == result
        assert not any(DELETED.encode() in v for v in redis_hash(other, thread_id).values())
