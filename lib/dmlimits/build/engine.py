"""Build the book for one scenario: execute every notebook, build the HTML, swap it into place.

The order is fixed so that a failure never leaves a half-built book:

1. the scenario is validated (by the caller) before anything runs;
2. the book's sources are staged in a fresh folder under ``_build/``;
3. every notebook of the table of contents is converted from MyST Markdown and executed by
   papermill with the scenario injected as parameters (in parallel, one kernel per core);
4. Jupyter Book builds the staged sources with ``-W -n --keep-going`` (every warning an
   error): from Sphinx's state kept from the last successful build of the same sources, when
   there is one, reading only the chapters whose outputs changed (:func:`build_html`), else
   every page (``--all``);
5. only then are the HTML and the executed notebooks moved to their final place, replacing the
   previous ones.  On any failure the stage is removed and the previous book is left as it was.

Ctrl-C (SIGINT) or SIGTERM stops a build at once: every kernel and worker process is stopped,
the stage is removed and :class:`BuildInterrupted` is raised (the command exits 130 or 143).
Two builds into the same output folder cannot run at once (a lock; the second refuses with one
line), and a stage left behind by a build that was killed outright is removed by the next one.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

import yaml

from dmlimits.build.reads import read_keys
from dmlimits.core.plumbing import atomic_copy, cache_folder, digest, write_json
from dmlimits.core.scenario import DEFAULT_SCENARIO, SCHEMA, Scenario, resolve

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STAGED = ("_config.yml", "_toc.yml", "book")


class BuildError(RuntimeError):
    """The build failed; the message says where and the previous book is unchanged."""


class BuildInterrupted(BuildError):
    """The build was stopped by a signal (Ctrl-C or SIGTERM); the previous book is unchanged."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 plus the signal's number (130 for Ctrl-C, 143 for
        SIGTERM)."""
        return 128 + self.signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals():
    """While the block runs, SIGINT and SIGTERM raise :class:`BuildInterrupted` in the main
    thread (elsewhere the block runs unchanged: only the main thread receives signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        raise BuildInterrupted(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT and SIGTERM back while the block runs (the swap of the new book into place
    must not stop half-way); they are delivered when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


#: Set once a build is interrupted: no kernel starts after it (a worker thread that was about
#: to start one when the signal came refuses instead).
#:
#: :meta hide-value:
STOPPING = threading.Event()


def stop_children(grace: float = 1.0, settle: float = 0.3) -> int:
    """Terminate every process this one started (kernels, workers, jupyter-book), then kill
    those still alive after ``grace`` seconds; look again until no child has appeared for
    ``settle`` seconds (a worker thread may have been starting a kernel when the build was
    interrupted); return how many there were."""
    import psutil  # psutil loads only when a build measures its processes

    STOPPING.set()
    stopped = 0
    quiet_since = time.monotonic()
    deadline = quiet_since + grace + 1.0
    while time.monotonic() < deadline:
        children = psutil.Process().children(recursive=True)
        if not children:
            if time.monotonic() - quiet_since >= settle:
                break
            time.sleep(0.05)
            continue
        stopped += len(children)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        alive = _wait_ended(children, grace)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        _wait_ended(alive, grace)
        quiet_since = time.monotonic()
    return stopped


def _wait_ended(procs: list, timeout: float) -> list:
    """Wait up to ``timeout`` seconds for ``procs`` (psutil processes) to end; return those
    still running.  A zombie has ended: a kernel forked by the kernels' fork server
    (:mod:`dmlimits.build.kernel_fork`) is not this process's child, and once the server has gone
    nothing here can reap it (psutil.wait_procs would wait the whole timeout for it)."""
    import psutil  # psutil loads only when a build measures its processes

    def running(p: Any) -> bool:
        try:
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:  # gone (and reaped), or not ours to ask
            return False

    def own(p: Any) -> bool:
        try:
            return p.ppid() == os.getpid()
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout
    alive = list(procs)
    while True:
        alive = [p for p in alive if running(p)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    # Reap this process's children that have ended, or they would be listed again.
    psutil.wait_procs([p for p in procs if p not in alive and own(p)], timeout=1.0)
    return alive


@contextlib.contextmanager
def output_lock(final: Path):
    """Hold the lock of one output folder for the block; a second build into the same folder
    refuses at once with one line naming the build that holds it."""
    final.parent.mkdir(parents=True, exist_ok=True)
    path = final.parent / f".{final.name}.lock"
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise BuildError(
            f"another build into {final} is running ({holder}); wait for it to finish or build "
            "into another folder with --output"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


STAGE_PREFIX = ".stage-"


def remove_stale_stages(work: Path) -> list[Path]:
    """Remove the staging folders of builds that are no longer running (a build killed with
    SIGKILL cannot clean up after itself).  A stage's name carries its build's process id."""
    import psutil  # psutil loads only when a build measures its processes

    removed = []
    for stage in work.glob(f"{STAGE_PREFIX}*"):
        pid = stage.name[len(STAGE_PREFIX) :].split("-", 1)[0]
        alive = pid.isdigit() and int(pid) != os.getpid() and psutil.pid_exists(int(pid))
        if stage.is_dir() and not alive:
            shutil.rmtree(stage, ignore_errors=True)
            removed.append(stage)
    return removed


@dataclass(frozen=True)
class Timing:
    notebook: str
    seconds: float
    cached: bool = False  # taken from the cache of executed notebooks, not executed
    #: What the chapter wrote to stderr when it ran (a warning it does not handle, say).
    stderr: tuple[str, ...] = ()

    def finished_line(self, done: int, total: int) -> str:
        """The progress line of an executed chapter; a chapter that wrote to stderr is named
        there with the start of what it wrote (the page hides it with its cell, if hidden)."""
        line = f"[{done}/{total}] {self.notebook}.md  {self.seconds:.1f} s"
        for text in self.stderr:
            shown = " ".join(text.split())
            shown = shown if len(shown) <= 240 else shown[:239] + "…"
            line += f"\n      {self.notebook}.md wrote to stderr: {shown}"
        return line


def project_root() -> Path:
    """The folder holding ``_toc.yml``: the current directory or one of its parents."""
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").is_file() and (folder / "notebooks").is_dir():
            return folder
    raise BuildError(
        "cannot find the book (a folder with _toc.yml and notebooks/); run from the "
        "project's folder"
    )


def toc_notebooks(root: Path) -> list[str]:
    """The notebook sources the table of contents names, in reading order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("file"), str):
                files.append(node["file"])
            if isinstance(node.get("root"), str):
                files.append(node["root"])
            for value in node.values():
                if isinstance(value, list | dict):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    out = []
    for f in files:
        if f.startswith("notebooks/"):
            if not (root / f"{f}.md").is_file():
                raise BuildError(
                    f"_toc.yml names {f} but notebooks/{Path(f).name}.md does not exist"
                )
            out.append(f)
    return out


def notebook_parameters(scn: Scenario) -> dict:
    """What papermill injects: the preset the scenario starts from and every value that
    differs from it, so an executed notebook re-runs anywhere without extra files."""
    preset = scn.origin.removeprefix("preset ")
    base = preset if scn.origin.startswith("preset ") else DEFAULT_SCENARIO
    reference = resolve(base)
    overrides = {k: v for k, v in scn.values.items() if reference.values.get(k) != v}
    return {
        "scenario": base,
        "overrides": overrides,
        "scenario_name": scn.name,
        "scenario_origin": scn.origin,
        "scenario_description": scn.description,
    }


#: The book's editions, the default first.  The instructors' edition is today's book: every
#: exercise's solution collapsed under it, the instructors' guide and the rubrics.  The student
#: edition, built from the same sources, leaves out every solution (from the pages, the search
#: index and the copied sources) and the pages of :data:`INSTRUCTOR_PAGES`.
EDITIONS = ("instructors", "student")

#: The pages only the instructors' edition holds (as ``_toc.yml`` names them): the student
#: edition drops them from its table of contents and its staged sources.  A sentence elsewhere
#: that links one of them sits in an ``{only} instructors`` block (the tag
#: :mod:`dmlimits.build.sphinxext` sets from the edition), so the student build has no broken
#: link.  tests/test_editions.py checks that each is in the table of contents.
INSTRUCTOR_PAGES = ("book/instructors", "book/rubrics")


def check_edition(edition: str) -> str:
    """``edition`` if it is one of :data:`EDITIONS`; else a one-line :class:`ValueError`."""
    if edition not in EDITIONS:
        raise ValueError(f"edition {edition!r}: expected one of {', '.join(EDITIONS)}")
    return edition


def output_dir(root: Path, scn: Scenario, output: str | None, edition: str = EDITIONS[0]) -> Path:
    """Where the HTML goes: ``output`` if given; the instructors' edition of the default
    scenario in ``_build/html``, of any other in ``_build/scenarios/NAME/html``; the student
    edition in a ``student/html`` folder beside that ``html`` (``_build/student/html`` for the
    default scenario), never over the instructors' book."""
    if output:
        return Path(output).resolve()
    # Only the default preset itself, unchanged, is the default book.
    if scn.origin == f"preset {DEFAULT_SCENARIO}" and not scn.overrides:
        folder = root / "_build"
    else:
        folder = root / "_build" / "scenarios" / scn.slug
    return folder / "html" if edition == EDITIONS[0] else folder / edition / "html"


def _say(message: str) -> None:
    print(message, flush=True)


def bar(fraction: float, width: int = 20) -> str:
    """A text progress bar: ``bar(0.5, 8) == "████░░░░"``."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


class Progress:
    """Progress of the notebooks' execution: every notebook's cells and the whole build.

    On a terminal one status line is redrawn as cells finish (the overall bar, then a bar for
    each running notebook); in a log (CI, a pipe) a line is printed when a notebook starts and
    when it ends, with the overall bar, so the log stays short."""

    def __init__(self, cells: dict[str, int], stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.cells = cells
        self.done_cells = dict.fromkeys(cells, 0)
        self.running: list[str] = []
        self.finished = 0
        self.lock = threading.Lock()

    def _status(self) -> str:
        parts = [f"{bar(self.finished / len(self.cells))} {self.finished}/{len(self.cells)}"]
        for name in self.running:
            done, total = self.done_cells[name], max(1, self.cells[name])
            parts.append(f"{Path(name).name} {bar(done / total, 10)} {done}/{total}")
        return " | ".join(parts)

    def _write(self, line: str | None) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
        if line is not None:
            self.stream.write(line + "\n")
        if self.tty and self.running:
            self.stream.write(self._status()[:200])
        self.stream.flush()

    def start(self, name: str) -> None:
        with self.lock:
            self.running.append(name)
            self._write(f"  started  {name}.md ({self.cells[name]} cells)")

    def cell_done(self, name: str) -> None:
        with self.lock:
            self.done_cells[name] += 1
            if self.tty:
                self._write(None)

    def finish(self, name: str, line: str) -> None:
        with self.lock:
            if name in self.running:
                self.running.remove(name)
            self.finished += 1
            self._write(f"  {bar(self.finished / len(self.cells))} {line}")


def ipc_kernel_manager(socket_dir: Path, reads: Path | None = None, forks: Any = None):
    """Kernels talk to papermill over local IPC sockets (in ``socket_dir``, a short path under
    the system's temporary folder: socket paths are limited in length) rather than TCP.  With
    ``reads``, the kernel lists there the assumptions it reads
    (:mod:`dmlimits.build.chapter_reads`).
    With ``forks`` (a started :class:`dmlimits.build.kernel_fork.ForkServer`), the kernel is forked
    from it rather than started as a new interpreter."""
    # the build's notebook tools load only when building
    from jupyter_client.manager import AsyncKernelManager

    # the build's parent process imports no more of the library than it runs
    from dmlimits.build import kernel_fork

    # the build's parent process imports no more of the library than it runs
    from dmlimits.build.reads import READS_ENV

    class IpcKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("ip", str(Path(tempfile.mkdtemp(dir=socket_dir)) / "k"))
            super().__init__(**kwargs)
            self.client_factory = _ready_client()

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            if STOPPING.is_set():  # the build was interrupted: start no kernel
                raise RuntimeError("the build was interrupted: no kernel is started")
            if reads is not None:
                kw["env"] = {**(kw.get("env") or os.environ), READS_ENV: str(reads)}
            if forks is not None and kernel_fork.forkable(kernel_cmd):
                self._fork_from(forks)
            return await super()._async_launch_kernel(kernel_cmd, **kw)

        def _fork_from(self, forks: Any) -> None:
            """Make the provisioner fork its kernel from ``forks`` (as jupyter_client's local
            provisioner records a kernel it started), or start it itself when that fails."""
            provisioner = self.provisioner
            started_here = type(provisioner).launch_kernel

            async def launch(cmd: list[str], **kwargs: Any) -> Any:
                cwd = str(kwargs.get("cwd") or Path.cwd())
                # As jupyter_client's launch_kernel sets it: a kernel with a parent prints no
                # banner, and exits when its parent (here the fork server) is gone.
                env = {**(kwargs.get("env") or os.environ), "JPY_PARENT_PID": str(os.getpid())}
                proc = forks.launch(cmd, env, cwd)
                if proc is None:
                    return await started_here(provisioner, cmd, **kwargs)
                provisioner.process, provisioner.pid = proc, proc.pid
                provisioner.pgid = proc.pid  # the child is the leader of its own session
                provisioner.cwd = cwd
                return provisioner.connection_info

            provisioner.launch_kernel = launch

        _launch_kernel = _async_launch_kernel

        async def _async_finish_shutdown(self, waittime=None, pollinterval=0.1, restart=False):
            # A kernel ends soon after answering its shutdown request, well within
            # jupyter_client's poll of a tenth of a second: look for its end every
            # SHUTDOWN_POLL seconds instead.
            await super()._async_finish_shutdown(waittime, SHUTDOWN_POLL, restart)

        finish_shutdown = _async_finish_shutdown

        async def _async_interrupt_kernel(self):
            # jupyter_client interrupts every kernel before shutting it down.  A kernel whose
            # notebook has run is idle, and an idle ipykernel that receives the interrupt logs
            # "ERROR | KeyboardInterrupt caught in kernel" to the build's output, which reads as
            # a failure.  Only an interrupted build needs it, to stop a cell that is running.
            if self.shutting_down and not STOPPING.is_set():
                return
            await super()._async_interrupt_kernel()

        interrupt_kernel = _async_interrupt_kernel

    return IpcKernelManager


#: Seconds between two looks at whether a kernel asked to shut down has ended.
SHUTDOWN_POLL = 0.01
#: Seconds the kernel's answer to ``kernel_info`` may take to reach the output channel (IOPub)
#: once its reply has come on the shell channel, before the request is sent again.
IOPUB_CONNECTED_WAIT = 0.2


def _ready_client() -> type:
    """jupyter_client's asynchronous kernel client, ready as soon as the kernel is.

    A kernel is ready when it has answered ``kernel_info`` on the shell channel and its output
    channel (IOPub) carries messages to the client (a subscription connects asynchronously:
    the request is sent again until a message arrives there).  jupyter_client's own
    ``wait_for_ready`` then also waits for IOPub to stay quiet for 0.2 s, discarding what
    arrives: a wait at every chapter's start in which the kernel sits idle, often in both
    build workers at once.  Here what has already arrived is discarded without waiting; a
    message of the kernel's start that comes later answers no cell's request, and nbclient
    only reads a cell's own messages."""
    # the build's notebook tools load only when building
    from jupyter_client.asynchronous import AsyncKernelClient

    class ReadyClient(AsyncKernelClient):
        async def wait_for_ready(self, timeout: float | None = None) -> None:
            deadline = time.monotonic() + (math.inf if timeout is None else timeout)
            while True:
                self.kernel_info()
                try:
                    reply = await self.shell_channel.get_msg(timeout=1)
                except Empty:
                    reply = None
                if reply is not None and reply["msg_type"] == "kernel_info_reply":
                    try:
                        await self.iopub_channel.get_msg(timeout=IOPUB_CONNECTED_WAIT)
                    except Empty:
                        pass
                    else:
                        self._handle_kernel_info_reply(reply)
                        break
                if not await self._async_is_alive():
                    raise RuntimeError("the kernel died before answering kernel_info")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the kernel did not answer within {timeout} s")
            while True:  # what has already arrived on IOPub, without waiting for more
                try:
                    await self.iopub_channel.get_msg(timeout=0)
                except Empty:
                    break

    return ReadyClient


def parameters_for(nb: Any, params: dict) -> dict:
    """The parameters a notebook declares in its cell tagged ``parameters``: every notebook
    takes the scenario, its overrides and its name; a few (the assumptions page) take more."""
    declared = "\n".join(
        c.source for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])
    )
    names = set(re.findall(r"^(\w+)\s*=", declared, flags=re.M))
    return {k: v for k, v in params.items() if k in names}


#: The cache of executed notebooks: this environment variable names its folder ("off": no
#: cache); a build uses ``_build/cache/notebooks`` unless it is set.
NOTEBOOK_CACHE_ENV = "DMLIMITS_NOTEBOOK_CACHE"


def notebook_cache_dir(work: Path) -> Path | None:
    """Where executed notebooks are cached, or ``None`` when the cache is off."""
    return cache_folder(NOTEBOOK_CACHE_ENV, work / "cache" / "notebooks")


#: Where the chapters' parsed sources are kept, under the cache of executed notebooks.
SOURCES = "sources"


def read_source(root: Path, name: str) -> Any:
    """The chapter ``name`` as a notebook: jupytext's parse of its MyST source (MyST whatever
    the header says).  With the notebook cache on, the parse is kept in it, addressed by the
    source's bytes, the pinned environment (jupytext's version) and the Python: a build that
    finds them all reads its chapters without importing jupytext or parsing, work its own
    process would otherwise do before the first chapter can start."""
    import nbformat  # the build's notebook tools load only when building

    text = (root / f"{name}.md").read_bytes()
    cache = notebook_cache_dir(root / "_build")
    kept = None
    if cache is not None:
        requirements = root / "requirements.txt"
        pins = requirements.read_bytes() if requirements.is_file() else b""
        kept = cache / SOURCES / f"{digest(b'md:myst', text, pins, sys.version.encode())}.json"
        try:
            nb = nbformat.from_dict(json.loads(kept.read_text(encoding="utf-8")))
        except (OSError, ValueError):  # none yet, or unreadable: parse again
            pass
        else:
            with contextlib.suppress(OSError):  # used now (what prune_notebook_cache keeps)
                os.utime(kept)
            return nb
    import jupytext  # the build's notebook tools load only when building

    nb = jupytext.reads(text.decode("utf-8"), fmt="md:myst")
    if kept is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written is still read
            write_json(kept, nb)
    return nb


def source_key(root: Path, name: str) -> str:
    """The address of a chapter's source and everything it runs on, without its parameters:
    executions with equal source keys differ only by the scenario they were given
    (:mod:`dmlimits.build.chapter_reads`)."""
    return digest(name.encode(), (root / f"{name}.md").read_bytes(), *_environment(root))


def notebook_key(root: Path, name: str, parameters: dict) -> str:
    """The address of a notebook's execution: everything its outputs can depend on.

    A chapter's kernel reads nothing but its own source, the parameters papermill injects and the
    library (its code, data files and presets: :func:`dmlimits.search.sweeps.library_fingerprint`),
    run by the pinned environment (requirements.txt) on one Python.  A change to any of these gives
    another address, so a cached execution is never read for other inputs."""
    return digest(
        name.encode(),
        (root / f"{name}.md").read_bytes(),
        json.dumps(parameters, sort_keys=True, default=repr).encode(),
        *_environment(root),
    )


def _environment(root: Path) -> tuple[bytes, ...]:
    """What every cached result of a build depends on besides its own inputs: the library's
    files (:func:`dmlimits.search.sweeps.library_fingerprint`), the pinned environment and the
    Python."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits import search

    requirements = root / "requirements.txt"
    return (
        search.library_fingerprint().encode(),
        requirements.read_bytes() if requirements.is_file() else b"",
        sys.version.encode(),
    )


def cached_copy(cache: Path | None, key: str, target: Path) -> bool:
    """Copy the cached execution ``key`` to ``target`` and mark it used now (what
    :func:`prune_notebook_cache` keeps); False when there is none."""
    if cache is None:
        return False
    source = cache / f"{key}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(source, target)
    except FileNotFoundError:  # none, or removed by another build's pruning
        return False
    with contextlib.suppress(OSError):  # a cache that cannot be written is still read
        os.utime(source)
    return True


#: The cache of executed notebooks is kept under this many bytes: after a build, the
#: executions used longest ago are removed first.  A build of the book adds about ten
#: megabytes; the default book's executions are used by every build and stay.
NOTEBOOK_CACHE_BYTES = 512 * 2**20
#: The sweep cache (:data:`dmlimits.search.sweeps.CACHE_ENV`) likewise: a build for another scenario
#: adds a few megabytes of sweeps (about 40 kB each), and a change to the search makes every
#: kept sweep stale at once.
SWEEP_CACHE_BYTES = 256 * 2**20


def _prune_oldest(folder: Path | None, pattern: str, limit: int) -> int:
    """Remove the files of ``folder`` matching ``pattern`` used longest ago (their modification
    time: a read marks a file used) until they hold at most ``limit`` bytes; return how many
    were removed.  A file being written (``.tmp-*``, renamed into place when whole) is left
    alone: another build is writing it."""
    if folder is None or not folder.is_dir():
        return 0
    files = []
    for path in folder.glob(pattern):
        if path.name.startswith("."):
            continue
        try:
            st = path.stat()
        except FileNotFoundError:  # removed by another build's pruning
            continue
        files.append((st.st_mtime_ns, st.st_size, path))
    files.sort(key=lambda f: f[0], reverse=True)
    kept = removed = 0
    for _, size, path in files:
        kept += size
        if kept > limit:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def prune_notebook_cache(cache: Path | None, limit: int = NOTEBOOK_CACHE_BYTES) -> int:
    """Remove the executions used longest ago until the cache holds at most ``limit`` bytes;
    return how many were removed.  A list of reads that names a removed execution is left: it
    is no longer offered (:func:`dmlimits.build.chapter_reads.reusable`).  The chapters' parsed
    sources kept beside them (:data:`SOURCES`, about a megabyte for the whole book) are held
    to a hundredth of ``limit`` alike, and not counted."""
    if cache is not None:
        _prune_oldest(cache / SOURCES, "*.json", limit // 100)
    return _prune_oldest(cache, "*.ipynb", limit)


def prune_sweep_cache(folder: Path | None, limit: int = SWEEP_CACHE_BYTES) -> int:
    """Remove the sweeps used longest ago (a read marks one used) until the cache holds at
    most ``limit`` bytes; return how many were removed.  A sweep removed under a reader is
    computed again."""
    return _prune_oldest(folder, "*.json", limit)


def cache_store(cache: Path | None, key: str, executed: Path) -> None:
    """Add an execution to the cache atomically (a reader sees the whole notebook or none)."""
    if cache is None:
        return
    atomic_copy(executed, cache / f"{key}.ipynb")


def execute_one(
    root: Path, stage: Path, name: str, params: dict, socket_dir: Path,
    progress: Progress | None = None, reads: Path | None = None, forks: Any = None,
    source: Any = None,
) -> Timing:  # fmt: skip
    """Execute the chapter ``name`` into ``stage``; ``source``: its source as
    :func:`read_source` gave it, when the caller has read it already (a copy is executed)."""
    import nbformat  # the build's notebook tools load only when building
    import papermill as pm  # the build's notebook tools load only when building

    target = stage / f"{name}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nb = read_source(root, name) if source is None else copy.deepcopy(source)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    # Paths are resolved relative to the staged notebook; keep jupytext's pairing out of it.
    nb.metadata.pop("jupytext", None)
    unexecuted = target.with_suffix(".source.ipynb")
    nbformat.write(nb, unexecuted)  # as jupytext writes an .ipynb, its pairing dropped
    start = time.perf_counter()
    hooks: dict[str, Any] = {}
    if progress is not None:
        progress.start(name)

        def on_cell_executed(**_: Any) -> None:
            progress.cell_done(name)

        hooks["on_cell_executed"] = on_cell_executed
    try:
        pm.execute_notebook(
            str(unexecuted),
            str(target),
            parameters=parameters_for(nb, params),
            kernel_name="python3",
            cwd=str(target.parent),
            progress_bar=False,
            log_output=False,
            report_mode=False,
            # The notebook is written once, when it ends or fails, not after every cell as
            # well: one write a chapter rather than one a cell.
            request_save_on_cell_execute=False,
            kernel_manager_class=ipc_kernel_manager(socket_dir, reads, forks),
            **hooks,
        )
    finally:
        unexecuted.unlink(missing_ok=True)
    stderr = hide_injected_parameters(target)
    return Timing(name, time.perf_counter() - start, stderr=stderr)


@contextlib.contextmanager
def outputs_checked_whole():
    """While the chapters run, nbformat does not check each output against the notebook
    schema as the kernel sends it: each executed notebook is checked whole instead, strictly,
    once it is written (``hide_injected_parameters``).

    nbformat checks every output it builds from a kernel's message with jsonschema, a slow
    check repeated for each of the book's 2,800 or so outputs, in the build's own process and
    so on the cores the kernels need.  The whole notebook's check (fastjsonschema) is one
    fast check a chapter, and nbformat makes it anyway when the notebook is read and written,
    but only logs what it finds: here a notebook that fails it fails the build.  Restored on
    the way out, whatever happens."""
    from nbformat.v4 import nbbase  # the build's notebook tools load only when building

    checked = nbbase.validate
    nbbase.validate = not_checked_yet
    try:
        yield
    finally:
        nbbase.validate = checked


def not_checked_yet(node: Any, ref: str | None = None) -> None:
    """In place of ``nbformat.v4.nbbase.validate`` (:func:`outputs_checked_whole`)."""


def hide_injected_parameters(path: Path) -> tuple[str, ...]:
    """Keep papermill's injected-parameters cell (for re-execution) but out of the page.
    The notebook is checked whole against the notebook schema on the way: a notebook that
    fails the check raises :class:`BuildError` (:func:`outputs_checked_whole`).  Returns what
    its cells wrote to stderr."""
    import nbformat  # the build's notebook tools load only when building

    found: dict[str, Any] = {}
    nb = nbformat.read(path, as_version=4, capture_validation_error=found)
    if "ValidationError" in found:
        raise BuildError(
            f"{path.name} is not a valid notebook after its execution (nbformat "
            f"{nbformat.__version__}'s schema): {found['ValidationError']}"
        )
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, path)
    return stream_texts(nb, "stderr")


def stream_texts(nb: Any, name: str) -> tuple[str, ...]:
    """What the cells of the notebook ``nb`` (nbformat's) wrote to the stream ``name``
    (``"stdout"`` or ``"stderr"``), one text per output."""
    return tuple(
        out.text if isinstance(out.text, str) else "".join(out.text)
        for cell in nb.cells
        for out in cell.get("outputs", ())
        if out.get("output_type") == "stream" and out.get("name") == name
    )


def _describe_failure(name: str, exc: BaseException, stage: Path) -> str:
    """The failing cell and its traceback, without colour codes."""
    lines = [f"notebook {name}.md failed"]
    cell = getattr(exc, "exec_count", None)
    if cell is not None:
        lines[0] += f" in the cell executed as [{cell}]"
    source = getattr(exc, "cell_source", None) or ""
    if not source:
        executed = stage / f"{name}.ipynb"
        if executed.is_file():
            import nbformat  # the build's notebook tools load only when building

            nb = nbformat.read(executed, as_version=4)
            for c in nb.cells:
                for out in c.get("outputs", []):
                    if out.get("output_type") == "error":
                        source = c.source
    if source:
        lines.append("--- cell source ---")
        lines.extend(source.splitlines())
    lines.append("--- traceback ---")
    tb = getattr(exc, "traceback", None)
    if tb:
        lines.extend(ANSI.sub("", t) for t in tb)
    else:
        ename, evalue = getattr(exc, "ename", type(exc).__name__), getattr(exc, "evalue", exc)
        lines.append(f"{ename}: {evalue}")
    return "\n".join(lines)


def code_cells(source: Path) -> int:
    """How many code cells a MyST notebook has (what its progress bar counts; papermill's
    injected parameters cell adds one)."""
    text = source.read_text()
    return len(re.findall(r"^```\{code-cell\}", text, flags=re.M)) + 1


SECONDS_FILE = ".notebook-seconds.json"  # under _build/: each notebook's last execution time


def schedule(names: list[str], work: Path) -> list[str]:
    """The order to start notebooks in: the slowest of the last successful build first (so the
    workers finish together), notebooks never timed before them in reading order."""
    try:
        seconds = json.loads((work / SECONDS_FILE).read_text())
    except (OSError, ValueError):
        seconds = {}
    if not isinstance(seconds, dict):
        seconds = {}

    def cost(name: str) -> float:
        value = seconds.get(name)
        return float(value) if isinstance(value, (int, float)) else math.inf

    return sorted(names, key=lambda n: (-cost(n), names.index(n)))


def remember_seconds(work: Path, timings: list[Timing]) -> None:
    """Keep each executed notebook's time for :func:`schedule`; a notebook read from the cache
    keeps the time it took when it last ran."""
    path = work / SECONDS_FILE
    try:
        seconds = json.loads(path.read_text())
    except (OSError, ValueError):
        seconds = {}
    if not isinstance(seconds, dict):
        seconds = {}
    seconds.update({t.notebook: round(t.seconds, 1) for t in timings if not t.cached})
    path.write_text(json.dumps(seconds, indent=1))


def execute_notebooks(
    root: Path, stage: Path, names: list[str], params: dict, jobs: int,
    scn: Scenario | None = None, forks: Any = "own",
) -> list[Timing]:  # fmt: skip
    """Execute every notebook into ``stage``.  A notebook whose execution the cache holds
    (:func:`notebook_key`) is copied from it instead of executed again; so is, given the
    build's scenario ``scn``, one executed for another scenario that agrees on every
    assumption it read (:mod:`dmlimits.build.chapter_reads`).  The kernels are forked from
    ``forks``, a started :class:`dmlimits.build.kernel_fork.ForkServer` that the caller closes
    (``None``: each kernel starts on its own), or, with ``"own"``, from a server started here
    when a notebook is to be executed."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits.build import chapter_reads

    total = len(names)
    cache = notebook_cache_dir(root / "_build")
    sources = {n: read_source(root, n) for n in names}
    keys = {n: notebook_key(root, n, parameters_for(sources[n], params)) for n in names}
    timings = [
        Timing(n, 0.0, cached=True)
        for n in names
        if cached_copy(cache, keys[n], stage / f"{n}.ipynb")
    ]
    hits = {t.notebook for t in timings}
    # Chapters whose reads can be listed: their executions may serve other scenarios.
    watched = {
        n for n in names
        if cache is not None and scn is not None
        and chapter_reads.reads_only_through_the_scenario(sources[n].cells) is None
    }  # fmt: skip
    source_keys = {n: source_key(root, n) for n in watched}
    copied: list[tuple[str, list[str]]] = []  # chapters copied and what they read
    for n in sorted(watched - hits, key=names.index):
        found = chapter_reads.reusable(cache, source_keys[n], scn)
        if found is None or not cached_copy(cache, found[0], stage / f"{n}.ipynb"):
            continue
        copied.append((n, found[1]))
        timings.append(Timing(n, 0.0, cached=True))
        hits.add(n)
    reused = len(copied)

    def parameterize_copies() -> None:
        """Give each copy this build's parameters, and keep it under this build's address:
        done once the first chapters run (it reads and writes whole notebooks)."""
        for n, read in copied:
            path = stage / f"{n}.ipynb"
            chapter_reads.reparameterize(path, parameters_for(sources[n], params), read)
            cache_store(cache, keys[n], path)

    todo = [n for n in schedule(names, root / "_build") if n not in hits]
    failures: list[str] = []
    where = "cache off" if cache is None else f"{len(hits)} unchanged, read from the cache"
    if reused:
        where += (
            f"; {reused} of them executed for another scenario, which agrees on every "
            "assumption they read"
        )
    _say(f"executing {len(todo)} of {total} notebook(s) with {jobs} worker(s) ({where})")
    if not todo:
        parameterize_copies()
        return sorted(timings, key=lambda t: names.index(t.notebook))
    socket_dir = Path(tempfile.mkdtemp(prefix="dmlimits-kernels-"))
    reads = {n: socket_dir / f"{i}.reads" for i, n in enumerate(todo) if n in watched}
    progress = Progress({n: code_cells(root / f"{n}.md") for n in todo})
    own_server = isinstance(forks, str) and forks == "own"
    if own_server:
        forks = fork_server()
    # papermill enters each notebook's folder for its run (os.chdir, for the whole process) and
    # goes back to the folder it found; two runs at once can leave the process in a staged
    # folder (one goes back to where the other had gone). Every chapter has the same folder, so
    # each kernel starts in the right one; the process goes back to its own when they end.
    here = os.getcwd()
    pool = ThreadPoolExecutor(max_workers=jobs)
    with outputs_checked_whole():  # each notebook is checked whole once it is written
        try:
            futures = {
                pool.submit(execute_one, root, stage, n, params, socket_dir, progress,
                            reads.get(n), forks, source=sources[n]): n
                for n in todo
            }  # fmt: skip
            parameterize_copies()  # while the first kernels start
            for done, future in enumerate(as_completed(futures), start=1):
                name = futures[future]
                try:
                    t = future.result()
                except Exception as exc:  # a notebook raised: report it fully, then fail
                    failures.append(_describe_failure(name, exc, stage))
                    progress.finish(name, f"[{done}/{len(todo)}] FAILED {name}.md")
                    continue
                timings.append(t)
                cache_store(cache, keys[name], stage / f"{name}.ipynb")
                if name in reads:
                    chapter_reads.remember(
                        cache, source_keys[name], keys[name], scn, read_keys(reads[name])
                    )
                progress.finish(name, t.finished_line(done, len(todo)))
        except BaseException:
            # Interrupted: start nothing new and stop the kernels now, without waiting for them.
            pool.shutdown(wait=False, cancel_futures=True)
            stop_children()
            raise
        finally:
            shutil.rmtree(socket_dir, ignore_errors=True)
    pool.shutdown(wait=True)
    os.chdir(here)
    if own_server and forks is not None:
        forks.close()
    if failures:
        raise BuildError("\n\n".join(failures))
    return sorted(timings, key=lambda t: names.index(t.notebook))


def fork_server() -> Any:
    """A started fork server for the chapters' kernels (:mod:`dmlimits.build.kernel_fork`), or
    ``None`` when it is switched off or cannot be started (each kernel is then started as its
    own process)."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits.build import kernel_fork

    if not kernel_fork.enabled():
        return None
    forks = kernel_fork.ForkServer()
    if not forks.start():
        _say("could not start the kernels' fork server: each kernel starts on its own")
        return None
    return forks


def keep_formulas(work: Path) -> None:
    """Keep the built formulas between the build's processes (the sweeps' workers and the
    notebooks' kernels inherit the variable): ``_build/cache/formulas`` unless the environment
    names another folder, or ``off`` (:mod:`dmlimits.core.formula_cache`)."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits.core import formula_cache

    os.environ.setdefault(formula_cache.CACHE_ENV, str(work / "cache" / "formulas"))


def keep_sweeps(work: Path) -> None:
    """Keep the sweeps on disk, where every process of the build reads them:
    ``_build/cache/sweeps`` unless the environment names another folder, or ``off``
    (:data:`dmlimits.search.sweeps.CACHE_ENV`)."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits import search

    os.environ.setdefault(search.CACHE_ENV, str(work / "cache" / "sweeps"))


def sweep_up_front(scn: Scenario, work: Path, jobs: int) -> None:
    """Sweep every scenario the chapters read, once, on every core, into the disk cache that
    the notebooks' kernels then read (``_build/cache/sweeps`` unless the environment names
    another folder, or ``off``): those of :func:`dmlimits.book.book_sweeps.scenarios_swept`, then
    those that depend on their results (:func:`dmlimits.book.book_sweeps.scenarios_swept_next`).
    Meanwhile the model's closed forms the chapters read are built and kept
    (:func:`start_keeping_closed_forms`)."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits import search

    # the build's parent process imports no more of the library than it runs
    from dmlimits.book import book_sweeps

    keep_sweeps(work)
    if search.cache_path(scn) is None:
        _say("sweep cache off: every notebook sweeps what it needs")
        return
    started = time.perf_counter()
    first = book_sweeps.scenarios_swept(scn)
    helper = start_keeping_closed_forms([scn, *first])
    try:
        swept = _sweep_round(first, "first", jobs)
        later = book_sweeps.scenarios_swept_next(scn)  # read from the first round's results
        swept += _sweep_round(later, "next", jobs)
    except BaseException:
        if helper is not None:
            helper.terminate()
        raise
    if helper is not None:
        helper.join()
    if swept:
        _say(f"  swept in {time.perf_counter() - started:.1f} s")
    else:
        _say(f"all {len(first) + len(later)} sweeps the chapters read are cached")


def _sweep_round(scns: list[Scenario], order: str, jobs: int) -> int:
    """Sweep those of ``scns`` that the cache lacks, with a progress bar; how many."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits import search

    todo = [s for s in scns if not search.cache_path(s).is_file()]
    if not todo:
        return 0
    _say(f"sweeping {len(todo)} of the {len(scns)} scenarios the chapters read {order}, "
         f"on {jobs} core(s)")  # fmt: skip
    count = [0]

    def progress(_scn: Scenario, _seconds: float) -> None:
        count[0] += 1
        if count[0] % max(1, len(todo) // 4) == 0 or count[0] == len(todo):
            _say(f"  {bar(count[0] / len(todo))} {count[0]}/{len(todo)} swept")

    search.sweep_many(todo, jobs=jobs, progress=progress)
    return len(todo)


def start_keeping_closed_forms(scns: list[Scenario]) -> Any:
    """Build and keep on disk, in a process of its own, the model's closed forms
    (:func:`dmlimits.costs.model.keep_closed_forms`) for each sparsity and batch law of ``scns``;
    the process, or ``None`` when the formulas are not kept on disk or these are kept already.

    The chapters read them, and the search does not build them: without this, the first chapter
    to read them would build them all, a long task in one chapter's kernel while the other
    kernel runs.  Started with the sweeps, it takes a core that is otherwise idle while the
    search builds its own formulas before its workers start.  If it fails, the chapters build
    what it did not keep, and fail there, loudly."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits.core import formula_cache

    # the build's parent process imports no more of the library than it runs
    from dmlimits.costs import model

    laws = list(dict.fromkeys((bool(x["model.sparse"]), str(x["batch.law"])) for x in scns))
    if formula_cache.cache_dir() is None or all(model.closed_forms_kept(*law) for law in laws):
        return None
    helper = multiprocessing.get_context("fork").Process(
        target=_build_closed_forms, args=(laws,), daemon=True
    )
    helper.start()
    return helper


def _build_closed_forms(laws: list[tuple[bool, str]]) -> None:
    # the build's parent process imports no more of the library than it runs
    from dmlimits.costs import model

    for signum in STOP_SIGNALS:  # stopped at once with the build, not by its handler
        signal.signal(signum, signal.SIG_DFL)
    # A failure here is met again, and reported, by the chapter that reads the formula.
    with contextlib.suppress(Exception):
        for law in laws:
            model.keep_closed_forms(*law)


#: The environment variable that tells the build the public repository's URL (the publishing
#: workflow sets it); ``repository.url`` in _config.yml does the same for every build.
REPOSITORY_ENV = "DMLIMITS_REPOSITORY_URL"
_REPOSITORY_URL = re.compile(r"https://[A-Za-z0-9.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def repository_url(config: dict) -> str:
    """The public repository's URL: :data:`REPOSITORY_ENV` if set, else ``repository.url`` of
    _config.yml, else ``""``.  A URL that is not ``https://HOST/OWNER/NAME`` raises
    :class:`RepositoryError` naming it (the command checks it before anything is built)."""
    url = os.environ.get(REPOSITORY_ENV, "").strip()
    where = REPOSITORY_ENV
    if not url:
        url = str((config.get("repository") or {}).get("url") or "").strip()
        where = "repository.url in _config.yml"
    url = url.rstrip("/").removesuffix(".git")
    if url and not _REPOSITORY_URL.fullmatch(url):
        raise RepositoryError(
            f"{where}: {url!r} is not a repository URL; expected https://HOST/OWNER/NAME, "
            "for example https://github.com/OWNER/data-movement-limits"
        )
    return url


class RepositoryError(ValueError):
    """The repository URL the build was given is not one (a one-line message)."""


def check_repository(root: Path | None = None) -> str:
    """:func:`repository_url` for the project's _config.yml, before anything is built."""
    root = root or project_root()
    return repository_url(yaml.safe_load((root / "_config.yml").read_text()))


def stage_config(stage: Path, edition: str = EDITIONS[0]) -> None:
    """Launch buttons and the repository button need the public repository's URL (the theme
    fails without one).  With it (:func:`repository_url`), the staged copy shows the repository
    button, the issues button (every page's way to report a problem; without a URL
    :mod:`dmlimits.build.sphinxext` links every page to the errata page instead) and a Binder
    launch button (Binder opens the MyST notebooks through jupytext; Colab cannot open them, so
    it has none); without it, it leaves them all out and says so.  The edition
    (:func:`stage_edition`) is written into the staged configuration, so that the two editions'
    Sphinx states never mix."""
    path = stage / "_config.yml"
    config = yaml.safe_load(path.read_text())
    url = repository_url(config)
    if url:
        config.setdefault("repository", {})["url"] = url
        config.setdefault("html", {})["use_repository_button"] = True
        config["html"]["use_issues_button"] = True
        (config.get("launch_buttons") or {}).pop("colab_url", None)
        _say(f"launch buttons on, for {url}")
    else:
        config.pop("launch_buttons", None)
        config.pop("repository", None)
        _say(f"launch buttons off: set {REPOSITORY_ENV} or repository.url in _config.yml")
    stage_edition(stage, config, edition)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def stage_edition(stage: Path, config: dict, edition: str) -> None:
    """Make the staged book ``edition``'s: its name goes into the Sphinx configuration
    (``dmlimits_edition``, which sets the ``only`` tag of the same name; the instructors'
    edition is the extension's default and is not written).  The student edition also
    switches on sphinx-exercise's ``hide_solutions`` (its directive then makes no node at all,
    so a solution is in neither the pages nor the search index), copies no page source into
    the output (``_sources`` would hold every solution; :mod:`dmlimits.build.sphinxext` takes
    the download button, which offers them, off the pages), and drops
    :data:`INSTRUCTOR_PAGES` from the staged table of contents and sources."""
    if check_edition(edition) == EDITIONS[0]:
        return  # the extension's default: the configuration, and so its key, as it always was
    sphinx = config.setdefault("sphinx", {}).setdefault("config", {})
    sphinx["dmlimits_edition"] = edition
    sphinx["hide_solutions"] = True
    sphinx["html_copy_source"] = False
    toc_path = stage / "_toc.yml"
    toc = yaml.safe_load(toc_path.read_text())

    def drop(node: object) -> object:
        if isinstance(node, dict):
            return {k: drop(v) for k, v in node.items()}
        if isinstance(node, list):
            return [
                drop(v) for v in node
                if not (isinstance(v, dict) and v.get("file") in INSTRUCTOR_PAGES)
            ]  # fmt: skip
        return node

    toc_path.write_text(yaml.safe_dump(drop(toc), sort_keys=False))
    for page in INSTRUCTOR_PAGES:
        (stage / f"{page}.md").unlink(missing_ok=True)
    _say(f"student edition: no solutions; left out {', '.join(INSTRUCTOR_PAGES)}")


def start_html(config: Path, library: bool) -> subprocess.Popen:
    """The process that will build the HTML, started now: it imports Jupyter Book, Sphinx, the
    extensions ``config`` names and, with ``library``, this library, then waits for its command
    (:mod:`dmlimits.build.jupyter_book_run`'s ``--preload``; :func:`build_html` sends it)."""
    cmd = [sys.executable, "-m", "dmlimits.build.jupyter_book_run", "--preload", str(config)]
    # In a session of its own, with Sphinx's reading and writing processes: interrupted, the
    # build kills them all at once (killing the command alone would leave them reading on,
    # orphaned, out of reach of stop_children).
    return subprocess.Popen([*cmd, *(["--library"] if library else [])], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=config.parent, start_new_session=True)  # fmt: skip


def _jupyter_book(
    stage: Path, every_page: bool = True, jobs: int = 1, started: subprocess.Popen | None = None
) -> None:
    """Jupyter Book builds the HTML of ``stage`` into ``stage/_build/html``, strictly (every
    warning an error), Sphinx in ``jobs`` processes: in ``started`` (from :func:`start_html`)
    when given, else in a process started here.  ``every_page=False`` lets Sphinx read and
    write only the pages whose sources changed since its last build in that folder (see
    :func:`sphinx_state`)."""
    flags = ["--all"] if every_page else []
    flags += ["-W", "-n", "--keep-going"]
    args = ["build", str(stage), *flags, "--path-output", str(stage)]
    _say("building the HTML: " + " ".join(["jupyter-book", *args[:2], *flags])
         + (f" (Sphinx in {jobs} processes)" if jobs > 1 else ""))  # fmt: skip
    # jupyter-book's own command, run by dmlimits.build.jupyter_book_run: the same command line,
    # without a normal exit's taking Sphinx's heap apart object by object, Sphinx in parallel.
    if started is not None and started.poll() is not None:
        started.communicate()  # it ended before its command (killed): start another
        started = None
    proc = started or start_html(stage / "_config.yml", library=False)
    command = {"argv": ["--jobs", str(jobs), *args], "cwd": str(stage)}
    try:
        stdout, stderr = proc.communicate(json.dumps(command) + "\n")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0 or not (stage / "_build" / "html" / "index.html").is_file():
        log = ANSI.sub("", stdout + "\n" + stderr).strip().splitlines()
        warnings = [line for line in log if "WARNING" in line or "ERROR" in line]
        shown = warnings or log[-40:]
        raise BuildError("jupyter-book build failed (warnings are errors):\n" + "\n".join(shown))


#: Sphinx's state between builds (its pickled environment, doctrees and pages): this
#: environment variable names its folder ("off": every build reads and writes every page); a
#: build uses ``_build/cache/sphinx`` unless it is set.
SPHINX_CACHE_ENV = "DMLIMITS_SPHINX_CACHE"
SPHINX_KEEP = 3  # states kept: the most recently used
SUCCEEDED = "ok"  # written in a state's folder once a build from it has succeeded


def sphinx_cache_dir(work: Path) -> Path | None:
    """Where Sphinx's states are kept, or ``None`` when they are not."""
    return cache_folder(SPHINX_CACHE_ENV, work / "cache" / "sphinx")


def _staged_files(stage: Path) -> dict[Path, Path]:
    """The staged sources, by their path relative to the stage (not what a build writes)."""
    return {
        p.relative_to(stage): p
        for p in sorted(stage.rglob("*"))
        if p.is_file() and p.relative_to(stage).parts[0] not in ("_build", "_executed")
    }


def sphinx_key(root: Path, stage: Path, names: list[str]) -> str:
    """The address of a Sphinx state: everything that decides the book's pages, their labels,
    numbers and links, but not the executed notebooks' outputs.

    These are the staged configuration and hand-written pages, the chapters' MyST sources, the
    library (its docstrings make the API page) and the environment.  Two builds with the same
    key differ only in what the chapters computed (another scenario, or nothing), which is what
    Sphinx's incremental build is safe for: the changed chapters are read again, every label
    and number stays where it was.  A changed source or formula gives another key, so Sphinx
    reads and writes every page, strictly, as it does with the cache off."""
    staged = [
        str(rel).encode() + b"\0" + path.read_bytes()
        for rel, path in _staged_files(stage).items()
        if rel.suffix != ".ipynb"  # the executed chapters: what may change incrementally
    ]
    sources = [(root / f"{name}.md").read_bytes() for name in names]
    return digest(*staged, *sources, *_environment(root))[:20]


#: What a chapter's execution holds that its page does not show: papermill's injected cell
#: (hidden from the page, :func:`hide_injected_parameters`) and, in the notebook's metadata,
#: the parameters and what a copied execution read
#: (:func:`dmlimits.build.chapter_reads.reparameterize`).
_NOT_ON_THE_PAGE = ("papermill", "dmlimits")


def _page_of(data: bytes) -> Any:
    """An executed chapter as its page shows it: without the injected parameters' source or
    the metadata of ``_NOT_ON_THE_PAGE`` (``None`` when it is not a notebook)."""
    try:
        nb = json.loads(data)
        cells = nb["cells"]
        meta = {k: v for k, v in nb["metadata"].items() if k not in _NOT_ON_THE_PAGE}
        for cell in cells:
            tags = cell.get("metadata", {}).get("tags", [])
            if "injected-parameters" in tags:
                if "remove-cell" not in tags:
                    return None  # shown on the page: its source is the page's
                cell["source"] = ""
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return cells, meta, {k: v for k, v in nb.items() if k not in ("cells", "metadata")}


def same_page(old: bytes, new: bytes) -> bool:
    """Whether two executions of a chapter make the same page: they differ at most in what the
    page does not show (``_NOT_ON_THE_PAGE``), as a chapter copied for another scenario
    differs from the execution it was copied from (its parameters)."""
    page = _page_of(old)
    return page is not None and page == _page_of(new)


def sync_tree(stage: Path, src: Path) -> tuple[int, list[Path]]:
    """Make ``src`` hold the staged sources: write the files whose bytes differ (Sphinx sees
    them as changed by their new modification time), remove those the stage does not have
    (not what a build wrote: ``_build`` and hidden folders); return how many were written, and
    the executed chapters left as they were because they make the same page
    (:func:`same_page`: a chapter copied for another scenario).  Sphinx neither reads nor
    writes those pages again; the caller puts their staged bytes where Sphinx copies a page's
    source (``_sources``), which is all of them that differs."""
    wanted = _staged_files(stage)
    written = 0
    unread = []
    for rel, path in wanted.items():
        target = src / rel
        if target.is_file():
            new, old = path.read_bytes(), target.read_bytes()
            if new == old:
                continue
            if rel.suffix == ".ipynb" and same_page(old, new):
                unread.append(rel)
                continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        written += 1
    for target in sorted(src.rglob("*")):
        rel = target.relative_to(src)
        if rel.parts[0] == "_build" or rel.parts[0].startswith("."):
            continue
        if target.is_file() and rel not in wanted:
            target.unlink()
    return written, unread


@contextlib.contextmanager
def sphinx_state(cache: Path, key: str):
    """The folder of the Sphinx state ``key`` (its sources under ``src``), locked for the
    block; ``None`` when another build holds it (the caller then builds every page itself).

    A state is used only as the last successful build left it: its ``ok`` mark is removed
    here, before the build starts, and the caller writes it once the build has succeeded; a
    state without it (a build that failed, was stopped or was killed) is removed first, so a
    page that warned is never skipped because its source did not change since.  Only the most
    recently used states are kept (``SPHINX_KEEP``)."""
    cache.mkdir(parents=True, exist_ok=True)
    handle = (cache / f".{key}.lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        yield None
        return
    try:
        folder = cache / key
        if folder.exists() and not (folder / SUCCEEDED).is_file():
            shutil.rmtree(folder)
        (folder / "src").mkdir(parents=True, exist_ok=True)
        (folder / SUCCEEDED).unlink(missing_ok=True)  # written again only if this build succeeds
        yield folder
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
    _prune_states(cache)


def _prune_states(cache: Path) -> None:
    """Remove all but the ``SPHINX_KEEP`` most recently used states, and any that a failed
    build left (skipping those another build holds)."""
    folders = [p for p in cache.iterdir() if p.is_dir()]
    kept = sorted(
        (p for p in folders if (p / SUCCEEDED).is_file()),
        key=lambda p: (p / SUCCEEDED).stat().st_mtime_ns,
        reverse=True,
    )[:SPHINX_KEEP]
    for old in (p for p in folders if p not in kept):
        with (cache / f".{old.name}.lock").open("a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(old, ignore_errors=True)
        # The lock file stays: a build waiting to open it must find the one this build held.


_IMAGE_REF = re.compile(r"_images/([^\"'\s)>]+)")


def copy_pages(html: Path, target: Path) -> None:
    """Copy a kept state's pages to ``target``, leaving out the images of earlier builds that
    no page shows any more (Sphinx never removes them), so the book holds the files a build of
    every page would."""
    shown = {
        m.group(1)
        for page in html.rglob("*.html")
        for m in _IMAGE_REF.finditer(page.read_text(errors="replace"))
    }

    def ignore(folder: str, names: list[str]) -> list[str]:
        if Path(folder) == html / "_images":
            return [n for n in names if n not in shown]
        return []

    shutil.copytree(html, target, ignore=ignore)


_STATIC_REF = re.compile(r'(?:href|src)="(?:\.\./)*_static/([^"?#]+)"')


def _remove_late_assets(html: Path) -> None:
    """Remove the static files that pages name without a checksum: the ones extensions copy
    once the pages are written (MyST-NB's and sphinx-exercise's style sheets, MathJax).  Sphinx
    adds ``?v=CHECKSUM`` to an asset's link when the file is already in the output as it writes
    a page; a build of every page never finds these there, so a page written again from a kept
    state must not either, or the two books would differ in those links."""
    late = {
        m.group(1)
        for page in html.rglob("*.html")
        for m in _STATIC_REF.finditer(page.read_text(errors="replace"))
    }
    for name in late:
        (html / "_static" / name).unlink(missing_ok=True)


def build_html(
    root: Path, stage: Path, names: list[str], jobs: int = 1,
    started: subprocess.Popen | None = None,
) -> None:  # fmt: skip
    """Build the staged book's HTML into ``stage/_build/html``, Sphinx in ``jobs`` processes
    (in ``started``, from :func:`start_html`, when given): from the kept Sphinx state of the
    same sources when there is one (only the chapters whose outputs changed are read and
    written again), else every page."""
    cache = sphinx_cache_dir(root / "_build")
    if cache is None:
        _jupyter_book(stage, jobs=jobs, started=started)
        return
    with sphinx_state(cache, sphinx_key(root, stage, names)) as folder:
        if folder is None:
            _say("another build is using Sphinx's kept state: building every page here")
            _jupyter_book(stage, jobs=jobs, started=started)
            return
        src = folder / "src"
        fresh = not (src / "_build" / "html").is_dir()
        written, unread = sync_tree(stage, src)
        same = (f" ({len(unread)} chapter(s) copied for this scenario make the same page: "
                "not read again)" if unread else "")  # fmt: skip
        if fresh:
            _say("no kept Sphinx state for these sources: every page is read and written")
        elif written:
            _say(f"Sphinx's kept state: {written} changed file(s) to read and write again{same}")
            _remove_late_assets(src / "_build" / "html")
        else:
            _say(f"Sphinx's kept state: no source changed, no page to write{same}")
        _jupyter_book(src, every_page=False, jobs=jobs, started=started)
        html = stage / "_build" / "html"
        copy_pages(src / "_build" / "html", html)
        for rel in unread:  # the page Sphinx kept, with this build's source beside it
            if (html / "_sources" / rel).is_file():
                shutil.copyfile(stage / rel, html / "_sources" / rel)
        (folder / SUCCEEDED).touch()


def reads_every_page(root: Path, stage: Path, names: list[str]) -> bool:
    """Whether :func:`build_html` will have Sphinx read every page, the API reference included
    (no kept Sphinx state for these sources), rather than only the chapters whose outputs
    changed.  Known before the chapters run: the state's key leaves their outputs out."""
    cache = sphinx_cache_dir(root / "_build")
    if cache is None:
        return True
    folder = cache / sphinx_key(root, stage, names)
    return not ((folder / SUCCEEDED).is_file() and (folder / "src" / "_build" / "html").is_dir())


def _swap(new: Path, final: Path) -> None:
    """Put ``new`` where ``final`` is, replacing it only at the last moment."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    try:
        new.rename(final)
    except OSError:
        if old.exists():
            old.rename(final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def build(
    scn: Scenario, output: str | None = None, jobs: int | None = None,
    edition: str = EDITIONS[0],
) -> Path:  # fmt: skip
    """Build the whole book for ``scn``, in ``edition`` (one of :data:`EDITIONS`); return the
    HTML folder.  Raises :class:`BuildError` (the previous book unchanged),
    :class:`BuildInterrupted` on SIGINT or SIGTERM.  The editions share the executed chapters'
    cache: a student build after the instructors' runs no chapter again."""
    root = project_root()
    check_repository(root)
    check_edition(edition)
    STOPPING.clear()
    names = toc_notebooks(root)
    final = output_dir(root, scn, output, edition)
    work = root / "_build"
    work.mkdir(exist_ok=True)
    with stop_on_signals(), output_lock(final):
        for stale in remove_stale_stages(work):
            _say(f"removed {stale.name}, left by a build that was killed")
        return _build(root, names, scn, final, work, jobs, edition)


def _build(
    root: Path, names: list[str], scn: Scenario, final: Path, work: Path, jobs: int | None,
    edition: str = EDITIONS[0],
) -> Path:  # fmt: skip
    stage = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-{scn.slug}-", dir=work))
    started = time.perf_counter()
    try:
        for item in STAGED:
            src = root / item
            if src.is_dir():
                shutil.copytree(src, stage / item)
            elif src.is_file():
                shutil.copy2(src, stage / item)
        stage_config(stage, edition)
        params = notebook_parameters(scn)
        jobs = jobs or max(1, min(len(names), os.cpu_count() or 1))
        keep_formulas(work)
        keep_sweeps(work)
        # Started before the sweeps, in the environment the kernels get, so that its imports
        # are done by the time the first chapter runs.
        forks = fork_server()
        try:
            sweep_up_front(scn, work, jobs)
            # Started now, its imports share the cores with the chapters rather than wait for
            # them; with the API reference to read, the library is imported before Sphinx
            # forks its reading processes (dmlimits.build.jupyter_book_run).  Stopped by
            # stop_children if the build fails or is interrupted before it is used.
            html = start_html(stage / "_config.yml", reads_every_page(root, stage, names))
            timings = execute_notebooks(root, stage, names, params, jobs, scn, forks)
        finally:
            if forks is not None:
                # Interrupted, the server may still be importing: stop it without waiting.
                forks.close(timeout=5.0 if sys.exc_info()[0] is None else 0.0)
        html_started = time.perf_counter()
        build_html(root, stage, names, jobs, html)
        html_seconds = time.perf_counter() - html_started
        # Success: keep the executed notebooks beside the HTML, then swap both in.
        executed = stage / "_executed"
        executed.mkdir()
        for name in names:
            shutil.copy2(stage / f"{name}.ipynb", executed / f"{Path(name).name}.ipynb")
        (executed / "scenario.yaml").write_text(scn.to_yaml())
        with signals_deferred():
            _swap(stage / "_build" / "html", final)
            _swap(executed, final.parent / "executed")
        remember_seconds(work, timings)
        pruned = prune_notebook_cache(notebook_cache_dir(work))
        if pruned:
            _say(f"removed {pruned} execution(s) used longest ago from the notebook cache")
        # the build's parent process imports no more of the library than it runs
        from dmlimits import search

        pruned = prune_sweep_cache(search.cache_dir())
        if pruned:
            _say(f"removed {pruned} sweep(s) used longest ago from the sweep cache")
    except BaseException:
        stop_children()
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _say("timings:")
    for t in timings:
        _say(f"  {t.notebook + '.md':<32} " + ("cached" if t.cached else f"{t.seconds:6.1f} s"))
    _say(f"  {'HTML (Jupyter Book)':<32} {html_seconds:6.1f} s")
    _say(f"  {'total':<32} {time.perf_counter() - started:6.1f} s")
    _say(f"built {final / 'index.html'}")
    return final


def scenario_keys() -> list[tuple[str, str, str]]:
    """(key, expected value, meaning) for every scenario key."""
    return [(k, f.expected(), f.doc) for k, f in SCHEMA.items()]
