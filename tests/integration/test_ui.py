"""`colosseum ui` in a real browser: Debian's chromium driven by Playwright,
against the test Postgres. Screenshots go to tests/artifacts/ui/ (not committed).

The server runs in this process (uvicorn in a thread) over a saver of the
test database; the graphs run through a second saver, as another process would.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TypedDict

import httpx
import pytest
import uvicorn
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum.inspection import Inspector
from langgraph_colosseum.tools import IdempotentToolNode
from langgraph_colosseum.ui import LOOPBACK
from langgraph_colosseum.ui.app import create_app
from langgraph_colosseum.ui.server import bind
from tests.conftest import truncate

CHROMIUM = os.environ.get("COLOSSEUM_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "ui"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
XSS_SCRIPT = "<script>window.__pwned = 1</script>"
XSS_IMG = '<img src=x onerror="window.__pwned = 2">'

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM} (.ci/run installs it)"
)


FORK_POINT: list[str] = []  # the checkpoint desk-main was forked at


class Desk(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    ticker: str


@tool
def price(ticker: str) -> str:
    """The last price of a ticker."""
    return f"{ticker} 190.5"


def agent(state: Desk) -> dict:
    last = state["messages"][-1]
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(f"{state['ticker']} trades at {last.content}")]}
    text = str(last.content)
    ticker = text.split()[-1]
    call = {"name": "price", "args": {"ticker": ticker}, "id": f"call-{len(state['messages'])}"}
    return {"messages": [AIMessage("", tool_calls=[call])], "ticker": ticker}


def route(state: Desk) -> str:
    return "tools" if state["messages"][-1].tool_calls else "__end__"


def desk_graph(saver: ColosseumSaver):
    builder = StateGraph(Desk)
    builder.add_node("agent", agent)
    builder.add_node("tools", IdempotentToolNode([price]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def run(given: dict) -> dict:
    """`given` as one run (LangGraph's server puts run_id in configurable; it lands in metadata)."""
    return {**given, "configurable": {**given["configurable"], "run_id": str(uuid.uuid4())}}


class Served:
    def __init__(self, url: str, saver: ColosseumSaver, app) -> None:
        self.url, self.saver, self.app = url, saver, app


@pytest.fixture(scope="module")
def data(pg_url: str) -> Iterator[ColosseumSaver]:
    """Threads: desk-main (two turns, then a fork from its first turn's end),
    desk-xss (messages holding markup), and 25 small ones for paging."""
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = desk_graph(saver)
        main = config("desk-main")
        graph.invoke({"messages": [HumanMessage("quote AAPL", id="h1")]}, run(main))
        first_turn_end = graph.get_state(main).config
        graph.invoke({"messages": [HumanMessage("quote MSFT", id="h2")]}, run(main))
        # A fork: from the end of the first turn, a different question.
        graph.invoke(
            {"messages": [HumanMessage("quote NVDA", id="h3")]},
            run(first_turn_end),
        )
        FORK_POINT.append(first_turn_end["configurable"]["checkpoint_id"])
        saver.threads.update("desk-main", metadata={"desk": "equities"})
        xss = config("desk-xss")
        graph.update_state(
            xss, {"messages": [HumanMessage(XSS_SCRIPT, id="x1"), AIMessage(XSS_IMG, id="x2")],
                  "ticker": XSS_IMG},
        )  # fmt: skip
        for i in range(25):
            graph.update_state(config(f"bulk-{i:02}"), {"ticker": f"T{i}"})
        yield saver


@pytest.fixture(scope="module")
def server(data: ColosseumSaver, pg_url: str) -> Iterator[Served]:
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        app = create_app(Inspector(saver), allowed_hosts=LOOPBACK)
        sock = bind("127.0.0.1", 0)
        port = sock.getsockname()[1]
        uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
        runner = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
        runner.start()
        while not uv.started:
            time.sleep(0.05)
        yield Served(f"http://127.0.0.1:{port}", data, app)
        uv.should_exit = True
        runner.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser) -> Iterator:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, errors


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


# ------------------------------------------------------------------ pages


