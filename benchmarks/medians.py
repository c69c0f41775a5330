"""The targets of several full runs side by side, with their median.

    python -m benchmarks.medians latest session27-a session27-b

reads `benchmarks/results/STEM.json` for each stem (as `benchmarks.run --out
STEM` wrote it) and prints a Markdown table: one row per target, the value of
each run, the median and whether the median meets the bound. A target a run
did not measure is left blank there, and its median is over the others.
"""

from __future__ import annotations

import argparse
import json
import operator
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COMPARE = {"<=": operator.le, ">=": operator.ge}


def load_targets(stem: str) -> dict[str, dict]:
    data = json.loads((RESULTS / f"{stem}.json").read_text())
    return {t["target"]: t for t in data["targets"]}


def table(stems: list[str]) -> str:
    runs = [load_targets(stem) for stem in stems]
    names = list(dict.fromkeys(name for run in runs for name in run))
    head = ["target", "bound", *stems, "median", "status (median)"]
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
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stems", nargs="+", help="result files' stems in benchmarks/results")
    args = parser.parse_args(argv)
    print(table(args.stems))
    return 0


if __name__ == "__main__":
    sys.exit(main())
