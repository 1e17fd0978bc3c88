"""A private JupyterLab for a browser test or benchmark: a copy of ``notebooks/`` served on 127.0.0.1 with a token.

Used by ``tests/test_browser.py`` and ``benchmarks/live_dashboard.py``. Everything the server writes (config,
workspaces, settings, its log, ``TMPDIR`` for the notebooks' stores) stays under ``work``; the server runs in its
own process group, which is stopped as a whole (the server, its kernel and the kernel's build/run workers).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_notebooks(work: str, env: dict | None = None, start_timeout: float = 90.0):
    """Yield ``(url, token)`` of a JupyterLab serving a copy of ``notebooks/`` under ``work``; ``env`` is added to
    the server's environment (its kernels inherit it)."""
    root = os.path.join(work, "lab")
    shutil.copytree(
        os.path.join(ROOT, "notebooks"),
        root,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "*.db-wal", "*.db-shm"),
    )
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    # no "Jupyter news?" toast over the dashboard (and no network calls for it)
    settings = os.path.join(work, "settings", "@jupyterlab", "apputils-extension")
    os.makedirs(settings)
    with open(os.path.join(settings, "notification.jupyterlab-settings"), "w") as f:
        f.write('{"fetchNews": "false", "checkForUpdates": false}')
    port, token = free_port(), secrets.token_hex(16)
    full_env = dict(
        os.environ,
        TMPDIR=tmp,
        JUPYTER_CONFIG_DIR=os.path.join(work, "config"),
        JUPYTERLAB_WORKSPACES_DIR=os.path.join(work, "workspaces"),
        JUPYTERLAB_SETTINGS_DIR=os.path.join(work, "settings"),
        **(env or {}),
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        "--ServerApp.port_retries=0",
    ] + (["--allow-root"] if os.geteuid() == 0 else [])
    log_path = os.path.join(work, "jupyter.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + start_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"JupyterLab did not start; see {log_path}")
            time.sleep(0.5)
        yield url, token
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
