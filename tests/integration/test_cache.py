"""The Redis hot head: never stale, never a failed run, on one server or a Cluster.

"Truth" below is a saver on the same database with no cache: whatever it reads
from Postgres is what every cached read must return. Workers are separate
saver instances (each with its own in-process bases), sharing one Redis.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
import redis
import redis.asyncio
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from psycopg_pool import ConnectionPool

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core.io import CacheCall, CacheDrop
from langgraph_colosseum.cache import async_client_from_url, client_options
from langgraph_colosseum.errors import CheckpointDeletedError
from tests.conftest import CACHE_PREFIX, truncate
from tests.integration.redis_servers import RedisCluster, RedisServer


class CountingConnection(psycopg.Connection):
    """Counts every exchange with Postgres: psycopg waits on the server once per
    round trip, whether a cursor sent the statements or the driver's lean path
    (_driver.lean_batch), which no cursor sees."""

    round_trips = 0

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        CountingConnection.round_trips += 1
        return super().wait(*args, **kwargs)


@pytest.fixture(params=["redis", "cluster"])
def cache_client(request: pytest.FixtureRequest, pg_url: str) -> Iterator[Any]:
    """A blocking client on the test Redis, or on a local 3-master Cluster."""
    from tests.conftest import redis_url

    truncate(pg_url)
    if request.param == "cluster":
        client = request.getfixturevalue("cluster").client()
        client.flushall()  # the test's own cluster
    else:
        client = redis.Redis.from_url(redis_url(), **client_options())
    yield client
    client.close()


@contextmanager
def worker(pg_url: str, client: Any, **options: Any) -> Iterator[ColosseumSaver]:
    """A saver with its own pool and in-process caches: one "worker"."""
    prefix = options.pop("cache_prefix", None) or PREFIX
    with ConnectionPool(
        pg_url,
        min_size=1,
        max_size=4,
        connection_class=CountingConnection,
        kwargs={"autocommit": True},
    ) as pool:
        saver = ColosseumSaver(pool, cache=client, cache_prefix=prefix, **options)
        # Time stands still for its incarnation re-check: the round-trip counts
        # here are exact, and test_recovery moves this clock itself.
        set_recheck_clock(saver, 0.0)
        yield saver


def set_recheck_clock(saver: Any, now: float) -> None:
    """Stop the clock the saver's hot head re-checks its database incarnation
    by (HotHead.recheck_due) at `now`."""
    assert saver._store.hot is not None
    saver._store.hot.clock = lambda: now


@pytest.fixture
def truth(pg_url: str) -> Iterator[ColosseumSaver]:
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        yield saver


PREFIX = CACHE_PREFIX + "cache:"  # under the session prefix: `truncate` flushes it


def thread(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


# ------------------------------------------------------------------ graphs


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def chat_graph(saver: Any) -> Any:
    def agent(state: Chat) -> dict:
        return {
            "messages": [AIMessage(f"answer {state.get('turns', 0)}", id=str(uuid.uuid4()))],
            "turns": state.get("turns", 0) + 1,
        }

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=saver)


def say(text: str) -> dict:
    return {"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}


class Committee(TypedDict):
    votes: Annotated[list[str], lambda a, b: a + b]


def fanout_graph(saver: Any) -> Any:
    """Three parallel voters; the third asks a human, so the others' writes pend."""

    def vote(state: dict) -> dict:
        name = state["name"]
        if name == "human":
            return {"votes": [interrupt("your vote?")]}
        return {"votes": [name]}

    builder = StateGraph(Committee)
    builder.add_node("vote", vote)
    builder.add_conditional_edges(
        START, lambda _: [Send("vote", {"name": n}) for n in ("analyst", "risk", "human")]
    )
    return builder.compile(checkpointer=saver)


def snapshot(graph: Any, config: dict) -> tuple:
    """What a UI sees of a thread: values, next, config, parent, tasks, interrupts."""
    state = graph.get_state(config)
    tasks = [(t.name, t.path, t.error, t.interrupts, t.result) for t in state.tasks]
    return (state.values, state.next, state.config, state.parent_config, tasks,
            state.interrupts, state.metadata)  # fmt: skip


def assert_fresh(saver: ColosseumSaver, truth: ColosseumSaver, thread_id: str) -> None:
    """The cached read equals what Postgres holds, tuple by tuple."""
    got, want = saver.get_tuple(thread(thread_id)), truth.get_tuple(thread(thread_id))
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got.config == want.config
    assert got.parent_config == want.parent_config
    assert got.checkpoint == want.checkpoint
    assert got.metadata == want.metadata
    assert got.pending_writes == want.pending_writes


# ------------------------------------------------------------------ tests


def test_a_hit_makes_no_postgres_round_trip(pg_url: str, cache_client: Any) -> None:
    with worker(pg_url, cache_client) as saver:
        graph = chat_graph(saver)
        for i in range(5):
            graph.invoke(say(f"q{i}"), thread("hit"))
        before = CountingConnection.round_trips
        for _ in range(3):
            state = graph.get_state(thread("hit"))
        assert CountingConnection.round_trips == before
        assert state.values["turns"] == 5 and len(state.values["messages"]) == 10

        # Another worker (no bases of its own) is served by Redis too, once it
        # knows which database incarnation it serves (one round trip, once).
        with worker(pg_url, cache_client) as other:
            before = CountingConnection.round_trips
            assert chat_graph(other).get_state(thread("hit")).values == state.values
            assert CountingConnection.round_trips == before + 1
            assert chat_graph(other).get_state(thread("hit")).values == state.values
            assert CountingConnection.round_trips == before + 1


