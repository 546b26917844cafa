"""How a comparison ends a test: the failures, skips and warnings it adds, and the status it records.

``ending`` is a pure function of the comparison, the user's reactions and what the caller knows of the test
(its label, its baseline's directory, a weak-baseline warning, how a revision's pairs ended): tested by tables.

A verdict's way from the rule to the test, every step by name and in order (``tests/test_ending.py`` holds each
name to the code):

1. the rule: ``judge.decision.compare`` against a stored baseline, ``judge.paired.compare_pairs`` on a set of
   pairs, once per set (``against.compare.judged_calls``);
2. against a stored baseline: ``judge.decision.refuse_lone`` (a baseline of one process decides nothing), then a
   slowdown confirmed by a second measurement, and ``modes.check.noisy`` where either was measured on a busy
   machine (``modes.check.CheckCalls.judged``);
3. against a revision: ``against.compare.settled``, two independent sets of pairs into one verdict;
4. a check whose model's code changed since its baseline: ``modes.check.stricter``, the pairs' verdict against
   the baseline's revision or the baseline's, whichever is stricter;
5. ``ending``: the user's reactions (``session.reactions.Reactions``) turn the verdict into the status recorded and
   an ``session.reactions.Outcome``, which ``plugin.pytest_runtest_call`` makes a failure, a skip or warnings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_fxprof.against.rounds import StopReason
from pytest_fxprof.records.verdicts import Comparison, Status, operations_changed
from pytest_fxprof.session.reactions import (
    OnFaster,
    OnGraphChange,
    OnMismatch,
    OnMissing,
    OnUndecided,
    Outcome,
    Reactions,
    if_intended,
    rerecord_hint,
    update_command,
)
from pytest_fxprof.views.render import (
    improvement_lines,
    notice_lines,
    regression_message,
    structural_lines,
    undecided_message,
)

SETUP_FIELDS = ("inputs:", "mode:", "state:")
"""How a mismatch of the test's setup (``Setup.differences``) begins."""


@dataclass(frozen=True)
class Ending:
    """What one ``fxprof`` call's comparison does to its test."""

    status: Status
    outcome: Outcome = field(default_factory=Outcome)
    notices: list[str] = field(default_factory=list)
    """What the gate saw but does not fail on or ask anything about (``notice_lines``)."""


def ending(
    label: str,
    test_id: str,
    c: Comparison | None,
    reactions: Reactions,
    *,
    directory: Path,
    weak: str = "",
    pairs: int = 0,
    stopped: StopReason | None = None,
    baseline: bool = False,
    confirmation: str = "",
) -> Ending:
    """How the comparison ``c`` of the call ``label`` of ``test_id`` ends the test. ``directory``: where its
    baseline was looked for; ``weak``: the warning of a baseline recorded on a busy machine; ``pairs`` and
    ``stopped``: how many pairs a revision's comparison took, and what ended them while it was open; ``baseline``: a
    comparison against a revision that stands for a baseline (the revision it was recorded at), which a refreshed
    baseline accepts, as a baseline's does; ``confirmation``: what a second set of pairs found (a line of a failure,
    else a notice)."""
    outcome = Outcome()
    if c is not None and c.status is Status.UNCHANGED:  # proven the same computation: nothing to judge or warn of
        return Ending(c.status, outcome)
    refresh = c is not None and (not c.against or baseline)
    if c is not None and not c.against and weak and not c.refused:  # a weak baseline says so in every check
        outcome.warnings.append(f"fxprof: {weak}")
    if c is not None and c.status is Status.UNDECIDED and c.noisy_reason:  # nothing judged
        fix = lone_fix(test_id) if c.refused else "run the check on a quieter machine"
        _undecided(outcome, reactions, undecided_message(label, c, fix))
        return Ending(c.status, outcome)
    if c is None:
        msg = f"fxprof: no baseline for {label} in {directory}; {rerecord_hint(test_id)}"
        (outcome.failures if reactions.missing is OnMissing.FAIL else outcome.skips).append(msg)
        return Ending(Status.MISSING, outcome)
    if c.status is Status.MISMATCH:
        _mismatch(outcome, reactions, _mismatch_message(label, test_id, c))
        return Ending(Status.MISMATCH, outcome)
    if c.graph_changed:
        msg = "\n".join([f"fxprof: {label}: " + structural_lines(c)[0], *structural_lines(c)[1:]])
        msg += "\nstill compared: matched nodes, each module over both graphs' nodes, and the total"
        msg += f"; {if_intended(test_id)}" if refresh else ""
        (outcome.failures if reactions.graph_change is OnGraphChange.FAIL else outcome.warnings).append(msg)
    confirmed = f"\n  {confirmation}" if confirmation else ""
    if c.status is Status.REGRESSION:
        advice = f"\n  {if_intended(test_id)}" if refresh else ""
        outcome.failures.append(regression_message(label, c) + confirmed + advice)
    if c.status is Status.UNDECIDED:
        measured = f"{pairs} pairs measured" + (f", when {stopped} ended them" if stopped is not None else "")
        budget = "--fxprof-budget-s" if stopped is None else stopped.option
        fix = (
            f"{measured}; more pairs decide it (raise {budget} or --fxprof-pairs), or a quieter runner"
            if c.against
            else wide_bands(test_id, c)
        )
        _undecided(outcome, reactions, undecided_message(label, c, fix) + confirmed)
    improved = improvement_lines(c)
    # what asks nothing of the user (a flag its confirmation cleared, a small node its aggregates gate, an item
    # too noisy to decide beside a failure) is no warning: the summary counts it, -v and the reports list it
    notices = notice_lines(c)
    if improved and reactions.faster is not OnFaster.IGNORE:
        msg = "\n".join([f"fxprof: {label} got faster than {c.reference}", *improved])
        if not c.against:
            msg += f"\nrefresh the baseline so that it keeps guarding the new speed; {rerecord_hint(test_id)}"
        if reactions.faster is OnFaster.FAIL:
            outcome.failures.append(msg)
        elif c.against or operations_changed(c.added, c.removed):  # established beyond the runner's drift
            outcome.warnings.append(msg)
        else:  # the same code against a recording made earlier: the runner's drift as likely as a speed-up
            notices.append(
                f"faster than {c.reference}, its code unchanged: the machine may have drifted since the recording "
                f"(a speed-up is established in pairs, --fxprof-against; refresh the baseline where it lasts): "
                + "; ".join(line.strip() for line in improved[:2])
            )
    if confirmation and c.status not in (Status.REGRESSION, Status.UNDECIDED):
        notices.append(confirmation)
    return Ending(c.status, outcome, notices)


