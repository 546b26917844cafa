"""The package's layout holds: each sub-package imports only the layers below it, and every module keeps the
"Must not import ..." contract its docstring (or its package's) states.

The layering is read from the source (every import statement, inside functions and ``TYPE_CHECKING`` blocks
included), so a lower layer cannot reach up even lazily. A contract is checked twice: in the source (the
module names no such import, or none at module level) and by importing the module in a fresh interpreter
(what it pulls in, third-party packages included). The architecture table in docs/architecture.md is checked
against both.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "pytest_fxprof"
SOURCE = ROOT / PACKAGE

MAY_IMPORT: dict[str, frozenset[str]] = {
    "records": frozenset(),
    "store": frozenset({"records"}),
    "judge": frozenset({"records"}),
    "capture": frozenset({"records"}),
    "measure": frozenset({"records", "capture", "store"}),
    "views": frozenset({"records", "judge", "store"}),
    "against": frozenset({"records", "judge", "measure", "store"}),
}
"""The pipeline's layers, bottom up: which sub-packages each may import. Everything at the top (the plugin,
the session, the settings, the result, the API, the command line) may import any of them; no sub-package
imports the top."""

TOP = "the top"
TOP_PACKAGES = frozenset({"cli", "session", "modes"})
"""Sub-packages of the top: the command line, the workflow of a run, and the run's modes as pytest sees them."""

NAME = r"[a-z_]\w*(?:\.\w+)*"
CONTRACT = re.compile(
    rf"Must not import (?P<names>{NAME}(?:, {NAME})*(?: or {NAME})?)(?P<lazy> at module level)?(?=[.,;:( ]|$)"
)


# Reading the source ------------------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package but ``__main__`` ones (importing those runs them)."""
    return {module_name(p): p for p in sorted(SOURCE.rglob("*.py")) if p.name != "__main__.py"}


def layer(module: str) -> str:
    """The sub-package a module of the package belongs to, or ``TOP``."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in MAY_IMPORT else TOP


@dataclass(frozen=True)
class Import:
    module: str
    line: int
    where: str
    """``module`` (runs when the module is imported, class bodies included), ``function`` (runs when the function
    is called) or ``typing`` (under ``if TYPE_CHECKING:``: never runs)."""


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(source: str, name: str) -> list[Import]:
    """Every import in ``source`` (the module ``name``), resolved to full module names, wherever it stands."""
    found: list[Import] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, node.lineno, where) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                package = name.split(".")[: len(name.split(".")) - node.level]
                base = ".".join([*package, *([base] if base else [])])
            found.append(Import(base, node.lineno, where))
            # ``from package import submodule`` imports the submodule
            found.extend(Import(f"{base}.{a.name}", node.lineno, where) for a in node.names)
        elif isinstance(node, ast.If) and _type_checking(node.test):
            for statement in node.body:
                visit(statement, "typing")
            for statement in node.orelse:
                visit(statement, where)
            return
        if where == "module" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            where = "function"
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(source), "module")
    return found


def docstring(path: Path) -> str:
    return " ".join((ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").split())


@dataclass(frozen=True)
class Contract:
    """What a module must not import: ``strict`` nowhere in its code, ``lazy`` not when it is imported."""

    strict: frozenset[str] = frozenset()
    lazy: frozenset[str] = frozenset()

    def __or__(self, other: Contract) -> Contract:
        return Contract(self.strict | other.strict, (self.lazy | other.lazy) - self.strict - other.strict)

    @property
    def names(self) -> frozenset[str]:
        return self.strict | self.lazy


def parse_contract(text: str) -> Contract:
    """The contract a docstring states; every "must not import" in it must be one this reads."""
    said = len(re.findall(r"must not import", text, re.IGNORECASE))
    matches = list(CONTRACT.finditer(text))
    if len(matches) != said:
        raise ValueError(f"a 'must not import' sentence this test cannot read in: {text!r}")
    out = Contract()
    for m in matches:
        names = frozenset(re.split(r", | or ", m["names"]))
        out = out | (Contract(lazy=names) if m["lazy"] else Contract(strict=names))
    return out


def contract_of(module: str) -> Contract:
    """The module's own contract and those of every package above it inside this one."""
    paths = modules()
    out = parse_contract(docstring(paths[module]))
    parts = module.split(".")
    for depth in range(2, len(parts)):
        out = out | parse_contract(docstring(paths[".".join(parts[:depth])]))
    return out


