"""Deleted stays deleted: a run in flight cannot write a deleted thread back.

A node of the running graph (or another process) deletes the thread, or the
run's checkpoints, while the run goes on. The run's next `put` / `put_writes`
continues from a deleted checkpoint, and Postgres refuses it in the statement
that would have written it (`CheckpointDeletedError`). The invariant checked
is what a user bets on: the deleted text is not readable again from Postgres,
from Redis, or from the saver's in-process caches; no registry row comes
back; and a new run on the same thread_id starts a fresh thread.

Every case runs on the blocking and the asyncio saver, with and without the
Redis hot head (the `saver` / `asaver` fixtures).
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any

import psycopg
import pytest
import redis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph._internal._constants import CONFIG_KEY_RUNTIME
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base import id as uuid6_ids
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import DEFAULT_RUNTIME, RunControl
from typing_extensions import TypedDict

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, Encryption, Retention
from langgraph_colosseum._core.runs import Runs
from langgraph_colosseum.errors import CheckpointDeletedError, ColosseumError
from tests.conftest import CACHE_PREFIX, redis_url
from tests.integration.test_ledger_lifecycle import Bank, exit_payment_graph, ledger_rows

SECRET = "my card is 4111-1111-1111-1111, please keep it"
TABLES = (
    "colosseum_checkpoints",
    "colosseum_channel_values",
    "colosseum_writes",
    "colosseum_delta_histories",
    "colosseum_threads",
)


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def chat_graph(saver: Any, purge: Callable[..., Any]) -> Any:
    """listen -> purge (deletes, via `purge`) -> reply -> END."""

    def listen(state: Chat) -> dict:
        return {"messages": [AIMessage("noted", id="ai-1")]}

    def reply(state: Chat) -> dict:
        return {"messages": [AIMessage(f"you said: {state['messages'][0].content}", id="ai-2")]}

    builder = StateGraph(Chat)
    builder.add_node("listen", listen)
    builder.add_node("purge", purge)
    builder.add_node("reply", reply)
    builder.add_edge(START, "listen")
    builder.add_edge("listen", "purge")
    builder.add_edge("purge", "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def cfg(tid: str, **extra: Any) -> dict:
    return {"configurable": {"thread_id": tid}, **extra}


# ------------------------------------------------------------ what is left


def rows_of(url: str, tid: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {
            table: conn.execute(
                f"SELECT count(*) FROM {table} WHERE thread_id = %s", [tid]
            ).fetchone()[0]
            for table in TABLES
        }


def secret_in_postgres(url: str, text: str = SECRET) -> list[str]:
    """Every table and column holding `text`, whatever the thread."""
    like = f"%{text}%"
    found = []
    with psycopg.connect(url) as conn:
        for table, column in (
            ("colosseum_checkpoints", "checkpoint::text || metadata::text"),
            ("colosseum_channel_values", "coalesce(value::text, '')"),
            ("colosseum_channel_values", "coalesce(encode(value_bytes, 'escape'), '')"),
            ("colosseum_writes", "coalesce(value::text, '')"),
            ("colosseum_writes", "coalesce(encode(value_bytes, 'escape'), '')"),
            ("colosseum_delta_histories", "coalesce(value::text, '')"),
            ("colosseum_threads", "metadata::text || state_values::text"),
            ("colosseum_tool_calls", "t::text"),
        ):
            n = conn.execute(f"SELECT count(*) FROM {table} t WHERE {column} LIKE %s", [like])
            if n.fetchone()[0]:
                found.append(f"{table}.{column}")
    return found


def secret_in_redis(text: str = SECRET) -> list[str]:
    client = redis.Redis.from_url(redis_url())
    try:
        return [
            key.decode()
            for key in client.scan_iter(match=f"{CACHE_PREFIX}*", count=1000)
            if client.type(key) == b"hash"
            and any(text.encode() in v for v in client.hgetall(key).values())
        ]
    finally:
        client.close()


def secret_in_process(saver: Any, tid: str) -> bool:
    store = saver._store
    held = [base.value for base in store.bases.of_namespace(tid, "").values()]
    held += [store.seeds.get(key)[1] for key in store.seeds.keys_of(tid, "")]
    return SECRET in repr(held)


def assert_gone(saver: Any, url: str, tid: str) -> None:
    """Nothing of the thread is stored, and the deleted text is readable nowhere."""
    assert rows_of(url, tid) == dict.fromkeys(TABLES, 0)
    assert secret_in_postgres(url) == []
    assert secret_in_redis() == []
    assert not secret_in_process(saver, tid)


def assert_fresh_start(graph: Any, saver: Any, tid: str, url: str) -> None:
    """A new run on the same thread_id begins a new thread, without the deleted text."""
    out = graph.invoke({"messages": [HumanMessage("hello again", id="h-2")]}, cfg(tid))
    assert [m.content for m in out["messages"]] == ["hello again", "noted", "you said: hello again"]
    state = graph.get_state(cfg(tid))
    assert SECRET not in repr(state.values)
    history = list(graph.get_state_history(cfg(tid)))
    assert SECRET not in repr([h.values for h in history])
    assert saver.threads.get(tid).status == "idle"
    assert secret_in_postgres(url) == []


async def aassert_fresh_start(graph: Any, saver: Any, tid: str, url: str) -> None:
    out = await graph.ainvoke({"messages": [HumanMessage("hello again", id="h-2")]}, cfg(tid))
    assert [m.content for m in out["messages"]] == ["hello again", "noted", "you said: hello again"]
    history = [h async for h in graph.aget_state_history(cfg(tid))]
    assert SECRET not in repr([h.values for h in history])
    assert (await saver.threads.aget(tid) if hasattr(saver.threads, "aget") else
            await saver.threads.get(tid)).status == "idle"  # fmt: skip
    assert secret_in_postgres(url) == []


def first_input(tid: str) -> dict:
    return {"messages": [HumanMessage(SECRET, id="h-1")]}


# ================================================== delete_thread from a node


@pytest.mark.parametrize("durability", ["async", "sync", "exit"])
def test_delete_thread_in_a_node_sync(saver: ColosseumSaver, pg_url: str, durability: str) -> None:
    """With "exit", nothing of the run is stored before the deletion: its one put,
    at the end, continues from no stored checkpoint, and is refused because the
    run read the thread (its first read) before the thread was deleted."""
    tid = f"gdpr-{uuid.uuid4().hex[:8]}"

    def purge(state: Chat) -> dict:
        saver.delete_thread(tid)
        return {"messages": [AIMessage("purged", id="ai-p")]}

    graph = chat_graph(saver, purge)
    with pytest.raises(CheckpointDeletedError) as refused:
        graph.invoke(first_input(tid), cfg(tid), durability=durability)
    assert refused.value.thread_id == tid
    assert tid in str(refused.value) and refused.value.checkpoint_id in str(refused.value)
    assert saver.get_tuple(cfg(tid)) is None
    assert list(saver.list(cfg(tid))) == []
    assert saver.threads.get(tid) is None
    assert_gone(saver, pg_url, tid)
    assert_fresh_start(chat_graph(saver, lambda s: {}), saver, tid, pg_url)


@pytest.mark.parametrize("durability", ["async", "exit"])
async def test_delete_thread_in_a_node_async(
    asaver: AsyncColosseumSaver, pg_url: str, durability: str
) -> None:
    tid = f"agdpr-{uuid.uuid4().hex[:8]}"

    async def purge(state: Chat) -> dict:
        await asaver.adelete_thread(tid)
        return {"messages": [AIMessage("purged", id="ai-p")]}

    graph = chat_graph(asaver, purge)
    with pytest.raises(CheckpointDeletedError):
        await graph.ainvoke(first_input(tid), cfg(tid), durability=durability)
    assert await asaver.aget_tuple(cfg(tid)) is None
    assert [t async for t in asaver.alist(cfg(tid))] == []
    assert await asaver.threads.get(tid) is None
    assert_gone(asaver, pg_url, tid)
    await aassert_fresh_start(chat_graph(asaver, lambda s: {}), asaver, tid, pg_url)


DELETE_SCRIPT = """
import sys
from langgraph_colosseum import ColosseumSaver
options = {"redis_url": sys.argv[3], "cache_prefix": sys.argv[4]} if len(sys.argv) > 3 else {}
with ColosseumSaver.from_conn_string(sys.argv[1], pool_size=1, **options) as saver:
    saver.delete_thread(sys.argv[2])
