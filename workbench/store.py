"""The records store: one SQLite file (WAL mode, synchronous=FULL).

Why SQLite: a measured record must be on disk before anyone is told about it,
and a SIGKILL must not lose or corrupt anything. SQLite commits are atomic and
durable, readers (a dashboard, ``workbench show``) never block the writer in
WAL mode, and the file is plain data: nothing in it is ever executed (no
pickles; traces are TVM's JSON, features are float32 bytes).

Tables
  sessions  one row per tuning session: workload spec, target, preset, seed,
            budget, strategies, library versions, status, naive latency
  records   one row per measured candidate: trace (TVM JSON), sampled
            decisions, predicted score, all run times, latency, error class
            and message, strategy, who chose it, timestamps, features
  events    every event a session emitted, in order (replayable)

Schema 2 added the measurement-noise columns of ``records`` (``noisy``, ``noise``,
``cv``, ``confirm_secs``, ``confirm_spread``), schema 3 the candidate's compile time
(``build_s``); an older store is upgraded in place when opened for writing and read
as is (those columns empty) when read-only.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time

import numpy as np

from .errors import StoreLockedError, WorkbenchError

SCHEMA_VERSION = 3
APP_ID = 0x54574231  # "TWB1": marks a workbench store
LIVE_STATUSES = ("running", "paused")  # a stored status that is only true while the session's process lives
RUNS_DIR = "workbench-runs"  # where the notebooks keep their stores (runs_path)

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workload TEXT NOT NULL,
  spec TEXT NOT NULL,
  target TEXT NOT NULL,
  preset TEXT NOT NULL,
  preset_params TEXT NOT NULL,
  seed INTEGER NOT NULL,
  trials INTEGER NOT NULL,
  strategies TEXT NOT NULL,
  strategy_arg TEXT NOT NULL DEFAULT 'auto',
  versions TEXT NOT NULL,
  status TEXT NOT NULL,
  naive_latency_ms REAL,
  created_at REAL NOT NULL,
  updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id INTEGER NOT NULL REFERENCES sessions(id),
  workload TEXT NOT NULL,
  trial INTEGER NOT NULL,
  round INTEGER NOT NULL,
  strategy TEXT NOT NULL,
  chosen_by TEXT NOT NULL,
  trace TEXT NOT NULL,
  decisions TEXT NOT NULL,
  mod_hash TEXT NOT NULL,
  predicted_score REAL,
  run_secs TEXT NOT NULL,
  latency_ms REAL,
  gflops REAL,
  error_class TEXT,
  error_msg TEXT,
  verified INTEGER NOT NULL DEFAULT 0,
  is_best INTEGER NOT NULL DEFAULT 0,
  seed INTEGER NOT NULL,
  proposed_at REAL NOT NULL,
  measured_at REAL NOT NULL,
  elapsed_s REAL NOT NULL,
  features BLOB,
  feature_rows INTEGER,
  noisy INTEGER NOT NULL DEFAULT 0,
  noise TEXT,
  cv REAL,
  confirm_secs TEXT,
  confirm_spread REAL,
  build_s REAL
);
CREATE INDEX IF NOT EXISTS records_session ON records(session_id, trial);
CREATE INDEX IF NOT EXISTS records_workload ON records(workload, latency_ms);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id INTEGER NOT NULL,
  kind TEXT NOT NULL,
  time REAL NOT NULL,
  elapsed REAL NOT NULL,
  data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_session ON events(session_id, id);
"""

RECORD_COLUMNS = [
    "id",
    "session_id",
    "workload",
    "trial",
    "round",
    "strategy",
    "chosen_by",
    "latency_ms",
    "gflops",
    "predicted_score",
    "error_class",
    "error_msg",
    "verified",
    "is_best",
    "run_secs",
    "decisions",
    "mod_hash",
    "seed",
    "proposed_at",
    "measured_at",
    "elapsed_s",
    "noisy",
    "cv",
    "confirm_spread",
    "build_s",
]
# The records columns each schema after 1 added (2: measurement noise, 3: compile time), with what an older row
# reads as.
ADDED_COLUMNS = {
    2: {
        "noisy": "INTEGER NOT NULL DEFAULT 0",
        "noise": "TEXT",
        "cv": "REAL",
        "confirm_secs": "TEXT",
        "confirm_spread": "REAL",
    },
    3: {"build_s": "REAL"},
}


