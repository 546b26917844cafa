"""Unit tests of ``pytest_fxprof.views.html``: the page's structure, escaping and content, without a browser.

The profiles are real ``profile_report`` dicts built from hand-made records (no torch). ``profiles()`` is also
what the browser tests open.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pytest_fxprof.judge.decision import compare
from pytest_fxprof.records.measurement import NodeInfo, NodeStats, Tolerances, iqr_int
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.views.html import TITLE, render_html, section_id, write_html
from pytest_fxprof.views.html_tree import SHARE_BAR_EM
from pytest_fxprof.views.report import HintJSON, ProfileReportJSON, profile_report
from tests.records_for_tests import CAPTURE, ENV, POLICY, PROTOCOL, node

TOLERANCES = Tolerances(0.1, 0.15)
HOSTILE = 'tests/t.py::test_x[</script><b class="hostile">bold</b>&"\'<!--]'
"""A test id that would end the data's script tag, open markup and a comment if anything were unescaped."""
PASS_SPREAD = (0.96, 0.98, 1.0, 1.03, 1.08)
"""Each node's passes relative to its median: a spread of about 5 %."""


def graph(blocks: int) -> list[tuple[NodeInfo, int, str, int | None]]:
    """A model of ``blocks`` blocks (a conv, a batch norm, a relu and an add each) after a 0 ns input node:
    node, baseline time, output shape, FLOPs. Times grow with the block, so that sorting the table's
    formatted times as text (``9.0 us`` after ``10.5 us``) would differ from sorting them as numbers."""
    out: list[tuple[NodeInfo, int, str, int | None]] = [(node("x", "x", op="get_attr"), 0, "", None)]
    for i in range(blocks):
        shape = f"float32[1, {16 * (i + 1)}, 28, 28]"
        conv = replace(node(f"conv{i}", "Conv2d", f"layer{i}.conv", op="call_module"), source=f"models/net.py:{20 + i}")
        out += [
            (conv, 100_000 + 37_000 * i, shape, 2_000_000 * (i + 1)),
            (node(f"bn{i}", "BatchNorm2d", f"layer{i}.bn", op="call_module"), 9_000 + 500 * i, shape, None),
            (node(f"relu{i}", "torch.relu", f"layer{i}"), 3_000 + 200 * i, shape, None),
            (node(f"add{i}", "operator.add", f"layer{i}"), 2_000 + 100 * i, shape, None),
        ]
    return out


def result(blocks: int, factors: Mapping[str, float] | None = None) -> ProfileResult:
    """The graph measured with each named node's time multiplied by its factor."""
    factors = factors or {}
    nodes = graph(blocks)
    times = [round(ns * factors.get(info.name, 1.0)) for info, ns, _, _ in nodes]
    busy = sum(times)
    stats = []
    for (info, _, shape, flops), t in zip(nodes, times, strict=True):
        samples = tuple(round(t * f) for f in PASS_SPREAD)
        stats.append(
            NodeStats(
                info=info,
                median_ns=t,
                spread_ns=iqr_int(samples),
                share=t / busy,
                samples_ns=samples,
                flops=flops,
                shape=shape,
                layout="contiguous" if shape else "",
            )
        )
    instrumented = round(busy * 1.2)
    return ProfileResult(
        name="Net",
        nodes=tuple(stats),
        total_samples_ns=(busy,) * 5,
        instrumented_samples_ns=tuple(round(instrumented * f) for f in PASS_SPREAD),
        reference_samples_ns=(500_000,) * 5,
        environment=ENV,
        protocol=PROTOCOL,
        capture=CAPTURE,
        seconds=1.5,
    )


def checked(test_id: str, blocks: int, factors: Mapping[str, float]) -> ProfileReportJSON:
    """The report of a profile compared with the unchanged graph's baseline."""
    baseline = result(blocks).entry(TOLERANCES)
    current = result(blocks, factors)
    c = compare(baseline, current.entry(TOLERANCES), POLICY)
    return profile_report(test_id, "call0", c.status.value, current, c)


def recorded(test_id: str, blocks: int) -> ProfileReportJSON:
    """The report of a profile recorded as a baseline: no comparison."""
    return profile_report(test_id, "call0", "recorded", result(blocks), None)


HINT: HintJSON = {
    "kind": "fusable-batchnorm",
    "message": "3 batch norms follow a convolution and could be folded into it for inference",
    "nodes": ["bn0", "bn1", "bn2"],
    "keys": [],
    "time_ns": 28_500,
    "share": 0.0044,
}


