"""Timing candidates on other machines through TVM's RPC tracker.

``RPCRunner`` is an ``interfaces.BatchRunner``: ``measure.Runner``'s ``run``,
``compute`` and ``close``, plus ``run_many``, which times a batch on every
server registered under a key at a ``python -m tvm.exec.rpc_tracker``, several
at once.
Candidates are still built locally (``measure.Builder``); each measurement is
one TVM RPC session: the tracker hands out a free server, the built tar is
uploaded, loaded with ``load_module`` and timed with ``time_evaluator`` on the
server's CPU, with the same fixed random inputs as the local runner (argument
dtypes from the local artifact's record, ``measure.arg_types``).

Faults, and what happens to the candidate:

* the server dies or drops the connection (killed, machine gone): the server is
  reported ``lost`` and the candidate is measured again on another server, at
  most ``retries`` times, then recorded as ``run-crash``. If the server's port
  still accepts connections, the server is alive and the candidate's own
  kernel killed its session: ``run-crash`` at once, never retried (a crashing
  kernel would otherwise take down one server per retry).
* the kernel runs past the timeout: TVM's server ends the session (its
  ``-timeout`` option) and the client worker is killed after a grace period:
  ``run-timeout``; the server is reported ``timeout`` and stays in use.
* no server under the key becomes free within ``request_timeout``: a
  ``WorkbenchError`` ends the session (records so far are kept; ``--resume``
  continues once servers are back), rather than filling the store with
  candidates that never ran.

Every client call runs in a worker process (one per parallel slot, persistent),
so a client blocked on a dead socket is killed by its timeout instead of
blocking the session. Per-server health (``busy``, ``idle``, ``timeout``,
``lost``) is reported through ``on_health`` on the caller's thread.

Servers time kernels with their own thread pool: start each with
``TVM_NUM_THREADS`` set to the cores it may use.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from . import dtypes, interfaces
from .errors import WorkbenchError
from .interfaces import RunResult
from .measure import WorkerProcess, _classify, arg_types, fixed_arguments, out_type
from .tvm_private import TrackerConnection, TrackerRefused

CONNECT_TIMEOUT = 5.0
GRACE = 10.0  # seconds a client worker may outlive the kernel timeout (connect, upload, download)
_URL = re.compile(r"^rpc://(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})/(?P<key>[A-Za-z0-9_.\-]+)$")


def parse_runner_url(url: str) -> tuple[str, int, str]:
    """``rpc://HOST:PORT/KEY`` -> (host, port, key)."""
    m = _URL.match(url.strip()) if isinstance(url, str) else None
    if not m or not (1 <= int(m["port"]) <= 65535):
        raise WorkbenchError(f"runner {url!r} is not 'local' or rpc://HOST:PORT/KEY (e.g. rpc://127.0.0.1:9190/local)")
    return m["host"].strip("[]"), int(m["port"]), m["key"]


