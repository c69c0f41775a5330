"""`colosseum ui`: a local web inspector over the inspection layer.

Needs the `ui` extra (`pip install 'langgraph-colosseum[ui]'`: Starlette and
uvicorn). Everything it serves ships in this package; nothing is fetched from
the internet.

Example:
    >>> from langgraph_colosseum.ui import create_app
    >>> app = create_app(Inspector(saver), read_only=True)
"""

from __future__ import annotations

from langgraph_colosseum.ui.app import create_app

__all__ = ["create_app", "is_loopback"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    """True for the addresses only this machine can reach."""
    return host in LOOPBACK or host.startswith("127.")
