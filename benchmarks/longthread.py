"""long-20k: one thread of tiny checkpoints, written two ways.

* `long-20k`: direct `saver.put` calls (one int channel per checkpoint);
* `long-20k-graph`: a real graph, a counter node routing to itself, 20,000
  steps in one run (each step a put and a put_writes, as LangGraph sends them).

At 5,000 checkpoints, then again after extending the same thread to 20,000:
time and peak memory of a full `saver.list(config)` and of `get_tuple` at the
head, with the CPU and traffic of each.
"""

from __future__ import annotations

import gc
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any, TypedDict

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph

from benchmarks.common import (
    Bench,
    Meter,
    log,
    rss_peak,
    sync_saver,
    traced_peak,
)

# Between rounds of get_tuple calls (measure_long).
GET_ROUND_PAUSE_S = 0.2
# The checkpoint format LangGraph writes (langgraph.pregel._checkpoint.LATEST_VERSION).
# `empty_checkpoint()` says 2, and PostgresSaver.get_tuple reads a checkpoint
# below 4 that has a parent with a second statement (its migration of pending
# sends): a second round trip on every read of a direct-put thread, which no
# graph's thread has (measured 2026-12-04: 305 us against 150 us for its one
# query, interleaved at the head of 20,000).
GRAPH_CHECKPOINT_VERSION = 4


def fill(saver: Any, config: dict, start: int, stop: int, version: Any) -> tuple[dict, Any]:
    """Direct `saver.put` calls: checkpoints start..stop-1, one tiny int channel each."""
    for i in range(start, stop):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["v"] = GRAPH_CHECKPOINT_VERSION
        checkpoint["id"] = str(uuid6(clock_seq=i))
        checkpoint["channel_values"] = {"counter": i}
        checkpoint["channel_versions"] = {"counter": version}
        checkpoint["updated_channels"] = ["counter"]
        metadata = {"source": "loop", "step": i, "parents": {}}
        config = saver.put(config, checkpoint, metadata, {"counter": version})
    return config, version


def list_all(saver: Any, config: dict, cap_s: float) -> tuple[int, bool]:
    """Iterate `saver.list(config)` to the end (or for cap_s); how many, and if cut off."""
    n = 0
    deadline = time.perf_counter() + cap_s
    for _ in saver.list(config):
        n += 1
        if time.perf_counter() > deadline:
            return n, True
    return n, False


def measure_long(
    bench: Bench, saver: Any, thread: str, size: int, p: dict, head: int, count: int | None
) -> dict:
    """The reads at `size` checkpoints: the head's counter must be `head`, and a full
    list must see `count` checkpoints (None: not checked)."""
    config = {"configurable": {"thread_id": thread}}
    head_config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    cap = p["long_list_cap_s"]
    times, seen, capped = [], 0, False
    with Meter(bench) as list_meter:
        for _ in range(p["long_list_repeats"]):
            gc.collect()
            t0 = time.perf_counter()
            seen, cut = list_all(saver, config, cap)
            times.append(time.perf_counter() - t0)
            if cut:  # a pass that hit the cap is not repeated
                capped = True
                break
    (_, _), list_traced = traced_peak(lambda: list_all(saver, config, cap))
    (_, _), list_rss = rss_peak(lambda: list_all(saver, config, cap))
    # get_tuple at the head: rounds of calls a pause apart, the median of every
    # call. In one round of 20 (~5 ms) a burst of another process's load set a
    # whole cell's median: long-20k-graph, ours at 20,000, 606 us in its cell and
    # 205 us ten seconds later on the same saver and thread (2026-12-04). The
    # first call goes before the meter, for both savers: it may be the first on
    # its connection (a pool's), which prepares and plans the statement.
    found = saver.get_tuple(head_config)
    gets, cpus = [], []
    with Meter(bench) as get_meter:
        for round_ in range(p["long_get_rounds"]):
            if round_:
                time.sleep(GET_ROUND_PAUSE_S)
            for _ in range(p["long_get_repeats"]):
                t0, c0 = time.perf_counter(), time.process_time()
                found = saver.get_tuple(head_config)
                gets.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
    _, get_traced = traced_peak(lambda: saver.get_tuple(head_config))
    _, get_rss = rss_peak(lambda: saver.get_tuple(head_config))
    out = {
        "checkpoints": size,
        "list_s": statistics.median(times),
        "list_seen": seen,
        "list_capped": capped,
        "list_peak_traced_bytes": list_traced,
        "list_peak_rss_bytes": list_rss,
        "get_state_s": statistics.median(gets),
        "get_state_cpu_s": statistics.median(cpus),
        "get_state_peak_traced_bytes": get_traced,
        "get_state_peak_rss_bytes": get_rss,
        "per_list": list_meter.per(len(times)),
        "per_get_tuple": get_meter.per(len(gets)),
    }
    head_value = found.checkpoint["channel_values"].get("counter") if found else None
    if head_value != head:
        out["error"] = f"head counter is {head_value!r}, expected {head}"
    if not capped and count is not None and seen != count:
        out["error"] = f"history has {seen} checkpoints, expected {count}"
    return out


