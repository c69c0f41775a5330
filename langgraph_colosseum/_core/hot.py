"""The hot head of each thread in Redis: the Lua scripts and their wire format.

Postgres is the truth; the head is a copy that a reader may use only while it
provably equals what Postgres would return. Everything a thread has in Redis is
ONE hash, ``colosseum:{<thread_id>}`` (the prefix is configurable), so it lives
in one Cluster slot, expires as one unit, and is evicted (``allkeys-lru``) as
one unit: no half of a head can outlive the other half. Its fields, per
checkpoint namespace ``ns``:

    seq                  the thread's mutation counter (see "Never stale")
    ns NUL id            the head's checkpoint id ("" = the namespace has none)
    ns NUL h             the head's checkpoint row: [id, parent id, document, metadata]
    ns NUL cv            its channel versions, [channel, version, ...]
    ns NUL w             its pending writes, {"idx:task_id": packed write}
    ns NUL n             writes that arrived before their checkpoint's put: {id: {...}}
    ns NUL x             slots of writes Postgres had before the put and Redis not yet
    ns NUL r NUL ch NUL v  a value row, exactly as Postgres stores it (full or delta)
    ns NUL b NUL ch NUL v  that row's base version, when it is a delta

A value row is immutable (versions carry a random tail, so a version names one
value forever), and a step writes only the rows of the channels it changed: an
appended message costs its own size in Redis too, not the thread's.

Never stale. Every write (put, put_writes) commits to Postgres first and then
runs a script that bumps ``seq`` and advances the head, but only if the head it
finds is the one the write follows; anything it cannot prove it drops the
namespace's head instead. A reader that misses notes ``seq``, reads Postgres,
and refills only if ``seq`` did not move meanwhile, so a refill can never put
back a state some write already replaced. Deletes, prune, copy_thread and
delete_for_runs drop the whole hash after their commit; the next reader
recreates it with ``seq`` taken from the server clock in microseconds x 1000, so
a recreated counter never meets a value an older reader noted. A write is
visible through the head once its call returns.

Nothing here opens a socket: the store yields `CacheCall`s, the drivers run them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import orjson
import ormsgpack

from langgraph_colosseum._core.io import CacheCall, CacheDrop
from langgraph_colosseum._core.values import StoredValue, ValueRow

KEY_PREFIX = "colosseum:"
DEFAULT_HOT_TTL = timedelta(hours=1)


def write_field(task_id: str, idx: int) -> str:
    """A pending write's slot, as both Redis and the PUT statement spell it."""
    return f"{idx}:{task_id}"


# ---------------------------------------------------------------- scripts

# How long the hash of a thread with no checkpoint lives (see REFILL).
NO_THREAD_TTL_MS = 5000

