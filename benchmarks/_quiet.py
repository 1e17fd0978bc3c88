"""The benchmark protocol: every script in ``benchmarks/`` (``performance.py``, ``al_ansor.py``,
``transfer_tuning.py``, ``measure_throughput.py``) follows it, through this module.

Why: figures taken while other jobs used the CPU were wrong by up to 2-3x, and timing processes that ran
while the previous one's thread pool (TVM's runtime pool, torch's OpenMP) was still spinning were skewed too.
The protocol:

1. **A quiet machine before every phase.** ``Protocol.phase(name)`` measures the CPU used by other processes
   (``workbench.noise.machine_load``: everything but this process and its TVM popen workers) before the start
   and before each tuning run, session or timing phase. Above ``NoisePolicy().max_other_cores`` the script
   refuses to start, or (between phases, after a bounded wait) stops, with one line on stderr naming the
   busiest processes, and exits with status 3. ``--force`` carries on and records the result as invalid
   (``"valid": false`` in the JSON, **INVALID** at the top of the page). The same check also times the
   calibration probe in a fresh process: a host slower than at its best (another VM on the same cores shows in
   no process list; on the project's machine the probe went from 0.53 to 1.4 ms and back within minutes with
   nothing local busy) is waited out for up to ``host_wait_s``, then refused the same way. "At its best" is the
   fastest probe reading seen on this machine (``benchmarks/out/probe_reference.json``). A script whose
   comparisons all come from one interleaved re-measurement (``al_ansor.py``) passes ``host_drift="record"``:
   a steady but slow host is waited out for ``RECORD_DRIFT_WAIT_S``, then recorded on the page instead of
   refused, because a drift moves every interleaved program alike (``Protocol``'s docstring). An *unsteady* host
   (the probe's own repeats, less the fastest and the slowest, spread more than ``MAX_PROBE_SPREAD``) is waited
   for up to ``host_wait_s``, then refused in both modes: no comparison survives it.
2. **One library at a time.** Each library's kernels are timed alone in their own process, the processes one
   after the other; ``quiesce()`` between two of them waits until the previous one's thread pools have
   stopped spinning. Every process that times kernels gets ``TVM_NUM_THREADS``, ``OMP_NUM_THREADS`` and
   ``OPENBLAS_NUM_THREADS`` = the script's ``--threads`` (default: every available core; TVM's own default
   is half the logical CPUs) through ``thread_env()``.
3. **Medians with their spread, between two probe readings.** Every figure is a median over repeats with its
   spread ((max - min) / median); the calibration probe (``workbench.noise.probe_module``, a fixed 256^3
   matmul) is timed in a fresh process before and after the run (``Protocol.probe``), so a reader sees
   whether the machine changed meanwhile.
4. **A peak is an upper bound.** ``check_peak``: a peak microbenchmark below a figure a kernel achieved is a
   bug in the microbenchmark, reported as a problem, never published as the peak.

A script creates one ``Protocol(name, threads, force)``, calls ``start()`` (the "start" check, whose last probe
reading is the probe before), ``phase(...)`` before each phase, ``finish()`` (the probe after), and puts
``summary()`` into its JSON and ``markdown()`` at the top of its page. Standard library and workbench only.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from workbench import noise  # noqa: E402  (imports no TVM)

EXIT_NOT_QUIET = 3
# The calibration probe's repeats spread above which the host is too unsteady for any comparison, interleaved or
# not: on the project's VM a slow spell read 0.66-1.25 ms with repeats spread 97-118 %, and the interleaved
# re-measurement taken then spread 150-1450 % per program. The spread is taken without the fastest and the slowest
# of the ten repeats (``steady_spread``): one slow 30 ms window (a hypervisor tick) moves no median, and on a VM
# whose other repeats agree within a few per cent it alone read 30-40 % and refused whole runs.
MAX_PROBE_SPREAD = 0.25


def steady_spread(samples) -> float | None:
    """(max - min) / median of the repeats less their fastest and slowest one; None for fewer than four."""
    s = sorted(float(x) for x in samples)
    if len(s) < 4:
        return None
    return noise.spread(s[1:-1])


THREAD_VARS = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def set_up_and_time(argv, setup: dict, threads: int, repeats: int, cwd: str) -> tuple[dict, dict]:
    """One library's timing process (a ``_protocol`` worker started from ``argv`` with ``threads`` everywhere): set
    up with ``setup``, ``repeats`` samples of >= 100 ms, closed. Returns (setup's reply, time's reply). Call
    ``quiesce()`` and ``Protocol.phase`` first: the process must be alone on the machine."""
    w, info = open_worker(argv, setup, threads, cwd)
    try:
        return info, w.call("time", repeats=repeats, min_repeat_ms=100)
    finally:
        w.close()


def open_worker(argv, setup: dict, threads: int, cwd: str):
    """One library's timing process (a ``_protocol`` worker started from ``argv`` with ``threads`` everywhere),
    set up with ``setup``; returns (worker, setup's reply). The caller closes it."""
    import _protocol

    w = _protocol.Worker(argv, env=thread_env(threads), cwd=cwd)
    try:
        return w, w.call("setup", **setup)
    except BaseException:
        w.close()
        raise


SELF_CHECK_TOLERANCE = 0.05


def pool_timed(timed: dict, samples: dict, readings: dict) -> None:
    """Add one timing process's results (``set_up_and_time``'s second value) to ``samples`` pooled over passes,
    keeping each kernel's worst noise reading in ``readings``."""
    for k, v in timed.items():
        samples.setdefault(k, []).extend(v["samples"])
        r = readings.setdefault(k, {"wait_fraction": 0.0, "other_cores": 0.0})
        r["wait_fraction"] = max(r["wait_fraction"], v["wait_fraction"])
        r["other_cores"] = max(r["other_cores"], v["other_cores"])


def standalone_self_check(kernels: list[dict], threads: int, cwd: str, tolerance: float = SELF_CHECK_TOLERANCE) -> list:
    """Each published kernel timed again by the user's own command, alone: ``workbench best DB WORKLOAD --time``
    in a fresh process per kernel, ``threads`` everywhere. ``kernels``: dicts with ``db``, ``workload`` and
    ``table_ms`` (the page's figure), optionally ``label`` (the page's name for it, e.g. when one workload has two
    kernels on the page). Returns one row per kernel with the standalone median, its spread, the ratio
    standalone / table and ``agrees`` (within ``tolerance``); a kernel the command cannot time gets ``error``.
    Call ``Protocol.phase`` first: a standalone time taken beside another job proves nothing."""
    rows = []
    for k in kernels:
        quiesce()
        argv = [sys.executable, "-m", "workbench.cli", "best", k["db"], k["workload"], "--time"]
        argv += ["--threads", str(threads), "--json"]
        row = {"workload": k["workload"], "db": os.path.relpath(k["db"], cwd), "table_ms": k["table_ms"]}
        if k.get("label"):
            row["label"] = k["label"]
        row["command"] = f"workbench best {row['db']} {k['workload']} --time --threads {threads} --json"
        p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=thread_env(threads))
        if p.returncode != 0:
            row["error"] = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        else:
            out = json.loads(p.stdout.strip().splitlines()[-1])
            ratio = out["timed_ms"] / k["table_ms"]
            row.update(
                standalone_ms=out["timed_ms"],
                spread=out["spread"],
                noisy=out["noisy"],
                ratio=ratio,
                agrees=abs(ratio - 1.0) <= tolerance,
            )
        rows.append(row)
    return rows


