"""One application at three state versions, each run in a process of its own.

    APP_STATE_VERSION=N python -m tests.integration.versioned_app COMMAND PG_URL REDIS_URL PREFIX [ARG]

Version 1 writes threads; versions 2 and 3 resume them, as a deploy would. The
module defines the classes and graph of the version named by APP_STATE_VERSION,
under the same module and class names each time (a stored `Profile` names
``tests.integration.versioned_app:Profile`` whatever its definition).

v1 -> v2: `title` renamed `headline`; `tag` str -> list[str]; channel `scratch`
removed; `Profile` gains `tier` (default "free") and loses `legacy_score`;
the interrupt's value becomes a dict. v2 -> v3: node `summarise` renamed `summarize`.

Each COMMAND prints one JSON object (reprs of what it saw) on its last line.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from typing import Annotated, Any, TypedDict

import pydantic
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

VERSION = int(os.environ.get("APP_STATE_VERSION", "1"))
FAILING: set[str] = set()  # headlines/titles whose `right` node raises (a crash mid-step)

if VERSION == 1:

    class Profile(pydantic.BaseModel):
        name: str
        legacy_score: int

    class State(TypedDict, total=False):
        title: str
        tag: str
        scratch: str
        profile: Profile
        notes: Annotated[list[str], operator.add]
        summary: str

    def plan(state: State) -> dict:
        return {"notes": [f"plan:{state['title']}"], "scratch": "planned"}

    def left(state: State) -> dict:
        return {"notes": [f"left:{state['tag']}"], "tag": state["tag"].upper()}

    def right(state: State) -> dict:
        if state["title"] in FAILING:
            raise RuntimeError("right fails this time")
        return {"notes": [f"right:{state['profile'].name}"]}

    def summarise(state: State) -> dict:
        title = state["title"]
        answer = interrupt(f"approve {title}?") if title.startswith("ask") else "auto"
        return {"summary": f"{title}:{answer}:{len(state['notes'])}"}

else:

    class Profile(pydantic.BaseModel):  # type: ignore[no-redef]
        name: str
        tier: str = "free"

    class State(TypedDict, total=False):  # type: ignore[no-redef]
        headline: str
        tag: list[str]
        profile: Profile
        notes: Annotated[list[str], operator.add]
        summary: str

    def plan(state: State) -> dict:  # type: ignore[misc]
        return {"notes": [f"plan:{state['headline']}"]}

    def left(state: State) -> dict:  # type: ignore[misc]
        return {
            "notes": [f"left:{'+'.join(state['tag'])}"],
            "tag": [t.upper() for t in state["tag"]],
        }

    def right(state: State) -> dict:  # type: ignore[misc]
        if state["headline"] in FAILING:
            raise RuntimeError("right fails this time")
        return {"notes": [f"right:{state['profile'].name}"]}

    def summarise(state: State) -> dict:  # type: ignore[misc]
        headline = state["headline"]
        answer = interrupt({"approve": headline}) if headline.startswith("ask") else "auto"
        tier = state["profile"].tier  # the field v1's Profile did not have
        return {"summary": f"{headline}:{answer}:{len(state['notes'])}:{tier}"}


SUMMARY_NODE = "summarize" if VERSION >= 3 else "summarise"


def builder() -> StateGraph:
    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("left", left)
    graph.add_node("right", right)
    graph.add_node(SUMMARY_NODE, summarise)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "left")
    graph.add_edge("plan", "right")
    graph.add_edge(["left", "right"], SUMMARY_NODE)
    graph.add_edge(SUMMARY_NODE, END)
    return graph


def up_1_to_2(values: dict[str, Any]) -> None:
    if "title" in values:
        values["headline"] = values.pop("title")
    if isinstance(values.get("tag"), str):  # a list is v2's already
        values["tag"] = [values["tag"]]
    values.pop("scratch", None)


def interrupt_1_to_2(value: str) -> dict:
    return {"approve": value.removeprefix("approve ").removesuffix("?")}


def migrations(*, map_nodes: bool = True) -> dict:
    from langgraph_colosseum import Migration

    found: dict[int, Any] = {}
    if VERSION >= 2:
        found[1] = Migration(up_1_to_2, interrupts=interrupt_1_to_2)
    if VERSION >= 3:
        found[2] = Migration(nodes={"summarise": "summarize"} if map_nodes else {})
    return found


def versions() -> Any:
    """This version's StateVersions (what `colosseum state migrate --migrations` loads)."""
    from langgraph_colosseum import StateVersions

    return StateVersions(VERSION, migrations())


