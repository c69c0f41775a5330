"""`colosseum demo`: the whole product in one run, on an investment committee.

The committee (`committee.py`: a supervisor, a technical analyst, a risk
manager, a human approval and an idempotent order tool) meets on a ticker, and
the run shows, in order:

1. the committee stopping at the CIO's approval (`interrupt()`);
2. the approval resumed (`Command(resume=...)`) in a worker process that is
   killed after the broker received the order and before the step was saved;
3. the thread resumed by `thread_id` in a new process: the order step re-runs,
   the tool ledger answers with the recorded fill, the broker sees one order;
4. the audit conversation: who said what, at which step;
5. time travel to a past checkpoint, and a fork with `update_state`;
6. a second committee, and a thread search over both;
7. long-term memory: the CIO's preferences, given with the approval, recalled
   by semantic search in a committee on another thread, and the broker session
   (MCP server state) kept as a store item with a TTL.

Any ticker works: one the risk manager vetoes (most of them, under the
default mandate) ends its committee with the veto, which the demo shows, and
the committee then meets on AMD, which it buys.

It uses `ColosseumSaver.from_env()`: the configured URLs, else the embedded
servers. Thread ids are new on every run, so it can be run again and again.
On the embedded database the run's threads and its `committee_orders` table
stay, to look around; on a configured database they are removed at the end
unless `keep=True` (`colosseum demo --keep`).

Example:
    $ colosseum demo
    $ python -m langgraph_colosseum.demo            # the same
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from langgraph_colosseum import embedded
from langgraph_colosseum._redact import safe
from langgraph_colosseum.committee import (
    BROKER_SESSION,
    BROKER_SESSION_TTL_MINUTES,
    DEFAULT_MANDATE,
    RISK_QUESTION,
    Order,
    OrderBook,
    broker_session,
    build_committee,
    convene,
    open_memory,
    recall,
)
from langgraph_colosseum.inspection import Inspector
from langgraph_colosseum.saver import ColosseumSaver

DEFAULT_TICKER = "AMD"  # its chart gives a buy within the mandate
VETOED_TICKER = "TSLA"  # too volatile for the mandate: the risk manager vetoes it
# The CIO's preferences ride on the approval; the committee remembers them.
CIO_PREFERENCES = [
    "Position size: keep any single stock under 5% of the book, and use no leverage.",
    "Income: prefer dividend payers with a long record for the income sleeve.",
]
APPROVAL = {"approved": True, "by": "cio", "note": "Within mandate.", "remember": CIO_PREFERENCES}
# Where the committee keeps them: one namespace, across threads (and runs).
MEMORY = ("committee", "cio", "preferences")
MEMORY_TICKER = "NFLX"  # the committee of section 7, on another thread
# The fork: the CIO asks what the committee would have done under a tighter mandate.
TIGHTER_MANDATE = {**DEFAULT_MANDATE, "max_position_pct": 0.02}


class DemoFailedError(RuntimeError):
    """An invariant the demo shows did not hold (it never should)."""


@dataclass(frozen=True)
class DemoOutcome:
    """What one demo run did, for whoever runs it programmatically (and the tests)."""

    run_id: str
    thread_id: str
    vetoed_thread_id: str
    orders: list[Order]  # every order the broker received for thread_id
    crashed_worker_pid: int
    travelled_to: str  # the past checkpoint the fork started from
    fork_head: str  # the fork's latest checkpoint, waiting for approval


def run(
    console: Console | None = None, ticker: str = DEFAULT_TICKER, keep: bool | None = None
) -> DemoOutcome:
    """Run the whole demo, printing as it goes; raises DemoFailedError if an invariant breaks.

    `keep`: leave the run's threads and orders in the database (default: only
    on the embedded one, never in a database you configured).

    Example:
        >>> outcome = run()
        >>> len(outcome.orders)
        1
    """
    console = console or Console()
    run_id = uuid.uuid4().hex[:8]
    keep = embedded.configured_database_url() is None if keep is None else keep

    console.print(Panel.fit(
        f"An investment committee on [bold]{escape(safe(ticker))}[/]: a supervisor, a technical "
        "analyst, a risk\nmanager, the CIO's approval and an idempotent order tool. No LLM, "
        "no network.",
        title="langgraph-colosseum demo",
    ))  # fmt: skip
    env = _servers(console)

    with ColosseumSaver.from_env(pool_size=2) as saver:
        saver.setup()
        memory = open_memory(saver)
        book = OrderBook(env[embedded.DATABASE_ENV[0]])
        book_existed = book.exists()
        book.setup()
        try:
            return _run(console, saver, memory, book, env, ticker, run_id, keep)
        finally:
            if not keep:
                _clean_up(console, saver, memory, book, run_id, drop_table=not book_existed)


def _run(
    console: Console, saver: ColosseumSaver, memory: Any, book: OrderBook,
    env: dict[str, str], ticker: str, run_id: str, keep: bool,
) -> DemoOutcome:  # fmt: skip
    graph = build_committee(saver, book, store=memory)
    metadata = {"desk": "demo", "demo_run": run_id}

    _section(console, "1", "The committee meets, and stops for the CIO's approval")
    thread_id, vetoed_thread_id = _meet(console, graph, saver, ticker, run_id, metadata)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}, "metadata": metadata}
    state = graph.get_state(config)
    (question,) = state.interrupts
    console.print(Panel(
        f"{escape(question.value['question'])}\n[dim]thread {escape(thread_id)} is now "
        f"'{saver.threads.get(thread_id).status}'; graph.get_state(config).interrupts holds this[/]",
        title="interrupt()", border_style="yellow",
    ))  # fmt: skip

    _section(console, "2", "The approval resumes in a worker, which is killed mid-step")
    crashed = _worker(console, env, "approve", thread_id,
                      "a worker resumes with Command(resume=...)")  # fmt: skip
    orders = book.orders(thread_id)
    head = graph.get_state(config)
    console.print(
        f"worker pid {crashed.pid} resumed with {APPROVAL}, the broker received "
        f"order {[o.order_id for o in orders]}, and the worker was "
        f"{_how_it_ended(crashed.returncode)} before the step was saved.\n"
        f"The thread's last checkpoint still has next = {head.next}: the order step is "
        "not done as far as the graph knows."
    )
    if crashed.returncode != -signal.SIGKILL or len(orders) != 1 or head.next != ("tools",):
        raise DemoFailedError(f"the crash did not happen as staged: {crashed}, {orders}")

    _section(console, "3", "Resumed by thread_id in a new process")
    resumed = _worker(console, env, "continue", thread_id,
                      "a new process runs graph.invoke(None, config)")  # fmt: skip
    orders = book.orders(thread_id)
    final = graph.get_state(config)
    console.print(
        f"worker pid {resumed.pid} re-ran the order step; the tool ledger answered with the "
        f"recorded fill instead of calling the broker again.\n"
        f"[bold]The broker received {len(orders)} order(s)[/] for this thread: "
        f"{escape(_order_text(orders))}\n"
        f"Last word: {escape(final.values['messages'][-1].content)}"
    )
    _show_ledger(console, saver, thread_id)
    if resumed.returncode != 0 or len(orders) != 1 or final.next:
        raise DemoFailedError(f"the resume did not finish the committee: {resumed}, {orders}")

    _section(console, "4", "Who said what: saver.threads.messages(thread_id)")
    _show_conversation(console, saver, thread_id)

    _section(console, "5", "Time travel, and a fork")
    travelled_to, fork_head = _time_travel(console, graph, config, len(orders))

    _section(console, "6", "Another committee, and a thread search")
    if vetoed_thread_id is None:
        vetoed_thread_id = _committee_thread(run_id, VETOED_TICKER)
        graph.invoke(convene(VETOED_TICKER, memory=MEMORY),
                     {**config, "configurable": {"thread_id": vetoed_thread_id}})  # fmt: skip
    else:
        console.print("The vetoed committee of section 1 is the other thread.", highlight=False)
    vetoed_ticker = graph.get_state({"configurable": {"thread_id": vetoed_thread_id}}).values[
        "ticker"
    ]
    _show_searches(console, saver, run_id, vetoed_ticker)

    _section(console, "7", "Long-term memory across threads: store=ColosseumStore")
    _show_memory(console, graph, memory, run_id, crashed.pid)

    orders = book.orders(thread_id)
    if len(orders) != 1 or book.orders(vetoed_thread_id):
        raise DemoFailedError(f"orders: {orders}, vetoed: {book.orders(vetoed_thread_id)}")

    console.print(Panel(f"One order, placed once, through a crash: {escape(_order_text(orders))}",
                        title="done", border_style="green"))  # fmt: skip
    commands = (f"history {thread_id}", f"messages {thread_id}",
                f"diff {thread_id} {travelled_to} {fork_head}",
                f"threads --metadata '{{\"demo_run\": \"{run_id}\"}}'")  # fmt: skip
    if keep:
        console.print("Look around:")
    else:
        console.print("This run's threads and orders are removed from your database now; run "
                      "`colosseum demo --keep` to keep them and look around with:")  # fmt: skip
    for command in commands:
        # soft_wrap: a command wider than the terminal still copies as one line.
        console.print(f"  colosseum {command}", soft_wrap=True, highlight=False, markup=False)
    return DemoOutcome(run_id, thread_id, vetoed_thread_id, orders, crashed.pid,
                       travelled_to, fork_head)  # fmt: skip


def _committee_thread(run_id: str, ticker: str) -> str:
    return f"committee-{run_id}-{ticker.lower()}"


def _meet(
    console: Console, graph: Any, saver: ColosseumSaver, ticker: str, run_id: str,
    metadata: dict[str, Any],
) -> tuple[str, str | None]:  # fmt: skip
    """The committee on `ticker`; on a veto, shown as the normal outcome it is, a
    second committee on DEFAULT_TICKER. (the thread waiting for the CIO, the vetoed one)."""
    thread_id = _committee_thread(run_id, ticker)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}, "metadata": metadata}
    graph.invoke(convene(ticker, memory=MEMORY), config)
    state = graph.get_state(config)
    _show_analysis(console, state.values)
    if state.interrupts:
        return thread_id, None
    veto = state.values["position"]["veto"]
    console.print(Panel(
        f"The risk manager vetoed {escape(safe(ticker))}: {escape(str(veto))}.\n"
        f"A veto is a normal outcome: nothing is ordered, and thread {escape(thread_id)} ends "
        f"'{saver.threads.get(thread_id).status}'. The committee meets again, on "
        f"{DEFAULT_TICKER}.",
        title="vetoed", border_style="yellow",
    ))  # fmt: skip
    second = _committee_thread(run_id, DEFAULT_TICKER)
    config = {"configurable": {"thread_id": second}, "metadata": metadata}
    graph.invoke(convene(DEFAULT_TICKER, memory=MEMORY), config)
    state = graph.get_state(config)
    _show_analysis(console, state.values)
    if not state.interrupts:
        raise DemoFailedError(f"the committee vetoed {DEFAULT_TICKER} too: {state.values}")
    return second, thread_id


def _clean_up(
    console: Console, saver: ColosseumSaver, memory: Any, book: OrderBook, run_id: str, *,
    drop_table: bool,
) -> None:  # fmt: skip
    """Remove what this run wrote to a database the user configured."""
    found = saver.threads.search(metadata={"demo_run": run_id}, limit=1000)
    for thread in found:
        saver.delete_thread(thread.thread_id)
    for item in memory.search(MEMORY, limit=100):
        memory.delete(item.namespace, item.key)
    memory.delete(*BROKER_SESSION)
    if drop_table:
        book.drop()
    else:
        book.forget([thread.thread_id for thread in found])


def _servers(console: Console) -> dict[str, str]:
    """Resolve (and, when none is configured, start) the servers; the env for workers."""
    unset = [name for name, url in (("PostgreSQL", embedded.configured_database_url()),
                                    ("Valkey", embedded.configured_redis_url())) if not url]  # fmt: skip
    label = f"Starting the embedded {' and '.join(unset)}" if unset else "Connecting"
    with console.status(f"{label} …"):
        env = embedded.worker_env()
    database, cache = env[embedded.DATABASE_ENV[0]], env.get(embedded.REDIS_ENV[0])
    table = Table("server", "from", title="servers", title_justify="left")
    table.add_column("url", overflow="fold")
    # A configured URL may carry a password: shown as ***, never in the clear.
    table.add_row("PostgreSQL", _mode(embedded.configured_database_url(), database),
                  Text(safe(database)))  # fmt: skip
    table.add_row("Redis", _mode(embedded.configured_redis_url(), cache), Text(safe(cache or "-")))
    console.print(table)
    return env


def _mode(configured: str | None, url: str | None) -> str:
    if configured:
        return "configured"
    return "embedded" if url else "none: no hot cache"


def _section(console: Console, number: str, title: str) -> None:
    console.print()
    console.print(Rule(f"[bold]{number} · {title}", align="left"))


def _show_analysis(console: Console, values: dict[str, Any]) -> None:
    found, position = values["indicators"], values["position"]
    table = Table("technical analyst", "", "risk manager", "", title_justify="left")
    left = [("close", found["close"]), ("SMA 20 / 50", f"{found['sma20']} / {found['sma50']}"),
            ("RSI 14", found["rsi14"]), ("volatility", f"{found['volatility']:.0%}"),
            ("signal", found["signal"])]  # fmt: skip
    right = [("shares", f"{position['shares']:,}"), ("limit", position["limit_price"]),
             ("stop", position["stop_loss"]), ("notional", f"${position['notional']:,.0f}"),
             ("veto", position["veto"] or "none")]  # fmt: skip
    for (a, b), (c, d) in zip(left, right):
        table.add_row(a, Text(safe(b)), c, Text(safe(d)))
    console.print(table)


def _show_ledger(console: Console, saver: ColosseumSaver, thread_id: str) -> None:
    table = Table("tool", "status", "attempts", "idempotency key",
                  title="the tool ledger (colosseum_tool_calls)", title_justify="left")  # fmt: skip
    for call in Inspector(saver).ledger(thread_id):
        table.add_row(Text(safe(call["tool"])), call["status"], str(call["attempts"]),
                      f"{call['idempotency_key'][:16]}…")  # fmt: skip
    console.print(table)


def _show_conversation(console: Console, saver: ColosseumSaver, thread_id: str) -> None:
    table = Table("step", "node", "speaker", "message")
    for entry in saver.threads.messages(thread_id):
        message = entry.message
        speaker = getattr(message, "name", None) or message.type
        text = message.content or ", ".join(
            f"{call['name']}({json.dumps(call['args'])})" for call in message.tool_calls
        )
        table.add_row(
            str(entry.step), Text(safe(entry.node)), Text(safe(speaker)), Text(safe(text))
        )
    console.print(table)


def _time_travel(
    console: Console, graph: Any, config: RunnableConfig, orders: int
) -> tuple[str, str]:
    """Show the history, travel back, fork; (the past checkpoint id, the fork's head id)."""
    history = list(graph.get_state_history(config))
    table = Table("step", "source", "next", "checkpoint", title="graph.get_state_history(config)",
                  title_justify="left")  # fmt: skip
    for snapshot in history:
        table.add_row(str(snapshot.metadata["step"]), snapshot.metadata["source"],
                      ", ".join(snapshot.next) or "-",
                      _checkpoint_id(snapshot))  # fmt: skip
    console.print(table)

    # Back to the moment the supervisor turned to the risk manager.
    past = next(s for s in history if s.next == ("risk_manager",))
    console.print(
        f"Travel to step {past.metadata['step']} (next = {past.next}): the committee had heard "
        f"the analyst ({past.values['indicators']['signal']}) and no sizing yet."
    )
    fork_config = graph.update_state(past.config, {"mandate": TIGHTER_MANDATE})
    graph.invoke(None, fork_config)
    fork = graph.get_state(config)
    original = next(s for s in history if "position" in s.values)
    comparison = Table("branch", "max position", "shares", "notional", "now",
                       title="fork: update_state(past, {'mandate': tighter}) + invoke(None, fork)",
                       title_justify="left")  # fmt: skip
    for name, snapshot, state_now in (("original", original, f"done, {orders} order"),
                                      ("fork", fork, f"waiting: next = {fork.next}")):  # fmt: skip
        position = snapshot.values["position"]
        comparison.add_row(name, f"{snapshot.values['mandate']['max_position_pct']:.0%}",
                           f"{position['shares']:,}", f"${position['notional']:,.0f}", state_now)  # fmt: skip
    console.print(comparison)
    console.print(
        "The fork is the thread's head now and waits for the CIO; the original branch, with "
        "its order, stays in the history."
    )
    return _checkpoint_id(past), _checkpoint_id(fork)


def _checkpoint_id(snapshot: Any) -> str:
    return snapshot.config["configurable"]["checkpoint_id"]


def _show_searches(
    console: Console, saver: ColosseumSaver, run_id: str, vetoed_ticker: str
) -> None:
    this_run = {"demo_run": run_id}
    console.print(f"saver.threads.search(metadata={this_run}, ...), newest update first:")
    searches: list[tuple[str, dict[str, Any]]] = [
        ("-", {}),
        ("status='interrupted'", {"status": "interrupted"}),
        (f"values={{'ticker': '{vetoed_ticker}'}}", {"values": {"ticker": vetoed_ticker}}),
    ]
    table = Table("search: also", "thread", "status", "ticker")
    for label, query in searches:
        for found in saver.threads.search(metadata=this_run, **query):
            table.add_row(Text(label), Text(safe(found.thread_id)), found.status,
                          Text(safe(found.values.get("ticker"))))  # fmt: skip
            label = ""
        table.add_section()
    console.print(table)


def _show_memory(console: Console, graph: Any, memory: Any, run_id: str, worker_pid: int) -> None:
    """The CIO's remembered preferences, recalled on another thread; the broker session."""
    remembered = memory.search(MEMORY, limit=10)
    table = Table("key", "remembered", "from the committee on",
                  title=f"store.search({MEMORY})", title_justify="left")  # fmt: skip
    for item in remembered:
        table.add_row(item.key, Text(safe(item.value["text"])),
                      Text(safe(item.value.get("ticker"))))  # fmt: skip
    console.print(table)

    # A committee on another thread: its risk manager recalls by meaning.
    thread_id = _committee_thread(run_id, MEMORY_TICKER)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id},
                              "metadata": {"desk": "demo-memory", "demo_run": run_id}}  # fmt: skip
    graph.invoke(convene(MEMORY_TICKER, memory=MEMORY), config)
    said = next(m for m in reversed(graph.get_state(config).values["messages"])
                if getattr(m, "name", None) == "risk_manager")  # fmt: skip
    how = ("store.search(query=...), pgvector HNSW" if memory.index_config
           else "no pgvector on this server: ranked in Python by recall()")  # fmt: skip
    console.print(f"A committee on {MEMORY_TICKER} (thread {escape(thread_id)}): the risk manager "
                  f"asks its memory for \"{RISK_QUESTION}\" ({how}):", highlight=False)  # fmt: skip
    console.print(Panel(escape(said.content), title="risk_manager", border_style="cyan"))
    found = recall(memory, MEMORY, "dividend payers for income", limit=2)
    ranked = Table("score", "recalled for: dividend payers for income")
    for item in found:
        ranked.add_row(f"{item.score:.3f}", Text(safe(item.value["text"])))
    console.print(ranked)

    session, opened = broker_session(memory)
    by = session["opened_by_pid"]
    console.print(
        f"The broker session (MCP server state) is the store item {BROKER_SESSION}: token "
        f"{escape(session['token'])}, opened by pid {by} at {escape(session['opened_at'])}"
        f"{' (the worker of section 2, before it was killed)' if by == worker_pid else ''}; "
        f"{'opened now' if opened else 'reused by this read'}. It expires "
        f"{BROKER_SESSION_TTL_MINUTES:g} minutes after its last use (put(..., ttl=), each "
        "read refreshes it), and once expired it is never returned, swept or not.",
        highlight=False,
    )


