"""The report of a run: targets met or missed, one table per workload, the chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import (
    AMEMORY,
    AOURS,
    AOURS_HOT,
    AREF,
    ASYNC_SAVERS,
    OURS,
    OURS_BOUNCER,
    OURS_COMPACT,
    OURS_HOT,
    REF,
    SYNC_SAVERS,
    fmt,
    fmt_ratio,
    md_table,
    ratio,
)


def get(cell: Any, path: str) -> Any:
    """cell["a"]["b"] for path "a.b"; None where any step is missing."""
    for part in path.split("."):
        if not isinstance(cell, dict):
            return None
        cell = cell.get(part)
    return cell


# Per-unit CPU and traffic, as a Meter reports them (see common.py).
def cost_figures(prefix: str, unit: str) -> list[tuple[str, str, str]]:
    return [
        (f"{prefix}.client_cpu_s", f"client CPU per {unit}", "s"),
        (f"{prefix}.pg_cpu_s", f"Postgres CPU per {unit}", "s"),
        (f"{prefix}.statements", f"statements per {unit}", "f"),
        (f"{prefix}.round_trips", f"round trips per {unit}", "f"),
        (f"{prefix}.pg_plan_ms", f"server planning ms per {unit}", "f"),
        (f"{prefix}.pg_exec_ms", f"server execution ms per {unit}", "f"),
        (f"{prefix}.redis_commands", f"Redis commands per {unit}", "f"),
        (f"{prefix}.wal_bytes", f"WAL bytes per {unit}", "bytes"),
    ]


CHAT_FIGURES = [
    # key, label, kind
    ("total_s", "total time", "s"),
    ("p50_turn_s", "p50 per turn", "s"),
    ("last10_turn_s", "median of last 10 turns", "s"),
    ("bytes_on_disk", "bytes on disk", "bytes"),
    ("bytes_after_first_turn", "bytes on disk after the first turn", "bytes"),
    ("bytes_added_past_first_turn", "bytes the other turns add", "bytes"),
    ("get_state_s", "get_state (median)", "s"),
    ("history_s", "full get_state_history", "s"),
    ("checkpoints", "checkpoints in history", "n"),
    ("hot_bytes_per_thread", "Redis bytes per hot thread", "bytes"),
    ("hot_encoded_bytes_per_thread", "encoded bytes of the hot head", "bytes"),
    *cost_figures("per_invoke", "invoke"),
    ("per_get_state.round_trips", "round trips per get_state", "f"),
]
CONC_FIGURES = [
    ("invokes_per_s", "invokes/s (median of rounds)", "rate"),
    ("p50_invoke_s", "p50 invoke latency", "s"),
    ("p95_invoke_s", "p95 invoke latency", "s"),
    *cost_figures("per_invoke", "invoke"),
]
LONG_FIGURES = [
    ("list_s", "full list() time", "s"),
    ("list_peak_traced_bytes", "full list() peak (tracemalloc)", "bytes"),
    ("list_peak_rss_bytes", "full list() peak (RSS growth)", "bytes"),
    ("get_state_s", "get_tuple at head (median)", "s"),
    ("get_state_first_s", "get_tuple at head, a head not read before (median)", "s"),
    ("get_state_peak_traced_bytes", "get_tuple peak (tracemalloc)", "bytes"),
    ("get_state_peak_rss_bytes", "get_tuple peak (RSS growth)", "bytes"),
    ("per_get_tuple.client_cpu_s", "get_tuple client CPU", "s"),
    ("get_state_cpu_s", "get_tuple client CPU (median call)", "s"),
    ("per_get_tuple.pg_plan_ms", "get_tuple server planning ms", "f"),
    ("per_get_tuple.pg_exec_ms", "get_tuple server execution ms", "f"),
    ("per_get_tuple.round_trips", "get_tuple round trips", "f"),
    ("per_list.client_cpu_s", "full list() client CPU", "s"),
    ("per_list.pg_cpu_s", "full list() Postgres CPU", "s"),
    ("per_list.round_trips", "full list() round trips", "f"),
]

# Memory is "flat" when a figure at the larger size is at most FLAT_GROWTH times
# the smaller one (a linear reader would show ~4x from 5k to 20k). RSS deltas
# under RSS_NOISE_FLOOR are treated as noise.
FLAT_GROWTH = 1.5
RSS_NOISE_FLOOR = 1 << 20
TRACED_NOISE_FLOOR = 64 << 10


def flatness(cell: dict, sizes: list[int]) -> dict:
    small, big = cell["sizes"][str(sizes[0])], cell["sizes"][str(sizes[-1])]
    checks = {}
    for key, floor in (
        ("list_peak_traced_bytes", TRACED_NOISE_FLOOR),
        ("get_state_peak_traced_bytes", TRACED_NOISE_FLOOR),
        ("list_peak_rss_bytes", RSS_NOISE_FLOOR),
        ("get_state_peak_rss_bytes", RSS_NOISE_FLOOR),
    ):
        a, b = small.get(key), big.get(key)
        if a is None or b is None:
            continue
        growth = max(b, floor) / max(a, floor)
        checks[key] = {"small": a, "big": b, "growth": growth, "flat": growth <= FLAT_GROWTH}
    return checks


def compute_targets(results: dict, p: dict) -> list[dict]:
    """Each target's ratio, and the two figures it divides ("ours", "reference",
    in the units of the figure), so that several runs' medians can be given
    beside the reference's (benchmarks.medians --figures)."""

    def cell_pair(workload: str, key: str, ours: str, ref: str) -> tuple[Any, Any]:
        w = results.get(workload) or {}
        return w.get(ours, {}).get(key), w.get(ref, {}).get(key)

    targets = []

    def add(
        name: str, pair: tuple[Any, Any], op: str, bound: float, basis: str, kind: str = "s"
    ) -> None:
        """`kind`: the units of the two figures (common.fmt's)."""
        value = ratio(*pair)
        if value is None:
            status = "not run"
        else:
            status = "met" if (value <= bound if op == "<=" else value >= bound) else "missed"
        targets.append(
            {
                "target": name,
                "value": value,
                "ours": pair[0],
                "reference": pair[1],
                "op": op,
                "bound": bound,
                "status": status,
                "basis": basis,
                "kind": kind,
            }
        )

    vs = "ours / PostgresSaver"
    add(
        "chat-200 bytes on disk",
        cell_pair("chat-200", "bytes_on_disk", OURS, REF),
        "<=",
        0.05,
        vs,
        kind="bytes",
    )
    add("chat-200 p50 per turn", cell_pair("chat-200", "p50_turn_s", OURS, REF), "<=", 0.6, vs)
    add("chat-200 full history", cell_pair("chat-200", "history_s", OURS, REF), "<=", 0.1, vs)
    add(
        "chat-200-delta bytes on disk",
        cell_pair("chat-200-delta", "bytes_on_disk", OURS, REF),
        "<=",
        0.8,
        vs + ", both with DeltaChannel",
        kind="bytes",
    )
    add(
        "chat-200-delta bytes on disk, compact_forms=True",
        cell_pair("chat-200-delta", "bytes_on_disk", OURS_COMPACT, REF),
        "<=",
        0.8,
        "ColosseumSaver+compact / PostgresSaver, both with DeltaChannel",
        kind="bytes",
    )
    add(
        "chat-200-delta bytes the turns after the first add, compact_forms=True",
        cell_pair("chat-200-delta", "bytes_added_past_first_turn", OURS_COMPACT, REF),
        "<=",
        0.8,
        "not the issue's figure: without each database's pages for one short thread",
        kind="bytes",
    )
    add(
        "chat-200-delta full history",
        cell_pair("chat-200-delta", "history_s", OURS, REF),
        "<=",
        0.3,
        vs + ", both with DeltaChannel",
    )
    conc = results.get("conc-32") or {}
    floor_cpu = get(conc.get(AMEMORY), "per_invoke.client_cpu_s")
    ours_cpu = get(conc.get(AOURS), "per_invoke.client_cpu_s")
    ref_cpu = get(conc.get(AREF), "per_invoke.client_cpu_s")
    add(
        "conc-32 client saver CPU per invoke",
        (ours_cpu - floor_cpu, ref_cpu - floor_cpu)
        if None not in (floor_cpu, ours_cpu, ref_cpu)
        else (None, None),
        "<=",
        0.4,
        "(AsyncColosseumSaver - InMemorySaver) / (AsyncPostgresSaver - InMemorySaver)",
    )
    add(
        "conc-32 Postgres CPU per invoke",
        (get(conc.get(AOURS), "per_invoke.pg_cpu_s"), get(conc.get(AREF), "per_invoke.pg_cpu_s")),
        "<=",
        0.6,
        "AsyncColosseumSaver / AsyncPostgresSaver",
    )
    add(
        "conc-32 throughput",
        cell_pair("conc-32", "invokes_per_s", AOURS, AREF),
        ">=",
        3.0,
        "invokes/s, AsyncColosseumSaver / AsyncPostgresSaver",
        kind="rate",
    )
    add(
        "conc-32 throughput vs the limit",
        cell_pair("conc-32", "invokes_per_s", AOURS, AMEMORY),
        ">=",
        0.6,
        "invokes/s, AsyncColosseumSaver / InMemorySaver",
        kind="rate",
    )
    add(
        "conc-32 no slower with the cache",
        cell_pair("conc-32", "invokes_per_s", AOURS_HOT, AOURS),
        ">=",
        1.0,
        "invokes/s, AsyncColosseumSaver+Redis / AsyncColosseumSaver",
        kind="rate",
    )
    add(
        "chat-200 p50 with the cache",
        cell_pair("chat-200", "p50_turn_s", OURS_HOT, OURS),
        "<=",
        1.0,
        "ColosseumSaver+Redis / ColosseumSaver",
    )
    add(
        "chat-200 get_state, Redis head",
        cell_pair("chat-200", "get_state_s", OURS_HOT, REF),
        "<=",
        0.3,
        "ColosseumSaver+Redis / PostgresSaver",
    )
    hot = (results.get("chat-200") or {}).get(OURS_HOT, {})
    add(
        "Redis memory per hot thread",
        (hot.get("hot_bytes_per_thread"), hot.get("hot_encoded_bytes_per_thread")),
        "<=",
        1.5,
        "MEMORY USAGE / the head's encoded bytes (chat-200)",
        kind="bytes",
    )
    for workload, sizes_key in (("long-20k", "long_sizes"), ("long-20k-graph", "graph_sizes")):
        w = results.get(workload) or {}
        big = str(p[sizes_key][-1])
        for key, label, op, bound in (
            ("get_state_s", "get_tuple at head", "<=", 0.8),
            ("list_s", "full list()", "<=", 1.0),
        ):
            add(
                f"{workload} {label}",
                (get(w.get(OURS), f"sizes.{big}.{key}"), get(w.get(REF), f"sizes.{big}.{key}")),
                op,
                bound,
                vs + f" at {int(big):,} checkpoints",
            )
        add(
            f"{workload} puts/s",
            (get(w.get(OURS), "put_per_s"), get(w.get(REF), "put_per_s")),
            ">=",
            1.0,
            vs,
            kind="rate",
        )
    long = results.get("long-20k", {}).get(OURS)
    if long:
        checks = flatness(long, p["long_sizes"])
        worst = max((c["growth"] for c in checks.values()), default=None)
        targets.append(
            {
                "target": "long-20k memory flat",
                "value": worst,
                "op": "<=",
                "bound": FLAT_GROWTH,
                "status": "met" if checks and all(c["flat"] for c in checks.values()) else "missed",
                "basis": (
                    f"ColosseumSaver peak memory at {p['long_sizes'][-1]:,} / at "
                    f"{p['long_sizes'][0]:,} checkpoints, worst of list() and get_tuple, "
                    "tracemalloc and RSS"
                ),
                "checks": checks,
            }
        )
    else:
        add("long-20k memory flat", (None, None), "<=", FLAT_GROWTH, "ColosseumSaver peak growth")
    return targets


