"""Each concurrency guard, held by a test that fails without it.

A guard is a clause (SQL, Lua or Python) that only matters when two workers
interleave in one particular order. These tests produce that order
deterministically: `Steered` is a saver whose `before` / `after` hooks run
around every request its operations issue (a Query, a Transaction, a Redis
CacheCall), so a test can stop worker 1 at the exact request it chooses and
run worker 2 to completion there. Nothing waits on a timer.

`python -m tests.guards` removes each guard in turn from a copy of the tree and
checks that the test named next to it in its table fails (see tests/guards.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Interrupt

from langgraph_colosseum import (
    AsyncColosseumSaver,
    ColosseumSaver,
    LeaseLostError,
    Retention,
    RunQueueTimeoutError,
    ThreadBusyError,
)
from langgraph_colosseum._core import multitask, sql
from langgraph_colosseum._core.guard import RUN_OWNER, RunFence
from langgraph_colosseum._core.io import CacheCall, Query, Request, Transaction
from langgraph_colosseum._core.ledger import COMPLETE, claim_request, heartbeat, is_claim
from tests.conftest import CACHE_PREFIX, redis_url, truncate
from tests.integration.locks import (
    backends_waiting_for_locks,
    wait_for_a_backend_blocked_by,
    wait_until,
)
from tests.integration.tool_worker import START_INPUT, build_graph, ensure_witness, witness

Hook = Callable[[Request], None]
AfterHook = Callable[[Request, Any], None]


class Steered(ColosseumSaver):
    """A saver whose requests pass through the test's hands.

    `before(request)` runs just before a request is performed and `after(request,
    result)` just after; either may run another worker to completion right there,
    which is how a test puts that worker's whole operation between two requests
    of this one. `requests` records what was performed, for asserting that a read
    was served by Redis alone.
    """

    before: Hook | None = None
    after: AfterHook | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[Request] = []

    def _perform(self, request: Request) -> Any:
        if self.before is not None:
            self.before(request)
        result = super()._perform(request)
        self.requests.append(request)
        if self.after is not None:
            self.after(request, result)
        return result


class Once:
    """A `before` hook that runs `action` at the first request matching `predicate`."""

    def __init__(self, predicate: Callable[[Request], bool], action: Callable[[], None]) -> None:
        self.predicate, self.action, self.fired = predicate, action, False

    def __call__(self, request: Request) -> None:
        if not self.fired and self.predicate(request):
            self.fired = True
            self.action()


def cache_script(name: str) -> Callable[[Request], bool]:
    return lambda request: isinstance(request, CacheCall) and request.script == name


@contextmanager
def worker(pg_url: str, *, hot: bool = True, **options: Any) -> Iterator[Steered]:
    """One worker: its own pool (and Redis client when `hot`)."""
    extra = {"redis_url": redis_url(), "cache_prefix": CACHE_PREFIX} if hot else {}
    with Steered.from_conn_string(pg_url, pool_size=2, **extra, **options) as saver:
        yield saver


def new_thread(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


def latest(thread_id: str, ns: str = "") -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def at(thread_id: str, checkpoint_id: str | None, ns: str = "") -> dict:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class Steps:
    """Successive checkpoints of one thread whose every step rewrites channel `x`,
    so each put carries all it changed and the hot head can advance onto it."""

    def __init__(self, thread_id: str, ns: str = "") -> None:
        self.thread_id = thread_id
        self.ns = ns
        self.version: str | None = None
        self.ids: list[str] = []

    def next(self, saver: ColosseumSaver, value: Any) -> tuple[dict, Checkpoint, dict, dict]:
        """The arguments of the put of the next step (its parent: the last one made)."""
        checkpoint = empty_checkpoint()
        if self.ids:
            assert checkpoint["id"] > self.ids[-1], "checkpoint ids must grow"
        self.version = saver.get_next_version(self.version, None)
        checkpoint["channel_values"] = {"x": value}
        checkpoint["channel_versions"] = {"x": self.version}
        parent = self.ids[-1] if self.ids else None
        self.ids.append(checkpoint["id"])
        metadata = {"source": "loop", "step": len(self.ids), "parents": {}}
        return at(self.thread_id, parent, self.ns), checkpoint, metadata, {"x": self.version}

    def put(self, saver: ColosseumSaver, value: Any) -> str:
        saver.put(*self.next(saver, value))
        return self.ids[-1]


def read_from_redis_only(saver: Steered, thread_id: str, ns: str = "") -> Any:
    """The latest tuple, asserting that Redis served it (no Postgres request)."""
    saver.requests.clear()
    found = saver.get_tuple(latest(thread_id, ns))
    postgres = [r for r in saver.requests if isinstance(r, (Query, Transaction))]
    assert not postgres, f"expected a hot-head hit, Postgres was asked: {postgres}"
    return found


def test_a_put_pointing_a_channel_back_at_an_older_version_reads_alike_from_redis(
    pg_url: str,
) -> None:
    """A put that follows the head and names, for a channel it did not write, a
    version older than the head's (a direct `put`, as a checkpoint-level copy
    or repair makes): Postgres still has that version's value; the Redis hash
    holds only the head's. Held by ADVANCE's drop of a version neither the
    put nor the head holds: the next read is Postgres's, whole. Without it the
    head moves onto a version Redis has no value for, and the channel reads
    as never written."""
    truncate(pg_url)
    thread_id = new_thread("older-version")
    steps = Steps(thread_id)
    with worker(pg_url, hot=True) as hot, worker(pg_url, hot=False) as truth:
        steps.put(hot, "a")
        first_version = steps.version
        steps.put(hot, "b")
        hot.get_tuple(latest(thread_id))  # the miss that fills the hash
        assert read_from_redis_only(hot, thread_id).checkpoint["channel_values"] == {"x": "b"}
        checkpoint = empty_checkpoint()
        checkpoint["channel_versions"] = {"x": first_version}
        metadata = {"source": "update", "step": 3, "parents": {}}
        hot.put(at(thread_id, steps.ids[-1]), checkpoint, metadata, {})
        expected = truth.get_tuple(latest(thread_id))
        assert expected is not None and expected.checkpoint["channel_values"] == {"x": "a"}
        found = hot.get_tuple(latest(thread_id))
        assert found is not None
        assert repr(found.checkpoint) == repr(expected.checkpoint)


def _put_stopped_while_removed(
    pg_url: str,
    saver: ColosseumSaver,
    put: tuple[Any, ...],
    block: tuple[str, tuple[Any, ...]],
    remove: Callable[[], None],
) -> list[Any]:
    """The put, stopped inside its statement by `block` (a statement another
    transaction runs first and holds uncommitted), while `remove` runs until it
    ends or waits for a lock; then the put goes on. What the put returned."""
    outcome: list[Any] = []
    with psycopg.connect(pg_url) as blocker:
        blocker.execute(*block)
        putter = threading.Thread(target=lambda: outcome.append(saver.put(*put)))
        putter.start()
        wait_for_a_backend_blocked_by(pg_url, blocker.info.backend_pid)
        remover = threading.Thread(target=remove)
        remover.start()
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            # the put waits for the blocker; the removal, for whatever it waits for
            wait_until(
                lambda: not remover.is_alive() or backends_waiting_for_locks(watcher) >= 2,
                "the removal neither waited nor ended",
            )
        blocker.rollback()
        putter.join(30)
        remover.join(30)
    assert not putter.is_alive() and not remover.is_alive()
    return outcome


def test_a_put_in_flight_when_its_thread_is_deleted_does_not_land(pg_url: str) -> None:
    """delete_thread while a put of the thread is in flight (its statement
    started, stopped at the insert of its checkpoint row, which another
    transaction holds uncommitted): the deletion waits for the put and then
    removes it with the rest. Held twice: by the write's thread lock
    (WRITE_LOCK, shared) against the deletion's (exclusive), and by the
    thread row the put's fence has locked by then (FOR KEY SHARE), which the
    deletion's statements wait for too; with either alone the thread stays
    deleted, so neither is listed in tests/guards.py for this test."""
    truncate(pg_url)
    thread_id = new_thread("put-in-flight")
    steps = Steps(thread_id)
    with worker(pg_url, hot=False) as saver, worker(pg_url, hot=False) as deleting:
        steps.put(saver, "before")
        put = steps.next(saver, "in flight")
        block = (
            "INSERT INTO colosseum_checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
            " checkpoint, metadata) VALUES (%s, '', %s, '{}', '{}')",
            (thread_id, put[1]["id"]),
        )
        outcome = _put_stopped_while_removed(
            pg_url, saver, put, block, lambda: deleting.delete_thread(thread_id)
        )
        assert len(outcome) == 1  # the put itself succeeded, before the deletion
        assert saver.get_tuple(latest(thread_id)) is None
        assert list(saver.list(latest(thread_id))) == []
        assert saver.threads.get(thread_id) is None


def test_a_put_in_flight_when_its_run_is_deleted_does_not_land(pg_url: str) -> None:
    """delete_for_runs of a run whose put is in flight (past its locks, stopped
    at the thread row another transaction holds): the deletion waits for that
    put and then removes it. Held by the put's run lock (WRITE_LOCK, shared)
    and the deletion's RUNS_LOCK (exclusive): without either, the deletion
    records the run as deleted, finds none of its rows yet and returns, and the
    put, judged by what its statement saw before, lands after it: the deleted
    run's checkpoint reads as the thread's head."""
    truncate(pg_url)
    thread_id, run_id = new_thread("runs-in-flight"), str(uuid.uuid4())
    steps = Steps(thread_id)
    with worker(pg_url, hot=False) as saver, worker(pg_url, hot=False) as deleting:
        kept = steps.put(saver, "before the run")
        config, checkpoint, metadata, versions = steps.next(saver, "the run's step")
        put = ({**config, "metadata": {"run_id": run_id}}, checkpoint, metadata, versions)
        block = ("SELECT 1 FROM colosseum_threads WHERE thread_id = %s FOR UPDATE", (thread_id,))
        outcome = _put_stopped_while_removed(
            pg_url, saver, put, block, lambda: deleting.delete_for_runs([run_id])
        )
        assert len(outcome) == 1  # the put itself succeeded, before the deletion
        head = saver.get_tuple(latest(thread_id))
        assert head is not None and head.checkpoint["id"] == kept
        assert [t.checkpoint["id"] for t in saver.list(latest(thread_id))] == [kept]


def test_a_cancel_never_rewrites_a_run_that_ended_before_it(pg_url: str) -> None:
    """A cancel reads the thread's active runs, then stops them in a
    transaction; the run ends (FINISH, success) between the two. Held by
    CANCEL's `status IN ('pending', 'running')`: the run's record still says
    success, stopped by nobody, as its caller was told, and the cancel reports
    it did not stop it. Without it the record said interrupted by cancel."""
    truncate(pg_url)
    thread_id, run_id = new_thread("cancel-late"), str(uuid.uuid4())
    with worker(pg_url, hot=False) as canceller, worker(pg_url, hot=False) as runner:
        token = runner._run(
            multitask.start(runner._store, thread_id, run_id, "reject", "test:1", 30.0, None)
        )
        ended: list[Any] = []

        def the_run_ends() -> None:
            ended.append(runner._run(multitask.finish(thread_id, run_id, token, "success", None)))

        canceller.before = hook = Once(
            lambda request: (
                isinstance(request, Transaction)
                and any(query.sql == multitask.CANCEL for query in request.queries)
            ),
            the_run_ends,
        )
        stopped = canceller.runs.cancel(thread_id=thread_id)
        assert hook.fired and ended[0][0] is True
        assert stopped == []
        info = canceller.runs.get(run_id)
        assert info is not None and (info.status, info.stopped_by) == ("success", None)


def test_a_put_that_lands_after_a_later_one_leaves_the_registry_at_the_later(
    pg_url: str,
) -> None:
    """LangGraph sends puts in the background, on several connections: the put
    of a checkpoint can land after its child's. Here c1 was interrupted (its
    interrupt written before its put, durability="async"), c2 continues from
    it, and c2's put lands first. The thread's registry row stays at c2: its
    head, its searchable values, and its status (idle, not c1's interrupt).
    Held by the registry upsert's three checks of the head's order."""
    truncate(pg_url)
    thread_id = new_thread("late-put")
    steps = Steps(thread_id)
    with worker(pg_url, hot=False) as saver:
        c1 = steps.next(saver, "older")
        c2 = steps.next(saver, "newer")
        interrupt = Interrupt(value="approve?", id="i-1")
        saver.put_writes(at(thread_id, steps.ids[0]), [("__interrupt__", [interrupt])], "task-1")
        saver.put(*c2)
        saver.put(*c1)
        info = saver.threads.get(thread_id)
        assert info is not None
        assert (info.head_checkpoint_id, info.values, info.status) == (
            steps.ids[1],
            {"x": "newer"},
            "idle",
        )


@pytest.mark.parametrize("driver", ["blocking", "asyncio"])
def test_a_delete_chosen_as_a_deadlock_victim_is_rerun_and_deletes(
    pg_url: str, driver: str
) -> None:
    """Another transaction holds the thread's registry row, the delete takes
    the thread's lock and waits for that row, and the other transaction then
    asks for the thread's lock: a deadlock, which Postgres breaks by aborting
    the delete (the other side waits longer before it checks). The saver runs
    the delete again, and it deletes: the caller never sees DeadlockDetected.
    Held by the driver's rerun of a conflicted request (`except CONFLICTS`)."""
    truncate(pg_url)
    thread_id = new_thread("deadlock")
    steps = Steps(thread_id)
    with worker(pg_url, hot=False) as saver:
        for i in range(2):
            steps.put(saver, f"step {i}")
        outcome: list[Any] = []

        async def adelete() -> None:
            async with AsyncColosseumSaver.from_conn_string(pg_url, pool_size=2) as asaver:
                await asaver.adelete_thread(thread_id)

        def delete() -> None:
            try:
                if driver == "asyncio":
                    outcome.append(asyncio.run(adelete()))
                else:
                    outcome.append(saver.delete_thread(thread_id))
            except Exception as exc:
                outcome.append(exc)

        with psycopg.connect(pg_url) as other:
            other.execute("SET LOCAL deadlock_timeout = '60s'")  # the delete checks first
            other.execute(
                "SELECT 1 FROM colosseum_threads WHERE thread_id = %s FOR UPDATE", (thread_id,)
            )
            deleter = threading.Thread(target=delete)
            deleter.start()
            wait_for_a_backend_blocked_by(pg_url, other.info.backend_pid)
            # Granted once Postgres has aborted the delete (after its deadlock_timeout).
            other.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                (sql.THREAD_LOCK_CLASS, thread_id),
            )
            other.commit()
        deleter.join(30)
        assert not deleter.is_alive()
        assert outcome == [None], outcome
        assert saver.get_tuple(latest(thread_id)) is None
        assert list(saver.list(latest(thread_id))) == []