_COMMON = (
    f"local NO_THREAD_TTL_MS = {NO_THREAD_TTL_MS}\n"
    + r"""
local key = KEYS[1]
local ttl = ARGV[1]
local ns = ARGV[2]
local P = ns .. '\0'

local function drop_namespace()
    local doomed = {}
    for _, field in ipairs(redis.call('HKEYS', key)) do
        if string.sub(field, 1, #P) == P then doomed[#doomed + 1] = field end
    end
    for i = 1, #doomed, 512 do
        redis.call('HDEL', key, unpack(doomed, i, math.min(i + 511, #doomed)))
    end
end

local function row_field(channel, version) return P .. 'r\0' .. channel .. '\0' .. version end
local function base_field(channel, version) return P .. 'b\0' .. channel .. '\0' .. version end

-- The rows of each channel version's chain, or nil when a delta's base is gone.
local function chains(versions, skip)
    local rows = {}
    for i = 1, #versions, 2 do
        local channel, version = versions[i], versions[i + 1]
        if skip[channel] ~= version then
            local first = true
            while version do
                local row = redis.call('HGET', key, row_field(channel, version))
                if not row then
                    if first then break end  -- no value stored for this version
                    return nil
                end
                local base = redis.call('HGET', key, base_field(channel, version))
                rows[#rows + 1] = channel
                rows[#rows + 1] = version
                rows[#rows + 1] = base or ''
                rows[#rows + 1] = row
                version = base
                first = false
            end
        end
    end
    return rows
end

local function store_rows(first)
    for i = first, #ARGV, 4 do
        local channel, version, base, row = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
        redis.call('HSET', key, row_field(channel, version), row)
        if base ~= '' then redis.call('HSET', key, base_field(channel, version), base) end
    end
end

-- Drop the rows the new head no longer reaches: for each channel whose
-- version changed (or that went), its old chain down to where it meets the
-- new one. An append onto the old version meets it at once and drops nothing,
-- so a step's cost here follows what it changed, not the size of the hash.
local function drop_replaced(old, versions)
    local new = {}
    for i = 1, #versions, 2 do new[versions[i]] = versions[i + 1] end
    for channel, old_version in pairs(old) do
        local version = new[channel]
        if version ~= old_version then
            local reached = {}
            if version and redis.call('HGET', key, base_field(channel, version)) == old_version then
                reached[old_version] = true
            else
                while version do
                    reached[version] = true
                    version = redis.call('HGET', key, base_field(channel, version))
                end
            end
            local doomed = old_version
            while doomed and not reached[doomed] do
                local base = redis.call('HGET', key, base_field(channel, doomed))
                redis.call('HDEL', key, row_field(channel, doomed), base_field(channel, doomed))
                doomed = base
            end
        end
    end
end

-- The start of a write's script: bump the counter (a refill noted before
-- now will fail) and give the head's checkpoint id, or nil when there is no
-- head to keep current (a hash is only ever created by a reader).
local function begin_write()
    if redis.call('EXISTS', key) == 0 then return nil end
    redis.call('HINCRBY', key, 'seq', 1)
    redis.call('PEXPIRE', key, ttl)
    return redis.call('HGET', key, P .. 'id')
end

-- Writes Postgres holds that the head has not received yet; none: complete.
local function await_slots(slots)
    if #slots > 0 then
        redis.call('HSET', key, P .. 'x', cmsgpack.pack(slots))
    else
        redis.call('HDEL', key, P .. 'x')
    end
end

local function clock_seq()
    local t = redis.call('TIME')
    return t[1] .. string.format('%06d', tonumber(t[2])) .. '000'
end
"""
)

# ARGV: ttl, ns, checkpoint id wanted ("" = the latest), then channel, version
# pairs the caller already holds decoded (their rows are not sent).
# Reply: {seq} on a miss; {seq, 0} when the head is not the checkpoint wanted;
# {seq, head, cv, writes, rows} on a hit, writes as a list of packed writes,
# rows as channel, version, base, row.
READ = (
    _COMMON
    + r"""
local seq = redis.call('HGET', key, 'seq')
if not seq then
    -- Created now so the refill that follows this miss has a counter to compare.
    seq = clock_seq()
    redis.call('HSET', key, 'seq', seq)
    redis.call('PEXPIRE', key, math.min(tonumber(ttl), NO_THREAD_TTL_MS))  -- until a refill
    return {seq}
end
local id = redis.call('HGET', key, P .. 'id')
if ns == '' and id == '' then
    -- Known to have no checkpoint: reading it again does not keep it (see REFILL).
    redis.call('PEXPIRE', key, math.min(tonumber(ttl), NO_THREAD_TTL_MS))
else
    redis.call('PEXPIRE', key, ttl)
end
-- No head, or one still awaiting writes that committed before its put.
if not id or redis.call('HEXISTS', key, P .. 'x') == 1 then return {seq} end
if ARGV[3] ~= '' and ARGV[3] ~= id then return {seq, 0} end
local head = redis.call('HGET', key, P .. 'h')
if id == '' then return {seq, head, '', {}, {}} end
local cv = redis.call('HGET', key, P .. 'cv')
local skip = {}
for i = 4, #ARGV, 2 do skip[ARGV[i]] = ARGV[i + 1] end
local rows = chains(cmsgpack.unpack(cv), skip)
if not rows then
    drop_namespace()
    return {seq}
end
-- Flattened here: what cmsgpack packs in Lua, Python would read as UTF-8 text.
local writes = {}
local packed = redis.call('HGET', key, P .. 'w')
if packed and packed ~= '' then
    for _, write in pairs(cmsgpack.unpack(packed)) do writes[#writes + 1] = write end
end
return {seq, head, cv, writes, rows}
"""
)

