"""Integration tests of a baseline's history through ``pytest --fxprof-update``, run through pytester.

The inner runs are those of ``tests/test_plugin.py`` (in-process, on its fake clock, so that every run of one
model records the same times); the date a recording gets is ``store.history.now``, replaced here with a
fixed sequence of days (the xdist test, whose workers are other processes, checks relative facts instead).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import pytest_fxprof.measure.profiler  # noqa: F401  (kept imported across in-process runs, like torch)
from pytest_fxprof.store import history
from pytest_fxprof.store.baseline import parse, render
from tests.test_plugin import fxprof_section, load, only_file, run, write_tests

TEST = """
def test_a(fxprof):
    profile(fxprof, "a")
"""
GROWN = """
class Grown(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Net("a")
        self.extra = nn.ReLU()

    def forward(self, x):
        return self.extra(self.net(x))


def test_a(fxprof):
    fxprof(Grown(), torch.randn(4, 8), leaf_modules=[Slow])
"""
DAYS = [f"2026-11-{d:02d}T12:00:00Z" for d in range(1, 10)]
LABEL = "test_perf.py::test_a [call0]"


@pytest.fixture
def days(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each ``--fxprof-update`` of a test is dated the next of ``DAYS``; yields the dates given so far."""
    given: list[str] = []

    def now() -> str:
        given.append(DAYS[len(given)])
        return given[-1]

    monkeypatch.setattr(history, "now", now)
    return given


def update(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    result = run(pytester, "--fxprof-update", *args)
    assert result.ret == pytest.ExitCode.OK, "\n".join(result.outlines)
    return result


def entry(pytester: pytest.Pytester) -> dict[str, Any]:
    data = load(only_file(pytester.path / "baselines"))
    assert data["schema_version"] == 2
    out: dict[str, Any] = data["entries"]["call0"]
    return out


def dates(raw: dict[str, Any]) -> list[str]:
    return [raw["recorded"], *(r["date"] for r in raw.get("history", []))]


def own(raw: dict[str, Any]) -> dict[str, Any]:
    """The entry's own recording as a history item holds it."""
    return {"date": raw.get("recorded", ""), **{k: raw[k] for k in ("environment", "protocol", "runs")}}


def test_updates_keep_the_history_up_to_the_setting(pytester: pytest.Pytester, days: list[str]) -> None:
    write_tests(pytester, TEST)
    update(pytester)
    first = entry(pytester)
    assert dates(first) == [DAYS[0]]
    assert "history" not in first  # written only when there is one

    update(pytester)
    second = entry(pytester)
    assert dates(second) == [DAYS[1], DAYS[0]]
    assert second["history"] == [own(first)]  # the previous recording, whole

    for _ in range(4):
        update(pytester)
    assert dates(entry(pytester)) == [DAYS[5], DAYS[4], DAYS[3], DAYS[2], DAYS[1]]  # 5 by default

    update(pytester, "--fxprof-history=2")
    assert dates(entry(pytester)) == [DAYS[6], DAYS[5]]

    pytester.makeini("[pytest]\nfxprof_history = 3\n")
    update(pytester)
    update(pytester)
    assert dates(entry(pytester)) == [DAYS[8], DAYS[7], DAYS[6]]
    path = only_file(pytester.path / "baselines")
    text = path.read_text(encoding="utf-8")
    assert render(parse(text, path)) == text


def test_the_same_update_writes_the_same_bytes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "now", lambda: DAYS[0])
    write_tests(pytester, TEST)
    update(pytester)
    update(pytester)
    path = only_file(pytester.path / "baselines")
    before = path.read_bytes()
    update(pytester)
    once = path.read_bytes()
    assert once != before  # one more recording
    path.write_bytes(before)
    update(pytester)
    assert path.read_bytes() == once


def test_a_baseline_of_another_environment_is_set_aside_and_its_history_kept(
    pytester: pytest.Pytester, days: list[str]
) -> None:
    write_tests(pytester, TEST)
    update(pytester)
    update(pytester)
    path = only_file(pytester.path / "baselines")
    data = load(path)
    real_cpu = data["entries"]["call0"]["environment"]["cpu"]
    data["entries"]["call0"]["environment"]["cpu"] = "Another CPU"  # the latest recorded elsewhere
    path.write_text(json.dumps(data), encoding="utf-8")

    result = update(pytester)
    assert dates(entry(pytester)) == [DAYS[2], DAYS[0]]  # the recording of this machine before it, kept
    note = (
        f"{LABEL}: 1 earlier recording(s) set aside, measured otherwise (environment cpu 'Another CPU' -> "
        f"{real_cpu!r} in its recording of {DAYS[1]}); the 1 measured as this one was kept"
    )
    assert note in fxprof_section(result)

    result = update(pytester)  # the same environment again: all kept, nothing said
    assert dates(entry(pytester)) == [DAYS[3], DAYS[2], DAYS[0]]
    assert not any("set aside" in line or "restarted" in line for line in fxprof_section(result))


def test_a_history_that_holds_a_recording_of_another_environment_keeps_the_others(
    pytester: pytest.Pytester, days: list[str]
) -> None:
    """A merge resolved by hand put a recording of another torch into the history: the bands never learnt from it
    (``BaselineEntry.comparable_recordings``), and the next update sets it aside, keeps the others and says so."""
    write_tests(pytester, TEST)
    for _ in range(3):
        update(pytester)
    path = only_file(pytester.path / "baselines")
    data = load(path)
    torch = data["entries"]["call0"]["environment"]["torch"]
    data["entries"]["call0"]["history"][1]["environment"]["torch"] = "2.4.0+merged"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert [r.environment.torch for r in parse(path.read_text(), path).entries["call0"].recordings] == [
        torch,
        torch,
        "2.4.0+merged",
    ]

    result = update(pytester)
    assert dates(entry(pytester)) == [DAYS[3], DAYS[2], DAYS[1]]
    note = (
        f"{LABEL}: 1 earlier recording(s) set aside, measured otherwise (environment torch '2.4.0+merged' -> "
        f"{torch!r} in its recording of {DAYS[0]}); the 2 measured as this one was kept"
    )
    assert note in fxprof_section(result)

    result = update(pytester)  # nothing foreign left: kept, nothing said
    assert dates(entry(pytester)) == [DAYS[4], DAYS[3], DAYS[2], DAYS[1]]
    assert not any("set aside" in line for line in fxprof_section(result))


def test_a_changed_graph_restarts_the_history(pytester: pytest.Pytester, days: list[str]) -> None:
    write_tests(pytester, TEST)
    update(pytester)
    write_tests(pytester, GROWN)
    result = update(pytester)
    assert dates(entry(pytester)) == [DAYS[1]]
    assert (
        f"{LABEL}: history restarted, the graph changed (5 node(s) added, 4 removed); "
        "its 1 earlier recording(s) were not kept" in fxprof_section(result)
    )


def test_a_version_1_baseline_is_rewritten_as_version_2_keeping_its_recording(
    pytester: pytest.Pytester, days: list[str]
) -> None:
    write_tests(pytester, TEST)
    update(pytester)
    path = only_file(pytester.path / "baselines")
    data = load(path)
    data["schema_version"] = 1
    del data["entries"]["call0"]["recorded"]
    path.write_text(json.dumps(data), encoding="utf-8")
    v1 = data["entries"]["call0"]

    update(pytester)
    now = entry(pytester)
    assert dates(now) == [DAYS[1], ""]  # the version 1 recording is kept, undated
    assert now["history"] == [own(v1)]
    assert {k: v for k, v in now.items() if k not in ("recorded", "history", "runs")} == {
        k: v for k, v in v1.items() if k != "runs"
    }


def test_history_1_keeps_none(pytester: pytest.Pytester, days: list[str]) -> None:
    write_tests(pytester, TEST)
    update(pytester)
    result = update(pytester, "--fxprof-history=1")
    assert dates(entry(pytester)) == [DAYS[1]]
    assert "history" not in entry(pytester)
    assert not any("history restarted" in line for line in fxprof_section(result))


def test_a_bad_history_setting_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TEST)
    result = run(pytester, "--fxprof-update", "--fxprof-history=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*command line: history must be at least 1, not '0'*"])
    help_text = "\n".join(pytester.runpytest("--help").outlines)
    assert "--fxprof-history=N" in help_text
    assert "fxprof_history" in help_text


def test_history_survives_xdist(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TEST)
    update(pytester, "-n", "2")
    first = entry(pytester)
    update(pytester, "-n", "2")
    second = entry(pytester)
    assert len(second["history"]) == 1
    assert second["history"][0] == own(first)
    assert second["recorded"] >= first["recorded"]
