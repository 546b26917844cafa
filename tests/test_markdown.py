"""Unit tests of ``pytest_fxprof.views.markdown``: the pull-request summary of hand-made profile reports (no torch)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from pytest_fxprof.judge.decision import compare
from pytest_fxprof.records.measurement import NodeInfo, NodeStats, Tolerances, node_key
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.views.judged_json import NodeRefJSON
from pytest_fxprof.views.markdown import ITEMS_SHOWN, PROFILES_SHOWN, markdown_summary, write_markdown
from pytest_fxprof.views.report import HintJSON, ProfileReportJSON, profile_report
from tests.records_for_tests import CAPTURE, ENV, POLICY, PROTOCOL

TOLERANCES = Tolerances(0.1, 0.15)
GRAPH: tuple[tuple[NodeInfo, int], ...] = (
    (NodeInfo(node_key("call_module", "stem.conv", "Conv2d", 0), "conv", "call_module", "Conv2d", "stem.conv",
              "model.py:12"), 400_000),
    (NodeInfo(node_key("call_function", "stem", "torch.relu", 0), "relu", "call_function", "torch.relu", "stem",
              "model.py:13"), 100_000),
    (NodeInfo(node_key("call_module", "fc", "Linear", 0), "fc", "call_module", "Linear", "fc", "model.py:14"),
     450_000),
    (NodeInfo(node_key("call_method", "", "softmax", 0), "softmax", "call_method", "softmax", "", ""), 50_000),
)  # fmt: skip


def result(factors: Mapping[str, float] | None = None, passes: int = 3) -> ProfileResult:
    factors = factors or {}
    times = [round(ns * factors.get(n.name, 1.0)) for n, ns in GRAPH]
    busy = sum(times)
    stats = tuple(
        NodeStats(info=n, median_ns=t, spread_ns=0, share=t / busy, samples_ns=(t,) * passes, shape="float32[1, 8]")
        for (n, _), t in zip(GRAPH, times, strict=True)
    )
    return ProfileResult(
        name="Net",
        nodes=stats,
        total_samples_ns=(busy,) * passes,
        instrumented_samples_ns=(busy + 10_000,) * passes,
        reference_samples_ns=(500_000,) * passes,
        environment=ENV,
        protocol=PROTOCOL,
        capture=CAPTURE,
    )


BASELINE = result().entry(TOLERANCES)


def checked(factors: Mapping[str, float], test_id: str = "t.py::test_net", key: str = "call0") -> ProfileReportJSON:
    current = result(factors)
    c = compare(BASELINE, current.entry(TOLERANCES), POLICY)
    return profile_report(test_id, key, c.status.value, current, c)


def recorded(test_id: str = "t.py::test_net") -> ProfileReportJSON:
    return profile_report(test_id, "call0", "recorded", result(), None)


REGRESSION = checked({"conv": 2.0}, test_id="t.py::test_slow")
PASSED = checked({}, test_id="t.py::test_fine")


def cells(row: str) -> list[str]:
    """A table row's cells, split as GitHub splits them: at every pipe not escaped by a backslash."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_a_regression_names_what_failed_and_where() -> None:
    text = markdown_summary("check", [PASSED, REGRESSION], [])
    lines = text.splitlines()
    assert lines[0] == "## pytest-fxprof: 1 regression, 1 passed"
    header = lines.index("| Test | Status | Total | Worst node |")
    rows = [cells(line) for line in lines[header + 2 : header + 4]]
    assert rows[0][:2] == ["`t.py::test_slow [call0]`", "**regression**"]  # the one that needs attention first
    assert rows[1][:2] == ["`t.py::test_fine [call0]`", "pass"]
    assert rows[0][3] == f"`conv` x{REGRESSION['nodes'][0]['ratio']:.2f}"
    assert rows[0][2].startswith(fmt_ns(REGRESSION["total"]["current_ns"]) + ", x")
    block = text[text.index("### `t.py::test_slow [call0]`: regression") :]
    # where the time went leads: the slowed node, its module around it
    assert "Where: node conv (Conv2d in stem.conv): 400.0 us -\\> 800.0 us = x2.00\n- in: stem x1.80" in block
    assert "Failed by:\n- node `conv` in `stem.conv` x2.00" in block
    assert "- module `stem` x" in block
    assert "led by `conv` 400.0 us -> 800.0 us" in block
    row = next(cells(line) for line in block.splitlines() if line.startswith("| `conv`"))
    conv = REGRESSION["nodes"][0]
    assert row == [
        "`conv`",
        "`stem.conv`",
        f"{fmt_ns(conv['baseline_ns'])} -> {fmt_ns(conv['current_ns'])}",
        "x2.00",
        f"+{conv['band']:.0%}",
        "`model.py:12`",
    ]
    assert "Total: " in block
    assert "t.py::test_fine [call0]`: regression" not in text


