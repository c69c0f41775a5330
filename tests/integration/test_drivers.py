"""The drivers: connections and pools, threads, dropped connections, round trips."""

from __future__ import annotations

import asyncio
import itertools
import operator
import threading
from typing import Annotated, TypedDict

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph

from langgraph_colosseum import (
    AsyncColosseumSaver,
    ColosseumSaver,
    InvalidConfigError,
)
from langgraph_colosseum._core.io import Ahead, CacheCall, CacheDrop, Collect, Transaction


class Counter(TypedDict):
    total: Annotated[int, operator.add]
    log: Annotated[list[str], operator.add]


def counter_graph(saver):
    builder = StateGraph(Counter)
    builder.add_node("inc", lambda s: {"total": 1, "log": [f"step{s['total']}"]})
    builder.add_edge(START, "inc")
    return builder.compile(checkpointer=saver)


def thread(tid: str) -> dict:
    return {"configurable": {"thread_id": tid}}


def terminate_other_backends(url: str) -> int:
    """Drop every other connection to the test database, as a server restart would."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return row[0]


def test_dropped_connections_between_steps(saver: ColosseumSaver, pg_url: str) -> None:
    graph = counter_graph(saver)
    for turn in range(6):
        graph.invoke({"total": 0, "log": []}, thread("resilient"))
        if turn % 2 == 0:
            assert terminate_other_backends(pg_url) >= 1
    state = graph.get_state(thread("resilient"))
    assert state.values["total"] == 6
    assert state.values["log"] == [f"step{i}" for i in range(6)]
    # Every step is there, in order, parent links intact.
    history = list(graph.get_state_history(thread("resilient")))
    assert len(history) == 18  # input, __start__ and inc per turn
    for newer, older in itertools.pairwise(history):
        assert (
            newer.parent_config["configurable"]["checkpoint_id"]
            == older.config["configurable"]["checkpoint_id"]
        )


async def test_dropped_connections_async(asaver: AsyncColosseumSaver, pg_url: str) -> None:
    graph = counter_graph(asaver)
    for _turn in range(4):
        await graph.ainvoke({"total": 0, "log": []}, thread("aresilient"))
        await asyncio.to_thread(terminate_other_backends, pg_url)
    state = await graph.aget_state(thread("aresilient"))
    assert state.values["total"] == 4


def test_single_connection_saver(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = ColosseumSaver(conn)
        graph = counter_graph(saver)
        # Several threads share one connection; each statement stays whole.
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                for _ in range(3):
                    graph.invoke({"total": 0, "log": []}, thread(f"conn-{i}"))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors
        for i in range(4):
            assert graph.get_state(thread(f"conn-{i}")).values["total"] == 3


async def test_single_async_connection_saver(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        saver = AsyncColosseumSaver(conn)
        graph = counter_graph(saver)
        await asyncio.gather(
            *(graph.ainvoke({"total": 0, "log": []}, thread(f"aconn-{i}")) for i in range(8))
        )
        for i in range(8):
            assert (await graph.aget_state(thread(f"aconn-{i}"))).values["total"] == 1


async def test_async_saver_blocking_methods_from_another_thread(
    asaver: AsyncColosseumSaver,
) -> None:
    graph = counter_graph(asaver)
    await graph.ainvoke({"total": 0, "log": []}, thread("from-thread"))

    def blocking_reads():
        latest = asaver.get_tuple(thread("from-thread"))
        listed = list(asaver.list(thread("from-thread")))
        return latest, listed

    latest, listed = await asyncio.to_thread(blocking_reads)
    assert latest is not None and latest.checkpoint["channel_values"]["total"] == 1
    assert next(t.checkpoint["id"] for t in listed) == latest.checkpoint["id"]
    assert len(listed) == 3
    # A graph run with the sync API, from a worker thread.
    await asyncio.to_thread(graph.invoke, {"total": 0, "log": []}, thread("from-thread"))
    assert (await graph.aget_state(thread("from-thread"))).values["total"] == 2
    # From the loop's own thread, a blocking call would deadlock: it is refused.
    with pytest.raises(asyncio.InvalidStateError, match="different thread"):
        asaver.get_tuple(thread("from-thread"))


async def test_sync_saver_async_methods(saver: ColosseumSaver) -> None:
    graph = counter_graph(saver)
    for _ in range(2):
        await graph.ainvoke({"total": 0, "log": []}, thread("sync-async"))
    state = await graph.aget_state(thread("sync-async"))
    assert state.values["total"] == 2
    history = [s async for s in graph.aget_state_history(thread("sync-async"))]
    assert len(history) == 6


async def test_concurrent_runs_share_a_pool(asaver: AsyncColosseumSaver) -> None:
    graph = counter_graph(asaver)

    async def run(i: int) -> None:
        for _ in range(5):
            await graph.ainvoke({"total": 0, "log": []}, thread(f"conc-{i}"))

    await asyncio.gather(*(run(i) for i in range(32)))
    for i in range(32):
        state = await graph.aget_state(thread(f"conc-{i}"))
        assert state.values["total"] == 5
        assert state.values["log"] == [f"step{k}" for k in range(5)]


class RoundTripCounter:
    """Counts the Postgres round trips a saver makes (a Transaction is one), and
    its Redis ones apart."""

    def __init__(self, saver: ColosseumSaver) -> None:
        self.requests: list[object] = []
        self.cache_requests: list[object] = []
        if saver._store.hot is not None:
            # Time stands still for the incarnation re-check (HotHead.recheck_due):
            # one due mid-test would be a round trip the test did not make.
            saver._store.hot.clock = lambda: 0.0
        original = saver._perform

        def counting(request):
            # A request sent ahead (a list's next page) is one round trip, made
            # when it is sent; collecting its reply is none.
            if isinstance(request, Ahead):
                self.requests.append(request.request)
            elif not isinstance(request, Collect):
                is_cache = isinstance(request, (CacheCall, CacheDrop))
                (self.cache_requests if is_cache else self.requests).append(request)
            return original(request)

        saver._perform = counting  # type: ignore[method-assign]

    def reset(self) -> None:
        self.requests.clear()
        self.cache_requests.clear()


def test_round_trips_are_bounded(saver: ColosseumSaver) -> None:
    counter = RoundTripCounter(saver)
    graph = counter_graph(saver)
    for _ in range(30):
        graph.invoke({"total": 0, "log": []}, thread("long"))
    head = saver.get_tuple(thread("long"))
    assert head is not None

    counter.reset()
    saver.get_tuple(thread("long"))
    # With the hot head, the latest checkpoint comes from Redis alone.
    assert len(counter.requests) == (0 if saver.cache else 1)
    assert len(counter.cache_requests) == (1 if saver.cache else 0)

    counter.reset()
    saver.get_tuple(head.parent_config)
    assert len(counter.requests) == 1

    counter.reset()
    history = saver.get_delta_channel_history(config=thread("long"), channels=["total", "log"])
    assert len(counter.requests) == 1
    assert history["total"]["seed"] == 29  # the parent's stored value ends the walk

    counter.reset()
    stored = saver.put(
        {
            "configurable": {
                "thread_id": "long",
                "checkpoint_ns": "",
                "checkpoint_id": head.config["configurable"]["checkpoint_id"],
            }
        },
        {
            **empty_checkpoint(),
            "channel_values": {"a": 1, "b": 2},
            "channel_versions": {"a": "1", "b": "1"},
        },
        {"source": "update", "step": 99},
        {"a": "1", "b": "1"},
    )
    # One round trip: the thread's write lock and the PUT, pipelined in one
    # transaction (deletes of the thread are ordered against it).
    assert len(counter.requests) == 1 and isinstance(counter.requests[0], Transaction)
    counter.reset()
    saver.put_writes(stored, [("a", 1), ("b", 2), ("__error__", "boom")], "task-1", "path")
    assert len(counter.requests) == 1
    # ...and each write updates the head after its commit, in one script call.
    assert len(counter.cache_requests) == (1 if saver.cache else 0)

    # list pages: a 91-checkpoint thread in pages of 100 is one page, two round
    # trips (the checkpoints, then every value row they need, each once).
    counter.reset()
    assert len(list(saver.list(thread("long")))) == 91
    assert len(counter.requests) == 2


def test_list_streams_in_pages(pg_url: str) -> None:
    with ColosseumSaver.from_conn_string(pg_url, page_size=7) as saver:
        counter = RoundTripCounter(saver)
        graph = counter_graph(saver)
        for _ in range(10):
            graph.invoke({"total": 0, "log": []}, thread("paged"))
        counter.reset()
        listed = saver.list(thread("paged"))
        first = next(listed)
        assert len(counter.requests) == 2  # only the first page was fetched
        rest = list(listed)
        assert len(rest) + 1 == 30
        assert len(counter.requests) <= 2 * 5  # ceil(30 / 7) pages
        ids = [first.checkpoint["id"]] + [t.checkpoint["id"] for t in rest]
        assert ids == sorted(ids, reverse=True)
        counter.reset()
        assert len(list(saver.list(thread("paged"), limit=10))) == 10
        assert len(counter.requests) <= 4


def test_list_pages_grow_to_a_bound(pg_url: str) -> None:
    """A history read to the end: pages of 10, 20, 40, 50, 50... (page_size=10,
    bound 50 here): few round trips, and never more than a bounded page in memory."""
    from langgraph_colosseum._core import store

    with ColosseumSaver.from_conn_string(pg_url, page_size=10) as saver:
        config = {"configurable": {"thread_id": "growing-pages", "checkpoint_ns": ""}}
        version = None
        for i in range(215):
            version = saver.get_next_version(version, None)
            checkpoint = empty_checkpoint()
            checkpoint["id"] = f"{i:08}"
            checkpoint["channel_values"] = {"counter": i}
            checkpoint["channel_versions"] = {"counter": version}
            config = saver.put(config, checkpoint, {}, {"counter": version})
        counter = RoundTripCounter(saver)
        original = store.MAX_PAGE_SIZE
        store.MAX_PAGE_SIZE = 50
        try:
            listed = saver.list(thread("growing-pages"))
            first = next(listed)
            assert [r.params["page_size"] for r in counter.requests[:1]] == [10]
            rest = list(listed)
        finally:
            store.MAX_PAGE_SIZE = original
        queries = [q for r in counter.requests for q in getattr(r, "queries", (r,))]
        pages = [q.params["page_size"] for q in queries if "page_size" in q.params]
        assert pages == [10, 20, 40, 50, 50, 50]  # 10 + 20 + 40 + 3 * 50 = 220 >= 215
        # The first two pages and their values are fetched one by one; from
        # the second page's values on, the next page rides in their pipeline
        # (from the third page's values on, sent before the page before is emitted).
        assert [len(getattr(r, "queries", (r,))) for r in counter.requests] == [
            1, 1, 1, 2, 2, 2, 2, 1,
        ]  # fmt: skip
        assert [first.checkpoint["id"]] + [t.checkpoint["id"] for t in rest] == [
            f"{i:08}" for i in reversed(range(215))
        ]
        assert [t.checkpoint["channel_values"]["counter"] for t in rest[:3]] == [213, 212, 211]
        saver.delete_thread("growing-pages")


@pytest.mark.parametrize("asynchronous", [False, True])
def test_list_with_pages_fetched_ahead_agrees_with_memory(pg_url: str, asynchronous: bool) -> None:
    """Pages of 3 with the next page fetched beside the values: every limit,
    `before` and a filter compared in Python (a dict whose key order is
    recorded: some rows of a page fetched ahead are then dropped) list what
    InMemorySaver lists."""
    from langgraph.checkpoint.memory import InMemorySaver

    memory = InMemorySaver()
    with ColosseumSaver.from_conn_string(pg_url, page_size=3) as saver:
        tid = f"ahead-{asynchronous}"
        saver.delete_thread(tid)
        for target in (memory, saver):
            config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            version = None
            for i in range(23):
                version = target.get_next_version(version, None)
                checkpoint = empty_checkpoint()
                checkpoint["id"] = f"{i:08}"
                checkpoint["channel_values"] = {"counter": i, "log": list(range(i % 5))}
                checkpoint["channel_versions"] = {"counter": version, "log": version}
                tag = {"b": i % 3 == 0, "a": 0}  # not jsonb's key order: recorded
                config = target.put(config, checkpoint, {"tag": tag, "i": i}, {"counter": version})

        def listed(target, **kwargs):
            if asynchronous and target is saver:

                async def collect():
                    return [t async for t in saver.alist(thread(tid), **kwargs)]

                found = asyncio.run(collect())
            else:
                found = list(target.list(thread(tid), **kwargs))
            return [(t.checkpoint["id"], t.checkpoint["channel_values"], t.metadata) for t in found]

        before = {"configurable": {"thread_id": tid, "checkpoint_id": f"{17:08}"}}
        cases = [{}, {"before": before}, {"filter": {"tag": {"b": True, "a": 0}}}]
        for kwargs in cases:
            for limit in (None, 0, 1, 2, 3, 4, 5, 8, 9, 10, 22, 23, 30):
                expected = listed(memory, **kwargs, limit=limit)
                assert listed(saver, **kwargs, limit=limit) == expected, (kwargs, limit)
        saver.delete_thread(tid)


def test_bad_configs_are_named(saver: ColosseumSaver) -> None:
    with pytest.raises(InvalidConfigError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(InvalidConfigError, match="checkpoint_id"):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("a", 1)], "task")


def test_transaction_is_one_request(saver: ColosseumSaver) -> None:
    # The first statement of a saver with a hot head also learns the database's
    # identity (once per saver); what is counted here is the delete itself.
    saver.delete_thread("warm-up")
    counter = RoundTripCounter(saver)
    saver.delete_thread("nothing-here")
    assert len(counter.requests) == 1 and isinstance(counter.requests[0], Transaction)


def _transaction_checks(run, lean: bool) -> None:
    """What a Transaction promises, on the driver `run` (a saver's `_run` / `_arun`):
    its statements commit or roll back together, and a transaction-scoped lock
    one of them takes holds for the rest (the thread write lock relies on it).
    `lean`: the statements take the lean path of _driver.py (named parameters,
    prepared), as the hot ones do; else psycopg's cursors (no parameters)."""
    from langgraph_colosseum._core.io import Query, single

    def query(sql: str, fetch: bool = True) -> Query:
        return Query(sql, {} if lean else None, fetch=fetch, prepare=lean)

    held = run(
        single(
            Transaction(
                (
                    query("SELECT pg_advisory_xact_lock_shared(7401, 1)", fetch=False),
                    query(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND pid = pg_backend_pid() AND classid = 7401"
                    ),
                )
            )
        )
    )
    assert held[1] == [(1,)]
    run(single(Query("DROP TABLE IF EXISTS tx_probe", fetch=False)))
    run(single(Query("CREATE TABLE tx_probe (n int)", fetch=False)))
    with pytest.raises(psycopg.errors.DivisionByZero):
        run(
            single(
                Transaction(
                    (
                        query("INSERT INTO tx_probe VALUES (1)", fetch=False),
                        query("SELECT 1 / 0"),
                    )
                )
            )
        )
    assert run(single(query("SELECT count(*) FROM tx_probe"))) == [(0,)]
    run(single(Query("DROP TABLE tx_probe", fetch=False)))
    # The lock went with the transaction.
    assert run(
        single(
            query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 7401")
        )
    ) == [(0,)]
    prepared = run(
        single(
            query("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE '\\_colosseum\\_%%'")
        )
    )
    assert (prepared[0][0] > 0) == lean  # the lean path was the one taken


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "cursor"])
def test_a_transaction_is_one_transaction(pg_url: str, lean: bool) -> None:
    with ColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        _transaction_checks(saver._run, lean)
    asyncio.run(_async_transaction_checks(pg_url, lean))