# ---------------------------------------------------------------- formatting


def workload_tables(results: dict, p: dict) -> list[str]:
    out: list[str] = []
    for workload in ("chat-200", "chat-200-delta"):
        w = results.get(workload)
        if not w:
            continue
        skipped = [n for n in SYNC_SAVERS if n in w and "skipped" in w[n]]
        names = [n for n in SYNC_SAVERS if n in w and n not in skipped]
        title = f"### {workload} ({p['chat_turns']} turns"
        title += ", messages in a `DeltaChannel`)" if workload.endswith("delta") else ")"
        out += [title, ""]
        rows = []
        ours_columns = [n for n in (OURS, OURS_HOT, OURS_BOUNCER) if n in names]
        for key, label, kind in CHAT_FIGURES:
            row = [label] + [fmt(get(w[n], key), kind) for n in names]
            for ours in ours_columns:
                row.append(fmt_ratio(ratio(get(w.get(ours), key), get(w.get(REF), key))))
            rows.append(row)
        out += md_table(["figure", *names, *(f"{n} / PostgresSaver" for n in ours_columns)], rows)
        out += [f"{n} skipped: {w[n]['skipped']}" for n in skipped]
        errors = [f"{n}: {w[n]['error']}" for n in names if "error" in w[n]]
        out += [""] + [f"**check failed** {e}" for e in errors] + ([""] if errors else [])
    w = results.get("conc-32")
    if w:
        names = [n for n in ASYNC_SAVERS if n in w]
        out += [
            f"### conc-32 ({p['conc_threads']} concurrent async threads x {p['conc_turns']} "
            f"turns, 10-connection pool, median of {p['conc_rounds']} round(s))",
            "",
        ]
        rows = []
        for key, label, kind in CONC_FIGURES:
            row = [label] + [
                "skipped" if "skipped" in w[n] else fmt(get(w[n], key), kind) for n in names
            ]
            for ours in (AOURS, AOURS_HOT):
                row.append(fmt_ratio(ratio(get(w.get(ours), key), get(w.get(AREF), key))))
            rows.append(row)
        out += md_table(
            ["figure", *names, "ours / AsyncPostgresSaver", "ours+Redis / AsyncPostgresSaver"], rows
        )
        out += [""]
        for n in names:
            if "skipped" in w[n]:
                out += [f"{n} skipped: {w[n]['skipped']}", ""]
    out += long_tables(results, p, "long-20k", "long_sizes", "direct `saver.put` calls")
    out += long_tables(
        results, p, "long-20k-graph", "graph_sizes", "a real graph: a counter node looping"
    )
    return out


