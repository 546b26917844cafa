"""``fxprof merge``: one JSON report from the reports of several shards of a run.

Owns the command's arguments and output. Shards must not overlap (a test and key in two reports is refused, naming
both) and must come from runs of one mode, checked against one commit where they were checked against a revision:
the one each report records (``against``), or else the short sha its profiles' labels show (``main (1a2b3c4)``).
Nothing is written where an output is one of the inputs or a report is given twice.

Must not import torch or pytest.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_fxprof.cli.inputs import EXIT_OK, REPORT_AGAIN, error, read_report
from pytest_fxprof.store.files import dumps, write_atomic
from pytest_fxprof.views.html import write_html
from pytest_fxprof.views.markdown import markdown_summary, write_markdown
from pytest_fxprof.views.report import REPORT_VERSION, AgainstJSON, ProfileReportJSON, ReportJSON


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="Merge the JSON reports of several shards into one",
        description="Merge JSON reports of --fxprof-report (one per shard of a run split over several machines) "
        "into OUT (a new path, not one of the reports), and optionally write the Markdown summary and the HTML "
        "report of the whole. The shards must be of one mode, checked against one commit where they were checked "
        "against a revision, and must not hold the same test and key twice. Where the shards' time went is added "
        "up.",
    )
    p.add_argument("out", metavar="OUT", help="The merged report to write")
    p.add_argument("reports", metavar="REPORT", nargs="+", help="The shards' reports")
    p.add_argument("--markdown", metavar="PATH", help="Also write the Markdown summary of the merged report")
    p.add_argument("--html", metavar="PATH", help="Also write the HTML report of the merged report")
    p.set_defaults(run=run)


def _one_run(modes: dict[str, Path], versions: dict[int, Path], first: Path) -> None:
    """Refuse shards of runs of different modes, or written by versions whose reports differ (a version 1 report's
    total is the instrumented pass, a later one's the plain call)."""
    if len(versions) > 1:
        shown = ", ".join(f"version {v} ({p})" for v, p in sorted(versions.items()))
        raise error(
            first,
            f"the reports come from versions of pytest-fxprof whose reports differ: {shown}",
            "Merge the shards of one run, each written by the same pytest-fxprof",
        )
    if len(modes) > 1:
        shown = ", ".join(f"{m or '?'} ({p})" for m, p in modes.items())
        raise error(first, f"the reports come from runs of different modes: {shown}", "Merge one run's shards")


def run(args: argparse.Namespace) -> int:
    reports = [Path(name) for name in args.reports]
    outputs = [(Path(args.out), "the merged report (OUT)")]
    outputs += [(Path(p), f"the --{flag} file") for flag, p in (("markdown", args.markdown), ("html", args.html)) if p]
    _refuse_clashes(reports, outputs)
    profiles: list[ProfileReportJSON] = []
    unused: set[str] = set()
    owner: dict[tuple[str, str], Path] = {}
    modes: dict[str, Path] = {}
    versions: dict[int, Path] = {}
    sides: list[_Side] = []
    spent: dict[str, float] = {}
    for path in reports:
        _, raw = read_report(path)
        for name, seconds in (raw.get("time") or {}).items():  # the shards' measuring time, added up
            if isinstance(seconds, int | float) and not isinstance(seconds, bool):
                spent[name] = spent.get(name, 0) + seconds
        modes.setdefault(str(raw.get("mode", "")), path)
        versions.setdefault(int(raw["report_version"]), path)
        for profile in raw["profiles"]:
            ident = (str(profile["test_id"]), str(profile["key"]))
            if ident in owner:
                raise error(
                    path,
                    f"{ident[0]} [{ident[1]}] is also in {owner[ident]}",
                    "Merge the reports of disjoint shards (each test in one shard)",
                )
            owner[ident] = path
            profiles.append(profile)
        unused.update(str(u) for u in raw.get("unused_baselines", []))
        sides += _sides(raw, path)
    _one_run(modes, versions, reports[0])
    against = _one_side(sides, reports[0])
    mode = next(iter(modes))
    if mode == "against":
        known = {s.path for s in sides}
        for path in reports:
            if path not in known:
                print(
                    f"{path}: does not record which revision it was checked against (written before reports "
                    "recorded it, and none of its profiles was compared): merged unchecked",
                    file=sys.stderr,
                )
    profiles.sort(key=lambda p: (p["test_id"], p["key"]))
    merged: ReportJSON = {
        "report_version": REPORT_VERSION,
        "mode": mode,
        "profiles": profiles,
        "unused_baselines": sorted(unused),
    }
    if against is not None:
        merged["against"] = against.copy()
    if spent:
        merged["time"] = {name: round(seconds, 3) for name, seconds in spent.items()}
    write_atomic(Path(args.out), dumps(merged))
    written = [Path(args.out)]
    if args.markdown:
        written += write_markdown(Path(args.markdown), markdown_summary(mode, profiles, sorted(unused)), {})
    if args.html:
        write_html(Path(args.html), mode, profiles, sorted(unused))
        written.append(Path(args.html))
    counts = Counter(p["status"] for p in profiles)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no profile"
    print(f"merged {len(args.reports)} report(s), {len(profiles)} profile(s) ({summary}) into {args.out}")
    for path in written[1:]:
        print(f"wrote {path}")
    return EXIT_OK


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same file where both exist (links included), else the same path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        pass
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # a loop of symbolic links
        return False


def _refuse_clashes(reports: Sequence[Path], outputs: Sequence[tuple[Path, str]]) -> None:
    """Refuse, before anything is read or written, a report given twice (a shard meant once and another forgotten,
    more likely than a shard meant twice: never merged as one) and an output that is an input or another output."""
    for i, path in enumerate(reports):
        for earlier in reports[:i]:
            if _same_file(path, earlier):
                also = "" if str(path) == str(earlier) else f" (as {earlier} too)"
                raise error(path, f"is given twice{also}", "Pass each shard's report once")
    for i, (path, what) in enumerate(outputs):
        for report in reports:
            if _same_file(path, report):
                raise error(
                    path,
                    f"{what} would overwrite the report {report} it merges",
                    "The first path is where the merged report goes (fxprof merge OUT REPORT...): pass a new path "
                    "for it",
                )
        for other, named in outputs[:i]:
            if _same_file(path, other):
                raise error(
                    path, f"{what} would overwrite {named}", "Write each output to its own path: pass a new path"
                )


SHORT_SHA = 7
LABEL_SHA = re.compile(r"\(([0-9a-f]{7})\)")
"""The short sha in an old side's label: ``origin/main (1a2b3c4)``, ``HEAD (1a2b3c4) under Python ...``."""


@dataclass(frozen=True)
class _Side:
    """What a shard was checked against: its label, and the commit and Python the report records at its top
    (``exact``) or its profiles' label alone (a report written before reports recorded the commit)."""

    path: Path
    label: str
    commit: str = ""
    python: str = ""
    record: AgainstJSON | None = None

    @property
    def exact(self) -> bool:
        return self.record is not None

    @property
    def short_sha(self) -> str:
        """The commit as the label shows it (``main (1a2b3c4)``), or the record's, shortened alike; "" if neither."""
        if self.commit:
            return self.commit[:SHORT_SHA]
        found = LABEL_SHA.search(self.label)
        return found.group(1) if found else ""

    def shown(self) -> str:
        commit = f" = {self.commit[:12]}" if self.commit else ""
        return f"{self.label}{commit} in {self.path}"


def _sides(raw: Mapping[str, Any], path: Path) -> list[_Side]:
    """What the report at ``path`` was checked against: the record at its top, else its profiles' labels."""
    top = raw.get("against")
    if top is not None:
        fields = AgainstJSON.__annotations__
        if not isinstance(top, dict) or any(not isinstance(top.get(name), str) for name in fields):
            raise error(
                path,
                f"the report's 'against' should be an object of strings ({', '.join(fields)})",
                f"It is not as pytest-fxprof writes it: {REPORT_AGAIN}",
            )
        record: AgainstJSON = {
            "label": top["label"],
            "ref": top["ref"],
            "commit": top["commit"],
            "python": top["python"],
        }
        return [_Side(path, record["label"], record["commit"], record["python"], record)]
    labels = dict.fromkeys(str(p["against"]) for p in raw["profiles"] if p.get("against"))
    return [_Side(path, label) for label in labels]


def _one_side(sides: Sequence[_Side], where: Path) -> AgainstJSON | None:
    """The one old side the shards were checked against (its record, None where no report records one); an error
    naming each where they differ: the commits (and Pythons) where every report records them, else the labels."""
    keys: dict[object, _Side]
    if all(s.exact for s in sides):
        keys = {(s.commit, s.python): s for s in sides}
        differ = "commits" if len({s.commit for s in sides}) > 1 else "Pythons"
    else:  # a report written before reports recorded the commit: the short sha its labels end with
        keys = {s.short_sha or s.label: s for s in sides}
        differ = "revisions"
    if len(keys) > 1:
        shown = ", ".join(s.shown() for s in keys.values())
        raise error(
            where,
            f"the reports were checked against different {differ}: {shown}",
            "Merge the shards of one run, all checked against one commit",
        )
    return next((s.record for s in sides if s.record is not None), None)
