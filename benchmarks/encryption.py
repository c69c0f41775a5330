"""chat-200 with encryption on and through PgBouncer, beside the plain figures
and the reference, interleaved in one process on one private server (issue 19).

Each round runs every cell once, in the same order; the medians over the
rounds are printed and written to results/encryption-rounds.{md,json}.

    python -m benchmarks.encryption 3          # 3 rounds of 200 turns per cell
    python -m benchmarks.encryption 1 --quick  # 20 turns, a smoke run
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import json
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.chat import run_chat_cell
from benchmarks.common import (
    OURS,
    OURS_BOUNCER,
    OURS_BOUNCER_ENCRYPTED,
    OURS_ENCRYPTED,
    REF,
    Bench,
    params_for,
    sync_saver,
)
from benchmarks.servers import private_pgbouncer, private_postgres, private_redis

CELLS = (REF, OURS, OURS_ENCRYPTED, OURS_BOUNCER, OURS_BOUNCER_ENCRYPTED)
FIGURES = {
    "p50_turn_s": ("p50 per turn", 1e3, "ms"),
    "bytes_on_disk": ("bytes on disk", 1e-6, "MB"),
    "client_cpu_s": ("client CPU per invoke", 1e3, "ms"),
    "pg_cpu_s": ("Postgres CPU per invoke", 1e3, "ms"),
    "get_state_s": ("get_state", 1e3, "ms"),
    "history_s": ("full history", 1, "s"),
}
RESULTS = Path(__file__).parent / "results"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def figures(cell: dict) -> dict[str, float | None]:
    per_invoke = cell.get("per_invoke", {})
    out = {k: cell.get(k) for k in FIGURES}
    out["client_cpu_s"] = per_invoke.get("client_cpu_s")
    out["pg_cpu_s"] = per_invoke.get("pg_cpu_s")
    return out


def median(rounds: list[dict], key: str) -> float | None:
    values = [r[key] for r in rounds if r.get(key) is not None]
    return statistics.median(values) if values else None


def report(
    rounds: dict[str, list[dict]], meta: dict, title: str = "chat-200: encryption and PgBouncer"
) -> str:
    """The medians of each cell, with ratios to ColosseumSaver (plain)."""
    lines = [
        f"# {title}",
        "",
        f"Run {meta['date']} with `{meta['command']}`: {meta['rounds']} rounds, "
        f"{meta['turns']} turns per cell, cells interleaved in one process on one "
        f"private PostgreSQL{meta.get('servers', ' (and PgBouncer in transaction mode)')}; "
        f"wall time {meta['wall_s']:.0f} s.",
        "Medians over the rounds; ratios are to ColosseumSaver (plain) from the same run.",
        "",
        "| cell | " + " | ".join(f"{name} ({unit})" for name, _, unit in FIGURES.values()) + " |",
        "|---|" + "---|" * len(FIGURES),
    ]
    plain = {k: median(rounds.get(OURS, []), k) for k in FIGURES}
    for cell, cell_rounds in rounds.items():
        row = [cell]
        for key, (_, scale, _) in FIGURES.items():
            value = median(cell_rounds, key)
            if value is None:
                row.append("n/a")
                continue
            text = f"{value * scale:.2f}"
            if cell != OURS and plain[key]:
                text += f" (x{value / plain[key]:.2f})"
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _exit)
    quick = "--quick" in argv
    reps = int(next((a for a in argv if a.isdigit()), "3"))
    p = params_for(quick)
    rounds: dict[str, list[dict]] = {cell: [] for cell in CELLS}
    raw: dict[str, list[dict]] = {cell: [] for cell in CELLS}
    started = time.perf_counter()
    with contextlib.ExitStack() as servers:
        admin = servers.enter_context(private_postgres(log))
        redis_url = servers.enter_context(private_redis(log))
        if admin is None or redis_url is None:
            log("needs the embedded PostgreSQL and redis-server (private servers)")
            return 1
        bench = Bench(admin, redis_url, private_redis=True)
        bench.create()
        try:
            bouncer = servers.enter_context(private_pgbouncer(admin, log))
            if bouncer is not None:
                bench.bouncer_url = bouncer.url(bench.name)
            for rep in range(reps):
                for cell in CELLS:
                    gc.collect()
                    with sync_saver(bench, cell) as (saver, bytes_fn):
                        result = run_chat_cell(bench, saver, bytes_fn, p, delta=False)
                    raw[cell].append(result)
                    rounds[cell].append(figures(result))
                    shown = rounds[cell][-1]
                    log(
                        f"round {rep} {cell}: p50 {shown['p50_turn_s'] * 1e3:.1f} ms, "
                        f"{shown['bytes_on_disk'] / 1e6:.2f} MB, "
                        f"client {shown['client_cpu_s'] * 1e3:.1f} ms/invoke"
                    )
        finally:
            bench.drop()
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m benchmarks.encryption", *argv]),
        "rounds": reps,
        "turns": p["chat_turns"],
        "wall_s": time.perf_counter() - started,
    }
    text = report(rounds, meta)
    print(text)
    stem = "encryption-rounds-quick" if quick else "encryption-rounds"
    (RESULTS / f"{stem}.md").write_text(text)
    (RESULTS / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "rounds": rounds, "raw": raw}, indent=1, default=str)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
