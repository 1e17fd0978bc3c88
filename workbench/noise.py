"""Measurement noise: how a timing is known to be disturbed, and how long to wait for a quiet machine.

Three signals, each cheap enough to take on every measurement:

* **Run-queue wait of the timing threads** (``TimingMeter``, inside the runner worker). Linux
  accounts, per thread, the time it was runnable but not running (``/proc/self/task/*/schedstat``,
  field 2, in ns). While a kernel is timed its threads should never wait; when another process
  (a CPU hog, a browser redrawing, a compile) takes a core, they do. ``wait_fraction`` is that wait
  divided by wall time x timing threads: 0 on a quiet machine, ~0.3 beside one busy process on two
  cores. This sees exactly the interference that skews a timing, whoever causes it, at ns resolution.
* **Other threads' CPU time during a timing** (``TimingMeter``: every thread's run time on the machine,
  ``/proc/*/task/*/schedstat`` field 1, in ns, before and after), reported as ``other_cores`` with the
  threads that used most (``busiest``: process and thread name), so a user sees *who* made the noise.
  Exact, where ``/proc/stat``'s tick-sampled accounting reads 0.0 for threads that run less than a
  tick (10 ms) at a time, as a browser's and a Jupyter server's do. Between timings (``machine_load``),
  per-process CPU over a second or more is precise enough.
* **A calibration probe**: a fixed reference kernel (``probe_module``) timed when a session starts and
  around each round's timing. A drift from the session's baseline catches what the two above cannot
  see (another VM on the host, frequency changes).

``NoisePolicy.mode``: ``"wait"`` (default) waits, bounded, until the machine is quiet and re-times
the affected candidate; ``"mark"`` only marks records ``noisy``; ``"off"`` checks nothing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from dataclasses import dataclass

try:
    from . import events as ev
except ImportError:  # loaded as a lone file by a peer library's timing process (benchmarks/_protocol.py), which
    ev = None  # uses TimingMeter only

MODES = ("wait", "mark", "off")
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class NoisePolicy:
    """When a measurement counts as noisy, and what a session does then.

    Thresholds were chosen on the project's 2-core machine: quiet timings of tuning candidates show wait
    fractions up to ~0.08 that leave their latency unchanged when re-timed (accounting of the runner's own
    threads), and other processes below 0.15 cores; one busy process beside a timing gives 0.3-0.5 and ~1 core.
    The probe's own spread on a quiet machine is 1-4 %. On a virtual machine whose host varies (a 2-vCPU
    Intel Xeon VM: single probe readings 0.35-0.65 ms, median 0.45, with nothing else running) the fastest
    reading is an outlier no later reading reaches, so the session's baseline is a low percentile of its
    readings (``baseline_percentile``), each reading the median of ``probe_repeats`` windows.
    """

    mode: str = "wait"
    max_wait_fraction: float = 0.10  # run-queue wait / (wall x timing threads) above which a timing is noisy
    max_other_cores: float = 0.25  # other processes' CPU, in cores, above which the machine is not quiet
    max_probe_drift: float = 0.15  # probe latency / session baseline - 1 above which the machine has changed
    quiet_seconds: float = 1.0  # how long the machine must stay quiet before timing resumes
    max_wait_s: float = 30.0  # longest single wait; after it the session only marks until quiet again
    # Longest wait for a slow host while nothing on this machine is busy (the probe alone is slow: another VM,
    # a clock change). Such spells either pass within seconds or last minutes (docs/measurement.md: of 475 such
    # waits, those that ended took a median 1.4 s, 78 % of them under 10 s; a third never ended within 30 s).
    # A would-be best is re-timed interleaved with the incumbents anyway (Confirm): a drift moves both alike.
    max_drift_wait_s: float = 10.0
    confirm_rounds: int = 3  # interleaved re-measurement rounds of a would-be best (0: none)
    probe_repeats: int = 7  # windows (each >= the preset's min_repeat_ms) per probe reading; their median
    baseline_percentile: float = 25  # the session's baseline: this percentile of its probe readings so far

    def __post_init__(self):
        if self.mode not in MODES:
            from .errors import WorkbenchError

            raise WorkbenchError(f"noise must be one of {', '.join(MODES)}, not {self.mode!r}")

    @property
    def enabled(self) -> bool:
        return self.mode != "off"


# ---------------------------------------------------------------- readings from /proc


def _busy_ticks() -> int:
    """Busy CPU ticks of the whole machine (user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]


