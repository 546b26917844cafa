"""The base revision's code, materialised from git beside the user's checkout, never inside it.

Owns ``materialise``: the revision's files checked out of a throwaway index into a temporary directory of its
own (``git read-tree`` and ``git checkout-index`` with ``GIT_INDEX_FILE`` pointing there), so that the checkout,
its index, its stash and its list of worktrees stay as they are, and every tracked file is there as a checkout
would write it (``git archive`` would leave out the paths ``.gitattributes`` marks ``export-ignore``, often the
tests). Submodules are not checked out. ``remove`` deletes the tree at the end of the run. The directory's name
carries the process id of the run that made it, so that one a killed run left behind is removed by the next
(``remove_stale``); so do the pairs' own temporary directories.

Must not import torch or pytest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_fxprof.store.files import left_by_killed

PREFIX = "fxprof-against-"
_OWN = re.compile(rf"^{PREFIX}(?P<pid>\d+)-")


class RevisionError(Exception):
    """The revision cannot be materialised; the message names the cause and the fix."""


@dataclass(frozen=True)
class Revision:
    """The old side's code: ``ref`` as given, the commit it names, and where its files lie (``tree``, the
    repository's top level at that commit) beside the working tree's top level (``repo``)."""

    ref: str
    sha: str
    repo: Path
    tree: Path

    @property
    def short(self) -> str:
        return self.sha[:7]

    @property
    def label(self) -> str:
        """``origin/main (1a2b3c4)``; a sha given as the ref is shown once."""
        return self.short if self.sha.startswith(self.ref) else f"{self.ref} ({self.short})"

    def old_path(self, path: Path) -> Path:
        """Where ``path`` (inside the working tree) lies in the revision's tree."""
        return self.tree / path.resolve().relative_to(self.repo)

    def to_json(self) -> dict[str, str]:
        return {"ref": self.ref, "sha": self.sha, "repo": str(self.repo), "tree": str(self.tree)}

    @classmethod
    def from_json(cls, raw: dict[str, str]) -> Revision:
        return cls(raw["ref"], raw["sha"], Path(raw["repo"]), Path(raw["tree"]))


def run_git(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    if git is None:
        raise RevisionError(
            "git was not found on PATH; fxprof takes a revision's code from git (--fxprof-against, and a check of "
            "code changed since its baseline): install git (in CI, use an image that has it)"
        )
    try:
        return subprocess.run(
            [git, *args], cwd=cwd, capture_output=True, text=True, errors="replace", check=False, env=env
        )
    except OSError as exc:
        raise RevisionError(f"git could not be run ({exc}); check that {git} is a working git") from None


def resolve(ref: str, cwd: Path) -> tuple[Path, str]:
    """The repository's top level and the commit ``ref`` names."""
    if not ref.strip() or ref.startswith("-"):
        raise RevisionError(f"--fxprof-against {ref!r}: not a revision; give a branch, tag or sha (origin/main)")
    top = run_git(["rev-parse", "--show-toplevel"], cwd)
    if top.returncode != 0:
        said = top.stderr.strip() or "git said no"
        if "dubious ownership" in said:  # git refuses a checkout another user owns (CI containers)
            raise RevisionError(
                f"--fxprof-against {ref}: git refuses {cwd}, owned by another user ({said.splitlines()[0]}); "
                f"let it: git config --global --add safe.directory {cwd}"
            )
        raise RevisionError(
            f"--fxprof-against {ref}: {cwd} is not in a git repository ({said}); "
            "the mode compares the working tree with a git revision: run it in a clone of the project"
        )
    repo = Path(top.stdout.strip()).resolve()
    found = run_git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], repo)
    if found.returncode == 0:
        return repo, found.stdout.strip()
    shallow = run_git(["rev-parse", "--is-shallow-repository"], repo).stdout.strip() == "true"
    if shallow:
        raise RevisionError(
            f"--fxprof-against {ref}: the revision is not in this clone, which is shallow (it holds only the "
            f"newest commits); {shallow_fetch(ref, repo)}; in GitHub Actions, check out with `fetch-depth: 0` "
            "(actions/checkout) instead"
        )
    raise RevisionError(
        f"--fxprof-against {ref}: git knows no revision {ref!r} in {repo}; name a branch, tag or sha it has "
        f"(`git log --oneline -3 {ref}` must work), or fetch it first (`git fetch origin`)"
    )


_STEPS = re.compile(r"(?:~\d*|\^\d*)+$")
_STEP = re.compile(r"([~^])(\d*)")
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}", re.IGNORECASE)
_SHORT_SHA = re.compile(r"[0-9a-f]{4,}", re.IGNORECASE)
_NAME = re.compile(r"\w[\w./-]*")