def _locked(e: sqlite3.OperationalError) -> bool:
    return "locked" in str(e) or "busy" in str(e)


def program_hash(mod) -> str:
    """A program's ``mod_hash``: its structural hash, as 16 hex digits."""
    from tvm_ffi import structural_hash

    return format(structural_hash(mod) & (2**64 - 1), "016x")


def session_lock(db_path: str, session_id: int):
    """Hold the lock of a session being tuned: an open lock file (``DB-session-N.lock``) with an exclusive
    ``flock``. Another process that tries gets ``SessionRunningError``; the OS drops the lock when the holder
    dies, so a killed session can be resumed at once. Release with ``release_session_lock``."""
    import fcntl

    from .errors import SessionRunningError

    path = session_lock_path(db_path, session_id)
    f = open(path, "a+")
    try:
        # a few tries: session_writer() holds a shared lock for an instant while it looks
        for attempt in range(5):
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 4:
                    raise
                time.sleep(0.05)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip()
        f.close()
        raise SessionRunningError(
            f"session {session_id} in {db_path!r} is still running in another process"
            + (f" (pid {holder})" if holder else "")
            + "; stop it (Ctrl-C) before resuming it"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def session_lock_path(db_path: str, session_id: int) -> str:
    return f"{db_path}-session-{session_id}.lock"


def session_writer(db_path: str, session_id: int) -> int | None:
    """The pid of the process tuning a stored session now (0 if it has not written its pid yet), or None when no
    process holds the session's lock: it ended, or it died (a kernel restart, kill -9) and the OS dropped the lock.

    ``db_path`` is the store's absolute path (``RecordStore.path``), as the lock's holder named it. Looking takes a
    shared lock for an instant; ``session_lock`` retries briefly, so a session starting meanwhile is not refused.
    """
    import fcntl

    try:
        fd = os.open(session_lock_path(db_path, session_id), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode(errors="replace").strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def effective_status(db_path: str, row: dict) -> str:
    """A stored session's status as it is now: "interrupted" when the store says "running" or "paused" but no
    process holds the session's lock (its process died without recording an end: a kernel restart, kill -9),
    otherwise the stored status."""
    if row["status"] in LIVE_STATUSES and session_writer(db_path, row["id"]) is None:
        return "interrupted"
    return row["status"]


# A person's what-if measurement (workbench.whatif): chosen by the user in round 0, which no search round has. It
# spends no trial and belongs to no round: counts of trials, shares of them and per-round figures leave it out.
WHAT_IF_CHOSEN_BY = "user"
WHAT_IF_ROUND = 0


def is_what_if(rec) -> bool:
    """A record (dict or DataFrame row) measured by ``TuningSession.measure``, not by the search."""
    return rec.get("chosen_by") == WHAT_IF_CHOSEN_BY and rec.get("round") == WHAT_IF_ROUND


def search_records(df):
    """The rows of a records DataFrame that the search measured (the what-if rows left out)."""
    if not len(df) or "chosen_by" not in df or "round" not in df:
        return df
    return df[~((df["chosen_by"] == WHAT_IF_CHOSEN_BY) & (df["round"] == WHAT_IF_ROUND))]


# Sessions that hold records but no search that could go on: transfer-tuning's and those imported from MetaSchedule.
RECORDS_ONLY_PRESETS = ("transfer", "imported")


def holds_a_search(session_row: dict) -> bool:
    """Whether a session row is a search ``TuningSession.resume`` can continue (its preset is a search's)."""
    return session_row["preset"] not in RECORDS_ONLY_PRESETS and session_row.get("status") != "imported"


def runs_path(name: str) -> str:
    """The path of a notebook's records store ``name`` in a stable place: ``workbench-runs/`` under the working
    directory, or the directory ``$WORKBENCH_RUNS`` names; the directory is created if missing. After a kernel
    restart the same cell opens the same store again, and new sessions are appended to it."""
    d = os.environ.get("WORKBENCH_RUNS") or RUNS_DIR
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def release_session_lock(lock) -> None:
    if lock is None or lock.closed:
        return
    try:
        os.remove(lock.name)
    except FileNotFoundError:
        pass
    lock.close()


def remove_store(path: str) -> None:
    """Delete a records store with its WAL and shared-memory files.

    Deleting only the main file leaves the old WAL beside the next store of that name, and SQLite then
    fails with "disk I/O error" part-way through (it did, 17 minutes into a benchmark).
    """
    import glob

    for p in [path + s for s in ("", "-wal", "-shm")] + glob.glob(glob.escape(path) + "-session-*.lock"):
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


class RecordStore:
    """A records store file. One writer at a time; any number of readers."""

    def __init__(self, path: str, readonly: bool = False, timeout: float = 10.0):
        self.path = os.path.abspath(path)
        if readonly and not os.path.exists(self.path):
            raise WorkbenchError(f"records store {path!r} does not exist")
        d = os.path.dirname(self.path)
        if not os.path.isdir(d):
            raise WorkbenchError(f"cannot create records store {path!r}: directory {d!r} does not exist")
        # No peeking at the file's header with open(): closing any descriptor of the file releases every POSIX
        # lock this process holds on it, including those of a live writer connection to the same store, and
        # another process's SQLite would then see no one using the WAL and delete it. SQLite itself says
        # "file is not a database" for a foreign file, before anything is written.
        self._timeout = timeout
        self.conn = None
        try:
            try:
                self.conn = self._connect(readonly)
                self._init(readonly)
            except sqlite3.OperationalError as e:
                if "disk I/O error" not in str(e):
                    raise
                if self.conn is not None:
                    self.conn.close()  # once more on a fresh connection (see _reconnect)
                self.conn = self._connect(readonly)
                self._init(readonly)
        except sqlite3.OperationalError as e:
            if _locked(e):
                raise StoreLockedError(
                    f"records store {path!r} is locked by another process; try again when it finishes"
                ) from None
            raise WorkbenchError(f"cannot open records store {path!r}: {e}") from None
        except sqlite3.DatabaseError as e:
            if self.conn is not None:
                self.conn.close()
            if "not a database" in str(e):
                raise WorkbenchError(f"{path!r} is not a workbench records store (not an SQLite file)") from None
            raise WorkbenchError(f"{path!r} is not a usable records store: {e}") from None

    def _connect(self, readonly: bool) -> sqlite3.Connection:
        uri = f"file:{self.path}?mode=ro" if readonly else f"file:{self.path}"
        conn = sqlite3.connect(uri, uri=True, timeout=self._timeout, check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    def _reconnect(self) -> None:
        """A fresh connection for a writer whose WAL shared-memory mapping went bad (SQLite's "disk I/O
        error" with the file intact: seen once on a VM mid-session, and the store opened cleanly again)."""
        try:
            self.conn.close()
        except sqlite3.Error:
            pass
        self.conn = self._connect(False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")

    def _init(self, readonly: bool):
        c = self.conn
        app = c.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and app != APP_ID:
            raise WorkbenchError(f"{self.path!r} is an SQLite file but not a workbench records store")
        if readonly:
            if not tables:
                raise WorkbenchError(f"{self.path!r} is empty, not a workbench records store")
            self._check_version()
            self._cols = {r[1] for r in c.execute("PRAGMA table_info(records)")}
            return
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")
        if not tables:
            c.execute("BEGIN IMMEDIATE")
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            c.execute(f"PRAGMA application_id={APP_ID}")
            c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            c.execute("COMMIT")
        else:
            v = self._check_version()
            if v < SCHEMA_VERSION:
                c.execute("BEGIN IMMEDIATE")
                have = {r[1] for r in c.execute("PRAGMA table_info(records)")}
                for cols in ADDED_COLUMNS.values():
                    for col, decl in cols.items():
                        if col not in have:
                            c.execute(f"ALTER TABLE records ADD COLUMN {col} {decl}")
                c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                c.execute("COMMIT")
        self._cols = {r[1] for r in c.execute("PRAGMA table_info(records)")}

    def _check_version(self) -> int:
        v = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if v > SCHEMA_VERSION:
            raise WorkbenchError(
                f"{self.path!r} was written by a newer workbench (schema {v}; this one reads up to "
                f"{SCHEMA_VERSION}): upgrade the workbench to open it"
            )
        return v

    def _col(self, name: str) -> str:
        """A records column for a SELECT; on an old read-only store a missing one reads as empty."""
        return name if name in self._cols else f"{'0' if name == 'noisy' else 'NULL'} AS {name}"

    # ---- writing (each call is one durable transaction) ----
    def _write(self, sql: str, args) -> int:
        try:
            try:
                cur = self.conn.execute(sql, args)
            except sqlite3.OperationalError as e:
                # one retry on a fresh connection, only outside a transaction (whose earlier statements the
                # new connection would not have)
                if "disk I/O error" not in str(e) or self.conn.in_transaction:
                    raise
                self._reconnect()
                cur = self.conn.execute(sql, args)
            return cur.lastrowid
        except sqlite3.OperationalError as e:
            if _locked(e):
                raise StoreLockedError(f"records store {self.path!r} is locked by another process") from None
            if "disk" in str(e) or "full" in str(e):
                raise WorkbenchError(f"cannot write records store {self.path!r}: {e}") from None
            raise
        except sqlite3.DatabaseError as e:
            raise WorkbenchError(f"cannot write records store {self.path!r}: {e}") from None

    def create_session(
        self,
        *,
        workload: str,
        spec: dict,
        target: dict,
        preset: str,
        preset_params: dict,
        seed: int,
        trials: int,
        strategies: list,
        strategy_arg: str,
        versions: dict,
    ) -> int:
        now = time.time()
        return self._write(
            "INSERT INTO sessions(workload, spec, target, preset, preset_params, seed, trials, strategies, strategy_arg,"
            " versions, status, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                workload,
                json.dumps(spec),
                json.dumps(target),
                preset,
                json.dumps(preset_params),
                seed,
                trials,
                json.dumps(strategies),
                strategy_arg,
                json.dumps(versions),
                "created",
                now,
                now,
            ),
        )

    def update_session(self, session_id: int, **fields) -> None:
        if not fields:
            return
        fields["updated_at"] = time.time()
        cols = ", ".join(f"{k}=?" for k in fields)
        self._write(f"UPDATE sessions SET {cols} WHERE id=?", (*fields.values(), session_id))

    def add_record(self, rec: dict, features: np.ndarray | None) -> int:
        feats = None if features is None else np.ascontiguousarray(features, dtype=np.float32)
        return self._write(
            "INSERT INTO records(session_id, workload, trial, round, strategy, chosen_by, trace, decisions, mod_hash,"
            " predicted_score, run_secs, latency_ms, gflops, error_class, error_msg, verified, is_best, seed,"
            " proposed_at, measured_at, elapsed_s, features, feature_rows, noisy, noise, cv, confirm_secs,"
            " confirm_spread, build_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                rec["session_id"],
                rec["workload"],
                rec["trial"],
                rec["round"],
                rec["strategy"],
                rec["chosen_by"],
                rec["trace"],
                rec["decisions"],
                rec["mod_hash"],
                rec.get("predicted_score"),
                json.dumps(rec.get("run_secs") or []),
                rec.get("latency_ms"),
                rec.get("gflops"),
                rec.get("error_class"),
                rec.get("error_msg"),
                int(bool(rec.get("verified"))),
                int(bool(rec.get("is_best"))),
                rec["seed"],
                rec["proposed_at"],
                rec["measured_at"],
                rec["elapsed_s"],
                None if feats is None else feats.tobytes(),
                None if feats is None else feats.shape[0],
                int(bool(rec.get("noisy"))),
                None if rec.get("noise") is None else json.dumps(rec["noise"]),
                rec.get("cv"),
                None if rec.get("confirm_secs") is None else json.dumps(rec["confirm_secs"]),
                rec.get("confirm_spread"),
                rec.get("build_s"),
            ),
        )

    def update_record(self, record_id: int, **fields) -> None:
        """Change measured values of a record (an incumbent re-measured beside a challenger)."""
        cols = ", ".join(f"{k}=?" for k in fields)
        self._write(f"UPDATE records SET {cols} WHERE id=?", (*fields.values(), record_id))

    def last_record_id(self, session_id: int) -> int:
        """The id of a session's latest record (0 for none)."""
        r = self.conn.execute("SELECT MAX(id) FROM records WHERE session_id=?", (session_id,)).fetchone()
        return r[0] or 0

    def mark_noisy(self, session_id: int, after_id: int) -> list[int]:
        """Mark a session's records after ``after_id`` noisy; returns the ids newly marked."""
        ids = [
            r[0]
            for r in self.conn.execute(
                "SELECT id FROM records WHERE session_id=? AND id>? AND noisy=0 AND error_class IS NULL",
                (session_id, after_id),
            )
        ]
        if ids:
            self._write(f"UPDATE records SET noisy=1 WHERE id IN ({','.join('?' * len(ids))})", ids)
        return ids

    def add_event(self, session_id: int, kind: str, t: float, elapsed: float, data: dict) -> int:
        return self._write(
            "INSERT INTO events(session_id, kind, time, elapsed, data) VALUES (?,?,?,?,?)",
            (session_id, kind, t, elapsed, json.dumps(data, default=_json_default)),
        )

    # ---- reading ----
    def session(self, session_id: int) -> dict:
        r = self.conn.execute("SELECT * FROM sessions WHERE id=?", (session_id,)).fetchone()
        if r is None:
            raise WorkbenchError(f"no session {session_id} in {self.path!r}")
        return _session_row(r)

    def sessions(self) -> list[dict]:
        return [_session_row(r) for r in self.conn.execute("SELECT * FROM sessions ORDER BY id")]

    def session_status(self, session_id: int) -> str:
        """The session's status as it is now (``effective_status``: "interrupted" for a dead process's session)."""
        return effective_status(self.path, self.session(session_id))

    def session_list(self) -> list[dict]:
        """Every session, oldest first, with what a picker shows: ``id, workload, strategy_arg, preset, status``
        (as it is now, ``effective_status``), ``writer_pid`` (the live process tuning it, else None), ``trials_done``
        (search records), ``trials`` (budget), ``best_latency_ms`` and ``best_gflops`` (verified), ``created_at``,
        ``updated_at``, ``resumable`` (a tuning session no process is running: ``TuningSession.resume`` can
        continue it) and ``rate_unit`` (what ``best_gflops`` counts: GOPS for an integer workload, else GFLOPS)."""
        out = []
        for r in self.conn.execute(
            "SELECT s.id, s.workload, s.strategy_arg, s.preset, s.status, s.trials, s.created_at, s.updated_at, s.spec,"
            # a person's what-if measurement (is_what_if) spends no trial
            f" COUNT(CASE WHEN NOT (r.chosen_by='{WHAT_IF_CHOSEN_BY}' AND r.round={WHAT_IF_ROUND}) THEN r.id END)"
            " AS trials_done,"
            " MIN(CASE WHEN r.error_class IS NULL AND r.verified=1 THEN r.latency_ms END) AS best_latency_ms,"
            " MAX(CASE WHEN r.error_class IS NULL AND r.verified=1 THEN r.gflops END) AS best_gflops"
            " FROM sessions s LEFT JOIN records r ON r.session_id = s.id GROUP BY s.id ORDER BY s.id"
        ):
            d = dict(r)
            d["writer_pid"] = session_writer(self.path, d["id"])
            d["status"] = "interrupted" if d["status"] in LIVE_STATUSES and d["writer_pid"] is None else d["status"]
            # transfer-tuning and imported sessions hold records, not a search that can go on
            d["resumable"] = d["writer_pid"] is None and holds_a_search(d)
            d["rate_unit"] = _rate_unit_of(d.pop("spec"))
            out.append(d)
        return out

    def latest_session(self, workload: str, searches_only: bool = False) -> dict | None:
        """The newest session of ``workload`` (with ``searches_only``, the newest that ``holds_a_search``)."""
        for r in self.conn.execute("SELECT * FROM sessions WHERE workload=? ORDER BY id DESC", (workload,)):
            row = _session_row(r)
            if not searches_only or holds_a_search(row):
                return row
        return None

    def records(self, session_id: int | None = None, workload: str | None = None, with_trace: bool = False):
        """A pandas DataFrame of measured candidates, in measurement order."""
        import pandas as pd

        cols = RECORD_COLUMNS + (["trace"] if with_trace else [])
        select = [self._col(c) for c in cols]
        where, args = [], []
        if session_id is not None:
            where.append("session_id=?")
            args.append(session_id)
        if workload is not None:
            where.append("workload=?")
            args.append(workload)
        sql = (
            f"SELECT {', '.join(select)} FROM records"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY id"
        )
        rows = [dict(r) for r in self.conn.execute(sql, args)]
        df = pd.DataFrame(rows, columns=cols)
        if len(df):
            df["run_secs"] = df["run_secs"].map(json.loads)
            df["verified"] = df["verified"].astype(bool)
            df["is_best"] = df["is_best"].astype(bool)
            df["noisy"] = df["noisy"].astype(bool)
        return df

    def record(self, record_id: int) -> dict:
        r = self.conn.execute("SELECT * FROM records WHERE id=?", (record_id,)).fetchone()
        if r is None:
            raise WorkbenchError(f"no record {record_id} in {self.path!r}")
        d = dict(r)
        d["run_secs"] = json.loads(d["run_secs"])
        d["features"] = _features(d.pop("features"), d.pop("feature_rows"))
        for k in ("noise", "confirm_secs"):
            d[k] = json.loads(d[k]) if d.get(k) else None
        return d

    def training_rows(self, workload: str):
        """(strategy, features, latency_ms or None, mod_hash) of every record of a workload, for the cost model."""
        out = []
        for r in self.conn.execute(
            "SELECT strategy, features, feature_rows, latency_ms, error_class, mod_hash FROM records"
            " WHERE workload=? ORDER BY id",
            (workload,),
        ):
            lat = r["latency_ms"] if r["latency_ms"] is not None and not r["error_class"] else None
            out.append((r["strategy"], _features(r["features"], r["feature_rows"]), lat, r["mod_hash"]))
        return out

    def traces(self, session_id: int, after_id: int = 0):
        """Id, strategy, trace and timing of the session's records with ids above ``after_id`` (a view that holds
        the earlier ones asks only for the new)."""
        return [
            dict(r)
            for r in self.conn.execute(
                "SELECT id, strategy, trace, run_secs, latency_ms, error_class, mod_hash FROM records"
                " WHERE session_id=? AND id>? ORDER BY id",
                (session_id, after_id),
            )
        ]

    def best(self, workload: str, strategy: str | None = None, session_id: int | None = None) -> dict | None:
        """The fastest verified record of ``workload`` (of one strategy, of one session, when given), or None."""
        sql = "SELECT * FROM records WHERE workload=? AND error_class IS NULL AND latency_ms IS NOT NULL AND verified=1"
        args = [workload]
        if strategy:
            sql += " AND strategy=?"
            args.append(strategy)
        if session_id is not None:
            sql += " AND session_id=?"
            args.append(session_id)
        r = self.conn.execute(sql + " ORDER BY latency_ms LIMIT 1", args).fetchone()
        if r is None:
            return None
        d = dict(r)
        d["run_secs"] = json.loads(d["run_secs"])
        d.pop("features")
        return d

    def events(self, session_id: int, after_id: int = 0) -> list[dict]:
        return [
            {
                "id": r["id"],
                "kind": r["kind"],
                "time": r["time"],
                "elapsed": r["elapsed"],
                "data": json.loads(r["data"]),
            }
            for r in self.conn.execute(
                "SELECT * FROM events WHERE session_id=? AND id>? ORDER BY id", (session_id, after_id)
            )
        ]

    def session_events(self, session_id: int) -> list[dict]:
        """The session's stored events, as ``events``; for a session that stored none but holds records (a
        transfer-tuning or an imported session writes records only), the events those records imply: its start,
        one ``candidate_measured`` per record (``new_best`` / ``strategy_best`` as the running minimum of its
        verified latencies says) and its end, without ids. Views then show every session the same way."""
        stored = self.events(session_id)
        if stored:
            return stored
        row = self.session(session_id)
        select = ", ".join(self._col(c) for c in RECORD_COLUMNS)
        records = [
            dict(r)
            for r in self.conn.execute(f"SELECT {select} FROM records WHERE session_id=? ORDER BY id", (session_id,))
        ]
        if not records:
            return []
        t0 = row["created_at"]

        def event(kind, when, data, elapsed=None):
            elapsed = max(0.0, when - t0) if elapsed is None else elapsed
            return {"id": None, "kind": kind, "time": when, "elapsed": elapsed, "data": data}

        first = next((r for r in records if r["gflops"] and r["latency_ms"]), None)
        flops = first["gflops"] * 1e9 * first["latency_ms"] / 1e3 if first else None
        out = [
            event(
                "session_started",
                t0,
                {
                    "workload": row["workload"],
                    "spec": row["spec"],
                    "flops": flops,
                    "target": row["target"],
                    "trials": row["trials"],
                    "preset": row["preset"],
                    "seed": row["seed"],
                    "strategies": row["strategies"] or sorted({r["strategy"] for r in records}),
                    "mode": "fixed",
                    "db": self.path,
                    "resumed": False,
                    "trials_done": 0,
                },
            )
        ]
        best, per_strategy = None, {}
        for r in records:
            r["run_secs"] = json.loads(r["run_secs"]) if r["run_secs"] else []
            for k in ("verified", "is_best", "noisy"):
                r[k] = bool(r[k])
            ok = r["error_class"] is None and r["verified"] and r["latency_ms"] is not None
            new_best = ok and (best is None or r["latency_ms"] < best)
            strategy_best = ok and r["latency_ms"] < per_strategy.get(r["strategy"], float("inf"))
            if new_best:
                best = r["latency_ms"]
            if strategy_best:
                per_strategy[r["strategy"]] = r["latency_ms"]
            when = r["measured_at"] or t0
            out.append(
                event(
                    "candidate_measured",
                    when,
                    {"record": r, "new_best": new_best, "strategy_best": strategy_best},
                    elapsed=r["elapsed_s"],
                )
            )
        if row["status"] in ("finished", "stopped", "failed"):
            end = (
                {"trials_done": len(records), "best_latency_ms": best} if row["status"] != "failed" else {"message": ""}
            )
            out.append(event(row["status"], row["updated_at"], end))
        return out

    def summary(self) -> dict:
        c = self.conn
        measured = c.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        errors = c.execute("SELECT COUNT(*) FROM records WHERE error_class IS NOT NULL").fetchone()[0]
        per = {}
        for r in c.execute(
            "SELECT workload, COUNT(*) n, SUM(error_class IS NOT NULL) e,"
            " MIN(CASE WHEN error_class IS NULL AND verified=1 THEN latency_ms END) best FROM records GROUP BY workload"
        ):
            per[r["workload"]] = {"measured": r["n"], "errors": r["e"], "best_latency_ms": r["best"]}
        for r in c.execute("SELECT workload, MIN(naive_latency_ms) naive FROM sessions GROUP BY workload"):
            per.setdefault(r["workload"], {"measured": 0, "errors": 0, "best_latency_ms": None})["naive_latency_ms"] = (
                r["naive"]
            )
        noisy = c.execute(f"SELECT COUNT(*) FROM records WHERE {self._col('noisy').split(' AS ')[0]}=1").fetchone()[0]
        noise_events = c.execute("SELECT COUNT(*) FROM events WHERE kind='measurement_noise'").fetchone()[0]
        return {
            "measured": measured,
            "errors": errors,
            "sessions": len(self.sessions()),
            "workloads": per,
            "noise_events": noise_events,
            "noisy": noisy,
        }

    def close(self):
        self.conn.close()


def _features(blob, rows):
    if blob is None:
        return None
    if not isinstance(blob, bytes) or not rows or len(blob) % (4 * rows):
        raise WorkbenchError("a record's features are not float32 rows: the store is damaged or not a workbench store")
    return np.frombuffer(blob, dtype=np.float32).reshape(rows, -1)


def _session_row(r) -> dict:
    d = dict(r)
    for k in ("spec", "target", "preset_params", "strategies", "versions"):
        d[k] = json.loads(d[k])
    return d


def _rate_unit_of(spec_json) -> str:
    """``dtypes.spec_rate_unit`` of a stored spec; GFLOPS for one that does not parse (a crafted store)."""
    from .dtypes import spec_rate_unit

    try:
        return spec_rate_unit(json.loads(spec_json))
    except (ValueError, TypeError):
        return "GFLOPS"


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)