def test_a_tasks_write_sent_twice_keeps_the_first_as_the_reference_does(pg_url: str) -> None:
    """A task's writes sent again (a retried task, a put_writes sent twice)
    with other values: the pending writes stay the first ones, as under
    InMemorySaver, compared by repr; a special write (an interrupt) is
    replaced. Held by PUT_WRITES' `WHERE EXCLUDED.idx < 0` on conflict."""
    truncate(pg_url)
    thread_id = new_thread("writes-twice")
    reference = InMemorySaver()
    with worker(pg_url, hot=False) as saver:
        for each in (saver, reference):
            config, checkpoint, metadata, versions = Steps(thread_id).next(saver, "x")
            stored = each.put(config, checkpoint, metadata, versions)
            each.put_writes(stored, [("x", "first"), ("y", 1)], "task-1")
            each.put_writes(stored, [("x", "second"), ("y", 2)], "task-1")
            each.put_writes(stored, [("__interrupt__", "asked once")], "task-2")
            each.put_writes(stored, [("__interrupt__", "asked again")], "task-2")
        ours, theirs = saver.get_tuple(latest(thread_id)), reference.get_tuple(latest(thread_id))
        assert ours is not None and theirs is not None
        assert repr(ours.pending_writes) == repr(theirs.pending_writes)
        assert ("task-1", "x", "first") in ours.pending_writes


