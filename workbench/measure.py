"""Building and timing candidates in persistent, isolated worker processes.

MetaSchedule's ``LocalBuilder`` starts a fresh process pool for every batch,
and each new worker pays TVM's import (plus, by default, every tensor
intrinsic: 16 s or more). Here the pools live as long as the session:

* ``Builder``: ``max_workers`` processes compile candidates in parallel
  (``tvm.tirx.build`` + export), each build under a timeout. The artifact is a
  shared library for a runner on this machine (linked in the builder's workers, so
  the runner's ``load_module`` is a ``dlopen``: ~30 ms less per candidate than a tar,
  which it would link itself, between timings), a tar of object files for one on
  another machine (linked there, for its own system).
* ``Runner``: worker processes (two by default) time kernels with TVM's
  ``time_evaluator``, one after the other, and the faster one counts; a
  timed-out or crashed kernel kills only that worker, which is restarted.
* Closed, both hand their processes to ``WARM``, which keeps them for the next
  pool of the same kind in this process (``$WORKBENCH_WARM_WORKERS_S``, default
  120 s), so that the next session in a notebook or a test does not wait for new
  workers to import TVM.

Timing settings (documented in docs/measurement.md): ``repeat`` results are taken
after one warm-up call, each the mean of ``number`` runs, with ``number`` raised
until a repeat lasts ``min_repeat_ms``; the latency is the median of the repeats.

Thread pools, set explicitly in each worker (never through the session's own
environment): the runner's TVM pool has the target's ``num-cores`` threads
(TVM's default is half the logical CPUs: one thread on a 2-vCPU machine), and
keeps TVM's default spinning between calls, as a deployed kernel does. Builder
workers run with one TVM thread: they only compile. Every timing is wrapped in
a ``noise.TimingMeter`` whose reading (run-queue wait of the timing threads,
other processes' CPU) comes back with the run times.

Building is not overlapped with timing: on a 2-core machine a concurrent
compile takes a core from the kernel being timed and skews its latency.

``make_builder`` and ``make_runner`` are the one place where a session, a
network, transfer-tuning or a benchmark gets its pools from a target and a
preset (``make_runner`` also gives an RPC runner for ``rpc://HOST:PORT/KEY``).
The contracts these classes keep are in ``interfaces``.

Argument dtypes travel with the artifact: the builder writes each argument's
shape and dtype (``ARGS_FILE``) next to the kernel it built, and a runner given
plain shapes takes the dtypes from there (``arg_types``); a caller may also give
``(shape, dtype)`` pairs. Timing data is ``dtypes.random_array`` of each dtype.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import os
import shutil
import signal
import tempfile
import threading
import time

import numpy as np

from . import dtypes, interfaces
from .errors import WorkbenchError
from .interfaces import BuildResult, RunResult

__all__ = [
    "ARGS_FILE",
    "BuildResult",
    "Builder",
    "RunResult",
    "Runner",
    "WorkerProcess",
    "arg_types",
    "artifact_for",
    "fixed_arguments",
    "make_builder",
    "make_runner",
    "naive_and_reference",
    "out_type",
    "recorded_arg_types",
    "verify",
]

# ---------------------------------------------------------------- worker side


def _worker_init(num_threads: int = 1):
    # Ctrl-C in a terminal reaches the whole foreground process group, workers included: the session decides
    # (stop after the candidate in flight), so a worker must not die of it mid-candidate.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Before the first kernel call creates TVM's thread pool; configure_thread_pool makes it explicit.
    os.environ["TVM_NUM_THREADS"] = str(num_threads)
    from workbench import tvm_env

    tvm_env.setup()
    tvm_env.configure_thread_pool(num_threads)


def _ready() -> bool:
    return True


ARGS_FILE = "args.json"  # beside each built kernel: [[shape, dtype], ...] of its arguments, the output last


ARTIFACTS = ("tar", "so")  # a tar of object files (linked where it is loaded), or a shared library


def artifact_for(runner_spec) -> str:
    """The artifact a runner spec (as ``make_runner`` takes it) loads best: a shared library for the local
    runner, a tar for RPC servers or any other runner (a tar loads everywhere TVM can link)."""
    return "so" if runner_spec is None or runner_spec == "local" else "tar"


def _build_in_worker(mod_json: str, target: dict, out_dir: str, artifact: str = "tar") -> tuple[str, float]:
    """(the artifact's path, seconds spent compiling and exporting it)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from workbench import tvm_env

    tvm_env.setup()
    mod = tvm.ir.load_json(mod_json)
    t0 = time.perf_counter()
    rt = tvm.tirx.build(mod, target=tvm.target.Target(target))
    path = os.path.join(tempfile.mkdtemp(dir=out_dir), f"kernel.{artifact}")
    rt.export_library(path)
    build_s = time.perf_counter() - t0
    args = [[[int(d) for d in a.shape], str(a.dtype)] for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    with open(os.path.join(os.path.dirname(path), ARGS_FILE), "w") as f:
        json.dump(args, f)
    return path, build_s


def _typed(entry) -> bool:
    return len(entry) == 2 and isinstance(entry[1], str)


def recorded_arg_types(path: str | None) -> list[tuple] | None:
    """``(shape, dtype)`` of every argument of a kernel built by ``Builder``; None for one it did not build."""
    try:
        with open(os.path.join(os.path.dirname(path), ARGS_FILE)) as f:
            return [(tuple(s), str(d)) for s, d in json.load(f)]
    except (OSError, TypeError, ValueError):
        return None


def arg_types(path: str | None, shapes) -> list[tuple]:
    """``(shape, dtype)`` of every argument of the kernel at ``path``, from a runner's ``shapes``: an entry that
    is a ``(shape, dtype)`` pair keeps its dtype; a plain shape takes the dtype the builder recorded for that
    argument (float32 where none is recorded or the shapes differ)."""
    recorded = recorded_arg_types(path) if path else None
    out = []
    for i, entry in enumerate(shapes):
        if _typed(entry):
            out.append((tuple(int(x) for x in entry[0]), str(entry[1])))
            continue
        shape = tuple(int(x) for x in entry)
        known = recorded[i] if recorded and len(recorded) == len(shapes) and recorded[i][0] == shape else None
        out.append((shape, known[1] if known else dtypes.DEFAULT))
    return out


def fixed_arguments(types) -> list[np.ndarray]:
    """The data every runner times a kernel on: seeded ``dtypes.random_array`` of each ``(shape, dtype)``."""
    rng = np.random.default_rng(0)
    return [dtypes.random_array(rng, s, d) for s, d in types]


_ARGS_CACHE: dict = {}


def _load(path):
    import tvm

    rt = tvm.runtime.load_module(path)
    name = getattr(rt, "entry_name", None) or "main"
    return rt, name


def _run_in_worker(path: str, types: list, number: int, repeat: int, min_repeat_ms: int) -> dict:
    import tvm

    from workbench.noise import TimingMeter

    rt, name = _load(path)
    dev = tvm.cpu()
    key = tuple((tuple(s), d) for s, d in types)
    args = _ARGS_CACHE.get(key)
    if args is None:
        args = [tvm.runtime.tensor(a, dev) for a in fixed_arguments(types)]
        _ARGS_CACHE.clear()  # keep one set: shapes repeat within a session
        _ARGS_CACHE[key] = args
    f = rt.time_evaluator(name, dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    with TimingMeter(int(os.environ.get("TVM_NUM_THREADS", "1"))) as meter:
        secs = [float(x) for x in f(*args).results]
    return {"secs": secs, "reading": meter.result}


def _compute_in_worker(path: str, inputs: list, out_type: tuple) -> np.ndarray:
    import tvm

    rt, name = _load(path)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in inputs]
    out = tvm.runtime.tensor(dtypes.unwritten(*out_type), dev)
    rt[name](*args, out)
    return out.numpy()


def out_type(path: str | None, out_shape, n_args: int) -> tuple:
    """``(shape, dtype)`` of a kernel's output (its last argument) from ``compute``'s ``out_shape``."""
    if _typed(out_shape):
        return tuple(int(x) for x in out_shape[0]), str(out_shape[1])
    shape = tuple(int(x) for x in out_shape)
    recorded = recorded_arg_types(path) if path else None
    if recorded and len(recorded) == n_args + 1 and recorded[-1][0] == shape:
        return recorded[-1]
    return shape, dtypes.DEFAULT


# ---------------------------------------------------------------- session side


def _classify(exc: BaseException, stage: str) -> tuple[str, str]:
    name = type(exc).__name__
    msg = str(exc).strip() or name
    if isinstance(exc, TimeoutError) or "Timeout" in name:
        return f"{stage}-timeout", msg
    if isinstance(exc, ChildProcessError) or "terminated" in msg.lower():
        return f"{stage}-crash", f"worker process died: {msg}"
    last = [ln for ln in msg.splitlines() if ln.strip()]
    return f"{stage}-error", (last[-1] if last else msg)[:2000]


def _pool(workers: int, timeout: float, num_threads: int = 1):
    from tvm.support.popen_pool import PopenPoolExecutor

    return PopenPoolExecutor(max_workers=workers, timeout=timeout, initializer=_worker_init, initargs=(num_threads,))


# How long a closed pool's worker processes stay warm for the next pool of the same kind in this process
# ($WORKBENCH_WARM_WORKERS_S; 0: none are kept, close() ends them).
WARM_ENV = "WORKBENCH_WARM_WORKERS_S"
WARM_DEFAULT_S = 120.0


def _warm_seconds() -> float:
    raw = os.environ.get(WARM_ENV, "").strip()
    if not raw:
        return WARM_DEFAULT_S
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise WorkbenchError(f"{WARM_ENV} must be a number of seconds, not {raw!r}") from None


class WarmWorkers:
    """Worker processes of closed pools, kept for the next pool of the same kind in this process.

    Each new worker imports TVM (about 2 s of a core); a session opens a builder with two workers and a runner
    with one, so on a 2-core machine every new session waited some 4 s for processes the previous one had just
    ended - at each Start in a notebook, and in every test. ``park(kind, obj, end)`` keeps ``obj`` (a worker
    pool in a state to take more calls) under ``kind`` for ``seconds``, then calls ``end(obj)``; ``take(kind)``
    hands it back, or None. One object per kind: a second one parked of the same kind is ended at once, as is
    everything when ``seconds`` is 0 and at the interpreter's exit (``end_all``). Thread-safe."""

    def __init__(self, seconds: float | None = None):
        self._seconds = seconds
        self._lock = threading.Lock()
        self._idle: dict = {}  # kind -> (obj, end, timer)
        atexit.register(self.end_all)

    @property
    def seconds(self) -> float:
        return _warm_seconds() if self._seconds is None else self._seconds

    def take(self, kind):
        """The object parked under ``kind``, or None. Refuses a malformed ``$WORKBENCH_WARM_WORKERS_S`` here, when a
        pool is made, rather than when it is closed."""
        if self._seconds is None:
            _warm_seconds()
        with self._lock:
            entry = self._idle.pop(kind, None)
        if entry is None:
            return None
        entry[2].cancel()
        return entry[0]

    def park(self, kind, obj, end) -> bool:
        """Keep ``obj`` warm; True if it was kept, False if ``end(obj)`` was called instead."""
        try:
            seconds = self.seconds
        except WorkbenchError:  # set wrong after the pool was made: its processes end rather than leak
            seconds = 0.0
        if seconds <= 0:
            end(obj)
            return False
        timer = threading.Timer(seconds, self._expire, (kind, obj))
        timer.daemon = True
        with self._lock:
            kept = kind not in self._idle
            if kept:
                self._idle[kind] = (obj, end, timer)
        if not kept:
            end(obj)
            return False
        timer.start()
        return True

    def _expire(self, kind, obj) -> None:
        with self._lock:
            entry = self._idle.get(kind)
            if entry is None or entry[0] is not obj:
                return
            del self._idle[kind]
        entry[1](obj)

    def kinds(self) -> list:
        with self._lock:
            return list(self._idle)

    def end_all(self) -> None:
        with self._lock:
            entries, self._idle = list(self._idle.values()), {}
        for obj, end, timer in entries:
            timer.cancel()
            try:
                end(obj)
            except Exception:  # noqa: BLE001 - at exit: a worker already gone is fine
                pass


WARM = WarmWorkers()


class WorkerProcess:
    """One persistent TVM worker process (``tvm.exec.popen_worker``) with a timeout per call.

    ``submit(fn, *args, timeout=None)`` returns a ``concurrent.futures.Future`` of
    ``fn(*args)`` run in the process; calls run one at a time, in the order submitted.
    ``timeout`` (seconds; None: the ``timeout`` given here) bounds that call only. A call
    past its timeout fails with ``TimeoutError``, one whose process died with
    ``ChildProcessError``; either way the process is killed and the next call starts a new
    one (running ``initializer(*initargs)`` first, as the first call does).

    ``PopenPoolExecutor`` takes one timeout for the pool's life, and TVM has no public way to
    change it; ``PopenWorker.send`` takes one per call, so a single worker is built on that.
    ``close()`` kills the process; calls in flight or queued fail; calling it again does nothing.
    ``idle``: open, and no call submitted that has not returned.
    """

    def __init__(self, timeout: float | None = None, initializer=None, initargs: tuple = ()):
        from tvm.support.popen_pool import PopenWorker

        self.timeout = timeout
        self._worker = PopenWorker(initializer, initargs)
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._closed = False
        self._pending = 0
        self._pending_lock = threading.Lock()

    @property
    def idle(self) -> bool:
        with self._pending_lock:
            return not self._closed and self._pending == 0

    def submit(self, fn, *args, timeout: float | None = None) -> concurrent.futures.Future:
        with self._pending_lock:
            self._pending += 1
        try:
            return self._thread.submit(self._call, fn, args, self.timeout if timeout is None else timeout)
        except BaseException:
            with self._pending_lock:
                self._pending -= 1
            raise

    def _call(self, fn, args, timeout):
        try:
            # under the lock: a call either reaches the process before close() kills it (and fails with it) or
            # sees it closed; never does it start a new process after close()
            with self._pending_lock:
                if self._closed:
                    raise ChildProcessError("the worker process was closed")
                self._worker.send(fn, args, None, timeout)
            return self._worker.recv()
        finally:
            with self._pending_lock:
                self._pending -= 1

    def close(self) -> None:
        with self._pending_lock:
            if self._closed:
                return
            self._closed = True
        self._worker.kill()
        self._thread.shutdown(wait=False, cancel_futures=True)


class Builder(interfaces.Builder):
    def __init__(self, target: dict, workers: int = 2, timeout: float = 60.0, artifact: str = "tar"):
        import tvm

        if artifact not in ARTIFACTS:
            raise ValueError(f"artifact must be one of {ARTIFACTS}, got {artifact!r}")
        self.target = target
        self.timeout = timeout
        self.artifact = artifact
        self._kind = ("builder", int(workers), timeout)
        self._pool = WARM.take(self._kind)
        self.dir = tempfile.mkdtemp(prefix="workbench-build-")
        if self._pool is None:
            self._pool = _pool(workers, timeout)
            # Start the workers now (each imports TVM: ~2 s) while the session prepares its search.
            for _ in range(workers):
                self._pool.submit(_ready)
        self._save_json = tvm.ir.save_json

    def build(self, mods: list) -> list[BuildResult]:
        futs = [
            self._pool.submit(_build_in_worker, self._save_json(m), self.target, self.dir, self.artifact) for m in mods
        ]
        out = []
        for f in futs:
            try:
                path, build_s = f.result()
                out.append(BuildResult(path, build_s=build_s))
            except BaseException as e:  # noqa: BLE001 - every failure is a result
                cls, msg = _classify(e, "build")
                out.append(BuildResult(None, cls, msg))
        return out

    @staticmethod
    def discard(path: str | None) -> None:
        if path:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)

    def close(self):
        """Deletes the artifacts; the worker processes go to ``WARM`` (ended after its seconds) or end now."""
        pool, self._pool = self._pool, None
        if pool is not None:
            WARM.park(self._kind, pool, lambda p: p.shutdown(wait=False))
        shutil.rmtree(self.dir, ignore_errors=True)


def merge_readings(readings: list) -> dict | None:
    """One ``noise.TimingMeter`` reading for a timing taken in several processes: the worst run-queue wait and
    other-thread CPU of any of them (one disturbed share disturbs the timing), their summed wall time, and the
    busiest threads seen beside the most disturbed share."""
    readings = [r for r in readings if r]
    if not readings:
        return None
    worst = max(readings, key=lambda r: (r.get("other_cores", 0), r.get("wait_fraction", 0)))
    return {
        "wall_s": round(sum(r.get("wall_s", 0) for r in readings), 4),
        "wait_fraction": max(r.get("wait_fraction", 0) for r in readings),
        "other_cores": max(r.get("other_cores", 0) for r in readings),
        "busiest": worst.get("busiest", []),
    }


class Runner(interfaces.Runner):
    """Times kernels on this machine and computes outputs for verification, one kernel at a time.

    Each of ``processes`` worker processes times the kernel in turn (``repeat`` results each, never two at
    once); the latency is the fastest process's median, and ``run_secs`` are that process's results
    (``last_process_secs``: every process's). Why: now and then a process times a kernel 10 % to 3x slower than
    another process times it a moment later, and keeps that figure for it - a state of the process (it follows
    what the process allocated before), not of the machine, since the other process is not slowed. On a steady
    host, 5-8 % of tuned programs' figures taken two minutes apart differed by more than 10 % with one process,
    2.4 % with the faster of two (docs/results/timing_agreement.md). The cost: each timing twice (about a tenth
    of a tuning session's wall time is timing).
    """

    measures_locally = True  # kernels run on this machine: its load matters (see noise.NoiseGuard)

    def __init__(
        self,
        num_threads: int,
        timeout: float = 30.0,
        number: int = 1,
        repeat: int = 3,
        min_repeat_ms: int = 30,
        processes: int = 1,
    ):
        self.num_threads = int(num_threads)
        self.timeout = timeout
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.processes = max(1, int(processes))
        self.last_process_secs: list = []
        self._workers = []
        for i in range(self.processes):
            worker = WARM.take(self._kind(i))
            if worker is None:
                worker = WorkerProcess(timeout, _worker_init, (self.num_threads,))
                worker.submit(_ready)  # the process starts importing TVM now
            worker.timeout = timeout
            self._workers.append(worker)

    def _kind(self, i: int) -> tuple:
        return ("runner", self.num_threads, i)

    @property
    def _worker(self):
        return self._workers[0] if self._workers else None

    def _call(self, timeout, fn, *args, worker=None):
        return (worker or self._worker).submit(fn, *args, timeout=timeout or self.timeout).result()

    def run(
        self, path: str, shapes: list, timeout: float | None = None, number=None, repeat=None, min_repeat_ms=None
    ) -> RunResult:
        types = arg_types(path, shapes)
        settings = (
            number or self.number,
            repeat or self.repeat,
            self.min_repeat_ms if min_repeat_ms is None else min_repeat_ms,
        )
        try:
            outs = [self._call(timeout, _run_in_worker, path, types, *settings, worker=w) for w in self._workers]
        except BaseException as e:  # noqa: BLE001
            cls, msg = _classify(e, "run")
            return RunResult([], cls, msg)
        self.last_process_secs = [o["secs"] for o in outs]
        fastest = min(outs, key=lambda o: float(np.median(o["secs"])))
        return RunResult(fastest["secs"], reading=merge_readings([o["reading"] for o in outs]))

    def compute(self, path: str, inputs: list, out_shape, timeout: float | None = None):
        """The kernel's output on the given inputs: (array, None, None) or (None, error class, message)."""
        try:
            ot = out_type(path, out_shape, len(inputs))
            return self._call(timeout, _compute_in_worker, path, inputs, ot), None, None
        except BaseException as e:  # noqa: BLE001
            cls, msg = _classify(e, "run")
            return None, cls, msg

    def close(self):
        """Each worker process goes to ``WARM`` (ended after its seconds) if no call is in flight, else ends now."""
        workers, self._workers = self._workers, []
        for i, worker in enumerate(workers):
            if worker.idle:
                WARM.park(self._kind(i), worker, WorkerProcess.close)
            else:
                worker.close()


def make_builder(target: dict, preset, workers: int | None = None, runner_spec="local") -> Builder:
    """The builder pool for ``target`` (a ``tvm_env.parse_target`` dict) under a ``presets.Preset``:
    ``workers`` processes (default: 2, or 1 on a 1-core machine), the preset's build timeout, and the artifact
    the runner ``runner_spec`` (as ``make_runner`` takes it) loads (``artifact_for``)."""
    from . import tvm_env

    return Builder(
        target,
        workers=workers or min(2, tvm_env.available_cores()),
        timeout=preset.build_timeout,
        artifact=artifact_for(runner_spec),
    )


def make_runner(spec, target: dict, preset, on_health=None) -> interfaces.Runner:
    """The runner a ``spec`` names, timing as a ``presets.Preset`` says.

    ``None`` or ``"local"``: a ``Runner`` on this machine with the target's ``num-cores``
    threads. ``"rpc://HOST:PORT/KEY"``: an ``rpc.RPCRunner`` on the servers under KEY at that
    tracker, reporting server health to ``on_health(dict)``; ``errors.WorkbenchError`` if the
    URL is malformed or no server is registered. Any other object is taken to be a runner
    already made and returned as it is (its caller owns it and closes it).
    """
    if spec is None or spec == "local":
        return Runner(
            int(target["num-cores"]),
            timeout=preset.run_timeout,
            number=preset.number,
            repeat=preset.repeat,
            min_repeat_ms=preset.min_repeat_ms,
            processes=preset.runner_processes,
        )
    if isinstance(spec, str):
        from . import rpc

        return rpc.RPCRunner(
            spec,
            timeout=preset.run_timeout,
            number=preset.number,
            repeat=preset.repeat,
            min_repeat_ms=preset.min_repeat_ms,
            on_health=on_health,
        )
    return spec


def verify(out: np.ndarray, ref: np.ndarray, dtype: str | None = None) -> tuple[bool, str]:
    """Whether a kernel's output matches the reference, under the tolerance of the workload's ``dtype`` in
    ``dtypes.DTYPES`` (None: the row for the output's type, ``dtypes.for_result``).

    Float rows: |out - ref| <= rtol * |ref| + atol * max(1, max|ref|), element-wise, with rtol = atol = 1e-3
    (fp32 sums reordered by tiling differ from a float64 reference by far less than this). int8: equal."""
    row = dtypes.get(dtype) if dtype is not None else dtypes.for_result(out.dtype)
    if out.shape != ref.shape:
        return False, f"output shape {out.shape} != reference {ref.shape}"
    if row.exact:
        if out.dtype != ref.dtype:
            return False, f"output dtype {out.dtype} != reference {ref.dtype}"
        wrong = out != ref
        n = int(wrong.sum())
        if n == 0:
            return True, "exact match"
        at = tuple(int(i) for i in np.argwhere(wrong)[0])
        return False, f"{n} of {out.size} elements differ (first at {at}: {out[at]} != {ref[at]})"
    if not np.all(np.isfinite(out)):
        return False, "output contains NaN/Inf (elements never written?)"
    scale = max(1.0, float(np.abs(ref).max()))
    err = np.abs(out.astype(np.float64) - ref)
    ok = bool(np.all(err <= row.rtol * np.abs(ref) + row.atol * scale))
    return ok, f"max abs error {err.max():.3g} (scale {scale:.3g})"


def _last_line(msg) -> str:
    """The last non-empty line of an error text (TVM's tracebacks end with the message), at most 300 characters."""
    lines = [line.strip() for line in str(msg or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def naive_and_reference(
    workload,
    builder: interfaces.Builder,
    runner: interfaces.Runner,
    inputs: list,
    timeout: float = 600.0,
    need_latency: bool = True,
):
    """(naive latency ms or None, reference output) for a workload.

    The naive program is the unscheduled PrimFunc built by TVM; it is timed with
    one call (it can be slow) and, for workloads without a NumPy reference, its
    output on ``inputs`` is the reference. ``WorkbenchError`` (one line) if it does not
    build, run within ``timeout`` or compute: the spec is then beyond what can be tuned here.
    """
    need_output = workload.reference_kind == "tvm-naive"
    if not need_latency and not need_output:
        return None, workload.numpy_reference(inputs)
    [b] = builder.build([workload.mod])
    if b.path is None:
        raise WorkbenchError(f"the naive program of {workload.name} does not build: {_last_line(b.error_msg)}")
    try:
        naive_ms = None
        if need_latency:
            r = runner.run(b.path, workload.arg_types, timeout=timeout, number=1, repeat=1, min_repeat_ms=0)
            if r.latency_ms is None:
                raise WorkbenchError(
                    f"the naive program of {workload.name} failed to run (limit {timeout:.0f} s): "
                    + _last_line(r.error_msg)
                )
            naive_ms = r.latency_ms
        if need_output:
            out, _cls, msg = runner.compute(b.path, inputs, workload.arg_types[-1], timeout=timeout)
            if out is None:
                raise WorkbenchError(
                    f"the naive program of {workload.name} failed to compute a reference: {_last_line(msg)}"
                )
            return naive_ms, out.astype(np.float64)
        return naive_ms, workload.numpy_reference(inputs)
    finally:
        builder.discard(b.path)
