"""benchmarks/al_ansor.py's ledger: finished runs kept as small JSON files, so that a run of many sessions can go
on over several machines (whose benchmark stores are lost) and be re-measured from the ledger alone.

Two real 8-trial sessions of a small matmul, then the ledger's round trip and a re-measurement of its traces.
"""

import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import al_ansor  # noqa: E402

LAYER = "matmul-128"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from workbench import tvm_env

    db = str(tmp_path_factory.mktemp("ledger") / "al.db")
    target = tvm_env.host_target_dict(1)
    for method in ("no-rewrite", "pre-transformed"):
        al_ansor.tune(LAYER, method, 8, 0, db, al_ansor.FIXED, 4, target)
    return db, target


def test_a_ledger_holds_what_the_store_holds_and_replaces_it(tuned, tmp_path):
    db, _ = tuned
    ledger = str(tmp_path / "ledger")
    from_store = al_ansor.collect(db)
    assert set(from_store) == {(LAYER, 0, "no-rewrite"), (LAYER, 0, "pre-transformed")}
    for run in from_store.values():
        assert run["source"] == "store" and run["finished"] and run["trials"] == 8
        assert run["best"]["8"]["trace"] and run["best"]["8"]["latency_ms"] == min(c for c in run["curve"] if c)
        assert run["seconds_at"] == {"8": round(run["seconds"], 1)} and 0 <= run["noise_waited_s"] <= run["seconds"]

    tuned_key = (LAYER, 0, "no-rewrite")
    written = al_ansor.export_runs(from_store, ledger, commit="abc123", tuned={tuned_key})
    assert len(written) == 2 and not [p for p in os.listdir(ledger) if p.endswith(".tmp")]
    # the same runs again (commits from the ledger, as --export-only reads them): nothing rewritten
    assert al_ansor.export_runs(al_ansor.collect(db, ledger), ledger, commit="later") == []

    from_ledger = al_ansor.collect(None, ledger)
    assert set(from_ledger) == set(from_store)
    for key, run in from_ledger.items():
        assert run["source"] == "ledger"
        assert run["commit"] == ("abc123" if key == tuned_key else None)
        strip = {"source", "commit"}
        assert {k: v for k, v in run.items() if k not in strip} == json.loads(
            json.dumps({k: v for k, v in from_store[key].items() if k not in strip})
        )
    # the store wins over the ledger for the runs it holds, and keeps the ledger's commit for the same session
    both = al_ansor.collect(db, ledger)
    assert all(r["source"] == "store" for r in both.values()) and both[tuned_key]["commit"] == "abc123"


def test_a_run_in_progress_is_not_written_to_the_ledger(tuned, tmp_path):
    db, _ = tuned
    runs = al_ansor.collect(db)
    key = (LAYER, 0, "no-rewrite")
    runs[key] = {**runs[key], "finished": False}
    written = al_ansor.export_runs(runs, str(tmp_path / "ledger"))
    assert [os.path.basename(p) for p in written] == [f"{LAYER}__seed0__pre-transformed.json"]


def test_the_ledgers_best_programs_rebuild_and_time(tuned, tmp_path):
    db, target = tuned
    ledger = str(tmp_path / "ledger")
    al_ansor.export_runs(al_ansor.collect(db), ledger)
    runs = al_ansor.collect(None, ledger)
    entries = [((m, r["best"]["8"]["mod_hash"]), LAYER, r["best"]["8"]) for (_, _, m), r in runs.items()]
    timed = al_ansor.remeasure(entries, 2, target)
    assert len(timed) == 2
    for t in timed.values():
        assert t["n"] == 2 and t["median_ms"] > 0


def test_the_self_check_times_each_layers_store_best_against_its_remeasured_figure(tuned, tmp_path):
    from workbench.store import RecordStore

    db, _ = tuned
    store = RecordStore(db, readonly=True)
    b = store.best(LAYER)
    store.close()
    timed = {(LAYER, b["mod_hash"]): {"median_ms": 0.5}, (LAYER, "another program"): {"median_ms": 0.4}}
    kernels, skipped = al_ansor.self_check_kernels(db, [LAYER, "resnet18.conv2"], timed)
    assert kernels == [{"db": db, "workload": LAYER, "table_ms": 0.5, "label": f"{LAYER} (record {b['id']})"}]
    assert skipped == {"resnet18.conv2": "no verified program in the store"}
    _, skipped = al_ansor.self_check_kernels(db, [LAYER], {(LAYER, "another program"): {"median_ms": 0.4}})
    assert skipped[LAYER] == f"the store's best (record {b['id']}) is not among the programs re-measured"
    assert al_ansor.self_check_kernels(str(tmp_path / "gone.db"), [LAYER], timed) == (
        [],
        {LAYER: "no records store on this machine (the runs come from the ledger)"},
    )
    rows = [
        dict(
            kernels[0],
            command=f"workbench best {db} {LAYER} --time --threads 1 --json",
            standalone_ms=0.51,
            spread=0.02,
            noisy=False,
            ratio=1.02,
            agrees=True,
        )
    ]
    md = "\n".join(al_ansor._self_check_md({"self_check": rows, "self_check_skipped": skipped}))
    assert "### Standalone self-check" in md and "**1/1 within 5 % of the table**" in md
    assert f"| {LAYER} (record {b['id']}) | 0.5 | 0.51 (2 %) | 1.020 | yes |" in md
    assert f"Not checked: {LAYER}: the store's best (record {b['id']}) is not among" in md
    assert "No standalone self-check in this report" in al_ansor._self_check_md({})[-1]  # an older report