def run_long_cell(bench: Bench, saver: Any, bytes_fn: Callable[[], int | None], p: dict) -> dict:
    thread = f"long-{uuid.uuid4().hex[:8]}"
    config: dict = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    version, done, fill_s = None, 0, 0.0
    sizes, fills = {}, []
    for size in p["long_sizes"]:
        with Meter(bench) as meter:
            config, version = fill(saver, config, done, size, version)
        fills.append(meter)
        fill_s += meter.figures["wall_s"]
        done = size
        sizes[str(size)] = measure_long(bench, saver, thread, size, p, size - 1, size)
    return {
        "writes": "direct saver.put, one int channel per checkpoint",
        "put_per_s": done / fill_s if fill_s else None,
        "per_checkpoint": _merged(fills, done),
        "bytes_on_disk": bytes_fn(),
        "sizes": sizes,
    }


class LoopState(TypedDict):
    counter: int
    target: int


def loop_graph(saver: Any) -> Any:
    """A counter node routing to itself until `target`: one tiny checkpoint per step."""
    builder = StateGraph(LoopState)
    builder.add_node("count", lambda s: {"counter": s["counter"] + 1})
    builder.add_edge(START, "count")
    builder.add_conditional_edges(
        "count", lambda s: "count" if s["counter"] < s["target"] else END, ["count", END]
    )
    return builder.compile(checkpointer=saver)


def run_long_graph_cell(
    bench: Bench, saver: Any, bytes_fn: Callable[[], int | None], p: dict
) -> dict:
    thread = f"loop-{uuid.uuid4().hex[:8]}"
    config: dict = {"configurable": {"thread_id": thread}}
    graph = loop_graph(saver)
    done, fill_s, sizes, fills = 0, 0.0, {}, []
    for size in p["graph_sizes"]:
        # The first run starts the counter; the next extends the same thread.
        inputs = {"counter": 0, "target": size} if done == 0 else {"target": size}
        with Meter(bench) as meter:
            graph.invoke(inputs, {**config, "recursion_limit": size - done + 10})
        fills.append(meter)
        fill_s += meter.figures["wall_s"]
        done = size
        sizes[str(size)] = measure_long(bench, saver, thread, size, p, size, None)
    return {
        "writes": "a graph looping a counter node, one run per size",
        "put_per_s": done / fill_s if fill_s else None,
        "per_checkpoint": _merged(fills, done),
        "bytes_on_disk": bytes_fn(),
        "sizes": sizes,
    }


def _merged(meters: list[Meter], units: int) -> dict[str, Any]:
    """The figures of several fill phases, summed, per checkpoint (or step)."""
    out: dict[str, Any] = {"units": units}
    for key in meters[0].figures:
        values = [m.figures[key] for m in meters]
        if all(isinstance(v, (int, float)) for v in values):
            out[key] = sum(values) / units
    return out


def run_long(bench: Bench, p: dict, savers: tuple[str, ...], graph: bool = False) -> dict:
    results = {}
    cell = run_long_graph_cell if graph else run_long_cell
    sizes = p["graph_sizes"] if graph else p["long_sizes"]
    for name in savers:
        log(f"  {name} ...")
        gc.collect()
        with sync_saver(bench, name) as (saver, bytes_fn):
            results[name] = cell(bench, saver, bytes_fn, p)
        big = results[name]["sizes"][str(sizes[-1])]
        log(
            f"    {results[name]['put_per_s']:.0f} puts/s, list {big['list_s']:.2f}s, "
            f"peak {big['list_peak_traced_bytes'] / 1e6:.2f} MB"
        )
    return results
