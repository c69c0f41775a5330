"""long-20k: one thread of tiny checkpoints, written two ways.

* `long-20k`: direct `saver.put` calls (one int channel per checkpoint);
* `long-20k-graph`: a real graph, a counter node routing to itself, 20,000
  steps in one run (each step a put and a put_writes, as LangGraph sends them).

At 5,000 checkpoints, then again after extending the same thread to 20,000:
time and peak memory of a full `saver.list(config)` and of `get_tuple` at the
head, with the CPU and traffic of each. Every saver is open at once, each on a
thread of its own, and the `get_tuple` calls of the savers take turns
(measure_gets), so that the machine's other load falls on each alike.
"""

from __future__ import annotations

import contextlib
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


def measure_list(bench: Bench, saver: Any, thread: str, p: dict, count: int | None) -> dict:
    """A full `list` of the thread: time (median of passes), peaks, meters; it must
    see `count` checkpoints (None: not checked)."""
    config = {"configurable": {"thread_id": thread}}
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
    out = {
        "list_s": statistics.median(times),
        "list_seen": seen,
        "list_capped": capped,
        "list_peak_traced_bytes": list_traced,
        "list_peak_rss_bytes": list_rss,
        "per_list": list_meter.per(len(times)),
    }
    if not capped and count is not None and seen != count:
        out["error"] = f"history has {seen} checkpoints, expected {count}"
    return out


def measure_gets(bench: Bench, heads: dict[str, tuple[Any, dict]], p: dict) -> dict[str, dict]:
    """`get_tuple` at the head, per saver (name -> (saver, head config)), the savers
    taking turns: rounds of `long_get_repeats` calls, each saver's round metered on
    its own, who goes first alternating, a pause between rounds; the median of
    every call. A cell used to make its 20 calls (~5 ms) alone, one saver after
    the other, and a burst of another process's load then set one side's median:
    long-20k-graph, ours at 20,000, 606 us in its cell and 205 us ten seconds
    later on the same saver and thread (2026-12-04). The first call goes
    unmetered: it may be the first on its connection (a pool's), which prepares
    and plans the statement."""
    found = {name: saver.get_tuple(head) for name, (saver, head) in heads.items()}
    gets: dict[str, list[float]] = {name: [] for name in heads}
    firsts: dict[str, list[float]] = {name: [] for name in heads}
    cpus: dict[str, list[float]] = {name: [] for name in heads}
    meters: dict[str, list[Meter]] = {name: [] for name in heads}
    names = list(heads)
    for round_ in range(p["long_get_rounds"]):
        if round_:
            time.sleep(GET_ROUND_PAUSE_S)
        for name in names if round_ % 2 == 0 else names[::-1]:
            saver, head = heads[name]
            with Meter(bench) as meter:
                for _ in range(p["long_get_repeats"]):
                    t0, c0 = time.perf_counter(), time.process_time()
                    found[name] = saver.get_tuple(head)
                    gets[name].append(time.perf_counter() - t0)
                    cpus[name].append(time.process_time() - c0)
            meters[name].append(meter)
            # The same read of a head the saver has not read before: ours
            # decodes a head read again only once (store.CheckpointMemo).
            memo = getattr(getattr(saver, "_store", None), "memo", None)
            for _ in range(p["long_get_repeats"]):
                if memo is not None:
                    memo.forget_threads([head["configurable"]["thread_id"]])
                t0 = time.perf_counter()
                saver.get_tuple(head)
                firsts[name].append(time.perf_counter() - t0)
    out = {}
    for name, (saver, head) in heads.items():
        _, get_traced = traced_peak(lambda saver=saver, head=head: saver.get_tuple(head))
        _, get_rss = rss_peak(lambda saver=saver, head=head: saver.get_tuple(head))
        out[name] = {
            "get_state_s": statistics.median(gets[name]),
            "get_state_first_s": statistics.median(firsts[name]),
            "get_state_cpu_s": statistics.median(cpus[name]),
            "get_state_peak_traced_bytes": get_traced,
            "get_state_peak_rss_bytes": get_rss,
            "per_get_tuple": _merged(meters[name], len(gets[name]), breakdowns=True),
            "found": found[name],
        }
    return out


def measure_long(
    bench: Bench, saver: Any, thread: str, size: int, p: dict, head: int, count: int | None
) -> dict:
    """The reads at `size` checkpoints of one saver: the head's counter must be
    `head`, and a full list must see `count` checkpoints (None: not checked)."""
    head_config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    out = {"checkpoints": size, **measure_list(bench, saver, thread, p, count)}
    gets = measure_gets(bench, {"saver": (saver, head_config)}, p)["saver"]
    return _with_gets(out, gets, head)