VERSIONS = versions()


# The three threads of the issue, by kind: (title, how the v1 run ends).
KINDS = {"done": "done-1", "ask": "ask-1", "fail": "fail-1"}


def v1_input(title: str) -> dict:
    return {
        "title": title,
        "tag": "x",
        "scratch": "s",
        "profile": Profile(name="ann", legacy_score=7),
        "notes": [],
    }  # type: ignore[call-arg]


def v2_input(title: str) -> dict:
    return {"headline": title, "tag": ["x"], "profile": Profile(name="ann"), "notes": []}


def first_run(graph: Any, kind: str, thread_id: str, title: str, inputs: dict) -> None:
    """The part of a thread's life the v1 code lives (or, for the reference, v2 code)."""
    config = {"configurable": {"thread_id": thread_id}}
    if kind == "fail":
        FAILING.add(title)
        try:
            graph.invoke(inputs, config)
        except RuntimeError:
            pass
        finally:
            FAILING.discard(title)
    else:
        graph.invoke(inputs, config)


def second_run(graph: Any, kind: str, thread_id: str) -> Any:
    """What the newer code does next with a thread of each kind."""
    config = {"configurable": {"thread_id": thread_id}}
    if kind == "ask":
        return graph.invoke(Command(resume="yes"), config)
    if kind == "fail":
        return graph.invoke(None, config)
    return graph.invoke({"notes": ["again"]}, config)


def state_repr(graph: Any, thread_id: str) -> str:
    snapshot = graph.get_state({"configurable": {"thread_id": thread_id}})
    return repr((snapshot.values, snapshot.next, [i.value for i in snapshot.interrupts]))


def saver_for(pg_url: str, redis_url: str, prefix: str) -> Any:
    from langgraph_colosseum import ColosseumSaver

    return ColosseumSaver.from_conn_string(
        pg_url, types=[Profile], redis_url=redis_url, cache_prefix=prefix
    )


def write(saver: Any) -> None:
    """v1: every kind of thread, for each later version to resume."""
    graph = builder().compile(checkpointer=saver)
    for later in ("v2", "v3", "orphan"):
        for kind, title in KINDS.items():
            first_run(graph, kind, f"{later}-{kind}", title, v1_input(title))


def seed(saver: Any, count: int) -> None:
    """v1: `count` finished threads, for `colosseum state migrate`."""
    graph = builder().compile(checkpointer=saver)
    for i in range(count):
        graph.invoke(v1_input(f"m{i}"), {"configurable": {"thread_id": f"m-{i:03}"}})


def check(saver: Any, count: int) -> dict:
    """The migrated heads m-000.., as this version's graph reads them, beside the
    reference: this version's graph run on this version's data."""
    graph = saver.versioned(builder().compile(), VERSIONS)
    reference = builder().compile(checkpointer=InMemorySaver())
    out = {}
    for i in range(count):
        thread_id = f"m-{i:03}"
        reference.invoke(v2_input(f"m{i}"), {"configurable": {"thread_id": thread_id}})
        ours = graph.get_state({"configurable": {"thread_id": thread_id}})
        theirs = reference.get_state({"configurable": {"thread_id": thread_id}})
        # v1's summary has no tier: the only value v1 code made differently.
        theirs.values["summary"] = theirs.values["summary"].removesuffix(":free")
        out[thread_id] = [repr(ours.values), repr(theirs.values), ours.metadata["source"]]
    return out


