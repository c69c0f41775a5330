"""A copy (`copy_thread`, a fork) racing a deletion or a prune of its source.

A copy is several statements (the checkpoints, then their values, writes and
histories). Under READ COMMITTED each sees the database as of its own start,
so a deletion of the source that commits between two of them would leave the
target with checkpoints whose values were never copied: a fork that reads as
a different state from the one it was forked from. The copy therefore holds
both threads' write locks, exclusive, as a deletion does: a deletion or prune
of either waits for it, and the copy is of one moment of its source.

The race is produced, not waited for: another transaction holds, uncommitted,
a row the copy must insert, so the copy stops inside its checkpoint statement;
the deletion runs to its end (or to its wait) while the copy is stopped there.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_colosseum import ColosseumSaver, Encryption
from tests.integration.locks import (
    WAIT,
    backends_waiting_for_locks,
    blocked_behind,
    wait_until,
)
from tests.integration.test_encryption import KEY_1
from tests.integration.test_runs_stopped import in_thread


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def chat_graph(saver: ColosseumSaver) -> Any:
    def answer(state: Chat) -> dict:
        return {"messages": [AIMessage(f"re: {state['messages'][-1].content}")]}

    builder = StateGraph(Chat)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    return builder.compile(checkpointer=saver)


def config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def history(graph: Any, thread_id: str) -> str:
    """The thread's whole history as a user reads it, without its ids."""
    return repr(
        [
            (snapshot.values, snapshot.next, snapshot.tasks, snapshot.metadata["step"])
            for snapshot in graph.get_state_history(config(thread_id))
        ]
    )


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("removal", ["delete", "prune"])
def test_a_copy_racing_a_removal_of_its_source_is_the_source_as_it_was(
    pg_url: str, removal: str, encrypted: bool
) -> None:
    """The fork reads, checkpoint by checkpoint, as its source read before the
    deletion (or prune) that raced it: every value and pending write is there.
    The removal then happens to the source alone."""
    source, target = f"copy-src-{uuid.uuid4()}", f"copy-dst-{uuid.uuid4()}"
    options = {"encryption": Encryption({"k1": KEY_1})} if encrypted else {}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4, **options) as saver:
        graph = chat_graph(saver)
        for turn in range(3):
            graph.invoke({"messages": [HumanMessage(f"turn {turn}")]}, config(source))
        before = history(graph, source)
        head = saver.get_tuple(config(source))
        assert head is not None
        head_id = head.config["configurable"]["checkpoint_id"]
        outcome: list[Any] = []
        with (
            psycopg.connect(pg_url) as blocker,
            psycopg.connect(pg_url, autocommit=True) as watcher,
        ):
            # The target's head row, inserted and not committed: the copy's
            # checkpoint statement waits for this transaction to end.
            blocker.execute(
                "INSERT INTO colosseum_checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
                " checkpoint, metadata) SELECT %s, checkpoint_ns, checkpoint_id, checkpoint,"
                " metadata FROM colosseum_checkpoints WHERE thread_id = %s AND checkpoint_id = %s",
                (target, source, head_id),
            )
            copier = in_thread(lambda: saver.copy_thread(source, target), outcome)
            wait_until(
                lambda: blocked_behind(watcher, blocker.info.backend_pid),
                "the copy never reached the target's row",
            )
            if removal == "delete":
                remove = lambda: saver.delete_thread(source)  # noqa: E731
            else:
                remove = lambda: saver.prune([source], keep=1)  # noqa: E731
            removed: list[Any] = []
            remover = in_thread(remove, removed)
            wait_until(
                lambda: (
                    not remover.is_alive() or backends_waiting_for_locks(watcher, "advisory") > 0
                ),
                "the removal neither waited for a thread's lock nor ended",
            )
            blocker.rollback()
            copier.join(WAIT)
            remover.join(WAIT)
        assert not copier.is_alive() and not remover.is_alive()
        assert outcome == [None] and removed == [None], (outcome, removed)
        assert history(graph, target) == before
        if removal == "delete":
            assert saver.get_tuple(config(source)) is None
        else:
            assert len(list(saver.list(config(source)))) == 1
        # The fork goes on from where its source was.
        graph.invoke({"messages": [HumanMessage("turn 3")]}, config(target))
        messages = graph.get_state(config(target)).values["messages"]
        assert [m.content for m in messages] == [
            text for turn in range(4) for text in (f"turn {turn}", f"re: turn {turn}")
        ]