def self_check_markdown(
    rows: list, tolerance: float = SELF_CHECK_TOLERANCE, what: str = "Each workbench kernel of the table"
) -> str:
    """The self-check's table and its verdict, for a results page."""
    if not rows:
        return ""
    ok = sum(bool(r.get("agrees")) for r in rows)
    L = [
        "## Standalone self-check",
        "",
        f"{what} timed again alone by the user's command (`{rows[0]['command']}` and "
        f"the same for every row, a fresh process each, nothing else running): **{ok}/{len(rows)} within "
        f"{100 * tolerance:.0f} % of the table**.",
        "",
        "| workload | table ms | standalone ms (spread) | standalone / table | agrees |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            L.append(f"| {r.get('label', r['workload'])} | {r['table_ms']:.4g} | failed: {r['error']} | – | no |")
            continue
        noisy = " (disturbed)" if r.get("noisy") else ""
        L.append(
            f"| {r.get('label', r['workload'])} | {r['table_ms']:.4g} | {r['standalone_ms']:.4g} ({100 * (r['spread'] or 0):.0f} %)"
            f"{noisy} | {r['ratio']:.3f} | {'yes' if r['agrees'] else '**no**'} |"
        )
    return "\n".join(L) + "\n"


def thread_env(threads: int, base: dict | None = None) -> dict:
    """An environment for a process that times kernels: every thread pool sized to ``threads``, the repository
    on ``PYTHONPATH``."""
    env = dict(os.environ if base is None else base)
    for k in THREAD_VARS:
        env[k] = str(int(threads))
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def set_thread_env(threads: int) -> None:
    """Size the thread pools of this process's future children (in-process sessions' workers inherit it)."""
    for k in THREAD_VARS:
        os.environ[k] = str(int(threads))


def _threshold(threshold) -> float:
    return noise.NoisePolicy().max_other_cores if threshold is None else float(threshold)


def _who(processes) -> str:
    if not processes:
        return "no single process stood out"
    return ", ".join(f"{p['name']} pid {p['pid']} {p['cores']:.2f} cores" for p in processes)


def require_quiet(
    phase: str, force: bool, threshold=None, seconds: float = 2.0, wait_s: float = 0.0, started: bool = False
) -> dict:
    """Check that other processes leave the machine quiet before ``phase``.

    Measures ``noise.machine_load(seconds)``; while it is above ``threshold`` (cores; default
    ``NoisePolicy().max_other_cores``) it measures again for up to ``wait_s`` seconds. Still busy: prints one
    line to stderr and exits with status 3, unless ``force``: then the reading comes back with
    ``"quiet": False`` and the caller must mark its results invalid. ``started``: a check between phases (the
    line says "stopped" rather than "refused").

    Returns ``{"phase", "quiet", "other_cores", "processes", "time"}`` (+ ``"waited_s"``).
    """
    thr = _threshold(threshold)
    t0 = time.monotonic()
    while True:
        load = noise.machine_load(seconds)
        quiet = load["other_cores"] <= thr
        if quiet or time.monotonic() - t0 >= wait_s:
            break
    reading = {
        "phase": phase,
        "quiet": quiet,
        "other_cores": load["other_cores"],
        "processes": load["processes"],
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "waited_s": round(time.monotonic() - t0, 1),
    }
    if quiet:
        return reading
    line = (
        f"the machine is not quiet before {phase}: other processes use {load['other_cores']:.2f} cores "
        f"({_who(load['processes'])})"
    )
    if force:
        print(f"benchmark forced: {line}; the result is marked invalid", file=sys.stderr, flush=True)
        return reading
    print(
        f"benchmark {'stopped' if started else 'refused'}: {line}; stop them or pass --force "
        "(the result is then marked invalid)",
        file=sys.stderr,
        flush=True,
    )
    sys.exit(EXIT_NOT_QUIET)


def quiesce(seconds: float = 1.0, threshold=None, max_s: float = 5.0) -> dict:
    """Wait until the previous timing process's thread pools have stopped spinning: until other processes stay
    under ``threshold`` for ``seconds`` (readings over 0.5 s), at most ``max_s``. Call it between two timing
    processes. Never exits: the next ``Protocol.phase`` decides. Returns ``{"quiet", "waited_s", "other_cores"}``."""
    thr = _threshold(threshold)
    t0 = time.monotonic()
    quiet_for = 0.0
    while True:
        load = noise.machine_load(0.5)
        quiet_for = quiet_for + load["seconds"] if load["other_cores"] <= thr else 0.0
        waited = time.monotonic() - t0
        if quiet_for >= seconds or waited >= max_s:
            return {"quiet": quiet_for >= seconds, "waited_s": round(waited, 2), "other_cores": load["other_cores"]}


# ---------------------------------------------------------------- the calibration probe, in a fresh process


def _probe_here(threads: int) -> dict:
    """Time the calibration probe in this process (which must have ``TVM_NUM_THREADS`` = ``threads``)."""
    import numpy as np
    import tvm

    from workbench import tvm_env

    tvm_env.setup()
    tvm_env.configure_thread_pool(threads)
    rt = tvm.tirx.build(noise.probe_module(), target=tvm.target.Target(tvm_env.host_target_dict(threads)))
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.uniform(-1, 1, size=s).astype("float32"), dev) for s in noise.PROBE_SHAPES]
    name = getattr(rt, "entry_name", None) or "main"
    rt[name](*args)  # warm-up: the thread pool starts
    f = rt.time_evaluator(name, dev, number=1, repeat=10, min_repeat_ms=30)
    with noise.TimingMeter(threads) as meter:
        ms = [float(x) * 1e3 for x in f(*args).results]
    return {
        "median_ms": round(statistics.median(ms), 5),
        "spread": round(noise.spread(ms), 4),
        "steady_spread": round(steady_spread(ms), 4),
        "wait_fraction": meter.result["wait_fraction"],
        "other_cores": meter.result["other_cores"],
        "threads": int(threads),
        "env": {k: os.environ.get(k) for k in THREAD_VARS},
        "samples_ms": [round(x, 5) for x in ms],
    }


