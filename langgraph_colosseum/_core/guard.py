"""Who holds a thread, as seen by the writes of the run inside `run_guard`.

`run_guard` sets `RUN_OWNER` for the code it wraps; `put` and `put_writes` send it
along, and Postgres refuses their writes when another live owner holds the
thread (see `sql.PUT`, the `fenced` CTE). LangGraph copies the context into the
threads and tasks that write checkpoints, so the graph's own writes carry it.
"""

from __future__ import annotations

import contextvars

RUN_OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "colosseum_run_owner", default=None
)
