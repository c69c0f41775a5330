"""The web inspector's pages: a thin face over `Inspector`, as the CLI is.

Every page is rendered on the server from what the inspection layer answers,
and every piece of text from the database goes through `escape`, so a message
holding markup is shown as text. Scripts come only from /static (the
Content-Security-Policy forbids inline ones), forms that change state carry
the server's CSRF token, and with a token configured every request must
present it (cookie, `?token=`, or `Authorization: Bearer`).

Example:
    >>> app = create_app(Inspector(saver), read_only=True)
    >>> uvicorn.run(app, host="127.0.0.1", port=8765)
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
from collections.abc import AsyncIterator, Callable
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from langgraph_colosseum._core.threads import STATUSES
from langgraph_colosseum.errors import AmbiguousIdError, InvalidConfigError, NotFoundError
from langgraph_colosseum.inspection import Inspector
from langgraph_colosseum.telemetry import prometheus_text
from langgraph_colosseum.ui import tree as tree_svg

STATIC = Path(__file__).parent / "static"
TOKEN_COOKIE = "colosseum_token"
# How often an open thread page's event stream looks for a new head.
POLL_SECONDS = 0.5
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "x-content-type-options": "nosniff",
    # same-origin, not no-referrer: with no-referrer a form post says `Origin: null`.
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


class Settings:
    """What one server was started with."""

    def __init__(
        self, *, read_only: bool, token: str | None, allowed_hosts: tuple[str, ...] | None
    ) -> None:
        self.read_only = read_only
        self.token = token
        self.allowed_hosts = allowed_hosts
        # One per server: a page from this server can post, a page from another site cannot.
        self.csrf = secrets.token_urlsafe(32)


def create_app(
    inspector: Inspector, *, read_only: bool = False, token: str | None = None,
    allowed_hosts: tuple[str, ...] | None = None,
) -> Starlette:  # fmt: skip
    """The inspector as an ASGI app. `token`: every request must present it;
    `allowed_hosts`: the only host names a request may address (None: any)."""
    settings = Settings(read_only=read_only, token=token, allowed_hosts=allowed_hosts)
    look = inspector

    async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(fn, *args, **kwargs)

    # ------------------------------------------------------------ pages

    async def threads_page(request: Request) -> Response:
        q = request.query_params
        status = q.get("status") or None
        if status is not None and status not in STATUSES:
            raise InvalidConfigError(f"unknown status {status!r}: use one of {', '.join(STATUSES)}")
        metadata = _json_param(q.get("metadata"), "metadata")
        values = _json_param(q.get("values"), "values")
        limit, offset = _int_param(q.get("limit"), 20), _int_param(q.get("offset"), 0)
        page = await call(
            look.threads, status=status, metadata=metadata, values=values,
            prefix=q.get("prefix") or None, limit=limit, offset=offset,
        )  # fmt: skip
        sizes = await call(look.thread_sizes, [t["thread_id"] for t in page.items])
        rows = "".join(
            "<tr>"
            f'<td><a class="thread-link" href="{_url("/thread", id=t["thread_id"])}">'
            f"{_e(t['thread_id'])}</a></td>"
            f'<td><span class="status status-{_e(t["status"])}">{_e(t["status"])}</span></td>'
            f"<td>{_e(str(t['updated_at'])[:19])}</td>"
            f"<td class=num>{sizes.get(t['thread_id'], {}).get('checkpoints', 0)}</td>"
            f"<td class=num>{_size(sizes.get(t['thread_id'], {}).get('bytes', 0))}</td>"
            f"<td><code>{_e(json.dumps(t['metadata'], ensure_ascii=False))}</code></td>"
            "</tr>"
            for t in page.items
        )
        options = "".join(
            f'<option value="{s}"{" selected" if s == status else ""}>{s}</option>'
            for s in ("", *STATUSES)
        )
        form = (
            '<form class="search" method="get" action="/">'
            f'<input name="prefix" placeholder="thread id prefix" value="{_e(q.get("prefix", ""))}">'
            f'<select name="status">{options}</select>'
            f'<input name="metadata" placeholder=\'metadata {{"desk": "x"}}\' value="{_e(q.get("metadata", ""))}">'
            f'<input name="values" placeholder=\'values {{"ticker": "AAPL"}}\' value="{_e(q.get("values", ""))}">'
            f'<input name="limit" type="number" min="1" value="{limit}">'
            '<button type="submit">search</button></form>'
        )
        shown = f"{offset + 1}–{offset + len(page.items)}" if page.items else "0"
        paging = []
        params = {k: v for k, v in q.items() if k != "offset"}
        if offset > 0:
            paging.append(
                f'<a rel="prev" href="{_url("/", **params, offset=max(0, offset - limit))}">← newer</a>'
            )
        if offset + len(page.items) < page.total:
            paging.append(
                f'<a rel="next" href="{_url("/", **params, offset=offset + limit)}">older →</a>'
            )
        body = (
            f"<h1>threads</h1>{form}"
            f'<p class="count"><span id="total">{page.total}</span> threads, showing {shown}</p>'
            '<table id="threads"><thead><tr><th>thread</th><th>status</th><th>updated</th>'
            "<th>checkpoints</th><th>size</th><th>metadata</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            f'<nav class="paging">{" ".join(paging)}</nav>'
        )
        return _page("threads", body)

    async def thread_page(request: Request) -> Response:
        thread_id = await call(look.thread_id, _required(request, "id"))
        ns = request.query_params.get("ns", "")
        tree = await call(look.tree, thread_id, checkpoint_ns=ns)
        info = await call(look.saver.threads.get, thread_id)
        runs = await call(look.runs, thread_id)
        ledger = await call(look.ledger, thread_id)
        picture = tree_svg.svg(
            tree, lambda cid: _url("/checkpoint", thread=thread_id, id=cid, ns=ns)
        )

        def options(selected: int) -> str:  # newest first: "a" defaults to the head's parent
            return "".join(
                f'<option value="{_e(n["checkpoint_id"])}"{" selected" if i == selected else ""}>'
                f"step {_e(str(n['step']))} · {_e(n['checkpoint_id'][-12:])}</option>"
                for i, n in enumerate(tree["nodes"])
            )

        diff_form = (
            '<form class="diff" method="get" action="/diff">'
            f'<input type="hidden" name="thread" value="{_e(thread_id)}">'
            f'<input type="hidden" name="ns" value="{_e(ns)}">'
            f'<select name="a">{options(1)}</select> → <select name="b">{options(0)}</select>'
            '<button type="submit">diff</button></form>'
        )
        actions = ""
        if not settings.read_only:
            actions = (
                '<section class="actions"><h2>actions</h2>'
                + _action_form("/delete", thread_id, "delete thread",
                               f"Delete thread {thread_id} and all its checkpoints?")
                + _action_form("/prune", thread_id, "prune",
                               f"Prune thread {thread_id} to its newest checkpoints?",
                               '<input name="keep" type="number" min="1" value="1" '
                               'aria-label="checkpoints kept per namespace">')
                + "</section>"
            )  # fmt: skip
        status = info.status if info else "unknown"
        meta = json.dumps(info.metadata if info else {}, ensure_ascii=False, default=str)
        body = (
            f'<h1>thread <span class="id">{_e(thread_id)}</span></h1>'
            f'<p><span class="status status-{_e(status)}">{_e(status)}</span> · '
            f'<span id="checkpoint-count">{tree["total"]}</span> checkpoints · head '
            f'<a id="head" href="{_url("/checkpoint", thread=thread_id, id=tree["head"] or "", ns=ns)}">'
            f"{_e(tree['head'] or '-')}</a> · updated {_e(str(info.updated_at)[:19] if info else '-')}"
            f" · metadata <code>{_e(meta)}</code></p>"
            f'<section><h2>checkpoints</h2>{diff_form}<div class="tree-box">{picture}</div></section>'
            f"{_runs_section(runs)}{_ledger_section(ledger)}{actions}"
        )
        live = _url("/events", thread=thread_id)
        return _page(f"thread {thread_id}", body, live=live)

    async def checkpoint_page(request: Request) -> Response:
        thread_id = await call(look.thread_id, _required(request, "thread"))
        ns = request.query_params.get("ns", "")
        view = await call(
            look.checkpoint_view, thread_id, request.query_params.get("id") or None,
            channel=request.query_params.get("channel", "messages"), checkpoint_ns=ns,
        )  # fmt: skip
        cid = view["checkpoint_id"]
        parent = view["parent_checkpoint_id"]
        conversation = (
            '<ol class="conversation">' + "".join(_message(m) for m in view["messages"]) + "</ol>"
            if view["messages"]
            else '<p class="empty">no messages</p>'
        )
        channels = (
            "".join(
                f'<div class="channel" data-channel="{_e(k)}"><h3>{_e(k)}</h3>{_json_tree(v, open_=True)}</div>'
                for k, v in view["channels"].items()
            )
            or '<p class="empty">no other channels</p>'
        )
        writes = "".join(
            f"<tr><td>{_e(w['task_id'])}</td><td>{_e(w['channel'])}</td><td>{_json_tree(w['value'])}</td></tr>"
            for w in view["pending_writes"]
        )
        interrupts = "".join(f"<li>{_json_tree(i, open_=True)}</li>" for i in view["interrupts"])
        fork = ""
        if not settings.read_only:
            fork = _action_form(
                "/fork", thread_id, "fork into a new thread",
                f"Fork thread {thread_id} at checkpoint {cid} into a new thread?",
                f'<input type="hidden" name="checkpoint" value="{_e(cid)}">'
                '<input name="new_thread" placeholder="new thread id (optional)">',
            )  # fmt: skip
        body = (
            f'<h1>checkpoint <span class="id">{_e(cid)}</span></h1>'
            f'<p>thread <a href="{_url("/thread", id=thread_id)}">{_e(thread_id)}</a>'
            + (f' · parent <a href="{_url("/checkpoint", thread=thread_id, id=parent, ns=ns)}">'
               f"{_e(parent)}</a>" if parent else "")
            + (f' · <a href="{_url("/diff", thread=thread_id, a=parent, b=cid, ns=ns)}">diff with parent</a>'
               if parent else "")
            + f" · {_e(view['ts'] or '')}</p>"
            f'<section><h2>next</h2><p id="next">{_e(", ".join(view["next"]) or "-")}</p></section>'
            f'<section><h2>messages</h2>{conversation}</section>'
            f'<section><h2>channels</h2>{channels}</section>'
            f'<section><h2>pending writes</h2><table id="writes"><thead><tr><th>task</th>'
            f"<th>channel</th><th>value</th></tr></thead><tbody>{writes}</tbody></table></section>"
            f'<section><h2>interrupts</h2><ul id="interrupts">{interrupts}</ul></section>'
            f'<section><h2>metadata</h2>{_json_tree(view["metadata"], open_=True)}</section>'
            f"{fork}"
        )  # fmt: skip
        return _page(f"checkpoint {cid}", body)

    async def diff_page(request: Request) -> Response:
        thread_id = await call(look.thread_id, _required(request, "thread"))
        q = request.query_params
        diff = await call(
            look.diff, thread_id, _required(request, "a"), _required(request, "b"),
            checkpoint_ns=q.get("ns", ""), internal=bool(q.get("internal")),
        )  # fmt: skip
        rows = []
        for change in diff["channels"]:
            parts = [f'<h3><span class="change change-{_e(change["change"])}">{_e(change["change"])}</span> '
                     f"{_e(change['channel'])}</h3>"]  # fmt: skip
            if "messages_added" in change:
                for kind in ("added", "removed", "edited"):
                    for m in change[f"messages_{kind}"]:
                        parts.append(
                            f'<div class="message-change {kind}"><span class="sign">{kind}</span> '
                            f'<span class="role">{_e(m["type"])}</span> '
                            f'<span class="text">{_e(m["text"])}</span></div>'
                        )
            else:
                if "before" in change:
                    parts.append(
                        f'<div class="before"><b>before</b>{_json_tree(change["before"], open_=True)}</div>'
                    )
                if "after" in change:
                    parts.append(
                        f'<div class="after"><b>after</b>{_json_tree(change["after"], open_=True)}</div>'
                    )
            rows.append(
                f'<div class="diff-channel" data-channel="{_e(change["channel"])}">{"".join(parts)}</div>'
            )
        before, after = diff["before"], diff["after"]
        body = (
            f'<h1>diff of <a href="{_url("/thread", id=thread_id)}">{_e(thread_id)}</a></h1>'
            f'<p>from <a href="{_url("/checkpoint", thread=thread_id, id=before["checkpoint_id"])}">'
            f"step {_e(str(before['step']))} · {_e(before['checkpoint_id'])}</a> to "
            f'<a href="{_url("/checkpoint", thread=thread_id, id=after["checkpoint_id"])}">'
            f"step {_e(str(after['step']))} · {_e(after['checkpoint_id'])}</a></p>"
            + ("".join(rows) or '<p class="empty">no changes</p>')
        )
        return _page("diff", body)

    async def events(request: Request) -> Response:
        thread_id = await call(look.thread_id, _required(request, "thread"))

        async def stream() -> AsyncIterator[str]:
            last = None
            yield "retry: 1000\n\n"
            while not await request.is_disconnected():
                info = await call(look.saver.threads.get, thread_id)
                now = (info.head_checkpoint_id, str(info.updated_at)) if info else (None, None)
                if now != last:
                    if last is not None:
                        data = json.dumps({"head": now[0], "updated_at": now[1]})
                        yield f"event: head\ndata: {data}\n\n"
                    last = now
                await asyncio.sleep(POLL_SECONDS)

        return StreamingResponse(stream(), media_type="text/event-stream")

    # ------------------------------------------------------------ actions

    async def checked_form(request: Request) -> Any:
        if settings.read_only:
            raise _Refused(403, "this server is read-only (started with --read-only)")
        form = await request.form()
        given = str(form.get("csrf", ""))
        if not hmac.compare_digest(given.encode(), settings.csrf.encode()):
            raise _Refused(403, "missing or wrong CSRF token: reload the page and try again")
        origin = request.headers.get("origin")
        if origin and origin != f"{request.url.scheme}://{request.url.netloc}":
            raise _Refused(403, "a request from another origin was refused")
        return form

    async def fork_action(request: Request) -> Response:
        form = await checked_form(request)
        new_id = await call(
            look.fork, str(form["thread"]), str(form["checkpoint"]),
            str(form.get("new_thread", "")).strip() or None,
        )  # fmt: skip
        return RedirectResponse(_url("/thread", id=new_id), status_code=303)

    async def delete_action(request: Request) -> Response:
        form = await checked_form(request)
        thread_id = await call(look.thread_id, str(form["thread"]))
        await call(look.saver.delete_thread, thread_id)
        return RedirectResponse("/", status_code=303)

    async def prune_action(request: Request) -> Response:
        form = await checked_form(request)
        thread_id = await call(look.thread_id, str(form["thread"]))
        keep = _int_param(str(form.get("keep", "1")), 1)
        if keep < 1:
            raise InvalidConfigError(f"keep must be at least 1, not {keep}")
        await call(look.saver.prune, [thread_id], strategy="keep_latest", keep=keep)
        return RedirectResponse(_url("/thread", id=thread_id), status_code=303)

    # ------------------------------------------------------------ plumbing

    def _action_form(
        action: str, thread_id: str, label: str, question: str, extra: str = ""
    ) -> str:
        return (
            f'<form class="action" method="post" action="{action}" data-confirm="{_e(question)}">'
            f'<input type="hidden" name="csrf" value="{_e(settings.csrf)}">'
            f'<input type="hidden" name="thread" value="{_e(thread_id)}">'
            f'{extra}<button type="submit">{_e(label)}</button></form>'
        )

    async def on_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, _Refused):
            code, message = exc.code, str(exc)
        elif isinstance(exc, NotFoundError):
            code, message = 404, str(exc)
        else:
            code, message = 400, str(exc)
        return _page("error", f'<h1>error</h1><p class="error">{_e(message)}</p>', code=code)

    def metrics_page(request: Request) -> Response:
        exposition = prometheus_text()
        if exposition is None:
            return PlainTextResponse(
                "404: /metrics needs the prometheus extra: "
                'pip install "langgraph-colosseum[prometheus]"',
                status_code=404,
            )
        body, content_type = exposition
        return Response(body, media_type=content_type)

    routes = [
        Route("/", threads_page),
        Route("/thread", thread_page),
        Route("/checkpoint", checkpoint_page),
        Route("/diff", diff_page),
        Route("/events", events),
        Route("/fork", fork_action, methods=["POST"]),
        Route("/delete", delete_action, methods=["POST"]),
        Route("/prune", prune_action, methods=["POST"]),
        Route("/healthz", lambda request: PlainTextResponse("ok")),
        Route("/metrics", metrics_page),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(BaseHTTPMiddleware, dispatch=_guard(settings))]
    handlers = {
        _Refused: on_error,
        NotFoundError: on_error,
        AmbiguousIdError: on_error,
        InvalidConfigError: on_error,
    }
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)
    app.state.settings = settings
    return app


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _guard(settings: Settings) -> Callable[..., Any]:
    """The token check (when one is set) and the security headers of every response."""

    async def dispatch(request: Request, call_next: Callable[..., Any]) -> Response:
        if settings.allowed_hosts is not None:
            host = (request.url.hostname or "").strip("[]")
            if host not in settings.allowed_hosts:
                return _secured(PlainTextResponse("400: unknown host", status_code=400))
        if settings.token is not None:
            given = request.query_params.get("token")
            if given is not None and _same(given, settings.token):
                # Trade the token in the URL for a cookie, and drop it from the
                # address bar (and from any Referer).
                rest = {k: v for k, v in request.query_params.items() if k != "token"}
                response: Response = RedirectResponse(
                    request.url.path + (f"?{urlencode(rest)}" if rest else ""), status_code=303
                )
                response.set_cookie(TOKEN_COOKIE, settings.token, httponly=True, samesite="strict")
                return _secured(response)
            bearer = request.headers.get("authorization", "")
            presented = request.cookies.get(TOKEN_COOKIE) or (
                bearer[7:] if bearer.lower().startswith("bearer ") else ""
            )
            if not _same(presented, settings.token):
                return _secured(PlainTextResponse(
                    "401: open the URL with ?token=... that `colosseum ui` printed", status_code=401
                ))  # fmt: skip
        return _secured(await call_next(request))

    return dispatch


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _secured(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


# ---------------------------------------------------------------- rendering


def _e(value: Any) -> str:
    """Text from the database, safe in HTML text and in quoted attributes."""
    return escape("" if value is None else str(value), quote=True)


def _url(path: str, **params: Any) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return _e(path + (f"?{urlencode(kept)}" if kept else ""))


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise InvalidConfigError(f"the parameter {name!r} is missing")
    return value


def _int_param(value: str | None, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidConfigError(f"not a whole number: {value!r}") from None


def _json_param(value: str | None, name: str) -> Any:
    if not value:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(f"{name} is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidConfigError(f'{name} must be a JSON object, e.g. {{"desk": "equities"}}')
    return parsed


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _json_tree(value: Any, *, open_: bool = False) -> str:
    """A JSON value as nested <details>: objects and lists fold, scalars are text."""
    if isinstance(value, dict):
        if not value:
            return '<span class="j-empty">{}</span>'
        items = "".join(
            f'<li><span class="j-key">{_e(k)}</span>: {_json_tree(v)}</li>'
            for k, v in value.items()
        )
        return f'<details class="j"{" open" if open_ else ""}><summary>{{{len(value)}}}</summary><ul>{items}</ul></details>'
    if isinstance(value, list):
        if not value:
            return '<span class="j-empty">[]</span>'
        items = "".join(f"<li>{_json_tree(v)}</li>" for v in value)
        return f'<details class="j"{" open" if open_ else ""}><summary>[{len(value)}]</summary><ol start="0">{items}</ol></details>'
    kind = "str" if isinstance(value, str) else "null" if value is None else "lit"
    return f'<span class="j-{kind}">{_e(json.dumps(value, ensure_ascii=False))}</span>'


def _message(m: dict[str, Any]) -> str:
    calls = "".join(
        f'<div class="tool-call"><span class="tool-name">{_e(c["name"])}</span>'
        f"(<code>{_e(json.dumps(c['args'], ensure_ascii=False))}</code>)"
        f'<span class="call-id">{_e(c["id"] or "")}</span></div>'
        for c in m["tool_calls"]
    )
    result = (
        f'<div class="tool-result">result of <span class="call-id">{_e(m["tool_call_id"])}</span>'
        f"{' · ' + _e(m['status']) if m['status'] else ''}</div>"
        if m["tool_call_id"]
        else ""
    )
    name = f' <span class="name">{_e(m["name"])}</span>' if m["name"] else ""
    return (
        f'<li class="message role-{_e(m["role"])}" data-id="{_e(m["id"] or "")}">'
        f'<div class="who"><span class="role">{_e(m["role"])}</span>{name}</div>'
        f'{result}<div class="text">{_e(m["text"])}</div>{calls}</li>'
    )


def _runs_section(runs: dict[str, Any]) -> str:
    guard = runs["guard"]
    guard_text = (
        f"held by {_e(guard['owner'])} (token {guard['token']}) until {_e(guard['lease_until'])}"
        if guard and guard["held"]
        else "free"
    )
    rows = "".join(
        f"<tr><td>{_e(r['run_id'])}</td><td>{_e(r.get('status') or '')}</td>"
        f"<td>{_e(r['strategy'])}</td><td class=num>{r['checkpoints']}</td>"
        f"<td>{_e(r['started'])}</td><td>{_e(r['ended'])}</td><td>{_e(r['holder'])}</td>"
        f"<td>{_e(r['stopped_by'])}</td><td>{_e(r['error'])}</td></tr>"
        for r in runs["runs"]
    )
    return (
        f'<section><h2>runs</h2><p id="guard">run guard: {guard_text}</p>'
        '<table id="runs"><thead><tr><th>run</th><th>status</th><th>strategy</th>'
        "<th>checkpoints</th><th>first</th><th>last</th><th>process</th><th>stopped by</th>"
        f"<th>error</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _ledger_section(ledger: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{_e(c['idempotency_key'])}</td><td>{_e(c['tool'])}</td>"
        f'<td><span class="status">{_e(c["status"])}</span></td><td class=num>{_e(c["attempts"])}</td>'
        f"<td>{_e(str(c['started_at'] or '')[:19])}</td><td>{_e(str(c['completed_at'] or '')[:19])}</td>"
        f"<td>{_json_tree(c['output']) if c['output'] is not None else _e(c['error'] or '')}</td></tr>"
        for c in ledger
    )
    return (
        '<section><h2>tool ledger</h2><table id="ledger"><thead><tr><th>key</th><th>tool</th>'
        "<th>status</th><th>attempts</th><th>started</th><th>completed</th><th>output / error</th>"
        f"</tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _page(title: str, body: str, *, live: str | None = None, code: int = 200) -> HTMLResponse:
    live_attr = f' data-live="{live}"' if live else ""
    return HTMLResponse(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)} · colosseum</title>"
        '<link rel="icon" href="data:,"><link rel="stylesheet" href="/static/ui.css"><script src="/static/ui.js" defer></script>'
        '</head><body><header><a class="brand" href="/">colosseum</a>'
        '<span id="live-status"></span></header>'
        f"<main{live_attr}>{body}</main></body></html>",
        status_code=code,
    )
