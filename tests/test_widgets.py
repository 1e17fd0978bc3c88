"""Dashboard views fed with the events of a recorded real tuning session (notebooks/data/demo_session.db)."""

import math
import os
import shutil
import sqlite3
import threading
import time
from types import SimpleNamespace

import comm
import numpy as np
import pandas as pd
import pytest
from plotly.callbacks import InputDeviceState, Points

from widgets import Dashboard, SessionModel
from widgets.costmodel import round_quality
from widgets.model import RECORDS
from widgets.sketch import sampling_lines
from widgets.stats import decimate, kendall_tau, spearman, topk_recall
from widgets.table import RecordsTable
from workbench.events import Event
from workbench.noise import MeasurementGate
from workbench.replay import ReplaySession
from workbench.store import RecordStore

# redraw budgets and the measurement gate's waits are timed in wall seconds (`make test` runs these alone)
pytestmark = pytest.mark.serial

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_DB = os.path.join(ROOT, "notebooks", "data", "demo_session.db")


class RecordingComm:
    """Stands in for a kernel comm (as in ipywidgets' own tests) and keeps every message sent."""

    kernel = "Truthy"

    def __init__(self, log, **kwargs):
        self.comm_id = f"comm-{len(log)}-{id(self)}"
        self.log = log
        self.log_key = None

    def open(self, *a, **k):
        pass

    def on_msg(self, *a, **k):
        pass

    def send(self, data=None, metadata=None, buffers=None):
        self.log.append((time.monotonic(), self, data or {}))

    def close(self, *a, **k):
        pass


@pytest.fixture
def comm_log(monkeypatch):
    log = []
    monkeypatch.setattr(comm, "create_comm", lambda **kw: RecordingComm(log, **kw))
    return log


def figure_updates(log, fig):
    """(time) of every Python->browser figure update message of ``fig`` (the None resets are not messages users see)."""
    out = []
    for t, c, data in log:
        if c is not fig.comm or data.get("method") != "update":
            continue
        state = data.get("state", {})
        if any(
            state.get(k) is not None
            for k in ("_py2js_update", "_py2js_restyle", "_py2js_relayout", "_py2js_addTraces", "_py2js_deleteTraces")
        ):
            out.append(t)
    return out


@pytest.fixture(scope="module")
def demo_records():
    store = RecordStore(DEMO_DB, readonly=True)
    df = store.records(store.sessions()[-1]["id"])
    store.close()
    return df


def fed_dashboard(events, **kw):
    dash = Dashboard.replay(DEMO_DB, autopump=False, **kw)
    dash.attach(ReplaySession(DEMO_DB))
    for ev in events:
        dash.queue.put(ev)
    dash.pump_once()
    return dash


# ---------------------------------------------------------------- statistics