async def _async_transaction_checks(pg_url: str, lean: bool) -> None:
    async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        loop = asyncio.get_running_loop()
        # The blocking twin sends each operation to the saver's loop from a thread.
        await loop.run_in_executor(None, _transaction_checks, saver._run, lean)


@pytest.mark.parametrize("coalesced", [False, True], ids=["alone", "coalesced"])
async def test_a_cancelled_request_leaves_its_connection_usable(
    pg_url: str, coalesced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task cancelled while its request waits for the server (here, for an
    advisory lock another session holds) does not leave the pool's only
    connection in pipeline mode with a reply unread: the next request on it
    gets its own answer. Alone, psycopg cancels the statement on the server;
    coalesced (a hot request, _coalesce.py), the round trip it shares is read
    to its end once the lock is let go."""
    from langgraph_colosseum import aio
    from langgraph_colosseum._core.io import Query, single

    monkeypatch.setattr(aio, "COALESCE", coalesced)  # on by default (aio.py)
    holder = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    await holder.execute("SELECT pg_advisory_lock(7402)")
    try:
        async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
            blocked = Query("SELECT pg_advisory_xact_lock(7402)", {}, prepare=coalesced)
            waiting = asyncio.ensure_future(saver._arun(single(blocked)))
            while not (
                await (
                    await holder.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND objid = 7402 AND NOT granted"
                    )
                ).fetchone()
            )[0]:
                await asyncio.sleep(0.01)  # polling for the barrier, not timing the test
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            if coalesced:
                await holder.execute("SELECT pg_advisory_unlock(7402)")
            hot = Query("SELECT %(n)s::int", {"n": 7}, prepare=True)
            assert await saver._arun(single(hot)) == [(7,)]
            assert await saver._arun(single(Query("SELECT %(n)s::int", {"n": 8}))) == [(8,)]
            assert await saver._arun(single(Query("SELECT 9", None))) == [(9,)]
    finally:
        await holder.close()


async def test_coalesced_requests_are_each_their_own_transaction(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hot requests sent together share a connection and a round trip
    (_coalesce.py), each with its own Sync: one that fails rolls back alone,
    the others commit, and each caller gets its own answer."""
    from langgraph_colosseum import _driver, aio
    from langgraph_colosseum._core.io import Query, single

    monkeypatch.setattr(aio, "COALESCE", True)  # the default (aio.py), whatever it becomes

    def hot(*queries: Query) -> Transaction:
        return Transaction(tuple(q._replace(prepare=True) for q in queries))

    sizes: list[int] = []
    batch = _driver.alean_batch

    async def counted(conn, requests):  # a hook: how many requests each round trip carried
        sizes.append(len(requests))
        return await batch(conn, requests)

    _driver.alean_batch = counted
    try:
        async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
            await saver._arun(single(Query("DROP TABLE IF EXISTS coalesce_probe", fetch=False)))
            await saver._arun(single(Query("CREATE TABLE coalesce_probe (n int)", fetch=False)))

            def insert(n: int) -> Query:
                return Query("INSERT INTO coalesce_probe VALUES (%(n)s)", {"n": n}, fetch=False)

            def count(n: int) -> Query:
                return Query("SELECT count(*) FROM coalesce_probe WHERE n = %(n)s", {"n": n})

            outcomes = await asyncio.gather(
                saver._arun(single(hot(insert(1), count(1)))),
                saver._arun(single(hot(insert(2), Query("SELECT 1 / %(z)s", {"z": 0})))),
                saver._arun(single(hot(insert(3), count(3)))),
                return_exceptions=True,
            )
            assert sizes == [3]
            assert outcomes[0] == [None, [(1,)]]
            assert isinstance(outcomes[1], psycopg.errors.DivisionByZero)
            assert outcomes[2] == [None, [(1,)]]
            stored = await saver._arun(
                single(Query("SELECT array_agg(n ORDER BY n) FROM coalesce_probe"))
            )
            assert stored == [([1, 3],)]
            await saver._arun(single(Query("DROP TABLE coalesce_probe", fetch=False)))
    finally:
        _driver.alean_batch = batch


def test_deallocated_statements_are_prepared_again(pg_url: str) -> None:
    """DEALLOCATE ALL on a pooled connection (a reset hook, a proxy) drops the
    statements the lean path prepared there; the next put prepares them again
    instead of failing."""
    with ColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        first = saver.put(thread("deallocated"), empty_checkpoint(), {"step": -1}, {})
        with saver.conn.connection() as conn:
            conn.execute("DEALLOCATE ALL")
        second = saver.put(first, empty_checkpoint(), {"step": 0}, {})
        assert saver.get_tuple(thread("deallocated")).config == second
        saver.delete_thread("deallocated")


def test_a_put_chosen_as_a_deadlock_victim_is_rerun(pg_url: str) -> None:
    """README: "Transactions that deadlock ... are rerun automatically". A
    session holds the thread's registry row; the saver's put takes its
    thread lock and waits for that row; the session then asks for the thread
    lock. Postgres breaks the cycle by aborting the put (the session waits
    for a deadlock check 60 times longer), and the put, rerun, is stored."""
    from langgraph_colosseum._core.sql import THREAD_LOCK_CLASS

    tid = "deadlocked"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        first = saver.put(thread(tid), empty_checkpoint(), {"step": -1}, {})
        holder = psycopg.connect(pg_url)
        holder.execute("SET LOCAL deadlock_timeout = '60s'")
        holder.execute("UPDATE colosseum_threads SET status = status WHERE thread_id = %s", [tid])
        outcome: list = []

        def put() -> None:
            try:
                outcome.append(saver.put(first, empty_checkpoint(), {"step": 0}, {}))
            except Exception as exc:  # what the caller would see
                outcome.append(exc)

        writer = threading.Thread(target=put)
        writer.start()
        with psycopg.connect(pg_url, autocommit=True) as watch:
            while not watch.execute(  # the put holds the thread lock and waits for the row
                "SELECT count(*) FROM pg_locks l JOIN pg_locks r ON r.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.classid::bigint = %s AND l.granted "
                "AND NOT r.granted AND l.pid <> %s",
                [THREAD_LOCK_CLASS, holder.info.backend_pid],
            ).fetchone()[0]:
                writer.join(0.01)
        holder.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [THREAD_LOCK_CLASS, tid]
        )  # returns once Postgres aborted the put's transaction
        holder.commit()
        holder.close()
        writer.join(60)
        assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
        stored = saver.get_tuple(thread(tid))
        assert stored.config == outcome[0] and stored.metadata["step"] == 0