def _generations(steps: str) -> int:
    """How many commits back ``~2^`` reaches from its base (``^2``, a second parent, is one back)."""
    total = 0
    for kind, count in _STEP.findall(steps):
        total += (int(count) if count else 1) if kind == "~" else int(count != "0")
    return total


def _remote(name: str, repo: Path) -> str:
    """The remote ``name`` belongs to (``upstream`` for ``upstream/main``), else ``origin`` or the first one."""
    remotes = run_git(["remote"], repo).stdout.split()
    for remote in remotes:
        if name.startswith(remote + "/"):
            return remote
    return "origin" if "origin" in remotes or not remotes else remotes[0]


def shallow_fetch(ref: str, repo: Path) -> str:
    """The advice for a ``ref`` the shallow clone ``repo`` lacks: the git command after which it resolves.

    A remote takes only names and full shas, never ``HEAD~1``: a commit behind one the clone has
    (``HEAD~2``) needs the clone deepened (``git fetch --deepen=2 origin``); ``origin/main`` its branch fetched
    into the remote-tracking ref by name (a single-branch clone's refspec would leave it in ``FETCH_HEAD``),
    ``N`` commits deeper for ``origin/main~N``; a full sha or a branch or tag name itself; anything else (a
    short sha) the whole history of every branch and tag.
    """
    steps = _STEPS.search(ref)
    base = ref[: steps.start()] if steps else ref
    back = _generations(steps.group()) if steps else 0
    remote = _remote(base, repo)
    found = run_git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}"], repo)
    if base and back and found.returncode == 0:
        return (
            f"deepen it by {back} commit(s): `git fetch --deepen={back} {remote}`, or fetch the whole "
            f"history: `git fetch --unshallow {remote}`"
        )
    depth = back + 1
    if base.startswith(remote + "/") and _NAME.fullmatch(base):
        branch = base.removeprefix(remote + "/")
        return f"fetch the branch: `git fetch --depth={depth} {remote} {branch}:refs/remotes/{base}`"
    if _FULL_SHA.fullmatch(base):
        return f"fetch the commit: `git fetch --depth={depth} {remote} {base.lower()}`"
    if _NAME.fullmatch(base) and not _SHORT_SHA.fullmatch(base):
        return (
            f"fetch the branch: `git fetch --depth={depth} {remote} {base}:{base}` (a tag: "
            f"`git fetch --depth={depth} {remote} tag {base}`)"
        )
    return (
        "fetch the history of every branch and tag: "
        f"`git fetch --unshallow --tags {remote} '+refs/heads/*:refs/remotes/{remote}/*'`"
    )


def own_tempdir(kind: str) -> Path:
    """A new temporary directory named for this process (``remove_stale`` removes it once the process is gone)."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{kind}-"))


def materialise(ref: str, cwd: Path) -> Revision:
    """``ref``'s tree, checked out into a new temporary directory (``remove`` deletes it)."""
    repo, sha = resolve(ref, cwd)
    remove_stale()
    try:
        tree = own_tempdir("tree")
    except OSError as exc:
        raise RevisionError(
            f"--fxprof-against {ref}: no temporary directory for {sha[:7]}'s code ({exc}); point TMPDIR at a "
            "writable directory with room for a copy of the project"
        ) from None
    try:
        index = tree.with_name(tree.name + ".index")
        env = {**os.environ, "GIT_INDEX_FILE": str(index)}
        for args in (["read-tree", sha], ["checkout-index", "--all", "--force", f"--prefix={tree}{os.sep}"]):
            done = run_git(args, repo, env)
            if done.returncode != 0:
                raise RevisionError(
                    f"--fxprof-against {ref}: git {args[0]} of {sha[:7]} failed: {done.stderr.strip()}; check that "
                    f"{os.path.dirname(tree)} has room for a copy of the project"
                )
    except BaseException:
        shutil.rmtree(tree, ignore_errors=True)
        raise
    finally:
        Path(str(tree) + ".index").unlink(missing_ok=True)
    return Revision(ref, sha, repo, tree)


def remove(revision: Revision) -> None:
    """Delete the revision's exported tree (nothing else was made)."""
    shutil.rmtree(revision.tree, ignore_errors=True)


def stale_trees(directory: Path | None = None) -> list[Path]:
    """Temporary directories of this mode (exported trees, pairs' directories) and the index files of their
    checkouts, whose run is no longer running (it was killed)."""
    return left_by_killed(Path(directory or tempfile.gettempdir()), f"{PREFIX}*", _OWN)


def remove_stale(directory: Path | None = None) -> list[Path]:
    stale = stale_trees(directory)
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale
