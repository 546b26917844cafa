"""The machine a profile runs on: its environment record, the allocator, the clocks and the reference workload.

Owns what makes two measurements comparable or not: the ``Environment`` a profile records (torch, CPU,
threads, device, allocator, clock, engine), glibc's allocator tuned the same way in every measuring process,
the clock each setup is timed on, and the reference workload that says how fast the machine is right now.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from pytest_fxprof.measure.engine import Clock
from pytest_fxprof.records.measurement import Environment


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


_allocator_state: list[str] = []


def tune_allocator() -> str:
    """Make glibc's allocator behave the same whatever the process did before; say what is in force.

    By default glibc serves large blocks (activations) with mmap/munmap until a threshold that grows
    with the process's history, and trims freed memory back to the system, so the same node is
    slower in a fresh process than after other models ran. With mmap off for allocations, no trimming
    and a 64 MiB top pad, freed memory is kept for reuse. Process-wide and applied once; the returned
    name is recorded in the environment, so tuned and untuned runs are never compared.
    """
    if not _allocator_state:
        state = "default"
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            libc = ctypes.CDLL(None)
            ok = libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1)
            ok = ok and libc.mallopt(_M_TOP_PAD, 64 << 20)
            state = "glibc-tuned" if ok else "default"
        _allocator_state.append(state)
    return _allocator_state[0]


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
