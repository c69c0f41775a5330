"""The hot head of each thread in Redis: the Lua scripts and their wire format.

Postgres is the truth; the head is a copy that a reader may use only while it
provably equals what Postgres would return. Everything a thread has in Redis is
ONE hash, ``colosseum:<incarnation tag>:{<thread_id>}`` (the prefix is
configurable; the tag names the database incarnation, see `HotHead`), so it lives
in one Cluster slot, expires as one unit, and is evicted (``allkeys-lru``) as
one unit: no half of a head can outlive the other half. Its fields, per
checkpoint namespace ``ns``:

    seq                  the thread's mutation counter (see "Never stale")
    epoch                the thread's deletion epoch its contents came from (idem)
    deleted              the thread's deletion stamp at that epoch ("" = never deleted)
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
a recreated counter never meets a value an older reader noted.

Deleted stays deleted, in Redis too. A deletion can commit between a write's
commit and its script (`rollback` deletes the run it stopped, whose last put
may be committed and not yet in Redis), and a reader can refill the hash from
Postgres before the script arrives: the script then carries content Postgres
no longer has, onto a head it would otherwise prove it follows. So each
thread has a deletion epoch in Postgres (colosseum_thread_epochs) that
delete_thread, the retention sweep, prune and delete_for_runs move forward in
their own transaction (a deleted thread keeps its row: an epoch never goes
back). Every write statement returns it, read under the thread's write lock
(sql.WRITE_LOCK), so no deletion commits between the read and the write's
commit; a refilling read returns it from the same snapshot as the checkpoint.
The hash records the epoch its contents came from (``epoch``). A write's
script applies only onto a hash of its own epoch; on any other the whole hash
goes (an older one: a deletion came after the write and the hash, refilled
since, already holds what of the write survived; a newer one: the hash is
from before a deletion the write follows). A refill read at an older epoch
than the hash is refused; one read at a newer epoch drops the rest of the
hash first. So once a deletion's call has returned (its drop reached Redis;
one Redis refused is recorded stale, below), no read through Redis returns
what it removed, whatever scripts of earlier writes are still on their way.

A hit gives the run reading it the thread's deletion stamp (sql.THREAD_DELETED)
with no Postgres round trip: every deletion of a thread moves its epoch, so a
hash of one epoch has one stamp, recorded by the refill that made it
(``deleted``). A hash without one (refilled by older code) is a miss.

A write is visible through the head once its call returns. Only writes (and
refills, which carry what Postgres holds) extend a hash's life; a write Redis
refused is recorded in Postgres for any worker to drop (store.py, "the hot
head's truth").

Nothing here opens a socket: the store yields `CacheCall`s, the drivers run them.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import orjson
import ormsgpack

from langgraph_colosseum._core.io import CacheCall, CacheDrop
from langgraph_colosseum._core.values import StoredValue, ValueRow

KEY_PREFIX = "colosseum:"
DEFAULT_HOT_TTL = timedelta(hours=1)
# Seconds a statement's answer proves the database incarnation for the hits
# after it (see `HotHead.recheck_due`): the README's bound after a recovery.
INCARNATION_RECHECK = 1.0


def write_field(task_id: str, idx: int) -> str:
    """A pending write's slot, as both Redis and the PUT statement spell it."""
    return f"{idx}:{task_id}"


# ---------------------------------------------------------------- scripts

# How long the hash of a thread with no checkpoint lives (see REFILL).
NO_THREAD_TTL_MS = 5000

# A fresh mutation counter, from the server clock in microseconds x 1000: a
# recreated counter never meets a value an older reader noted (writes add 1).
# Shared with the Store's hot items (hot_items.py).
CLOCK_SEQ = r"""
local function clock_seq()
    local t = redis.call('TIME')
    return t[1] .. string.format('%06d', tonumber(t[2])) .. '000'
end
"""

