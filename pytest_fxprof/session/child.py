"""``ChildCalls``: a test's calls in a fresh process that a recording, a confirmation or a pair against a
revision started (``--fxprof-sample``): measured and written to the file its parent reads, never judged here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fxprof.against.answers import node_facts
from pytest_fxprof.against.origin import foreign_modules
from pytest_fxprof.measure.lockstep import Barrier, lockstep_barrier
from pytest_fxprof.measure.sampling import SampleJSON, SampleRequest, capture_from_request, write_samples
from pytest_fxprof.records.disturbance import disturbance_to_json
from pytest_fxprof.records.measurement import BaselineEntry, Capture, Tolerances
from pytest_fxprof.session.calls import Calls
from pytest_fxprof.session.reactions import Outcome
from pytest_fxprof.settings import Mode, Settings
from pytest_fxprof.store.baseline import entry_to_json, run_to_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytest_fxprof.records.fingerprint import Fingerprint
    from pytest_fxprof.result import ProfileResult
    from pytest_fxprof.session.run import RunState


class ChildCalls(Calls):
    """The calls of the test its parent asked for (``out``: where their samples go; None for the other tests of
    the process, which run unjudged). ``request``: what the parent asked (``entry``: send whole entries, a side
    against a revision; ``against``: check that this, the old side, imported no module of the working tree;
    ``lockstep``: pass for pass with a twin)."""

    mode = Mode.SAMPLE

    def __init__(
        self, test_id: str, settings: Settings, *, out: Path | None, request: SampleRequest, **kwargs: Any
    ) -> None:
        super().__init__(test_id, settings, **kwargs)
        self.out = out
        self.request = request
        self.side = request.get("entry", False)
        """A side against a revision (else one of a recording's processes, or a confirmation)."""
        self._barriers: dict[str, Barrier] = {}
        """In a duet's process: each call's lock-step with its twin (whether it held, ``Barrier.alone_from``)."""
        self.proving = request.get("fingerprint", False)
        """A side before any pair (``against.proof``): each call captured and fingerprinted, nothing timed."""

    def proof(self, key: str) -> Callable[[Fingerprint], bool] | None:
        """Where the side only fingerprints its calls: every call unmeasured, its fingerprint kept."""
        return (lambda seen: True) if self.proving else None

    def barrier(self, key: str) -> Barrier | None:
        barrier = lockstep_barrier(self.request.get("lockstep"), key, test_id=self.test_id)
        if barrier is not None:
            self._barriers[key] = barrier
        return barrier

    @property
    def flops(self) -> bool:
        return self.side and self.request.get("flops", True)

    def known_capture(self, key: str) -> Capture | None:
        """How this side's first pair captured the call's forward (``TestRequest.captured``), where it was told."""
        captured = self.request.get("captured")
        return capture_from_request(captured.get(key) if isinstance(captured, dict) else None)

    @property
    def reference(self) -> bool:
        return not self.side  # the paired rule divides by nothing: both sides of a pair meet one machine

    def _alone_from(self, key: str) -> int | None:
        barrier = self._barriers.get(key)
        return barrier.alone_in_counted if barrier is not None else None

    def finish(self, run: RunState, passed: bool) -> Outcome:
        """Write the samples (or, for a side, whole entries) the parent asked for."""
        if self.out is None or not passed:
            return Outcome()
        if self.proving:  # before any pair: each call's fingerprint, its unmeasured profile, where the code came from
            tolerances = self.settings.tolerances()
            proved: dict[str, Any] = {
                "calls": {
                    key: {
                        "fingerprint": r.fingerprint.to_json() if r.fingerprint is not None else None,
                        # what the run's own process reads instead of capturing an unchanged test's call again
                        "entry": entry_to_json(_side_entry(r, tolerances)),
                        "facts": node_facts(r.nodes),
                    }
                    for key, r in self.results.items()
                },
                "spent": dict(self.spent),
            }
            self._foreign(proved)
            write_samples(self.out, proved)
            return Outcome()
        if self.side:  # against a revision: whole entries, and where the code came from
            tolerances = self.settings.tolerances()
            data: dict[str, Any] = {
                "calls": {
                    key: {
                        "entry": entry_to_json(_side_entry(r, tolerances)),
                        "alone_from": self._alone_from(key),
                        # the first pair's: what the run's own process reads instead of capturing the call again
                        **({} if self.request.get("captured") else {"facts": node_facts(r.nodes)}),
                    }
                    for key, r in self.results.items()
                },
                "spent": dict(self.spent),
            }
            self._foreign(data)
            write_samples(self.out, data)
            return Outcome()
        samples: dict[str, SampleJSON] = {
            key: {
                "nodes": [n.info.key for n in r.nodes],
                "run": run_to_json(r.run()),
                "disturbance": disturbance_to_json(r.disturbance),
            }
            for key, r in self.results.items()
        }
        write_samples(self.out, {"calls": samples, "spent": dict(self.spent)})
        return Outcome()

    def _foreign(self, data: dict[str, Any]) -> None:
        """The old side's import check: the modules it imported from the working tree, in ``data``."""
        roots = self.request.get("against")
        if roots:
            data["foreign"] = foreign_modules(
                Path(roots["new_root"]), Path(roots["old_root"]), extra=[Path(p) for p in roots["extra"]]
            )


def _side_entry(result: ProfileResult, tolerances: Tolerances) -> BaselineEntry:
    """A side's entry of one call (its run's ``total_ns`` is 0 where the process timed no plain call, which
    ``against.answers.side_profile`` leaves out of the plain total)."""
    return result.entry(tolerances)