"""


def test_delete_thread_from_another_process(saver: ColosseumSaver, pg_url: str) -> None:
    """An admin / GDPR job in another process deletes while the run waits in a node."""
    tid = f"gdpr-proc-{uuid.uuid4().hex[:8]}"

    # The job is configured as the application is: with its Redis, if it has one.
    cache = [redis_url(), CACHE_PREFIX] if saver.cache is not None else []

    def purge(state: Chat) -> dict:
        command = [sys.executable, "-c", DELETE_SCRIPT, pg_url, tid, *cache]
        subprocess.run(command, check=True, timeout=60)
        return {"messages": [AIMessage("purged", id="ai-p")]}

    graph = chat_graph(saver, purge)
    with pytest.raises(CheckpointDeletedError):
        graph.invoke(first_input(tid), cfg(tid))
    assert saver.get_tuple(cfg(tid)) is None
    assert_gone(saver, pg_url, tid)
    assert_fresh_start(chat_graph(saver, lambda s: {}), saver, tid, pg_url)


# ============================================ the statements, one by one


def test_late_writes_to_a_deleted_checkpoint_are_refused(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """put_writes / put naming a deleted checkpoint: refused, no registry row back."""
    tid = f"late-{uuid.uuid4().hex[:8]}"
    first = saver.put(cfg(tid), empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.put_writes(first, [("messages", SECRET)], "task-1")
    saver.delete_thread(tid)

    with pytest.raises(CheckpointDeletedError) as refused:
        saver.put_writes(first, [("messages", SECRET), ("__interrupt__", "ask")], "task-2")
    assert refused.value.checkpoint_id == first["configurable"]["checkpoint_id"]
    child = empty_checkpoint()
    with pytest.raises(CheckpointDeletedError) as refused:
        saver.put(first, child, {"source": "loop", "step": 0}, {})
    assert refused.value.deleted_id == first["configurable"]["checkpoint_id"]
    # The refused checkpoint's own writes, before or after its refusal, are refused too.
    child_config = {"configurable": {"thread_id": tid, "checkpoint_ns": "",
                                     "checkpoint_id": child["id"]}}  # fmt: skip
    with pytest.raises(CheckpointDeletedError):
        saver.put_writes(child_config, [("messages", SECRET)], "task-3")
    assert rows_of(pg_url, tid) == dict.fromkeys(TABLES, 0)
    assert saver.threads.get(tid) is None
    assert secret_in_postgres(pg_url) == []


def test_writes_before_a_refused_put_are_removed_with_it(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """Under durability="async" a step's writes may land before its checkpoint's put;
    when that put is refused, the writes that came first go with it."""
    tid = f"early-{uuid.uuid4().hex[:8]}"
    first = saver.put(cfg(tid), empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.delete_thread(tid)
    child = empty_checkpoint()  # created after the deletion: its writes are not refused
    child_config = {"configurable": {"thread_id": tid, "checkpoint_ns": "",
                                     "checkpoint_id": child["id"]}}  # fmt: skip
    saver.put_writes(child_config, [("messages", SECRET), ("__error__", "boom")], "task-1")
    with pytest.raises(CheckpointDeletedError):
        saver.put(first, child, {"source": "loop", "step": 0}, {})
    assert rows_of(pg_url, tid) == dict.fromkeys(TABLES, 0)
    assert secret_in_postgres(pg_url) == []


def in_run(config: dict, control: RunControl) -> dict:
    """`config` as a call of the LangGraph run `control` makes it."""
    runtime = dataclasses.replace(DEFAULT_RUNTIME, control=control)
    return {**config, "configurable": {**config["configurable"], CONFIG_KEY_RUNTIME: runtime}}


def test_a_checkpoint_made_before_the_delete_is_refused(saver: ColosseumSaver, pg_url: str) -> None:
    """The run's first put (no parent) had not landed when its thread was deleted:
    the run read the thread before the deletion, so its writes and its put are
    refused; a new run after the deletion is a new thread. A put outside a
    LangGraph run read nothing: it is judged by what it names alone."""
    tid = f"first-{uuid.uuid4().hex[:8]}"
    saver.put(cfg(tid), empty_checkpoint(), {"source": "input", "step": -1}, {})
    run = RunControl()
    assert saver.get_tuple(in_run(cfg(tid), run)) is not None  # the run's first read
    in_flight = empty_checkpoint()  # made by the run before the deletion, not yet put
    saver.delete_thread(tid)
    in_flight_config = {"configurable": {"thread_id": tid, "checkpoint_ns": "",
                                         "checkpoint_id": in_flight["id"]}}  # fmt: skip
    with pytest.raises(CheckpointDeletedError):
        saver.put_writes(in_run(in_flight_config, run), [("messages", SECRET)], "task-1")
    with pytest.raises(CheckpointDeletedError):
        saver.put(in_run(cfg(tid), run), in_flight, {"source": "input", "step": -1}, {})
    assert rows_of(pg_url, tid) == dict.fromkeys(TABLES, 0)
    after = RunControl()
    assert saver.get_tuple(in_run(cfg(tid), after)) is None  # a new run reads the new thread
    fresh = saver.put(
        in_run(cfg(tid), after), empty_checkpoint(), {"source": "input", "step": -1}, {}
    )
    assert saver.get_tuple(cfg(tid)).config == fresh
    saver.put(fresh, in_flight, {"source": "loop", "step": 0}, {})  # no run: stored
    assert saver.get_tuple(in_flight_config).checkpoint["id"] == in_flight["id"]


def test_a_put_of_a_deleted_run_is_refused(saver: ColosseumSaver, pg_url: str) -> None:
    """delete_for_runs of a run none of whose puts has landed yet: they are refused."""
    tid = f"run-{uuid.uuid4().hex[:8]}"
    run_id = str(uuid.uuid4())
    saver.delete_for_runs([run_id])
    with pytest.raises(CheckpointDeletedError):
        saver.put(
            cfg(tid, metadata={"run_id": run_id}), empty_checkpoint(),
            {"source": "input", "step": -1}, {},
        )  # fmt: skip
    assert rows_of(pg_url, tid) == dict.fromkeys(TABLES, 0)
    saver.put(cfg(tid, metadata={"run_id": str(uuid.uuid4())}), empty_checkpoint(), {}, {})
    assert saver.get_tuple(cfg(tid)) is not None


def test_a_deleted_runs_writes_on_a_checkpoint_not_its_own_go_and_stay_gone(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """A run that resumes a checkpoint writes there, on a checkpoint it did not
    make: delete_for_runs deletes those writes (not the checkpoint, nor others'
    writes on it), and a write of the run that comes after is refused."""
    tid = f"runw-{uuid.uuid4().hex[:8]}"
    run_id = str(uuid.uuid4())
    stored = saver.put(cfg(tid), empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.put_writes(stored, [("x", "others")], "task-0")
    of_the_run = {**stored, "metadata": {"run_id": run_id}}
    saver.put_writes(of_the_run, [("x", SECRET), ("__resume__", SECRET)], "task-1")
    saver.delete_for_runs([run_id])
    got = saver.get_tuple(stored)
    assert got is not None and got.pending_writes == [("task-0", "x", "others")]
    with pytest.raises(CheckpointDeletedError):
        saver.put_writes(of_the_run, [("x", SECRET)], "task-2")
    assert secret_in_postgres(pg_url) == []
    assert saver.get_tuple(stored).pending_writes == [("task-0", "x", "others")]


def test_a_parent_never_stored_is_not_a_deleted_one(saver: ColosseumSaver) -> None:
    """A put may name a parent this saver never stored (the conformance suite does)."""
    tid = f"orphan-{uuid.uuid4().hex[:8]}"
    parent = {"configurable": {"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": "p-1"}}
    stored = saver.put(parent, empty_checkpoint(), {"source": "loop", "step": 1}, {})
    saver.put_writes(stored, [("x", 1)], "task-1")
    got = saver.get_tuple(stored)
    assert got is not None and got.parent_config["configurable"]["checkpoint_id"] == "p-1"
    assert got.pending_writes == [("task-1", "x", 1)]


async def test_late_writes_refused_async(asaver: AsyncColosseumSaver, pg_url: str) -> None:
    tid = f"alate-{uuid.uuid4().hex[:8]}"
    first = await asaver.aput(cfg(tid), empty_checkpoint(), {"source": "input", "step": -1}, {})
    await asaver.adelete_thread(tid)
    with pytest.raises(CheckpointDeletedError):
        await asaver.aput_writes(first, [("messages", SECRET), ("__error__", "x")], "task-2")
    with pytest.raises(CheckpointDeletedError):
        await asaver.aput(first, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    assert rows_of(pg_url, tid) == dict.fromkeys(TABLES, 0)
    assert await asaver.threads.get(tid) is None


# ================================ delete_for_runs, prune, the retention sweep


@pytest.mark.parametrize("durability", ["async", "sync", "exit"])
def test_delete_for_runs_of_the_running_run(
    saver: ColosseumSaver, pg_url: str, durability: str
) -> None:
    """Whether or not the run's puts have landed when it is deleted, none lands after."""
    tid = f"runs-{uuid.uuid4().hex[:8]}"
    run_id = str(uuid.uuid4())

    def purge(state: Chat) -> dict:
        saver.delete_for_runs([run_id])
        return {}

    graph = chat_graph(saver, purge)
    with pytest.raises(CheckpointDeletedError):
        graph.invoke(first_input(tid), cfg(tid, metadata={"run_id": run_id}), durability=durability)
    assert saver.get_tuple(cfg(tid)) is None
    assert rows_of(pg_url, tid)["colosseum_checkpoints"] == 0
    assert secret_in_postgres(pg_url) == []
    assert secret_in_redis() == []
    assert_fresh_start(chat_graph(saver, lambda s: {}), saver, tid, pg_url)


