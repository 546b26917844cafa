"""The mode against a revision through pytest's command line, on temporary git repositories.

Every inner run (and each of its old and new processes) reads the fake clock of ``tests/test_plugin.py``: a
model's time is what its code says, so that each verdict asserted here is fixed, whatever the machine does.
Each pair's ratio is then exact, and the fewest pairs a check may ask for decide.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pytest_fxprof import profile as fxprof_profile
from pytest_fxprof.against.answers import first_profile, merged, node_facts, side_profile
from pytest_fxprof.against.rounds import Pairs
from pytest_fxprof.judge.paired import MIN_DECIDING_PAIRS, MIN_PASSING_PAIRS
from pytest_fxprof.measure.forking import can_fork
from pytest_fxprof.measure.sampling import Child
from pytest_fxprof.records.measurement import BaselineEntry, Tolerances
from pytest_fxprof.store.baseline import entry_from_json, entry_to_json
from tests.test_plugin import CLOCK_CONFTEST, FAKE_CLOCK

pytest.importorskip("torch")

MODEL = """
import torch
from torch import nn

from fakeclock import CLOCK

SLOW_NS = {slow_ns}


class Slow(nn.Module):
    def forward(self, x):
        CLOCK.advance(SLOW_NS)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.slow = Slow()
        self.fc2 = nn.Linear(16, 4){extra_init}

    def forward(self, x):
        x = self.slow(self.act(self.fc1(x)))
        return self.fc2(x){extra_call}


def profile(fxprof, **kw):
    return fxprof(Net().eval(), torch.randn(4, 8), leaf_modules=[Slow], **kw)
"""

TEST = """
from model import profile


def test_net(fxprof):
    profile(fxprof)
"""

FAST = "2_000_000"

PAIRS = str(MIN_DECIDING_PAIRS)
"""The fewest pairs a check may ask for: on the fake clock every pair's ratio is exact, and they decide."""


def model(slow_ns: str = FAST, *, extra: bool = False) -> str:
    return MODEL.format(
        slow_ns=slow_ns,
        extra_init="\n        self.extra = nn.ReLU()" if extra else "",
        extra_call=" + self.extra(x).sum() * 0" if extra else "",
    )


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=True).stdout.strip()


def commit(pytester: pytest.Pytester, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (pytester.path / name).write_text(text)
    git(pytester.path, "add", ".")
    git(pytester.path, "commit", "-qm", message)
    return git(pytester.path, "rev-parse", "HEAD")


@pytest.fixture
def base(pytester: pytest.Pytester) -> str:
    """A repository whose first commit holds the model, its test and the fake clock; returns its sha."""
    git(pytester.path, "init", "-q")
    files = {"conftest.py": CLOCK_CONFTEST, "fakeclock.py": FAKE_CLOCK, "model.py": model(), "test_net.py": TEST}
    return commit(pytester, files, "base")


def against(pytester: pytest.Pytester, ref: str, *args: str, env: dict[str, str] | None = None) -> pytest.RunResult:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--fxprof-against", ref, "--fxprof-pairs", PAIRS]
    # the fake clock slows a model that computes what it computed before: measured, not proven unchanged
    cmd.append("--fxprof-on-unchanged=measure")
    done = subprocess.run(
        [*cmd, *args], cwd=pytester.path, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )
    return pytest.RunResult(done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), 0.0)


def gone(pid: int, wait_s: float = 10.0) -> bool:
    """Whether process ``pid`` is gone, or goes within ``wait_s`` (a signal is delivered, not awaited)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def left_trees(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("fxprof-against-*[0-9]-*"))


def test_a_slowdown_committed_on_top_of_the_base_fails_naming_the_node_and_the_revision(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    commit(pytester, {"model.py": model("3_000_000")}, "slower")
    tmp = tmp_path_factory.mktemp("tmpdir")
    views = ["--fxprof-html", "r.html", "--fxprof-markdown", "r.md", "--fxprof-trace", "traces"]
    views += ["--fxprof-benchmark-json", "b.json", "--fxprof-report", "r.json", "--junitxml", "j.xml", "-v"]
    summary = tmp_path_factory.mktemp("summary") / "step_summary.md"
    result = against(pytester, "HEAD~1", *views, env={"TMPDIR": str(tmp), "GITHUB_STEP_SUMMARY": str(summary)})
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert f"got slower than HEAD~1 ({base[:7]}) ({PAIRS} pairs of old and new processes)" in out
    assert "slower node: slow (call_module Slow in slow, model.py:" in out  # the source line
    assert "per pair x1.50, x1.50, x1.50, x1.50" in out
    # measured again before it failed, in a second set of fresh processes from a fresh export of the revision
    assert f"confirmed by a second, independent set of {PAIRS} pairs (fresh processes, the revision exported" in out
    report = json.loads((pytester.path / "r.json").read_text())
    # the commit it was checked against, for fxprof merge to compare shards by
    assert report["against"] == {"label": f"HEAD~1 ({base[:7]})", "ref": "HEAD~1", "commit": base, "python": ""}
    (profile,) = report["profiles"]
    assert profile["status"] == "regression"
    assert profile["against"] == f"HEAD~1 ({base[:7]})"
    assert profile["pairs"] == MIN_DECIDING_PAIRS
    assert profile["sets"] == [{"status": "regression", "pairs": MIN_DECIDING_PAIRS}] * 2
    slow = next(n for n in profile["nodes"] if n["name"] == "slow")
    assert slow["ratios"] == pytest.approx([1.5] * MIN_DECIDING_PAIRS, abs=1e-3)
    assert slow["verdict"] == "slower"
    assert len(slow["samples_ns"]) == MIN_DECIDING_PAIRS  # one per new process
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "j.xml").iter("property")}
    assert props["fxprof[call0].against"] == f"HEAD~1 ({base[:7]})"
    assert props["fxprof[call0].pairs"] == PAIRS
    assert len(str(props["fxprof[call0].pair_ratios"]).split()) == MIN_DECIDING_PAIRS
    assert left_trees(tmp) == []  # the exported tree is gone
    markdown = (pytester.path / "r.md").read_text()
    assert f"## pytest-fxprof against HEAD~1 ({base[:7]}): 1 regression" in markdown
    assert markdown in summary.read_text()  # appended to the GitHub Actions step summary
    assert f"{PAIRS} pairs" in markdown
    assert (
        f"Check against HEAD~1 ({base[:7]}), in pairs of old and new processes"
        in (pytester.path / "r.html").read_text()
    )
    (trace,) = (pytester.path / "traces").iterdir()
    assert json.loads(trace.read_text())["otherData"]["against"] == f"HEAD~1 ({base[:7]})"
    bench = json.loads((pytester.path / "b.json").read_text())
    whole = next(b for b in bench["benchmarks"] if b["name"] == "test_net[call0]")
    assert whole["extra_info"]["against"] == f"HEAD~1 ({base[:7]})"
    assert len(whole["extra_info"]["pair_ratios"]) == MIN_DECIDING_PAIRS


FLIP = """
import os
from pathlib import Path

