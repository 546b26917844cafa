"""Fresh-process runs for baselines: re-run one test in new interpreters and collect their profiles.

The noise between processes is far larger than within one, so a baseline holds runs from several
processes. ``sample`` starts ``pytest TEST --fxprof-sample REQUEST`` once per extra run; the child
profiles each ``fxprof`` call of that test with the parent's settings and writes the summaries to the
file the request names. Owns the child's command line and the request and response files.

Must not import torch or pytest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict

from pytest_fxprof.records.disturbance import Disturbance, DisturbanceJSON, disturbance_from_json, least_disturbed
from pytest_fxprof.records.measurement import Capture, Run, capture_difference
from pytest_fxprof.store.files import loads
from pytest_fxprof.store.schema import RunJSON
from pytest_fxprof.store.validation import capture_from_json, run_from_json

OUTPUT_TAIL = 3000
_DROPPED_ENV = ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


class SamplingError(Exception):
    """A fresh process could not produce a comparable profile."""


class OriginCheck(TypedDict):
    """Against a revision, the old side's import check: no module may come from ``new_root`` (the working
    tree) or its ``extra`` import roots instead of ``old_root`` (the revision's tree)."""

    new_root: str
    old_root: str
    extra: list[str]


class TestRequest(TypedDict):
    """One test a fresh process is asked to measure."""

    test_id: str
    settings: dict[str, Any]
    out: str
    """Where it writes what it measured of this test."""
    calls: NotRequired[list[str]]
    """A side against a revision: the keys of the calls the new side made in this test, where known."""
    captured: NotRequired[dict[str, dict[str, Any]]]
    """A side against a revision, after its first pair: how that pair's process captured each call (its capture
    record as its entry wrote it, ``store.schema.capture_to_json``), for ``capture_module``'s ``known``."""


def capture_from_request(raw: Any) -> Capture | None:
    """A ``TestRequest.captured`` entry as the capture record it was written from; None where there is none or it
    is not one (the call is then captured as ever)."""
    try:
        return capture_from_json(raw, "captured")
    except ValueError:
        return None


class SampleRequest(TypedDict):
    """What a fresh process is asked (``--fxprof-sample REQUEST``, a JSON file its parent writes): the tests it
    measures, in this order, and how."""

    tests: list[TestRequest]
    parent: NotRequired[int]
    """The process that started this one: it ends with it (``die_with_parent``)."""
    entry: NotRequired[bool]
    """A side against a revision: it writes whole entries and what became of each test."""
    lockstep: NotRequired[dict[str, Any]]
    """A side of a duet: its lock-step with its twin (``measure.lockstep``)."""
    against: NotRequired[OriginCheck]
    """The old side: the import check it runs before it writes."""
    progress: NotRequired[str]
    """A file it writes the id of each test into as the test starts: its parent sees a test that hangs."""
    timing: NotRequired[str]
    """A file it writes at its end: each test's seconds and the session's (``ServedTiming``)."""
    flops: NotRequired[bool]
    """A side: whether its profiles run the untimed counting pass (flops, shapes; default yes): the first pair's
    do, the same in every pair."""
    fingerprint: NotRequired[bool]
    """A side, before any pair: capture each call and write its computation's fingerprint, timing nothing
    (``against.proof``)."""


class ServedTiming(TypedDict):
    """How long a fresh process's tests took, each from its setup to its teardown, and its whole session; and
    which tests ran in it rather than in a process of their own (``modes.isolated``), and why."""

    tests: dict[str, float]
    session_s: float
    shared: NotRequired[dict[str, str]]


class SampleJSON(TypedDict):
    nodes: list[str]
    run: RunJSON
    disturbance: NotRequired[DisturbanceJSON]
    """How disturbed the child's profile was (absent from an older child: none measured)."""


BUSY_RETRIES = 2
"""A fresh process whose profile was measured on a busy machine (``Disturbance.busy``) is started again up to this
many times; the least disturbed is kept, and its disturbance tells the caller whether it stayed busy."""


def plugin_args(args: Sequence[str]) -> tuple[str, ...]:
    """The ``-p NAME`` and ``--import-mode`` arguments of a command line, which a child must repeat."""
    out: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in ("-p", "--import-mode"):
            value = next(it, None)
            if value is not None:
                out += [arg, value]
        elif arg.startswith(("-p", "--import-mode=")) and arg != "-p":
            out.append(arg)
    return tuple(out)


@dataclass(frozen=True)
class Relaunch:
    """How to start pytest again as this run was started: same directory, rootdir, ini file, plugins.

    The ini file's ``addopts`` and ``PYTEST_ADDOPTS`` are left out on purpose: options such as
    ``--junitxml`` or ``-n`` would make the child overwrite the parent's files or fork workers.
    """

    invocation_dir: Path
    rootdir: Path
    inifile: Path | None
    extra_args: tuple[str, ...] = ()
    python: str = sys.executable
    """The interpreter: this one, or (the old side against a revision) the one ``--fxprof-against-python``
    names."""
    path: tuple[str, ...] = ()
    """Directories put first on the child's ``PYTHONPATH`` (the import roots of the code it must run)."""

    def targets(self, test_ids: Sequence[str]) -> list[str]:
        """What the command line names: one test by its id; several by their files (each once, those that exist
        here: the process picks its tests from the request, and one missing from a file is absent, not an error
        that would stop the others)."""
        if len(test_ids) == 1:
            path, sep, rest = test_ids[0].partition("::")
            return [str(self.rootdir / path) + sep + rest]
        files = dict.fromkeys(t.partition("::")[0] for t in test_ids)
        return [str(self.rootdir / f) for f in files if (self.rootdir / f).exists()]

    def command(self, test_ids: Sequence[str], request: Path) -> list[str]:
        targets = self.targets(test_ids)
        cmd = [self.python, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider", "-o", "addopts="]
        if len(test_ids) > 1:  # a file that fails to import at a revision fails its tests, not the others'
            cmd.append("--continue-on-collection-errors")
        cmd += ["--rootdir", str(self.rootdir)]
        if self.inifile is not None:
            cmd += ["-c", str(self.inifile)]
        return [*cmd, *self.extra_args, "--fxprof-sample", str(request)]


def tail(text: str) -> str:
    """The end of a child's output, as much as an error message shows."""
    return text if len(text) <= OUTPUT_TAIL else "..." + text[-OUTPUT_TAIL:]


@dataclass(frozen=True)
class Child:
    """How one fresh process ended: its exit status, what it wrote (None if nothing readable), its output."""

    command: tuple[str, ...]
    returncode: int
    data: dict[str, Any] | None
    output: str
    problem: str = ""
    """Why ``data`` is None though the process exited (an unreadable result, a deadline that stopped it)."""

    @property
    def absent(self) -> bool:
        """Whether the process found no such test, and said so (not a module that failed to import)."""
        return bool(self.data and self.data.get("absent"))

    @property
    def skipped(self) -> str:
        """Why the test skipped in the process ("" if it did not)."""
        return str((self.data or {}).get("skipped") or "")

    @property
    def ended(self) -> bool:
        """Whether the process reported the test absent or skipped: nothing of it to compare."""
        return self.absent or bool(self.skipped)


def child_env(relaunch: Relaunch) -> dict[str, str]:
    """The environment of a child: this one without what would make it a worker of this run or add options,
    and with ``relaunch.path`` first on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    if relaunch.path:
        env["PYTHONPATH"] = os.pathsep.join([*relaunch.path, *filter(None, [env.get("PYTHONPATH", "")])])
    return env


def write_request(relaunch: Relaunch, request: dict[str, Any], directory: Path, parent: int) -> list[str]:
    """Write ``request`` (with ``parent``, the process that starts the child) into ``directory``; the child's
    command line."""
    path = directory / "request.json"
    path.write_text(json.dumps({**request, "parent": parent}), encoding="utf-8")
    return relaunch.command([t["test_id"] for t in request["tests"]], path)


class Process(Protocol):
    """A started child as ``finish`` and ``measure.serving`` use it: a ``subprocess.Popen``, or a forked side
    (``measure.forking.Forked``). ``chunks`` (its output so far) and ``reader`` (what reads it) where it has them."""

    args: Any
    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


Start = Callable[[Relaunch, dict[str, Any], Path], Process]
"""How a child is started: ``start`` (a fresh interpreter), or a forked side's (``measure.forking.Forker``)."""


def start(relaunch: Relaunch, request: dict[str, Any], directory: Path) -> subprocess.Popen[str]:
    """Start one fresh process that measures the tests of ``request`` (``parent`` is added), its request
    written into ``directory``; ``finish`` waits for it."""
    cmd = write_request(relaunch, request, directory, os.getpid())
    proc = subprocess.Popen(
        cmd,
        cwd=relaunch.invocation_dir,
        env=child_env(relaunch),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    _read_output(proc)
    return proc


DRAIN_S = 5.0
"""How long the output of a process that ended is read on: a process it started that lives on (a server, a
worker pool) may hold the pipe open, and must not hold up the run."""


def _read_output(proc: subprocess.Popen[str]) -> None:
    """Read a process's output as it comes, into ``proc.chunks`` (so that it never blocks on a full pipe, and
    what it wrote is there even while a process it started holds the pipe open); ``finish`` returns it."""
    chunks: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                chunks.append(line)  # noqa: PERF402 (one line at a time: what came is there while it reads)

    reader = threading.Thread(target=read, name=f"fxprof-output-{proc.pid}", daemon=True)
    reader.start()
    proc.chunks, proc.reader = chunks, reader  # type: ignore[attr-defined]


def finish(proc: Process, out: Path | None, deadline_s: float | None = None, problem: str = "") -> Child:
    """Wait for a process ``start`` began, at most ``deadline_s`` (then it is stopped, and ``problem`` says so);
    a KeyboardInterrupt kills it first, so that none is left behind."""
    try:
        try:
            proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            problem = f"did not end within {deadline_s:.0f} s, so it was stopped (a test that hangs?)"
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    reader = getattr(proc, "reader", None)
    if reader is not None:
        reader.join(DRAIN_S)
    output = "".join(getattr(proc, "chunks", ()))
    data = None
    if out is not None and out.is_file():
        try:
            data = loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problem = problem or f"wrote an unreadable result ({exc})"
    assert proc.returncode is not None
    stopped = interrupted(proc.returncode, output, problem)
    if stopped:
        raise KeyboardInterrupt(
            f"fxprof: a measuring process (pid {proc.pid}) was interrupted ({stopped}): the run stops"
        )
    return Child(tuple(str(a) for a in proc.args), proc.returncode, data, output or "", problem)


INTERRUPTING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that interrupt a run (Ctrl-C, a CI job cancelled, a terminal closed), where they end a measuring
process: the run stops, interrupted, rather than fail the test that process measured."""


def interrupted(returncode: int, output: str, problem: str = "") -> str:
    """How a measuring process that exited with ``returncode`` and wrote ``output`` was interrupted: the signal that
    ended it, or pytest's interrupted status where it caught the interrupt itself; "" where it was not (``problem``
    set: this run stopped it for a deadline)."""
    if problem:
        return ""
    if returncode < 0 and -returncode in {int(s) for s in INTERRUPTING}:
        return signal.Signals(-returncode).name
    if returncode == PYTEST_INTERRUPTED and "KeyboardInterrupt" in output:
        return "KeyboardInterrupt"
    return ""


PYTEST_INTERRUPTED = 2
"""pytest's exit status of an interrupted session (``pytest.ExitCode.INTERRUPTED``, without importing pytest)."""


def sample(
    relaunch: Relaunch,
    test_id: str,
    settings: dict[str, Any],
    count: int,
    expected: Mapping[str, Sequence[str]],
    *,
    retries: int = 0,
    disturbances: dict[str, list[Disturbance]] | None = None,
    ahead: Sequence[Sequence[Child]] = (),
) -> dict[str, list[Run]]:
    """``count`` runs per ``fxprof`` call of ``test_id``, each from a fresh process.

    ``expected`` maps each call's key to its node keys; a child whose graph differs is an error
    (a capture that depends on the process cannot be baselined). A process whose profile of any call was
    measured on a busy machine is started again up to ``retries`` times, and the least disturbed of its tries
    kept; ``disturbances``, where given, receives each kept run's disturbance, per call, in the runs' order.
    ``ahead``: per process, its tries that processes serving many tests measured before (``measure.serving``);
    only the processes beyond them are started here.
    """
    if retries < 0:
        raise ValueError(f"retries must be 0 or more, not {retries}")
    runs: dict[str, list[Run]] = {key: [] for key in expected}
    for i in range(1, count + 1):
        which = f"fresh process {i} of {count} for {test_id}"
        tries = [runs_of(child, expected, which) for child in (ahead[i - 1] if i <= len(ahead) else ())]
        while not tries or (len(tries) <= retries and any(d.busy for d in tries[-1][1].values())):
            tries.append(_one_sample(relaunch, test_id, settings, expected, which))
        kept = [max(tries_d.values(), key=_busiest) if tries_d else Disturbance() for _, tries_d in tries]
        got, seen = tries[least_disturbed(kept)]
        for key in expected:
            runs[key].append(got[key])
            if disturbances is not None:
                disturbances.setdefault(key, []).append(seen[key])
    return runs


def _busiest(d: Disturbance) -> tuple[int, float]:
    return (int(d.busy), d.off_cpu_mean or 0.0)


def busy(child: Child) -> bool:
    """Whether a fresh process measured any call of its test on a busy machine (it is then tried again)."""
    calls = (child.data or {}).get("calls") or {}
    try:
        return any(disturbance_from_json(c["disturbance"], k).busy for k, c in calls.items() if "disturbance" in c)
    except (ValueError, TypeError, KeyError):
        return False


def _one_sample(
    relaunch: Relaunch,
    test_id: str,
    settings: dict[str, Any],
    expected: Mapping[str, Sequence[str]],
    which: str,
) -> tuple[dict[str, Run], dict[str, Disturbance]]:
    """One fresh process's run and disturbance per call, the process started for this test alone."""
    with tempfile.TemporaryDirectory(prefix="fxprof-") as tmp:
        out = Path(tmp) / "out.json"
        proc = start(relaunch, {"tests": [{"test_id": test_id, "settings": settings, "out": str(out)}]}, Path(tmp))
        child = finish(proc, out)
    if child.returncode != 0:  # its teardown too must pass
        child = replace(child, data=None)
    return runs_of(child, expected, which)


def runs_of(
    child: Child, expected: Mapping[str, Sequence[str]], which: str
) -> tuple[dict[str, Run], dict[str, Disturbance]]:
    """A fresh process's run and disturbance per call of its test, as ``child`` wrote them (``SampleJSON`` per
    call, under ``calls``)."""
    runs: dict[str, Run] = {}
    seen: dict[str, Disturbance] = {}
    calls = (child.data or {}).get("calls")
    if not isinstance(calls, dict):
        why = child.problem or f"exit {child.returncode}"
        if child.ended:
            why = "it found no such test" if child.absent else f"the test skipped there: {child.skipped}"
        raise SamplingError(f"{which} failed ({why}); command: {' '.join(child.command)}\n{tail(child.output)}")
    for key, node_keys in expected.items():
        got = calls.get(key)
        if got is None:
            raise SamplingError(f"{which} made no fxprof call {key!r}; calls must not depend on the process")
        if list(got["nodes"]) != list(node_keys):
            names = ("this process's capture", "the fresh process's")
            raise SamplingError(
                f"{which} captured a different graph for {key!r} than this process did; the capture must be "
                f"deterministic: {capture_difference(list(node_keys), list(got['nodes']), names)}"
            )
        try:
            runs[key] = run_from_json(got["run"], f"{key}.run", len(node_keys))
            raw = got.get("disturbance")
            seen[key] = disturbance_from_json(raw, key) if raw is not None else Disturbance()
        except ValueError as exc:
            raise SamplingError(f"{which} sent a malformed profile: {exc}") from None
    return runs, seen


def write_samples(path: Path, samples: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(dict(samples), sort_keys=True), encoding="utf-8")
