"""The options registry (``pytest_fxprof.options``): every flag, ini key, marker keyword, help text and the docs'
options reference come from it, and a new option or view is one entry there."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from pytest_fxprof import options
from pytest_fxprof.settings import RUN_WIDE, SETTING_NAMES
from pytest_fxprof.views import outputs
from pytest_fxprof.views.report import ProfileRecord
from tests.test_plugin import run, write_tests


def has_ini(config: pytest.Config, key: str) -> bool:
    try:
        config.getini(key)
    except ValueError:  # pytest: unknown configuration value
        return False
    return True


def flags(config: pytest.Config) -> set[str]:
    return {name for opt in config._parser.getgroup("fxprof").options for name in opt.names()}


def test_every_option_has_its_flag_its_ini_key_and_the_marker_takes_the_per_test_ones(
    pytester: pytest.Pytester,
) -> None:
    config = pytester.parseconfig()
    for option in options.all_options():
        assert (option.flag in flags(config)) is option.cli, option.name
        assert has_ini(config, option.ini_key) is option.ini, option.name
        if option.cli and not option.alias_of:
            assert config.getoption(option.dest) is None, option.name
    # every setting but those that hold for the whole process (the allocator), which the marker refuses
    assert {o.name for o in options.all_options() if o.per_test} == set(SETTING_NAMES) - set(RUN_WIDE)
    assert RUN_WIDE == ("allocator",)


def test_the_marker_refuses_a_setting_that_holds_for_the_whole_process(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest

        @pytest.mark.fxprof(allocator="tuned")
        def test_a(fxprof):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ["*@pytest.mark.fxprof(allocator=...) is not a per-test setting*--fxprof-allocator or the ini key*"]
    )


def test_the_reference_lists_every_option_a_user_sets_with_its_help() -> None:
    table = options.reference_markdown()
    for option in options.all_options():
        shown = f"`{option.flag}" in table or f"`{option.ini_key}`" in table
        assert shown is not option.hidden, option.name
        if not option.hidden:
            assert option.help.replace("|", "\\|") in table, option.name
    assert len(table.splitlines()) == 2 + sum(not o.hidden for o in options.all_options())


def test_a_choice_is_checked_on_the_command_line(pytester: pytest.Pytester) -> None:
    with pytest.raises(pytest.UsageError, match="invalid choice: 'tracing'"):
        pytester.parseconfig("--fxprof-capture", "tracing")
    assert pytester.parseconfig("--fxprof-capture", "export").getoption("fxprof_capture") == "export"


def test_a_new_run_option_is_one_entry_in_the_registry(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = options.Option("colour_names", "Colour the node names", metavar="WHEN")
    monkeypatch.setattr(options, "RUN_OPTIONS", (*options.RUN_OPTIONS, extra))
    config = pytester.parseconfig("--fxprof-colour-names", "always")
    assert config.getoption("fxprof_colour_names") == "always"
    assert has_ini(config, "fxprof_colour_names")
    assert "| `--fxprof-colour-names WHEN` | `fxprof_colour_names` |" in options.reference_markdown()


def _lines(
    path: Path, mode: str, records: Sequence[ProfileRecord], unused: Sequence[str], _: Mapping[str, str]
) -> list[Path]:
    path.write_text(json.dumps([mode, *(r["summary"] for r in records)]), encoding="utf-8")
    return [path]


def test_a_new_view_is_its_writer_and_one_entry_in_the_registry(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view added to ``views.outputs.VIEWS`` gets its option and ini key, and is written at the run's end."""
    monkeypatch.setitem(outputs.VIEWS, "summaries", outputs.View("PATH", "Write each call's summary line", _lines))
    write_tests(pytester, "def test_a(fxprof):\n    profile(fxprof)\n")
    result = run(pytester, "-p", "no:xdist", "--fxprof-update", "--fxprof-summaries", "out.json")
    result.assert_outcomes(passed=1)
    written = json.loads((pytester.path / "out.json").read_text(encoding="utf-8"))
    assert written[0] == "update"
    assert written[1].startswith("test_perf.py::test_a [call0]: recorded")
    assert "--fxprof-summaries=PATH" in "".join(run(pytester, "--help").outlines)


@pytest.mark.parametrize("given", ["--fxprof-against=", "--fxprof-against=  ", "--fxprof-baseline-dir="])
def test_an_empty_value_is_a_usage_error_not_a_gate_turned_off(pytester: pytest.Pytester, given: str) -> None:
    # an unset variable in a CI script: --fxprof-against=$BASE_REF ran plain pytest, "1 passed", exit 0
    pytester.makepyfile("def test_model(): pass")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", given)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    flag = given.partition("=")[0]
    result.stderr.fnmatch_lines([f"*{flag} was given an empty value*unset variable*leave the option out*"])
    assert "passed" not in result.stdout.str()