def test_a_head_stays_hot_through_turns_that_repeat_their_input(
    pg_url: str, cache_client: Any, truth: ColosseumSaver
) -> None:
    """LangGraph clears `__start__` once a step has read it, so each turn's
    input is a new version after an empty one. That input was stored as a
    delta of the last input this process had stored, a version the head no
    longer holds, and ADVANCE, unable to rebuild it, dropped the head at every
    turn's first put: each later read went to Postgres. A UI polling
    `get_state` between turns, the case the head is for, never hit."""
    with worker(pg_url, cache_client) as saver:
        graph = chat_graph(saver)
        for turn in range(4):
            graph.invoke({"messages": [HumanMessage("yes")]}, thread("repeat"))
            before = CountingConnection.round_trips
            state = graph.get_state(thread("repeat"))
            assert CountingConnection.round_trips == before, f"turn {turn}: the head was not served"
            assert repr(state.values) == repr(chat_graph(truth).get_state(thread("repeat")).values)
        assert state.values["turns"] == 4


def test_an_input_after_a_cleared_start_is_stored_whole_with_the_head_only(
    pg_url: str, cache_client: Any, truth: ColosseumSaver
) -> None:
    """The README's sentence on the head's rows: with the head on, the input
    after LangGraph cleared `__start__` is stored whole (the head holds no
    version to take a delta of); a saver without the head keeps its smaller
    delta rows (Postgres rebuilds any version)."""

    def start_encodings(thread_id: str) -> list[str]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT encoding FROM colosseum_channel_values WHERE thread_id = %s"
                " AND channel = '__start__' AND encoding <> 'empty' ORDER BY version",
                (thread_id,),
            ).fetchall()
        return [encoding for (encoding,) in rows]

    with worker(pg_url, cache_client) as saver:
        for _ in range(3):
            chat_graph(saver).invoke({"messages": [HumanMessage("yes")]}, thread("whole"))
    for _ in range(3):
        chat_graph(truth).invoke({"messages": [HumanMessage("yes")]}, thread("delta"))
    assert start_encodings("whole") == ["json", "json", "json"]
    assert start_encodings("delta")[0] == "json"
    assert set(start_encodings("delta")[1:]) <= {"merge", "append"}, start_encodings("delta")


class Drafts(TypedDict):
    drafts: Annotated[list[str], DeltaChannel(operator.add)]


def test_a_delta_channel_history_read_goes_to_postgres(pg_url: str, cache_client: Any) -> None:
    """The README's exception to the head's promise: a graph with a
    DeltaChannel also reads that channel's history, which the head does not
    hold, so each `get_state` the head serves makes one Postgres round trip."""
    with worker(pg_url, cache_client) as saver:
        builder = StateGraph(Drafts)
        builder.add_node("draft", lambda state: {"drafts": [f"draft {len(state['drafts'])}"]})
        builder.add_edge(START, "draft")
        graph = builder.compile(checkpointer=saver)
        for _ in range(3):
            graph.invoke({"drafts": ["note"]}, thread("drafts"))
        graph.get_state(thread("drafts"))  # the head, refilled if the last put left it
        for _ in range(3):
            before = CountingConnection.round_trips
            state = graph.get_state(thread("drafts"))
            assert CountingConnection.round_trips == before + 1
        assert len(state.values["drafts"]) == 6


def test_a_head_refilled_with_pending_writes_is_served_by_redis(
    pg_url: str, cache_client: Any, truth: ColosseumSaver
) -> None:
    """An interrupted thread's head (pending writes) read after Redis lost it: the
    refill must be readable. It once packed the writes as msgpack `bin`, which
    Lua's cmsgpack cannot read: every READ of that head then failed."""
    with worker(pg_url, cache_client) as saver:
        graph = fanout_graph(saver)
        graph.invoke({"votes": []}, thread("refilled"))
        cache_client.delete(f"{PREFIX}{{refilled}}")  # lost: evicted, expired, flushed
        with worker(pg_url, cache_client) as reader:
            assert_fresh(reader, truth, "refilled")  # a miss, then the refill
            before = CountingConnection.round_trips
            assert_fresh(reader, truth, "refilled")
            assert CountingConnection.round_trips == before, "the refilled head was not served"


def test_two_workers_interleaving_never_read_stale(
    pg_url: str, cache_client: Any, truth: ColosseumSaver
) -> None:
    with worker(pg_url, cache_client) as a, worker(pg_url, cache_client) as b:
        graphs = [chat_graph(a), chat_graph(b)]
        reference = chat_graph(truth)
        for turn in range(12):
            writer, reader = graphs[turn % 2], graphs[(turn + 1) % 2]
            writer.invoke(say(f"turn {turn}"), thread("ping-pong"))
            assert snapshot(reader, thread("ping-pong")) == snapshot(reference, thread("ping-pong"))
            assert snapshot(writer, thread("ping-pong")) == snapshot(reference, thread("ping-pong"))
            if turn == 5:  # time travel on one worker: a fork the other must see
                past = list(writer.get_state_history(thread("ping-pong")))[4]
                writer.update_state(past.config, {"turns": 100})
                assert snapshot(reader, thread("ping-pong")) == snapshot(
                    reference, thread("ping-pong")
                )


