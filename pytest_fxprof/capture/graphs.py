"""A capture: graphs that together run like the module, and how to run them.

A ``Captured`` holds the graphs, how they were made, and two functions. ``prepare`` turns a call's
``(args, kwargs)`` into what ``forward`` takes (outside any timing); ``forward`` runs one pass of the module,
calling ``runners[i]`` wherever graph ``i`` runs. A runner takes the graph's positional inputs (flat, in
placeholder order) and returns its output, so an engine can stand in for a graph. A runner may be called more
than once per pass (a graph dynamo runs in a loop).

Must not import pytest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pytest_fxprof.capture.errors import NodeError, ProfileError, graph_failure
from pytest_fxprof.capture.state import fresh_copy
from pytest_fxprof.records.measurement import Capture, NodeInfo

LeafSpec = str | type
Runner = Callable[..., Any]


@dataclass(frozen=True)
class Captured:
    """Graphs that together run like the module, and how to run them."""

    graphs: tuple[torch.fx.GraphModule, ...]
    capture: Capture
    prepare: Callable[[Sequence[Any], dict[str, Any]], Any]
    forward: Callable[[Sequence[Runner], Any], Any]


def single_graph(
    gm: torch.fx.GraphModule,
    cap: Capture,
    prepare: Callable[[Sequence[Any], dict[str, Any]], Any],
    unflatten: Callable[[Any], Any] | None = None,
) -> Captured:
    """A capture that is one graph fed with flat positional inputs (its output rebuilt by ``unflatten``)."""

    def forward(runners: Sequence[Runner], inputs: Any) -> Any:
        out = runners[0](*inputs)
        return unflatten(out) if unflatten is not None else out

    return Captured(graphs=(gm,), capture=cap, prepare=prepare, forward=forward)


def flat_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with the default codegen: flat positional inputs in placeholder order, the output node's value
    as it is (a pytree codegen, as ``torch.export``'s, packs and unpacks them). This is how a timing engine
    runs a graph, so it is what a capture is checked with."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph, type(gm).__name__)


def plain_runners(captured: Captured) -> list[Runner]:
    """A runner per graph that just runs it, as an engine would without timing."""
    return [flat_graph(gm) for gm in captured.graphs]


def prepared_inputs(captured: Captured, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """What the capture's forward takes, from fresh copies of the inputs (outside any timing)."""
    return captured.prepare(*fresh_copy((list(args), kwargs)))


def run_pass(
    module: torch.nn.Module,
    captured: Captured,
    runners: Sequence[Runner],
    prepared: Any,
    *,
    nodes: Sequence[NodeInfo] = (),
    ran_before: bool = False,
) -> None:
    """One pass of the graphs; a graph that fails where the module runs becomes a ``ProfileError`` with a hint,
    naming the node (of ``nodes``, the runners' timed nodes) where the runner could tell which one failed."""
    try:
        captured.forward(runners, prepared)
    except ProfileError:  # the capture's own account (dynamo would recompile, another path ran)
        raise
    except NodeError as exc:
        node = nodes[exc.index] if exc.index is not None and exc.index < len(nodes) else None
        raise ProfileError(graph_failure(module, exc.error, node, ran_before=ran_before)) from exc.error
    except Exception as exc:
        raise ProfileError(graph_failure(module, exc, ran_before=ran_before)) from exc