def profiles() -> list[ProfileReportJSON]:
    """A regression (conv12 slowed down enough to fail alone, conv3 too small to, conv10 sped up; with a
    hint), a pass with a hostile test id and a recorded profile: 65, 9 and 61 nodes, in an order that is not
    the display order (the hostile id sorts first)."""
    regression = checked("tests/test_models.py::test_resnet", 16, {"conv12": 1.6, "conv3": 1.6, "conv10": 0.6})
    regression["hints"] = [HINT]
    return [regression, checked(HOSTILE, 2, {}), recorded("tests/test_models.py::test_recorded", 15)]


class Page(HTMLParser):
    """The parts of a page the tests look at: every start tag, the scripts and the text outside them."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._script: dict[str, str | None] | None = None
        self._style = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._style = self._style or tag == "style"
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None
        self._style = self._style and tag != "style"

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            attrs, body = self.scripts[-1]
            self.scripts[-1] = (attrs, body + data)
        elif not self._style:
            self.text.append(data)

    def words(self) -> str:
        """The page's text outside scripts and styles, each run of white space one space."""
        return " ".join(" ".join(self.text).split())

    def data(self) -> Any:
        (body,) = [body for attrs, body in self.scripts if attrs.get("id") == "fxprof-data"]
        return json.loads(body)


def section(page: str, test_id: str, key: str = "call0") -> str:
    """The markup of one profile's section."""
    start = page.rindex("<section", 0, page.index(f'id="{section_id(test_id, key)}"'))
    return page[start : page.index("</section>", start)]


def text_of(markup: str) -> str:
    return Page(markup).words()


# Structure and escaping ---------------------------------------------------------------------------


def test_the_embedded_data_round_trips_and_a_hostile_test_id_stays_text() -> None:
    given = profiles()
    unused = ["tests/baselines/gone.json </script><b>"]
    page = render_html("check", given, unused, title="run </title><b>")
    parsed = Page(page)
    # two scripts (the data and the code), and none of the hostile markup became a tag
    assert [attrs.get("type") for attrs, _ in parsed.scripts] == ["application/json", None]
    assert page.count("</script>") == 2
    assert not [attrs for _, attrs in parsed.tags if attrs.get("class") == "hostile"]
    assert "<!--" not in page
    assert parsed.data() == {
        "mode": "check",
        "title": "run </title><b>",
        "profiles": display_order(given),
        "unused_baselines": unused,
    }
    text = parsed.words()
    assert HOSTILE in text
    assert unused[0] in text
    (title,) = re.findall(r"<title>(.*?)</title>", page)
    assert title == "run &lt;/title&gt;&lt;b&gt;"


def display_order(given: list[ProfileReportJSON]) -> list[ProfileReportJSON]:
    """Regressions first, then test order (the statuses of ``profiles()`` are regressions, passes and records)."""
    assert {p["status"] for p in given} <= {"regression", "pass", "recorded"}
    return sorted(given, key=lambda p: (p["status"] != "regression", p["test_id"], p["key"]))


def test_regressions_come_first_then_test_id_order_each_in_its_own_section() -> None:
    given = profiles()
    page = render_html("check", given, [])
    sections = [attrs for tag, attrs in Page(page).tags if tag == "section" and "data-index" in attrs]
    expected = display_order(given)
    assert expected[0]["status"] == "regression"
    assert expected != sorted(given, key=lambda p: (p["test_id"], p["key"]))  # the order is not the id order
    assert [s["id"] for s in sections] == [section_id(p["test_id"], p["key"]) for p in expected]
    assert [s["data-index"] for s in sections] == ["0", "1", "2"]
    assert len({s["id"] for s in sections}) == 3


def test_section_ids_differ_where_test_ids_differ_only_in_punctuation() -> None:
    ids = {section_id(t, k) for t, k in [("a b", "c"), ("a-b", "c"), ("a", "b c"), ("a b", "c ")]}
    assert len(ids) == 4
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in ids)


def test_a_changed_number_of_graphs_is_shown() -> None:
    regression, *_ = profiles()
    regression["graphs"] = {"baseline": 3, "current": 2}
    page = render_html("check", [regression], [])
    assert "captured graphs: 3 -&gt; 2 (1 graph break(s) fewer) since the baseline" in text_of(page).replace(
        "->", "-&gt;"
    )


