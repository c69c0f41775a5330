"""A long `list` reads the next page while the caller takes this one's items.

From its third page on, `store.list` sends the next page's value rows and the
rows of the page after it ahead (`io.Ahead`), and emits the page it has
meanwhile. What a caller relies on, checked here: every page reads as
InMemorySaver's history, deltas and all, however the pages fall (small pages
here: every history spans many); a caller that stops early leaves the pool as
it was; a list inside a list on a pool of two never waits for itself; a page
whose connection is lost while it is read ahead is read again.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core import store
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


def fill(saver: ColosseumSaver, thread_id: str, count: int) -> dict:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    version = None
    for i in range(count):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"{i:08}"
        checkpoint["channel_values"] = {"counter": i}
        checkpoint["channel_versions"] = {"counter": version}
        config = saver.put(config, checkpoint, {"step": i}, {"counter": version})
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


def pool_is_whole(saver: ColosseumSaver) -> bool:
    stats = saver.conn.get_stats()
    return stats["pool_available"] == stats["pool_size"]


def test_a_caller_that_stops_early_leaves_the_pool_whole(paged: ColosseumSaver) -> None:
    thread = fill(paged, "ahead-stops", 40)
    for taken in (1, 3, 6, 9, 15):
        items = paged.list(thread)
        assert ids(next(items) for _ in range(taken)) == [
            f"{i:08}" for i in reversed(range(40 - taken, 40))
        ]
        del items
        gc.collect()
        assert pool_is_whole(paged)
    assert len(ids(paged.list(thread))) == 40  # and every connection still works


def test_a_list_inside_a_list_on_a_pool_of_two_does_not_wait_for_itself(
    small_pages: None, pg_url: str
) -> None:
    """A page read ahead keeps its connection while the caller takes items; the
    caller may ask for more (here a list, and a read per item of it), which
    needs one: a page is read ahead only while another connection would be left."""
    with ColosseumSaver.from_conn_string(
        pg_url, min_size=0, max_size=2, timeout=3, page_size=PAGE_SIZE
    ) as saver:
        outer, inner = fill(saver, "ahead-outer", 12), fill(saver, "ahead-inner", 12)
        seen = []
        for item in saver.list(outer):
            read = [saver.get_tuple(outer) is not None for _ in saver.list(inner)]
            seen.append((item.checkpoint["id"], len(read), all(read)))
        assert seen == [(f"{i:08}", 12, True) for i in reversed(range(12))]


def test_a_page_whose_connection_is_lost_while_read_ahead_is_read_again(
    paged: ColosseumSaver, pg_url: str
) -> None:
    thread = fill(paged, "ahead-lost", 30)
    send_ahead = paged._send_ahead
    killed = []

    def and_kill(request: Any) -> Any:
        lent = send_ahead(request)
        if lent is not None:
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (lent.sent.conn.info.backend_pid,))
            killed.append(lent.sent.conn.info.backend_pid)
        return lent

    paged._send_ahead = and_kill  # type: ignore[method-assign]
    items = list(paged.list(thread))
    assert killed
    assert ids(items) == [f"{i:08}" for i in reversed(range(30))]
    assert [item.checkpoint["channel_values"]["counter"] for item in items] == list(
        reversed(range(30))
    )


async def afill(saver: AsyncColosseumSaver, thread_id: str, count: int) -> dict:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    version = None
    for i in range(count):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"{i:08}"
        checkpoint["channel_values"] = {"counter": i}
        checkpoint["channel_versions"] = {"counter": version}
        config = await saver.aput(config, checkpoint, {"step": i}, {"counter": version})
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
            assert pool_is_whole(saver)
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
    small_pages: None, pg_url: str
) -> None:
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, pool_size=4, page_size=PAGE_SIZE
    ) as saver:
        thread = await afill(saver, "ahead-async-lost", 30)
        send_ahead = saver._send_ahead
        killed = []

        async def and_kill(request: Any) -> Any:
            lent = await send_ahead(request)
            if lent is not None:
                pid = lent.sent.conn.info.backend_pid
                with psycopg.connect(pg_url, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                killed.append(pid)
            return lent

        saver._send_ahead = and_kill  # type: ignore[method-assign]
        items = [item async for item in saver.alist(thread)]
        assert killed
        assert ids(items) == [f"{i:08}" for i in reversed(range(30))]


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
