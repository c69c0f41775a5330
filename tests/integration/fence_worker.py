"""A run-guard holder that `test_fencing.py` pauses (SIGSTOP) inside a node.

Usage: ``python fence_worker.py URL THREAD_ID LEASE_SECONDS GO_FILE MODE [REDIS_URL PREFIX]``

MODE is ``sync`` or ``async``. Takes `run_guard(THREAD_ID, lease=LEASE_SECONDS)`
and runs a turn: START -> quote -> hold -> END, where `hold` prints ``IN_NODE``
and waits until GO_FILE exists. It prints ``OK`` if the turn finished, or
``REFUSED <exception class>`` if a write was refused.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from tests.integration.test_fencing import fence_graph


def hold_until(go: Path):
    def hold(state: dict) -> dict:
        print("IN_NODE", flush=True)
        while not go.exists():
            time.sleep(0.02)
        return {"seen": ["held"]}

    return hold


def main(url: str, tid: str, lease: float, go: Path, mode: str, cache: list[str]) -> None:
    options = {"redis_url": cache[0], "cache_prefix": cache[1]} if cache else {}
    config = {"configurable": {"thread_id": tid}}
    try:
        if mode == "sync":
            with ColosseumSaver.from_conn_string(url, pool_size=2, **options) as saver:
                with saver.run_guard(tid, lease=timedelta(seconds=lease)):
                    fence_graph(saver, hold_until(go)).invoke({"ticker": "H1"}, config)
        else:

            async def run() -> None:
                async with AsyncColosseumSaver.from_conn_string(url, **options) as saver:
                    async with saver.run_guard(tid, lease=timedelta(seconds=lease)):
                        graph = fence_graph(saver, hold_until(go))
                        await graph.ainvoke({"ticker": "H1"}, config)

            asyncio.run(run())
    except Exception as exc:
        print("REFUSED", type(exc).__name__, exc, flush=True)
        return
    print("OK", flush=True)


if __name__ == "__main__":
    main(
        sys.argv[1], sys.argv[2], float(sys.argv[3]), Path(sys.argv[4]), sys.argv[5],
        sys.argv[6:],
    )  # fmt: skip