async def test_delete_for_runs_of_the_running_run_async(
    asaver: AsyncColosseumSaver, pg_url: str
) -> None:
    tid = f"aruns-{uuid.uuid4().hex[:8]}"
    run_id = str(uuid.uuid4())

    async def purge(state: Chat) -> dict:
        await asaver.adelete_for_runs([run_id])
        return {}

    graph = chat_graph(asaver, purge)
    with pytest.raises(CheckpointDeletedError):
        await graph.ainvoke(first_input(tid), cfg(tid, metadata={"run_id": run_id}))
    assert await asaver.aget_tuple(cfg(tid)) is None
    assert rows_of(pg_url, tid)["colosseum_checkpoints"] == 0
    assert secret_in_postgres(pg_url) == []
    assert secret_in_redis() == []


def test_prune_under_a_run_on_an_older_checkpoint(saver: ColosseumSaver, pg_url: str) -> None:
    """A run resumed from an old checkpoint; prune (keep_latest) removes that checkpoint
    while the run is in its node: the run's next step is refused, the kept head stays."""
    tid = f"prune-{uuid.uuid4().hex[:8]}"
    plain = chat_graph(saver, lambda s: {})
    plain.invoke({"messages": [HumanMessage("first", id="h-0")]}, cfg(tid))
    history = list(plain.get_state_history(cfg(tid)))
    fork_from = next(h for h in history if h.next == ("purge",))

    # Resumed at an older checkpoint, LangGraph first saves a "fork" copy of it as
    # the thread's latest, from a background thread that may still be writing when
    # `purge` starts. The second turn waits for that fork, so it always starts from
    # it (state: first, noted) rather than from whichever head won the race.
    fork_saved = threading.Event()
    put = saver.put

    def put_noting_the_fork(config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        stored = put(config, checkpoint, metadata, versions)
        if metadata.get("source") == "fork":
            fork_saved.set()
        return stored

    def second_turn() -> None:
        assert fork_saved.wait(60), "the resumed run saved no fork checkpoint"
        plain.invoke({"messages": [HumanMessage("second", id="h-s")]}, cfg(tid))

    def purge(state: Chat) -> dict:
        # Another turn on the thread (its own run: a fresh context) makes a
        # newer head; prune keeps only it, and deletes the one this run is on.
        turn = threading.Thread(target=contextvars.Context().run, args=(second_turn,))
        turn.start()
        turn.join(60)
        saver.prune([tid], strategy="keep_latest")
        return {"messages": [AIMessage(SECRET, id="ai-secret")]}

    graph = chat_graph(saver, purge)
    saver.put = put_noting_the_fork  # type: ignore[method-assign]
    with pytest.raises(CheckpointDeletedError):
        graph.invoke(None, fork_from.config, durability="sync")
    head = saver.get_tuple(cfg(tid))
    assert head is not None  # the second turn's, kept by prune
    # The second turn ran on the fork (first, noted): its message comes before the
    # reply, which re-answers the thread's first message.
    assert [m.content for m in head.checkpoint["channel_values"]["messages"]] == [
        "first", "noted", "second", "you said: first"
    ]  # fmt: skip
    assert list(saver.list(cfg(tid))) == [head]
    assert saver.get_tuple(fork_from.config) is None
    assert secret_in_postgres(pg_url) == []
    assert secret_in_redis() == []


def test_retention_sweep_under_a_run(pg_url: str, saver: ColosseumSaver) -> None:
    """The sweep deletes an expired thread while a run waits in a node."""
    tid = f"sweep-{uuid.uuid4().hex[:8]}"
    options = {"redis_url": redis_url(), "cache_prefix": CACHE_PREFIX} if saver.cache else {}
    with ColosseumSaver.from_conn_string(
        pg_url, retention=Retention(thread_ttl=timedelta(milliseconds=200)), **options
    ) as short:

        def purge(state: Chat) -> dict:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                # Expire it now rather than wait: the sweep must see it expired.
                conn.execute(
                    "UPDATE colosseum_threads SET expires_at = now() - interval '1 second' "
                    "WHERE thread_id = %s",
                    [tid],
                )
            assert short.sweep() == 1
            return {}

        graph = chat_graph(short, purge)
        with pytest.raises(CheckpointDeletedError):
            # sync: the run's steps are on record when the node runs, so the sweep finds it
            graph.invoke(first_input(tid), cfg(tid), durability="sync")
        assert rows_of(pg_url, tid) == dict.fromkeys(TABLES, 0)
        assert secret_in_postgres(pg_url) == []
        assert secret_in_redis() == []
        assert not secret_in_process(short, tid)


def test_refusal_is_of_our_hierarchy() -> None:
    assert issubclass(CheckpointDeletedError, ColosseumError)


def _deleted_run_goes_from_a_copy(saver: ColosseumSaver) -> None:
    source, copy = f"runc-{uuid.uuid4().hex[:8]}", f"runc-copy-{uuid.uuid4().hex[:8]}"
    run_id = str(uuid.uuid4())
    stored = saver.put(cfg(source), empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.put_writes(stored, [("x", "others")], "task-0")
    of_the_run = {**stored, "metadata": {"run_id": run_id}}
    saver.put_writes(of_the_run, [("x", SECRET), ("__resume__", SECRET)], "task-1")
    saver.copy_thread(source, copy)
    saver.delete_for_runs([run_id])
    for tid in (source, copy):
        got = saver.get_tuple(cfg(tid))
        assert got is not None and got.pending_writes == [("task-0", "x", "others")], tid


def test_a_deleted_runs_writes_go_from_a_copy_of_its_thread_too(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """delete_for_runs deletes a run wherever its rows are: its checkpoints on
    a copy of the thread went before; its writes on a checkpoint it did not
    make (a resume value, a first step's output) must go from the copy too, or
    the copy's next run takes them as its own."""
    _deleted_run_goes_from_a_copy(saver)
    assert secret_in_postgres(pg_url) == []


def test_a_deleted_runs_writes_go_from_an_encrypted_copy_too(pg_url: str) -> None:
    """The same through copy_thread's encrypted path (rows opened and sealed
    again for the copy), which builds the copy's rows in Python."""
    encryption = Encryption({"k1": os.urandom(32)})
    with ColosseumSaver.from_conn_string(pg_url, encryption=encryption) as saver:
        _deleted_run_goes_from_a_copy(saver)


# ===================================== a run this process no longer remembers
#
# The process keeps the newest `kept` runs (RUNS_KEPT, 1024; one here, so the
# one other run each test invokes in the middle of the first makes it forget
# the first). With durability="exit" the first read the run made is all that
# tells its one put that it read the thread before the deletion: once that is
# forgotten, the run counts as begun before any deletion of its thread.


def other_run(saver: Any) -> Any:
    """A one-node graph on the same saver: each invoke is a run of its own."""
    builder = StateGraph(Chat)
    builder.add_node("noop", lambda state: {})
    builder.add_edge(START, "noop")
    builder.add_edge("noop", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
def forgetful(saver: ColosseumSaver) -> ColosseumSaver:
    saver._store.runs = Runs(kept=1)
    return saver


@pytest.fixture
def aforgetful(asaver: AsyncColosseumSaver) -> AsyncColosseumSaver:
    asaver._store.runs = Runs(kept=1)
    return asaver


def test_a_forgotten_exit_run_of_a_thread_deleted_mid_run_is_refused_sync(
    forgetful: ColosseumSaver, pg_url: str
) -> None:
    saver, tid = forgetful, f"forgot-{uuid.uuid4().hex[:8]}"
    other = other_run(saver)

    def purge(state: Chat) -> dict:
        saver.delete_thread(tid)
        other.invoke({"messages": []}, cfg(f"other-{uuid.uuid4().hex[:8]}"), durability="exit")
        return {"messages": [AIMessage("purged", id="ai-p")]}

    with pytest.raises(CheckpointDeletedError) as refused:
        chat_graph(saver, purge).invoke(first_input(tid), cfg(tid), durability="exit")
    assert refused.value.thread_id == tid
    assert saver.get_tuple(cfg(tid)) is None
    assert saver.threads.get(tid) is None
    assert_gone(saver, pg_url, tid)


async def test_a_forgotten_exit_run_of_a_thread_deleted_mid_run_is_refused_async(
    aforgetful: AsyncColosseumSaver, pg_url: str
) -> None:
    asaver, tid = aforgetful, f"aforgot-{uuid.uuid4().hex[:8]}"
    other = other_run(asaver)

    async def purge(state: Chat) -> dict:
        await asaver.adelete_thread(tid)
        await other.ainvoke(
            {"messages": []}, cfg(f"other-{uuid.uuid4().hex[:8]}"), durability="exit"
        )
        return {"messages": [AIMessage("purged", id="ai-p")]}

    with pytest.raises(CheckpointDeletedError):
        await chat_graph(asaver, purge).ainvoke(first_input(tid), cfg(tid), durability="exit")
    assert await asaver.aget_tuple(cfg(tid)) is None
    assert await asaver.threads.get(tid) is None
    assert_gone(asaver, pg_url, tid)


def test_a_forgotten_exit_run_met_again_at_a_subgraphs_read_is_refused(
    forgetful: ColosseumSaver, pg_url: str
) -> None:
    """The first call of the forgotten run after the deletion is its subgraph's
    read (the subgraph's loop loads its namespace): a read, but not the one a
    run begins with, so it does not count as the run's first read."""
    saver, tid = forgetful, f"forgot-sub-{uuid.uuid4().hex[:8]}"
    other = other_run(saver)

    def purge(state: Chat) -> dict:
        saver.delete_thread(tid)
        other.invoke({"messages": []}, cfg(f"other-{uuid.uuid4().hex[:8]}"), durability="exit")
        return {}

    inner = StateGraph(Chat)
    inner.add_node("echo", lambda state: {"messages": [AIMessage("from the subgraph", id="ai-s")]})
    inner.add_edge(START, "echo")
    inner.add_edge("echo", END)
    builder = StateGraph(Chat)
    builder.add_node("purge", purge)
    builder.add_node("sub", inner.compile())
    builder.add_edge(START, "purge")
    builder.add_edge("purge", "sub")
    builder.add_edge("sub", END)
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(CheckpointDeletedError):
        graph.invoke(first_input(tid), cfg(tid), durability="exit")
    assert saver.get_tuple(cfg(tid)) is None
    assert saver.threads.get(tid) is None
    assert_gone(saver, pg_url, tid)


@pytest.mark.parametrize("durability", ["async", "sync", "exit"])
def test_a_forgotten_run_of_a_thread_never_deleted_is_stored(
    forgetful: ColosseumSaver, durability: str
) -> None:
    """Only a deletion of its thread makes a forgotten run's writes suspect."""
    saver, tid = forgetful, f"kept-{uuid.uuid4().hex[:8]}"
    other = other_run(saver)

    def forget(state: Chat) -> dict:
        other.invoke({"messages": []}, cfg(f"other-{uuid.uuid4().hex[:8]}"), durability="exit")
        return {}

    out = chat_graph(saver, forget).invoke(first_input(tid), cfg(tid), durability=durability)
    assert [m.content for m in out["messages"]] == [SECRET, "noted", f"you said: {SECRET}"]
    assert saver.get_tuple(cfg(tid)).checkpoint["channel_values"]["messages"][-1].id == "ai-2"


def test_a_forgotten_new_run_on_a_reused_thread_id_is_refused(forgetful: ColosseumSaver) -> None:
    """The price of the rule: a run that began after the deletion, on a thread id
    deleted before, is refused as well once this process forgot it (its first
    read cannot be told from one made before the deletion). The README says so."""
    saver, tid = forgetful, f"reused-{uuid.uuid4().hex[:8]}"
    other = other_run(saver)
    chat_graph(saver, lambda state: {}).invoke(first_input(tid), cfg(tid))
    saver.delete_thread(tid)

    def forget(state: Chat) -> dict:
        other.invoke({"messages": []}, cfg(f"other-{uuid.uuid4().hex[:8]}"), durability="exit")
        return {}

    with pytest.raises(CheckpointDeletedError):
        chat_graph(saver, forget).invoke(first_input(tid), cfg(tid), durability="exit")
    assert saver.get_tuple(cfg(tid)) is None
    # A run this process remembers is not refused: the thread id is usable again.
    out = chat_graph(saver, lambda state: {}).invoke(first_input(tid), cfg(tid), durability="exit")
    assert out["messages"][-1].content == f"you said: {SECRET}"


# ========================================== clocks: the host's and Postgres's
#
# A run's first read records the thread's deletion as it saw it (Postgres's
# stamp of the thread's last deletion, from Postgres or the Redis head; none
# for a thread never deleted), and its writes and tool claims are refused when
# the thread was deleted since: nothing compares the application host's clock
# with Postgres's. Here the host's clock is set an hour off (time.time_ns,
# which LangGraph's uuid6 checkpoint ids come from too), ahead and behind;
# Postgres's clock cannot be moved here, so "Postgres ahead" is the host behind.
# Each case runs with and without the Redis head, blocking and asyncio, on a
# thread that is new, written before, or on an id deleted before ("reused":
# its run is refused for a second deletion).

HOUR_NS = 3600 * 10**9


@pytest.fixture
def host_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    def skew(ns: int) -> None:
        real = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real() + ns)
        # uuid6 never goes back on its own: a clock set behind must be seen.
        monkeypatch.setattr(uuid6_ids, "_last_v6_timestamp", None)

    return skew


def paying_graph(saver: Any, bank: Bank, purge: Callable[..., Any]) -> Any:
    """purge -> agent (asks for one payment) -> tools (IdempotentToolNode) -> END."""
    return exit_payment_graph(saver, bank, purge)


def reply_of(state: dict) -> str:
    return str(state["messages"][-1].content)


def before_the_run(saver: ColosseumSaver, tid: str, prior: str) -> None:
    """The thread as the run finds it: new, written (its Redis head, if any, is
    what the run reads), or an id deleted before: the run reads the stamp of
    that deletion, and nothing stored tells its writes of the next one."""
    if prior in ("written", "reused"):
        other_run(saver).invoke(first_input(tid), cfg(tid))
    if prior == "reused":
        saver.delete_thread(tid)


async def abefore_the_run(saver: AsyncColosseumSaver, tid: str, prior: str) -> None:
    if prior in ("written", "reused"):
        await other_run(saver).ainvoke(first_input(tid), cfg(tid))
    if prior == "reused":
        await saver.adelete_thread(tid)


PRIORS = ["new", "written", "reused"]


@pytest.mark.parametrize("prior", PRIORS)
def test_with_the_host_clock_ahead_a_run_that_read_before_the_deletion_is_refused(
    saver: ColosseumSaver, pg_url: str, host_clock: Any, prior: str
) -> None:
    """The run reads the thread, another hand deletes it (Postgres's clock an
    hour behind the host's): its tool is not paid, and its end brings nothing back."""
    tid, bank = f"ahead-{uuid.uuid4().hex[:8]}", Bank()
    before_the_run(saver, tid, prior)
    host_clock(HOUR_NS)

    def purge(state: Any) -> dict:
        saver.delete_thread(tid)
        return {"messages": [AIMessage(SECRET, id="ai-p")]}

    with pytest.raises(CheckpointDeletedError) as refused:
        paying_graph(saver, bank, purge).invoke(first_input(tid), cfg(tid), durability="exit")
    assert refused.value.thread_id == tid
    assert bank.calls == [], "the tool ran for a run of a deleted thread"
    assert ledger_rows(pg_url, tid) == []
    assert saver.get_tuple(cfg(tid)) is None
    assert saver.threads.get(tid) is None
    assert_gone(saver, pg_url, tid)


@pytest.mark.parametrize("prior", PRIORS)
async def test_with_the_host_clock_ahead_a_run_that_read_before_the_deletion_is_refused_async(
    asaver: AsyncColosseumSaver, pg_url: str, host_clock: Any, prior: str
) -> None:
    tid, bank = f"aahead-{uuid.uuid4().hex[:8]}", Bank()
    await abefore_the_run(asaver, tid, prior)
    host_clock(HOUR_NS)

    async def purge(state: Any) -> dict:
        await asaver.adelete_thread(tid)
        return {"messages": [AIMessage(SECRET, id="ai-p")]}

    with pytest.raises(CheckpointDeletedError):
        await paying_graph(asaver, bank, purge).ainvoke(
            first_input(tid), cfg(tid), durability="exit"
        )
    assert bank.calls == [], "the tool ran for a run of a deleted thread"
    assert ledger_rows(pg_url, tid) == []
    assert await asaver.aget_tuple(cfg(tid)) is None
    assert await asaver.threads.get(tid) is None
    assert_gone(asaver, pg_url, tid)


@pytest.mark.parametrize("durability", ["exit", "sync"])
def test_with_postgres_clock_ahead_a_run_begun_after_a_deletion_is_stored(
    saver: ColosseumSaver, pg_url: str, host_clock: Any, durability: str
) -> None:
    """A run that begins right after a deletion of its thread (Postgres's clock
    an hour ahead of the host's) is a new thread: stored, its tool paid once;
    the run after it (served by the Redis head, if any) too."""
    tid, bank = f"behind-{uuid.uuid4().hex[:8]}", Bank()
    other_run(saver).invoke(first_input(tid), cfg(tid))
    saver.delete_thread(tid)
    host_clock(-HOUR_NS)
    graph = paying_graph(saver, bank, lambda state: {})
    for _ in range(2):
        out = graph.invoke(
            {"messages": [HumanMessage("hi", id="h-2")]}, cfg(tid), durability=durability
        )
        assert reply_of(out) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)]
    assert ledger_rows(pg_url, tid) == [(tid, "SUCCESS")]
    assert saver.threads.get(tid).status == "idle"
    assert secret_in_postgres(pg_url) == []


async def test_with_postgres_clock_ahead_a_run_begun_after_a_deletion_is_stored_async(
    asaver: AsyncColosseumSaver, pg_url: str, host_clock: Any
) -> None:
    tid, bank = f"abehind-{uuid.uuid4().hex[:8]}", Bank()
    await other_run(asaver).ainvoke(first_input(tid), cfg(tid))
    await asaver.adelete_thread(tid)
    host_clock(-HOUR_NS)
    graph = paying_graph(asaver, bank, lambda state: {})
    for _ in range(2):
        out = await graph.ainvoke(
            {"messages": [HumanMessage("hi", id="h-2")]}, cfg(tid), durability="exit"
        )
        assert reply_of(out) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)]
    assert ledger_rows(pg_url, tid) == [(tid, "SUCCESS")]
    assert secret_in_postgres(pg_url) == []


