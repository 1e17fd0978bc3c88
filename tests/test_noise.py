"""Measurement noise: the readings, the gate, the store's noise columns, and sessions beside a CPU hog."""

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from workbench import noise
from workbench.errors import WorkbenchError
from workbench.presets import get as get_preset
from workbench.session import TuningSession
from workbench.store import ADDED_COLUMNS, SCHEMA_VERSION, RecordStore

from .shapes import SMALL

# readings of the machine's load, beside hogs of the test's own: nothing else may run (`make test` runs these alone)
pytestmark = pytest.mark.serial

HOG = "import time\nend = time.time() + float(__import__('sys').argv[1])\nwhile time.time() < end: pass\n"


def _hogs(n: int, seconds: float = 300.0) -> list:
    """n busy processes (one core each), stopped by the caller."""
    return [subprocess.Popen([sys.executable, "-c", HOG, str(seconds)]) for _ in range(n)]


def _stop(procs) -> None:
    for p in procs:
        p.kill()
        p.wait()


def _spin(seconds: float, threads: int) -> dict:
    def work():
        end = time.perf_counter() + seconds
        x = 0
        while time.perf_counter() < end:
            x += 1

    with noise.TimingMeter(threads) as m:
        ts = [threading.Thread(target=work) for _ in range(threads - 1)]
        for t in ts:
            t.start()
        work()
        for t in ts:
            t.join()
    return m.result


def test_timing_meter_sees_a_hog_take_the_cores():
    # the hogs and the timed thread share one core, whatever the machine has: ours waits about two thirds of the time
    mask = os.sched_getaffinity(0)
    core = {min(mask)}
    hogs = _hogs(2)
    try:
        for h in hogs:
            os.sched_setaffinity(h.pid, core)
        os.sched_setaffinity(0, core)  # this thread only
        time.sleep(0.3)
        r = _spin(0.6, threads=1)
    finally:
        os.sched_setaffinity(0, mask)
        _stop(hogs)
    assert r["wait_fraction"] > noise.NoisePolicy().max_wait_fraction, r
    assert r["other_cores"] > 0.5, r
    # and names them: each hog is a thread of another process that ran during the timing, ours is not one
    hog_pids = {h.pid for h in hogs}
    busiest = {b["pid"] for b in r["busiest"]}
    assert hog_pids <= busiest and os.getpid() not in busiest, r
    assert all(b["cores"] > 0.2 and b["name"].startswith("python") for b in r["busiest"] if b["pid"] in hog_pids)


AFFINITY = """
import json, os, threading
from workbench import measure
measure._worker_init({threads})  # what the runner's worker process runs first
me = threading.get_native_id()
out = {{}}
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{{tid}}/status") as f:
        out[tid] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list"))
print(json.dumps({{"caller": out.pop(str(me)), "others": sorted(out.values())}}))
"""


def _runner_affinity(threads: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", AFFINITY.format(threads=threads)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="one core: there is no second core to keep the two timing threads apart on"
)
def test_runner_binds_each_timing_thread_to_a_core_of_its_own():
    # TVM binds its pool's worker to a core; the thread that calls the kernel (the pool's first share) must be
    # bound to another one, or a moment's wakeup elsewhere lands it on its worker's core (see configure_thread_pool)
    two = _runner_affinity(2)
    workers = [a for a in two["others"] if a.isdigit()]
    assert two["caller"].isdigit() and workers and two["caller"] not in workers, two


def test_machine_load_names_the_busy_process():
    [hog] = _hogs(1)
    try:
        time.sleep(0.3)
        load = noise.machine_load(1.0)
    finally:
        _stop([hog])
    assert load["other_cores"] > 0.5
    assert hog.pid in [p["pid"] for p in load["processes"]], load
    # our own process is never counted as someone else's load
    assert os.getpid() not in [p["pid"] for p in load["processes"]]


def test_wait_for_quiet_is_bounded_and_reports_gave_up():
    hogs = _hogs(2)
    try:
        policy = noise.NoisePolicy(quiet_seconds=0.3, max_wait_s=1.0)
        t0 = time.monotonic()
        ticks = []
        res = noise.wait_for_quiet(policy, on_tick=ticks.append)
    finally:
        _stop(hogs)
    assert not res["quiet"] and 1.0 <= time.monotonic() - t0 < 10.0 and ticks
    assert res["last"]["other_cores"] > policy.max_other_cores


