"""What telemetry costs on chat-200: OpenTelemetry absent, installed with no SDK, and on.

    python -m benchmarks.telemetry               # 200 turns, 5 repetitions (~10 min)
    python -m benchmarks.telemetry 50 3          # turns, repetitions

One process, this run's own servers (see servers.py; the shared ones without
them). Each repetition runs every cell once, in a rotated order, so the machine's
drift falls on all of them alike; the figures are medians over repetitions, and
each ratio is taken within a repetition before its median.

The telemetry modes of ours (ColosseumSaver, alone and with the Redis head):

* `absent`: `io.observer` is None, the path of an install without the `otel`
  extra (the same one global lookup per operation; not importing opentelemetry
  is the only other difference, and langsmith imports it anyway when present);
* `api`: the extra installed and no SDK configured: the observer on the API's
  global providers, whose spans and instruments are no-ops;
* `sdk`: an SDK configured: a TracerProvider whose BatchSpanProcessor feeds an
  exporter that drops the spans (the export's network cost is the collector's
  business, not ours), and a MeterProvider with an in-memory reader.

PostgresSaver runs in each repetition too: the ratios against it are the
project's usual basis. Writes results/telemetry.{md,json}.
"""

from __future__ import annotations

import contextlib
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from benchmarks.chat import run_chat_cell
from benchmarks.common import (
    ADMIN_URL,
    OURS,
    OURS_HOT,
    REDIS_URL,
    REF,
    RESULTS_DIR,
    Bench,
    log,
    params_for,
    sync_saver,
)
from benchmarks.servers import private_postgres, private_redis
from langgraph_colosseum import telemetry
from langgraph_colosseum._core import io
from langgraph_colosseum._core.io import Operation, Query

MODES = ("absent", "api", "sdk")


class Dropped(SpanExporter):
    """Takes every span and keeps none."""

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@contextlib.contextmanager
def telemetry_mode(mode: str) -> Iterator[None]:
    if mode == "absent":
        telemetry.disable()
    elif mode == "api":
        assert telemetry.enable()
    else:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(Dropped()))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        assert telemetry.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield
    finally:
        telemetry.disable()
        if mode == "sdk":
            tracer_provider.shutdown()
            meter_provider.shutdown()


def per_operation_us(mode: str, n: int = 20_000) -> float:
    """The hook's own cost: microseconds per operation of two requests whose
    I/O is a canned answer, so that only the runner and the telemetry are
    timed (best of 5)."""
    query = Query("SELECT 1", {"thread_id": "t", "checkpoint_ns": ""})
    rows = [("t", "", "1ef0", None, '{"v": 1}' * 50)]

    def get_tuple(config: Any) -> Operation[Any]:
        yield query
        return (yield query)

    def perform(request: Any) -> Any:
        return rows

    best = float("inf")
    with telemetry_mode(mode):
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(n):
                io.run(get_tuple(None), perform)
            best = min(best, (time.perf_counter() - started) / n)
    return best * 1e6


def cells() -> list[tuple[str, str, str]]:
    """(cell name, saver, telemetry mode)."""
    out = [(REF, REF, "absent")]
    for saver in (OURS, OURS_HOT):
        out += [(f"{saver} [{mode}]", saver, mode) for mode in MODES]
    return out


def main(turns: int, repetitions: int) -> None:
    p = params_for(quick=False)
    p["chat_turns"] = turns
    runs: list[dict[str, dict]] = []
    started = datetime.now(timezone.utc)
    with contextlib.ExitStack() as servers:
        admin = servers.enter_context(private_postgres(log)) or ADMIN_URL
        private = servers.enter_context(private_redis(log))
        bench = Bench(admin, private or REDIS_URL, private_redis=private is not None)
        bench.create()
        try:
            every = cells()
            for rep in range(repetitions):
                shift = rep % len(every)
                results: dict[str, dict] = {}
                for name, saver_name, mode in every[shift:] + every[:shift]:
                    log(f"rep {rep + 1}/{repetitions}: {name}")
                    gc.collect()
                    with telemetry_mode(mode), sync_saver(bench, saver_name) as (saver, size):
                        results[name] = run_chat_cell(bench, saver, size, p, delta=False)
                runs.append(results)
        finally:
            bench.drop()
    hook = {mode: _median([per_operation_us(mode) for _ in range(3)]) for mode in MODES}
    report(runs, hook, turns, repetitions, started)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _cpu(cell: dict) -> float | None:
    return (cell.get("per_invoke") or {}).get("client_cpu_s")