_seen = Path(os.environ["FLIP_DIR"]) / "count"
_n = int(_seen.read_text()) if _seen.exists() else 0
_seen.write_text(str(_n + 1))
# the new side's processes take turns: 3 times the old side's 2 ms, then half of it
SLOW_NS = 6_000_000 if _n % 2 == 0 else 1_000_000
"""


def test_pairs_that_stop_undecided_fail_the_test_as_undecided_in_every_view(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Pairs that the budget ends before they decide (here after the first, which costs more than the budget) reach
    no verdict: never a pass."""
    commit(pytester, {"flip.py": FLIP, "model.py": model('__import__("flip").SLOW_NS')}, "a model that flips")
    views = ["--fxprof-report", "r.json", "--fxprof-markdown", "r.md", "--junitxml", "j.xml"]
    env = {"FLIP_DIR": str(tmp_path_factory.mktemp("flip"))}
    result = against(pytester, "HEAD~1", "--fxprof-budget-s", "0.001", *views, env=env)
    out = result.stdout.str()
    assert result.ret == 1, out
    assert f"undecided against HEAD~1 ({base[:7]}), no verdict (neither a pass nor a slowdown)" in out
    # the budget holds for the first pairs too: one pair, x0.50 in it, which the words cannot call a disagreement
    assert "too noisy to decide: total: x0.50, but a single pair is too few to tell a slowdown" in out
    assert "1 pairs measured, when the time budget of 0.001 s per test (a pair of it takes" in out
    assert "1 profile(s) undecided, too noisy to decide" in out  # the terminal summary counts it
    # its budget spent, it was not measured again: what the first pairs found stands, and says so
    assert "not measured again in a second set of pairs: the time budget of 0.001 s per test left no time" in out
    (profile,) = json.loads((pytester.path / "r.json").read_text())["profiles"]
    assert profile["status"] == "undecided"
    assert "total: x0.50" in profile["noisy"]
    assert "1 undecided" in (pytester.path / "r.md").read_text().splitlines()[0]
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "j.xml").iter("property")}
    assert props["fxprof[call0].status"] == "undecided"


ONCE = f"""
import os
from pathlib import Path

_seen = Path(os.environ["ONCE_DIR"]) / "count"
_n = int(_seen.read_text()) if _seen.exists() else 0
_seen.write_text(str(_n + 1))
# this run's process (it collects the test) and the first set's {PAIRS} new processes read 3 ms, later ones 2 ms
SLOW_NS = 3_000_000 if _n <= {PAIRS} else 2_000_000
"""


@pytest.mark.parametrize("confirm", ["fresh", "off"])
def test_a_slowdown_that_a_second_set_of_pairs_does_not_find_passes_unless_confirming_is_off(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory, confirm: str
) -> None:
    """Every pair of the first set finds the node x1.5 slower, every pair of the second the same as at the base:
    what the pairs of one check shared, which a second set does not, fails no test."""
    commit(pytester, {"once.py": ONCE, "model.py": model('__import__("once").SLOW_NS')}, "slower in one set")
    tmp = tmp_path_factory.mktemp("tmpdir")
    env = {"ONCE_DIR": str(tmp_path_factory.mktemp("once")), "TMPDIR": str(tmp)}
    result = against(pytester, "HEAD~1", "--fxprof-confirm", confirm, "--fxprof-report", "r.json", "-v", env=env)
    out = result.stdout.str()
    (profile,) = json.loads((pytester.path / "r.json").read_text())["profiles"]
    if confirm == "off":
        assert result.ret == 1, out
        assert "slower node: slow" in out
        assert "sets" not in profile
        return
    assert result.ret == 0, out
    assert "1 test(s) found slower or undecided, measured again in a second, independent set of pairs" in out
    assert profile["status"] == "pass"
    assert profile["pairs"] == MIN_DECIDING_PAIRS  # the set that decides: the second
    assert profile["sets"] == [
        {"status": "regression", "pairs": MIN_DECIDING_PAIRS},
        {"status": "pass", "pairs": MIN_DECIDING_PAIRS},
    ]
    first = f"a first set of {PAIRS} pairs found it slower (total x1."
    (said,) = [n for n in profile["notices"] if n.startswith(first)]
    assert "did not, and decides: within its bands (total x1.000)" in said
    assert left_trees(tmp) == []  # both exports are gone


def test_fewer_pairs_than_can_decide_is_a_usage_error_naming_the_minimum(pytester: pytest.Pytester, base: str) -> None:
    result = against(pytester, "HEAD", "--fxprof-pairs", str(MIN_PASSING_PAIRS - 1))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"pairs must be at least {MIN_PASSING_PAIRS}, not '{MIN_PASSING_PAIRS - 1}': fewer pairs cannot pass" in (
        result.stderr.str()
    )


def test_a_change_that_does_not_matter_passes(pytester: pytest.Pytester, base: str) -> None:
    marked = TEST.replace("def test_net", "import pytest\n\n\n@pytest.mark.fxprof(pairs=5)\ndef test_net", 1)
    commit(pytester, {"model.py": model() + "\n# a comment\n", "test_net.py": marked}, "comment")
    baselines = pytester.path / "baselines"
    baselines.mkdir()
    (baselines / "stray.json").write_text("{ not a baseline")  # no baseline is read or written in this mode
    result = against(pytester, "HEAD~1", "--fxprof-schedule", "alternate")
    assert result.ret == 0, result.stdout.str()
    assert "test_net.py::test_net [call0]: pass, total x1.00" in result.stdout.str()
    # the marker's pairs; a loaded machine may leave an item undecided, and more pairs are measured then
    (pairs,) = re.findall(rf"against HEAD~1 \({base[:7]}\), (\d+) pairs", result.stdout.str())
    assert int(pairs) >= 5
    assert [f.name for f in baselines.iterdir()] == ["stray.json"]
    assert "stray.json" not in result.stdout.str()


