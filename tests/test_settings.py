"""Unit tests of ``pytest_fxprof.settings``: defaults, coercion, validation and precedence of sources."""

from __future__ import annotations

import re

import pytest

from pytest_fxprof.judge.band import SPREAD_K
from pytest_fxprof.judge.decision import DEFAULT_FLOOR_NS, HISTORY_NODE_TOLERANCE, Policy
from pytest_fxprof.judge.paired import PairedPolicy
from pytest_fxprof.records.measurement import Protocol, Tolerances
from pytest_fxprof.settings import (
    KINDS,
    SETTING_HELP,
    SETTING_NAMES,
    TEXT_CHOICES,
    Mode,
    Settings,
    SettingsError,
    apply,
    from_json,
)

INT_SETTINGS = ("warmup", "passes", "threads", "processes", "pairs", "history")
FLOAT_SETTINGS = ("node_tolerance", "total_tolerance", "changed_tolerance", "floor_us", "budget_s")


def test_defaults() -> None:
    s = Settings()
    assert s.protocol() == Protocol(warmup=4, passes=12, threads=1, processes=5)
    assert s.tolerances() == Tolerances(node=0.15, total=0.10)
    assert s.policy() == Policy()
    assert s.policy().floor_ns == DEFAULT_FLOOR_NS
    assert s.policy().spread_k == SPREAD_K  # not a setting: the policy's default
    assert set(SETTING_NAMES) == {*INT_SETTINGS, *FLOAT_SETTINGS, *TEXT_CHOICES}
    assert (s.engine, s.capture) == ("compiled", "auto")


def test_tolerances_left_unset_take_the_modes_defaults() -> None:
    s = Settings()
    assert s.node_tolerance is None
    assert s.policy().node_tolerance == 0.15
    assert s.paired_policy() == PairedPolicy(
        node_tolerance=0.05, total_tolerance=0.03, changed_tolerance=0.01, floor_ns=DEFAULT_FLOOR_NS
    )
    mine = apply(s, {"node_tolerance": "0.08", "total_tolerance": 0.04, "changed_tolerance": "0.02"}, "command line")
    assert mine.policy().node_tolerance == mine.paired_policy().node_tolerance == 0.08
    assert mine.paired_policy().changed_tolerance == 0.02
    assert mine.tolerances() == Tolerances(node=0.08, total=0.04)


def test_pairs_and_their_budget() -> None:
    s = apply(Settings(), {"pairs": "4", "budget_s": 30, "schedule": "alternate"}, "marker")
    assert (s.pairs, s.max_pairs, s.budget_s, s.schedule) == (4, 19, 30.0, "alternate")
    assert (Settings().pairs, Settings().max_pairs) == (3, 18)
    assert Settings().schedule == "auto"
    with pytest.raises(SettingsError, match=r"pairs must be at least 3, not 2: fewer pairs cannot pass"):
        apply(Settings(), {"pairs": 2}, "marker")


@pytest.mark.parametrize(("name", "good"), [("engine", "interpreter"), ("capture", "dynamo"), ("capture", "inductor")])
def test_text_settings_take_only_their_choices(name: str, good: str) -> None:
    assert getattr(apply(Settings(), {name: good}, "command line"), name) == good
    with pytest.raises(SettingsError, match=rf"^ini file: {name} must be one of .*{good}.*, not 'fast'$"):
        apply(Settings(), {name: "fast"}, "ini file")


def test_mode_values() -> None:
    assert [m.value for m in Mode] == ["off", "check", "update", "sample", "against"]


def test_apply_nothing_is_identity() -> None:
    base = Settings(passes=7)
    assert apply(base, {}, "ini") == base


def test_later_apply_wins() -> None:
    """Precedence is the order of application: ini, then command line, then the test's marker."""
    ini = apply(Settings(), {"passes": "30", "warmup": "2", "node_tolerance": "0.3"}, "ini file")
    cli = apply(ini, {"passes": 40, "threads": 2}, "command line")
    marker = apply(cli, {"passes": 50, "node_tolerance": 0.5}, "@pytest.mark.fxprof")
    assert marker == Settings(
        node_tolerance=0.5,
        total_tolerance=None,
        warmup=2,
        passes=50,
        threads=2,
        processes=5,
        floor_us=DEFAULT_FLOOR_NS / 1e3,
    )
    # each layer kept what it set and later layers did not touch
    assert cli.passes == 40
    assert cli.node_tolerance == 0.3
    assert ini.threads == 1


def test_none_means_unset() -> None:
    base = Settings(passes=7, node_tolerance=0.4)
    out = apply(base, dict.fromkeys(SETTING_NAMES), "command line")
    assert out == base
    out = apply(base, {"passes": None, "warmup": 3}, "command line")
    assert out == Settings(passes=7, node_tolerance=0.4, warmup=3)


def test_apply_does_not_modify_its_inputs() -> None:
    base = Settings()
    values: dict[str, object] = {"passes": "9"}
    apply(base, values, "ini")
    assert base == Settings()
    assert values == {"passes": "9"}


def test_unknown_setting_names_the_key_and_lists_known_ones() -> None:
    with pytest.raises(SettingsError) as info:
        apply(Settings(), {"passses": 3, "tolerance": 0.1, "warmup": 2}, "@pytest.mark.fxprof")
    message = str(info.value)
    assert message.startswith("@pytest.mark.fxprof: unknown setting(s) passses, tolerance; known: ")
    for name in SETTING_NAMES:
        assert name in message.split("known: ", 1)[1]