def test_a_queued_run_cancelled_as_it_times_out_stays_cancelled(pg_url: str) -> None:
    """A queued run's wait times out, and a cancel of it lands just before it
    leaves the queue (GIVE_UP). Its record says what happened first: cancelled
    (interrupted, stopped by cancel), not "timed out". Held by GIVE_UP's
    `status = 'pending'`."""
    truncate(pg_url)
    thread_id, holder, queued = new_thread("queue-cancel"), "holder", "queued"
    with worker(pg_url, hot=False) as waiter, worker(pg_url, hot=False) as other:
        other._run(multitask.start(other._store, thread_id, holder, "reject", "t:1", 30.0, None))
        waiter.before = hook = Once(
            lambda request: (
                isinstance(request, Transaction)
                and any(query.sql == multitask.GIVE_UP for query in request.queries)
            ),
            lambda: other.runs.cancel(queued),
        )
        with pytest.raises(RunQueueTimeoutError):
            waiter._run(
                multitask.start(
                    waiter._store, thread_id, queued, "enqueue", "t:2", 30.0, queue_timeout=0.05
                )
            )
        assert hook.fired
        info = other.runs.get(queued)
        assert info is not None and (info.status, info.stopped_by) == ("interrupted", "cancel")


def test_a_put_waiting_on_a_cancel_in_flight_is_judged_by_it(pg_url: str) -> None:
    """A run's put reaches the thread row while a cancel of that run holds it
    (it has stopped the run and let go of the thread, not yet committed). The
    put's fence waits for the cancel and reads the row as it left it: the run
    no longer owns the thread, and the put is refused (LeaseLostError). Held
    by the fence's FOR KEY SHARE: read without it, the fence judged the row
    as it was before the cancel, and the cancelled run's checkpoint landed
    after the cancel had returned."""
    truncate(pg_url)
    thread_id, run_id = new_thread("fence-cancel"), "the-run"
    steps = Steps(thread_id)
    with worker(pg_url, hot=False) as saver:
        token = saver._run(
            multitask.start(saver._store, thread_id, run_id, "reject", "t:1", 30.0, None)
        )
        outcome: list[Any] = []

        def put_as_the_run() -> None:
            fence = RUN_OWNER.set(RunFence(thread_id, run_id, token))
            try:
                outcome.append(steps.put(saver, "after the cancel"))
            except Exception as exc:
                outcome.append(exc)
            finally:
                RUN_OWNER.reset(fence)

        params = {"thread_id": thread_id, "run_ids": [run_id], "owner": run_id}
        with psycopg.connect(pg_url) as cancel:  # a cancel's statements, not committed
            cancel.execute(multitask.LOCK_THREAD, params)
            cancel.execute(multitask.CANCEL, params)
            cancel.execute(multitask.RELEASE, params)
            putter = threading.Thread(target=put_as_the_run)
            putter.start()
            wait_for_a_backend_blocked_by(pg_url, cancel.info.backend_pid)
            cancel.commit()
        putter.join(30)
        assert not putter.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], LeaseLostError), outcome
        assert saver.get_tuple(latest(thread_id)) is None


