"""What ``torch.compile`` made of the user's module: whether it is compiled, the eager module it wraps, the backend
and settings it was compiled with (``user_backend``), and Inductor's settings while ``capture.inductor`` compiles it
again (``inductor_settings``). Imports neither dynamo nor Inductor until called.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from pytest_fxprof.capture.errors import ProfileError

OFF_WHILE_PROFILING = {"triton.cudagraphs": "CUDA graphs", "cpp_wrapper": "the C++ wrapper"}
"""Inductor options a profile turns off, with what the capture's detail calls them: each kernel is stamped from
Inductor's Python wrapper, which a CUDA graph's replay and the C++ wrapper leave out. The kernels are the same."""


def is_compiled(module: object) -> bool:
    """Whether ``module`` is what ``torch.compile(model)`` returns (dynamo's ``OptimizedModule``), or a module
    compiled in place (``model.compile()``). Where dynamo was never imported, nothing was compiled."""
    kind = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
    if kind is None:
        return False
    return isinstance(module, kind) or _in_place(module)


def _in_place(module: object) -> bool:
    """Whether ``module`` was compiled in place (``model.compile()``): its calls go to its ``_compiled_call_impl``."""
    return isinstance(module, torch.nn.Module) and getattr(module, "_compiled_call_impl", None) is not None


def eager_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module a compiled module wraps (itself when it is not compiled, or compiled in place)."""
    return module._orig_mod if is_compiled(module) and not _in_place(module) else module  # type: ignore[return-value]


def _context(module: torch.nn.Module) -> Any:
    """The dynamo context a compiled ``module`` was compiled with (its backend, ``fullgraph``, ``dynamic``): an
    ``OptimizedModule``'s own, or the one the compiled call of a module compiled in place closes over."""
    if not _in_place(module):
        return module.dynamo_ctx
    impl: Any = module._compiled_call_impl
    for name, cell in zip(impl.__code__.co_freevars, impl.__closure__ or (), strict=False):
        if name == "self" and hasattr(cell.cell_contents, "callback"):
            return cell.cell_contents
    raise ProfileError(  # pragma: no cover - torch's own compiled call keeps its context
        f"{type(module).__name__} was compiled in place (model.compile()) in a way fxprof cannot read.\n"
        "  Fix: hand the fixture torch.compile(model) instead."
    )


@contextlib.contextmanager
def eager_calls(module: torch.nn.Module) -> Iterator[None]:
    """While the body runs, a module compiled in place calls its own forward (which fxprof compiles), not the
    compiled call ``model.compile()`` gave it."""
    impl = getattr(module, "_compiled_call_impl", None)
    if impl is None:
        yield
        return
    module._compiled_call_impl = None
    try:
        yield
    finally:
        module._compiled_call_impl = impl


def user_backend(module: torch.nn.Module) -> tuple[Callable[..., Any], dict[str, Any], tuple[str, ...]]:
    """The backend ``module`` was compiled with (Inductor's, with the user's mode and options, less those of
    ``OFF_WHILE_PROFILING``), dynamo's own settings (``fullgraph``, ``dynamic``) and what was turned off; Inductor
    with its defaults for an eager module. Another backend is refused with the fix."""
    import torch._inductor.config

    settings = torch._inductor.config.get_config_copy()
    if not is_compiled(module):
        from torch._inductor.compile_fx import compile_fx

        off = tuple(name for key, name in OFF_WHILE_PROFILING.items() if settings.get(key))
        return compile_fx, {"fullgraph": False, "dynamic": False}, off
    ctx: Any = _context(module)
    backend: Any = getattr(ctx, "callback", None)
    while hasattr(backend, "_torchdynamo_orig_backend"):
        backend = backend._torchdynamo_orig_backend
    name = getattr(backend, "compiler_name", None) or getattr(backend, "__name__", None) or repr(backend)
    if name != "inductor" and getattr(backend, "__name__", "") not in ("compile_fx", "inductor"):
        raise ProfileError(
            f"{type(eager_module(module)).__name__} was compiled with backend {name!r}; fxprof times the kernels "
            "Inductor generates, so it profiles torch.compile's default backend only.\n"
            "  Fix: compile with backend='inductor' (the default), or hand the fixture the eager module "
            "(model._orig_mod, or the model without model.compile()) to time its operations one by one."
        )
    config = getattr(backend, "config", None)
    settings.update(config if isinstance(config, dict) else {})
    off = tuple(name for key, name in OFF_WHILE_PROFILING.items() if settings.get(key))
    if isinstance(config, dict) and any(key in config for key in OFF_WHILE_PROFILING):
        backend = copy.copy(backend)  # the user's stays as it is
        backend.config = {**config, **{key: False for key in OFF_WHILE_PROFILING if key in config}}
    dynamo_settings = {"fullgraph": bool(getattr(ctx, "fullgraph", False)), "dynamic": getattr(ctx, "_dynamic", None)}
    return backend, dynamo_settings, off


def inductor_settings() -> contextlib.AbstractContextManager[Any]:
    """Inductor's settings for a capture: provenance tracking, ``OFF_WHILE_PROFILING`` off (where the user's options
    do not set them: their backend's copy turns those off) and no cache, since a cache hit keeps the mapping of the
    compile that filled it, whose dynamo nodes may have had other names than this graph's."""
    import torch._functorch.config
    import torch._inductor.config

    stack = contextlib.ExitStack()
    settings: dict[str, Any] = {"fx_graph_cache": False, **dict.fromkeys(OFF_WHILE_PROFILING, False)}
    if hasattr(torch._inductor.config.trace, "provenance_tracking_level"):
        settings["trace.provenance_tracking_level"] = 1
    stack.enter_context(torch._inductor.config.patch(settings))
    stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack
