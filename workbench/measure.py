"""Building and timing candidates in persistent, isolated worker processes.

MetaSchedule's ``LocalBuilder`` starts a fresh process pool for every batch,
and each new worker pays TVM's import (plus, by default, every tensor
intrinsic: 16 s or more). Here the pools live as long as the session:

* ``Builder``: ``max_workers`` processes compile candidates in parallel
  (``tvm.tirx.build`` + export to a tar), each build under a timeout.
* ``Runner``: one process times kernels with TVM's ``time_evaluator``; a
  timed-out or crashed kernel kills only that worker, which is restarted.

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
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from dataclasses import dataclass, field

import numpy as np

# ---------------------------------------------------------------- worker side


def _worker_init(num_threads: int = 1):
    # Ctrl-C in a terminal reaches the whole foreground process group, workers included: the session decides
    # (stop after the candidate in flight), so a worker must not die of it mid-candidate.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Before the first kernel call creates TVM's thread pool; config_threadpool makes it explicit.
    os.environ["TVM_NUM_THREADS"] = str(num_threads)
    from workbench import tvm_env

    tvm_env.setup()
    import tvm

    tvm.get_global_func("runtime.config_threadpool")(1, int(num_threads))


def _ready() -> bool:
    return True


def _build_in_worker(mod_json: str, target: dict, out_dir: str) -> str:
    import tvm

    from workbench import tvm_env

    tvm_env.setup()
    mod = tvm.ir.load_json(mod_json)
    rt = tvm.tirx.build(mod, target=tvm.target.Target(target))
    path = os.path.join(tempfile.mkdtemp(dir=out_dir), "kernel.tar")
    rt.export_library(path)
    return path


_ARGS_CACHE: dict = {}


def _load(path):
    import tvm

    rt = tvm.runtime.load_module(path)
    name = getattr(rt, "entry_name", None) or "main"
    return rt, name


def _run_in_worker(path: str, shapes: list, number: int, repeat: int, min_repeat_ms: int) -> dict:
    import tvm

    from workbench.noise import TimingMeter

    rt, name = _load(path)
    dev = tvm.cpu()
    key = tuple(tuple(s) for s in shapes)
    args = _ARGS_CACHE.get(key)
    if args is None:
        rng = np.random.default_rng(0)
        args = [tvm.runtime.tensor(rng.uniform(-1, 1, size=s).astype("float32"), dev) for s in shapes]
        _ARGS_CACHE.clear()  # keep one set: shapes repeat within a session
        _ARGS_CACHE[key] = args
    f = rt.time_evaluator(name, dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    with TimingMeter(int(os.environ.get("TVM_NUM_THREADS", "1"))) as meter:
        secs = [float(x) for x in f(*args).results]
    return {"secs": secs, "reading": meter.result}


def _compute_in_worker(path: str, inputs: list, out_shape: tuple) -> np.ndarray:
    import tvm

    rt, name = _load(path)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in inputs]
    out = tvm.runtime.tensor(np.full(out_shape, np.nan, dtype="float32"), dev)
    rt[name](*args, out)
    return out.numpy()


# ---------------------------------------------------------------- session side


@dataclass
class BuildResult:
    path: str | None
    error_class: str | None = None
    error_msg: str | None = None


@dataclass
class RunResult:
    run_secs: list = field(default_factory=list)
    error_class: str | None = None
    error_msg: str | None = None
    # noise.TimingMeter's reading of this timing (wait_fraction, other_cores, wall_s); None where the runner
    # cannot take one (RPC: the kernel runs on another machine)
    reading: dict | None = None

    @property
    def latency_s(self) -> float | None:
        return float(np.median(self.run_secs)) if self.run_secs else None


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

    return PopenPoolExecutor(max_workers=workers, timeout=timeout, initializer=_worker_init,
                             initargs=(num_threads,))


class Builder:
    def __init__(self, target: dict, workers: int = 2, timeout: float = 60.0):
        import tvm

        self.target = target
        self.timeout = timeout
        self.dir = tempfile.mkdtemp(prefix="workbench-build-")
        self._pool = _pool(workers, timeout)
        self._save_json = tvm.ir.save_json
        # Start the workers now (each imports TVM: ~2 s) while the session prepares its search.
        self._warm = [self._pool.submit(_ready) for _ in range(workers)]

    def build(self, mods: list) -> list[BuildResult]:
        futs = [self._pool.submit(_build_in_worker, self._save_json(m), self.target, self.dir) for m in mods]
        out = []
        for f in futs:
            try:
                out.append(BuildResult(f.result()))
            except BaseException as e:  # noqa: BLE001 - every failure is a result
                cls, msg = _classify(e, "build")
                out.append(BuildResult(None, cls, msg))
        return out

    @staticmethod
    def discard(path: str | None) -> None:
        if path:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)

    def close(self):
        self._pool.shutdown(wait=False)
        shutil.rmtree(self.dir, ignore_errors=True)


class Runner:
    """Times kernels and computes outputs for verification, one kernel at a time."""

    measures_locally = True  # kernels run on this machine: its load matters (see noise.NoiseGuard)

    def __init__(self, num_threads: int, timeout: float = 30.0, number: int = 1, repeat: int = 3,
                 min_repeat_ms: int = 30):
        self.num_threads = int(num_threads)
        self.timeout = timeout
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self._pool = _pool(1, timeout, self.num_threads)
        self._warm = self._pool.submit(_ready)

    def _call(self, timeout, fn, *args):
        # The pool's timeout applies per call; one thread drives this runner, so it can be swapped.
        self._pool._timeout = timeout or self.timeout
        try:
            return self._pool.submit(fn, *args).result()
        finally:
            self._pool._timeout = self.timeout

    def run(self, path: str, shapes: list, timeout: float | None = None, number=None, repeat=None,
            min_repeat_ms=None) -> RunResult:
        try:
            out = self._call(timeout, _run_in_worker, path, [list(s) for s in shapes], number or self.number,
                             repeat or self.repeat, self.min_repeat_ms if min_repeat_ms is None else min_repeat_ms)
            return RunResult(out["secs"], reading=out["reading"])
        except BaseException as e:  # noqa: BLE001
            cls, msg = _classify(e, "run")
            return RunResult([], cls, msg)

    def compute(self, path: str, inputs: list, out_shape, timeout: float | None = None):
        """The kernel's output on the given inputs: (array, None, None) or (None, error class, message)."""
        try:
            return self._call(timeout, _compute_in_worker, path, inputs, tuple(out_shape)), None, None
        except BaseException as e:  # noqa: BLE001
            cls, msg = _classify(e, "run")
            return None, cls, msg

    def close(self):
        self._pool.shutdown(wait=False)


