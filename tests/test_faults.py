"""Faults injected into the production code paths: crashing and hanging kernels, a locked store, a full disk.

(A session killed with SIGKILL is covered by
tests/test_session_e2e.py::test_resume_after_sigkill_loses_nothing.)
"""

import json
import os
import resource
import sqlite3
import subprocess
import sys
import time

import pytest

from workbench import RecordStore

from .shapes import SMALL


def bad_modules():
    """(good, segfaulting, hanging) IRModules taking float32[16] A and B, and the argument shapes.

    Real kernels, built and run like any candidate: the segfault is a store 2**40 elements past the buffer,
    the hang ~1e15 loop iterations."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def good(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(16):
            B[i] = A[i] * T.float32(2)

    @T.prim_func
    def segv(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(16):
            B[T.int64(i) * T.int64(1 << 40)] = A[i]

    @T.prim_func
    def hang(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i, j, k in T.grid(100000, 100000, 100000):
            B[(i + j + k) % 16] = B[(i * j + k) % 16] + A[k % 16]

    return (tvm.IRModule({"main": good}), tvm.IRModule({"main": segv}), tvm.IRModule({"main": hang}), [(16,), (16,)])


def test_segfaulting_and_hanging_kernels_kill_only_themselves():
    from workbench import measure, tvm_env

    b = measure.Builder(tvm_env.host_target_dict(1), workers=1)
    r = measure.Runner(1, timeout=30)
    try:
        good_mod, segv_mod, hang_mod, shapes = bad_modules()
        good, segv, hang = b.build([good_mod, segv_mod, hang_mod])
        assert good.path and segv.path and hang.path, (good, segv, hang)
        assert r.run(good.path, shapes).error_class is None
        crash = r.run(segv.path, shapes)
        assert crash.error_class == "run-crash" and crash.run_secs == [], crash
        after = r.run(good.path, shapes)
        assert after.error_class is None and after.latency_ms > 0  # a fresh worker took over
        slow = r.run(hang.path, shapes, timeout=3)
        assert slow.error_class == "run-timeout", slow
        out, cls, msg = r.compute(good.path, [__import__("numpy").ones(16, "float32")], (16,))
        assert cls is None and (out == 2).all()  # and the runner still computes
        # The per-call timeout is honoured (1 s, visibly shorter than the runner's 30 s) and restored.
        t = time.monotonic()
        assert r.run(hang.path, shapes, timeout=1).error_class == "run-timeout" and r.timeout == 30
        assert 1.0 <= time.monotonic() - t < 15
    finally:
        r.close()
        b.close()


def _tune_cmd(spec, db, trials=16):
    return [
        sys.executable,
        "-m",
        "workbench.cli",
        "tune",
        "--spec",
        str(spec),
        "--trials",
        str(trials),
        "--trials-per-round",
        "4",
        "--strategy",
        "no-rewrite",
        "--db",
        str(db),
        "--quiet",
    ]


def _start_tuning(tmp_path, until_records=4):
    spec = tmp_path / "mm.json"
    spec.write_text(json.dumps(SMALL["matmul"]))
    db = tmp_path / "r.db"
    p = subprocess.Popen(
        _tune_cmd(spec, db), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.time() + 240
    while time.time() < deadline:
        time.sleep(0.3)
        if db.exists():
            try:
                n = len(RecordStore(str(db), readonly=True).records())
            except Exception:
                continue
            if n >= until_records:
                return p, db, spec
        assert p.poll() is None, p.communicate()
    p.kill()
    raise AssertionError("the session measured nothing in 240 s")


def _snapshot(db):
    rec = RecordStore(str(db), readonly=True).records()
    return rec.set_index("id")[["trial", "mod_hash", "latency_ms", "error_class"]]


def _assert_nothing_lost(before, db):
    after = _snapshot(db)
    assert set(before.index) <= set(after.index)
    assert after.loc[before.index].equals(before)
    assert sorted(after["trial"]) == list(range(1, len(after) + 1))
    with sqlite3.connect(str(db)) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return after


LOCKER = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
c.execute("ROLLBACK")
"""


@pytest.mark.slow
def test_store_locked_by_another_process_mid_session(tmp_path):
    p, db, _ = _start_tuning(tmp_path)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(db), "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        before = _snapshot(db)  # readers are never blocked (WAL)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 2, (p.returncode, err)
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert "is locked by another process" in lines[0], lines[0]
        # Opening it for writing while the lock is held: the same one line, after the store's busy timeout.
        from workbench.errors import StoreLockedError

        with pytest.raises(StoreLockedError, match="locked by another process"):
            RecordStore(str(db), timeout=0.5).create_session(
                workload="x",
                spec={},
                target={},
                preset="quick",
                preset_params={},
                seed=0,
                trials=1,
                strategies=[],
                strategy_arg="auto",
                versions={},
            )
    finally:
        locker.kill()
        locker.wait()
    after = _assert_nothing_lost(before, db)
    # Every record the session wrote before it gave up is there, and it can be resumed.
    assert len(after) >= len(before)


@pytest.mark.slow
def test_disk_full_mid_session(tmp_path):
    p, db, _ = _start_tuning(tmp_path)
    # Python ignores SIGXFSZ, so writes past the limit fail with EFBIG, as on a full disk. Linux checks a write's
    # offset, not the file's size, against the limit: one page keeps every later record write from fitting, even
    # into a WAL that a checkpoint has just reset to its start.
    limit = 4096
    assert max(os.path.getsize(db), os.path.getsize(str(db) + "-wal")) > limit
    try:
        resource.prlimit(p.pid, resource.RLIMIT_FSIZE, (limit, limit))
        before = _snapshot(db)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 2, (p.returncode, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "cannot write records store" in lines[0], lines[0]
    after = _assert_nothing_lost(before, db)
    assert len(after) >= len(before)


def test_workers_survive_the_terminals_ctrl_c():
    # Ctrl-C reaches every process of the terminal's foreground group; the session decides what it means
    # (stop after the candidate in flight), so a builder or runner worker must not die of it.
    import os
    import signal

    import psutil

    from workbench import measure, tvm_env

    b = measure.Builder(tvm_env.host_target_dict(1), workers=1)
    r = measure.Runner(1, timeout=30)
    try:
        good_mod, _segv, _hang, shapes = bad_modules()
        [good] = b.build([good_mod])
        assert r.run(good.path, shapes).error_class is None
        workers = [
            c for c in psutil.Process().children(recursive=True) if any("popen_worker" in a for a in c.cmdline())
        ]
        assert len(workers) >= 2
        for w in workers:
            os.kill(w.pid, signal.SIGINT)
        time.sleep(0.5)
        assert all(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
        again = r.run(good.path, shapes)
        assert again.error_class is None, again
        [rebuilt] = b.build([good_mod])
        assert rebuilt.path is not None, rebuilt
    finally:
        r.close()
        b.close()
