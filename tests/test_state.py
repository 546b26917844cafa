"""What a test changes of torch's globals before its call (``measure.signature.state_of``), how two setups that
differ in it are told apart (``Setup.differences``), and that a baseline keeps it."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import replace

import pytest
import torch
from torch.nn import functional

from pytest_fxprof.measure import signature
from pytest_fxprof.records.measurement import Setup
from pytest_fxprof.store.baseline import entry_from_json, entry_to_json
from tests.test_render import BASELINE


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test begun: its globals noted; the dtype and ``functional.relu`` put back after it."""
    monkeypatch.setattr(signature, "_START", [])
    dtype = torch.get_default_dtype()
    monkeypatch.setattr(functional, "relu", functional.relu)
    signature.note_start()
    yield
    torch.set_default_dtype(dtype)


def test_outside_a_test_nothing_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signature, "_START", [])
    assert signature.state_of() == ()


@pytest.mark.usefixtures("started")
def test_what_the_test_changed_is_named() -> None:
    assert signature.state_of() == ()
    torch.set_default_dtype(torch.float64)
    functional.relu = lambda x, inplace=False: torch.clamp(x, min=0)  # type: ignore[assignment]
    assert signature.state_of() == ("default dtype: torch.float64", "replaced: torch.nn.functional.relu")


@pytest.mark.usefixtures("started")
def test_a_wrapper_of_the_same_function_is_not_a_replacement() -> None:
    """torch wraps some of its own functions as a submodule is first imported (``torch._dynamo`` wraps
    ``torch.manual_seed``): the function is the same, and one side that imported it first must not differ."""
    original = functional.relu

    @functools.wraps(original)
    def wrapped(*args: object, **kwargs: object) -> torch.Tensor:
        return original(*args, **kwargs)  # type: ignore[arg-type]

    functional.relu = wrapped
    assert signature.state_of() == ()


def test_setups_that_differ_in_state_name_the_test_as_the_cause() -> None:
    base = Setup(("args[0]: float32[4, 8] cpu",), "eval")
    changed = replace(base, state=("default dtype: torch.float64", "replaced: torch.nn.functional.relu"))
    (line,) = base.differences(changed)
    assert line == (
        "state: this test sets the default dtype to torch.float64 in this run, not in the baseline; this test "
        "replaces torch.nn.functional.relu in this run, not in the baseline"
    )
    (back,) = changed.differences(base)
    assert back.startswith("state: this test sets the default dtype to torch.float64 in the baseline, not in")
    assert base.differences(base) == []


def test_a_baseline_keeps_the_state_and_an_older_one_reads_as_none() -> None:
    entry = replace(BASELINE, setup=Setup(("args[0]: float32[4, 8] cpu",), "eval", ("grad mode: off",)))
    raw = entry_to_json(entry)
    assert raw["setup"]["state"] == ["grad mode: off"]
    assert entry_from_json(raw, "t").setup == entry.setup
    plain = replace(entry, setup=Setup(("args[0]: float32[4, 8] cpu",), "eval"))
    assert "state" not in entry_to_json(plain)["setup"]  # left out where the test changed nothing
