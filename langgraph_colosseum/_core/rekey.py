"""`rekey`: re-seal every row sealed with an older key under the current one;
with `encrypt_plaintext`, also seal the plaintext rows of a database written
before `encryption=` was turned on.

Batches of `batch_size` rows per table, each batch one transaction. It is
idempotent and resumable: what is left to do is exactly the rows whose key id
is not the current one (or that are plaintext where ciphertext belongs), so a
run stopped anywhere simply continues the next time. A sealed row that does
not open (altered, or its key not configured) is refused with
`CorruptRowError`, as a read would: rekey never seals data it could not
authenticate. A plaintext row cannot be authenticated: `encrypt_plaintext`
seals it as it is, which is why it is a separate, explicit step, and why reads
keep refusing plaintext rows until it has run.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from langgraph_colosseum._core import ledger, sql
from langgraph_colosseum._core.crypt import (
    MARK,
    SEALED_KEY,
    Encryption,
    RowSealError,
    frozen_aad,
    is_sealed,
    is_sealed_json,
    metadata_aad,
    registry_aad,
    value_aad,
    write_aad,
)
from langgraph_colosseum._core.io import Operation, Query, Transaction
from langgraph_colosseum._core.values import ValueCodec, corrupt_row
from langgraph_colosseum.errors import CodecError, CorruptRowError

DEFAULT_BATCH_SIZE = 500

# (select, update, number of identity columns, aad of (identity, encoding), what to name)
_TABLES: tuple[tuple[str, str, int, Callable[..., bytes], Callable[..., tuple]], ...] = (
    (
        sql.REKEY_SELECT_VALUES,
        sql.REKEY_UPDATE_VALUE,
        5,
        lambda t, ns, ch, v, base, enc: value_aad(t, ns, ch, v, enc, base),
        lambda t, ns, ch, v, base: ((t, ns, ch), f"version {v!r}"),
    ),
    (
        sql.REKEY_SELECT_WRITES,
        sql.REKEY_UPDATE_WRITE,
        6,
        lambda t, ns, cid, task, idx, ch, path, enc: write_aad(
            t, ns, cid, task, idx, path, ch, enc
        ),
        lambda t, ns, cid, task, idx, ch, path: ((t, ns, ch), cid),
    ),
    (
        sql.REKEY_SELECT_HISTORIES,
        sql.REKEY_UPDATE_HISTORY,
        6,
        lambda t, ns, cid, ch, seq, task, enc: frozen_aad(t, ns, cid, ch, seq, task, enc),
        lambda t, ns, cid, ch, seq, task: ((t, ns, ch), cid),
    ),
)


def rekey(
    codec: ValueCodec,
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    encrypt_plaintext: bool = False,
) -> Operation[int]:
    """Re-seal rows under `codec.encryption.current` (and seal plaintext rows
    with `encrypt_plaintext`); how many rows were written."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    encryption = codec.encryption
    assert encryption is not None
    done = 0
    passes = [sql.REKEY_OLD_KEY] + ([sql.REKEY_PLAINTEXT] if encrypt_plaintext else [])
    params = {
        "current": MARK + encryption.current,
        "key_id": encryption.current,
        "plaintext_channels": sorted(encryption.plaintext_channels),
        "limit": batch_size,
    }
    if encrypt_plaintext:
        done += len((yield Query(sql.REKEY_ROWS_OF_INLINE_VALUES, {})))
    for where in passes:
        for select, update, width, aad_of, where_of in _TABLES:
            done += yield from _batches(
                select.format(where=where),
                params,
                width,
                lambda row, update=update, width=width, aad_of=aad_of, where_of=where_of: (
                    _reseal_row(encryption, update, width, aad_of, where_of, row)
                ),
            )
    metadata_passes = [sql.REKEY_METADATA_OLD_KEY] + (
        [sql.REKEY_METADATA_PLAINTEXT] if encrypt_plaintext else []
    )
    for where in metadata_passes:
        done += yield from _batches(
            sql.REKEY_SELECT_METADATA.format(where=where),
            params,
            3,
            lambda row: _reseal_metadata(codec, row),
        )
    done += yield from _registry(codec, batch_size, encrypt_plaintext)
    done += yield from _run_metadata(codec, batch_size, encrypt_plaintext)
    done += yield from _ledger(codec, batch_size, encrypt_plaintext)
    done += yield from _store_items(encryption, batch_size, encrypt_plaintext)
    return done


