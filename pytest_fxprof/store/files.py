"""Files the plugin writes: whole or not at all (``write_atomic``, and the clean-up of what a killed writer left),
in one JSON encoding (``dumps``), read back strictly and within a size limit (``loads``, ``read_text``), so that no
file, however malformed, costs more than one clear error.

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

MAX_INT = 2**64 - 1
"""No integer in a file the plugin writes is larger (times are nanoseconds: 2**64 is 584 years); a larger one is
a damaged file, and would overflow the arithmetic that reads it."""

TEMPORARY = re.compile(r"^\.(?P<stem>.*)\.(?P<pid>\d+)\.[^.]+\.tmp$")
"""The name of ``write_atomic``'s temporary file: hidden, its target's stem, the writer's process id, a random
part, ``.tmp``."""


class TooLargeError(OSError):
    """A file larger than anything the plugin writes of its kind."""


def dumps(data: object) -> str:
    """The one JSON encoding every file of the plugin uses."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _reject_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a number this format allows", name, 0)


class _Repeated(dict[str, Any]):
    """An object in which a key appeared twice (``loads`` says where, once it knows the object's place)."""

    repeated = ""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and not isinstance(out, _Repeated):
            out = _Repeated(out)
            out.repeated = key
        out[key] = value
    return out


def _problem(data: Any) -> str:
    """What ``loads`` refuses in parsed JSON, where it lies (``entries.call0.runs[0].total_ns``), or ""."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:  # not recursive: the parser admits more nesting than a recursive walk would
        where, value = stack.pop()
        if isinstance(value, _Repeated):
            return f"the key {value.repeated!r} appears twice in one object ({where or 'at the top'})"
        if isinstance(value, dict):
            stack.extend((_member(where, str(k)), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            digits = str(abs(value))
            return f"{where or 'the value'} holds an integer of {len(digits)} digits ({digits[:12]}...), beyond 64 bits"
    return ""


def _member(where: str, key: str) -> str:
    """Where an object's member lies, as the baseline's own errors write it: ``entries['0'].runs``."""
    if not key.isidentifier():
        return f"{where}[{key!r}]"
    return f"{where}.{key}" if where else key


def loads(text: str) -> Any:
    """JSON as the plugin writes it: ``ValueError`` for NaN or Infinity, an integer beyond 64 bits or a key twice
    in one object (each named with where it lies), or nesting too deep to read (``json.JSONDecodeError``, a kind
    of it, where the text is not JSON)."""
    try:
        data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("it is nested too deeply to be a file pytest-fxprof wrote") from None
    problem = _problem(data)
    if problem:
        raise ValueError(problem)
    return data


def read_text(path: Path, limit: int) -> str:
    """The file's text; ``TooLargeError`` for one over ``limit`` bytes, without reading it."""
    size = path.stat().st_size
    if size > limit:
        raise TooLargeError(f"{size / 2**20:.0f} MiB, more than the {limit / 2**20:.0f} MiB limit for such a file")
    return path.read_text(encoding="utf-8")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:40]}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # the mode a plain open() would give, not mkstemp's owner-only one
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def unwritable(directory: Path) -> str:
    """Why files cannot be written in ``directory`` (created where missing), or "" if they can: tried with a
    temporary file in the directory or, where it does not exist yet, in the nearest folder above it that does."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".fxprof-probe.{os.getpid()}.", suffix=".tmp", dir=existing)
    except OSError as exc:
        return f"{existing} cannot be written: {exc.strerror or exc}"
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)
    return ""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()
"""Read once, at import: reading it sets it for an instant, which would race with other threads' files."""


def stale_temporaries(directory: Path) -> list[Path]:
    """Temporary files of ``write_atomic`` in ``directory`` whose writer is no longer running (killed between
    the write and the rename); a live writer's are left alone."""
    return left_by_killed(directory, ".*.tmp", TEMPORARY)


def left_by_killed(directory: Path, glob: str, name: re.Pattern[str]) -> list[Path]:
    """The paths in ``directory`` that ``glob`` finds and whose name ``name`` matches, with its ``pid`` group the
    process that made them, no longer running: what a run that was killed left behind. Links are never taken."""
    if not directory.is_dir():
        return []
    out = []
    for path in sorted(directory.glob(glob)):
        match = name.match(path.name)
        if match is not None and not path.is_symlink() and not running(int(match["pid"])):
            out.append(path)
    return out


def running(pid: int) -> bool:
    """Whether the process ``pid`` still runs (this one does; one this user cannot signal is taken to)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except OSError:  # pragma: no cover - a platform that cannot tell: keep the file
        return True
    return True
