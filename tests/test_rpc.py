"""Measuring over TVM's RPC tracker: a real tracker and two real servers on 127.0.0.1.

The processes are started in their own sessions and killed as process groups:
``tvm.exec.rpc_tracker``/``rpc_server`` run the real server in a popen_worker
child that keeps the port if only the parent is killed.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from workbench import RecordStore, TuningSession
from workbench.errors import WorkbenchError
from workbench.rpc import RPCRunner, parse_runner_url, tracker_servers

from .shapes import SMALL

KEY = "wbtest"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def _start(args, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )


def _killpg(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


class Cluster:
    """A tracker and ``n`` servers, all bound to 127.0.0.1 on free ports."""

    def __init__(self, n=2, key=KEY):
        self.key = key
        self.port = free_port()
        self.tracker = _start(
            [
                "tvm.exec.rpc_tracker",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--port-end",
                str(self.port + 1),
                "--silent",
            ]
        )
        self.servers = {}  # port -> Popen
        try:
            _wait_port(self.port)
            env = dict(os.environ, TVM_NUM_THREADS="1")  # two servers share the test machine's cores
            for _ in range(n):
                p = free_port()
                self.servers[p] = _start(
                    [
                        "tvm.exec.rpc_server",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(p),
                        "--port-end",
                        str(p + 1),
                        "--tracker",
                        f"127.0.0.1:{self.port}",
                        "--key",
                        key,
                        "--silent",
                    ],
                    env,
                )
            deadline = time.time() + 60
            while tracker_servers("127.0.0.1", self.port, key) < n:
                assert time.time() < deadline, "servers did not register with the tracker"
                time.sleep(0.3)
        except BaseException:
            self.close()
            raise

    @property
    def url(self):
        return f"rpc://127.0.0.1:{self.port}/{self.key}"

    def kill_server(self, port):
        _killpg(self.servers[port])

    def close(self):
        for p in [*self.servers.values(), self.tracker]:
            _killpg(p)


@pytest.fixture
def cluster():
    c = Cluster(2)
    yield c
    c.close()


def _cli(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def _one_line_error(r, needle):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in lines[0], lines[0]


def test_runner_urls():
    assert parse_runner_url("rpc://127.0.0.1:9190/local") == ("127.0.0.1", 9190, "local")
    assert parse_runner_url("rpc://[::1]:9190/k-1.a_b") == ("::1", 9190, "k-1.a_b")
    for bad in (
        "rpc://127.0.0.1/local",
        "rpc://127.0.0.1:99999/local",
        "http://h:1/k",
        "rpc://h:1/",
        "rpc://h:1/a b",
        "rpc://h:x/k",
        "",
        "rpc://h:1/k:2",
        None,
        9190,
    ):
        with pytest.raises(WorkbenchError, match="rpc://HOST:PORT/KEY"):
            parse_runner_url(bad)


def test_cli_rejects_bad_runner_and_unreachable_tracker(tmp_path):
    db = tmp_path / "r.db"
    _one_line_error(
        _cli("tune", "matmul-128", "--db", str(db), "--runner", "rpc:/127.0.0.1/local"),
        "is not 'local' or rpc://HOST:PORT/KEY",
    )
    port = free_port()  # nothing listens there
    t = time.time()
    _one_line_error(
        _cli("tune", "matmul-128", "--db", str(db), "--runner", f"rpc://127.0.0.1:{port}/local"),
        f"cannot reach the RPC tracker at 127.0.0.1:{port}",
    )
    assert time.time() - t < 60  # TVM's own client would retry a refused tracker for a minute
    # Nothing was left behind: the tracker is checked before a session is created.
    assert RecordStore(str(db), readonly=True).sessions() == []


def test_cli_rejects_a_key_without_servers_and_a_port_that_is_no_tracker(tmp_path):
    c = Cluster(0)
    try:
        db = tmp_path / "r.db"
        _one_line_error(
            _cli("tune", "matmul-128", "--db", str(db), "--runner", c.url),
            f"no RPC server is registered under key '{KEY}'",
        )
        with socket.socket() as other:  # a port that accepts connections but speaks no tracker protocol
            other.bind(("127.0.0.1", 0))
            other.listen(1)
            with pytest.raises(WorkbenchError, match="does not answer as a TVM RPC tracker"):
                RPCRunner(f"rpc://127.0.0.1:{other.getsockname()[1]}/{KEY}")
    finally:
        c.close()


def _session(tmp_path, runner, trials=16, **kw):
    return TuningSession(
        SMALL["matmul"],
        target={"kind": "llvm", "num-cores": 1},
        trials=trials,
        preset="quick",
        seed=0,
        db=str(tmp_path / "r.db"),
        strategy="no-rewrite",
        trials_per_round=8,
        runner=runner,
        **kw,
    )


def _no_candidate_lost(s):
    """Every proposed candidate has exactly one record; trials are 1..n."""
    ev = s.store.events(s.session_id)
    proposed = [c["mod_hash"] for e in ev if e["kind"] == "candidates_proposed" for c in e["data"]["candidates"]]
    rec = s.records()
    assert sorted(rec["mod_hash"]) == sorted(proposed)
    assert sorted(rec["trial"]) == list(range(1, len(rec) + 1))
    return ev, rec


@pytest.mark.slow
def test_tunes_through_the_tracker_on_two_servers_in_parallel(tmp_path, cluster, monkeypatch):
    """... and searches the next round while the servers time this one (their load is not this machine's)."""
    import threading

    from workbench import loop

    spans, propose = [], loop.Propose.__call__
    searching_ahead, timed_meanwhile = threading.Event(), threading.Event()

    def spanned(kind, fn):
        def wrapper(*a, **kw):
            ahead = threading.current_thread().name == "workbench-search-ahead"
            if ahead:
                searching_ahead.set()
            elif kind == "time" and searching_ahead.is_set():
                timed_meanwhile.set()
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                if ahead:
                    # a search ahead that outlasts the builds, as a big workload's does, however long they take:
                    # it ends once this round's timing has begun (after a minute if the loop waits for it instead)
                    timed_meanwhile.wait(60)
                    searching_ahead.clear()
                spans.append((kind, threading.current_thread().name, t0, time.perf_counter()))

        return wrapper

    monkeypatch.setattr(loop.Propose, "__call__", spanned("search", propose))
    monkeypatch.setattr(RPCRunner, "run_many", spanned("time", RPCRunner.run_many))
    s = _session(tmp_path, cluster.url)
    assert s.preset.overlaps
    seen = []
    s.subscribe(lambda e: seen.append(e) if e.kind == "runner_health" else None)
    summ = s.run()
    ahead = [x for x in spans if x[0] == "search" and x[1] == "workbench-search-ahead"]
    timed = [x for x in spans if x[0] == "time"]
    assert ahead and any(a[2] < t[3] and t[2] < a[3] for a in ahead for t in timed), spans
    assert summ["status"] == "finished" and summ["trials"] == 16
    assert summ["verified"] and summ["best_latency_ms"] > 0 and summ["naive_latency_ms"] > 0
    ev, rec = _no_candidate_lost(s)
    assert rec["error_class"].isna().all()
    servers = {f"127.0.0.1:{p}" for p in cluster.servers}
    assert {e.data["server"] for e in seen} == servers  # both servers measured
    assert max(e.data["in_flight"] for e in seen) == 2  # ... at the same time
    assert {e.data["state"] for e in seen} == {"busy", "idle"}
    stored = [e for e in ev if e["kind"] == "runner_health"]
    assert len(stored) == len(seen)  # health is stored like every event
    assert sum(e.data["measured"] for e in seen if e.data["state"] == "idle") > 0


# the kill must land while a candidate is timed (0.4 s windows): run alone (`make test`'s serial part)
@pytest.mark.slow
@pytest.mark.serial
def test_server_killed_mid_session_its_candidate_is_measured_elsewhere(tmp_path, cluster):
    # Long enough timings (3 repeats of >= 0.4 s) that the kill lands while the candidate is in flight.
    s = _session(tmp_path, cluster.url, trials=8, min_repeat_ms=400)
    killed = {}
    proposed = []

    def on_event(e):
        proposed.append(e.kind == "candidates_proposed")
        # The first busy server after the first batch was proposed (not the naive program's quick run).
        if e.kind == "runner_health" and e.data["state"] == "busy" and any(proposed) and not killed:
            port = int(e.data["server"].rsplit(":", 1)[1])
            killed["server"] = e.data["server"]
            cluster.kill_server(port)

    s.subscribe(on_event)
    summ = s.run()
    assert summ["status"] == "finished" and summ["trials"] == 8
    ev, rec = _no_candidate_lost(s)
    health = [e["data"] for e in ev if e["kind"] == "runner_health"]
    lost = [h for h in health if h["state"] == "lost"]
    assert lost and lost[0]["server"] == killed["server"] and lost[0]["retrying"], health
    other = ({f"127.0.0.1:{p}" for p in cluster.servers} - {killed["server"]}).pop()
    assert all(h["server"] == other for h in health[health.index(lost[0]) + 1 :])  # nothing more went to the dead one
    # The candidate in flight at the kill was measured on the other server, like every other.
    assert rec["error_class"].isna().all(), rec[["trial", "error_class", "error_msg"]]


@pytest.mark.slow
def test_crashing_and_hanging_kernels_over_rpc(tmp_path, cluster):
    from workbench import measure, tvm_env

    from .test_faults import bad_modules

    target = tvm_env.host_target_dict(1)
    b = measure.Builder(target, workers=1)
    health = []
    r = RPCRunner(cluster.url, timeout=3, on_health=health.append)
    try:
        good_mod, segv_mod, hang_mod, shapes = bad_modules()
        good, segv, hang = b.build([good_mod, segv_mod, hang_mod])
        crash = r.run(segv.path, shapes)
        assert crash.error_class == "run-crash" and "crashed the RPC session" in crash.error_msg
        # Not retried: a crashing kernel must not take down one server per attempt.
        assert [h["state"] for h in health] == ["busy", "lost"]
        # A library the server cannot load is the kernel's error, not a lost server: not retried elsewhere
        junk = tmp_path / "junk"
        junk.mkdir()
        (junk / "kernel.tar").write_bytes(b"not a library")
        del health[:]
        bad = r.run(str(junk / "kernel.tar"), shapes)
        assert bad.error_class == "run-error", bad
        assert [h["state"] for h in health] == ["busy", "idle"], health
        del health[:]
        t = time.time()
        slow = r.run(hang.path, shapes)
        assert slow.error_class == "run-timeout" and time.time() - t < 3 + 10 + 5
        assert health[-1]["state"] == "timeout"
        ok = r.run_many([(good.path, shapes)] * 3)
        assert all(x.error_class is None and x.latency_ms > 0 for x in ok)
    finally:
        r.close()
        b.close()