DETAIL = "torch.compile (Inductor): 12 kernel calls in 6 graph calls (5 graph breaks), compiled in 1.8 s"


def test_a_compiled_models_kernels_graph_breaks_and_compile_time_are_shown() -> None:
    regression, *_ = profiles()
    regression["capture"] = {**regression["capture"], "method": "inductor", "graphs": 6, "detail": DETAIL}
    assert DETAIL in text_of(render_html("check", [regression], []))


def test_the_page_loads_nothing_from_the_network() -> None:
    regression, *_ = profiles()
    # a URL in a node nobody flags: it may be in the data, and nowhere else
    regression["nodes"][1]["source"] = "https://example.invalid/models/net.py:20"
    page = render_html("check", [regression], [])
    data_start = page.index('<script type="application/json" id="fxprof-data">')
    outside = page[:data_start] + page[page.index("</script>", data_start) :]
    assert "https://example.invalid" in page[data_start:]
    assert not re.search(r"https?://", outside)
    assert "@import" not in outside
    assert "url(" not in outside
    tags = Page(page).tags
    assert not [attrs for _, attrs in tags if "src" in attrs]
    assert all(str(attrs["href"]).startswith("#") for _, attrs in tags if "href" in attrs)
    assert not [tag for tag, _ in tags if tag in ("link", "iframe", "img", "object", "embed")]


# Content ------------------------------------------------------------------------------------------


def test_a_regression_names_its_flagged_node_and_module() -> None:
    regression, passing, _ = profiles()
    assert regression["status"] == "regression"
    flagged = [(f["kind"], f["name"]) for f in regression["flagged"]]
    assert flagged == [("node", "conv12"), ("module", "layer12"), ("module", "layer3")]
    page = render_html("check", profiles(), [])
    text = text_of(section(page, regression["test_id"]))
    # where the time went leads, above what failed the test
    where = text[text.index("Where") : text.index("Failed by")]
    assert "node conv12 (Conv2d in layer12.conv): " in where
    assert "in: layer12 x" in where
    failed = text[text.index("Failed by") : text.index("Warnings")]
    assert "node conv12 (Conv2d in layer12.conv, models/net.py:32) x1.60 x1.60 beyond band" in failed
    assert "module layer12 x" in failed
    # a module names the nodes that led it
    assert "module layer3 x" in failed
    assert "most of it: conv3 211.0 us → 337.6 us" in failed
    # conv3 alone is too small to fail the test: a warning
    warned = text[text.index("Warnings") : text.index("Faster than")]
    assert "node conv3 (Conv2d in layer3.conv, models/net.py:23) x1.60" in warned
    assert 'class="fxprof-profile t-bad"' in page
    assert "Failed by" not in text_of(section(page, passing["test_id"]))


def test_a_faster_node_is_listed_apart_from_the_failures() -> None:
    regression = profiles()[0]
    rows = {n["name"]: n for n in regression["nodes"]}
    assert rows["conv10"]["verdict"] == "faster"
    text = text_of(section(render_html("check", [regression], []), regression["test_id"]))
    faster = text[text.index("Faster than the baseline") : text.index("Total")]
    assert "node conv10" in faster
    assert "conv3" not in faster
    rows["conv10"]["gates"] = False  # as a node too small to fail alone: the gate does not report it faster
    text = text_of(section(render_html("check", [regression], []), regression["test_id"]))
    assert "node conv10" not in text[: text.index("Total")]


def test_the_total_shows_baseline_ratio_and_band_only_when_compared() -> None:
    compared, _, uncompared = profiles()
    page = render_html("update", [compared, uncompared], [])
    total = compared["total"]
    shown = text_of(section(page, compared["test_id"]))
    assert f"baseline {total['baseline_ns'] / 1e6:.2f} ms" in shown
    assert f"ratio x{total['ratio']:.2f}" in shown
    assert f"band +{total['band']:.0%} ({total['band_source']})" in shown
    assert "tolerated range" in shown
    bare = text_of(section(page, uncompared["test_id"]))
    assert f"current {uncompared['total']['current_ns'] / 1e6:.2f} ms" in bare
    for absent in ("baseline", "ratio", "band", "tolerated range", "Failed by"):
        assert absent not in bare
    assert "Nodes, slowest first" in bare


