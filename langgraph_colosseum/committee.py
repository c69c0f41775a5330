"""An investment committee: the graph behind `colosseum demo` and examples/multi_agent_committee.py.

Deterministic agents, with no LLM and no network, so every run tells the same story:

- `supervisor` chairs: it hands the ticker to each member in turn, asks the CIO
  for approval, and places the order through the `place_order` tool;
- `technical_analyst` reports indicators computed from a synthetic price
  series seeded by the ticker (the same ticker always has the same chart);
- `risk_manager` sizes the position within the committee's mandate, or vetoes it;
- `human_approval` stops the run with `interrupt()` until the CIO answers
  through `Command(resume={"approved": ..., "by": ...})`;
- `tools` is an `IdempotentToolNode`: the order reaches the `OrderBook` once,
  however often a crashed step is re-run.

With a `store` (`open_memory`), the committee has a long-term memory across
threads: the CIO's preferences, given with an approval, are remembered in the
namespace the committee was convened with, and the risk manager of any later
committee recalls the relevant one by semantic search. The order tool keeps its
broker session (MCP server state) there too, as an item with a TTL.

Example:
    >>> book = OrderBook(database_url())
    >>> book.setup()
    >>> graph = build_committee(saver, book)
    >>> config = {"configurable": {"thread_id": "committee-1"}}
    >>> graph.invoke(convene("AMD"), config)              # stops at the CIO's approval
    >>> graph.invoke(Command(resume={"approved": True, "by": "cio"}), config)
    >>> book.orders("committee-1")
    [Order(ticker='AMD', side='buy', quantity=..., ...)]
    >>> graph.invoke(convene("NVDA"), {"configurable": {"thread_id": "committee-2"}})
    ...                                                   # vetoed: the run ends, no order
"""

from __future__ import annotations

import itertools
import math
import os
import random
import statistics
import zlib
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Optional, TypedDict

import psycopg
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore, SearchItem
from langgraph.types import interrupt

from langgraph_colosseum.tools import IdempotentToolNode, current_idempotency_key

__all__ = [
    "BROKER_SESSION_TTL_MINUTES",
    "DEFAULT_MANDATE",
    "PORTFOLIO_VALUE",
    "CommitteeState",
    "LocalEmbeddings",
    "Order",
    "OrderBook",
    "broker_session",
    "build_committee",
    "convene",
    "indicators",
    "open_memory",
    "price_series",
    "recall",
    "size_position",
]

PORTFOLIO_VALUE = 1_000_000  # dollars under management, for sizing
TRADING_DAYS = 252

# How much the committee may risk: a position is at most `max_position_pct` of
# the portfolio, loses at most `risk_per_trade_pct` of it at the stop, and is
# not taken at all above `max_volatility` (annualised).
DEFAULT_MANDATE = {"max_position_pct": 0.05, "risk_per_trade_pct": 0.01, "max_volatility": 0.45}


class CommitteeState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    ticker: str
    mandate: dict[str, float]
    indicators: dict[str, Any]
    position: dict[str, Any]
    approval: dict[str, Any]
    next_speaker: str  # whom the supervisor hands the floor to
    memory: list[str]  # the store namespace of the CIO's preferences (none: no memory)


def convene(
    ticker: str, mandate: dict[str, float] | None = None, memory: tuple[str, ...] | None = None
) -> CommitteeState:
    """The input that opens a committee on `ticker`; `memory`: the store
    namespace where the CIO's preferences are remembered across committees.

    Example:
        >>> graph.invoke(convene("AMD"), {"configurable": {"thread_id": "t1"}})
    """
    state: CommitteeState = {
        "messages": [HumanMessage(f"Should we buy {ticker}?", name="portfolio_manager")],
        "ticker": ticker,
        "mandate": dict(mandate or DEFAULT_MANDATE),
    }
    if memory:
        state["memory"] = list(memory)
    return state


# ------------------------------------------------------------------ the numbers


