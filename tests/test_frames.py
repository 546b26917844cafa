"""DataFrames of profiles, roll-ups and comparisons, their CSV, and JSON reports read back (no torch)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from pytest_fxprof.views.frames import read_report
from pytest_fxprof.views.report import ProfileRecord, profile_report, write_report
from tests.test_report import checked, result


def record(test_id: str = "t.py::test", key: str = "call0") -> tuple[ProfileRecord, pd.DataFrame, pd.DataFrame]:
    profile, c = checked({"relu": 3.0}, {"relu": 3.0})
    profile = replace(profile, comparison=c)
    report = profile_report(test_id, key, c.status.value, profile, c)
    rec: ProfileRecord = {"test_id": test_id, "key": key, "status": c.status.value, "summary": "", "report": report}
    return rec, profile.to_dataframe(), profile.to_dataframe(by="verdict")


def test_the_node_frame_of_a_compared_profile_has_each_nodes_decision() -> None:
    _, nodes, _ = record()
    relu = nodes.set_index("node").loc["relu"]
    assert (relu["baseline_us"], relu["median_us"], relu["ratio"]) == (50.0, 150.0, 3.0)
    assert (relu["verdict"], relu["gates"]) == ("slower", True)
    assert set(nodes["verdict"]) == {"ok", "slower"}
    assert nodes["band"].notna().all()


def test_an_uncompared_profile_has_the_same_columns_left_empty() -> None:
    compared = record()[1]
    plain = result().to_dataframe()
    assert list(plain.columns) == list(compared.columns)
    assert plain[["baseline_us", "ratio", "band", "verdict", "gates"]].isna().all().all()
    verdicts = result().to_dataframe(by="verdict")
    assert len(verdicts) == 0
    assert "reason" in verdicts.columns


def test_the_verdict_frame_has_every_node_aggregate_and_the_total() -> None:
    _, nodes, verdicts = record()
    assert list(verdicts["kind"]) == ["node"] * len(nodes) + ["module", "total"]
    stem = verdicts.set_index("name").loc["stem"]
    assert (stem["verdict"], stem["baseline_us"], stem["current_us"]) == ("slower", 430.0, 530.0)
    assert stem["reason"].startswith("x1.23 beyond band +10%")
    total = verdicts.set_index("kind").loc["total"]
    assert (total["verdict"], total["ratio"]) == ("ok", 1.0)


@pytest.mark.parametrize("by", ["node", "module", "op", "verdict"])
def test_csv_holds_the_frame(tmp_path: Path, by: str) -> None:
    profile, c = checked({"relu": 3.0})
    profile = replace(profile, comparison=c)
    profile.to_csv(tmp_path / "p.csv", by=by)
    back = pd.read_csv(tmp_path / "p.csv", keep_default_na=False, na_values=[""])
    frame = profile.to_dataframe(by=by)
    assert list(back.columns) == list(frame.columns)
    assert len(back) == len(frame)
    numeric = [c for c in frame.columns if pd.api.types.is_float_dtype(frame[c])]
    for column in numeric:
        assert list(back[column]) == pytest.approx(list(frame[column]), nan_ok=True)


def test_an_unknown_frame_is_refused() -> None:
    with pytest.raises(ValueError, match="by must be 'node', 'module', 'op' or 'verdict'"):
        result().to_dataframe(by="graph")


def test_a_report_read_back_matches_the_profiles_frames(tmp_path: Path) -> None:
    first, nodes, verdicts = record("t.py::test_b")
    second, *_ = record("t.py::test_a", key="small")
    write_report(tmp_path / "r.json", "check", [first, second], [])
    back = read_report(tmp_path / "r.json")
    assert list(back.columns[:2]) == ["test_id", "key"]
    assert list(back.columns[2:]) == list(nodes.columns)
    assert back["test_id"].iloc[0] == "t.py::test_a"  # the report's order
    mine = back[back["test_id"] == "t.py::test_b"].drop(columns=["test_id", "key"]).reset_index(drop=True)
    for column in ("node", "module", "verdict"):
        assert list(mine[column]) == list(nodes[column])
    for column in ("median_us", "baseline_us", "ratio", "band"):
        assert list(mine[column]) == pytest.approx(list(nodes[column]), rel=1e-3)
    decided = read_report(tmp_path / "r.json", by="verdict")
    mine = decided[decided["test_id"] == "t.py::test_b"]
    assert list(mine["kind"]) == list(verdicts["kind"])
    assert list(mine["verdict"]) == list(verdicts["verdict"])
    modules = read_report(tmp_path / "r.json", by="module")
    assert modules["name"].iloc[0] == "<model>"


def test_reading_something_that_is_not_a_report_says_so(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text('{"schema_version": 1, "test_id": "t", "entries": {}}', encoding="utf-8")
    with pytest.raises(ValueError, match="not a report written by --fxprof-report"):
        read_report(path)
    with pytest.raises(ValueError, match="by must be one of"):
        read_report(path, by="graph")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"report_version": 1, "profiles": [{"test_id": "t", "key": "k"}]}', "a profile lacks a field"),
        ('{"report_version": 1, "profiles": [', "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "it is nested too deeply"),
        ('{"report_version": 1, "report_version": 1, "profiles": []}', "the key 'report_version' appears twice"),
    ],
)
def test_a_damaged_report_names_the_file_and_the_fix(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        read_report(path)
    assert str(path) in str(info.value)
    assert "write it again with pytest --fxprof --fxprof-report PATH" in str(info.value)