def long_tables(results: dict, p: dict, workload: str, sizes_key: str, how: str) -> list[str]:
    w = results.get(workload)
    if not w:
        return []
    sizes = p[sizes_key]
    names = [n for n in SYNC_SAVERS if n in w]
    out = [
        f"### {workload} (one thread of tiny checkpoints written by {how}; "
        "full `saver.list(config)` and `get_tuple` at the head)",
        "",
    ]
    rows = []
    for key, label, kind in (
        ("put_per_s", "puts/s while filling", "rate"),
        ("bytes_on_disk", "bytes on disk at the end", "bytes"),
        *cost_figures("per_checkpoint", "checkpoint"),
    ):
        rows.append(
            [label]
            + [fmt(get(w[n], key), kind) for n in names]
            + [fmt_ratio(ratio(get(w.get(OURS), key), get(w.get(REF), key)))]
        )
    notes = []
    for size in sizes:
        for key, label, kind in LONG_FIGURES:
            cells = [w[n]["sizes"][str(size)] for n in names]
            row = [f"{label} @ {size:,}"]
            for n, c in zip(names, cells):
                text = fmt(get(c, key), kind)
                if key == "list_s" and c.get("list_capped"):
                    text += f" (capped at {c['list_seen']:,})"
                    notes.append(
                        f"{n} full list() at {size:,} was cut off after "
                        f"{p['long_list_cap_s']:.0f} s ({c['list_seen']:,} checkpoints read)"
                    )
                row.append(text)
            o = get(w.get(OURS), f"sizes.{size}.{key}")
            r = get(w.get(REF), f"sizes.{size}.{key}")
            row.append(fmt_ratio(ratio(o, r)))
            rows.append(row)
    out += md_table(["figure", *names, "ours / PostgresSaver"], rows)
    out += [""]
    growth_rows = []
    for n in names:
        checks = flatness(w[n], sizes)
        growth_rows.append(
            [n]
            + [
                fmt_ratio(checks[k]["growth"]) if k in checks else "n/a"
                for k in (
                    "list_peak_traced_bytes",
                    "list_peak_rss_bytes",
                    "get_state_peak_traced_bytes",
                    "get_state_peak_rss_bytes",
                )
            ]
        )
    out += [
        f"Peak-memory growth from {sizes[0]:,} to {sizes[-1]:,} "
        f"checkpoints (1.0 = flat, {sizes[-1] / sizes[0]:.0f} = linear; "
        f"RSS growth under {RSS_NOISE_FLOOR >> 20} MiB and tracemalloc under "
        f"{TRACED_NOISE_FLOOR >> 10} KiB count as noise):",
        "",
    ]
    out += md_table(
        ["saver", "list() tracemalloc", "list() RSS", "get_tuple tracemalloc", "get_tuple RSS"],
        growth_rows,
    )
    if not notes:
        notes.append(
            f"no full list() pass hit the {p['long_list_cap_s']:.0f} s cap: every figure "
            "above covers the whole thread"
        )
    out += [""] + [f"Note: {n}." for n in notes] + [""]
    errors = [
        f"{n} @ {s}: {c['error']}" for n in names for s, c in w[n]["sizes"].items() if "error" in c
    ]
    out += [f"**check failed** {e}" for e in errors] + ([""] if errors else [])
    return out


