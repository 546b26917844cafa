"""The base revision's code, materialised from git beside the user's checkout, never inside it.

Owns ``materialise``: ``git archive`` of the revision, unpacked into a temporary directory of its own, so that
the checkout, its index, its stash and its list of worktrees stay as they are (an export leaves nothing in
``.git``), and ``remove`` for the end of the run. The directory's name carries the process id of the run that
made it, so that one a killed run left behind is removed by the next (``remove_stale``).

Must not import torch or pytest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_fxprof.store.files import running

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


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    if git is None:
        raise RevisionError(
            "git was not found on PATH; --fxprof-against takes the base revision's code from git: install git "
            "(in CI, use an image that has it)"
        )
    return subprocess.run([git, *args], cwd=cwd, capture_output=True, text=True, check=False)


def resolve(ref: str, cwd: Path) -> tuple[Path, str]:
    """The repository's top level and the commit ``ref`` names."""
    if not ref.strip() or ref.startswith("-"):
        raise RevisionError(f"--fxprof-against {ref!r}: not a revision; give a branch, tag or sha (origin/main)")
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    if top.returncode != 0:
        raise RevisionError(
            f"--fxprof-against {ref}: {cwd} is not in a git repository ({top.stderr.strip() or 'git said no'}); "
            "the mode compares the working tree with a git revision: run it in a clone of the project"
        )
    repo = Path(top.stdout.strip()).resolve()
    found = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], repo)
    if found.returncode == 0:
        return repo, found.stdout.strip()
    shallow = _git(["rev-parse", "--is-shallow-repository"], repo).stdout.strip() == "true"
    if shallow:
        raise RevisionError(
            f"--fxprof-against {ref}: the revision is not in this clone, which is shallow (it holds only the "
            "newest commits); fetch the history: `git fetch --unshallow origin` (and the branch: "
            f"`git fetch origin {ref.removeprefix('origin/')}`), or in GitHub Actions check out with "
            "`fetch-depth: 0`"
        )
    raise RevisionError(
        f"--fxprof-against {ref}: git knows no revision {ref!r} in {repo}; name a branch, tag or sha it has "
        f"(`git log --oneline -3 {ref}` must work), or fetch it first (`git fetch origin`)"
    )


def materialise(ref: str, cwd: Path) -> Revision:
    """``ref``'s tree, exported into a new temporary directory (``remove`` deletes it)."""
    repo, sha = resolve(ref, cwd)
    remove_stale()
    tree = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    try:
        git = shutil.which("git")
        assert git is not None  # resolve found it
        with subprocess.Popen(
            [git, "archive", "--format=tar", sha], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as proc:
            assert proc.stdout is not None
            with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
                archive.extractall(tree, filter="data")
            error = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.returncode != 0:
            raise RevisionError(f"--fxprof-against {ref}: git archive {sha[:7]} failed: {error.strip()}")
    except (OSError, tarfile.TarError) as exc:
        shutil.rmtree(tree, ignore_errors=True)
        raise RevisionError(f"--fxprof-against {ref}: could not export {sha[:7]} into {tree}: {exc}") from None
    except BaseException:
        shutil.rmtree(tree, ignore_errors=True)
        raise
    return Revision(ref, sha, repo, tree)


def remove(revision: Revision) -> None:
    """Delete the revision's exported tree (nothing else was made)."""
    shutil.rmtree(revision.tree, ignore_errors=True)


def stale_trees(directory: Path | None = None) -> list[Path]:
    """Exported trees in the temporary directory whose run is no longer running (it was killed)."""
    root = Path(directory or tempfile.gettempdir())
    out = []
    for path in sorted(root.glob(f"{PREFIX}*")):
        match = _OWN.match(path.name)
        if match is not None and path.is_dir() and not running(int(match["pid"])):
            out.append(path)
    return out


def remove_stale(directory: Path | None = None) -> list[Path]:
    stale = stale_trees(directory)
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale
