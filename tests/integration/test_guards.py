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

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum._core.io import CacheCall, Query, Request, Transaction
from tests.conftest import CACHE_PREFIX, redis_url, truncate

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


def latest(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def at(thread_id: str, checkpoint_id: str | None) -> dict:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
        }
    }


class Steps:
    """Successive checkpoints of one thread whose every step rewrites channel `x`,
    so each put carries all it changed and the hot head can advance onto it."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
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
        return at(self.thread_id, parent), checkpoint, metadata, {"x": self.version}

    def put(self, saver: ColosseumSaver, value: Any) -> str:
        saver.put(*self.next(saver, value))
        return self.ids[-1]


def read_from_redis_only(saver: Steered, thread_id: str) -> Any:
    """The latest tuple, asserting that Redis served it (no Postgres request)."""
    saver.requests.clear()
    found = saver.get_tuple(latest(thread_id))
    postgres = [r for r in saver.requests if isinstance(r, (Query, Transaction))]
    assert not postgres, f"expected a hot-head hit, Postgres was asked: {postgres}"
    return found


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


@pytest.mark.parametrize("write", ["put", "put_writes"])
def test_a_refill_loses_to_a_write_in_between(pg_url: str, write: str) -> None:
    """A reader misses and reads Postgres; a writer commits; only then does the
    reader's refill reach Redis. Held by the mutation counter: every write bumps
    `seq` (begin_write) and REFILL compares it with the one the miss noted."""
    truncate(pg_url)
    thread_id = new_thread(f"refill-{write}")
    steps = Steps(thread_id)
    with worker(pg_url) as writer, worker(pg_url) as reader, worker(pg_url) as checker:
        steps.put(writer, "c1")  # no head yet: the hash is only created by a reader

        def write_in_between() -> None:
            if write == "put":
                steps.put(writer, "c2")
            else:
                writer.put_writes(at(thread_id, steps.ids[0]), [("x", "late")], "task-1")

        reader.before = hook = Once(cache_script("refill"), write_in_between)
        seen = reader.get_tuple(latest(thread_id))
        assert hook.fired
        assert seen is not None and seen.checkpoint["id"] == steps.ids[0]
        assert seen.pending_writes == []  # what Postgres held when the reader read it
        assert isinstance(reader.requests[-1], CacheCall)
        assert reader.requests[-1].script == "refill"

        # The head must be the writer's: the first read misses (the refill was
        # refused) and refills from Postgres; the second is served by Redis.
        first = checker.get_tuple(latest(thread_id))
        second = read_from_redis_only(checker, thread_id)
        for found in (first, second):
            assert found is not None
            if write == "put":
                assert found.checkpoint["id"] == steps.ids[1]
                assert found.checkpoint["channel_values"] == {"x": "c2"}
            else:
                assert found.checkpoint["id"] == steps.ids[0]
                assert found.pending_writes == [("task-1", "x", "late")]
