"""State migrations: a deploy changes the state, and threads of the old code go on.

Run:  python examples/state_migrations.py
Uses COLOSSEUM_DATABASE_URL (or DATABASE_URL); with neither set, an embedded
PostgreSQL under ~/.local/share/colosseum (the `embedded` extra).

Version 1 of a trading desk's graph proposes an order and stops at `approve`
for a human. Version 2, deployed while one thread waits there:
- renames `ticker` to `tickers` and makes it a list (str -> list[str]);
- drops the `scratch` channel;
- its `Order` model gains `venue` (with a default) and loses `desk`;
- renames the node `approve` to `review`.
The waiting thread resumes under version 2 (the interrupt follows the renamed
node); the stored rows of version 1 stay as they were; `migrate_state` brings
the finished thread's head to version 2 as a checkpoint of its own.
(One process plays both versions here; a deploy runs them apart.)
"""

from __future__ import annotations

import uuid
from typing import Any, TypedDict

import pydantic
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_colosseum import ColosseumSaver, Migration

RUN = uuid.uuid4().hex[:8]


# ------------------------------------------------------------------ version 1


class Order(pydantic.BaseModel):
    qty: int
    desk: str


OrderV1 = Order  # version 2 redefines Order below, under the same name


class StateV1(TypedDict, total=False):
    ticker: str
    scratch: str
    order: Order
    status: str


def propose_v1(state: StateV1) -> dict:
    return {"order": OrderV1(qty=100, desk="equities"), "scratch": "sized by rule 7"}


def approve_v1(state: StateV1) -> dict:
    answer = interrupt(f"buy {state['order'].qty} {state['ticker']}?")
    return {"status": f"approved:{answer}"}


def graph_v1(saver: ColosseumSaver) -> Any:
    builder = StateGraph(StateV1)
    builder.add_node("propose", propose_v1)
    builder.add_node("approve", approve_v1)
    builder.add_edge(START, "propose")
    builder.add_edge("propose", "approve")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=saver)


# ------------------------------------------------------------------ version 2


class Order(pydantic.BaseModel):  # type: ignore[no-redef]
    qty: int
    venue: str = "NYSE"


class StateV2(TypedDict, total=False):
    tickers: list[str]
    order: Order
    status: str


def propose_v2(state: StateV2) -> dict:
    return {"order": Order(qty=100)}


def review_v2(state: StateV2) -> dict:
    order = state["order"]
    answer = interrupt(f"buy {order.qty} {'+'.join(state['tickers'])} on {order.venue}?")
    return {"status": f"approved:{answer}"}


def up_1_to_2(values: dict) -> None:
    """Runs on whole states and on each pending task's writes: touch what is there,
    and leave what is in version 2's form already as it is."""
    if "ticker" in values:
        values["tickers"] = [values.pop("ticker")]
    values.pop("scratch", None)


def graph_v2(saver: ColosseumSaver) -> Any:
    builder = StateGraph(StateV2)
    builder.add_node("propose", propose_v2)
    builder.add_node("review", review_v2)
    builder.add_edge(START, "propose")
    builder.add_edge("propose", "review")
    builder.add_edge("review", END)
    migrations = {1: Migration(up_1_to_2, nodes={"approve": "review"})}
    return saver.versioned(builder.compile(), 2, migrations)


def main() -> None:
    waiting = {"configurable": {"thread_id": f"waiting-{RUN}"}}
    finished = {"configurable": {"thread_id": f"finished-{RUN}"}}

    with ColosseumSaver.from_env(types=[OrderV1]) as saver:
        saver.setup()
        v1 = graph_v1(saver)
        v1.invoke({"ticker": "AMD"}, waiting)  # stops at approve
        v1.invoke({"ticker": "TSLA"}, finished)
        v1.invoke(Command(resume="yes"), finished)
        print("v1 waiting at:", v1.get_state(waiting).next)

    # --- deploy: version 2's code, its Order class, its graph ---
    with ColosseumSaver.from_env(types=[Order]) as saver:
        v2 = graph_v2(saver)
        before = v2.get_state(waiting)
        print("v2 reads:", before.values, "next:", before.next)
        print("v2 interrupt:", [i.value for i in before.interrupts])
        assert before.values["tickers"] == ["AMD"] and before.values["order"].venue == "NYSE"
        assert before.next == ("review",)

        done = v2.invoke(Command(resume="yes"), waiting)
        print("v2 resumed:", done)
        assert done["status"] == "approved:yes" and "scratch" not in done

        # Time travel: v1's checkpoints read as version 2; their rows unchanged.
        history = list(v2.get_state_history(waiting))
        first = history[-2]  # the input checkpoint, written by version 1
        print("v1 checkpoint as v2 sees it:", first.values, first.metadata.get("state_version", 1))
        with saver.conn.connection() as conn:
            stored = conn.execute(
                "SELECT value FROM colosseum_channel_values WHERE thread_id = %s "
                "AND channel = 'ticker'",
                [waiting["configurable"]["thread_id"]],
            ).fetchone()
        print("the stored v1 row still says:", stored[0])
        assert stored[0] == "AMD"

        threads = [waiting["configurable"]["thread_id"], finished["configurable"]["thread_id"]]
        # (Leave out thread_ids= to migrate every thread of the database.)
        counts = saver.migrate_state(2, {1: up_1_to_2}, thread_ids=threads)
        print("migrate_state:", counts)
        assert counts == {"migrated": 1, "pending": 0}  # the waiting one was resumed by v2
        for thread_id in threads:
            head = v2.get_state({"configurable": {"thread_id": thread_id}})
            assert head.metadata["state_version"] == 2, thread_id
        source = v2.get_state(finished).metadata["source"]
        print(f"finished thread's head: source={source!r}, values={v2.get_state(finished).values}")
        print("every thread at state version 2")


if __name__ == "__main__":
    main()
