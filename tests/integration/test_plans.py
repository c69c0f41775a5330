"""The hot statements are prepared: their generic plans must stay index lookups.

`get_tuple` and `list` pages are sent prepared (planning them cost more than
running them: ~1 ms against ~0.3 ms at 20,000 checkpoints). A prepared
statement soon runs on a *generic* plan, made once without the parameter
values, so that plan must be right whatever thread it serves: a lookup by
primary key, never a scan of a table that grows with every thread and step.
Checked at the sizes the benchmarks use: 20,000 checkpoints in one thread among
100,000 threads, with the statistics autovacuum would have gathered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum._core import sql
from tests.conftest import server_url
from tests.integration.pg_servers import PostgresCluster, private_directory, remove
from tests.integration.store_support import fresh_database

THREADS = 100_000
CHECKPOINTS = 20_000
TABLES = {
    "colosseum_checkpoints",
    "colosseum_channel_values",
    "colosseum_writes",
    "colosseum_threads",
}

SEED = [
    # 100,000 threads of 2 checkpoints each, and one of 20,000; one value row
    # (channel `counter`) per checkpoint, a write on every tenth.
    """
    INSERT INTO colosseum_threads (thread_id) SELECT 't' || i FROM generate_series(1, %(threads)s) i
    """,
    """
    INSERT INTO colosseum_checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata)
    SELECT t, '', lpad(s::text, 8, '0'),
           jsonb_build_object('channel_versions', jsonb_build_object('counter', lpad(s::text, 8, '0'))),
           '{}'
    FROM (SELECT 't' || i AS t, s FROM generate_series(1, %(threads)s) i, generate_series(1, 2) s
          UNION ALL SELECT 'long', s FROM generate_series(1, %(checkpoints)s) s) x
    """,
    """
    INSERT INTO colosseum_channel_values (thread_id, checkpoint_ns, channel, version, encoding, value)
    SELECT thread_id, '', 'counter', checkpoint_id, 'json', to_jsonb(checkpoint_id)
    FROM colosseum_checkpoints
    """,
    """
    INSERT INTO colosseum_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel,
                                  encoding, value)
    SELECT thread_id, '', checkpoint_id, 'task', 0, 'counter', 'json', '1'
    FROM colosseum_checkpoints WHERE right(checkpoint_id, 1) = '0'
    """,
    "ANALYZE",
]


@pytest.fixture(scope="module")
def grown_url() -> Iterator[str]:
    with fresh_database(server_url()) as url:
        with ColosseumSaver.from_conn_string(url, pool_size=1) as saver:
            saver.setup()
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in SEED:
                conn.execute(statement, {"threads": THREADS, "checkpoints": CHECKPOINTS})
        yield url


def positional(query: str) -> tuple[str, list[str]]:
    """The query with psycopg's %(name)s / %(name)b turned into $1.. (first use order)."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)[sb]", number, query).replace("%%", "%"), names


