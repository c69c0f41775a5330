"""The Redis hot head never serves state that Postgres does not hold (issue 11).

Each test here reproduces one way a head used to outlive, or differ from, what
Postgres holds, against real Postgres and real Redis. A test that breaks Redis
(a cyclic chain, paused writes, a full memory) does it on a private
redis-server, never on the shared one.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from psycopg import conninfo
from typer.testing import CliRunner

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core import sql
from langgraph_colosseum._core.io import Query
from langgraph_colosseum.cache import RedisCache, client_options
from langgraph_colosseum.cli import app
from langgraph_colosseum.errors import InvalidConfigError
from tests.conftest import TRUNCATE, redis_url, server_url, truncate
from tests.integration.redis_servers import RedisCluster, RedisServer
from tests.integration.test_cache import (
    PREFIX,
    CountingConnection,
    assert_fresh,
    chat_graph,
    heads_per_master,
    say,
    thread,
    worker,
)
from tests.integration.test_guards import Once, Steered


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()  # SIGKILL: also ends a script that would never return


@pytest.fixture
def truth(pg_url: str) -> Iterator[ColosseumSaver]:
    """A saver with no cache: what Postgres holds."""
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        yield saver


def head_key(saver: ColosseumSaver, thread_id: str) -> str:
    assert saver._store.hot is not None
    return saver._store.hot.thread_key(thread_id)


def record_cache_requests(saver: ColosseumSaver) -> list[Any]:
    sent: list[Any] = []
    perform = saver.cache.perform

    def recording(request: Any) -> Any:
        sent.append(request)
        return perform(request)

    saver.cache.perform = recording  # type: ignore[method-assign]
    return sent


# ------------------------------------------------------------ 5: the breaker


def test_an_unencodable_thread_id_is_refused_before_redis_and_the_breaker_stays_closed(
    pg_url: str,
) -> None:
    truncate(pg_url)
    client = redis.Redis.from_url(redis_url(), **client_options())
    with worker(pg_url, client) as saver:
        graph = chat_graph(saver)
        graph.invoke(say("hello"), thread("fine"))
        graph.get_state(thread("fine"))
        sent = record_cache_requests(saver)
        for attempt in (
            lambda: saver.get_tuple(thread("\udcff")),
            lambda: graph.invoke(say("hi"), thread("\udcff")),
            lambda: saver.get_tuple(
                {"configurable": {"thread_id": "t", "checkpoint_ns": "\ud800"}}
            ),
        ):
            with pytest.raises(InvalidConfigError) as refused:
                attempt()
            assert "\\ud" in str(refused.value), "the error names the thread or namespace"
        assert sent == [], "nothing reached Redis"
        assert saver.cache.breaker.backoff == 0.0, "the breaker stayed closed"
        before = CountingConnection.round_trips
        assert graph.get_state(thread("fine")).values["turns"] == 1
        assert CountingConnection.round_trips == before, (
            "every other thread is still served by Redis"
        )
    client.close()


# ------------------------------------------------------------ 3: bounded scripts


def _versions(client: redis.Redis, key: str, channel: str) -> tuple[dict, list]:
    """(version -> base version, versions holding a row) of a channel in the root namespace."""
    bases, rows = {}, []
    for field in client.hkeys(key):
        parts = field.split(b"\x00")
        if len(parts) == 4 and parts[0] == b"" and parts[2] == channel.encode():
            if parts[1] == b"b":
                bases[parts[3]] = client.hget(key, field)
            elif parts[1] == b"r":
                rows.append(parts[3])
    return bases, rows


def test_a_cyclic_delta_chain_is_a_prompt_miss_and_redis_stays_up(
    pg_url: str, private_redis: RedisServer, truth: ColosseumSaver
) -> None:
    truncate(pg_url)
    client = private_redis.client()
    with worker(pg_url, private_redis.client()) as writer:
        graph = chat_graph(writer)
        for i in range(4):
            graph.invoke(say(f"q{i}"), thread("cyclic"))
        key = head_key(writer, "cyclic")
        bases, rows = _versions(client, key, "messages")
        assert len(bases) >= 2, "the head holds a delta chain"
        top = max(bases)
        full = next(v for v in rows if v not in bases)
        client.hset(key, b"\x00b\x00messages\x00" + full, top)  # full row -> top: a cycle

        with worker(pg_url, private_redis.client()) as reader:  # no bases: walks the chain
            assert_fresh(reader, truth, "cyclic")
            # A script that looped would meet the client's socket timeout, fail
            # the call and open the breaker (no timing: a loaded machine is slow).
            assert reader.cache.breaker.backoff == 0.0, "no Redis call failed"
            assert client.ping()
            # A fork writes over the cycle: its drop must end too.
            past = list(chat_graph(reader).get_state_history(thread("cyclic")))[3]
            bases, rows = _versions(client, key, "messages")
            if bases:
                full = next(v for v in rows if v not in bases)
                client.hset(key, b"\x00b\x00messages\x00" + full, max(bases))
            chat_graph(reader).update_state(past.config, {"turns": 50})
            assert reader.cache.breaker.backoff == 0.0
            assert client.ping()
            assert_fresh(reader, truth, "cyclic")
            assert_fresh(writer, truth, "cyclic")
    client.close()


# ------------------------------------------------------------ 6: refill cost


def test_a_refill_touches_the_heads_rows_not_the_whole_hash(
    pg_url: str, private_redis: RedisServer, truth: ColosseumSaver
) -> None:
    truncate(pg_url)
    client = private_redis.client()
    with worker(pg_url, private_redis.client()) as saver:
        graph = chat_graph(saver)
        graph.invoke(say("hello"), thread("wide"))
        key = head_key(saver, "wide")
        # 2,000 other namespaces' heads in the same hash.
        pipe = client.pipeline(transaction=False)
        for i in range(2000):
            ns = f"sub{i}\x00"
            pipe.hset(key, mapping={ns + "id": f"c{i}", ns + "h": b"x" * 50, ns + "cv": b"\x90"})
        pipe.execute()
        client.hdel(key, "\x00id")  # the root head goes: the next read refills it
        client.config_resetstat()
        with worker(pg_url, private_redis.client()) as reader:
            assert_fresh(reader, truth, "wide")
        stats = client.info("commandstats")
        scans = {"cmdstat_hkeys", "cmdstat_hgetall", "cmdstat_hvals", "cmdstat_hscan"}
        assert not scans & set(stats), f"a refill scanned the whole hash: {stats}"
        assert client.hlen(key) > 6000, "the other namespaces' heads are left alone"
        assert_fresh(saver, truth, "wide")
    client.close()


# ------------------------------------------------------------ 4: corrupt heads


def _tamper(client: redis.Redis, key: str, field: bytes, old: bytes, new: bytes) -> None:
    value = client.hget(key, field)
    assert value is not None and value.count(old) == 1, (field, value)
    client.hset(key, field, value.replace(old, new))


@pytest.mark.parametrize("kind", ["tagged", "untagged"])
def test_a_tampered_head_is_a_logged_miss(
    pg_url: str,
    private_redis: RedisServer,
    truth: ColosseumSaver,
    kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    truncate(pg_url)
    client = private_redis.client()
    with worker(pg_url, private_redis.client()) as writer:
        graph = chat_graph(writer)
        for i in range(3):
            graph.invoke(say(f"q{i}"), thread("tampered"))
        key = head_key(writer, "tampered")
        if kind == "tagged":  # a type tag no allowlist knows: the value does not decode
            _, rows = _versions(client, key, "messages")
            field = b"\x00r\x00messages\x00" + min(rows)
            _tamper(client, key, field, b':HumanMessage"', b':HumanMassage"')
        else:  # plain JSON that decodes fine, but is not what was written
            _, rows = _versions(client, key, "turns")
            (version,) = rows
            _tamper(client, key, b"\x00r\x00turns\x00" + version, b"\xa13", b"\xa17")
        with worker(pg_url, private_redis.client()) as reader:
            with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
                for _ in range(3):
                    assert_fresh(reader, truth, "tampered")
                    assert chat_graph(reader).get_state(thread("tampered")).values["turns"] == 3
            corrupt = [r for r in caplog.records if "hot head" in r.getMessage()]
            assert len(corrupt) == 1, [r.getMessage() for r in caplog.records]
            assert "tampered" in corrupt[0].getMessage()
            assert reader.cache.breaker.backoff == 0.0
            before = CountingConnection.round_trips
            chat_graph(reader).get_state(thread("tampered"))
            assert CountingConnection.round_trips == before, "refilled, and served by Redis again"
            chat_graph(reader).invoke(say("next"), thread("tampered"))
            assert chat_graph(writer).get_state(thread("tampered")).values["turns"] == 4
            assert_fresh(writer, truth, "tampered")
    client.close()


# ------------------------------------------------------------ 1: one database incarnation


@pytest.fixture
def databases() -> Iterator[Any]:
    """Makes databases (migrated unless told otherwise) on the test server; drops them all."""
    made: list[str] = []

    def make(name: str | None = None, *, setup: bool = True) -> str:
        name = name or f"colosseum_hot_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        url = conninfo.make_conninfo(server_url(), dbname=name)
        if setup:
            with ColosseumSaver.from_conn_string(url, pool_size=1) as saver:
                saver.setup()
        return url

    yield make
    for name in made:
        drop_database(name)


def drop_database(name: str) -> None:
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def texts(graph: Any, thread_id: str) -> list[str]:
    return [m.content for m in graph.get_state(thread(thread_id)).values.get("messages", [])]


def stored_text(url: str) -> str:
    """Everything the database holds for the checkpointer, as one text."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT coalesce(string_agg(value::text, ' '), '') FROM colosseum_channel_values"
        ).fetchone()
        writes = conn.execute(
            "SELECT coalesce(string_agg(value::text, ' '), '') FROM colosseum_writes"
        ).fetchone()
    return rows[0] + writes[0]


