"""Worker processes for fault tests: started in a session of their own, killed hard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def spawn(script: Path, *args: str, log: Path) -> subprocess.Popen:
    """Run `script` with `args` in this interpreter; its output goes to `log`."""
    out = log.open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        out.close()


def sigkill(proc: subprocess.Popen) -> None:
    """SIGKILL (no cleanup of any kind), unless it is gone already; then reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