def top_name(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


# The checks themselves, on made-up sources (so that each can be seen to fail) ---------------------------


def test_every_import_is_found_wherever_it_stands() -> None:
    source = """
import os
from typing import TYPE_CHECKING
from pytest_fxprof.records import measurement
if TYPE_CHECKING:
    import torch
def f():
    import pandas as pd
    from .sibling import thing
class C:
    import json
"""
    found = {(i.module, i.where) for i in imports_of(source, "pytest_fxprof.views.frames")}
    assert ("os", "module") in found
    assert ("pytest_fxprof.records.measurement", "module") in found
    assert ("torch", "typing") in found
    assert ("pandas", "function") in found
    assert ("pytest_fxprof.views.sibling", "function") in found
    assert ("json", "module") in found  # a class body runs on import


def test_contracts_are_read_from_every_phrasing_used_and_an_unreadable_one_is_refused() -> None:
    assert parse_contract("Pure. Must not import torch, pytest or pandas.") == Contract(
        strict=frozenset({"torch", "pytest", "pandas"})
    )
    said = parse_contract("Must not import torch. Must not import pytest or pandas at module level: they are slow.")
    assert said == Contract(strict=frozenset({"torch"}), lazy=frozenset({"pytest", "pandas"}))
    assert parse_contract("Must not import pytest (the plugin does); nothing else.").strict == {"pytest"}
    with pytest.raises(ValueError, match="cannot read"):
        parse_contract("It must not import anything heavy.")


def test_layers_are_told_apart() -> None:
    assert layer("pytest_fxprof.judge.decision") == "judge"
    assert layer("pytest_fxprof.judge") == "judge"
    assert layer("pytest_fxprof.plugin") == TOP
    assert layer("pytest_fxprof") == TOP
    assert layer("pytest_fxprof.cli.prune") == TOP


# The package --------------------------------------------------------------------------------------------


def reaching_up(module: str, source: str) -> list[str]:
    """The imports in ``source`` (the module ``module``) of a layer its own may not import."""
    own = layer(module)
    if own == TOP:
        return []
    out = []
    for imp in imports_of(source, module):
        if top_name(imp.module) != PACKAGE or imp.module == PACKAGE:
            continue
        target = layer(imp.module)
        if target != own and target not in MAY_IMPORT[own]:
            out.append(f"{module}:{imp.line}: {own} imports {imp.module} ({target})")
    return out


def test_an_import_that_reaches_up_or_aside_is_found_even_inside_a_function() -> None:
    lazy_view = "def table(self):\n    from pytest_fxprof.views.render import profile_table\n"
    assert reaching_up("pytest_fxprof.records.profile", lazy_view) == [
        "pytest_fxprof.records.profile:2: records imports pytest_fxprof.views.render (views)",
        "pytest_fxprof.records.profile:2: records imports pytest_fxprof.views.render.profile_table (views)",
    ]
    assert reaching_up("pytest_fxprof.views.report", "from pytest_fxprof import measure\n")  # beside it
    assert reaching_up("pytest_fxprof.judge.hints", "from pytest_fxprof.result import ProfileResult\n")  # the top
    assert reaching_up("pytest_fxprof.views.report", "from pytest_fxprof.judge.hints import Hint\n") == []
    assert reaching_up("pytest_fxprof.plugin", "from pytest_fxprof.measure import profiler\n") == []


def test_no_layer_imports_one_above_it_or_beside_it() -> None:
    found = [hit for module, path in modules().items() for hit in reaching_up(module, path.read_text("utf-8"))]
    assert found == []


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Which of the package's modules each module (name -> source) imports, at any level (a function's
    imports too; ``TYPE_CHECKING`` ones never run and are left out), each import read as the deepest module of
    ``sources`` it names (``pytest_fxprof.judge.decision`` for ``from pytest_fxprof.judge.decision import X``)."""
    graph: dict[str, set[str]] = {}
    for name, source in sources.items():
        deps = set()
        for imp in imports_of(source, name):
            target = imp.module
            while target and target not in sources:
                target = target.rpartition(".")[0]
            if imp.where != "typing" and target and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another, directly or round about (strongly connected components of
    more than one module, each sorted; Tarjan's algorithm, walked without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return sorted(out)


def test_circles_are_found_through_lazy_imports_and_round_about_but_not_through_typing_ones() -> None:
    sources = {
        "p": "from p.a import x\n",
        "p.a": "def f():\n    from p.b import y\n",
        "p.b": "import p.c\n",
        "p.c": "from p.a import z\n",  # a -> b -> c -> a
        "p.d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.e import T\n",
        "p.e": "from p.d import U\n",  # d -> e only at type-checking time: no circle
    }
    graph = import_graph(sources)
    assert graph["p.a"] == {"p.b"}
    assert graph["p.d"] == set()
    assert circles(graph) == [["p.a", "p.b", "p.c"]]


def test_no_module_of_the_package_imports_one_that_imports_it_back() -> None:
    sources = {name: path.read_text("utf-8") for name, path in modules().items()}
    assert circles(import_graph(sources)) == []


def test_every_sub_package_is_a_layer_and_states_its_contract() -> None:
    packages = {p.parent.name for p in SOURCE.glob("*/__init__.py")} - TOP_PACKAGES
    assert packages == set(MAY_IMPORT)
    for name in MAY_IMPORT:
        assert parse_contract(docstring(SOURCE / name / "__init__.py")).names, name


def source_breaches(module: str, source: str, contract: Contract) -> list[str]:
    """The imports in ``source`` that break ``contract``."""
    out = []
    for imp in imports_of(source, module):
        name = top_name(imp.module)
        if name in contract.strict and imp.where != "typing":
            out.append(f"{module}:{imp.line} imports {imp.module}")
        elif name in contract.lazy and imp.where == "module":
            out.append(f"{module}:{imp.line} imports {imp.module} at module level")
    return out


CONTRACTED = sorted(m for m in modules() if contract_of(m).names)


def test_every_module_of_the_package_has_a_contract() -> None:
    """Each states one, or its package does: a new module cannot leave the question open."""
    missing = sorted(set(modules()) - set(CONTRACTED))
    assert missing == []


@pytest.mark.parametrize("module", CONTRACTED)
def test_the_source_keeps_the_contract(module: str) -> None:
    assert source_breaches(module, modules()[module].read_text("utf-8"), contract_of(module)) == []


def test_a_breach_of_a_contract_is_found_in_the_source() -> None:
    strict, lazy = Contract(strict=frozenset({"torch"})), Contract(lazy=frozenset({"pandas"}))
    function_level = "def f():\n    import torch.fx\n    import pandas as pd\n"
    assert source_breaches("m", function_level, strict) == ["m:2 imports torch.fx"]
    assert source_breaches("m", function_level, lazy) == []
    assert source_breaches("m", "import pandas\n", lazy) == ["m:1 imports pandas at module level"]
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
    assert source_breaches("m", typing_only, strict) == []


IMPORT_CHECK = """
import importlib, importlib.util, json, os, sys

