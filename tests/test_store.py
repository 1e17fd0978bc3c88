"""Records store: durability rules, foreign files, events."""

import sqlite3

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.store import RecordStore


_SESSION = dict(
    workload="w",
    spec={"name": "w"},
    target={"kind": "llvm"},
    preset="quick",
    preset_params={},
    seed=0,
    trials=4,
    strategies=["no-rewrite"],
    strategy_arg="auto",
    versions={},
)


def _session(store):
    return store.create_session(**_SESSION)


def _rec(sid, trial, lat=1.0, err=None):
    return {
        "session_id": sid,
        "workload": "w",
        "trial": trial,
        "round": 1,
        "strategy": "no-rewrite",
        "chosen_by": "controller",
        "trace": "{}",
        "decisions": "[]",
        "mod_hash": f"h{trial}",
        "predicted_score": 0.5,
        "run_secs": [lat / 1e3],
        "latency_ms": None if err else lat,
        "gflops": 1.0,
        "error_class": err,
        "error_msg": None,
        "verified": err is None,
        "is_best": False,
        "seed": 0,
        "proposed_at": 0.0,
        "measured_at": 0.0,
        "elapsed_s": float(trial),
    }


def test_records_round_trip_with_features(tmp_path):
    s = RecordStore(str(tmp_path / "a.db"))
    sid = _session(s)
    f = np.arange(12, dtype=np.float32).reshape(2, 6)
    rid = s.add_record(_rec(sid, 1, 2.0), f)
    s.add_record(_rec(sid, 2, err="build-error"), None)
    r = s.record(rid)
    assert np.array_equal(r["features"], f) and r["run_secs"] == [0.002]
    df = RecordStore(str(tmp_path / "a.db"), readonly=True).records(session_id=sid)
    assert list(df["trial"]) == [1, 2] and df["verified"].tolist() == [True, False]
    summ = s.summary()
    assert summ["measured"] == 2 and summ["errors"] == 1 and summ["workloads"]["w"]["best_latency_ms"] == 2.0
    s.add_event(sid, "paused", 1.0, 1.0, {"trials_done": 2})
    assert s.events(sid)[0]["data"] == {"trials_done": 2}


def test_wal_and_durable_settings(tmp_path):
    s = RecordStore(str(tmp_path / "a.db"))
    assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert s.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_rejects_foreign_and_corrupt_files(tmp_path):
    p = tmp_path / "text.db"
    p.write_text("hello")
    with pytest.raises(WorkbenchError, match="not an SQLite file"):
        RecordStore(str(p))
    other = tmp_path / "other.db"
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE t(x)")
    c.commit()
    c.close()
    with pytest.raises(WorkbenchError, match="not a workbench records store"):
        RecordStore(str(other))
    with pytest.raises(WorkbenchError, match="does not exist"):
        RecordStore(str(tmp_path / "nope.db"), readonly=True)
    with pytest.raises(WorkbenchError, match="directory"):
        RecordStore(str(tmp_path / "no" / "dir.db"))
    bad = tmp_path / "trunc.db"
    good = RecordStore(str(bad))
    _session(good)
    good.close()
    data = bad.read_bytes()
    bad.write_bytes(data[:100] + b"\x00" * 50 + data[150:1000])
    with pytest.raises(WorkbenchError):
        RecordStore(str(bad)).sessions()


def test_remove_store_takes_the_wal_with_it_so_a_new_store_of_that_name_starts_clean(tmp_path):
    import os

    from workbench.store import remove_store

    path = str(tmp_path / "r.db")
    held = RecordStore(path)  # kept open: its WAL and shared-memory files stay on disk
    sid = _session(held)
    held.add_event(sid, "paused", 0.0, 0.0, {"trials_done": 0})
    assert os.path.exists(path + "-wal")
    remove_store(path)
    assert not any(os.path.exists(path + s) for s in ("", "-wal", "-shm"))
    remove_store(path)  # nothing left to remove: not an error
    fresh = RecordStore(path)
    assert fresh.sessions() == [] and fresh.events(sid) == []
    sid2 = _session(fresh)
    fresh.add_event(sid2, "paused", 0.0, 0.0, {"trials_done": 0})
    assert len(fresh.events(sid2)) == 1


