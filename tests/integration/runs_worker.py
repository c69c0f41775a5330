"""A long-lived worker process for `test_runs.py`: runs sent to it on stdin.

Usage: ``python runs_worker.py`` (then one JSON command per line on stdin).

Commands:
* ``{"cmd": "run", "id": ..., "url": ..., "redis": [url, prefix] | null,
  "thread": ..., "msg": ..., "strategy": ..., "lease": s, "gate": bool,
  "barrier": name | null}``: in a thread of its own, print ``{"event": "ready"}``
  and wait for the barrier (if any), then ``saver.runs(graph).invoke({"messages": [msg]}, ...)``. The graph
  is START -> think -> answer -> END, appending ``msg:think``, ``msg:answer``;
  with "gate", `answer` prints ``{"event": "entered", "msg": msg}`` and waits
  for the gate named `msg` to open. Prints ``{"event": "done", "id": ...,
  "outcome": "success" | <exception class>, "run_id": ..., "takes": n,
  "connections": n}``: the TAKEs the run sent to Postgres (retries included)
  and the connections its own thread opened (a pool opens its own in threads
  of its own: not counted), once its saver was made.
* ``{"cmd": "open", "name": ...}``: open a gate or barrier.

Savers are made once per (url, redis) and kept: a test pays for the process
and its imports once per module, not once per run.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import threading
import traceback
import uuid
from collections import Counter, defaultdict
from datetime import timedelta
from typing import Annotated, Any

import psycopg
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_colosseum import ColosseumSaver, _driver
from langgraph_colosseum._core import multitask
from langgraph_colosseum._core.io import Query, Transaction

GATE_SECONDS = 60
# What a run may be told under a multitask strategy; anything else is a bug: printed.
EXPECTED = {"ThreadBusyError", "RunInterruptedError", "RunRolledBackError", "RunQueueTimeoutError"}


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


_print_lock = threading.Lock()
_gates: defaultdict[str, threading.Event] = defaultdict(threading.Event)
_savers: dict[str, Any] = {}


# What a run costs Postgres, counted where every statement and connection of
# this process passes (a counter in front of the real call, nothing replaced).
_takes: Counter[str] = Counter()
_connections: Counter[str] = Counter()
_counting = threading.local()  # .run: the run id this thread runs, once its saver is made
_send, _connect = _driver._perform, psycopg.Connection.connect.__func__


def _counted_send(conn: Any, request: Any) -> Any:
    queries = request.queries if isinstance(request, Transaction) else (request,)
    for query in queries:
        if isinstance(query, Query) and query.sql == multitask.TAKE:
            _takes[query.params["run_id"]] += 1
    return _send(conn, request)


def _counted_connect(cls: Any, *args: Any, **kwargs: Any) -> Any:
    run = getattr(_counting, "run", None)
    if run is not None:
        _connections[run] += 1
    return _connect(cls, *args, **kwargs)


_driver._perform = _counted_send
psycopg.Connection.connect = classmethod(_counted_connect)  # type: ignore[method-assign]
psycopg.connect = psycopg.Connection.connect


def say(**event: Any) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def chat_graph(saver: Any, gated: bool) -> Any:
    def think(state: Chat) -> dict:
        return {"messages": [f"{state['messages'][-1]}:think"]}

    def answer(state: Chat) -> dict:
        msg = state["messages"][-1].removesuffix(":think")
        if gated:
            say(event="entered", msg=msg)
            _gates[msg].wait(GATE_SECONDS)
            del _gates[msg]  # the next test's run of the same message waits again
        return {"messages": [f"{msg}:answer"]}

    builder = StateGraph(Chat)
    builder.add_node("think", think)
    builder.add_node("answer", answer)
    builder.add_edge(START, "think")
    builder.add_edge("think", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def saver_for(url: str, cache: list[str] | None) -> Any:
    key = json.dumps([url, cache])
    if key not in _savers:
        options = {"redis_url": cache[0], "cache_prefix": cache[1]} if cache else {}
        context = ColosseumSaver.from_conn_string(url, pool_size=3, **options)
        # Both kept for the process's life: a collected context closes its pool.
        _savers[key] = (context, context.__enter__())
    return _savers[key][1]


def run(command: dict) -> None:
    run_id = str(uuid.uuid4())
    try:
        saver = saver_for(command["url"], command.get("redis"))
        runs = saver.runs(
            chat_graph(saver, command.get("gate", False)),
            command["strategy"],
            lease=timedelta(seconds=command.get("lease", 30)),
        )
        _counting.run = run_id
        if command.get("barrier"):
            say(event="ready", id=command["id"])
            _gates[command["barrier"]].wait(GATE_SECONDS)
        config = {"configurable": {"thread_id": command["thread"]}, "run_id": run_id}
        runs.invoke({"messages": [command["msg"]]}, config, durability="sync")
        outcome = "success"
    except Exception as exc:
        outcome = type(exc).__name__
        if outcome not in EXPECTED:
            traceback.print_exc()
    _counting.run = None
    say(event="done", id=command["id"], outcome=outcome, run_id=run_id,
        takes=_takes.pop(run_id, 0), connections=_connections.pop(run_id, 0))  # fmt: skip


def main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "run":
            threading.Thread(target=run, args=(command,), daemon=True).start()
        elif command["cmd"] == "open":
            _gates[command["name"]].set()
    # stdin closed: the test is over (no need to close pools on the way out)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