def start(name, names):
    # a child forked from this process imports the module and says which of names it pulled in
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        if name != "pytest_fxprof":
            # the submodule alone: pytest_fxprof/__init__.py (which loads the plugin, and so pytest) is not run
            spec = importlib.util.find_spec("pytest_fxprof")
            sys.modules["pytest_fxprof"] = importlib.util.module_from_spec(spec)
        try:
            importlib.import_module(name)
            out = sorted(n for n in names if n in sys.modules)
        except BaseException as exc:
            out = [f"import failed: {type(exc).__name__}: {exc}"]
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    return pid, read

def finish(pid, read):
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)

wanted = json.loads(sys.argv[1])
results = [None] * len(wanted)
# the modules that promise not to import torch, from a process without it; then torch (and the parts of it the
# captures use) is loaded once, so that the others are checked for the rest without each loading it again
first = [i for i, w in enumerate(wanted) if "torch" in w[1]]
for phase in (first, [i for i in range(len(wanted)) if i not in first]):
    if phase and "torch" not in wanted[phase[0]][1]:
        import torch._dynamo, torch.export, torch.fx  # noqa: F401
    running = {}
    for i in phase:
        name, names = wanted[i]
        preloaded = sorted(n for n in names if n in sys.modules)
        if preloaded:
            results[i] = [f"loaded before the check: {n}" for n in preloaded]
        else:
            running[i] = start(name, names)
    for i, child in running.items():
        results[i] = finish(*child)
