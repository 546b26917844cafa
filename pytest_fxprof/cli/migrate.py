"""``fxprof migrate``: rewrite the baseline files of older schema versions in the current one.

Owns the command's arguments and output: a whole directory rewritten at once, without measuring, so that the change
of version is one commit of its own. A file is rewritten only when every value it holds is in the new text; one
that would lose a value, an unreadable one and one of a newer version are listed and never written.

Must not import torch or pytest.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pytest_fxprof.cli.inputs import DEFAULT_BASELINE_DIR, EXIT_OK, error, refuse_listed
from pytest_fxprof.store.baseline import MAX_BYTES, SCHEMA_VERSION, SUFFIX, BaselineError, read_baseline, render
from pytest_fxprof.store.files import loads, read_text, write_atomic


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "migrate",
        help=f"Rewrite older baseline files in schema version {SCHEMA_VERSION}",
        description=f"Rewrite every baseline file of DIR written in an older schema version in version "
        f"{SCHEMA_VERSION}, keeping every value it holds (the new version only adds fields). Files already in "
        f"version {SCHEMA_VERSION} are left alone; unreadable ones, those of a newer version and those holding a "
        "field this pytest-fxprof does not know are listed and never written. Without migrating, a file is "
        "rewritten the next time --fxprof-update records its test.",
    )
    p.add_argument(
        "directory",
        nargs="?",
        default=DEFAULT_BASELINE_DIR,
        metavar="DIR",
        help="The baseline directory (default: baselines)",
    )
    p.add_argument("--dry-run", action="store_true", help="Only list the files that would be rewritten")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        raise error(directory, "no such directory", "Pass the baseline directory: fxprof migrate DIR")
    migrated: list[tuple[Path, int, str]] = []
    current = 0
    refused: list[tuple[Path, str]] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        try:
            baseline = read_baseline(path)
            original = loads(read_text(path, MAX_BYTES))
        except BaselineError as exc:
            refused.append((path, exc.problem))
            continue
        except (OSError, ValueError) as exc:
            refused.append((path, f"cannot be read ({exc})"))
            continue
        version = original["schema_version"]
        if version == SCHEMA_VERSION:
            current += 1
            continue
        text = render(baseline)
        lost = lost_value(original, json.loads(text))
        if lost:
            refused.append((path, f"rewriting it would lose {lost}, a field this pytest-fxprof does not know"))
            continue
        migrated.append((path, version, text))
    print(f"{current} baseline file(s) in {directory} are in schema version {SCHEMA_VERSION} already")
    if migrated:
        verb = "would rewrite" if args.dry_run else "rewrote"
        print(f"{verb} {len(migrated)} file(s) in schema version {SCHEMA_VERSION}:")
        for path, version, text in migrated:
            if not args.dry_run:
                write_atomic(path, text)
            print(f"  {path} (version {version})")
    else:
        print("nothing to migrate")
    refuse_listed(
        directory,
        refused,
        "file(s) not migrated (never written here)",
        "could not be migrated",
        "Fix them, or record their tests again with `pytest --fxprof-update`",
    )
    return EXIT_OK


def lost_value(old: object, new: object, where: str = "") -> str:
    """Where ``new`` lacks or changes a value of ``old`` (``entries['call0'].runs[0].extra``), or "" if it holds
    every one (it may add fields). The schema version is expected to change."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key, value in old.items():
            inner = f"{where}[{key!r}]" if where else str(key)
            if key not in new:
                return inner
            if not where and key == "schema_version":
                continue
            lost = lost_value(value, new[key], inner)
            if lost:
                return lost
        return ""
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return where or "the file"
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            lost = lost_value(a, b, f"{where}[{i}]")
            if lost:
                return lost
        return ""
    same = old == new and isinstance(old, bool) == isinstance(new, bool)  # 1 and 1.0 are one number, True is not
    return "" if same else where or "the file"