def test_a_run_goes_on_from_the_ledger_alone_and_reports_from_it(tmp_path):
    """The script end to end, as on a second machine: its store gone, --resume keeps the ledger's runs and
    --report-only re-measures them."""
    import subprocess

    ledger, results = tmp_path / "ledger", tmp_path / "results"
    base = [
        sys.executable,
        os.path.join(BENCH, "al_ansor.py"),
        "--set=design",
        f"--layers={LAYER}",
        "--trials=8",
        "--trials-per-round=4",
        f"--db={tmp_path / 'al.db'}",
        f"--ledger={ledger}",
        f"--results={results}",
        "--threads=1",
        "--methods=no-rewrite",
        "--force",  # the suite may share the machine: the result is then marked invalid, which is not judged here
    ]

    env = dict(os.environ, WORKBENCH_RECORD_DRIFT_WAIT_S="0")  # a smoke run: a slow host is recorded at once

    def run(*more):
        p = subprocess.run(base + list(more), capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 0, p.stderr
        return p.stderr

    err = run("--tune-only", "--resume")
    assert f"{LAYER} seed 0 no-rewrite (new)" in err
    os.remove(tmp_path / "al.db")
    err = run("--tune-only", "--resume")
    assert f"{LAYER} seed 0 no-rewrite: kept from {ledger}" in err and "(new)" not in err
    run("--report-only", "--repeats=2")
    res = json.loads((results / "al_ansor_design.json").read_text())
    assert res["latency_ms"][f"{LAYER}|0|no-rewrite|8"] > 0
    assert res["tuned_at_commit"][f"{LAYER}|0|no-rewrite"] == al_ansor.git_commit()  # (no commit made meanwhile)
    assert "al_ansor.md" in os.listdir(results)
    # the store is gone: nothing to time standalone, and the page says why
    assert res["self_check"] == [] and "no records store on this machine" in res["self_check_skipped"][LAYER]
    assert f"Not checked: {LAYER}: no records store" in (results / "al_ansor.md").read_text()


def test_stop_by_is_the_next_time_the_clock_reads_it():
    import time

    now = time.mktime((2026, 12, 4, 15, 30, 20, 0, 0, -1))
    assert al_ansor.stop_time("17:25", now) == time.mktime((2026, 12, 4, 17, 25, 0, 0, 0, -1))
    assert al_ansor.stop_time("15:30", now) == time.mktime((2026, 12, 5, 15, 30, 0, 0, 0, -1))  # just past
    assert al_ansor.stop_time("01:00", now) == time.mktime((2026, 12, 5, 1, 0, 0, 0, 0, -1))
    for bad in ("25:00", "12:60", "noon", "12"):
        with pytest.raises(ValueError):
            al_ansor.stop_time(bad, now)


def test_a_ledger_of_another_machines_runs_is_refused(tuned, tmp_path):
    """Runs searched on another CPU (or with another thread count) are not compared with runs tuned here: the
    script stops with one line instead of keeping them or overwriting them."""
    import subprocess

    db, target = tuned
    ledger = tmp_path / "ledger"
    runs = al_ansor.collect(db)
    key = (LAYER, 0, "no-rewrite")
    elsewhere = {**target, "mcpu": "some-other-cpu"}
    runs[key] = {**runs[key], "target": elsewhere}
    al_ansor.export_runs(runs, str(ledger))
    assert al_ansor.foreign_runs(al_ansor.collect(None, str(ledger)), target) == [key]
    assert al_ansor.foreign_runs(al_ansor.collect(None, str(ledger)), elsewhere) == [(LAYER, 0, "pre-transformed")]
    before = sorted((p.name, p.read_text()) for p in ledger.iterdir())

    common = [sys.executable, os.path.join(BENCH, "al_ansor.py"), "--set=design", f"--layers={LAYER}"]
    common += [f"--ledger={ledger}", f"--results={tmp_path / 'results'}", "--methods=no-rewrite", "--force"]
    for more in (
        [f"--db={tmp_path / 'here.db'}", "--trials=8", "--threads=1", "--tune-only", "--resume"],
        [f"--db={tmp_path / 'none.db'}", "--report-only", "--repeats=1"],
    ):
        p = subprocess.run(common + more, capture_output=True, text=True, timeout=300)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert "tuned for" in p.stderr.strip().splitlines()[-1] and "--ledger of its own" in p.stderr
    assert sorted((p.name, p.read_text()) for p in ledger.iterdir()) == before