def test_a_runs_first_put_after_its_thread_was_deleted_is_refused(pg_url: str) -> None:
    """A run takes a new thread, the thread is deleted before the run's first
    put (which has no parent a deletion could have recorded), and the put
    comes: the run's hold went with the thread's row, so the put is refused
    (LeaseLostError) and the deleted thread does not come back. Held by the
    fence's `NOT EXISTS (SELECT 1 FROM fence)`."""
    truncate(pg_url)
    thread_id, run_id = new_thread("fence-gone"), "the-run"
    with worker(pg_url, hot=False) as saver:
        token = saver._run(
            multitask.start(saver._store, thread_id, run_id, "reject", "t:1", 30.0, None)
        )
        saver.delete_thread(thread_id)
        fence = RUN_OWNER.set(RunFence(thread_id, run_id, token))
        try:
            with pytest.raises(LeaseLostError):
                Steps(thread_id).put(saver, "into a deleted thread")
        finally:
            RUN_OWNER.reset(fence)
        assert saver.get_tuple(latest(thread_id)) is None
        assert saver.threads.get(thread_id) is None


# ------------------------------------------------ 2. an older advance loses


def test_an_older_advance_never_replaces_a_newer_head(pg_url: str) -> None:
    """Worker 1 commits c2; worker 2 puts c3 and advances the head; only then does
    worker 1's advance reach Redis. Held by ADVANCE's `id < current` compare."""
    truncate(pg_url)
    thread_id = new_thread("older-advance")
    steps = Steps(thread_id)
    with worker(pg_url) as one, worker(pg_url) as two, worker(pg_url) as reader:
        steps.put(one, "c1")
        reader.get_tuple(latest(thread_id))  # a miss: the head is refilled with c1
        assert read_from_redis_only(reader, thread_id).checkpoint["id"] == steps.ids[0]

        c2 = steps.next(one, "c2")
        c3 = steps.next(two, "c3")
        one.before = hook = Once(cache_script("advance"), lambda: two.put(*c3))
        one.put(*c2)
        assert hook.fired

        head = read_from_redis_only(reader, thread_id)
        assert head.checkpoint["id"] == steps.ids[2]
        assert head.checkpoint["channel_values"] == {"x": "c3"}
    with worker(pg_url, hot=False) as truth:
        want = truth.get_tuple(latest(thread_id))
        assert want is not None and want.checkpoint == head.checkpoint


# ---------------------------------------------- 3. a refill loses to a write


def refill_races_a_write(pg_url: str, write: str, steps: Steps) -> None:
    """A reader of `steps`' namespace misses and reads Postgres; a writer commits
    there; only then does the reader's refill reach Redis. Afterwards the head
    must be the writer's: the first read misses (the refill was refused) and
    refills from Postgres, the second is served by Redis."""
    thread_id, ns = steps.thread_id, steps.ns
    with worker(pg_url) as writer, worker(pg_url) as reader, worker(pg_url) as checker:
        steps.put(writer, "c1")

        def write_in_between() -> None:
            if write == "put":
                steps.put(writer, "c2")
            else:
                writer.put_writes(at(thread_id, steps.ids[0], ns), [("x", "late")], "task-1")

        reader.before = hook = Once(cache_script("refill"), write_in_between)
        seen = reader.get_tuple(latest(thread_id, ns))
        assert hook.fired
        assert seen is not None and seen.checkpoint["id"] == steps.ids[0]
        assert seen.pending_writes == []  # what Postgres held when the reader read it
        assert isinstance(reader.requests[-1], CacheCall)
        assert reader.requests[-1].script == "refill"

        first = checker.get_tuple(latest(thread_id, ns))
        second = read_from_redis_only(checker, thread_id, ns)
        for found in (first, second):
            assert found is not None
            if write == "put":
                assert found.checkpoint["id"] == steps.ids[1]
                assert found.checkpoint["channel_values"] == {"x": "c2"}
            else:
                assert found.checkpoint["id"] == steps.ids[0]
                assert found.pending_writes == [("task-1", "x", "late")]


@pytest.mark.parametrize("write", ["put", "put_writes"])
def test_a_refill_loses_to_a_write_in_between(pg_url: str, write: str) -> None:
    """The thread has no hash yet (only a reader creates one), so the reader's
    miss creates it bare. Held twice: the write's script finds a hash of no
    deletion epoch and drops it (`epoch_differs`), and REFILL compares `seq`."""
    truncate(pg_url)
    refill_races_a_write(pg_url, write, Steps(new_thread(f"refill-{write}")))


