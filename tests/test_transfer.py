"""Transfer-tuning: decision repair (unit) and schedules moved onto new shapes (end to end)."""

import json
import math
import subprocess
import sys

import pytest

from workbench.transfer import repair_tiles

from .shapes import SMALL


@pytest.mark.parametrize(
    "extent,old",
    [
        (28, [2, 1, 1, 7]),
        (96, [2, 8, 1, 4]),
        (7, [1, 1, 2, 7]),
        (48, [1, 4, 2, 16]),
        (13, [1, 1, 1, 8]),
        (64, [4, 2, 2, 4]),
        (1024, [1, 1, 1, 128]),
    ],
)
def test_repair_keeps_a_perfect_tiling_close_to_the_old_one(extent, old):
    new = repair_tiles(extent, old)
    assert math.prod(new) == extent and len(new) == len(old)
    assert new[-1] <= 64
    if math.prod(old) == extent and old[-1] <= 64:
        assert new == old
    # inner factors move to the nearest divisor, not to the full extent as TVM's fallback does
    if extent % old[-1] == 0 and old[-1] <= 64:
        assert new[-1] == old[-1]


@pytest.fixture(scope="module")
def source_db(tmp_path_factory):
    """One tuned source store shared by the tests of this module (tuning is the slow part)."""
    tmp_path = tmp_path_factory.mktemp("source")
    spec = tmp_path / "src.json"
    spec.write_text(json.dumps(SMALL["conv_nhwc"]))
    db = str(tmp_path / "src.db")
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
            "--strategy",
            "no-rewrite,pre-transformed",
            "--db",
            db,
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return db


@pytest.mark.slow
def test_transfer_onto_new_shapes_with_repair(tmp_path, source_db):
    from workbench.store import RecordStore
    from workbench.transfer import transfer
    from workbench.workloads import workload_from_spec

    db = source_db
    p = dict(SMALL["conv_nhwc"]["params"])
    exact = workload_from_spec(dict(SMALL["conv_nhwc"], name="t-exact"))
    # 24 -> 48 channels and 10x10: tile factors tuned for 16/32 and 14 no longer divide.
    moved = workload_from_spec(
        {"name": "t-moved", "op": "conv2d", "params": dict(p, in_channels=24, out_channels=48, height=10, width=10)}
    )
    other = workload_from_spec(SMALL["depthwise"])  # another class: nothing applies, untuned fallback
    res = {r.workload: r for r in transfer(db, [exact, moved, other], db=str(tmp_path / "tt.db"))}
    for name in ("t-exact", "t-moved"):
        r = res[name]
        assert r.candidates == 2 and r.valid >= 1
        assert r.verified and r.best_latency_ms > 0 and r.naive_latency_ms > 0, r
    assert res["t-exact"].exact_match and not res["t-moved"].exact_match
    assert res["t-moved"].repaired
    assert res["t-dw"].candidates == 0 and res["t-dw"].best_latency_ms is None and res["t-dw"].speedup == 1.0
    recs = RecordStore(str(tmp_path / "tt.db"), readonly=True).records()
    assert set(recs["workload"]) == {"t-exact", "t-moved"} and (recs["chosen_by"] == "transfer").all()


@pytest.mark.slow
def test_transfer_cli_json(tmp_path, source_db):
    db = source_db
    tgt = tmp_path / "t.json"
    tgt.write_text(
        json.dumps(
            {
                "name": "t-big",
                "op": "conv2d",
                "params": dict(SMALL["conv_nhwc"]["params"], height=28, width=28, out_channels=64),
            }
        )
    )
    r = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "transfer", "--from", db, "--spec", str(tgt), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for k in ("workload", "candidates", "best_latency_ms", "naive_latency_ms", "verified", "search_seconds", "source"):
        assert k in out
    assert out["workload"] == "t-big" and out["verified"] and out["source"] == "t-conv-nhwc"
    bad = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "transfer", "--from", str(tmp_path / "none.db"), "resnet18.conv2"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_transfer_cli_network_spec_totals(tmp_path, source_db):
    """A --spec with several weighted targets: one JSON line per workload, then the network total."""
    p = dict(SMALL["conv_nhwc"]["params"])
    tgt = tmp_path / "net.json"
    tgt.write_text(
        json.dumps(
            {
                "workloads": [
                    {
                        "name": "n-moved",
                        "op": "conv2d",
                        "weight": 2,
                        "params": dict(p, in_channels=24, out_channels=48, height=10, width=10),
                    },
                    dict(SMALL["depthwise"], weight=3),
                ]
            }
        )
    )  # no depthwise source: untuned fallback
    r = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "transfer", "--from", source_db, "--spec", str(tgt), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    per, total = lines[:-1], lines[-1]
    assert [x["workload"] for x in per] == ["n-moved", "t-dw"]
    for x in per + [total]:
        for k in (
            "workload",
            "candidates",
            "best_latency_ms",
            "naive_latency_ms",
            "verified",
            "search_seconds",
            "source",
        ):
            assert k in x
    moved, dw = per
    assert moved["source"] == "t-conv-nhwc" and moved["verified"] and moved["repaired"]
    assert dw["source"] is None and dw["best_latency_ms"] is None and dw["candidates"] == 0
    assert total["workloads"] == ["n-moved", "t-dw"] and total["source"] == source_db
    assert total["candidates"] == moved["candidates"] and total["transferred"] == 1 and total["fallbacks"] == ["t-dw"]
    # network latency = sum of weight x latency, the fallback counting with its untuned program
    assert total["best_latency_ms"] == pytest.approx(2 * moved["best_latency_ms"] + 3 * dw["naive_latency_ms"])
    assert total["naive_latency_ms"] == pytest.approx(2 * moved["naive_latency_ms"] + 3 * dw["naive_latency_ms"])
    assert total["verified"]
    bad = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "transfer", "--from", source_db, "no-such-net"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_the_source_bank_keeps_two_specs_of_one_name_apart(tmp_path):
    """Two spec files may name different shapes alike: each is a source of its own, with its own sessions' best."""
    from workbench.store import RecordStore
    from workbench.transfer import source_bank

    from .test_compare import make_session, rec

    store = RecordStore(str(tmp_path / "s.db"))
    for n, ms in ((64, 0.1), (128, 0.9), (128, 0.8)):
        spec = {"name": "mm", "op": "matmul", "params": {"m": n, "n": n, "k": n}}
        make_session(store, [rec("no-rewrite", ms, trace=f"{n}:{ms}")], workload="mm", spec=spec)
    store.close()
    bank = {s.workload.params["m"]: (s.latency_ms, s.trace_json) for s in source_bank(str(tmp_path / "s.db"))}
    assert bank == {64: (0.1, "64:0.1"), 128: (0.8, "128:0.8")}
