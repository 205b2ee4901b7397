"""Which assumptions a process reads, so that a changed assumption executes only the chapters
that read it (:mod:`dmlimits.build.chapter_reads`).

While recording (:func:`record`), every scenario made is watched (a hook in
:data:`dmlimits.core.scenario.CREATION_HOOKS`): a key is listed when its value is read, ``*``
(:data:`ALL_READ`) when the values are read whole (iterated, copied, compared, hashed, printed,
as a sweep's cache address or a copy does), and the scenario's name, description, origin and
overrides as ``@name`` and so on.  The build sets :data:`READS_ENV` in each chapter's kernel to
the file to list them in; the library starts recording when it is imported with it set
(``dmlimits/__init__.py``), before any scenario exists, and a forked kernel when it starts
(:mod:`dmlimits.build.kernel_fork`).  Scenarios resolved inside
:func:`dmlimits.core.scenario.unwatched` are not watched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmlimits.core import scenario as sc

#: The build sets this, for each chapter's kernel, to a file where the kernel lists the
#: assumptions it reads: a chapter that read none of the assumptions a reader changed is not
#: executed again.
READS_ENV = "DMLIMITS_SCENARIO_READS"
#: Listed when a process read every value at once (a copy, a hash, a comparison, a table).
ALL_READ = "*"
#: A scenario's own name, description, origin and overrides are listed as ``@name`` and so on.
META_ATTRIBUTES = ("name", "description", "origin", "overrides")
#: The first line of a list, which says that a process recorded (an empty list is not none).
RECORDING = "# the assumptions this process read"


class Recorder:
    """Appends each assumption read for the first time to a file (one per line, after the line
    :data:`RECORDING`), so that the list is whole even if the process is killed, and a process
    that read nothing leaves an empty list, not none.  Never truncates: a worker process that
    starts recording into the same file adds to the list."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: set[str] = set()
        with open(path, "a", encoding="utf-8") as f:
            if f.tell() == 0:
                f.write(RECORDING + "\n")

    def __call__(self, key: str) -> None:
        if key in self.seen or ALL_READ in self.seen:
            return
        self.seen.add(key)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(key + "\n")


_RECORDER: Recorder | None = None


def record(path: str | None) -> None:
    """List every assumption this process reads from now on in ``path`` (``None``: stop).  Only
    scenarios made while recording are watched."""
    global _RECORDER
    _RECORDER = Recorder(path) if path else None
    if _RECORDER is not None and watch not in sc.CREATION_HOOKS:
        sc.CREATION_HOOKS.append(watch)
    elif _RECORDER is None and watch in sc.CREATION_HOOKS:
        sc.CREATION_HOOKS.remove(watch)


def read_keys(path: Path) -> set[str] | None:
    """What a process listed with :func:`record`; ``None`` when it did not record."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    if not lines or lines[0] != RECORDING:
        return None
    return {line for line in lines[1:] if line and line != RECORDING}


def _read(key: str) -> None:
    if _RECORDER is not None:
        _RECORDER(key)


class WatchedValues(dict):
    """A scenario's values that tell :func:`record` what is read: one key, or every key when the
    mapping is read whole (iterated, copied, compared, pickled, printed).  Copies made from it
    are plain dictionaries: whatever they hold was listed when they were made."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        _read(key)
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        _read(key)
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        _read(str(key))
        return dict.__contains__(self, key)


def _whole(name: str):
    method = getattr(dict, name)

    def read_whole(self, *args: Any, **kwargs: Any) -> Any:
        _read(ALL_READ)
        return method(self, *args, **kwargs)

    read_whole.__name__ = name
    read_whole.__doc__ = f"Lists every value as read (``*``), then does what ``dict.{name}`` does."
    return read_whole


for _name in (
    "__iter__", "__reversed__", "keys", "items", "values", "copy", "__eq__", "__ne__",
    "__repr__", "__str__", "__or__", "__ror__", "__reduce__", "__reduce_ex__", "__sizeof__",
):  # fmt: skip
    setattr(WatchedValues, _name, _whole(_name))


class WatchedScenario(sc.Scenario):
    """A scenario made while the process lists what it reads: its name, description, origin and
    overrides are listed when read, as ``@name`` and so on; a name
    :func:`~dmlimits.core.scenario.resolve` made (none was given) as every value."""

    def __getattribute__(self, attr: str) -> Any:
        if attr in META_ATTRIBUTES:
            made = attr == "name" and object.__getattribute__(self, "__dict__").get(
                "name_was_made"
            )
            _read(ALL_READ if made else "@" + attr)
        return object.__getattribute__(self, attr)


def watch(scn: sc.Scenario) -> None:
    """The creation hook: the scenario's values and attributes report what is read of them."""
    if not isinstance(scn.values, WatchedValues):
        object.__setattr__(scn, "values", WatchedValues(scn.values))
    object.__setattr__(scn, "__class__", WatchedScenario)
