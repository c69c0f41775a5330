"""OpenTelemetry: spans and metrics of a small graph run, read back through the
SDK's in-memory span exporter and metric reader, on Postgres alone and with the
Redis hot head; and nothing of OpenTelemetry loaded when it is not installed.

The graph touches every layer: the checkpointer (put, put_writes, get_tuple),
the Store (a node reads and writes memories) and the tool ledger (an
IdempotentToolNode call). What users rely on: one CLIENT span per operation
with the database conventions' attributes, a duration for each in the
histogram, hits and misses of the hot head that agree with the spans, and no
thread id anywhere unless they opted in.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.base import BaseStore
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from psycopg import conninfo

from langgraph_colosseum import (
    AsyncColosseumSaver,
    AsyncColosseumStore,
    ColosseumSaver,
    ColosseumStore,
    IdempotentToolNode,
    Retention,
    telemetry,
)
from langgraph_colosseum._core import io
from langgraph_colosseum.cache import async_client_from_url
from tests.conftest import cache_options, truncate

TOOL_RUNS: list[str] = []


@tool
def place_order(ticker: str) -> str:
    """Place an order (a side effect: counted)."""
    TOOL_RUNS.append(ticker)
    return f"ordered {ticker}"


def agent(state: MessagesState, *, store: BaseStore) -> dict:
    """First turn: call the tool and remember the ticker; then answer."""
    last = state["messages"][-1]
    if isinstance(last, HumanMessage):
        store.put(("desk",), "last", {"ticker": last.content})
        call = {"name": "place_order", "args": {"ticker": last.content}, "id": f"c-{last.id}"}
        return {"messages": [AIMessage("", tool_calls=[call], id=f"ai-{last.id}")]}
    remembered = store.get(("desk",), "last")
    return {"messages": [AIMessage(f"done: {remembered.value['ticker']}", id=f"done-{last.id}")]}


async def aagent(state: MessagesState, *, store: BaseStore) -> dict:
    last = state["messages"][-1]
    if isinstance(last, HumanMessage):
        await store.aput(("desk",), "last", {"ticker": last.content})
        call = {"name": "place_order", "args": {"ticker": last.content}, "id": f"c-{last.id}"}
        return {"messages": [AIMessage("", tool_calls=[call], id=f"ai-{last.id}")]}
    remembered = await store.aget(("desk",), "last")
    return {"messages": [AIMessage(f"done: {remembered.value['ticker']}", id=f"done-{last.id}")]}


def route(state: MessagesState) -> str:
    return "tools" if state["messages"][-1].tool_calls else END


def build(node: Callable) -> StateGraph:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", node)
    builder.add_node("tools", IdempotentToolNode([place_order]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


class Telemetry:
    """The SDK's in-memory exporter and reader, wired to our observer."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.providers = (tracer_provider, MeterProvider(metric_readers=[self.reader]))

    def enable(self, **options: Any) -> None:
        tracer_provider, meter_provider = self.providers
        assert telemetry.enable(
            tracer_provider=tracer_provider, meter_provider=meter_provider, **options
        )

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def points(self) -> dict[str, list[Any]]:
        """Metric name -> its data points (histograms, sums and gauges alike)."""
        found: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def total(self, name: str, **attributes: Any) -> float:
        return sum(
            point.value
            for point in self.points().get(name, [])
            if all(point.attributes.get(k) == v for k, v in attributes.items())
        )


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """In-memory telemetry for one test; the process's own observer comes back after."""
    before = io.observer
    recorded = Telemetry()
    recorded.enable()
    try:
        yield recorded
    finally:
        io.observer = before