def price_series(ticker: str, days: int = 120) -> list[float]:
    """Daily closes of a synthetic chart: a random walk seeded by the ticker.

    crc32, not hash(): Python salts str hashes per process, and a worker
    process must see the same chart as the process that started the thread.

    Example:
        >>> price_series("NVDA")[-1] == price_series("NVDA")[-1]
        True
    """
    rng = random.Random(zlib.crc32(ticker.encode()))
    price = rng.uniform(40, 400)
    drift = rng.uniform(-0.002, 0.003)
    volatility = rng.uniform(0.01, 0.04)  # daily
    closes = []
    for _ in range(days):
        price *= math.exp(rng.gauss(drift, volatility))
        closes.append(round(price, 2))
    return closes


def indicators(closes: list[float]) -> dict[str, Any]:
    """SMA 20/50, RSI 14, annualised volatility, 20-day momentum, and a signal.

    Example:
        >>> indicators(price_series("AMD"))["signal"]
        'buy'
    """
    returns = [math.log(b / a) for a, b in itertools.pairwise(closes)]
    gains = [max(r, 0.0) for r in returns[-14:]]
    losses = [max(-r, 0.0) for r in returns[-14:]]
    rs = sum(gains) / sum(losses) if sum(losses) else math.inf
    rsi = 100 - 100 / (1 + rs)
    sma20 = statistics.fmean(closes[-20:])
    sma50 = statistics.fmean(closes[-50:])
    trend = "up" if sma20 > sma50 else "down"
    signal = "buy" if trend == "up" and rsi < 70 else "avoid"
    return {
        "close": closes[-1],
        "sma20": round(sma20, 2),
        "sma50": round(sma50, 2),
        "rsi14": round(rsi, 1),
        "volatility": round(statistics.stdev(returns[-20:]) * math.sqrt(TRADING_DAYS), 3),
        "momentum_20d": round(closes[-1] / closes[-21] - 1, 4),
        "trend": trend,
        "signal": signal,
    }


def size_position(found: dict[str, Any], mandate: dict[str, float]) -> dict[str, Any]:
    """Shares to buy within the mandate, a stop two daily moves below, or a veto.

    Example:
        >>> size_position(indicators(price_series("AMD")), DEFAULT_MANDATE)["shares"]
        ...
    """
    price = found["close"]
    daily_move = price * found["volatility"] / math.sqrt(TRADING_DAYS)
    stop_loss = round(price - 2 * daily_move, 2)
    by_risk = math.floor(PORTFOLIO_VALUE * mandate["risk_per_trade_pct"] / (price - stop_loss))
    by_size = math.floor(PORTFOLIO_VALUE * mandate["max_position_pct"] / price)
    shares = min(by_risk, by_size)
    veto = None
    if found["signal"] != "buy":
        veto = f"the signal is {found['signal']!r} (trend {found['trend']}, RSI {found['rsi14']})"
    elif found["volatility"] > mandate["max_volatility"]:
        veto = (
            f"volatility {found['volatility']:.0%} is above the mandate's "
            f"{mandate['max_volatility']:.0%}"
        )
    elif shares < 1:
        veto = "the mandate allows less than one share"
    return {
        "shares": 0 if veto else shares,
        "limit_price": price,
        "stop_loss": stop_loss,
        "notional": 0 if veto else round(shares * price, 2),
        "pct_of_portfolio": 0 if veto else round(shares * price / PORTFOLIO_VALUE, 4),
        "veto": veto,
    }


# ------------------------------------------------------------------ the broker


@dataclass(frozen=True)
class Order:
    order_id: int
    thread_id: str
    ticker: str
    side: str
    quantity: int
    limit_price: Decimal
    client_order_id: str | None
    worker_pid: int  # the process that sent it
    placed_at: datetime


