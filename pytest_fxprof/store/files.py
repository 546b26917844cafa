"""Files the plugin writes: whole or not at all, in one JSON encoding.

Owns ``write_atomic`` (a temporary file beside the target, then a rename: a reader sees the old file or the
new one, never half of either) and ``dumps``, the JSON encoding of every file the plugin writes (baselines,
reports, samples). Every view, the baseline store and the command write through here. Must not import torch,
pytest or pandas.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def dumps(data: object) -> str:
    """The one JSON encoding every file of the plugin uses."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:40]}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # the mode a plain open() would give, not mkstemp's owner-only one
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()
"""Read once, at import: reading it sets it for an instant, which would race with other threads' files."""
