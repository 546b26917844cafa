"""Evidence lives in BENCHMARKS.md, not in the code: no docstring of the package quotes a run's figures.

A constant's docstring says what the constant means and names the BENCHMARKS.md section that backs it; the
figures of that section (dates, the machine, how many checks or pairs, measured ratios and their ranges) change
with every bench and live in one place, with the command that reproduces them. Every docstring of the package
(module, class, function and the string after an assignment) is read from the source, with its ``code spans``
left out, since a format or an example (``2026-11-24T22:30:05Z``, ``total x1.12``) is not a measurement.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "pytest_fxprof"

RUN_FIGURES: dict[str, re.Pattern[str]] = {
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a machine": re.compile(r"\b\d+-core\b|\bthis machine\b|\b(?:one|a) (?:noisy |quiet )?evening\b"),
    "a count of runs": re.compile(
        r"\b(?:[2-9]|\d{2,}|\d{1,3}(?:,\d{3})+)\s+(?:such\s+)?(?:checks|runs|recordings|evenings|recorded)\b"
        r"|\b\d+(?:-\d+)?\s+of\s+(?:the\s+|its\s+)?\d+\b"
    ),
    "a measured range of ratios": re.compile(r"\bx\d+\.\d+\s*-\s*x?\d+\.\d+\b|\b\d\.\d{3}\s*-\s*\d\.\d{3}\b"),
    "a measured share of checks": re.compile(r"\b\d+(?:\.\d+)?\s*%\s+of\s+(?:the\s+)?(?:checks|runs|pairs|tests)\b"),
    "measured figures set side by side": re.compile(r"\b\d+\.\d+\s+against\s+\d+\.\d+\b"),
}
"""What a run's figures look like in prose, by kind."""

CODE_SPAN = re.compile(r"``.*?``|`[^`\n]*`", re.DOTALL)


def docstrings(path: Path) -> Iterator[tuple[int, str]]:
    """Each docstring of a module: ``(line, text)``, the module's, its classes' and functions', and the string
    that follows an assignment (a constant's or a field's)."""
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i, statement in enumerate(body):
            if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
                continue
            if not isinstance(statement.value.value, str):
                continue
            first = i == 0 and isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            after_assignment = i > 0 and isinstance(body[i - 1], (ast.Assign, ast.AnnAssign))
            if first or after_assignment:
                yield statement.lineno, statement.value.value


def run_figures(text: str) -> list[str]:
    """The run's figures that ``text`` quotes, each as ``kind: 'words'``, code spans left out."""
    prose = CODE_SPAN.sub("", text)
    return [f"{kind}: {m.group(0)!r}" for kind, pattern in RUN_FIGURES.items() for m in pattern.finditer(prose)]


def test_each_kind_of_run_figure_is_found_and_code_spans_are_not() -> None:
    quoted = (
        "Measured on a 2-core machine on 2026-11-24: over 59 such checks, 3 of 4 checks failed, "
        "items spread x0.84-x1.23, caught in 97.2 % of checks, 4.16 against 4.59 pairs."
    )
    found = run_figures(quoted)
    assert [f.split(":")[0] for f in found] == [
        "a date",
        "a machine",
        "a count of runs",
        "a count of runs",
        "a measured range of ratios",
        "a measured share of checks",
        "measured figures set side by side",
    ]
    assert run_figures("A date: ``2026-11-24T22:30:05Z``; its line: ``total x1.02-x1.10``.") == []
    assert run_figures('The band: +15 % (BENCHMARKS.md, "Gate quality"); 4 pairs at least.') == []


def test_docstrings_are_read_where_a_constant_or_a_function_keeps_them(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Module."""\nX = 1\n"""Of X."""\ndef f():\n    """Of f."""\n    "not a docstring"\n')
    assert [text for _, text in docstrings(module)] == ["Module.", "Of X.", "Of f."]


def test_no_docstring_of_the_package_quotes_a_run() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {figure}"
        for path in sorted(SOURCE.rglob("*.py"))
        for line, text in docstrings(path)
        for figure in run_figures(text)
    ]
    assert found == [], "say what the constant means and name the BENCHMARKS.md section instead:\n" + "\n".join(found)


CITATION = re.compile(r'BENCHMARKS(?:\.md)?(?:\]\([^)]*\))?,\s+"([^"]+)"')
"""A citation of a section: ``BENCHMARKS.md, "Heading"`` (in a page, the file's name may be a link)."""


def headings(text: str) -> list[str]:
    """The headings of a Markdown document, whitespace collapsed, in lower case."""
    return [" ".join(line.lstrip("#").split()).lower() for line in text.splitlines() if line.startswith("#")]


def cited_sections(text: str) -> list[str]:
    """The section names ``text`` cites, whitespace collapsed (a docstring wraps them)."""
    return [" ".join(m.group(1).split()) for m in CITATION.finditer(text)]


def test_a_citation_is_read_across_lines_and_through_a_link() -> None:
    text = 'as measured (BENCHMARKS.md, "The total\'s\n    resolve at 99 %")'
    text += ' and ([BENCHMARKS.md](../benchmarks.md), "Under load")'
    assert cited_sections(text) == ["The total's resolve at 99 %", "Under load"]


def test_every_cited_section_of_benchmarks_exists() -> None:
    known = headings((ROOT / "BENCHMARKS.md").read_text("utf-8"))
    citing = [*sorted(SOURCE.rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    missing = [
        f"{path.relative_to(ROOT)}: {name!r}"
        for path in citing
        for name in cited_sections(path.read_text("utf-8"))
        if not any(name.lower() in heading for heading in known)
    ]
    assert missing == [], "cite a heading BENCHMARKS.md has:\n" + "\n".join(missing)
