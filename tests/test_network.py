"""Multi-task sessions: two weighted workloads tuned in one session under the gradient task scheduler."""

import json
import subprocess
import sys
import time

import pytest

from workbench.network import NetworkSession, network_history
from workbench.store import RecordStore

from .shapes import SMALL

pytestmark = pytest.mark.slow

TINY = dict(trials_per_round=4, population=64, generations=2, init_min_unmeasured=16)


def test_two_workloads_share_pools_and_model_and_report_the_network_latency(tmp_path):
    conv = dict(SMALL["conv_nhwc"], weight=3)
    mm = SMALL["matmul"]
    db = str(tmp_path / "net.db")
    s = NetworkSession([conv, mm], trials=16, db=db, strategy="no-rewrite", name="two", **TINY)
    events = []
    s.subscribe(events.append)
    summ = s.run()
    assert summ["status"] == "finished" and summ["trials"] == 16
    # one builder, one runner, one cost model for every task
    assert all(t.builder is s.builder and t.runner is s.runner and t.model is s.model for t in s.tasks)
    assert set(s.model._group) == {"t-conv-nhwc", "t-mm"}
    kinds = [e.kind for e in events]
    chosen = [e.data for e in events if e.kind == "task_chosen"]
    assert [c["reason"] for c in chosen[:2]] == ["warm-up", "warm-up"] and [c["index"] for c in chosen[:2]] == [0, 1]
    assert all(c["reason"] in ("gradient", "tie") for c in chosen[2:]) and len(chosen) == 4
    rounds = [e.data for e in events if e.kind == "network_round"]
    assert len(rounds) == 4 and kinds.count("network_finished") == 1 and kinds.count("finished") == 2  # + each task's
    # the estimate is sum w * latency over the tasks' bests
    last = rounds[-1]
    per = last["per_task_ms"]
    assert last["estimated_latency_ms"] == pytest.approx(3 * per["t-conv-nhwc"] + per["t-mm"])
    assert summ["estimated_latency_ms"] == pytest.approx(last["estimated_latency_ms"])
    assert summ["verified"] and all(t["trials"] >= 4 for t in summ["tasks"])
    # recorded: the curve reads back from the store, the records carry their workloads
    hist = network_history(db)
    assert list(hist["estimated_latency_ms"]) == [r["estimated_latency_ms"] for r in rounds]
    recs = s.records()
    assert len(recs) == 16 and set(recs["workload"]) == {"t-conv-nhwc", "t-mm"}
    store = RecordStore(db, readonly=True)
    assert {x["status"] for x in store.sessions()} == {"finished"}
    assert sorted(x["trials"] for x in store.sessions()) == sorted(t["trials"] for t in summ["tasks"])


def test_network_pause_resume_stop_from_another_thread(tmp_path):
    s = NetworkSession(
        [SMALL["conv_nhwc"], SMALL["matmul"]], trials=64, db=str(tmp_path / "n.db"), strategy="no-rewrite", **TINY
    )
    kinds = []

    def on(e):
        kinds.append(e.kind)
        if e.kind == "network_round" and e.data["round"] == 1:
            s.pause()
        elif e.kind == "network_round" and e.data["round"] == 2:
            s.stop()

    s.subscribe(on)
    s.start()
    deadline = time.time() + 300
    while "network_paused" not in kinds and time.time() < deadline:
        time.sleep(0.2)
    assert "network_paused" in kinds and s.paused
    n = s.trials_done
    time.sleep(2)
    assert s.trials_done == n == 4  # nothing runs while paused
    s.resume_running()
    assert s.wait(300)
    summ = s.summary()
    assert "network_resumed" in kinds and kinds.count("network_stopped") == 1
    assert summ["status"] == "stopped" and summ["trials"] == 8 and summ["rounds"] == 2


def test_cli_tunes_a_spec_file_with_weights(tmp_path):
    spec = tmp_path / "net.json"
    spec.write_text(json.dumps({"workloads": [dict(SMALL["conv_nhwc"], weight=2), SMALL["depthwise"]]}))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "tune",
            "--spec",
            str(spec),
            "--trials",
            "8",
            "--trials-per-round",
            "4",
            "--db",
            str(tmp_path / "c.db"),  # default strategy: auto
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["network"] == "net" and out["trials"] == 8
    assert [t["workload"] for t in out["tasks"]] == ["t-conv-nhwc", "t-dw"] and out["tasks"][0]["weight"] == 2
    assert out["estimated_latency_ms"] > 0 and out["naive_latency_ms"] > 0