def _order_text(orders: Sequence[Order]) -> str:
    return "; ".join(
        f"#{o.order_id} {o.side} {o.quantity} {o.ticker} @ {o.limit_price} (sent by pid {o.worker_pid})"
        for o in orders
    )


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exited with {returncode}"


# ------------------------------------------------------------------ the workers


@dataclass(frozen=True)
class WorkerRun:
    pid: int
    returncode: int
    stderr: str


def _worker(
    console: Console, env: dict[str, str], task: str, thread_id: str, doing: str
) -> WorkerRun:
    """Run a worker process on the thread: `python -m langgraph_colosseum.demo --worker ...`."""
    command = [sys.executable, "-m", "langgraph_colosseum.demo", "--worker", task, thread_id]
    with console.status(f"{doing} …"):
        process = subprocess.Popen(
            command, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _, stderr = process.communicate(timeout=120)
    if process.returncode not in (0, -signal.SIGKILL):
        raise DemoFailedError(f"the {task} worker failed:\n{stderr[-3000:]}")
    return WorkerRun(process.pid, process.returncode, stderr)


class _KilledBeforeSavingToolResults(ColosseumSaver):
    """A saver whose process is killed when a tool result is about to be saved.

    That is the worst moment for a worker to die: the tool's side effect has
    happened, and the step that ran it is not recorded, so LangGraph runs the
    step again on resume.
    """

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:  # fmt: skip
        if any(isinstance(message, ToolMessage)
               for channel, value in writes if channel == "messages"
               for message in (value if isinstance(value, list) else [value])):  # fmt: skip
            os.kill(os.getpid(), signal.SIGKILL)
        super().put_writes(config, writes, task_id, task_path)


def work(task: str, thread_id: str) -> None:
    """One worker's turn on the thread, in its own process.

    "approve" resumes the interrupt with the CIO's approval and is killed when
    the order's result is about to be saved; "continue" resumes the thread
    by its id and runs it to the end.
    """
    saver_class = _KilledBeforeSavingToolResults if task == "approve" else ColosseumSaver
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    with saver_class.from_env(pool_size=2) as saver:
        memory = open_memory(saver)
        graph = build_committee(saver, OrderBook(embedded.database_url()), store=memory)
        resume: Command | None = Command(resume=APPROVAL) if task == "approve" else None
        # durability="sync": every step is saved before the next one starts, so
        # a kill loses at most the step in flight.
        graph.invoke(resume, config, durability="sync")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m langgraph_colosseum.demo",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--ticker", default=DEFAULT_TICKER)
    parser.add_argument("--keep", action="store_true", default=None,
                        help="keep the run's threads and orders in a configured database")  # fmt: skip
    parser.add_argument("--worker", nargs=2, metavar=("TASK", "THREAD"),
                        help="internal: run a worker's turn (approve | continue) on a thread")  # fmt: skip
    args = parser.parse_args(argv)
    if args.worker:
        work(*args.worker)
    else:
        run(ticker=args.ticker, keep=args.keep)


if __name__ == "__main__":
    main()
