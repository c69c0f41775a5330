"""`rekey`: re-seal every row sealed with an older key under the current one.

Batches of `batch_size` rows per table, each batch one transaction. It is
idempotent and resumable: what is left to do is exactly the rows whose key id
is not the current one, so a run stopped anywhere simply continues the next
time. A row that does not open (altered, or its key not configured) is
refused with `CorruptRowError`, as a read would: rekey never seals data it
could not authenticate.
"""

from __future__ import annotations

from collections.abc import Callable

from langgraph_colosseum._core import sql
from langgraph_colosseum._core.crypt import (
    MARK,
    Encryption,
    RowSealError,
    frozen_aad,
    value_aad,
    write_aad,
)
from langgraph_colosseum._core.io import Operation, Query, Transaction
from langgraph_colosseum._core.values import corrupt_row

DEFAULT_BATCH_SIZE = 500

# (select, update, number of identity columns, aad of a selected row, what to name)
_TABLES: tuple[tuple[str, str, int, Callable[..., bytes], Callable[..., tuple]], ...] = (
    (
        sql.REKEY_SELECT_VALUES,
        sql.REKEY_UPDATE_VALUE,
        4,
        lambda t, ns, ch, v, enc, base: value_aad(t, ns, ch, v, enc, base),
        lambda t, ns, ch, v, enc, base: ((t, ns, ch), f"version {v!r}"),
    ),
    (
        sql.REKEY_SELECT_WRITES,
        sql.REKEY_UPDATE_WRITE,
        5,
        lambda t, ns, cid, task, idx, ch, enc: write_aad(t, ns, cid, task, idx, ch, enc),
        lambda t, ns, cid, task, idx, ch, enc: ((t, ns, ch), cid),
    ),
    (
        sql.REKEY_SELECT_HISTORIES,
        sql.REKEY_UPDATE_HISTORY,
        5,
        lambda t, ns, cid, ch, seq, task, enc: frozen_aad(t, ns, cid, ch, seq, task, enc),
        lambda t, ns, cid, ch, seq, task, enc: ((t, ns, ch), cid),
    ),
)


def rekey(encryption: Encryption, batch_size: int = DEFAULT_BATCH_SIZE) -> Operation[int]:
    """Re-seal rows under `encryption.current`; how many rows were re-sealed."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    current = MARK + encryption.current
    done = 0
    for select, update, width, aad_of, where_of in _TABLES:
        seen: set[tuple] = set()
        while True:
            rows = yield Query(select, {"current": current, "limit": batch_size})
            keys = {tuple(row[:width]) for row in rows}
            if not rows or keys <= seen:
                # Nothing left, or only rows rewritten meanwhile by a writer still
                # sealing with an older key: the next run takes those.
                break
            seen |= keys
            updates = []
            for *identity, data, type_ in rows:
                try:
                    opened = encryption.open(None, data, type_, aad_of(*identity))
                except RowSealError as exc:
                    where, at = where_of(*identity)
                    raise corrupt_row(where, at, exc) from None
                sealed = encryption.seal(
                    "", opened.json, opened.data, opened.type, aad_of(*identity)
                )
                params = {f"k{i}": identity[i] for i in range(width)}
                params.update(data=sealed.data, type=sealed.type, old_data=data, old_type=type_)
                updates.append(Query(update, params, fetch=False))
            yield Transaction(tuple(updates))
            done += len(updates)
    return done
