"""What Postgres can key a row by: thread ids, namespaces and checkpoint ids.

Checked before any I/O, so a bad id is an `InvalidConfigError` naming it instead
of a raw `DataError` (NUL), `ProgramLimitExceeded` (a btree entry holds at most
about 2.7 KB, a third of a page) or `UnicodeEncodeError` (a lone surrogate).
The primary keys put thread_id, checkpoint_ns and a 36-byte checkpoint id in
one entry, so each of the first two gets 1 KB: well under the limit together,
however incompressible.
"""

from __future__ import annotations

from langgraph_colosseum.errors import InvalidConfigError

MAX_KEY_BYTES = 1024


def checked_key(what: str, value: str, thread_id: str | None = None) -> str:
    """`value` itself if a row can be keyed by it; else InvalidConfigError.

    Costs a few hundred nanoseconds for ordinary ids: a NUL scan and a length
    test (a string of at most MAX_KEY_BYTES // 4 characters cannot exceed the
    limit in UTF-8); only longer or non-ASCII ids are encoded to measure them.

    Example:
        >>> checked_key("thread_id", "user-42")
        'user-42'
    """
    if "\x00" in value:
        problem = "contains a NUL character, which Postgres text cannot hold"
    elif len(value) <= MAX_KEY_BYTES // 4 and value.isascii():
        return value
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            problem = "contains a lone surrogate, which is not valid UTF-8"
        else:
            if size <= MAX_KEY_BYTES:
                return value
            problem = f"is {size} bytes long; at most {MAX_KEY_BYTES} fit in an index entry"
    where = f" (thread {shown(thread_id)})" if thread_id is not None else ""
    raise InvalidConfigError(
        f"configurable.{what} {shown(value)}{where} {problem}. Nothing was read or written; "
        "use a shorter id (a UUID, or a hash of a long natural key)."
    )


def shown(value: str) -> str:
    """An id for an error message: its repr, cut short when long."""
    return repr(value) if len(value) <= 60 else f"{value[:40]!r}... ({len(value)} characters)"
