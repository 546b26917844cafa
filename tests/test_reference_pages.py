"""The reference pages of the JSON report, the baseline file and the ``fxprof`` command are held to the code.

The formats' fields are read from their ``TypedDict``s (``views.report.ReportJSON``, ``store.baseline.FileJSON``),
walked through nested ``TypedDict``s, lists, dicts' values and unions, required and optional keys alike; the keys of
the dict-valued fields no ``TypedDict`` names (``environment``, ``capture``, ``protocol``, ``setup``, ``time``,
``rollups``, ``tolerances``) from the functions that write them. The command's subcommands, positional arguments,
options and choices are read from the parser ``cli.parser()`` builds.

A page names a field in backticks (`` `field` ``, `` `parent.field` `` or `` `{a, b}` ``): where it lists a
``TypedDict``'s fields as the rows of the tables of a section (the report's run and profile), in the first cell of
a row there; where it is organised by nothing finer than the page (the baseline file's top level and entry),
anywhere; any other field in a table row, list item or paragraph that names the field holding it (a node's fields
where ``nodes`` is named). It names a subcommand in the heading of its own section (`` ## `fxprof show BASELINE` ``,
with the positional arguments), and each option, in backticks, in that section (with its choices, if it has any).

The converse fails too, where the page's structure says what it documents: a table row of such a section, the
fields that open an item of the baseline page's field list, a `` `parent.field` ``, a key of the baseline page's
example, a command's heading, a long option (``--name``) or a choice in a command's section, a subcommand or long
option on an ``fxprof`` command line of the page, that the code no longer has. What prose names in passing is not
held to the code: it also names the plugin's pytest options, pytest's own (``-k``), and words in backticks that
are no field.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Collection, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, get_args, get_origin, get_type_hints, is_typeddict

from pytest_fxprof.cli import parser as cli_parser
from pytest_fxprof.measure.serving import Spent
from pytest_fxprof.options import all_options
from pytest_fxprof.records.measurement import BaselineEntry, Capture, Environment, Protocol, Setup, Tolerances
from pytest_fxprof.records.profile import ROLLUPS
from pytest_fxprof.store.baseline import EntryJSON, FileJSON, entry_to_json
from pytest_fxprof.store.schema import RunJSON, capture_to_json
from pytest_fxprof.views.judged_json import NodeJSON
from pytest_fxprof.views.report import ProfileReportJSON, ReportJSON

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"

FENCE = re.compile(r"^\s*(```|~~~)")
CODE = re.compile(r"`([^`]+)`")
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
CELL = re.compile(r"(?<!\\)\|")
LEADING_CODE = re.compile(r"^- ((?:`[^`]+`(?:,? and |, | or )?)+)")
"""The code spans an item opens with (``- `environment` and `protocol`: ...``): the fields it documents."""
ARGUMENT = re.compile(r"^[A-Z][A-Z0-9_]*$")
WORDS = re.compile(r"[\s|\\]+")
"""What separates the option and its choices in a code span (``--sort time\\|graph``, a table's escaped bar)."""


# Reading a page ------------------------------------------------------------------------------------------


def span_names(span: str) -> set[str]:
    """The field names a code span holds: a name, every part of a dotted path (and the path), every name of a
    braced list (``{date, environment}``); none in anything else (a value, a command, a sentence)."""
    span = span.strip()
    if span.startswith("{") and span.endswith("}"):
        return {name for part in span[1:-1].split(",") for name in span_names(part)}
    if NAME.fullmatch(span):
        return {span, *span.split(".")}
    return set()


@dataclass(frozen=True)
class Block:
    """A piece of a page outside fenced code: a heading, a table row, a list item (with its continuation lines) or
    a paragraph, and the heading of the section it is in (the heading line, ``#``s included)."""

    section: str
    kind: Literal["heading", "row", "item", "paragraph"]
    text: str

    @property
    def spans(self) -> list[str]:
        return CODE.findall(self.text)

    @property
    def names(self) -> set[str]:
        """Every field name its code spans hold."""
        return {name for span in self.spans for name in span_names(span)}

    @property
    def keys(self) -> set[str]:
        """What it documents by its structure: a row, the names of its first cell; an item, those of the code spans
        it opens with; a heading or paragraph, none."""
        if self.kind == "row":
            cells = CELL.split(self.text.strip())
            return {name for span in CODE.findall(cells[1]) for name in span_names(span)} if len(cells) > 2 else set()
        if self.kind == "item":
            lead = LEADING_CODE.match(self.text)
            return {name for span in CODE.findall(lead[1]) for name in span_names(span)} if lead else set()
        return set()

    def documents(self, name: str) -> bool:
        """Whether it documents the field ``name`` and what the field holds: a row, item or paragraph that names it
        (a row of a table of a ``TypedDict``'s fields may name a nested field's fields after it)."""
        return self.kind != "heading" and name in self.names


def read_blocks(text: str) -> list[Block]:
    """The blocks of a page, in order, outside fenced code blocks."""
    out: list[Block] = []
    section = ""
    lines: list[str] = []
    kind: Literal["item", "paragraph"] = "paragraph"

    def flush() -> None:
        if lines:
            out.append(Block(section, kind, " ".join(line.strip() for line in lines)))
            lines.clear()

    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        stripped = line.strip()
        if not stripped:
            flush()
        elif line.startswith("#"):
            flush()
            section = stripped
            out.append(Block(section, "heading", stripped))
        elif stripped.startswith("|"):
            flush()
            out.append(Block(section, "row", stripped))
        elif line.startswith("- "):
            flush()
            kind = "item"
            lines.append(line)
        else:
            if not lines:
                kind = "paragraph"
            lines.append(line)
    flush()
    return out


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """The fenced code blocks of a page: each one's info string (``json``) and lines."""
    out: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if FENCE.match(line):
            if current is None:
                current = []
                out.append((line.strip().strip("`~").strip(), current))
            else:
                current = None
        elif current is not None:
            current.append(line)
    return out


def shown(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)


# Reading a format's TypedDicts ---------------------------------------------------------------------------


def held(annotation: Any) -> Iterator[type]:
    """The ``TypedDict``s an annotation holds: itself, or those inside its lists, dicts' values and unions."""
    if isinstance(annotation, type) and is_typeddict(annotation):
        yield annotation
        return
    args = get_args(annotation)
    if get_origin(annotation) is dict:
        args = args[1:]
    for arg in args:
        yield from held(arg)


def fields_of(typed_dict: type) -> dict[str, Any]:
    """A ``TypedDict``'s keys, required and optional, its bases' included, and their types."""
    # each annotation is resolved in the module that wrote it (an empty localns keeps get_type_hints from looking
    # in the subclass's module first, where a name may stand for another TypedDict)
    hints = get_type_hints(typed_dict, localns={})
    keys = typed_dict.__required_keys__ | typed_dict.__optional_keys__  # type: ignore[attr-defined]
    assert set(hints) == keys, f"{typed_dict.__name__}: annotations and keys differ"
    return hints


def reached(root: type) -> list[tuple[tuple[str, ...], type]]:
    """Every ``TypedDict`` a format holds, from its ``root``, each with the path of the field that holds it
    (``()`` for the root, ``("profiles", "nodes")`` for a profile's nodes), in the order of its fields."""
    out: list[tuple[tuple[str, ...], type]] = []

    def visit(path: tuple[str, ...], typed_dict: type, seen: frozenset[type]) -> None:
        out.append((path, typed_dict))
        for name, annotation in fields_of(typed_dict).items():
            for inner in held(annotation):
                if inner not in seen:
                    visit((*path, name), inner, seen | {inner})

    visit((), root, frozenset({root}))
    return out


def dotted(path: tuple[str, ...]) -> str:
    return ".".join(path) or "the top level"


# Checking a format's page --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormatPage:
    """A page that documents a JSON format whose shape ``root`` holds."""

    path: Path
    root: type
    tables: Mapping[tuple[str, ...], str] = field(default_factory=dict)
    """Where the page lists the fields of a ``TypedDict`` as the rows of the tables of a section: the path of the
    field that holds it -> the section's heading (``## `` and its title)."""
    anywhere: frozenset[tuple[str, ...]] = frozenset()
    """The paths whose ``TypedDict``'s fields the page may name anywhere (it is not organised by them)."""
    lists: tuple[str, ...] = ()
    """The headings of the sections whose list items open with the fields they document."""
    keys: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The keys of dict-valued fields no ``TypedDict`` names, by the field's name, as the code writes them."""


def format_problems(page: FormatPage, text: str) -> list[str]:
    """What ``text``, the page, lacks of ``page.root``'s fields, and what it documents that the format no longer
    holds; each names the page and the field."""
    where = shown(page.path)
    blocks = read_blocks(text)
    everywhere = {name for b in blocks for name in b.names}
    dicts = reached(page.root)
    out: list[str] = []
    # every field's name -> the fields it holds (a TypedDict's fields, or the keys of a dict the test knows)
    under: dict[str, set[str]] = {}
    # the (parent, field) pairs looked for: a TypedDict held by fields of one name in several places (`added`) is
    # documented once, where that name is
    done: set[tuple[str, str]] = set()
    for path, typed_dict in dicts:
        names = list(fields_of(typed_dict))
        label = typed_dict.__name__
        if path:
            under.setdefault(path[-1], set()).update(names)
        for name in names:
            under.setdefault(name, set())
        if path in page.tables:
            heading = page.tables[path]
            rows = {key for b in blocks if b.section == heading and b.kind == "row" for key in b.keys}
            out += [
                f"{where}: `{name}` ({label}, at {dotted((*path, name))}) is missing: add a row for it to the "
                f"table under '{heading}'"
                for name in names
                if name not in rows
            ]
            out += [
                f"{where}: the table under '{heading}' lists `{name}`, which {label} no longer holds: remove it "
                "or rename it"
                for name in sorted(rows - set(names))
            ]
        elif path in page.anywhere:
            out += [
                f"{where}: `{name}` ({label}, at {dotted((*path, name))}) is named nowhere in the page: add it, "
                "in backticks"
                for name in names
                if name not in everywhere
            ]
        else:
            fresh = [name for name in names if (path[-1], name) not in done]
            done.update((path[-1], name) for name in fresh)
            out += missing_where_documented(where, blocks, path, fresh, label)
    for name, keys in page.keys.items():
        if name not in under:
            out.append(f"{where}: the test knows the keys of `{name}`, which {page.root.__name__} no longer holds")
            continue
        under[name].update(keys)
        out += missing_where_documented(where, blocks, (name,), sorted(keys), f"keys of {name}")
    for heading in page.lists:
        documented = {key for b in blocks if b.section == heading and b.kind == "item" for key in b.keys}
        out += [
            f"{where}: the list under '{heading}' documents `{name}`, which {page.root.__name__} no longer holds: "
            "remove it or rename it"
            for name in sorted(documented - set(under))
        ]
    for span in sorted({span.strip() for b in blocks for span in b.spans}):
        parts = span.split(".")
        if NAME.fullmatch(span) and len(parts) > 1 and under.get(parts[0]) and parts[1] not in under[parts[0]]:
            out.append(f"{where}: `{span}` names no field of `{parts[0]}`: fix it or remove it")
    for info, lines in fenced_blocks(text):
        if info == "json":
            example = json.loads("\n".join(lines))
            out += [
                f"{where}: the example's `{key}` is no field of {page.root.__name__}: fix it or remove it"
                for key in unknown_keys(example, page.root, (), page.keys)
            ]
    return out


def missing_where_documented(
    where: str, blocks: list[Block], path: tuple[str, ...], names: Collection[str], label: str
) -> list[str]:
    """The ``names`` held by the field at ``path`` that no block documenting that field names."""
    parent = path[-1]
    found = {name for b in blocks if b.documents(parent) for name in b.names}
    return [
        f"{where}: `{name}` ({label}, at {dotted((*path, name))}) is missing: name it, in backticks, where the page "
        f"documents `{parent}` (a table row, list item or paragraph that names it)"
        for name in names
        if name not in found
    ]


def unknown_keys(
    value: object, annotation: Any, path: tuple[str, ...], keys: Mapping[str, Collection[str]]
) -> list[str]:
    """The keys of ``value``, an example of ``annotation``, that its ``TypedDict``s (or ``keys``, for dicts the
    test knows the keys of) do not hold, as dotted paths."""
    if isinstance(annotation, type) and is_typeddict(annotation):
        if not isinstance(value, dict):
            return []
        hints = fields_of(annotation)
        out: list[str] = []
        for key, inner in value.items():
            if key not in hints:
                out.append(dotted((*path, key)))
            elif key in keys and isinstance(inner, dict):
                out += [dotted((*path, key, k)) for k in inner if k not in keys[key]]
            else:
                out += unknown_keys(inner, hints[key], (*path, key), keys)
        return out
    args = [a for a in get_args(annotation) if a is not type(None)]
    origin = get_origin(annotation)
    if origin is list and isinstance(value, list):
        return [key for item in value for key in unknown_keys(item, args[0], path, keys)]
    if origin is dict and isinstance(value, dict):
        return [key for k, item in value.items() for key in unknown_keys(item, args[1], (*path, k), keys)]
    if len(args) == 1 and origin not in (list, dict):  # X | None
        return unknown_keys(value, args[0], path, keys)
    return []


# Checking the command's page -----------------------------------------------------------------------------


def subcommands(top: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands, by name."""
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser, *, help_too: bool = False) -> list[str]:
    """Every option string of a parser (``--help`` and ``-h`` only with ``help_too``)."""
    return [
        option
        for action in parser._actions
        if help_too or not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    ]


def positionals(parser: argparse.ArgumentParser) -> list[str]:
    """How the usage names a parser's positional arguments (their metavars)."""
    return [
        action.metavar if isinstance(action.metavar, str) else action.dest.upper()
        for action in parser._actions
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction)
    ]


def choice_problems(where: str, section: str, spans: list[str], command: argparse.ArgumentParser) -> list[str]:
    """The choices of ``command``'s options that the section's spans of the option (``--sort time\\|graph``) lack,
    and the words after such an option that are no choice of it."""
    out: list[str] = []
    for action in command._actions:
        if not action.option_strings or not action.choices:
            continue
        choices = [str(c) for c in action.choices]
        option = action.option_strings[0]
        ours = [span for span in spans if span.split()[:1] and span.split()[0] in action.option_strings]
        words = {word for span in ours for word in WORDS.split(span)[1:] if word}
        out += [
            f"{where}: the choice `{choice}` of `{option}` is missing: name it in the option's code span in the "
            f"section '{section}'"
            for choice in choices
            if choice not in words
        ]
        out += [
            f"{where}: the section '{section}' names `{word}` as a choice of `{option}`, which it no longer has: "
            "remove it"
            for word in sorted(words - set(choices))
        ]
    return out


def command_line_problems(where: str, tokens: list[str], commands: Mapping[str, argparse.ArgumentParser]) -> list[str]:
    """What an ``fxprof`` command line of the page (``tokens``) names that the parser does not have: a subcommand,
    or a long option of it (before a bare ``--``, which passes the rest on to pytest)."""
    if len(tokens) < 2 or tokens[0] != "fxprof" or ARGUMENT.match(tokens[1]):
        return []
    line = " ".join(tokens)
    if tokens[1] not in commands:
        return [f"{where}: `{line}` runs `fxprof {tokens[1]}`, which the parser no longer has: fix it or remove it"]
    known = options(commands[tokens[1]], help_too=True)
    out = []
    for token in tokens[2:]:
        if token == "--":
            break
        if token.startswith("--") and token.split("=")[0] not in known:
            out.append(f"{where}: `{line}` passes `{token}`, which is no option of `fxprof {tokens[1]}`: fix it")
    return out


def cli_problems(
    page: Path, text: str, top: argparse.ArgumentParser, plugin_options: Collection[str] = frozenset()
) -> list[str]:
    """What ``text``, the command's page, lacks of ``top``'s subcommands, positional arguments and options, and
    what it documents that the parser no longer has; each names the page and the command or option.
    ``plugin_options``: the plugin's pytest options, which a command's section may name too."""
    where = shown(page)
    blocks = read_blocks(text)
    commands = subcommands(top)
    out: list[str] = []
    intro = [b for b in blocks if not b.section.startswith("## ")]
    named = {span.split()[0] for b in intro for span in b.spans if span.split()}
    out += [
        f"{where}: the option `{option}` of `fxprof` is missing: name it, in backticks, before the first section"
        for option in options(top)
        if option not in named
    ]
    sections: dict[str, str] = {}
    for b in blocks:
        spans = b.spans
        tokens = spans[0].split() if spans else []
        if b.kind != "heading" or not b.text.startswith("## ") or tokens[:1] != ["fxprof"] or len(tokens) < 2:
            continue
        name = tokens[1]
        if name not in commands:
            out.append(f"{where}: '{b.text}' documents `fxprof {name}`, which the parser no longer has: remove it")
            continue
        sections[name] = b.text
        arguments = [a.strip("[].") for a in tokens[2:]]
        documented = [a for a in arguments if ARGUMENT.match(a)]
        expected = positionals(commands[name])
        out += [
            f"{where}: '{b.text}' lacks `{a}`, a positional argument of `fxprof {name}`: add it to the heading"
            for a in expected
            if a not in documented
        ]
        out += [
            f"{where}: '{b.text}' names `{a}`, which is no positional argument of `fxprof {name}`: remove it"
            for a in documented
            if a not in expected
        ]
    for name, command in commands.items():
        if name not in sections:
            out.append(f"{where}: `fxprof {name}` has no section: add one headed '## `fxprof {name} ...`'")
            continue
        spans = [span for b in blocks if b.section == sections[name] and b.kind != "heading" for span in b.spans]
        firsts = {span.split()[0] for span in spans if span.split()}
        out += [
            f"{where}: the option `{option}` of `fxprof {name}` is missing: name it, in backticks, in the section "
            f"'{sections[name]}'"
            for option in options(command)
            if option not in firsts
        ]
        out += choice_problems(where, sections[name], spans, command)
        known = {*options(command, help_too=True), *plugin_options}
        out += [
            f"{where}: the section '{sections[name]}' names `{first}`, which is no option of `fxprof {name}` (nor "
            "of the plugin): remove it or rename it"
            for first in sorted(firsts)
            if first.startswith("--") and first != "--" and first not in known
        ]
    for b in blocks:
        for span in b.spans if b.kind != "heading" else []:
            out += command_line_problems(where, span.split(), commands)
    for _, lines in fenced_blocks(text):
        for line in lines:
            out += command_line_problems(where, shlex.split(line, comments=True), commands)
    return out


# The pages -----------------------------------------------------------------------------------------------


def report_keys() -> dict[str, frozenset[str]]:
    """The keys of a profile's dict-valued fields, as ``views.report.profile_report`` and ``write_report`` write
    them (``asdict`` of the environment, protocol and setup, ``capture_to_json``, ``Spent.to_json``, the roll-ups
    by ``ROLLUPS``); a capture with every optional key."""
    environment = Environment("2.4.0", "3.11.7", "Linux", "x86_64", 1, "cpu", "glibc")
    capture = Capture("symbolic_trace", ("a",), classes=(("a", "A"),), opaque=("a",))
    return {
        "environment": frozenset(asdict(environment)),
        "capture": frozenset(capture_to_json(capture)),
        "protocol": frozenset(asdict(Protocol(warmup=1, passes=2, threads=1, processes=1))),
        "setup": frozenset(asdict(Setup(inputs=(), mode="eval"))),
        "time": frozenset(Spent().to_json()),
        "rollups": frozenset(ROLLUPS),
    }


def baseline_keys() -> dict[str, frozenset[str]]:
    """The keys of an entry's dict-valued fields, as ``store.baseline.entry_to_json`` writes them (a capture with
    every optional key)."""
    entry = entry_to_json(
        BaselineEntry(
            capture=Capture("symbolic_trace", ("a",), classes=(("a", "A"),), opaque=("a",)),
            environment=Environment("2.4.0", "3.11.7", "Linux", "x86_64", 1, "cpu", "glibc"),
            protocol=Protocol(warmup=1, passes=2, threads=1, processes=1),
            tolerances=Tolerances(node=0.15, total=0.1),
            nodes=(),
            runs=(),
        )
    )
    return {
        "capture": frozenset(entry["capture"]),
        "environment": frozenset(entry["environment"]),
        "protocol": frozenset(entry["protocol"]),
        "tolerances": frozenset(entry["tolerances"]),
    }


def report_page(root: type = ReportJSON) -> FormatPage:
    return FormatPage(
        path=REFERENCE / "json-report.md",
        root=root,
        tables={(): "## The run", ("profiles",): "## A profile"},
        keys=report_keys(),
    )


def baseline_page(root: type = FileJSON) -> FormatPage:
    return FormatPage(
        path=REFERENCE / "baseline-format.md",
        root=root,
        anywhere=frozenset({(), ("entries",)}),
        lists=("## Fields",),
        keys=baseline_keys(),
    )


CLI_PAGE = REFERENCE / "cli.md"


def plugin_options() -> frozenset[str]:
    return frozenset(option.flag for option in all_options() if option.cli)


# The checks' own readers, on made-up text ----------------------------------------------------------------


def test_a_code_span_names_a_field_a_dotted_path_or_a_braced_list() -> None:
    assert span_names("total_ns") == {"total_ns"}
    assert span_names("total.current_ns") == {"total", "current_ns", "total.current_ns"}
    assert span_names("{date, environment}") == {"date", "environment"}
    assert span_names("--fxprof-update") == set()
    assert span_names("fxprof show A") == set()
    assert span_names('"default dtype: torch.float64"') == set()


def test_a_page_reads_as_headings_rows_items_and_paragraphs_outside_code() -> None:
    text = (
        "# Title\n\nIntro `a`\nstill intro `b.c`.\n\n## Part\n\n| key | |\n| --- | --- |\n| `x`, `y` | has `z` |\n"
        '- `p` and `q`: with `r`,\n  going on `s`\n- A `t`\n\n```json\n{"inside": 1}\n```\n'
    )
    blocks = read_blocks(text)
    assert [(b.section, b.kind) for b in blocks] == [
        ("# Title", "heading"),
        ("# Title", "paragraph"),
        ("## Part", "heading"),
        ("## Part", "row"),
        ("## Part", "row"),
        ("## Part", "row"),
        ("## Part", "item"),
        ("## Part", "item"),
    ]
    assert blocks[1].names == {"a", "b", "c", "b.c"}
    assert blocks[5].keys == {"x", "y"}
    assert blocks[5].names == {"x", "y", "z"}
    assert blocks[6].keys == {"p", "q"}
    assert blocks[6].names == {"p", "q", "r", "s"}
    assert blocks[7].keys == set()
    assert fenced_blocks(text) == [("json", ['{"inside": 1}'])]


class _Leaf(TypedDict):
    a: int
    b: NotRequired[str]


class _Middle(TypedDict, total=False):
    leaves: list[_Leaf]
    by_name: dict[str, _Leaf | None]


class _Top(TypedDict):
    middle: _Middle | None
    count: int


def test_the_walk_reaches_every_typed_dict_through_lists_dicts_and_unions() -> None:
    assert reached(_Top) == [
        ((), _Top),
        (("middle",), _Middle),
        (("middle", "leaves"), _Leaf),
        (("middle", "by_name"), _Leaf),
    ]
    assert list(fields_of(_Leaf)) == ["a", "b"]


def test_a_nested_field_is_looked_for_where_its_parent_is_documented() -> None:
    page = FormatPage(path=ROOT / "made-up.md", root=_Top, tables={(): "## Top"})
    text = (
        "## Top\n\n| key | |\n| --- | --- |\n| `middle` | with `leaves` and `by_name` |\n| `count` | how many |\n\n"
        "## Leaves\n\nEach of `leaves` holds `a` and `b`.\n"
    )
    assert format_problems(page, text) == [
        "made-up.md: `a` (_Leaf, at middle.by_name.a) is missing: name it, in backticks, where the page documents "
        "`by_name` (a table row, list item or paragraph that names it)",
        "made-up.md: `b` (_Leaf, at middle.by_name.b) is missing: name it, in backticks, where the page documents "
        "`by_name` (a table row, list item or paragraph that names it)",
    ]
    fixed = text.replace("Each of `leaves`", "Each of `leaves` and `by_name`")
    assert format_problems(page, fixed) == []
    stale = fixed + "\nAlso `middle.gone`.\n"
    assert format_problems(page, stale.replace("| `count` |", "| `count`, `old` |")) == [
        "made-up.md: the table under '## Top' lists `old`, which _Top no longer holds: remove it or rename it",
        "made-up.md: `middle.gone` names no field of `middle`: fix it or remove it",
    ]


def test_an_example_is_read_against_its_typed_dicts() -> None:
    example = {"middle": {"leaves": [{"a": 1, "c": 2}], "by_name": {"x": {"a": 1, "d": 3}}}, "count": 1, "e": 0}
    assert unknown_keys(example, _Top, (), {}) == ["middle.leaves.c", "middle.by_name.x.d", "e"]


# The pages, held to the code -----------------------------------------------------------------------------


def test_the_json_report_page_names_every_field_of_the_report_and_no_other() -> None:
    page = report_page()
    assert format_problems(page, page.path.read_text(encoding="utf-8")) == []


class _InventedNode(NodeJSON):
    invented_node_field: int


class _InventedProfile(ProfileReportJSON):
    nodes: list[_InventedNode]  # type: ignore[misc]


class _InventedReport(ReportJSON):
    profiles: list[_InventedProfile]  # type: ignore[misc]
    invented_report_field: str


def test_the_json_report_check_fails_on_a_field_the_page_lacks_and_on_a_row_the_report_lacks() -> None:
    page = report_page(_InventedReport)
    text = page.path.read_text(encoding="utf-8")
    problems = format_problems(page, text)
    assert len(problems) == 2
    assert problems[0].startswith("docs/reference/json-report.md: `invented_report_field` (_InventedReport, ")
    assert "under '## The run'" in problems[0]
    assert problems[1].startswith("docs/reference/json-report.md: `invented_node_field` (_InventedNode, at ")
    assert "documents `nodes`" in problems[1]
    stale = text.replace("| `mode` |", "| `mode`, `gone_field` |", 1)
    assert format_problems(report_page(), stale) == [
        "docs/reference/json-report.md: the table under '## The run' lists `gone_field`, which ReportJSON no longer "
        "holds: remove it or rename it"
    ]


def test_the_baseline_page_names_every_field_of_the_file_and_no_other() -> None:
    page = baseline_page()
    assert format_problems(page, page.path.read_text(encoding="utf-8")) == []


class _InventedRun(RunJSON):
    invented_run_field: int


class _InventedEntry(EntryJSON):
    runs: list[_InventedRun]  # type: ignore[misc]


class _InventedFile(FileJSON):
    entries: dict[str, _InventedEntry]  # type: ignore[misc]
    invented_file_field: str


def test_the_baseline_check_fails_on_a_field_the_page_lacks_and_on_one_the_file_lacks() -> None:
    page = baseline_page(_InventedFile)
    text = page.path.read_text(encoding="utf-8")
    problems = format_problems(page, text)
    assert len(problems) == 2
    assert problems[0].startswith("docs/reference/baseline-format.md: `invented_file_field` (_InventedFile, ")
    assert problems[1].startswith("docs/reference/baseline-format.md: `invented_run_field` (_InventedRun, at ")
    assert "documents `runs`" in problems[1]
    stale = text.replace("## Fields\n\n", "## Fields\n\n- `gone_field`: no longer written.\n", 1)
    stale = stale.replace('"schema_version": 1,', '"schema_version": 1, "gone_key": 0,', 1)
    assert format_problems(baseline_page(), stale) == [
        "docs/reference/baseline-format.md: the list under '## Fields' documents `gone_field`, which FileJSON no "
        "longer holds: remove it or rename it",
        "docs/reference/baseline-format.md: the example's `gone_key` is no field of FileJSON: fix it or remove it",
    ]


def test_the_cli_page_names_every_command_argument_and_option_and_no_other() -> None:
    text = CLI_PAGE.read_text(encoding="utf-8")
    assert cli_problems(CLI_PAGE, text, cli_parser(), plugin_options()) == []


def test_the_cli_check_fails_on_a_command_or_option_the_page_lacks_and_on_one_the_parser_lacks() -> None:
    text = CLI_PAGE.read_text(encoding="utf-8")
    top = cli_parser()
    subcommands(top)["show"].add_argument("--invented-flag")
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    sub.add_parser("invented").add_argument("thing", metavar="THING")
    assert cli_problems(CLI_PAGE, text, top, plugin_options()) == [
        "docs/reference/cli.md: the option `--invented-flag` of `fxprof show` is missing: name it, in backticks, in "
        "the section '## `fxprof show BASELINE`'",
        "docs/reference/cli.md: `fxprof invented` has no section: add one headed '## `fxprof invented ...`'",
    ]
    stale = text.replace("| `--key KEY` | only this entry", "| `--gone KEY` | only this entry", 1)
    stale = stale.replace("`--sort time\\|graph`", "`--sort time\\|gone`", 1)
    stale += "\n## `fxprof gone`\n\nRun `fxprof diff A B --gone-too`.\n"
    assert cli_problems(CLI_PAGE, stale, cli_parser(), plugin_options()) == [
        "docs/reference/cli.md: '## `fxprof gone`' documents `fxprof gone`, which the parser no longer has: remove it",
        "docs/reference/cli.md: the option `--key` of `fxprof show` is missing: name it, in backticks, in the section "
        "'## `fxprof show BASELINE`'",
        "docs/reference/cli.md: the choice `graph` of `--sort` is missing: name it in the option's code span in the "
        "section '## `fxprof show BASELINE`'",
        "docs/reference/cli.md: the section '## `fxprof show BASELINE`' names `gone` as a choice of `--sort`, which "
        "it no longer has: remove it",
        "docs/reference/cli.md: the section '## `fxprof show BASELINE`' names `--gone`, which is no option of "
        "`fxprof show` (nor of the plugin): remove it or rename it",
        "docs/reference/cli.md: `fxprof diff A B --gone-too` passes `--gone-too`, which is no option of "
        "`fxprof diff`: fix it",
    ]