_COMMON = (
    f"local NO_THREAD_TTL_MS = {NO_THREAD_TTL_MS}\n"
    + r"""
local key = KEYS[1]
local ttl = ARGV[1]
local ns = ARGV[2]
local P = ns .. '\0'

-- Rules every script keeps. (1) Every walk along a chain of bases remembers
-- the versions it passed and stops at a repeat: a cyclic chain (a corrupt
-- hash) must not loop, because a script that loops holds all of Redis and,
-- once it has written, cannot even be killed. (2) A script reads and decodes
-- everything it needs before its first write, so an error (a field that does
-- not decode) leaves the hash as it was. (3) Only writes extend a hash's
-- life (PEXPIRE): a head is never served longer than the TTL after the last
-- write that reached it, however often it is read.

local function row_field(channel, version) return P .. 'r\0' .. channel .. '\0' .. version end
local function base_field(channel, version) return P .. 'b\0' .. channel .. '\0' .. version end

-- A packed field, or nil when it is absent, empty or does not decode.
local function unpacked(field)
    local packed = redis.call('HGET', key, field)
    if not packed or packed == '' then return nil, true end
    local ok, value = pcall(cmsgpack.unpack, packed)
    if not ok or type(value) ~= 'table' then return nil, false end
    return value, true
end

-- The rows of each channel version's chain, or nil when a delta's base is gone
-- or the chain comes back on itself.
local function chains(versions, skip)
    local rows = {}
    for i = 1, #versions, 2 do
        local channel, version = versions[i], versions[i + 1]
        if skip[channel] ~= version then
            local first, seen = true, {}
            while version do
                if seen[version] then return nil end
                seen[version] = true
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

-- The fields of the namespace's head: its fixed fields and the chains its
-- channel versions name (the hash holds nothing else of the namespace, see
-- drop_replaced), so dropping a head costs its rows, not the whole hash.
-- A cv that does not decode gives nil: only dropping the whole hash is safe.
local function namespace_fields()
    local fields = {P .. 'id', P .. 'h', P .. 'cv', P .. 'w', P .. 'n', P .. 'x'}
    local versions, ok = unpacked(P .. 'cv')
    if not ok then return nil end
    for i = 1, #(versions or {}), 2 do
        local channel, version = versions[i], versions[i + 1]
        local seen = {}
        while version and not seen[version] do
            seen[version] = true
            fields[#fields + 1] = row_field(channel, version)
            fields[#fields + 1] = base_field(channel, version)
            version = redis.call('HGET', key, base_field(channel, version))
        end
    end
    return fields
end

local function delete_fields(fields)
    for i = 1, #fields, 512 do
        redis.call('HDEL', key, unpack(fields, i, math.min(i + 511, #fields)))
    end
end

local function drop_namespace()
    local fields = namespace_fields()
    if fields then delete_fields(fields) else redis.call('DEL', key) end
end

local function store_rows(first)
    for i = first, #ARGV, 4 do
        local channel, version, base, row = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
        redis.call('HSET', key, row_field(channel, version), row)
        if base ~= '' then redis.call('HSET', key, base_field(channel, version), base) end
    end
end

-- The rows the new head no longer reaches: for each channel whose version
-- changed (or that went), its old chain down to where it meets the new one.
-- An append onto the old version meets it at once and drops nothing, so a
-- step's cost here follows what it changed, not the size of the hash. `given`
-- holds the put's own rows (channel -> {version, base}), not stored yet.
local function replaced_fields(old, versions, given)
    local doomed = {}
    local new = {}
    for i = 1, #versions, 2 do new[versions[i]] = versions[i + 1] end
    for channel, old_version in pairs(old) do
        local version = new[channel]
        if version ~= old_version then
            local function base_of(v)
                local row = given[channel]
                if row and row[1] == v then return row[2] ~= '' and row[2] or nil end
                return redis.call('HGET', key, base_field(channel, v))
            end
            local reached = {}
            if version and base_of(version) == old_version then
                reached[old_version] = true
            else
                while version and not reached[version] do
                    reached[version] = true
                    version = base_of(version)
                end
            end
            local gone, seen = old_version, {}
            while gone and not reached[gone] and not seen[gone] do
                seen[gone] = true
                doomed[#doomed + 1] = row_field(channel, gone)
                doomed[#doomed + 1] = base_field(channel, gone)
                gone = redis.call('HGET', key, base_field(channel, gone))
            end
        end
    end
    return doomed
end

-- The deletion epoch the hash's contents came from (see "Never stale"); -1
-- when none is recorded: a hash a miss created, or one written before epochs.
local function held_epoch()
    return tonumber(redis.call('HGET', key, 'epoch') or '-1')
end

-- A write applies only onto a hash of its own deletion epoch. A newer one: a
-- deletion committed after the write and a reader refilled the hash since, so
-- the hash already holds whatever of the write survived the deletion, and the
-- write carries what it removed. An older one: the hash is from before a
-- deletion the write follows (its drop has not arrived, or Redis refused it).
-- Either way nothing in the hash is proven: it goes, and the next reader
-- refills it from Postgres.
local function epoch_differs(epoch)
    if held_epoch() == tonumber(epoch) then return false end
    redis.call('DEL', key)
    return true
end

-- A write's first move, made once its reads are done: bump the counter (a
-- refill noted before now will fail) and extend the hash's life.
local function bump()
    redis.call('HINCRBY', key, 'seq', 1)
    redis.call('PEXPIRE', key, ttl)
end

-- Writes Postgres holds that the head has not received yet; none: complete.
local function await_slots(slots)
    if #slots > 0 then
        redis.call('HSET', key, P .. 'x', cmsgpack.pack(slots))
    else
        redis.call('HDEL', key, P .. 'x')
    end
end

"""
    + CLOCK_SEQ
)

