"""A run-guard holder that `test_threads.py` kills with SIGKILL.

Usage: ``python threads_worker.py URL THREAD_ID LEASE_SECONDS``

Takes `run_guard(THREAD_ID, lease=LEASE_SECONDS)` (its heartbeat keeps the
lease alive), prints ``HELD`` and then sleeps until it is killed. It never
releases the guard on its own.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

from langgraph_colosseum import ColosseumSaver


def main(url: str, thread_id: str, lease_seconds: float) -> None:
    with ColosseumSaver.from_conn_string(url, pool_size=2) as saver:
        with saver.run_guard(thread_id, lease=timedelta(seconds=lease_seconds)):
            print("HELD", flush=True)
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