def test_the_header_counts_statuses_and_shows_the_first_environment() -> None:
    page = render_html("check", profiles(), [])
    header = text_of(page[: page.index("</header>")])
    assert "Check against baselines · 3 profiles" in header
    assert "1 regression 1 pass 1 recorded" in header
    assert f"cpu {ENV.cpu}" in header
    assert f"torch {ENV.torch}" in header


def test_hints_show_their_message_and_time_at_stake() -> None:
    regression = profiles()[0]
    text = text_of(section(render_html("check", [regression], []), regression["test_id"]))
    assert f"fusable-batchnorm {HINT['message']}" in text
    assert "28.5 us at stake (0.4% of the model); nodes: bn0, bn1, bn2" in text


def test_the_module_tree_shows_each_module_beside_its_verdict() -> None:
    regression = profiles()[0]
    layer3 = next(a for a in regression["aggregates"] if a["kind"] == "module" and a["name"] == "layer3")
    assert layer3["verdict"] == "slower"
    markup = section(render_html("check", [regression], []), regression["test_id"])
    tree = markup[markup.index('class="mtree"') : markup.index("Operator types")]
    # each row: its module's name, then its figures and the module's verdict
    rows = re.findall(r'class="mname"[^>]*>(.*?)</span>(<span class="num">.*?)</(?:summary|div)>', tree)
    by_name = {html.unescape(re.sub(r"<[^>]*>", "", name)): text_of(rest) for name, rest in rows}
    assert by_name["layer3"].split(" ")[-4:] == ["slower", f"x{layer3['ratio']:.2f}", "band", "+10%"]
    assert by_name["layer2"].split(" ")[-4:-2] == ["ok", "x1.00"]
    assert by_name["layer3.conv"].split(" ")[:3] == ["1", "337.6", "us"]  # nodes, time; a module not judged
    assert by_name["layer3.conv"].split(" ")[3:] == ["5.1%", "23.7"]  # share, GFLOP/s; and no verdict
    # every module of the roll-up is in the tree, the model first and open
    assert set(by_name) == {r["name"] for r in regression["rollups"]["module"]}
    assert next(iter(by_name)) == "<model>"
    assert tree.index("&lt;model&gt;") < tree.index("layer3")
    assert '<details class="mnode" open><summary class="mrow"><span class="mname" style="padding-left:0.0em">' in tree


def test_unused_baselines_are_listed_at_the_end_and_absent_when_none() -> None:
    page = render_html("check", profiles()[:1], ["tests/baselines/old.json (no such test)"])
    assert page.index("Unused baselines") > page.index('class="fxprof-profile')
    assert "tests/baselines/old.json (no such test)" in text_of(page[page.index("Unused baselines") :])
    assert "Unused baselines" not in render_html("check", profiles()[:1], [])


def test_a_run_without_profiles_says_so() -> None:
    page = render_html("check", [], [])
    assert "No test was profiled in this run." in text_of(page)
    assert Page(page).data()["profiles"] == []


# Bad input and writing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param(lambda p: p.pop("test_id"), "test_id", id="no-test-id"),
        pytest.param(lambda p: p.update(nodes={}), "nodes", id="nodes-not-a-list"),
        pytest.param(lambda p: p.update(total=None), "total", id="no-total"),
    ],
)
def test_a_profile_that_is_not_a_report_is_refused_by_name(change: Any, field: str) -> None:
    bad = profiles()
    change(bad[1])
    with pytest.raises(ValueError, match=rf"profile 1 .* valid '{field}' field: pass the dicts that report"):
        render_html("check", bad, [])


def test_a_field_of_the_wrong_shape_is_refused_naming_the_profile() -> None:
    bad: list[Any] = profiles()
    bad[0]["flagged"] = [{"kind": "node", "name": "conv12", "ratio": "big"}]
    with pytest.raises(ValueError, match=r"profile of tests/test_models.py::test_resnet \[call0\] .* wrong shape"):
        render_html("check", bad, [])


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda n: n.pop("key"), id="no-key"),
        pytest.param(lambda n: n.update(current_ns="1 ms"), id="time-not-a-number"),
    ],
)
def test_a_node_without_key_or_time_is_refused_by_position(change: Any) -> None:
    bad = profiles()
    change(bad[2]["nodes"][7])
    with pytest.raises(ValueError, match=r"node 7 of profile 2 .* no valid 'key' and 'current_ns'"):
        render_html("check", bad, [])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1, 2}], ids=["nan", "infinity", "set"])
