"""``RunState``: everything fxprof gathered in one pytest run, from this process or from xdist workers; the
baselines it writes at the end, and the ones whose test no longer exists."""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from pytest_fxprof.measure.serving import Spent, spent_from_json
from pytest_fxprof.measure.turns import Turns
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.session.reactions import Reactions
from pytest_fxprof.settings import Mode
from pytest_fxprof.store.baseline import BaselineStore, EntryJSON, as_file, entry_from_json, entry_to_json
from pytest_fxprof.views.report import ProfileRecord

if TYPE_CHECKING:
    from pytest_fxprof.modes.base import Calls
    from pytest_fxprof.records.measurement import BaselineEntry


WORKER_KEY = "fxprof"
"""Where an xdist worker's ``workeroutput`` holds its ``WorkerPayload``."""


class FinishedTest(TypedDict):
    """What one test left in an xdist worker, sent to the controller on the test's teardown report as plain
    data, so that it arrives as soon as the test ends, whatever happens to the worker later."""

    test_id: str
    records: list[ProfileRecord]
    writes: dict[str, EntryJSON] | None
    dropped: list[str] | None
    notes: list[str]
    errors: list[str]
    failed_calls: int
    turns: int
    waited_s: float
    spent: dict[str, float]
    processes_spent: dict[str, float]


class WorkerPayload(TypedDict):
    """What an xdist worker sends to the controller when it finishes: what it collected."""

    collected: list[str]
    partial: bool