def main(command: str, pg_url: str, redis_url: str, prefix: str, arg: str = "") -> dict:
    out: dict[str, Any] = {}
    with saver_for(pg_url, redis_url, prefix) as saver:
        if command == "seed":  # v1: `arg` finished threads for `colosseum state migrate`
            graph = builder().compile(checkpointer=saver)
            for i in range(int(arg)):
                graph.invoke(v1_input(f"m{i}"), {"configurable": {"thread_id": f"m-{i:03}"}})
            return out
        if command == "work":  # this version's worker: new threads until `arg` exists
            graph = saver.versioned(builder().compile(), VERSIONS)
            done = 0
            while not os.path.exists(arg):
                config = {"configurable": {"thread_id": f"w-{os.getpid()}-{done}"}}
                graph.invoke(v2_input(f"w{done}"), config)
                done += 1
                if done == 1:  # the test starts the migration once every worker writes
                    print("writing", flush=True)
                time.sleep(0.2)  # a steady stream, leaving the (small) machine to the migration too
            out["threads"] = done
            if checked := os.environ.get("APP_CHECK_THREADS"):  # one worker, after the migration
                out["check"] = check(saver, int(checked))
            return out
        if command == "write":  # v1: every thread, for each later version to resume
            graph = builder().compile(checkpointer=saver)
            for later in ("v2", "v3", "orphan"):
                for kind, title in KINDS.items():
                    first_run(graph, kind, f"{later}-{kind}", title, v1_input(title))
            return out
        graph = saver.versioned(builder().compile(), VERSION, migrations())
        for kind, title in KINDS.items():
            thread_id = f"v{VERSION}-{kind}"
            out[f"{kind}:before"] = state_repr(graph, thread_id)
            second_run(graph, kind, thread_id)
            out[kind] = state_repr(graph, thread_id)
            reference = builder().compile(checkpointer=InMemorySaver())
            first_run(reference, kind, "ref", title, v2_input(title))
            out[f"{kind}:before:reference"] = state_repr(reference, "ref")
            second_run(reference, kind, "ref")
            out[f"{kind}:reference"] = state_repr(reference, "ref")
        if VERSION >= 3:
            out.update(orphan(saver))
            out.update(history(graph))
    return out


def orphan(saver: Any) -> dict:
    """v3 code whose migrations forget the renamed node resumes an interrupted thread."""
    bare = saver.versioned(builder().compile(), VERSION, migrations(map_nodes=False))
    try:
        bare.invoke(Command(resume="yes"), {"configurable": {"thread_id": "orphan-ask"}})
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"error": None}


def history(graph: Any) -> dict:
    """Time travel under this code over v2-ask: written by v1, resumed by v2."""
    config = {"configurable": {"thread_id": "v2-ask"}}
    history = list(graph.get_state_history(config))
    out: dict[str, Any] = {"versions": [h.metadata.get("state_version", 1) for h in history]}
    out["history"] = [repr((h.values, h.next)) for h in history]
    oldest_interrupted = [h for h in history if h.interrupts][-1]
    out["travel"] = repr([i.value for i in graph.get_state(oldest_interrupted.config).interrupts])
    reference = builder().compile(checkpointer=InMemorySaver())
    first_run(reference, "ask", "ref", "ask-1", v2_input("ask-1"))
    second_run(reference, "ask", "ref")
    theirs = reference.get_state_history({"configurable": {"thread_id": "ref"}})
    out["reference"] = [repr((h.values, h.next)) for h in theirs]
    return out


if __name__ == "__main__":
    # Run as the module `tests.integration.versioned_app`, not as __main__: the
    # stored class names must be the same in every process.
    from tests.integration import versioned_app

    print(json.dumps(versioned_app.main(*sys.argv[1:])))