@pytest.mark.parametrize("write", ["put", "put_writes"])
def test_a_refill_loses_to_a_write_in_between_on_a_hash_of_the_writes_epoch(
    pg_url: str, write: str
) -> None:
    """The same race in a subgraph namespace of a thread whose hash already
    holds its root head, so the hash is of the write's deletion epoch and the
    write's script applies to it instead of dropping it: the namespace has no
    head, so the script only bumps the counter. Held by that bump alone
    (every write bumps `seq`) and REFILL's compare of it."""
    truncate(pg_url)
    thread_id = new_thread(f"refill-ns-{write}")
    with worker(pg_url) as writer, worker(pg_url) as reader:
        Steps(thread_id).put(writer, "root")
        reader.get_tuple(latest(thread_id))  # a miss: the hash is refilled at its epoch
        assert read_from_redis_only(reader, thread_id).checkpoint["channel_values"] == {"x": "root"}
    refill_races_a_write(pg_url, write, Steps(thread_id, ns="child:1"))


# ------------------------------------------ 1. a live tool claim is not taken


def test_a_live_claim_is_not_taken_over_by_a_retrying_resumer(pg_url: str) -> None:
    """Two workers resume the same tools step with on_unknown="retry". Worker B
    claims both payments while worker A is still running them (A's lease is live).
    Held by CLAIM's `t.lease_until < now()`: B must wait for A's results, not
    take the claims over and pay again."""
    truncate(pg_url)
    ensure_witness(pg_url)
    thread_id = new_thread("live-claim")
    config = {"configurable": {"thread_id": thread_id}}
    calls = [("pay", {"amount": 1}), ("pay", {"amount": 2})]
    started = {1: threading.Event(), 2: threading.Event()}
    b_tried_both = threading.Event()
    runs: dict[int, int] = {1: 0, 2: 0}
    lock = threading.Lock()

    def pay(tid: str, amount: int) -> str:
        witness(pg_url, tid, "pay", f"paid {amount}")
        with lock:
            runs[amount] += 1
            first = runs[amount] == 1
        if first:  # worker A's run: still in flight until B has asked for both calls
            started[amount].set()
            assert b_tried_both.wait(30), "worker B never claimed both calls"
        return f"paid {amount}"

    tools = {"pay": StructuredTool.from_function(func=pay, name="pay", description="pay")}
    node = {"on_unknown": "retry", "wait": timedelta(seconds=30)}
    with worker(pg_url, hot=False) as a, worker(pg_url, hot=False) as b:
        build_graph(a, tools, calls, interrupt_before=["tools"]).invoke(START_INPUT, config)
        graph_a = build_graph(a, tools, calls, interrupt_before=["tools"], **node)
        graph_b = build_graph(b, tools, calls, interrupt_before=["tools"], **node)

        tried: set[str] = set()

        def b_claimed(request: Request, result: Any) -> None:
            if is_claim(request):
                tried.add(request.queries[-1].params["key"])  # type: ignore[union-attr,index]
                if len(tried) == 2:
                    b_tried_both.set()

        b.after = b_claimed
        outcome_a: list[Any] = []
        runner = threading.Thread(target=lambda: outcome_a.append(graph_a.invoke(None, config)))
        runner.start()
        for event in started.values():
            assert event.wait(30), "worker A never started its payments"
        state_b = graph_b.invoke(None, config)
        runner.join(60)
        assert not runner.is_alive()

    notes = sorted(note for tid, note in _witnessed(pg_url, thread_id))
    assert notes == ["paid 1", "paid 2"], f"each payment must run once: {notes}"
    assert runs == {1: 1, 2: 1}
    (state_a,) = outcome_a
    for state in (state_a, state_b):  # both workers finish, with the same answers
        answers = {m.tool_call_id: m.content for m in state["messages"] if m.type == "tool"}
        assert answers == {"call-0-pay": "paid 1", "call-1-pay": "paid 2"}
        assert state["messages"][-1].content == "done"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tool_call_id, status, attempts FROM colosseum_tool_calls "
            "WHERE thread_id = %s ORDER BY tool_call_id",
            (thread_id,),
        ).fetchall()
    assert rows == [("call-0-pay", "SUCCESS", 1), ("call-1-pay", "SUCCESS", 1)]


