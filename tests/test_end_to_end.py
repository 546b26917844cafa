"""End to end on a real torchvision model: record from fresh processes, check, catch a slowdown.

The only timing claim is about a slowdown far beyond any band (a node made 4x slower), and the
unchanged check asserts that a verdict was reached for every node, not which verdict: on a shared
machine an unchanged run may still be judged either way, and this suite never asserts on speed.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torchvision")

TEST_FILE = """
import os, time
import pytest, torch
from torchvision import models

def slow_down(module, fraction):
    started = []
    module.register_forward_pre_hook(lambda m, a: started.append(time.perf_counter_ns()))
    def after(m, a, out):
        begin = started.pop()
        until = time.perf_counter_ns() + (time.perf_counter_ns() - begin) * fraction
        while time.perf_counter_ns() < until:
            pass
    module.register_forward_hook(after)

def test_resnet18(fxprof):
    model = models.resnet18(weights=None).eval()
    if os.environ.get("SLOW_NODE"):
        slow_down(model.get_submodule(os.environ["SLOW_NODE"]), 3.0)
    result = fxprof(model, torch.randn(1, 3, 112, 112))
    assert len(result.nodes) == 69
"""


def test_resnet18_record_check_and_catch(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_rn=TEST_FILE)
    fast = ["--fxprof-warmup=3", "--fxprof-passes=10", "-p", "no:cacheprovider"]
    record = pytester.runpytest("--fxprof-update", "--fxprof-processes=2", *fast)
    assert record.ret == pytest.ExitCode.OK, record.stdout.str()
    (path,) = (pytester.path / "baselines").glob("*.json")
    stored = json.loads(path.read_text())
    entry = stored["entries"]["call0"]
    assert stored["test_id"] == "test_rn.py::test_resnet18"
    assert len(entry["runs"]) == 2  # this process and one fresh one
    assert len(entry["nodes"]) == 69

    check = pytester.runpytest("--fxprof", "--fxprof-report=report.json", *fast)
    assert check.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    report = json.loads((pytester.path / "report.json").read_text())
    (profile,) = report["profiles"]
    assert profile["status"] in ("pass", "regression")
    assert all(node["verdict"] in ("ok", "slower", "faster") for node in profile["nodes"])
    assert profile["overhead"] > 0

    monkeypatch.setenv("SLOW_NODE", "layer1.0.conv1")
    caught = pytester.runpytest("--fxprof", "--fxprof-report=report.json", *fast)
    assert caught.ret == pytest.ExitCode.TESTS_FAILED
    caught.stdout.fnmatch_lines(["*slower: layer1_0_conv1 (call_module Conv2d in layer1.0.conv1)*"])
    report = json.loads((pytester.path / "report.json").read_text())
    slowed = [n["name"] for n in report["profiles"][0]["nodes"] if n.get("verdict") == "slower"]
    assert "layer1_0_conv1" in slowed
