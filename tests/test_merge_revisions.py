"""``fxprof merge`` of the shards of a run against a revision: which commit each was checked against, the
report's own record of it, and the inputs and outputs it refuses before writing anything.

No torch: the shards' reports are written from hand-built profiles, as ``tests/test_cli.py`` writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_fxprof.cli import main
from pytest_fxprof.views.report import AgainstJSON, ProfileRecord, profile_report, write_report
from tests.test_cli import result

COMMIT = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"
OTHER = "5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f80"


def side(ref: str, commit: str) -> AgainstJSON:
    """The old side of a run against ``ref``, which named ``commit``."""
    return {"label": f"{ref} ({commit[:7]})", "ref": ref, "commit": commit, "python": ""}


def shard(
    path: Path, test_id: str, old: AgainstJSON | None, *, new: bool = False, mode: str = "against", top: bool = True
) -> Path:
    """A shard's report of one profile, written as the plugin writes it: compared with ``old`` (its label in the
    profile), or ``new`` (the test has no counterpart at the revision); ``old`` at the top (None, or not ``top``:
    a report that does not record it)."""
    status = "new" if new else "pass"
    report = profile_report(test_id, "call0", status, result(), None)
    if old is not None and not new:
        report["against"] = old["label"]
        report["pairs"] = 5
    records: list[ProfileRecord] = [
        {"test_id": test_id, "key": "call0", "status": status, "summary": "", "report": report}
    ]
    write_report(path, mode, records, [])
    if old is not None and top:  # what the report records of the run's old side
        data = json.loads(path.read_text())
        data["against"] = dict(old)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def merge(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main(["merge", *(str(a) for a in argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_report_records_the_revision_also_when_every_profile_is_new(tmp_path: Path) -> None:
    report = profile_report("t.py::test_new", "call0", "new", result(), None)
    records: list[ProfileRecord] = [
        {"test_id": "t.py::test_new", "key": "call0", "status": "new", "summary": "", "report": report}
    ]
    write_report(tmp_path / "r.json", "against", records, [], against=side("origin/main", COMMIT))
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["against"] == {"label": "origin/main (1a2b3c4)", "ref": "origin/main", "commit": COMMIT, "python": ""}
    write_report(tmp_path / "c.json", "check", records, [])
    assert "against" not in json.loads((tmp_path / "c.json").read_text())


def test_merge_takes_shards_of_one_commit_named_differently(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = shard(tmp_path / "a.json", "t.py::test_a", side("HEAD", COMMIT))
    b = shard(tmp_path / "b.json", "t.py::test_b", side("main", COMMIT))
    code, stdout, err = merge(capsys, tmp_path / "all.json", a, b)
    assert (code, err) == (0, "")
    assert "merged 2 report(s), 2 profile(s)" in stdout
    merged = json.loads((tmp_path / "all.json").read_text())
    assert merged["against"]["commit"] == COMMIT
    assert [p["test_id"] for p in merged["profiles"]] == ["t.py::test_a", "t.py::test_b"]


def test_merge_refuses_a_shard_of_new_profiles_checked_against_another_commit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = shard(tmp_path / "a.json", "t.py::test_a", side("main", COMMIT))
    b = shard(tmp_path / "b.json", "t.py::test_b", side("main", OTHER), new=True)
    code, stdout, err = merge(capsys, tmp_path / "all.json", a, b)
    assert (code, stdout) == (2, "")
    assert "checked against different commits" in err
    assert f"main (1a2b3c4) = {COMMIT[:12]} in {a}" in err
    assert f"main (5d6e7f8) = {OTHER[:12]} in {b}" in err
    assert "Merge the shards of one run" in err
    assert not (tmp_path / "all.json").exists()


def test_merge_refuses_a_malformed_record_of_the_revision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = shard(tmp_path / "a.json", "t.py::test_a", side("main", COMMIT))
    data = json.loads(a.read_text())
    data["against"] = {"label": "main (1a2b3c4)", "commit": 7}
    a.write_text(json.dumps(data))
    code, _, err = merge(capsys, tmp_path / "all.json", a)
    assert code == 2
    assert f"{a}: the report's 'against' should be an object of strings" in err
    assert "run the shard again" in err
    assert not (tmp_path / "all.json").exists()


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        pytest.param(["b.json", "b.json", "c.json"], "b.json: the merged report (OUT) would overwrite", id="out"),
        pytest.param(["sub/../b.json", "b.json", "c.json"], "the merged report (OUT) would overwrite", id="spelled"),
        pytest.param(
            ["all.json", "b.json", "c.json", "--html", "c.json"], "the --html file would overwrite", id="html"
        ),
    ],
)
def test_merge_refuses_to_write_over_one_of_its_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], problem: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    shard(tmp_path / "b.json", "t.py::test_b", side("main", COMMIT))
    shard(tmp_path / "c.json", "t.py::test_c", side("main", COMMIT))
    before = {name: (tmp_path / name).read_bytes() for name in ("b.json", "c.json")}
    code, stdout, err = merge(capsys, *argv)
    assert (code, stdout) == (2, "")
    assert problem in err
    assert "pass a new path" in err
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert not (tmp_path / "all.json").exists()


def test_merge_refuses_a_report_given_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = shard(tmp_path / "a.json", "t.py::test_a", side("main", COMMIT))
    (tmp_path / "sub").mkdir()
    code, stdout, err = merge(capsys, tmp_path / "all.json", a, tmp_path / "sub" / ".." / "a.json")
    assert (code, stdout) == (2, "")
    assert f"is given twice (as {a} too)" in err
    assert "Pass each shard's report once" in err
    assert not (tmp_path / "all.json").exists()


@pytest.mark.parametrize(
    ("cut", "problem"),
    [
        pytest.param(lambda text: text[: len(text) // 2], "the report ends before its JSON does", id="cut-short"),
        pytest.param(lambda text: "", "the report is empty", id="empty"),
        pytest.param(lambda text: "<!DOCTYPE html>\n" + text, "the report is not JSON", id="not-json"),
    ],
)
def test_merge_gives_advice_for_a_report_that_is_not_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: Any, problem: str
) -> None:
    a = shard(tmp_path / "a.json", "t.py::test_a", side("main", COMMIT))
    b = shard(tmp_path / "b.json", "t.py::test_b", side("main", COMMIT))
    b.write_text(cut(b.read_text()))
    code, stdout, err = merge(capsys, tmp_path / "all.json", a, b)
    assert (code, stdout) == (2, "")
    assert f"{b}: {problem}" in err
    assert "run the shard again" in err
    assert "--fxprof-update" not in err
    assert not (tmp_path / "all.json").exists()


def test_merge_says_which_shard_records_no_revision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = shard(tmp_path / "a.json", "t.py::test_a", side("main", COMMIT))
    old = shard(tmp_path / "old.json", "t.py::test_b", None, new=True)  # written before reports recorded it
    code, stdout, err = merge(capsys, tmp_path / "all.json", a, old)
    assert code == 0
    assert "merged 2 report(s), 2 profile(s) (1 new, 1 pass)" in stdout
    assert err == (
        f"{old}: does not record which revision it was checked against (written before reports recorded it, and "
        "none of its profiles was compared): merged unchecked\n"
    )
    assert json.loads((tmp_path / "all.json").read_text())["against"]["commit"] == COMMIT


@pytest.mark.parametrize(("commit", "merged"), [(COMMIT, True), (OTHER, False)], ids=["same commit", "another"])
def test_a_report_that_records_no_commit_is_compared_by_the_sha_its_labels_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], commit: str, merged: bool
) -> None:
    older = shard(tmp_path / "old.json", "t.py::test_a", side("HEAD", commit), top=False)  # "HEAD (1a2b3c4)" alone
    newer = shard(tmp_path / "new.json", "t.py::test_b", side("main", COMMIT))
    code, _, err = merge(capsys, tmp_path / "all.json", older, newer)
    if merged:
        assert (code, err) == (0, "")
    else:
        assert code == 2
        assert "the reports were checked against different revisions: HEAD (5d6e7f8) in" in err
        assert not (tmp_path / "all.json").exists()
