"""Integration tests of the pytest plugin, run through pytester on tiny generated test files.

Every inner run is in-process (``pytester.runpytest``), so torch is imported here once: pytester restores
``sys.modules`` after each inner run, and torch cannot be imported twice in one interpreter.

Every inner run reads a fake clock (``CLOCK_CONFTEST``, written beside the generated tests, so that xdist
workers and the fresh processes of a recording or a confirmation read it too): each reading is 1 us after the
last, and a model's own work moves it on by a fixed amount. Every time a profile measures (each node, each
pass, the plain forward, the reference workload) is then the same in every process and under any load, so
these tests assert on verdicts without depending on the machine. The gate's behaviour on real clocks is
covered by ``tests/test_end_to_end.py`` and, with numbers, by ``bench/``.

The profiled model is a few ``nn.Linear``/``nn.ReLU`` nodes on a 4x8 tensor (1 us each on the fake clock)
around a leaf module that takes 2 ms, the one node large enough to decide on; it takes 30 ms more where the
test slows it down. Runs that only need to pass use wide tolerances (``LOOSE``): a node, an aggregate or the
total would have to take four times its baseline to fail. Runs that must catch a slowdown use ``DECIDE``: a
+100 % band and a 500 us floor, which leaves every microsecond node and aggregate undecided and only the 2 ms
node and the total decided; the slowdown is 30 ms more in that node, sixteen times its time.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import pytest_fxprof.measure.profiler  # noqa: F401  (kept imported across in-process runs, like torch)
from pytest_fxprof.session.reactions import (
    Confirm,
    OnFaster,
    OnGraphChange,
    OnMismatch,
    OnMissing,
    OnUndecided,
    OnUnused,
    Reactions,
    rerecord_hint,
)

# symbolic capture: no check of the graph against the module; the interpreter engine: no pass measured again
# for preemption (the compiled engine's wall-clock stamps); so the module runs only in the passes counted. Two
# processes: a check against a baseline of one decides nothing (``judge.decision.refuse_lone``)
FAST = (
    # the fake clock slows a model that computes what it computed before: measured, not proven unchanged
    "--fxprof-on-unchanged=measure",
    "--fxprof-processes=2",
    "--fxprof-warmup=1",
    "--fxprof-passes=3",
    "--fxprof-capture=symbolic",
    "--fxprof-engine=interpreter",
)
LOOSE = ("--fxprof-node-tolerance=3", "--fxprof-total-tolerance=3")
BANDS = ("--fxprof-node-tolerance=1", "--fxprof-total-tolerance=1", "--fxprof-floor-us=500")
DECIDE = (*BANDS, "--fxprof-confirm=same")  # a confirmation in this process: no fresh interpreter to start
XDIST = pytest.mark.parametrize(
    "xdist",
    [
        pytest.param([], id="inprocess"),
        pytest.param(["-n", "2"], id="xdist"),
    ],
)
# The plugin is already imported here, so every inner run would warn that it cannot rewrite it.
QUIET = ("-W", "ignore::pytest.PytestAssertRewriteWarning")
SLOW_ENV = "FXPROF_TEST_SLOW"

CLOCK_CONFTEST = '''
"""The fake clock of the inner runs (see tests/test_plugin.py): every time a profile reads is fixed."""

import pytest

import pytest_fxprof.measure.profiler as profiler
from fakeclock import CLOCK


@pytest.fixture(autouse=True)
def _fake_clock(monkeypatch):
    monkeypatch.setattr(profiler, "clock_for", lambda threads, device: ("thread-cpu", CLOCK))
    monkeypatch.setattr(profiler, "WALL_CLOCK", CLOCK)
'''

FAKE_CLOCK = '''
class FakeClock:
    """Nanoseconds: each reading 1 us after the last; ``advance`` is work that takes that long."""

    def __init__(self):
        self.now = 0

    def __call__(self):
        self.now += 1_000
        return self.now

    def advance(self, ns):
        self.now += ns


CLOCK = FakeClock()
'''

MODEL = f'''
import os

import pytest
import torch
from torch import nn

from fakeclock import CLOCK


class Slow(nn.Module):
    """Takes 2 ms on the fake clock per call, 30 ms more when {SLOW_ENV} names its tag (read once, when
    built)."""

    def __init__(self, tag):
        super().__init__()
        self.spin = os.environ.get("{SLOW_ENV}") == tag

    def forward(self, x):
        CLOCK.advance(32_000_000 if self.spin else 2_000_000)
        return x


class Net(nn.Module):
    def __init__(self, tag="none"):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.slow = Slow(tag)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.slow(self.act(self.fc1(x))))


def profile(fxprof, tag="none", **kw):
    return fxprof(Net(tag), torch.randn(4, 8), leaf_modules=[Slow], **kw)
'''

TWO_TESTS = """
def test_a(fxprof):
    profile(fxprof, "a")


def test_b(fxprof):
    profile(fxprof, "b")
"""


# Helpers ---------------------------------------------------------------------------------------------


def write_tests(pytester: pytest.Pytester, body: str, name: str = "test_perf") -> Path:
    return pytester.makepyfile(**{name: MODEL + textwrap.dedent(body)})


CLOCK_FILES = ("conftest.py", "fakeclock.py")
"""What ``runp`` writes beside the generated tests."""


def runp(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An inner run, on the fake clock."""
    pytester.makepyfile(fakeclock=FAKE_CLOCK)
    pytester.makeconftest(CLOCK_CONFTEST)
    return pytester.runpytest(*QUIET, *args)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An inner run with the fast protocol and the wide tolerances."""
    return runp(pytester, *FAST, *LOOSE, *args)


def decide(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An inner run with the fast protocol that decides on the 2 ms node and the total (later args win)."""
    return runp(pytester, *FAST, *DECIDE, *args)


def skip_if_the_machine_was_busy(result: pytest.RunResult) -> None:
    """Skip when a profile was not compared because its reference workload ran beyond MACHINE_FACTOR_LIMIT, or
    because it was measured on a busy machine (undecided: too noisy to decide).

    For runs on real clocks (the end-to-end test): a loaded machine can slow the reference workload of the
    recording or of the check that much; the gate then rightly calls the machine another one, and the run
    can say nothing about what the test checks. The fake clock of this module's runs never does.
    """
    # another machine speed, or a profile the gate would not judge because its passes were disturbed
    signs = (": mismatch (machine speed: ", ": undecided, too noisy to decide (")
    busy = [line for line in result.outlines if any(sign in line for sign in signs)]
    if busy:
        pytest.skip("the machine was too busy to compare profiles: " + "; ".join(busy))


def fxprof_warnings(result: pytest.RunResult) -> list[str]:
    """The fxprof warnings of the inner run's warnings summary, one line each."""
    return [line.split("FxprofWarning: ", 1)[1] for line in result.outlines if "FxprofWarning: " in line]


def baseline_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json"))


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def only_file(directory: Path) -> Path:
    files = baseline_files(directory)
    assert len(files) == 1, files
    return files[0]


def file_of(directory: Path, test_id: str) -> Path:
    matches = [p for p in baseline_files(directory) if load(p)["test_id"] == test_id]
    assert len(matches) == 1, (test_id, baseline_files(directory))
    return matches[0]


def fxprof_section(result: pytest.RunResult) -> list[str]:
    """The lines of the terminal summary's ``fxprof`` section."""
    lines = result.outlines
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"=+ fxprof =+", line)]
    assert len(starts) == 1, "\n".join(lines)
    out = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("=="):
            break
        out.append(line)
    return out


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in baseline_files(directory)}


# Modes -----------------------------------------------------------------------------------------------