def test_a_connection_the_lean_path_used_is_freed(pg_url: str) -> None:
    """What the lean path keeps per connection (its Transformer, which refers
    to the connection) goes with the connection: a pool replacing connections
    does not accumulate them."""
    import gc
    import weakref

    from langgraph_colosseum import _driver
    from langgraph_colosseum._core.io import Query

    conn = psycopg.connect(pg_url, autocommit=True)
    assert _driver.perform(conn, Query("SELECT %(n)s::int", {"n": 1}, prepare=True)) == [(1,)]
    freed = weakref.ref(conn)
    conn.close()
    del conn
    gc.collect()
    assert freed() is None


async def test_a_bad_put_writes_among_concurrent_puts_fails_alone(pg_url: str) -> None:
    """A put_writes whose task_id holds a NUL byte, sent while puts of other
    threads are under way on a one-connection pool, fails alone: the other
    callers succeed and their checkpoints are stored (a review's finding:
    coalesced into one round trip, its parameter error failed them all)."""
    async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        conf = await saver.aput(thread("nul-writer"), empty_checkpoint(), {"step": -1}, {})
        cfgs = [thread(f"nul-neighbour-{i}") for i in range(4)]
        outcomes = await asyncio.gather(
            saver.aput(cfgs[0], empty_checkpoint(), {"step": -1}, {}),
            saver.aput(cfgs[1], empty_checkpoint(), {"step": -1}, {}),
            saver.aput_writes(conf, [("ch", 1)], "ta\x00sk"),
            saver.aput(cfgs[2], empty_checkpoint(), {"step": -1}, {}),
            saver.aput(cfgs[3], empty_checkpoint(), {"step": -1}, {}),
            return_exceptions=True,
        )
        assert isinstance(outcomes[2], InvalidConfigError)
        assert "task_id" in str(outcomes[2]) and "nul-writer" in str(outcomes[2])
        assert not any(isinstance(o, BaseException) for i, o in enumerate(outcomes) if i != 2)
        for cfg in cfgs:
            assert await saver.aget_tuple(cfg) is not None


@pytest.mark.parametrize("field", ["task_id", "task_path"])
async def test_a_nul_in_a_task_id_or_path_is_refused_before_any_io(pg_url: str, field: str) -> None:
    """put_writes refuses a NUL in task_id or task_path with an error of ours
    naming the thread and the field, sync and async, and stores nothing."""
    bad = {"task_id": "t", "task_path": "p", field: "a\x00b"}
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        conf = saver.put(thread("nul-task-sync"), empty_checkpoint(), {"step": -1}, {})
        with pytest.raises(InvalidConfigError, match=f"nul-task-sync.*{field}"):
            saver.put_writes(conf, [("ch", 1)], bad["task_id"], bad["task_path"])
        assert saver.get_tuple(conf).pending_writes == []
    async with AsyncColosseumSaver.from_conn_string(pg_url) as asaver:
        conf = await asaver.aput(thread("nul-task-async"), empty_checkpoint(), {"step": -1}, {})
        with pytest.raises(InvalidConfigError, match=f"nul-task-async.*{field}"):
            await asaver.aput_writes(conf, [("ch", 1)], bad["task_id"], bad["task_path"])
        assert (await asaver.aget_tuple(conf)).pending_writes == []
