"""The plumbing every cache of the library shares: where a cache lives, how a file is written so
that no reader sees half of it, and how an address is made from the bytes it depends on.

Each cache (built formulas, sweeps, executed notebooks, Sphinx's states) is a folder named by an
environment variable, ``off`` to keep nothing (:func:`cache_folder`); its entries are written
whole or not at all, since two builds may race (:func:`atomic_write`); and each entry's name is
the digest of everything it depends on (:func:`digest`), so that a changed input never reads an
old entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

#: What an environment variable says to switch a cache or a shortcut off.
OFF = ("", "off")


def cache_folder(env: str, default: Path | None = None) -> Path | None:
    """The folder the environment variable ``env`` names; ``default`` when it is unset; ``None``
    when it is empty or ``off`` (nothing is kept)."""
    value = os.environ.get(env)
    if value is None:
        return default
    value = value.strip()
    return None if value.lower() in OFF else Path(value)


def switched_on(env: str) -> bool:
    """Whether the environment variable ``env`` leaves a shortcut on: on unless it says ``off``
    (a shortcut that changes no result, only how fast it comes)."""
    return os.environ.get(env, "on").strip().lower() != "off"


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that another process reads the whole file or none: into a
    temporary file beside it, then renamed over it.  Raises ``OSError`` when the folder cannot
    be written; the temporary file never outlives the call."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_copy(source: Path, path: Path) -> None:
    """Copy the file ``source`` to ``path`` as :func:`atomic_write` writes."""
    atomic_write(path, Path(source).read_bytes())


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON, written as :func:`atomic_write` writes."""
    atomic_write(path, json.dumps(data))


def read_json(path: Path | None) -> Any:
    """The JSON kept at ``path``, or ``None`` when there is none or it cannot be read (an entry
    that cannot be read is made again and written over)."""
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def digest(*parts: bytes | str) -> str:
    """One address (a SHA-256 in hex) for ``parts``, each hashed apart, so that no two ways of
    splitting the same bytes give the same address.  Text is hashed as UTF-8."""
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part.encode("utf-8") if isinstance(part, str) else part).digest())
    return h.hexdigest()
