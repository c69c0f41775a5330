"""Idempotent tools: a payment that runs once, however often the step is re-run.

Run:  python examples/idempotent_tools.py
Uses COLOSSEUM_DATABASE_URL (or DATABASE_URL); with neither set, an embedded
PostgreSQL under ~/.local/share/colosseum (the `embedded` extra).

The agent asks for one payment. The tools step is then re-run twice, as a
worker taking over a crashed run would: the bank sees one payment.
"""

from __future__ import annotations

import uuid
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_colosseum import ColosseumSaver, IdempotentToolNode, current_idempotency_key

BANK: list[tuple[str, int, str]] = []  # the outside world: what the bank executed


@tool
def send_payment(to: str, amount: int) -> str:
    """Pay `amount` to `to`."""
    # A real bank API would take the key too, and deduplicate on its side.
    BANK.append((to, amount, current_idempotency_key() or ""))
    return f"paid {amount} to {to}"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def agent(state: State) -> dict:
    return {
        "messages": [
            AIMessage(
                "",
                id="ai-1",
                tool_calls=[
                    {"name": "send_payment", "args": {"to": "ACME", "amount": 250}, "id": "call-1"}
                ],
            )
        ]
    }


def main() -> None:
    thread = {"configurable": {"thread_id": f"payments-{uuid.uuid4().hex[:8]}"}}
    with ColosseumSaver.from_env() as saver:
        saver.setup()
        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_node("tools", IdempotentToolNode([send_payment]))
        builder.add_edge(START, "agent")
        builder.add_edge("agent", "tools")
        graph = builder.compile(checkpointer=saver)

        result = graph.invoke({"messages": [HumanMessage("Pay ACME 250")]}, thread)
        print(f"run 1: {result['messages'][-1].content}")
        before_tools = next(s for s in graph.get_state_history(thread) if s.next == ("tools",))
        for attempt in (2, 3):  # a successor worker re-runs the step
            result = graph.invoke(None, before_tools.config)
            print(f"run {attempt}: {result['messages'][-1].content}")

    print(f"the bank executed {len(BANK)} payment(s): {BANK[0][:2]}, key {BANK[0][2][:16]}...")
    assert len(BANK) == 1


if __name__ == "__main__":
    main()