def orphans(url: str) -> int:
    """Checkpoints whose parent is not in the database."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            """SELECT count(*) FROM colosseum_checkpoints c
               WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
                   SELECT 1 FROM colosseum_checkpoints p
                   WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns
                     AND p.checkpoint_id = c.parent_checkpoint_id)"""
        ).fetchone()[0]


def test_two_databases_on_one_redis_never_see_each_others_heads(
    databases: Any, shared_client: redis.Redis
) -> None:
    a_url, b_url = databases(), databases()
    with worker(a_url, shared_client) as a, worker(b_url, shared_client) as b:
        graph_a, graph_b = chat_graph(a), chat_graph(b)
        graph_a.invoke(say("the secret of A"), thread("user-42"))
        assert texts(graph_a, "user-42") == ["the secret of A", "answer 0"]  # hot in Redis
        assert b.get_tuple(thread("user-42")) is None
        graph_b.invoke(say("B speaks"), thread("user-42"))
        assert texts(graph_b, "user-42") == ["B speaks", "answer 0"]
        assert texts(graph_a, "user-42") == ["the secret of A", "answer 0"]
        graph_a.invoke(say("A again"), thread("user-42"))
        assert texts(graph_a, "user-42")[2:] == ["A again", "answer 1"]
        assert texts(graph_b, "user-42") == ["B speaks", "answer 0"]
    assert "secret of A" not in stored_text(b_url) and "A again" not in stored_text(b_url)
    assert "B speaks" not in stored_text(a_url)


def test_a_recreated_database_never_sees_the_old_heads(
    databases: Any, shared_client: redis.Redis
) -> None:
    name = f"colosseum_hot_{uuid.uuid4().hex[:10]}"
    url = databases(name)
    with worker(url, shared_client) as old:
        chat_graph(old).invoke(say("the old life"), thread("t1"))
        assert texts(chat_graph(old), "t1") == ["the old life", "answer 0"]  # hot in Redis
    drop_database(name)
    databases(name)  # the test suite's next run: the same name, a new database
    with worker(url, shared_client) as new:
        assert new.get_tuple(thread("t1")) is None
        chat_graph(new).invoke(say("a new life"), thread("t1"))
        assert texts(chat_graph(new), "t1") == ["a new life", "answer 0"]
    assert "old life" not in stored_text(url)


@pytest.mark.parametrize("into", ["a new database", "the same database (--clean)"])
def test_a_restored_database_serves_what_the_restore_holds(
    databases: Any, shared_client: redis.Redis, tmp_path: Path, into: str
) -> None:
    url = databases()
    dump = tmp_path / "backup.dump"
    with worker(url, shared_client) as before:
        graph = chat_graph(before)
        for i in range(2):
            graph.invoke(say(f"kept {i}"), thread("t1"))
        subprocess.run(["pg_dump", "-Fc", "-f", str(dump), "-d", url], check=True)
        for i in range(2):
            graph.invoke(say(f"rolled back {i}"), thread("t1"))
        assert graph.get_state(thread("t1")).values["turns"] == 4  # hot in Redis
    if into == "a new database":
        target = databases(setup=False)
        subprocess.run(["pg_restore", "-d", target, str(dump)], check=True)
    else:
        target = url
        subprocess.run(["pg_restore", "--clean", "--if-exists", "-d", url, str(dump)], check=True)
    with worker(target, shared_client) as after:
        graph = chat_graph(after)
        state = graph.get_state(thread("t1")).values
        assert state["turns"] == 2
        assert [m.content for m in state["messages"]][-2:] == ["kept 1", "answer 1"]
        graph.invoke(say("after the restore"), thread("t1"))
        assert graph.get_state(thread("t1")).values["turns"] == 3
    assert "rolled back" not in stored_text(target)
    assert orphans(target) == 0


# ------------------------------------------------------------ 2: bounded staleness

HOT_TTL = timedelta(seconds=4)

# The writer of the staleness bound, as a one-shot process: it opens a saver,
# says "ready", waits for a line on stdin, updates the thread's state, prints
# the time its write returned, and waits to be killed (so no exit hook runs).
ONE_SHOT_WRITER = """
import sys, time
from datetime import timedelta
from langgraph_colosseum import ColosseumSaver
from tests.integration.test_cache import chat_graph, thread

