"""Start the chapters' kernels by forking one process that has already imported what every
kernel imports, instead of starting a Python interpreter for each.

A kernel started as its own process does the same work as every other before it runs the
chapter's first line: the interpreter starts, then imports ipykernel, numpy, sympy and
matplotlib.  A build runs up to eighteen kernels, so the build starts one *fork server*
(``python -m dmlimits.build.kernel_fork``) that imports those third-party modules once and then
forks a child for each kernel; the child becomes the kernel as ``python -m ipykernel_launcher``
would, with the kernel's own command line, environment and working directory.  :data:`FORK_ENV`
switches it off, to compare (``bench/bench_machinery.py`` measures what it saves).

The server also imports this library (:data:`LIBRARY_SKIP` aside), with the kernels'
environment (the formula cache it reads at import), so that no chapter imports it again or reads
the kept formulas again.  What a chapter reads of the scenario is still recorded from its first
line: the child starts recording as the library's import would in a fresh kernel
(:func:`dmlimits.build.reads.record`, from the kernel's own environment), and only scenarios
resolved while recording are watched, which the server never resolves.  Should the library fail
to import in the server (a chapter's kernel would then show the error), the server drops it and
each chapter imports it itself.  The child is otherwise a fresh kernel: its own session and
process group (jupyter_client's ``start_new_session``), standard input from ``/dev/null``,
standard output and error those of the build, default signal handlers, the environment variables
the server's imports set.  Three differences save time and change no output: what the server
imported is frozen out of the garbage collector's reach (``gc.freeze``), so the kernel's
collections scan only what its chapter made; sympy's ``lambdify`` has filled its numpy namespace
already, in the server; and the kernel ends without the interpreter's teardown (:func:`end_now`).

The protocol is one JSON line per kernel on the server's standard input (the kernel's command,
environment and working directory), answered by the child's process id on a pipe.  The server
ignores SIGCHLD, so its children are reaped as they exit, and a process that no longer exists
is a kernel that has exited (:class:`ForkedKernel`).  When the server cannot be started or
answers nothing, the build starts its kernels the usual way.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.util
import json
import os
import pkgutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from dmlimits.core.plumbing import switched_on

#: This environment variable set to ``off`` makes the build start each kernel as its own
#: process, as the tests' nbval does.
FORK_ENV = "DMLIMITS_KERNEL_FORK"
#: What every chapter's kernel imports before its first line runs, imported once by the fork
#: server (then every module of this library but :data:`LIBRARY_SKIP`).  ipykernel imports its
#: debugger (and debugpy) as every kernel starts, so the server imports them too.
PRELOAD = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "IPython.display",
    "numpy",
    "sympy",
    "matplotlib.pyplot",
    "yaml",
)
# Not matplotlib_inline's backend: importing it hooks matplotlib into the running IPython
# shell, and there is none before the fork; pyplot imports it with the kernel's first figure.
#: The library's modules the server does not import: the build's side (the build, the PDF and
#: the slides' builds, this module, the command line) and the Sphinx extension and its patches,
#: which no chapter imports.
LIBRARY_SKIP = ("dmlimits.__main__", "dmlimits.build.engine", "dmlimits.cli",
                "dmlimits.build.kernel_fork", "dmlimits.build.jupyter_book_run",
                "dmlimits.build.sphinxext", "dmlimits.build.patches",
                "dmlimits.build.pdf", "dmlimits.build.slides")  # fmt: skip
#: The environment variables the server's imports set (filled in by :func:`serve`).
_IMPORTS_SET: dict[str, str] = {}
#: The kernel command the server knows how to run: ``python -m ipykernel_launcher ...``.
LAUNCHER = "ipykernel_launcher"


def enabled() -> bool:
    """Whether the build forks its kernels (:data:`FORK_ENV` is not ``off``)."""
    return switched_on(FORK_ENV)


def forkable(argv: list[str]) -> bool:
    """Whether a kernel command is one the server runs: ``<python> -m ipykernel_launcher``
    with this interpreter."""
    return (
        len(argv) >= 3
        and os.path.realpath(argv[0]) == os.path.realpath(sys.executable)
        and argv[1:3] == ["-m", LAUNCHER]
    )


class ForkedKernel:
    """What jupyter_client's local provisioner needs of a kernel's process (``subprocess.Popen``'s
    ``pid``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``), for a kernel the fork
    server started.  The server reaps it when it exits, so a process id that no longer exists
    is a kernel that has exited; its exit status is not known and is reported as 0."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = 0
            except PermissionError:  # another user's process took the id: ours has exited
                self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                self.returncode = 0

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The build's side of a fork server: :meth:`start` it, :meth:`launch` kernels from any
    thread, :meth:`close` it when the chapters have run (the kernels it started are not
    stopped by that: their managers shut them down)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._answers: Any = None
        self._launched = 0  # kernels forked

    def start(self) -> bool:
        """Start the server; False (and nothing started) when it cannot be."""
        read, write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(write)],
                stdin=subprocess.PIPE,
                pass_fds=(write,),
                start_new_session=True,  # Ctrl-C reaches the build, which stops the server
                text=True,
                # ipykernel reads it when imported (IPKernelApp.parent_handle's default); a
                # kernel started by jupyter_client has it, set to the pid of the process that
                # launched it (jupyter_client.launcher.launch_kernel).
                env={**os.environ, "JPY_PARENT_PID": str(os.getpid())},
            )
        except OSError:
            os.close(read)
            return False
        finally:
            os.close(write)
        self._answers = os.fdopen(read, "r")
        return True

    def launch(self, argv: list[str], env: dict[str, str], cwd: str) -> ForkedKernel | None:
        """Fork a kernel running ``argv`` (a command :func:`forkable` accepts) with ``env`` in
        ``cwd``; ``None`` when the server is gone (the caller starts the kernel itself)."""
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd})
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None or proc.stdin is None:
                return None
            try:
                proc.stdin.write(request + "\n")
                proc.stdin.flush()
                answer = self._answers.readline()
                pid = int(answer)
            except (OSError, ValueError):  # ValueError: the server exited before answering
                return None
            self._launched += 1
        return ForkedKernel(pid)

    def close(self, timeout: float = 5.0) -> None:
        """Let the server exit (its standard input closed), waiting up to ``timeout`` seconds
        before killing it; a server that forked no kernel is stopped without waiting: it may
        still be importing, for a build with every chapter cached that has no kernel to start."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is None:
                return
            if not self._launched:
                timeout = 0.0
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
            if self._answers is not None:
                self._answers.close()


def _become_kernel(request: dict[str, Any], answers: int) -> None:
    """In the forked child: become the kernel of ``request``, as ``python -m
    ipykernel_launcher`` with its environment and working directory would; never returns."""
    code = 1
    try:
        os.close(answers)
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(0, closefd=False)  # the old one buffers the requests that follow
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for key, value in _IMPORTS_SET.items():
            os.environ.setdefault(key, value)
        argv = request["argv"]

        sys.argv = [importlib.util.find_spec(LAUNCHER).origin, *argv[3:]]  # as python -m sets it
        # The library's import in a fresh kernel starts recording what the chapter reads when
        # the kernel's environment asks for it; the server imported it before there was one.
        if "dmlimits" in sys.modules:
            from dmlimits.build import reads  # imported with the library, before the fork

            reads.record(os.environ.get(reads.READS_ENV))
        from ipykernel import kernelapp  # loaded in the forked kernel only

        code = 0
        kernelapp.launch_new_instance(argv=argv[3:])
        _answered_shutdown(kernelapp.IPKernelApp)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        end_now(code)


#: Seconds a kernel asked to shut down waits, once its main loop has stopped, for its control
#: thread to finish answering the request (as a rule it has all but finished).
CONTROL_THREAD_WAIT = 2.0


def _answered_shutdown(app_class: Any) -> None:
    """Once a kernel asked to shut down has stopped its main loop, let its control thread
    (which answered the request and stopped that loop) finish before the ``atexit`` functions
    run.  The control thread is a daemon, so nothing else waits for it.  It flushes the
    kernel's output after its answer, through the IOPub thread, and ipykernel's ``atexit``
    function stops the IOPub thread and then waits for the control thread: when the main
    thread gets there first, the kernel hangs until jupyter_client gives up waiting and
    terminates it, and without this wait some chapters of every build lose that race.  A
    kernel whose loop stopped for another reason (an interrupt) ends at once."""
    if not app_class.initialized():
        return
    app = app_class.instance()
    kernel = getattr(app, "kernel", None)
    thread = getattr(app, "control_thread", None)
    if getattr(kernel, "_shutdown_message", None) is None or thread is None:
        return
    thread.join(CONTROL_THREAD_WAIT)


def end_now(code: int) -> None:
    """End this process with ``code`` once its ``atexit`` functions have run and its output
    is flushed, without the interpreter's teardown (freeing the heap object by object, long
    work in a process that holds sympy, a chapter's results or Sphinx's pages, and of no use
    once it ends); never returns.  A forked kernel ends so, as does the HTML build's process
    (:mod:`dmlimits.build.jupyter_book_run`)."""
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _import_library() -> None:
    """Import every module of this library but :data:`LIBRARY_SKIP`; on any error, drop what
    was imported of it, so that each chapter imports it (and shows the error) itself."""
    try:
        package = str(Path(__file__).resolve().parents[1])  # the folder of dmlimits

        for info in pkgutil.walk_packages([package], "dmlimits."):
            if info.name not in LIBRARY_SKIP:
                importlib.import_module(info.name)
    except Exception:
        for name in [m for m in sys.modules if m.split(".")[0] == "dmlimits"]:
            del sys.modules[name]  # the package too: it holds its submodules as attributes


def _lambdify_ready() -> None:
    """Make sympy's ``lambdify`` ready to write numpy functions, once in the server rather than
    in each chapter that evaluates a formula: its first call in a process fills its namespace
    with ``from numpy import *`` (which imports numpy's lazily loaded submodules) and imports
    its printers.  The namespace is the same whichever expression fills it."""
    try:
        import sympy  # sympy loads only when a formula is built

        x = sympy.Symbol("x")
        sympy.lambdify(x, x + 1, "numpy")
    except Exception:  # a chapter that lambdifies meets the error itself
        pass


def serve(answers: int) -> None:
    """The server: import :data:`PRELOAD` and the library, then fork a kernel for each request
    line on standard input and write its process id to the file descriptor ``answers``; exit at
    end of input."""
    # The working directory python -m put first on the path: a kernel's is its own
    # (ipykernel_launcher removes it, IPython adds the kernel's).
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
    # What ipykernel sets before a kernel imports matplotlib (IPKernelApp.init_gui_pylab),
    # so that the import below reads the backend a kernel's import would.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    # Imported with ipykernel.debugger, debugpy warns once a process, on standard error, that
    # frozen modules may hide breakpoints.  A kernel's warning goes to its output channel,
    # where no cell reads it; the server's would go to the build's log.  No chapter debugs.
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")

    before = dict(os.environ)
    for name in PRELOAD:
        importlib.import_module(name)
    _import_library()
    _lambdify_ready()
    # What the imports set in the environment (debugpy's PYDEVD_USE_FRAME_EVAL): a kernel
    # importing them itself would have it, so each child sets it again in its own.
    _IMPORTS_SET.update({k: v for k, v in os.environ.items() if before.get(k) != v})
    # Everything imported so far is kept out of the collector's reach in the kernels: their
    # collections (automatic, and IPython's explicit one at exit) scan only what the chapter
    # made, not the whole of sympy, numpy and the library every time.
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped as they exit
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the build stops the server, not Ctrl-C
    out = os.fdopen(answers, "w")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _become_kernel(request, answers)  # closes ``answers``; never returns
        out.write(f"{pid}\n")
        out.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