def verify(out: np.ndarray, ref: np.ndarray) -> tuple[bool, str]:
    """Tolerance: |out - ref| <= 1e-3 * |ref| + 1e-3 * max(1, max|ref|), element-wise (fp32 sums
    reordered by tiling differ from a float64 reference by far less than this)."""
    if out.shape != ref.shape:
        return False, f"output shape {out.shape} != reference {ref.shape}"
    if not np.all(np.isfinite(out)):
        return False, "output contains NaN/Inf (elements never written?)"
    scale = max(1.0, float(np.abs(ref).max()))
    err = np.abs(out.astype(np.float64) - ref)
    ok = bool(np.all(err <= 1e-3 * np.abs(ref) + 1e-3 * scale))
    return ok, f"max abs error {err.max():.3g} (scale {scale:.3g})"


def naive_and_reference(workload, builder: Builder, runner: Runner, inputs: list, timeout: float = 600.0,
                        need_latency: bool = True):
    """(naive latency ms or None, reference output) for a workload.

    The naive program is the unscheduled PrimFunc built by TVM; it is timed with
    one call (it can be slow) and, for workloads without a NumPy reference, its
    output on ``inputs`` is the reference.
    """
    need_output = workload.reference_kind == "tvm-naive"
    if not need_latency and not need_output:
        return None, workload.numpy_reference(inputs)
    [b] = builder.build([workload.mod])
    if b.path is None:
        raise RuntimeError(f"the naive program of {workload.name} does not build: {b.error_msg}")
    try:
        naive_ms = None
        if need_latency:
            r = runner.run(b.path, workload.arg_shapes, timeout=timeout, number=1, repeat=1, min_repeat_ms=0)
            if r.latency_s is None:
                raise RuntimeError(f"the naive program of {workload.name} failed to run: {r.error_msg}")
            naive_ms = r.latency_s * 1e3
        if need_output:
            out, _cls, msg = runner.compute(b.path, inputs, workload.arg_shapes[-1], timeout=timeout)
            if out is None:
                raise RuntimeError(f"the naive program of {workload.name} failed to compute a reference: {msg}")
            return naive_ms, out.astype(np.float64)
        return naive_ms, workload.numpy_reference(inputs)
    finally:
        builder.discard(b.path)
