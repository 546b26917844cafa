"""The plain Python API: ``profile()`` and ``profile_train_step()`` for notebooks and scripts, the same engine as
the fixture.

Owns nothing but the defaults of a direct call. Must not import torch at module level: it is imported when
``profile`` is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_fxprof.result import ProfileResult
from pytest_fxprof.settings import Settings, apply

_DEFAULTS = Settings()


def profile(
    module: Any,
    *args: Any,
    warmup: int = _DEFAULTS.warmup,
    passes: int = _DEFAULTS.passes,
    threads: int = _DEFAULTS.threads,
    leaf_modules: Sequence[Any] = (),
    tracer: Any = None,
    capture: str = _DEFAULTS.capture,
    engine: str = _DEFAULTS.engine,
    flops: bool = True,
    name: str = "profile",
    allocator: str = _DEFAULTS.allocator,
    **kwargs: Any,
) -> ProfileResult:
    """Capture ``module`` with torch.fx and time ``module(*args, **kwargs)`` node by node.

    Options are keyword-only; every other keyword argument goes to the module. The module, its
    buffers, its mode and the inputs are left as they were. ``leaf_modules`` names submodules (by path
    or class) to time whole; ``tracer`` replaces the default ``torch.fx.Tracer``; ``capture`` is
    ``auto``, ``symbolic``, ``export`` or ``dynamo``; ``engine`` is ``compiled`` or ``interpreter``;
    ``flops`` counts each node's floating-point operations (in one more, untimed pass); ``allocator`` is ``as-is``
    (the allocator this process has, as the program it stands for runs) or ``tuned`` (glibc told never to map, trim
    or return memory, for the rest of the process: quieter, blind to what memory costs).

    >>> result = profile(model, torch.randn(1, 3, 224, 224))  # doctest: +SKIP
    >>> print(result.table(limit=10))  # doctest: +SKIP
    """
    from pytest_fxprof.measure.profiler import profile_module

    options: dict[str, object] = {"warmup": warmup, "passes": passes, "threads": threads, "processes": 1}
    options |= {"capture": capture, "engine": engine, "allocator": allocator}
    settings = apply(_DEFAULTS, options, "profile()")
    profiled = profile_module(
        module,
        args,
        kwargs,
        name=name,
        protocol=settings.protocol(),
        leaf_modules=leaf_modules,
        tracer=tracer,
        capture=settings.capture,
        engine=settings.engine,
        flops=flops,
        allocator=settings.allocator,
    )
    return ProfileResult.of(profiled)


_STEP_OPTIONS = ("warmup", "passes", "threads", "leaf_modules", "engine", "flops", "name")


def profile_train_step(
    module: Any,
    *args: Any,
    loss_fn: Any = None,
    optimizer: Any = None,
    **options_and_model_kwargs: Any,
) -> ProfileResult:
    """Time one training step of ``module`` node by node: the forward (in the module's own mode), the loss, the
    backward and, when given, ``optimizer.step()``; each node says its direction (``forward``, ``backward``,
    ``optimizer``), and a backward node the forward node, module and source line it belongs to.

    ``loss_fn(output)`` returns a scalar tensor; without it the loss is the sum of every floating-point tensor in
    the output that requires grad. The options ``warmup``, ``passes``, ``threads``, ``leaf_modules``, ``engine``,
    ``flops`` and ``name`` are as ``profile()``'s; every other keyword argument goes to the module. Parameters,
    their ``.grad``, buffers, the optimizer's state, the module's mode, torch's random state and the inputs are
    left as they were.

    >>> result = profile_train_step(model, images, loss_fn=lambda out: out.logsumexp(1).mean())  # doctest: +SKIP
    >>> print(result.table(limit=10))  # doctest: +SKIP
    """
    from pytest_fxprof.capture.step import Step
    from pytest_fxprof.measure.profiler import profile_module

    options = {k: options_and_model_kwargs.pop(k) for k in _STEP_OPTIONS if k in options_and_model_kwargs}
    kwargs = options_and_model_kwargs
    run_options: dict[str, object] = {"processes": 1, "warmup": _DEFAULTS.warmup, "passes": _DEFAULTS.passes}
    run_options |= {"threads": _DEFAULTS.threads, "engine": _DEFAULTS.engine}
    run_options |= {k: options[k] for k in ("warmup", "passes", "threads", "engine") if k in options}
    settings = apply(_DEFAULTS, run_options, "profile_train_step()")
    profiled = profile_module(
        module,
        args,
        kwargs,
        name=str(options.get("name", "train_step")),
        protocol=settings.protocol(),
        leaf_modules=options.get("leaf_modules", ()),
        engine=settings.engine,
        flops=bool(options.get("flops", True)),
        step=Step(loss_fn=loss_fn, optimizer=optimizer),
    )
    return ProfileResult.of(profiled)
