"""chat-200 with and without the Redis hot head, interleaved in one process.

The blocking savers PostgresSaver, ColosseumSaver and ColosseumSaver+Redis run
chat-200 in turn, round after round, on one private Postgres and Redis, so a
loaded machine weighs on all of them alike; the medians of the rounds are
printed with the issue's two ratios for the hot head: p50 per turn with Redis
vs without, and the hot `get_state` vs PostgresSaver's. With `--profile NAME`
one more cell of that saver runs under cProfile (timed in CPU,
`process_time`) and the functions with the most own time are printed.

    python -m benchmarks.chat_hot 3                  # 3 rounds, 200 turns
    python -m benchmarks.chat_hot 1 --turns 100 --profile ours+redis

Where the hot head's time goes, without a profiler's distortion:
`--per-method` prints each saver's thread CPU and wall per turn in get_tuple,
put and put_writes (in whichever thread LangGraph runs them), and the rest of
the client's CPU; `--script-times` the Redis server's own duration of each
script (SLOWLOG, every call of the ours+redis cells); `--deferred` adds a cell
whose write scripts are not waited for but queued and sent ahead of its next
request in one pipeline: an upper bound of what taking the write scripts off
the turn's path would give. That cell breaks the head's promise (a write
returns before its head moved, so another worker can be served the head it
replaced): a measurement only, never a saver's mode.

    python -m benchmarks.chat_hot 4 --per-method --deferred --script-times
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import pstats
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import redis

from benchmarks.chat import run_chat_cell
from benchmarks.common import OURS, OURS_HOT, REF, Bench, params_for, sync_saver
from benchmarks.servers import private_postgres, private_redis
from langgraph_colosseum._core.hot import SCRIPTS
from langgraph_colosseum._core.io import CacheCall

NAMES = {"ref": REF, "ours": OURS, "ours+redis": OURS_HOT}
# With --redis-py: ours+redis again, its requests sent through redis-py's own
# client rather than the connections the cache drives (cache.RedisCache).
REDIS_PY = "ours+redis-py"
# With --deferred: ours+redis with its write scripts queued, not awaited (see above).
DEFERRED = "ours+redis-deferred"
METHODS = ("get_tuple", "put", "put_writes")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cell(
    bench: Bench, name: str, p: dict, profiles: dict | None = None, per_method: bool = False
) -> dict:
    gc.collect()
    with sync_saver(bench, NAMES.get(name, OURS_HOT)) as (saver, _):
        if name == REDIS_PY:
            saver.cache._direct = False
        if name == DEFERRED:
            deferred_writes(saver.cache)
        if profiles is not None:
            profiled(saver, profiles)
        spent = timed_methods(saver) if per_method else None
        fig = run_chat_cell(bench, saver, lambda: None, p, delta=False)
        if spent is not None:
            turns = fig["turns"]
            fig["methods"] = {m: (cpu / turns, wall / turns) for m, (cpu, wall) in spent.items()}
            fig["methods"]["rest"] = (
                fig["per_invoke"]["client_cpu_s"] - sum(cpu for cpu, _ in fig["methods"].values()),
                0.0,
            )
        return fig


def wrap_methods(saver: Any, names: tuple[str, ...], around: Any) -> None:
    """Wrap each of the saver's methods `names` in `around(name)`, a context
    manager entered in whichever thread runs the call (LangGraph runs puts in a
    background thread); a call made inside another wrapped call is not wrapped
    again."""
    local = threading.local()

    def wrap(name: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "on", False):
                return method(*args, **kwargs)
            local.on = True
            try:
                with around(name):
                    return method(*args, **kwargs)
            finally:
                local.on = False

        return call

    for name in names:
        setattr(saver, name, wrap(name, getattr(saver, name)))


def timed_methods(saver: Any) -> dict[str, list[float]]:
    """Thread CPU and wall of the saver's get_tuple, put and put_writes, summed
    over the threads that run them (get_tuple's include the cell's get_state
    repeats after its turns)."""
    spent = {m: [0.0, 0.0] for m in METHODS}

    @contextlib.contextmanager
    def timed(name: str) -> Iterator[None]:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            yield
        finally:
            spent[name][0] += time.thread_time() - cpu
            spent[name][1] += time.perf_counter() - wall

    wrap_methods(saver, METHODS, timed)
    return spent


def deferred_writes(cache: Any) -> None:
    """Queue the cache's advance / add_writes scripts (answered 1 at once) and
    send them ahead of its next request, in that request's pipeline. UNSAFE:
    an upper bound of taking the write scripts off the turn, nothing more."""
    queue: list[CacheCall] = []
    lock = threading.Lock()
    perform = cache.perform

    def deferring(request: Any) -> Any:
        if isinstance(request, CacheCall) and request.script in ("advance", "add_writes"):
            with lock:
                queue.append(request)
            return 1
        with lock:
            queued, queue[:] = list(queue), []
        wire = cache._take() if queued and isinstance(request, CacheCall) else None
        if wire is None:
            for call in queued:
                perform(call)
            return perform(request)
        try:
            replies = wire.execute(
                [
                    ("EVALSHA", cache.scripts[c.script].sha, 1, c.key, *c.args)
                    for c in [*queued, request]
                ]
            )
        finally:
            cache._give(wire)
        return replies[-1]

    cache.perform = deferring


def script_times(redis_url: str) -> dict[str, list[int]]:
    """The Redis server's duration (µs) of each EVALSHA in its slowlog, per script."""
    client = redis.Redis.from_url(redis_url)
    try:
        # The SHAs as the cache has them (cache.RedisCache: register_script).
        shas = {client.register_script(lua).sha.encode(): name for name, lua in SCRIPTS.items()}
        entries = client.slowlog_get(1_000_000)
    finally:
        client.close()
    out: dict[str, list[int]] = {}
    for entry in entries:
        words = entry["command"].split(b" ")
        if words[0].upper() == b"EVALSHA" and len(words) > 1:
            out.setdefault(shas.get(words[1], "?"), []).append(entry["duration"])
    return out


