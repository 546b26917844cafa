"""The documentation holds together, checked without building it (``make docs`` builds it, with ``--strict``).

The site's navigation (mkdocs.yml) and its pages (docs/) agree both ways; every relative link of the README and
of the pages leads to a file that exists; the README stays a landing page that opens with the two commands; the
options reference is left to the build to generate.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_WORDS = 1300

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
NAV_ENTRY = re.compile(r"^\s*-\s+(?:[^:\n]+:\s+)?(?P<page>\S+\.md)\s*$")


def hooks_constant(name: str) -> object:
    """A constant of docs/hooks.py, read from its source (importing it would import mkdocs)."""
    tree = ast.parse((DOCS / "hooks.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"docs/hooks.py defines no {name}")


def generated() -> dict[str, str]:
    """The site paths docs/hooks.py serves from files of the repository (site path -> repository path)."""
    value = hooks_constant("FROM_THE_REPOSITORY")
    assert isinstance(value, dict)
    return {str(k): str(v) for k, v in value.items()}


def nav_pages(config: str) -> list[str]:
    """The pages the ``nav:`` of an mkdocs.yml lists, in order."""
    lines = config.splitlines()
    start = lines.index("nav:")
    pages = []
    for line in lines[start + 1 :]:
        if line and not line[0].isspace():  # the next top-level key
            break
        m = NAV_ENTRY.match(line)
        if m:
            pages.append(m["page"])
        elif line.strip().endswith(".md"):
            raise AssertionError(f"a nav line this test cannot read: {line!r}")
    return pages


def links(text: str) -> list[str]:
    """The targets of the Markdown links and images in ``text``, outside fenced code blocks and code spans."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.extend(LINK.findall(re.sub(r"`[^`]*`", "", line)))
    return out


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) and not target.startswith("#")


def broken_links(page: Path, text: str, served: dict[str, str]) -> list[str]:
    """The relative links of ``page`` that lead nowhere. A page under docs/ may also link to what the hooks serve."""
    out = []
    for target in links(text):
        if not relative(target):
            continue
        path = target.split("#", 1)[0]
        if not path:
            continue
        resolved = (page.parent / path).resolve()
        if resolved.exists():
            continue
        served_here = page.is_relative_to(DOCS) and resolved.is_relative_to(DOCS)
        if served_here and resolved.relative_to(DOCS).as_posix() in served:
            continue
        out.append(f"{page.relative_to(ROOT)}: {target}")
    return out


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


# The checks' own readers, on made-up text ----------------------------------------------------------------


def test_links_are_read_outside_code_only() -> None:
    text = "See [a](a.md#x) and ![b](img/b.png).\n`[not](c.md)`\n```\n[not](d.md)\n```\n[web](https://x.org)"
    assert links(text) == ["a.md#x", "img/b.png", "https://x.org"]
    assert [t for t in links(text) if relative(t)] == ["a.md#x", "img/b.png"]


def test_nav_entries_are_read_with_and_without_titles() -> None:
    config = "site_name: x\nnav:\n  - index.md\n  - Guide:\n      - Start: guide/start.md\nextra: 1\n  - late.md\n"
    assert nav_pages(config) == ["index.md", "guide/start.md"]


def test_a_link_to_a_missing_file_is_found() -> None:
    page = ROOT / "README.md"
    assert broken_links(page, "[gone](docs/no-such-page.md)", {}) == ["README.md: docs/no-such-page.md"]
    assert broken_links(page, "[ok](docs/index.md#where-to-go) [web](https://example.org)", {}) == []


# The docs ------------------------------------------------------------------------------------------------


def test_every_page_in_the_nav_exists_and_every_page_is_in_the_nav() -> None:
    nav = nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    served = generated()
    assert len(nav) == len(set(nav)), "a page listed twice in the nav"
    missing = [p for p in nav if not (DOCS / p).is_file() and p not in served]
    assert missing == []
    unlisted = [p.relative_to(DOCS).as_posix() for p in doc_pages() if p.relative_to(DOCS).as_posix() not in nav]
    assert unlisted == []


def test_what_the_hooks_serve_exists_in_the_repository_and_is_not_copied_into_docs() -> None:
    for site_path, source in generated().items():
        assert (ROOT / source).is_file(), source
        assert not (DOCS / site_path).exists(), f"docs/{site_path} would hide {source}"


@pytest.mark.parametrize("page", [README, *doc_pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    assert broken_links(page, page.read_text(encoding="utf-8"), generated()) == []


def test_the_options_reference_is_left_to_the_build() -> None:
    """The options page holds the placeholder the hook replaces, and no hand-written table of options."""
    placeholder = hooks_constant("OPTIONS_PLACEHOLDER")
    assert isinstance(placeholder, str)
    text = (DOCS / "reference" / "options.md").read_text(encoding="utf-8")
    assert [line.strip() for line in text.splitlines()].count(placeholder) == 1
    assert "| `--fxprof" not in text


