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

    tuned_key = (LAYER, 0, "no-rewrite")
    written = al_ansor.export_runs(from_store, ledger, commit="abc123", tuned={tuned_key})
    assert len(written) == 2 and not [p for p in os.listdir(ledger) if p.endswith(".tmp")]
    assert al_ansor.export_runs(from_store, ledger, commit="later") == []  # same sessions: not rewritten

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