# ARGV: ttl, ns, seq noted by the miss, id ("" = no checkpoint), head, cv, writes,
# then channel, version, base ("" = full row), row for every row of the chains.
# Reply: 1 when the head was refilled, 0 when a write came first.
REFILL = (
    _COMMON
    + r"""
if redis.call('HGET', key, 'seq') ~= ARGV[3] then return 0 end
drop_namespace()
redis.call('HSET', key, P .. 'id', ARGV[4], P .. 'h', ARGV[5], P .. 'cv', ARGV[6],
           P .. 'w', ARGV[7])
store_rows(8)
if ns == '' and ARGV[4] == '' then
    -- No root checkpoint: a thread about to be created (its first put sets the
    -- full TTL), or an id that does not exist, which must not hold memory for
    -- an hour (a typo, a scan of made-up ids). A miss's fresh hash lives as
    -- briefly (see READ); a refill of a real head gives it the full TTL.
    redis.call('PEXPIRE', key, math.min(tonumber(ttl), NO_THREAD_TTL_MS))
else
    redis.call('PEXPIRE', key, ttl)
end
return 1
"""
)

# After a put committed. ARGV: ttl, ns, id, head, cv, writes Postgres already held
# for this checkpoint when the put ran (packed list of slots), then the put's
# value rows as channel, version, base, row.
# Reply: 1 advanced, 0 nothing to advance (no head, or a newer one), -1 dropped.
ADVANCE = (
    _COMMON
    + r"""
local current = begin_write()
if not current then return 0 end
local id = ARGV[3]
if id < current then return 0 end  -- a slower worker: the head is already newer
if id == current then
    -- The same checkpoint put again: Postgres kept its first parent; do not guess.
    drop_namespace()
    return -1
end
local old = {}
local old_cv = current ~= '' and cmsgpack.unpack(redis.call('HGET', key, P .. 'cv')) or {}
for i = 1, #old_cv, 2 do old[old_cv[i]] = old_cv[i + 1] end
local given = {}
for i = 7, #ARGV, 4 do given[ARGV[i]] = {ARGV[i + 1], ARGV[i + 2]} end
local versions = cmsgpack.unpack(ARGV[5])
for i = 1, #versions, 2 do
    local channel, version = versions[i], versions[i + 1]
    local row = given[channel]
    if row and row[1] == version then
        -- A delta row needs its whole chain here. Onto the head's own version
        -- (an append) it has it: the hash holds the head's chains whole.
        local base = row[2] == old[channel] and '' or row[2]
        while base ~= '' do
            if redis.call('HEXISTS', key, row_field(channel, base)) == 0 then
                drop_namespace()
                return -1
            end
            base = redis.call('HGET', key, base_field(channel, base)) or ''
        end
    elseif old[channel] ~= version then
        -- A version neither this put nor the head holds (a fork from an older
        -- checkpoint): only Postgres knows it.
        drop_namespace()
        return -1
    end
end
-- Writes that reached Postgres before this put should all be in the stash.
-- The stashes of later checkpoints stay for their own puts.
local writes = {}
local stash = redis.call('HGET', key, P .. 'n')
local later = {}
local any_later = false
if stash then
    for checkpoint, stashed in pairs(cmsgpack.unpack(stash)) do
        if checkpoint == id then writes = stashed end
        if checkpoint > id then
            later[checkpoint] = stashed
            any_later = true
        end
    end
end
-- Those whose own script has not run yet are awaited: until they arrive the
-- head is incomplete, and readers miss.
local awaited = {}
for _, slot in ipairs(cmsgpack.unpack(ARGV[6])) do
    if not writes[slot] then awaited[#awaited + 1] = slot end
end
store_rows(7)
if any_later then
    redis.call('HSET', key, P .. 'n', cmsgpack.pack(later))
else
    redis.call('HDEL', key, P .. 'n')
end
redis.call('HSET', key, P .. 'id', id, P .. 'h', ARGV[4], P .. 'cv', ARGV[5],
           P .. 'w', cmsgpack.pack(writes))
await_slots(awaited)
drop_replaced(old, versions)
return 1
"""
)

# After put_writes committed. ARGV: ttl, ns, checkpoint id, then slot, write,
# replace (1 for special channels, whose last write wins) per write.
# Reply: 1 merged into the head, 2 stashed for a coming put, 0 not the head.
ADD_WRITES = (
    _COMMON
    + r"""
local current = begin_write()
if not current then return 0 end
local id = ARGV[3]
local function merge(writes)
    for i = 4, #ARGV, 3 do
        if ARGV[i + 2] == '1' or not writes[ARGV[i]] then writes[ARGV[i]] = ARGV[i + 1] end
    end
    return writes
end
if id == current then
    local packed = redis.call('HGET', key, P .. 'w')
    local writes = (packed and packed ~= '') and cmsgpack.unpack(packed) or {}
    redis.call('HSET', key, P .. 'w', cmsgpack.pack(merge(writes)))
    local awaited = redis.call('HGET', key, P .. 'x')
    if awaited then
        local still = {}
        for _, slot in ipairs(cmsgpack.unpack(awaited)) do
            if not writes[slot] then still[#still + 1] = slot end
        end
        await_slots(still)
    end
    return 1
end
if id < current then return 0 end
local stash = redis.call('HGET', key, P .. 'n')
stash = stash and cmsgpack.unpack(stash) or {}
stash[id] = merge(stash[id] or {})
redis.call('HSET', key, P .. 'n', cmsgpack.pack(stash))
return 2
"""
)