def test_spread_cv_and_describe():
    assert noise.spread([1.0, 1.1, 0.9]) == pytest.approx(0.2)
    assert noise.spread([1.0]) is None and noise.cv([2.0]) is None
    assert noise.cv([1.0, 1.0, 1.0]) == 0.0
    line = noise.describe(
        {
            "source": "load",
            "state": "waiting",
            "why": "trial 3",
            "other_cores": 1.0,
            "processes": [{"pid": 7, "name": "hog", "cores": 0.98}],
        }
    )
    assert "waiting for a quiet machine" in line and "hog (pid 7)" in line
    line = noise.describe(
        {"source": "timing", "state": "remeasured", "trial": 4, "first_ms": 2.0, "remeasured_ms": 1.0}
    )
    assert "trial 4" in line and "2 -> 1 ms" in line


def test_gate_holds_timing_until_a_draw_ends_and_refuses_draws_while_timing():
    gate = noise.MeasurementGate(settle_s=0.2)
    assert gate.begin_draw()
    entered = threading.Event()
    draw_while_timing = []  # asserted here: an assert in the thread would only warn

    def timing():
        with gate:
            entered.set()
            draw_while_timing.append(gate.begin_draw())
            time.sleep(0.1)

    t = threading.Thread(target=timing)
    t.start()
    time.sleep(0.3)
    assert not entered.is_set()  # a draw is in progress: timing waits
    t_end = time.monotonic()
    gate.end_draw()
    assert entered.wait(5)
    assert time.monotonic() - t_end >= 0.18  # and lets the browser settle first
    t.join()
    assert draw_while_timing == [False]  # no draw while a kernel is timed
    assert gate.begin_draw()
    gate.end_draw(drew=False)


class _Readings:
    """``procs_running`` as a script: busy (3 runnable threads) for the first ``busy`` readings, then only the
    reader."""

    def __init__(self, busy: int):
        self.busy, self.calls = busy, 0

    def __call__(self) -> int:
        self.calls += 1
        return 3 if self.calls <= self.busy else 1


def _gate(readings, max_settle_s=1.0):
    return noise.MeasurementGate(
        settle_s=0.0,
        quiet_window_s=0.02,
        max_settle_s=max_settle_s,
        cores_free=lambda w: noise.cores_free_for(w, sample_s=0.002, reading=readings),
    )


def test_once_a_view_has_drawn_each_timing_waits_until_the_cores_are_seen_free():
    readings = _Readings(busy=20)
    gate = _gate(readings)
    assert gate.settle() == 0.0 and readings.calls == 0  # headless: nothing is read, nothing waits
    assert gate.begin_draw()
    gate.end_draw()
    waited = gate.settle()
    assert readings.calls > 20 and waited >= 0.02  # past the busy readings, then a whole free window
    assert (gate.settles, gate.unsettled) == (1, 0) and gate.settled_s == pytest.approx(waited)
    # a machine that stays busy delays a timing by max_settle_s at most, and says so
    busy = _gate(_Readings(busy=10**9), max_settle_s=0.1)
    assert busy.begin_draw()
    busy.end_draw()
    t0 = time.monotonic()
    busy.settle()
    assert time.monotonic() - t0 < 0.5 and busy.unsettled == 1


def test_a_busy_process_is_seen_in_procs_running():
    [hog] = _hogs(1, 30)
    try:
        time.sleep(0.2)
        assert not noise.cores_free_for(0.2)  # the hog is runnable at every sample
    finally:
        _stop([hog])


def test_the_noise_guard_settles_before_every_local_timing_and_never_for_a_remote_one():
    gate = _gate(_Readings(busy=0))
    assert gate.begin_draw()
    gate.end_draw()
    guard = noise.NoiseGuard(noise.NoisePolicy(mode="mark"), _ProbeRunner([0.5] * 8), _ProbeBuilder(), print, gate=gate)
    guard.start()  # the warm-up and the start's readings
    guard.time("k.so", [], trial=1)
    assert gate.settles == 1 + noise.NoiseGuard.START_READINGS + 1

    class Remote(_ProbeRunner):
        measures_locally = False

    gate = _gate(_Readings(busy=0))
    assert gate.begin_draw()
    gate.end_draw()
    noise.NoiseGuard(noise.NoisePolicy(), Remote([0.5]), _ProbeBuilder(), print, gate=gate).time("k.so", [])
    assert gate.settles == 0


