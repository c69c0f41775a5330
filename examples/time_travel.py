"""Time travel: the history of a thread, a replay from a past checkpoint, a fork.

Run:  python examples/time_travel.py
Uses COLOSSEUM_DATABASE_URL (or DATABASE_URL); with neither set, an embedded
PostgreSQL under ~/.local/share/colosseum (the `embedded` extra).

A three-step writing pipeline (outline, draft, edit) writes a research note.
Then, from the checkpoint before `draft`:
- replay: `invoke(None, past.config)` runs `draft` and `edit` again from there;
- fork: `update_state(past.config, {...})` changes the past, and
  `invoke(None, fork)` continues from the changed state.
Every branch stays in the history; the thread's head is the newest one.
"""

from __future__ import annotations

import operator
import uuid
from typing import Annotated, TypedDict

from langgraph.graph import START, StateGraph

from langgraph_colosseum import ColosseumSaver


class Note(TypedDict, total=False):
    topic: str
    outline: list[str]
    draft: str
    note: str
    runs: Annotated[list[str], operator.add]  # which node ran, in order, on this branch


def outline(state: Note) -> Note:
    return {"outline": [f"{state['topic']}: context", "the numbers", "what to watch"],
            "runs": ["outline"]}  # fmt: skip


def draft(state: Note) -> Note:
    return {"draft": " / ".join(state["outline"]), "runs": ["draft"]}


def edit(state: Note) -> Note:
    return {"note": state["draft"].upper(), "runs": ["edit"]}


def build_graph(saver: ColosseumSaver):
    builder = StateGraph(Note)
    for node in (outline, draft, edit):
        builder.add_node(node.__name__, node)
    builder.add_edge(START, "outline")
    builder.add_edge("outline", "draft")
    builder.add_edge("draft", "edit")
    return builder.compile(checkpointer=saver)


def main() -> None:
    config = {"configurable": {"thread_id": f"notes-{uuid.uuid4().hex[:8]}"}}
    with ColosseumSaver.from_env() as saver:
        saver.setup()
        graph = build_graph(saver)
        graph.invoke({"topic": "Q3 earnings"}, config)
        first = graph.get_state(config)
        print(f"note: {first.values['note']}")

        history = list(graph.get_state_history(config))
        print(f"\n{len(history)} checkpoints, newest first:")
        for snapshot in history:
            print(f"  step {snapshot.metadata['step']:>2}  next={snapshot.next!s:<16} "
                  f"runs={snapshot.values.get('runs', [])}")  # fmt: skip

        # The checkpoint where the outline was done and the draft was next.
        past = next(s for s in history if s.next == ("draft",))

        # Replay: run again from that checkpoint. `draft` and `edit` run anew;
        # `outline` does not, its result is in the checkpoint (`runs` names it once).
        replayed = graph.invoke(None, past.config)
        print(f"\nreplay from step {past.metadata['step']}: runs={replayed['runs']}")
        assert replayed["runs"] == ["outline", "draft", "edit"]
        assert replayed["note"] == first.values["note"]  # same input, same note

        # Fork: change the past, then continue from the changed state.
        fork = graph.update_state(past.config, {"outline": ["Q3 guidance", "the risks"]})
        forked = graph.invoke(None, fork)
        print(f"fork from step {past.metadata['step']}: note={forked['note']!r}")
        assert forked["note"] == "Q3 GUIDANCE / THE RISKS"

        # The head is the fork; the first run is still there, by checkpoint id.
        head = graph.get_state(config)
        original = graph.get_state(first.config)
        print(f"\nhead:     {head.values['note']}")
        print(f"original: {original.values['note']}")
        assert head.values["note"] == forked["note"]
        assert original.values["note"] == first.values["note"]
        print(f"{len(list(graph.get_state_history(config)))} checkpoints in all, three branches")


if __name__ == "__main__":
    main()