# ARGV: ttl, ns, checkpoint id wanted ("" = the latest), then channel, version
# pairs the caller already holds decoded (their rows are not sent).
# Reply: {seq} on a miss; {seq, 0} when the head is not the checkpoint wanted;
# {seq, -1} when it was corrupt (a cycle, a missing base, a field that does not
# decode) and is gone (not to be refilled now); {seq, head, cv, writes,
# rows, deleted} on a hit, writes as a list of packed writes, rows as channel,
# version, base, row, deleted the thread's deletion stamp. A read never
# extends the hash's life.
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
-- No PEXPIRE: a read never extends a hash's life (nor one known to have no
-- checkpoint, which REFILL gave NO_THREAD_TTL_MS).
-- No head, or one still awaiting writes that committed before its put.
if not id or redis.call('HEXISTS', key, P .. 'x') == 1 then return {seq} end
-- No deletion stamp (a refill of older code): the run reading must get it
-- from Postgres, and the refill after this miss records it.
local deleted = redis.call('HGET', key, 'deleted')
if not deleted then return {seq} end
if ARGV[3] ~= '' and ARGV[3] ~= id then return {seq, 0} end
local head = redis.call('HGET', key, P .. 'h')
if id == '' then return {seq, head, '', {}, {}, deleted} end
local cv = redis.call('HGET', key, P .. 'cv')
local versions, cv_ok = unpacked(P .. 'cv')
local writes_map, writes_ok = unpacked(P .. 'w')
local skip = {}
for i = 4, #ARGV, 2 do skip[ARGV[i]] = ARGV[i + 1] end
local rows = versions and writes_ok and chains(versions, skip)
if not rows then
    redis.call('DEL', key)  -- corrupt: nothing in it can be trusted
    return {seq, -1}
