"""long-20k alone, ours against PostgresSaver, repeated: the issue 14 targets of a long thread.

    python -m benchmarks.long_ab direct 20000 3   # direct puts, 3 runs
    python -m benchmarks.long_ab graph 20000 3    # a counter node looping in one run
    python -m benchmarks.long_ab both 5000 3

Each run fills a fresh thread per saver (tables truncated, as benchmarks.run
does), then measures `get_tuple` at the head (median of 20) and one full
`list()`, with longthread.py's code; ours twice, as configured by default
and with `inline_values=True`. Printed per run and as medians of the
per-run ratios (ours / PostgresSaver of the same run); raw figures go to
/tmp/long-ab-<shape>-<n>.json. One private PostgreSQL 18 (pg_stat_statements).
"""

from __future__ import annotations

import gc
import json
import signal
import statistics
import sys
import time
import uuid

from benchmarks.common import OURS, OURS_INLINE, REF, Bench, Meter, sync_saver
from benchmarks.longthread import fill, list_all, loop_graph
from benchmarks.servers import private_postgres


def _exit(signum, frame):
    raise SystemExit(128 + signum)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def one(bench: Bench, name: str, shape: str, n: int) -> dict:
    with sync_saver(bench, name) as (saver, _):
        thread = f"{shape}-{uuid.uuid4().hex[:8]}"
        with Meter(bench) as m:
            if shape == "direct":
                fill(
                    saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 0, n, None
                )
            else:
                loop_graph(saver).invoke(
                    {"counter": 0, "target": n},
                    {"configurable": {"thread_id": thread}, "recursion_limit": n + 10},
                )
        put = m.per(n)
        put["puts_per_s"] = n / m.figures["wall_s"]
        head = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        saver.get_tuple(head)
        times = []
        with Meter(bench) as m:
            for _ in range(20):
                t0 = time.perf_counter()
                saver.get_tuple(head)
                times.append(time.perf_counter() - t0)
        get = m.per(20)
        get["median_s"] = statistics.median(times)
        gc.collect()
        with Meter(bench) as m:
            seen, _ = list_all(saver, {"configurable": {"thread_id": thread}}, 300)
        listed = m.per(1)
        listed["seen"] = seen
    return {"put": put, "get": get, "list": listed}


def fmt(r: dict) -> str:
    p, g, li = r["put"], r["get"], r["list"]
    return (
        f"puts/s {p['puts_per_s']:.0f} (client {p['client_cpu_s'] * 1e6:.0f} us pg "
        f"{p['pg_cpu_s'] * 1e6:.0f} us) | get {g['median_s'] * 1e6:.0f} us (client "
        f"{g['client_cpu_s'] * 1e6:.0f} us, plan {g['pg_plan_ms'] or 0:.3f} exec "
        f"{g['pg_exec_ms'] or 0:.3f} ms) | list {li['wall_s']:.3f} s (client "
        f"{li['client_cpu_s']:.3f} pg {li['pg_cpu_s']:.3f} s, rt {li['round_trips']:.0f}, "
        f"plan {li['pg_plan_ms'] or 0:.1f} exec {li['pg_exec_ms'] or 0:.1f} ms, seen {li['seen']})"
    )


def main() -> None:
    signal.signal(signal.SIGTERM, _exit)
    what, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    shapes = ("direct", "graph") if what == "both" else (what,)
    out: dict = {}
    with private_postgres(log) as admin:
        bench = Bench(admin)
        bench.create()
        try:
            for shape in shapes:
                for rep in range(reps):
                    for name in (REF, OURS, OURS_INLINE):
                        r = one(bench, name, shape, n)
                        out.setdefault(shape, {}).setdefault(name, []).append(r)
                        log(f"{shape} {rep} {name}: {fmt(r)}")
        finally:
            bench.drop()
    with open(f"/tmp/long-ab-{what}-{n}.json", "w") as f:
        json.dump(out, f, default=str, indent=1)
    for shape, cells in out.items():
        for ours_name in (OURS, OURS_INLINE):
            print(f"{shape} n={n} {ours_name}: {_medians(cells, ours_name)}")


def _medians(cells: dict, ours_name: str) -> str:
    """The medians of one of ours against PostgresSaver, and of their per-run ratios."""
    ratios: dict[str, list[float]] = {"get": [], "list": [], "puts": []}
    for ref, ours in zip(cells[REF], cells[ours_name]):
        ratios["get"].append(ours["get"]["median_s"] / ref["get"]["median_s"])
        ratios["list"].append(ours["list"]["wall_s"] / ref["list"]["wall_s"])
        ratios["puts"].append(ours["put"]["puts_per_s"] / ref["put"]["puts_per_s"])

    def med(name: str, part: str, key: str) -> float:
        return statistics.median(r[part][key] for r in cells[name])

    return (
        f"medians of {len(cells[REF])}: "
        f"get_tuple {med(ours_name, 'get', 'median_s') * 1e6:.0f} / "
        f"{med(REF, 'get', 'median_s') * 1e6:.0f} us = {statistics.median(ratios['get']):.2f}; "
        f"list {med(ours_name, 'list', 'wall_s'):.3f} / {med(REF, 'list', 'wall_s'):.3f} s = "
        f"{statistics.median(ratios['list']):.2f}; puts/s {med(ours_name, 'put', 'puts_per_s'):.0f}"
        f" / {med(REF, 'put', 'puts_per_s'):.0f} = {statistics.median(ratios['puts']):.2f}"
    )


if __name__ == "__main__":
    main()
