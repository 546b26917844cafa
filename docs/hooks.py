"""MkDocs hooks of the documentation site (registered under ``hooks:`` in mkdocs.yml).

The options reference is generated, never written by hand: the line ``<!-- fxprof-options -->`` of a page is
replaced by the Markdown that ``pytest_fxprof.options.reference_markdown()`` returns, so the page lists exactly
the options the installed plugin has. Files that live outside ``docs/`` (the changelog, the benchmarks and the
HTML report's screenshot) are served from where they are, so that there is one copy of each.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mkdocs.structure.files import File

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
OPTIONS_PLACEHOLDER = "<!-- fxprof-options -->"
FROM_THE_REPOSITORY = {
    "changelog.md": "CHANGELOG.md",
    "benchmarks.md": "BENCHMARKS.md",
    "assets/html-report.png": "examples/html-report.png",
}
"""Site path -> the repository file it is built from."""


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for uri, source in FROM_THE_REPOSITORY.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / source)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if OPTIONS_PLACEHOLDER not in markdown:
        return markdown
    from pytest_fxprof.options import reference_markdown

    lines = markdown.splitlines()
    out = [reference_markdown().strip() if line.strip() == OPTIONS_PLACEHOLDER else line for line in lines]
    return "\n".join(out) + "\n"
