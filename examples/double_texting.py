"""Double texting: a second message while the agent still answers the first.

Run:  python examples/double_texting.py
Uses COLOSSEUM_DATABASE_URL (or DATABASE_URL); with neither set, an embedded
PostgreSQL under ~/.local/share/colosseum (the `embedded` extra).

A support agent answers slowly. The user sends a message, then another one
before the answer arrives. `saver.runs(graph)` runs each message as a run on
the thread, and `multitask_strategy` says what the second one does:

- reject:    the second message is refused (ThreadBusyError); nothing of it is stored;
- enqueue:   it waits, then runs on the state the first one left;
- interrupt: the first run stops at its next step; what it stored is kept, its
             caller gets RunInterruptedError, and the second continues from there;
- rollback:  as interrupt, and everything the first run wrote is deleted first.

The two runs here are threads of one process so that the example is one file;
they work the same from two processes or two machines (the thread is taken in
Postgres, and its fencing token refuses the stopped run's later writes).
"""

from __future__ import annotations

import operator
import threading
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.graph import START, StateGraph

from langgraph_colosseum import (
    ColosseumSaver,
    RunInterruptedError,
    ThreadBusyError,
)


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


# The model's answer to a message waits until the example lets it go.
answering: dict[str, threading.Event] = {}
let_go: dict[str, threading.Event] = {}


def read(state: Chat) -> dict:
    return {"messages": [f"(read: {state['messages'][-1]})"]}


def answer(state: Chat) -> dict:
    question = state["messages"][-2]
    if question in let_go:
        answering[question].set()
        let_go[question].wait(30)
    return {"messages": [f"agent: re '{question}'"]}


def build_graph(saver: ColosseumSaver) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("read", read)
    builder.add_node("answer", answer)
    builder.add_edge(START, "read")
    builder.add_edge("read", "answer")
    return builder.compile(checkpointer=saver)


def slow(message: str) -> None:
    answering[message], let_go[message] = threading.Event(), threading.Event()


def in_background(runs: Any, message: str, config: dict, outcome: dict) -> threading.Thread:
    def send() -> None:
        try:
            runs.invoke({"messages": [message]}, config, durability="sync")
            outcome[message] = "answered"
        except RunInterruptedError as exc:
            outcome[message] = f"{type(exc).__name__} ({exc.status})"

    worker = threading.Thread(target=send)
    worker.start()
    return worker


def double_text(saver: ColosseumSaver, strategy: str) -> tuple[list[str], dict[str, str]]:
    """'first' is being answered when 'second' arrives with `strategy`."""
    runs = saver.runs(build_graph(saver))
    config = {"configurable": {"thread_id": f"support-{strategy}-{uuid.uuid4().hex[:6]}"}}
    runs.invoke({"messages": ["hello"]}, config)  # an earlier turn, answered
    outcome: dict[str, str] = {}
    first, second = f"first ({strategy})", f"second ({strategy})"
    slow(first)
    worker = in_background(runs, first, config, outcome)
    answering[first].wait(30)  # the agent is answering `first` now
    try:
        if strategy == "enqueue":  # waits for `first`: it is let go meanwhile
            queued = in_background(runs, second, config, outcome)
            while not saver.runs.list(config["configurable"]["thread_id"], status="pending"):
                threading.Event().wait(0.01)
            let_go[first].set()
            queued.join()
        else:
            runs.invoke({"messages": [second]}, config, multitask_strategy=strategy)
            outcome[second] = "answered"
    except ThreadBusyError:
        outcome[second] = "ThreadBusyError"
    let_go[first].set()
    worker.join()
    return runs.get_state(config).values["messages"], outcome


def main() -> None:
    with ColosseumSaver.from_env() as saver:
        saver.setup()
        for strategy in ("reject", "enqueue", "interrupt", "rollback"):
            messages, outcome = double_text(saver, strategy)
            print(f"\n{strategy}:")
            for message, said in outcome.items():
                print(f"  {message!r}: {said}")
            print("  thread: " + " | ".join(messages[3:]))
            first, second = f"first ({strategy})", f"second ({strategy})"
            if strategy == "reject":
                assert outcome[second] == "ThreadBusyError" and second not in messages
                print("reject: the second message was refused and never stored")
            elif strategy == "enqueue":
                assert messages.index(f"agent: re '{first}'") < messages.index(second)
                print("enqueue: the second ran after the first, on its state")
            elif strategy == "interrupt":
                assert outcome[first].startswith("RunInterruptedError")
                assert messages[3:5] == [first, f"(read: {first})"]  # its finished step
                print("interrupt: the first run's finished step was kept")
            else:
                assert outcome[first].startswith("RunRolledBackError")
                assert not any(first in m for m in messages)
                print("rollback: nothing of the first run remains")


if __name__ == "__main__":
    main()