def generic_plan(url: str, query: str, params: dict[str, Any]) -> dict:
    """EXPLAIN of the generic plan Postgres caches for `query` once prepared."""
    text, names = positional(query)
    with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE hot AS {text}".replace("%", "%%"))
        placeholders = ", ".join(["%s"] * len(names))
        rows = conn.execute(
            f"EXPLAIN (FORMAT JSON) EXECUTE hot({placeholders})", [params[n] for n in names]
        ).fetchall()
    plan = rows[0][0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


# Parts of a statement that run only when a write is refused as deleted (their
# one-time filter is `EXISTS (SELECT 1 FROM deleted)`), not on the hot path.
REFUSED_ONLY = {"CTE early_row_gone"}


def scans(node: dict) -> Iterator[tuple[str, str]]:
    """(table, how it is read) of every node that reads a table (an UPDATE's own
    node is not a read: the scan under it is)."""
    if node.get("Subplan Name") in REFUSED_ONLY:
        return
    if "Relation Name" in node and node["Node Type"] != "ModifyTable":
        yield node["Relation Name"], node["Node Type"]
    for child in node.get("Plans", []):
        yield from scans(child)


HEAD = {"thread_id": "long", "checkpoint_ns": "", "known": "{}", "ttl": None, "memo": b""}
KEYS = {
    "threads": ["long"],
    "namespaces": [""],
    "channels": ["counter"],
    "versions": ["00000001"],
    "known_threads": [],
    "known_namespaces": [],
    "known_channels": [],
    "known_versions": [],
}
LIST_IN_NAMESPACE = sql.LIST_PAGE.format(
    where=" AND ".join([sql.LIST_WHERE_THREAD, sql.LIST_WHERE_NS, sql.LIST_CURSOR_IN_NAMESPACE]),
    order=sql.LIST_ORDER_IN_NAMESPACE,
)
LIST_IN_THREAD = sql.LIST_PAGE.format(
    where=" AND ".join([sql.LIST_WHERE_THREAD, sql.LIST_CURSOR_IN_THREAD]),
    order=sql.LIST_ORDER_IN_THREAD,
)
PAGE = {**HEAD, "page_size": 100, "cursor_id": "00010000", "cursor_ns": "", "cursor_thread": ""}

# The writes run on their generic plans too (sql.WRITE_LOCK forces it).
PUT = {
    "thread_id": "long", "checkpoint_ns": "", "checkpoint_id": "00020001",
    "parent_checkpoint_id": "00020000", "run_id": None, "checkpoint": "{}", "metadata": "{}",
    "lineage_ns": [""], "lineage_ids": ["00020000", "00020001"],
    "lineage_keys": ["0:00020000", "0:00020001"], "seen": "", "channels": ["counter"],
    "versions": ["00020001"],
    "encodings": ["json"], "jsons": ["1"], "datas": [None], "types": [None], "bases": [None],
    "depths": [0], "run_owner": None, "run_token": None, "run_metadata": "{}",
    "values_set": "{}", "values_del": [], "ttl": None,
}  # fmt: skip
PUT_WRITES = {
    **{k: PUT[k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id", "seen")},
    "lineage_ns": [""], "lineage_ids": ["00020001"], "lineage_keys": ["0:00020001"],
    "task_id": "task", "task_path": "", "idxs": [0], "channels": ["counter"],
    "encodings": ["json"], "jsons": ["1"], "datas": [None], "types": [None],
    "run_owner": None, "run_token": None, "run_id": None, "state_version": None,
    "status": None,
}  # fmt: skip

# A DeltaChannel's history (get_delta_channel_history), walked from the head
# or from a checkpoint named by id, 10,000 checkpoints below it.
DELTA = {
    "thread_id": "long", "checkpoint_ns": "", "channels": ["counter"],
    "known_channels": [], "known_versions": [],
}  # fmt: skip

CASES = {
    "get_tuple latest": (sql.GET_TUPLE_LATEST, HEAD),
    "delta history at the head": (sql.DELTA_HISTORY_LATEST, DELTA),
    "delta history by id": (sql.DELTA_HISTORY_BY_ID, {**DELTA, "checkpoint_id": "00010000"}),
    "get_tuple by id": (sql.GET_TUPLE_BY_ID, {**HEAD, "checkpoint_id": "00010000"}),
    "get_tuple latest, touching the thread": (sql.TOUCH_THREAD + sql.GET_TUPLE_LATEST, HEAD),
    "get_tuple latest, refilling the hot head": (sql.GET_TUPLE_LATEST_FOR_HEAD, HEAD),
    "list page in a namespace": (LIST_IN_NAMESPACE, PAGE),
    "list page across namespaces": (LIST_IN_THREAD, PAGE),
    "value chains": (sql.VALUE_CHAINS, KEYS),
    "put": (sql.PUT, PUT),
    "put_writes": (sql.PUT_WRITES, PUT_WRITES),
    "put without a Redis head": (sql.PUT_NO_HEAD, PUT),
    **{
        f"put_writes (Redis head, status: {key})": (statement, PUT_WRITES)
        for key, statement in sql.PUT_WRITES_BY.items()
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_generic_plan_of_a_hot_read_looks_rows_up_by_key(grown_url: str, case: str) -> None:
    query, params = CASES[case]
    found = [(table, kind) for table, kind in scans(generic_plan(grown_url, query, params))]
    assert any(table in TABLES for table, _ in found), found
    for table, kind in found:
        if table in TABLES:
            # A Tid Scan reads back, by its ctid, a row an index scan found
            # (sql.VALUE_CHAINS): a lookup too, never a scan of the table.
            assert kind in ("Index Scan", "Index Only Scan", "Tid Scan"), (case, table, kind)


def nodes(node: dict) -> Iterator[dict]:
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def test_a_delta_history_by_id_finds_its_checkpoint_by_its_key(grown_url: str) -> None:
    """One generic plan for both ways of naming the target, `(id IS NULL OR
    checkpoint_id = id) ORDER BY checkpoint_id DESC LIMIT 1`, would be an index
    scan too, but one that walks the thread down from its head to an old
    checkpoint, 10,000 entries here: each checkpoint the by-id read finds, it
    finds by its key (sql._delta_history)."""
    plan = generic_plan(grown_url, *CASES["delta history by id"])
    found = [n for n in nodes(plan) if n.get("Relation Name") == "colosseum_checkpoints"]
    assert found
    for node in found:
        assert "checkpoint_id" in node.get("Index Cond", ""), node


def test_nothing_is_prepared_behind_a_transaction_mode_pooler(pg_url: str) -> None:
    """pgbouncer=True (prepare_threshold=None): the hot statements, sent with
    `prepare=True`, are still never prepared; psycopg honours the connection's
    setting over the statement's request."""
    with ColosseumSaver.from_conn_string(pg_url, pgbouncer=True, max_size=1) as saver:
        config = {"configurable": {"thread_id": "plans-pgbouncer", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"counter": 1}
        checkpoint["channel_versions"] = {"counter": saver.get_next_version(None, None)}
        for _ in range(3):
            config = saver.put(config, checkpoint, {}, checkpoint["channel_versions"])
            saver.put_writes(config, [("counter", 2)], "task")
            assert saver.get_tuple(config) is not None
            assert list(saver.list(config))
        with saver.conn.connection() as conn:
            assert conn.prepare_threshold is None
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
        saver.delete_thread("plans-pgbouncer")


def test_the_hot_statements_are_prepared_by_default(pg_url: str) -> None:
    """The other side of the test above: without a pooler they are prepared."""
    with ColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        config = {"configurable": {"thread_id": "plans-prepared", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"counter": 1}
        checkpoint["channel_versions"] = {"counter": saver.get_next_version(None, None)}
        config = saver.put(config, checkpoint, {}, checkpoint["channel_versions"])
        saver.put_writes(config, [("counter", 2)], "task")
        saver.get_tuple({"configurable": {"thread_id": "plans-prepared"}})  # the head
        with saver.conn.connection() as conn:
            prepared = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        texts = " ".join(text for (text,) in prepared)
        assert "INSERT INTO colosseum_checkpoints" in texts  # put
        assert "INSERT INTO colosseum_writes" in texts  # put_writes
        assert "ORDER BY c.checkpoint_id DESC" in texts  # get_tuple at the head
        saver.delete_thread("plans-prepared")


# The reads that ask for their generic plan (sql.GENERIC_PLAN), each with a
# LIKE pattern of its statement as pg_stat_statements records it: parameters as
# $n, constants as written or as $n (an entry made by an EXECUTE keeps them).
GENERIC_READS = {
    "get_tuple": "SELECT (SELECT g.before FROM colosseum_deleted_threads%",
    "delta history at the head": "WITH RECURSIVE chain(%ORDER BY checkpoint_id DESC LIMIT %",
    "delta history by id": "WITH RECURSIVE chain(%checkpoint_id = $%",
}


def generic_read(saver: ColosseumSaver, read: str, config: dict, head: dict) -> None:
    """One call of `read` on the thread of `config`, whose head is `head`; checks
    what it returns, so that a read answering nothing cannot pass."""
    if read == "get_tuple":
        assert saver.get_tuple(config).checkpoint["channel_values"] == {"counter": 1}
        return
    at = {"configurable": {**config["configurable"], "checkpoint_id": head["configurable"]["checkpoint_id"]}}  # fmt: skip
    history = saver.get_delta_channel_history(
        config=at if read == "delta history by id" else config, channels=["counter"]
    )
    assert [write[2] for write in history["counter"]["writes"]] == [2]


@pytest.mark.parametrize("read", list(GENERIC_READS))
def test_a_read_runs_on_its_generic_plan_whatever_postgres_would_choose(read: str) -> None:
    """Left to choose, Postgres planned GET_TUPLE afresh on long stretches of
    calls (0.23-0.27 ms a plan against 0.03-0.04 ms of execution; see
    sql.GENERIC_PLAN), and the delta-history read (DeltaChannel's
    get_delta_channel_history, once per invoke) on every call (0.67 ms a plan
    against 0.96 ms of execution, chat-200-delta). Each read asks for its
    generic plan in its own transaction, so it is planned once per connection,
    and not again, even on a database whose setting forces custom plans (which
    stands in for every reason Postgres had to prefer them). Counted by
    pg_stat_statements, on a private cluster that preloads it."""
    directory = private_directory("colosseum-plans-")
    cluster = PostgresCluster.create(
        directory,
        shared_preload_libraries="pg_stat_statements",
        **{"pg_stat_statements.track_planning": "on"},
    ).start()
    try:
        cluster.query("CREATE EXTENSION pg_stat_statements")
        cluster.query("ALTER DATABASE postgres SET plan_cache_mode = force_custom_plan")
        config = {"configurable": {"thread_id": "planned", "checkpoint_ns": ""}}
        with ColosseumSaver.from_conn_string(cluster.url(), pool_size=1) as saver:
            saver.setup()
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"counter": 1}
            checkpoint["channel_versions"] = {"counter": "1"}
            parent = saver.put(config, checkpoint, {"step": 1}, {"counter": "1"})
            saver.put_writes(parent, [("counter", 2)], "task")
            child = empty_checkpoint()
            child["channel_versions"] = {"counter": "1"}
            head = saver.put(parent, child, {"step": 2}, {})
            generic_read(saver, read, config, head)  # prepared and planned once here
            cluster.query("SELECT pg_stat_statements_reset()")
            for _ in range(20):
                generic_read(saver, read, config, head)
        (calls, plans) = cluster.query(
            "SELECT sum(calls), sum(plans) FROM pg_stat_statements WHERE query LIKE %s",
            [GENERIC_READS[read]],
        )[0]
        assert (calls, plans) == (20, 0)
    finally:
        remove(directory, cluster)