def test_a_task_that_raises_ends_only_that_task(tmp_path):
    """An exception in one task's round (a bug in a loop step, a weight it cannot rewrite) marks that task dead
    and failed, with what went wrong; the other tasks get the rest of the budget and the network finishes."""
    db = str(tmp_path / "n.db")
    s = NetworkSession([SMALL["conv_nhwc"], SMALL["matmul"]], trials=8, db=db, strategy="no-rewrite", **TINY)
    events = []
    s.subscribe(events.append)
    real_step = s.tasks[0].step

    def broken_step():
        real_step()  # one round measured and recorded, then the failure
        raise RuntimeError("boom\nsecond line")

    s.tasks[0].step = broken_step
    summ = s.run()
    assert summ["status"] == "finished" and summ["trials"] == 8
    dead = [e.data for e in events if e.kind == "task_dead"]
    assert dead == [dict(dead[0], index=0, workload="t-conv-nhwc", reason="failed: RuntimeError: boom")]
    conv, mm = summ["tasks"]
    assert conv["dead"] and conv["trials"] == 4 and conv["best_latency_ms"] is not None
    assert mm["trials"] == 4 and not mm["dead"]
    store = RecordStore(db, readonly=True)
    status = {x["workload"]: x["status"] for x in store.sessions()}
    assert status == {"t-conv-nhwc": "failed", "t-mm": "finished"}
    assert len(store.records()) == 8  # the failed task's round is kept
    store.close()


def test_a_task_that_cannot_open_fails_the_network_and_no_task_keeps_its_lock(tmp_path):
    """A task's setup raising (its untuned program does not build, run or compute) ends the network; every task's
    row says how it ended and none keeps its session lock, so each can be looked at or resumed."""
    from workbench.errors import WorkbenchError
    from workbench.session import TuningSession

    db = str(tmp_path / "n.db")
    s = NetworkSession([SMALL["conv_nhwc"], SMALL["matmul"]], trials=8, db=db, strategy="no-rewrite", **TINY)
    events = []
    s.subscribe(events.append)

    def cannot_open(**_kw):
        raise WorkbenchError("the naive program of t-mm failed to run (limit 600 s): timeout")

    s.tasks[1].open = cannot_open
    with pytest.raises(WorkbenchError, match="failed to run"):
        s.run()
    assert s.status == "failed" and [e.kind for e in events].count("network_failed") == 1
    store = RecordStore(db, readonly=True)
    rows = {x["workload"]: x for x in store.session_list()}
    assert {w: r["status"] for w, r in rows.items()} == {"t-conv-nhwc": "failed", "t-mm": "failed"}
    assert all(r["writer_pid"] is None for r in rows.values())
    store.close()
    # stopped before any task's turn: the tasks stay as created, unlocked, and can be resumed
    db2 = str(tmp_path / "n2.db")
    s2 = NetworkSession([SMALL["conv_nhwc"], SMALL["matmul"]], trials=8, db=db2, strategy="no-rewrite", **TINY)
    s2.stop()
    s2.run()
    store = RecordStore(db2, readonly=True)
    rows = store.session_list()
    assert [r["status"] for r in rows] == ["created", "created"] and all(r["writer_pid"] is None for r in rows)
    store.close()
    TuningSession.resume(db2, session_id=rows[0]["id"], trials=1).store.close()  # no "running in another process"


def test_a_task_without_a_valid_program_after_warm_up_is_dropped_with_a_task_dead_event(tmp_path):
    s = NetworkSession(
        [SMALL["conv_nhwc"], SMALL["matmul"]], trials=12, db=str(tmp_path / "n.db"), strategy="no-rewrite", **TINY
    )
    conv = s.tasks[0]

    def every_candidate_fails():  # spends its granted trials, finds nothing valid (as if every build failed)
        conv.trials_done = conv.trials
        return True

    conv.step = every_candidate_fails
    events = []
    s.subscribe(events.append)
    summ = s.run()
    dead = [e.data for e in events if e.kind == "task_dead"]
    assert dead == [dict(dead[0], index=0, workload="t-conv-nhwc", reason="no valid program after warm-up")]
    assert summ["status"] == "finished" and summ["tasks"][1]["trials"] == 8  # the rest went to the live task