def report(
    runs: list[dict[str, dict]],
    hook: dict[str, float | None],
    turns: int,
    repetitions: int,
    started: datetime,
) -> None:
    names = [name for name, _, _ in cells()]
    rows: list[dict[str, Any]] = []
    for name in names:
        saver = next(s for n, s, _ in cells() if n == name)
        absent = f"{saver} [absent]"
        row: dict[str, Any] = {"cell": name}
        row["p50_turn_ms"] = _median([r[name]["p50_turn_s"] * 1e3 for r in runs])
        row["get_state_ms"] = _median([r[name]["get_state_s"] * 1e3 for r in runs])
        row["client_cpu_ms_per_invoke"] = _median(
            [(_cpu(r[name]) or 0) * 1e3 if _cpu(r[name]) is not None else None for r in runs]
        )
        row["p50_vs_ref"] = _median([r[name]["p50_turn_s"] / r[REF]["p50_turn_s"] for r in runs])
        if name != REF:
            row["p50_vs_absent"] = _median(
                [r[name]["p50_turn_s"] / r[absent]["p50_turn_s"] for r in runs]
            )
            row["get_state_vs_absent"] = _median(
                [r[name]["get_state_s"] / r[absent]["get_state_s"] for r in runs]
            )
            if _cpu(runs[0][name]) is not None:
                row["cpu_vs_absent"] = _median(
                    [_cpu(r[name]) / _cpu(r[absent]) for r in runs]  # type: ignore[operator]
                )
        rows.append(row)
    command = "python -m benchmarks.telemetry " + " ".join(sys.argv[1:])
    RESULTS_DIR.mkdir(exist_ok=True)
    figures = {
        "command": command,
        "started": started.isoformat(),
        "rows": rows,
        "per_operation_us": hook,
        "runs": runs,
    }
    (RESULTS_DIR / "telemetry.json").write_text(json.dumps(figures, indent=1, default=str))

    def f(value: Any, digits: int = 2) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    lines = [
        "# Telemetry overhead (chat-200)",
        "",
        f"Run {started.isoformat(timespec='seconds')} with `{command.strip()}`: {turns} turns, "
        f"medians of {repetitions} repetitions, cells interleaved; Python "
        f"{platform.python_version()} on {platform.machine()}. `absent`: no observer (an "
        "install without the otel extra); `api`: opentelemetry-api, no SDK configured; `sdk`: "
        "the SDK recording every span (batch processor, dropping exporter) and metric.",
        "",
        "| cell | p50 turn ms | vs PostgresSaver | vs absent | client CPU ms/turn | CPU vs absent "
        "| get_state ms | get_state vs absent |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['cell']} | {f(row['p50_turn_ms'])} | {f(row['p50_vs_ref'])} "
            f"| {f(row.get('p50_vs_absent'), 3)} | {f(row['client_cpu_ms_per_invoke'])} "
            f"| {f(row.get('cpu_vs_absent'), 3)} | {f(row['get_state_ms'], 3)} "
            f"| {f(row.get('get_state_vs_absent'), 3)} |"
        )
    lines += [
        "",
        "The hook alone (`per_operation_us`: an operation of two requests with canned I/O, "
        "best of 5, median of 3):",
        "",
        "| mode | µs per operation |",
        "|---|---|",
        *(f"| {mode} | {f(us)} |" for mode, us in hook.items()),
    ]
    (RESULTS_DIR / "telemetry.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 200, int(sys.argv[2]) if len(sys.argv) > 2 else 5
    )
