"""What several bench scripts share: running a child process and reading the JSON object it printed last, and the
fields every result file starts with."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def json_of(argv: Sequence[str], what: str, *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Any:
    """The JSON object on the last line the child ``argv`` printed; exits naming ``what`` and the child's error
    output where it failed."""
    done = subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=cwd, check=False)
    if done.returncode:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def header(script: str, models: Sequence[str]) -> dict[str, Any]:
    """The fields a result file starts with: when, on what machine, by which command, of which models."""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "command": " ".join([f"bench/{script}", *sys.argv[1:]]),
        "models": list(models),
    }
