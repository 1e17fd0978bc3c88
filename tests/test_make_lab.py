"""The README's first command, `make lab`, run exactly as written, as the user the tests run as (root in CI)."""

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = "notebooks/01_quickstart.ipynb"
STARTUP_TIMEOUT = 120
STOP_TIMEOUT = 30

# `make lab` as a newcomer runs it, on a machine of its own (`make test` runs these alone)
pytestmark = [pytest.mark.serial, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(url: str):
    """(status, headers, body) of a GET, without following redirects."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def _group(pgid: int) -> list:
    """The live (not zombie) processes of a process group."""
    alive = []
    for p in psutil.process_iter(["pid", "status", "cmdline"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return alive


def _env(tmp_path) -> dict:
    env = dict(os.environ)
    # a user typing the command, not a make recipe calling make (`make test` is our parent)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(k, None)
    # headless, as on the project's machines: no browser is opened (and no tab on a developer's desktop;
    # BROWSER=true makes any browser launch a no-op where `make lab` does not pass --no-browser, e.g. macOS)
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    env["BROWSER"] = "true"
    # the user's own Jupyter config, settings and runtime files stay out of it (and untouched)
    for var, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTERLAB_SETTINGS_DIR", "settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
    ):
        env[var] = str(tmp_path / sub)
    return env


def test_make_lab_as_written_in_the_readme(tmp_path):
    # The README's command, with only a free port instead of 8888.
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert re.search(r"^make lab\b", readme.split("```")[1].strip(), re.M), "the README no longer starts with make lab"
    env = _env(tmp_path)
    # `make lab` installs first when .venv is stale; do that outside the startup timeout (under `make test` it is not)
    if subprocess.run(["make", "-q", "install"], cwd=ROOT, env=env, capture_output=True).returncode != 0:
        subprocess.run(["make", "install"], cwd=ROOT, env=env, check=True)

    port = _free_port()
    proc = subprocess.Popen(
        ["make", "lab", f"LAB_PORT={port}"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    pgid = proc.pid
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    output = lambda: "".join(lines)  # noqa: E731
    url_re = re.compile(rf"http://127\.0\.0\.1:{port}(/lab\S*)\?token=([0-9a-f]+)")
    killed = False
    try:
        deadline = time.time() + STARTUP_TIMEOUT
        while not (m := url_re.search(output())):
            assert proc.poll() is None, f"`make lab` exited with {proc.returncode}:\n{output()}"
            assert time.time() < deadline, f"no URL with a token after {STARTUP_TIMEOUT}s:\n{output()}"
            time.sleep(0.2)
        path, token = m.group(1), m.group(2)
        base = f"http://127.0.0.1:{port}"
        assert path == f"/lab/tree/{QUICKSTART}", f"the printed URL does not open the quickstart: {m.group(0)}"
        assert "Running as root" not in output()
        # the server answers its status API with the token from its own output (jupyter_server logs the URL
        # before its io loop binds the port: a refused connection just after the URL is retried, not a failure) ...
        while True:
            try:
                status, _, body = _get(f"{base}/api/status?token={token}")
                break
            except urllib.error.URLError:
                assert proc.poll() is None, f"`make lab` exited with {proc.returncode}:\n{output()}"
                assert time.time() < deadline, f"the printed URL took no connection in {STARTUP_TIMEOUT}s:\n{output()}"
                time.sleep(0.2)
        assert status == 200, (status, body)
        assert "started" in json.loads(body)
        # ... and without it refuses: the API with 403, the UI with a redirect to the login page
        assert _get(f"{base}/api/status")[0] == 403
        assert _get(f"{base}/api/contents/{QUICKSTART}")[0] == 403
        status, headers, _ = _get(f"{base}{path}")
        assert status in (302, 303) and "/login" in headers["Location"], (status, dict(headers))

        # the quickstart notebook is served, and the printed URL is JupyterLab's page for it
        status, _, body = _get(f"{base}/api/contents/{QUICKSTART}?token={token}")
        assert status == 200, (status, body[:500])
        model = json.loads(body)
        assert model["type"] == "notebook" and model["content"]["cells"], model.get("type")
        status, _, body = _get(f"{base}{path}?token={token}")
        assert status == 200 and b"jupyter-config-data" in body, (status, body[:500])

        # no "official Jupyter news?" prompt: fetchNews defaults to "false" (no user setting in this fresh profile)
        status, _, body = _get(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={token}")
        assert status == 200, (status, body[:500])
        notif = json.loads(body)
        assert notif["schema"]["properties"]["fetchNews"]["default"] == "false"
        assert "fetchNews" not in (notif.get("settings") or {})
    finally:
        # stop it as Ctrl-C's neighbour would: SIGTERM to the whole group (make, jupyter, anything they started)
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.time() + STOP_TIMEOUT
        while _group(pgid) and time.time() < deadline:
            time.sleep(0.2)
        left = _group(pgid)
        if left:
            killed = True
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        reader.join(10)
    assert not killed, f"still running {STOP_TIMEOUT}s after SIGTERM: {[p.info['cmdline'] for p in left]}"
    assert not _group(pgid), "processes of `make lab` left running"
    assert "Shutting down" in output() or "received signal 15" in output(), output()[-2000:]
    with socket.socket() as s:  # nothing listens on the port any more (SO_REUSEADDR: TIME_WAIT is fine, a listener not)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