end
-- Flattened here: what cmsgpack packs in Lua, Python would read as UTF-8 text.
local writes = {}
for _, write in pairs(writes_map or {}) do writes[#writes + 1] = write end
return {seq, head, cv, writes, rows, deleted}
"""
)

# ARGV: ttl, ns, seq noted by the miss, the thread's deletion epoch the read saw,
# its deletion stamp ("" = never deleted), id ("" = no checkpoint), head, cv,
# writes, then channel, version, base ("" = full row), row for every row of
# the chains.
# Reply: 1 when the head was refilled, 0 when a write (or a deletion) came first.
REFILL = (
    _COMMON
    + r"""
if redis.call('HGET', key, 'seq') ~= ARGV[3] then return 0 end
local epoch = tonumber(ARGV[4])
if epoch < held_epoch() then return 0 end  -- read before a deletion the hash reflects
if epoch > held_epoch() then
    -- The rest of the hash is from before a deletion this read saw (its drop
    -- has not arrived, or Redis refused it): it goes; the counter stays.
    redis.call('DEL', key)
    redis.call('HSET', key, 'seq', ARGV[3])
    redis.call('HSET', key, 'epoch', ARGV[4])
else
    drop_namespace()
end
-- One stamp per epoch: this read's is the hash's (or fills one older code left out).
redis.call('HSET', key, 'deleted', ARGV[5])
redis.call('HSET', key, P .. 'id', ARGV[6], P .. 'h', ARGV[7], P .. 'cv', ARGV[8],
           P .. 'w', ARGV[9])
store_rows(10)
if ns == '' and ARGV[6] == '' then
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

# After a put committed. ARGV: ttl, ns, the thread's deletion epoch the put saw,
# id, head, cv, writes Postgres already held for this checkpoint when the put ran
# (packed list of slots), then the put's value rows as channel, version, base, row.
# Reply: 1 advanced, 0 nothing to advance (no head, or a newer one), -1 dropped
# (what the put follows could not be proven, or the hash was of another epoch).
ADVANCE = (
    _COMMON
    + r"""
-- A hash is only ever created by a reader: with none, there is no head to keep.
if redis.call('EXISTS', key) == 0 then return 0 end
if epoch_differs(ARGV[3]) then return -1 end
local current = redis.call('HGET', key, P .. 'id')
local id = ARGV[4]
local function drop()
    local fields = namespace_fields()
    bump()
    if fields then delete_fields(fields) else redis.call('DEL', key) end
    return -1
end
if not current then bump() return 0 end
if id < current then bump() return 0 end  -- a slower worker: the head is already newer
-- The same checkpoint put again: Postgres kept its first parent; do not guess.
if id == current then return drop() end
local old = {}
local old_cv, cv_ok = unpacked(P .. 'cv')
if current ~= '' and not old_cv then return drop() end
for i = 1, #(old_cv or {}), 2 do old[old_cv[i]] = old_cv[i + 1] end
local given = {}
for i = 8, #ARGV, 4 do given[ARGV[i]] = {ARGV[i + 1], ARGV[i + 2]} end
local versions = cmsgpack.unpack(ARGV[6])
for i = 1, #versions, 2 do
    local channel, version = versions[i], versions[i + 1]
    local row = given[channel]
    if row and row[1] == version then
        -- A delta row needs its whole chain here. Onto the head's own version
        -- (an append) it has it: the hash holds the head's chains whole.
        local base = row[2] == old[channel] and '' or row[2]
        local seen = {}
        while base ~= '' do
            if seen[base] or redis.call('HEXISTS', key, row_field(channel, base)) == 0 then
                return drop()
            end
            seen[base] = true
            base = redis.call('HGET', key, base_field(channel, base)) or ''
        end
    elseif old[channel] ~= version then
        -- A version neither this put nor the head holds (a fork from an older
        -- checkpoint): only Postgres knows it.
        return drop()
    end
end
-- Writes that reached Postgres before this put should all be in the stash.
-- The stashes of later checkpoints stay for their own puts.
local stash, stash_ok = unpacked(P .. 'n')
if not stash_ok then return drop() end
local writes = {}
local later = {}
local any_later = false
for checkpoint, stashed in pairs(stash or {}) do
    if checkpoint == id then writes = stashed end
    if checkpoint > id then
        later[checkpoint] = stashed
        any_later = true
    end
end
-- Those whose own script has not run yet are awaited: until they arrive the
-- head is incomplete, and readers miss.
local awaited = {}
for _, slot in ipairs(cmsgpack.unpack(ARGV[7])) do
    if not writes[slot] then awaited[#awaited + 1] = slot end
end
local doomed = replaced_fields(old, versions, given)
-- Every read is done: now the writes.
bump()
store_rows(8)
if any_later then
    redis.call('HSET', key, P .. 'n', cmsgpack.pack(later))
else
    redis.call('HDEL', key, P .. 'n')
end
redis.call('HSET', key, P .. 'id', id, P .. 'h', ARGV[5], P .. 'cv', ARGV[6],
           P .. 'w', cmsgpack.pack(writes))
await_slots(awaited)
delete_fields(doomed)
return 1
"""
)

# After put_writes committed. ARGV: ttl, ns, the thread's deletion epoch the
# statement saw, checkpoint id, then slot, write,
# replace (1 for special channels, whose last write wins) per write.
# Reply: 1 merged into the head, 2 stashed for a coming put, 0 not the head,
# -1 dropped (the head's writes did not decode, or the hash was of another epoch).
ADD_WRITES = (
    _COMMON
    + r"""
if redis.call('EXISTS', key) == 0 then return 0 end
if epoch_differs(ARGV[3]) then return -1 end
local current = redis.call('HGET', key, P .. 'id')
local id = ARGV[4]
local function merge(writes)
    for i = 5, #ARGV, 3 do
        if ARGV[i + 2] == '1' or not writes[ARGV[i]] then writes[ARGV[i]] = ARGV[i + 1] end
    end
    return writes
end
if not current or id < current then
    bump()
    return 0
end
if id == current then
    local writes, writes_ok = unpacked(P .. 'w')
    local awaited, awaited_ok = unpacked(P .. 'x')
    if not (writes_ok and awaited_ok) then
        redis.call('DEL', key)
        return -1
    end
    writes = merge(writes or {})
    bump()
    redis.call('HSET', key, P .. 'w', cmsgpack.pack(writes))
    if awaited then
        local still = {}
        for _, slot in ipairs(awaited) do
            if not writes[slot] then still[#still + 1] = slot end
        end
        await_slots(still)
    end
    return 1
end
local stash, stash_ok = unpacked(P .. 'n')
if not stash_ok then
    redis.call('DEL', key)
    return -1
end
stash = stash or {}
stash[id] = merge(stash[id] or {})
bump()
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


def flat_versions(channel_versions: Mapping[str, Any]) -> bytes:
    return pack([item for ch, v in channel_versions.items() for item in (ch, str(v))])


class CorruptHeadError(Exception):
    """A head in Redis that does not decode, or is not what it claims to be.

    Never escapes the store: the head is dropped and Postgres answers.
    """


MAC_BYTES = 16
_WRITE_COLUMNS = 9  # a pending write's columns in a GET_TUPLE row, from the 7th
_WRITE_END = 6 + _WRITE_COLUMNS


class Head(NamedTuple):
    """A head read from Redis, in the shape of a GET_TUPLE row."""

    row: tuple  # the checkpoint columns (see store._CHECKPOINT_WIDTH)
    value_rows: list[ValueRow]
    deleted: str | None  # the thread's deletion stamp (sql.THREAD_DELETED; None: never)


class HotHead:
    """Builds the cache calls for one store and reads their replies.

    Bound to one database incarnation (see `bind`): its keys carry a tag of
    the incarnation, so two databases, or a database and its restored or
    recreated successor, never share a key; and every payload it stores is
    sealed with a MAC keyed by the incarnation and bound to where it belongs
    (thread, namespace, checkpoint or channel version), so a field changed in
    Redis, or copied from elsewhere, is detected when it is read.
    """

    def __init__(self, ttl: timedelta = DEFAULT_HOT_TTL, prefix: str = KEY_PREFIX) -> None:
        if ttl.total_seconds() < 0.001:
            raise ValueError(f"hot_ttl must be at least a millisecond, got {ttl}")
        self.ttl_ms = int(ttl.total_seconds() * 1000)
        self.prefix = prefix
        self.incarnation: str | None = None
        self._tag = ""
        self._secret = b""
        # When the statement that last proved `incarnation` was sent (clock
        # seconds; the clock is injectable so tests drive time, not sleep).
        self.clock: Callable[[], float] = time.monotonic
        self.proven_at = -math.inf

    def recheck_due(self) -> bool:
        """Whether a hit must ask Postgres for its incarnation before Redis serves it.

        A hit makes no Postgres round trip, so a worker that lives through a
        failover, point-in-time recovery or crash recovery and does not write
        would serve the old incarnation's heads (turns the recovered server
        lost) for as long as it pleased. Each statement that returns the
        incarnation proves it from the time it was sent; a hit relies on that
        for INCARNATION_RECHECK seconds, then asks again (one statement per
        interval per saver, not per hit). Every statement the old server
        answered was sent before it stopped answering, so no hit that starts
        INCARNATION_RECHECK or more after that serves an old head.
        """
        return self.incarnation is None or (self.clock() - self.proven_at >= INCARNATION_RECHECK)

    def bind(self, incarnation: str, asked_at: float = -math.inf) -> bool:
        """Use the heads of this database incarnation, as proven by a statement
        sent at `asked_at` (this clock's; -inf: unknown); whether it changed.

        A change takes `asked_at` as it is, even when an earlier proof of the
        other incarnation was later: a reply of the old server handled after
        one of the new server then moves the saver back only until the next
        re-check, which is due within the bound (the old server's statements
        were all sent before it stopped answering)."""
        if incarnation == self.incarnation:
            self.proven_at = max(self.proven_at, asked_at)
            return False
        secret = incarnation.encode()
        self._tag = hashlib.blake2b(secret, digest_size=8, person=b"colosseum-key").hexdigest()
        self._secret = hashlib.blake2b(secret, digest_size=32, person=b"colosseum-mac").digest()
        self.incarnation = incarnation
        self.proven_at = asked_at
        return True

    def thread_key(self, thread_id: str) -> str:
        """The one Redis key of a thread, hash-tagged so Cluster keeps it in one slot."""
        assert self.incarnation is not None, "bind() the database incarnation first"
        return f"{self.prefix}{self._tag}:{{{thread_id}}}"

    def item_key(self, prefix: str, key: str) -> str:
        """The Redis key of a Store item (see hot_items.py), beside the thread keys.

        ``item:`` stands where a thread key has its ``{``, so the two never meet;
        the namespace's length makes namespace and key unambiguous.
        """
        assert self.incarnation is not None, "bind() the database incarnation first"
        return f"{self.prefix}{self._tag}:item:{{{len(prefix)}:{prefix}:{key}}}"

    def key_pattern(self) -> str:
        """A SCAN pattern matching every key of this incarnation, threads' and
        Store items' (and nothing else)."""
        assert self.incarnation is not None, "bind() the database incarnation first"
        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix)
        return f"{escaped}{self._tag}:*"

    # Sealing: MAC || payload, the MAC over the places the payload claims.

    def _mac(self, payload: bytes, *place: str | None) -> bytes:
        mac = hashlib.blake2b(key=self._secret, digest_size=MAC_BYTES)
        for part in place:
            data = b"\xff" if part is None else part.encode()
            mac.update(len(data).to_bytes(4, "big"))
            mac.update(data)
        mac.update(payload)
        return mac.digest()

    def _seal(self, payload: bytes, *place: str | None) -> bytes:
        return self._mac(payload, *place) + payload

    def seal(self, payload: bytes, *place: str | None) -> bytes:
        """`payload` behind a MAC of this incarnation over the places it claims."""
        return self._seal(payload, *place)

    def unseal(self, sealed: bytes, *place: str | None) -> Any:
        """The unpacked payload; CorruptHeadError when the MAC does not match `place`."""
        return self._open(sealed, *place)

    def _open(self, sealed: bytes, *place: str | None) -> Any:
        payload = sealed[MAC_BYTES:]
        if not hmac.compare_digest(sealed[:MAC_BYTES], self._mac(payload, *place)):
            raise CorruptHeadError(f"the MAC of {place[2:] or 'the head'} does not match")
        return unpack(payload)

    def pack_value(
        self,
        thread_id: str,
        checkpoint_ns: str,
        channel: str,
        version: str,
        base: str | None,
        encoding: str,
        json: str | None,
        data: bytes | None,
        type_: str | None,
    ) -> bytes:
        """A value row's payload (its base travels beside it, for Lua to follow)."""
        packed = pack([encoding, json, data, type_])
        return self._seal(packed, thread_id, checkpoint_ns, "r", channel, version, base or "")

    def pack_write(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, *columns: Any
    ) -> bytes:
        """A pending write, as GET_TUPLE's write columns: task_id, idx, task_path,
        channel, encoding, json, data, type, state_version."""
        return self._seal(pack(list(columns)), thread_id, checkpoint_ns, "w", checkpoint_id)

    def _head(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        parent_id: str | None,
        document: str,
        metadata: str,
    ) -> bytes:
        """The head's checkpoint row, as GET_TUPLE's first columns give it."""
        packed = pack([checkpoint_id, parent_id, document, metadata])
        return self._seal(packed, thread_id, checkpoint_ns, "h")

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
        epoch: int,
        deleted: str | None,
    ) -> CacheCall:
        """Put back what Postgres returned for the latest checkpoint (None: there is
        none), read at the thread's deletion epoch `epoch` and stamp `deleted`."""
        stamp = deleted or ""
        if row is None:  # sealed too: an emptied head must not pass for "no checkpoint"
            nothing = self._seal(pack([None] * 4), thread_id, checkpoint_ns, "h")
            args = [self.ttl_ms, checkpoint_ns, seq, epoch, stamp, "", nothing, b"", b""]
            return CacheCall("refill", self.thread_key(thread_id), tuple(args))
        checkpoint_id, parent_id, document, metadata = row[2:6]
        write_columns = row[6:_WRITE_END]
        task_ids, idxs = write_columns[:2]
        writes = {
            write_field(task_ids[i], idxs[i]): self.pack_write(
                thread_id, checkpoint_ns, checkpoint_id, *(column[i] for column in write_columns)
            )
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
            self.ttl_ms, checkpoint_ns, seq, epoch, stamp, checkpoint_id,
            self._head(thread_id, checkpoint_ns, checkpoint_id, parent_id, document, metadata),
            flat_versions(_document_versions(document)), _lua_string_map(writes),
            *self._row_args(thread_id, checkpoint_ns, rows),
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
        epoch: int,
    ) -> CacheCall:
        args = [
            self.ttl_ms, checkpoint_ns, epoch, checkpoint_id,
            self._head(thread_id, checkpoint_ns, checkpoint_id, parent_id, document, metadata),
            flat_versions(channel_versions), pack(list(writes_before)),
            *self._row_args(
                thread_id, checkpoint_ns,
                ((ch, v, stored.base_version, *stored[:4]) for ch, v, stored in rows),
            ),
        ]  # fmt: skip
        return CacheCall("advance", self.thread_key(thread_id), tuple(args))

    def add_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[tuple[str, bytes, bool]],
        epoch: int,
    ) -> CacheCall:
        args: list[Any] = [self.ttl_ms, checkpoint_ns, epoch, checkpoint_id]
        for slot, packed, replace in writes:
            args += (slot, packed, "1" if replace else "0")
        return CacheCall("add_writes", self.thread_key(thread_id), tuple(args))

    def drop(self, thread_ids: Sequence[str]) -> CacheDrop:
        return CacheDrop(tuple(self.thread_key(t) for t in thread_ids))

    def parse_read(
        self, thread_id: str, checkpoint_ns: str, reply: list
    ) -> tuple[bytes, Head | None, bool]:
        """(seq, head or None, whether a miss may be refilled) from a READ reply.

        Raises CorruptHeadError for a head that does not decode or whose
        parts are not what they claim to be.
        """
        seq = reply[0]
        if len(reply) == 1:
            return seq, None, True
        if len(reply) == 2:
            if reply[1] == -1:
                raise CorruptHeadError("its chains or fields did not decode in Redis (dropped)")
            return seq, None, False  # a checkpoint other than the head was asked for
        try:
            _, head, cv, writes, rows, stamp = reply
            if not head:
                raise CorruptHeadError("the head has no checkpoint row")
            deleted = stamp.decode() or None
            checkpoint_id, parent_id, document, metadata = self._open(
                head, thread_id, checkpoint_ns, "h"
            )
            if checkpoint_id is None:
                return seq, Head((), [], deleted), False  # the namespace has no checkpoint
            if unpack(cv) != unpack(flat_versions(_document_versions(document))):
                raise CorruptHeadError("its channel versions are not its checkpoint's")
            opened = [self._open(w, thread_id, checkpoint_ns, "w", checkpoint_id) for w in writes]
            # A write cached before state_version was recorded has 8 columns: NULL.
            opened = [w + [None] * (_WRITE_COLUMNS - len(w)) for w in opened]
            write_columns = [list(column) for column in zip(*opened)] or [[]] * _WRITE_COLUMNS
            row = (thread_id, checkpoint_ns, checkpoint_id, parent_id, document, metadata,
                   *write_columns)  # fmt: skip
            value_rows = [
                self._value_row(thread_id, checkpoint_ns, *rows[i : i + 4])
                for i in range(0, len(rows), 4)
            ]
        except CorruptHeadError:
            raise
        except Exception as exc:  # whatever a damaged field makes the decoders raise
            raise CorruptHeadError(f"it does not decode ({exc!r})") from exc
        return seq, Head(row, value_rows, deleted), False

    def _value_row(
        self,
        thread_id: str,
        checkpoint_ns: str,
        channel: bytes,
        version: bytes,
        base: bytes,
        sealed: bytes,
    ) -> ValueRow:
        channel_, version_, base_ = channel.decode(), version.decode(), base.decode()
        encoding, json, data, type_ = self._open(
            sealed, thread_id, checkpoint_ns, "r", channel_, version_, base_
        )
        return ValueRow(
            (thread_id, checkpoint_ns, channel_, version_),
            base_ or None,
            encoding,
            orjson.loads(json) if json is not None else None,
            data,
            type_,
        )

    def _row_args(self, thread_id: str, checkpoint_ns: str, rows: Iterable[tuple]) -> list[Any]:
        """Script arguments for value rows given as (channel, version, base, encoding,
        json, data, type): channel, version, base ("" for a full row), payload."""
        args: list[Any] = []
        for channel, version, base, *payload in rows:
            sealed = self.pack_value(thread_id, checkpoint_ns, channel, version, base, *payload)
            args += (channel, version, base or "", sealed)
        return args


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


def _json_text(parsed: Any) -> str | None:
    return orjson.dumps(parsed).decode() if parsed is not None else None


def _document_versions(document: str) -> dict[str, Any]:
    return orjson.loads(document).get("channel_versions", {})