def probe_reading(threads: int, timeout: float = 300.0) -> dict:
    """The calibration probe timed in a fresh process with ``threads`` threads: 10 repeats of >= 30 ms.

    Returns ``{"median_ms", "spread", "wait_fraction", "threads"}`` (+ ``other_cores``, ``samples_ms`` and
    ``env``: the thread variables the probe process saw).
    Raises ``RuntimeError`` when the probe process fails.
    """
    p = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--probe", str(int(threads))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=thread_env(threads),
        timeout=timeout,
    )
    if p.returncode != 0:
        raise RuntimeError(f"calibration probe failed (rc {p.returncode}): {p.stderr.strip()[-1000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# The fastest probe reading seen on this machine, per thread count: the host at its best. Kept beside the
# benchmark outputs (never committed: it belongs to one machine); absent on a new machine, where the first run's
# readings set it. $WORKBENCH_PROBE_REFERENCE names another file (the tests: a run of their own that neither
# reads nor moves this machine's reference).
REFERENCE = os.environ.get("WORKBENCH_PROBE_REFERENCE") or os.path.join(HERE, "out", "probe_reference.json")


def _reference_ms(path: str | None, threads: int) -> float | None:
    if not path:
        return None
    try:
        with open(path) as f:
            return float(json.load(f)[str(int(threads))])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_reference(path: str | None, threads: int, ms: float) -> None:
    if not path:
        return
    try:
        with open(path) as f:
            ref = json.load(f)
    except (OSError, ValueError):
        ref = {}
    key = str(int(threads))
    if key in ref and ref[key] <= ms:
        return
    ref[key] = ms
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(ref, f)
    os.replace(path + ".tmp", path)


def check_peak(peak_gflops, best_gflops, what: str | None = None) -> str | None:
    """A one-line problem when the measured peak is below the best figure a kernel achieved, else None."""
    if peak_gflops is None or best_gflops is None or peak_gflops >= best_gflops:
        return None
    by = f" ({what})" if what else ""
    return (
        f"the peak microbenchmark measured {peak_gflops:.1f} GFLOPS, below the {best_gflops:.1f} GFLOPS a kernel "
        f"achieved{by}: a peak below an achieved figure is a bug, not a result"
    )


# ---------------------------------------------------------------- one benchmark run


def git_state() -> dict:
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        status = git("status", "--porcelain")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "changed": []}
    if head.returncode != 0:
        return {"commit": None, "dirty": None, "changed": []}
    changed = [ln[3:] for ln in status.stdout.splitlines() if ln.strip()]
    return {"commit": head.stdout.strip(), "dirty": bool(changed), "changed": changed[:50]}