def _witnessed(url: str, thread_id: str) -> list[tuple[str, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT thread_id, note FROM witness_tool_effects WHERE thread_id = %s AND tool = 'pay'",
            (thread_id,),
        ).fetchall()


# ------------------------------------- 4. a stale holder cannot free its successor


def test_a_stale_guard_holder_does_not_release_its_successor(pg_url: str) -> None:
    """Holder A's lease lapses (A paused longer than its lease); B acquires; A
    exits. Held by RELEASE's `run_owner = %(owner)s`: B still holds the thread, so
    a third guard is refused and a write from outside B's run is fenced."""
    truncate(pg_url)
    thread_id = new_thread("stale-holder")
    with worker(pg_url, hot=False) as saver:
        # Each holder in its own context, as if in its own process: the guard
        # sets RUN_OWNER for the code it wraps.
        a_context, b_context = contextvars.Context(), contextvars.Context()
        # A lease far longer than the test: A's renewals never run; it lapses
        # only when the test says so.
        holder_a = saver.run_guard(thread_id, lease=timedelta(hours=1))
        a_context.run(holder_a.__enter__)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            lapsed = conn.execute(
                "UPDATE colosseum_threads SET run_lease_until = now() - interval '1 second' "
                "WHERE thread_id = %s RETURNING 1",
                (thread_id,),
            ).fetchall()
        assert lapsed == [(1,)]

        holder_b = saver.run_guard(thread_id, lease=timedelta(hours=1))
        token_b = b_context.run(holder_b.__enter__)
        try:
            assert token_b == 2
            a_context.run(holder_a.__exit__, None, None, None)  # A wakes up and exits

            with pytest.raises(ThreadBusyError):
                with saver.run_guard(thread_id):
                    pass
            steps = Steps(thread_id)
            with pytest.raises(ThreadBusyError):
                steps.put(saver, "from outside the run")
            b_context.run(steps.put, saver, "from B's run")
        finally:
            b_context.run(holder_b.__exit__, None, None, None)
        with saver.run_guard(thread_id) as token_c:  # free once B let go
            assert token_c == 3


# ------------------------------ 5. the sweep spares a thread written meanwhile


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
def test_the_sweep_spares_a_thread_written_after_it_was_chosen(pg_url: str, strategy: str) -> None:
    """The sweep selects expired threads, then deletes (or prunes) them in a
    transaction. A put between the two moves the thread's expiry: it is live
    again, and survives whole, every step of it (time travel too), with its
    registry row and its new expiry. Held by the re-check of expiry under the
    sweep's locks: DELETE_EXPIRED_THREADS' (the rows the sweep locked are still
    expired), or, for keep_latest, the prune's kept set filtered to the
    threads still expired (`only_expired`) and CLEAR_EXPIRY's own re-check."""
    truncate(pg_url)
    retention = Retention(thread_ttl=timedelta(hours=1), strategy=strategy)  # type: ignore[arg-type]
    live, idle = new_thread("sweep-live"), new_thread("sweep-idle")
    live_steps, idle_steps = Steps(live), Steps(idle)
    with (
        worker(pg_url, hot=True, retention=retention) as sweeper,
        worker(pg_url, hot=True, retention=retention) as writer,
        worker(pg_url, hot=False) as truth,
    ):
        for i in range(3):
            live_steps.put(writer, f"live {i}")
            idle_steps.put(writer, f"idle {i}")
        writer.get_tuple(latest(live))  # a hot head too: the sweep must not drop it wrongly
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_threads SET expires_at = now() - interval '1 minute' "
                "WHERE thread_id = ANY(%s)",
                ([live, idle],),
            )

        sweeper.before = hook = Once(
            lambda request: isinstance(request, Transaction),
            lambda: live_steps.put(writer, "live 3"),
        )
        sweeper.sweep()
        assert hook.fired

        idle_left = [t.checkpoint["channel_values"] for t in truth.list(latest(idle))]
        if strategy == "delete":
            assert truth.threads.get(idle) is None
            assert idle_left == []
        else:
            assert idle_left == [{"x": "idle 2"}]
        info = truth.threads.get(live)
        assert info is not None and info.head_checkpoint_id == live_steps.ids[-1]
        assert info.expires_at is not None
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT expires_at > now() FROM colosseum_threads WHERE thread_id = %s", (live,)
            ).fetchone()
        assert row == (True,)
        history = list(truth.list(latest(live)))
        assert [t.checkpoint["id"] for t in history] == live_steps.ids[::-1]
        assert [t.checkpoint["channel_values"] for t in history] == [
            {"x": f"live {i}"} for i in (3, 2, 1, 0)
        ]
        found = writer.get_tuple(latest(live))
        assert found is not None and found.checkpoint["id"] == live_steps.ids[-1]


# ----------------------------------------------------- 6. pending-write order

# Tasks whose ids sort opposite to their paths (writes are applied in path order,
# as LangGraph's writes_sort_key says), several writes per call, a channel
# written twice in one call, a task that calls put_writes twice (insert-if-absent:
# the first call's slots stay) and a special channel whose last write wins.
PUT_WRITES_CALLS: list[tuple[str, str, list[tuple[str, Any]]]] = [
    ("task-c", "~__pregel_pull, alpha", [("messages", "a1"), ("x", 1), ("messages", "a2")]),
    ("task-a", "~__pregel_pull, gamma", [("x", 3), ("messages", "g1"), ("y", {"k": [1, 2]})]),
    ("task-d", "~__pregel_pull, beta", [("messages", "d1"), ("__error__", "first")]),
    ("task-b", "~__pregel_push, 0, beta", [("messages", f"b{i}") for i in range(5)]),
    ("task-c", "~__pregel_pull, alpha", [("messages", "again"), ("z", 0), ("w", 9), ("v", 8)]),
    ("task-d", "~__pregel_pull, beta", [("__error__", "last")]),
]