def test_plain_run_profiles_once_and_writes_nothing(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        class Count(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                return x


        class Counted(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.count = Count()

            def forward(self, x):
                return self.count(self.fc(x))


        def test_once(fxprof):
            assert fxprof.mode == "off"
            model = Counted()
            result = fxprof(model, torch.randn(4, 8), leaf_modules=[Count])
            # the automatic capture checks its graph against the module (one call each), then one cold pass
            assert model.count.calls == 3
            assert result.measured is False
            assert all(n.flops is None for n in result.nodes)  # counting FLOPs would be another pass


        @pytest.mark.fxprof(capture="symbolic")
        def test_once_as_traced(fxprof):
            model = Counted()
            result = fxprof(model, torch.randn(4, 8), leaf_modules=[Count])
            assert model.count.calls == 1
            assert [n.name for n in result.nodes] == ["fc", "count"]
        """,
    )
    result = runp(pytester)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
    assert not (pytester.path / "baselines").exists()
    result.stdout.no_fnmatch_line("*= fxprof =*")


@XDIST
def test_update_writes_one_file_per_test_then_check_passes(pytester: pytest.Pytester, xdist: list[str]) -> None:
    write_tests(pytester, TWO_TESTS)
    result = run(pytester, "--fxprof-update", *xdist)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
    directory = pytester.path / "baselines"
    files = baseline_files(directory)
    assert len(files) == 2
    ids = {load(p)["test_id"] for p in files}
    assert ids == {"test_perf.py::test_a", "test_perf.py::test_b"}
    for path in files:
        data = load(path)
        assert data["schema_version"] == 2
        assert list(data["entries"]) == ["call0"]
        entry = data["entries"]["call0"]
        assert [n["name"] for n in entry["nodes"]] == ["fc1", "act", "slow", "fc2"]
        assert entry["protocol"] == {"warmup": 1, "passes": 3, "threads": 1, "processes": 2}
        assert len(entry["runs"]) == 2  # this process and a fresh one
        assert entry["environment"]["torch"] == torch.__version__
    section = fxprof_section(result)
    assert "test_perf.py::test_a [call0]: recorded" in section
    assert "test_perf.py::test_b [call0]: recorded" in section
    result.stdout.fnmatch_lines([f"wrote 2 baseline file(s) to {directory}"])

    before = snapshot(directory)
    result = run(pytester, "--fxprof", *xdist)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
    section = fxprof_section(result)
    assert any(line.startswith("test_perf.py::test_a [call0]: pass") for line in section), section
    assert any(line.startswith("test_perf.py::test_b [call0]: pass") for line in section), section
    assert snapshot(directory) == before  # a check never writes


@XDIST
def test_slowdown_fails_only_the_slowed_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    write_tests(pytester, TWO_TESTS)
    assert decide(pytester, "--fxprof-update", *xdist).ret == pytest.ExitCode.OK

    monkeypatch.setenv(SLOW_ENV, "b")
    result = decide(pytester, "--fxprof", *xdist)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_perf.py::test_b - *"])
    result.stdout.no_fnmatch_line("FAILED test_perf.py::test_a*")
    text = result.stdout.str()
    # flagged once, measured again in this process (--fxprof-confirm=same), still slower
    assert (
        "fxprof: test_perf.py::test_b [call0] got slower than its baseline (2 process(es)); every one of 2 "
        "measurements agrees (a second one confirmed the first)"
    ) in text
    # node name, its op and target, its module path, baseline -> current, the ratio, both measurements
    time_ = r"[\d.]+ [mun]?s"
    node_line = (
        rf"slower node: slow \(call_module Slow in slow, test_perf.py:\d+\): {time_} -> {time_} = x[\d.]+ "
        rf"after speed factor "
        rf"x[\d.]+(?: \(divided by x[\d.]+, [a-z -]+\))?, band \+100% \(tolerance\), \+{time_} "
        rf"\(measurements x[\d.]+, x[\d.]+\)"
    )
    assert re.search(node_line, text), text
    assert re.search(r"total: .* band \+100% \(tolerance\): slower \(measurements", text), text
    summaries = [line for line in fxprof_section(result) if line.startswith("test_perf.py::")]  # one per profile
    assert len(summaries) == 2, summaries
    assert summaries[0].startswith("test_perf.py::test_a [call0]: pass, total x")
    assert summaries[1].startswith("test_perf.py::test_b [call0]: regression, total x")
    assert "slow x" in summaries[1]


@pytest.mark.parametrize(
    ("flags", "ini", "measurements"),
    [
        pytest.param(["--fxprof-confirm=off"], "", 1, id="off"),
        pytest.param(["--fxprof-confirm=same"], "", 2, id="same"),
        pytest.param([], "fxprof_confirm = off", 1, id="ini-off"),
        pytest.param(["--fxprof-confirm=same"], "fxprof_confirm = off", 2, id="command-line-over-ini"),
    ],
)
def test_confirm_modes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, flags: list[str], ini: str, measurements: int
) -> None:
    """A slowdown in every measurement fails with or without a confirmation; the report says which."""
    pytester.makeini(f"[pytest]\n{ini}\n")
    write_tests(pytester, "def test_b(fxprof):\n    profile(fxprof, 'b')\n")
    assert runp(pytester, "--fxprof-update", *FAST, *BANDS).ret == pytest.ExitCode.OK
    monkeypatch.setenv(SLOW_ENV, "b")
    result = runp(pytester, "--fxprof", *FAST, *BANDS, *flags, "--fxprof-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "fxprof: test_perf.py::test_b [call0] got slower than its baseline (2 process(es))" in text
    assert ("every one of 2 measurements agrees" in text) is (measurements > 1)
    (profile,) = load(pytester.path / "r.json")["profiles"]
    assert profile["remeasured"] is (measurements > 1)
    assert profile["measurements"] == measurements
    assert len(profile["runs"]) == measurements
    slow = next(n for n in profile["nodes"] if n["name"] == "slow")
    assert len(slow["ratios"]) == measurements
    assert slow["confirmed"] is (True if measurements > 1 else None)


BURST = f"""
import os

import torch
from fakeclock import CLOCK
from torch import nn

CALLS = []


class Burst(nn.Module):
    \"\"\"Takes 2 ms on the fake clock per call, 30 ms more in its first 11 calls when {SLOW_ENV} is set.\"\"\"

    def forward(self, x):
        CALLS.append(1)
        spin = os.environ.get("{SLOW_ENV}") and len(CALLS) <= 11
        CLOCK.advance(32_000_000 if spin else 2_000_000)
        return x


def test_burst(fxprof):
    net = nn.Sequential(nn.Linear(8, 8), Burst(), nn.Linear(8, 4))
    result = fxprof(net, torch.randn(4, 8), leaf_modules=[Burst])
    assert len(CALLS) == (22 if result.remeasured else 11)  # 11 calls a measurement: the burst is the first
    assert result.remeasured == bool(os.environ.get("{SLOW_ENV}"))
"""


def test_a_slowdown_in_one_measurement_only_is_not_a_failure(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contention hits one measurement; the confirmation measures again and does not see it: a warning."""
    pytester.makepyfile(test_perf=BURST)
    # one pass to count FLOPs, 1 warm-up + 3 measured instrumented passes, 1 + 3 plain calls, then one pass of the
    # graphs and one plain call that read page faults: 11 calls per measurement
    args = (*FAST, *DECIDE, "--fxprof-report=r.json")
    # recorded twice in this process (a fresh one's calls are not counted here): the history shows the spread
    for _ in range(2):
        assert runp(pytester, "--fxprof-update", *args, "--fxprof-processes=1").ret == pytest.ExitCode.OK
    monkeypatch.setenv(SLOW_ENV, "1")
    result = runp(pytester, "--fxprof", *args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=1)
    (profile,) = load(pytester.path / "r.json")["profiles"]
    assert profile["remeasured"] is True
    assert profile["status"] == "pass"
    assert profile["measurements"] == 2
    burst = next(n for n in profile["nodes"] if n["target"] == "Burst")
    assert burst["name"] == "_1"  # the Sequential's second child
    assert burst["confirmed"] is False
    assert burst["verdict"] == "ok"
    assert burst["ratios"][0] > 2 > burst["ratios"][1]
    assert profile["total"]["confirmed"] is False
    assert profile["flagged"] == []
    # not failed, but said in the summary and the report (not as a warning: it asks nothing of the user)
    prefix = "not confirmed by the second measurement, so not failed: "
    unconfirmed = [n.removeprefix(prefix) for n in profile["notices"] if n.startswith(prefix)]
    assert any(
        re.match(r"node _1: not confirmed: x[\d.]+, x[\d.]+ against band \+100% \(tolerance\)", u) for u in unconfirmed
    ), profile["notices"]
    assert any(u.startswith("total: not confirmed: ") for u in unconfirmed), profile["notices"]
    assert not any("not confirmed" in w for w in fxprof_warnings(result))
    folded = f"    {len(profile['notices'])} notice(s), nothing to act on (pytest -v lists them)"
    assert folded in fxprof_section(result)


PARENT_ONLY = f"""
import pathlib

{MODEL}

def test_parent_only(fxprof):
    if fxprof.mode == "sample" and pathlib.Path(__file__).with_name("child-fails").exists():
        raise RuntimeError("the fresh process cannot measure")
    net = Net()
    net.slow.spin = fxprof.mode == "check"  # slowed where it is checked, not where it is recorded or sampled
    result = fxprof(net, torch.randn(4, 8), leaf_modules=[Slow])
    assert result.remeasured == (fxprof.mode == "check")
"""


@pytest.mark.parametrize("child", ["measures", "fails"])
def test_fresh_confirmation(pytester: pytest.Pytester, child: str) -> None:
    """--fxprof-confirm=fresh (the default): the confirmation comes from a new ``pytest --fxprof-sample``.

    The slowdown lives in the checking process only: the fresh one does not see it, so the test passes
    with a warning. If the fresh process fails, the confirmation is measured here instead (and shows it).
    """
    pytester.makepyfile(test_perf=PARENT_ONLY)
    args = (*FAST, *BANDS, "--fxprof-report=r.json")  # no --fxprof-confirm: the default
    assert runp(pytester, "--fxprof-update", *args).ret == pytest.ExitCode.OK
    if child == "fails":
        (pytester.path / "child-fails").touch()
    result = runp(pytester, "--fxprof", *args)
    (profile,) = load(pytester.path / "r.json")["profiles"]
    assert profile["remeasured"] is True
    assert profile["measurements"] == 2
    slow = next(n for n in profile["nodes"] if n["name"] == "slow")
    text = result.stdout.str()
    if child == "measures":
        assert result.ret == pytest.ExitCode.OK, text
        result.assert_outcomes(passed=1)
        assert profile["status"] == "pass"
        assert slow["confirmed"] is False
        assert slow["ratios"][0] > 2 > slow["ratios"][1]
        warnings = fxprof_warnings(result)
        notices = profile["notices"]
        assert any(
            n.startswith("not confirmed by the second measurement, so not failed: node slow: not confirmed: ")
            for n in notices
        ), notices
        assert not any("fresh process failed" in w for w in warnings)
    else:
        assert result.ret == pytest.ExitCode.TESTS_FAILED, text
        result.assert_outcomes(failed=1)
        assert profile["status"] == "regression"
        assert slow["confirmed"] is True
        assert "every one of 2 measurements agrees" in text
        assert (
            "fxprof: test_perf.py::test_parent_only [call0]: the confirmation in a fresh process failed, so it was "
            "measured again in this process instead: fresh process 1 of 1 for test_perf.py::test_parent_only failed"
        ) in text
        assert "the fresh process cannot measure" in text  # the child's own output


@pytest.mark.parametrize(
    ("flags", "ret", "warned"),
    [
        pytest.param([], pytest.ExitCode.OK, False, id="default-notice"),  # the same graph: drift as likely
        pytest.param(["--fxprof-on-faster=ignore"], pytest.ExitCode.OK, False, id="ignore"),
        pytest.param(["--fxprof-on-faster=fail"], pytest.ExitCode.TESTS_FAILED, False, id="fail"),
    ],
)
def test_a_model_that_got_faster(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, flags: list[str], ret: pytest.ExitCode, warned: bool
) -> None:
    """Recorded with the 30 ms wait, checked without it: the baseline no longer guards the model's speed."""
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof, 'a')\n")
    monkeypatch.setenv(SLOW_ENV, "a")
    assert decide(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    monkeypatch.delenv(SLOW_ENV)
    result = decide(pytester, "--fxprof", *flags)
    assert result.ret == ret, result.stdout.str()
    result.assert_outcomes(**{"failed" if ret == pytest.ExitCode.TESTS_FAILED else "passed": 1})
    text = result.stdout.str()
    message = "fxprof: test_perf.py::test_a [call0] got faster than its baseline"
    faster_node = (
        r"faster node: slow \(call_module Slow in slow, test_perf.py:\d+\): [\d.]+ ms -> [\d.]+ ms = x0\.\d\d "
        r"after speed factor"
    )
    if ret == pytest.ExitCode.TESTS_FAILED:
        result.stdout.fnmatch_lines(["FAILED test_perf.py::test_a - *"])
        assert message in text
        assert re.search(faster_node, text), text
        assert (
            "refresh the baseline so that it keeps guarding the new speed; record it with: pytest --fxprof-update"
            in text
        )
    assert any(w.startswith(message) for w in fxprof_warnings(result)) is warned
    if ret == pytest.ExitCode.OK and not warned:
        assert message not in text
    # a speed-up is never a regression, and never confirmed
    assert any(line.startswith("test_perf.py::test_a [call0]: pass") for line in fxprof_section(result))


# Reactions -------------------------------------------------------------------------------------------


def test_missing_baseline_fails_with_update_hint(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    result = run(pytester, "--fxprof")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "fxprof: no baseline for test_perf.py::test_a [[]call0[]] in *baselines; record it with: "
            "pytest --fxprof-update 'test_perf.py::test_a'"
        ]
    )
    assert "missing" in "\n".join(fxprof_section(result))
    assert not (pytester.path / "baselines").exists()


def test_missing_baseline_skips_with_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfxprof_on_missing = skip\n")
    write_tests(pytester, TWO_TESTS)
    result = run(pytester, "--fxprof", "-rs")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED * fxprof: no baseline for test_perf.py::test_a [[]call0[]]*--fxprof-update*"])


@pytest.mark.parametrize(
    ("flags", "outcome", "ret"),
    [([], "skipped", pytest.ExitCode.OK), (["--fxprof-on-mismatch=fail"], "failed", pytest.ExitCode.TESTS_FAILED)],
    ids=["default-skip", "fail"],
)
def test_environment_mismatch(pytester: pytest.Pytester, flags: list[str], outcome: str, ret: pytest.ExitCode) -> None:
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof)\n")
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    path = only_file(pytester.path / "baselines")
    data = load(path)
    data["entries"]["call0"]["environment"]["torch"] = "0.0.1-elsewhere"
    path.write_text(json.dumps(data), encoding="utf-8")

    result = run(pytester, "--fxprof", "-rs", *flags)
    assert result.ret == ret
    result.assert_outcomes(**{outcome: 1})
    text = result.stdout.str()
    assert "recorded in another environment" in text
    assert f"torch: baseline '0.0.1-elsewhere', this run '{torch.__version__}'" in text
    assert any("mismatch" in line for line in fxprof_section(result))


GRAPH_V1 = """
class Net2(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_a(fxprof):
    fxprof(Net2(), torch.randn(4, 8))
"""

GRAPH_V2 = """
class Net2(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.extra = nn.Tanh()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.extra(self.act(self.fc1(x))))


def test_a(fxprof):
    fxprof(Net2(), torch.randn(4, 8))
"""


@pytest.mark.parametrize(
    ("flags", "ret"),
    [([], pytest.ExitCode.OK), (["--fxprof-on-graph-change=fail"], pytest.ExitCode.TESTS_FAILED)],
    ids=["default-warn", "fail"],
)
def test_graph_change(pytester: pytest.Pytester, flags: list[str], ret: pytest.ExitCode) -> None:
    write_tests(pytester, GRAPH_V1)
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    write_tests(pytester, GRAPH_V2)  # one node added after recording

    result = run(pytester, "--fxprof", *flags)
    assert result.ret == ret
    text = result.stdout.str()
    assert "graph changed since the baseline: 1 node(s) added, 0 removed" in text
    assert "added: extra (Tanh in extra, test_perf.py:" in text  # with the line that calls it
    # one of the run's warnings is about the graph
    changed = [w for w in fxprof_warnings(result) if "graph changed" in w]
    if ret == pytest.ExitCode.OK:
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            ["*= warnings summary =*", "*FxprofWarning: fxprof: test_perf.py::test_a [[]call0[]]: graph changed*"]
        )
        assert len(changed) == 1
    else:
        result.assert_outcomes(failed=1)
        assert changed == []
    assert any("graph changed (+1/-0)" in line for line in fxprof_section(result))