url, redis_url, prefix, thread_id, ttl = sys.argv[1:6]
with ColosseumSaver.from_conn_string(
    url, redis_url=redis_url, cache_prefix=prefix, hot_ttl=timedelta(seconds=float(ttl))
) as saver:
    graph = chat_graph(saver)
    graph.get_state(thread(thread_id))
    print("ready", flush=True)
    sys.stdin.readline()
    graph.update_state(thread(thread_id), {"turns": 100})
    print(time.time(), flush=True)
    sys.stdin.readline()
"""


def refuse_writes(client: redis.Redis) -> None:
    """Redis full, and configured never to evict: every write is refused (OOM)."""
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)


def take_writes(client: redis.Redis) -> None:
    client.config_set("maxmemory", 0)


@contextmanager
def refused(saver: ColosseumSaver, how: str, server: RedisServer) -> Iterator[None]:
    """Redis refuses `saver`'s writes: all writes (full), or all of this saver's
    requests (it is cut off from Redis while the other workers are not)."""
    if how == "full":
        refuse_writes(server.client())
    else:  # (its own memory of what it missed goes with it: as when the process exits)
        reachable = saver.cache
        saver.cache = RedisCache(redis.Redis(host="127.0.0.1", port=1, **client_options()))
    try:
        yield
    finally:
        if how == "full":
            take_writes(server.client())
        else:
            saver.cache = reachable


def turns(saver: ColosseumSaver, thread_id: str) -> int:
    return chat_graph(saver).get_state(thread(thread_id)).values["turns"]


def test_the_staleness_bound_sentence(
    pg_url: str, private_redis: RedisServer, truth: ColosseumSaver
) -> None:
    """README: "After a write whose head Redis could not update, no worker serves
    that head for longer than `hot_ttl` after the write returned, and none at all
    once any worker has written to Postgres while Redis takes commands again."
    This test holds the first half: a one-shot writer that cannot reach Redis,
    killed before it could clean up, and a reader that keeps polling.
    `test_any_live_worker_drops_the_heads_writes_left_behind` holds the second."""
    truncate(pg_url)
    writer = subprocess.Popen(
        [sys.executable, "-c", ONE_SHOT_WRITER, pg_url, "redis://127.0.0.1:1/0", PREFIX,
         "polled", str(HOT_TTL.total_seconds())],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as reader:
            chat_graph(reader).invoke(say("hello"), thread("polled"))
            assert writer.stdout.readline().strip() == "ready"
            chat_graph(reader).invoke(say("again"), thread("polled"))
            assert turns(reader, "polled") == 2  # hot, its life counted from this write
            writer.stdin.write("go\n")
            writer.stdin.flush()
            returned = float(writer.stdout.readline())
            writer.kill()
            writer.wait()
            stale_seen = []
            while time.time() < returned + HOT_TTL.total_seconds() + 1.5:
                started = time.time()
                if turns(reader, "polled") != 100:
                    stale_seen.append(started - returned)
                time.sleep(0.05)
            assert stale_seen, "the reader was served the stale head for a while"
            assert max(stale_seen) <= HOT_TTL.total_seconds(), stale_seen[-3:]
            assert turns(reader, "polled") == 100
            assert_fresh(reader, truth, "polled")
    finally:
        writer.kill()


@pytest.mark.parametrize("how", ["full", "cut off"])
def test_any_live_worker_drops_the_heads_writes_left_behind(
    pg_url: str, private_redis: RedisServer, truth: ColosseumSaver, how: str
) -> None:
    truncate(pg_url)
    with (
        worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as reader,
        worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as other,
    ):
        for thread_id in ("updated", "deleted"):
            chat_graph(reader).invoke(say("hello"), thread(thread_id))
            assert turns(reader, thread_id) == 1  # hot
        with worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as one_shot:
            chat_graph(one_shot).get_state(thread("updated"))
            with refused(one_shot, how, private_redis):
                chat_graph(one_shot).update_state(thread("updated"), {"turns": 100})
                if how == "cut off":  # (a full Redis still takes deletes)
                    one_shot.delete_thread("deleted")
            one_shot.cache.breaker.missed.clear()  # the process is gone, and its memory
        if how == "cut off":  # (a full Redis still took the drop the breaker made first)
            assert turns(reader, "updated") == 1, "Redis serves the head the write left behind"
        chat_graph(other).invoke(say("unrelated"), thread("elsewhere"))
        assert turns(reader, "updated") == 100
        assert_fresh(reader, truth, "updated")
        assert_fresh(reader, truth, "deleted")
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT count(*) FROM colosseum_stale_heads").fetchone()[0] == 0


def test_a_head_recorded_stale_again_while_a_worker_drops_it_is_dropped_again(
    pg_url: str, private_redis: RedisServer, truth: ColosseumSaver
) -> None:
    """A worker drops a recorded stale head and then forgets the record; between
    the two, the head is refilled and another write that Redis refused records
    it stale again. The forget takes only the record it dropped (its
    `recorded_at`): the new one stays, and the next write anywhere drops the
    head again. Without that condition the new record went with the old, and
    Redis served the refilled head, a write behind, until `hot_ttl`."""
    truncate(pg_url)
    with (
        worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as reader,
        worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as first,
        worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as second,
        worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as plain,
    ):
        dropper = Steered(
            plain.conn, cache=private_redis.client(), cache_prefix=PREFIX, hot_ttl=HOT_TTL
        )
        chat_graph(reader).invoke(say("hello"), thread("t"))
        assert turns(reader, "t") == 1  # hot

        def refused_update(writer: ColosseumSaver, turns_now: int) -> None:
            chat_graph(writer).get_state(thread("t"))
            with refused(writer, "cut off", private_redis):
                chat_graph(writer).update_state(thread("t"), {"turns": turns_now})
            writer.cache.breaker.missed.clear()  # the process is gone, and its memory

        refused_update(first, 100)
        assert turns(reader, "t") == 1, "Redis serves the head the write left behind"

        def recorded_again() -> None:
            assert turns(reader, "t") == 100  # the head was dropped: refilled from Postgres
            refused_update(second, 200)
            assert turns(reader, "t") == 100, "Redis serves the head the write left behind"

        dropper.before = hook = Once(
            lambda request: isinstance(request, Query) and request.sql == sql.FORGET_STALE_HEADS,
            recorded_again,
        )
        chat_graph(dropper).invoke(say("unrelated"), thread("elsewhere"))
        assert hook.fired
        chat_graph(dropper).invoke(say("unrelated again"), thread("elsewhere"))
        assert turns(reader, "t") == 200
        assert_fresh(reader, truth, "t")
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT count(*) FROM colosseum_stale_heads").fetchone()[0] == 0


def test_the_writer_drops_what_redis_refused_before_it_exits(
    pg_url: str, private_redis: RedisServer, truth: ColosseumSaver
) -> None:
    truncate(pg_url)
    with worker(pg_url, private_redis.client(), hot_ttl=HOT_TTL) as reader:
        chat_graph(reader).invoke(say("hello"), thread("exiting"))
        assert turns(reader, "exiting") == 1
        with ColosseumSaver.from_conn_string(
            pg_url, redis_url=private_redis.url, cache_prefix=PREFIX, hot_ttl=HOT_TTL
        ) as one_shot:
            chat_graph(one_shot).get_state(thread("exiting"))
            with refused(one_shot, "cut off", private_redis):
                chat_graph(one_shot).update_state(thread("exiting"), {"turns": 100})
            assert turns(reader, "exiting") == 1, "Redis serves the head the write left behind"
        # Closing the saver dropped it.
        assert turns(reader, "exiting") == 100
        assert_fresh(reader, truth, "exiting")


def test_cache_flush_after_a_restore_that_keeps_the_incarnation(
    databases: Any, shared_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data-only pg_restore into the existing tables keeps the token, the
    database and the table: only `colosseum cache flush` makes it safe (README,
    Backup). It drops this database's heads and no other database's."""
    url, neighbour = databases(), databases()
    dump = tmp_path / "backup.dump"
    with worker(url, shared_client) as before, worker(neighbour, shared_client) as other:
        chat_graph(other).invoke(say("the neighbour"), thread("t1"))
        graph = chat_graph(before)
        graph.invoke(say("kept"), thread("t1"))
        subprocess.run(["pg_dump", "-Fc", "-f", str(dump), "-d", url], check=True)
        graph.invoke(say("rolled back"), thread("t1"))
        assert graph.get_state(thread("t1")).values["turns"] == 2  # hot in Redis
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(TRUNCATE)
        # (its copy of the token conflicts with the one in place: that table fails)
        subprocess.run(["pg_restore", "--data-only", "-d", url, str(dump)], capture_output=True)
        assert graph.get_state(thread("t1")).values["turns"] == 2, "the same incarnation"
        monkeypatch.setenv("COLOSSEUM_DATABASE_URL", url)
        monkeypatch.setenv("COLOSSEUM_REDIS_URL", redis_url())
        result = CliRunner().invoke(app, ["cache", "flush", "--prefix", PREFIX])
        assert result.exit_code == 0, result.output
        assert "dropped 1 " in result.output
        assert graph.get_state(thread("t1")).values["turns"] == 1
        assert "rolled back" not in stored_text(url)
        before_flush = CountingConnection.round_trips
        assert texts(chat_graph(other), "t1") == ["the neighbour", "answer 0"]
        assert CountingConnection.round_trips == before_flush, "the neighbour's head was kept"