def _batches(
    select: str, params: dict, width: int, reseal: Callable[[tuple], Query]
) -> Operation[int]:
    """Rows of `select` (their first `width` columns name them), re-sealed a batch at a time."""
    done = 0
    seen: set[tuple] = set()
    while True:
        rows = yield Query(select, params)
        keys = {tuple(row[:width]) for row in rows}
        if not rows or keys <= seen:
            # Nothing left, or only rows rewritten meanwhile by a writer still
            # sealing with an older key: the next run takes those.
            return done
        seen |= keys
        yield Transaction(tuple(map(reseal, rows)))
        done += len(rows)


def _in_key_order(
    select: str,
    cursor_after: Callable[[tuple], dict],
    first_cursor: dict,
    batch_size: int,
    update: Callable[[tuple], Query | None],
) -> Operation[int]:
    """Every row of `select`, a page at a time in key order (keyset paging from
    `first_cursor`, then `cursor_after(last row)`): the rows `update` returns a
    statement for are rewritten, one transaction per page; returns how many."""
    done = 0
    cursor = first_cursor
    while True:
        rows = yield Query(select, {**cursor, "limit": batch_size})
        updates = [query for query in map(update, rows) if query is not None]
        if updates:
            yield Transaction(tuple(updates))
            done += len(updates)
        if len(rows) < batch_size:
            return done
        cursor = cursor_after(rows[-1])


def _reseal_row(
    encryption: Encryption,
    update: str,
    width: int,
    aad_of: Callable[..., bytes],
    where_of: Callable[..., tuple],
    row: tuple,
) -> Query:
    *identity, encoding, json, data, type_ = row
    aad = aad_of(*identity, encoding)
    if is_sealed(type_):
        try:
            opened = encryption.open(json, data, type_, aad)
        except RowSealError as exc:
            where, at = where_of(*identity)
            raise corrupt_row(where, at, exc) from None
        json, data, type_ = opened.json, opened.data, opened.type
    sealed = encryption.seal(encoding, json, data, type_, aad)
    params = {f"k{i}": identity[i] for i in range(width)}
    params.update(
        data=sealed.data,
        type=sealed.type,
        old_encoding=encoding,
        old_json=row[-3],
        old_data=row[-2],
        old_type=row[-1],
    )
    return Query(update, params, fetch=False)


def _reseal_metadata(codec: ValueCodec, row: tuple) -> Query:
    thread_id, checkpoint_ns, checkpoint_id, text, document = row
    encryption = codec.encryption
    assert encryption is not None
    try:
        aad = metadata_aad(thread_id, checkpoint_ns, checkpoint_id, document)
        parsed = orjson.loads(text)
        full = text
        if type(parsed) is dict and SEALED_KEY in parsed:
            full = encryption.open_json(parsed[SEALED_KEY], aad)
            codec.load_metadata(text, aad)  # its plaintext keys checked too
        metadata = codec.load_json(full)
        if type(metadata) is not dict:
            raise CodecError("the metadata is not an object")
    except (RowSealError, CodecError, orjson.JSONDecodeError) as exc:
        raise corrupt_row((thread_id, checkpoint_ns, None), checkpoint_id, exc) from None
    new = codec.seal_metadata(metadata, full, aad)
    return Query(
        sql.REKEY_UPDATE_METADATA,
        {"k0": thread_id, "k1": checkpoint_ns, "k2": checkpoint_id, "new": new, "old": text},
        fetch=False,
    )