def _run_queue_wait_ns() -> int:
    """Time this process's threads spent runnable but not running, summed (ns)."""
    total = 0
    for path in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            pass
    return total


def _other_threads_runtime_ns(own_pid: int) -> dict:
    """Run time so far (ns, the scheduler's own sum) of every thread on the machine outside process ``own_pid``,
    kernel threads included: ``{(pid, tid): ns}``. About 10 us a thread."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == own_pid:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # ended meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    out[(int(pid), int(tid))] = int(f.read().split(None, 1)[0])
            except (OSError, IndexError, ValueError):
                pass
    return out


def _comm(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def thread_name(pid: int, tid: int) -> str:
    """``process/thread`` by their ``comm`` names (``process`` alone for a main thread or a same-named one)."""
    proc = _comm(f"/proc/{pid}/comm")
    thread = proc if tid == pid else _comm(f"/proc/{pid}/task/{tid}/comm")
    return proc if thread == proc else f"{proc}/{thread}"


class TimingMeter:
    """Wraps one timing inside the process that runs the kernel; ``result`` says how disturbed it was:
    ``wait_fraction`` (the timing threads' run-queue wait), ``other_cores`` (every other thread's CPU during
    the timing, exact) and ``busiest`` (up to ``top`` of those threads, each ``{pid, name, cores}``, that used
    at least 1 % of a core)."""

    def __init__(self, threads: int, top: int = 3):
        self.threads = max(1, int(threads))
        self.top = top

    def __enter__(self):
        self._pid = os.getpid()
        self._others = _other_threads_runtime_ns(self._pid)
        self._wait = _run_queue_wait_ns()
        self._t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        wall = max(1e-6, time.perf_counter() - self._t)
        wait_s = (_run_queue_wait_ns() - self._wait) / 1e9
        now = _other_threads_runtime_ns(self._pid)
        # a thread that started during the timing ran all of its run time in it; one that ended is missed
        used = {k: ns - self._others.get(k, 0) for k, ns in now.items()}
        used = {k: ns for k, ns in used.items() if ns > 0}
        busiest = sorted(used.items(), key=lambda kv: kv[1], reverse=True)[: self.top]
        self.result = {
            "wall_s": round(wall, 4),
            "wait_fraction": round(wait_s / (wall * self.threads), 4),
            "other_cores": round(sum(used.values()) / 1e9 / wall, 3),
            "busiest": [
                {"pid": pid, "name": thread_name(pid, tid), "cores": round(ns / 1e9 / wall, 3)}
                for (pid, tid), ns in busiest
                if ns / 1e9 / wall >= 0.01
            ],
        }
        return False


def own_pids(root: int | None = None) -> set:
    """This process and its TVM worker processes (``tvm.exec.popen_worker``: the builders and the runner).

    Only those: another child (a CPU hog a test starts, an RPC server) is someone else's load.
    """
    import psutil

    root = root or os.getpid()
    out = {root}
    try:
        for c in psutil.Process(root).children(recursive=True):
            try:
                if any("popen_worker" in a for a in c.cmdline()):
                    out.add(c.pid)
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return out


def machine_load(seconds: float, exclude: set | None = None, top: int = 3) -> dict:
    """Other processes' CPU over ``seconds`` (cores), and the ones that used most, excluding ``exclude`` pids."""
    import psutil

    exclude = exclude if exclude is not None else own_pids()

    def sample():
        out = {}
        for p in psutil.process_iter(["name"]):
            try:
                t = p.cpu_times()
                out[p.pid] = (p.info["name"], t.user + t.system)
            except psutil.Error:
                pass
        return out

    b0, s0, t0 = _busy_ticks(), sample(), time.perf_counter()
    time.sleep(seconds)
    b1, s1, wall = _busy_ticks(), sample(), time.perf_counter() - t0
    ours = sum(s1[p][1] - s0[p][1] for p in exclude if p in s0 and p in s1)
    others = max(0.0, ((b1 - b0) / CLK_TCK - ours) / wall)
    users = sorted(((s1[p][1] - s0[p][1]) / wall, p, s1[p][0]) for p in s1 if p in s0 and p not in exclude)
    busiest = [{"pid": p, "name": n, "cores": round(c, 2)} for c, p, n in reversed(users[-top:]) if c >= 0.02]
    return {"other_cores": round(others, 3), "processes": busiest, "seconds": round(wall, 2)}


def wait_for_quiet(policy: NoisePolicy, should_stop=lambda: False, on_tick=None, exclude: set | None = None) -> dict:
    """Block until other processes stay under ``max_other_cores`` for ``quiet_seconds``, at most ``max_wait_s``.

    Returns ``{"quiet": bool, "waited_s": float, "last": machine_load(...)}``; ``on_tick(load)`` is called
    after each sample (a status for the user); ``should_stop()`` ends the wait early (a stopped session).
    """
    t0 = time.monotonic()
    last = None
    while True:
        last = machine_load(policy.quiet_seconds, exclude=exclude)
        if last["other_cores"] <= policy.max_other_cores:
            return {"quiet": True, "waited_s": round(time.monotonic() - t0, 2), "last": last}
        if on_tick is not None:
            on_tick(last)
        if should_stop() or time.monotonic() - t0 >= policy.max_wait_s:
            return {"quiet": False, "waited_s": round(time.monotonic() - t0, 2), "last": last}


def is_noisy(reading: dict | None, policy: NoisePolicy) -> bool:
    """Whether one timing's ``TimingMeter`` reading says it was disturbed."""
    return bool(reading) and reading["wait_fraction"] > policy.max_wait_fraction


def spread(samples) -> float | None:
    """Relative spread of repeated timings: (max - min) / median; None for fewer than two."""
    import numpy as np

    s = [float(x) for x in samples]
    if len(s) < 2:
        return None
    m = float(np.median(s))
    return (max(s) - min(s)) / m if m > 0 else None


def cv(samples) -> float | None:
    """Coefficient of variation of repeated timings; None for fewer than two."""
    import numpy as np

    s = np.asarray([float(x) for x in samples])
    if len(s) < 2 or s.mean() <= 0:
        return None
    return float(s.std(ddof=1) / s.mean())


# ---------------------------------------------------------------- the calibration probe

PROBE_N = 256


def probe_module():
    """The calibration probe: a 256x256x256 fp32 matmul with a fixed, parallel, vectorised schedule.

    About 1 ms on two cores: long enough to time in a few repeats, short enough to run around every
    round. Its schedule never changes, so a change in its latency is a change in the machine.
    """
    import tvm
    from tvm import te
    from tvm.s_tir.schedule import Schedule

    n = PROBE_N
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([a, b, c])}))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, kk, ii, ji)
    sch.parallel(io)
    sch.vectorize(ji)
    return sch.mod


PROBE_SHAPES = [(PROBE_N, PROBE_N)] * 3


# ---------------------------------------------------------------- the session side


