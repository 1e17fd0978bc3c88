"""Bad input: random specs (hypothesis), spec files of the wrong shape, corrupted stores, stores holding code.

Every case is either accepted and works, or rejected with one line (exit code 2 from the CLI), with nothing
lost. Cases already in tests/test_cli.py (bad JSON, unknown op/workload, bad target JSON, foreign file...) and
tests/test_rpc.py (malformed --runner, unreachable tracker) are not repeated here.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from workbench import RecordStore
from workbench.dtypes import DTYPES
from workbench.errors import WorkbenchError
from workbench.workloads import EPILOGUES, OPS, workload_from_spec

# ---------------------------------------------------------------- random specs

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
# Mostly plausible sizes, so that many specs get past the first bad value and the later checks are reached.
SIZE = st.integers(0, 9).flatmap(
    lambda c: (
        st.integers(1, 6)
        if c < 6
        # small and plausible
        else st.integers(-5, 0)
        if c == 6
        # zero / negative
        else st.one_of(
            st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**70]),  # huge: past int32 and int64
            st.integers(2**31, 2**70),
        )
        if c == 7
        else JUNK
    )
)  # wrong types


def _value(p):
    if p.kind == "layout":
        return st.one_of(st.sampled_from(["NHWC", "NCHW"]), st.sampled_from(["nhwc", "HWIO", ""]), JUNK)
    if p.kind == "bool":
        return st.one_of(st.booleans(), JUNK)
    if p.kind == "size_or_pair":
        return st.one_of(SIZE, st.lists(st.integers(-1, 4), min_size=1, max_size=3))
    return SIZE


def _rarely(draw, one_in):
    # Hypothesis favours small integers (0 especially), so the rare branch is a value in the middle.
    return draw(st.integers(0, one_in - 1)) == one_in // 2


@st.composite
def specs(draw):
    if _rarely(draw, 30):
        return draw(JUNK)  # not even an object
    c = draw(st.integers(0, 9))
    op = (
        draw(st.sampled_from(sorted(OPS)))
        if c < 8
        else draw(st.sampled_from(["fft", "", "Conv2d"]))
        if c == 8
        else draw(JUNK)
    )
    params = {}
    for p in OPS[op].params if isinstance(op, str) and op in OPS else []:
        if _rarely(draw, 8):
            continue  # missing (fine when optional)
        params[p.name] = draw(_value(p))
    if _rarely(draw, 15):
        params[draw(st.sampled_from(["size", "kernel_size", "M"]))] = 4  # unknown parameter
    spec = {
        "name": draw(st.one_of(st.just(""), JUNK)) if _rarely(draw, 20) else "w",
        "op": op,
        "params": draw(JUNK) if _rarely(draw, 20) else params,
    }
    if draw(st.booleans()):
        spec["epilogue"] = (
            draw(JUNK) if _rarely(draw, 6) else draw(st.lists(st.sampled_from([*EPILOGUES, "gelu"]), max_size=3))
        )
    if _rarely(draw, 10):
        spec["weight"] = draw(SIZE)
    if _rarely(draw, 4):
        spec["dtype"] = draw(st.one_of(st.sampled_from([*DTYPES, "float16", "INT8"]), JUNK))
        if _rarely(draw, 3):
            spec["requantize"] = draw(st.one_of(st.sampled_from(["per-tensor", "per-channel", "per-row"]), JUNK))
    if _rarely(draw, 20):
        spec["colour"] = "blue"  # unknown key
    return spec


def _accepted_or_one_line(spec):
    """The workload (built: PrimFunc and argument shapes) or None after a clean one-line rejection."""
    import tvm

    try:
        w = workload_from_spec(spec)
    except WorkbenchError as e:
        msg = str(e)
        assert msg and "\n" not in msg and len(msg) < 400, msg
        return None
    assert isinstance(w.prim_func, tvm.tirx.PrimFunc)
    assert all(isinstance(d, int) and d >= 1 for s in w.arg_shapes for d in s), w.arg_shapes
    assert w.flops >= 0
    return w


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_random_specs_are_accepted_and_build_or_rejected_in_one_line(spec):
    _accepted_or_one_line(spec)


@st.composite
def tiny_specs(draw):
    """Specs likely to be valid and cheap to tune: every size 1-4, kernels 1, no padding."""
    op = draw(st.sampled_from(sorted(OPS)))
    params = {}
    for p in OPS[op].params:
        if p.kind == "layout":
            params[p.name] = draw(st.sampled_from(["NHWC", "NCHW"]))
        elif p.kind == "bool":
            params[p.name] = draw(st.booleans())
        elif p.name in ("kernel", "stride", "dilation", "groups"):
            params[p.name] = 1
        elif p.name == "padding":
            params[p.name] = 0
        elif p.required:
            params[p.name] = draw(st.integers(1, 4))
    return {"name": "tiny", "op": op, "params": params}


@pytest.mark.slow
@settings(max_examples=2, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_specs())
def test_random_tiny_accepted_specs_tune(spec):
    from workbench import TuningSession

    w = _accepted_or_one_line(spec)
    assume(w is not None)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        s = TuningSession(
            w,
            target={"kind": "llvm", "num-cores": 1},
            trials=3,
            trials_per_round=3,
            strategy="no-rewrite",
            db=os.path.join(d, "t.db"),
            seed=0,
        )
        summ = s.run()
        assert summ["status"] == "finished" and summ["trials"] == 3, summ
        assert summ["verified"], s.records()[["error_class", "error_msg"]]


# ---------------------------------------------------------------- spec files and targets through the CLI


def cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=300)


def one_line_error(r, needle):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in lines[0], lines[0]


MM = {"name": "mm", "op": "matmul", "params": {"m": 8, "n": 8, "k": 8}}


@pytest.mark.parametrize(
    "content,needle",
    [
        ("[]", "lists no workloads"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({"name": "mm", "op": "matmul", "params": {"m": "64", "n": 8, "k": 8}}), "'m' must be an integer"),
        (json.dumps({"name": "mm", "op": "matmul", "params": {"m": -1, "n": 8, "k": 8}}), "'m'=-1 must be >= 1"),
        (json.dumps({"name": "mm", "op": "matmul", "params": {"m": 8, "n": 8}}), "needs parameter 'k'"),
        (json.dumps({"name": "mm", "op": "matmul", "params": [8, 8, 8]}), "'params' must be an object"),
        (json.dumps([MM, MM]), "appears twice"),
        (json.dumps({"name": "mm", "op": "matmul", "params": {"m": 2**40, "n": 2**40, "k": 2**40}}), "too large"),
        (
            json.dumps({"name": "mm", "op": "matmul", "params": {"m": 2**20, "n": 2**20, "k": 2**20}}),
            "GiB for its arguments",
        ),
        (json.dumps({"name": "mm", "op": [], "params": {}}), "unknown op []"),
        ("\x00\xff garbage", "not valid JSON"),
    ],
)
def test_spec_files_of_the_wrong_shape(tmp_path, content, needle):
    f = tmp_path / "spec.json"
    f.write_text(content, errors="surrogateescape") if isinstance(content, str) else f.write_bytes(content)
    one_line_error(cli("tune", "--spec", str(f), "--db", str(tmp_path / "r.db")), needle)
    db = tmp_path / "r.db"
    assert not db.exists() or RecordStore(str(db), readonly=True).sessions() == []  # no session was started


def test_pick_and_target_mistakes(tmp_path):
    f = tmp_path / "two.json"
    f.write_text(json.dumps([MM, dict(MM, name="mm2")]))
    db = str(tmp_path / "r.db")
    # a list without --workload is a network (tuned together); resuming one is not supported
    one_line_error(cli("tune", "--spec", str(f), "--db", db, "--resume"), "--resume works for one workload")
    one_line_error(cli("tune", "--spec", str(f), "--workload", "mm3", "--db", db), "is not in")
    one_line_error(
        cli(
            "tune", "--spec", str(f), "--workload", "mm", "--db", db, "--target", '{"kind": "llvm", "num-cores": "two"}'
        ),
        "invalid target",
    )
    one_line_error(
        cli("tune", "--spec", str(f), "--workload", "mm", "--db", db, "--target", "[1, 2]"),
        "must be 'host' or a JSON object",
    )
    one_line_error(
        cli("tune", "--spec", str(f), "--workload", "mm", "--db", db, "--cost-model", "lgbm"),
        "invalid choice: 'lgbm'",
    )
    assert not os.path.exists(db) or not RecordStore(db, readonly=True).sessions()


# ---------------------------------------------------------------- stores: corrupted, or holding code


def _store_with_records(path, trace="{}", features=None, n=3, spec=MM):
    s = RecordStore(str(path))
    name = spec["name"]
    sid = s.create_session(
        workload=name,
        spec=spec,
        target={"kind": "llvm"},
        preset="quick",
        preset_params={},
        seed=0,
        trials=8,
        strategies=["no-rewrite"],
        strategy_arg="no-rewrite",
        versions={},
    )
    s.add_event(sid, "session_started", 0.0, 0.0, {"workload": name})
    for i in range(1, n + 1):
        rid = s.add_record(
            {
                "session_id": sid,
                "workload": name,
                "trial": i,
                "round": 1,
                "strategy": "no-rewrite",
                "chosen_by": "controller",
                "trace": trace,
                "decisions": "[]",
                "mod_hash": f"{i:016x}",
                "run_secs": [1e-3],
                "latency_ms": float(i),
                "gflops": 1.0,
                "verified": True,
                "seed": 0,
                "proposed_at": 0.0,
                "measured_at": 0.0,
                "elapsed_s": float(i),
            },
            features,
        )
        s.add_event(
            sid, "candidate_measured", float(i), float(i), {"record": {"id": rid, "trial": i}, "new_best": False}
        )
    s.close()
    return sid


def test_a_network_task_is_named_as_such_not_as_an_unknown_op(tmp_path):
    """A network store's tasks (``workbench model``, networks.py) are listed by ``show``; ``best`` cannot rebuild one
    from its spec, and says why in one line."""
    task = {"name": "r18.fused_conv2d", "op": "relax-task", "params": {"task": "fused_conv2d", "args": [[1, 8]]}}
    db = tmp_path / "net.db"
    _store_with_records(db, spec=task)
    one_line_error(cli("best", str(db), "r18.fused_conv2d"), "'r18.fused_conv2d' is a task of a Relax model")
    r = cli("show", str(db))
    assert r.returncode == 0 and "r18.fused_conv2d" in r.stdout, r.stderr


def test_store_holding_code_never_runs_it(tmp_path):
    """A store is plain data: a trace column holding Python and a features blob holding a pickle stay data."""
    import pickle

    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    code = f"__import__('os').system('touch {marker}')"
    db = tmp_path / "evil.db"
    _store_with_records(db, trace=code)
    evil = pickle.dumps(Payload())
    # the length follows tmp_path's; one of four lengths is a whole number of float32s (a valid-looking row),
    # which numpy would read as numbers (still never unpickled): keep the length that must be refused
    evil += b"." * (len(evil) % 4 == 0)
    RecordStore(str(db)).conn.execute(
        "UPDATE records SET features=?, feature_rows=1, decisions=?, run_secs=?",
        (evil, code, json.dumps([code])),
    )
    store = RecordStore(str(db), readonly=True)
    df = store.records(with_trace=True)
    assert list(df["trace"]) == [code] * 3  # read back as text, nothing more
    # The pickle in the features column is refused as "not float32 rows", never unpickled.
    with pytest.raises(WorkbenchError, match="not float32 rows"):
        store.record(int(df["id"][0]))
    with pytest.raises(WorkbenchError, match="not float32 rows"):
        store.training_rows("mm")
    assert store.best("mm")["trace"] == code
    store.events(1)
    store.summary()
    from workbench.replay import ReplaySession

    rs = ReplaySession(store, speed=1e6)
    replayed = []
    rs.subscribe(replayed.append)
    rs.run()
    assert [e.kind for e in replayed].count("candidate_measured") == 3
    assert list(rs.records(with_trace=True)["trace"]) == [code] * 3
    assert cli("show", str(db)).returncode == 0
    # The trace is not TVM JSON: a one-line refusal, not an evaluation.
    one_line_error(cli("best", str(db), "mm", "--tir"), "unreadable trace")
    assert not marker.exists()


def test_no_code_path_unpickles_or_evaluates():
    """Records are plain data because nothing in the engine or the dashboard can turn data into code."""
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    banned = re.compile(
        r"\b(pickle\.loads?|cloudpickle\.loads?|marshal\.loads?|eval|exec|shelve\.open|"
        r"np\.load|numpy\.load)\s*\(|allow_pickle\s*=\s*True"
    )
    hits = []
    for pkg in ("workbench", "widgets"):
        for dirpath, _, files in os.walk(os.path.join(root, pkg)):
            for f in files:
                if f.endswith(".py"):
                    text = open(os.path.join(dirpath, f)).read()
                    hits += [f"{pkg}/{f}: {m.group(0)}" for m in banned.finditer(text)]
    assert hits == []


def test_corrupted_store_gives_one_line_and_is_not_made_worse(tmp_path):
    good = tmp_path / "good.db"
    _store_with_records(good, n=40)
    size = os.path.getsize(good)
    cases = {}
    truncated = tmp_path / "truncated.db"
    shutil.copy(good, truncated)
    with open(truncated, "r+b") as f:
        f.truncate(size // 2)
    cases[truncated] = "records store"
    scribbled = tmp_path / "scribbled.db"
    shutil.copy(good, scribbled)
    with open(scribbled, "r+b") as f:  # keep the header, overwrite every page after the first
        f.seek(4096)
        f.write(np.random.default_rng(0).integers(0, 256, size - 4096, dtype=np.uint8).tobytes())
    cases[scribbled] = "records store"
    for path, needle in cases.items():
        before = path.read_bytes()
        one_line_error(cli("show", str(path)), needle)
        one_line_error(cli("tune", "matmul-128", "--db", str(path), "--resume"), needle)
        assert path.read_bytes() == before, path  # a failed command did not write to it
    # The intact store is still whole.
    assert len(RecordStore(str(good), readonly=True).records()) == 40