def stamp_of(url: str, tid: str) -> str | None:
    """The thread's deletion stamp (NULL: the thread id was never deleted)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT before FROM colosseum_deleted_threads WHERE thread_id = %s", [tid]
        ).fetchone()
    return row[0] if row else None


def test_each_deletion_of_a_thread_id_writes_a_stamp_past_its_last(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """The stamp a run's first read saw is compared for equality: a deletion
    must never write one the thread had before. A stamp written by a clock an
    hour ahead (since set back): the next deletion's is past it all the same,
    and the run that read it is refused."""
    tid = f"stamps-{uuid.uuid4().hex[:8]}"
    saver.put(cfg(tid), empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.delete_thread(tid)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE colosseum_deleted_threads SET before = lpad(to_hex("
            "('x' || lpad(before, 16, '0'))::bit(64)::bigint + %s), 15, '0') "
            "WHERE thread_id = %s",
            [HOUR_NS // 100, tid],
        )
    ahead = stamp_of(pg_url, tid)
    run = RunControl()
    assert saver.get_tuple(in_run(cfg(tid), run)) is None  # the run reads the stamp ahead
    saver.delete_thread(tid)
    assert stamp_of(pg_url, tid) > ahead
    with pytest.raises(CheckpointDeletedError):
        saver.put(in_run(cfg(tid), run), empty_checkpoint(), {"source": "input", "step": -1}, {})
    assert rows_of(pg_url, tid) == dict.fromkeys(TABLES, 0)


def test_a_head_refilled_without_a_deletion_stamp_is_read_from_postgres(pg_url: str) -> None:
    """A Redis head refilled by older code carries no deletion stamp: the run
    reading it gets the stamp from Postgres (it is not refused on a reused
    thread id, nor given none), and the refill after that miss records it."""
    tid, bank = f"nostamp-{uuid.uuid4().hex[:8]}", Bank()
    options = {"redis_url": redis_url(), "cache_prefix": CACHE_PREFIX}
    client = redis.Redis.from_url(redis_url())
    with ColosseumSaver.from_conn_string(pg_url, **options) as saver:
        other_run(saver).invoke(first_input(tid), cfg(tid))
        saver.delete_thread(tid)
        other_run(saver).invoke({"messages": [HumanMessage("again", id="h-0")]}, cfg(tid))
        key = saver._store.hot.thread_key(tid)
        assert client.hget(key, "deleted").decode() == stamp_of(pg_url, tid)
        assert client.hdel(key, "deleted") == 1  # as a refill of older code left it
        graph = paying_graph(saver, bank, lambda state: {})
        out = graph.invoke(
            {"messages": [HumanMessage("hi", id="h-2")]}, cfg(tid), durability="exit"
        )
        assert reply_of(out) == "paid 5 (call #1)"
        assert client.hget(key, "deleted").decode() == stamp_of(pg_url, tid)
    client.close()
