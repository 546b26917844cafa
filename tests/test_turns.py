"""One measurement at a time: the machine's measuring turns (``measure.turns``) and the plugin's use of them."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import threading
from pathlib import Path

import pytest

from pytest_fxprof.measure.turns import Turn, TurnError, Turns, default_lock_path
from tests.test_plugin import FAST, LOOSE, QUIET, TWO_TESTS, fxprof_section, runp, write_tests


class Ticks:
    """A clock that reads 10, 20, 30, ... seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 10.0
        return self.now


def test_a_turn_records_what_it_measured_when_and_how_long_it_waited(tmp_path: Path) -> None:
    clock, waiting = Ticks(), Ticks()
    turns = Turns(tmp_path / "m.lock", clock=clock, waiting_clock=waiting)
    taken: list[Turn] = []
    with turns.turn("profile", taken):
        pass
    assert taken == [Turn("profile", 10.0, 20.0, 10.0)]
    assert taken[0].to_json() == {
        "what": "profile",
        "start": "1970-01-01T00:00:10.000000Z",
        "end": "1970-01-01T00:00:20.000000Z",
        "waited_s": 10.0,
    }


def test_a_turn_is_reentrant_within_a_process_and_recorded_when_its_body_fails(tmp_path: Path) -> None:
    turns = Turns(tmp_path / "m.lock", clock=Ticks(), waiting_clock=Ticks())
    taken: list[Turn] = []
    # the inner turn is already held here: no second wait, no deadlock
    with (
        pytest.raises(RuntimeError, match="inside"),
        turns.turn("fresh processes", taken),
        turns.turn("profile", taken),
    ):
        raise RuntimeError("inside")
    assert [(t.what, t.waited_s) for t in taken] == [("profile", 0.0), ("fresh processes", 10.0)]
    with turns.turn("again", taken):  # released: it can be taken again
        pass
    assert taken[-1].what == "again"


def test_two_holders_of_the_lock_take_turns(tmp_path: Path) -> None:
    path = tmp_path / "m.lock"
    events: list[str] = []
    tried = threading.Event()

    def second() -> None:
        tried.set()
        with Turns(path).turn("second"):
            events.append("second in")

    with Turns(path).turn("first"):
        thread = threading.Thread(target=second)
        thread.start()
        tried.wait()
        thread.join(0.2)  # gives the thread the chance to (wrongly) get in; no timing is asserted
        events.append("first out")
    thread.join()
    assert events == ["first out", "second in"]


def test_without_a_lock_file_nothing_is_locked(tmp_path: Path) -> None:
    taken: list[Turn] = []
    with Turns(None).turn("a", taken), Turns(None).turn("b", taken):
        pass
    assert [t.what for t in taken] == ["b", "a"]
    assert not list(tmp_path.iterdir())


def test_a_lock_that_cannot_be_taken_names_the_file_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    path = tmp_path / "a-file" / "m.lock"  # a directory that cannot exist
    with pytest.raises(TurnError, match=r"a-file/m.lock.*--fxprof-lock=off"), Turns(path).turn("profile"):
        pass


def test_the_default_lock_is_one_per_user_in_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    assert default_lock_path().parent == tmp_path
    assert default_lock_path().name.startswith("fxprof-measure-")


# Through pytest ------------------------------------------------------------------------------------------


def intervals(report: Path) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """Every measuring turn in a JSON report, once each (a test's own turns are listed under each of its calls),
    in the order they started."""
    seen = set()
    for profile in json.loads(report.read_text(encoding="utf-8"))["profiles"]:
        for turn in profile["measuring"]:
            seen.add((profile["test_id"], turn["what"], turn["start"], turn["end"]))
    turns = [
        (f"{test} {what}", dt.datetime.fromisoformat(start), dt.datetime.fromisoformat(end))
        for test, what, start, end in seen
    ]
    return sorted(turns, key=lambda t: (t[1], t[2]))


FOUR_TESTS = (
    TWO_TESTS
    + """

def test_c(fxprof):
    profile(fxprof, "c")


def test_d(fxprof):
    profile(fxprof, "d")


def test_no_measuring():
    pass
"""
)


@pytest.mark.parametrize("mode", ["--fxprof-update", "--fxprof"])
def test_under_xdist_measuring_turns_never_overlap(pytester: pytest.Pytester, mode: str) -> None:
    write_tests(pytester, FOUR_TESTS)
    lock = f"--fxprof-lock={pytester.path / 'measure.lock'}"
    assert runp(pytester, *FAST, *LOOSE, "--fxprof-update", "--fxprof-processes=2", lock).ret == 0
    result = pytester.runpytest_subprocess(
        *QUIET, "-n", "2", *FAST, *LOOSE, mode, "--fxprof-processes=2", lock, "--fxprof-report=r.json", "-v"
    )
    assert result.ret == 0, result.stdout.str()
    turns = intervals(pytester.path / "r.json")
    whats = {name.split(" ", 1)[1] for name, _, _ in turns}
    assert whats == ({"profile", "fresh processes"} if mode == "--fxprof-update" else {"profile"})
    assert len({name.split(" ")[0] for name, _, _ in turns}) == 4  # every measuring test took its turns
    for (a, _, a_end), (b, b_start, _) in itertools.pairwise(turns):
        assert a_end <= b_start, f"{a} and {b} measured at the same time"
    summary = [line for line in fxprof_section(result) if "measured one at a time" in line]
    assert summary, fxprof_section(result)
    assert f"{len(turns)} measuring turn(s)" in summary[0]


def test_with_the_lock_off_no_file_is_made(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    result = runp(pytester, *FAST, *LOOSE, "--fxprof-update", "--fxprof-lock=off", "--fxprof-report=r.json", "-v")
    assert result.ret == 0
    assert intervals(pytester.path / "r.json")  # the turns are still on record, though none waited for a lock
    assert not list(pytester.path.glob("*.lock"))
    assert not any("measured one at a time" in line for line in fxprof_section(result))


def test_an_unusable_lock_fails_the_test_with_the_fix(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    (pytester.path / "a-file").write_text("", encoding="utf-8")
    result = runp(pytester, *FAST, *LOOSE, "--fxprof-update", f"--fxprof-lock={pytester.path / 'a-file' / 'x.lock'}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*cannot take the measuring lock*--fxprof-lock=off*"])
    assert "INTERNALERROR" not in result.stdout.str()