BLOCKS = """
class Work(nn.Module):
    \"\"\"A leaf that takes ``ns`` on the fake clock.\"\"\"

    def __init__(self, ns):
        super().__init__()
        self.ns = ns

    def forward(self, x):
        CLOCK.advance(self.ns)
        return x


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = Work(2_000_000)
        self.act = Work(100_000)
        self.extra = Work(15_000_000)

    def forward(self, x):
        if os.environ.get("MLP_CHANGED") == "1":  # the pull request: one more step in every MLP
            return self.act(self.extra(self.fc(x)))
        return self.act(self.fc(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Work(2_000_000)
        self.mlp = MLP()

    def forward(self, x):
        return self.mlp(self.attn(x))


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.ModuleList([Block() for _ in range(2)])
        self.head = Work(1_000_000)

    def forward(self, x):
        for block in self.h:
            x = block(x)
        return self.head(x)


def test_a(fxprof):
    fxprof(Blocks(), torch.randn(4, 8), leaf_modules=[Work])
"""


def test_a_code_change_is_blamed_on_the_module_whose_code_changed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tests(pytester, BLOCKS)
    assert decide(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    monkeypatch.setenv("MLP_CHANGED", "1")  # the code of every MLP changed: a node added in each
    result = decide(pytester, "--fxprof", "--fxprof-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = result.stdout.str()
    # the failure leads with the repeated block whose code changed, its class, and what changed in it
    result.stdout.fnmatch_lines(
        [
            "*got slower than its baseline*",
            "  where: module h.*.mlp (MLP, 2 instances, 6 nodes, 4 before): *",
            "    in: h.* x*",
            "    its code changed: 1 node(s) added in each of 2 instances at test_perf.py:* (Work)",
        ]
    )
    # advice that cannot accept a regression: refreshing is for an intended change, never offered as the fix
    assert "  if this change is intended, refresh the baseline with: pytest --fxprof-update 'test_perf.py::test_a'" in (
        result.outlines
    )
    assert "record it with" not in text
    (profile,) = load(pytester.path / "r.json")["profiles"]
    blame = profile["blame"]
    assert (blame["kind"], blame["name"], blame["class"], blame["chain"]) == ("pattern", "h.*.mlp", "MLP", ["h.*"])
    assert [n["module"] for n in blame["added"]] == ["h.0.mlp.extra", "h.1.mlp.extra"]
    (summary,) = [line for line in fxprof_section(result) if line.startswith("test_perf.py::test_a [call0]: ")]
    assert "; where: h.*.mlp (MLP) x8.14; " in summary
    # the worst list leads with the nodes the change added, which carry its time, ranked by that time
    worst = summary.split("; worst: ")[1].split("; ")[0].split(", ")
    assert [w.split()[0] for w in worst[:2]] == ["h_0_mlp_extra", "h_1_mlp_extra"], summary
    assert all(w.endswith("(added)") for w in worst[:2]), summary


ASSERTS = """
class Checked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        assert x.shape[0] <= 16, "too large a batch"  # symbolic tracing cannot take this: the capture falls back
        return torch.relu(self.fc(x))


def test_a(fxprof):
    fxprof(Checked(), torch.randn(4, 8))
"""


def test_a_capture_that_fell_back_says_so_in_a_notice(pytester: pytest.Pytester) -> None:
    write_tests(pytester, ASSERTS)
    auto = ("--fxprof-processes=1", "--fxprof-warmup=1", "--fxprof-passes=3", "--fxprof-engine=interpreter", *LOOSE)
    result = runp(pytester, *auto, "--fxprof-update", "--fxprof-report=r.json", "-v")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    (profile,) = load(pytester.path / "r.json")["profiles"]
    assert profile["capture"]["method"] == "export"
    (notice,) = profile["notices"]
    assert notice.startswith("captured with export: symbolic_trace failed")
    assert notice.endswith(
        "its node names follow the operators (linear_6) and each node's module path says where it sits"
    )
    result.stdout.fnmatch_lines(["*notice: captured with export: symbolic_trace failed*"])


BREAKS = """
class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.breaks = os.environ.get("GRAPH_BREAK") == "1"  # read when built, outside the compiled code

    def forward(self, x):
        y = torch.relu(self.fc1(x))
        if self.breaks:
            torch._dynamo.graph_break()
        return self.fc2(y)


@pytest.mark.fxprof(capture="dynamo")
def test_a(fxprof):
    fxprof(Broken(), torch.randn(4, 8))
"""


@pytest.mark.parametrize(
    ("flags", "ret"),
    [([], pytest.ExitCode.OK), (["--fxprof-on-graph-change=fail"], pytest.ExitCode.TESTS_FAILED)],
    ids=["default-warn", "fail"],
)
def test_a_new_graph_break_is_a_changed_graph(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, flags: list[str], ret: pytest.ExitCode
) -> None:
    write_tests(pytester, BREAKS)
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    monkeypatch.setenv("GRAPH_BREAK", "1")
    result = run(pytester, "--fxprof", "--fxprof-report=r.json", *flags)
    assert result.ret == ret, result.stdout.str()
    text = result.stdout.str()
    assert "graph changed since the baseline: 0 node(s) added, 0 removed" in text
    assert "captured graphs: 1 -> 2 (1 new graph break(s))" in text
    (profile,) = load(pytester.path / "r.json")["profiles"]
    assert profile["graphs"] == {"baseline": 1, "current": 2}
    assert any("graph changed (+0/-0, graphs 1 -> 2)" in line for line in fxprof_section(result))


SETUPS = """
def test_a(fxprof):
    net = Net()
    if os.environ.get("SETUP") == "train":
        net.train()
    else:
        net.eval()
    batch = 8 if os.environ.get("SETUP") == "batch" else 4
    fxprof(net, torch.randn(batch, 8), leaf_modules=[Slow])
"""


@pytest.mark.parametrize(
    ("setup", "said"),
    [
        ("batch", "inputs: args[0] was float32[4, 8] cpu in the baseline, float32[8, 8] cpu in this run"),
        ("train", "mode: 'eval' in the baseline, 'train' in this run"),
    ],
)
def test_another_test_setup_is_a_mismatch_never_a_slowdown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, setup: str, said: str
) -> None:
    write_tests(pytester, SETUPS)
    assert decide(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    entry = load(only_file(pytester.path / "baselines"))["entries"]["call0"]
    assert entry["setup"] == {"inputs": ["args[0]: float32[4, 8] cpu"], "mode": "eval"}
    assert [n["shape"] for n in entry["nodes"]] == [
        "float32[4, 16]",
        "float32[4, 16]",
        "float32[4, 16]",
        "float32[4, 4]",
    ]
    monkeypatch.setenv("SETUP", setup)
    result = decide(pytester, "--fxprof", "-rs")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1)
    text = result.stdout.str()
    assert (
        "hands the model other inputs, another mode or another state of torch than its baseline was recorded with"
        in " ".join(text.split())
    )
    assert said in text
    assert "slower" not in text
    result = decide(pytester, "--fxprof", "--fxprof-on-mismatch=fail")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# Usage errors ----------------------------------------------------------------------------------------


def test_check_and_update_together_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    result = runp(pytester, "--fxprof", "--fxprof-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fxprof and --fxprof-update exclude each other*"])
    assert not (pytester.path / "baselines").exists()