SCRIPTS: Mapping[str, str] = {
    "read": READ,
    "refill": REFILL,
    "advance": ADVANCE,
    "add_writes": ADD_WRITES,
}


# ---------------------------------------------------------------- wire format


def pack(value: Any) -> bytes:
    return ormsgpack.packb(value)


def unpack(data: bytes) -> Any:
    return ormsgpack.unpackb(data)


def pack_value(encoding: str, json: str | None, data: bytes | None, type_: str | None) -> bytes:
    """A value row's payload (its base travels beside it, for Lua to follow)."""
    return pack([encoding, json, data, type_])


def pack_write(*columns: Any) -> bytes:
    """A pending write, as GET_TUPLE's write columns: task_id, idx, task_path,
    channel, encoding, json, data, type."""
    return pack(list(columns))


def flat_versions(channel_versions: Mapping[str, Any]) -> bytes:
    return pack([item for ch, v in channel_versions.items() for item in (ch, str(v))])


class Head(NamedTuple):
    """A head read from Redis, in the shape of a GET_TUPLE row."""

    row: tuple  # the checkpoint columns (see store._CHECKPOINT_WIDTH)
    value_rows: list[ValueRow]


class HotHead:
    """Builds the cache calls for one store and reads their replies."""

    def __init__(self, ttl: timedelta = DEFAULT_HOT_TTL, prefix: str = KEY_PREFIX) -> None:
        if ttl.total_seconds() < 0.001:
            raise ValueError(f"hot_ttl must be at least a millisecond, got {ttl}")
        self.ttl_ms = int(ttl.total_seconds() * 1000)
        self.prefix = prefix

    def thread_key(self, thread_id: str) -> str:
        """The one Redis key of a thread, hash-tagged so Cluster keeps it in one slot."""
        return f"{self.prefix}{{{thread_id}}}"

    def read(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, known: Mapping[str, str]
    ) -> CacheCall:
        args = [self.ttl_ms, checkpoint_ns, checkpoint_id]
        for channel, version in known.items():
            args += (channel, version)
        return CacheCall("read", self.thread_key(thread_id), tuple(args))

    def refill(
        self,
        thread_id: str,
        checkpoint_ns: str,
        seq: bytes,
        row: tuple | None,
        value_rows: Sequence[ValueRow],
    ) -> CacheCall:
        """Put back what Postgres returned for the latest checkpoint (None: there is none)."""
        if row is None:
            args = [self.ttl_ms, checkpoint_ns, seq, "", b"", b"", b""]
            return CacheCall("refill", self.thread_key(thread_id), tuple(args))
        checkpoint_id, parent_id, document, metadata = row[2:6]
        write_columns = row[6:14]
        task_ids, idxs = write_columns[:2]
        writes = {
            write_field(task_ids[i], idxs[i]): pack_write(*(column[i] for column in write_columns))
            for i in range(len(task_ids or ()))
        }
        rows = (
            (
                *row.key[2:],
                row.base_version,
                row.encoding,
                _json_text(row.parsed),
                row.data,
                row.type,
            )
            for row in value_rows
        )
        args = [
            self.ttl_ms, checkpoint_ns, seq, checkpoint_id,
            _head(checkpoint_id, parent_id, document, metadata),
            flat_versions(_document_versions(document)), _lua_string_map(writes),
            *_row_args(rows),
        ]  # fmt: skip
        return CacheCall("refill", self.thread_key(thread_id), tuple(args))

    def advance(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        parent_id: str | None,
        document: str,
        metadata: str,
        channel_versions: Mapping[str, Any],
        writes_before: Sequence[str],
        rows: Sequence[tuple[str, str, StoredValue]],
    ) -> CacheCall:
        args = [
            self.ttl_ms, checkpoint_ns, checkpoint_id,
            _head(checkpoint_id, parent_id, document, metadata),
            flat_versions(channel_versions), pack(list(writes_before)),
            *_row_args((ch, v, stored.base_version, *stored[:4]) for ch, v, stored in rows),
        ]  # fmt: skip
        return CacheCall("advance", self.thread_key(thread_id), tuple(args))

    def add_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[tuple[str, bytes, bool]],
    ) -> CacheCall:
        args: list[Any] = [self.ttl_ms, checkpoint_ns, checkpoint_id]
        for slot, packed, replace in writes:
            args += (slot, packed, "1" if replace else "0")
        return CacheCall("add_writes", self.thread_key(thread_id), tuple(args))

    def drop(self, thread_ids: Sequence[str]) -> CacheDrop:
        return CacheDrop(tuple(self.thread_key(t) for t in thread_ids))

    @staticmethod
    def parse_read(
        thread_id: str, checkpoint_ns: str, reply: list
    ) -> tuple[bytes, Head | None, bool]:
        """(seq, head or None, whether a miss may be refilled) from a READ reply."""
        seq = reply[0]
        if len(reply) == 1:
            return seq, None, True
        if len(reply) == 2:
            return seq, None, False  # a checkpoint other than the head was asked for
        _, head, _, writes, rows = reply
        checkpoint_id, parent_id, document, metadata = unpack(head) if head else (None,) * 4
        if checkpoint_id is None:
            return seq, Head((), []), False  # the namespace has no checkpoint
        write_columns = [list(column) for column in zip(*(unpack(w) for w in writes))] or [[]] * 8
        row = (thread_id, checkpoint_ns, checkpoint_id, parent_id, document, metadata,
               *write_columns)  # fmt: skip
        value_rows = [
            _unpack_value_row(thread_id, checkpoint_ns, *rows[i : i + 4])
            for i in range(0, len(rows), 4)
        ]
        return seq, Head(row, value_rows), False


