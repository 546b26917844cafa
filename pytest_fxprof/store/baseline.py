"""Baseline files: one JSON file per test, read and checked whole, and the directory that holds them.

Owns the mapping from test id to file name, the checks of a file as a whole (empty, merge-conflict markers, not
JSON, another schema version) and the errors that name the fix; the JSON's shapes are ``schema``'s and its fields'
checks ``validation``'s. Files are written in ``files.dumps``'s encoding (recording the same data twice gives the
same bytes) and atomically (``files.write_atomic``).

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_fxprof.records.measurement import BaselineEntry
from pytest_fxprof.store.files import TooLargeError, dumps, loads, read_text, stale_temporaries, write_atomic
from pytest_fxprof.store.schema import SCHEMA_VERSION, EntryJSON, FileJSON, entry_to_json, run_to_json
from pytest_fxprof.store.validation import ShapeError, entry_from_json, member

SUFFIX = ".json"
MAX_SLUG = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_CONFLICT = re.compile(r"^(<<<<<<<|>>>>>>>|=======)( |$)", re.MULTILINE)


class BaselineError(Exception):
    """A baseline file that cannot be used. The message names the file, the problem and the fix."""

    def __init__(self, path: Path, problem: str, fix: str) -> None:
        super().__init__(f"{path}: {problem}. {fix}")
        self.path = path
        self.problem = problem


class NewerSchemaError(BaselineError):
    """The file was written by a newer pytest-fxprof; it is never read, nor overwritten, by this one."""


@dataclass(frozen=True)
class BaselineFile:
    """A test's baselines, one entry per ``fxprof`` call (keyed by its name or call number)."""

    test_id: str
    entries: Mapping[str, BaselineEntry]


def parse(text: str, path: Path) -> BaselineFile:
    """Validate a baseline file's text; raise ``BaselineError`` naming what is wrong."""
    rerecord = "Fix or delete it, then record it again with `pytest --fxprof-update`"
    if not text.strip():
        raise BaselineError(path, "the file is empty (an interrupted write or a bad checkout?)", rerecord)
    if _CONFLICT.search(text):
        raise BaselineError(
            path,
            "the file contains git merge-conflict markers",
            "Resolve the conflict by keeping one side (or re-record it with `pytest --fxprof-update`)",
        )
    try:
        raw = loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            path, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}; truncated?)", rerecord
        ) from None
    except ValueError as exc:
        raise BaselineError(path, f"the file is not a pytest-fxprof baseline: {exc}", rerecord) from None
    try:
        version = member(raw, "schema_version", int, "")
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(
                path,
                f"it has schema version {version}, newer than the {SCHEMA_VERSION} this pytest-fxprof reads",
                "Upgrade pytest-fxprof to the version that wrote it",
            )
        if version < 1:
            raise ShapeError(f"schema_version {version} is not a version pytest-fxprof ever wrote")
        test_id = member(raw, "test_id", str, "")
        entries_raw = member(raw, "entries", dict, "")
        entries = {str(k): entry_from_json(v, f"entries[{k!r}]") for k, v in sorted(entries_raw.items())}
    except ShapeError as exc:
        raise BaselineError(path, f"the file is not a pytest-fxprof baseline: {exc}", rerecord) from None
    return BaselineFile(test_id=test_id, entries=entries)


def render(baseline: BaselineFile) -> str:
    data: FileJSON = {
        "schema_version": SCHEMA_VERSION,
        "test_id": baseline.test_id,
        "entries": {k: entry_to_json(v) for k, v in baseline.entries.items()},
    }
    return dumps(data)


def file_name(test_id: str) -> str:
    """A safe, collision-free file name for a test id: only ``[A-Za-z0-9._-]`` survive (no path can escape the
    directory), cut to ``MAX_SLUG`` characters, never starting with a dot; a hash of the whole id keeps ids apart."""
    slug = _UNSAFE.sub("_", test_id).strip("._-")[:MAX_SLUG].rstrip("._-") or "test"
    digest = hashlib.sha256(test_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{slug}-{digest}{SUFFIX}"


MAX_BYTES = 64 << 20
"""A baseline file larger than this (64 MiB) is refused unread."""


def read_baseline(path: Path) -> BaselineFile:
    """The baseline in the file at ``path``, a plain file of the directory; ``BaselineError`` for anything else
    (a symbolic link, a file too large, unreadable or malformed), ``FileNotFoundError`` when there is none."""
    if path.is_symlink():
        raise BaselineError(
            path,
            f"it is a symbolic link (to {os.readlink(path)}), not a baseline file of this directory",
            "Replace the link with the file itself, or delete it and record again with `pytest --fxprof-update`",
        )
    try:
        text = read_text(path, MAX_BYTES)
    except FileNotFoundError:
        raise
    except TooLargeError as exc:
        raise BaselineError(
            path,
            f"it is too large to be a baseline ({exc})",
            "Delete it and record again with `pytest --fxprof-update`",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(path, f"cannot be read ({exc})", "Check the file's permissions and encoding") from None
    return parse(text, path)


@dataclass(frozen=True)
class BaselineStore:
    """The baseline directory."""

    directory: Path

    def path_for(self, test_id: str) -> Path:
        return self.directory / file_name(test_id)

    def load(self, test_id: str) -> BaselineFile | None:
        """The test's baselines, None if it has none; ``BaselineError`` if its file is unusable."""
        path = self.path_for(test_id)
        try:
            baseline = read_baseline(path)
        except FileNotFoundError:
            return None
        if baseline.test_id != test_id:
            raise BaselineError(
                path,
                f"it belongs to test {baseline.test_id!r}, not {test_id!r}",
                "It was copied or renamed by hand; delete it and record again with `pytest --fxprof-update`",
            )
        return baseline

    def write(self, baseline: BaselineFile) -> Path:
        path = self.path_for(baseline.test_id)
        write_atomic(path, render(baseline))
        return path

    def remove_stale_temporaries(self) -> list[Path]:
        """Delete the temporary files that writers killed before their rename left here; return them."""
        removed = []
        for path in stale_temporaries(self.directory):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
        return removed

    def recorded_tests(self) -> Iterator[tuple[Path, str | None]]:
        """Every baseline file with the test id it holds (None where the file cannot be parsed)."""
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            try:
                yield path, read_baseline(path).test_id
            except (BaselineError, OSError):
                yield path, None

    @staticmethod
    def problem_of(path: Path) -> str:
        """Why ``path`` cannot be read as a baseline (``recorded_tests`` gave it no test id), or "" if it can."""
        try:
            read_baseline(path)
        except BaselineError as exc:
            return exc.problem
        except OSError as exc:
            return f"cannot be read ({exc.strerror or exc})"
        return ""


def as_file(test_id: str, entries: Mapping[str, BaselineEntry]) -> BaselineFile:
    return BaselineFile(test_id=test_id, entries=dict(sorted(entries.items())))


__all__ = [  # with what other modules import from here that ``schema`` and ``validation`` define
    "MAX_BYTES", "SCHEMA_VERSION", "SUFFIX", "BaselineError", "BaselineFile", "BaselineStore", "EntryJSON", "FileJSON",
    "NewerSchemaError", "as_file", "entry_from_json", "entry_to_json", "file_name", "parse", "read_baseline",
    "render", "run_to_json",
]  # fmt: skip