def test_unknown_setting_is_reported_even_when_none() -> None:
    with pytest.raises(SettingsError, match="unknown setting"):
        apply(Settings(), {"bogus": None}, "ini")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("node_tolerance", "0.3", 0.3),
        ("node_tolerance", "1", 1.0),
        ("node_tolerance", " 0.25 ", 0.25),
        ("node_tolerance", 0, 0.0),
        ("total_tolerance", "1e-1", 0.1),
        ("floor_us", "7", 7.0),
        ("floor_us", "0", 0.0),
        ("passes", "7", 7),
        ("passes", " 7\n", 7),
        ("passes", 7, 7),
        ("passes", 7.0, 7),
        ("warmup", "0", 0),
        ("threads", "16", 16),
        ("processes", "1", 1),
    ],
)
def test_values_coerce(name: str, value: object, expected: float) -> None:
    out = apply(Settings(), {name: value}, "ini")
    got = getattr(out, name)
    assert got == expected
    assert type(got) is KINDS[name]


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        # not a number at all
        ("passes", "abc", "must be an integer, not 'abc'"),
        ("node_tolerance", "abc", "must be a number, not 'abc'"),
        ("floor_us", "", "must be a number, not ''"),
        ("threads", [2], "must be an integer, not [2]"),
        ("node_tolerance", {}, "must be a number, not {}"),
        # booleans are not numbers here, even though bool is an int in Python
        ("passes", True, "must be a number, not True"),
        ("node_tolerance", False, "must be a number, not False"),
        # a fraction where a count belongs
        ("passes", 2.5, "must be an integer, not 2.5"),
        ("warmup", "2.5", "must be an integer, not '2.5'"),
        ("processes", "1e3", "must be an integer, not '1e3'"),
        # below the minimum
        ("warmup", -1, "must be at least 0, not -1"),
        ("warmup", "-1", "must be at least 0, not '-1'"),
        ("passes", 0, "must be at least 1, not 0"),
        ("passes", "0", "must be at least 1, not '0'"),
        ("threads", 0, "must be at least 1, not 0"),
        ("processes", 0, "must be at least 1, not 0"),
        ("history", 0, "must be at least 1, not 0"),
        ("node_tolerance", -0.1, "must be at least 0, not -0.1"),
        ("total_tolerance", "-0.5", "must be at least 0, not '-0.5'"),
        ("floor_us", -1.0, "must be at least 0, not -1.0"),
    ],
)
def test_bad_values_name_the_setting_and_the_source(name: str, value: object, why: str) -> None:
    with pytest.raises(SettingsError) as info:
        apply(Settings(), {name: value}, "--fxprof-passes")
    assert str(info.value) == f"--fxprof-passes: {name} {why}"


def test_first_bad_value_stops_and_nothing_is_applied() -> None:
    base = Settings()
    with pytest.raises(SettingsError, match=re.escape("ini: passes must be at least 1")):
        apply(base, {"warmup": 3, "passes": 0}, "ini")
    assert base == Settings()


def test_settings_error_is_a_value_error() -> None:
    assert issubclass(SettingsError, ValueError)


def test_policy_tolerances_and_protocol_follow_settings() -> None:
    s = apply(Settings(), {"node_tolerance": "0.5", "total_tolerance": 0.25, "floor_us": "50", "passes": 3}, "ini")
    assert s.policy() == Policy(
        node_tolerance=0.5,
        total_tolerance=0.25,
        floor_ns=50_000,
        history_node_tolerance=0.5,  # the user's tolerance holds whatever the baseline's history
        history_total_tolerance=0.25,
    )
    assert Settings().policy().history_node_tolerance == HISTORY_NODE_TOLERANCE
    assert s.tolerances() == Tolerances(node=0.5, total=0.25)
    assert s.protocol() == Protocol(warmup=4, passes=3, threads=1, processes=5)


def test_json_round_trip() -> None:
    s = Settings(node_tolerance=0.3, passes=11, floor_us=2.5)
    raw = s.to_json()
    assert raw == {
        "node_tolerance": 0.3,
        "total_tolerance": None,
        "changed_tolerance": 0.01,
        "warmup": 4,
        "passes": 11,
        "threads": 1,
        "processes": 5,
        "floor_us": 2.5,
        "engine": "compiled",
        "capture": "auto",
        "pairs": 3,
        "budget_s": 150.0,
        "schedule": "auto",
        "allocator": "as-is",
        "history": 5,
    }
    assert from_json(raw) == s


def test_from_json_validates() -> None:
    with pytest.raises(SettingsError, match=r"^settings: passes must be at least 1"):
        from_json({"passes": 0})
    with pytest.raises(SettingsError, match=r"^settings: unknown setting\(s\) extra"):
        from_json({"extra": 1})


def test_infinite_count_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="passes"):
        apply(Settings(), {"passes": float("inf")}, "ini")


def test_nan_tolerance_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="node_tolerance"):
        apply(Settings(), {"node_tolerance": "nan"}, "ini")


@pytest.mark.parametrize("value", ["inf", float("inf"), "-inf"])
def test_infinite_floor_is_a_settings_error(value: object) -> None:
    with pytest.raises(SettingsError, match=r"^ini: floor_us must be a finite number"):
        apply(Settings(), {"floor_us": value}, "ini")


def test_command_line_help_states_the_defaults() -> None:
    for name in SETTING_NAMES:
        default = getattr(Settings(), name)
        if default is None:  # a tolerance: the mode's default
            stored, paired = Settings().policy(), Settings().paired_policy()
            shown = f"{getattr(stored, name):g} against baselines, {getattr(paired, name):g} against a revision"
        else:
            shown = default if isinstance(default, str) else f"{default:g}"
        assert f"(default {shown})" in SETTING_HELP[name], name
