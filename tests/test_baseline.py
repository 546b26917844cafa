"""Unit tests of ``pytest_fxprof.store``: the baseline file format, its validation, file names and atomic writes."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import pytest_fxprof.store.baseline as baseline_module
import pytest_fxprof.store.files as files_module
from pytest_fxprof.records.measurement import (
    BaselineEntry,
    Capture,
    Environment,
    NodeInfo,
    Protocol,
    Recording,
    Run,
    Setup,
    Tolerances,
    node_key,
)
from pytest_fxprof.store.baseline import (
    SCHEMA_VERSION,
    BaselineError,
    BaselineFile,
    BaselineStore,
    as_file,
    entry_from_json,
    entry_to_json,
    file_name,
    parse,
    read_baseline,
    render,
)
from pytest_fxprof.store.files import dumps, stale_temporaries, write_atomic
from pytest_fxprof.store.schema import capture_to_json
from pytest_fxprof.store.validation import capture_from_json, run_from_json

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "baseline_v1.json"
GOLDEN_V2 = DATA / "baseline_v2.json"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.json$")
PATH = Path("baselines/some-test.json")

ENV = Environment(
    torch="2.4.1+cpu",
    python="3.11.9",
    platform="Linux-6.8.0-x86_64-with-glibc2.39",
    cpu="Intel(R) Xeon(R) Platinum 8480+",
    threads=4,
    device="cpu",
    allocator="glibc-tuned",
)


def make_entry(node_count: int = 3, run_count: int = 2, leaf_modules: tuple[str, ...] = ()) -> BaselineEntry:
    nodes = tuple(
        NodeInfo(
            key=node_key("call_module", f"layers.{i}", f"layers.{i}", 0),
            name=f"layers_{i}",
            op="call_module",
            target=f"layers.{i}",
            module=f"layers.{i}",
        )
        for i in range(node_count)
    )
    runs = tuple(
        Run(
            total_ns=1_000_000 + r,
            instrumented_ns=1_400_000 + r,
            reference_ns=500_000 - r,
            node_ns=tuple(100_000 * (i + 1) + r for i in range(node_count)),
            node_spread_ns=tuple(1_000 * (i + 1) for i in range(node_count)),
        )
        for r in range(run_count)
    )
    return BaselineEntry(
        capture=Capture(method="symbolic_trace", leaf_modules=leaf_modules),
        environment=ENV,
        protocol=Protocol(warmup=5, passes=20, threads=4, processes=run_count),
        tolerances=Tolerances(node=0.2, total=0.1),
        nodes=nodes,
        runs=runs,
    )


def golden_raw() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return raw


# Round trip and canonical bytes -------------------------------------------------------------------

ROUND_TRIP = [
    pytest.param(as_file("tests/test_models.py::test_mlp", {"0": make_entry()}), id="one-entry"),
    pytest.param(
        as_file("tests/test_m.py::test_x[cpu-float32]", {"encoder": make_entry(5, 1), "decoder": make_entry(1, 5)}),
        id="named-entries",
    ),
    pytest.param(as_file("tests/test_ü.py::test_日本[😀]", {"0": make_entry(leaf_modules=("a.b", "c"))}), id="unicode"),
    pytest.param(as_file("t::empty_graph", {"0": make_entry(node_count=0)}), id="no-nodes"),
    pytest.param(as_file("t::no_entries", {}), id="no-entries"),
    pytest.param(
        as_file(
            "t::zeros",
            {
                "0": BaselineEntry(
                    capture=Capture(method="export"),
                    environment=ENV,
                    protocol=Protocol(0, 1, 1, 1),
                    tolerances=Tolerances(node=0.0, total=1.5),
                    nodes=make_entry(2).nodes,
                    runs=(Run(0, 1, 0, (0, 1), (0, 0)),),  # a run must have measured some time
                )
            },
        ),
        id="zeros",
    ),
    pytest.param(
        as_file(
            "t::slow",
            {
                "0": BaselineEntry(
                    capture=Capture(method="symbolic_trace"),
                    environment=ENV,
                    protocol=Protocol(5, 20, 4, 1),
                    tolerances=Tolerances(node=0.123456789, total=0.1),
                    nodes=make_entry(1).nodes,
                    runs=(Run(3_600 * 10**9, 2**63, 10**18, (2**53 + 1,), (1,)),),
                )
            },
        ),
        id="huge-times",
    ),
    pytest.param(
        as_file(
            "t::setup",
            {
                "0": replace(
                    make_entry(2, 1),
                    setup=Setup(inputs=("args[0]: float32[4, 8] cpu", "kwargs['flag']: True"), mode="eval"),
                    shapes=("float32[4, 16]", ""),
                )
            },
        ),
        id="setup-and-shapes",
    ),
    pytest.param(
        as_file(
            "t::history",
            {
                "0": replace(
                    make_entry(2, 2),
                    recorded="2026-11-24T22:30:05Z",
                    history=(
                        Recording("2026-11-23T08:00:00Z", ENV, Protocol(4, 12, 1, 1), make_entry(2, 1).runs),
                        Recording("", replace(ENV, python="3.12.1"), Protocol(4, 12, 1, 3), make_entry(2, 3).runs),
                    ),
                )
            },
        ),
        id="history",
    ),
    pytest.param(
        as_file(
            "t::memory",
            {
                "0": replace(
                    make_entry(2, 2),
                    runs=tuple(
                        replace(r, faults=12_300, node_faults=(0, 4_000), module_faults=(("", 12_300), ("attn", 8_000)))
                        for r in make_entry(2, 2).runs
                    ),
                    allocated=(1_048_576, 0),
                    capture=replace(make_entry(2, 2).capture, opaque=("tokenizer",)),
                )
            },
        ),
        id="memory-and-opaque",
    ),
]


@pytest.mark.parametrize("baseline", ROUND_TRIP)
def test_round_trip(baseline: BaselineFile) -> None:
    text = render(baseline)
    assert parse(text, PATH) == baseline
    # and the text is stable once it has been through the parser
    assert render(parse(text, PATH)) == text


@pytest.mark.parametrize("baseline", ROUND_TRIP)
def test_round_trip_through_the_store(tmp_path: Path, baseline: BaselineFile) -> None:
    store = BaselineStore(tmp_path / "baselines")
    path = store.write(baseline)
    assert path == store.path_for(baseline.test_id)
    assert store.load(baseline.test_id) == baseline
    assert path.read_text(encoding="utf-8") == render(baseline)


def test_render_is_byte_stable() -> None:
    entries = {"b": make_entry(4, 3), "a": make_entry(2, 1), "10": make_entry(1, 1), "2": make_entry(1, 2)}
    first = render(as_file("tests/test_x.py::test_y", entries))
    second = render(as_file("tests/test_x.py::test_y", dict(reversed(list(entries.items())))))
    assert first == second
    # entries in any insertion order, straight into BaselineFile, still give the same bytes
    assert render(BaselineFile("tests/test_x.py::test_y", dict(reversed(list(entries.items()))))) == first
    assert first.encode("utf-8") == render(parse(first, PATH)).encode("utf-8")


def test_render_layout() -> None:
    text = render(as_file("tests/test_ü.py::test_x", {"0": make_entry()}))
    assert text.endswith("}\n")
    assert not text.endswith("\n\n")
    assert "\r" not in text
    assert "\t" not in text
    assert '\n  "entries": {' in text  # two-space indentation
    assert "test_ü" in text  # not escaped to \u00fc


def _check_sorted(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys)
    return dict(pairs)


def test_render_sorts_every_objects_keys() -> None:
    text = render(as_file("t::x", {"z": make_entry(), "a": make_entry(), "m": make_entry()}))
    raw = json.loads(text, object_pairs_hook=_check_sorted)
    assert list(raw) == ["entries", "schema_version", "test_id"]
    assert list(raw["entries"]) == ["a", "m", "z"]
    assert raw["schema_version"] == SCHEMA_VERSION


def test_render_writes_times_as_integers() -> None:
    raw = json.loads(render(as_file("t::x", {"0": make_entry()})))
    for run in raw["entries"]["0"]["runs"]:
        for key in ("total_ns", "instrumented_ns", "reference_ns"):
            assert type(run[key]) is int
        for key in ("node_ns", "node_spread_ns"):
            assert all(type(v) is int for v in run[key])
    assert type(raw["entries"]["0"]["environment"]["threads"]) is int
    assert all(type(v) is int for v in raw["entries"]["0"]["protocol"].values())
    assert all(type(v) is float for v in raw["entries"]["0"]["tolerances"].values())


def test_dumps_refuses_nan() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        dumps({"x": float("nan")})


# Golden file --------------------------------------------------------------------------------------


def test_golden_file_parses() -> None:
    text = GOLDEN.read_text(encoding="utf-8")
    baseline = parse(text, GOLDEN)
    assert baseline.test_id == "tests/test_models.py::test_mlp"
    assert list(baseline.entries) == ["forward"]
    entry = baseline.entries["forward"]
    assert entry.capture == Capture(method="symbolic_trace", leaf_modules=("fc1",))
    assert entry.environment == Environment(
        torch="2.4.1+cpu",
        python="3.11.9",
        platform="Linux-6.8.0-x86_64-with-glibc2.39",
        cpu="Intel(R) Xeon(R) Platinum 8480+",
        threads=1,
        device="cpu",
        allocator="glibc-tuned",
        clock="wall",
        engine="compiled",
    )
    assert entry.protocol == Protocol(warmup=5, passes=20, threads=1, processes=2)
    assert entry.tolerances == Tolerances(node=0.2, total=0.1)
    assert entry.nodes == (
        NodeInfo("call_module:fc1:fc1#0", "fc1", "call_module", "fc1", "fc1", "models.py:14"),
        NodeInfo("call_function:<root>:torch.relu#0", "relu", "call_function", "torch.relu", "", "models.py:15"),
    )
    assert entry.runs == (
        Run(152_340, 201_777, 498_812, (101_200, 40_315), (2_210, 905)),
        Run(150_998, 199_804, 502_116, (100_431, 40_911), (1_876, 1_130)),
    )


def test_golden_file_renders_to_the_same_bytes_but_the_version() -> None:
    text = GOLDEN.read_text(encoding="utf-8")
    # a version 1 file is written as version 2 with every field kept: no date, no history, nothing else new
    assert render(parse(text, GOLDEN)) == text.replace('"schema_version": 1,', f'"schema_version": {SCHEMA_VERSION},')
    assert SCHEMA_VERSION == 2


def test_a_file_from_before_the_clock_was_recorded_was_timed_on_the_wall_clock() -> None:
    text = GOLDEN.read_text(encoding="utf-8")
    older = text.replace('        "clock": "wall",\n', "")
    assert older != text
    baseline = parse(older, GOLDEN)
    assert baseline.entries["forward"].environment.clock == "wall"
    assert render(baseline) == text.replace('"schema_version": 1,', '"schema_version": 2,')  # written again, it says so


def test_a_file_from_before_engines_and_source_lines_was_timed_by_the_interpreter() -> None:
    raw = golden_raw()
    del raw["entries"]["forward"]["environment"]["engine"]
    del raw["entries"]["forward"]["capture"]["graphs"]
    del raw["entries"]["forward"]["capture"]["detail"]
    for node in raw["entries"]["forward"]["nodes"]:
        del node["source"]
    entry = parse(json.dumps(raw), GOLDEN).entries["forward"]
    assert entry.environment.engine == "interpreter"
    assert entry.capture.graphs == 1
    assert [n.source for n in entry.nodes] == ["", ""]
    assert [n.key for n in entry.nodes] == [n["key"] for n in golden_raw()["entries"]["forward"]["nodes"]]


def test_the_clock_is_kept() -> None:
    raw = golden_raw()
    raw["entries"]["forward"]["environment"]["clock"] = "thread-cpu"
    baseline = parse(json.dumps(raw), GOLDEN)
    assert baseline.entries["forward"].environment.clock == "thread-cpu"
    assert json.loads(render(baseline))["entries"]["forward"]["environment"]["clock"] == "thread-cpu"


def test_golden_file_loads_from_a_store(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    test_id = "tests/test_models.py::test_mlp"
    store.path_for(test_id).write_bytes(GOLDEN.read_bytes())
    loaded = store.load(test_id)
    assert loaded is not None
    assert loaded == parse(GOLDEN.read_text(encoding="utf-8"), GOLDEN)


# Version 2: the entry's date and its history ------------------------------------------------------


def golden_v2_raw() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(GOLDEN_V2.read_text(encoding="utf-8"))
    return raw


def test_a_version_1_file_reads_with_every_field_and_no_history() -> None:
    entry = parse(GOLDEN.read_text(encoding="utf-8"), GOLDEN).entries["forward"]
    assert (entry.recorded, entry.history) == ("", ())
    assert entry.recordings == (Recording("", entry.environment, entry.protocol, entry.runs),)
    # every field of version 1 is what the golden file's own test reads
    assert entry.runs[0] == Run(152_340, 201_777, 498_812, (101_200, 40_315), (2_210, 905))
    assert entry.capture == Capture(method="symbolic_trace", leaf_modules=("fc1",))
    assert [n.source for n in entry.nodes] == ["models.py:14", "models.py:15"]


def test_the_version_2_golden_file_parses() -> None:
    v1 = parse(GOLDEN.read_text(encoding="utf-8"), GOLDEN).entries["forward"]
    entry = parse(GOLDEN_V2.read_text(encoding="utf-8"), GOLDEN_V2).entries["forward"]
    # the entry's own recording is the version 1 file's, now dated
    assert replace(entry, recorded="", history=()) == v1
    assert entry.recorded == "2026-11-24T22:30:05Z"
    assert [r.date for r in entry.recordings] == ["2026-11-24T22:30:05Z", "2026-11-23T09:14:02Z", ""]
    assert entry.recordings[0] == Recording(entry.recorded, entry.environment, entry.protocol, entry.runs)
    older, oldest = entry.history
    assert older.environment == replace(entry.environment, python="3.11.8")
    assert older.protocol == entry.protocol
    assert older.runs == (
        Run(149_870, 198_120, 497_003, (99_870, 39_990), (1_950, 870)),
        Run(151_002, 200_331, 500_876, (100_912, 40_101), (2_040, 1_002)),
    )
    assert oldest.protocol == Protocol(warmup=5, passes=20, threads=1, processes=1)
    assert oldest.runs == (Run(153_411, 203_004, 501_230, (102_004, 40_877), (2_300, 940)),)


def test_the_version_2_golden_file_renders_to_the_same_bytes() -> None:
    text = GOLDEN_V2.read_text(encoding="utf-8")
    assert render(parse(text, GOLDEN_V2)) == text
    raw = json.loads(text, object_pairs_hook=_check_sorted)  # every object's keys sorted, history's too
    assert list(raw["entries"]["forward"]["history"][0]) == ["date", "environment", "protocol", "runs"]


def test_an_entry_without_a_date_or_history_writes_neither() -> None:
    raw = json.loads(render(as_file("t::x", {"0": make_entry()})))
    assert "recorded" not in raw["entries"]["0"]
    assert "history" not in raw["entries"]["0"]
    dated = json.loads(render(as_file("t::x", {"0": replace(make_entry(), recorded="2026-01-02T03:04:05Z")})))
    assert dated["entries"]["0"]["recorded"] == "2026-01-02T03:04:05Z"
    assert "history" not in dated["entries"]["0"]


def test_history_survives_the_way_entries_travel_between_processes() -> None:
    entry = parse(GOLDEN_V2.read_text(encoding="utf-8"), GOLDEN_V2).entries["forward"]
    sent = json.loads(json.dumps(entry_to_json(entry)))  # what an xdist worker sends
    assert entry_from_json(sent) == entry


def _history(raw: dict[str, Any], i: int = 1) -> dict[str, Any]:
    item: dict[str, Any] = _entry(raw)["history"][i]
    return item


BAD_HISTORY: list[Any] = [
    pytest.param(
        lambda r: _history(r)["runs"][0]["node_ns"].append(7),
        "entries['forward'].history[1].runs[0].node_ns should be 2 non-negative integers (one per node)",
        id="history-run-of-another-graph",
    ),
    pytest.param(
        lambda r: _history(r, 0)["runs"][1].pop("reference_ns"),
        "entries['forward'].history[0].runs[1].reference_ns is missing",
        id="history-run-field-missing",
    ),
    pytest.param(
        lambda r: _history(r).update(runs=[]), "entries['forward'].history[1].runs is empty", id="history-no-runs"
    ),
    pytest.param(
        lambda r: _history(r).pop("environment"),
        "entries['forward'].history[1].environment is missing",
        id="history-no-environment",
    ),
    pytest.param(
        lambda r: _history(r)["environment"].update(threads=0),
        "entries['forward'].history[1].environment.threads should be at least 1, found 0",
        id="history-threads-0",
    ),
    pytest.param(
        lambda r: _history(r)["protocol"].update(passes="20"),
        "entries['forward'].history[1].protocol.passes should be int, found str",
        id="history-passes-str",
    ),
    pytest.param(
        lambda r: _history(r).pop("date"), "entries['forward'].history[1].date is missing", id="history-no-date"
    ),
    pytest.param(
        lambda r: _history(r, 0).update(date="2026-11-23 09:14"),
        "entries['forward'].history[0].date is '2026-11-23 09:14', not a UTC date to the second such as "
        "'2026-11-24T22:30:05Z' (or '')",
        id="history-bad-date",
    ),
    pytest.param(
        lambda r: _entry(r).update(recorded="yesterday"),
        "entries['forward'].recorded is 'yesterday', not a UTC date",
        id="bad-recorded",
    ),
    pytest.param(
        lambda r: _entry(r).update(recorded=None),
        "entries['forward'].recorded should be str, found NoneType",
        id="recorded-null",
    ),
    pytest.param(
        lambda r: _entry(r)["runs"][0].update(faults=-1),
        "entries['forward'].runs[0].faults should be at least 0, found -1",
        id="negative-faults",
    ),
    pytest.param(
        lambda r: _entry(r)["runs"][0].update(node_faults=[1]),
        "entries['forward'].runs[0].node_faults should be",
        id="node-faults-not-one-per-node",
    ),
    pytest.param(
        lambda r: _entry(r)["runs"][0].update(module_faults={"attn": "many"}),
        "entries['forward'].runs[0].module_faults should map module paths to non-negative integers",
        id="module-faults-not-counts",
    ),
    pytest.param(
        lambda r: _entry(r)["nodes"][0].update(allocated=1.5),
        "entries['forward'].nodes[0].allocated should be int, found float",
        id="allocated-not-an-integer",
    ),
    pytest.param(
        lambda r: _entry(r)["capture"].update(opaque="tokenizer"),
        "entries['forward'].capture.opaque should be list, found str",
        id="opaque-not-a-list",
    ),
    pytest.param(
        lambda r: _entry(r).update(history={}),
        "entries['forward'].history should be list, found dict",
        id="history-not-a-list",
    ),
    pytest.param(
        lambda r: _entry(r)["history"].__setitem__(0, []),
        "entries['forward'].history[0] should be an object",
        id="history-item-not-an-object",
    ),
]


@pytest.mark.parametrize(("mutate", "problem"), BAD_HISTORY)
def test_a_malformed_history_is_one_clear_error(tmp_path: Path, mutate: Mutation, problem: str) -> None:
    raw = golden_v2_raw()
    mutate(raw)
    exc = load_text(tmp_path, dumps(raw))
    assert exc.problem.startswith("the file is not a pytest-fxprof baseline: ")
    assert problem in exc.problem
    assert "--fxprof-update" in str(exc)


def test_an_empty_history_and_an_unknown_date_are_read() -> None:
    raw = golden_v2_raw()
    _entry(raw).update(history=[], recorded="")
    entry = parse(dumps(raw), GOLDEN_V2).entries["forward"]
    assert (entry.recorded, entry.history) == ("", ())


# File names ---------------------------------------------------------------------------------------

IDS = [
    "tests/test_models.py::test_resnet18",
    "tests/test_models.py::test_resnet18[cpu-float32]",
    "a/b",
    "a_b",
    "a b",
    "a\\b",
    "A_B",
    "..",
    ".",
    "../../etc/passwd",
    "/etc/passwd",
    "C:\\Windows\\System32\\drivers\\etc\\hosts",
    "\\\\server\\share",
    ".hidden",
    "-rf",
    "___",
    "",
    " ",
    "test_ü[日本]",
    "test_u[日本]",
    "😀",
    "😀😀",
    "test[😀-🚀]",
    "tests/test_x.py::test_y[\n]",
    "tests/test_x.py::test_y[\t]",
    "lone\udc80surrogate",
    "x" * 5000,
    "x" * 5000 + "y",
    "x" * 80 + "/",
    "x" * 80 + ".json",
    "test.json",
    "CON",
    "nul",
]


@pytest.mark.parametrize("test_id", IDS, ids=[ascii(i)[:40] for i in IDS])
def test_file_name_is_safe(tmp_path: Path, test_id: str) -> None:
    name = file_name(test_id)
    assert NAME_RE.match(name), name
    assert len(name) <= 100
    assert name not in (".json", "..json")
    assert "/" not in name
    assert "\\" not in name
    store = BaselineStore(tmp_path / "baselines")
    path = store.path_for(test_id)
    assert path.parent == store.directory
    assert path.name == name
    # the name is deterministic
    assert file_name(test_id) == name


def test_file_names_never_collide() -> None:
    names = [file_name(i) for i in IDS]
    assert len(set(names)) == len(IDS)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("a/b", "a_b"),
        ("a b", "a_b"),
        ("a\\b", "a/b"),
        ("test_ü[日本]", "test_u[日本]"),
        ("Test_A", "test_a"),  # case-insensitive file systems
        ("x" * 5000, "x" * 5000 + "y"),  # same readable part after truncation
        ("", "_"),
    ],
)
def test_ids_that_read_alike_get_different_names(first: str, second: str) -> None:
    assert file_name(first) != file_name(second)
    assert file_name(first).lower() != file_name(second).lower()


def test_file_name_keeps_a_readable_part() -> None:
    name = file_name("tests/test_models.py::test_resnet18[cpu]")
    assert name.startswith("tests_test_models.py_test_resnet18_cpu-")
    assert file_name("").startswith("test-")
    assert file_name("..").startswith("test-")
    assert file_name("😀").startswith("test-")


def test_file_name_truncates_long_ids() -> None:
    name = file_name("x" * 5000)
    assert name.startswith("x" * 80 + "-")
    assert not name.startswith("x" * 81)


# Loading errors -----------------------------------------------------------------------------------

TEST_ID = "tests/test_models.py::test_mlp"


def load_text(tmp_path: Path, text: str | bytes, test_id: str = TEST_ID) -> BaselineError:
    store = BaselineStore(tmp_path)
    path = store.path_for(test_id)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(BaselineError) as info:
        store.load(test_id)
    exc = info.value
    assert exc.path == path
    assert str(exc).startswith(f"{path}: {exc.problem}. ")
    return exc


GOLDEN_TEXT = GOLDEN.read_text(encoding="utf-8")

BAD_TEXT = [
    pytest.param("", "the file is empty", id="empty"),
    pytest.param("  \n\t\n", "the file is empty", id="whitespace"),
    pytest.param(GOLDEN_TEXT[: len(GOLDEN_TEXT) // 2], "not valid JSON", id="truncated"),
    pytest.param("{", "not valid JSON", id="one-brace"),
    pytest.param("{'a': 1}", "not valid JSON", id="single-quotes"),
    pytest.param(
        "<<<<<<< HEAD\n" + GOLDEN_TEXT + "=======\n" + GOLDEN_TEXT + ">>>>>>> feature\n",
        "merge-conflict markers",
        id="conflict-whole-file",
    ),
    pytest.param(
        GOLDEN_TEXT.replace(
            '          "total_ns": 152340\n',
            '<<<<<<< ours\n          "total_ns": 152340\n=======\n          "total_ns": 160000\n>>>>>>> theirs\n',
        ),
        "merge-conflict markers",
        id="conflict-inside",
    ),
]


@pytest.mark.parametrize(("text", "problem"), BAD_TEXT)
def test_unreadable_text(tmp_path: Path, text: str, problem: str) -> None:
    exc = load_text(tmp_path, text)
    assert problem in exc.problem
    assert "--fxprof-update" in str(exc)


def test_truncated_json_says_where_and_suggests_truncation(tmp_path: Path) -> None:
    exc = load_text(tmp_path, GOLDEN_TEXT[:200])
    assert "line" in exc.problem
    assert "column" in exc.problem
    assert "truncated?" in exc.problem


def test_conflict_markers_suggest_resolving(tmp_path: Path) -> None:
    exc = load_text(tmp_path, "<<<<<<< HEAD\n{}\n=======\n{}\n>>>>>>> other\n")
    assert "Resolve the conflict" in str(exc)


def test_invalid_utf8_cannot_be_read(tmp_path: Path) -> None:
    exc = load_text(tmp_path, b'{"test_id": "\xff\xfe"}')
    assert "cannot be read" in exc.problem
    assert "encoding" in str(exc)


Mutation = Callable[[dict[str, Any]], object]


def _entry(raw: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = raw["entries"]["forward"]
    return entry


def _run0(raw: dict[str, Any]) -> dict[str, Any]:
    run: dict[str, Any] = _entry(raw)["runs"][0]
    return run


W = "entries['forward']"

BAD_SHAPES: list[Any] = [
    pytest.param(lambda r: r.pop("test_id"), "'test_id' is missing", id="missing-test-id"),
    pytest.param(lambda r: r.pop("entries"), "'entries' is missing", id="missing-entries"),
    pytest.param(lambda r: r.pop("schema_version"), "'schema_version' is missing", id="missing-version"),
    pytest.param(lambda r: _run0(r).pop("total_ns"), f"{W}.runs[0].total_ns is missing", id="missing-total"),
    pytest.param(lambda r: _entry(r).pop("environment"), f"{W}.environment is missing", id="missing-env"),
    pytest.param(lambda r: _entry(r)["nodes"][1].pop("op"), f"{W}.nodes[1].op is missing", id="missing-node-op"),
    pytest.param(
        lambda r: _entry(r)["environment"].update(threads="1"),
        f"{W}.environment.threads should be int, found str",
        id="threads-str",
    ),
    pytest.param(
        lambda r: r.update(test_id=["x"]),
        "test_id should be str, found list",
        id="test-id-list",
    ),
    pytest.param(lambda r: r.update(entries=[]), "entries should be dict, found list", id="entries-list"),
    pytest.param(lambda r: _entry(r).update(runs=[]), f"{W}.runs is empty", id="no-runs"),
    pytest.param(
        lambda r: _run0(r)["node_ns"].append(1),
        f"{W}.runs[0].node_ns should be 2 non-negative integers (one per node)",
        id="node-ns-too-long",
    ),
    pytest.param(
        lambda r: _run0(r)["node_spread_ns"].pop(),
        f"{W}.runs[0].node_spread_ns should be 2 non-negative integers",
        id="spread-too-short",
    ),
    pytest.param(
        lambda r: _entry(r)["nodes"].pop(),
        f"{W}.runs[0].node_ns should be 1 non-negative integers",
        id="fewer-nodes-than-times",
    ),
    pytest.param(
        lambda r: _run0(r).update(total_ns=True),
        f"{W}.runs[0].total_ns should be int, found bool",
        id="bool-total",
    ),
    pytest.param(
        lambda r: _entry(r)["environment"].update(threads=False),
        "threads should be int, found bool",
        id="bool-threads",
    ),
    pytest.param(
        lambda r: r.update(schema_version=True), "schema_version should be int, found bool", id="bool-version"
    ),
    pytest.param(
        lambda r: _run0(r).update(node_ns=[True, 1]),
        "node_ns should be 2 non-negative integers",
        id="bool-in-node-ns",
    ),
    pytest.param(
        lambda r: _run0(r).update(node_ns=[-1, 1]),
        "node_ns should be 2 non-negative integers",
        id="negative-node-time",
    ),
    pytest.param(
        lambda r: _run0(r).update(node_spread_ns=[1.5, 1]),
        "node_spread_ns should be 2 non-negative integers",
        id="float-in-spread",
    ),
    pytest.param(
        lambda r: _run0(r).update(total_ns=1.5),
        "total_ns should be int, found float",
        id="float-total",
    ),
    pytest.param(
        lambda r: _entry(r)["tolerances"].update(node="0.2"),
        "tolerances.node should be int or float, found str",
        id="tolerance-str",
    ),
    pytest.param(
        lambda r: _entry(r)["protocol"].update(passes=None),
        "protocol.passes should be int, found NoneType",
        id="passes-null",
    ),
    pytest.param(
        lambda r: _entry(r)["nodes"].__setitem__(0, "fc1"),
        f"{W}.nodes[0] should be an object",
        id="node-not-object",
    ),
    pytest.param(lambda r: r.update(schema_version="1"), "schema_version should be int, found str", id="version-str"),
    pytest.param(
        lambda r: r.update(schema_version=0),
        "schema_version 0 is not a version pytest-fxprof ever wrote",
        id="version-0",
    ),
    pytest.param(
        lambda r: r.update(schema_version=-3),
        "schema_version -3 is not a version",
        id="version-negative",
    ),
]


@pytest.mark.parametrize(("mutate", "problem"), BAD_SHAPES)
def test_wrong_shape(tmp_path: Path, mutate: Mutation, problem: str) -> None:
    raw = golden_raw()
    mutate(raw)
    exc = load_text(tmp_path, dumps(raw))
    assert exc.problem.startswith("the file is not a pytest-fxprof baseline: ")
    assert problem in exc.problem
    assert "--fxprof-update" in str(exc)


@pytest.mark.parametrize("text", ["[]", "1", '"baseline"', "null"])
def test_top_level_not_an_object(tmp_path: Path, text: str) -> None:
    exc = load_text(tmp_path, text)
    assert "the top level should be an object" in exc.problem


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 99])
def test_newer_schema_asks_for_an_upgrade(tmp_path: Path, version: int) -> None:
    raw = golden_raw()
    raw["schema_version"] = version
    raw["entries"] = "whatever a future version stores"  # not validated: the version is checked first
    exc = load_text(tmp_path, dumps(raw))
    assert f"schema version {version}, newer than the {SCHEMA_VERSION}" in exc.problem
    assert "Upgrade pytest-fxprof" in str(exc)


def test_test_id_mismatch(tmp_path: Path) -> None:
    raw = golden_raw()
    raw["test_id"] = "tests/test_other.py::test_other"
    exc = load_text(tmp_path, dumps(raw), test_id=TEST_ID)
    assert f"it belongs to test 'tests/test_other.py::test_other', not {TEST_ID!r}" in exc.problem
    assert "copied or renamed" in str(exc)


def test_missing_file_is_none(tmp_path: Path) -> None:
    assert BaselineStore(tmp_path).load(TEST_ID) is None
    assert BaselineStore(tmp_path / "does-not-exist").load(TEST_ID) is None


def test_unknown_extra_fields_are_ignored(tmp_path: Path) -> None:
    raw = golden_raw()
    raw["comment"] = "added by hand"
    _entry(raw)["note"] = 1
    store = BaselineStore(tmp_path)
    store.path_for(TEST_ID).write_text(dumps(raw), encoding="utf-8")
    assert store.load(TEST_ID) == parse(GOLDEN_TEXT, GOLDEN)


def test_integer_tolerances_are_read_as_floats() -> None:
    raw = golden_raw()
    _entry(raw)["tolerances"] = {"node": 1, "total": 0}
    entry = parse(dumps(raw), PATH).entries["forward"]
    assert entry.tolerances == Tolerances(node=1.0, total=0.0)
    assert type(entry.tolerances.node) is float


@pytest.mark.parametrize("field", ["total_ns", "instrumented_ns", "reference_ns"])
def test_negative_run_time_is_rejected(field: str) -> None:
    raw = golden_raw()
    _run0(raw)[field] = -1
    with pytest.raises(BaselineError, match=rf"runs\[0\]\.{field} should be at least 0"):
        parse(dumps(raw), PATH)


@pytest.mark.parametrize(("field", "value"), [("passes", 0), ("passes", -4), ("threads", 0), ("warmup", -1)])
def test_protocol_counts_out_of_range_are_rejected(field: str, value: int) -> None:
    raw = golden_raw()
    _entry(raw)["protocol"][field] = value
    with pytest.raises(BaselineError, match=rf"protocol\.{field} should be at least"):
        parse(dumps(raw), PATH)


def test_leaf_modules_must_be_strings() -> None:
    raw = golden_raw()
    _entry(raw)["capture"]["leaf_modules"] = [1, None]
    with pytest.raises(BaselineError, match=r"leaf_modules should be a list of strings"):
        parse(dumps(raw), PATH)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_rejected(constant: str) -> None:
    text = GOLDEN_TEXT.replace('"node": ', f'"node": {constant}, "was": ', 1)
    with pytest.raises(BaselineError, match=rf"not valid JSON \({constant} is not a number"):
        parse(text, PATH)


def test_negative_tolerance_is_rejected() -> None:
    raw = golden_raw()
    _entry(raw)["tolerances"]["node"] = -0.1
    with pytest.raises(BaselineError, match=r"tolerances\.node should be a finite non-negative number"):
        parse(dumps(raw), PATH)


# entry_from_json / run_from_json / capture_from_json ----------------------------------------------


def test_entry_and_run_from_json() -> None:
    raw = golden_raw()
    entry = entry_from_json(copy.deepcopy(_entry(raw)))
    assert entry == parse(GOLDEN_TEXT, GOLDEN).entries["forward"]
    assert run_from_json(_run0(raw), "run", 2) == entry.runs[0]
    bad = _entry(raw)
    bad["runs"][0]["node_ns"] = [1]
    with pytest.raises(ValueError, match=r"^entry\.runs\[0\]\.node_ns should be 2 non-negative integers"):
        entry_from_json(bad)
    with pytest.raises(ValueError, match=r"^run\.node_ns should be 2"):
        run_from_json(bad["runs"][0], "run", 2)
    assert capture_from_json(capture_to_json(entry.capture), "capture") == entry.capture
    with pytest.raises(ValueError, match=r"^captured\.leaf_modules is missing"):
        capture_from_json({"method": "export"}, "captured")
    with pytest.raises(ValueError, match=r"^captured should be an object"):
        capture_from_json(["export"], "captured")


# Atomic writes ------------------------------------------------------------------------------------


def test_write_creates_the_directory_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "deep" / "baselines")
    baseline = as_file(TEST_ID, {"0": make_entry()})
    path = store.write(baseline)
    assert sorted(p.name for p in store.directory.iterdir()) == [path.name]
    # writing again replaces the file in place
    store.write(as_file(TEST_ID, {"0": make_entry(1, 1)}))
    assert sorted(p.name for p in store.directory.iterdir()) == [path.name]
    assert store.load(TEST_ID) == as_file(TEST_ID, {"0": make_entry(1, 1)})


def test_failed_rename_leaves_the_old_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BaselineStore(tmp_path)
    old = as_file(TEST_ID, {"0": make_entry()})
    path = store.write(old)
    before = path.read_bytes()

    def fail(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        store.write(as_file(TEST_ID, {"0": make_entry(5, 5)}))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert store.load(TEST_ID) == old


class Interrupted(BaseException):
    pass


def test_interrupted_write_leaves_no_file_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(fd: int) -> None:
        raise Interrupted

    store = BaselineStore(tmp_path)
    monkeypatch.setattr(os, "fsync", interrupt)
    with pytest.raises(Interrupted):
        store.write(as_file(TEST_ID, {"0": make_entry()}))
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    assert store.load(TEST_ID) is None


# recorded_tests ------------------------------------------------------------------------------------


def test_recorded_tests(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    good = store.write(as_file("t::good", {"0": make_entry()}))
    other = store.write(as_file("t::other", {"0": make_entry(1, 1)}))
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1', encoding="utf-8")
    empty = tmp_path / "empty.json"
    empty.write_text("", encoding="utf-8")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    conflicted = tmp_path / "conflicted.json"
    conflicted.write_text("<<<<<<< HEAD\n{}\n=======\n{}\n>>>>>>> x\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("not a baseline", encoding="utf-8")
    (tmp_path / ".x.json.tmp").write_text("{", encoding="utf-8")
    found = dict(store.recorded_tests())
    assert found == {
        good: "t::good",
        other: "t::other",
        broken: None,
        empty: None,
        binary: None,
        conflicted: None,
    }
    assert [p for p, _ in store.recorded_tests()] == sorted(found)


def test_recorded_tests_reports_the_id_inside_even_if_the_name_does_not_match(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    renamed = tmp_path / "renamed.json"
    renamed.write_text(render(as_file("t::real", {"0": make_entry()})), encoding="utf-8")
    assert list(store.recorded_tests()) == [(renamed, "t::real")]


def test_recorded_tests_without_a_directory(tmp_path: Path) -> None:
    assert list(BaselineStore(tmp_path / "missing").recorded_tests()) == []
    a_file = tmp_path / "file"
    a_file.write_text("", encoding="utf-8")
    assert list(BaselineStore(a_file).recorded_tests()) == []


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_written_files_get_the_mode_a_plain_open_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int, mode: int
) -> None:
    """Under the usual umask, readable by the group and others (a CI artifact, a shared checkout), not only by
    the owner as the temporary file was; a stricter umask is kept."""
    monkeypatch.setattr(files_module, "_UMASK", umask)
    path = BaselineStore(tmp_path).write(ROUND_TRIP[0].values[0])  # type: ignore[arg-type]
    write_atomic(tmp_path / "report.html", "<html></html>\n")
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == mode


# Files no baseline can be: each one clear error, never a crash or a silent use ----------------------------


def test_a_deeply_nested_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(BaselineError, match=r"deep\.json: the file is not a pytest-fxprof baseline: it is nested too"):
        read_baseline(path)
    assert list(BaselineStore(tmp_path).recorded_tests()) == [(path, None)]


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BaselineStore(tmp_path)
    path = store.write(as_file(TEST_ID, {"0": make_entry()}))
    monkeypatch.setattr(baseline_module, "MAX_BYTES", path.stat().st_size - 1)
    reads: list[Path] = []

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return ""

    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(BaselineError, match=r"it is too large to be a baseline \(0 MiB, more than the 0 MiB limit"):
        store.load(TEST_ID)
    assert reads == []  # not read at all
    assert list(store.recorded_tests()) == [(path, None)]


def zero_times(raw: dict[str, Any]) -> dict[str, Any]:
    run = raw["entries"]["0"]["runs"][0]
    run.update(total_ns=0, instrumented_ns=0, reference_ns=0, node_ns=[0] * len(run["node_ns"]))
    return raw


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        pytest.param(
            lambda text: text.replace('"total_ns": 1000000', '"total_ns": 1' + "0" * 400, 1),
            r"entries\['0'\]\.runs\[0\]\.total_ns holds an integer of 401 digits \(100000000000\.\.\.\), beyond 64",
            id="400-digits",
        ),
        pytest.param(
            lambda text: text.replace('"test_id": ', '"test_id": "t::other", "test_id": ', 1),
            r"the key 'test_id' appears twice in one object \(at the top\)",
            id="duplicate-key",
        ),
        pytest.param(
            lambda text: dumps(zero_times(json.loads(text))),
            r"entries\['0'\]\.runs\[0\] holds no measured time \(instrumented_ns and every node_ns are 0\)",
            id="all-zero-times",
        ),
    ],
)
def test_numbers_and_keys_no_baseline_holds_are_refused(
    tmp_path: Path, edit: Callable[[str], str], problem: str
) -> None:
    text = render(as_file(TEST_ID, {"0": make_entry(2, 1)}))
    edited = edit(text)
    assert edited != text
    with pytest.raises(BaselineError, match=problem):
        parse(edited, PATH)


def test_a_symbolic_link_in_the_directory_is_refused_not_followed(tmp_path: Path) -> None:
    elsewhere = BaselineStore(tmp_path / "elsewhere").write(as_file(TEST_ID, {"0": make_entry()}))
    store = BaselineStore(tmp_path / "baselines")
    store.directory.mkdir()
    store.path_for(TEST_ID).symlink_to(elsewhere)
    with pytest.raises(BaselineError, match=r"it is a symbolic link \(to .*elsewhere.*\), not a baseline file"):
        store.load(TEST_ID)
    assert list(store.recorded_tests()) == [(store.path_for(TEST_ID), None)]


KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
import pytest_fxprof.store.files as files
os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)  # killed between the write and the rename
files.write_atomic(Path(sys.argv[1]), "{}")
"""


def test_the_temporary_file_of_a_killed_writer_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(store.path_for(TEST_ID))], check=False)
    assert killed.returncode == -signal.SIGKILL
    (left,) = tmp_path.glob(".*.tmp")
    assert files_module.TEMPORARY.match(left.name)
    live = tmp_path / f".other.{os.getpid()}.abc123.tmp"  # a writer still at work
    live.write_text("{", encoding="utf-8")
    assert stale_temporaries(tmp_path) == [left]
    assert store.remove_stale_temporaries() == [left]
    assert sorted(tmp_path.iterdir()) == [live]
