"""A long `list` reads the next page while the caller takes this one's items.

From its third page on, `store.list` sends the next page's value rows and the
rows of the page after it ahead (`io.Ahead`), and emits the page it has
meanwhile; the driver reads the reply apart from the caller (a thread, a task)
and gives the connection back. What a caller relies on, checked here: every
page reads as InMemorySaver's history, deltas and all, however the pages fall
(small pages here: every history spans many); a caller that pauses or stops
holds no connection and keeps nothing open on the server; a list inside a
list on a pool of two never waits for itself; a page whose connection is lost
while it is read ahead is read again; a cancelled async list gives back what
it took; telemetry counts the pages read ahead.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum import aio as aio_module
from langgraph_colosseum import saver as saver_module
from langgraph_colosseum._core import store
from langgraph_colosseum._driver import SentAhead, asend_ahead, send_ahead
from tests.conftest import truncate
from tests.integration.graphs import chat_graph, delta_graph, linear_graph
from tests.integration.test_differential import (
    chat_scenario,
    delta_scenario,
    differential_async,
    differential_sync,
    time_travel_scenario,
)

# Pages of 2, growing to 3: a chat scenario's history (~20 checkpoints) spans
# eight pages, most of them read ahead.
PAGE_SIZE = 2
MAX_PAGE = 3


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch, pg_url: str) -> None:
    truncate(pg_url)
    monkeypatch.setattr(store, "MAX_PAGE_SIZE", MAX_PAGE)


@pytest.fixture
def paged(small_pages: None, pg_url: str) -> Iterator[ColosseumSaver]:
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4, page_size=PAGE_SIZE) as saver:
        yield saver


@pytest.mark.parametrize(
    "scenario, builder",
    [
        (chat_scenario, chat_graph),
        (delta_scenario, delta_graph),
        (time_travel_scenario, linear_graph),
    ],
    ids=["chat", "delta", "time-travel"],
)
def test_every_page_reads_as_inmemorysaver_history(
    paged: ColosseumSaver, scenario: Any, builder: Any
) -> None:
    differential_sync(scenario, builder, paged, f"ahead-{builder.__name__}")


@pytest.mark.parametrize(
    "scenario, builder",
    [(chat_scenario, chat_graph), (delta_scenario, delta_graph)],
    ids=["chat", "delta"],
)
async def test_every_page_reads_alike_through_asyncio(
    small_pages: None, pg_url: str, scenario: Any, builder: Any
) -> None:
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, pool_size=4, page_size=PAGE_SIZE
    ) as saver:
        await differential_async(scenario, builder, saver, f"ahead-async-{builder.__name__}")


def counting(saver: Any, count: int) -> Iterator[tuple[dict, dict, dict]]:
    """The puts of a thread of `count` checkpoints, each one int channel."""
    version = None
    for i in range(count):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"{i:08}"
        checkpoint["channel_values"] = {"counter": i}
        checkpoint["channel_versions"] = {"counter": version}
        yield checkpoint, {"step": i}, {"counter": version}


def fill(saver: ColosseumSaver, thread_id: str, count: int) -> dict:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for checkpoint, metadata, versions in counting(saver, count):
        config = saver.put(config, checkpoint, metadata, versions)
    return {"configurable": {"thread_id": thread_id}}


def ids(items: Any) -> list[str]:
    return [item.checkpoint["id"] for item in items]


def test_limits_and_filters_read_ahead_only_what_they_need(paged: ColosseumSaver) -> None:
    thread = fill(paged, "ahead-limits", 40)
    newest = [f"{i:08}" for i in reversed(range(40))]
    for limit in (1, 2, 3, 5, 8, 13, 39, 40, 41):
        assert ids(paged.list(thread, limit=limit)) == newest[:limit]
    before = {"configurable": {"thread_id": "ahead-limits", "checkpoint_id": f"{30:08}"}}
    assert ids(paged.list(thread, before=before, limit=7)) == newest[10:17]
    assert ids(paged.list(thread, filter={"step": 3})) == [f"{3:08}"]


def pool_is_whole(saver: Any, within: float = 5.0) -> bool:
    """Every connection of the saver's pool idle (a reply read ahead may still
    be on its way back: it is given back as soon as it is read)."""
    deadline = time.monotonic() + within
    while True:
        stats = saver.conn.get_stats()
        if stats["pool_available"] == stats["pool_size"]:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def test_a_caller_that_stops_early_leaves_the_pool_whole(paged: ColosseumSaver) -> None:
    thread = fill(paged, "ahead-stops", 40)
    for taken in (1, 3, 6, 9, 15):
        items = paged.list(thread)
        assert ids(next(items) for _ in range(taken)) == [
            f"{i:08}" for i in reversed(range(40 - taken, 40))
        ]
        del items
        assert pool_is_whole(paged)
    assert len(ids(paged.list(thread))) == 40  # and every connection still works


def test_a_list_inside_a_list_on_a_pool_of_two_does_not_wait_for_itself(
    small_pages: None, pg_url: str
) -> None:
    """A page read ahead is read apart from the caller, whose own requests (here
    a list, and a read per item of it) wait at most for that read."""
    with ColosseumSaver.from_conn_string(
        pg_url, min_size=0, max_size=2, timeout=3, page_size=PAGE_SIZE
    ) as saver:
        outer, inner = fill(saver, "ahead-outer", 12), fill(saver, "ahead-inner", 12)
        seen = []
        for item in saver.list(outer):
            read = [saver.get_tuple(outer) is not None for _ in saver.list(inner)]
            seen.append((item.checkpoint["id"], len(read), all(read)))
        assert seen == [(f"{i:08}", 12, True) for i in reversed(range(12))]


@contextlib.contextmanager
def values_locked(pg_url: str) -> Iterator[None]:
    """The value rows' table locked by another transaction: a page's values
    asked for meanwhile wait on the server, with no reply yet."""
    with psycopg.connect(pg_url) as holder:
        holder.execute("LOCK TABLE colosseum_channel_values IN ACCESS EXCLUSIVE MODE")
        yield
        holder.rollback()


def test_a_page_whose_connection_is_lost_while_read_ahead_is_read_again(
    paged: ColosseumSaver, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend is killed while the page's statement waits on a lock, so
    the connection is lost before any of its reply was sent."""
    thread = fill(paged, "ahead-lost", 30)
    killed = []

    def send_and_kill(conn: Any, request: Any) -> Any:
        with values_locked(pg_url):
            sent = send_ahead(conn, request)
            if sent is not None:
                with psycopg.connect(pg_url, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
                killed.append(conn.info.backend_pid)
        return sent

    monkeypatch.setattr(saver_module, "send_ahead", send_and_kill)
    items = list(paged.list(thread))
    assert killed
    assert ids(items) == [f"{i:08}" for i in reversed(range(30))]
    assert [item.checkpoint["channel_values"]["counter"] for item in items] == list(
        reversed(range(30))
    )
    assert pool_is_whole(paged)


def test_a_saver_on_one_connection_reads_each_page_when_it_is_needed(
    small_pages: None, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is sent ahead on a saver's only connection: the caller may use
    the saver between items, and would wait for it."""
    sent: list[Any] = []
    monkeypatch.setattr(saver_module, "send_ahead", lambda *args: sent.append(args))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = ColosseumSaver(conn, page_size=PAGE_SIZE)
        thread = fill(saver, "ahead-one-connection", 30)
        seen = [
            (item.checkpoint["id"], saver.get_tuple(thread) is not None)
            for item in saver.list(thread)
        ]
    assert seen == [(f"{i:08}", True) for i in reversed(range(30))]
    assert sent == []


def test_a_page_is_read_at_once_when_no_thread_can_start_to_read_it(
    paged: ColosseumSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interpreter shutting down starts no thread: the reply sent ahead is
    read where it was sent, and its connection goes back."""
    thread = fill(paged, "ahead-no-thread", 30)

    class NoThread(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(saver_module.threading, "Thread", NoThread)
    assert ids(paged.list(thread)) == [f"{i:08}" for i in reversed(range(30))]
    assert pool_is_whole(paged)


def child_says(script: str, *args: str) -> str:
    """What a Python child running `script` with `args` printed; it must end, well, within 60 s."""
    child = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    return child.stdout.strip()


# A child process: lists until a page is sent ahead while its values are
# locked (by a connection of its own, so the lock lasts until it exits), then
# stops, closes its saver and returns from its main thread.
_STUCK_CHILD = """
import sys
import psycopg
from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum import saver as saver_module
from langgraph_colosseum._core import store

url, thread = sys.argv[1], {"configurable": {"thread_id": sys.argv[2]}}
store.MAX_PAGE_SIZE = 3
holder = psycopg.connect(url)
send_ahead = saver_module.send_ahead

def locked_then_sent(conn, request):
    holder.execute("LOCK TABLE colosseum_channel_values IN ACCESS EXCLUSIVE MODE")
    return send_ahead(conn, request)

saver_module.send_ahead = locked_then_sent
with ColosseumSaver.from_conn_string(url, pool_size=4, page_size=2) as saver:
    items = saver.list(thread)
    taken = [next(items) for _ in range(5)]  # into the third page: the fourth is ahead
    del items
print("returning", flush=True)
"""


def test_a_page_read_ahead_that_the_server_holds_up_does_not_keep_the_process(
    paged: ColosseumSaver, pg_url: str
) -> None:
    fill(paged, "ahead-stuck", 30)
    assert child_says(_STUCK_CHILD, pg_url, "ahead-stuck") == "returning"


# A child process: an AsyncColosseumSaver's blocking list taken from a worker
# thread, which fails after an item; the unfinished list is dropped on the
# loop's own thread, which must go on running.
_DROPPED_ON_THE_LOOP = """
import asyncio, sys
from langgraph_colosseum import AsyncColosseumSaver
from langgraph_colosseum._core import store

url, thread = sys.argv[1], {"configurable": {"thread_id": sys.argv[2]}}
store.MAX_PAGE_SIZE = 3

def worker(saver):
    items = saver.list(thread)
    next(items)
    raise ValueError("the worker failed after its first item")

async def main():
    async with AsyncColosseumSaver.from_conn_string(url, pool_size=4, page_size=2) as saver:
        await saver.aget_tuple(thread)
        try:
            await asyncio.to_thread(worker, saver)
        except ValueError:
            pass
        await asyncio.sleep(0.1)
        print("loop still runs", flush=True)

asyncio.run(main())
"""


def test_a_blocking_list_of_an_async_saver_dropped_on_its_loop_thread(
    paged: ColosseumSaver, pg_url: str
) -> None:
    fill(paged, "ahead-dropped-on-loop", 30)
    assert child_says(_DROPPED_ON_THE_LOOP, pg_url, "ahead-dropped-on-loop") == "loop still runs"


def test_a_list_interrupted_while_it_sends_ahead_gives_back_its_connection(
    paged: ColosseumSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = fill(paged, "ahead-interrupted", 30)

    def interrupted(conn: Any, request: Any) -> Any:
        raise KeyboardInterrupt  # Ctrl-C while the request goes out

    monkeypatch.setattr(saver_module, "send_ahead", interrupted)
    with pytest.raises(KeyboardInterrupt):
        list(paged.list(thread))
    assert pool_is_whole(paged)
    monkeypatch.undo()
    assert len(ids(paged.list(thread))) == 30


def test_a_paused_caller_holds_nothing_on_the_server(small_pages: None, pg_url: str) -> None:
    """Values large enough that a page's reply does not fit the sockets'
    buffers: read apart from the caller, the statement ends, its transaction
    with it, and DDL (a migration) is not kept waiting by a paused list."""
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4, page_size=PAGE_SIZE) as saver:
        config = {"configurable": {"thread_id": "ahead-paused", "checkpoint_ns": ""}}
        version = None
        for i in range(24):
            version = saver.get_next_version(version, None)
            checkpoint = empty_checkpoint()
            checkpoint["id"] = f"{i:08}"
            checkpoint["channel_values"] = {"big": f"{i}-" + "x" * 400_000}
            checkpoint["channel_versions"] = {"big": version}
            config = saver.put(config, checkpoint, {}, {"big": version})
        items = saver.list({"configurable": {"thread_id": "ahead-paused"}})
        taken = [next(items) for _ in range(MAX_PAGE + PAGE_SIZE + 1)]  # into page 3
        assert pool_is_whole(saver)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            busy = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND (state <> 'idle' OR xact_start IS NOT NULL)"
            ).fetchone()[0]
            assert busy == 0
            admin.execute("SET lock_timeout = '2s'")
            admin.execute("ALTER TABLE colosseum_channel_values ADD COLUMN paused_probe int")
            admin.execute("ALTER TABLE colosseum_channel_values DROP COLUMN paused_probe")
        rest = list(items)
        assert [int(t.checkpoint["channel_values"]["big"].split("-")[0]) for t in taken + rest] == (
            list(reversed(range(24)))
        )


async def afill(saver: AsyncColosseumSaver, thread_id: str, count: int) -> dict:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for checkpoint, metadata, versions in counting(saver, count):
        config = await saver.aput(config, checkpoint, metadata, versions)
    return {"configurable": {"thread_id": thread_id}}


async def test_an_async_caller_that_stops_early_leaves_the_pool_whole(
    small_pages: None, pg_url: str
) -> None:
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, pool_size=3, page_size=PAGE_SIZE
    ) as saver:
        thread = await afill(saver, "ahead-async-stops", 30)
        for taken in (4, 9):
            items = saver.alist(thread)
            got = [await items.__anext__() for _ in range(taken)]
            assert ids(got) == [f"{i:08}" for i in reversed(range(30 - taken, 30))]
            await items.aclose()
            assert await asyncio.to_thread(pool_is_whole, saver)
        assert len([item async for item in saver.alist(thread)]) == 30


async def test_an_async_list_inside_a_list_on_a_pool_of_two(small_pages: None, pg_url: str) -> None:
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, min_size=0, max_size=2, timeout=3, page_size=PAGE_SIZE
    ) as saver:
        outer = await afill(saver, "ahead-async-outer", 12)
        inner = await afill(saver, "ahead-async-inner", 12)
        seen = []
        async for item in saver.alist(outer):
            read = [await saver.aget_tuple(outer) is not None async for _ in saver.alist(inner)]
            seen.append((item.checkpoint["id"], len(read), all(read)))
        assert seen == [(f"{i:08}", 12, True) for i in reversed(range(12))]


