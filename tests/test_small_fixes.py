"""What the plugin says when a run cannot go on: the advice for a shallow clone that lacks the base revision, where
two captures of a call part, and what a node that runs out of CUDA memory leaves behind (no GPU needed: CUDA is
faked)."""

from __future__ import annotations

import re
import shlex
import subprocess
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

from pytest_fxprof import profile
from pytest_fxprof.against.revision import RevisionError, resolve
from pytest_fxprof.capture.choose import capture_module
from pytest_fxprof.capture.errors import ProfileError
from pytest_fxprof.capture.nodes import describe_nodes
from pytest_fxprof.records.measurement import capture_difference
from tests.test_against_parts import git

# A shallow clone ----------------------------------------------------------------------------------------


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """A repository of three commits on ``main``, a tag ``v1`` on the first and a branch ``other`` off it."""
    root = tmp_path / "upstream"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for i in range(3):
        (root / "a.py").write_text(f"VALUE = {i}\n")
        git(root, "add", ".")
        git(root, "commit", "-qm", f"commit {i}")
    git(root, "tag", "v1", "HEAD~2")
    git(root, "branch", "other", "HEAD~2")
    return root


@pytest.mark.parametrize(
    ("ref", "names", "advised"),
    [
        ("HEAD~2", "HEAD~2", "git fetch --deepen=2 origin"),
        ("origin/other", "other", "git fetch --depth=1 origin other:refs/remotes/origin/other"),
        ("origin/main~1", "main~1", "git fetch --deepen=1 origin"),  # a single-branch clone has origin/main
        ("other", "other", "git fetch --depth=1 origin other:other"),
        ("v1", "v1", "git fetch --depth=1 origin v1:v1"),
        ("sha", "other", "git fetch --depth=1 origin {sha}"),
        ("short", "other", "git fetch --unshallow --tags origin '+refs/heads/*:refs/remotes/origin/*'"),
    ],
)
def test_a_shallow_clone_is_told_a_fetch_that_brings_the_revision(
    upstream: Path, tmp_path: Path, ref: str, names: str, advised: str
) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{upstream}", str(clone))
    sha = git(upstream, "rev-parse", names)
    ref = {"sha": sha, "short": sha[:10]}.get(ref, ref)
    with pytest.raises(RevisionError) as info:
        resolve(ref, clone)
    message = str(info.value)
    assert "shallow" in message
    assert "fetch-depth: 0" in message
    assert "HEAD~" not in message.partition("newest commits")[2]  # a remote resolves no HEAD~1
    commands = re.findall(r"`(git fetch [^`]*)`", message)
    assert commands[0] == advised.format(sha=sha)
    subprocess.run(shlex.split(commands[0]), cwd=clone, check=True, capture_output=True)
    assert resolve(ref, clone) == (clone.resolve(), sha)


# A node that runs out of CUDA memory --------------------------------------------------------------------

CALLS: list[weakref.ref[torch.Tensor]] = []


@torch.fx.wrap
def short_of_memory(y: torch.Tensor) -> torch.Tensor:
    """A function node that runs out of memory on its eighth call (the second kept pass: the plain calls, 1 thrown
    away and 3 timed, the counting pass and the warm-up pass before it), keeping a weak reference to its input, an
    activation of the pass."""
    CALLS.append(weakref.ref(y))
    if len(CALLS) == 8:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return y * 2


class Hungry(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(short_of_memory(self.fc(x)))


@pytest.mark.parametrize("engine", ["compiled", "interpreter"])
@pytest.mark.parametrize("initialised", [True, False])
def test_a_node_out_of_cuda_memory_drops_its_activations_and_empties_the_cache(
    monkeypatch: pytest.MonkeyPatch, engine: str, initialised: bool
) -> None:
    emptied: list[bool] = []  # per call: whether the failing pass's activation was already gone
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(CALLS[-1]() is None))
    CALLS.clear()
    with pytest.raises(ProfileError) as info:  # held, as pytest holds a failed test's error
        profile(Hungry(), torch.randn(2, 4), warmup=1, passes=3, engine=engine, capture="symbolic")
    assert len(CALLS) == 8
    assert CALLS[-1]() is None  # the activation the failing pass made is no longer held by the error
    assert emptied == ([True] if initialised else [])  # no CUDA call where CUDA was never initialised
    first = str(info.value).splitlines()[0]
    assert first.startswith("the captured graph of Hungry failed in node short_of_memory (call_function ")
    said, _, where = first.partition(" (at ")
    assert said.endswith("): OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert "test_small_fixes.py:" in where  # the line that raised it: the cleared traceback keeps its lines
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)  # the original, kept