def test_pending_writes_and_interrupts_are_current(
    pg_url: str, cache_client: Any, truth: ColosseumSaver
) -> None:
    """Background puts (durability="async") let writes land before their checkpoint."""
    with worker(pg_url, cache_client) as a, worker(pg_url, cache_client) as b:
        reference = fanout_graph(truth)
        for i in range(6):
            config = thread(f"vote-{i}")
            fanout_graph(a).invoke({"votes": []}, config, durability="async")
            state = snapshot(fanout_graph(b), config)
            assert state == snapshot(reference, config)
            assert state[5] and state[5][0].value == "your vote?"
            fanout_graph(b).invoke(Command(resume="yes"), config, durability="async")
            assert snapshot(fanout_graph(a), config) == snapshot(reference, config)
            assert sorted(snapshot(fanout_graph(a), config)[0]["votes"]) == [
                "analyst",
                "risk",
                "yes",
            ]


@pytest.mark.parametrize("operation", ["delete_thread", "prune", "copy_thread", "delete_for_runs"])
def test_maintenance_invalidates_the_head(
    pg_url: str, cache_client: Any, truth: ColosseumSaver, operation: str
) -> None:
    with worker(pg_url, cache_client) as a, worker(pg_url, cache_client) as b:
        graph = chat_graph(a)
        runs = [uuid.uuid4() for _ in range(3)]
        for i, run_id in enumerate(runs):
            graph.invoke(say(f"q{i}"), {**thread("doomed"), "run_id": run_id})
        graph.invoke(say("other"), thread("target"))
        assert_fresh(a, truth, "doomed")  # both heads are hot now
        assert_fresh(a, truth, "target")
        last_run = str(runs[-1])
        if operation == "delete_thread":
            b.delete_thread("doomed")
        elif operation == "prune":
            chat_graph(b).update_state(thread("doomed"), {"turns": -1})  # a head to keep
            b.prune(["doomed"])
        elif operation == "copy_thread":
            b.copy_thread("doomed", "target")
        else:
            b.delete_for_runs([last_run])
        for thread_id in ("doomed", "target"):
            assert_fresh(a, truth, thread_id)
            assert_fresh(b, truth, thread_id)
        if operation == "delete_thread":
            assert a.get_tuple(thread("doomed")) is None


def run_together(*functions: Any) -> list[BaseException]:
    """Start `functions` in threads at the same instant; the exceptions they raised."""
    start = threading.Barrier(len(functions))
    errors: list[BaseException] = []

    def run(function: Any) -> None:
        start.wait()
        try:
            function()
        except BaseException as exc:
            errors.append(exc)

    runners = [threading.Thread(target=run, args=(f,)) for f in functions]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    return errors


def test_a_racing_writer_cannot_resurrect_deleted_state(
    pg_url: str, cache_client: Any, truth: ColosseumSaver
) -> None:
    with worker(pg_url, cache_client) as a, worker(pg_url, cache_client) as b:
        graph, other = chat_graph(a), chat_graph(b)
        for trial in range(25):
            config = thread(f"race-{trial}")
            graph.invoke(say("first"), config)
            pause = random.random() * 0.004
            errors = run_together(
                lambda c=config: graph.invoke(say("second"), c),
                lambda c=config, p=pause: (
                    time.sleep(p),
                    b.delete_thread(c["configurable"]["thread_id"]),
                ),
                lambda c=config: [other.get_state(c) for _ in range(5)],
            )
            # The run that met the delete in flight may be refused (deleted
            # stays deleted); nothing else may fail.
            assert all(isinstance(e, CheckpointDeletedError) for e in errors), errors
            # Whatever the interleaving, the deleted turn is never readable again.
            for saver in (truth, a, b):
                state = saver.get_tuple(config)
                texts = (
                    [m.content for m in state.checkpoint["channel_values"]["messages"]]
                    if state
                    else []
                )
                assert "first" not in texts, (trial, texts)
            assert_fresh(a, truth, f"race-{trial}")
            assert_fresh(b, truth, f"race-{trial}")


def test_idle_heads_expire_and_postgres_still_answers(pg_url: str, truth: ColosseumSaver) -> None:
    from tests.conftest import redis_url

    client = redis.Redis.from_url(redis_url())
    with worker(pg_url, client, hot_ttl=timedelta(milliseconds=400)) as saver:
        graph = chat_graph(saver)
        graph.invoke(say("hello"), thread("idle"))
        key = saver._store.hot.thread_key("idle")
        assert client.exists(key)
        assert 0 < client.pttl(key) <= 400
        time.sleep(1.0)
        assert not client.exists(key)
        assert_fresh(saver, truth, "idle")
        assert graph.get_state(thread("idle")).values["turns"] == 1
        assert client.exists(key)  # the read refilled it
    client.close()


def test_reads_never_extend_a_heads_life(pg_url: str, truth: ColosseumSaver) -> None:
    """README: the hash "expires `hot_ttl` after the last write that reached it
    (reads never extend it)": a head polled by a UI goes when writes stop."""
    from tests.conftest import redis_url

    client = redis.Redis.from_url(redis_url())
    with worker(pg_url, client, hot_ttl=timedelta(seconds=60)) as saver:
        graph = chat_graph(saver)
        graph.invoke(say("hello"), thread("polled"))
        key = saver._store.hot.thread_key("polled")
        while (before := client.pttl(key)) > 59_900:  # a read that extended it would show
            time.sleep(0.01)
        for _ in range(5):
            assert graph.get_state(thread("polled")).values["turns"] == 1
        assert 0 < client.pttl(key) <= before
        assert_fresh(saver, truth, "polled")
    client.close()