def _tracker_session(host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> TrackerConnection:
    """A connection to the tracker whose socket gives up after ``timeout`` s instead of blocking forever."""
    # Not tvm.rpc.connect_tracker: it retries a refused connection for 60 s (an unreachable tracker should fail
    # at once), and its handshake waits forever on a port that accepts but never answers.
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise WorkbenchError(f"cannot reach the RPC tracker at {host}:{port}: {e.strerror or e}") from None
    t = TrackerConnection(sock)
    try:
        t.handshake()
    except (OSError, RuntimeError, struct.error) as e:
        t.close()
        raise WorkbenchError(f"{host}:{port} does not answer as a TVM RPC tracker: {e or type(e).__name__}") from None
    return t


def tracker_servers(host: str, port: int, key: str, timeout: float = CONNECT_TIMEOUT) -> int:
    """How many servers are registered under ``key``; WorkbenchError if the tracker is unreachable."""
    t = _tracker_session(host, port, timeout)
    try:
        s = t.summary()
    except (OSError, RuntimeError, ValueError) as e:
        raise WorkbenchError(f"{host}:{port} does not answer as a TVM RPC tracker: {e}") from None
    finally:
        t.close()
    return sum(1 for info in s.get("server_info", []) if info.get("key") == "server:" + key)


def check_runner(url: str) -> tuple[str, int, str]:
    """Fail early, with one line, on a malformed URL, an unreachable tracker or a key with no server."""
    host, port, key = parse_runner_url(url)
    if tracker_servers(host, port, key) == 0:
        raise WorkbenchError(f"no RPC server is registered under key {key!r} at the tracker {host}:{port}")
    return host, port, key


# ---------------------------------------------------------------- worker side (one process per slot)


def _slot_init():
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the session's to handle (see measure._worker_init)
    import tvm.rpc  # noqa: F401 - paid once per worker, not per candidate


def _remote_call(url, port, matchkey, session_timeout, mode, path, data, number, repeat, min_repeat_ms):
    """One RPC session: ("ok", value) or ("fail", phase, message); phase says how far it got."""
    import tvm
    from tvm import rpc

    phase = "connect"
    try:
        sess = rpc.connect(url, port, matchkey, session_timeout=session_timeout)
        phase = "upload"
        # the artifact's own kind: a tar is linked on the server; a shared library loads as it is (same system)
        name = os.path.basename(os.path.dirname(path)) + os.path.splitext(path)[1]
        sess.upload(path, name)
        phase = "load"  # the server has the file: from here, a failure is the kernel's or the data's, not the link's
        mod = sess.load_module(name)
        dev = sess.cpu()
        entry = "main"
        if mode == "time":
            # the same data as measure.Runner's, so local and remote timings see the same values
            args = [tvm.runtime.tensor(a, dev) for a in fixed_arguments(data)]
            phase = "run"
            f = mod.time_evaluator(entry, dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
            return ("ok", [float(x) for x in f(*args).results])
        inputs, out_t = data
        args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in inputs]
        out = tvm.runtime.tensor(dtypes.unwritten(*out_t), dev)
        phase = "run"
        mod[entry](*args, out)
        return ("ok", out.numpy())
    except Exception as e:  # noqa: BLE001 - the session side classifies
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        return ("fail", phase, f"{type(e).__name__}: {lines[-1] if lines else ''}"[:2000])


# ---------------------------------------------------------------- session side


@dataclass
class _Job:
    index: int
    mode: str  # "time" | "compute"
    path: str
    data: object
    timeout: float
    number: int
    repeat: int
    min_repeat_ms: int
    attempts: int = 0
    servers: list = field(default_factory=list)


@dataclass
class ServerHealth:
    server: str
    state: str = "idle"
    measured: int = 0
    errors: int = 0
    timeouts: int = 0
    retried: int = 0

    def as_dict(self, **extra):
        return {
            "server": self.server,
            "state": self.state,
            "measured": self.measured,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "retried": self.retried,
            **extra,
        }


class _Unavailable(Exception):
    pass


def _still_listening(host: str, port: int, timeout: float = 2.0) -> bool:
    # A killed server's processes die together but not at the same instant: look again a moment later.
    for delay in (0.0, 0.5):
        time.sleep(delay)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError:
            return False
    return True


class RPCRunner(interfaces.BatchRunner):
    """Times kernels on the servers registered under ``key`` at a TVM RPC tracker.

    ``parallel`` (default: the number of servers registered when it starts)
    candidates are in flight at once; ``retries`` bounds how often a candidate
    whose server was lost is measured again elsewhere; ``request_timeout`` is
    how long to wait for a free server before giving up.
    """

    measures_locally = False  # kernels run on the servers: this machine's load does not disturb their timings

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        number: int = 1,
        repeat: int = 3,
        min_repeat_ms: int = 30,
        parallel: int | None = None,
        retries: int = 2,
        request_timeout: float = 60.0,
        on_health=None,
    ):
        self.url = url
        self.host, self.port, self.key = parse_runner_url(url)
        n = tracker_servers(self.host, self.port, self.key)
        if n == 0:
            raise WorkbenchError(
                f"no RPC server is registered under key {self.key!r} at the tracker {self.host}:{self.port}"
            )
        self.parallel = max(1, int(parallel or n))
        self.timeout = timeout
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.retries = retries
        self.request_timeout = request_timeout
        self.on_health = on_health
        self.health: dict[str, ServerHealth] = {}
        self._events: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        # One slot more than the servers: a verification (compute) asked for while a batch holds every
        # other slot gets its own worker and tracker connection instead of waiting for the batch.
        self._workers = [WorkerProcess(timeout + GRACE, _slot_init) for _ in range(self.parallel + 1)]
        self._trackers: list[TrackerConnection | None] = [None] * (self.parallel + 1)
        self._free: queue.Queue = queue.Queue()
        for k in range(self.parallel + 1):
            self._free.put(k)
        for p in self._workers:  # start the workers (each imports TVM) while the session prepares
            p.submit(_slot_init)

    # ---- interfaces.Runner
    def run(
        self, path: str, shapes: list, timeout: float | None = None, number=None, repeat=None, min_repeat_ms=None
    ) -> RunResult:
        return self.run_many(
            [(path, shapes)], timeout=timeout, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms
        )[0]

    def compute(self, path: str, inputs: list, out_shape, timeout: float | None = None):
        """The kernel's output on the given inputs: (array, None, None) or (None, error class, message)."""
        data = ([np.asarray(a) for a in inputs], out_type(path, out_shape, len(inputs)))
        job = self._job(0, "compute", path, data, timeout, None, None, None)
        [res] = self._dispatch([job])
        return (res, None, None) if not isinstance(res, RunResult) else (None, res.error_class, res.error_msg)

    def run_many(
        self, items, timeout=None, number=None, repeat=None, min_repeat_ms=None, on_result=None, proceed=None
    ) -> list:
        """Time ``items`` = [(path, shapes), ...] on up to ``parallel`` servers at once.

        ``on_result(i, RunResult)`` is called on this thread as each finishes;
        ``proceed()`` is asked (on a slot thread) before each new candidate is
        started, and may block (a paused session) or return False (stopped:
        the rest are not started and come back as None).
        """
        jobs = [
            self._job(i, "time", p, arg_types(p, shapes), timeout, number, repeat, min_repeat_ms)
            for i, (p, shapes) in enumerate(items)
        ]
        return self._dispatch(jobs, on_result, proceed)

    def close(self):
        for p in self._workers:
            p.close()
        for k, t in enumerate(self._trackers):
            if t is not None:
                t.close()
                self._trackers[k] = None

    # ---- internals
    def _job(self, i, mode, path, data, timeout, number, repeat, min_repeat_ms) -> _Job:
        return _Job(
            i,
            mode,
            path,
            data,
            float(timeout or self.timeout),
            number or self.number,
            repeat or self.repeat,
            self.min_repeat_ms if min_repeat_ms is None else min_repeat_ms,
        )

    def _health(self, server: str, state: str, **extra):
        with self._lock:
            h = self.health.setdefault(server, ServerHealth(server))
            h.state = state
            if state == "timeout":
                h.timeouts += 1
            self._events.put(h.as_dict(in_flight=sum(x.state == "busy" for x in self.health.values()), **extra))

    def _flush_health(self):
        while True:
            try:
                d = self._events.get_nowait()
            except queue.Empty:
                return
            if self.on_health is not None:
                self.on_health(d)

    def _dispatch(self, jobs, on_result=None, proceed=None) -> list:
        out: list = [None] * len(jobs)
        todo: queue.Queue = queue.Queue()
        for j in jobs:
            todo.put(j)
        done: queue.Queue = queue.Queue()
        stop = threading.Event()
        slots = [self._free.get()]
        while len(slots) < min(self.parallel, len(jobs)):
            try:
                slots.append(self._free.get_nowait())
            except queue.Empty:
                break
        threads = [
            threading.Thread(target=self._slot, args=(k, todo, done, stop, proceed), daemon=True, name=f"rpc-slot-{k}")
            for k in slots
        ]
        for t in threads:
            t.start()
        fatal = None
        pending = len(jobs)
        try:
            while pending and any(t.is_alive() for t in threads) or not done.empty():
                try:
                    item = done.get(timeout=0.2)
                except queue.Empty:
                    self._flush_health()
                    continue
                self._flush_health()
                if isinstance(item, _Unavailable):
                    fatal = fatal or item
                    stop.set()
                    continue
                job, res = item
                pending -= 1
                out[job.index] = res
                if on_result is not None:
                    on_result(job.index, res)
        finally:
            stop.set()
            for t in threads:
                t.join()
            self._flush_health()
        if fatal is not None:
            raise WorkbenchError(str(fatal))
        return out

    def _request(self, k: int):
        """(host, port, matchkey) of a free server, from this slot's own tracker connection."""
        if self._trackers[k] is None:
            try:
                self._trackers[k] = _tracker_session(self.host, self.port)
            except WorkbenchError as e:  # the tracker went away since the session started
                raise _Unavailable(str(e)) from None
        t = self._trackers[k]
        t.settimeout(self.request_timeout)
        try:
            return t.request(self.key)
        except TrackerRefused as e:
            raise _Unavailable(f"the RPC tracker at {self.host}:{self.port} refused the request: {e}") from None
        except (OSError, RuntimeError, ValueError) as e:
            # The tracker may still answer this request later: the connection cannot be reused.
            t.close()
            self._trackers[k] = None
            if isinstance(e, socket.timeout):
                raise _Unavailable(
                    f"no RPC server under key {self.key!r} at {self.host}:{self.port} became free "
                    f"within {self.request_timeout:g} s"
                ) from None
            raise _Unavailable(f"lost the RPC tracker at {self.host}:{self.port}: {e}") from None

    def _slot(self, k, todo, done, stop, proceed):
        try:
            self._serve(k, todo, done, stop, proceed)
        except Exception as e:  # noqa: BLE001 - whatever ends a slot, the session hears of it: no job just vanishes
            done.put(_Unavailable(f"an RPC slot failed: {type(e).__name__}: {e}"))
        finally:
            self._free.put(k)

    def _serve(self, k, todo, done, stop, proceed):
        worker = self._workers[k]
        while not stop.is_set():
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            if proceed is not None and not proceed():
                return
            try:
                url, port, matchkey = self._request(k)
            except _Unavailable as e:
                done.put(e)
                return
            server = f"{url}:{port}"
            job.servers.append(server)
            self._health(server, "busy")
            t0 = time.time()
            try:
                r = worker.submit(
                    _remote_call,
                    url,
                    port,
                    matchkey,
                    job.timeout,
                    job.mode,
                    job.path,
                    job.data,
                    job.number,
                    job.repeat,
                    job.min_repeat_ms,
                    timeout=job.timeout + GRACE,
                ).result()
            except BaseException as e:  # noqa: BLE001 - the worker timed out or died
                cls, msg = _classify(e, "run")
                r = ("worker", cls, msg)
            res, retry = self._outcome(job, server, url, port, r, time.time() - t0)
            if retry:
                todo.put(job)
            else:
                done.put((job, res))

    def _outcome(self, job, server, url, port, r, seconds):
        """(result, retry?) for one attempt, and the server's new health."""
        h = self.health[server]
        if r[0] == "ok":
            h.measured += 1
            self._health(server, "idle", seconds=round(seconds, 3))
            return (r[1] if job.mode == "compute" else RunResult(r[1])), False
        if r[0] == "worker":
            cls, msg = r[1], r[2]
            if cls == "run-timeout":
                self._health(server, "timeout", message=f"killed after {job.timeout + GRACE:g} s")
                return RunResult([], "run-timeout", f"no answer from {server} within {job.timeout + GRACE:g} s"), False
            h.errors += 1
            self._health(server, "idle", message=msg)
            return RunResult([], cls, msg), False
        _, phase, msg = r
        if "RPCSessionTimeoutError" in msg or "session has expired" in msg:
            self._health(server, "timeout", message=f"session ended by the server after {job.timeout:g} s")
            return RunResult([], "run-timeout", f"on {server}: {msg}"), False
        connection_lost = phase in ("connect", "upload") or _is_connection_error(msg)
        if connection_lost and phase in ("load", "run") and _still_listening(url, port):
            # The server still listens: its session (the kernel's process) died, not the server.
            h.errors += 1
            self._health(server, "lost", message=f"a kernel crashed its session: {msg}")
            return RunResult([], "run-crash", f"the kernel crashed the RPC session on {server}: {msg}"), False
        if connection_lost:
            job.attempts += 1
            if job.attempts <= self.retries:
                h.retried += 1
                self._health(server, "lost", message=msg, retrying=True)
                return None, True
            self._health(server, "lost", message=msg, retrying=False)
            return RunResult(
                [], "run-crash", f"lost {len(job.servers)} servers measuring it ({', '.join(job.servers)}): {msg}"
            ), False
        h.errors += 1
        self._health(server, "idle", message=msg)
        return RunResult([], "run-error", msg), False


def _is_connection_error(msg: str) -> bool:
    m = msg.lower()
    return any(
        s in m for s in ("kshutdown", "socket", "connection", "broken pipe", "closed", "reset", "eof", "recv", "send")
    )