def test_a_value_json_cannot_hold_is_refused(value: object) -> None:
    bad: list[Any] = profiles()
    bad[0]["total"]["ratio"] = value
    with pytest.raises(ValueError, match="a value JSON cannot store"):
        render_html("check", bad, [])


def test_write_html_replaces_the_page_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "out" / "report.html"
    write_html(path, "check", profiles(), [])
    first = path.read_text(encoding="utf-8")
    assert [p["test_id"] for p in Page(first).data()["profiles"]] == [p["test_id"] for p in display_order(profiles())]
    assert f"<title>{TITLE}</title>" in first
    write_html(path, "update", profiles()[2:], [], title="second")
    assert Page(path.read_text(encoding="utf-8")).data()["mode"] == "update"
    bad: list[Any] = profiles()
    del bad[0]["nodes"]
    with pytest.raises(ValueError, match="'nodes'"):
        write_html(path, "check", bad, [])
    assert "<title>second</title>" in path.read_text(encoding="utf-8")  # the last good page, untouched
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]


def test_a_profile_from_another_environment_shows_no_comparison_figures() -> None:
    baseline = result(2).entry(TOLERANCES)
    current = replace(result(2), environment=replace(result(2).environment, torch="9.9"))
    c = compare(baseline, current.entry(TOLERANCES), POLICY)
    profile = profile_report("t.py::test_other", "call0", c.status.value, current, c)
    assert profile["speed_factor"] == 1.0  # the comparison's default, not a measured factor
    text = text_of(section(render_html("check", [profile], []), "t.py::test_other"))
    assert "torch: baseline" in text
    assert "speed factor" not in text
    assert "measurements" not in text


def test_module_share_bars_are_proportional_to_the_share() -> None:
    page = render_html("check", [recorded("t.py::test_bars", 4)], [])
    widths = {float(w) for w in re.findall(r'class="bar" style="width:([\d.]+)em"', section(page, "t.py::test_bars"))}
    rollups = recorded("t.py::test_bars", 4)["rollups"]["module"]
    assert max(widths) == SHARE_BAR_EM  # the whole model
    assert widths == {round(min(r["share"], 1.0) * SHARE_BAR_EM, 2) for r in rollups}


def test_an_undecided_profile_comes_right_after_the_regressions_and_says_why() -> None:
    given = profiles()
    judged = next(p for p in given if p["status"] == "pass")
    undecided: ProfileReportJSON = {
        **judged,
        "test_id": "a.py::test_open",
        "status": "undecided",
        "noisy": "node fc: x1.22",
    }
    page = render_html("check", [*given, undecided], [])
    sections = [attrs["id"] for tag, attrs in Page(page).tags if tag == "section" and "data-index" in attrs]
    regressions = sum(p["status"] == "regression" for p in given)
    assert sections[regressions] == section_id("a.py::test_open", "call0")
    assert "Undecided: these items that gate were too noisy to decide" in section(page, "a.py::test_open")
    badges = text_of(page[: page.index("<section")])
    assert badges.index("1 undecided") < badges.index(" pass")


def test_a_check_against_a_revision_speaks_of_the_revision_not_a_baseline() -> None:
    regression, *_ = profiles()
    regression["graphs"] = {"baseline": 3, "current": 2}
    regression["added"] = [{"name": "mul", "target": "aten.mul.Tensor", "module": "attn"}]  # type: ignore[typeddict-item]
    regression["against"] = "origin/main (1a2b3c4)"
    text = text_of(render_html("against", [regression], [])).replace("->", "-&gt;")
    assert "(1 graph break(s) fewer) compared with origin/main (1a2b3c4)" in text
    assert "1 node(s) added compared with origin/main (1a2b3c4)" in text
    assert "since the baseline" not in text


def test_what_failed_is_named_by_its_kind_a_class_as_a_class() -> None:
    regression, *_ = profiles()
    regression["flagged"] = [
        {"kind": "class", "name": "LayerNorm", "module": "", "ratio": 1.3},
        {"kind": "pattern", "name": "h.*.mlp", "module": "h.*.mlp", "ratio": 1.2},
    ]
    text = text_of(render_html("check", [regression], []))
    assert "class LayerNorm x1.30" in text
    assert "pattern h.*.mlp x1.20" in text
    assert "module LayerNorm" not in text