def _registry(codec: ValueCodec, batch_size: int, encrypt_plaintext: bool) -> Operation[int]:
    """The registry rows, every one in thread order: a row is rewritten when one
    of its values is sealed with an older key, or (`encrypt_plaintext`) is
    plaintext where it is to be sealed."""

    def update(row: tuple) -> Query | None:
        thread_id, metadata, values, undo = row
        new_metadata = _reseal_object(codec, thread_id, "metadata", metadata, encrypt_plaintext)
        new_values = _reseal_object(codec, thread_id, "values", values, encrypt_plaintext)
        new_undo = _reseal_undo(codec, thread_id, undo, encrypt_plaintext)
        if new_metadata is None and new_values is None and new_undo is None:
            return None
        params = {
            "thread_id": thread_id,
            "metadata": new_metadata or metadata,
            "values": new_values or values,
            "undo": new_undo or undo,
            "old_metadata": metadata,
            "old_values": values,
            "old_undo": undo,
        }
        return Query(sql.REKEY_UPDATE_REGISTRY, params, fetch=False)

    return (
        yield from _in_key_order(
            sql.REKEY_SELECT_REGISTRY,
            lambda row: {"after": row[0]},
            {"after": ""},
            batch_size,
            update,
        )
    )


def _reseal_undo(
    codec: ValueCodec, thread_id: str, text: str, encrypt_plaintext: bool
) -> str | None:
    """The registry's metadata_undo with the values it keeps re-sealed, or None.

    Each value is one a rollback puts back under its key, so it is sealed as
    the registry metadata of that key is."""
    undo = orjson.loads(text)
    kept = {key: entry["v"] for key, entry in undo.items() if "v" in entry}
    resealed = _reseal_object(
        codec, thread_id, "metadata", orjson.dumps(kept).decode(), encrypt_plaintext
    )
    if resealed is None:
        return None
    for key, value in orjson.loads(resealed).items():
        undo[key]["v"] = value
    return orjson.dumps(undo).decode()


def _run_metadata(codec: ValueCodec, batch_size: int, encrypt_plaintext: bool) -> Operation[int]:
    """The registry metadata run records keep for a rollback, as the registry's."""

    def update(row: tuple) -> Query | None:
        thread_id, run_id, text = row
        new = _reseal_object(codec, thread_id, "metadata", text, encrypt_plaintext)
        if new is None:
            return None
        params = {"thread_id": thread_id, "run_id": run_id, "new": new, "old": text}
        return Query(sql.REKEY_UPDATE_RUN_METADATA, params, fetch=False)

    return (
        yield from _in_key_order(
            sql.REKEY_SELECT_RUN_METADATA,
            lambda row: {"after_thread": row[0], "after_run": row[1]},
            {"after_thread": "", "after_run": ""},
            batch_size,
            update,
        )
    )


def _reseal_object(
    codec: ValueCodec, thread_id: str, part: str, text: str, encrypt_plaintext: bool
) -> str | None:
    """A registry object with its values re-sealed, or None if none needs it."""
    encryption = codec.encryption
    assert encryption is not None
    data = orjson.loads(text)
    changed = False
    for key, value in data.items():
        aad = registry_aad(thread_id, part, key)
        if is_sealed_json(value):
            if value.get("k") == encryption.current:
                continue
            try:
                plain = encryption.open_json(value, aad)
            except RowSealError as exc:
                raise CorruptRowError(
                    thread_id=thread_id,
                    checkpoint_ns="",
                    checkpoint_id=None,
                    channel=None,
                    cause=RowSealError(f"{part} key {key!r}: {exc}"),
                ) from None
        elif encrypt_plaintext and codec.sealed_in_registry(part, key):
            plain = orjson.dumps(value).decode()
        else:
            continue
        data[key] = encryption.seal_json(plain, aad)
        changed = True
    return orjson.dumps(data).decode() if changed else None


