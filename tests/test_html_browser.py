"""The HTML report in a real headless browser: the script runs without errors, draws one chart mark per node,
sorts and filters the node table, and the page requests nothing from the network.

Drives Chromium through the ``playwright`` package, with the system's browser (``FXPROF_CHROMIUM`` or
``chromium`` on the PATH; playwright's own browser download is never used). Without either, the tests skip
with the fix, unless ``FXPROF_REQUIRE_BROWSER=1`` (set by ``make test``) makes that a failure.
``take_screenshot`` renders a page to a PNG for a person to look at.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import pytest

from pytest_fxprof.views.html import CHART_ROWS, TABLE_ROWS, section_id, write_html
from pytest_fxprof.views.judged_json import NodeRefJSON
from pytest_fxprof.views.report import ProfileReportJSON
from tests.test_html import HOSTILE, checked, display_order, profiles, recorded

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Error, Page, Request, Route

BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
INSTALL_HINT = "`make test` installs both (the playwright package and Debian's chromium)"
BIG_BLOCKS = 657
"""A recorded profile of 2,629 nodes (as many as Mask R-CNN's graph): one mark each, all in the page."""


def chromium_path() -> str | None:
    """The browser the tests drive: ``FXPROF_CHROMIUM``, else ``chromium`` on the PATH."""
    given = os.environ.get("FXPROF_CHROMIUM")
    if given:
        return given if Path(given).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _missing(reason: str) -> NoReturn:
    if os.environ.get("FXPROF_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}; FXPROF_REQUIRE_BROWSER=1 makes this a failure", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the whole module."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing(f"the browser tests need the playwright package: {INSTALL_HINT}")
    path = chromium_path()
    if path is None:
        where = os.environ.get("FXPROF_CHROMIUM") or "chromium on the PATH"
        _missing(f"the browser tests need Chromium ({where} not found; set FXPROF_CHROMIUM): {INSTALL_HINT}")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=path, args=BROWSER_ARGS)
        yield launched
        launched.close()


@dataclass(frozen=True)
class Report:
    """A written page and its profiles in display order."""

    path: Path
    profiles: list[ProfileReportJSON]


def _written(directory: Path, shown: list[ProfileReportJSON], unused: list[str]) -> Report:
    path = directory / "report.html"
    write_html(path, "check", shown, unused)
    return Report(path, display_order(shown))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The page of the three profiles of ``tests.test_html.profiles``."""
    return _written(tmp_path_factory.mktemp("html"), profiles(), ["tests/baselines/old.json (no such test)"])


@pytest.fixture(scope="module")
def big_report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The page of one recorded profile of 2,629 nodes."""
    return _written(tmp_path_factory.mktemp("big"), [recorded("tests/test_big.py::test_mask_rcnn", BIG_BLOCKS)], [])


@dataclass
class Opened:
    """A page opened from a file, with what went wrong in it and every request it made off the disk."""

    page: Page
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert self.errors == []
        assert self.requests == []


@contextmanager
def _open(browser: Browser, path: Path) -> Iterator[Opened]:
    """The page at ``path``, every request off the disk refused and recorded; clean when closed."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    out = Opened(page)

    def route(r: Route) -> None:
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            out.requests.append(r.request.url)
            r.abort()

    def console(m: ConsoleMessage) -> None:
        if m.type == "error":
            out.errors.append(f"console: {m.text}")

    def failed(e: Error) -> None:
        out.errors.append(f"page error: {e}")

    def request(r: Request) -> None:
        if not r.url.startswith("file:"):
            out.requests.append(r.url)

    page.route("**/*", route)
    page.on("console", console)
    page.on("pageerror", failed)
    page.on("request", request)
    page.goto(path.as_uri(), wait_until="load")
    try:
        yield out
    finally:
        page.close()
    out.assert_clean()


@pytest.fixture
def opened(browser: Browser, report: Report) -> Iterator[Opened]:
    with _open(browser, report.path) as out:
        yield out


@pytest.fixture
def opened_big(browser: Browser, big_report: Report) -> Iterator[Opened]:
    with _open(browser, big_report.path) as out:
        yield out


def test_the_checks_see_a_request_off_the_disk_and_a_script_error(browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "leaky.html"
    page.write_text(
        '<!DOCTYPE html><img src="https://example.invalid/pixel.png"><script>null.x;</script>', encoding="utf-8"
    )
    with pytest.raises(AssertionError), _open(browser, page) as out:
        pass
    assert out.requests == ["https://example.invalid/pixel.png"] * 2  # seen by the route and the request hook
    assert sorted(out.errors) == [
        "console: Failed to load resource: net::ERR_FAILED",  # the refused request
        "page error: Cannot read properties of null (reading 'x')",
    ]


def _section(opened: Opened, profile: ProfileReportJSON) -> Any:
    return opened.page.locator(f"#{section_id(profile['test_id'], profile['key'])}")


def _visible_row_keys(section: Any) -> list[str]:
    """The node keys of the table's rows a person sees, top to bottom."""
    keys: list[str] = section.locator("table.nodes tbody tr").evaluate_all(
        "rows => rows.filter(r => r.getClientRects().length > 0).map(r => r.dataset.key)"
    )
    return keys


def test_the_page_runs_without_errors_or_network(opened: Opened) -> None:
    opened.page.wait_for_selector("table.nodes")
    opened.assert_clean()
    assert opened.page.title() == "pytest-fxprof report"


def test_every_profile_has_a_visible_section(opened: Opened, report: Report) -> None:
    shown = report.profiles
    sections = opened.page.locator("section.fxprof-profile")
    assert sections.count() == len(shown)
    for i, profile in enumerate(shown):
        heading = sections.nth(i).locator("h2")
        assert heading.is_visible()
        assert profile["test_id"] in heading.inner_text()
    assert any(HOSTILE in text for text in opened.page.locator("h2").all_inner_texts())
    assert opened.page.locator(".hostile").count() == 0


def test_each_chart_has_one_mark_per_node(opened: Opened, report: Report) -> None:
    shown = report.profiles
    assert sorted(len(p["nodes"]) for p in shown) == [9, 61, 65]
    assert [p["status"] for p in shown if "verdict" not in p["nodes"][0]] == ["recorded"]  # no comparison
    for profile in shown:
        keys = (
            _section(opened, profile)
            .locator("svg.fxprof-chart .fxprof-mark")
            .evaluate_all("marks => marks.map(m => m.dataset.key)")
        )
        assert sorted(keys) == sorted(n["key"] for n in profile["nodes"])


def test_a_chart_shows_the_worst_nodes_first_and_the_rest_on_request(opened: Opened, report: Report) -> None:
    regression = next(p for p in report.profiles if p["status"] == "regression")
    section = _section(opened, regression)
    marks = section.locator(".fxprof-mark")
    first = marks.evaluate_all("ms => ms.filter(m => m.getClientRects().length > 0).map(m => m.dataset.key)")
    assert len(first) == CHART_ROWS
    by_key = {n["key"]: n for n in regression["nodes"]}
    assert by_key[first[0]]["name"] == "conv12"  # the node that failed the profile leads
    ok = [by_key[k]["baseline_ns"] * (by_key[k]["ratio"] - 1) for k in first if by_key[k]["verdict"] == "ok"]
    assert len(ok) > 10
    assert ok == sorted(ok, reverse=True)  # then the nodes that lost the most time
    button = section.locator("button.fxprof-more")
    assert button.inner_text() == f"Show all {len(regression['nodes'])} nodes"
    button.click()
    assert section.locator(".fxprof-mark:visible").count() == len(regression["nodes"])
    # its tooltip names the node and gives its times and verdict
    title = section.locator("svg.fxprof-chart .fxprof-row title").first.text_content() or ""
    assert title.startswith("conv12\nmodule layer12.conv")
    assert "source models/net.py:32" in title
    assert "slower: x1.60 beyond band" in title


def test_sorting_a_numeric_column_orders_rows_by_value(opened: Opened, report: Report) -> None:
    regression = next(p for p in report.profiles if p["status"] == "regression")
    section = _section(opened, regression)
    current = {n["key"]: n["current_ns"] for n in regression["nodes"]}
    assert _visible_row_keys(section) == [n["key"] for n in regression["nodes"]]  # graph order at first
    header = section.locator("table.nodes th", has_text="current")
    header.click()
    times = [current[k] for k in _visible_row_keys(section)]
    assert times == sorted(times, reverse=True)
    assert header.get_attribute("aria-sort") == "descending"
    header.click()
    times = [current[k] for k in _visible_row_keys(section)]
    assert times == sorted(times)
    # as text the same cells would sort otherwise ("9.0 us" after "10.5 us")
    cells = section.locator("table.nodes tbody tr td:nth-child(3)").all_inner_texts()
    assert cells != sorted(cells)


def test_the_filter_box_and_the_verdict_filter_narrow_the_table(opened: Opened, report: Report) -> None:
    regression = next(p for p in report.profiles if p["status"] == "regression")
    section = _section(opened, regression)
    section.locator("input.fxprof-filter").fill("LAYER1")
    wanted = [
        n["key"]
        for n in regression["nodes"]
        if any("layer1" in str(n[f]).lower() for f in ("name", "module", "target", "op"))
    ]
    assert 0 < len(wanted) < len(regression["nodes"])
    assert _visible_row_keys(section) == wanted
    assert section.locator(".fxprof-count").inner_text() == f"{len(wanted)} of {len(regression['nodes'])} nodes"
    section.locator("input.fxprof-filter").fill("")
    section.locator("select.fxprof-verdict").select_option("slower")
    slower = [n["key"] for n in regression["nodes"] if n.get("verdict") == "slower"]
    assert [by_name(regression, k) for k in _visible_row_keys(section)] == ["conv3", "conv12"]
    assert _visible_row_keys(section) == slower
    section.locator("select.fxprof-verdict").select_option("faster")
    assert [by_name(regression, k) for k in _visible_row_keys(section)] == ["conv10"]


def by_name(profile: ProfileReportJSON, key: str) -> str:
    return str(next(n["name"] for n in profile["nodes"] if n["key"] == key))


def test_a_table_without_a_comparison_has_no_verdict_columns(opened: Opened, report: Report) -> None:
    uncompared = next(p for p in report.profiles if p["status"] == "recorded" and len(p["nodes"]) < 100)
    section = _section(opened, uncompared)
    headers = section.locator("table.nodes th").all_inner_texts()
    assert headers[:4] == ["#", "node", "current", "spread"]
    assert not {"baseline", "ratio", "band", "verdict"} & set(headers)
    assert section.locator("select.fxprof-verdict").count() == 0
    section.locator("input.fxprof-filter").fill("relu")
    assert len(_visible_row_keys(section)) == sum(1 for n in uncompared["nodes"] if "relu" in n["name"])


def test_a_big_graph_has_every_mark_and_a_table_of_its_first_rows(opened_big: Opened, big_report: Report) -> None:
    (big,) = big_report.profiles
    section = _section(opened_big, big)
    keys = [n["key"] for n in big["nodes"]]
    assert len(keys) == 2629
    marks = section.locator(".fxprof-mark").evaluate_all("marks => marks.map(m => m.dataset.key)")
    assert sorted(marks) == sorted(keys)
    assert section.locator(".fxprof-mark:visible").count() == CHART_ROWS
    assert _visible_row_keys(section) == keys[:TABLE_ROWS]
    count = section.locator(".fxprof-count")
    assert count.inner_text() == f"{len(keys)} nodes, the first {TABLE_ROWS} shown"
    # sorting and filtering go over every node, not only the rows shown
    section.locator("table.nodes th", has_text="current").click()
    current = {n["key"]: n["current_ns"] for n in big["nodes"]}
    assert [current[k] for k in _visible_row_keys(section)] == sorted(current.values(), reverse=True)[:TABLE_ROWS]
    section.locator("input.fxprof-filter").fill("conv65")
    matching = {n["key"] for n in big["nodes"] if any("conv65" in n[f] for f in ("name", "module", "target", "op"))}
    assert len(matching) == 8  # conv65, conv650 ... conv656
    assert set(_visible_row_keys(section)) == matching
    assert count.inner_text() == f"{len(matching)} of {len(keys)} nodes"
    section.locator("input.fxprof-filter").fill("")
    section.locator("button.fxprof-all-rows").click()
    assert sorted(_visible_row_keys(section)) == sorted(keys)


def test_a_compared_profile_of_a_changed_graph_still_renders(browser: Browser, tmp_path: Path) -> None:
    profile = checked("tests/t.py::test_changed", 3, {})
    profile["added"] = [
        cast("NodeRefJSON", {"key": "k", "name": "extra", "op": "call_function", "target": "torch.neg", "module": ""})
    ]
    profile["status"] = "mismatch"
    profile["mismatches"] = ["torch: baseline '2.3', this run '2.4'"]
    path = tmp_path / "changed.html"
    write_html(path, "check", [profile], [])
    with _open(browser, path) as out:
        text = out.page.locator("section.fxprof-profile").inner_text()
    assert "Recorded in another environment, so not compared" in text
    assert "1 node(s) added since the baseline: extra (torch.neg)" in text


def take_screenshot(html: Path, png: Path, width: int = 1280, height: int = 900, full_page: bool = True) -> None:
    """Render the report page ``html`` in headless Chromium and save what it shows to ``png``."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise RuntimeError(f"no Chromium found (set FXPROF_CHROMIUM to its path): {INSTALL_HINT}")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=path, args=BROWSER_ARGS)
        try:
            page = launched.new_page(viewport={"width": width, "height": height})
            page.goto(html.resolve().as_uri(), wait_until="load")
            page.screenshot(path=str(png), full_page=full_page)
        finally:
            launched.close()
