"""Work survives a restart: a stored session's status as it is now (a dead process's session reads "interrupted"),
and ``Dashboard.open`` listing a store's sessions, showing one, following one another process tunes, resuming one."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from widgets import Dashboard
from workbench.events import CandidateMeasured, Event
from workbench.store import (
    RecordStore,
    effective_status,
    release_session_lock,
    runs_path,
    session_lock,
    session_writer,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_DB = os.path.join(ROOT, "notebooks", "data", "demo_session.db")


def add_session(store: RecordStore, status: str) -> int:
    sid = store.create_session(
        workload="matmul-128",
        spec={"name": "matmul-128", "op": "matmul", "params": {"m": 128, "n": 128, "k": 128}},
        target={"kind": "llvm"},
        preset="quick",
        preset_params={},
        seed=0,
        trials=8,
        strategies=["no-rewrite"],
        strategy_arg="no-rewrite",
        versions={},
    )
    store.update_session(sid, status=status)
    return sid


def with_cut_off_copy(tmp_path, n_events: int = 20) -> tuple[str, int]:
    """The demo store plus a copy of its session cut off after ``n_events`` events, left "running" by a process
    that no longer exists (no one holds its lock)."""
    db = str(tmp_path / "store.db")
    shutil.copy(DEMO_DB, db)
    c = sqlite3.connect(db)
    cols = [r[1] for r in c.execute("PRAGMA table_info(sessions)") if r[1] != "id"]
    sid = c.execute(
        f"INSERT INTO sessions({', '.join(cols)}) SELECT {', '.join(cols)} FROM sessions WHERE id=1"
    ).lastrowid
    c.execute("UPDATE sessions SET status='running' WHERE id=?", (sid,))
    for kind, t, el, data in c.execute(
        "SELECT kind, time, elapsed, data FROM events WHERE session_id=1 ORDER BY id LIMIT ?", (n_events,)
    ).fetchall():
        c.execute(
            "INSERT INTO events(session_id, kind, time, elapsed, data) VALUES (?,?,?,?,?)", (sid, kind, t, el, data)
        )
    c.commit()
    c.close()
    return db, sid


def test_a_session_whose_process_died_reads_interrupted(tmp_path):
    store = RecordStore(str(tmp_path / "s.db"))
    running, paused, finished = (add_session(store, st) for st in ("running", "paused", "finished"))
    row = store.session(running)
    # no process ever held its lock (a store copied from elsewhere) or the one that did is gone
    assert session_writer(store.path, running) is None
    assert effective_status(store.path, row) == "interrupted"
    assert store.session_status(paused) == "interrupted"
    assert store.session_status(finished) == "finished"

    # held by this process (a session tuning in this kernel): running, and its pid is known
    lock = session_lock(store.path, running)
    assert session_writer(store.path, running) == os.getpid()
    assert store.session_status(running) == "running"
    release_session_lock(lock)
    assert store.session_status(running) == "interrupted"

    # held by another process, then that process is killed (kill -9: it cannot clean up; its lock file stays)
    code = (
        "import sys, time; from workbench.store import session_lock; "
        "lock = session_lock(sys.argv[1], int(sys.argv[2])); print('locked', flush=True); time.sleep(120)"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, store.path, str(paused)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert p.stdout.readline().strip() == "locked"
        assert session_writer(store.path, paused) == p.pid
        assert store.session_status(paused) == "paused"
        listed = {r["id"]: r for r in store.session_list()}
        assert listed[paused]["status"] == "paused" and listed[paused]["writer_pid"] == p.pid
        assert not listed[paused]["resumable"]
        assert listed[running]["status"] == "interrupted" and listed[running]["resumable"]
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    assert os.path.exists(f"{store.path}-session-{paused}.lock")
    assert session_writer(store.path, paused) is None
    assert store.session_status(paused) == "interrupted"
    # a look at the status never stands in the way of the session starting again
    lock = session_lock(store.path, paused)
    release_session_lock(lock)
    store.close()


def test_runs_path_is_a_stable_place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_RUNS", raising=False)
    assert runs_path("a.db") == os.path.join("workbench-runs", "a.db") and os.path.isdir("workbench-runs")
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "elsewhere"))
    assert runs_path("a.db") == str(tmp_path / "elsewhere" / "a.db") and (tmp_path / "elsewhere").is_dir()


def test_dashboard_open_lists_the_sessions_and_shows_the_chosen_one(tmp_path):
    db, cut = with_cut_off_copy(tmp_path)
    dash = Dashboard.open(db, autopump=False)
    try:
        picker = dash.picker
        # the latest session is shown first: interrupted, never running, and nothing to press but Resume
        assert [sid for _label, sid in picker.choice.options] == [1, cut]
        assert picker.choice.value == cut
        assert dash.model.status == "interrupted" and dash.model.terminal
        assert "interrupted" in dash.controls.status.value
        c = dash.controls
        assert c.start.disabled and c.pause.disabled and c.resume.disabled and c.stop.disabled
        assert "interrupted" in picker.choice.label and "running" not in picker.listing.value
        assert not picker.resume.disabled and picker.budget.value == 32
        # the finished one: its records and events read back, as attach does for a finished session
        picker.choice.value = 1
        assert dash.model.status == "finished" and dash.model.trials_done == 32 and len(dash.model.records) == 32
        assert "32/32" in picker.listing.value
        assert picker.resume.disabled  # finished at its budget: nothing to resume ...
        picker.budget.value = 40
        assert not picker.resume.disabled  # ... unless the budget grows
        assert len(dash.throughput.fig.data[1].x) > 0
    finally:
        dash.close()
    with pytest.raises(Exception, match="no session 7"):
        Dashboard.open(db, session_id=7)
    empty = str(tmp_path / "empty.db")
    RecordStore(empty).close()
    with pytest.raises(Exception, match="holds no session"):
        Dashboard.open(empty)


def test_a_session_of_records_alone_shows_and_replays_like_any_other(tmp_path):
    """A transfer-tuning or imported session writes records, no events: its events are implied by its records."""
    db = str(tmp_path / "records-only.db")
    shutil.copy(DEMO_DB, db)
    c = sqlite3.connect(db)
    c.execute("DELETE FROM events")
    c.commit()
    c.close()
    store = RecordStore(db, readonly=True)
    (sid,) = [s["id"] for s in store.sessions()]
    recs = store.records(sid)
    implied = store.session_events(sid)
    store.close()
    kinds = [e["kind"] for e in implied]
    assert kinds == ["session_started"] + ["candidate_measured"] * len(recs) + ["finished"]
    for e in implied:  # each one is its kind's typed payload
        assert Event(e["kind"], sid, e["time"], e["elapsed"], e["data"]).payload is not None, e["kind"]
    ok = recs[recs["error_class"].isna() & recs["verified"]]
    running_min = ok["latency_ms"].cummin()
    bests = [e["data"]["record"]["id"] for e in implied if e["kind"] == "candidate_measured" and e["data"]["new_best"]]
    assert bests == list(ok["id"][running_min.diff().fillna(-1) < 0])
    dash = Dashboard.open(db, autopump=False)
    try:
        m = dash.model
        assert m.status == "finished" and len(m.records) == len(recs) == m.trials_done
        assert m.workload == recs["workload"].iloc[0]
        assert sum(len(tr.x or ()) for tr in dash.throughput.fig.data) > 0
        assert f"{ok['gflops'].max():.1f} GFLOPS" in dash.controls.status.value
    finally:
        dash.close()
    replay = Dashboard.replay(db, speed=1000.0, max_gap=0.0, autopump=False)
    try:
        assert replay.start().wait(30)
        replay.pump_once()
        assert replay.model.status == "finished" and len(replay.model.records) == len(recs)
    finally:
        replay.close()


def test_a_replay_of_an_interrupted_session_ends_interrupted(tmp_path):
    db, cut = with_cut_off_copy(tmp_path)
    dash = Dashboard.replay(db, session_id=cut, speed=1000.0, max_gap=0.0, autopump=False)
    try:
        s = dash.start()
        assert s.wait(30)
        dash.pump_once()
        assert dash.model.status == "interrupted"
        assert "interrupted" in dash.controls.status.value
    finally:
        dash.close()


def test_dashboard_open_follows_a_session_another_process_tunes(tmp_path):
    db, cut = with_cut_off_copy(tmp_path, n_events=12)
    writer = RecordStore(db)
    lock = session_lock(writer.path, cut)  # as a TuningSession in another process holds it
    try:
        dash = Dashboard.open(db, autopump=False)
        dash.session.poll_seconds = 0.05
        assert dash.model.status == "running" and dash.session.writer_pid == os.getpid()
        assert "tuned by another process" in dash.controls.status.value
        c = dash.controls
        assert c.start.disabled and c.pause.disabled and c.stop.disabled  # it is steered where it runs
        before = dash.model.trials_done
        rec = dict(dash.model.records[-1], trial=before + 1)
        writer.add_event(
            cut,
            "candidate_measured",
            time.time(),
            99.0,
            CandidateMeasured(record=rec, new_best=False, strategy_best=False).to_data(),
        )
        deadline = time.time() + 10
        while dash.model.trials_done == before and time.time() < deadline:
            time.sleep(0.05)
            dash.pump_once()
        assert dash.model.trials_done == before + 1
    finally:
        release_session_lock(lock)  # its process ends without recording an end: interrupted
    assert dash.session.wait(10)
    dash.pump_once()
    assert dash.model.status == "interrupted"
    dash.close()
    writer.close()


@pytest.mark.slow
def test_dashboard_open_resumes_an_interrupted_session(tmp_path):
    from workbench import TuningSession

    db = str(tmp_path / "resume.db")
    first = TuningSession("matmul-128", trials=2, db=db, strategy="no-rewrite", trials_per_round=2)
    first.run()
    first.store.close()
    # as if its kernel had died mid-run: the store still says running, no end was recorded, no process holds its lock
    c = sqlite3.connect(db)
    c.execute("UPDATE sessions SET status='running' WHERE id=?", (first.session_id,))
    c.execute("DELETE FROM events WHERE session_id=? AND kind='finished'", (first.session_id,))
    c.commit()
    c.close()
    dash = Dashboard.open(db)
    try:
        assert dash.model.status == "interrupted" and dash.model.trials_done == 2
        picker = dash.picker
        assert not picker.resume.disabled and picker.budget.value == 2
        picker.budget.value = 4
        picker.resume.click()
        session = dash.session
        assert isinstance(session, TuningSession) and session.session_id == first.session_id
        deadline = time.time() + 60  # resuming (search databases, model, builders) took over 10 s on a Zen 1 VM
        while not picker.choice.disabled and time.time() < deadline:
            time.sleep(0.05)
        assert picker.choice.disabled and picker.resume.disabled  # it runs here now: no switching away
        assert dash.wait(300)
        m = dash.model
        assert m.status == "finished" and m.trials_done == 4
        assert sorted(r["trial"] for r in m.records) == [1, 2, 3, 4]  # the earlier records read back, then the new
        store = RecordStore(db, readonly=True)
        assert store.session_status(first.session_id) == "finished"
        assert len(store.records(first.session_id)) == 4 and len(store.sessions()) == 1
        store.close()
        assert "finished" in picker.choice.label and "4/4" in picker.listing.value
        assert not picker.choice.disabled
    finally:
        dash.close()