def by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def check_run(otel: Telemetry, pg_url: str, thread_id: str, *, cached: bool) -> None:
    """What one small graph run (two turns and a get_state) must have emitted."""
    spans = otel.spans()
    named = by_name(spans)
    for name in (
        "put colosseum_checkpoints",
        "put_writes colosseum_checkpoints",
        "get_tuple colosseum_checkpoints",
        "batch colosseum_store_items",
        "execute_once colosseum_tool_calls",
    ):
        assert name in named, sorted(named)
    for span in spans:
        attributes = span.attributes or {}
        assert span.kind is SpanKind.CLIENT
        assert attributes["db.system.name"] == "postgresql"
        assert span.name.startswith(str(attributes["db.operation.name"]))
        assert "colosseum.thread_id" not in attributes
        # Nothing names the thread unless the user opted in, not even an error.
        assert thread_id not in json.dumps(dict(attributes), default=str), span.name
        assert not span.events
    # Where the database is, from the pool's connection string, without credentials.
    database = conninfo.conninfo_to_dict(pg_url)
    where = {
        "db.namespace": database.get("dbname"),
        "server.address": database.get("host"),
        "server.port": int(database["port"]) if database.get("port") else None,
    }
    for put in named["put colosseum_checkpoints"]:
        assert {key: put.attributes.get(key) for key in where} == where
    for put in named["put colosseum_checkpoints"]:
        assert put.attributes["colosseum.round_trips"] >= 1
        assert put.attributes["colosseum.bytes.sent"] > 0
    tool_call = named["execute_once colosseum_tool_calls"][0]
    assert tool_call.attributes["colosseum.layer"] == "tools"
    assert tool_call.attributes["db.response.returned_rows"] >= 1  # the claim's row
    store_batches = named["batch colosseum_store_items"]
    assert any(b.attributes["db.response.returned_rows"] >= 1 for b in store_batches)  # the get

    # The histogram has one duration per span, per operation.
    durations = {
        (p.attributes["db.operation.name"], p.attributes["colosseum.layer"]): p
        for p in otel.points()["db.client.operation.duration"]
    }
    for span in spans:
        assert "error.type" not in span.attributes
    for (operation, layer), point in durations.items():
        expected = [
            s
            for s in spans
            if s.attributes["db.operation.name"] == operation
            and s.attributes["colosseum.layer"] == layer
        ]
        assert point.count == len(expected), operation
        assert point.sum > 0

    # Hot-head hits and misses agree with the spans that read it.
    reads = [s for s in spans if "colosseum.cache.hit" in s.attributes]
    hits = sum(1 for s in reads if s.attributes["colosseum.cache.hit"])
    assert otel.total("colosseum.cache.lookups", **{"colosseum.cache.result": "hit"}) == hits
    assert otel.total("colosseum.cache.lookups") == len(reads)
    if cached:
        assert hits >= 1  # the get_state after the run is served by Redis
        ratio = otel.points()["colosseum.cache.hit_ratio"]
        assert ratio[0].value == pytest.approx(hits / len(reads))
    else:
        assert not reads
        assert "colosseum.cache.hit_ratio" not in otel.points()