@pytest.mark.parametrize("mode", ["postgres", "redis"])
def test_pending_writes_come_back_in_the_order_inmemorysaver_gives(pg_url: str, mode: str) -> None:
    """Compared by repr with InMemorySaver, read from Postgres and from the hot head."""
    truncate(pg_url)
    thread_id = new_thread("write-order")
    reference = InMemorySaver()
    with worker(pg_url, hot=mode == "redis") as saver, worker(pg_url, hot=False) as truth:
        steps = Steps(thread_id)
        put = steps.next(saver, "c1")
        config = reference.put(*put)
        assert saver.put(*put) == config
        if mode == "redis":
            saver.get_tuple(latest(thread_id))  # the head exists: the writes go into it
        for task_id, task_path, writes in PUT_WRITES_CALLS:
            reference.put_writes(config, writes, task_id, task_path)
            saver.put_writes(config, writes, task_id, task_path)

        want = reference.get_tuple(config)
        assert want is not None and len(want.pending_writes) == 14
        reads = {
            "latest": saver.get_tuple(latest(thread_id)),
            "latest again": saver.get_tuple(latest(thread_id)),
            "by id": saver.get_tuple(config),
            "postgres": truth.get_tuple(latest(thread_id)),
        }
        if mode == "redis":
            reads["redis"] = read_from_redis_only(saver, thread_id)
        for how, got in reads.items():
            assert got is not None
            assert repr(got.pending_writes) == repr(want.pending_writes), how


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
def test_the_sweep_locks_the_thread_before_deleting_its_rows(pg_url: str, strategy: str) -> None:
    """A write that reaches the thread while the sweep's delete (or prune)
    transaction runs.

    The test holds the thread's registry row (as a put's upsert does) before the
    sweep starts; it touches the expiry and commits only once the sweep waits on
    that row. Held by LOCK_STILL_EXPIRED's FOR UPDATE: the sweep waits before
    deleting anything, sees the new expiry and spares the thread, its whole
    history. Without the lock it deletes the checkpoints first (a prune, the
    older ones) and only the registry row (the newest) survives.
    """
    truncate(pg_url)
    retention = Retention(thread_ttl=timedelta(hours=1), strategy=strategy)  # type: ignore[arg-type]
    thread_id = new_thread("sweep-lock")
    steps = Steps(thread_id)
    with worker(pg_url, hot=False, retention=retention) as saver:
        for i in range(3):
            steps.put(saver, f"step {i}")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_threads SET expires_at = now() - interval '1 minute' "
                "WHERE thread_id = %s",
                (thread_id,),
            )
        swept: list[Any] = []
        with psycopg.connect(pg_url) as writer:  # one transaction, open until commit
            writer.execute(
                "SELECT 1 FROM colosseum_threads WHERE thread_id = %s FOR UPDATE", (thread_id,)
            )
            sweeper = threading.Thread(target=lambda: swept.append(saver.sweep()))
            sweeper.start()
            wait_for_a_backend_blocked_by(pg_url, writer.info.backend_pid)
            writer.execute(
                "UPDATE colosseum_threads SET expires_at = now() + interval '1 hour' "
                "WHERE thread_id = %s",
                (thread_id,),
            )
            writer.commit()
        sweeper.join(30)
        assert not sweeper.is_alive() and len(swept) == 1

        history = list(saver.list(latest(thread_id)))
        assert [t.checkpoint["id"] for t in history] == steps.ids[::-1]
        assert [t.checkpoint["channel_values"] for t in history] == [
            {"x": f"step {i}"} for i in (2, 1, 0)
        ]
        assert saver.threads.get(thread_id) is not None


# ------------------- 7. a head waits for writes that committed before its put


def test_a_head_is_not_served_until_writes_committed_before_its_put_arrive(pg_url: str) -> None:
    """LangGraph sends puts in the background: a task's writes for c2 can commit
    before c2's put, and their script reach Redis after the put's. Held by ADVANCE
    awaiting those slots (`x`, from PUT's writes_before) and READ missing while
    any are awaited: no reader may get c2 without its writes."""
    truncate(pg_url)
    thread_id = new_thread("awaited-writes")
    steps = Steps(thread_id)
    with worker(pg_url) as tasks, worker(pg_url) as putter, worker(pg_url) as reader:
        steps.put(putter, "c1")
        reader.get_tuple(latest(thread_id))  # the head: c1
        c2 = steps.next(putter, "c2")
        c2_config = at(thread_id, steps.ids[1])
        writes = [("x", "w1"), ("y", "w2")]

        seen: list[Any] = []

        def put_and_read() -> None:
            putter.put(*c2)  # its ADVANCE runs before the writes' ADD_WRITES
            seen.append(reader.get_tuple(latest(thread_id)))

        tasks.before = hook = Once(cache_script("add_writes"), put_and_read)
        tasks.put_writes(c2_config, writes, "task-1", "~__pregel_pull, node")
        assert hook.fired
        expected = [("task-1", "x", "w1"), ("task-1", "y", "w2")]
        (during,) = seen
        assert during is not None and during.checkpoint["id"] == steps.ids[1]
        assert during.pending_writes == expected
        after = read_from_redis_only(reader, thread_id)  # complete now: served by Redis
        assert after.checkpoint["id"] == steps.ids[1]
        assert after.pending_writes == expected


# The async driver (its cache pipelines the requests of one event-loop turn)
# keeps the same order: worker 2's whole aput runs inside worker 1's, between
# worker 1's commit and its advance.


class AsyncSteered(AsyncColosseumSaver):
    """`Steered` for the asyncio driver: `before` is awaited before each request."""

    before: Callable[[Request], Awaitable[None]] | None = None

    async def _perform(self, request: Request) -> Any:
        if self.before is not None:
            await self.before(request)
        return await super()._perform(request)


async def test_an_older_advance_never_replaces_a_newer_head_async(pg_url: str) -> None:
    truncate(pg_url)
    thread_id = new_thread("older-advance-async")
    steps = Steps(thread_id)
    options = {"pool_size": 2, "redis_url": redis_url(), "cache_prefix": CACHE_PREFIX}
    async with (
        AsyncSteered.from_conn_string(pg_url, **options) as one,
        AsyncSteered.from_conn_string(pg_url, **options) as two,
    ):
        await one.aput(*steps.next(one, "c1"))
        await two.aget_tuple(latest(thread_id))  # the head: c1
        c2, c3 = steps.next(one, "c2"), steps.next(two, "c3")
        fired: list[Request] = []

        async def put_c3_first(request: Request) -> None:
            if not fired and cache_script("advance")(request):
                fired.append(request)
                await two.aput(*c3)

        one.before = put_c3_first
        await one.aput(*c2)
        assert fired
        head = await two.aget_tuple(latest(thread_id))
    assert head is not None and head.checkpoint["id"] == steps.ids[2]
    with worker(pg_url, hot=False) as truth:
        want = truth.get_tuple(latest(thread_id))
        assert want is not None and want.checkpoint == head.checkpoint


# ------------------------- 8. a lapsed worker cannot record over its successor


def performed(saver: ColosseumSaver, request: Request) -> Any:
    """One request, performed as the saver performs an operation's."""

    def operation() -> Any:
        return (yield request)

    return saver._run(operation())


