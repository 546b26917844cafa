"""The allocator a measuring process runs with, as its environment records it (``measure.machine``), and the
thread's page-fault counter."""

from __future__ import annotations

import mmap
import os
import platform
import subprocess
import sys

import pytest

from pytest_fxprof.measure import machine
from pytest_fxprof.measure.machine import allocator_in_use, fault_counter
from pytest_fxprof.records.measurement import TUNED_ALLOCATOR


@pytest.fixture(autouse=True)
def untuned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees a process whose allocator fxprof did not tune and no setting of any allocator, whatever ran
    before it here or the machine sets."""
    monkeypatch.setattr(machine, "_allocator_state", [])
    for name in list(os.environ):
        if name.startswith(machine.ALLOCATOR_SETTINGS) or name in (*machine.TORCH_ALLOCATOR_SETTINGS, "LD_PRELOAD"):
            monkeypatch.delenv(name)


def preloaded(monkeypatch: pytest.MonkeyPatch, library: str) -> None:
    """The process's ``malloc`` as ``library``'s (what ``dladdr`` would say of it)."""
    monkeypatch.setattr(machine, "_malloc_library", lambda: library)


def test_the_allocator_is_named_with_the_settings_that_change_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "_transparent_huge_pages", lambda: "madvise")
    preloaded(monkeypatch, "/lib/x86_64-linux-gnu/libc.so.6")
    monkeypatch.setattr(platform, "libc_ver", lambda: ("glibc", "2.36"))
    assert allocator_in_use() == "glibc (thp madvise)"
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")
    assert allocator_in_use() == "glibc (GLIBC_TUNABLES=glibc.malloc.trim_threshold=0; MALLOC_ARENA_MAX=2; thp madvise)"


def test_a_preloaded_allocator_is_named_by_its_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "_transparent_huge_pages", lambda: "")
    preloaded(monkeypatch, "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    monkeypatch.setenv("MALLOC_CONF", "background_thread:true")
    assert allocator_in_use() == "jemalloc (MALLOC_CONF=background_thread:true)"
    preloaded(monkeypatch, "/opt/lib/libtcmalloc_minimal.so.4")
    monkeypatch.delenv("MALLOC_CONF")
    assert allocator_in_use() == "tcmalloc"
    # where the platform cannot say whose malloc runs, LD_PRELOAD names it
    preloaded(monkeypatch, "")
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libjemalloc.so.2")
    assert allocator_in_use() == "jemalloc"


def test_tuning_is_named_and_only_glibc_is_tuned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "_transparent_huge_pages", lambda: "")
    preloaded(monkeypatch, "/usr/lib/libjemalloc.so.2")
    # with another allocator preloaded, glibc's settings would change nothing: the allocator stays as it is, named so
    assert machine.tune_allocator() == "jemalloc"
    assert allocator_in_use() == "jemalloc"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_a_tuned_process_says_so_for_the_rest_of_its_life() -> None:
    code = (
        "from pytest_fxprof.measure.machine import allocator_in_use, tune_allocator\n"
        "print(allocator_in_use()); print(tune_allocator()); print(allocator_in_use())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0].startswith("glibc")
    assert out[0] != TUNED_ALLOCATOR
    assert out[1:3] == [TUNED_ALLOCATOR, TUNED_ALLOCATOR]


@pytest.mark.skipif(platform.system() != "Linux", reason="per-thread fault counters")
def test_the_fault_counter_counts_the_pages_a_fresh_buffer_touches() -> None:
    faults = fault_counter()
    assert faults is not None
    # 64 MiB mapped afresh (not through malloc, which a tuned allocator in this process would serve from pages it
    # already holds) and one byte written a page: the kernel hands it page by page
    with mmap.mmap(-1, 64 << 20) as buffer:
        before = faults()
        for offset in range(0, len(buffer), mmap.PAGESIZE):
            buffer[offset] = 1
        after = faults()
    assert after - before >= 1_000


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="dladdr of glibc")
def test_the_library_whose_malloc_runs_is_read_from_the_process() -> None:
    assert "libc.so" in machine._malloc_library()
