"""Leaving the module and the inputs as they were.

Owns what a capture or a profile may disturb and how it is put back: ``Kept`` notes the module's modes,
buffers (BatchNorm statistics), attributes and registrations and torch's random state on entry and restores
them, and refuses a module that changes its own parameters in place; ``fresh_copy`` gives every pass inputs
whose tensors are new, so in-place ops never touch the caller's.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from pytest_fxprof.capture.errors import ProfileError


class Kept:
    """What a capture may disturb in the module, noted on entry: put back with ``restore`` (buffers and torch's
    random state, between trial runs) and ``close`` (also modes, attributes a capture added, registrations)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.modules = list(module.modules())
        self.attrs = [(m, set(vars(m)), set(m._parameters), set(m._buffers), set(m._modules)) for m in self.modules]
        self.modes = [(m, m.training) for m in self.modules]
        self.buffers = [
            (owner, name, buf, buf.detach().clone())
            for owner in self.modules
            for name, buf in owner._buffers.items()
            if buf is not None
        ]
        self.versions = {name: p._version for name, p in module.named_parameters()}
        self.rng = torch.random.get_rng_state()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        self.cuda_rng = torch.cuda.get_rng_state_all() if cuda else None

    def restore(self) -> None:
        """Buffers to their values on entry, torch's random state to where it was."""
        torch.random.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        with torch.no_grad():
            for owner, name, original, saved in self.buffers:
                owner._buffers[name] = original
                original.copy_(saved)

    def close(self, *, check: bool = True) -> None:
        """Put everything back; ``check`` refuses a module whose forward changed its own parameters."""
        for m, names, params, buffers, children in self.attrs:
            for name in set(vars(m)) - names:  # e.g. torch.compile's _is_torch_compile marker
                del vars(m)[name]
            for registry, before in ((m._parameters, params), (m._buffers, buffers), (m._modules, children)):
                for name in set(registry) - before:
                    del registry[name]
        for m, training in self.modes:
            m.training = training
        self.restore()
        if check:
            self.check_parameters()

    def check_parameters(self) -> None:
        """Refuse a module that changes its own parameters in place (a forward that trains itself)."""
        changed = [name for name, p in self.module.named_parameters() if self.versions.get(name) != p._version]
        if changed:
            raise ProfileError(
                f"the module changed its parameters in place during forward ({', '.join(changed[:5])}); "
                "profiling it repeatedly would alter the model. Profile a copy (copy.deepcopy(model))."
            )


@contextlib.contextmanager
def kept_as_is(module: torch.nn.Module) -> Iterator[Kept]:
    """The body may disturb the module; afterwards it is put back (``Kept.close``), and a forward that
    changed its own parameters is refused, unless the body raised (its error says more)."""
    kept = Kept(module)
    try:
        yield kept
    except BaseException:
        with contextlib.suppress(ProfileError):  # the error on its way out says more
            kept.close()
        raise
    kept.close()


class StepKept:
    """What a training step changes, noted on entry and put back after every pass (``reset``) and at the end
    (``close``): the parameters' values (an optimizer steps them), their ``.grad`` (``None`` while a step
    runs, so that each pass's backward starts from none, and the caller's own afterwards, the same tensors
    with the same values), the optimizer's state and hyperparameters, and what ``Kept`` keeps (modes,
    buffers such as BatchNorm statistics, attributes, torch's random state)."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        self.kept = Kept(module)
        params = {id(p): p for p in module.parameters()}
        for group in optimizer.param_groups if optimizer is not None else ():
            params.update((id(p), p) for p in group["params"])
        self.params = [(p, p.detach().clone(), p.grad, _clone(p.grad)) for p in params.values()]
        self.optimizer = optimizer
        if optimizer is not None:
            self.state = {p: {k: (v, _clone(v)) for k, v in s.items()} for p, s in optimizer.state.items()}
            self.groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        for p, *_ in self.params:
            p.grad = None

    def reset(self) -> None:
        """Parameters, optimizer and buffers as on entry, every ``.grad`` ``None``, the random state rewound."""
        with torch.no_grad():
            for p, saved, _, _ in self.params:
                p.copy_(saved)
                p.grad = None
        if self.optimizer is not None:
            state = self.optimizer.state
            state.clear()
            for param, values in self.state.items():
                state[param] = {k: _put_back(now, saved) for k, (now, saved) in values.items()}
            for group, saved_group in zip(self.optimizer.param_groups, self.groups, strict=True):
                for k in [k for k in group if k != "params" and k not in saved_group]:
                    del group[k]
                group.update(copy.deepcopy(saved_group))
        self.kept.restore()

    def close(self) -> None:
        """Everything as on entry, the caller's ``.grad`` tensors (or ``None``) back with their values."""
        try:
            self.reset()
        finally:
            with torch.no_grad():
                for p, _, grad, saved_grad in self.params:
                    if grad is not None and saved_grad is not None:
                        grad.copy_(saved_grad)
                    p.grad = grad
            self.kept.close(check=False)


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return copy.deepcopy(value)


def _put_back(now: Any, saved: Any) -> Any:
    """The optimizer's state value ``now`` holding ``saved`` again (the same tensor, where the shapes allow)."""
    if isinstance(now, torch.Tensor) and isinstance(saved, torch.Tensor) and now.shape == saved.shape:
        with torch.no_grad():
            return now.copy_(saved)
    return copy.deepcopy(saved)


def fresh_copy(value: Any) -> Any:
    """A copy whose tensors are new, wherever they sit (lists, dicts, dataclasses, objects): the module may
    change its inputs in place. ``copy.deepcopy`` reaches tensors inside any container; values it cannot
    copy fall back to cloning the tensors that torch's pytree reaches (lists, tuples, dicts, named tuples)."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - an uncopyable input: clone what pytree reaches
        return pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, value)


def fresh_inputs(args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Copies of the example inputs, as ``(args, kwargs)``, whose tensors are new."""
    a, k = fresh_copy((list(args), dict(kwargs)))
    return a, k