def test_one_key_per_hot_thread_and_no_garbage(pg_url: str, cache_client: Any) -> None:
    """Bounded memory: each thread is one hash holding only what its head needs."""
    with worker(pg_url, cache_client, cache_prefix=PREFIX + "bounded:") as saver:
        graph = chat_graph(saver)
        for t in range(3):
            for i in range(30):
                graph.invoke(say(f"q{i}"), thread(f"hot-{t}"))
        keys = sorted(cache_client.scan_iter(match=f"{PREFIX}bounded:*", count=1000))
        assert keys == [saver._store.hot.thread_key(f"hot-{t}").encode() for t in range(3)]
        fields = cache_client.hkeys(keys[0])
        rows = [f for f in fields if f.startswith(b"\x00r\x00")]
        # messages: one chain (30 turns, 2 appends each, below the snapshot
        # interval) + turns + the start/branch channels: no row of a replaced
        # version survives.
        head = saver.get_tuple(thread("hot-0"))
        chain_rows = [f for f in rows if f.startswith(b"\x00r\x00messages\x00")]
        assert len(chain_rows) == 60
        assert len(rows) - len(chain_rows) <= len(head.checkpoint["channel_versions"])


def test_a_client_decoding_responses_is_refused(pg_url: str) -> None:
    from tests.conftest import redis_url

    with pytest.raises(ValueError, match="decode_responses"):
        with worker(pg_url, redis.Redis.from_url(redis_url(), decode_responses=True)):
            pass


# ------------------------------------------------------------------ faults


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    server = RedisServer("--enable-debug-command", "yes").start()
    yield server
    server.stop()


def wait_for_recovery(saver: ColosseumSaver) -> None:
    """The breaker is closed again with no call from the application: the first
    write after the restart closed it, or else the first read after the backoff
    (whose end is brought forward here) does."""
    saver.cache.breaker.retry_at = 0.0
    saver.get_tuple(thread("probe"))
    assert saver.cache.breaker.backoff == 0.0, "the cache recovered"


