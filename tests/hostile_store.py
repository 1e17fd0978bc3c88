"""A records store whose every text field carries script, for the tests that the views escape what they show.

``hostile_store(path)`` copies the recorded demo session (notebooks/data/demo_session.db: real traces, so the
inspector still builds their TIR) and rewrites every text it holds: workload name and note, strategies, who chose
each candidate, error classes and messages, decisions, controller reasons, modes, preset, target, versions, noise
and runner reports, and the events' data. It adds a failed record, a noisy one, runner and noise events, and a
second session left "running" by a process that no longer exists (an interrupted session).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

from workbench.store import RecordStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_DB = os.path.join(ROOT, "notebooks", "data", "demo_session.db")

PWNED = "window.__wb_pwned=1"
PAYLOADS = (
    f'<img src=x onerror="{PWNED}">',
    f"<script>{PWNED}</script>",
    f'"><svg onload="{PWNED}">',
    f"'><img src=x onerror='{PWNED}'>",
)
# Fields whose text must stay valid for the views to work at all (the program itself, its identity, its kind).
KEEP = {"op", "layout", "kind", "trace", "mod_hash", "epilogue"}
FAILED_TRIALS = {5: "build-error", 9: "run-error"}
NOISY_TRIAL = 3


class Poisoner:
    def __init__(self, strategies: list[str]):
        self.n = 0
        self.strategy = {s: f"{s}{PAYLOADS[i % len(PAYLOADS)]}" for i, s in enumerate(strategies)}

    def text(self, s: str) -> str:
        self.n += 1
        return s + PAYLOADS[self.n % len(PAYLOADS)]

    def __call__(self, obj, key: str | None = None):
        if isinstance(obj, dict):
            return {self.strategy.get(k, k): self(v, k) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self(v, key) for v in obj]
        if isinstance(obj, str):
            if obj in self.strategy:
                return self.strategy[obj]
            if key in KEEP:
                return obj
            if key == "decisions":  # JSON text: keep it parseable, poison the texts inside
                try:
                    return json.dumps(self(json.loads(obj)))
                except ValueError:
                    return self.text(obj)
            return self.text(obj)
        return obj


def hostile_store(path: str) -> dict:
    """Write the store to ``path``; returns what it holds: ``{"failed": id, "interrupted": id, "strategies": {name:
    hostile name}, "workload": hostile name}``."""
    shutil.copy(DEMO_DB, path)
    RecordStore(path).close()  # the demo is a schema-1 store: opened for writing, it gains the later columns
    c = sqlite3.connect(path)
    c.row_factory = sqlite3.Row
    (row,) = c.execute("SELECT * FROM sessions").fetchall()
    sid = row["id"]
    p = Poisoner(json.loads(row["strategies"]))
    spec = json.loads(row["spec"])
    spec["note"] = "a layer"
    spec = p(spec)
    name = spec["name"]
    c.execute(
        "UPDATE sessions SET workload=?, spec=?, target=?, preset=?, preset_params=?, strategies=?, strategy_arg=?,"
        " versions=? WHERE id=?",
        (
            name,
            json.dumps(spec),
            json.dumps(p(json.loads(row["target"]))),
            p.text(row["preset"]),
            json.dumps(p(json.loads(row["preset_params"]))),
            json.dumps(p(json.loads(row["strategies"]))),
            p.text(row["strategy_arg"]),
            json.dumps(p(json.loads(row["versions"]))),
            sid,
        ),
    )
    for r in c.execute("SELECT id, trial, strategy, chosen_by, decisions FROM records").fetchall():
        err = FAILED_TRIALS.get(r["trial"])
        c.execute(
            "UPDATE records SET workload=?, strategy=?, chosen_by=?, decisions=?, error_class=?, error_msg=?,"
            " latency_ms=CASE WHEN ? IS NULL THEN latency_ms END, gflops=CASE WHEN ? IS NULL THEN gflops END,"
            " verified=CASE WHEN ? IS NULL THEN verified ELSE 0 END, noisy=?, noise=? WHERE id=?",
            (
                name,
                p(r["strategy"]),
                p.text(r["chosen_by"]),
                p(r["decisions"], "decisions"),
                None if err is None else p.text(err),
                None if err is None else p.text("TVMError: it broke"),
                err,
                err,
                err,
                int(r["trial"] == NOISY_TRIAL),
                json.dumps(p({"reason": "a hog", "wait_fraction": 0.3})) if r["trial"] == NOISY_TRIAL else None,
                r["id"],
            ),
        )
    by_trial = {
        r["trial"]: dict(r)
        for r in c.execute("SELECT id, trial, error_class, error_msg, noisy FROM records WHERE session_id=?", (sid,))
    }
    events = c.execute("SELECT id, kind, data FROM events ORDER BY id").fetchall()
    for e in events:
        data = p(json.loads(e["data"]))
        if e["kind"] == "candidate_measured":
            rec = data["record"]
            stored = by_trial[rec["trial"]]
            if stored["error_class"]:
                rec.update(error_class=stored["error_class"], error_msg=stored["error_msg"], latency_ms=None)
                rec.update(gflops=None, verified=False)
                data["new_best"] = data["strategy_best"] = False
            rec["noisy"] = bool(stored["noisy"])
        c.execute("UPDATE events SET data=? WHERE id=?", (json.dumps(data), e["id"]))
    last = c.execute("SELECT time, elapsed FROM events ORDER BY id DESC LIMIT 1").fetchone()
    extra = [
        ("runner_health", {"server": "rpc-1", "state": "lost", "measured": 3, "errors": 1, "timeouts": 0}),
        (
            "measurement_noise",
            {
                "source": "load",
                "state": "waiting",
                "other_cores": 0.9,
                "processes": [{"name": "hog", "pid": 42, "cores": 0.9}],
                "why": "another process",
            },
        ),
        ("records_marked_noisy", {"record_ids": [by_trial[NOISY_TRIAL]["id"]], "reason": "the probe drifted"}),
        ("failed", {"message": "it went wrong", "trials_done": 32}),
    ]
    for kind, data in extra:
        # the noise report's source and state steer how it is shown: those stay as they are
        keep = ("source", "state") if kind == "measurement_noise" else ()
        data = {k: (v if k in keep else p(v, k)) for k, v in data.items()}
        c.execute(
            "INSERT INTO events(session_id, kind, time, elapsed, data) VALUES (?,?,?,?,?)",
            (sid, kind, last["time"], last["elapsed"], json.dumps(data)),
        )
    c.execute("UPDATE sessions SET status='failed' WHERE id=?", (sid,))

    # The same session once more, cut off after its first round by a process that died: "running" in the store,
    # no process holds its lock.
    cols = [r[1] for r in c.execute("PRAGMA table_info(sessions)") if r[1] != "id"]
    cur = c.execute(
        f"INSERT INTO sessions({', '.join(cols)}) SELECT {', '.join(cols)} FROM sessions WHERE id=?", (sid,)
    )
    sid2 = cur.lastrowid
    c.execute("UPDATE sessions SET status='running', created_at=created_at+60 WHERE id=?", (sid2,))
    rcols = [r[1] for r in c.execute("PRAGMA table_info(records)") if r[1] not in ("id", "session_id")]
    new_id = {}
    for r in c.execute("SELECT id FROM records WHERE session_id=? AND round=1 ORDER BY id", (sid,)).fetchall():
        cur = c.execute(
            f"INSERT INTO records(session_id, {', '.join(rcols)}) SELECT ?, {', '.join(rcols)} FROM records WHERE id=?",
            (sid2, r["id"]),
        )
        new_id[r["id"]] = cur.lastrowid
    for e in c.execute(
        "SELECT kind, time, elapsed, data FROM events WHERE session_id=? ORDER BY id", (sid,)
    ).fetchall():
        data = json.loads(e["data"])
        if e["kind"] == "candidate_measured":
            if data["record"]["id"] not in new_id:
                break
            data["record"]["id"] = new_id[data["record"]["id"]]
            data["record"]["session_id"] = sid2
        elif e["kind"] == "new_best":
            data["record_id"] = new_id.get(data.get("record_id"), data.get("record_id"))
        c.execute(
            "INSERT INTO events(session_id, kind, time, elapsed, data) VALUES (?,?,?,?,?)",
            (sid2, e["kind"], e["time"], e["elapsed"], json.dumps(data)),
        )
    c.commit()
    c.close()
    return {"failed": sid, "interrupted": sid2, "strategies": p.strategy, "workload": name}