async def test_an_async_page_whose_connection_is_lost_while_read_ahead_is_read_again(
    small_pages: None, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, pool_size=4, page_size=PAGE_SIZE
    ) as saver:
        thread = await afill(saver, "ahead-async-lost", 30)
        killed = []

        async def send_and_kill(conn: Any, request: Any) -> Any:
            with values_locked(pg_url):
                sent = await asend_ahead(conn, request)
                if sent is not None:
                    pid = conn.info.backend_pid
                    with psycopg.connect(pg_url, autocommit=True) as admin:
                        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    killed.append(pid)
            return sent

        monkeypatch.setattr(aio_module, "asend_ahead", send_and_kill)
        items = [item async for item in saver.alist(thread)]
        assert killed
        assert ids(items) == [f"{i:08}" for i in reversed(range(30))]


async def list_cancelled(
    saver: AsyncColosseumSaver, thread: dict, event: asyncio.Event, after: float = 0.0
) -> None:
    """An `alist` of `thread` taken to its end by a task, cancelled `after`
    seconds once `event` is set."""
    event.clear()

    async def take_all() -> None:
        async for _ in saver.alist(thread):
            pass

    task = asyncio.ensure_future(take_all())
    await event.wait()
    await asyncio.sleep(after)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_async_list_cancelled_while_it_sends_ahead_gives_back_its_connection(
    small_pages: None, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, min_size=1, max_size=3, timeout=3, page_size=PAGE_SIZE
    ) as saver:
        thread = await afill(saver, "ahead-async-cancelled", 30)
        sending = asyncio.Event()

        async def slow_send(conn: Any, request: Any) -> Any:
            sending.set()
            await asyncio.sleep(60)  # a large request waiting on its socket
            return await asend_ahead(conn, request)

        monkeypatch.setattr(aio_module, "asend_ahead", slow_send)
        for _ in range(3):
            await list_cancelled(saver, thread, sending)
            assert await asyncio.to_thread(pool_is_whole, saver)
        monkeypatch.undo()
        assert len([item async for item in saver.alist(thread)]) == 30