def test_threads_page_searches_counts_and_pages(server: Served, page) -> None:
    page.goto(server.url + "/")
    assert page.locator("#total").inner_text() == "27"
    assert page.locator("#threads tbody tr").count() == 20
    page.click("a[rel=next]")
    assert page.locator("#threads tbody tr").count() == 7
    page.goto(server.url + "/")
    page.fill("input[name=prefix]", "desk-")
    page.click("form.search button")
    assert page.locator("#total").inner_text() == "2"
    assert set(page.locator("a.thread-link").all_inner_texts()) == {"desk-main", "desk-xss"}
    page.fill("input[name=prefix]", "")
    page.fill("input[name=metadata]", '{"desk": "equities"}')
    page.click("form.search button")
    assert page.locator("a.thread-link").all_inner_texts() == ["desk-main"]
    row = page.locator("#threads tbody tr").first
    checkpoints = len(list(server.saver.list(config("desk-main"))))
    assert row.locator("td").nth(3).inner_text() == str(checkpoints)
    shot(page, "threads")


def test_thread_tree_shows_the_fork_as_a_branch_and_the_head(server: Served, page) -> None:
    page.goto(server.url + "/?prefix=desk-m")
    page.click("a.thread-link >> text=desk-main")
    saved = list(server.saver.list(config("desk-main")))
    head = server.saver.get_tuple(config("desk-main")).checkpoint["id"]
    nodes = page.locator("svg.tree a.node")
    assert nodes.count() == len(saved)
    # Every parent link the saver holds is an edge of the picture.
    edges = {
        (e.get_attribute("data-from"), e.get_attribute("data-to"))
        for e in page.locator("svg.tree path").all()
    }
    expected = {
        (t.parent_config["configurable"]["checkpoint_id"], t.checkpoint["id"])
        for t in saved
        if t.parent_config
    }
    assert edges == expected
    # One fork: the branch left behind (the MSFT turn) is drawn in a lane of its own.
    assert page.locator("svg.tree path.fork").count() == 1
    assert page.locator("svg.tree a.head").get_attribute("data-checkpoint") == head
    assert page.locator("svg.tree a.head").get_attribute("data-lane") == "0"
    off = page.locator("svg.tree a.off-branch")
    assert off.count() > 0
    assert {a.get_attribute("data-lane") for a in off.all()} == {"1"}
    # Labels name step, source and the nodes that wrote the checkpoint.
    labels = " ".join(t.text_content() for t in page.locator("svg.tree text").all())
    assert "agent" in labels and "tools" in labels and "input" in labels
    assert page.locator("#ledger tbody tr").count() == 3  # AAPL, MSFT, NVDA: one call each
    assert page.locator("#runs tbody tr").count() == 3
    shot(page, "thread")


def test_checkpoint_page_renders_the_state_messages(server: Served, page) -> None:
    state = server.saver.get_tuple(config("desk-main"))
    page.goto(server.url + "/thread?id=desk-main")
    page.click("svg.tree a.head")
    page.wait_for_selector("ol.conversation")
    messages = state.checkpoint["channel_values"]["messages"]
    shown = page.locator("ol.conversation li.message")
    assert shown.count() == len(messages)
    for i, message in enumerate(messages):
        item = shown.nth(i)
        assert item.get_attribute("data-id") == message.id
        assert item.locator(".role").inner_text().lower() == message.type
        assert item.locator(".text").inner_text() == message.content
        if message.type == "ai" and message.tool_calls:
            assert item.locator(".tool-name").inner_text() == "price"
        if message.type == "tool":
            assert item.locator(".tool-result .call-id").inner_text() == message.tool_call_id
    assert page.locator('.channel[data-channel="ticker"]').inner_text().endswith('"NVDA"')
    assert page.locator("#next").inner_text() == "-"
    shot(page, "checkpoint")


def test_checkpoint_page_shows_next_tasks_and_pending_writes(server: Served, page) -> None:
    before_tools = next(
        t for t in server.saver.list(config("desk-main"))
        if t.pending_writes and t.metadata.get("source") == "loop"
    )  # fmt: skip
    cid = before_tools.checkpoint["id"]
    page.goto(server.url + f"/checkpoint?thread=desk-main&id={cid}")
    writes = page.locator("#writes tbody tr")
    assert writes.count() == len(before_tools.pending_writes)


def test_next_and_nodes_run_agree_with_langgraph(server: Served) -> None:
    """The inspection layer reads them from versions alone; LangGraph's get_state
    (with the graph) is the oracle, at every checkpoint of the forked thread."""
    graph = desk_graph(server.saver)
    look = Inspector(server.saver)
    tree = {n["checkpoint_id"]: n for n in look.tree("desk-main")["nodes"]}
    for snapshot in graph.get_state_history(config("desk-main")):
        cid = snapshot.config["configurable"]["checkpoint_id"]
        assert look.checkpoint_view("desk-main", cid)["next"] == sorted(snapshot.next), cid
        parent = snapshot.parent_config
        if parent is not None:  # the step that made it ran what its parent had next
            expected = sorted(graph.get_state(parent).next)
            assert tree[cid]["nodes"] == expected, cid