class _ProbeRunner:
    """Stands in for the local runner: every run is the probe, at the next latency of a script (ms)."""

    measures_locally = True

    def __init__(self, script_ms):
        self.script = list(script_ms)
        self.repeats = []

    def run(self, path, shapes, repeat=None, timeout=None):
        from workbench.interfaces import RunResult

        self.repeats.append(repeat)
        return RunResult([self.script.pop(0) / 1e3], reading={"wait_fraction": 0.0, "other_cores": 0.0})


class _ProbeBuilder:
    def build(self, mods):
        from workbench.interfaces import BuildResult

        return [BuildResult("probe.so") for _ in mods]

    def discard(self, path):
        pass


def test_without_a_probe_an_undisturbed_timing_ends_marking_only():
    # a wait that gave up leaves the guard marking instead of waiting "until the machine is seen quiet"; with no
    # probe to see it (it did not build), a timing that nothing disturbed is what sees it
    said = []
    guard = noise.NoiseGuard(noise.NoisePolicy(mode="wait"), _ProbeRunner([0.5, 0.5]), _ProbeBuilder(), said.append)
    guard.marking_only = True
    _, noisy = guard.time("k.so", [], trial=1)
    assert not noisy and not guard.marking_only and not said
    # with a probe, the probe decides (check_probe), not one timing
    guard = noise.NoiseGuard(noise.NoisePolicy(mode="mark"), _ProbeRunner([0.5] * 8), _ProbeBuilder(), said.append)
    guard.start()
    guard.marking_only = True
    guard.time("k.so", [], trial=1)
    assert guard.marking_only


def test_probe_baseline_is_the_usual_best_not_one_lucky_reading():
    # A host that varies (a VM): one reading at 0.35 ms, the rest around 0.45. Against the fastest reading every
    # round would count as drifted; against the session's usual best only a real slow-down does.
    said = []
    runner = _ProbeRunner(
        [
            0.45,  # warm-up
            0.35,
            0.45,
            0.46,
            0.44,
            0.47,  # the start's readings
            0.47,
            0.44,
            0.48,
            0.43,  # usual rounds
            0.60,
        ]
    )  # a slow spell: +30 %
    guard = noise.NoiseGuard(noise.NoisePolicy(mode="mark"), runner, _ProbeBuilder(), said.append)
    guard.start()
    assert 0.40 < guard.baseline_ms < 0.46, guard.baseline_ms
    assert [guard.check_probe("before round") for _ in range(4)] == [False] * 4
    assert guard.check_probe("before round") is True
    drift = [p for p in said if p.KIND == "measurement_noise"]
    assert len(drift) == 1 and drift[0].state == "drift" and drift[0].probe_ms == 0.6
    assert set(runner.repeats) == {noise.NoisePolicy().probe_repeats}  # each reading a median of several windows
    # a steady host keeps the fastest reading as its baseline, as before
    steady = noise.NoiseGuard(
        noise.NoisePolicy(mode="mark"),
        _ProbeRunner([0.5, 0.50, 0.50, 0.51, 0.50, 0.50, 0.60]),
        _ProbeBuilder(),
        lambda p: None,
    )
    steady.start()
    assert steady.baseline_ms == 0.5 and steady.check_probe("after round") is True


def test_bad_noise_settings_are_one_line_errors():
    with pytest.raises(WorkbenchError, match="noise must be one of"):
        get_preset("quick", noise="sometimes")
    with pytest.raises(WorkbenchError, match="confirm_rounds"):
        get_preset("quick", confirm_rounds=-1)
    r = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "tune", "matmul-128", "--noise", "loud"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "invalid choice" in r.stderr and "Traceback" not in r.stderr


def _old_store(path, version: int):
    """A store as schema ``version`` wrote it: the records table without the columns added after it."""
    s = RecordStore(str(path))
    s.close()
    later = [col for v, cols in ADDED_COLUMNS.items() if v > version for col in cols]
    c = sqlite3.connect(str(path))
    c.executescript(
        "".join(f"ALTER TABLE records DROP COLUMN {col};" for col in later) + f"PRAGMA user_version={version};"
    )
    c.close()
    return later


@pytest.mark.parametrize("version", [1, 2])
def test_older_store_reads_read_only_and_upgrades_for_writing(tmp_path, version):
    p = tmp_path / "old.db"
    later = _old_store(p, version)
    ro = RecordStore(str(p), readonly=True)
    assert {"noisy", "build_s"} <= set(ro.records().columns) and ro.summary()["noisy"] == 0
    ro.close()
    rw = RecordStore(str(p))
    assert rw.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert set(later) <= {r[1] for r in rw.conn.execute("PRAGMA table_info(records)")}