print(json.dumps(results))
"""


def loaded_on_import(wanted: list[tuple[str, frozenset[str]]]) -> list[list[str]]:
    """For each (module, names): which of the names importing the module loads, each in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK, json.dumps([[m, sorted(n)] for m, n in wanted])],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result: list[list[str]] = json.loads(done.stdout.splitlines()[-1])
    return result


KNOWN = [
    ("pytest_fxprof.measure.engine", frozenset({"torch", "pandas"}), ["torch"]),
    ("pytest_fxprof.measure.profiler", frozenset({"pytest"}), []),
    ("pytest_fxprof.judge.decision", frozenset({"torch", "pytest", "pandas"}), []),
    ("pytest_fxprof.plugin", frozenset({"pytest"}), ["pytest"]),
]
"""Modules whose imports are known, to see the check tell what each one loads."""


@pytest.fixture(scope="module")
def loaded() -> dict[tuple[str, frozenset[str]], list[str]]:
    """What importing each contracted module loads of its forbidden names, and the known cases: one run."""
    wanted = [(m, contract_of(m).names) for m in CONTRACTED] + [(m, names) for m, names, _ in KNOWN]
    return dict(zip(wanted, loaded_on_import(wanted), strict=True))


def test_importing_each_module_keeps_the_contract(loaded: dict[tuple[str, frozenset[str]], list[str]]) -> None:
    """A module's own import must not load what it promised not to import (strictly or at module level:
    neither may happen on import)."""
    breaches = {m: loaded[(m, contract_of(m).names)] for m in CONTRACTED}
    assert {m: names for m, names in breaches.items() if names} == {}


def test_the_import_check_sees_what_a_module_loads(loaded: dict[tuple[str, frozenset[str]], list[str]]) -> None:
    assert [loaded[(m, names)] for m, names, _ in KNOWN] == [expected for _, _, expected in KNOWN]


# The architecture page ------------------------------------------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def documented_layers() -> dict[str, tuple[frozenset[str], Contract]]:
    """The rows of the architecture table (docs/architecture.md, its "## Layers" section): sub-package -> (may
    import, must not import)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("\n## Layers\n") + 1 :]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    rows: dict[str, tuple[frozenset[str], Contract]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`(\w+)/`", cells[0]) if len(cells) == 4 else None
        if m is None:
            continue
        may = frozenset(re.findall(r"`(\w+)`", cells[2]))
        rows[m[1]] = (may, table_contract(cells[3]))
    return rows


def table_contract(cell: str) -> Contract:
    """A "must not import" cell: ``torch, pytest``, then ``; at module level: pandas`` for what may be imported
    inside functions only."""
    lazy_mark = "at module level:"
    out = Contract()
    for part in (p.strip() for p in cell.split(";")):
        text = part.removeprefix(lazy_mark)
        found = frozenset(n.strip(" `") for n in re.split(r",| or ", text) if n.strip(" `"))
        out = out | (Contract(lazy=found) if part.startswith(lazy_mark) else Contract(strict=found))
    return out


def test_a_table_cell_reads_as_a_docstring_does() -> None:
    assert table_contract("torch, pytest, pandas") == parse_contract("Must not import torch, pytest or pandas.")
    assert table_contract("torch; at module level: pytest, pandas") == parse_contract(
        "Must not import torch. Must not import pytest or pandas at module level."
    )


def test_the_documented_architecture_table_matches_the_code() -> None:
    rows = documented_layers()
    assert set(rows) == set(MAY_IMPORT)
    for name, (may, contract) in rows.items():
        assert may == MAY_IMPORT[name], name
        assert contract == parse_contract(docstring(SOURCE / name / "__init__.py")), name


TOP_LINES = 400
"""The most lines a module on top may have: the plugin's hooks, the modes, the session and the command line
stay small rooms, each with one job."""
MODULE_LINES = 500
"""The most lines any other module may have: a module past it holds more than one job, and is split at its seam."""


def test_no_module_is_over_its_size() -> None:
    over = {
        name: lines
        for name, path in modules().items()
        if (lines := len(path.read_text("utf-8").splitlines())) > (TOP_LINES if layer(name) == TOP else MODULE_LINES)
    }
    assert over == {}