def test_cache_flush_on_a_cluster_drops_the_heads_on_every_master(
    databases: Any, cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`colosseum cache flush` given the URL of one node of a Redis Cluster (as
    COLOSSEUM_REDIS_URL is, for the savers too): the database's heads go from
    every master, and another database's stay."""
    url, neighbour = databases(), databases()
    client = cluster.client()
    with worker(url, client) as mine, worker(neighbour, client) as other:
        for i in range(12):
            chat_graph(mine).invoke(say("mine"), thread(f"t{i}"))
        for i in range(3):
            chat_graph(other).invoke(say("the neighbour"), thread(f"t{i}"))
        assert all(heads_per_master(cluster, mine)), "the heads are spread over the masters"
        kept = heads_per_master(cluster, other)
        monkeypatch.setenv("COLOSSEUM_DATABASE_URL", url)
        monkeypatch.setenv("COLOSSEUM_REDIS_URL", cluster.nodes[1].url)
        result = CliRunner().invoke(app, ["cache", "flush", "--prefix", PREFIX])
        assert result.exit_code == 0, result.output
        assert "dropped 12 " in result.output
        assert heads_per_master(cluster, mine) == [0, 0, 0]
        assert heads_per_master(cluster, other) == kept
    client.close()


# ------------------------------------------------------------ scripts flushed


def test_async_writes_advance_the_head_after_redis_forgot_its_scripts(
    pg_url: str, private_redis: RedisServer
) -> None:
    """SCRIPT FLUSH (or a restart) empties Redis's script cache: the asyncio
    client's next write, sent alone (EVALSHA without a pipeline) or in a
    pipeline, loads the scripts again and still advances the head."""
    truncate(pg_url)

    async def main() -> None:
        async with AsyncColosseumSaver.from_conn_string(
            pg_url, redis_url=private_redis.url, cache_prefix=PREFIX
        ) as saver:
            graph = chat_graph(saver)
            await graph.ainvoke(say("hello"), thread("flushed"))
            await graph.aget_state(thread("flushed"))  # the head exists from here on
            client = private_redis.client()
            for _ in range(2):
                client.script_flush()
                await graph.ainvoke(say("again"), thread("flushed"))
                latest = await saver.aget_tuple(thread("flushed"))
                head = client.hget(head_key(saver, "flushed"), "\x00id")
                assert head == latest.checkpoint["id"].encode()
            client.close()

    asyncio.run(main())