def test_redis_killed_mid_run_and_restarted(
    pg_url: str, truth: ColosseumSaver, private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    truncate(pg_url)
    with ExitStack() as stack:
        clients = [stack.enter_context(private_redis.client()) for _ in range(2)]
        a = stack.enter_context(worker(pg_url, clients[0]))
        b = stack.enter_context(worker(pg_url, clients[1]))
        graph_a, graph_b = chat_graph(a), chat_graph(b)
        turns = 0
        with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
            for step in range(30):
                if step == 10:
                    private_redis.kill()
                if step == 20:
                    private_redis.start()
                (graph_a if step % 2 else graph_b).invoke(say(f"s{step}"), thread("outage"))
                turns += 1
                assert_fresh(a, truth, "outage")
                assert_fresh(b, truth, "outage")
        outages = [r for r in caplog.records if "unavailable" in r.getMessage()]
        assert len(outages) == 2  # one per worker, however many calls failed
        wait_for_recovery(a)
        wait_for_recovery(b)
        for step in range(4):
            (graph_a if step % 2 else graph_b).invoke(say(f"after {step}"), thread("outage"))
            assert_fresh(a, truth, "outage")
            assert_fresh(b, truth, "outage")
        assert graph_a.get_state(thread("outage")).values["turns"] == turns + 4
        before = CountingConnection.round_trips
        graph_b.get_state(thread("outage"))
        assert CountingConnection.round_trips == before, "the cache serves again"


def test_a_worker_cut_off_from_redis_leaves_no_stale_head(
    pg_url: str, truth: ColosseumSaver, private_redis: RedisServer
) -> None:
    """Redis stays up for B while A's requests fail: A's writes must not leave B a stale head."""
    truncate(pg_url)
    with ExitStack() as stack:
        client_b = stack.enter_context(private_redis.client())
        a = stack.enter_context(worker(pg_url, private_redis.client()))
        b = stack.enter_context(worker(pg_url, client_b))
        graph_a, graph_b = chat_graph(a), chat_graph(b)
        graph_a.invoke(say("one"), thread("partition"))
        assert_fresh(b, truth, "partition")  # B's head is hot
        a.cache.client = redis.Redis(host="127.0.0.1", port=1, **client_options())  # A loses Redis
        graph_a.invoke(say("two"), thread("partition"))
        a.cache.client = private_redis.client()  # ...and gets it back
        a.cache.breaker.retry_at = 0.0
        graph_a.get_state(thread("other"))  # A's first request drops what it missed
        assert_fresh(b, truth, "partition")
        assert graph_b.get_state(thread("partition")).values["turns"] == 2


def test_flushed_evicting_and_slow_redis_serve_no_wrong_data(
    pg_url: str, truth: ColosseumSaver
) -> None:
    truncate(pg_url)
    server = RedisServer(
        "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru", "--enable-debug-command", "yes"
    ).start()
    try:
        with worker(pg_url, server.client()) as a, worker(pg_url, server.client()) as b:
            graphs = [chat_graph(a), chat_graph(b)]
            rng = random.Random(7)
            payload = "x" * 20_000  # 40 threads x ~0.2 MB each: far over maxmemory
            for step in range(120):
                thread_id = f"squeezed-{rng.randrange(40)}"
                graphs[step % 2].invoke(
                    {"messages": [HumanMessage(payload, id=str(uuid.uuid4()))]}, thread(thread_id)
                )
                if step == 40:
                    server.client().flushall()
                if step == 80:
                    # Redis stalls for a second: calls time out, the breaker opens.
                    # (The stalling client itself waits as long as it takes.)
                    staller = redis.Redis(host="127.0.0.1", port=server.port)
                    threading.Thread(
                        target=staller.execute_command, args=("DEBUG", "SLEEP", "1.2")
                    ).start()
                    time.sleep(0.05)
                reader = (a, b)[rng.randrange(2)]
                assert_fresh(reader, truth, thread_id)
            info = server.client().info("stats")
            assert info["evicted_keys"] > 0, "the test must actually evict"
    finally:
        server.stop()


def heads_per_master(cluster: RedisCluster, saver: ColosseumSaver) -> list[int]:
    """How many keys of the saver's database incarnation each master holds."""
    assert saver._store.hot is not None
    pattern = saver._store.hot.key_pattern()
    counts = []
    for node in cluster.nodes:
        with node.client() as client:
            counts.append(sum(1 for _ in client.scan_iter(match=pattern, count=1000)))
    return counts


def test_a_saver_made_from_a_cluster_nodes_url_uses_the_cluster(
    pg_url: str, cluster: RedisCluster, truth: ColosseumSaver, caplog: pytest.LogCaptureFixture
) -> None:
    """`redis_url=` (or COLOSSEUM_REDIS_URL) naming one node of a Redis Cluster:
    the heads go to the master owning each thread's slot, and reads are served
    by them, with no Redis error."""
    truncate(pg_url)
    caplog.set_level(logging.WARNING, logger="langgraph_colosseum")
    with ColosseumSaver.from_conn_string(
        pg_url, redis_url=cluster.nodes[2].url, cache_prefix=PREFIX
    ) as saver:
        graph = chat_graph(saver)
        for i in range(12):
            graph.invoke(say(f"q{i}"), thread(f"url-{i}"))
        assert all(heads_per_master(cluster, saver)), "the heads are spread over the masters"
        sent: list[Any] = []
        perform = saver._perform
        saver._perform = lambda request: sent.append(request) or perform(request)  # type: ignore[method-assign]
        for i in range(12):
            assert_fresh(saver, truth, f"url-{i}")
        assert sent and all(isinstance(r, (CacheCall, CacheDrop)) for r in sent)

    async def asynchronously() -> None:
        async with AsyncColosseumSaver.from_conn_string(
            pg_url, redis_url=cluster.nodes[2].url, cache_prefix=PREFIX
        ) as saver:
            graph = chat_graph(saver)
            for i in range(12):
                await graph.ainvoke(say(f"q{i}"), thread(f"url-{i}"))
            counted = record_requests(saver)
            for i in range(12):
                got = await saver.aget_tuple(thread(f"url-{i}"))
                assert got == truth.get_tuple(thread(f"url-{i}"))
            assert all(isinstance(r, (CacheCall, CacheDrop)) for r in counted)

    asyncio.run(asynchronously())
    assert not caplog.records, [r.getMessage() for r in caplog.records]


# ------------------------------------------------------------------ async


def record_requests(saver: AsyncColosseumSaver) -> list[object]:
    """Every request the saver performs from now on (Postgres and Redis alike).

    Time stands still for its incarnation re-check from now on: one due
    mid-test would be a request the test did not make."""
    set_recheck_clock(saver, 0.0)
    sent: list[object] = []
    original = saver._perform

    async def recording(request: Any) -> Any:
        sent.append(request)
        return await original(request)

    saver._perform = recording  # type: ignore[method-assign]
    return sent


async def test_async_saver_on_the_cluster(
    pg_url: str, cluster: RedisCluster, truth: ColosseumSaver
) -> None:
    truncate(pg_url)
    client = cluster.async_client()
    async with AsyncColosseumSaver.from_conn_string(pg_url) as plain:
        saver = AsyncColosseumSaver(plain.conn, cache=client, cache_prefix=PREFIX)
        graph = chat_graph(saver)
        for i in range(5):
            await graph.ainvoke(say(f"q{i}"), thread(f"async-{i % 2}"))
        counted = record_requests(saver)
        state = await graph.aget_state(thread("async-0"))
        assert state.values["turns"] == 3
        assert all(isinstance(r, (CacheCall, CacheDrop)) for r in counted)
        assert_fresh_tuple = truth.get_tuple(thread("async-0"))
        assert (await saver.aget_tuple(thread("async-0"))).checkpoint == (
            assert_fresh_tuple.checkpoint
        )
    await client.aclose()


async def test_async_saver_through_a_redis_outage(
    pg_url: str, truth: ColosseumSaver, private_redis: RedisServer
) -> None:
    """The auto-pipelined async client: concurrent runs through a kill and a restart."""
    truncate(pg_url)
    client = async_client_from_url(private_redis.url)
    async with AsyncColosseumSaver.from_conn_string(pg_url) as plain:
        saver = AsyncColosseumSaver(plain.conn, cache=client, cache_prefix=PREFIX)
        graph = chat_graph(saver)

        async def run(i: int) -> None:
            await graph.ainvoke(say(f"q{i}"), thread(f"outage-{i}"))

        for wave in range(6):
            if wave == 2:
                private_redis.kill()
            if wave == 4:
                private_redis.start()
                saver.cache.breaker.retry_at = 0.0  # probe now rather than after the backoff
            await asyncio.gather(*(run(i) for i in range(8)))
            for t in range(8):
                want = truth.get_tuple(thread(f"outage-{t}"))
                got = await saver.aget_tuple(thread(f"outage-{t}"))
                assert got is not None and want is not None
                assert got.checkpoint == want.checkpoint
                assert got.pending_writes == want.pending_writes
        for t in range(8):
            assert (await graph.aget_state(thread(f"outage-{t}"))).values["turns"] == 6
        assert saver.cache.breaker.backoff == 0.0, "recovered"
        sent = record_requests(saver)
        await saver.aget_tuple(thread("outage-0"))
        assert [type(r) for r in sent] == [CacheCall], "served by Redis again"
    await client.aclose()


async def test_async_cache_drives_one_connection_closed_with_its_client(
    pg_url: str, truth: ColosseumSaver, private_redis: RedisServer
) -> None:
    """On a plain client the requests of every batch go out on one connection of
    its pool, driven directly (_redis_wire.py); the client's aclose() closes it."""
    truncate(pg_url)
    client = async_client_from_url(private_redis.url)
    async with AsyncColosseumSaver.from_conn_string(pg_url) as plain:
        saver = AsyncColosseumSaver(plain.conn, cache=client, cache_prefix=PREFIX)
        graph = chat_graph(saver)
        await asyncio.gather(*(graph.ainvoke(say("q"), thread(f"wire-{i}")) for i in range(4)))
        for i in range(4):
            assert_fresh_tuple = truth.get_tuple(thread(f"wire-{i}"))
            got = await saver.aget_tuple(thread(f"wire-{i}"))
            assert got is not None and got.checkpoint == assert_fresh_tuple.checkpoint
        sent = record_requests(saver)
        await saver.aget_tuple(thread("wire-0"))
        assert [type(r) for r in sent] == [CacheCall], "served by Redis"
        (wire,) = saver.cache._wires.values()
        assert not wire.closed
        in_use = client.connection_pool._in_use_connections
        assert wire.conn in in_use, "the connection is the client's, held out of its pool"
        await client.aclose()
        assert wire.closed and wire.transport.is_closing()


async def test_a_reply_past_the_timeout_fails_its_batch_and_no_later_one(
    pg_url: str, truth: ColosseumSaver, private_redis: RedisServer
) -> None:
    """A reply that comes after the socket timeout (a paused server) fails the
    requests waiting for it, which read Postgres; the connection goes with
    them, so that late reply can never be taken for the answer to a later
    request: the next one, on a new connection, gets its own."""
    truncate(pg_url)
    client = async_client_from_url(private_redis.url)
    admin = private_redis.client()
    async with AsyncColosseumSaver.from_conn_string(pg_url) as plain:
        saver = AsyncColosseumSaver(plain.conn, cache=client, cache_prefix=PREFIX)
        graph = chat_graph(saver)
        for i in range(2):
            await graph.ainvoke(say(f"q{i}"), thread(f"late-{i}"))
            await saver.aget_tuple(thread(f"late-{i}"))  # refilled: hot
        (first,) = saver.cache._wires.values()
        # WRITE: scripts wait (they may write), the UNPAUSE below does not.
        admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        try:
            # Waits out the timeout, then reads Postgres; the READ stays queued.
            got = await saver.aget_tuple(thread("late-0"))
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        assert got is not None and got.checkpoint == truth.get_tuple(thread("late-0")).checkpoint
        assert first.closed and saver.cache.breaker.backoff > 0
        saver.cache.breaker.retry_at = 0.0  # probe now rather than after the backoff
        sent = record_requests(saver)
        got = await saver.aget_tuple(thread("late-1"))
        assert [type(r) for r in sent] == [CacheCall], "served by Redis again"
        assert got is not None and got.checkpoint == truth.get_tuple(thread("late-1")).checkpoint
        assert saver.cache.breaker.backoff == 0.0
        (second,) = saver.cache._wires.values()
        assert second is not first and not second.closed
    admin.close()
    await client.aclose()


def one_connection_client(server: RedisServer, blocking: bool) -> redis.asyncio.Redis:
    """An asyncio client whose pool holds one connection: the Wire's, so the hot
    cache must never need a second one."""
    options = client_options()
    options["retry"] = redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)
    if blocking:
        # timeout: a second checkout fails (rather than waiting forever) while
        # the Wire holds the only connection, so the test fails and not hangs.
        pool: Any = redis.asyncio.BlockingConnectionPool(
            host="127.0.0.1", port=server.port, max_connections=1, timeout=5, **options
        )
    else:
        pool = redis.asyncio.ConnectionPool(
            host="127.0.0.1", port=server.port, max_connections=1, **options
        )
    return redis.asyncio.Redis(connection_pool=pool)


