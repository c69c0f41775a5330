"""conc-32's client side counted in instructions, not timed: a figure the machine's noise cannot move.

On the shared 2-core machine the same code's client CPU per invoke swings by 20-40%
between rounds (the host's neighbours, Python's cyclic GC landing in one round
and not the next), which buries a change worth 5%. Valgrind's instruction count
of the client process is the same from run to run to a fraction of a percent.

Each saver runs the conc-32 graph (async, `--threads` threads, pool 10) in a
child process under `valgrind --tool=cachegrind --cache-sim=no`, twice: with
`--turns` turns per thread and with twice as many, after one warm-up turn per
thread. The difference of the two counts, per invoke, is what an invoke costs
the client, start-up and imports cancelled out. Printed per saver, and the
issue 14 ratio: (ours - InMemorySaver) / (AsyncPostgresSaver - InMemorySaver).

    python -m benchmarks.instructions                  # 1 thread x 10 / 20 turns
    python -m benchmarks.instructions --threads 8 --turns 5

One thread by default, and a fixed PYTHONHASHSEED: with several threads the
requests that share a round trip (the asyncio saver's coalescing) depend on
timing, and so does the count. Even so, two runs of the same code differ by
about 2% per invoke (InMemorySaver: 8.38 and 8.55 M instructions in two runs
of 2026-12-01: timestamps, uuids and how the waits interleave), so compare
figures of one run, or use `--micro`.

`--micro` counts, instead, single functions of the client's hot path, with no
I/O at all, and these counts repeat exactly: `fresh_copy` of 600 messages (a
Redis or cached read hands each caller its own copy), a put's change
detection of those 600 messages grown by one (`shapes.diff`), the typed codec's
encoding and decoding of those 600 messages, one conc-32 checkpoint
document written and read, and one long-20k checkpoint document read. Each is run 0 and N times in a child under
valgrind; the difference per call is printed.

    python -m benchmarks.instructions --micro

What this leaves out: instructions are not time (a cache miss costs more than
an add), and the kernel's side of each round trip is not counted, which is
where coalescing saves most (the timed `client_cpu.py` sees it). So this one
says whether a change made the client's own code do less, to a fraction of a
percent, and `client_cpu.py` what it costs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

NAMES = ("memory", "ref", "ours", "ours+redis")
MICRO = (
    "fresh_copy",
    "diff",
    "encode",
    "decode",
    "document",
    "load_document",
    "load_long_document",
)
MICRO_CALLS = {
    "fresh_copy": 20,
    "diff": 20,
    "encode": 10,
    "decode": 10,
    "document": 2000,
    "load_document": 2000,
    "load_long_document": 2000,
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def _child(name: str, url: str, redis_url: str, threads: int, turns: int) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from benchmarks.common import CACHE_PREFIX, reference_pool
    from benchmarks.conc import _conc_round, conc_graph
    from langgraph_colosseum import AsyncColosseumSaver

    async def run(saver) -> None:
        graph = conc_graph(saver, random.Random(7))
        tag = uuid.uuid4().hex[:8]
        await _conc_round(graph, random.Random(7), threads, 1, f"i-{tag}")  # warm-up
        await _conc_round(graph, random.Random(8), threads, turns, f"i-{tag}")

    if name == "memory":
        await run(InMemorySaver())
    elif name == "ref":
        async with reference_pool(url, 10) as pool:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            await run(saver)
    else:
        options = {"redis_url": redis_url, "cache_prefix": CACHE_PREFIX} if name != "ours" else {}
        async with AsyncColosseumSaver.from_conn_string(url, pool_size=10, **options) as saver:
            await saver.setup()
            await run(saver)


def _micro_child(name: str, calls: int) -> None:
    """`calls` calls of one hot-path function on fixed data (no I/O)."""
    import orjson
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from langgraph_colosseum._core import shapes
    from langgraph_colosseum._core.codec import default_registry
    from langgraph_colosseum._core.store import CheckpointStore
    from langgraph_colosseum._core.values import ValueCodec, Where, fresh_copy

    messages = []
    for i in range(300):
        messages.append(HumanMessage("x" * 100, id=f"h{i}"))
        messages.append(AIMessage("y" * 800, id=f"a{i}", response_metadata={"model": "m"}))
    registry = default_registry()
    encoded = orjson.dumps(registry.encode(messages))
    # a checkpoint of the conc-32 graph after its reply, as LangGraph makes it
    checkpoint = {
        "v": 4, "ts": "2026-12-01T21:33:24.743345+00:00",
        "id": "1f1edced-6c45-6724-8007-49586c6a706e",
        "channel_versions": {
            "__start__": "00000000000000000000000000000008.0.3983043841966376",
            "messages": "00000000000000000000000000000009.0.9386950937936185",
            "branch:to:reply": "00000000000000000000000000000009.0.9386950937936185",
        },
        "versions_seen": {
            "__input__": {},
            "__start__": {"__start__": "00000000000000000000000000000007.0.5176244092902532"},
            "reply": {"branch:to:reply": "00000000000000000000000000000008.0.3983043841966376"},
        },
        "updated_channels": ["messages"], "channel_values": {},
    }  # fmt: skip
    # a put's change detection: the list grown by one message, against its base
    base = shapes.Base("v1", fresh_copy(messages), 1, 0, 0)
    grown = [*messages, AIMessage("z" * 50, id="new")]
    store = CheckpointStore(ValueCodec(JsonPlusSerializer(), registry))
    where = Where("t", "", checkpoint["id"], "<checkpoint>")
    document = store._checkpoint_document(checkpoint, where)
    # a long-20k checkpoint (direct puts: one counter channel, nothing seen)
    long_document = store._checkpoint_document(
        {
            "v": 4, "id": checkpoint["id"], "ts": checkpoint["ts"], "channel_values": {},
            "channel_versions": {"counter": "00000000000000000000000000003000.0.6469848654684308"},
            "versions_seen": {}, "pending_sends": [], "updated_channels": ["counter"],
        },
        where,
    )  # fmt: skip
    run = {
        "fresh_copy": lambda: fresh_copy(messages),
        "diff": lambda: shapes.diff(grown, base, 100),
        "encode": lambda: registry.encode(messages),
        "decode": lambda: registry.decode(orjson.loads(encoded)),
        "document": lambda: store._checkpoint_document(checkpoint, where),
        "load_document": lambda: store._load_checkpoint_document(document),
        "load_long_document": lambda: store._load_checkpoint_document(long_document),
    }[name]
    for _ in range(calls):
        run()


def _valgrind(arguments: list[str]) -> int:
    """The instructions of `python -m benchmarks.instructions ARGUMENTS` under valgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cachegrind.out")
        command = [
            "valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}",
            sys.executable, "-m", "benchmarks.instructions", *arguments,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{arguments}: the child failed:\n{done.stderr[-3000:]}")
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if found is None:
            raise RuntimeError(f"{arguments}: no instruction count in valgrind's output")
        return int(found.group(1).replace(",", ""))


def count(name: str, url: str, redis_url: str, threads: int, turns: int) -> int:
    """The client instructions of one child run (start-up included)."""
    return _valgrind(
        ["--child", name, url, redis_url, "--threads", str(threads), "--turns", str(turns)]
    )


def micro() -> None:
    for name in MICRO:
        calls = MICRO_CALLS[name]
        none, some = (_valgrind(["--micro-child", name, str(n)]) for n in (0, calls))
        print(f"{name:14s} {(some - none) / calls / 1e3:10.1f} k instructions per call")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--savers", nargs="+", choices=NAMES, default=list(NAMES))
    parser.add_argument("--micro", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("NAME", "URL", "REDIS_URL"))
    parser.add_argument("--micro-child", nargs=2, metavar=("NAME", "CALLS"))
    args = parser.parse_args()
    if args.micro_child:
        _micro_child(args.micro_child[0], int(args.micro_child[1]))
        return
    if shutil.which("valgrind") is None:
        sys.exit("benchmarks.instructions counts under valgrind: apt-get install valgrind")
    if args.micro:
        micro()
        return
    if args.child:
        name, url, redis_url = args.child
        asyncio.run(_child(name, url, redis_url, args.threads, args.turns))
        return

    from benchmarks.common import Bench
    from benchmarks.servers import private_postgres, private_redis

    # a terminated run still removes its private servers (the `with` below)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    per_invoke: dict[str, float] = {}
    with private_postgres(log) as admin, private_redis(log) as redis_url:
        bench = Bench(admin, redis_url, private_redis=True)
        bench.create()
        try:
            for name in args.savers:
                short = count(name, bench.url, redis_url, args.threads, args.turns)
                long = count(name, bench.url, redis_url, args.threads, 2 * args.turns)
                per_invoke[name] = (long - short) / (args.threads * args.turns)
                log(f"{name}: {per_invoke[name] / 1e6:.3f} M instructions per invoke")
        finally:
            bench.drop()
    for name, value in per_invoke.items():
        print(f"{name:11s} {value / 1e6:8.3f} M instructions per invoke")
    if {"memory", "ref"} <= per_invoke.keys():
        floor, ref_own = per_invoke["memory"], per_invoke["ref"] - per_invoke["memory"]
        for name in ("ours", "ours+redis"):
            if name in per_invoke:
                print(
                    f"{name}: saver instructions vs ref {(per_invoke[name] - floor) / ref_own:.3f}"
                )


if __name__ == "__main__":
    main()
