"""A multi-agent investment committee with a human approval and an idempotent order.

Run:  python examples/multi_agent_committee.py [TICKER]
Uses COLOSSEUM_DATABASE_URL (or DATABASE_URL); with neither set, an embedded
PostgreSQL under ~/.local/share/colosseum (the `embedded` extra).

The graph is the one `colosseum demo` runs (langgraph_colosseum.committee): a
supervisor hands the ticker to a technical analyst and a risk manager, asks the
CIO (an `interrupt()`), and places the order through an `IdempotentToolNode`.
Here it all runs in one process; `colosseum demo` adds a crash and a resume.
"""

from __future__ import annotations

import sys
import uuid

from langgraph.types import Command

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum.committee import OrderBook, build_committee, convene
from langgraph_colosseum.embedded import database_url


def main(ticker: str = "AMD") -> None:
    thread_id = f"committee-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}, "metadata": {"desk": "examples"}}
    with ColosseumSaver.from_env() as saver:
        saver.setup()
        book = OrderBook(database_url())
        book.setup()
        graph = build_committee(saver, book)

        graph.invoke(convene(ticker), config)
        state = graph.get_state(config)
        if not state.interrupts:  # the risk manager vetoed: nothing to approve
            print(state.values["messages"][-1].content)
            return
        print(f"the committee asks: {state.interrupts[0].value['question']}")
        print(f"thread status: {saver.threads.get(thread_id).status}")

        # The CIO answers, possibly hours later and from another process: the
        # thread id is all it takes to resume.
        graph.invoke(Command(resume={"approved": True, "by": "cio"}), config)

        print("\nwho said what:")
        for entry in saver.threads.messages(thread_id):
            speaker = entry.message.name or entry.message.type
            text = entry.message.content or f"-> {entry.message.tool_calls[0]['name']}(...)"
            print(f"  step {entry.step:>2}  {speaker:<18} {text}")

        orders = book.orders(thread_id)
        print(f"\nthe broker received {len(orders)} order(s): "
              f"{[(o.side, o.quantity, o.ticker, str(o.limit_price)) for o in orders]}")  # fmt: skip
        assert len(orders) == 1


if __name__ == "__main__":
    main(*sys.argv[1:2])