def _mismatch_message(label: str, test_id: str, c: Comparison) -> str:
    """Why a mismatched comparison was not judged: another setup (against a revision, or since the baseline),
    or another environment."""
    if c.against:
        return (
            f"fxprof: {label} hands the model other inputs, another mode or another state of torch than at "
            f"{c.against}, so it was not compared (another setup measures something else, not a slowdown): "
            f"{'; '.join(c.mismatches)}"
        )
    if any(m.startswith(SETUP_FIELDS) for m in c.mismatches):
        return (
            f"fxprof: {label} hands the model other inputs, another mode or another state of torch than its "
            f"baseline was recorded with, so it was not compared (another setup measures something else, not a "
            f"slowdown): "
            f"{'; '.join(c.mismatches)}. If the change is meant, {rerecord_hint(test_id)}"
        )
    return (
        f"fxprof: the baseline of {label} was recorded in another environment, so it was not compared: "
        f"{'; '.join(c.mismatches)}. Record and check on the same runner class ({rerecord_hint(test_id)})"
    )


def _mismatch(outcome: Outcome, reactions: Reactions, msg: str) -> None:
    (outcome.failures if reactions.mismatch is OnMismatch.FAIL else outcome.skips).append(msg)


def lone_fix(test_id: str) -> str:
    """How a baseline of one process comes to decide: more processes in a recording, or a second recording."""
    return (
        f"record it from 2 or more processes (--fxprof-processes; the default is 5): "
        f"{update_command(test_id)} --fxprof-processes 5; or record it once more, and the history's two recordings "
        "show the spread"
    )


def wide_bands(test_id: str, c: Comparison) -> str:
    """What makes the bands of a baseline too wide to decide, and how to narrow them."""
    again = "record it again on a quieter machine, or from more processes (--fxprof-processes): "
    again += update_command(test_id)
    if c.recordings > 1:  # the drift between its recordings counts too, and a new recording keeps them
        return (
            f"its {c.recordings} recordings (or the processes of one) disagreed too much on these: start its "
            f"history afresh with `fxprof prune --history 1 --yes`, then {again}"
        )
    return f"its baseline's processes disagreed too much on these: {again}"


def _undecided(outcome: Outcome, reactions: Reactions, msg: str) -> None:
    """A check without a verdict fails, skips or passes with a warning, as ``--fxprof-on-undecided`` says."""
    if reactions.undecided is OnUndecided.FAIL:
        outcome.failures.append(msg)
    elif reactions.undecided is OnUndecided.SKIP:
        outcome.skips.append(msg)
    else:
        outcome.warnings.append(msg)
