"""OpenTelemetry spans and metrics for every operation (the `otel` extra).

Only `telemetry.enable` imports this module, and only when opentelemetry-api is
installed: without it nothing here is loaded.

Every operation of every layer is a `_core` generator run by one of the four
runners of `_core/io.py`; `Observer` is the hook they call. It wraps the
operation and its `perform` in a `_Watch`, which times the operation and
counts what its requests did: round trips, rows, bytes, the hot head's hit or
miss, retries. The operation's name is its generator's name (`put`,
`get_tuple`, `batch`, `execute_once`) and its layer the `_core` module it
comes from, so nothing is decorated by hand and a new operation is observed
the day it is written.

Spans follow the database client conventions (kind CLIENT, `db.system.name`,
`db.operation.name`, `db.collection.name`, `db.response.returned_rows`,
`error.type`); `db.client.operation.duration` is the latency histogram. A thread
id is recorded (`colosseum.thread_id`), and an error's message (which names its
thread) attached to the span, only when `thread_ids` is on.
"""

from __future__ import annotations

import contextvars
import importlib.metadata
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode
from psycopg.conninfo import conninfo_to_dict

from langgraph_colosseum._core.io import (
    CACHE_UNAVAILABLE,
    CacheCall,
    CacheDrop,
    Collect,
    Emit,
    Operation,
    Query,
    Request,
    Transaction,
)

SCOPE = "langgraph_colosseum"

# The layer of each `_core` module, and the table its operations are about
# (the span's `db.collection.name`).
_LAYERS: Mapping[str, tuple[str, str]] = {
    "langgraph_colosseum._core.store": ("checkpointer", "colosseum_checkpoints"),
    "langgraph_colosseum._core.rekey": ("checkpointer", "colosseum_checkpoints"),
    "langgraph_colosseum._core.inspection": ("inspection", "colosseum_checkpoints"),
    "langgraph_colosseum._core.threads": ("threads", "colosseum_threads"),
    "langgraph_colosseum._core.memory": ("store", "colosseum_store_items"),
    "langgraph_colosseum._core.ledger": ("tools", "colosseum_tool_calls"),
}
# Operations whose result is a sweeper's progress (how many threads or items it
# removed), and operations that renew a lease: (layer, name) -> what they are.
_SWEEPERS = {("threads", "sweep"): "retention", ("store", "sweep"): "store_ttl"}
_RENEWALS = {("tools", "heartbeat"): "tool_call", ("threads", "renew"): "run_guard"}

# The hot-cache scripts that read: a checkpoint head (hot.py), a Store item (hot_items.py).
_CACHE_READS = frozenset(("read", "item_read"))

# `db.client.operation.duration`'s advised buckets (seconds), as the conventions give them.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)

# The operation whose request a driver is performing, for `Observer.retried`.
_CURRENT: contextvars.ContextVar[_Watch | None] = contextvars.ContextVar(
    "colosseum_operation", default=None
)


class _Kind:
    """What every run of one operation shares: names and constant attributes."""

    __slots__ = ("attributes", "lease", "metric_attributes", "name", "sweeper")

    def __init__(self, name: str, layer: str, collection: str | None) -> None:
        self.name = f"{name} {collection}" if collection else name
        self.metric_attributes: dict[str, Any] = {
            "db.system.name": "postgresql",
            "db.operation.name": name,
            "colosseum.layer": layer,
        }
        if collection:
            self.metric_attributes["db.collection.name"] = collection
        self.attributes = dict(self.metric_attributes)
        self.sweeper = _SWEEPERS.get((layer, name))
        self.lease = _RENEWALS.get((layer, name))


# `io.single` is one request of an operation that is already observed (the tool
# ledger's); it gets no span of its own.
_UNOBSERVED = _Kind("single", "", None)


def _kind_of(op: Any) -> _Kind:
    name = getattr(op, "__name__", None) or type(op).__name__
    frame = getattr(op, "gi_frame", None)
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    if module == "langgraph_colosseum._core.io" and name == "single":
        return _UNOBSERVED
    layer, collection = _LAYERS.get(module, ("other", None))
    return _Kind(name, layer, collection)


