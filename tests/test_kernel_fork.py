"""The chapters' kernels forked from one server (dmlimits.build.kernel_fork) are the kernels a build
would otherwise start one by one: same environment, path, arguments, working directory and
matplotlib set-up, interruptible, and gone once shut down.  Whole builds with it (their outputs
compared by nbval, their interrupts by tests/test_build_runs.py) are tested elsewhere."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import psutil
import pytest
from dmlimits.build import engine as build
from dmlimits.build import kernel_fork
from dmlimits.build.reads import read_keys
from dmlimits.core import scenario as sc

# What the kernel reports about itself: everything a chapter could see of how it was started,
# once it has imported the library, as every chapter's first cell does (a forked kernel has it
# already: the server imports it).
PROBE = """
import gc, json, os, sys
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "dmlimits")
from dmlimits.book import figures, glue
from dmlimits.core import scenario
import matplotlib, matplotlib.pyplot as plt
fig = plt.figure()
print(json.dumps({
    "pid": os.getpid(), "ppid": os.getppid(), "env": dict(os.environ), "path": sys.path,
    "argv0": sys.argv[0], "cwd": os.getcwd(), "backend": matplotlib.get_backend(),
    "rc": {k: str(v) for k, v in matplotlib.rcParams.items()},
    "session_leader": os.getsid(0) == os.getpid(),
    "library_loaded": loaded,
    "inline_hooked": "matplotlib_inline.backend_inline" in sys.modules,
    "frozen": gc.get_freeze_count(), "gc_enabled": gc.isenabled(),
    "lambdify_ready": len(sys.modules["sympy.utilities.lambdify"].MODULES["numpy"][0]) > 100,
}))
"""


async def _run(manager_class, code: str, cwd: str, interrupt_after: float | None = None):
    """Start a kernel with ``manager_class``, run ``code``, return (stdout, error name, the
    kernel's process id, whether that process is gone after shutdown)."""
    km = manager_class(kernel_name="python3")
    await km.start_kernel(cwd=cwd)
    pid = km.provisioner.pid
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        msg_id = kc.execute(code)
        if interrupt_after is not None:
            await asyncio.sleep(interrupt_after)
            await km.interrupt_kernel()
        out, error = [], None
        while True:
            msg = await kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                error = content["ename"]
            elif kind == "status" and content["execution_state"] == "idle":
                break
    finally:
        kc.stop_channels()
        await km.shutdown_kernel()
    gone = not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    return "".join(out), error, pid, gone


@pytest.fixture
def forks():
    server = kernel_fork.ForkServer()
    assert server.start()
    yield server
    server.close()


# They start real kernels, as a build does (a few seconds each): make test runs them; make
# check, the loop for a changed formula, does not.
@pytest.mark.slow
def test_a_forked_kernel_is_the_kernel_a_build_would_start(tmp_path, forks):
    sockets = tmp_path / "s"
    sockets.mkdir()
    forked = build.ipc_kernel_manager(sockets, None, forks)
    alone = build.ipc_kernel_manager(sockets, None, None)
    a, err_a, pid_a, gone_a = asyncio.run(_run(forked, PROBE, str(tmp_path)))
    b, err_b, pid_b, gone_b = asyncio.run(_run(alone, PROBE, str(tmp_path)))
    assert err_a is None and err_b is None
    a, b = json.loads(a), json.loads(b)
    # The forked kernel is the server's child, the other one this process's.
    assert a["ppid"] == forks._proc.pid and b["ppid"] == os.getpid()
    assert a["pid"] == pid_a and b["pid"] == pid_b
    for key in ("path", "argv0", "cwd", "backend", "rc", "session_leader", "inline_hooked"):
        assert a[key] == b[key], key
    assert a["session_leader"] is True
    assert a["backend"].lower() == "agg"  # the library's figures draw without a screen
    # The server imported the library (all of it but the build's side); a kernel started on
    # its own imports it in the chapter's first cell.
    assert b["library_loaded"] == []
    assert {"dmlimits.search", "dmlimits.measured.runs"} <= set(a["library_loaded"])
    assert not set(kernel_fork.LIBRARY_SKIP) & set(a["library_loaded"])
    # What the server imported is out of the collector's reach in the forked kernel (its
    # collections scan only what the chapter makes); the collector itself runs as usual.
    assert a["frozen"] > 100_000 and b["frozen"] == 0
    assert a["gc_enabled"] and b["gc_enabled"]
    # sympy's lambdify found its numpy namespace filled, in the server; a kernel on its own
    # fills it at its chapter's first lambdify.
    assert a["lambdify_ready"] and not b["lambdify_ready"]
    env_a, env_b = dict(a["env"]), dict(b["env"])
    assert env_a.pop("JPY_PARENT_PID") == env_b.pop("JPY_PARENT_PID") == str(os.getpid())
    assert env_a == env_b
    assert gone_a and gone_b


@pytest.mark.slow  # starts a real kernel, as above
def test_a_forked_kernel_records_what_its_chapter_reads(tmp_path, forks):
    """The server imported the library before any kernel asked to record; the forked kernel
    still lists what its code reads of a scenario, as a kernel started on its own lists it
    from the library's import (dmlimits.build.chapter_reads relies on the list)."""
    sockets = tmp_path / "s"
    sockets.mkdir()
    code = (
        "from dmlimits.core import scenario as sc\n"
        "scn = sc.resolve('h100', overrides={'training.months': 6})\n"
        "print(scn['training.months'], scn['network.latency'])"
    )
    lists = {}
    for name, server in (("forked", forks), ("alone", None)):
        reads = tmp_path / f"{name}.reads"
        manager = build.ipc_kernel_manager(sockets, reads, server)
        out, err, _pid, _gone = asyncio.run(_run(manager, code, str(tmp_path)))
        assert err is None
        assert [float(x) for x in out.split()] == [6.0, sc.resolve("h100")["network.latency"]]
        lists[name] = read_keys(reads)
    assert lists["forked"] == lists["alone"]
    assert {"training.months", "network.latency"} <= lists["forked"]


@pytest.mark.slow  # starts a real kernel, as above
def test_a_forked_kernel_can_be_interrupted(tmp_path, forks):
    sockets = tmp_path / "s"
    sockets.mkdir()
    forked = build.ipc_kernel_manager(sockets, None, forks)
    started = time.monotonic()
    _, error, _, gone = asyncio.run(
        _run(forked, "import time\ntime.sleep(60)", str(tmp_path), interrupt_after=1.0)
    )
    assert error == "KeyboardInterrupt"
    assert time.monotonic() - started < 30
    assert gone


def test_the_server_exits_when_closed_and_is_then_not_used(forks):
    proc = forks._proc
    assert proc is not None and proc.poll() is None
    forks.close()
    assert proc.poll() is not None
    cmd = [sys.executable, "-m", kernel_fork.LAUNCHER, "-f", "x.json"]
    assert forks.launch(cmd, dict(os.environ), os.getcwd()) is None  # the caller starts it


@pytest.mark.parametrize(
    "argv",
    [
        ["/usr/bin/python3-not-this-one", "-m", "ipykernel_launcher", "-f", "c.json"],
        [sys.executable, "-m", "other_kernel", "-f", "c.json"],
        [sys.executable, "-m"],
    ],
)
def test_only_this_interpreters_ipykernel_is_forked(argv):
    assert not kernel_fork.forkable(argv)
    assert kernel_fork.forkable([sys.executable, "-m", "ipykernel_launcher", "-f", "c.json"])


def test_the_fork_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(kernel_fork.FORK_ENV, "off")
    assert not kernel_fork.enabled()
    assert build.fork_server() is None
    monkeypatch.setenv(kernel_fork.FORK_ENV, "on")
    assert kernel_fork.enabled()


# Slows the kernel's control thread once it has answered a shutdown request (its last step,
# publishing "idle", sleeps), and records, from an atexit function, whether that thread was
# still at work when the atexit functions ran (ipykernel's own then waits for it, and hung).
CONTROL_STILL_ANSWERING = """
import atexit, time
from ipykernel.kernelapp import IPKernelApp
app = IPKernelApp.instance()
kernel = app.kernel
publish = kernel._publish_status_and_flush
def slowly(*args, **kwargs):
    if kernel._shutdown_message is not None:
        time.sleep(0.5)
    return publish(*args, **kwargs)
kernel._publish_status_and_flush = slowly
atexit.register(lambda: open(PATH, "w").write(str(app.control_thread.is_alive())))
"""


@pytest.mark.slow  # starts a real kernel, as above
def test_a_forked_kernel_ends_once_its_answer_to_shutdown_is_sent(tmp_path, forks):
    sockets = tmp_path / "s"
    sockets.mkdir()
    seen = tmp_path / "control_alive_at_exit"
    code = f"PATH = {str(seen)!r}\n" + CONTROL_STILL_ANSWERING
    forked = build.ipc_kernel_manager(sockets, None, forks)
    _, error, _, gone = asyncio.run(_run(forked, code, str(tmp_path)))
    assert error is None and gone
    assert seen.read_text() == "False"