@contextlib.contextmanager
def slowlog_everything(redis_url: str) -> Iterator[None]:
    """Every command of the (private) server in its slowlog, for `script_times`."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.config_set("slowlog-max-len", 1_000_000)
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
        yield
    finally:
        client.config_set("slowlog-log-slower-than", 10_000)
        client.close()


def profiled(saver: Any, profiles: dict) -> None:
    """Profile the saver's own methods in whichever thread runs them (LangGraph
    runs puts in a background thread, which a profiler of the main thread misses)."""

    @contextlib.contextmanager
    def profiling(name: str) -> Iterator[None]:
        profile = profiles.setdefault(
            (threading.get_ident(), name), cProfile.Profile(time.thread_time)
        )
        profile.enable()
        try:
            yield
        finally:
            profile.disable()

    wrap_methods(saver, (*METHODS, "list"), profiling)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chat_hot")
    parser.add_argument("rounds", type=int, nargs="?", default=3)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--profile", choices=(*NAMES, REDIS_PY))
    parser.add_argument("--redis-py", action="store_true", help=f"add the {REDIS_PY} cell")
    parser.add_argument("--deferred", action="store_true", help=f"add the {DEFERRED} cell")
    parser.add_argument("--per-method", action="store_true")
    parser.add_argument("--script-times", action="store_true")
    args = parser.parse_args()
    names = list(NAMES) + [REDIS_PY] * args.redis_py + [DEFERRED] * args.deferred
    durations: dict[str, list[int]] = {}
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    p = {**params_for(False), "chat_turns": args.turns}
    out: dict[str, list[dict]] = {}
    with private_postgres(log) as admin, private_redis(log) as redis_url:
        bench = Bench(admin, redis_url, private_redis=True)
        bench.create()
        try:
            for r in range(args.rounds):
                for name in names:
                    timing = args.script_times and name == "ours+redis" and redis_url
                    with slowlog_everything(redis_url) if timing else contextlib.nullcontext():
                        fig = cell(bench, name, p, per_method=args.per_method)
                        if timing:
                            for script, times in script_times(redis_url).items():
                                durations.setdefault(script, []).extend(times)
                    out.setdefault(name, []).append(fig)
                    inv = fig["per_invoke"]
                    log(
                        f"round {r} {name}: p50 {fig['p50_turn_s'] * 1e3:.2f} ms, get_state "
                        f"{fig['get_state_s'] * 1e3:.2f} ms, client "
                        f"{inv['client_cpu_s'] * 1e3:.2f} ms, pg {inv['pg_cpu_s'] * 1e3:.2f} ms, "
                        f"round trips {inv['round_trips']:.2f}, redis {inv['redis_commands']}"
                    )
            if args.profile:
                profiles: dict = {}
                cell(bench, args.profile, p, profiles)
                for method in ("get_tuple", "put", "put_writes", "list"):
                    mine = [prof for (_, m), prof in profiles.items() if m == method]
                    if not mine:
                        continue
                    text = io.StringIO()
                    stats = pstats.Stats(*mine, stream=text)
                    print(f"==== {method} ({len(mine)} threads)")
                    stats.sort_stats("tottime").print_stats(25)
                    stats.sort_stats("cumulative").print_stats(45)
                    print(text.getvalue())
        finally:
            bench.drop()
    med = {}
    for name, figs in out.items():
        med[name] = {
            "p50": statistics.median(f["p50_turn_s"] for f in figs),
            "get_state": statistics.median(f["get_state_s"] for f in figs),
            "client": statistics.median(f["per_invoke"]["client_cpu_s"] for f in figs),
            "pg": statistics.median(f["per_invoke"]["pg_cpu_s"] for f in figs),
            "redis": statistics.median(f["per_invoke"]["redis_commands"] or 0 for f in figs),
            "get_rt": statistics.median(f["per_get_state"]["round_trips"] for f in figs),
            "redis_cpu": statistics.median(f["per_invoke"]["redis_cpu_s"] for f in figs),
            "get_client": statistics.median(f["per_get_state"]["client_cpu_s"] for f in figs),
        }
    for name, m in med.items():
        print(
            f"{name:11s} p50 {m['p50'] * 1e3:6.2f} ms  client {m['client'] * 1e3:6.2f} ms  "
            f"pg {m['pg'] * 1e3:5.2f} ms  redis {m['redis']:6.1f} cmds "
            f"{m['redis_cpu'] * 1e3:5.2f} ms cpu  get_state "
            f"{m['get_state'] * 1e3:5.2f} ms (client {m['get_client'] * 1e3:5.2f} ms, "
            f"round trips {m['get_rt']:.2f})"
        )
    if args.per_method:
        for name, figs in out.items():
            print(
                f"{name:11s} per turn, thread CPU / wall (ms): "
                + ", ".join(
                    f"{m} {statistics.median(f['methods'][m][0] for f in figs) * 1e3:.2f} / "
                    f"{statistics.median(f['methods'][m][1] for f in figs) * 1e3:.2f}"
                    for m in (*METHODS, "rest")
                )
            )
    for script, times in sorted(durations.items()):
        print(
            f"script {script:10s} {len(times)} calls, Redis duration median "
            f"{statistics.median(times)} us, mean {statistics.mean(times):.1f} us"
        )
    for fig in out["ours+redis"][-1:]:
        turns = fig["turns"]
        calls = fig["per_invoke"]["redis_by_command"] or {}
        print(
            "redis commands per turn (last round): "
            + ", ".join(f"{c} {n / turns:.2f}" for c, n in sorted(calls.items()))
        )
    hot, ours, ref = med["ours+redis"], med["ours"], med["ref"]
    print(
        f"p50 redis vs not: {hot['p50'] / ours['p50']:.2f} (per-round "
        + ", ".join(
            f"{h['p50_turn_s'] / o['p50_turn_s']:.2f}"
            for h, o in zip(out["ours+redis"], out["ours"])
        )
        + f"); client CPU redis vs not: {hot['client'] / ours['client']:.2f}"
    )
    print(
        f"get_state redis vs ref: {hot['get_state'] / ref['get_state']:.2f} (per-round "
        + ", ".join(
            f"{h['get_state_s'] / f['get_state_s']:.2f}"
            for h, f in zip(out["ours+redis"], out["ref"])
        )
        + ")"
    )
    if DEFERRED in med:
        fast = med[DEFERRED]
        print(
            f"p50 {DEFERRED} vs not: {fast['p50'] / ours['p50']:.2f} (per-round "
            + ", ".join(
                f"{h['p50_turn_s'] / o['p50_turn_s']:.2f}"
                for h, o in zip(out[DEFERRED], out["ours"])
            )
            + f"); client CPU {DEFERRED} vs not: {fast['client'] / ours['client']:.2f}"
        )
    if REDIS_PY in med:
        slow = med[REDIS_PY]
        print(
            f"p50 {REDIS_PY} vs not: {slow['p50'] / ours['p50']:.2f}; client CPU "
            f"{REDIS_PY} vs not: {slow['client'] / ours['client']:.2f}"
        )


if __name__ == "__main__":
    main()
