"""A call's computation fingerprint, as plain data: what it covers, part by part, and how two of them differ.

Owns ``Fingerprint`` (``measure.fingerprint`` computes it at capture). Two calls whose fingerprints are equal run
the same computation on the same kind of data in the same environment, by the same measuring protocol: their
measurements are draws of one distribution, so the only honest verdict of the later one is *unchanged*, and it
needs no timing. A part that could not be read is listed in ``unreadable``, and a fingerprint with any such part
equals no other: identity is never assumed where it was not shown.

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PARTS = ("environment", "protocol", "inputs", "parameters", "graph", "opaque", "step", "kernels")
"""The parts a fingerprint covers, in the order a difference is said: where it ran, how it was measured, what it
was handed, the model's tensors, its graphs, what the graphs call that fxprof cannot see into (leaf modules,
Python functions, custom operators), a training step's loss and optimizer, a compiled module's generated code."""

SHOWN = ("environment", "protocol")
"""The parts whose entries are short enough to be shown as they are (``torch 2.4.0 -> 2.5.0``); the others are
digests, and a difference in them says which entry changed."""

NAMED_MODULES = 5
"""How many changed modules a difference names before it counts the rest."""


def digest(*texts: str) -> str:
    """A short, stable digest of ``texts`` (the same in every process and on every machine)."""
    h = hashlib.blake2b(digest_size=12)
    for text in texts:
        h.update(text.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """A call's computation: ``parts`` (each part of ``PARTS`` as entries: name to value or digest), ``modules``
    (each module subtree's computation as a digest: its graph nodes, wiring among them and the tensors and opaque
    code they use; the model is ``""``) and ``unreadable`` (what could not be read, which makes it equal to none)."""

    parts: Mapping[str, Mapping[str, str]]
    modules: Mapping[str, str] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()

    @property
    def value(self) -> str:
        """The whole fingerprint as one digest."""
        texts = [f"{p}/{k}={v}" for p in sorted(self.parts) for k, v in sorted(self.parts[p].items())]
        return digest(*texts, *(f"unreadable={u}" for u in self.unreadable))

    @property
    def proven(self) -> bool:
        """Whether every part was read (else it proves nothing, even equal to itself)."""
        return not self.unreadable

    def same_as(self, other: Fingerprint | None) -> bool:
        """Whether this call's computation is ``other``'s: both read whole, and every part equal."""
        return other is not None and self.proven and other.proven and self.value == other.value

    def differences(self, before: Fingerprint | None) -> list[str]:
        """What differs from ``before`` (the baseline's, or the old side's), most telling first, as
        ``environment: torch 2.4.0 -> 2.5.0``, ``module layer3.0: graph changed``, ``inputs: args[0] changed``; what
        could not be read is said too. Empty where they are the same."""
        if before is None:
            return ["no fingerprint to compare with (recorded by an earlier version)"]
        out = [f"could not be read: {u}" for u in (*before.unreadable, *self.unreadable)]
        for part in PARTS:
            old, new = before.parts.get(part, {}), self.parts.get(part, {})
            for name in sorted(set(old) | set(new)):
                a, b = old.get(name), new.get(name)
                if a == b:
                    continue
                label = f"{part}: {name}"
                if a is None:
                    out.append(f"{label} is new")
                elif b is None:
                    out.append(f"{label} is gone")
                elif part in SHOWN:
                    out.append(f"{label} {a} -> {b}")
                else:
                    out.append(f"{label} changed")
        modules = changed_modules(before.modules, self.modules)
        named = [f"module {m or '<model>'}: graph changed" for m in modules[:NAMED_MODULES]]
        if len(modules) > NAMED_MODULES:
            named.append(f"and {len(modules) - NAMED_MODULES} more module(s)")
        # the modules lead: they say where in the model; the graph's own entry is then implied
        return named + [d for d in out if not (named and d.startswith("graph"))]

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "parts": {p: dict(sorted(v.items())) for p, v in sorted(self.parts.items())},
            "modules": dict(sorted(self.modules.items())),
            "unreadable": list(self.unreadable),
        }

    @classmethod
    def from_json(cls, data: Any) -> Fingerprint | None:
        """The fingerprint ``to_json`` wrote, or None where ``data`` is not one (a file of an earlier version)."""
        if not isinstance(data, dict) or not isinstance(data.get("parts"), dict):
            return None
        parts = {
            str(p): {str(k): str(v) for k, v in entries.items()}
            for p, entries in data["parts"].items()
            if isinstance(entries, dict)
        }
        modules = data.get("modules")
        unreadable = data.get("unreadable")
        return cls(
            parts,
            {str(k): str(v) for k, v in modules.items()} if isinstance(modules, dict) else {},
            tuple(str(u) for u in unreadable) if isinstance(unreadable, list) else (),
        )


CHANGES_SHOWN = 6
"""How many differences of a call's fingerprint a line names before it counts the rest."""


def changes_text(changes: list[str]) -> str:
    """What differs between two fingerprints, in one line (``Fingerprint.differences``)."""
    more = len(changes) - CHANGES_SHOWN
    return "; ".join(changes[:CHANGES_SHOWN]) + (f"; and {more} more" if more > 0 else "")


def changed_modules(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The module subtrees whose computation differs (or that are new, or gone), the deepest only: a module is
    named when none of its submodules accounts for the change (``layer3.0.conv1``, not also ``layer3.0``,
    ``layer3`` and the model)."""
    changed = sorted(m for m in set(before) | set(after) if before.get(m) != after.get(m))

    def inside(child: str, parent: str) -> bool:
        return child != parent and (parent == "" or child.startswith(parent + "."))

    return [m for m in changed if not any(inside(c, m) for c in changed)]
