"""`make lab` (issue #15): JupyterLab starts on the project, opens a MyST chapter as a notebook
through jupytext, with Jupytext Notebook as the default viewer of Markdown files; it is stopped
at the end.  Headless, on the loopback address only."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab():
    port, token = free_port(), secrets.token_hex(16)
    args = f"--no-browser --ServerApp.ip=127.0.0.1 --port={port} --ServerApp.token={token}"
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def get(path: str) -> dict:
        req = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    deadline = time.monotonic() + 120
    while True:
        try:
            get("/api/status")
            break
        except (urllib.error.URLError, ConnectionError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                out = proc.stdout.read().decode()
                pytest.fail(f"JupyterLab did not start on {base}:\n{out[-3000:]}")
            time.sleep(0.5)
    try:
        yield get
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """Stop make and JupyterLab (their process group): SIGTERM, then SIGKILL after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def test_a_chapter_opens_as_a_notebook(lab):
    nb = lab("/api/contents/notebooks/model.md?type=notebook&content=1")
    assert nb["type"] == "notebook"
    cells = nb["content"]["cells"]
    assert any("parameters" in c["metadata"].get("tags", []) for c in cells)
    assert any("dmlimits" in "".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_markdown_files_open_as_notebooks_by_default(lab):
    settings = lab("/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    # lab/overrides.json changes the schema's default (a user's own settings still win)
    viewers = settings["schema"]["properties"]["defaultViewers"]["default"]
    assert viewers.get("markdown") == "Jupytext Notebook"


def test_lab_opens_on_the_project(lab):
    names = {item["name"] for item in lab("/api/contents/?content=1")["content"]}
    assert {"notebooks", "lib", "Makefile"} <= names