def test_the_failure_block_lists_only_nodes_that_failed_the_test() -> None:
    """softmax is slower too; as a node too small to fail the test alone it is a warning, not a failure."""
    profile = checked({"conv": 2.0, "softmax": 3.0})
    softmax = next(n for n in profile["nodes"] if n["name"] == "softmax")
    assert softmax["verdict"] == "slower"
    softmax["gates"] = False  # what the report says of a node under the gating size
    text = markdown_summary("check", [profile], [])
    block = text[text.index(": regression\n") : text.index("<details>") if "<details>" in text else None]
    rows = [cells(line)[0] for line in block.splitlines() if line.startswith("| `")]
    assert rows == ["`conv`"]
    total = next(line for line in block.splitlines() if line.startswith("Total: "))
    assert "against the reference workload (machine x" in total


def test_a_passing_run_has_no_failure_block() -> None:
    text = markdown_summary("check", [{**PASSED, "hints": []}], [])
    assert text.startswith("## pytest-fxprof: 1 passed\n")
    assert "Failed by" not in text
    assert "<details>" not in text
    assert text.endswith("|\n")


def test_a_recorded_run_shows_times_and_the_slowest_node() -> None:
    text = markdown_summary("update", [recorded("a.py::t"), recorded("b.py::t")], [])
    lines = text.splitlines()
    assert lines[0] == "## pytest-fxprof (baselines updated): 2 recorded"
    assert "| Test | Status | Total | Slowest node |" in lines
    row = cells(next(line for line in lines if line.startswith("| `a.py::t")))
    assert row[1] == "recorded"
    assert row[2] == fmt_ns(1_000_000)  # the plain call (the instrumented pass took 1.01 ms)
    assert row[3] == "`fc` 450.0 us (45%)"
    assert "x" not in row[2]


def test_a_mismatch_says_why_it_was_not_compared() -> None:
    current = replace(result(), environment=replace(ENV, threads=4))
    c = compare(BASELINE, current.entry(TOLERANCES), POLICY)
    report = profile_report("t.py::test_env", "call0", c.status.value, current, c)
    text = markdown_summary("check", [report], [])
    assert text.startswith("## pytest-fxprof: 1 mismatch\n")
    assert "### `t.py::test_env [call0]`: mismatch" in text
    assert "- threads: baseline 1, this run 4" in text


def test_missing_and_unused_baselines_are_visible() -> None:
    missing = profile_report("t.py::test_new", "call0", "missing", result(), None)
    text = markdown_summary("check", [PASSED, missing], ["b/gone.json", "a/old.json (test not found)"])
    assert text.startswith("## pytest-fxprof: 1 missing a baseline, 1 passed\n")
    assert "| `t.py::test_new [call0]` | **missing baseline** |" in text
    assert text.rstrip().endswith("**Unused baselines** (2): `a/old.json (test not found)`, `b/gone.json`")


def test_pipes_and_line_breaks_cannot_break_the_table() -> None:
    odd = checked({}, test_id="t.py::test_net[a|b-c\nd]", key="k|1")
    text = markdown_summary("check", [odd], [])
    row = next(line for line in text.splitlines() if line.startswith("| `t.py"))
    assert cells(row)[0] == r"`t.py::test_net[a\|b-c d] [k\|1]`"
    assert len(cells(row)) == 4


def test_text_cannot_become_markup() -> None:
    report: ProfileReportJSON = {**PASSED, "warned": [{"kind": "node", "name": "x", "module": "", "ratio": 1.2}]}
    report["hints"] = [
        cast(
            "HintJSON",
            {"kind": "memory-bound", "message": "<root> spends *most* | of it", "time_ns": 2_000, "share": 0.2},
        ),
    ]
    text = markdown_summary("check", [report], [])
    assert r"- `t.py::test_fine [call0]`: \<root\> spends \*most\* \| of it" in text
    assert "<root>" not in text


def test_warnings_and_hints_fold_into_details_blocks() -> None:
    warned: ProfileReportJSON = {**PASSED, "warned": [{"kind": "node", "name": "fc", "module": "fc", "ratio": 1.08}]}
    warned["hints"] = [
        cast("HintJSON", {"kind": "low-flops", "message": f"hint {i:02}", "time_ns": 1_000 * i, "share": 0.01})
        for i in range(30)
    ]
    text = markdown_summary("check", [warned], [])
    assert "<details>\n<summary>Warnings (1)</summary>\n\n- `t.py::test_fine [call0]`: node `fc` in `fc` x1.08" in text
    hints = text[text.index("<summary>Hints (30)</summary>") :]
    shown = re.findall(r"\n- `t.py::test_fine \[call0\]`: hint (\d+)", hints)
    assert shown == [f"{i:02}" for i in range(29, 29 - ITEMS_SHOWN, -1)]  # the most time at stake first
    assert f"- ... {30 - ITEMS_SHOWN} more\n\n</details>" in hints


def test_a_changed_graph_is_a_warning() -> None:
    report: ProfileReportJSON = {**PASSED, "added": [cast("NodeRefJSON", {"name": "new"})], "removed": []}
    text = markdown_summary("check", [report], [])
    assert "graph changed since the baseline, 1 node(s) added, 0 removed" in text