def targets_table(targets: list[dict]) -> list[str]:
    rows = []
    for t in targets:
        bound = f"{t['op']} {t['bound']:g}"
        rows.append([t["target"], bound, fmt_ratio(t["value"]), t["status"], t["basis"]])
    return md_table(["target", "bound", "this run", "status", "basis"], rows)


def render_markdown(meta: dict, results: dict, targets: list[dict], p: dict) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Run {meta['date']} with `{meta['command']}` "
        f"({'quick smoke mode' if meta['quick'] else 'full run'}), wall time "
        f"{meta['wall_s']:.0f} s.",
        "",
        "All savers ran in one process against one fresh database on the same PostgreSQL "
        "server; ratios are ours / PostgresSaver (AsyncPostgresSaver for conc-32) from this "
        "run. Single runs unless a median is named; timings are noisy and never asserted.",
        "",
        "## Machine",
        "",
    ]
    lines += md_table(["", ""], [[k, str(v)] for k, v in meta["machine"].items()])
    lines += ["", "## Targets", ""]
    lines += targets_table(targets)
    lines += ["", "## Figures", ""]
    lines += workload_tables(results, p)
    if search := results.get("search-100k"):
        lines += [
            f"### search-100k (`threads.search(limit=10)` over {search['threads']:,} threads; "
            "no reference saver has a search to compare)",
            "",
        ]
        lines += md_table(
            ["search", "p50", "threads found"],
            [
                [label, f"{cell['p50_ms']:.2f} ms", str(cell["found"])]
                for label, cell in search["searches"].items()
            ],
        )
        lines += [""]
    lines += [f"![ratios]({meta['out']}.png)"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- chart


def chart_bars(results: dict, p: dict) -> list[tuple[str, str, float, float | None]]:
    """(workload, label, ours/ref cost ratio (lower is better), target or None)."""
    bars = []
    targets = {
        ("chat-200", "bytes_on_disk"): 0.05,
        ("chat-200", "p50_turn_s"): 0.6,
        ("chat-200", "history_s"): 0.1,
        ("chat-200-delta", "bytes_on_disk"): 0.8,
        ("chat-200-delta", "history_s"): 0.3,
    }
    for workload in ("chat-200", "chat-200-delta"):
        w = results.get(workload, {})
        for key, label in (
            ("total_s", "total"),
            ("p50_turn_s", "p50/turn"),
            ("bytes_on_disk", "bytes"),
            ("get_state_s", "get_state"),
            ("history_s", "history"),
        ):
            r = ratio(w.get(OURS, {}).get(key), w.get(REF, {}).get(key))
            if r:
                bars.append((workload, label, r, targets.get((workload, key))))
    w = results.get("conc-32", {})
    r = ratio(w.get(AOURS, {}).get("invokes_per_s"), w.get(AREF, {}).get("invokes_per_s"))
    if r:
        bars.append(("conc-32", "s/invoke\n(1/throughput)", 1 / r, 1 / 3))
    for t in compute_targets(results, p):
        if t["target"] in (
            "conc-32 client saver CPU per invoke",
            "conc-32 Postgres CPU per invoke",
        ):
            if t["value"]:
                label = (
                    "client saver\nCPU/invoke"
                    if "client" in t["target"]
                    else "Postgres\nCPU/invoke"
                )
                bars.append(("conc-32", label, t["value"], t["bound"]))
    for workload, sizes_key in (("long-20k", "long_sizes"), ("long-20k-graph", "graph_sizes")):
        w = results.get(workload, {})
        big = str(p[sizes_key][-1])
        for key, label, target in (
            ("list_s", "list time", 1.0),
            ("list_peak_traced_bytes", "list mem", None),
            ("get_state_s", "get time", 0.8),
            ("get_state_peak_traced_bytes", "get mem", None),
        ):
            r = ratio(get(w.get(OURS), f"sizes.{big}.{key}"), get(w.get(REF), f"sizes.{big}.{key}"))
            if r:
                bars.append((workload, f"{label}\n@ {int(big):,}", r, target))
        r = ratio(get(w.get(OURS), "put_per_s"), get(w.get(REF), "put_per_s"))
        if r:
            bars.append((workload, "s/put\n(1/puts per s)", 1 / r, 1.0))
    return bars


def write_chart(path: Path, results: dict, p: dict, meta: dict) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'); no chart written"
    bars = chart_bars(results, p)
    if not bars:
        return "no ours/PostgresSaver ratios to chart"
    colors = {
        "chat-200": "#4c72b0",
        "chat-200-delta": "#55a868",
        "conc-32": "#c44e52",
        "long-20k": "#8172b2",
        "long-20k-graph": "#937860",
    }
    xs, x, prev = [], 0.0, None
    for workload, *_ in bars:
        if prev is not None and workload != prev:
            x += 0.8
        xs.append(x)
        x += 1
        prev = workload
    fig, ax = plt.subplots(figsize=(max(8, len(bars) * 0.7), 5.5))
    ax.bar(xs, [b[2] for b in bars], color=[colors[b[0]] for b in bars], width=0.8)
    for xi, (_, _, value, target) in zip(xs, bars):
        ax.annotate(
            fmt_ratio(value),
            (xi, value),
            ha="center",
            va="bottom",
            fontsize=7,
            xytext=(0, 2),
            textcoords="offset points",
        )
        if target is not None:
            ax.plot(
                [xi - 0.4, xi + 0.4], [target, target], color="black", linestyle="--", linewidth=1.2
            )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    span = [b[2] for b in bars] + [b[3] for b in bars if b[3] is not None] + [1.0]
    ax.set_ylim(min(span) / 2, max(span) * 2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xticks(xs)
    ax.set_xticklabels([b[1] for b in bars], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("ours / PostgresSaver (lower is better, log scale)")
    ax.set_title(
        f"langgraph-colosseum vs langgraph-checkpoint-postgres, {meta['date'][:10]}"
        + (" (quick mode)" if meta["quick"] else "")
        + "\ndashed: target; grey: parity",
        fontsize=10,
    )
    from matplotlib.patches import Patch

    seen = list(dict.fromkeys(b[0] for b in bars))
    ax.legend(handles=[Patch(color=colors[w], label=w) for w in seen], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return None
