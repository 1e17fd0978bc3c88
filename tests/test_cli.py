"""The command line: user mistakes give one line and exit code 2; --json output."""

import json
import subprocess
import sys

import pytest

from .shapes import SMALL


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def _one_line_error(r, needle):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert needle in lines[0], lines[0]


def test_workloads_json_lists_registry_and_networks():
    r = cli("workloads", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    names = {w["name"] for w in d["workloads"]}
    assert {"resnet18.conv2", "C2D.1", "TBG.0", "CBR.3"} <= names
    assert set(d["networks"]) == {"resnet18", "resnet50", "mobilenet_v2"}
    refs = {w["name"]: w["reference"] for w in d["workloads"]}
    assert refs["C3D.0"] == "tvm-naive" and refs["resnet18.conv2"] == "numpy"


def test_user_mistakes(tmp_path):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"name": "x", "op": ')
    bad_shape = tmp_path / "shape.json"
    bad_shape.write_text(
        json.dumps({"name": "x", "op": "conv2d", "params": dict(SMALL["conv_nhwc"]["params"], kernel=99)})
    )
    unknown_op = tmp_path / "op.json"
    unknown_op.write_text(json.dumps({"name": "x", "op": "fft", "params": {}}))
    foreign = tmp_path / "foreign.db"
    foreign.write_text("not a database at all")
    db = str(tmp_path / "ok.db")
    _one_line_error(cli("tune", "no-such-workload", "--db", db), "unknown workload 'no-such-workload'")
    _one_line_error(cli("tune", "resnet18", "--db", db, "--resume"), "not a network")
    _one_line_error(cli("tune", "resnet18", "--db", db, "--runner", "rpc://127.0.0.1:9/k"), "local runner only")
    _one_line_error(cli("tune", "--spec", str(bad_json), "--db", db), "is not valid JSON")
    _one_line_error(cli("tune", "--spec", str(bad_shape), "--db", db), "larger than the padded input")
    _one_line_error(cli("tune", "--spec", str(unknown_op), "--db", db), "unknown op 'fft'")
    _one_line_error(cli("tune", "--spec", str(tmp_path / "missing.json"), "--db", db), "does not exist")
    _one_line_error(cli("tune", str(tmp_path / "missing.json"), "--db", db), "does not exist")
    _one_line_error(cli("tune", str(bad_json), "--db", db), "is not valid JSON")
    _one_line_error(cli("tune", str(bad_json), "--spec", str(bad_json), "--db", db), "not both")
    _one_line_error(cli("tune", "matmul-128", "--target", "{not json", "--db", db), "neither 'host' nor valid JSON")
    _one_line_error(cli("tune", "matmul-128", "--target", '{"kind": "cuda"}', "--db", db), "only CPU targets")
    _one_line_error(cli("tune", "matmul-128", "--trials", "-4", "--db", db), "must be at least 1")
    _one_line_error(cli("tune", "matmul-128", "--preset", "turbo", "--db", db), "unknown preset 'turbo'")
    _one_line_error(
        cli("tune", "matmul-128", "--strategy", "sideways", "--db", db), "unknown layout strategy 'sideways'"
    )
    _one_line_error(cli("tune", "matmul-128", "--db", str(foreign)), "not a workbench records store")
    _one_line_error(cli("tune", "matmul-128", "--resume", "--db", db), "nothing to resume")
    _one_line_error(
        cli("tune", "matmul-128", "--resume", "--seed", "3", "--prior", "--db", db),
        "keeps the settings it was made with: --seed, --prior cannot change them",
    )
    _one_line_error(cli("show", str(tmp_path / "nope.db")), "does not exist")
    _one_line_error(cli("show", str(foreign)), "not a workbench records store")
    _one_line_error(cli("best", db, "matmul-128"), "no verified program")
    _one_line_error(cli("frobnicate"), "invalid choice")


@pytest.mark.slow
def test_tune_json_show_best(tmp_path):
    spec = tmp_path / "mm.json"
    spec.write_text(json.dumps(SMALL["matmul"]))
    db = str(tmp_path / "r.db")
    r = cli(
        "tune",
        str(spec),  # a spec file where a workload name goes: as --spec FILE
        "--trials",
        "16",
        "--trials-per-round",
        "8",
        "--strategy",
        "no-rewrite",
        "--db",
        db,
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for k in (
        "workload",
        "trials",
        "best_latency_ms",
        "best_gflops",
        "naive_latency_ms",
        "verified",
        "tuning_seconds",
        "db",
        "strategies",
        "best_strategy",
    ):
        assert k in out
    assert out["trials"] == 16 and out["verified"] and out["best_latency_ms"] > 0 and out["naive_latency_ms"] > 0
    assert "trial" in r.stderr  # the progress bar
    s = json.loads(cli("show", db, "--json").stdout.strip().splitlines()[-1])
    assert s["measured"] == 16 and s["workloads"]["t-mm"]["best_latency_ms"] == pytest.approx(out["best_latency_ms"])
    b = cli("best", db, "t-mm", "--tir", "--export", str(tmp_path / "k.so"))
    assert b.returncode == 0, b.stderr
    assert "def apply_trace" in b.stdout and "T.prim_func" in b.stdout
    assert (tmp_path / "k.so").exists()
    _one_line_error(cli("best", db, "t-mm", "--export", str(tmp_path / "no" / "k.so")), "no directory")
    _one_line_error(cli("best", db, "t-mm", "--export", str(tmp_path)), "it is a directory")


def _records(db):
    from workbench.store import RecordStore

    try:
        return RecordStore(db, readonly=True).records()
    except Exception:  # not created yet
        return None


@pytest.mark.slow
def test_ctrl_c_stops_after_the_candidate_in_flight_and_a_running_session_cannot_be_resumed(tmp_path):
    import os
    import signal
    import time

    db = str(tmp_path / "c.db")
    # Its own process group, as a terminal's foreground job: Ctrl-C reaches the CLI and every worker it started.
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "tune",
            "matmul-128",
            "--trials",
            "64",
            "--db",
            db,
            "--quiet",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while True:
            rec = _records(db)
            if rec is not None and len(rec) >= 3:
                break
            assert p.poll() is None and time.time() < deadline, p.communicate()
            time.sleep(0.2)
        # while it runs, a second process cannot resume it
        r = cli("tune", "matmul-128", "--db", db, "--resume", "--quiet")
        _one_line_error(r, "is still running in another process")
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    summ = json.loads(out.strip().splitlines()[-1])
    assert summ["status"] == "stopped" and 3 <= summ["trials"] < 64
    rec = _records(db)
    # the candidate in flight was measured, not killed: no worker crash recorded
    assert not rec["error_class"].fillna("").str.endswith("crash").any(), rec[["trial", "error_class"]]
    # and once it has stopped it can be resumed
    r = cli("tune", "matmul-128", "--db", db, "--resume", "--trials", str(summ["trials"] + 2), "--quiet", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["trials"] == summ["trials"] + 2