# With host_drift="record", how long a steady but slow host is waited out before the run goes on (an unsteady one
# is waited for up to host_wait_s): the drift is recorded, not required, and a host that stays slow for hours made
# every phase of a long run wait the whole host_wait_s for nothing. $WORKBENCH_RECORD_DRIFT_WAIT_S sets another
# (a smoke run of a script, as the tests make, need not wait at all).
RECORD_DRIFT_WAIT_S = float(os.environ.get("WORKBENCH_RECORD_DRIFT_WAIT_S") or 30.0)


class Protocol:
    """One benchmark run under the protocol: its quiet checks, probe readings, commit and wall time.

    ``wait_s``: how long a check between phases waits for the machine to become quiet before it stops the
    run (the start check refuses at once; a forced run never waits). ``threshold``/``seconds``: see
    ``require_quiet``.

    ``host_drift``: what a slow host (the probe more than ``max_probe_drift`` slower than its best on this
    machine, with no local process busy) does to the run. ``"refuse"`` (for scripts that compare figures
    timed at different moments, e.g. a kernel and a vendor's in two processes one after the other): waited
    out for up to ``host_wait_s``, then the run is refused or stopped, and a slow reading seen in hindsight
    makes it invalid. ``"record"`` (for scripts whose published comparisons all come from one interleaved
    re-measurement, where a drift slower than one repeat moves every program alike): waited out for up to
    ``RECORD_DRIFT_WAIT_S`` (an unsteady probe: up to ``host_wait_s``), then the run goes on; each reading is kept
    and shown on the page, and validity rests on the local quiet checks and the probe's steadiness. Absolute
    figures of a "record" run carry the probe readings beside them. ``drift_scope``: which of the page's figures a
    "record" run times side by side and which it does not, in words for the page (default: all its headline
    comparisons).
    """

    def __init__(
        self,
        name: str,
        threads: int,
        force: bool = False,
        threshold=None,
        seconds: float = 2.0,
        wait_s: float = 30.0,
        host_wait_s: float | None = None,
        reference: str | None = REFERENCE,
        host_drift: str = "refuse",
        drift_scope: str | None = None,
    ):
        if host_drift not in ("refuse", "record"):
            raise ValueError(f"host_drift must be 'refuse' or 'record', not {host_drift!r}")
        self.host_drift = host_drift
        self.drift_scope = drift_scope
        self.host_wait_s = host_wait_s if host_wait_s is not None else (300.0 if host_drift == "refuse" else 60.0)
        self.reference = reference
        self.best_probe_ms = _reference_ms(reference, threads)
        self.name = name
        self.threads = int(threads)
        self.force = bool(force)
        self.threshold = _threshold(threshold)
        self.seconds = seconds
        self.wait_s = wait_s
        self.checks: list = []
        self.probes: dict = {}
        self._last_probe: dict | None = None
        self.started = time.strftime("%Y-%m-%d %H:%M:%S")
        self._t0 = time.monotonic()
        self.git = git_state()
        self.command = " ".join(sys.argv)

    def phase(self, name: str) -> dict:
        """The checks before a phase, recorded: no other process busy, and the host as fast as it has been
        (the probe within ``max_probe_drift`` of the fastest reading on this machine). Exits with status 3
        when either fails (after a bounded wait between phases), unless forced: a forced run reads both once,
        waits for neither, and is marked invalid when either fails."""
        first = not self.checks
        # a forced run is marked invalid by the first busy reading: waiting could not make it valid again
        wait_s = 0.0 if first or self.force else self.wait_s
        r = require_quiet(name, self.force, self.threshold, self.seconds, wait_s=wait_s, started=not first)
        r.update(self._host_check(name, started=not first))
        r["quiet"] = r["quiet"] and (r["host_ok"] is not False if self.host_drift == "refuse" else r["host_stable"])
        self.checks.append(r)
        return r

    def _host_check(self, phase: str, started: bool) -> dict:
        """A slow host (another VM on the same physical cores, a clock change) shows in no process list: the
        probe is timed until it is back within ``max_probe_drift`` of its best, for up to ``host_wait_s``."""
        limit = noise.NoisePolicy().max_probe_drift
        t0 = time.monotonic()
        while True:
            r = self._last_probe = self._probe_once()
            ms = r.get("median_ms")
            if ms is None:  # the probe itself failed: the host's speed is unknown, neither good nor bad
                return {"host_ok": None, "host_stable": True, "probe_ms": None, "probe_error": r.get("error")}
            best = self.best_probe_ms = min(self.best_probe_ms or ms, ms)
            drift = ms / best - 1
            spread = r.get("steady_spread", r.get("spread"))
            stable = spread is None or spread <= MAX_PROBE_SPREAD
            waited = time.monotonic() - t0
            drift_done = drift <= limit or (self.host_drift == "record" and waited >= RECORD_DRIFT_WAIT_S)
            # a forced run is invalid whatever the host does: it takes one reading and goes on
            if self.force or (stable and drift_done) or waited >= self.host_wait_s:
                break
            time.sleep(10)
        out = {
            "host_ok": drift <= limit and stable,
            "host_stable": stable,
            "probe_ms": ms,
            "probe_spread": spread,
            "probe_best_ms": best,
            "probe_drift": round(drift, 4),
            "host_waited_s": round(time.monotonic() - t0, 1),
        }
        _save_reference(self.reference, self.threads, best)
        if out["host_ok"] or (self.host_drift == "record" and stable):
            return out
        if not stable:
            line = (
                f"the host is unsteady before {phase}: the calibration probe's repeats (less the fastest and the "
                f"slowest) spread "
                f"{100 * spread:.0f}% (at most {100 * MAX_PROBE_SPREAD:.0f}%; median {ms:.3f} ms, best {best:.3f} ms) "
                f"for {out['host_waited_s']:.0f} s, with no local process busy (another VM on the same cores?)"
            )
        else:
            line = (
                f"the host is slower than at its best before {phase}: the calibration probe takes {ms:.3f} ms, "
                f"{drift:+.0%} from {best:.3f} ms, for {out['host_waited_s']:.0f} s, with no local process busy "
                "(another VM on the same cores?)"
            )
        if self.force:
            print(f"benchmark forced: {line}; the result is marked invalid", file=sys.stderr, flush=True)
            return out
        print(
            f"benchmark {'stopped' if started else 'refused'}: {line}; try again later or pass --force (the "
            "result is then marked invalid)",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_NOT_QUIET)

    def _probe_once(self) -> dict:
        try:
            return probe_reading(self.threads)
        except (RuntimeError, subprocess.SubprocessError) as e:
            return {"error": str(e)}

    def probe(self, when: str, reading: dict | None = None) -> dict:
        """The calibration probe in a fresh process (or ``reading``, one just taken), recorded under ``when``
        ("before", "after", ...)."""
        if reading is not None:
            r = dict(reading)
        else:
            try:
                r = probe_reading(self.threads)
            except (RuntimeError, subprocess.SubprocessError) as e:
                r = {"error": str(e), "threads": self.threads}
        r.setdefault("threads", self.threads)
        r["time"] = time.strftime("%Y-%m-%d %H:%M:%S")
        self.probes[when] = r
        if r.get("median_ms"):
            self.best_probe_ms = min(self.best_probe_ms or r["median_ms"], r["median_ms"])
            _save_reference(self.reference, self.threads, self.best_probe_ms)
        return r

    def start(self, phase: str = "start") -> None:
        """The run's first check and its probe before. ``phase`` names the phase that follows at once, if one
        does: the start check is then that phase's, not taken twice."""
        self.phase(phase)
        # the start check's last reading was timed just now, in a fresh process: it is the reading before the run
        last = self._last_probe
        self.probe("before", last if last and last.get("median_ms") else None)

    def enter(self, phase: str) -> dict:
        """``phase``'s check, the first one entered starting the run: a run that turns out to have nothing to
        do (everything kept from an earlier one) takes no check and no probe at all."""
        if not self.checks:
            self.start(phase)
            return self.checks[-1]
        return self.phase(phase)

    @property
    def has_started(self) -> bool:
        return bool(self.checks)

    def finish(self) -> None:
        """The probe after the run; nothing for a run that never started (every phase kept from an earlier one)."""
        if self.has_started:
            self.probe("after")

    def slow_in_hindsight(self) -> list:
        """Phases that passed their check against the fastest probe reading known *then*, but whose reading is
        more than ``max_probe_drift`` slower than the fastest seen by the end of the run: on a new machine (no
        reference yet) or after a slow spell, the first readings can set a slow baseline, and a run must not
        count as valid because the host was slow from its start."""
        best, limit = self.best_probe_ms, noise.NoisePolicy().max_probe_drift
        if not best:
            return []
        out = [
            {"phase": c["phase"], "probe_ms": c["probe_ms"], "drift": round(c["probe_ms"] / best - 1, 4)}
            for c in self.checks
            if c.get("probe_ms") and c["probe_ms"] / best - 1 > limit and c["quiet"]
        ]
        for when, r in self.probes.items():
            ms = (r or {}).get("median_ms")
            if ms and ms / best - 1 > limit:
                out.append({"phase": f"probe {when}", "probe_ms": ms, "drift": round(ms / best - 1, 4)})
        return out

    @property
    def valid(self) -> bool:
        quiet = all(c["quiet"] for c in self.checks)
        return quiet and (self.host_drift == "record" or not self.slow_in_hindsight())

    def summary(self) -> dict:
        probe = dict(self.probes)
        b, a = (self.probes.get(k, {}).get("median_ms") for k in ("before", "after"))
        probe.setdefault("before", None)
        probe.setdefault("after", None)
        probe["drift"] = round(a / b - 1, 4) if a and b else None
        return {
            "name": self.name,
            "valid": self.valid,
            "forced": self.force,
            "threshold_cores": self.threshold,
            "probe_best_ms": self.best_probe_ms,
            "slow_in_hindsight": self.slow_in_hindsight(),
            "host_drift": self.host_drift,
            "drift_scope": self.drift_scope,
            "checks": list(self.checks),
            "probe": probe,
            "threads": self.threads,
            "thread_env": list(THREAD_VARS),
            "git": self.git,
            "command": self.command,
            "started": self.started,
            "wall_s": round(time.monotonic() - self._t0, 1),
        }

    def markdown(self) -> str:
        return summary_markdown(self.summary())