def _ledger(codec: ValueCodec, batch_size: int, encrypt_plaintext: bool) -> Operation[int]:
    """The tool ledger's rows, every one in key order: input, output and error
    re-sealed (or sealed, with `encrypt_plaintext`) where they need it."""

    def update(row: tuple) -> Query | None:
        key, thread_id, *columns = row
        new = _reseal_ledger_row(codec, key, thread_id, encrypt_plaintext, *columns)
        if new is None:
            return None
        old = dict(zip(_LEDGER_COLUMNS, columns))
        params = {"key": key, **new, **{f"old_{k}": v for k, v in old.items()}}
        return Query(sql.REKEY_UPDATE_LEDGER, params, fetch=False)

    return (
        yield from _in_key_order(
            sql.REKEY_SELECT_LEDGER,
            lambda row: {"after": row[0]},
            {"after": ""},
            batch_size,
            update,
        )
    )


_LEDGER_COLUMNS = ("input", "output", "output_bytes", "output_type", "error")


def _reseal_ledger_row(
    codec: ValueCodec,
    key: str,
    thread_id: str,
    encrypt_plaintext: bool,
    input_: str | None,
    output: str | None,
    data: bytes | None,
    type_: str | None,
    error: str | None,
) -> dict | None:
    """The row's columns re-sealed, or None when none needs it."""
    encryption = codec.encryption
    assert encryption is not None
    new = dict(zip(_LEDGER_COLUMNS, (input_, output, data, type_, error)))
    for field, text in (("input", input_), ("error", error)):
        if text is None:
            continue
        parsed = ledger.sealed_text(text)
        if parsed is not None:
            if parsed.get("k") == encryption.current:
                continue
            text = ledger.open_text(codec, thread_id, key, field, text)
        elif not encrypt_plaintext:
            continue
        new[field] = ledger.seal_text(codec, key, field, text)
    original = dict(zip(_LEDGER_COLUMNS, (input_, output, data, type_, error)))
    reseal_output = False
    if is_sealed(type_):
        if type_ != MARK + encryption.current:
            try:
                opened = encryption.open(output, data, type_, ledger.output_aad(key))
            except RowSealError as exc:
                raise ledger.corrupt(thread_id, key, "output", exc) from None
            output, data, type_ = opened.json, opened.data, opened.type
            reseal_output = True
    elif encrypt_plaintext and (output, data) != (None, None):
        reseal_output = True
    if reseal_output:
        sealed = encryption.seal("", output, data, type_, ledger.output_aad(key))
        new.update(output=None, output_bytes=sealed.data, output_type=sealed.type)
    return None if new == original else new


def _store_items(
    encryption: Encryption, batch_size: int, encrypt_plaintext: bool
) -> Operation[int]:
    """The Store's items (see _core/memory.py), when its tables exist."""
    from langgraph_colosseum._core.memory import item_aad, namespace_of
    from langgraph_colosseum.errors import StoreItemSealError

    ((exists,),) = yield Query(sql.REKEY_HAS_STORE)
    if not exists:
        return 0

    def update(row: tuple) -> Query | None:
        prefix, key, text = row
        data = orjson.loads(text)
        aad = item_aad(prefix, key)
        if is_sealed_json(data):
            if data.get("k") == encryption.current:
                return None
            try:
                plain = encryption.open_json(data, aad)
            except RowSealError as exc:
                raise StoreItemSealError(namespace_of(prefix), key, exc) from None
        elif encrypt_plaintext:
            plain = text
        else:
            return None
        new = orjson.dumps(encryption.seal_json(plain, aad)).decode()
        params = {"prefix": prefix, "key": key, "new": new, "old": text}
        return Query(sql.REKEY_UPDATE_STORE, params, fetch=False)

    return (
        yield from _in_key_order(
            sql.REKEY_SELECT_STORE,
            lambda row: {"after_prefix": row[0], "after_key": row[1]},
            {"after_prefix": "", "after_key": ""},
            batch_size,
            update,
        )
    )
