"""The targets of several full runs side by side, with their median.

    python -m benchmarks.medians latest session27-a session27-b

reads `benchmarks/results/STEM.json` for each stem (as `benchmarks.run --out
STEM` wrote it) and prints a Markdown table: one row per target, the value of
each run, the median and whether the median meets the bound. A target a run
did not measure is left blank there, and its median is over the others.

    python -m benchmarks.medians --figures latest session27-a session27-b

adds the two figures each ratio divides, ours and the reference's (the run's
basis names which), each the median over the runs, in the figure's units.
"""

from __future__ import annotations

import argparse
import json
import operator
import statistics
import sys
from pathlib import Path

from benchmarks.common import fmt
from benchmarks.report import compute_targets

RESULTS = Path(__file__).resolve().parent / "results"
COMPARE = {"<=": operator.le, ">=": operator.ge}


def load_targets(stem: str) -> dict[str, dict]:
    data = json.loads((RESULTS / f"{stem}.json").read_text())
    # Computed again from the run's results, so that a run written before a
    # target recorded its two figures has them too.
    targets = compute_targets(data["results"], data["params"])
    return {t["target"]: t for t in targets}


def median_figure(known: list[dict], key: str) -> str:
    """The median of the runs' `key` figure ("ours" or "reference"), in its units."""
    values = [t[key] for t in known if t.get(key) is not None]
    return fmt(statistics.median(values), known[0]["kind"]) if values else ""


def table(stems: list[str], figures: bool = False) -> str:
    runs = [load_targets(stem) for stem in stems]
    names = list(dict.fromkeys(name for run in runs for name in run))
    head = ["target", "bound", *stems, "median", "status (median)"]
    if figures:
        head[2:2] = ["ours (median)", "reference (median)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        found = [run.get(name) for run in runs]
        known = [t for t in found if t is not None and t["value"] is not None]
        if not known:
            continue
        first = known[0]
        median = statistics.median(t["value"] for t in known)
        met = COMPARE[first["op"]](median, first["bound"])
        op = "≤" if first["op"] == "<=" else "≥"
        cells = [f"{t['value']:.2f}" if t and t["value"] is not None else "" for t in found]
        row = [name, f"{op} {first['bound']:g}", *cells, f"**{median:.2f}**",
               "met" if met else "missed"]  # fmt: skip
        if figures:
            row[2:2] = [median_figure(known, "ours"), median_figure(known, "reference")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stems", nargs="+", help="result files' stems in benchmarks/results")
    parser.add_argument(
        "--figures", action="store_true", help="add the medians of ours and the reference's figures"
    )
    args = parser.parse_args(argv)
    print(table(args.stems, figures=args.figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