def _probe_txt(r) -> str:
    if not r:
        return "not taken"
    if "error" in r:
        return f"failed ({r['error'].splitlines()[0][:120]})"
    s = "" if r.get("spread") is None else f", spread {100 * r['spread']:.0f}%"
    return f"{r['median_ms']:.3f} ms{s}, threads waited {100 * r.get('wait_fraction', 0):.1f}%"


def summary_markdown(s: dict | None) -> str:
    """The protocol block for the top of a results page, from ``Protocol.summary()`` (as stored in the JSON)."""
    if not s:
        return (
            "> **Benchmark protocol: not recorded.** These figures predate `benchmarks/_quiet.py` (no quiet "
            "checks, no probe readings); treat them with caution.\n"
        )
    g = s.get("git") or {}
    commit = (g.get("commit") or "unknown")[:12] + (" + uncommitted changes" if g.get("dirty") else "")
    checks = s.get("checks") or []
    failed = [c for c in checks if not c["quiet"]]
    slow = [c for c in checks if c.get("host_ok") is False]
    pol = noise.NoisePolicy()
    if s.get("valid") and s.get("host_drift") == "record":
        readings = [c["probe_ms"] for c in checks if c.get("probe_ms")]
        verdict = (
            f"quiet checks passed: {len(checks)}/{len(checks)} (other processes at most "
            f"{s.get('threshold_cores', pol.max_other_cores):.2f} cores before every phase)"
        )
        if readings:
            verdict += (
                f'; the host\'s own speed was recorded, not required (`host_drift="record"`): calibration probe '
                f"{min(readings):.3f}-{max(readings):.3f} ms before the phases (best on this machine "
                f"{s.get('probe_best_ms') or min(readings):.3f} ms), {len(slow)} of {len(checks)} phases began with "
                f"the host more than {100 * pol.max_probe_drift:.0f}% slower than its best; "
                + (
                    s.get("drift_scope")
                    or "the page's headline comparisons are timed side by side (interleaved or alternating), so a "
                    "drift moves both sides alike"
                )
            )
    elif s.get("valid"):
        verdict = (
            f"quiet checks passed: {len(checks)}/{len(checks)} (other processes at most "
            f"{s.get('threshold_cores', pol.max_other_cores):.2f} cores before every phase"
            + (
                f", and the calibration probe within {100 * pol.max_probe_drift:.0f}% of its best on this machine)"
                if any(c.get("host_ok") is True for c in checks)
                else ")"
            )
        )
    elif not failed and s.get("slow_in_hindsight"):
        late = s["slow_in_hindsight"]
        worst = max(late, key=lambda c: c["drift"])
        verdict = (
            f"**INVALID**: the host was slow for part of the run, seen in hindsight: the calibration probe "
            f"reached {s['probe_best_ms']:.3f} ms later in the run, so {len(late)} reading(s) that passed "
            f"against the best known then were more than {100 * pol.max_probe_drift:.0f}% slower (worst "
            f"{worst['probe_ms']:.3f} ms, {100 * worst['drift']:+.0f}%, at {worst['phase']})"
        )
    else:
        worst = max(failed, key=lambda c: c["other_cores"]) if failed else None
        verdict = (
            f"**INVALID**: {len(failed)} of {len(checks)} quiet checks failed and the run was forced "
            f"(`--force`)"
            + (
                f"; worst before {worst['phase']}: other processes used "
                f"{worst['other_cores']:.2f} cores ({_who(worst['processes'])})"
                if worst
                else ""
            )
            + (
                f"; the host was slow (probe {max(c['probe_drift'] for c in slow):+.0%} from its best) before "
                f"{len(slow)} phase(s)"
                if slow
                else ""
            )
        )
    unknown = [c for c in checks if "host_ok" in c and c["host_ok"] is None]
    if unknown:
        verdict += f"; the probe failed before {len(unknown)} of {len(checks)} phases, whose host speed is unchecked"
    p = s.get("probe") or {}
    drift = p.get("drift")
    drift_txt = "" if drift is None else f", drift {100 * drift:+.1f}%"
    if drift is not None and abs(drift) > pol.max_probe_drift:
        drift_txt += " (**the machine changed during the run**)"
    L = [
        "> **Benchmark protocol** (`benchmarks/_quiet.py`)",
        ">",
        f"> - commit `{commit}`; command `{s.get('command')}`; {s.get('threads')} threads "
        f"(`{'`, `'.join(s.get('thread_env') or THREAD_VARS)}`)",
        f"> - {verdict}",
        f"> - calibration probe (256³ matmul, fresh process): before {_probe_txt(p.get('before'))}; after "
        f"{_probe_txt(p.get('after'))}{drift_txt}",
        f"> - started {s.get('started')}, wall time {s.get('wall_s', 0) / 60:.1f} min",
    ]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        print(json.dumps(_probe_here(int(sys.argv[2]))))
    else:
        print(__doc__)