def test_a_new_graph_break_is_a_warning_of_its_own() -> None:
    report: ProfileReportJSON = {**PASSED, "added": [], "removed": [], "graphs": {"baseline": 1, "current": 2}}
    text = markdown_summary("check", [report], [])
    assert "graph changed since the baseline, 0 node(s) added, 0 removed, captured graphs: 1 -> 2 (1 new graph" in text


def test_long_runs_are_capped() -> None:
    profiles = [checked({}, test_id=f"t.py::test_{i:03}") for i in range(PROFILES_SHOWN + 7)]
    text = markdown_summary("check", profiles, [])
    assert text.count("\n| `t.py::test_") == PROFILES_SHOWN
    assert "\n\n... 7 more profiles" in text  # after a blank line, or GitHub would make it a table row


def test_an_empty_run_and_an_unknown_mode() -> None:
    assert markdown_summary("check", [], []) == "## pytest-fxprof: no profiled test\n"
    with pytest.raises(ValueError, match="mode must be one of check, update"):
        markdown_summary("sample", [], [])


# write_markdown --------------------------------------------------------------------------------------


def test_appending_to_the_step_summary_twice_keeps_both(tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("# Earlier step\n", encoding="utf-8")
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    first = markdown_summary("check", [REGRESSION], [])
    second = markdown_summary("check", [PASSED], [])
    assert write_markdown(tmp_path / "out.md", first, env) == [tmp_path / "out.md", summary]
    assert write_markdown(tmp_path / "out.md", second, env) == [tmp_path / "out.md", summary]
    assert summary.read_text(encoding="utf-8") == "# Earlier step\n\n" + first + "\n" + second
    assert (tmp_path / "out.md").read_text(encoding="utf-8") == second  # the file itself is replaced


def test_without_the_variable_nothing_is_appended(tmp_path: Path) -> None:
    text = markdown_summary("check", [PASSED], [])
    assert write_markdown(tmp_path / "out.md", text, {}) == [tmp_path / "out.md"]
    assert write_markdown(tmp_path / "again.md", text, {"GITHUB_STEP_SUMMARY": ""}) == [tmp_path / "again.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.md", "out.md"]


def test_what_was_there_is_kept_apart_by_a_blank_line(tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("<details>\n<summary>other tool</summary>\n\nx\n</details>", encoding="utf-8")
    text = markdown_summary("check", [PASSED], [])
    write_markdown(None, text, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert summary.read_text(encoding="utf-8").endswith("</details>\n\n" + text)


def test_the_step_summary_alone(tmp_path: Path) -> None:
    summary = tmp_path / "new_summary.md"
    text = markdown_summary("check", [PASSED], [])
    assert write_markdown(None, text, {"GITHUB_STEP_SUMMARY": str(summary)}) == [summary]
    assert summary.read_text(encoding="utf-8") == text
    assert write_markdown(None, text, {}) == []


def test_against_a_revision_the_summary_speaks_of_the_revision_not_of_a_baseline() -> None:
    """That mode reads no baseline and corrects by no reference workload: each line names the old side."""
    profile: ProfileReportJSON = {**checked({"conv": 2.0}), "against": "origin/main (1a2b3c4)", "pairs": 6}
    profile["added"] = [cast("NodeRefJSON", {"name": "new"})]
    text = markdown_summary("against", [profile], [])
    total = next(line for line in text.splitlines() if line.startswith("Total: "))
    assert "at origin/main (1a2b3c4), per pair of old and new processes" in total
    assert "reference workload" not in text
    assert "| Slower node | Module | Old -> new |" in text
    assert "graph changed since origin/main (1a2b3c4), 1 node(s) added" in text
    assert "the baseline" not in text
    mismatch: ProfileReportJSON = {
        **PASSED,
        "status": "mismatch",
        "against": "origin/main (1a2b3c4)",
        "mismatches": ["inputs: x"],
    }
    assert "other inputs, another mode or another state of torch than at origin/main (1a2b3c4)" in markdown_summary(
        "against", [mismatch], []
    )


def test_an_undecided_profile_is_counted_in_the_heading_and_says_what_it_could_not_decide() -> None:
    undecided: ProfileReportJSON = {
        **PASSED,
        "status": "undecided",
        "noisy": "node conv: x1.22 beyond band +5%, but the pairs disagree",
    }
    text = markdown_summary("check", [PASSED, undecided], [])
    assert text.startswith("## pytest-fxprof: 1 undecided, 1 passed\n")
    assert "| **undecided (no verdict)** |" in text
    assert "- `t.py::test_fine [call0]`: undecided, too noisy to decide: node conv: x1.22 beyond band +5%" in text


def test_a_compiled_models_kernels_graph_breaks_and_compile_time_are_listed() -> None:
    detail = "torch.compile (Inductor): 12 kernel calls in 6 graph calls (5 graph breaks), compiled in 1.8 s"
    report = checked({})
    report["capture"] = {**report["capture"], "method": "inductor", "graphs": 6, "detail": detail}
    text = markdown_summary("check", [report, checked({})], [])
    assert "<summary>Compiled models (1)</summary>" in text
    assert f"- `t.py::test_net [call0]`: {detail}" in text
