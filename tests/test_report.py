"""Unit tests of ``pytest_fxprof.views.report``: the JSON view of one profile and its decision (no torch)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_fxprof.judge.decision import compare
from pytest_fxprof.records.measurement import NodeInfo, NodeStats, Tolerances
from pytest_fxprof.records.verdicts import Comparison
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.store.baseline import run_to_json
from pytest_fxprof.views.judged_json import JudgedJSON
from pytest_fxprof.views.report import REPORT_VERSION, item_tone, profile_report, write_report
from tests.records_for_tests import CAPTURE, ENV, POLICY, PROTOCOL, node

# A 1 ms graph: relu and softmax are 5 % of it (they gate), tiny 2 % (it does not); stem is the only aggregate.
NODES: tuple[tuple[NodeInfo, int], ...] = (
    (node("x", "x", op="placeholder"), 0),
    (node("conv1", "stem.conv", "stem.conv", op="call_module"), 380_000),
    (node("relu", "torch.relu", "stem"), 50_000),
    (node("fc", "fc", "head.fc", op="call_module"), 500_000),
    (node("softmax", "softmax", op="call_method"), 50_000),
    (node("tiny", "torch.neg"), 20_000),
)
TOLERANCES = Tolerances(0.1, 0.15)


def result(factors: Mapping[str, float] | None = None, **changes: Any) -> ProfileResult:
    factors = factors or {}
    times = [round(ns * factors.get(info.name, 1.0)) for info, ns in NODES]
    busy = sum(times)
    stats = tuple(
        NodeStats(info=info, median_ns=t, spread_ns=t // 10, share=t / busy, samples_ns=(t,) * 3)
        for (info, _), t in zip(NODES, times, strict=True)
    )
    base = ProfileResult(
        name="Net",
        nodes=stats,
        total_samples_ns=(1_000_000,),
        instrumented_samples_ns=(1_500_000,) * 3,
        reference_samples_ns=(500_000,) * 3,
        environment=ENV,
        protocol=PROTOCOL,
        capture=CAPTURE,
    )
    return replace(base, **changes)


BASELINE = result().entry(TOLERANCES)


def checked(first: Mapping[str, float], *confirmations: Mapping[str, float]) -> tuple[ProfileResult, Comparison]:
    """A profile measured with ``first``'s factors, confirmed with the others', and its comparison."""
    runs = tuple(result(f).run() for f in confirmations)
    profile = result(first, confirmations=runs, seconds=1.23456)
    return profile, compare(BASELINE, profile.entry(TOLERANCES, runs), POLICY)


def test_report_of_a_confirmed_regression() -> None:
    # relu x3 in both measurements (fails, with its subtree); tiny x3 in both (too small to fail);
    # softmax x2 in the first only (not confirmed)
    profile, c = checked({"relu": 3.0, "tiny": 3.0, "softmax": 2.0}, {"relu": 3.0, "tiny": 3.0})
    report = profile_report("t.py::test", "call0", c.status.value, profile, c)
    assert report["status"] == "regression"
    assert report["remeasured"] is True
    assert report["seconds"] == 1.235
    assert report["measurements"] == 2
    assert report["runs"] == [run_to_json(profile.run()), run_to_json(profile.confirmations[0])]
    assert report["runs"][1]["node_ns"][4] == 50_000  # softmax back to its baseline time
    rows = {row["name"]: row for row in report["nodes"]}
    relu = rows["relu"]
    assert relu["gates"] is True
    assert relu["ratios"] == [3.0, 3.0]
    assert relu["ratio"] == 3.0
    assert relu["confirmed"] is True
    assert relu["verdict"] == "slower"
    assert (relu["speed_factor"], relu["divisor"]) == (1.0, 1.0)
    assert (relu["band"], relu["band_source"], relu["floor"], relu["sigma"]) == (0.4, "floor", 0.4, None)
    assert relu["reason"].endswith("in every measurement (x3.00, x3.00)")
    softmax = rows["softmax"]
    assert (softmax["gates"], softmax["verdict"], softmax["confirmed"]) == (True, "ok", False)
    assert softmax["ratios"] == [2.0, 1.0]
    assert softmax["reason"].startswith("not confirmed: x2.00, x1.00")
    assert (rows["tiny"]["gates"], rows["tiny"]["verdict"], rows["tiny"]["confirmed"]) == (False, "slower", True)
    assert rows["fc"]["confirmed"] is None
    (stem,) = report["aggregates"]
    assert stem == {
        "kind": "module",
        "name": "stem",
        "path": "stem",
        "direction": "",
        "what": "module stem",
        "class": "",
        "instances": [],
        "level": "depth 1",
        "level_items": 1,
        "members": [NODES[1][0].key, NODES[2][0].key],
        "added": [],
        "removed": [],
        "delta_ns": 100_000,
        "baseline_ns": 430_000,
        "current_ns": 530_000,
        "speed_factor": 1.0,
        "divisor": 1.0,
        "gates": True,  # 430 us of about 1 ms: large enough to fail a test alone
        "memory": None,  # these records measured no memory
        "ratio": round(530 / 430, 4),
        "ratios": [round(530 / 430, 4)] * 2,
        "band": 0.1,
        "band_source": "tolerance",
        "verdict": "slower",
        "confirmed": True,
        "reason": stem["reason"],
        "sigma": None,  # one baseline process: no spread measured
        "floor": round(20 / 430, 4),  # the 20 us floor, relative to the subtree
    }
    assert stem["reason"].startswith("x1.23 beyond band +10% (tolerance), +100.0 us")
    total = report["total"]
    # the compared figures are both the plain call; the instrumented pass is beside them
    assert (total["baseline_ns"], total["current_ns"], total["instrumented_ns"]) == (1_000_000, 1_000_000, 1_500_000)
    assert total["plain_ns"] == 1_000_000
    assert (total["overhead_before"], total["overhead_after"]) == (1.5, 1.5)
    assert (total["ratios"], total["verdict"], total["confirmed"]) == ([1.0, 1.0], "ok", None)
    assert report["flagged"] == [
        {"kind": "node", "name": "relu", "module": "stem", "ratio": 3.0},
        {
            "kind": "module",
            "name": "stem",
            "module": "stem",
            "ratio": round(530 / 430, 4),
            "led_by": [{"name": "relu", "module": "stem", "baseline_ns": 50_000, "current_ns": 150_000}],
        },
    ]
    assert report["warned"] == [
        {"kind": "node", "name": "tiny", "module": "", "ratio": 3.0},
        {"kind": "node", "name": "softmax", "module": "", "ratio": 1.0},
    ]
    # what the failure leads with: relu, a node that holds most of the extra time (tiny lost 40 us elsewhere)
    blame = report["blame"]
    assert blame is not None
    assert (blame["kind"], blame["name"], blame["node"], blame["chain"]) == ("node", "stem", "relu", ["stem"])
    assert (blame["baseline_ns"], blame["current_ns"], blame["ratio"]) == (50_000, 150_000, 3.0)
    assert blame["share"] == round(100 / 140, 4)


@pytest.mark.parametrize(
    ("factors", "flagged"),
    [
        pytest.param({}, [], id="unchanged"),
        pytest.param({info.name: 1.3 for info, _ in NODES}, ["total"], id="total"),
        pytest.param({"fc": 2.0}, ["node fc", "total"], id="node-and-total"),
    ],
)
def test_flagged_items_are_what_failed_the_profile(factors: dict[str, float], flagged: list[str]) -> None:
    profile = result(factors, total_samples_ns=(round(1_000_000 * sum_ratio(factors)),))
    c = compare(BASELINE, profile.entry(TOLERANCES), POLICY)
    report = profile_report("t", "k", c.status.value, profile, c)
    assert [f"{f['kind']} {f['name']}".replace("total total", "total") for f in report["flagged"]] == flagged
    assert (report["status"] == "regression") is bool(flagged)
    assert report["measurements"] == 1
    assert report["remeasured"] is False
    assert len(report["runs"]) == 1
    assert all(row.get("confirmed") is None for row in report["nodes"])


def sum_ratio(factors: Mapping[str, float]) -> float:
    return sum(ns * factors.get(info.name, 1.0) for info, ns in NODES) / sum(ns for _, ns in NODES)


def test_report_without_a_comparison_has_no_decision_fields() -> None:
    report = profile_report("t", "k", "recorded", result(seconds=0.5), None)
    assert report["seconds"] == 0.5
    assert report["runs"] == [run_to_json(result().run())]
    for absent in ("aggregates", "flagged", "warned", "measurements", "speed_factor"):
        assert absent not in report
    assert all("gates" not in row and "verdict" not in row for row in report["nodes"])


def test_write_report_sorts_profiles(tmp_path: Path) -> None:
    profile, c = checked({})
    records: list[Any] = [
        {
            "test_id": t,
            "key": "k",
            "status": "pass",
            "summary": "",
            "report": profile_report(t, "k", "pass", profile, c),
        }
        for t in ("b.py::t", "a.py::t")
    ]
    write_report(tmp_path / "r.json", "check", records, ["x.json (gone)"])
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert data["report_version"] == REPORT_VERSION
    assert [p["test_id"] for p in data["profiles"]] == ["a.py::t", "b.py::t"]
    assert data["unused_baselines"] == ["x.json (gone)"]


def test_warned_lists_unconfirmed_aggregates_and_total() -> None:
    # every node x1.3 in the first measurement only: the total and the stem subtree were flagged, then not
    everything = {info.name: 1.3 for info, _ in NODES}
    first = result(everything, total_samples_ns=(1_300_000,))
    runs = (result().run(),)
    profile = replace(first, confirmations=runs)
    c = compare(BASELINE, profile.entry(TOLERANCES, runs), POLICY)
    assert c.status.value == "pass"
    report = profile_report("t", "k", c.status.value, profile, c)
    warned = {f"{w['kind']} {w['name']}" for w in report["warned"]}
    assert "total total" in warned
    assert report["flagged"] == []


@pytest.mark.parametrize(
    ("item", "tone"),
    [
        ({"verdict": "slower", "gates": True, "confirmed": True}, "bad"),
        ({"verdict": "slower", "gates": False, "confirmed": True}, "warn"),  # too small to fail alone
        ({"verdict": "ok", "gates": True, "confirmed": False}, "warn"),  # flagged, then not confirmed
        ({"verdict": "ok", "gates": True, "confirmed": None}, "good"),
        ({"verdict": "faster", "gates": True}, "warn"),
        ({"verdict": "too noisy"}, "warn"),
        ({"verdict": "slower"}, "bad"),  # an aggregate or the total: they always gate
        ({}, "none"),  # a node added since the baseline
    ],
)
def test_every_view_colours_a_decision_the_same_way(item: dict[str, Any], tone: str) -> None:
    assert item_tone(cast("JudgedJSON", item)) == tone


def test_every_status_a_view_names_is_one_of_the_statuses() -> None:
    """One vocabulary: the statuses the views order, colour and word are ``Status`` members, and each status a
    comparison can end in is one the heading of the Markdown summary words."""
    from pytest_fxprof.records.verdicts import JUDGED, Status
    from pytest_fxprof.views import html, markdown, terminal

    named = [
        *markdown.STATUS_WORDS,
        *markdown.ATTENTION,
        *markdown.STATUS_CELLS,
        *html.STATUS_TONES,
        *html.STATUS_ORDER,
        *terminal.STATUS_COLOURS,
    ]
    assert all(isinstance(s, Status) for s in named), [s for s in named if not isinstance(s, Status)]
    assert set(JUDGED) <= set(markdown.STATUS_WORDS)
    # a report holds the status's string, as fxprof merge and diff read it back
    assert json.loads(json.dumps({"status": Status.NOT_RECORDED})) == {"status": "not recorded"}
