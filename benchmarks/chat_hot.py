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
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import signal
import statistics
import sys
import threading
import time
from typing import Any

from benchmarks.chat import run_chat_cell
from benchmarks.common import OURS, OURS_HOT, REF, Bench, params_for, sync_saver
from benchmarks.servers import private_postgres, private_redis

NAMES = {"ref": REF, "ours": OURS, "ours+redis": OURS_HOT}
# With --redis-py: ours+redis again, its requests sent through redis-py's own
# client rather than the connections the cache drives (cache.RedisCache).
REDIS_PY = "ours+redis-py"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cell(bench: Bench, name: str, p: dict, profiles: dict | None = None) -> dict:
    gc.collect()
    with sync_saver(bench, NAMES.get(name, OURS_HOT)) as (saver, _):
        if name == REDIS_PY:
            saver.cache._direct = False
        if profiles is not None:
            profiled(saver, profiles)
        return run_chat_cell(bench, saver, lambda: None, p, delta=False)


def profiled(saver: Any, profiles: dict) -> None:
    """Profile the saver's own methods in whichever thread runs them (LangGraph
    runs puts in a background thread, which a profiler of the main thread misses)."""
    local = threading.local()

    def wrap(method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "on", False):
                return method(*args, **kwargs)
            profile = profiles.setdefault(
                (threading.get_ident(), method.__name__), cProfile.Profile(time.thread_time)
            )
            local.on = True
            profile.enable()
            try:
                return method(*args, **kwargs)
            finally:
                profile.disable()
                local.on = False

        return call

    for name in ("get_tuple", "put", "put_writes", "list"):
        setattr(saver, name, wrap(getattr(saver, name)))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chat_hot")
    parser.add_argument("rounds", type=int, nargs="?", default=3)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--profile", choices=(*NAMES, REDIS_PY))
    parser.add_argument("--redis-py", action="store_true", help=f"add the {REDIS_PY} cell")
    args = parser.parse_args()
    names = [*NAMES, REDIS_PY] if args.redis_py else list(NAMES)
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    p = {**params_for(False), "chat_turns": args.turns}
    out: dict[str, list[dict]] = {}
    with private_postgres(log) as admin, private_redis(log) as redis_url:
        bench = Bench(admin, redis_url, private_redis=True)
        bench.create()
        try:
            for r in range(args.rounds):
                for name in names:
                    fig = cell(bench, name, p)
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
    if REDIS_PY in med:
        slow = med[REDIS_PY]
        print(
            f"p50 {REDIS_PY} vs not: {slow['p50'] / ours['p50']:.2f}; client CPU "
            f"{REDIS_PY} vs not: {slow['client'] / ours['client']:.2f}"
        )


if __name__ == "__main__":
    main()
