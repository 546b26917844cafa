"""How a capture fails: the errors it raises, each error in one line, and torch's own noise held back.

Owns ``CaptureError`` (the module could not become graphs) and ``ProfileError`` (profiling would change the
module, or the inputs do not fit it), the one-line form every failure is reported in (``one_line``, with the
user's source line), and ``quiet``, which keeps torch's logs, warnings and printed graphs out of the terminal
while a capture is tried and keeps its warnings for the error that explains a failure.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pytest_fxprof.capture.sources import user_frame
from pytest_fxprof.records.measurement import NodeInfo

if TYPE_CHECKING:
    import torch


class CaptureError(Exception):
    """The module could not be captured as a graph. The message says what broke and what to do."""


class ProfileError(Exception):
    """Profiling would have changed the module, or the inputs do not fit it."""


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of an error, and where it arose in the user's code (or torch's own ``Caused by``)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > 160:  # torch's errors go on to explain at length: keep the first sentence
        end = first.find(". ", 40)
        first = first[: end + 1] if 0 < end < 160 else first[:157] + "..."
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    caused = re.search(r"^Caused by: \((.+)\)\s*$", text, re.MULTILINE)
    where = user_frame(exc) or (caused[1] if caused else None)
    return f"{line} (at {where})" if where else line


class NodeError(Exception):
    """A node of a captured graph raised while an engine ran it. ``index`` is its position among the nodes the
    engine times (``describe_nodes``'s order), None where the engine could not tell; what the node raised is
    ``error`` (and the ``__cause__``)."""

    def __init__(self, index: int | None, error: BaseException) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


def graph_failure(
    module: torch.nn.Module, exc: BaseException, node: NodeInfo | None = None, *, ran_before: bool = False
) -> str:
    """Why the captured graph failed where the module itself ran, naming the node where one is known.

    On the graph's first run: usually a value traced as a tensor (a branch fixed at trace time). After runs
    that worked: something that fails only on some calls (memory, state the model keeps).
    """
    where = ""
    if node is not None:
        source = f", {node.source}" if node.source else ""
        where = f" in node {node.name} ({node.op} {node.target} in {node.where}{source})"
    head = f"the captured graph of {type(module).__name__} failed{where}: {one_line(exc)}"
    if ran_before:
        return (
            f"{head}\n"
            "  It ran in the passes before this one: it fails only on some calls (out of memory, a state the model "
            "keeps between calls, an error it raises now and then).\n"
            "  Fix: make the module run every time on these inputs (a profile runs it some twenty times: the "
            "warm-up, the measured passes, a FLOP count); for memory, smaller inputs or a free device."
        )
    return (
        f"{head}\n"
        "  Tracing treats every input as a tensor, so a branch on an input that is None or a Python value "
        "(if mask is not None: ...) is fixed at trace time.\n"
        "  Fix: pass tracer= a torch.fx.Tracer whose trace() gets concrete_args for those inputs, or keep "
        "the submodule that branches whole with leaf_modules=[...]."
    )


_TORCH_LOGGERS = (
    "torch",
    "torch.__trace",  # structured trace records: DEBUG, and propagated to pytest's log capture
    "torch._dynamo",
    "torch._export",
    "torch.export",
    "torch.fx.experimental.symbolic_shapes",
)


class Recorder(logging.Handler):
    """Keeps torch's warnings instead of printing them, for the error that explains a failure."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.messages.append(record.getMessage())

    def limit_hit(self) -> str:
        """Which function hit dynamo's recompilation limit, and why it recompiled, from dynamo's warning."""
        for message in reversed(self.messages):
            if "hit config." in message:
                lines = [line.strip() for line in message.splitlines()[:3]]
                return "; ".join(line for line in lines if line)
        return ""


_RECORDER = Recorder()


@contextlib.contextmanager
def quiet() -> Iterator[Recorder]:
    """No logs, warnings or partial graphs (export prints them to stderr) while export or dynamo try a model:
    a failure is reported, in one line, in our error instead. torch's warnings are kept in the recorder."""
    loggers = [logging.getLogger(name) for name in _TORCH_LOGGERS]
    saved = [(logger.level, logger.propagate, logger.handlers[:]) for logger in loggers]
    _RECORDER.messages.clear()
    for logger in loggers:
        logger.handlers, logger.propagate = [_RECORDER], False
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield _RECORDER
    finally:
        for logger, (level, propagate, handlers) in zip(loggers, saved, strict=True):
            logger.setLevel(level)
            logger.propagate, logger.handlers = propagate, handlers
