"""chat-200 on a saver built with on_conflict="raise", beside the same saver
without it and the reference, interleaved in one process on private servers
(issue 15 item 3: what the optimistic check costs one worker with no
conflicts; the default statements are the same as before).

    python -m benchmarks.on_conflict 3          # 3 rounds of 200 turns per cell
    python -m benchmarks.on_conflict 1 --quick  # 20 turns, a smoke run
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import json
import signal
import sys
import time
from typing import Any

from benchmarks.chat import run_chat_cell
from benchmarks.common import (
    OURS,
    OURS_HOT,
    OURS_HOT_ON_CONFLICT,
    OURS_ON_CONFLICT,
    REF,
    Bench,
    params_for,
    sync_saver,
)
from benchmarks.encryption import RESULTS, _exit, figures, log, report
from benchmarks.servers import private_postgres, private_redis

CELLS = (REF, OURS, OURS_ON_CONFLICT, OURS_HOT, OURS_HOT_ON_CONFLICT)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _exit)
    quick = "--quick" in argv
    reps = int(next((a for a in argv if a.isdigit()), "3"))
    p = params_for(quick)
    rounds: dict[str, list[dict]] = {cell: [] for cell in CELLS}
    raw: dict[str, list[Any]] = {cell: [] for cell in CELLS}
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
                        f"client {shown['client_cpu_s'] * 1e3:.1f} ms/invoke"
                    )
        finally:
            bench.drop()
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m benchmarks.on_conflict", *argv]),
        "rounds": reps,
        "turns": p["chat_turns"],
        "wall_s": time.perf_counter() - started,
        "servers": " and a private Redis",
    }
    text = report(rounds, meta, title='chat-200: on_conflict="raise"')
    print(text)
    stem = "on-conflict-quick" if quick else "on-conflict"
    (RESULTS / f"{stem}.md").write_text(text)
    (RESULTS / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "rounds": rounds, "raw": raw}, indent=1, default=str)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
