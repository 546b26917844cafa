"""slow_down: the controlled slowdown, on a fake clock (no test here waits on real time)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pytest_fxprof.slowdown import slow_down


class FakeClock:
    """Each read moves time on by one tick; work done by a module moves it on by its cost."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 1
        return self.now


class Work(nn.Module):
    def __init__(self, clock: FakeClock, cost: int) -> None:
        super().__init__()
        self.clock, self.cost = clock, cost

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.now += self.cost
        return x + 1


class Net(nn.Module):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.block = nn.Sequential(Work(clock, 100), Work(clock, 300))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.block(x)
        return out


def run_once(net: nn.Module, clock: FakeClock) -> int:
    start = clock.now
    net(torch.zeros(1))
    return clock.now - start


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 2.0])
def test_waits_for_the_fraction_of_the_submodules_own_time(fraction: float) -> None:
    clock = FakeClock()
    net = Net(clock)
    plain = run_once(net, clock)
    slow_down(net, "block.1", fraction, clock=clock)
    slowed = run_once(net, clock)
    # block.1's own time as the hooks see it: its cost and the tick of the read that ends it
    own = 300 + 1
    # the wait ends at the first read past the target, one tick of the clock at most beyond it
    assert slowed - plain - 2 == pytest.approx(math.ceil(fraction * own), abs=1)


def test_handles_undo_it_and_other_submodules_are_untouched() -> None:
    clock = FakeClock()
    net = Net(clock)
    plain = run_once(net, clock)
    handles = slow_down(net, "block.0", 1.0, clock=clock)
    assert run_once(net, clock) >= plain + 100
    for handle in handles:
        handle.remove()
    assert run_once(net, clock) == plain


def test_a_module_called_twice_is_slowed_in_each_call() -> None:
    clock = FakeClock()
    work = Work(clock, 200)
    twice = nn.Sequential(work, work)
    plain = run_once(twice, clock)
    slow_down(twice, "0", 0.5, clock=clock)
    assert run_once(twice, clock) - plain >= 2 * 100


def test_output_is_unchanged() -> None:
    net = Net(FakeClock())
    expected = net(torch.ones(3))
    slow_down(net, "block.0", 0.5, clock=FakeClock())
    assert torch.equal(net(torch.ones(3)), expected)


@pytest.mark.parametrize(
    ("path", "fraction", "message"),
    [
        ("block.7", 0.5, "slow_down: Net has no submodule 'block.7' (it has block, block.0, block.1, ...)"),
        ("head", 0.5, "slow_down: Net has no submodule 'head'"),
        ("block.0", -0.1, "slow_down: fraction must be a finite number of at least 0, not -0.1"),
        ("block.0", math.nan, "slow_down: fraction must be a finite number of at least 0, not nan"),
        ("block.0", math.inf, "slow_down: fraction must be a finite number of at least 0, not inf"),
    ],
)
def test_bad_arguments_name_the_cause(path: str, fraction: float, message: str) -> None:
    with pytest.raises(ValueError, match=r"^slow_down: ") as info:
        slow_down(Net(FakeClock()), path, fraction)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(("path", "shown"), [("block", "block"), ("", "the model itself")])
def test_a_module_fx_traces_through_is_refused_unless_kept_whole(path: str, shown: str) -> None:
    with pytest.raises(ValueError, match=r"^slow_down: ") as info:
        slow_down(Net(FakeClock()), path, 0.5)
    assert str(info.value).startswith(f"slow_down: {shown} has submodules, so torch.fx traces through it")
    clock = FakeClock()
    net = Net(clock)
    plain = run_once(net, clock)
    slow_down(net, path, 0.5, whole=True, clock=clock)  # kept whole (leaf_modules=): its hooks do run
    assert run_once(net, clock) - plain >= 200