def test_rank_correlations_match_definitions():
    x = [1, 2, 3, 4, 5]
    assert spearman(x, [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert kendall_tau(x, [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=40), rng.normal(size=40)
    assert spearman(a, b) == pytest.approx(pd.Series(a).corr(pd.Series(b), method="spearman"))
    # by hand: 5 concordant pairs, 1 discordant, no ties -> 4/6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(2 / 3)
    # tau-b with a tie in x: 5 concordant of 6 pairs, 5 pairs untied in x, 6 untied in y -> 5/sqrt(30)
    assert kendall_tau([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(5 / math.sqrt(30))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(kendall_tau([1, 2], [2, 1]))


def test_topk_recall_and_decimation():
    assert topk_recall([0.9, 0.8, 0.1, 0.0], [100, 90, 1, 2], 2) == 1.0
    assert topk_recall([0.0, 0.1, 0.8, 0.9], [100, 90, 1, 2], 2) == 0.0
    assert topk_recall([0.9, 0.1, 0.8, 0.0], [100, 90, 1, 2], 2) == 0.5
    idx = decimate(10_000, 400)
    assert len(idx) <= 400 and idx[-1] == 9_999 and idx[0] == 0
    assert np.all(np.diff(idx) > 0)
    assert list(idx[-200:]) == list(range(9_800, 10_000))  # the newest points are kept exactly
    assert list(decimate(7, 400)) == list(range(7))


# ---------------------------------------------------------------- model


def test_model_from_recorded_events_matches_the_store(demo_events, demo_records):
    m = SessionModel()
    for ev in demo_events:
        m.apply(ev)
    for ev in demo_events[:10]:  # a backfill overlapping the live queue must not double-count
        m.apply(ev)
    assert m.status == "finished"
    assert m.trials_done == len(demo_records) == len(m.records) == 32
    assert m.strategies == RecordStore(DEMO_DB, readonly=True).sessions()[-1]["strategies"]
    assert len(m.strategies) >= 3
    ok = demo_records[demo_records["error_class"].isna() & demo_records["verified"]]
    assert m.best["id"] == int(ok.loc[ok["latency_ms"].idxmin(), "id"])
    for s, steps in m.best_steps.items():
        g = [r["gflops"] for r in steps]
        assert g == sorted(g) and len(set(g)) == len(g), "best-so-far must strictly improve"
        sub = demo_records[(demo_records["strategy"] == s) & demo_records["error_class"].isna()]
        assert g[-1] == pytest.approx(sub["gflops"].max())
    assert m.eta_seconds() is None  # finished: nothing left
    part = SessionModel()
    for ev in demo_events[: len(demo_events) // 2]:
        part.apply(ev)
    assert part.eta_seconds() is not None and part.eta_seconds() > 0


def test_round_quality_per_round(demo_records):
    q = round_quality(demo_records.to_dict("records"))
    assert list(q["round"]) == sorted(demo_records["round"].unique().tolist())
    r1 = demo_records[demo_records["round"] == 1]
    assert q.iloc[0]["spearman"] == pytest.approx(spearman(r1["predicted_score"], r1["gflops"]))
    assert ((q["topk_recall"] >= 0) & (q["topk_recall"] <= 1)).all()


# ---------------------------------------------------------------- views and pump


def test_one_pump_tick_sends_one_update_per_figure(comm_log, demo_events):
    dash = Dashboard.replay(DEMO_DB, autopump=False)
    dash.attach(ReplaySession(DEMO_DB))
    comm_log.clear()
    for ev in demo_events:
        dash.queue.put(ev)
    assert dash.pump_once() == len(demo_events)
    # trace creation for the three strategies, then exactly one batched data update per figure
    tp = figure_updates(comm_log, dash.throughput.fig)
    cm = figure_updates(comm_log, dash.cost_model.fig)
    data_updates = [
        d
        for _, c, d in comm_log
        if c is dash.throughput.fig.comm and d.get("state", {}).get("_py2js_update") is not None
    ]
    assert len(data_updates) == 1
    n = len(dash.model.strategies)
    assert len(tp) <= 1 + 4 * n + 1 and len(cm) <= 1 + n + 3 + 1  # clear + addTraces per trace + the update
    n_before = len(comm_log)
    assert dash.pump_once() == 0
    assert len(comm_log) == n_before, "an idle tick must send nothing"


def test_figure_messages_per_second_are_bounded_under_a_burst(comm_log, demo_events):
    dash = Dashboard.replay(DEMO_DB, max_hz=4.0, autopump=True)
    dash.attach(ReplaySession(DEMO_DB))
    dash._start_pump()
    comm_log.clear()
    t0 = time.monotonic()
    # the whole recorded session, 5 times over 2.5 s: ~200 events/s, far faster than any redraw budget
    sent = 0
    for rep in range(5):
        for ev in demo_events:
            dash.queue.put(Event(ev.kind, ev.session_id, ev.time, ev.elapsed, ev.data, 0))
            sent += 1
            time.sleep(2.5 / (5 * len(demo_events)))
    time.sleep(0.6)
    dash._stop_pump()
    duration = time.monotonic() - t0
    for fig in (dash.throughput.fig, dash.cost_model.fig):
        updates = [t for t, c, d in comm_log if c is fig.comm and d.get("state", {}).get("_py2js_update") is not None]
        assert updates, "the figure was never redrawn"
        assert len(updates) <= 4 * duration + 1
        per_second = np.histogram(updates, bins=np.arange(t0, t0 + duration + 1.0, 1.0))[0]
        assert per_second.max() <= 5, per_second
    assert dash.ticks <= 4 * duration + 2
    assert sent > 4 * dash.ticks  # events coalesce: several per redraw
    assert len(dash.model.records) == 5 * 32


def test_raw_points_are_capped_and_best_so_far_is_exact(demo_events):
    dash = fed_dashboard(demo_events, max_points=5)
    fig, m = dash.throughput.fig, dash.model
    for i, s in enumerate(m.strategies):
        raw, best = fig.data[4 * i], fig.data[4 * i + 1]
        assert len(raw.x) <= 5
        steps = m.best_steps[s]
        assert list(best.y[: len(steps)]) == [r["gflops"] for r in steps]
        assert list(best.x[: len(steps)]) == [r["trial"] for r in steps]
        assert best.x[-1] == m.last_by_strategy[s]["trial"]  # flat tail up to the latest trial
        assert "GFLOPS" in best.text[0] and "trial" in best.text[0]
    assert dash.throughput.points_sent <= 2 * 5 * len(m.strategies) + 2 * sum(len(v) + 1 for v in m.best_steps.values())


def test_clicking_a_point_opens_the_inspector(demo_events):
    dash = fed_dashboard(demo_events)
    raw = dash.throughput.fig.data[0]  # first strategy, vs trial
    i = next(j for j, trial in enumerate(raw.x) if dash.model.record_by_trial(trial)["id"] != dash.model.best["id"])
    pts = Points(point_inds=[i], xs=[raw.x[i]], ys=[raw.y[i]], trace_name=raw.name, trace_index=0)
    raw._dispatch_on_click(pts, InputDeviceState())
    rec = dash.model.record_by_trial(raw.x[i])
    insp = dash.inspector
    assert insp.record_id == rec["id"] and dash.tabs.selected_index == 2
    assert "T.prim_func" in insp.panes[0].value
    assert "sample_perfect_tile" in insp.panes[1].value and "SamplePerfectTile" in insp.panes[1].value
    assert "+++ trial" in insp.panes[2].value and "--- best (trial" in insp.panes[2].value
    assert "no error" in insp.panes[3].value
    insp.show(dash.model.best["id"])
    assert "current best" in insp.panes[2].value


def _replay_of_demo_copy(path, sql: str, demo_events):
    """A replay dashboard of a copy of the recorded session, changed by one SQL statement, fed all its events."""
    shutil.copy(DEMO_DB, path)
    RecordStore(str(path)).close()  # the demo predates the later columns: opened for writing, it gains them (empty)
    c = sqlite3.connect(path)
    c.execute(sql)
    c.commit()
    c.close()
    dash = Dashboard.replay(str(path), autopump=False)
    dash.attach(ReplaySession(str(path)))
    for ev in demo_events:
        dash.queue.put(ev)
    dash.pump_once()
    return dash


def test_inspector_shows_the_error_of_a_failed_candidate(tmp_path, demo_events):
    # The recorded session had no failure; mark one record failed in a copy, as a build error would.
    sql = "UPDATE records SET error_class='build-error', error_msg='TVMError: vectorize extent 3 <boom>' WHERE trial=7"
    dash = _replay_of_demo_copy(tmp_path / "failed.db", sql, demo_events)
    dash.inspector.show_trial(7)
    assert "build-error" in dash.inspector.header.value
    assert "vectorize extent 3 &lt;boom&gt;" in dash.inspector.panes[3].value
    assert dash.inspector.tabs.selected_index == 3
    dash.inspector.show_trial(999)
    assert "no measured trial 999" in dash.inspector.header.value


def test_inspector_and_table_show_how_long_a_candidate_took_to_compile(tmp_path, demo_events):
    db = tmp_path / "built.db"
    dash = _replay_of_demo_copy(db, "UPDATE records SET build_s=12.5 WHERE trial=7", demo_events)
    dash.inspector.show_trial(7)
    assert "built in 12.50 s" in dash.inspector.header.value
    dash.inspector.show_trial(3)
    assert "built in" not in dash.inspector.header.value  # unknown for a record from before build_s
    # the table, fed the store's records as a live session's events carry them
    recs = RecordStore(str(db), readonly=True).records().to_dict("records")
    table = RecordsTable()
    table.refresh(SimpleNamespace(records=recs, db=str(db), session_id=1), {RECORDS})
    table.sort_by.value = "build seconds"
    top = table.frame().iloc[0]
    assert top["trial"] == 7 and top["build_s"] == 12.5 and "<td>12.50</td>" in table.html.value


def test_records_table_sorts(demo_events, demo_records):
    dash = fed_dashboard(demo_events)
    t = dash.table
    t.sort_by.value, t.ascending.value = "GFLOPS", False
    assert t.frame().iloc[0]["gflops"] == pytest.approx(demo_records["gflops"].max())
    t.sort_by.value, t.ascending.value = "latency", True
    assert t.frame().iloc[0]["latency_ms"] == pytest.approx(demo_records["latency_ms"].min())
    t.rows.value = 25
    assert len(t.frame()) == 25
    assert "<table" in t.html.value and "chosen_by" in t.html.value and "predicted_score" in t.html.value


def test_controls_show_status_progress_and_controller(demo_events):
    dash = fed_dashboard(demo_events[:30])
    c = dash.controls
    m = dash.model
    assert c.progress.value == m.trials_done and c.progress.max == 32
    assert "ETA ~" in c.eta.value
    assert "round-robin" in c.arms.value and "no-rewrite" in c.arms.value
    for ev in demo_events[30:]:
        dash.queue.put(ev)
    dash.pump_once()
    assert "finished" in c.status.value and "best" in c.status.value and "ETA —" in c.eta.value
    assert c.mode.disabled  # a replay cannot be steered


def test_status_shows_rpc_runner_health(demo_events):
    dash = fed_dashboard(demo_events[:30])
    sid = demo_events[0].session_id
    for i, (server, state) in enumerate(
        [("10.0.0.2:9190", "busy"), ("10.0.0.3:9190", "busy"), ("10.0.0.3:9190", "lost")]
    ):
        dash.queue.put(
            Event(
                "runner_health",
                sid,
                1e9 + i,
                100.0 + i,
                {"server": server, "state": state, "measured": 3, "errors": 0, "timeouts": i},
            )
        )
    dash.pump_once()
    status = dash.controls.status.value
    assert "10.0.0.2:9190 busy" in status and "10.0.0.3:9190 lost" in status  # the latest state per server
    assert "10.0.0.3:9190 busy" not in status


def test_buttons_work_while_a_replay_runs():
    dash = Dashboard.replay(DEMO_DB, speed=4.0, max_gap=0.2)
    try:
        dash.controls.start.click()
        s = dash.session
        deadline = time.time() + 20
        while dash.model.trials_done < 3 and time.time() < deadline:
            time.sleep(0.05)
        assert dash.model.trials_done >= 3 and dash.controls.start.disabled
        dash.controls.pause.click()
        deadline = time.time() + 10
        while "paused" not in dash.controls.status.value and time.time() < deadline:
            time.sleep(0.05)
        assert dash.model.status == "paused" and ">paused<" in dash.controls.status.value
        n = dash.model.trials_done
        time.sleep(0.6)
        assert dash.model.trials_done == n
        assert not dash.controls.resume.disabled
        dash.controls.resume.click()
        deadline = time.time() + 10
        while dash.model.trials_done == n and time.time() < deadline:
            time.sleep(0.05)
        assert dash.model.trials_done > n
        dash.controls.stop.click()
        assert s.wait(10)
        dash.wait(5)
        assert dash.model.status == "stopped" and ">stopped<" in dash.controls.status.value
        assert not dash.controls.start.disabled  # Start replays again
    finally:
        dash.close()


def test_pump_never_runs_widget_code_on_the_tuning_thread():
    dash = Dashboard.replay(DEMO_DB, speed=1000.0, max_gap=0.0, autopump=False)
    threads = set()
    orig = dash.throughput.refresh

    def spy(model, changes):
        threads.add(threading.current_thread().name)
        orig(model, changes)

    dash.throughput.refresh = spy
    s = dash.start()
    assert s.wait(20)
    dash.pump_once()
    assert threads == {threading.current_thread().name}
    assert dash.model.trials_done == 32


def test_sketch_view_marks_every_open_decision(demo_events):
    dash = fed_dashboard(demo_events[:1])  # session_started names the workload
    sv = dash.sketches
    sketches = sv.load()
    assert len(sketches) >= 1 and sv.sketch.value == sketches[0].index
    for sk in sketches:
        assert len(sampling_lines(sk.trace_unfilled)) == len(sk.decisions) > 0
    assert sv.body.value.count("# decision") == len(sketches[0].decisions)
    assert "# decision 0: ?" in sv.body.value
    sch = None
    for seed in range(1, 20):
        sch = sv.annotate(seed)
        if sch is not None:
            break
    assert sch is not None
    assert ": ?" not in sv.body.value and f"seed {sv.seed.value}" in sv.body.value


# ---------------------------------------------------------------- measurement noise


def noise_ev(sid, kind, t=0.0, **data):
    return Event(kind, sid, 1e9 + t, 100.0 + t, data)


def test_model_and_status_show_measurement_noise(demo_events):
    dash = fed_dashboard(demo_events)
    m, c = dash.model, dash.controls
    sid = demo_events[0].session_id
    assert "wb-noise" not in c.status.value  # a session that said nothing about noise shows no indicator
    put = dash.queue.put
    put(noise_ev(sid, "calibration", 0, probe_ms=1.0, baseline_ms=1.0, drift=0.0, when="start"))
    put(noise_ev(sid, "calibration", 1, probe_ms=1.02, baseline_ms=1.0, drift=0.02, when="before round"))
    dash.pump_once()
    assert (m.noise["probe_ms"], m.noise["baseline_ms"], m.noise["drift"]) == (1.02, 1.0, 0.02)
    assert "timing: quiet (probe +2 %)" in c.status.value and "#2b8a3e" in c.status.value

    hog = {"pid": 123, "name": "<script>x</script>", "cores": 1.0}
    put(
        noise_ev(
            sid, "measurement_noise", 2, source="timing", state="noisy", trial=31, wait_fraction=0.3, other_cores=1.0
        )
    )
    put(
        noise_ev(
            sid,
            "measurement_noise",
            3,
            source="load",
            state="waiting",
            why="trial 31",
            other_cores=1.02,
            processes=[hog],
            seconds=0.25,
        )
    )
    dash.pump_once()
    assert m.noise["waiting"] and m.noise["events"] == 2
    assert m.noise["line"].startswith("waiting for a quiet machine before trial 31")
    status = c.status.value
    assert "timing: waiting for a quiet machine — &lt;script&gt;x&lt;/script&gt; (pid 123) 1.00 cores" in status, status
    assert "<script>" not in status and "#e67700" in status

    put(
        noise_ev(
            sid,
            "measurement_noise",
            4,
            source="load",
            state="quiet",
            why="trial 31",
            waited_s=2.0,
            other_cores=0.01,
            processes=[],
        )
    )
    dash.pump_once()
    assert not m.noise["waiting"] and "waiting for a quiet machine" not in c.status.value
    assert "machine quiet again after 2.0 s" in c.status.value and "timing: quiet" in c.status.value

    put(
        noise_ev(
            sid, "measurement_noise", 5, source="load", state="waiting", why="a timing", other_cores=0.9, processes=[]
        )
    )
    put(
        noise_ev(
            sid,
            "measurement_noise",
            6,
            source="load",
            state="gave-up",
            why="a timing",
            waited_s=30.0,
            other_cores=0.9,
            processes=[hog],
        )
    )
    dash.pump_once()
    assert not m.noise["waiting"] and m.noise["marking"]
    assert "timing: machine busy, timings marked noisy" in c.status.value and "#c92a2a" in c.status.value
    assert "<script>" not in c.status.value
    put(noise_ev(sid, "calibration", 7, probe_ms=1.01, baseline_ms=1.0, drift=0.01, when="after round"))
    dash.pump_once()
    assert not m.noise["marking"] and "timing: quiet (probe +1 %)" in c.status.value

    # records of a round marked noisy after the fact: the model, the count, the scatter and the table
    marked = [r["id"] for r in m.records if r["id"] != m.best["id"]][:2]
    put(noise_ev(sid, "records_marked_noisy", 8, record_ids=marked, reason="probe drift after the round"))
    dash.pump_once()
    assert m.n_noisy == 2 and all(m.by_id[i]["noisy"] for i in marked)
    assert "2 noisy" in c.status.value
    for rid in marked:
        rec = m.by_id[rid]
        i = 4 * m.strategies.index(rec["strategy"])
        raw = dash.throughput.fig.data[i]
        j = dash.throughput._ids[i].index(rid)
        assert raw.marker.symbol[j] == "x" and "NOISY" in raw.text[j] and "probe drift" in raw.text[j]
        clean = [k for k, other in enumerate(dash.throughput._ids[i]) if other not in marked]
        assert all(raw.marker.symbol[k] == "circle" for k in clean)
    dash.table.sort_by.value = "noisy"
    top = dash.table.frame().head(2)
    assert set(top["id"]) == set(marked) and top["noisy"].all()
    assert ">noisy</span>" in dash.table.html.value
    dash.inspector.show(marked[0])
    assert "NOISY timing: probe drift after the round" in dash.inspector.header.value


def test_best_remeasured_updates_the_record_best_and_steps(demo_events):
    dash = fed_dashboard(demo_events)
    m = dash.model
    sid = demo_events[0].session_id
    best = m.best
    s = best["strategy"]
    n_steps = len(m.best_steps[s])
    assert n_steps >= 2 and m.best_steps[s][-1] is best
    # re-timed a little slower: the record, the overall best and the last step change in place
    g = best["gflops"] / 1.05
    dash.queue.put(
        noise_ev(
            sid,
            "best_remeasured",
            0,
            record_id=best["id"],
            strategy=s,
            latency_ms=best["latency_ms"] * 1.05,
            gflops=g,
            samples=9,
        )
    )
    dash.pump_once()
    assert m.by_id[best["id"]]["gflops"] == g and m.best["gflops"] == g and m.best["id"] == best["id"]
    assert m.best_steps[s][-1]["gflops"] == g and len(m.best_steps[s]) == n_steps
    i = 4 * m.strategies.index(s)
    assert dash.throughput.fig.data[i + 1].y[n_steps - 1] == pytest.approx(g)
    assert f"best {g:.1f} GFLOPS" in dash.controls.status.value
    # re-timed below the strategy's first step: the steps it no longer beats go, the curve still rises
    g2 = m.best_steps[s][0]["gflops"] * 0.9
    dash.queue.put(
        noise_ev(
            sid,
            "best_remeasured",
            1,
            record_id=best["id"],
            strategy=s,
            latency_ms=m.flops / g2 / 1e6,
            gflops=g2,
            samples=9,
        )
    )
    dash.pump_once()
    steps = [r["gflops"] for r in m.best_steps[s]]
    assert steps == [g2] and m.best_steps[s][-1]["id"] == best["id"]
    for strategy, st in m.best_steps.items():
        gs = [r["gflops"] for r in st]
        assert gs == sorted(gs) and len(set(gs)) == len(gs), strategy
    assert list(dash.throughput.fig.data[i + 1].y[:1]) == [pytest.approx(g2)]
    # a record the model never saw is ignored
    dash.queue.put(noise_ev(sid, "best_remeasured", 2, record_id=10**9, strategy=s, latency_ms=1.0, gflops=1.0))
    dash.pump_once()
    assert m.best["gflops"] == g2


def test_pump_holds_redraws_while_kernels_are_timed(comm_log, demo_events):
    dash = Dashboard.replay(DEMO_DB, autopump=False)
    dash.attach(ReplaySession(DEMO_DB))
    gate = dash.session.measurement_gate = MeasurementGate(settle_s=0.0)
    ticks = dash.ticks
    n_msgs = len(figure_updates(comm_log, dash.throughput.fig)) + len(figure_updates(comm_log, dash.cost_model.fig))
    with gate:
        assert gate.timing_now
        for ev in demo_events:
            dash.queue.put(ev)
        assert dash.pump_once() == 0
        assert dash.model.n_events == 0 and dash.ticks == ticks and dash.held_ticks == 1
        assert len(dash.throughput.fig.data) == 0 and dash.table.frame().empty
        assert (
            len(figure_updates(comm_log, dash.throughput.fig)) + len(figure_updates(comm_log, dash.cost_model.fig))
        ) == n_msgs, "a figure was drawn while timing"
        assert gate._drawing == 0  # a refused begin_draw leaves nothing to end
        # a button pressed while timing: the controls answer at once, nothing else is drawn
        dash.stop()
        assert "stopping (after the current candidate)" in dash.controls.status.value
        assert "timing kernels" in dash.controls.status.value
        assert dash.model.n_events == 0 and len(dash.throughput.fig.data) == 0
        # the session starts waiting for a quiet machine: it suspends its gate, and the wait is drawn at once
        dash.queue.put(
            noise_ev(
                demo_events[0].session_id,
                "measurement_noise",
                0,
                source="load",
                state="waiting",
                why="trial 3",
                other_cores=1.0,
                processes=[{"pid": 7, "name": "<b>hog</b>", "cores": 1.0}],
            )
        )
        with gate.suspended():
            assert not gate.timing_now
            assert dash.pump_once() == len(demo_events) + 1
            assert "waiting for a quiet machine — &lt;b&gt;hog&lt;/b&gt; (pid 7)" in dash.controls.status.value
            assert dash.model.noise["waiting"]
        assert gate.timing_now  # timing again: held again
        dash.queue.put(
            noise_ev(demo_events[0].session_id, "measurement_noise", 1, source="load", state="quiet", waited_s=2.0)
        )
        assert dash.pump_once() == 0
    assert dash.pump_once() == 1
    assert dash.model.trials_done == 32 and dash.ticks == ticks + 2  # the wait, then the rest
    assert len(dash.throughput.fig.data) > 0 and len(dash.throughput.fig.data[0].x) > 0
    assert gate._drawing == 0 and gate._last_draw > 0  # end_draw(drew=True): timing settles after this draw
    assert dash.pump_once() == 0


def test_a_session_paused_inside_its_timing_phase_is_drawn(demo_events):
    # TuningSession pauses between two candidates of a round, inside its timing phase; it suspends its
    # measurement gate while paused, so the dashboard shows the pause instead of "pausing" until Resume.
    dash = Dashboard.replay(DEMO_DB, autopump=False)
    dash.attach(ReplaySession(DEMO_DB))
    gate = dash.session.measurement_gate = MeasurementGate(settle_s=0.0)
    sid = demo_events[0].session_id
    for ev in demo_events[:15]:
        dash.queue.put(ev)
    dash.pump_once()
    with gate:
        for ev in demo_events[15:20]:
            dash.queue.put(ev)
        dash.pause()  # the session is asked to pause, but has not reached its pause point yet
        assert dash.model.n_events == 15 and "pausing" in dash.controls.status.value
        assert dash.pump_once() == 0
        dash.queue.put(noise_ev(sid, "paused", 0, trials_done=5))
        with gate.suspended():  # what TuningSession._wait_if_paused does
            assert dash.pump_once() == 6
            assert dash.model.status == "paused" and ">paused<" in dash.controls.status.value
            dash.resume()
            dash.queue.put(noise_ev(sid, "resumed", 1, trials_done=5))
        for ev in demo_events[20:]:
            dash.queue.put(ev)
        assert dash.pump_once() == 0 and dash.model.status == "paused"  # timing again: held
    assert dash.pump_once() == len(demo_events) - 20 + 1 and dash.model.status == "finished"


def test_a_redraw_in_progress_delays_timing(demo_events):
    dash = Dashboard.replay(DEMO_DB, autopump=False)
    dash.attach(ReplaySession(DEMO_DB))
    gate = dash.session.measurement_gate = MeasurementGate(settle_s=0.2)
    orig = dash.throughput.refresh
    seen = {}

    def timing():
        with gate:
            seen["timed"] = time.monotonic()

    def slow_refresh(model, changes):
        seen["thread"] = threading.Thread(target=timing, daemon=True)
        seen["thread"].start()
        time.sleep(0.4)
        seen["during_draw"] = "timed" in seen
        orig(model, changes)
        seen["drawn"] = time.monotonic()

    dash.throughput.refresh = slow_refresh
    for ev in demo_events:
        dash.queue.put(ev)
    dash.pump_once()
    seen["thread"].join(10)
    assert not seen["during_draw"], "a kernel was timed while the dashboard was drawing"
    assert seen["timed"] - seen["drawn"] >= 0.2 - 0.02  # and only settle_s after the draw ended

    # a view that fails mid-draw still ends the draw: the session is not kept waiting 10 s
    def broken(model, changes):
        raise RuntimeError("boom")

    dash.throughput.refresh = broken
    dash.queue.put(
        noise_ev(demo_events[0].session_id, "calibration", 0, probe_ms=1.0, baseline_ms=1.0, drift=0.0, when="start")
    )
    dash.model.mark("records")
    with pytest.raises(RuntimeError):
        dash.pump_once()
    assert gate._drawing == 0
    t0 = time.monotonic()
    with gate:
        pass
    assert time.monotonic() - t0 < 1.0


def test_measurement_gate_waits_for_a_draw_to_end():
    gate = MeasurementGate(settle_s=0.2)
    assert gate.begin_draw()
    entered = threading.Event()

    def timing():
        with gate:
            entered.set()

    t = threading.Thread(target=timing, daemon=True)
    t.start()
    assert not entered.wait(0.5), "timing began while a draw was in progress"
    t0 = time.monotonic()
    gate.end_draw(drew=True)
    assert entered.wait(5)
    assert time.monotonic() - t0 >= 0.2 - 0.02  # the browser's settle time after the draw
    t.join(5)
    assert not gate.timing_now
    with gate:
        assert not gate.begin_draw()  # and no draw begins while timing
    assert gate.begin_draw()
    gate.end_draw(drew=False)


@pytest.mark.slow
def test_live_session_through_the_dashboard(tmp_path):
    """The real engine, 8 trials on matmul-128: Start, Pause, Resume, a manual pick, then a post-hoc view."""
    dash = Dashboard.for_workload(
        "matmul-128", trials=8, db=str(tmp_path / "live.db"), strategy="all", preset_overrides={"trials_per_round": 2}
    )
    drawn_while_timing = []
    orig = dash.throughput.refresh

    def spy(model, changes):
        # a session paused between two candidates holds its gate but times nothing: that may be drawn
        drawn_while_timing.append(dash.session.measurement_gate.timing_now and model.status != "paused")
        orig(model, changes)

    dash.throughput.refresh = spy
    try:
        dash.controls.start.click()
        s = dash.session
        dash.pick("transform-stage")
        assert s.controller.mode == "manual"
        deadline = time.time() + 240
        while dash.model.trials_done < 2 and time.time() < deadline:
            time.sleep(0.2)
        dash.controls.pause.click()  # with 6 of 8 trials to go: it holds after the candidate being measured
        deadline = time.time() + 120
        while dash.model.status != "paused" and time.time() < deadline:
            time.sleep(0.2)
        assert dash.model.status == "paused", dash.model.status
        held = dash.model.trials_done
        time.sleep(1.0)
        assert dash.model.trials_done == held < 8
        dash.controls.resume.click()
        assert dash.wait(300)
        m = dash.model
        assert m.status == "finished" and m.trials_done == 8
        assert {r["chosen_by"] for r in m.records} == {"user"}
        assert drawn_while_timing and not any(drawn_while_timing), "the dashboard drew while kernels were timed"
        assert dash.held_ticks > 0  # the pump did meet timing phases, and held its redraws
        assert m.noise["probe_ms"] is not None  # the session's calibration probe reached the model
        assert {r["strategy"] for r in m.records} == {"transform-stage"}
        assert len(dash.throughput.fig.data[4 * m.strategies.index("transform-stage")].x) == 8
        post = Dashboard(s, autopump=False)  # a finished session: everything is read back from its store
        assert post.model.trials_done == 8 and post.model.status == "finished"
        assert post.controls.start.disabled
        post.close()
    finally:
        dash.close()


def test_dashboard_follows_a_session_started_by_user_code():
    s = ReplaySession(DEMO_DB, speed=1000.0, max_gap=0.0)
    dash = Dashboard(s)  # watching, not owning: no factory, so nothing to configure
    try:
        assert dash.controls.trials.disabled
        s.start()
        assert s.wait(20)
        deadline = time.time() + 5
        while ">finished<" not in dash.controls.status.value and time.time() < deadline:
            time.sleep(0.05)
        assert dash.model.status == "finished" and dash.model.trials_done == 32
        assert dash.controls.progress.value == 32 and ">finished<" in dash.controls.status.value
    finally:
        dash.close()


def test_throughput_is_counted_in_gops_for_an_int8_workload(demo_events):
    from workbench.dtypes import rate_unit, spec_rate_unit
    from workbench.events import Event

    assert rate_unit(None) == rate_unit("float32") == rate_unit("bfloat16") == "GFLOPS" and rate_unit("int8") == "GOPS"
    assert spec_rate_unit([{"dtype": "int8"}, {}]) == "GFLOPS" and spec_rate_unit([{"dtype": "int8"}]) == "GOPS"
    assert spec_rate_unit({"dtype": "<img src=x>"}) == spec_rate_unit(["int8"]) == "GFLOPS"  # a crafted store's
    dash = fed_dashboard(demo_events)
    assert dash.throughput.fig.layout.yaxis.title.text == "GFLOPS" and " GFLOPS (" in dash.controls.status.value
    first = demo_events[0]
    assert first.kind == "session_started"
    spec = dict(first.data["spec"], dtype="int8")
    int8 = Event(first.kind, first.session_id, first.time, first.elapsed, dict(first.data, spec=spec), first.id)
    dash = fed_dashboard([int8, *demo_events[1:]])
    assert dash.throughput.fig.layout.yaxis.title.text == "GOPS" and " GOPS (" in dash.controls.status.value
    assert dash.cost_model.fig.layout.yaxis.title.text == "measured GOPS"
    hovers = [t for tr in dash.throughput.fig.data for t in (tr.text or ())]
    assert hovers and all(" GOPS · " in t and "GFLOPS" not in t for t in hovers)


def test_controller_table_shows_the_trials_an_arm_got_from_pairings():
    from widgets.controls import ControlsView

    m = SessionModel()
    m.strategies = ["no-rewrite", "pre-transformed"]
    m.controller["arms"] = {
        "no-rewrite": {"rounds": 5, "trials": 40, "best_ms": 1.0, "paired": 0},
        "pre-transformed": {"rounds": 1, "trials": 11, "best_ms": 0.9, "paired": 3},
    }
    html = ControlsView._arms_html(m, None)
    assert "<td>40</td>" in html and "<td>11 (3 paired)</td>" in html


def test_attaching_to_a_running_session_applies_its_events_in_the_order_they_were_stored(demo_events):
    """Events the session emits while the dashboard reads its store arrive ahead of the older stored ones; applied
    in that order, an older new_best would replace the newest (a stale best) and the curves would lose steps."""

    class Running(ReplaySession):
        replay = False  # as a TuningSession: what it did so far is read from its store

        def subscribe(self, fn):
            unsubscribe = super().subscribe(fn)
            for e in [e for e in demo_events if e.kind == "new_best"][-1:]:  # emitted during the dashboard's read
                fn(e)
            return unsubscribe

    in_order = fed_dashboard(demo_events)
    dash = Dashboard.replay(DEMO_DB, autopump=False)
    dash.attach(Running(DEMO_DB))
    assert dash.model.best["id"] == in_order.model.best["id"]
    assert [len(t.x) for t in dash.throughput.fig.data] == [len(t.x) for t in in_order.throughput.fig.data]


def test_the_dashboard_pumps_for_a_resumed_session_that_user_code_starts(tmp_path):
    from workbench.session import TuningSession

    db = tmp_path / "r.db"
    shutil.copy(DEMO_DB, db)
    s = TuningSession.resume(str(db), trials=34)  # its stored events end with its earlier finish
    dash = Dashboard(s)
    try:
        assert dash.model.terminal and dash._pump_thread is not None and dash._pump_thread.is_alive()
    finally:
        dash.close()
        s.store.close()
