"""pytest-benchmark's JSON format (``--fxprof-benchmark-json PATH``), so that ``pytest-benchmark compare`` and
its tables, CSV and histograms work on fxprof's measurements.

Owns the mapping of profiles onto benchmarks: one benchmark per profile (its plain calls,
``total.samples_ns``; fullname ``test_id[key]``, group the test id) and one per node (the node's
``samples_ns``; fullname ``test_id[key]::node_name``, group ``test_id[key]``), every sample a round of one
iteration, in seconds. The format itself is pytest-benchmark's: its ``Metadata`` and ``Stats`` compute the
statistics, its ``pytest_benchmark_generate_json`` assembles the document, its machine and commit
information fill the header, and its JSON encoder writes the file, exactly as its own ``--benchmark-json``
does.

A view of the per-profile reports; decides nothing.

Must not import torch. Must not import pytest at module level: pytest-benchmark's modules import pytest, so
they are imported inside the functions that use them, and importing this module (or the plugin) stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fxprof.store.files import write_atomic

if TYPE_CHECKING:
    from pytest_benchmark.stats import Metadata

    from pytest_fxprof.views.judged_json import NodeJSON, TotalJSON
    from pytest_fxprof.views.report import ProfileReportJSON

NS_PER_S = 1e9
ITERATIONS = 1
"""Each sample is one pass of the model (or one run of a node): a round of one iteration."""
NODE_INFO = ("key", "direction", "forward", "module", "target", "op", "shape", "layout", "source")
PROFILE_INFO = ("passes", "warmup")
ENVIRONMENT_INFO = ("torch", "device", "engine", "clock", "threads")


@dataclass(frozen=True)
class _Benchmark:
    """What ``pytest_benchmark.stats.Metadata`` reads from its fixture: the names and the extra information
    of one benchmark (pytest-benchmark's ``BenchmarkFixture`` wants a running pytest item; this does not)."""

    name: str
    fullname: str
    group: str
    extra_info: dict[str, Any]
    param: str | None = None
    params: dict[str, Any] | None = None
    cprofile_stats: None = None
    has_error: bool = False
    samples_ns: tuple[int, ...] = field(default=(), compare=False)


def _samples(value: object, what: str) -> tuple[int, ...]:
    if isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        return tuple(int(s) for s in value)
    raise ValueError(
        f"fxprof benchmark JSON: {what} has no samples (samples_ns: a non-empty list of whole nanoseconds, "
        f"got {value!r}); write the report with this version of pytest-fxprof"
    )


def _verdict(item: NodeJSON | TotalJSON) -> dict[str, Any]:
    """The decision's verdict and ratio (None when the profile was not compared with a baseline)."""
    return {"verdict": item.get("verdict"), "ratio": item.get("ratio")}


def _profile_benchmarks(profile: ProfileReportJSON) -> list[_Benchmark]:
    test_id, key = str(profile.get("test_id", "")), str(profile.get("key", ""))
    if not test_id or not key:
        raise ValueError(
            "fxprof benchmark JSON: a profile has no test_id or key; pass the profiles of a report that "
            "this version of pytest-fxprof wrote"
        )
    label = f"{test_id}[{key}]"
    total = profile.get("total", {})
    environment, protocol = profile.get("environment", {}), profile.get("protocol", {})
    info = {
        "status": profile.get("status"),
        **_verdict(total),
        **{name: protocol.get(name) for name in PROFILE_INFO},
        **{name: environment.get(name) for name in ENVIRONMENT_INFO},
    }
    disturbance = profile.get("disturbance")
    if isinstance(disturbance, Mapping):  # measured on a busy machine: the figures, and what every view says
        info.update(busy_machine=disturbance.get("line") or None, disturbance=dict(disturbance))
    if profile.get("noisy"):
        info["noisy"] = profile["noisy"]
    if profile.get("against"):  # against a revision: the samples are the new side's processes, one per pair
        info.update(against=profile["against"], pairs=profile.get("pairs"), pair_ratios=total.get("ratios"))
    short = test_id.rsplit("::", 1)[-1]  # the test's own name, as pytest-benchmark names a benchmark
    out = [_Benchmark(f"{short}[{key}]", label, test_id, info, samples_ns=_samples(total.get("samples_ns"), label))]
    seen: set[str] = set()
    for node in profile.get("nodes", []):
        name = str(node.get("name", ""))
        ident = name if name and name not in seen else str(node.get("key", name))  # fullname stays unique
        seen.add(ident)
        where = f"{label} node {name!r}"
        extra = {**{n: node.get(n) for n in NODE_INFO}, **_verdict(node)}
        samples = _samples(node.get("samples_ns"), where)
        out.append(_Benchmark(ident, f"{label}::{ident}", label, extra, samples_ns=samples))
    return out


def _metadata(bench: _Benchmark, options: Mapping[str, Any]) -> Metadata:
    from pytest_benchmark.stats import Metadata

    meta = Metadata(bench, iterations=ITERATIONS, options=dict(options))
    for ns in bench.samples_ns:
        meta.update(ns / NS_PER_S)
    return meta


def _options(profile: ProfileReportJSON) -> dict[str, Any]:
    """The measurement's settings under pytest-benchmark's option names."""
    protocol, environment = profile.get("protocol", {}), profile.get("environment", {})
    return {
        "disable_gc": False,
        "timer": f"fxprof {environment.get('clock', '')}".strip(),
        "min_rounds": protocol.get("passes"),
        "max_time": None,
        "min_time": None,
        "warmup": protocol.get("warmup"),
    }


def benchmark_json(
    profiles: Sequence[ProfileReportJSON],
    machine_info: Mapping[str, Any] | None = None,
    commit_info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The document pytest-benchmark's ``--benchmark-json`` would write for these profiles. ``machine_info``
    and ``commit_info`` default to pytest-benchmark's own (the machine it runs on, and the git commit of
    the current directory)."""
    from pytest_benchmark.plugin import pytest_benchmark_generate_json, pytest_benchmark_generate_machine_info
    from pytest_benchmark.utils import get_commit_info

    benchmarks: list[Metadata] = []
    fullnames: set[str] = set()
    for profile in profiles:
        options = _options(profile)
        for bench in _profile_benchmarks(profile):
            if bench.fullname in fullnames:
                raise ValueError(
                    f"fxprof benchmark JSON: two benchmarks named {bench.fullname}; give each fxprof call of a "
                    "test its own name"
                )
            fullnames.add(bench.fullname)
            benchmarks.append(_metadata(bench, options))
    document: dict[str, Any] = pytest_benchmark_generate_json(
        config=None,
        benchmarks=benchmarks,
        include_data=True,
        machine_info=dict(machine_info) if machine_info is not None else pytest_benchmark_generate_machine_info(),
        commit_info=dict(commit_info) if commit_info is not None else get_commit_info(),
    )
    return document


def write_benchmark_json(path: Path, profiles: Sequence[ProfileReportJSON]) -> None:
    """Write ``benchmark_json(profiles)`` to ``path`` atomically, encoded as pytest-benchmark encodes it."""
    from pytest_benchmark.utils import safe_dumps

    write_atomic(path, safe_dumps(benchmark_json(profiles), ensure_ascii=True, indent=4) + "\n")
