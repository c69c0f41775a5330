"""Who holds a thread, as seen by the writes of the run inside `run_guard`.

`run_guard` sets `RUN_OWNER` for the code it wraps; `put` and `put_writes` send
its owner and fencing token along, and Postgres refuses their writes when
another live owner holds the thread, or when this guard no longer owns it with
this token (its lease lapsed and another run took the thread: "lease lost"; see
`sql._FENCED`). LangGraph copies the context into the threads and tasks that
write checkpoints, so the graph's own writes carry it.
"""

from __future__ import annotations

import contextvars
from typing import NamedTuple


class RunFence(NamedTuple):
    """The guard a write is made under: its thread, owner and fencing token."""

    thread_id: str
    owner: str
    token: int


RUN_OWNER: contextvars.ContextVar[RunFence | None] = contextvars.ContextVar(
    "colosseum_run_owner", default=None
)


def fence_of(thread_id: str) -> tuple[str | None, int | None]:
    """(owner, token) for a write to `thread_id`: the guard's, when it guards that thread.

    A write to another thread from inside a guard (a node running a graph on
    another thread) is not made under that guard.
    """
    fence = RUN_OWNER.get()
    if fence is None or fence.thread_id != thread_id:
        return None, None
    return fence.owner, fence.token