def _lua_string_map(items: Mapping[str, bytes]) -> bytes:
    """A msgpack map of byte strings packed as msgpack `str`, which Lua's cmsgpack reads.

    cmsgpack knows no `bin` type, and ormsgpack packs bytes as `bin`: a head
    refilled with pending writes packed by ormsgpack failed every READ after it
    ("Bad data format in input"). Lua strings are bytes, so `str` carries them whole.
    """
    out = bytearray(_msgpack_header(len(items), 0x80, 16, 0xDE))
    for key, value in items.items():
        for part in (key.encode(), value):
            out += _msgpack_header(len(part), 0xA0, 32, 0xDA, str8=True)
            out += part
    return bytes(out)


def _msgpack_header(n: int, fix: int, fix_limit: int, first16: int, str8: bool = False) -> bytes:
    """A map (0x80 / 0xde / 0xdf) or str (0xa0 / 0xd9 / 0xda / 0xdb) header for `n` items."""
    if n < fix_limit:
        return bytes([fix | n])
    if str8 and n < 0x100:
        return bytes([0xD9, n])
    if n < 0x10000:
        return bytes([first16]) + n.to_bytes(2, "big")
    return bytes([first16 + 1]) + n.to_bytes(4, "big")


def _head(checkpoint_id: str, parent_id: str | None, document: str, metadata: str) -> bytes:
    """The head's checkpoint row, as GET_TUPLE's first columns give it."""
    return pack([checkpoint_id, parent_id, document, metadata])


def _row_args(rows: Iterable[tuple]) -> list[Any]:
    """Script arguments for value rows given as (channel, version, base, encoding,
    json, data, type): channel, version, base ("" for a full row), payload."""
    args: list[Any] = []
    for channel, version, base, *payload in rows:
        args += (channel, version, base or "", pack_value(*payload))
    return args


def _json_text(parsed: Any) -> str | None:
    return orjson.dumps(parsed).decode() if parsed is not None else None


def _document_versions(document: str) -> dict[str, Any]:
    return orjson.loads(document).get("channel_versions", {})


def _unpack_value_row(
    thread_id: str, checkpoint_ns: str, channel: bytes, version: bytes, base: bytes, packed: bytes
) -> ValueRow:
    encoding, json, data, type_ = unpack(packed)
    return ValueRow(
        (thread_id, checkpoint_ns, channel.decode(), version.decode()),
        base.decode() or None,
        encoding,
        orjson.loads(json) if json is not None else None,
        data,
        type_,
    )