class RunState:
    """Everything fxprof gathered in this pytest run (in the controller, also from xdist workers)."""

    def __init__(self, mode: Mode, store: BaselineStore, reactions: Reactions) -> None:
        self.mode = mode
        self.against = ""
        """Against a revision: the old side's label (``origin/main (1a2b3c4)``)."""
        self.revision = ""
        """Recording: the git commit whose code the run measures ("" where the working tree differs from it)."""
        self.store = store
        self.reactions = reactions
        self.records: list[ProfileRecord] = []
        self.writes: dict[str, dict[str, EntryJSON]] = {}
        self.dropped: dict[str, list[str]] = {}
        self.notes: list[str] = []
        self.errors: list[str] = []
        """What the run could not do and must fail for, though every test passed."""
        self.failed_calls = 0
        """Calls of the fixture that failed (and failed their tests)."""
        self.collected: set[str] = set()
        self.partial = False
        self.turns = 0
        """Measuring turns the run's tests took (``measure.turns``) ..."""
        self.waited_s = 0.0
        """... and the seconds they waited for other processes' turns to end."""
        self.lock_path: Path | None = None
        """The measuring lock's file (None: measured without turns)."""
        self.spent = Spent()
        """Where the run's measuring time went."""
        self._turns: Turns | None = None

    def measuring_turns(self) -> Turns:
        """The machine's measuring turns, one for the whole run (re-entrant within this process)."""
        if self._turns is None or self._turns.path != self.lock_path:
            self._turns = Turns(self.lock_path)
        return self._turns

    def add_record(self, record: ProfileRecord) -> None:
        """Keep ``record``; one of the same test and key from an earlier attempt at the test (a rerun plugin ran
        it again) is replaced, so that every view shows each fixture call once, as it ended."""
        same = (record["test_id"], record["key"])
        self.records = [r for r in self.records if (r["test_id"], r["key"]) != same]
        self.records.append(record)

    def queue_write(self, test_id: str, entries: dict[str, BaselineEntry]) -> None:
        self.writes[test_id] = {key: entry_to_json(e) for key, e in entries.items()}

    def test_payload(self, test: Calls, notes: Sequence[str], errors: Sequence[str]) -> FinishedTest:
        """What ``test`` left here (its records, its queued baseline, the entries it dropped, ``notes`` and
        ``errors``, its failed calls)."""
        return {
            "test_id": test.test_id,
            "records": list(test.records),
            "writes": self.writes.get(test.test_id),
            "dropped": self.dropped.get(test.test_id),
            "notes": list(notes),
            "errors": list(errors),
            "failed_calls": test.failed_calls,
            "turns": test.waited()[0],
            "waited_s": test.waited()[1],
            "spent": dict(test.spent),
            "processes_spent": test.processes_spent.to_json(),
        }

    def merge_test(self, payload: FinishedTest) -> None:
        """Take what a test left in a worker."""
        for record in payload["records"]:
            self.add_record(record)
        test_id = payload["test_id"]
        if payload["writes"] is not None:
            self.writes[test_id] = payload["writes"]
        if payload["dropped"] is not None:
            self.dropped[test_id] = payload["dropped"]
        self.notes.extend(payload["notes"])
        self.errors.extend(payload["errors"])
        self.failed_calls += payload["failed_calls"]
        self.turns += payload.get("turns", 0)
        self.waited_s += payload.get("waited_s", 0.0)
        self.spent.add_test(0.0, payload.get("spent", {}))
        self.spent.add(spent_from_json(payload.get("processes_spent", {})))
        self.spent.waiting_s += payload.get("waited_s", 0.0)

    def payload(self) -> WorkerPayload:
        return {"collected": sorted(self.collected), "partial": self.partial}

    def merge(self, payload: WorkerPayload) -> None:
        self.collected.update(payload["collected"])
        self.partial = self.partial or payload["partial"]

    def lost_worker(self, worker: str, error: object) -> None:
        """A worker ended without saying what it collected (it crashed): the tests it finished were received
        one by one, the one it was running left nothing, and no baseline can be called unused."""
        self.partial = True
        self.notes.append(
            f"pytest-xdist worker {worker} crashed ({' '.join(str(error).split())[:200] or 'no reason given'}): "
            "the results of the tests it had finished were kept, the test it was running left none, and "
            "baselines were not checked for tests that no longer exist (what it collected is unknown)"
        )

    def write_baselines(self) -> tuple[list[Path], list[str]]:
        """Write every queued baseline (each file atomically); return the files and any errors. Temporary files
        that a killed update left in the directory go first."""
        written, errors = [], []
        try:
            stale = self.store.remove_stale_temporaries()
        except OSError as exc:
            errors.append(f"could not remove temporary files a killed update left in {self.store.directory}: {exc}")
        else:
            if stale:
                names = ", ".join(p.name for p in stale)
                self.notes.append(f"removed {len(stale)} temporary file(s) a killed update left: {names}")
        for test_id, raw_entries in sorted(self.writes.items()):
            try:
                entries = {k: entry_from_json(v, f"{test_id} [{k}]") for k, v in raw_entries.items()}
                written.append(self.store.write(as_file(test_id, entries)))
            except (OSError, ValueError) as exc:
                errors.append(f"could not write the baseline of {test_id}: {exc}")
                for record in self.records:  # every view then says what became of it
                    if record["test_id"] == test_id and record["status"] == Status.RECORDED:
                        record["status"] = record["report"]["status"] = Status.NOT_RECORDED.value
                        label = f"{test_id} [{record['key']}]"
                        record["summary"] = f"{label}: not recorded (its baseline could not be written)"
        return written, errors

    def unused(self, selected_paths: Iterable[Path] | None, rootdir: Path) -> list[str]:
        """Baseline files whose test no longer exists, judged only where the run can know.

        A baseline is unused when its test file collected tests in this run but not this one, or when its
        test file is gone from a selected directory. A file that collected nothing (skipped at module
        level, ignored, left out by ``--lf``) says nothing about its tests. ``selected_paths`` is None
        when the run selected tests by anything finer than whole files or directories (``-k``, ``-m``,
        node ids, deselection): then nothing can be called unused.
        """
        if selected_paths is None or self.partial:
            return []
        roots = [p.resolve() for p in selected_paths]
        collected_files = {test_id.partition("::")[0] for test_id in self.collected}
        collected_names = {self.store.path_for(test_id).name for test_id in self.collected}
        out = []
        for path, test_id in self.store.recorded_tests():
            if test_id is None:
                if path.name not in collected_names:  # a collected test's own file: that test reports it
                    out.append(f"{path.name} (unreadable: {self.store.problem_of(path)})")
                continue
            if why_unused(test_id, self.collected, collected_files, rootdir, roots) is not None:
                out.append(f"{path.name} ({test_id})")
        return out


def why_unused(
    test_id: str, collected: Set[str], collected_files: Set[str], rootdir: Path, roots: Sequence[Path] | None
) -> str | None:
    """Why a baseline's test no longer exists, or None when it exists or the collection cannot tell.

    Its test was not collected, and either its test file collected other tests, or the file is gone (from
    one of the selected paths ``roots``, resolved; None: from anywhere under ``rootdir``). A file that
    collected nothing (skipped at module level, ignored) says nothing about its tests. Shared by the
    plugin's unused baselines and ``fxprof prune``.
    """
    if test_id in collected:
        return None
    file_part = test_id.partition("::")[0]
    if file_part in collected_files:
        return f"not collected, though its file {file_part} collected other tests"
    test_file = (rootdir / file_part).resolve()
    if not test_file.exists() and (roots is None or any(r == test_file or r in test_file.parents for r in roots)):
        return f"its test file {file_part} is gone"
    return None