def test_unknown_marker_keyword_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        @pytest.mark.fxprof(bogus=1)
        def test_a(fxprof):
            profile(fxprof)
        """,
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_perf.py::test_a: @pytest.mark.fxprof: unknown setting(s) bogus; known: *"])
    assert not (pytester.path / "baselines").exists()


def test_reactions_and_their_defaults() -> None:
    assert Reactions() == Reactions(
        missing=OnMissing.FAIL,
        mismatch=OnMismatch.SKIP,
        graph_change=OnGraphChange.WARN,
        unused=OnUnused.WARN,
        faster=OnFaster.WARN,
        confirm=Confirm.FRESH,
        undecided=OnUndecided.FAIL,
    )
    assert [c.value for c in OnFaster] == ["ignore", "warn", "fail"]
    assert [c.value for c in Confirm] == ["fresh", "same", "off"]


CHOICES = [
    pytest.param("confirm", "fresh, same, off", id="confirm"),
    pytest.param("on-faster", "ignore, warn, fail", id="on-faster"),
]


@pytest.mark.parametrize(("option", "allowed"), CHOICES)
def test_bad_choice_on_the_command_line_is_a_usage_error(pytester: pytest.Pytester, option: str, allowed: str) -> None:
    write_tests(pytester, TWO_TESTS)
    result = runp(pytester, "--fxprof", f"--fxprof-{option}=twice")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    quoted = ", ".join(f"'{v}'" for v in allowed.split(", "))
    result.stderr.fnmatch_lines([f"*argument --fxprof-{option}: invalid choice: 'twice' (choose from {quoted})*"])


@pytest.mark.parametrize(("option", "allowed"), CHOICES)
def test_bad_choice_in_the_ini_file_is_a_usage_error(pytester: pytest.Pytester, option: str, allowed: str) -> None:
    key = "fxprof_" + option.replace("-", "_")
    pytester.makeini(f"[pytest]\n{key} = twice\n")
    write_tests(pytester, TWO_TESTS)
    result = runp(pytester, "--fxprof")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{key} = 'twice' in the ini file; use one of: {allowed}*"])


# Settings --------------------------------------------------------------------------------------------


def test_marker_overrides_command_line(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        @pytest.mark.fxprof(passes=2, warmup=0)
        def test_marked(fxprof):
            result = profile(fxprof)
            assert result.protocol.passes == 2
            assert len(result.nodes[0].samples_ns) == 2


        def test_plain(fxprof):
            result = profile(fxprof)
            assert result.protocol.passes == 3
        """,
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
    directory = pytester.path / "baselines"
    marked = load(file_of(directory, "test_perf.py::test_marked"))["entries"]["call0"]["protocol"]
    plain = load(file_of(directory, "test_perf.py::test_plain"))["entries"]["call0"]["protocol"]
    assert marked == {"warmup": 0, "passes": 2, "threads": 1, "processes": 2}
    assert plain == {"warmup": 1, "passes": 3, "threads": 1, "processes": 2}