@pytest.mark.parametrize("blocking", [False, True], ids=["pool", "blocking-pool"])
async def test_a_one_connection_pool_recovers_from_a_script_flush_and_a_restart(
    pg_url: str, truth: ColosseumSaver, private_redis: RedisServer, blocking: bool
) -> None:
    """The Wire holds its pool's connection for good; reloading the scripts
    after NOSCRIPT (SCRIPT FLUSH, a restarted Redis) goes over that connection,
    so a pool of one serves the head from Redis again (a second checkout used
    to fail, or wait forever on a blocking pool)."""
    truncate(pg_url)
    client = one_connection_client(private_redis, blocking)
    admin = private_redis.client()
    async with AsyncColosseumSaver.from_conn_string(pg_url) as plain:
        saver = AsyncColosseumSaver(plain.conn, cache=client, cache_prefix=PREFIX)
        graph = chat_graph(saver)

        async def turn_and_check() -> None:
            await asyncio.gather(*(graph.ainvoke(say("q"), thread(f"one-{i}")) for i in range(3)))
            for i in range(3):
                want = truth.get_tuple(thread(f"one-{i}"))
                got = await saver.aget_tuple(thread(f"one-{i}"))
                assert got is not None and want is not None
                assert got.checkpoint == want.checkpoint
                assert got.pending_writes == want.pending_writes
            assert saver.cache.breaker.backoff == 0.0, "no Redis failure"
            sent = record_requests(saver)
            await saver.aget_tuple(thread("one-0"))
            assert [type(r) for r in sent] == [CacheCall], "served by Redis"
            del saver._perform  # stop recording

        await turn_and_check()
        admin.script_flush()
        await turn_and_check()
        private_redis.kill()
        await graph.ainvoke(say("q"), thread("one-0"))  # Postgres alone, the head stale
        private_redis.start()
        saver.cache.breaker.retry_at = 0.0  # probe now rather than after the backoff
        await turn_and_check()
    admin.close()
    await client.aclose()