def test_uncommitted_changes_belong_to_the_new_side(pytester: pytest.Pytester, base: str) -> None:
    (pytester.path / "model.py").write_text(model("3_000_000"))  # not committed
    before = git(pytester.path, "status", "--porcelain")
    result = against(pytester, "HEAD")
    assert result.ret == 1, result.stdout.str()
    assert "slower node: slow" in result.stdout.str()
    assert git(pytester.path, "status", "--porcelain") == before
    assert git(pytester.path, "stash", "list") == ""


def test_a_test_or_call_absent_at_the_revision_is_new_never_failed(pytester: pytest.Pytester, base: str) -> None:
    test = TEST + "\n\ndef test_added(fxprof):\n    profile(fxprof)\n"
    test = test.replace("    profile(fxprof)\n\n\n", "    profile(fxprof)\n    profile(fxprof, name='more')\n\n\n", 1)
    commit(pytester, {"test_net.py": test}, "more tests")
    result = against(pytester, "HEAD~1", "--fxprof-report", "r.json")
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    assert "test_net.py::test_added [call0]: new (the test does not exist at HEAD~1" in out
    assert "test_net.py::test_net [more]: new (this fxprof call does not exist at HEAD~1" in out
    assert "test_net.py::test_net [call0]: pass" in out
    statuses = {
        (p["test_id"], p["key"]): p["status"] for p in json.loads((pytester.path / "r.json").read_text())["profiles"]
    }
    assert statuses[("test_net.py::test_added", "call0")] == "new"


def test_a_changed_graph_warns_and_judges_the_matched_nodes(pytester: pytest.Pytester, base: str) -> None:
    commit(pytester, {"model.py": model("3_000_000", extra=True)}, "extra node, slower")
    result = against(pytester, "HEAD~1")
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "graph changed at HEAD~1" in out
    assert "added: extra (ReLU in extra, " in out  # with the line that calls it
    assert "slower node: slow" in out


FINDER = """
import importlib.abc
import importlib.util
import sys
from pathlib import Path

SRC = Path({src!r})


class _Finder(importlib.abc.MetaPathFinder):
    \"\"\"What setuptools' editable install appends to sys.meta_path: ``proj`` from the checkout.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name != "proj":
            return None
        return importlib.util.spec_from_file_location(
            name, SRC / "proj" / "__init__.py", submodule_search_locations=[str(SRC / "proj")]
        )


sys.meta_path.append(_Finder())
"""


@pytest.mark.parametrize("installed", ["pytest's pythonpath", "editable: a .pth path", "editable: an import finder"])
def test_a_src_layout_project_runs_its_own_code_on_each_side(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory, installed: str
) -> None:
    # the model moves into a package under src/; the slowdown is committed there, in the package's code
    (pytester.path / "src" / "proj").mkdir(parents=True)
    (pytester.path / "src" / "proj" / "__init__.py").write_text("")
    git(pytester.path, "mv", "model.py", "src/proj/model.py")
    files = {"test_net.py": TEST.replace("from model import", "from proj.model import")}
    if installed == "pytest's pythonpath":  # not installed: pytest puts src/ on sys.path
        files["pytest.ini"] = "[pytest]\npythonpath = src\n"
    commit(pytester, files, "src layout")
    commit(pytester, {"src/proj/model.py": model("3_000_000")}, "slower, in the package")
    env = {}
    if installed.startswith("editable"):  # the project installed in editable mode: it points at the checkout
        site_dir, startup = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("startup")
        src = str(pytester.path / "src")
        if installed.endswith(".pth path"):
            (site_dir / "proj.pth").write_text(src + "\n")
        else:
            (site_dir / "_proj_finder.py").write_text(FINDER.format(src=src))
            (site_dir / "proj.pth").write_text("import _proj_finder\n")
        (startup / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site_dir)!r})\n")
        env["PYTHONPATH"] = str(startup)
    result = against(pytester, "HEAD~1", env=env)
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "slower node: slow (call_module Slow in slow" in out
    # the old side ran the revision's package (2 ms), the new side 3 ms
    assert "per pair x1.50, x1.50, x1.50, x1.50" in out
    assert "imported code from the working tree" not in out


def test_a_test_that_exists_at_the_revision_without_the_fixture_is_new(pytester: pytest.Pytester, base: str) -> None:
    commit(pytester, {"test_net.py": "def test_net():\n    pass\n"}, "a test that profiles nothing")
    commit(pytester, {"test_net.py": TEST}, "profile it")
    result = against(pytester, "HEAD~1")
    assert result.ret == 0, result.stdout.str()
    assert "test_net.py::test_net [call0]: new (this fxprof call does not exist at HEAD~1" in result.stdout.str()


@pytest.mark.parametrize(
    ("skipping", "reason"),
    [
        ("import pytest\n\n\ndef test_net(fxprof):\n    pytest.skip('no model yet')\n", "no model yet"),
        ("import pytest\n\npytest.skip('no module yet', allow_module_level=True)\n" + TEST, "no module yet"),
    ],
    ids=["the test", "its module"],
)
def test_a_test_skipped_at_the_revision_is_not_compared_and_says_why(
    pytester: pytest.Pytester, base: str, skipping: str, reason: str
) -> None:
    commit(pytester, {"test_net.py": skipping}, "skipped")
    commit(pytester, {"test_net.py": TEST}, "profiled")
    result = against(pytester, "HEAD~1")
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    assert "test_net.py::test_net [call0]: not compared (the test skipped at HEAD~1" in out
    assert reason in out


def test_a_conftest_that_fails_to_import_at_the_revision_fails_never_passes_as_new(
    pytester: pytest.Pytester, base: str
) -> None:
    commit(pytester, {"conftest.py": CLOCK_CONFTEST + "\nimport no_such_helper_at_ref\n"}, "broken conftest")
    commit(pytester, {"conftest.py": CLOCK_CONFTEST}, "fixed")
    result = against(pytester, "HEAD~1")
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "the old side (HEAD~1" in out
    assert "no_such_helper_at_ref" in out
    assert ": new (" not in out


