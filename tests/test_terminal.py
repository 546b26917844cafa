"""The terminal summary's lines of one profile and their colours (no torch, no terminal)."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from pytest_fxprof.views.report import HintJSON, ProfileRecord, ProfileReportJSON, profile_report
from pytest_fxprof.views.terminal import profile_lines
from tests.test_report import checked, result


def record(status: str, report: ProfileReportJSON, summary: str = "t.py::test [call0]: ...") -> ProfileRecord:
    return {"test_id": "t.py::test", "key": "call0", "status": status, "summary": summary, "report": report}


def compared() -> ProfileRecord:
    profile, c = checked({"relu": 3.0, "fc": 0.5}, {"relu": 3.0, "fc": 0.5})
    return record(c.status.value, profile_report("t.py::test", "call0", c.status.value, profile, c))


def test_a_compared_profile_shows_its_three_worst_nodes_coloured_by_verdict() -> None:
    lines = profile_lines(compared())
    assert lines[0] == ("t.py::test [call0]: ...", "red")
    rows = [(text.split(), colour) for text, colour in lines[1:]]
    assert len(rows) == 3
    assert [r[0][0] for r in rows] == ["relu", "conv1", "softmax"]  # worst ratio first (ties in graph order)
    assert rows[0][0][-3:] == ["x3.00", "+40%", "slower"]
    assert [r[1] for r in rows] == ["red", "green", "green"]
    assert all(text.startswith("    ") for text, _ in lines[1:])


def test_with_verbose_every_node_slowest_first_then_the_hints() -> None:
    rec = compared()
    rec["report"]["hints"] = [
        cast("HintJSON", {"kind": "memory-bound", "message": "relu takes a lot", "nodes": ["relu"]})
    ]
    lines = profile_lines(rec, verbose=True)
    header = lines[1][0].split()
    assert header[:4] == ["node", "target", "module", "shape"]
    assert header[-4:] == ["baseline", "ratio", "band", "verdict"]
    rows = [text.split()[0] for text, _ in lines[3:-1]]
    assert rows == ["conv1", "fc", "relu", "softmax", "tiny", "x"]  # every node, slowest first
    colours = {text.split()[0]: colour for text, colour in lines[3:-1]}
    assert (colours["fc"], colours["relu"], colours["conv1"]) == ("yellow", "red", "green")  # faster warns
    assert lines[-1] == ("    hint: relu takes a lot", "cyan")


def test_a_recorded_profile_shows_no_comparison_columns() -> None:
    profile = result()
    rec = record("recorded", profile_report("t.py::test", "call0", "recorded", profile, None))
    assert profile_lines(rec) == [("t.py::test [call0]: ...", "green")]  # nothing to rank without a baseline
    lines = profile_lines(rec, verbose=True)
    assert lines[1][0].split()[-3:] == ["median", "spread", "share"]
    assert all(colour is None for _, colour in lines[1:])


def test_profiles_without_usable_nodes_show_only_their_line() -> None:
    missing = record("missing", profile_report("t.py::test", "call0", "missing", result(), None))
    assert profile_lines(missing) == [("t.py::test [call0]: ...", "yellow")]  # nothing to rank without a baseline
    verbose = profile_lines(missing, verbose=True)  # measured all the same: every node, and the hints
    assert verbose[1][0].split()[-3:] == ["median", "spread", "share"]
    assert len(verbose) == 1 + 2 + len(result().nodes) + len(result().hints)
    empty = record("recorded", profile_report("t.py::test", "call0", "recorded", result(nodes=()), None))
    assert profile_lines(empty, verbose=True) == [("t.py::test [call0]: ...", "green")]


def test_hints_come_from_measured_profiles_only() -> None:
    profile = result({"relu": 3.0})
    (hint,) = profile.hints  # relu, 15 % of the model, does no matrix work
    assert (hint.kind, hint.nodes) == ("memory-bound", ("relu",))
    measured = profile_report("t.py::test", "call0", "recorded", profile, None)["hints"]
    assert [(h["kind"], h["nodes"], h["time_ns"]) for h in measured] == [("memory-bound", ["relu"], 150_000)]
    unmeasured = replace(profile, measured=False)
    assert profile_report("t.py::test", "call0", "unmeasured", unmeasured, None)["hints"] == []


def test_a_node_added_since_the_baseline_ranks_by_its_whole_time_and_is_called_added() -> None:
    rec = compared()
    relu = next(n for n in rec["report"]["nodes"] if n["name"] == "relu")
    # what the report holds for a node the baseline does not have
    del relu["baseline_ns"], relu["ratio"], relu["band"], relu["verdict"], relu["gates"]
    worst = [text.split() for text, _ in profile_lines(rec)[1:]]
    assert worst[0][0] == "relu"  # its whole time is what the change added: more than any compared node lost
    assert worst[0][-1] == "added"
    assert len(worst) == 3
    verbose = {text.split()[0]: text.split() for text, _ in profile_lines(rec, verbose=True)[3:]}
    assert verbose["relu"][-1] == "added"