@pytest.mark.parametrize("blocking", [False, True], ids=["pool", "blocking-pool"])
async def test_batches_replacing_a_broken_wire_share_one_connection(
    pg_url: str,
    truth: ColosseumSaver,
    private_redis: RedisServer,
    blocking: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two batches find the wire broken at once: one takes the pool's only
    connection anew and the other waits for it, rather than taking a second."""
    import langgraph_colosseum.cache as cache_module

    truncate(pg_url)
    client = one_connection_client(private_redis, blocking)
    async with AsyncColosseumSaver.from_conn_string(pg_url) as plain:
        saver = AsyncColosseumSaver(plain.conn, cache=client, cache_prefix=PREFIX)
        graph = chat_graph(saver)
        for name in ("cut-a", "cut-b"):
            await graph.ainvoke(say("q"), thread(name))
            await saver.aget_tuple(thread(name))  # refilled: hot
        (wire,) = saver.cache._wires.values()
        wire._abort(redis.exceptions.ConnectionError("cut by the test"))

        # Hooks: the first batch, about to take a fresh connection, waits until
        # a second batch (sent in a later turn) has come to take one as well.
        second_came = asyncio.Event()
        entries = 0
        second: list[asyncio.Task[Any]] = []
        original_wire, original_take = saver.cache._wire, cache_module.take_wire

        async def wire_hook() -> Any:
            nonlocal entries
            entries += 1
            if entries == 2:
                second_came.set()
            return await original_wire()

        async def take_hook(client: Any) -> Any:
            if not second:
                second.append(asyncio.create_task(saver.aget_tuple(thread("cut-b"))))
            await second_came.wait()
            return await original_take(client)

        saver.cache._wire = wire_hook  # type: ignore[method-assign]
        monkeypatch.setattr(cache_module, "take_wire", take_hook)
        got_a = await saver.aget_tuple(thread("cut-a"))
        got_b = await second[0]
        assert entries == 2
        failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert not failures, "neither batch failed (a later success would hide one)"
        for name, got in (("cut-a", got_a), ("cut-b", got_b)):
            want = truth.get_tuple(thread(name))
            assert got is not None and want is not None and got.checkpoint == want.checkpoint
        assert saver.cache.breaker.backoff == 0.0, "no Redis failure"
        sent = record_requests(saver)
        await saver.aget_tuple(thread("cut-b"))
        assert [type(r) for r in sent] == [CacheCall], "served by Redis"
    await client.aclose()


# ------------------------------------------------------------------ the blocking wire


def record_sync_requests(saver: ColosseumSaver) -> list[object]:
    """Every request the blocking saver performs from now on (see record_requests)."""
    set_recheck_clock(saver, 0.0)
    sent: list[object] = []
    original = saver._perform

    def recording(request: Any) -> Any:
        sent.append(request)
        return original(request)

    saver._perform = recording  # type: ignore[method-assign]
    return sent


def test_blocking_cache_drives_connections_of_its_pool_and_outlives_their_close(
    pg_url: str, truth: ColosseumSaver, private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """On a plain blocking client the requests go out on connections of its
    pool that the cache drives itself (_redis_wire.SyncWire) and keeps between
    requests; the client's close() disconnects them, and the next request
    takes a connection again, with no failure."""
    truncate(pg_url)
    client = private_redis.client()
    with worker(pg_url, client) as saver, caplog.at_level(logging.WARNING):
        graph = chat_graph(saver)
        for i in range(3):
            graph.invoke(say(f"q{i}"), thread("kept"))
        assert_fresh(saver, truth, "kept")
        wires = list(saver.cache._idle)
        assert wires, "a wire is kept between requests"
        in_use = client.connection_pool._in_use_connections
        assert all(wire.conn in in_use for wire in wires), "held out of the client's pool"
        sent = record_sync_requests(saver)
        assert_fresh(saver, truth, "kept")
        assert [type(r) for r in sent] == [CacheCall], "served by Redis"
        client.close()
        assert not any(wire.usable() for wire in wires), "closed with the client"
        graph.invoke(say("after the close"), thread("kept"))
        assert_fresh(saver, truth, "kept")
        assert [type(r) for r in sent].count(CacheCall) >= 2
        assert sent[-1].script == "read", "the last read was served by Redis"  # type: ignore[attr-defined]
        assert saver.cache.breaker.backoff == 0.0, "no Redis failure"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    client.close()


def test_a_blocking_reply_past_the_timeout_fails_its_request_and_no_later_one(
    pg_url: str, truth: ColosseumSaver, private_redis: RedisServer
) -> None:
    """A reply that comes after the socket timeout (a paused server) fails its
    request, which reads Postgres; its connection is closed, so that late reply
    is never read as the answer to a later request."""
    truncate(pg_url)
    client, admin = private_redis.client(), private_redis.client()
    with worker(pg_url, client) as saver:
        graph = chat_graph(saver)
        for i in range(2):
            graph.invoke(say(f"q{i}"), thread(f"late-{i}"))
            saver.get_tuple(thread(f"late-{i}"))  # refilled: hot
        first = saver.cache._idle[-1]  # the wire the next request takes
        # WRITE: scripts wait (they may write), the UNPAUSE below does not.
        admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        try:
            got = saver.get_tuple(thread("late-0"))  # waits out the timeout, reads Postgres
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        assert got is not None and got.checkpoint == truth.get_tuple(thread("late-0")).checkpoint
        assert first.closed and first not in saver.cache._idle
        assert saver.cache.breaker.backoff > 0
        saver.cache.breaker.retry_at = 0.0  # probe now rather than after the backoff
        sent = record_sync_requests(saver)
        for i in (1, 0):
            got = saver.get_tuple(thread(f"late-{i}"))
            assert got is not None
            assert got.checkpoint == truth.get_tuple(thread(f"late-{i}")).checkpoint
        assert [type(r) for r in sent] == [CacheCall, CacheCall], "served by Redis again"
        assert saver.cache.breaker.backoff == 0.0
        assert first not in saver.cache._idle
    admin.close()
    client.close()


@pytest.mark.parametrize("blocking", [False, True], ids=["pool", "blocking-pool"])
def test_a_blocking_one_connection_pool_serves_threads_flushes_and_recovers(
    pg_url: str,
    truth: ColosseumSaver,
    private_redis: RedisServer,
    blocking: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A blocking client whose pool holds one connection, used by several
    threads at once (LangGraph's own background writes, and three graphs):
    they take turns on the one connection the cache keeps, rather than fail
    for want of a second (a plain pool raises, a blocking one waits for a
    connection given back to it); `flush_cache` scans on it too; reloading
    the scripts after SCRIPT FLUSH goes over it."""
    truncate(pg_url)
    options = client_options()
    pool_class = redis.BlockingConnectionPool if blocking else redis.ConnectionPool
    extra = {"timeout": 5} if blocking else {}
    pool = pool_class(
        host="127.0.0.1", port=private_redis.port, max_connections=1, **options, **extra
    )
    client = redis.Redis(connection_pool=pool)
    admin = private_redis.client()
    with worker(pg_url, client) as saver, caplog.at_level(logging.WARNING):
        graph = chat_graph(saver)

        def turns_and_check() -> None:
            failures: list[BaseException] = []

            def run(i: int) -> None:
                try:
                    for turn in range(3):
                        graph.invoke(say(f"q{turn}"), thread(f"one-{i}"))
                except BaseException as exc:  # reported below
                    failures.append(exc)

            runners = [threading.Thread(target=run, args=(i,)) for i in range(3)]
            for runner in runners:
                runner.start()
            for runner in runners:
                runner.join()
            assert not failures
            for i in range(3):
                assert_fresh(saver, truth, f"one-{i}")
            assert saver.cache.breaker.backoff == 0.0, "no Redis failure"
            sent = record_sync_requests(saver)
            assert_fresh(saver, truth, "one-0")
            assert [type(r) for r in sent] == [CacheCall], "served by Redis"
            del saver._perform  # stop recording

        turns_and_check()
        assert saver.flush_cache() >= 3
        turns_and_check()
        admin.script_flush()
        turns_and_check()
        assert saver.cache._held <= 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    admin.close()
    client.close()


def test_a_resp3_push_between_replies_answers_no_command(private_redis: RedisServer) -> None:
    """An out-of-band RESP3 message (here a client-tracking invalidation) read
    before a reply is not taken for that reply."""
    from langgraph_colosseum._redis_wire import take_sync_wire

    client = redis.Redis(host="127.0.0.1", port=private_redis.port, protocol=3, **client_options())
    other = private_redis.client()
    wire = take_sync_wire(client)
    assert wire is not None
    assert wire.execute([("CLIENT", "TRACKING", "ON"), ("GET", "tracked")]) == [b"OK", None]
    # Redis queues an invalidation on the wire's connection while it runs the
    # SET, so it goes out there ahead of any later reply.
    other.set("tracked", "1")
    assert wire.execute([("PING",)]) == [b"PONG"]
    assert wire.execute([("GET", "tracked")]) == [b"1"]
    wire.close()
    other.close()
    client.close()


async def test_a_resp3_push_between_replies_answers_no_command_async(
    private_redis: RedisServer,
) -> None:
    """The same on the asyncio cache's wire."""
    from langgraph_colosseum._redis_wire import take_wire

    options = client_options()
    options["retry"] = redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)
    client = redis.asyncio.Redis(host="127.0.0.1", port=private_redis.port, protocol=3, **options)
    other = private_redis.client()
    wire = await take_wire(client)
    assert wire is not None
    assert await wire.execute([("CLIENT", "TRACKING", "ON"), ("GET", "tracked")]) == [b"OK", None]
    other.set("tracked", "1")  # (see the blocking twin)
    assert await wire.execute([("PING",)]) == [b"PONG"]
    assert await wire.execute([("GET", "tracked")]) == [b"1"]
    other.close()
    await client.aclose()
