"""Quickstart: a chat graph whose every step lands in Postgres jsonb.

Run:  python examples/quickstart.py
Uses COLOSSEUM_DATABASE_URL (or DATABASE_URL); with neither set, an embedded
PostgreSQL under ~/.local/share/colosseum (the `embedded` extra).
"""

from __future__ import annotations

import uuid
from typing import Annotated, TypedDict

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum.embedded import database_url


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    ticker: str


def analyst(state: State) -> dict:
    """A deterministic stand-in for an LLM: echoes the question with a verdict."""
    question = state["messages"][-1].content
    ticker = question.split()[-1].strip("?").upper()
    return {"messages": [AIMessage(f"{ticker} looks fairly valued.")], "ticker": ticker}


def build_graph(saver: ColosseumSaver):
    builder = StateGraph(State)
    builder.add_node("analyst", analyst)
    builder.add_edge(START, "analyst")
    return builder.compile(checkpointer=saver)


def main() -> None:
    thread = {"configurable": {"thread_id": f"quickstart-{uuid.uuid4().hex[:8]}"}}
    with ColosseumSaver.from_env() as saver:
        saver.setup()
        graph = build_graph(saver)

        for question in ("What about AAPL?", "And MSFT?", "Finally NVDA?"):
            graph.invoke({"messages": [HumanMessage(question)]}, thread)
        state = graph.get_state(thread)
        print(
            f"thread {thread['configurable']['thread_id']}: {len(state.values['messages'])} messages"
        )
        for message in state.values["messages"]:
            print(f"  {message.type:>5}: {message.content}")

        history = list(graph.get_state_history(thread))
        print(f"\n{len(history)} checkpoints, newest first:")
        for snapshot in history:
            print(
                f"  step {snapshot.metadata['step']:>2}  {snapshot.metadata['source']:<6} "
                f"next={snapshot.next}  ticker={snapshot.values.get('ticker')}"
            )

        # Time travel: go back to the checkpoint after the first answer and ask
        # something else from there. The thread forks; the old branch stays in history.
        past = next(s for s in history if s.values.get("ticker") == "AAPL" and not s.next)
        graph.invoke({"messages": [HumanMessage("Instead: TSLA?")]}, past.config)
        forked = graph.get_state(thread)
        print(
            f"\nforked from step {past.metadata['step']}: "
            f"{[m.content for m in forked.values['messages']]}"
        )

        # update_state writes a correction as a new checkpoint, as if a node had.
        graph.update_state(thread, {"ticker": "TSLA (reviewed)"})
        print(f"after update_state: ticker = {graph.get_state(thread).values['ticker']}")

    # The state is plain jsonb: ask Postgres which threads last talked about TSLA.
    with psycopg.connect(database_url()) as conn:
        rows = conn.execute(
            """
            SELECT DISTINCT ON (c.thread_id) c.thread_id, v.value #>> '{}' AS ticker
            FROM colosseum_checkpoints c
            JOIN colosseum_channel_values v
              ON v.thread_id = c.thread_id AND v.checkpoint_ns = c.checkpoint_ns
             AND v.channel = 'ticker' AND v.version = c.checkpoint -> 'channel_versions' ->> 'ticker'
            WHERE c.checkpoint_ns = '' AND c.thread_id = %s
            ORDER BY c.thread_id, c.checkpoint_id DESC
            """,
            [thread["configurable"]["thread_id"]],
        ).fetchall()
    print(f"SQL: latest ticker of this thread = {rows[0][1]}")


if __name__ == "__main__":
    main()
