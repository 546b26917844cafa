"""Source lines: the user's code behind a node or an error.

Owns which stack frames are the user's (those outside torch and outside this package) and how their files
are written (an installed package's from the package down, the user's relative to the working directory).

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import re
import traceback
from pathlib import Path

import torch
import torch.fx

TORCH_DIR = str(Path(torch.__file__).parent) + "/"  # not torchvision
OWN_DIR = str(Path(__file__).parents[1]) + "/"
"""This package's own files, every sub-package's (never the user's code)."""
DYNAMO_DIRS = tuple(TORCH_DIR + sub for sub in ("_dynamo/", "_functorch/", "fx/", "utils/", "_compile.py"))
"""Where the frames between a dynamo-compiled frame and the graph it calls live."""


def user_frame(exc: BaseException) -> str | None:
    """The innermost traceback line in the user's code (outside torch and this plugin)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename.startswith((TORCH_DIR, OWN_DIR)):
            return f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return None


def source_line(node: torch.fx.Node) -> str:
    """``file:line`` of the user's code that made ``node`` (the innermost frame outside torch), or ``""``."""
    trace = node.meta.get("stack_trace")
    if not isinstance(trace, str):
        return ""
    found = ""
    for line in trace.splitlines():
        match = _FRAME.match(line)
        if match and not match["file"].startswith((TORCH_DIR, OWN_DIR)):
            found = f"{_shorten(match['file'])}:{match['line']}"
    return found


_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _shorten(path: str) -> str:
    """An installed package's file from the package down; the user's relative to the working directory."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.rpartition(marker)[2]
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(Path.cwd()))
    return path