def _with_gets(out: dict, gets: dict, head: int) -> dict:
    found = gets.pop("found")
    out = {**out, **gets}
    head_value = found.checkpoint["channel_values"].get("counter") if found else None
    if head_value != head:
        out["error"] = f"head counter is {head_value!r}, expected {head}"
    return out


class LongThread:
    """One saver's thread, grown to each size in turn: direct puts (`fill`) or
    the looping graph, one run per size."""

    def __init__(self, bench: Bench, saver: Any, graph: bool) -> None:
        self.bench, self.saver, self.graph = bench, saver, graph
        self.thread = f"{'loop' if graph else 'long'}-{uuid.uuid4().hex[:8]}"
        self.config: dict = {"configurable": {"thread_id": self.thread}}
        if not graph:
            self.config["configurable"]["checkpoint_ns"] = ""
        self.compiled = loop_graph(saver) if graph else None
        self.version: Any = None
        self.done = 0
        self.fills: list[Meter] = []
        self.fill_s = 0.0
        self.sizes: dict[str, dict] = {}

    @property
    def head_config(self) -> dict:
        return {"configurable": {"thread_id": self.thread, "checkpoint_ns": ""}}

    def grow(self, size: int) -> None:
        with Meter(self.bench) as meter:
            if self.compiled is not None:
                # The first run starts the counter; the next extends the same thread.
                inputs = {"counter": 0, "target": size} if self.done == 0 else {"target": size}
                self.compiled.invoke(
                    inputs, {**self.config, "recursion_limit": size - self.done + 10}
                )
            else:
                self.config, self.version = fill(
                    self.saver, self.config, self.done, size, self.version
                )
        self.fills.append(meter)
        self.fill_s += meter.figures["wall_s"]
        self.done = size

    def expected(self) -> tuple[int, int | None]:
        """The head's counter and the history's length at the current size."""
        return (self.done, None) if self.graph else (self.done - 1, self.done)

    def result(self, bytes_fn: Callable[[], int | None]) -> dict:
        return {
            "writes": (
                "a graph looping a counter node, one run per size"
                if self.graph
                else "direct saver.put, one int channel per checkpoint"
            ),
            "put_per_s": self.done / self.fill_s if self.fill_s else None,
            "per_checkpoint": _merged(self.fills, self.done),
            "bytes_on_disk": bytes_fn(),
            "sizes": self.sizes,
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


def _merged(meters: list[Meter], units: int, breakdowns: bool = False) -> dict[str, Any]:
    """The figures of several metered phases (fills, rounds of calls), summed,
    per unit (checkpoint, step or call: `Meter.per`'s form); with `breakdowns`,
    the non-numeric figures (top statements) are the last phase's."""
    out: dict[str, Any] = {"units": units}
    for key in meters[0].figures:
        values = [m.figures[key] for m in meters]
        if all(isinstance(v, (int, float)) for v in values):
            out[key] = sum(values) / units
        elif breakdowns:
            out[key] = values[-1]
    return out


def run_long(bench: Bench, p: dict, savers: tuple[str, ...], graph: bool = False) -> dict:
    """Every saver open at once, each on its own thread: at each size, each thread
    grows (one saver after the other), then each is listed, then `get_tuple` is
    measured with the savers taking turns (measure_gets)."""
    sizes = p["graph_sizes"] if graph else p["long_sizes"]
    with contextlib.ExitStack() as stack:
        threads: dict[str, LongThread] = {}
        bytes_fns: dict[str, Callable[[], int | None]] = {}
        for name in savers:
            saver, bytes_fns[name] = stack.enter_context(sync_saver(bench, name))
            threads[name] = LongThread(bench, saver, graph)
        for size in sizes:
            for name, thread in threads.items():
                log(f"  {name} to {size:,} ...")
                gc.collect()
                thread.grow(size)
            for thread in threads.values():
                _, count = thread.expected()
                thread.sizes[str(size)] = {
                    "checkpoints": size,
                    **measure_list(bench, thread.saver, thread.thread, p, count),
                }
            gets = measure_gets(
                bench, {name: (t.saver, t.head_config) for name, t in threads.items()}, p
            )
            for name, thread in threads.items():
                head, _ = thread.expected()
                thread.sizes[str(size)] = _with_gets(thread.sizes[str(size)], gets[name], head)
        results = {name: thread.result(bytes_fns[name]) for name, thread in threads.items()}
    for name, result in results.items():
        big = result["sizes"][str(sizes[-1])]
        log(
            f"    {name}: {result['put_per_s']:.0f} puts/s, list {big['list_s']:.2f}s, "
            f"get_tuple {big['get_state_s'] * 1e6:.0f} us, "
            f"peak {big['list_peak_traced_bytes'] / 1e6:.2f} MB"
        )
    return results