def test_the_readme_is_a_short_landing_page_that_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.split()) <= README_MAX_WORDS
    lines = text.splitlines()
    assert lines[0] == "# pytest-fxprof"
    assert lines[1] == ""
    assert lines[2] == "```"
    block = lines[3 : lines.index("```", 3)]
    commands = [line.split("#", 1)[0].strip() for line in block if not line.startswith(" ")]
    assert commands == ["make demo", "make test"]


def test_the_makefile_builds_the_docs_strictly_as_part_of_make_test() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    test_target = re.search(r"^test:(.*)$", makefile, re.MULTILINE)
    assert test_target is not None
    assert "docs" in test_target[1].split()
    assert re.search(r"^\t(?:\w+=\S+ )*\$\(BIN\)/mkdocs build --strict ", makefile, re.MULTILINE)


def test_the_docs_tools_are_pinned() -> None:
    pins = {
        line.split("==")[0].lower()
        for line in (ROOT / "requirements" / "test.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line
    }
    assert {"mkdocs", "mkdocs-material", "mkdocstrings", "mkdocstrings-python"} <= pins


def test_the_architecture_page_names_every_module_on_top_and_every_file_of_the_top_packages() -> None:
    """The page's "on top" list is held to the code: a module added on top, or to ``modes/``, ``session/`` or
    ``cli/``, is named there (``_version.py`` and ``busywork.py`` are internals of others)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    package = ROOT / "pytest_fxprof"
    internal = {"__init__.py", "__main__.py", "_version.py", "busywork.py"}
    top = [p.name for p in package.glob("*.py") if p.name not in internal]
    packages = {"modes", "session", "cli"}
    inner = [p.name for name in packages for p in (package / name).glob("*.py") if p.name not in internal]
    missing = sorted(name for name in [*top, *(f"{n}/" for n in packages), *inner] if f"`{name}`" not in text)
    assert missing == []


def layer_rows(text: str) -> dict[str, str]:
    """The rows of the architecture page's layer table: sub-package -> what the row says it owns."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\| `(\w+)/` \| (.*?) \|", line)
        if m:
            rows[m[1]] = m[2]
    return rows


def test_the_architecture_page_names_every_module_of_every_layer_and_no_other() -> None:
    """Each layer's row names each of its modules in backticks within brackets (``(`module`)``), and names in that
    form only modules it has."""
    rows = layer_rows((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    package = ROOT / "pytest_fxprof"
    layers = {p.parent.name for p in package.glob("*/__init__.py")} - {"modes", "session", "cli"}
    assert set(rows) == layers
    wrong = []
    for layer, owns in rows.items():
        modules = {p.stem for p in (package / layer).glob("*.py") if p.name != "__init__.py"}
        named = {m for group in re.findall(r"\(([^()]*)\)", owns) for m in re.findall(r"`([a-z_]+)`", group)}
        wrong += [f"{layer}/{m}.py: not named in its row" for m in sorted(modules - named)]
        wrong += [f"{layer}/: names `{m}`, which it has no module of" for m in sorted(named - modules)]
    assert wrong == []
    assert layer_rows("| `views/` | Text (`render`) and more (`report`) | x | y |") == {
        "views": "Text (`render`) and more (`report`)"
    }