async def test_an_async_list_cancelled_while_it_waits_for_a_page_read_ahead(
    small_pages: None, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply is read to its end all the same, and its connection goes back
    clean: it is not closed for the caller's cancellation."""
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, min_size=2, max_size=3, page_size=PAGE_SIZE
    ) as saver:
        thread = await afill(saver, "ahead-async-collecting", 30)
        reading = asyncio.Event()
        read = SentAhead.aread

        async def slow_read(self: Any) -> Any:
            reading.set()
            await asyncio.sleep(0.3)  # a large reply still coming
            return await read(self)

        monkeypatch.setattr(SentAhead, "aread", slow_read)
        for _ in range(2):
            # the caller is at its Collect 0.05 s after the reply began to come
            await list_cancelled(saver, thread, reading, after=0.05)
            assert await asyncio.to_thread(pool_is_whole, saver)
        stats = saver.conn.get_stats()
        assert stats.get("returns_bad", 0) == 0 and stats.get("connections_lost", 0) == 0


def test_a_blocking_list_of_an_async_saver_stopped_early_gives_back_clean_connections(
    small_pages: None, pg_url: str
) -> None:
    """AsyncColosseumSaver.list from another thread, dropped after a few items
    while a page is read ahead: that reply is read on the saver's loop and its
    connection goes back clean (none closed)."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def make() -> tuple[AsyncColosseumSaver, Any]:
        context = AsyncColosseumSaver.from_conn_string(
            pg_url, min_size=2, max_size=3, page_size=PAGE_SIZE
        )
        saver = await context.__aenter__()
        await afill(saver, "ahead-blocking-async", 30)
        return saver, context

    saver, context = asyncio.run_coroutine_threadsafe(make(), loop).result()
    try:
        for _ in range(3):
            items = saver.list({"configurable": {"thread_id": "ahead-blocking-async"}})
            assert len([next(items) for _ in range(9)]) == 9
            del items
            assert pool_is_whole(saver)
        stats = saver.conn.get_stats()
        assert stats.get("returns_bad", 0) == 0 and stats.get("connections_lost", 0) == 0
    finally:
        asyncio.run_coroutine_threadsafe(context.__aexit__(None, None, None), loop).result()
        loop.call_soon_threadsafe(loop.stop)


def test_telemetry_counts_the_pages_read_ahead(paged: ColosseumSaver) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from langgraph_colosseum import telemetry
    from langgraph_colosseum._core import io

    thread = fill(paged, "ahead-telemetry", 40)
    requests = []
    perform = paged._perform

    def counting(request: Any) -> Any:
        if not isinstance(request, io.Collect):  # a Collect is its Ahead's reply
            requests.append(request)
        return perform(request)

    paged._perform = counting  # type: ignore[method-assign]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = io.observer
    assert telemetry.enable(tracer_provider=provider)
    try:
        assert len(ids(paged.list(thread))) == 40
    finally:
        io.observer = before
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("list")]
    assert span.attributes["colosseum.round_trips"] == len(requests)
    assert any(isinstance(r, io.Ahead) for r in requests)


def test_threads_listing_while_another_thread_writes(paged: ColosseumSaver) -> None:
    """Pages read ahead on one thread while another puts: each sees a consistent
    newest-first history of what was there when its pages were read."""
    thread = fill(paged, "ahead-busy", 20)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            fill(paged, "ahead-busy-other", 30)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    worker = threading.Thread(target=writer)
    worker.start()
    for _ in range(5):
        assert ids(paged.list(thread)) == [f"{i:08}" for i in reversed(range(20))]
    worker.join()
    assert not errors
