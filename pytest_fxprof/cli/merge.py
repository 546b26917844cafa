"""``fxprof merge``: one JSON report from the reports of several shards of a run.

Owns the command's arguments and output. A suite split over several machines (CI matrix shards, each with
``--fxprof-report``) merges its reports into one, and can write the Markdown summary and the HTML report of
the whole from it. Shards must not overlap (a profile of one test and key in two reports is refused, naming
both) and must come from runs of one mode, against one revision where they were checked against one.

Must not import torch or pytest.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_fxprof.cli.inputs import EXIT_OK, Report, error, load
from pytest_fxprof.store.files import dumps, loads, read_text, write_atomic
from pytest_fxprof.views.html import write_html
from pytest_fxprof.views.markdown import markdown_summary, write_markdown
from pytest_fxprof.views.report import REPORT_MAX_BYTES, REPORT_VERSION


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="Merge the JSON reports of several shards into one",
        description="Merge JSON reports of --fxprof-report (one per shard of a run split over several machines) "
        "into OUT, and optionally write the Markdown summary and the HTML report of the whole. The shards must "
        "be of one mode and must not hold the same test and key twice.",
    )
    p.add_argument("out", metavar="OUT", help="The merged report to write")
    p.add_argument("reports", metavar="REPORT", nargs="+", help="The shards' reports")
    p.add_argument("--markdown", metavar="PATH", help="Also write the Markdown summary of the merged report")
    p.add_argument("--html", metavar="PATH", help="Also write the HTML report of the merged report")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    profiles: list[dict[str, Any]] = []
    unused: set[str] = set()
    owner: dict[tuple[str, str], Path] = {}
    modes: dict[str, Path] = {}
    for name in args.reports:
        path = Path(name)
        checked = load(path)
        if not isinstance(checked, Report):
            raise error(path, "is a baseline file, not a report", "Pass the reports written by --fxprof-report")
        raw = loads(read_text(path, REPORT_MAX_BYTES))
        modes.setdefault(str(raw.get("mode", "")), path)
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
    if len(modes) > 1:
        shown = ", ".join(f"{m or '?'} ({p})" for m, p in modes.items())
        raise error(
            args.reports[0], f"the reports come from runs of different modes: {shown}", "Merge one run's shards"
        )
    revisions = {str(p["against"]): owner[(str(p["test_id"]), str(p["key"]))] for p in profiles if p.get("against")}
    if len(revisions) > 1:
        shown = ", ".join(f"{r} ({p})" for r, p in revisions.items())
        raise error(
            args.reports[0],
            f"the reports were checked against different revisions: {shown}",
            "Merge the shards of one run, all checked against one revision",
        )
    mode = next(iter(modes))
    profiles.sort(key=lambda p: (p["test_id"], p["key"]))
    merged = {"report_version": REPORT_VERSION, "mode": mode, "profiles": profiles, "unused_baselines": sorted(unused)}
    write_atomic(Path(args.out), dumps(merged))
    written = [Path(args.out)]
    if args.markdown:
        written += write_markdown(Path(args.markdown), markdown_summary(mode, profiles, sorted(unused)), {})
    if args.html:
        write_html(Path(args.html), mode, profiles, sorted(unused))
        written.append(Path(args.html))
    counts: dict[str, int] = {}
    for p in profiles:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no profile"
    print(f"merged {len(args.reports)} report(s), {len(profiles)} profile(s) ({summary}) into {args.out}")
    for path in written[1:]:
        print(f"wrote {path}")
    return EXIT_OK