def test_files_the_revision_marks_export_ignore_are_still_there(pytester: pytest.Pytester, base: str) -> None:
    commit(pytester, {".gitattributes": "test_net.py export-ignore\nmodel.py export-ignore\n"}, "slim archives")
    commit(pytester, {"model.py": model("3_000_000")}, "slower")
    result = against(pytester, "HEAD~1")
    assert result.ret == 1, result.stdout.str()
    assert "slower node: slow (call_module Slow in slow" in result.stdout.str()


def test_a_duet_whose_new_side_fails_says_so_with_its_own_output(pytester: pytest.Pytester, base: str) -> None:
    crash = TEST + "\n    if fxprof.mode == 'sample':\n        raise RuntimeError('only in the new side')\n"
    commit(pytester, {"test_net.py": crash}, "the new side's process fails")
    result = against(pytester, "HEAD~1", "--fxprof-schedule", "duet")
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "the new side (the working tree) could not measure test_net.py::test_net" in out
    assert "RuntimeError: only in the new side" in out
    assert "the old side (" not in out


def test_a_call_the_new_sides_processes_do_not_make_fails_never_passes_as_new(
    pytester: pytest.Pytester, base: str
) -> None:
    only_here = TEST.replace("    profile(fxprof)", "    if fxprof.mode != 'sample':\n        profile(fxprof)")
    commit(pytester, {"test_net.py": only_here}, "the call depends on the process")
    result = against(pytester, "HEAD~1")
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "fresh process 1 of the working tree for test_net.py::test_net made no fxprof call 'call0'" in out
    assert ": new (" not in out