@pytest.mark.parametrize("mode", ["postgres", "redis"])
def test_a_graph_run_emits_a_span_per_operation_and_the_metrics(
    pg_url: str, otel: Telemetry, mode: str
) -> None:
    truncate(pg_url)
    TOOL_RUNS.clear()
    with ColosseumSaver.from_conn_string(
        pg_url,
        pool_size=1,
        check_idle_after=None,  # the killed connection is met by a request, not a check
        retention=Retention(timedelta(days=1)),
        **cache_options(mode),
    ) as saver:
        store = ColosseumStore.from_saver(saver)
        store.setup()
        graph = build(agent).compile(checkpointer=saver, store=store)
        config = {"configurable": {"thread_id": f"otel-{mode}"}}
        graph.invoke({"messages": [HumanMessage("ACME", id="h1")]}, config)
        graph.invoke({"messages": [HumanMessage("INIT", id="h2")]}, config)
        assert graph.get_state(config).values["messages"][-1].content == "done: INIT"
        assert TOOL_RUNS == ["ACME", "INIT"]
        check_run(otel, pg_url, f"otel-{mode}", cached=mode == "redis")

        # A retry is counted on the operation that made it: the pool's one
        # connection is killed under it.
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        otel.exporter.clear()
        list(saver.list(config, limit=1))
        (listed,) = otel.spans()
        assert listed.name == "list colosseum_checkpoints"
        assert listed.attributes["colosseum.retries"] == 1
        assert otel.total("colosseum.retries", **{"colosseum.retry.reason": "connection_lost"})

        # The retention sweeper's progress: one expired thread swept.
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "UPDATE colosseum_threads SET expires_at = now() - interval '1 second' "
                "WHERE thread_id = %s",
                (f"otel-{mode}",),
            )
        assert saver.sweep() == 1
        assert otel.total("colosseum.sweeper.removed", **{"colosseum.sweeper": "retention"}) == 1
        assert otel.total("colosseum.sweeper.runs", **{"colosseum.sweeper": "retention"}) == 1

        # The Store's TTL sweeper counts its runs too (nothing has expired).
        assert store.sweep_ttl() == 0
        assert otel.total("colosseum.sweeper.runs", **{"colosseum.sweeper": "store_ttl"}) == 1

        # A run guard renews its lease every third of it while the run goes on.
        with saver.run_guard("guarded", lease=timedelta(seconds=0.3)):
            deadline = time.monotonic() + 10
            while not otel.total("colosseum.lease.renewals", **{"colosseum.lease": "run_guard"}):
                assert time.monotonic() < deadline, "no lease renewal in 10 s"
                time.sleep(0.05)

        # Opting in puts the thread id on the span.
        otel.enable(thread_ids=True)
        otel.exporter.clear()
        graph.get_state(config)
        (read,) = otel.spans()
        assert read.attributes["colosseum.thread_id"] == f"otel-{mode}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_the_async_saver_and_store_emit_the_same_and_the_breaker_state(
    pg_url: str, otel: Telemetry
) -> None:
    truncate(pg_url)
    TOOL_RUNS.clear()
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, pool_size=2, **cache_options("redis")
    ) as saver:
        store = AsyncColosseumStore.from_saver(saver)
        await store.setup()
        graph = build(aagent).compile(checkpointer=saver, store=store)
        config = {"configurable": {"thread_id": "otel-async"}}
        await graph.ainvoke({"messages": [HumanMessage("ACME", id="h1")]}, config)
        await graph.ainvoke({"messages": [HumanMessage("INIT", id="h2")]}, config)
        assert (await graph.aget_state(config)).values["messages"][-1].content == "done: INIT"
        assert TOOL_RUNS == ["ACME", "INIT"]
        check_run(otel, pg_url, "otel-async", cached=True)

    # A Redis that is not there opens the breaker: the state gauge says so,
    # the trip is counted, and the read is a miss served by Postgres.
    dead = async_client_from_url(f"redis://127.0.0.1:{free_port()}")
    async with AsyncColosseumSaver.from_conn_string(pg_url, pool_size=1) as base:
        saver = AsyncColosseumSaver(base.conn, cache=dead)
        otel.exporter.clear()
        assert (await saver.aget_tuple(config)) is not None
        (read,) = by_name(otel.spans())["get_tuple colosseum_checkpoints"]
        assert read.attributes["colosseum.cache.hit"] is False
        assert otel.total("colosseum.cache.breaker.open") >= 1
        assert otel.total("colosseum.cache.breaker.backoff") > 0
        assert otel.total("colosseum.cache.breaker.trips") == 1
    await dead.aclose()


# Run in a fresh interpreter in which opentelemetry cannot be imported, as
# without the extra: our package must import, run a graph and load none of it.
WITHOUT_OTEL = """
import sys

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOpenTelemetry())

from langgraph.graph import START, MessagesState, StateGraph
from langchain_core.messages import AIMessage
from langgraph_colosseum import ColosseumSaver, telemetry
from langgraph_colosseum._core import io

builder = StateGraph(MessagesState)
builder.add_node("echo", lambda state: {"messages": [AIMessage("hi")]})
builder.add_edge(START, "echo")
with ColosseumSaver.from_conn_string(sys.argv[1], pool_size=1) as saver:
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"messages": []}, {"configurable": {"thread_id": "no-otel"}})
    assert graph.get_state({"configurable": {"thread_id": "no-otel"}}).values["messages"]
assert io.observer is None and not telemetry.enable() and not telemetry.enabled()
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
assert not loaded, loaded
print("ok")
"""


def test_without_opentelemetry_nothing_of_it_is_imported(pg_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLOSSEUM_OTEL")}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, pg_url],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