def test_ini_keys_and_command_line_wins(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        fxprof_update = true
        fxprof_processes = 2
        fxprof_warmup = 2
        fxprof_passes = 4
        fxprof_node_tolerance = 3
        fxprof_total_tolerance = 3
        fxprof_baseline_dir = perf/base
        """
    )
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof)\n")
    result = runp(pytester)
    assert result.ret == pytest.ExitCode.OK
    directory = pytester.path / "perf" / "base"
    entry = load(only_file(directory))["entries"]["call0"]
    assert entry["protocol"] == {"warmup": 2, "passes": 4, "threads": 1, "processes": 2}
    assert entry["tolerances"] == {"node": 3.0, "total": 3.0}
    assert not (pytester.path / "baselines").exists()

    result = runp(pytester, "--fxprof-passes=3", "--fxprof-node-tolerance=2.5")
    assert result.ret == pytest.ExitCode.OK
    entry = load(only_file(directory))["entries"]["call0"]
    assert entry["protocol"] == {"warmup": 2, "passes": 3, "threads": 1, "processes": 2}
    assert entry["tolerances"] == {"node": 2.5, "total": 3.0}

    # the mode too: --fxprof on the command line beats fxprof_update = true in the ini file
    before = snapshot(directory)
    result = runp(pytester, "--fxprof")
    assert result.ret == pytest.ExitCode.OK
    assert any(line.startswith("test_perf.py::test_a [call0]: pass") for line in fxprof_section(result))
    assert snapshot(directory) == before


def test_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfxprof_passes = many\n")
    write_tests(pytester, TWO_TESTS)
    result = runp(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini file: passes must be an integer, not 'many'*"])


def test_baseline_dir_option_is_relative_to_invocation_dir(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\n")
    sub = pytester.mkdir("sub")
    test_file = write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof)\n")
    test_file.rename(sub / test_file.name)
    monkeypatch.chdir(sub)
    result = run(pytester, "--fxprof-update", "--fxprof-baseline-dir=here")
    assert result.ret == pytest.ExitCode.OK
    data = load(only_file(sub / "here"))
    assert data["test_id"] == "sub/test_perf.py::test_a"  # ids stay relative to the rootdir
    assert not (pytester.path / "here").exists()
    assert not (pytester.path / "baselines").exists()

    result = run(pytester, "--fxprof", "--fxprof-baseline-dir=here")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)


# Report ----------------------------------------------------------------------------------------------


@XDIST
def test_report_json(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: list[str]) -> None:
    write_tests(pytester, TWO_TESTS)
    assert decide(pytester, "--fxprof-update", *xdist).ret == pytest.ExitCode.OK
    monkeypatch.setenv(SLOW_ENV, "b")
    result = decide(pytester, "--fxprof", "--fxprof-report=out/report.json", *xdist)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    path = pytester.path / "out" / "report.json"
    result.stdout.fnmatch_lines([f"report: {path}"])
    report = load(path)
    assert report["report_version"] == 2
    assert report["mode"] == "check"
    assert report["unused_baselines"] == []
    profiles = {p["test_id"]: p for p in report["profiles"]}
    assert list(profiles) == ["test_perf.py::test_a", "test_perf.py::test_b"]
    a, b = profiles["test_perf.py::test_a"], profiles["test_perf.py::test_b"]
    # every time is the fake clock's, in every process: 1 us a node, 2 ms for the slow one (32 ms where slowed)
    assert [(n["baseline_ns"], n["current_ns"]) for n in a["nodes"]] == [
        (1_000, 1_000),
        (1_000, 1_000),
        (2_001_000, 2_001_000),
        (1_000, 1_000),
    ]
    assert [n["current_ns"] for n in b["nodes"]] == [1_000, 1_000, 32_001_000, 1_000]
    assert (a["key"], a["status"]) == ("call0", "pass")
    assert (b["key"], b["status"]) == ("call0", "regression")
    for profile in (a, b):
        assert profile["environment"]["torch"] == torch.__version__
        assert profile["environment"]["threads"] == 1
        assert profile["environment"]["device"] == "cpu"
        assert profile["protocol"] == {"warmup": 1, "passes": 3, "threads": 1, "processes": 2}
        assert profile["seconds"] > 0
        assert len(profile["runs"]) == profile["measurements"]
        for run in profile["runs"]:
            assert set(run) == {
                "total_ns",
                "instrumented_ns",
                "reference_ns",
                "node_ns",
                "node_spread_ns",
                "faults",  # the memory the plain call and each node and submodule took, on the CPU
                "node_faults",
                "module_faults",
            }
            assert len(run["node_ns"]) == len(run["node_faults"]) == 4
            assert run["faults"] >= 0
            assert set(run["module_faults"]) >= {"", "fc1", "fc2"}
        assert [n["name"] for n in profile["nodes"]] == ["fc1", "act", "slow", "fc2"]
        for node in profile["nodes"]:
            for field in (
                "key",
                "op",
                "target",
                "module",
                "baseline_ns",
                "current_ns",
                "gates",
                "ratio",
                "ratios",
                "band",
                "band_source",
                "verdict",
                "confirmed",
                "reason",
                "sigma",
                "floor",
            ):
                assert field in node, (field, node)
            assert node["sigma"] == 0.0  # two baseline processes on the fake clock: no spread
            assert len(node["ratios"]) == profile["measurements"]
        # the two Linear layers are the only aggregate; no change of a few microseconds passes 500 us of floor
        (linear,) = profile["aggregates"]
        assert (linear["kind"], linear["name"]) == ("op", "Linear")
        assert linear["members"] == [profile["nodes"][0]["key"], profile["nodes"][3]["key"]]
        assert (linear["band_source"], linear["verdict"]) == ("floor", "ok")
        for field in ("baseline_ns", "current_ns", "speed_factor", "ratio", "ratios", "band", "confirmed", "reason"):
            assert field in linear, field
        assert linear["floor"] == linear["band"] > 1  # 500 us of floor over a few microseconds
        assert profile["total"]["verdict"] in ("ok", "slower", "faster")
        assert "warned" in profile
    # the unchanged test was measured once, the slowed one confirmed in this process
    assert (a["remeasured"], a["measurements"]) == (False, 1)
    assert (b["remeasured"], b["measurements"]) == (True, 2)
    assert a["flagged"] == []
    assert all(n["verdict"] != "slower" for n in a["nodes"])
    slow = next(n for n in b["nodes"] if n["name"] == "slow")
    assert (slow["op"], slow["target"], slow["module"]) == ("call_module", "Slow", "slow")
    assert slow["gates"] is True
    assert (slow["band"], slow["band_source"]) == (1.0, "tolerance")
    assert slow["verdict"] == "slower"
    assert slow["confirmed"] is True
    assert slow["ratio"] == min(slow["ratios"])
    assert all(r > 1 + slow["band"] for r in slow["ratios"])
    assert "beyond" in slow["reason"]
    assert b["total"]["verdict"] == "slower"
    assert b["total"]["confirmed"] is True
    assert [(f["kind"], f["name"]) for f in b["flagged"]] == [("node", "slow"), ("total", "total")]
    assert b["flagged"][0]["ratio"] == slow["ratio"]


# Several calls in one test ---------------------------------------------------------------------------


def test_named_calls_get_separate_entries(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        def test_two(fxprof):
            profile(fxprof, name="encoder")
            fxprof(nn.Sequential(nn.Linear(8, 2), nn.Sigmoid()), torch.randn(4, 8), name="head")
        """,
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.OK
    entries = load(only_file(pytester.path / "baselines"))["entries"]
    assert sorted(entries) == ["encoder", "head"]
    assert [n["name"] for n in entries["encoder"]["nodes"]] == ["fc1", "act", "slow", "fc2"]
    assert [n["target"] for n in entries["head"]["nodes"]] == ["Linear", "Sigmoid"]
    section = fxprof_section(result)
    assert "test_perf.py::test_two [encoder]: recorded" in section
    assert "test_perf.py::test_two [head]: recorded" in section

    result = run(pytester, "--fxprof")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)


