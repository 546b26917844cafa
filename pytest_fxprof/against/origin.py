"""Whether the old side ran the old code: where each module the process imported was loaded from.

Owns ``foreign_modules``, run inside the old side's process once its test has run: a module whose file lies in
the working tree (and not in the revision's exported tree) means the old side measured the new code (a
``sys.path`` entry or an editable install that points at the checkout), and the comparison would say nothing.
Files of the interpreter's standard library and its site-packages are never the project's, even in a virtual
environment kept inside the checkout (``.venv``); nor is pytest-fxprof, which both sides run as installed.

Must not import torch or pytest.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

from pytest_fxprof.measure.zygote import library_dirs

SELF = "pytest_fxprof"

_SEEN: dict[tuple[str, str, tuple[str, ...]], dict[str, Path | None]] = {}
"""Per check (its roots), each module file already looked at: where it was loaded from when that lies in the
working tree, else None. A process serving many tests checks its modules after each, most of them the same."""


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _under(path: str, roots: Iterable[str]) -> bool:
    """``_inside`` on resolved paths as text (thousands of modules are looked at: ``Path.parents`` is slow)."""
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def foreign_modules(
    new_root: Path, old_root: Path, modules: Mapping[str, ModuleType] | None = None, extra: Iterable[Path] = ()
) -> list[str]:
    """``name (file)`` of each loaded module the old side took from the working tree ``new_root`` (or from one
    of the ``extra`` import roots there) instead of the revision's tree ``old_root``."""
    new_root, old_root = new_root.resolve(), old_root.resolve()
    watched = [str(new_root), *(str(p.resolve()) for p in extra)]
    installed = [str(p) for p in library_dirs() if not _inside(old_root, [p])]
    seen = _SEEN.setdefault((str(new_root), str(old_root), tuple(watched)), {})
    out = []
    for name, module in sorted((modules if modules is not None else dict(sys.modules)).items()):
        if name == SELF or name.startswith(SELF + "."):
            continue
        file = getattr(module, "__file__", None)
        if not file:
            continue
        if file not in seen:
            path = Path(file).resolve()
            text = str(path)
            foreign = not _under(text, [str(old_root)]) and _under(text, watched) and not _under(text, installed)
            seen[file] = path if foreign else None
        found = seen[file]
        if found is not None:
            out.append(f"{name} ({found})")
    return out