class Observer:
    """`io.observer`: starts a span per operation and records its metrics.

    `thread_ids`: put each operation's thread id on its span (and its errors'
    messages, which name threads); off unless the user opts in.
    """

    def __init__(
        self,
        *,
        thread_ids: bool = False,
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ) -> None:
        self.thread_ids = thread_ids
        version = _version()
        self.tracer = trace.get_tracer(SCOPE, version, tracer_provider)
        meter = metrics.get_meter(SCOPE, version, meter_provider)
        self.duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of langgraph-colosseum operations (checkpointer, Store, "
            "tool ledger, threads), Redis and Postgres round trips included",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.cache_lookups = meter.create_counter(
            "colosseum.cache.lookups",
            unit="{lookup}",
            description="Reads of the Redis hot head, by colosseum.cache.result (hit or miss)",
        )
        self.retries = meter.create_counter(
            "colosseum.retries",
            unit="{retry}",
            description="Postgres requests sent again, by colosseum.retry.reason",
        )
        self.breaker_trips = meter.create_counter(
            "colosseum.cache.breaker.trips",
            unit="{trip}",
            description="Times a Redis circuit breaker opened (Redis failed while it was closed)",
        )
        self.lease_renewals = meter.create_counter(
            "colosseum.lease.renewals",
            unit="{renewal}",
            description="Lease renewals of running tool calls and run guards, by outcome",
        )
        self.swept = meter.create_counter(
            "colosseum.sweeper.removed",
            unit="{entry}",
            description="Threads (retention) or Store items (store_ttl) a sweeper removed",
        )
        self.sweeps = meter.create_counter(
            "colosseum.sweeper.runs",
            unit="{run}",
            description="Sweeps run, by colosseum.sweeper and outcome",
        )
        meter.create_observable_gauge(
            "colosseum.cache.hit_ratio",
            callbacks=[self._hit_ratio],
            unit="1",
            description="Hot-head hits / lookups since this process enabled telemetry",
        )
        meter.create_observable_gauge(
            "colosseum.cache.breaker.open",
            callbacks=[self._breakers_open],
            unit="{breaker}",
            description="Redis circuit breakers of this process now open (Redis being skipped)",
        )
        meter.create_observable_gauge(
            "colosseum.cache.breaker.backoff",
            callbacks=[self._breaker_backoff],
            unit="s",
            description="The longest current backoff of an open Redis circuit breaker",
        )
        self._kinds: dict[Any, _Kind] = {}
        self._servers: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._lookups_lock = threading.Lock()
        self.hits = self.misses = 0

    # The hook ------------------------------------------------------------

    def __call__(
        self, op: Operation[Any], perform: Callable[[Request], Any], asynchronous: bool
    ) -> tuple[Operation[Any], Callable[[Request], Any]]:
        # A generator's code names its operation; any other iterable, its type.
        code = getattr(op, "gi_code", None) or type(op)
        kind = self._kinds.get(code)
        if kind is None:
            kind = self._kinds[code] = _kind_of(op)
        if kind is _UNOBSERVED:
            return op, perform
        attributes = kind.attributes
        server = self._server_of(perform)
        if server:
            attributes = {**attributes, **server}
        span = self.tracer.start_span(kind.name, kind=SpanKind.CLIENT, attributes=attributes)
        watch = _Watch(self, kind, span)
        if watch.recording and self.thread_ids:
            thread = _thread_of(op)
            if thread is not None:
                span.set_attribute("colosseum.thread_id", thread)
        return watch.run(op), watch.aperform(perform) if asynchronous else watch.perform(perform)

    def _server_of(self, perform: Callable[[Request], Any]) -> dict[str, Any] | None:
        """`db.namespace`, `server.address`, `server.port` of the saver whose
        `perform` this is (a Store's is its saver's), known without a round trip."""
        owner = getattr(perform, "__self__", None)
        if owner is None:
            return None  # the tool ledger's own perform: its spans go without them
        owner = getattr(owner, "_driver", owner)
        try:
            return self._servers[owner]
        except KeyError:
            server = self._servers[owner] = _server_attributes(getattr(owner, "conn", None))
            return server
        except TypeError:  # not weakly referenceable
            return None

    def retried(self, reason: str) -> None:
        self.retries.add(1, {"colosseum.retry.reason": reason})
        watch = _CURRENT.get()
        if watch is not None and not watch.done:
            watch.retried += 1

    def breaker_opened(self) -> None:
        self.breaker_trips.add(1)

    # Gauges ----------------------------------------------------------------

    def counted_lookup(self, hit: bool) -> None:
        with self._lookups_lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
        self.cache_lookups.add(1, {"colosseum.cache.result": "hit" if hit else "miss"})

    def _hit_ratio(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lookups_lock:
            lookups = self.hits + self.misses
            hits = self.hits
        if lookups:
            yield Observation(hits / lookups)

    def _breakers_open(self, options: CallbackOptions) -> Iterable[Observation]:
        from langgraph_colosseum.cache import BREAKERS

        yield Observation(sum(1 for breaker in list(BREAKERS) if breaker.backoff))

    def _breaker_backoff(self, options: CallbackOptions) -> Iterable[Observation]:
        from langgraph_colosseum.cache import BREAKERS

        yield Observation(max((breaker.backoff for breaker in list(BREAKERS)), default=0.0))


class _Watch:
    """One run of one operation: its span, its clock and what its requests did."""

    __slots__ = (
        "cache_read",
        "done",
        "kind",
        "observer",
        "paused",
        "postgres_after_read",
        "received",
        "recording",
        "retried",
        "round_trips",
        "rows",
        "sent",
        "span",
        "started",
    )

    def __init__(self, observer: Observer, kind: _Kind, span: Any) -> None:
        self.observer = observer
        self.kind = kind
        self.span = span
        self.recording = span.is_recording()
        self.started = time.perf_counter()
        self.paused = 0.0  # a `list` waiting on its consumer is not the operation's time
        self.round_trips = self.rows = self.retried = self.sent = self.received = 0
        self.cache_read = self.postgres_after_read = False
        self.done = False

    def run(self, op: Operation[Any]) -> Operation[Any]:
        """`op`, ending the span when it returns or raises (or is dropped unfinished)."""
        result = None
        try:
            while True:
                try:
                    request = op.send(result)
                except StopIteration as stop:
                    self.finish(None, stop.value)
                    return stop.value
                except BaseException as exc:
                    self.finish(exc)
                    raise
                if request.__class__ is Emit:
                    waiting = time.perf_counter()
                    result = yield request
                    self.paused += time.perf_counter() - waiting
                else:
                    result = yield request
        finally:
            if not self.done:  # a stream its consumer left unfinished
                op.close()
                self.finish(None)

    def perform(self, perform: Callable[[Request], Any]) -> Callable[[Request], Any]:
        def observed(request: Request) -> Any:
            _CURRENT.set(self)
            try:
                result = perform(request)
            except BaseException as exc:
                self.finish(exc)
                raise
            self.saw(request, result)
            return result

        return observed

    def aperform(self, perform: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def observed(request: Request) -> Any:
            _CURRENT.set(self)
            try:
                result = await perform(request)
            except BaseException as exc:
                self.finish(exc)
                raise
            self.saw(request, result)
            return result

        return observed

    def saw(self, request: Request, result: Any) -> None:
        cls = request.__class__
        if cls is Collect:  # the reply of a request sent ahead: its round trip
            request = request.handle.request  # type: ignore[union-attr]
            cls = request.__class__
        if cls is Query:
            self.round_trips += 1
            self.postgres_after_read = self.cache_read
            if result is not None:
                self.rows += len(result)
        elif cls is Transaction:
            self.round_trips += 1
            self.postgres_after_read = self.cache_read
            self.rows += sum(len(rows) for rows in result if rows is not None)
        elif cls is CacheCall:
            if request.script in _CACHE_READS:  # type: ignore[union-attr]
                self.cache_read = True
        elif cls is not CacheDrop:
            return  # a tool run, an embedding: no payload of ours
        if self.recording:
            self.sent += _request_bytes(request)
            if result is not CACHE_UNAVAILABLE:
                self.received += _payload_bytes(result)

    def finish(self, exc: BaseException | None, value: Any = None) -> None:
        if self.done:
            return
        self.done = True
        seconds = time.perf_counter() - self.started - self.paused
        observer, kind, span = self.observer, self.kind, self.span
        failed = exc is not None and not isinstance(exc, GeneratorExit)
        attributes = kind.metric_attributes
        if failed:
            attributes = {**attributes, "error.type": _error_type(exc)}
        observer.duration.record(seconds, attributes)
        hit = None
        if self.cache_read:
            # A hit is a read Redis answered: the operation needed no Postgres after it.
            hit = not self.postgres_after_read
            observer.counted_lookup(hit)
        if kind.sweeper is not None:
            outcome = {
                "colosseum.sweeper": kind.sweeper,
                "colosseum.outcome": "failed" if failed else "ok",
            }
            observer.sweeps.add(1, outcome)
            if not failed and value:
                observer.swept.add(value, {"colosseum.sweeper": kind.sweeper})
        if kind.lease is not None:
            observer.lease_renewals.add(
                1,
                {"colosseum.lease": kind.lease, "colosseum.outcome": "failed" if failed else "ok"},
            )
        if self.recording:
            span.set_attributes(
                {
                    "db.response.returned_rows": self.rows,
                    "colosseum.round_trips": self.round_trips,
                    "colosseum.bytes.sent": self.sent,
                    "colosseum.bytes.received": self.received,
                    "colosseum.retries": self.retried,
                }
            )
            if hit is not None:
                span.set_attribute("colosseum.cache.hit", hit)
            if failed:
                assert exc is not None
                span.set_attribute("error.type", _error_type(exc))
                if observer.thread_ids:
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                else:  # our errors name their thread: only the type, unless opted in
                    span.set_status(Status(StatusCode.ERROR))
        span.end()


def _version() -> str | None:
    try:
        return importlib.metadata.version("langgraph-colosseum")
    except importlib.metadata.PackageNotFoundError:
        return None


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _server_attributes(conn: Any) -> dict[str, Any]:
    """Where a psycopg connection or pool points: host, port and database, no
    user or password."""
    if hasattr(conn, "conninfo"):  # a pool
        try:
            params = conninfo_to_dict(conn.conninfo)
        except Exception:
            return {}
    elif hasattr(conn, "info"):  # a connection
        params = {"host": conn.info.host, "port": conn.info.port, "dbname": conn.info.dbname}
    else:
        return {}
    attributes: dict[str, Any] = {}
    if params.get("dbname"):
        attributes["db.namespace"] = str(params["dbname"])
    if params.get("host"):
        attributes["server.address"] = str(params["host"])
    port = str(params.get("port") or "")
    if port.isdigit():
        attributes["server.port"] = int(port)
    return attributes


def _thread_of(op: Any) -> Any:
    """The thread id (or ids) an operation was called with, from its arguments."""
    frame = getattr(op, "gi_frame", None)
    if frame is None:
        return None
    arguments = frame.f_locals
    if isinstance(arguments.get("thread_id"), str):
        return arguments["thread_id"]
    config = arguments.get("config")
    if isinstance(config, Mapping):
        thread = (config.get("configurable") or {}).get("thread_id")
        return str(thread) if thread is not None else None
    thread_ids = arguments.get("thread_ids")
    if isinstance(thread_ids, (list, tuple)):
        return [str(t) for t in thread_ids]
    plan = arguments.get("plan")
    identity = getattr(plan, "identity", None)
    return getattr(identity, "thread_id", None)


def _request_bytes(request: Request) -> int:
    if request.__class__ is Query:
        return _payload_bytes(request.params)  # type: ignore[union-attr]
    if request.__class__ is Transaction:
        return sum(_payload_bytes(q.params) for q in request.queries)  # type: ignore[union-attr]
    if request.__class__ is CacheCall:
        return _payload_bytes(request.args)  # type: ignore[union-attr]
    return 0


def _payload_bytes(value: Any, depth: int = 4) -> int:
    """Bytes of the text and binary values in a request's parameters or a
    result (down to a transaction's statements' rows' array fields). Exact
    types, not isinstance: this runs on every request of a recorded span."""
    cls = value.__class__
    if cls is str:
        return len(value) if value.isascii() else len(value.encode())
    if cls is bytes or cls is bytearray:
        return len(value)
    if depth:
        if cls is list or cls is tuple:
            return sum([_payload_bytes(item, depth - 1) for item in value])
        if cls is dict:
            return sum([_payload_bytes(item, depth - 1) for item in value.values()])
    return 0