def test_store_of_a_newer_schema_is_refused(tmp_path):
    p = tmp_path / "new.db"
    RecordStore(str(p)).close()
    c = sqlite3.connect(str(p))
    c.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    c.close()
    for ro in (False, True):
        with pytest.raises(WorkbenchError, match="newer workbench"):
            RecordStore(str(p), readonly=ro)


@pytest.mark.slow
def test_session_beside_a_hog_marks_its_records_noisy(tmp_path):
    db = str(tmp_path / "n.db")
    s = TuningSession(SMALL["matmul"], trials=4, trials_per_round=4, db=db, strategy="no-rewrite", noise="mark")
    hogs = []
    events = []

    def on(e):
        events.append(e)
        if e.kind == "calibration" and e.data["when"] == "start":
            hogs.extend(_hogs(1))  # after the baseline: the machine changes under the session
            time.sleep(0.5)

    s.subscribe(on)
    try:
        s.run()
    finally:
        _stop(hogs)
    kinds = [e.kind for e in events]
    assert "measurement_noise" in kinds
    rec = s.records()
    assert rec["noisy"].sum() > 0, rec[["trial", "latency_ms", "noisy"]]
    assert s.summary()["noisy"] == int(rec["noisy"].sum())
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "show", db, "--json"], capture_output=True, text=True)
    summ = json.loads(out.stdout)
    assert summ["noise_events"] == kinds.count("measurement_noise") and summ["noisy"] == int(rec["noisy"].sum())


@pytest.mark.slow
def test_session_waits_for_quiet_and_retimes_what_a_hog_disturbed(tmp_path, monkeypatch):
    import functools

    # The load path alone: the probe's drift check is off here, since this host's own slow spells (which the
    # probe path waits out) would make the outcome depend on the hour rather than on the hog.
    monkeypatch.setattr(noise, "NoisePolicy", functools.partial(noise.NoisePolicy, max_probe_drift=1e9))
    # Processes an earlier test left winding down would disturb the re-time this test expects to be clean.
    assert noise.wait_for_quiet(noise.NoisePolicy(max_wait_s=60))["quiet"]
    db = str(tmp_path / "w.db")
    s = TuningSession(
        SMALL["matmul"], trials=8, trials_per_round=8, db=db, strategy="no-rewrite", noise="wait", confirm_rounds=2
    )
    hogs = []
    events = []
    hogs_from: list = []  # the index of the first event after the hogs started

    def on(e):
        events.append(e)
        if e.kind == "calibration" and e.data["when"] == "start":
            hogs.extend(_hogs(2))
            hogs_from.append(len(events))
            time.sleep(0.5)
        elif e.kind == "measurement_noise" and e.data["state"] == "waiting":
            _stop(hogs)  # the machine becomes quiet while the session waits

    s.subscribe(on)
    try:
        s.run()
    finally:
        _stop(hogs)
    # A kernel thread of the host (seen: kdamond at 0.35 cores) can make the session wait before its calibration,
    # before any hog: what the hogs caused starts after them.
    assert hogs_from, "the session never reached its calibration"
    noise_events = [e.data for e in events[hogs_from[0] :] if e.kind == "measurement_noise"]
    states = [d["state"] for d in noise_events]
    # A re-time after the wait carries the first and the new latency; it is "remeasured" when clean, "marked" when
    # the machine was still not quiet enough (on a VM whose host drifts, the first timing after the hogs stop can
    # see a 10 % run-queue wait): the session must have waited and re-timed either way.
    retimes = [d for d in noise_events if "remeasured_ms" in d]
    assert states[:3] == ["noisy", "waiting", "quiet"] and retimes, [
        (d["state"], noise.describe(d)) for d in noise_events
    ]
    assert s.status == "finished" and s.trials_done == 8
    rec = s.records().set_index("trial")
    # what the hog disturbed was waited for and re-timed, not recorded as is: clean when re-timed clean, else marked
    # (a re-time inside the winner's-curse confirmation has no trial: it re-measures a stored record)
    # (a would-be best's latency and flag come from its confirmation's timings instead: checked below)
    for d in (d for d in retimes if d.get("trial") is not None):
        confirmed = rec.loc[d["trial"], "confirm_spread"]
        if confirmed is None or np.isnan(confirmed):
            assert bool(rec.loc[d["trial"], "noisy"]) == (d["state"] == "marked"), (d, rec[["noisy"]])
    rec = rec.reset_index()
    # the best was re-measured interleaved: one sample per confirmation round, and its spread stored
    best = RecordStore(db, readonly=True).record(int(rec[rec["is_best"]]["id"].iloc[-1]))
    assert len(best["confirm_secs"]) == 2 and best["confirm_spread"] is not None
    # the latency it reports is that re-measured median
    assert best["latency_ms"] == pytest.approx(float(np.median(best["confirm_secs"])) * 1e3)