def _procs_running() -> int:
    """Threads runnable on the whole machine at this instant (``/proc/stat``'s ``procs_running``), the reader
    included."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("procs_running"):
                return int(line.split()[1])
    return 1


def cores_free_for(window_s: float, sample_s: float = 0.005, reading=_procs_running) -> bool:
    """Whether nothing but the reader was runnable at every sample over ``window_s``.

    Sampled every ``sample_s`` from ``/proc/stat``, so a browser finishing a redraw shows within 5 ms; the
    tick-sampled CPU accounting (``machine_load``) would need windows ten times longer to see it."""
    end = time.monotonic() + window_s
    while True:
        if reading() > 1:
            return False
        if time.monotonic() >= end:
            return True
        time.sleep(sample_s)


class MeasurementGate:
    """Keeps a live view from drawing while kernels are timed, and timing from starting mid-draw.

    On a 2-core machine the browser redrawing a figure, and the kernel process serialising the update,
    take a core from the kernel being timed (a live dashboard made timings ~50x noisier). The session
    holds ``timing()`` around each round's timing phase; a view asks ``begin_draw()`` before it sends
    anything and defers its update while timing is under way; timing starts ``settle_s`` after the last
    draw ended. What the browser does with an update arrives later than the kernel sent it, and takes
    as long as it takes on a loaded machine, so once a view has drawn, each timing also waits (``settle()``,
    at most ``max_settle_s``) until the cores are seen free for ``quiet_window_s``: the browser's
    rendering and the server's polls are observed, not assumed to be over. With no view attached it
    costs nothing.
    """

    def __init__(
        self,
        settle_s: float = 0.3,
        quiet_window_s: float = 0.03,
        max_settle_s: float = 1.0,
        cores_free=cores_free_for,
    ):
        import threading

        self.settle_s = settle_s
        self.quiet_window_s = quiet_window_s
        self.max_settle_s = max_settle_s
        self._cores_free = cores_free
        self._cond = threading.Condition()
        self._timing = 0
        self._drawing = 0
        self._last_draw = 0.0
        self.settles = 0  # timings that waited for the cores to be free (a view had drawn)
        self.settled_s = 0.0  # their waits, summed
        self.unsettled = 0  # timings that began after max_settle_s with the cores still busy

    @property
    def timing_now(self) -> bool:
        return self._timing > 0

    @property
    def watched(self) -> bool:
        """A view has drawn through this gate: timings settle first."""
        return self._last_draw > 0.0

    def begin_draw(self) -> bool:
        """True (and drawing counted until ``end_draw``) unless a timing phase is under way."""
        with self._cond:
            if self._timing:
                return False
            self._drawing += 1
            return True

    def end_draw(self, drew: bool = True) -> None:
        with self._cond:
            self._drawing -= 1
            if drew:
                self._last_draw = time.monotonic()
            self._cond.notify_all()

    def __enter__(self):
        with self._cond:
            # A draw takes well under a second; a view stuck mid-draw must not stop tuning.
            self._cond.wait_for(lambda: self._drawing == 0, timeout=10.0)
            self._timing += 1
            settle = self._last_draw + self.settle_s - time.monotonic()
        if settle > 0:
            time.sleep(settle)
        return self

    def __exit__(self, *exc):
        with self._cond:
            self._timing -= 1
            self._cond.notify_all()
        return False

    def timing(self):
        return self

    def settle(self) -> float:
        """Right before one timing: once a view has drawn, wait until no other thread is runnable for
        ``quiet_window_s``, at most ``max_settle_s`` (a machine busy for longer is the noise checks' business).
        Returns the seconds waited."""
        if not self.watched or self.max_settle_s <= 0:
            return 0.0
        t0 = time.monotonic()
        free = False
        while not free and time.monotonic() - t0 < self.max_settle_s:
            free = self._cores_free(self.quiet_window_s)
        waited = time.monotonic() - t0
        self.settles += 1
        self.settled_s += waited
        self.unsettled += not free
        return waited

    @contextlib.contextmanager
    def suspended(self):
        """Nothing is timed for a while inside a timing phase (paused, waiting for a quiet machine): let views
        draw meanwhile, and settle again before timing resumes. A no-op outside a timing phase."""
        with self._cond:
            held = self._timing > 0
            if held:
                self._timing -= 1
                self._cond.notify_all()
        try:
            yield
        finally:
            if held:
                self.__enter__()


class NoiseGuard:
    """One session's noise handling, around its runner: probe baseline and drift, the check of every
    timing, bounded waits for a quiet machine, and the interleaved re-measurement of would-be bests.

    ``emit(payload)`` records and announces an event (an ``events.Payload``); ``should_stop()`` ends a wait early.
    Only a local runner is watched: over RPC the kernel runs elsewhere and this machine's load is moot.
    """

    def __init__(
        self, policy: NoisePolicy, runner, builder, emit, should_stop=lambda: False, gate: MeasurementGate | None = None
    ):
        self.policy = policy
        self.gate = gate or MeasurementGate()
        self.runner = runner
        self.builder = builder
        self.emit = emit
        self.should_stop = should_stop
        self.local = getattr(runner, "measures_locally", False)  # over RPC the kernel runs elsewhere
        self.watching = policy.enabled and self.local
        self.marking_only = False  # a wait timed out: mark, do not wait, until the machine is seen quiet
        self.baseline_ms: float | None = None
        self.readings: list[float] = []  # every probe reading of the session (ms)
        self._probe_path = None

    START_READINGS = 5  # probe readings at the start: enough that one outlier does not set the baseline

    def _event(self, payload_type, **data) -> None:
        self.emit(payload_type(**data))

    def _settle(self) -> None:
        if self.local:
            self.gate.settle()

    # ---- the probe
    def start(self) -> None:
        """Build the probe and take the session's baseline (on a quiet machine, when waiting is allowed)."""
        if not self.watching:
            return
        [b] = self.builder.build([probe_module()])
        if b.path is None:  # never a reason to stop tuning: noise checks then rest on the timing readings
            self._event(ev.MeasurementNoise, source="probe", state="unavailable", message=b.error_msg)
            return
        self._probe_path = b.path
        self._probe()  # warm-up: the first call creates the runner's thread pool
        if self.policy.mode == "wait":
            self._wait("the session's calibration")
        for _ in range(self.START_READINGS):
            self._probe(keep=True)
        self.baseline_ms = self._baseline()
        if self.baseline_ms is not None:
            self.baseline_ms = round(self.baseline_ms, 4)
        self._event(ev.Calibration, probe_ms=self.baseline_ms, baseline_ms=self.baseline_ms, drift=0.0, when="start")

    def _probe(self, keep: bool = False) -> float | None:
        """One probe reading (ms): the median of ``probe_repeats`` timing windows; ``keep`` adds it to the
        readings the baseline is taken from."""
        self._settle()
        r = self.runner.run(self._probe_path, PROBE_SHAPES, repeat=self.policy.probe_repeats)
        ms = r.latency_ms
        if keep and ms is not None:
            self.readings.append(ms)
        return ms

    def _baseline(self) -> float | None:
        """The machine at its usual best: a low percentile of the session's probe readings. The fastest
        reading would do on a steady host, but where the host varies it is an outlier that no later reading
        reaches, and every round would wait for it."""
        if not self.readings:
            return None
        import numpy as np

        return float(np.percentile(self.readings, self.policy.baseline_percentile))

    def check_probe(self, when: str) -> bool:
        """Time the probe; True when it is slower than the baseline by more than ``max_probe_drift`` and stays
        so: the timings of this moment are suspect. Before a round, with waiting allowed, the session first
        waits (bounded) for the probe to come back. The baseline follows the readings (``_baseline``), so a
        machine that turns out faster than at the start lowers it."""
        if not self.watching or self.baseline_ms is None:
            return False
        ms = self._probe(keep=True)
        if ms is None:
            return False
        drift = ms / self.baseline_ms - 1
        self._event(
            ev.Calibration,
            probe_ms=round(ms, 4),
            baseline_ms=round(self.baseline_ms, 4),
            drift=round(drift, 4),
            when=when,
        )
        self.baseline_ms = self._baseline()
        if drift <= self.policy.max_probe_drift:
            self.marking_only = False
            return False
        self._event(
            ev.MeasurementNoise,
            source="probe",
            state="drift",
            when=when,
            probe_ms=round(ms, 4),
            baseline_ms=round(self.baseline_ms, 4),
            drift=round(drift, 4),
            **machine_load(0.2),
        )
        if when == "after round" or self.policy.mode != "wait" or self.marking_only:
            return True
        return not self._wait(f"the probe is {drift:+.0%} slower than at its usual best", probe=True)

    def _probe_back(self) -> tuple[bool, float | None]:
        ms = self._probe(keep=True)
        if ms is None:
            return True, None
        back = ms / self.baseline_ms - 1 <= self.policy.max_probe_drift
        self.baseline_ms = self._baseline()
        return back, ms

    # ---- waiting
    def _wait(self, why: str, probe: bool = False) -> bool:
        """Wait for a quiet machine (other processes under ``max_other_cores``; with ``probe``, also the probe
        back within ``max_probe_drift`` of its best: a slow host shows in nothing else); True when it is.
        A wait that times out (``max_wait_s`` while other processes are busy, ``max_drift_wait_s`` while only
        the probe is slow) switches to marking until the machine is seen quiet."""
        first = machine_load(0.25)
        if first["other_cores"] <= self.policy.max_other_cores and not probe:
            return True
        self._event(ev.MeasurementNoise, source="load", state="waiting", why=why, **first)
        t0 = time.monotonic()
        with self.gate.suspended():  # nothing is timed while waiting: a live view may draw the wait
            while True:
                res = wait_for_quiet(self.policy, self.should_stop)
                back, ms = self._probe_back() if (probe and res["quiet"]) else (res["quiet"], None)
                waited = time.monotonic() - t0
                # local load is what a user can end; a slow host with this machine quiet, only time can
                limit = self.policy.max_drift_wait_s if res["quiet"] else self.policy.max_wait_s
                if back or self.should_stop() or waited >= limit:
                    break
                time.sleep(self.policy.quiet_seconds)
        state = "quiet" if back else "gave-up"
        extra = {"probe_ms": round(ms, 4), "baseline_ms": round(self.baseline_ms, 4)} if ms is not None else {}
        self._event(
            ev.MeasurementNoise, source="load", state=state, why=why, waited_s=round(waited, 2), **res["last"], **extra
        )
        self.marking_only = not back
        return back

    # ---- one timing
    def time(self, path: str, shapes: list, trial: int | None = None, repeat: int | None = None):
        """Time a candidate; returns (RunResult, noisy). A disturbed timing is retaken once the machine is
        quiet (mode "wait") or returned marked (mode "mark")."""
        self._settle()
        r = self.runner.run(path, shapes, repeat=repeat)
        if not self.watching or r.error_class is not None or not is_noisy(r.reading, self.policy):
            if self.marking_only and self._probe_path is None and r.reading:
                self.marking_only = False  # no probe to say the machine is back: an undisturbed timing says so
            return r, False
        info = dict(trial=trial, **_disturbance(r.reading))
        if self.policy.mode != "wait" or self.marking_only:
            self._event(ev.MeasurementNoise, source="timing", state="marked", **info)
            return r, True
        self._event(ev.MeasurementNoise, source="timing", state="noisy", **info)
        if not self._wait(f"trial {trial}" if trial else "a timing"):
            return r, True
        self._settle()
        r2 = self.runner.run(path, shapes, repeat=repeat)
        if r2.error_class is not None:
            return r, True
        noisy = is_noisy(r2.reading, self.policy)
        self._event(
            ev.MeasurementNoise,
            source="timing",
            state="remeasured" if not noisy else "marked",
            trial=trial,
            **_disturbance(r2.reading),
            first_ms=round(r.latency_ms, 5),
            remeasured_ms=round(r2.latency_ms, 5),
        )
        return r2, noisy

    def confirm(self, entries: list) -> Confirmation:
        """Interleaved re-measurement against the winner's curse: ``entries`` are (key, path, shapes);
        ``confirm_rounds`` rounds time each in turn, one result (>= ``min_repeat_ms``) per entry and round, so
        that every entry sees the same moments of the machine."""
        out = Confirmation({k: [] for k, _, _ in entries}, set())
        for _ in range(self.policy.confirm_rounds):
            for key, path, shapes in entries:
                r, noisy = self.time(path, shapes, repeat=1)
                if r.error_class is None:
                    out.samples[key].extend(r.run_secs)
                    if noisy:
                        out.noisy.add(key)
        return out

    def close(self) -> None:
        if self._probe_path:
            self.builder.discard(self._probe_path)
            self._probe_path = None


@dataclass
class Confirmation:
    """``NoiseGuard.confirm``'s re-timings: ``samples[key]``, the seconds of each round's result for that entry;
    ``noisy``, the keys with a disturbed timing among them (a latency taken from those samples is noisy)."""

    samples: dict
    noisy: set


def _disturbance(reading: dict) -> dict:
    """A timing's reading as a ``MeasurementNoise`` event's fields: the wait, the other threads' CPU, and who."""
    out = {k: reading[k] for k in ("wait_fraction", "other_cores")}
    if reading.get("busiest"):
        out["processes"] = reading["busiest"]
    return out


def describe(data: dict) -> str:
    """One line for a ``measurement_noise`` event, for a status bar or a log."""
    src, state = data.get("source"), data.get("state")
    who = ", ".join(f"{p['name']} (pid {p['pid']}) {p['cores']:.2f} cores" for p in data.get("processes") or [])
    load = f"other processes {data['other_cores']:.2f} cores" if data.get("other_cores") is not None else ""
    load += f": {who}" if who else ""
    if src == "probe":
        if state == "unavailable":
            return f"calibration probe unavailable ({data.get('message')}); timings are still checked"
        return (
            f"calibration probe {data['probe_ms']:.3f} ms, {data['drift']:+.0%} from the baseline "
            f"{data['baseline_ms']:.3f} ms ({data.get('when')}); {load}".rstrip("; ")
        )
    if src == "load":
        if state == "waiting":
            return f"waiting for a quiet machine before {data.get('why')}; {load}"
        if state == "quiet":
            return f"machine quiet again after {data.get('waited_s', 0):.1f} s"
        return (
            f"machine still busy after {data.get('waited_s', 0):.1f} s: timings are marked noisy, not waited "
            f"for, until it is quiet; {load}"
        )
    trial = f"trial {data['trial']}" if data.get("trial") else "a timing"
    wf = f"its threads waited {data.get('wait_fraction', 0):.0%} of the time"
    if state == "remeasured":
        return f"{trial} re-timed on a quiet machine: {data['first_ms']:.4g} -> {data['remeasured_ms']:.4g} ms"
    if state == "marked":
        return f"{trial} marked noisy: {wf}; {load}".rstrip("; ")
    return f"{trial} disturbed: {wf}, {load}"
