"""chat-200 alone. This script was folded into the suite in `benchmarks/run.py`.

Run:  .venv/bin/python benchmarks/chat200.py [--quick]
(the same as `.venv/bin/python -m benchmarks.run --workloads chat-200 --out chat200`;
see benchmarks/README.md). Results go to benchmarks/results/chat200.{md,json,png}.
"""

from __future__ import annotations

import sys

try:
    from benchmarks.run import main
except ImportError:  # run as a script: benchmarks/ itself is on sys.path
    from run import main  # type: ignore[no-redef]

if __name__ == "__main__":
    sys.exit(main(["--workloads", "chat-200", "--out", "chat200", *sys.argv[1:]]))
