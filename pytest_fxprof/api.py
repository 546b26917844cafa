"""The plain Python API: ``profile()`` for notebooks and scripts, the same engine as the fixture.

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
    **kwargs: Any,
) -> ProfileResult:
    """Capture ``module`` with torch.fx and time ``module(*args, **kwargs)`` node by node.

    Options are keyword-only; every other keyword argument goes to the module. The module, its
    buffers, its mode and the inputs are left as they were. ``leaf_modules`` names submodules (by path
    or class) to time whole; ``tracer`` replaces the default ``torch.fx.Tracer``; ``capture`` is
    ``auto``, ``symbolic``, ``export`` or ``dynamo``; ``engine`` is ``compiled`` or ``interpreter``;
    ``flops`` counts each node's floating-point operations (in one more, untimed pass).

    >>> result = profile(model, torch.randn(1, 3, 224, 224))  # doctest: +SKIP
    >>> print(result.table(limit=10))  # doctest: +SKIP
    """
    from pytest_fxprof.measure.profiler import profile_module

    options: dict[str, object] = {"warmup": warmup, "passes": passes, "threads": threads, "processes": 1}
    options |= {"capture": capture, "engine": engine}
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
    )
    return ProfileResult.of(profiled)