def test_diff_of_two_checkpoints(server: Served, page) -> None:
    first_end = server.saver.get_tuple(
        {"configurable": {"thread_id": "desk-main", "checkpoint_id": FORK_POINT[0]}}
    )
    head = server.saver.get_tuple(config("desk-main"))
    page.goto(server.url + "/thread?id=desk-main")
    page.select_option("form.diff select[name=a]", first_end.checkpoint["id"])
    page.select_option("form.diff select[name=b]", head.checkpoint["id"])
    page.click("form.diff button")
    added = page.locator('.diff-channel[data-channel="messages"] .message-change.added .text')
    assert added.all_inner_texts() == [
        "quote NVDA",
        '→ price({"ticker": "NVDA"})',
        "NVDA 190.5",
        "NVDA trades at NVDA 190.5",
    ]
    ticker = page.locator('.diff-channel[data-channel="ticker"]')
    assert '"AAPL"' in ticker.locator(".before").inner_text()
    assert '"NVDA"' in ticker.locator(".after").inner_text()
    shot(page, "diff")


def test_markup_in_messages_is_shown_as_text(server: Served, page) -> None:
    page.goto(server.url + "/checkpoint?thread=desk-xss")
    texts = page.locator("ol.conversation .text").all_inner_texts()
    assert texts == [XSS_SCRIPT, XSS_IMG]
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main img").count() == 0
    assert page.locator("main script").count() == 0
    assert json.dumps(XSS_IMG) in page.locator('.channel[data-channel="ticker"]').inner_text()
    page.goto(server.url + "/?prefix=desk-x")
    assert page.evaluate("window.__pwned") is None
    shot(page, "markup")


def test_live_update_arrives_while_a_graph_runs(server: Served, page, pg_url: str) -> None:
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = desk_graph(saver)
        graph.invoke({"messages": [HumanMessage("quote AMD", id="l1")]}, config("live-1"))
        page.goto(server.url + "/thread?id=live-1")
        page.wait_for_selector("#live-status.on")
        count = int(page.locator("#checkpoint-count").inner_text())
        graph.invoke({"messages": [HumanMessage("quote INTC", id="l2")]}, config("live-1"))
        after = len(list(saver.list(config("live-1"))))
    # No reload: the page's own script swaps in the new state (a function string
    # could not be evaluated here anyway: the page's CSP forbids eval).
    playwright_api.expect(page.locator("#checkpoint-count")).to_have_text(
        str(after), timeout=15_000
    )
    assert after > count
    assert page.locator("svg.tree a.node").count() == after
    assert page.locator("main").get_attribute("data-updates") is not None
    shot(page, "live")


def test_fork_through_the_ui_makes_a_new_thread(server: Served, page) -> None:
    at = server.saver.get_tuple(
        {"configurable": {"thread_id": "desk-main", "checkpoint_id": FORK_POINT[0]}}
    )
    head_before = server.saver.get_tuple(config("desk-main")).checkpoint["id"]
    page.goto(server.url + f"/checkpoint?thread=desk-main&id={at.checkpoint['id']}")
    questions: list[str] = []

    def answer(dialog) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    page.fill("input[name=new_thread]", "desk-main-copy")
    page.click("form[action='/fork'] button")
    page.wait_for_url(re.compile(r".*/thread\?id=desk-main-copy$"))
    assert questions and "Fork thread desk-main" in questions[0]
    new = server.saver.get_tuple(config("desk-main-copy"))
    assert new.metadata["source"] == "fork"
    assert new.parent_config["configurable"]["checkpoint_id"] == at.checkpoint["id"]
    assert repr(new.checkpoint["channel_values"]) == repr(at.checkpoint["channel_values"])
    assert server.saver.get_tuple(config("desk-main")).checkpoint["id"] == head_before
    # The fork runs on: the graph continues from the copy.
    assert page.locator("svg.tree a.head").get_attribute("data-checkpoint") == new.checkpoint["id"]
    result = desk_graph(server.saver).invoke(
        {"messages": [HumanMessage("quote TSLA", id="f1")]}, config("desk-main-copy")
    )
    assert result["messages"][-1].content == "TSLA trades at TSLA 190.5"
    shot(page, "fork")


def test_delete_asks_first_and_a_dismissed_question_changes_nothing(server: Served, page) -> None:
    page.goto(server.url + "/thread?id=bulk-00")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("form[action='/delete'] button")
    assert server.saver.get_tuple(config("bulk-00")) is not None
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("form[action='/delete'] button")
    page.wait_for_url(server.url + "/")
    assert server.saver.get_tuple(config("bulk-00")) is None


