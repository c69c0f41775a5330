"""Hot Store items in Redis: `get` of a hot item makes no Postgres round trip.

The same rules as the checkpointer's hot head (hot.py), on the same Redis client
and the same incarnation binding: Postgres is the truth, and an item is served
from Redis only while it provably equals what Postgres would return.

* One hash per item, ``<prefix><incarnation tag>:item:{<len>:<namespace>:<key>}``
  (`HotHead.item_key`): two databases, or a database and its restored or
  recreated successor, never share a key. Its fields: ``seq``, the mutation
  counter, and ``v``, the item as GET returned it (or "absent"), sealed with
  the incarnation's MAC bound to the namespace and key.
* Never stale. A reader that misses notes ``seq`` (ITEM_READ creates it from the
  server clock), reads Postgres, and refills only if ``seq`` is still there and
  unchanged (ITEM_REFILL). Every put and delete drops the item's hash after its
  commit, so a refill that read Postgres before the write finds no counter, or
  a newer one, and is refused. A drop Redis refused is recorded in
  colosseum_stale_heads and dropped by the next write that reaches Redis, as the
  checkpointer's are; until then the hash ends `hot_ttl` after its refill:
  reads never extend it.
* Never expired. An item with a TTL ends in Redis at the read's Redis time plus
  the lifetime Postgres reported (ITEM_REFILL, PEXPIREAT): the read came before
  Postgres' `now()`, so the copy ends no later than the row. A `get` that
  refreshes the TTL of such an item goes to Postgres (which pushes the expiry
  back); one that does not refresh is served from Redis.
* An absent item is remembered briefly (`ABSENT_TTL_MS`), as the checkpointer
  remembers a thread with no checkpoint; a put drops it like any other.

Nothing here opens a socket: MemoryOps yields these `CacheCall`s, the drivers run them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import NamedTuple
from zoneinfo import ZoneInfo

from langgraph_colosseum._core.hot import CLOCK_SEQ, CorruptHeadError, HotHead, pack
from langgraph_colosseum._core.io import CacheCall

# How long Redis remembers that an item does not exist.
ABSENT_TTL_MS = 5000
# A batch with more gets than this reads them in its one Postgres statement:
# one round trip beats that many Redis calls.
MAX_HOT_GETS = 8

# ARGV: none. Reply: {seq, now_ms} on a miss, {seq, now_ms, item} on a hit.
ITEM_READ = (
    CLOCK_SEQ
    + f"local ABSENT_TTL_MS = {ABSENT_TTL_MS}\n"
    + r"""
local key = KEYS[1]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seq = redis.call('HGET', key, 'seq')
if not seq then
    seq = clock_seq()
    redis.call('HSET', key, 'seq', seq)
    redis.call('PEXPIRE', key, ABSENT_TTL_MS)  -- until a refill
    return {seq, now_ms}
end
local item = redis.call('HGET', key, 'v')
if not item then return {seq, now_ms} end
return {seq, now_ms, item}
"""
)

# ARGV: seq noted by the miss, sealed item, the miss's now_ms, milliseconds the
# copy may live from then (already the least of hot_ttl and the item's own
# remaining lifetime). Reply: 1 refilled, 0 a write came first (or it expired).
ITEM_REFILL = r"""
local key = KEYS[1]
if redis.call('HGET', key, 'seq') ~= ARGV[1] then return 0 end
redis.call('HSET', key, 'v', ARGV[2])
redis.call('PEXPIREAT', key, tonumber(ARGV[3]) + tonumber(ARGV[4]))
return 1
"""

ITEM_SCRIPTS: Mapping[str, str] = {"item_read": ITEM_READ, "item_refill": ITEM_REFILL}


class HotRead(NamedTuple):
    """What ITEM_READ found: a hit (`row`, None for "absent") or a miss to refill."""

    hit: bool
    row: tuple | None  # GET's columns: prefix, key, value, created_at, updated_at
    has_ttl: bool
    seq: bytes | None  # a miss's counter, for its refill (None: do not refill)
    read_ms: int  # the Redis clock at the read


class HotItems:
    """Builds the item calls for one store, on the checkpointer's `HotHead`."""

    def __init__(self, head: HotHead) -> None:
        self.head = head

    def read(self, prefix: str, key: str) -> CacheCall:
        return CacheCall("item_read", self.head.item_key(prefix, key), ())

    def parse_read(self, prefix: str, key: str, reply: list) -> HotRead:
        """Raises CorruptHeadError for an item whose MAC or shape is wrong."""
        seq, read_ms = reply[0], int(reply[1])
        if len(reply) == 2:
            return HotRead(False, None, False, seq, read_ms)
        try:
            payload = self.head.unseal(reply[2], "item", prefix, key)
            if payload is None:
                return HotRead(True, None, False, seq, read_ms)
            value, created, updated, zone, has_ttl = payload
            row = (prefix, key, value, _when(created, zone), _when(updated, zone))
        except CorruptHeadError:
            raise
        except Exception as exc:  # whatever a damaged field makes the decoders raise
            raise CorruptHeadError(f"the item does not decode ({exc!r})") from exc
        return HotRead(True, row, bool(has_ttl), seq, read_ms)

    def refill(
        self, prefix: str, key: str, seen: HotRead, row: tuple | None, remaining_ms: float | None
    ) -> CacheCall | None:
        """Put back what GET returned (`row`, None: absent), or None when it is
        already expired. `remaining_ms`: the row's lifetime as Postgres counted
        it (None: no TTL)."""
        assert seen.seq is not None
        life = self.head.ttl_ms
        if row is None:
            payload = None
            life = min(life, ABSENT_TTL_MS)
        else:
            created, updated = row[3], row[4]
            payload = [row[2], created.isoformat(), updated.isoformat(), _zone(created),
                       remaining_ms is not None]  # fmt: skip
            if remaining_ms is not None:
                life = min(life, int(remaining_ms))
        if life <= 0:
            return None
        sealed = self.head.seal(pack(payload), "item", prefix, key)
        args = (seen.seq, sealed, seen.read_ms, life)
        return CacheCall("item_refill", self.head.item_key(prefix, key), args)

    def keys(self, items: list[tuple[str, str]]) -> tuple[str, ...]:
        return tuple(self.head.item_key(prefix, key) for prefix, key in items)


def _zone(when: dt.datetime) -> str | None:
    """The zone key of a timestamp psycopg returned (the session's TimeZone), so
    a hit carries the same tzinfo, compared by repr, as a Postgres read."""
    return getattr(when.tzinfo, "key", None)


def _when(text: str, zone: str | None) -> dt.datetime:
    when = dt.datetime.fromisoformat(text)
    return when.astimezone(ZoneInfo(zone)) if zone else when
