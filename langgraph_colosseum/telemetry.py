"""OpenTelemetry for langgraph-colosseum: on when opentelemetry-api is installed.

`pip install "langgraph-colosseum[otel]"` adds opentelemetry-api; from then on
every checkpointer, Store, tool-ledger and thread-registry operation is a span,
and the metrics listed in the README (Telemetry) are recorded, into whatever
SDK the application configures (none configured: the API's no-ops). Without
the extra nothing of OpenTelemetry is imported and an operation pays one
global lookup.

Environment: ``COLOSSEUM_OTEL=off`` leaves telemetry off even with the extra;
``COLOSSEUM_OTEL_THREAD_IDS=1`` puts thread ids on spans (off by default:
thread ids often carry user or session ids).

Example:
    >>> from langgraph_colosseum import telemetry
    >>> telemetry.enable(thread_ids=True)   # opt in to thread ids on spans
    True
"""

from __future__ import annotations

import os
from typing import Any

from langgraph_colosseum._core import io

SWITCH_ENV = "COLOSSEUM_OTEL"
THREAD_IDS_ENV = "COLOSSEUM_OTEL_THREAD_IDS"
_FALSE = ("0", "off", "false", "no")
_TRUE = ("1", "on", "true", "yes")

# One observer per pair of providers: enabling twice must not register the
# metrics' callbacks twice.
_observers: dict[tuple[Any, Any], Any] = {}


def enable(
    *,
    thread_ids: bool | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> bool:
    """Observe every operation from now on; False when opentelemetry-api is not installed.

    `thread_ids`: record thread ids on spans (default: ``COLOSSEUM_OTEL_THREAD_IDS``).
    `tracer_provider` / `meter_provider`: where spans and metrics go (default:
    the global providers, set by the application's SDK setup).

    Example:
        >>> provider = TracerProvider()   # opentelemetry-sdk
        >>> telemetry.enable(tracer_provider=provider)
        True
    """
    try:
        from langgraph_colosseum._otel import Observer
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] == "opentelemetry":
            return False
        raise
    if thread_ids is None:
        thread_ids = os.environ.get(THREAD_IDS_ENV, "").strip().lower() in _TRUE
    key = (tracer_provider, meter_provider)
    observer = _observers.get(key)
    if observer is None:
        observer = _observers[key] = Observer(
            tracer_provider=tracer_provider, meter_provider=meter_provider
        )
    observer.thread_ids = thread_ids
    io.observer = observer
    return True


def disable() -> None:
    """Stop observing operations (each then pays one global lookup again)."""
    io.observer = None


def enabled() -> bool:
    """Whether operations are being observed."""
    return io.observer is not None


def serve_prometheus() -> bool:
    """Make this process's metrics readable in Prometheus text (`prometheus_text`).

    For a process of our own (`colosseum ui`): when the application set no
    meter provider, one of the SDK's with a Prometheus reader becomes the
    global one. False when the `prometheus` extra is not installed.
    """
    try:
        from opentelemetry import metrics
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
    except ImportError:
        return False
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
    return enable()


def prometheus_text() -> tuple[bytes, str] | None:
    """(body, content type) of the metrics registered with prometheus_client, or
    None when it is not installed."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
    except ImportError:
        return None
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def _from_environment() -> None:
    if os.environ.get(SWITCH_ENV, "").strip().lower() not in _FALSE:
        enable()


_from_environment()
