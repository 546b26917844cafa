"""The machine a profile runs on: its environment record, the allocator, the clocks and the reference workload.

Owns what makes two measurements comparable or not: the ``Environment`` a profile records (torch, CPU,
threads, device, allocator, clock, engine), the allocator as the user's process has it (or glibc tuned, where asked),
the clock each setup is timed on, and the reference workload that says how fast the machine is right now.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from pytest_fxprof.measure.engine import Clock
from pytest_fxprof.records.measurement import TUNED_ALLOCATOR, Environment


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine() or "unknown"


def device_of(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.device:
    for leaf in tree_flatten((list(args), kwargs))[0]:
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    for tensor in module.parameters():
        return tensor.device
    return torch.device("cpu")


def environment(
    threads: int, device: torch.device, allocator: str, clock: str = "wall", engine: str = "compiled"
) -> Environment:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        dev = f"cuda:{torch.cuda.get_device_name(index)} (CUDA {torch.version.cuda})"
    else:
        dev = device.type
    return Environment(
        torch=str(torch.__version__),  # a TorchVersion, which cannot cross to xdist's controller
        python=".".join(map(str, sys.version_info[:3])),
        platform=f"{platform.system()}-{platform.machine()}",
        cpu=_cpu_model(),
        threads=threads,
        device=dev,
        allocator=allocator,
        clock=clock,
        engine=engine,
    )


_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4

_PRELOADED = ("jemalloc", "tcmalloc", "mimalloc", "hoard", "snmalloc")
"""Allocators a process may run with instead of its C library's, by the name of their shared library."""

ALLOCATOR_SETTINGS = ("MALLOC_", "GLIBC_TUNABLES", "TCMALLOC_", "MIMALLOC_", "JEMALLOC_", "_RJEM_MALLOC_CONF")
"""Environment variables that change how an allocator behaves (glibc's ``MALLOC_*`` aliases and tunables,
jemalloc's ``MALLOC_CONF``, tcmalloc's and mimalloc's own)."""

TORCH_ALLOCATOR_SETTINGS = ("THP_MEM_ALLOC_ENABLE",)
"""torch's own switches of how its CPU allocator asks for memory (huge pages for blocks of 2 MiB or more)."""

_allocator_state: list[str] = []


def tune_allocator() -> str:
    """Tell glibc's allocator never to map, trim or return memory (mmap off for allocations, no trimming, a 64 MiB top
    pad), so that a node is as fast after other work as in a fresh process; say what is in force
    (``TUNED_ALLOCATOR``, or the allocator as it is where this is not glibc). Process-wide, once, and never undone:
    only ``--fxprof-allocator tuned`` asks for it, and the environment records it, so tuned and untuned runs are
    never compared."""
    if not _allocator_state:
        state = ""
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" and _preloaded() is None:
            libc = ctypes.CDLL(None)
            ok = libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1)
            ok = ok and libc.mallopt(_M_TOP_PAD, 64 << 20)
            state = TUNED_ALLOCATOR if ok else ""
        _allocator_state.append(state)
    return _allocator_state[0] or allocator_in_use()


class _DlInfo(ctypes.Structure):
    """What ``dladdr`` says of an address: the file of the library that holds it, and the symbol."""

    _fields_ = (
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    )


def _malloc_library() -> str:
    """The file of the library whose ``malloc`` this process calls ("" where the platform cannot say): a preloaded
    allocator's, or the C library's."""
    with contextlib.suppress(OSError, AttributeError, ValueError, TypeError):
        libc = ctypes.CDLL(None)
        address = ctypes.cast(libc.malloc, ctypes.c_void_p)
        info = _DlInfo()
        if libc.dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return str(info.dli_fname.decode(errors="replace"))
    return ""


def _preloaded() -> str | None:
    """The allocator this process runs with instead of its C library's, by name (None: the C library's): the library
    whose ``malloc`` it calls, else what ``LD_PRELOAD`` names (a library a module loaded later replaces nothing)."""
    lowered = (_malloc_library() or os.environ.get("LD_PRELOAD", "")).lower()
    return next((name for name in _PRELOADED if f"lib{name}" in lowered), None)


def _transparent_huge_pages() -> str:
    """The kernel's transparent huge page mode (``always``, ``madvise``, ``never``; "" where it cannot be read)."""
    with contextlib.suppress(OSError):
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text(encoding="utf-8")
        return text[text.find("[") + 1 : text.find("]")] if "[" in text else ""
    return ""


def allocator_in_use() -> str:
    """The allocator this process allocates with, as its environment records it: ``TUNED_ALLOCATOR`` where fxprof
    tuned glibc, else the allocator's name (``glibc``, or a preloaded ``jemalloc``, ``tcmalloc``...) with what
    changes how it behaves: the environment variables that configure it and the kernel's transparent huge page mode
    (``glibc (thp madvise)``, ``jemalloc (MALLOC_CONF=background_thread:true; thp always)``). Two processes whose
    allocators differ here pay for memory differently, and are never compared."""
    if _allocator_state and _allocator_state[0]:
        return _allocator_state[0]
    name = _preloaded() or (platform.libc_ver()[0] or platform.system().lower() or "unknown")
    settings = sorted(
        f"{k}={v}" for k, v in os.environ.items() if k.startswith(ALLOCATOR_SETTINGS) or k in TORCH_ALLOCATOR_SETTINGS
    )
    thp = _transparent_huge_pages()
    settings += [f"thp {thp}"] if thp else []
    return f"{name} ({'; '.join(settings)})" if settings else name


def fault_counter() -> Clock | None:
    """A counter of the minor page faults the calling thread has taken (``getrusage(RUSAGE_THREAD)``: exact, one
    system call, no privilege), or None where the platform keeps none per thread. A fault is the kernel handing a
    page to memory the allocator took from the system: what a large temporary costs where the allocator mapped it
    afresh or gave it back since the last call."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return None

    def faults() -> int:
        return int(resource.getrusage(who).ru_minflt)

    return faults


def clock_for(threads: int, device: torch.device) -> tuple[str, Clock]:
    """The clock that times a profile, and its name (recorded in the environment, so never mixed).

    On the CPU with one intra-op thread, every op runs on the calling thread, so its CPU time
    (``thread_time_ns``) is the work done: time the thread spent descheduled, because a neighbour on a
    shared runner had the core, is not counted. With more threads, or on a GPU, the wall clock.
    """
    if device.type == "cpu" and threads == 1:
        return "thread-cpu", time.thread_time_ns
    return "wall", time.perf_counter_ns


class ReferenceWorkload:
    """A fixed CPU workload that shares no kernels with torch: NumPy element-wise work and a sort in
    cache, and a streaming pass over 8 MiB (what a neighbour's memory traffic slows down).

    Timed beside every pass, it measures how fast the machine is right now, so that the model's total
    can be divided by it; a regression in torch itself does not cancel out. Both halves count: the
    model's total divided by both varies less between processes than divided by either.
    """

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        rng = np.random.default_rng(0)
        self._data = rng.standard_normal(1 << 14)
        self._stream = rng.standard_normal(1 << 20)
        self._out = np.empty_like(self._stream)

    def __call__(self, clock: Clock = time.perf_counter_ns) -> int:
        np = self._np
        start = clock()
        acc = self._data
        for _ in range(4):
            acc = np.tanh(acc * 0.5) + np.sqrt(np.abs(acc))
        np.sort(acc)
        np.multiply(self._stream, 1.0001, out=self._out)
        np.add(self._out, self._stream, out=self._out)
        return clock() - start


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