class OrderBook:
    """The broker, as far as the committee knows: every order it receives is a row.

    It does not deduplicate on purpose: each row is an order the market saw,
    so two rows for one decision would be a double fill. The table lives in
    the checkpointer's database, outside its `colosseum_*` schema; its key
    starts with thread_id all the same.

    Example:
        >>> book = OrderBook(database_url())
        >>> book.setup()
        >>> [o.quantity for o in book.orders("committee-1")]
        [1234]
    """

    CREATE = """
    CREATE TABLE IF NOT EXISTS committee_orders (
        thread_id       text NOT NULL,
        order_id        bigint GENERATED ALWAYS AS IDENTITY,
        ticker          text NOT NULL,
        side            text NOT NULL,
        quantity        integer NOT NULL,
        limit_price     numeric NOT NULL,
        client_order_id text,
        worker_pid      integer NOT NULL,
        placed_at       timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (thread_id, order_id)
    )
    """
    INSERT = """
    INSERT INTO committee_orders
        (thread_id, ticker, side, quantity, limit_price, client_order_id, worker_pid)
    VALUES (%s, %s, %s, %s, %s, %s, %s)
    RETURNING order_id
    """
    SELECT = f"""
    SELECT {", ".join(Order.__dataclass_fields__)} FROM committee_orders
    WHERE thread_id = %s ORDER BY order_id
    """

    def __init__(self, url: str) -> None:
        self.url = url

    EXISTS = "SELECT to_regclass('committee_orders') IS NOT NULL"
    DROP = "DROP TABLE IF EXISTS committee_orders"
    FORGET = "DELETE FROM committee_orders WHERE thread_id = ANY(%s)"

    def setup(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(self.CREATE)

    def exists(self) -> bool:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return bool(conn.execute(self.EXISTS).fetchone()[0])

    def drop(self) -> None:
        """Remove the table (the demo's own, on a database the user configured)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(self.DROP)

    def forget(self, thread_ids: list[str]) -> None:
        """Remove the orders of these threads."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(self.FORGET, [thread_ids])

    def place(
        self, *, thread_id: str, ticker: str, side: str, quantity: int, limit_price: float
    ) -> int:
        """Send an order; returns its order id."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                self.INSERT,
                [thread_id, ticker, side, quantity, limit_price, current_idempotency_key(),
                 os.getpid()],
            ).fetchone()  # fmt: skip
        assert row is not None
        return row[0]

    def orders(self, thread_id: str) -> list[Order]:
        """Every order received for the thread, oldest first."""
        with psycopg.connect(self.url) as conn:
            return [Order(*row) for row in conn.execute(self.SELECT, [thread_id])]


# ------------------------------------------------------------------ memory

MEMORY_DIMS = 128
# The broker session (MCP server state): one item, alive while orders keep it
# in use (each read refreshes the TTL), gone 15 minutes after the last.
BROKER_SESSION = (("mcp", "broker"), "session")
BROKER_SESSION_TTL_MINUTES = 15.0


class LocalEmbeddings(Embeddings):
    """A small deterministic embedding, with no model and no network: words and
    their character trigrams hashed into `dims` buckets (crc32: the same in
    every process), so texts sharing words or spellings land close."""

    def __init__(self, dims: int = MEMORY_DIMS) -> None:
        self.dims = dims

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dims
        words = "".join(c if c.isalnum() else " " for c in text.lower()).split()
        for feature in words + [w[i : i + 3] for w in words for i in range(len(w) - 2)]:
            bucket = zlib.crc32(feature.encode())
            vector[bucket % self.dims] += 1.0 if bucket & 0x10000 else -1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def open_memory(saver: Any) -> Any:
    """The committee's long-term memory on `saver`'s pool (`ColosseumStore`),
    set up: semantic search with pgvector when the server has it (the embedded
    PostgreSQL 18 does), else without an index (`recall` then ranks in Python).

    Example:
        >>> memory = open_memory(saver)
        >>> graph = build_committee(saver, book, store=memory)
    """
    from langgraph_colosseum.errors import PgvectorUnavailableError
    from langgraph_colosseum.memory import ColosseumStore

    index = {"dims": MEMORY_DIMS, "embed": LocalEmbeddings(), "fields": ["text"]}
    store = ColosseumStore.from_saver(saver, index=index)
    try:
        store.setup()
    except PgvectorUnavailableError:
        store = ColosseumStore.from_saver(saver)
        store.setup()
    return store


def recall(store: BaseStore, namespace: tuple[str, ...], query: str, limit: int = 1) -> list:
    """The remembered items of `namespace` closest in meaning to `query`, best first.

    By the store's semantic search; a store without an index (a Postgres
    without pgvector) is ranked here, with the same embedding.
    """
    if getattr(store, "index_config", None):
        return store.search(namespace, query=query, limit=limit)
    embeddings = LocalEmbeddings()
    wanted = embeddings.embed_query(query)
    scored = []
    for item in store.search(namespace, limit=100):
        vector = embeddings.embed_query(str(item.value.get("text", "")))
        score = sum(a * b for a, b in zip(wanted, vector))
        scored.append(SearchItem(item.namespace, item.key, item.value, item.created_at,
                                 item.updated_at, score))  # fmt: skip
    return sorted(scored, key=lambda item: -(item.score or 0.0))[:limit]


def broker_session(store: BaseStore) -> tuple[dict[str, Any], bool]:
    """The broker session, reused while it lives, else opened now; (session, opened now)."""
    namespace, key = BROKER_SESSION
    found = store.get(namespace, key)  # refreshes its TTL
    if found is not None:
        return found.value, False
    session = {"token": f"brk-{os.urandom(6).hex()}", "opened_by_pid": os.getpid(),
               "opened_at": datetime.now().astimezone().isoformat(timespec="seconds")}  # fmt: skip
    store.put(namespace, key, session, index=False, ttl=BROKER_SESSION_TTL_MINUTES)
    return session, True


def order_tool(book: OrderBook, store: BaseStore | None = None) -> BaseTool:
    """The `place_order` tool, sending to `book` (through the broker session
    kept in `store`, when there is one)."""

    @tool
    def place_order(
        ticker: str, side: str, quantity: int, limit_price: float, config: RunnableConfig
    ) -> str:
        """Send a limit order to the broker."""
        if store is not None:
            broker_session(store)
        thread_id = config["configurable"]["thread_id"]
        order_id = book.place(
            thread_id=thread_id, ticker=ticker, side=side, quantity=quantity,
            limit_price=limit_price,
        )  # fmt: skip
        return f"order {order_id} filled: {side} {quantity} {ticker} @ {limit_price}"

    return place_order


# ------------------------------------------------------------------ the agents


def _say(text: str, speaker: str) -> AIMessage:
    return AIMessage(text, name=speaker)


def supervisor(state: CommitteeState) -> dict[str, Any]:
    """Chair the committee: one question per turn, in a fixed order."""
    ticker = state["ticker"]
    position = state.get("position")
    approval = state.get("approval")
    last = state["messages"][-1]

    def turn(text: str, next_speaker: str) -> dict[str, Any]:
        return {"messages": [_say(text, "supervisor")], "next_speaker": next_speaker}

    if "indicators" not in state:
        return turn(f"Committee on {ticker} is open. Technical analyst, your read?",
                    "technical_analyst")  # fmt: skip
    if position is None:
        return turn("Risk manager, how much can we take?", "risk_manager")
    if position["veto"]:
        return turn(f"Vetoed by risk: {position['veto']}. No order. Committee closed.", END)
    if approval is None:
        return turn(
            f"Proposal: BUY {position['shares']:,} {ticker} at {position['limit_price']} "
            f"(${position['notional']:,.0f}). Asking the CIO.",
            "human_approval",
        )
    if not approval["approved"]:
        return turn(f"The CIO ({approval['by']}) declined. No order. Committee closed.", END)
    if isinstance(last, ToolMessage) and last.name == "place_order":
        return turn(f"Confirmed: {last.content}. Committee closed.", END)
    order = {"ticker": ticker, "side": "buy", "quantity": position["shares"],
             "limit_price": position["limit_price"]}  # fmt: skip
    # The call id is part of the idempotency key, so it is derived from the
    # decision: were this step re-run, it would ask for the same order again,
    # and the ledger would recognise it.
    call = {"name": "place_order", "args": order, "id": f"order-{ticker}-{position['shares']}"}
    message = AIMessage("Placing the order.", name="supervisor", tool_calls=[call])
    return {"messages": [message], "next_speaker": "tools"}


def technical_analyst(state: CommitteeState) -> dict[str, Any]:
    found = indicators(price_series(state["ticker"]))
    text = (
        f"{state['ticker']} closes at {found['close']}: SMA20 {found['sma20']} vs SMA50 "
        f"{found['sma50']} (trend {found['trend']}), RSI {found['rsi14']}, volatility "
        f"{found['volatility']:.0%}, 20-day momentum {found['momentum_20d']:+.1%}. "
        f"Signal: {found['signal']}."
    )
    return {"messages": [_say(text, "technical_analyst")], "indicators": found}


RISK_QUESTION = "position size and leverage limits"


def risk_manager(
    state: CommitteeState,
    *,
    store: Optional[BaseStore] = None,  # noqa: UP045 (LangGraph injects by this spelling)
) -> dict[str, Any]:
    position = size_position(state["indicators"], state["mandate"])
    if position["veto"]:
        text = f"Veto: {position['veto']}."
    else:
        text = (
            f"{position['shares']:,} shares at {position['limit_price']}, stop {position['stop_loss']}: "
            f"${position['notional']:,.0f}, {position['pct_of_portfolio']:.1%} of the book."
        )
    if store is not None and state.get("memory"):
        recalled = recall(store, tuple(state["memory"]), RISK_QUESTION)
        if recalled:
            text += f' The CIO told us before: "{recalled[0].value["text"]}"'
    return {"messages": [_say(text, "risk_manager")], "position": position}


def human_approval(
    state: CommitteeState,
    *,
    store: Optional[BaseStore] = None,  # noqa: UP045 (LangGraph injects by this spelling)
) -> dict[str, Any]:
    position = state["position"]
    decision = interrupt(
        {
            "question": f"Approve BUY {position['shares']:,} {state['ticker']} "
            f"at {position['limit_price']}?",
            "position": position,
        }
    )
    verdict = "Approved" if decision["approved"] else "Declined"
    message = HumanMessage(f"{verdict}. {decision.get('note', '')}".strip(), name=decision["by"])
    if store is not None and state.get("memory"):
        # Preferences the CIO gave with the decision outlive this committee.
        # Keys follow the text: a re-run of this step writes the same items.
        for text in decision.get("remember", ()):
            key = f"pref-{zlib.crc32(text.encode()):08x}"
            store.put(tuple(state["memory"]), key, {"text": text, "by": decision["by"],
                                                    "ticker": state["ticker"]})  # fmt: skip
    return {"messages": [message], "approval": decision}


def build_committee(
    checkpointer: BaseCheckpointSaver,
    book: OrderBook,
    store: BaseStore | None = None,
    **tool_node_options: Any,
) -> CompiledStateGraph:
    """The committee graph, compiled with `checkpointer` (a Colosseum saver: the
    tool node keeps its ledger there) and `store` (its long-term memory, see
    `open_memory`); orders go to `book`.

    Example:
        >>> graph = build_committee(saver, OrderBook(database_url()))
    """
    builder = StateGraph(CommitteeState)
    builder.add_node("supervisor", supervisor)
    builder.add_node("technical_analyst", technical_analyst)
    builder.add_node("risk_manager", risk_manager)
    builder.add_node("human_approval", human_approval)
    builder.add_node("tools", IdempotentToolNode([order_tool(book, store)], **tool_node_options))
    builder.add_edge(START, "supervisor")
    builder.add_conditional_edges(
        "supervisor",
        lambda state: state["next_speaker"],
        ["technical_analyst", "risk_manager", "human_approval", "tools", END],
    )
    for member in ("technical_analyst", "risk_manager", "human_approval", "tools"):
        builder.add_edge(member, "supervisor")
    return builder.compile(checkpointer=checkpointer, store=store)
