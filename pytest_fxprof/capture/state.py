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

    def close(self) -> None:
        for m, names, params, buffers, children in self.attrs:
            for name in set(vars(m)) - names:  # e.g. torch.compile's _is_torch_compile marker
                del vars(m)[name]
            for registry, before in ((m._parameters, params), (m._buffers, buffers), (m._modules, children)):
                for name in set(registry) - before:
                    del registry[name]
        for m, training in self.modes:
            m.training = training
        self.restore()
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