class _FailingOnce:
    """A connection whose next execute raises SQLite's "disk I/O error" (a WAL shared-memory mapping gone bad)."""

    def __init__(self, conn, message="disk I/O error"):
        self.conn, self.message, self.failed = conn, message, False

    def execute(self, *a):
        if not self.failed:
            self.failed = True
            raise sqlite3.OperationalError(self.message)
        return self.conn.execute(*a)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def test_a_write_that_hits_a_disk_io_error_is_retried_once_on_a_fresh_connection(tmp_path):
    s = RecordStore(str(tmp_path / "a.db"))
    sid = _session(s)
    s.conn = _FailingOnce(s.conn)
    rid = s.add_record(_rec(sid, 1, 2.0), None)  # retried: nothing lost
    assert isinstance(s.conn, sqlite3.Connection) and s.record(rid)["latency_ms"] == 2.0
    assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # other errors, and a failure inside a transaction, are not retried
    s.conn = _FailingOnce(s.conn, "no such table: nothing")
    with pytest.raises(sqlite3.OperationalError):
        s.add_record(_rec(sid, 2), None)
    s.conn = s.conn.conn
    s.conn.execute("BEGIN")
    s.conn = _FailingOnce(s.conn)
    with pytest.raises(WorkbenchError, match="cannot write records store .*disk I/O error"):
        s.add_record(_rec(sid, 3), None)
    s.conn.conn.execute("ROLLBACK")
    assert len(RecordStore(str(tmp_path / "a.db"), readonly=True).records(session_id=sid)) == 1


def test_opening_a_second_view_in_this_process_keeps_the_writers_locks(tmp_path):
    # Closing any descriptor of the database file drops every POSIX lock this process holds on it. A second
    # RecordStore on the same path (the dashboard's read view beside its session's writer) once peeked at the
    # header with open(): the writer's locks went, and the next process to close its own connection took
    # itself for the last user, checkpointed and deleted the WAL under the writer ("disk I/O error", and
    # records gone).
    import subprocess
    import sys

    path = str(tmp_path / "a.db")
    writer = RecordStore(path)
    sid = _session(writer)
    writer.add_record(_rec(sid, 1), None)
    view = RecordStore(path, readonly=True)
    assert len(view.records(session_id=sid)) == 1
    other = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT COUNT(*) FROM records'); c.close()"
    )
    subprocess.run([sys.executable, "-c", other, path], check=True, timeout=60)
    writer.add_record(_rec(sid, 2), None)
    writer.add_record(_rec(sid, 3), None)
    assert len(RecordStore(path, readonly=True).records(session_id=sid)) == 3
    view.close()
    writer.close()
    assert len(RecordStore(path, readonly=True).records(session_id=sid)) == 3


def test_best_of_one_session_and_a_resumed_session_restores_its_own_bests(tmp_path):
    import types

    from workbench import loop
    from workbench.session import TuningSession

    s = RecordStore(str(tmp_path / "r.db"))
    first, second = _session(s), _session(s)
    s.add_record(_rec(first, 1, lat=0.5), None)  # another session's faster program
    s.add_record({**_rec(second, 1, lat=0.8), "mod_hash": "s2"}, None)
    assert s.best("w")["session_id"] == first
    assert s.best("w", "no-rewrite", session_id=second)["latency_ms"] == 0.8
    assert s.best("w", session_id=12345) is None
    resumed = types.SimpleNamespace(
        store=s, strategies=["no-rewrite"], workload=types.SimpleNamespace(name="w"), session_id=second
    )
    resumed.state = loop.SearchState()
    TuningSession._restore_bests(resumed)
    assert resumed.state.best["session_id"] == second and resumed.state.best["latency_ms"] == 0.8
    assert resumed.state.best_by_strategy["no-rewrite"]["session_id"] == second


@pytest.mark.parametrize("preset", ["imported", "transfer"])
def test_a_session_that_holds_records_but_no_search_is_not_resumed(tmp_path, preset):
    from workbench.session import TuningSession
    from workbench.store import holds_a_search

    s = RecordStore(str(tmp_path / "r.db"))
    searched = _session(s)
    held = s.create_session(**{**_SESSION, "preset": preset, "strategy_arg": preset})
    assert holds_a_search(s.session(searched)) and not holds_a_search(s.session(held))
    assert [d["resumable"] for d in s.session_list()] == [True, False]
    assert s.latest_session("w")["id"] == held and s.latest_session("w", searches_only=True)["id"] == searched
    with pytest.raises(WorkbenchError, match=f"holds {preset} records, not a search: nothing to resume"):
        TuningSession.resume(s, session_id=held)
    only = RecordStore(str(tmp_path / "only.db"))
    only.create_session(**{**_SESSION, "preset": preset, "strategy_arg": preset})
    with pytest.raises(WorkbenchError, match="no session for w to resume"):
        TuningSession.resume(only, workload="w")


def test_export_skips_the_sessions_of_model_tasks_and_says_so(tmp_path, capsys):
    from workbench import cli

    s = RecordStore(str(tmp_path / "m.db"))
    task = {"name": "r18.fused_dense", "op": "relax-task", "params": {"task": "fused_dense", "args": [[1, 8]]}}
    s.create_session(**{**_SESSION, "workload": task["name"], "spec": task})
    s.close()
    assert cli.main(["export", str(tmp_path / "m.db"), "--metaschedule", str(tmp_path / "ms")]) == 0
    out = capsys.readouterr().out
    assert "exported 0 records of 0 workloads" in out
    assert "skipped 1 sessions whose workload their spec does not rebuild here: r18.fused_dense" in out
