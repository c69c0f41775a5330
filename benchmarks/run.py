"""The benchmark suite: our savers against langgraph-checkpoint-postgres, one process, one Postgres.

Run (from the repository root):

    .venv/bin/python -m benchmarks.run                 # everything
    .venv/bin/python -m benchmarks.run --quick         # smoke mode: fewer turns / checkpoints
    .venv/bin/python -m benchmarks.run --workloads chat-200 conc-32

By default the run starts its own PostgreSQL 18 (pg_stat_statements preloaded)
and redis-server on free loopback ports (see servers.py) and removes them at the
end; `--shared-servers` uses COLOSSEUM_BENCH_POSTGRES_URL (else
postgresql://postgres@127.0.0.1:5432/test) and COLOSSEUM_BENCH_REDIS_URL
instead, without statement and Redis command counts. Either way one fresh
database is created and dropped at the end. All savers run in this process
against it; before each (workload, saver) cell the saver's tables are
truncated, so bytes on disk belong to that cell alone.

One module per workload (see benchmarks/README.md): chat.py (chat-200,
chat-200-delta), conc.py (conc-32), longthread.py (long-20k, long-20k-graph),
search.py (search-100k); common.py holds the savers and the meters, report.py
the tables and the chart.

Output: a table on stdout and benchmarks/results/<out>.{md,json,png}
(<out> is `latest`, or `quick` with --quick, unless --out says otherwise).
Times are measured, never asserted; ratios are ours / PostgresSaver from the
same run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: put the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from psycopg import conninfo

from benchmarks.chat import run_chat
from benchmarks.common import (
    ADMIN_URL,
    ASYNC_SAVERS,
    MEMORY,
    OURS,
    REDIS_URL,
    REF,
    RESULTS_DIR,
    SQLITE,
    SYNC_SAVERS,
    WORKLOADS,
    Bench,
    log,
    params_for,
)
from benchmarks.conc import run_conc
from benchmarks.longthread import run_long
from benchmarks.report import compute_targets, render_markdown, write_chart
from benchmarks.search import run_search
from benchmarks.servers import private_pgbouncer, private_postgres, private_redis


def machine_info(bench: Bench) -> dict:
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    versions = {}
    for pkg in (
        "langgraph-colosseum",
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-postgres",
        "langgraph-checkpoint-sqlite",
        "psycopg",
        "aiosqlite",
    ):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "python": platform.python_version(),
        "postgres": bench.server_version(),
        "packages": ", ".join(f"{k} {v}" for k, v in versions.items()),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Benchmark ColosseumSaver against PostgresSaver (and floors).",
    )
    parser.add_argument("--quick", action="store_true", help="smoke mode: fewer turns")
    parser.add_argument(
        "--workloads",
        nargs="+",
        metavar="NAME",
        help=f"some of {', '.join(WORKLOADS)} (space or comma separated; default all)",
    )
    parser.add_argument(
        "--shared-servers",
        action="store_true",
        help="use COLOSSEUM_BENCH_POSTGRES_URL / COLOSSEUM_BENCH_REDIS_URL, not private servers",
    )
    parser.add_argument(
        "--out",
        help="results file stem under benchmarks/results (default latest, or quick with --quick)",
    )
    args = parser.parse_args(argv)
    chosen = []
    for item in args.workloads or list(WORKLOADS):
        for name in item.split(","):
            name = name.strip()
            if not name:
                continue
            if name not in WORKLOADS:
                parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
            chosen.append(name)
    args.workloads = [w for w in WORKLOADS if w in chosen]
    args.out = args.out or ("quick" if args.quick else "latest")
    return args


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # A killed run still stops its private servers and drops its database
    # (the `finally` blocks run on SystemExit, not on a bare SIGTERM).
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    p = params_for(args.quick)
    started = time.perf_counter()
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as servers:
        admin_url, redis_url = ADMIN_URL, REDIS_URL
        private_admin_url = private_redis_url = None
        if not args.shared_servers:
            private_admin_url = servers.enter_context(private_postgres(log))
            admin_url = private_admin_url or ADMIN_URL
            private_redis_url = servers.enter_context(private_redis(log))
            redis_url = private_redis_url or REDIS_URL
        bench = Bench(
            admin_url,
            redis_url,
            private_redis=private_redis_url is not None,
            private_postgres=private_admin_url is not None,
        )
        log(f"database {bench.name} on {conninfo.conninfo_to_dict(admin_url).get('port', '?')}")
        bench.create()
        bouncer = servers.enter_context(private_pgbouncer(admin_url, log))
        if bouncer is not None:
            bench.bouncer_url = bouncer.url(bench.name)
        try:
            machine = machine_info(bench)
            for workload in args.workloads:
                log(f"{workload}:")
                t0 = time.perf_counter()
                if workload == "chat-200":
                    results[workload] = run_chat(bench, p, False, SYNC_SAVERS)
                elif workload == "chat-200-delta":
                    results[workload] = run_chat(bench, p, True, SYNC_SAVERS)
                elif workload == "conc-32":
                    results[workload] = run_conc(bench, p, ASYNC_SAVERS)
                elif workload == "long-20k":
                    # Direct puts and reads of one long thread: the cache is not the subject.
                    results[workload] = run_long(bench, p, (MEMORY, SQLITE, REF, OURS))
                elif workload == "long-20k-graph":
                    # 20,000 graph steps take minutes per saver: the floor, the
                    # reference and ours only.
                    results[workload] = run_long(bench, p, (MEMORY, REF, OURS), graph=True)
                elif workload == "search-100k":
                    results[workload] = run_search(bench, p)
                log(f"  ({time.perf_counter() - t0:.0f} s)")
        finally:
            bench.drop()
    wall = time.perf_counter() - started

    targets = compute_targets(results, p)
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(
            ["python -m benchmarks.run", *(argv if argv is not None else sys.argv[1:])]
        ),
        "quick": args.quick,
        "workloads": args.workloads,
        "out": args.out,
        "wall_s": wall,
        "machine": machine,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = RESULTS_DIR / args.out
    markdown = render_markdown(meta, results, targets, p)
    chart_note = write_chart(stem.with_suffix(".png"), results, p, meta)
    if chart_note:
        markdown = markdown.replace(f"![ratios]({args.out}.png)", f"(chart: {chart_note})")
    stem.with_suffix(".md").write_text(markdown)
    stem.with_suffix(".json").write_text(
        json.dumps(
            {"meta": meta, "params": p, "results": results, "targets": targets},
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(markdown)
    written = [stem.with_suffix(s) for s in (".md", ".json")]
    if not chart_note:
        written.append(stem.with_suffix(".png"))
    log(
        "wrote "
        + ", ".join(
            str(w.relative_to(Path.cwd())) if w.is_relative_to(Path.cwd()) else str(w)
            for w in written
        )
    )
    log(f"wall time {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
