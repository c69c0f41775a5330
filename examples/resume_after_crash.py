"""Resume after a crash: a worker killed mid-run, the thread finished by another process.

Run:  python examples/resume_after_crash.py
Uses COLOSSEUM_DATABASE_URL (or DATABASE_URL); with neither set, an embedded
PostgreSQL under ~/.local/share/colosseum (the `embedded` extra).

A five-step pipeline runs in a worker process, which is killed (SIGKILL, no
cleanup) in the middle of the third step. A second worker, a new process that
knows only the thread id, resumes it: the two finished steps are not run
again, the interrupted one runs from its start, and no step is lost.
"""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import uuid
from typing import Annotated, TypedDict

from langgraph.graph import START, StateGraph

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum.embedded import worker_env

STEPS = ["fetch", "clean", "enrich", "score", "report"]
CRASH_IN = "EXAMPLE_CRASH_IN"  # the step a worker is killed in, for this example


class Pipeline(TypedDict):
    done: Annotated[list[str], operator.add]  # "step by pid", one entry per finished step


def step(name: str):
    def run(state: Pipeline) -> dict:
        if os.environ.get(CRASH_IN) == name:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a lost node would
        return {"done": [f"{name} by pid {os.getpid()}"]}

    return run


def build_graph(saver: ColosseumSaver):
    builder = StateGraph(Pipeline)
    previous = START
    for name in STEPS:
        builder.add_node(name, step(name))
        builder.add_edge(previous, name)
        previous = name
    return builder.compile(checkpointer=saver)


def work(thread_id: str) -> None:
    """A worker: run the thread from wherever it is (from the start when it is new)."""
    config = {"configurable": {"thread_id": thread_id}}
    with ColosseumSaver.from_env() as saver:
        graph = build_graph(saver)
        started = graph.get_state(config).next
        # durability="sync": each step is saved before the next starts, so a
        # kill loses at most the step in flight.
        graph.invoke(None if started else {"done": []}, config, durability="sync")


def run_worker(thread_id: str, crash_in: str | None = None) -> int:
    # The workers get the resolved URLs: they share this process's database
    # and never start (or hold) an embedded server of their own.
    env = {**os.environ, **worker_env()}
    env.pop(CRASH_IN, None)
    if crash_in:
        env[CRASH_IN] = crash_in
    return subprocess.run([sys.executable, __file__, "--worker", thread_id], env=env).returncode


def main() -> None:
    thread_id = f"pipeline-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}}
    with ColosseumSaver.from_env() as saver:
        saver.setup()
        graph = build_graph(saver)

        code = run_worker(thread_id, crash_in="enrich")
        state = graph.get_state(config)
        print(
            f"worker 1 killed (exit {code}) during 'enrich'; saved so far: {state.values['done']}"
        )
        print(f"the thread waits at next = {state.next}")
        assert code == -signal.SIGKILL and state.next == ("enrich",)

        code = run_worker(thread_id)
        state = graph.get_state(config)
        print(f"worker 2 resumed thread {thread_id} by its id (exit {code}):")
        for entry in state.values["done"]:
            print(f"  {entry}")

    finished = [entry.split()[0] for entry in state.values["done"]]
    assert finished == STEPS, finished  # every step once, in order: none lost, none repeated
    print("no step lost, none run twice")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        work(sys.argv[2])
    else:
        main()