def test_a_worker_whose_claim_was_taken_over_does_not_keep_it_alive(pg_url: str) -> None:
    """Worker A's claim lapsed (A stalled) and B took it over. A's heartbeat,
    still running, renews nothing: the claim lives as long as B's lease, so if
    B dies the call is free again when B's lease ends, not when A stops. Held
    by HEARTBEAT's `lease_owner = %(owner)s`."""
    truncate(pg_url)
    thread_id = new_thread("heartbeat")
    key = f"{thread_id}:pay"
    claim = {
        "lineage_ns": [], "lineage_ids": [], "checkpoint_id": "c1", "call_ns": "", "seen": "",
        "run_id": None, "thread_id": thread_id, "key": key, "checkpoint_ns": "",
        "task_id": "task-1", "tool_name": "pay", "tool_call_id": "call-1", "input": "{}",
        "lease": 30.0, "retry_unknown": True, "retry_failed": False,
    }  # fmt: skip
    with worker(pg_url, hot=False) as saver, psycopg.connect(pg_url, autocommit=True) as conn:
        assert performed(saver, claim_request({**claim, "owner": "worker-a"}))[-1][0][0] is True
        conn.execute(
            "UPDATE colosseum_tool_calls SET lease_until = now() - interval '1 second'"
            " WHERE idempotency_key = %s",
            (key,),
        )
        assert performed(saver, claim_request({**claim, "owner": "worker-b"}))[-1][0][0] is True
        saver._run(heartbeat(key, "worker-a", 3600.0))
        row = conn.execute(
            "SELECT lease_owner, lease_until < now() + interval '60 seconds'"
            " FROM colosseum_tool_calls WHERE idempotency_key = %s",
            (key,),
        ).fetchone()
        assert row == ("worker-b", True)


def test_a_worker_whose_claim_was_taken_over_does_not_record_its_outcome(pg_url: str) -> None:
    """Worker A pays, stalls past its lease; worker B (on_unknown="retry") takes the
    claim over and pays again; A finishes first, while B still runs. Held by
    COMPLETE's `lease_owner = %(owner)s`: A's outcome is not recorded, B's is, so
    a replay answers what B's run answered."""
    truncate(pg_url)
    ensure_witness(pg_url)
    thread_id = new_thread("taken-over")
    config = {"configurable": {"thread_id": thread_id}}
    calls = [("pay", {"amount": 5})]
    a_paying, a_done_paying, a_recorded = threading.Event(), threading.Event(), threading.Event()
    payers: list[str] = []
    lock = threading.Lock()

    def pay(tid: str, amount: int) -> str:
        witness(pg_url, tid, "pay", f"paid {amount}")
        with lock:
            payers.append("A" if not payers else "B")
            who = payers[-1]
        if who == "A":
            a_paying.set()
            assert a_done_paying.wait(30), "worker B never started paying"
        else:
            a_done_paying.set()  # A returns now and tries to record its outcome
            assert a_recorded.wait(30), "worker A never tried to record"
        return f"paid {amount} by {who}"

    tools = {"pay": StructuredTool.from_function(func=pay, name="pay", description="pay")}
    # A lease far longer than the test: A's heartbeat never runs; it lapses when
    # the test says so (A stalled).
    node = {"on_unknown": "retry", "lease": timedelta(hours=1), "wait": timedelta(seconds=30)}
    with worker(pg_url, hot=False) as a, worker(pg_url, hot=False) as b:
        build_graph(a, tools, calls, interrupt_before=["tools"]).invoke(START_INPUT, config)
        graph_a = build_graph(a, tools, calls, interrupt_before=["tools"], **node)
        graph_b = build_graph(b, tools, calls, interrupt_before=["tools"], **node)

        def a_tried_to_record(request: Request, result: Any) -> None:
            if isinstance(request, Query) and request.sql is COMPLETE:
                a_recorded.set()

        a.after = a_tried_to_record
        outcome: dict[str, Any] = {}
        runner_a = threading.Thread(target=lambda: outcome.update(a=graph_a.invoke(None, config)))
        runner_a.start()
        assert a_paying.wait(30)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_tool_calls SET lease_until = now() - interval '1 second' "
                "WHERE thread_id = %s",
                (thread_id,),
            )
        outcome["b"] = graph_b.invoke(None, config)
        runner_a.join(60)
        assert not runner_a.is_alive()

        assert payers == ["A", "B"]  # on_unknown="retry": at least once, here twice
        answer_b = [m.content for m in outcome["b"]["messages"] if m.type == "tool"]
        assert answer_b == ["paid 5 by B"]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT status, attempts, output FROM colosseum_tool_calls WHERE thread_id = %s",
                (thread_id,),
            ).fetchall()
        ((status, attempts, output),) = row
        assert (status, attempts) == ("SUCCESS", 2)
        assert output["v"]["content"] == "paid 5 by B", output  # the recorded ToolMessage


# ---------------------------- 9. the same checkpoint put again drops the head


@pytest.mark.parametrize("with_writes", [False, True], ids=["alone", "with-writes"])
def test_the_same_checkpoint_put_again_does_not_rewrite_the_head(
    pg_url: str, with_writes: bool
) -> None:
    """A retried put of the head's own checkpoint (here from another parent).
    Postgres keeps the row's first parent and its pending writes. Held by
    ADVANCE's `id == current` drop: the head is not rebuilt from the put alone
    (which knows neither), the next read goes to Postgres."""
    truncate(pg_url)
    thread_id = new_thread("put-again")
    steps = Steps(thread_id)
    writes = [("task-1", "x", "w")] if with_writes else []
    with worker(pg_url) as saver, worker(pg_url) as reader:
        steps.put(saver, "c0")
        again = steps.next(saver, "c1")
        saver.put(*again)
        reader.get_tuple(latest(thread_id))  # the head: c1
        for task_id, channel, value in writes:
            saver.put_writes(at(thread_id, steps.ids[1]), [(channel, value)], task_id)
        saver.put(at(thread_id, None), *again[1:])  # c1 again, as a root

        for _ in range(2):  # a miss that refills, then the refilled head
            found = reader.get_tuple(latest(thread_id))
            assert found is not None and found.checkpoint["id"] == steps.ids[1]
            assert found.parent_config is not None
            assert found.parent_config["configurable"]["checkpoint_id"] == steps.ids[0]
            assert found.pending_writes == writes