def test_noise_default_comes_from_the_environment_for_named_presets_only(monkeypatch):
    from workbench.presets import PRESETS

    monkeypatch.setenv("WORKBENCH_NOISE", "off")
    assert get_preset("quick").noise == "off"
    assert get_preset("quick", noise="wait").noise == "wait"  # an explicit choice wins
    assert get_preset(PRESETS["quick"]).noise == "wait"  # a stored preset (a resumed session) keeps its own
    monkeypatch.setenv("WORKBENCH_NOISE", "loud")
    with pytest.raises(WorkbenchError, match="from WORKBENCH_NOISE"):
        get_preset("faithful")


def test_preset_fields_from_the_environment_for_named_presets_only(monkeypatch):
    from workbench.presets import PRESETS

    monkeypatch.setenv("WORKBENCH_PRESET_OVERRIDES", '{"min_repeat_ms": 7, "confirm_rounds": 1, "pruning": []}')
    p = get_preset("quick")
    assert (p.min_repeat_ms, p.confirm_rounds, p.pruning) == (7, 1, ())
    assert get_preset("quick", confirm_rounds=2).confirm_rounds == 2  # an explicit choice wins
    assert get_preset(PRESETS["quick"]).min_repeat_ms == 30  # a stored preset (a resumed session) keeps its own
    monkeypatch.setenv("WORKBENCH_PRESET_OVERRIDES", '{"min_repeat": 7}')
    with pytest.raises(WorkbenchError, match="unknown preset field.*min_repeat.*valid: .*min_repeat_ms"):
        get_preset("quick")
    monkeypatch.setenv("WORKBENCH_PRESET_OVERRIDES", "min_repeat_ms=7")
    with pytest.raises(WorkbenchError, match="WORKBENCH_PRESET_OVERRIDES must be a JSON object"):
        get_preset("quick")
    monkeypatch.setenv("WORKBENCH_PRESET_OVERRIDES", '{"confirm_rounds": -1}')  # the values are checked as given
    with pytest.raises(WorkbenchError, match="confirm_rounds"):
        get_preset("quick")


class _SteadyAfterScript(_ProbeRunner):
    """A probe runner whose last scripted latency repeats for ever (a slow spell that does not end)."""

    def run(self, path, shapes, repeat=None, timeout=None):
        if len(self.script) == 1:
            self.script.append(self.script[0])
        return super().run(path, shapes, repeat=repeat, timeout=timeout)


@pytest.mark.parametrize("busy", [False, True], ids=["slow host, machine quiet", "other processes busy"])
def test_a_wait_for_a_slow_host_is_shorter_than_one_for_local_load(monkeypatch, busy):
    # A slow host with nothing busy here is waited out for max_drift_wait_s only; local load, which a user can
    # end, for max_wait_s.
    cores = [0.0]  # a quiet start (the baseline: 0.5 ms), then the spell

    def load(seconds=0.25, exclude=None, top=3):
        time.sleep(0.02)
        return {"other_cores": cores[0], "processes": [], "seconds": 0.02}

    monkeypatch.setattr(noise, "machine_load", load)
    said = []
    policy = noise.NoisePolicy(mode="wait", quiet_seconds=0.02, max_wait_s=1.5, max_drift_wait_s=0.3)
    guard = noise.NoiseGuard(policy, _SteadyAfterScript([0.5] * 6 + [0.8]), _ProbeBuilder(), said.append)
    guard.start()
    cores[0] = 1.0 if busy else 0.0
    t0 = time.monotonic()
    assert guard.check_probe("before round") is True  # the wait gave up: the round's timings are suspect
    waited = time.monotonic() - t0
    [end] = [p for p in said if p.KIND == "measurement_noise" and p.state in ("quiet", "gave-up")]
    assert end.state == "gave-up" and guard.marking_only
    if busy:
        assert 1.5 <= end.waited_s and waited < 10
    else:
        assert 0.3 <= end.waited_s < 1.5 and waited < 1.5