# ------------------------------------------------------------------ safety, over HTTP


def test_state_changes_need_the_csrf_token(server: Served) -> None:
    with httpx.Client(base_url=server.url) as client:
        for body in ({"thread": "bulk-01"}, {"thread": "bulk-01", "csrf": "guess"}):
            refused = client.post("/delete", data=body)
            assert refused.status_code == 403
        csrf = server.app.state.settings.csrf
        cross = client.post(
            "/delete", data={"thread": "bulk-01", "csrf": csrf},
            headers={"origin": "http://evil.example"},
        )  # fmt: skip
        assert cross.status_code == 403
    assert server.saver.get_tuple(config("bulk-01")) is not None


def test_pages_carry_no_credential_and_a_strict_policy(server: Served, pg_url: str) -> None:
    with httpx.Client(base_url=server.url) as client:
        pages = [
            client.get(p) for p in ("/", "/thread?id=desk-main", "/checkpoint?thread=desk-main")
        ]
        assert client.get("/", headers={"host": "evil.example"}).status_code == 400
    for response in pages:
        assert response.status_code == 200
        assert pg_url not in response.text and "password" not in response.text.lower()
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        # Nothing from another origin: every src / href is a path on this server.
        for ref in re.findall(r'(?:src|href)="([^"]*)"', response.text):
            assert ref.startswith("/") or ref == "data:,", ref


def test_read_only_server_offers_and_accepts_no_action(data: ColosseumSaver) -> None:
    from starlette.testclient import TestClient

    client = TestClient(create_app(Inspector(data), read_only=True))
    page = client.get("/thread?id=desk-main")
    assert page.status_code == 200 and '<form class="action"' not in page.text
    csrf = client.app.state.settings.csrf
    assert client.post("/delete", data={"thread": "bulk-02", "csrf": csrf}).status_code == 403
    assert data.get_tuple(config("bulk-02")) is not None


def test_a_token_is_required_on_every_request(data: ColosseumSaver) -> None:
    from starlette.testclient import TestClient

    client = TestClient(create_app(Inspector(data), token="s3cret-token"))
    assert client.get("/").status_code == 401
    assert client.get("/static/ui.css").status_code == 401
    assert client.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
    entered = client.get("/?token=s3cret-token", follow_redirects=False)
    assert entered.status_code == 303 and "token" not in entered.headers["location"]
    assert client.get("/").status_code == 200  # the cookie it set
    assert "s3cret-token" not in client.get("/").text
    fresh = TestClient(client.app)
    assert fresh.get("/", headers={"authorization": "Bearer s3cret-token"}).status_code == 200
    # /metrics too: Prometheus presents the token as a bearer token.
    assert fresh.get("/metrics").status_code == 401
    bearer = {"authorization": "Bearer s3cret-token"}
    assert fresh.get("/metrics", headers=bearer).status_code == 200


def test_cli_ui_prints_the_url_and_serves(pg_url: str, data: ColosseumSaver) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLOSSEUM_REDIS_URL", "REDIS_URL")}
    env["COLOSSEUM_DATABASE_URL"] = pg_url
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_colosseum.cli", "ui", "--port", "0", "--read-only"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert match, line + proc.stderr.read() if proc.poll() is not None else line
        assert "read-only" in line and pg_url not in line
        assert httpx.get(match.group(1) + "?prefix=desk-").status_code == 200
        # /metrics: the server's own operations, in Prometheus text (the prometheus extra).
        metrics = httpx.get(match.group(1) + "metrics")
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].startswith("text/plain; version=")
        assert 'db_client_operation_duration_seconds_count{colosseum_layer="' in metrics.text
    finally:
        proc.terminate()
        proc.wait(10)


def test_cli_ui_on_another_address_prints_a_token_once_and_checks_it(
    pg_url: str, data: ColosseumSaver
) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLOSSEUM_REDIS_URL", "REDIS_URL")}
    env["COLOSSEUM_DATABASE_URL"] = pg_url
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_colosseum.cli", "ui", "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        match = re.search(r"http://0\.0\.0\.0:(\d+)/\?token=(\S+)", line)
        assert match, line
        port, token = match.groups()
        base = f"http://127.0.0.1:{port}/"
        assert httpx.get(base).status_code == 401
        assert httpx.get(base, headers={"authorization": "Bearer nope"}).status_code == 401
        ok = httpx.get(base, headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and token not in ok.text
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert token not in out  # printed once: only on the first line