def test_unnamed_calls_are_numbered(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        def test_two(fxprof):
            assert profile(fxprof).name == "call0"
            assert profile(fxprof).name == "call1"
            assert profile(fxprof, name="named").name == "named"
        """,
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.OK
    entries = load(only_file(pytester.path / "baselines"))["entries"]
    assert sorted(entries) == ["call0", "call1", "named"]


def test_same_name_twice_fails(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        def test_twice(fxprof):
            profile(fxprof, name="enc")
            profile(fxprof, name="enc")


        def test_fine(fxprof):
            profile(fxprof, name="enc")
        """,
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*fxprof: fxprof was called twice with the key 'enc' in one test; give each call its own name=*"]
    )
    files = baseline_files(pytester.path / "baselines")
    assert [load(p)["test_id"] for p in files] == ["test_perf.py::test_fine"]


# Baseline files --------------------------------------------------------------------------------------


def _corrupt(kind: str, good: str) -> str:
    if kind == "empty":
        return ""
    if kind == "truncated":
        return good[: len(good) // 2]
    return f"<<<<<<< HEAD\n{good}=======\n{good}>>>>>>> other-branch\n"


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("empty", "the file is empty"),
        ("truncated", "not valid JSON"),
        ("conflict", "the file contains git merge-conflict markers"),
    ],
)
def test_corrupt_baseline_fails_and_is_left_unchanged(pytester: pytest.Pytester, kind: str, problem: str) -> None:
    write_tests(pytester, TWO_TESTS)
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    directory = pytester.path / "baselines"
    path = file_of(directory, "test_perf.py::test_a")
    path.write_text(_corrupt(kind, path.read_text(encoding="utf-8")), encoding="utf-8")
    before = snapshot(directory)

    result = run(pytester, "--fxprof")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_perf.py::test_a - *"])
    text = result.stdout.str()
    assert f"fxprof: {path}: {problem}" in text
    assert "no longer exists" not in text  # its test exists, and fails for it
    assert snapshot(directory) == before


def test_partial_update_touches_only_selected_tests(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS + "\n\ndef test_c(fxprof):\n    profile(fxprof)\n")
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    write_tests(pytester, TWO_TESTS)  # test_c deleted: its baseline is stale, but -k cannot tell
    directory = pytester.path / "baselines"
    a = file_of(directory, "test_perf.py::test_a")
    before = snapshot(directory)
    assert len(before) == 3

    result = run(pytester, "--fxprof-update", "-k", "test_a")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, deselected=1)
    after = snapshot(directory)
    assert set(after) == set(before)
    assert after[a.name] != before[a.name]  # rewritten
    assert {k: v for k, v in after.items() if k != a.name} == {k: v for k, v in before.items() if k != a.name}
    result.stdout.fnmatch_lines(["wrote 1 baseline file(s) to *"])
    result.stdout.no_fnmatch_line("*no longer exists*")


@XDIST
def test_unused_baseline_is_reported(pytester: pytest.Pytester, xdist: list[str]) -> None:
    write_tests(pytester, TWO_TESTS)
    assert run(pytester, "--fxprof-update", *xdist).ret == pytest.ExitCode.OK
    stale = file_of(pytester.path / "baselines", "test_perf.py::test_b")
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof, 'a')\n")

    result = run(pytester, "--fxprof", "--fxprof-report=report.json", *xdist)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    section = fxprof_section(result)
    assert (
        "1 baseline(s) whose test no longer exists, or unreadable (warning; delete them, or fix the unreadable ones):"
        in section
    )
    assert f"  {stale.name} (test_perf.py::test_b)" in section
    assert load(pytester.path / "report.json")["unused_baselines"] == [f"{stale.name} (test_perf.py::test_b)"]
    assert stale.exists()

    result = run(pytester, "--fxprof", "--fxprof-on-unused=fail", *xdist)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    assert (
        "1 baseline(s) whose test no longer exists, or unreadable (failing; delete them, or fix the unreadable ones):"
        in fxprof_section(result)
    )


@pytest.mark.parametrize("mode", ["--fxprof-update", "--fxprof"])
def test_one_unreadable_file_in_the_directory_costs_one_line_never_the_run(
    pytester: pytest.Pytester, mode: str
) -> None:
    """A stray file nested too deeply for a JSON parser's recursion: the run still ends with its summary, its
    junit XML and the exit status its tests earned."""
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof, 'a')\n")
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    stray = pytester.path / "baselines" / "stray.json"
    stray.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    result = run(pytester, mode, "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=1)
    assert (
        "  stray.json (unreadable: the file is not a pytest-fxprof baseline: it is nested too deeply to be a file "
        "pytest-fxprof wrote)" in fxprof_section(result)
    )
    assert (pytester.path / "junit.xml").is_file()
    assert "RecursionError" not in result.stdout.str() + result.stderr.str()


def test_an_update_removes_the_temporary_file_a_killed_update_left(pytester: pytest.Pytester) -> None:
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof, 'a')\n")
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # a process that is no longer running
    dead.wait()
    left = pytester.path / "baselines" / f".test_perf.py_test_a-0.{dead.pid}.x1y2z3.tmp"
    left.write_text('{"schema_version": 1', encoding="utf-8")
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.OK
    assert not left.exists()
    assert f"removed 1 temporary file(s) a killed update left: {left.name}" in fxprof_section(result)
    assert sorted(p.suffix for p in (pytester.path / "baselines").iterdir()) == [".json"]


CRASHES = """
@pytest.mark.parametrize("case", [1, 2, 3, 4])
def test_case(fxprof, case):
    profile(fxprof)
    if case == 4:
        os._exit(1)  # the worker dies before the test ends
"""


