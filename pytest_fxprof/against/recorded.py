"""The git revision a baseline was recorded at: noted when recording, found again when checking.

A baseline's bands must hold the drift between a recording and a later check, so they cannot see a change of a few
percent; measured in pairs of fresh processes against the code the baseline measured, such a change stands out.
So where a check finds that the model's code changed since its baseline was recorded, it measures the test against
that revision too (``modes.check``). Owns ``working_revision`` (at ``--fxprof-update``: the commit the working
tree is, where its tracked files are as committed there, the baselines' directory aside) and ``baseline_revision``
(at ``--fxprof``: the commit an entry names, else the last commit that wrote its file, where the file is as
committed there), each with the reason and the fix where there is none.

Must not import torch or pytest.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pytest_fxprof.against.compare import Against
from pytest_fxprof.against.revision import RevisionError, materialise, remove, run_git, shallow_fetch

REF = "the baseline's revision"
"""How the lines that name the old side of such a check call it: ``the baseline's revision (1a2b3c4)``."""


def _top(path: Path) -> Path | None:
    """The top level of the git repository that holds ``path`` (a directory), None where none does."""
    done = run_git(["rev-parse", "--show-toplevel"], path)
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 else None


def _outside(directory: Path, repo: Path) -> list[str]:
    """The pathspec that leaves ``directory`` out of ``repo``'s status (nothing where it lies outside ``repo``)."""
    try:
        inside = directory.resolve().relative_to(repo)
    except ValueError:
        return []
    return [f":(exclude){inside.as_posix()}"] if inside.parts else []


def working_revision(rootdir: Path, baselines: Path) -> tuple[str, str]:
    """The commit the working tree at ``rootdir`` is, where every tracked file outside ``baselines`` is as
    committed there: ``(sha, "")``; else ``("", why)``. Untracked files do not count."""
    try:
        repo = _top(rootdir)
        if repo is None:
            return "", f"{rootdir} is not in a git repository"
        head = run_git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], repo)
        if head.returncode != 0:
            return "", "the repository has no commit yet"
        status = run_git(["status", "--porcelain", "--untracked-files=no", "--", ".", *_outside(baselines, repo)], repo)
    except RevisionError as exc:
        return "", str(exc)
    if status.returncode != 0:
        return "", f"git status failed: {status.stderr.strip()}"
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        return "", f"the working tree has uncommitted changes ({shown})"
    return head.stdout.strip(), ""


def _known(sha: str, repo: Path) -> bool:
    return run_git(["cat-file", "-e", f"{sha}^{{commit}}"], repo).returncode == 0


def _shallow_boundary(sha: str, repo: Path) -> bool:
    """Whether ``sha`` is where a shallow clone's history is cut: git shows every file as written there."""
    path = run_git(["rev-parse", "--git-path", "shallow"], repo).stdout.strip()
    shallow = Path(path) if Path(path).is_absolute() else repo / path
    try:
        return sha in shallow.read_text().split()
    except OSError:
        return False


def baseline_revision(recorded: str, baseline: Path, tests: Path | None = None) -> tuple[str, str]:
    """The commit whose code the baseline file ``baseline`` measured: ``recorded`` (what its entry names) where the
    clone of the tests' repository (the one holding ``tests``, the run's rootdir; else the file's) has it, wherever
    the file lives; else the last commit that wrote the file, where the file is committed in that repository as it
    is. ``(sha, "")``, or ``("", why not, and how to make it known)``."""
    try:
        repo = (_top(tests) if tests is not None else None) or _top(baseline.parent)
        if repo is None:
            where = f"neither {tests} nor {baseline.parent} is" if tests is not None else f"{baseline.parent} is not"
            return "", f"{where} in a git repository"
        shallow = run_git(["rev-parse", "--is-shallow-repository"], repo).stdout.strip() == "true"
        if recorded:
            if _known(recorded, repo):
                return recorded, ""
            fix = shallow_fetch(recorded, repo) if shallow else "fetch it (`git fetch origin`)"
            return "", f"this clone lacks {recorded[:7]}, the commit its baseline was recorded at; {fix}"
        if _top(baseline.parent) != repo:
            return "", (
                f"its baseline names no revision (recorded from a working tree with uncommitted changes) and lies "
                f"outside the tests' repository ({repo}), whose history could say which commit wrote it; record it "
                "again from a clean working tree, which names the commit"
            )
        name = str(baseline.resolve().relative_to(repo))
        tracked = run_git(["ls-files", "--error-unmatch", "--", name], repo).returncode == 0
        edited = run_git(["status", "--porcelain", "--", name], repo).stdout.strip()
        if not tracked or edited:
            return "", (
                "its baseline names no revision (recorded from a working tree with uncommitted changes) and is not "
                "committed as it is; commit the baselines with the code they measured, or record them from a clean "
                "working tree"
            )
        last = run_git(["log", "-1", "--format=%H", "--", name], repo).stdout.strip()
    except (RevisionError, ValueError) as exc:
        return "", str(exc)
    if not last or (shallow and _shallow_boundary(last, repo)):
        return "", (
            "its baseline names no revision and this clone is too shallow to show the commit that wrote it; fetch "
            "more history (`git fetch --unshallow`; in GitHub Actions, check out with `fetch-depth: 0`)"
        )
    return last, ""


class RecordedSides:
    """The old sides of a run's checks of changed code: each baseline's revision materialised once, when a check
    first needs it (``against.revision``), and removed when the run ends (``close``)."""

    def __init__(self, rootdir: Path, roots: tuple[str, ...] = (), *, fork: bool = False) -> None:
        self.rootdir = rootdir
        self.roots = roots
        self.fork = fork
        self._made: dict[str, Against | str] = {}

    def side(self, sha: str) -> tuple[Against | None, str]:
        """The old side at ``sha``, or None and why it cannot be made (with the fix)."""
        if sha not in self._made:
            try:
                revision = materialise(sha, self.rootdir)
            except RevisionError as exc:
                self._made[sha] = str(exc).replace(f"--fxprof-against {sha}: ", "", 1)
            else:
                self._made[sha] = Against(replace(revision, ref=REF), None, self.roots, fork=self.fork)
        made = self._made[sha]
        return (made, "") if isinstance(made, Against) else (None, made)

    def close(self) -> None:
        for made in self._made.values():
            if isinstance(made, Against) and made.revision is not None:
                remove(made.revision)
        self._made.clear()