def test_a_project_below_the_repositorys_top_level_runs_from_its_own_rootdir(
    pytester: pytest.Pytester, base: str
) -> None:
    sub = pytester.path / "perf"
    sub.mkdir()
    for name in ("conftest.py", "fakeclock.py", "model.py", "test_net.py"):
        git(pytester.path, "mv", name, f"perf/{name}")
    (sub / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    commit(pytester, {}, "the tests in perf/")
    commit(pytester, {"perf/model.py": model("3_000_000")}, "slower")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--fxprof-against", "HEAD~1", "--fxprof-pairs"]
    done = subprocess.run([*cmd, PAIRS], cwd=sub, capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "slower node: slow (call_module Slow in slow" in done.stdout
    assert "per pair x1.50, x1.50, x1.50, x1.50" in done.stdout


def test_the_old_side_importing_the_working_tree_is_refused(pytester: pytest.Pytester, base: str) -> None:
    # a test module that imports the model by the checkout's absolute path: its old side would run new code
    pinned = f"import sys\nsys.path.insert(0, {str(pytester.path)!r})\n" + TEST
    commit(pytester, {"test_net.py": pinned}, "pinned path")
    commit(pytester, {"model.py": model() + "\n# a comment\n"}, "comment")
    result = against(pytester, "HEAD~1")
    assert result.ret == 1
    out = result.stdout.str()
    assert "the old side (HEAD~1" in out
    assert "imported code from the working tree" in out
    assert f"model ({pytester.path / 'model.py'})" in out
    assert "fxprof_against_roots" in out


def test_the_old_side_failing_shows_its_own_traceback(pytester: pytest.Pytester, base: str) -> None:
    commit(
        pytester,
        {"model.py": model().replace("import torch\n", "import torch\nimport no_such_module_at_ref\n", 1)},
        "broken",
    )
    commit(pytester, {"model.py": model()}, "fixed")
    result = against(pytester, "HEAD~1")
    assert result.ret == 1
    out = result.stdout.str()
    assert "the old side (HEAD~1" in out
    assert "could not measure test_net.py::test_net" in out
    assert "output of the old side" in out
    assert "No module named 'no_such_module_at_ref'" in out


@pytest.mark.parametrize(
    ("setup", "ref", "expected"),
    [
        ("plain", "nope", "git knows no revision 'nope'"),
        ("no-git", "HEAD", "is not in a git repository"),
    ],
)
def test_a_bad_revision_is_a_usage_error_naming_the_fix(
    pytester: pytest.Pytester, setup: str, ref: str, expected: str
) -> None:
    pytester.makepyfile(test_net=TEST)
    if setup == "plain":
        git(pytester.path, "init", "-q")
        commit(pytester, {"x.txt": "x"}, "x")
    result = against(pytester, ref)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert expected in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_against_and_update_exclude_each_other(pytester: pytest.Pytester, base: str) -> None:
    result = against(pytester, "HEAD", "--fxprof-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--fxprof-against and --fxprof-update exclude each other" in result.stderr.str()


def test_the_ini_files_revision_counts_unless_the_command_line_sets_a_mode(
    pytester: pytest.Pytester, base: str
) -> None:
    pytester.makeini("[pytest]\nfxprof_against = HEAD\n")
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert f"against HEAD ({base[:7]})" in plain.stdout  # the ini file's mode
    update = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q", "--fxprof-update"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert update.returncode == 0, update.stdout + update.stderr  # the command line's mode wins: no conflict
    assert "against HEAD" not in update.stdout


def test_another_python_for_the_old_side(pytester: pytest.Pytester, base: str) -> None:
    wrapper = pytester.path / "oldpy"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--fxprof-pairs", PAIRS]
    done = subprocess.run(
        [*cmd, "--fxprof-against-python", "./oldpy"], cwd=pytester.path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
    assert "against Python " in done.stdout
    assert "oldpy" in done.stdout
    commit(pytester, {"model.py": model("3_000_000")}, "slower")  # with a revision: REF's code, that Python
    both = subprocess.run(
        [*cmd, "--fxprof-against", "HEAD~1", "--fxprof-against-python", "./oldpy"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert both.returncode == 1, both.stdout
    assert f"got slower than HEAD~1 ({base[:7]}) under Python " in both.stdout
    assert "per pair x1.50, x1.50" in both.stdout
    assert "of them forked" not in both.stdout  # the old side's Python is another: fresh processes
    missing = subprocess.run(
        [*cmd, "--fxprof-against-python", "./nopy"], cwd=pytester.path, capture_output=True, text=True, check=False
    )
    assert missing.returncode == pytest.ExitCode.USAGE_ERROR
    assert "no such interpreter" in missing.stderr
    (pytester.path / "noexec").write_text("not a program\n")  # a file that cannot run: a usage error, no traceback
    (pytester.path / "otherversion").write_text(
        f'#!/bin/sh\nif [ "$1" = "-c" ]; then echo 0.0.1; exit 0; fi\nexec {sys.executable} "$@"\n'
    )
    (pytester.path / "otherversion").chmod(0o755)
    for python, said in (("./noexec", "cannot be run"), ("./otherversion", "has pytest-fxprof 0.0.1, this one")):
        done = subprocess.run(
            [*cmd, "--fxprof-against-python", python], cwd=pytester.path, capture_output=True, text=True, check=False
        )
        assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
        assert said in done.stderr
        assert "INTERNALERROR" not in done.stdout + done.stderr


HANG = """
import os
import time

from model import profile


def test_net(fxprof):
    profile(fxprof)
    if fxprof.mode == "sample":  # an old or new side's process: say so, then hang until interrupted
        open(os.path.join(os.environ["HANG_DIR"], str(os.getpid())), "w").close()
        time.sleep(600)
"""


def test_ctrl_c_removes_the_exported_tree_and_leaves_no_process(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    commit(pytester, {"test_net.py": HANG}, "the sides hang")
    tmp, hung = tmp_path_factory.mktemp("tmpdir"), tmp_path_factory.mktemp("hung")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--fxprof-against", "HEAD"]
    cmd += ["--fxprof-pairs", PAIRS]
    env = {**os.environ, "TMPDIR": str(tmp), "HANG_DIR": str(hung)}
    # As at a terminal: a suite started in the background (nohup, `cmd &` in a script) has SIGINT ignored, and a
    # child would inherit that; one started while this process handles SIGINT gets the default.
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=pytester.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    finally:
        signal.signal(signal.SIGINT, handler)
    try:
        deadline = time.monotonic() + 240
        while not list(hung.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(hung.iterdir()), "no side's process started"
        assert left_trees(tmp), "the run did not export the revision into TMPDIR"
        os.kill(proc.pid, signal.SIGINT)  # the run alone: it must stop its processes itself
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert left_trees(tmp) == [], out
    assert "KeyboardInterrupt" in out, out
    for child in hung.iterdir():  # each test's own process, killed as the process that forked it ends (at once)
        assert gone(int(child.name))


TERMINATED = """
import os
import signal

from model import profile


def test_net(fxprof, request):
    if request.config.getoption("fxprof_sample"):  # a side's process: ended as a cancelled CI job ends it
        os.kill(os.getpid(), signal.SIGTERM)
    profile(fxprof)
"""


def test_a_measuring_process_interrupted_interrupts_the_run_never_fails_the_test(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    commit(pytester, {"test_net.py": TERMINATED}, "the sides are terminated")
    tmp = tmp_path_factory.mktemp("tmpdir")
    result = against(pytester, "HEAD", "--fxprof-report", "r.json", env={"TMPDIR": str(tmp)})
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    assert "was interrupted (SIGTERM): the run stops" in out
    assert "could not measure" not in out  # not a failed test
    assert "an order of its own" not in out  # nor a hint at the order of the tests
    assert left_trees(tmp) == [], out


PRINTED = """
from model import profile


def test_net(fxprof):
    print(profile(fxprof).table())
"""


def test_the_table_a_test_prints_says_where_its_pairs_are_measured(pytester: pytest.Pytester, base: str) -> None:
    commit(pytester, {"test_net.py": PRINTED}, "the test prints its table")
    result = against(pytester, "HEAD", "-s")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    assert "single cold pass: the pairs against the revision measure this test in processes of their own" in out, out
    assert "run with --fxprof or --fxprof-update" not in out  # the run it is in measures it


STAMPED = """
import os
import time

from model import profile


def stamp(fxprof, name):
    if fxprof.mode == "sample":  # an old or new side's process: when it measured
        start = time.time()
        profile(fxprof)
        with open(os.path.join(os.environ["STAMP_DIR"], f"{name}-{os.getpid()}"), "w") as f:
            f.write(f"{start} {time.time()}")
    else:
        profile(fxprof)


def test_one(fxprof):
    stamp(fxprof, "one")


def test_two(fxprof):
    stamp(fxprof, "two")
"""


def test_under_xdist_one_test_measures_at_a_time(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    commit(pytester, {"test_net.py": STAMPED}, "two tests")
    stamps = tmp_path_factory.mktemp("stamps")
    result = against(pytester, "HEAD", "-n", "2", env={"STAMP_DIR": str(stamps)})
    assert result.ret == 0, result.stdout.str()
    assert "test_net.py::test_one [call0]: pass" in result.stdout.str()
    assert "test_net.py::test_two [call0]: pass" in result.stdout.str()
    assert "under pytest-xdist each test was measured in pairs of processes of its own" in result.stdout.str()
    spans: dict[str, list[tuple[float, float]]] = {"one": [], "two": []}
    for f in stamps.iterdir():
        start, end = map(float, f.read_text().split())
        spans[f.name.split("-")[0]].append((start, end))
    assert len(spans["one"]) == len(spans["two"]) == 2 * MIN_DECIDING_PAIRS  # each pair: 2 processes
    one = (min(s for s, _ in spans["one"]), max(e for _, e in spans["one"]))
    two = (min(s for s, _ in spans["two"]), max(e for _, e in spans["two"]))
    assert one[1] <= two[0] or two[1] <= one[0], (one, two)  # the two tests' measurements never overlapped


def test_a_measuring_lock_that_cannot_be_taken_fails_the_test(pytester: pytest.Pytester, base: str) -> None:
    commit(pytester, {"model.py": model("3_000_000")}, "slower")
    (pytester.path / "a-file").write_text("")
    result = against(pytester, "HEAD~1", f"--fxprof-lock={pytester.path / 'a-file' / 'm.lock'}")
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "cannot take the measuring lock" in out
    assert "--fxprof-lock=off" in out
    assert "INTERNALERROR" not in out + "\n".join(result.errlines)


SERVED = """
import os

from model import profile


def stamp(fxprof, name):
    if fxprof.mode == "sample":
        with open(os.path.join(os.environ["STAMP_DIR"], f"{name}-{os.getppid()}-{os.getpid()}"), "w"):
            pass
    profile(fxprof)


def test_one(fxprof):
    stamp(fxprof, "one")


def test_two(fxprof):
    stamp(fxprof, "two")


def test_three(fxprof):
    stamp(fxprof, "three")
"""


def test_one_pair_of_processes_serves_every_test_and_the_run_says_where_the_time_went(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    head = commit(pytester, {"test_net.py": SERVED}, "three tests")
    stamps = tmp_path_factory.mktemp("stamps")
    report = pytester.path / "report.json"
    result = against(pytester, "HEAD", f"--fxprof-report={report}", env={"STAMP_DIR": str(stamps)})
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    for name in ("one", "two", "three"):
        assert f"test_net.py::test_{name} [call0]: pass" in out
    assert f"fxprof: measuring 3 test(s) at HEAD ({head[:7]}) and in the working tree" in out
    assert "fxprof: pair 1: 3 test(s)" in out
    processes = {f.name.split("-")[1] for f in stamps.iterdir()}
    assert len(processes) == 2 * MIN_DECIDING_PAIRS  # each pair's two processes served all three tests
    assert sorted(f.name.rsplit("-", 1)[0] for f in stamps.iterdir()) == sorted(
        f"{name}-{pid}" for name in ("one", "two", "three") for pid in processes
    )
    # each test in a process of its own, forked from the process that serves it
    assert len({f.name.rsplit("-", 1)[1] for f in stamps.iterdir()}) == 3 * 2 * MIN_DECIDING_PAIRS
    assert "where the time went: fresh processes starting" in out
    spent = json.loads(report.read_text())["time"]
    assert spent["processes"] == 2 * MIN_DECIDING_PAIRS
    assert spent["processes_s"] > 0
    assert spent["measuring_s"] > 0
    if can_fork():  # by default both sides of each pair are forked from one parent (the pairs are duets here)
        assert spent["forked"] == 2 * MIN_DECIDING_PAIRS
        assert f"({2 * MIN_DECIDING_PAIRS}, {2 * MIN_DECIDING_PAIRS} of them forked)" in out


KEPT_WHOLE = """
import os

import torch
from torch import nn

from fakeclock import CLOCK


class Branchy(nn.Module):
    def forward(self, x):
        if isinstance(x, torch.fx.Proxy):  # traced into: the try that fails
            open(os.path.join(os.environ["STAMP_DIR"], f"traced-{os.getpid()}"), "a").close()
        if x.sum() > 0:  # a Python branch on a value: symbolic tracing fails here, and auto keeps it whole
            x = x * 1
        CLOCK.advance(2_000_000)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.branchy = Branchy()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.branchy(self.fc1(x)))
"""

KEPT_WHOLE_TEST = """
import os

import torch

from model import Net


def test_net(fxprof):
    if fxprof.mode == "sample":
        open(os.path.join(os.environ["STAMP_DIR"], f"side-{os.getpid()}"), "w").close()
    fxprof(Net().eval(), torch.randn(4, 8))
"""


def test_the_later_pairs_capture_as_each_sides_first_did_without_its_failed_tries(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A submodule that breaks symbolic tracing is traced into (and kept whole) only by the first pair's two
    processes; every later one captures it whole straight away, the run's own process not at all, and the check
    judges their graphs as one."""
    commit(pytester, {"model.py": KEPT_WHOLE, "test_net.py": KEPT_WHOLE_TEST}, "a module kept whole")
    stamps = tmp_path_factory.mktemp("stamps")
    result = against(pytester, "HEAD", env={"STAMP_DIR": str(stamps)})
    assert result.ret == 0, result.stdout.str()
    assert "test_net.py::test_net [call0]: pass" in result.stdout.str()
    sides = {f.name.split("-")[1] for f in stamps.glob("side-*")}
    traced = {f.name.split("-")[1] for f in stamps.glob("traced-*")}
    assert len(sides) >= 2 * MIN_PASSING_PAIRS
    assert len(traced & sides) == 2  # pair 1's old and new
    assert traced <= sides  # the run's own process captured nothing: the new side's first process stands for it


def test_forked_sides_keep_a_strict_warnings_filter(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A library the run imported imports a pytest plugin's module (transformers imports anyio; here, xdist): the
    parent of the forked sides imports it too, and pytest in each side would warn that it cannot rewrite it, an
    error under ``filterwarnings = error``, had the sides not been told to ignore that warning."""
    libs = tmp_path_factory.mktemp("libs")
    (libs / "uses_a_plugin.py").write_text("import xdist\n")  # pytest-xdist's plugin, which pytest rewrites
    ini = "[pytest]\nfilterwarnings =\n    error\n"
    commit(pytester, {"pytest.ini": ini, "test_net.py": "import uses_a_plugin\n" + TEST}, "strict warnings")
    report = pytester.path / "report.json"
    result = against(pytester, "HEAD", f"--fxprof-report={report}", env={"PYTHONPATH": str(libs)})
    assert result.ret == 0, result.stdout.str()
    assert "test_net.py::test_net [call0]: pass" in result.stdout.str()
    if can_fork():
        assert json.loads(report.read_text())["time"]["forked"] == 2 * MIN_DECIDING_PAIRS


SEEN_AT_COLLECTION = """

def pytest_collection_finish(session):
    import os
    from pathlib import Path

    mode = session.config.pluginmanager.get_plugin("fxprof-against")
    if mode is not None:  # the run's own process, not a side's
        parent = None if mode.forker is None else mode.forker.parent
        Path(os.environ["SEEN"]).write_text("running" if parent is not None and parent.poll() is None else "none")
"""


def test_the_parent_of_the_forked_sides_starts_while_the_tests_are_collected(
    pytester: pytest.Pytester, base: str, tmp_path: Path
) -> None:
    """The parent's imports overlap the run's collection: it is running when collection ends, and gone with the
    run; a run that only collects starts none."""
    commit(pytester, {"conftest.py": CLOCK_CONFTEST + SEEN_AT_COLLECTION}, "a conftest that looks")
    seen, tmp = tmp_path / "seen", tmp_path / "tmp"
    tmp.mkdir()
    result = against(pytester, "HEAD~1", env={"SEEN": str(seen), "TMPDIR": str(tmp)})
    assert result.ret == 0, result.stdout.str()
    assert seen.read_text() == ("running" if can_fork() else "none")
    assert left_trees(tmp) == []  # its directory went with it, as did the exported tree
    collected = against(pytester, "HEAD~1", "--collect-only", env={"SEEN": str(seen), "TMPDIR": str(tmp)})
    assert collected.ret == 0, collected.stdout.str()
    assert seen.read_text() == "none"


def test_fresh_side_processes_on_request(pytester: pytest.Pytester, base: str) -> None:
    commit(pytester, {"model.py": model("3_000_000")}, "slower")
    report = pytester.path / "report.json"
    # a budget no loaded machine spends: the second set must fit whatever the first cost here
    budget = "--fxprof-budget-s=100000"
    result = against(pytester, "HEAD~1", "--fxprof-against-start=fresh", budget, f"--fxprof-report={report}")
    assert result.ret == 1, result.stdout.str()
    assert "per pair x1.50, x1.50" in result.stdout.str()
    spent = json.loads(report.read_text())["time"]
    assert spent["processes"] == 2 * 2 * MIN_DECIDING_PAIRS  # two sets of pairs: the slowdown was confirmed
    assert spent["forked"] == 0
    assert "of them forked" not in result.stdout.str()
    bad = against(pytester, "HEAD~1", "-o", "fxprof_against_start=spawn")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "fxprof_against_start = spawn: give fork or fresh" in bad.stderr.str()


CRASHING = SERVED.replace(
    'def test_two(fxprof):\n    stamp(fxprof, "two")',
    'def test_two(fxprof):\n    if fxprof.mode == "sample":\n        os._exit(3)\n    stamp(fxprof, "two")',
)


def test_a_test_that_crashes_a_side_fails_alone_and_the_others_are_judged(pytester: pytest.Pytester, base: str) -> None:
    commit(pytester, {"test_net.py": SERVED}, "three tests")
    (pytester.path / "test_net.py").write_text(CRASHING)  # the working tree's test_two kills its process
    stamps = pytester.mkdir("stamps")
    result = against(pytester, "HEAD", env={"STAMP_DIR": str(stamps)})
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "test_net.py::test_one [call0]: pass" in out
    assert "test_net.py::test_three [call0]: pass" in out
    # it ran in a process of its own, forked for it: the process that serves the tests goes on with the next
    assert "the new side (the working tree) could not measure test_net.py::test_two (process 1: the test failed" in out
    assert "call failed: the test's own process ended (exit status 3) while running it" in out
    result_lines = [line for line in result.outlines if line.startswith("FAILED")]
    assert result_lines == [line for line in result_lines if "test_two" in line]
    assert len(result_lines) == 1


def test_the_run_budget_is_a_limit_and_says_what_it_left_undecided(pytester: pytest.Pytester, base: str) -> None:
    """The first pair always runs; no later one starts past the run's budget, and the tests still open then end
    undecided, saying why, as the run lists them."""
    commit(pytester, {"model.py": model("2_100_000")}, "a little slower")
    result = against(pytester, "HEAD~1", "--fxprof-run-budget-s", "0.001")
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "fxprof: pair 1: 1 test(s)" in out
    assert "fxprof: pair 2" not in out
    assert "1 test(s) still undecided when the run's time budget ended: test_net.py::test_net" in out
    assert "test_net.py::test_net [call0]: undecided" in out
    assert "1 pairs measured, when the run's time budget of 0.001 s ended them" in out
    assert "raise --fxprof-run-budget-s or --fxprof-pairs" in out


@pytest.mark.parametrize("budget", ["0", "-5", "soon", "inf"])
def test_a_run_budget_that_is_not_a_positive_number_is_a_usage_error(
    pytester: pytest.Pytester, base: str, budget: str
) -> None:
    result = against(pytester, "HEAD", f"--fxprof-run-budget-s={budget}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--fxprof-run-budget-s {budget}: give a positive number of seconds (default 1800)" in result.stderr.str()


# The run's own process reads each call from the new side's first process ----------------------------------


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x))).transpose(1, 2)


def _side_call(result: Any, facts: Any) -> dict[str, Any]:
    """A call as a side's process writes it (``modes.sample.SampleCalls.finish``) and its parent reads it back."""
    entry = entry_to_json(result.entry(Tolerances(node=0.05, total=0.03)))
    out: dict[str, Any] = json.loads(json.dumps({"entry": entry, "alone_from": None, "facts": facts}))
    return out


def test_the_new_sides_first_process_stands_for_this_processs_profile_of_a_call() -> None:
    """Every fact of each node, its output's shape, the capture (classes too) and the setup come from the new side's
    first process; the pairs' times then replace that process's (``side_profile``)."""
    first = fxprof_profile(_Block().eval(), torch.randn(1, 3, 12, 12), warmup=1, passes=2)
    later = fxprof_profile(_Block().eval(), torch.randn(1, 3, 12, 12), warmup=1, passes=2)
    got = Pairs(
        old=[Child((), 0, {"calls": {}}, "")] * 2,
        new=[
            Child((), 0, {"calls": {"call0": _side_call(first, node_facts(first.nodes))}}, ""),
            Child((), 0, {"calls": {"call0": _side_call(later, None)}}, ""),
        ],
    )
    base = first_profile(got, "call0")
    assert base is not None
    assert not base.measured
    assert base.capture == first.capture
    assert base.capture.classes == first.capture.classes
    assert base.setup == first.setup
    fields = ("info", "median_ns", "shape", "layout", "inputs", "training", "returned", "flops", "memory_bytes")
    for mine, theirs in zip(base.nodes, first.nodes, strict=True):
        assert all(getattr(mine, f) == getattr(theirs, f) for f in fields), mine.name
    assert any(n.training is False for n in base.nodes)  # the batch norm, in eval mode: what the hints read
    assert any(n.returned for n in base.nodes)
    assert any(n.layout == "strided" for n in base.nodes)  # the transpose's output
    judged = side_profile(base, merged([_entry(c) for c in got.new]))
    assert judged.measured
    assert [n.samples_ns for n in judged.nodes] == [
        (a.median_ns, b.median_ns) for a, b in zip(first.nodes, later.nodes, strict=True)
    ]
    assert [n.training for n in judged.nodes] == [n.training for n in first.nodes]


def _entry(child: Child) -> BaselineEntry:
    assert child.data is not None
    return entry_from_json(child.data["calls"]["call0"]["entry"])


@pytest.mark.parametrize(
    "spoil",
    [
        lambda call: call.pop("facts"),  # a process that sent none
        lambda call: call["facts"]["layout"].pop(),  # one node short
        lambda call: call["facts"].pop("inputs"),
        lambda call: call["facts"]["training"].__setitem__(0, "yes"),
        lambda call: call.__setitem__("entry", {"nodes": "?"}),
    ],
    ids=["no facts", "short", "a fact missing", "a wrong type", "a malformed entry"],
)
def test_facts_that_cannot_be_read_leave_the_call_to_be_captured_here(spoil: Any) -> None:
    result = fxprof_profile(_Block().eval(), torch.randn(1, 3, 12, 12), warmup=0, passes=1)
    call = _side_call(result, node_facts(result.nodes))
    assert first_profile(Pairs(new=[Child((), 0, {"calls": {"call0": call}}, "")]), "call0") is not None
    spoil(call)
    assert first_profile(Pairs(new=[Child((), 0, {"calls": {"call0": call}}, "")]), "call0") is None


def test_a_test_no_pair_measured_to_its_end_is_captured_here() -> None:
    result = fxprof_profile(_Block().eval(), torch.randn(1, 3, 12, 12), warmup=0, passes=1)
    calls = {"calls": {"call0": _side_call(result, node_facts(result.nodes))}}
    skipped = Child((), 0, {"skipped": "no GPU"}, "")
    assert first_profile(Pairs(new=[Child((), 0, calls, "")], ended=("old", skipped)), "call0") is None
    assert first_profile(Pairs(new=[Child((), 0, calls, "")], error="the budget"), "call0") is None
    assert first_profile(Pairs(new=[Child((), 0, calls, "")]), "call1") is None  # a call the side did not make
    assert first_profile(Pairs(), "call0") is None


LEAKING = """
import torch
import torch.nn.functional as F
from torch import nn

from fakeclock import CLOCK


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        CLOCK.advance(2_000_000)
        return F.relu(self.fc(x))


def profile(fxprof):
    return fxprof(Net().eval(), torch.randn(4, 8))


def test_one(fxprof):
    profile(fxprof)


def test_two(fxprof):
    profile(fxprof)
"""

LEAKS = """

def test_leaks_a_function(fxprof):
    profile(fxprof)
    F.relu = lambda x, inplace=False: torch.clamp(x, min=0)  # replaced, never restored


def test_leaks_the_default_dtype(fxprof):
    profile(fxprof)
    torch.set_default_dtype(torch.float64)  # set, never restored
"""


def test_what_a_test_leaks_reaches_no_other_test(pytester: pytest.Pytester, base: str) -> None:
    """Two tests that the working tree adds replace a function and the default dtype and never restore them: they
    change nothing that the tests after them measure, in whatever order a pair serves them (each test runs in a
    process of its own), so the unchanged tests pass and the new ones are new."""
    commit(pytester, {"test_net.py": LEAKING}, "two tests")
    (pytester.path / "test_net.py").write_text(LEAKING.replace("\n\ndef test_one", LEAKS + "\n\ndef test_one", 1))
    report = pytester.path / "report.json"
    result = against(pytester, "HEAD", "--fxprof-pairs=6", f"--fxprof-report={report}")
    out = result.stdout.str()
    assert result.ret == 0, out
    for name in ("one", "two"):
        assert f"test_net.py::test_{name} [call0]: pass" in out
    assert "deterministic" not in out
    assert "mismatch" not in out
    statuses = {p["test_id"]: p["status"] for p in json.loads(report.read_text())["profiles"]}
    assert statuses == {"test_net.py::test_one": "pass", "test_net.py::test_two": "pass"} | {
        f"test_net.py::test_{name}": "new" for name in ("leaks_a_function", "leaks_the_default_dtype")
    }


def test_a_test_that_changes_a_global_on_one_side_is_named_as_the_cause(pytester: pytest.Pytester, base: str) -> None:
    """What a test changes of torch's globals before its call is part of what it measures: where it changes them
    on one side only, the test is a mismatch that names it as the cause, never a verdict on the model."""
    commit(pytester, {"test_net.py": LEAKING}, "two tests")
    changed = LEAKING.replace(
        "def test_one(fxprof):\n", "def test_one(fxprof):\n    torch.set_default_dtype(torch.float64)\n"
    ).replace("def test_two(fxprof):\n", "def test_two(fxprof):\n    F.relu = torch.relu\n")
    (pytester.path / "test_net.py").write_text(changed)
    result = against(pytester, "HEAD", "-rs")
    out = " ".join(result.stdout.str().split())
    assert result.ret == 0, out  # mismatches skip, by default
    assert "this test sets the default dtype to torch.float64 in this run, not at HEAD" in out
    assert "this test replaces torch.nn.functional.relu in this run, not at HEAD" in out
    assert "another state of torch" in out


def test_a_test_slower_than_its_budget_takes_one_pair_and_ends_undecided_saying_why(
    pytester: pytest.Pytester, base: str
) -> None:
    """The budget holds for the minimum pairs too: a test whose one pair costs more than its budget is measured in
    that pair alone, and ends undecided with what a pair of it costs and what its pairs would need."""
    commit(pytester, {"model.py": model("3_000_000")}, "slower")
    report = pytester.path / "report.json"
    result = against(pytester, "HEAD~1", "--fxprof-budget-s=0.01", f"--fxprof-report={report}")
    out = " ".join(result.stdout.str().split())
    assert result.ret == 1, out
    assert "the time budget of 0.01 s per test (a pair of it takes" in out
    assert f"so {PAIRS} pairs need" in out
    assert "raise --fxprof-budget-s" in out
    (profile,) = json.loads(report.read_text())["profiles"]
    assert profile["status"] == "undecided"
    assert profile["pairs"] == 1


IMPORTING = """
import os
import sys

from model import profile


def test_a(fxprof):
    import tabnanny  # noqa: F401 (a module the test imports in its body)

    profile(fxprof)


def test_b(fxprof):
    if fxprof.mode == "sample":  # a side's test process: say whether it found the module imported
        with open(os.path.join(os.environ["STAMP_DIR"], f"{os.getpid()}-{'tabnanny' in sys.modules}"), "w"):
            pass
    profile(fxprof)
"""


def test_what_a_test_imports_the_tests_after_it_find_imported(
    pytester: pytest.Pytester, base: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A test's own process dies with what it changed, not with what it imported: the process that forked it
    imports that too, so that a later test forks with it imported, as it would have found it in a shared process
    (in pair 1, served in the run's order)."""
    commit(pytester, {"test_net.py": IMPORTING}, "a test that imports in its body")
    stamps = tmp_path_factory.mktemp("stamps")
    result = against(pytester, "HEAD", env={"STAMP_DIR": str(stamps)})
    assert result.ret == 0, result.stdout.str()
    if "tabnanny" in sys.modules:
        pytest.skip("this interpreter imports tabnanny at its start")
    found = [f.name.split("-")[1] for f in stamps.iterdir()]
    assert found.count("True") >= 2, found  # at least pair 1's two sides, which serve test_a first