@pytest.mark.parametrize("mode", ["--fxprof-update", "--fxprof"])
def test_a_crashed_worker_loses_nothing_its_finished_tests_measured(pytester: pytest.Pytester, mode: str) -> None:
    write_tests(pytester, CRASHES)
    if mode == "--fxprof":  # recorded without the crash: the fourth case records no baseline
        write_tests(pytester, CRASHES.replace("os._exit(1)", "pass"))
        assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
        write_tests(pytester, CRASHES)
    result = run(pytester, mode, "-n", "1", "--fxprof-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=3, failed=1)
    section = fxprof_section(result)
    finished = [
        f"test_perf.py::test_case[{i}] [call0]: {'recorded' if mode == '--fxprof-update' else 'pass'}"
        for i in (1, 2, 3)
    ]
    for line in finished:
        assert any(s.startswith(line) for s in section), section
    assert any(s.startswith("pytest-xdist worker gw0 crashed") for s in section), section
    assert [p["test_id"] for p in load(pytester.path / "r.json")["profiles"]][:3] == [
        f"test_perf.py::test_case[{i}]" for i in (1, 2, 3)
    ]
    if mode == "--fxprof-update":
        recorded = {load(f)["test_id"] for f in baseline_files(pytester.path / "baselines")}
        assert recorded == {f"test_perf.py::test_case[{i}]" for i in (1, 2, 3)}


def test_a_file_that_collects_nothing_does_not_make_its_baselines_unused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipped at module level: its tests still exist. A deleted file: its baseline is unused."""
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof)\n", name="test_one")
    write_tests(pytester, "def test_b(fxprof):\n    profile(fxprof)\n", name="test_two")
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    skip_all = "import os\nif os.environ.get('SKIP_ALL'):\n    pytest.skip('not here', allow_module_level=True)\n"
    write_tests(pytester, skip_all + "def test_a(fxprof):\n    profile(fxprof)\n", name="test_one")
    monkeypatch.setenv("SKIP_ALL", "1")
    result = run(pytester, "--fxprof", "--fxprof-on-unused=fail")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=1, skipped=1)
    assert not any("no longer exists" in line for line in fxprof_section(result))

    (pytester.path / "test_one.py").unlink()
    result = run(pytester, "--fxprof", "--fxprof-on-unused=fail")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert any("(test_one.py::test_a)" in line for line in fxprof_section(result))


def test_failing_test_is_not_recorded(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        def test_good(fxprof):
            profile(fxprof)


        def test_bad(fxprof):
            profile(fxprof)
            assert False, "the model's output is wrong"
        """,
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    files = baseline_files(pytester.path / "baselines")
    assert [load(p)["test_id"] for p in files] == ["test_perf.py::test_good"]
    section = fxprof_section(result)
    assert "test_perf.py::test_bad: not recorded, the test did not pass" in section
    result.stdout.fnmatch_lines(["wrote 1 baseline file(s) to *"])


def test_untraceable_model_fails_with_leaf_modules_hint(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        class Gate(nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x
                return -x


        class Branchy(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.gate = Gate()

            def forward(self, x):
                return self.gate(self.fc(x))


        def test_branchy(fxprof):
            fxprof(Branchy(), torch.randn(4, 8))


        def test_branchy_as_leaf(fxprof):
            fxprof(Branchy(), torch.randn(4, 8), leaf_modules=["gate"])


        class BranchyRoot(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x):
                x = self.fc(x)
                if x.sum() > 0:
                    return x
                return -x


        def test_branchy_root(fxprof):
            fxprof(BranchyRoot(), torch.randn(4, 8))


        def test_fine(fxprof):
            profile(fxprof)
        """,
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["FAILED test_perf.py::test_branchy - *", "FAILED test_perf.py::test_branchy_root - *"])
    text = result.stdout.str()
    # in a submodule: keep that submodule whole
    assert "fxprof: torch.fx.symbolic_trace could not capture Branchy: TraceError" in text
    assert "while tracing submodule 'gate' (Gate)" in text
    assert "leaf_modules=['gate']" in text
    # in the root's own forward no submodule can be kept whole: the hint points at the line and tracer=
    assert "fxprof: torch.fx.symbolic_trace could not capture BranchyRoot: TraceError" in text
    assert re.search(r"at .*test_perf\.py:\d+: if x\.sum\(\) > 0:", text), text
    assert "Fix: pass tracer= a torch.fx.Tracer" in text
    ids = sorted(load(p)["test_id"] for p in baseline_files(pytester.path / "baselines"))
    assert ids == ["test_perf.py::test_branchy_as_leaf", "test_perf.py::test_fine"]


def test_update_with_two_processes_stores_two_runs(pytester: pytest.Pytester) -> None:
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof)\n")
    result = runp(pytester, "--fxprof-update", "--fxprof-processes=2", "--fxprof-warmup=1", "--fxprof-passes=3")
    assert result.ret == pytest.ExitCode.OK
    entry = load(only_file(pytester.path / "baselines"))["entries"]["call0"]
    assert entry["protocol"]["processes"] == 2
    assert len(entry["runs"]) == 2
    for recorded in entry["runs"]:
        assert len(recorded["node_ns"]) == 4

    result = runp(
        pytester, "--fxprof", "--fxprof-on-unchanged=measure", "--fxprof-warmup=1", "--fxprof-passes=3", *LOOSE
    )
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    assert any("test_perf.py::test_a [call0]: pass" in line for line in fxprof_section(result))


def test_fresh_processes_serve_every_test_of_a_recording(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--fxprof-update`` starts its fresh processes once for the run, each measuring every test, before the
    tests run; the summary and the report say where the time went."""
    write_tests(
        pytester,
        """
        import os

        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_a(fxprof, n):
            if fxprof.mode == "sample":
                with open(os.path.join(os.environ["PIDS_DIR"], f"{n}-{os.getpid()}"), "w"):
                    pass
            profile(fxprof)
        """,
    )
    pids = tmp_path / "pids"
    pids.mkdir()
    report = tmp_path / "report.json"
    monkeypatch.setenv("PIDS_DIR", str(pids))
    result = runp(
        pytester,
        "--fxprof-update",
        "--fxprof-processes=3",
        "--fxprof-warmup=1",
        "--fxprof-passes=3",
        f"--fxprof-report={report}",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*fxprof: fresh process 1: 3 test(s)*", "*fxprof: fresh process 2: 3 test(s)*"])
    stamps = [p.name for p in pids.iterdir()]
    served = {name.split("-")[1] for name in stamps}
    assert len(served) == 2  # two fresh processes, each serving the three tests
    assert sorted(stamps) == sorted(f"{n}-{pid}" for n in (1, 2, 3) for pid in served)
    for path in baseline_files(pytester.path / "baselines"):
        assert len(load(path)["entries"]["call0"]["runs"]) == 3
    time_spent = json.loads(report.read_text())["time"]
    assert time_spent["processes"] == 2
    assert time_spent["processes_s"] > 0
    assert "where the time went: fresh processes starting" in result.stdout.str()


def test_parametrized_ids_get_safe_file_names(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        @pytest.mark.parametrize("p", [1, 2, 3], ids=["../../escape", "a/b/..", ".."])
        def test_p(fxprof, p):
            profile(fxprof)
        """,
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=3)
    directory = pytester.path / "baselines"
    files = baseline_files(directory)
    assert sorted(p.name for p in directory.iterdir()) == [p.name for p in files]  # nothing but the files
    assert len(files) == 3
    for path in files:
        assert path.parent == directory
        assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*\.json", path.name), path.name
    assert {load(p)["test_id"] for p in files} == {
        "test_perf.py::test_p[../../escape]",
        "test_perf.py::test_p[a/b/..]",
        "test_perf.py::test_p[..]",
    }
    written = {p.name for p in pytester.path.iterdir() if not p.name.startswith(".")} - set(CLOCK_FILES)
    assert sorted(written) == ["baselines", "test_perf.py"]
    assert not (pytester.path.parent / "escape").exists()

    result = run(pytester, "--fxprof")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=3)


# The module and inputs -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["", "--fxprof-update"], ids=["off", "update"])
def test_module_and_inputs_are_unchanged(pytester: pytest.Pytester, mode: str) -> None:
    write_tests(
        pytester,
        """
        def test_state(fxprof):
            model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
            model.train()
            model[3].eval()
            bn = model[1]
            bn.running_mean += 0.5
            stats = {k: v.clone() for k, v in bn.state_dict().items()}
            params = {k: v.detach().clone() for k, v in model.named_parameters()}
            x = torch.randn(4, 8)
            x_before = x.clone()

            fxprof(model, x)

            assert [m.training for m in model.modules()] == [True, True, True, True, False]
            for k, v in bn.state_dict().items():
                assert torch.equal(v, stats[k]), k
            assert int(bn.num_batches_tracked) == 0
            for k, v in model.named_parameters():
                assert torch.equal(v, params[k]), k
            assert torch.equal(x, x_before)
            assert torch.is_grad_enabled()
        """,
    )
    args = [mode] if mode else []
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)


def test_profiles_under_no_grad(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        class Probe(nn.Module):
            def __init__(self):
                super().__init__()
                self.seen = []

            def forward(self, x):
                self.seen.append((torch.is_grad_enabled(), x.requires_grad))
                return x


        class Probed(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.probe = Probe()

            def forward(self, x):
                return self.probe(self.fc(x))


        def test_grad(fxprof):
            model = Probed()
            x = torch.randn(4, 8, requires_grad=True)
            fxprof(model, x, leaf_modules=[Probe])
            # FLOPs counted, 1 warm-up + 3 passes instrumented, then 1 + 3 plain calls; one pass of the graphs and
            # one plain call that read the page faults
            assert len(model.probe.seen) == 11
            assert set(model.probe.seen) == {(False, False)}
            assert torch.is_grad_enabled()
            assert x.grad is None
        """,
    )
    result = run(pytester, "--fxprof-update", "--fxprof-processes=1")  # the calls of this process counted
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)


def test_failure_in_a_fresh_process_records_nothing(pytester: pytest.Pytester) -> None:
    """The test passes here but fails in the fresh process that records the second run; the other test, served
    by the same process, is recorded."""
    pytester.makepyfile(
        test_perf="""
        import torch

        def test_once(fxprof):
            assert fxprof.mode != "sample", "fails in a fresh process"
            fxprof(torch.nn.Linear(4, 4), torch.ones(4))

        def test_fine(fxprof):
            fxprof(torch.nn.Linear(4, 4), torch.ones(4))
        """
    )
    result = runp(pytester, "--fxprof-update", "--fxprof-processes=2", "--fxprof-warmup=0", "--fxprof-passes=1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*fxprof: could not record the baseline: fresh process 1 of 1 for test_perf.py::test_once failed "
            "(the test failed there)*",
            "*fails in a fresh process*",
        ]
    )
    ids = [load(p)["test_id"] for p in baseline_files(pytester.path / "baselines")]
    assert ids == ["test_perf.py::test_fine"]
    assert "During handling of the above exception" not in result.stdout.str()


def test_a_test_that_fails_after_its_call_is_not_recorded(pytester: pytest.Pytester) -> None:
    """Teardown errors and strict XPASS fail the test after fxprof ran: nothing is written for them."""
    pytester.makepyfile(
        test_perf="""
        import pytest
        import torch

        @pytest.fixture
        def broken_teardown():
            yield
            raise RuntimeError("teardown failed")

        def test_teardown(fxprof, broken_teardown):
            fxprof(torch.nn.Linear(4, 4), torch.ones(4))

        @pytest.mark.xfail(strict=True)
        def test_xpass(fxprof):
            fxprof(torch.nn.Linear(4, 4), torch.ones(4))

        def test_good(fxprof):
            fxprof(torch.nn.Linear(4, 4), torch.ones(4))
        """
    )
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=1, errors=1)  # test_teardown's call passed, its teardown errored
    section = fxprof_section(result)
    assert "test_perf.py::test_teardown: not recorded, the test did not pass" in section
    assert "test_perf.py::test_xpass: not recorded, the test did not pass" in section
    files = baseline_files(pytester.path / "baselines")
    assert [load(p)["test_id"] for p in files] == ["test_perf.py::test_good"]


def test_a_run_whose_every_call_failed_says_so(pytester: pytest.Pytester) -> None:
    write_tests(pytester, "def test_a(fxprof):\n    fxprof('not a module', torch.randn(2))\n")
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1)
    assert fxprof_section(result)[0] == (
        "no profile was taken: 1 call(s) of the fxprof fixture failed (their tests say why)"
    )


def test_a_marker_added_at_run_time_counts(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        def test_a(fxprof, request):
            request.node.add_marker(pytest.mark.fxprof(passes=2))
            profile(fxprof)
        """,
    )
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    entry = load(only_file(pytester.path / "baselines"))["entries"]["call0"]
    assert entry["protocol"]["passes"] == 2  # not the command line's 3


def test_the_record_command_quotes_any_test_id() -> None:
    test_id = "test_perf.py::test_p[it's $HOME `x`]"
    command = rerecord_hint(test_id).removeprefix("record it with: ")
    assert shlex.split(command) == ["pytest", "--fxprof-update", test_id]


def test_update_never_overwrites_a_newer_schema(pytester: pytest.Pytester) -> None:
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof)\n")
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    path = only_file(pytester.path / "baselines")
    data = load(path)
    data["schema_version"] = 99
    path.write_text(json.dumps(data), encoding="utf-8")
    before = path.read_bytes()
    result = run(pytester, "--fxprof-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the test passed, but its baseline was not recorded
    result.assert_outcomes(passed=1)
    assert "test_perf.py::test_a: not recorded, its baseline has a newer schema; upgrade pytest-fxprof" in (
        fxprof_section(result)
    )
    assert path.read_bytes() == before


def test_a_baseline_of_one_process_decides_nothing_until_a_second_recording(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process cannot show how a model's times vary between processes: the recording says so, and a check
    against it ends undecided, nothing claimed, even of a test 16 times slower; a second recording in the history
    gives the spread, and the check judges again."""
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof, 'a')\n")
    said = "the baseline holds one process's measurement, which cannot show how much the model's times vary"
    lone = ("--fxprof-processes=1", "--fxprof-report=r.json")
    recorded = decide(pytester, "--fxprof-update", *lone)
    assert recorded.ret == pytest.ExitCode.OK
    assert any(said in w and "a check against it ends undecided" in w for w in fxprof_warnings(recorded))
    monkeypatch.setenv(SLOW_ENV, "a")
    checked = decide(pytester, "--fxprof", *lone)
    assert checked.ret == pytest.ExitCode.TESTS_FAILED
    checked.assert_outcomes(failed=1)
    text = checked.stdout.str()
    assert "test_perf.py::test_a [call0]: undecided against its baseline, no verdict" in text
    assert "its baseline holds one process's measurement" in text
    assert "pytest --fxprof-update 'test_perf.py::test_a' --fxprof-processes 5" in text
    assert "got slower" not in text
    assert "1 profile(s) undecided against a baseline of one process: record them from 2 or more processes" in text
    assert "too noisy to decide; measure on a quieter machine" not in text  # a quieter machine would not help
    assert not fxprof_warnings(checked)  # said once, in the failure
    (profile,) = load(pytester.path / "r.json")["profiles"]
    assert profile["status"] == "undecided"
    assert profile["remeasured"] is False  # nothing to confirm
    monkeypatch.delenv(SLOW_ENV)
    assert decide(pytester, "--fxprof-update", *lone).ret == pytest.ExitCode.OK  # a second recording joins the history
    again = decide(pytester, "--fxprof", *lone)
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    assert not any(said in w for w in fxprof_warnings(again))
    monkeypatch.setenv(SLOW_ENV, "a")
    slowed = decide(pytester, "--fxprof", *lone)
    assert slowed.ret == pytest.ExitCode.TESTS_FAILED
    assert "test_perf.py::test_a [call0] got slower than its baseline (1 process(es) over 2 recordings)" in (
        slowed.stdout.str()
    )
