"""The telemetry hook on the sans-IO runners, without services: spans end however
an operation ends (returns, raises, its I/O fails, its stream is dropped), an
error names its thread only when thread ids are opted in, and the switches.

The graph-level figures (real Postgres and Redis) are in
tests/integration/test_telemetry.py.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from langgraph_colosseum import telemetry
from langgraph_colosseum._core import io
from langgraph_colosseum._core.io import Emit, Query
from langgraph_colosseum.errors import ThreadBusyError


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    before = io.observer
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    assert telemetry.enable(tracer_provider=provider, meter_provider=meters, thread_ids=False)
    try:
        yield exporter
    finally:
        io.observer = before


def rows(request: Any) -> list:
    return [("a",), ("b",)]


def fails(request: Any) -> list:
    raise ConnectionError("the server went away")


def acquire(thread_id: str) -> Any:
    yield Query("SELECT 1")
    raise ThreadBusyError(thread_id)


def listing(config: dict) -> Any:
    for _ in range(3):
        found = yield Query("SELECT 1", {"thread_id": config["configurable"]["thread_id"]})
        yield Emit(found)


def test_a_returning_operation_ends_its_span_with_its_figures(spans) -> None:
    assert io.run(single_query(), rows) == 2
    (span,) = spans.get_finished_spans()
    assert span.name == "single_query"
    assert span.attributes["db.response.returned_rows"] == 2
    assert span.attributes["colosseum.round_trips"] == 1
    assert span.attributes["colosseum.bytes.received"] == 2
    assert span.status.status_code is StatusCode.UNSET


def single_query() -> Any:
    found = yield Query("SELECT 1", {"key": "abc"})
    return len(found)


def test_an_error_names_its_type_and_its_thread_only_when_opted_in(spans) -> None:
    with pytest.raises(ThreadBusyError):
        io.run(acquire("secret-thread"), rows)
    (span,) = spans.get_finished_spans()
    assert span.attributes["error.type"] == "langgraph_colosseum.errors.ThreadBusyError"
    assert span.status.status_code is StatusCode.ERROR and not span.status.description
    assert not span.events and "secret-thread" not in repr(dict(span.attributes))

    io.observer.thread_ids = True
    spans.clear()
    with pytest.raises(ThreadBusyError):
        io.run(acquire("secret-thread"), rows)
    (span,) = spans.get_finished_spans()
    assert span.attributes["colosseum.thread_id"] == "secret-thread"
    assert "secret-thread" in span.status.description
    assert span.events[0].name == "exception"


def test_failed_io_ends_the_span_at_once(spans) -> None:
    with pytest.raises(ConnectionError):
        io.run(single_query(), fails)
    (span,) = spans.get_finished_spans()
    assert span.attributes["error.type"] == "ConnectionError"


def test_a_stream_left_unfinished_ends_its_span_when_dropped(spans) -> None:
    items = io.stream(listing({"configurable": {"thread_id": "t"}}), rows)
    assert next(items) == [("a",), ("b",)]
    assert not spans.get_finished_spans()
    del items
    gc.collect()
    (span,) = spans.get_finished_spans()
    assert span.name == "listing"
    assert span.attributes["colosseum.round_trips"] == 1
    assert "error.type" not in span.attributes


async def test_the_async_runners_are_observed_alike(spans) -> None:
    async def arows(request: Any) -> list:
        return rows(request)

    assert await io.arun(single_query(), arows) == 2
    assert [item async for item in io.astream(listing({"configurable": {"thread_id": "t"}}), arows)]
    assert [s.name for s in spans.get_finished_spans()] == ["single_query", "listing"]
    assert spans.get_finished_spans()[1].attributes["db.response.returned_rows"] == 6


def test_io_single_is_part_of_its_caller_and_gets_no_span(spans) -> None:
    io.run(io.single(Query("SELECT 1")), rows)
    assert not spans.get_finished_spans()


def test_the_switches(monkeypatch) -> None:
    before = io.observer
    try:
        monkeypatch.setenv("COLOSSEUM_OTEL", "off")
        io.observer = None
        telemetry._from_environment()
        assert io.observer is None and not telemetry.enabled()

        monkeypatch.delenv("COLOSSEUM_OTEL")
        monkeypatch.setenv("COLOSSEUM_OTEL_THREAD_IDS", "1")
        telemetry._from_environment()
        assert telemetry.enabled() and io.observer.thread_ids
        first = io.observer
        # Enabling again reuses the observer (its metric callbacks are registered once).
        assert telemetry.enable(thread_ids=False) and io.observer is first
        assert not first.thread_ids
        telemetry.disable()
        assert io.observer is None
    finally:
        io.observer = before