# A capture that differs from call to call ----------------------------------------------------------------


class Counting(nn.Module):
    """A forward that branches on how often it ran: its second capture is another graph."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = self.fc(x)
        return torch.relu(y) if self.calls == 1 else torch.sigmoid(y)


def keys(model: nn.Module) -> list[str]:
    captured = capture_module(model, (torch.randn(2, 4),), {}, mode="symbolic")
    return [info.key for _, info in describe_nodes(captured.graphs)]


def test_two_captures_that_differ_are_told_apart_with_the_fix() -> None:
    model = Counting()
    first, second = keys(model), keys(model)
    said = capture_difference(first, second)
    assert said.startswith(
        "the first capture has 2 node(s), the second 2; at node 2 the first capture has "
        "call_function:<root>:torch.relu#0, the second call_function:<root>:torch.sigmoid#0."
    )
    assert "torch.manual_seed(0)" in said
    assert capture_difference(first, first[:1]).startswith(
        "the first capture has 2 node(s), the second 1; the first capture goes on after node 1 with "
        "call_function:<root>:torch.relu#0"
    )


FLIPPING = """
from pathlib import Path

import torch
from torch import nn

FLIP = Path("seen").exists()  # the fresh process of the recording imports this module after this one did
Path("seen").touch()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.fc(x)) if FLIP else torch.relu(self.fc(x))


def test_net(fxprof):
    fxprof(Net(), torch.randn(2, 4))
"""


def test_a_fresh_process_that_captures_another_graph_says_where_and_how_to_fix_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_flip=FLIPPING)
    result = pytester.runpytest_subprocess(
        "--fxprof-update",
        "--fxprof-processes=2",
        "--fxprof-warmup=0",
        "--fxprof-passes=1",
        "--fxprof-capture=symbolic",
        "-p",
        "no:cacheprovider",
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert "captured a different graph for 'call0' than this process did; the capture must be deterministic" in out
    assert (
        "this process's capture has 2 node(s), the fresh process's 2; at node 2 this process's capture has "
        "call_function:<root>:torch.relu#0, the fresh process's call_function:<root>:torch.sigmoid#0." in out
    )
    assert "seed the random generators in the test (torch.manual_seed(0)" in out


# What a run says when it ends early, or cannot write -----------------------------------------------------

PROFILED = """
import torch


def test_net(fxprof):
    fxprof(torch.nn.Linear(4, 4).eval(), torch.randn(2, 4))
"""


def test_ctrl_c_before_any_profile_says_the_run_was_interrupted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a="def test_stop():\n    raise KeyboardInterrupt\n", test_b=PROFILED)
    result = pytester.runpytest("-p", "no:cacheprovider", "--fxprof", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "interrupted before any profile was taken" in out
    assert "no test called the fxprof fixture" not in out


def test_an_update_that_cannot_write_its_baselines_stops_before_measuring(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_b=PROFILED)
    (pytester.path / "a-file").write_text("")
    result = pytester.runpytest("-p", "no:cacheprovider", "--fxprof-update", "--fxprof-baseline-dir=a-file/baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"--fxprof-update cannot write baselines to {pytester.path / 'a-file' / 'baselines'}" in err
    assert "a-file is a file, not a directory. Make it writable, or record them elsewhere with --fxprof-base" in err
    assert "recorded" not in result.stdout.str()
    assert "passed" not in result.stdout.str()
