"""The benchmark helpers (benchmarks/_report.py, _protocol.py, _quiet.py): parsing, aggregation, the Markdown
report and the benchmark protocol.

Synthetic inputs, except for the protocol's quiet check beside real CPU hogs, the calibration probe and one
numpy re-measurement worker (a few seconds each); no benchmark is run. None of them judges a timing.
"""

import itertools
import json
import os
import re
import subprocess
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import _protocol  # noqa: E402
import _quiet  # noqa: E402
import _report  # noqa: E402

PEAK_OUT = """isa avx2-fma
lanes 8
threads 2
fma_gflops_1thread 101.5
fma_gflops_all 200.25
triad_gbs_1thread 20.0
triad_gbs_all 25.5
"""


def test_parse_peak_converts_numbers_and_requires_the_key_figures():
    p = _report.parse_peak(PEAK_OUT + "garbage line with words\n")
    assert p == {
        "isa": "avx2-fma",
        "lanes": 8,
        "threads": 2,
        "fma_gflops_1thread": 101.5,
        "fma_gflops_all": 200.25,
        "triad_gbs_1thread": 20.0,
        "triad_gbs_all": 25.5,
    }
    with pytest.raises(ValueError, match="triad_gbs_all"):
        _report.parse_peak("fma_gflops_1thread 1\nfma_gflops_all 2\n")


def test_summarize_geomean_and_time_to_reach():
    s = _report.summarize([3.0, 1.0, 2.0, 2.0])
    assert s["median"] == 2.0 and s["min"] == 1.0 and s["max"] == 3.0 and s["n"] == 4 and s["spread_pct"] == 100.0
    assert _report.geomean([1, 4, None]) == pytest.approx(2.0)
    assert _report.geomean([]) is None
    tl = [[1.0, None], [2.0, 5.0], [3.0, 4.0], [4.0, 3.0]]
    assert _report.time_to_reach(tl, 4.0) == 3.0
    assert _report.time_to_reach(tl, 2.0) is None
    assert _report.best_over_time(tl) == [(2.0, 5.0), (3.0, 4.0), (4.0, 3.0)]
    assert _report.arithmetic_intensity(800.0, [(10,), (10,)]) == 10.0


def _result():
    def run(best, tl):
        return {
            "measured": 4,
            "ok": 4,
            "failed": 0,
            "build_errors": 0,
            "run_errors": 0,
            "wall_seconds": 10.0,
            "best_latency_ms": best,
            "timeline": tl,
        }

    return {
        "mode": "quick",
        "command": "make bench",
        "date": "2026-01-01 00:00 UTC",
        "machine": "test",
        "target": "{}",
        "threads": 2,
        "versions": {"tvm": "x", "numpy": "y"},
        "budgets": [4],
        "per_round": 2,
        "repeats": 3,
        "names": ["A", "B"],
        "peak": _report.parse_peak(PEAK_OUT),
        "torch": {"torch": "t"},
        "workloads": [
            {"name": "A", "op": "matmul", "flops": 2e9, "arg_shapes": [(10,)], "intensity": 50.0},
            {"name": "B", "op": "conv2d", "flops": 1e9, "arg_shapes": [(10,)], "intensity": 5.0},
        ],
        "runs": {
            "4": {
                "A": {"workbench": run(1.0, [[1, 2.0], [2, 1.0]]), "ms-fastbuild": run(2.0, [[3, 4.0], [6, 2.0]])},
                "B": {
                    "workbench": run(1.0, [[1, 3.0], [2, 1.0]]),
                    "ms-fastbuild": run(4.0, [[9, 4.0]]),
                    "ms-stock": run(0.5, [[20, 0.5]]),
                },
            }
        },
        "remeasure": {
            "4": {
                "A": {"workbench": _report.summarize([1e-3]), "ms-fastbuild": _report.summarize([2e-3])},
                "B": {
                    "workbench": _report.summarize([1e-3]),
                    "ms-fastbuild": _report.summarize([4e-3]),
                    "ms-stock": _report.summarize([0.5e-3]),
                },
            }
        },
        "vendor": {
            "A": dict(_report.summarize([0.5e-3]), library="numpy/OpenBLAS"),
            "B": dict(_report.summarize([2e-3]), library="torch oneDNN nchw"),
        },
        "verification": {"4|A|workbench": {"verified": True}, "4|B|ms-stock": {"verified": False}},
    }


def test_derive_compares_at_equal_trials_and_reads_time_to_quality():
    res = _result()
    d = _report.derive(res)
    a, b = d["rows"]
    assert a["speedup_vs_ms-fastbuild"] == pytest.approx(2.0)
    assert (
        a["t_ms_ms-fastbuild"] == 6
        and a["t_wb_ms-fastbuild"] == 1
        and a["time_ratio_ms-fastbuild"] == pytest.approx(1 / 6)
    )
    assert a["wb_vs_vendor"] == pytest.approx(0.5)  # 2000 GFLOPS vs 4000
    assert b["speedup_vs_ms-stock"] == pytest.approx(0.5)
    assert b["t_wb_ms-stock"] is None and b["time_ratio_ms-stock"] is None  # never reached stock's best
    h = d["headline"]
    assert h["geomean_speedup_vs_ms-fastbuild@4"] == pytest.approx((2.0 * 4.0) ** 0.5)
    assert h["time_ratio_max_vs_ms-stock@4"] is None and h["time_target_reached_vs_ms-stock@4"] == 0
    assert h["min_wb_vs_vendor@4"] == pytest.approx(0.5)


def test_markdown_states_every_target_and_flags_wrong_kernels():
    res = _result()
    d = _report.derive(res)
    md = _report.markdown(res, d, analysis="Hand-written words.", plot_name="plot.html")
    assert md.count("**met**") + md.count("**not met**") == len(_report.targets(res, d)) == 5
    assert "not reached" in md and "wrong: 4|B|ms-stock" in md and "Hand-written words." in md
    assert "| A | 1.000 (0%) | 2.000 (0%) | – |" in md
    json.dumps(res)  # the result stays JSON-serialisable


def test_protocol_worker_round_trip_and_errors(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(
        "import sys\nsys.path.insert(0, %r)\nimport _protocol\n"
        "_protocol.serve({'add': lambda m: m['a'] + m['b'], 'boom': lambda m: 1 / 0})\n"
        % os.path.dirname(_protocol.__file__)
    )
    w = _protocol.Worker([sys.executable, str(script)])
    try:
        assert w.call("add", a=1, b=2) == 3
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            w.call("boom")
        assert w.call("add", a=2, b=2) == 4
    finally:
        w.close()


def test_one_library_is_set_up_and_timed_in_a_process_with_its_thread_count(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(
        "import os, sys\nsys.path.insert(0, %r)\nimport _protocol\n"
        "_protocol.serve({'setup': lambda m: {'n': m['n'], 'threads': os.environ['OMP_NUM_THREADS']},"
        " 'time': lambda m: {'samples': [0.001] * m['repeats'], 'min_ms': m['min_repeat_ms']}})\n"
        % os.path.dirname(_protocol.__file__)
    )
    info, timed = _quiet.set_up_and_time([sys.executable, str(script)], {"n": 7}, 2, 3, str(tmp_path))
    assert info == {"n": 7, "threads": "2"} and timed == {"samples": [0.001] * 3, "min_ms": 100}


def test_conv_spec_gives_torch_the_workloads_shapes():
    import performance
    from workbench.workloads import registry

    reg = registry()
    assert performance.conv_spec(reg.get("resnet18.conv5")) == {
        "name": "resnet18.conv5",
        "ci": 128,
        "h": 28,
        "w": 28,
        "co": 128,
        "k": 3,
        "stride": 1,
        "pad": 1,
        "groups": 1,
    }
    dw = performance.conv_spec(reg.get("mobilenet_v2.dw144_56_s1"))
    assert dw["groups"] == dw["ci"] == dw["co"] == 144
    assert performance.conv_spec(reg.get("GMM.2")) is None
    assert [reg.get(n).name for n in performance.WORKLOADS] == performance.WORKLOADS  # all registered
    # a workload the vendors would compute differently has no vendor figure rather than a wrong one
    assert performance.conv_spec(reg.get("DIL.0")) is None and not performance.plain(reg.get("DIL.0"))
    assert not performance.plain(reg.get("bert.ffn1")) and performance.plain(reg.get("GMM.2"))


def test_performance_resume_keeps_the_finished_runs_of_an_invocation_with_the_same_settings(tmp_path):
    import performance

    db = tmp_path / "wb.db"
    db.write_text("")
    trace = tmp_path / "best_trace.json"
    trace.write_text("{}")
    settings = {
        "mode": "quick",
        "budgets": [64],
        "per_round": 16,
        "target": "{}",
        "threads": 2,
        "ms_build_timeout": 300.0,
    }
    runs = {
        "64": {
            "GMM.2": {
                "workbench": {"db": str(db)},
                "ms-fastbuild": {"best_trace": str(trace), "best_latency_ms": 1.0},
                "ms-stock": {"best_trace": None, "best_latency_ms": None},  # finished, found nothing
            },
            "resnet18.conv5": {"workbench": {"db": str(tmp_path / "gone.db")}},  # its store is gone: tuned again
            "resnet18.conv2": {"workbench": {"db": str(db)}},  # not asked for this time
        }
    }
    partial = str(tmp_path / performance.PARTIAL)
    protocol = {"valid": True, "started": "2026-12-05 04:00:00", "git": {"commit": "abc"}}
    performance.save_partial(partial, dict(settings, runs=runs, protocol=protocol))
    now = dict(settings, names=["GMM.2", "resnet18.conv5"])
    kept = performance.kept_runs(partial, now)
    assert kept == {"64": {"GMM.2": runs["64"]["GMM.2"]}} and now["earlier_runs"] == [protocol]
    assert performance.kept_runs(str(tmp_path / "none.json"), dict(now)) == {}
    with pytest.raises(SystemExit, match="other settings \\(per_round, threads\\)"):
        performance.kept_runs(partial, dict(now, per_round=8, threads=1))
    with pytest.raises(SystemExit, match="other settings \\(ms_build_timeout\\)"):
        performance.kept_runs(partial, dict(now, ms_build_timeout=60.0))
    # an invocation forced on a busy machine: its runs go on a forced (invalid) page only
    performance.save_partial(partial, dict(settings, runs=runs, protocol=dict(protocol, valid=False)))
    with pytest.raises(SystemExit, match="not valid under the benchmark protocol"):
        performance.kept_runs(partial, dict(now))
    assert performance.kept_runs(partial, dict(now), force=True) == kept


def test_per_workload_keeps_the_headline_figures_in_the_json():
    res = _result()
    _report.per_workload(res, _report.derive(res))
    a, b = res["workloads"]
    assert a["workbench_ms"] == pytest.approx(1.0) and a["vendor_ms"] == pytest.approx(0.5)
    assert a["vendor"] == "numpy/OpenBLAS" and b["vendor"] == "torch oneDNN nchw"
    assert a["workbench_spread_pct"] == 0.0 and b["vendor_spread_pct"] == 0.0


# ---------------------------------------------------------------- the benchmark protocol (_quiet.py)


def _fake_load(cores, processes=()):
    def machine_load(seconds, exclude=None, top=3):
        return {"other_cores": cores, "processes": list(processes), "seconds": seconds}

    return machine_load


@pytest.fixture
def hogs():
    """Two busy processes beside the test: children of the test, not TVM popen workers, so others' load."""
    ps = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    time.sleep(0.3)
    try:
        yield ps
    finally:
        for p in ps:
            p.kill()
            p.wait()


# the one test that reads the machine's real load: its hogs would slow whatever ran beside it, so `make test` runs
# it alone (the others give the protocol a made-up load)
@pytest.mark.serial
def test_require_quiet_refuses_beside_cpu_hogs_with_one_line_and_status_3(hogs, capsys):
    with pytest.raises(SystemExit) as e:
        _quiet.require_quiet("tuning resnet18.conv2", force=False, seconds=0.5)
    assert e.value.code == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(
        "benchmark refused: the machine is not quiet before tuning resnet18.conv2: other processes use "
    )
    assert "--force" in err and any(f"pid {p.pid} " in err for p in hogs)
    cores = float(re.search(r"use ([0-9.]+) cores", err).group(1))
    assert cores > _quiet.noise.NoisePolicy().max_other_cores

    r = _quiet.require_quiet("tuning resnet18.conv2", force=True, seconds=0.5)
    assert r["quiet"] is False and r["phase"] == "tuning resnet18.conv2"
    assert r["other_cores"] > 0.25 and {"processes", "time"} <= set(r)

    p = _quiet.Protocol("test", 2, force=True, seconds=0.5, reference=None)
    p._probe_once = lambda: {"median_ms": 1.0}
    assert p.phase("start")["quiet"] is False
    # between phases too, a forced run takes one reading: it is invalid already, no wait could mend that
    later = p.phase("timing numpy")
    assert later["quiet"] is False and later["waited_s"] < 0.5 * p.wait_s
    s = p.summary()
    assert s["valid"] is False and s["forced"] is True and s["checks"][0]["phase"] == "start"
    assert "**INVALID**" in p.markdown()


def test_protocol_is_valid_on_a_quiet_machine_and_records_run_facts(monkeypatch):
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.01))
    probes = iter([1.0, 1.05, 1.1])  # phase "start" (its reading is the probe before), phase "tuning x", after
    monkeypatch.setattr(
        _quiet,
        "probe_reading",
        lambda threads: {"median_ms": next(probes), "spread": 0.02, "wait_fraction": 0.0, "threads": threads},
    )
    p = _quiet.Protocol("test", 2, force=False, seconds=0.1, reference=None)
    p.start()
    p.phase("tuning x")
    p.finish()
    s = p.summary()
    assert s["valid"] is True and [c["phase"] for c in s["checks"]] == ["start", "tuning x"]
    assert s["probe"]["before"]["median_ms"] == 1.0 and s["probe"]["drift"] == pytest.approx(0.1)
    assert next(probes, None) is None  # three readings timed: the start check's was not taken twice
    assert s["threads"] == 2 and s["command"] == " ".join(sys.argv) and s["wall_s"] >= 0
    assert re.fullmatch("[0-9a-f]{40}", s["git"]["commit"]) and isinstance(s["git"]["dirty"], bool)
    json.dumps(s)
    md = p.markdown()
    assert "quiet checks passed: 2/2" in md and "INVALID" not in md and "drift +10.0%" in md
    assert "not recorded" in _quiet.summary_markdown(None)  # a page from before the protocol says so


def test_protocol_entered_phase_by_phase_starts_with_the_first_and_checks_it_once(monkeypatch):
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.01))
    probes = iter([1.0, 1.05, 1.1])  # first phase (also the probe before), second phase, after
    monkeypatch.setattr(
        _quiet,
        "probe_reading",
        lambda threads: {"median_ms": next(probes), "spread": 0.02, "wait_fraction": 0.0, "threads": threads},
    )
    p = _quiet.Protocol("test", 2, force=False, seconds=0.1, reference=None)
    assert not p.has_started  # a run with nothing to do has checked nothing
    p.finish()
    assert p.probes == {}  # nor probed the host after
    assert p.enter("tuning x")["phase"] == "tuning x" and p.has_started
    p.enter("tuning y")
    p.finish()
    s = p.summary()
    assert [c["phase"] for c in s["checks"]] == ["tuning x", "tuning y"] and s["valid"] is True
    assert s["probe"]["before"]["median_ms"] == 1.0 and s["probe"]["after"]["median_ms"] == 1.1
    assert next(probes, None) is None


def test_protocol_run_that_started_on_a_slow_host_is_invalid_in_hindsight(monkeypatch, tmp_path):
    # a new machine (no reference) whose host is slow at the start: every check passes against the best known
    # then, and only the probe after the run shows how fast the host really is
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.0))
    probes = iter([0.74, 0.72, 0.50])  # phase "start" (its reading is the probe before), phase "tuning x", after
    monkeypatch.setattr(
        _quiet,
        "probe_reading",
        lambda threads: {"median_ms": next(probes), "spread": 0.02, "wait_fraction": 0.0, "threads": threads},
    )
    ref = str(tmp_path / "probe_reference.json")
    p = _quiet.Protocol("test", 2, seconds=0.01, reference=ref)
    p.start()
    assert p.phase("tuning x")["quiet"] is True
    p.finish()
    s = p.summary()
    assert s["valid"] is False and s["probe_best_ms"] == 0.50
    assert [c["phase"] for c in s["slow_in_hindsight"]] == ["start", "tuning x", "probe before"]
    assert "the host was slow for part of the run, seen in hindsight" in p.markdown()
    assert json.load(open(ref)) == {"2": 0.50}  # the next run checks against the host at its best


def test_a_failed_probe_leaves_the_hosts_speed_unknown_not_good(monkeypatch, tmp_path):
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.0))
    p = _quiet.Protocol("test", 2, seconds=0.01, reference=str(tmp_path / "ref.json"))
    p._probe_once = lambda: {"error": "probe crashed"}
    r = p.phase("start")
    assert r["quiet"] is True and r["host_ok"] is None and r["probe_error"] == "probe crashed"
    p._probe_once = lambda: {"median_ms": 0.5, "spread": 0.01}
    p.phase("tuning x")
    md = _quiet.summary_markdown(dict(p.summary(), valid=True))
    assert "the probe failed before 1 of 2 phases, whose host speed is unchecked" in md


def test_protocol_stops_between_phases_after_a_bounded_wait(monkeypatch, capsys):
    loads = itertools.chain([0.0], itertools.repeat(1.5))
    monkeypatch.setattr(
        _quiet.noise,
        "machine_load",
        lambda seconds, exclude=None, top=3: {
            "other_cores": next(loads),
            "seconds": seconds,
            "processes": [{"pid": 7, "name": "hog", "cores": 1.5}],
        },
    )
    p = _quiet.Protocol("test", 2, force=False, seconds=0.01, wait_s=0.05, reference=None)
    p._probe_once = lambda: {"median_ms": 1.0}
    p.phase("start")
    with pytest.raises(SystemExit) as e:
        p.phase("timing numpy")
    assert e.value.code == 3
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err]
    assert err.startswith("benchmark stopped: the machine is not quiet before timing numpy")
    assert "hog pid 7 1.50 cores" in err


def test_protocol_refuses_a_slow_host_and_remembers_the_machine_at_its_best(monkeypatch, capsys, tmp_path):
    # nothing local is busy, yet the probe is far slower than the fastest this machine has been
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.0))
    ref = str(tmp_path / "probe_reference.json")
    p = _quiet.Protocol("test", 2, seconds=0.01, reference=ref)
    p._probe_once = lambda: {"median_ms": 0.50}
    assert p.phase("start")["host_ok"]
    assert json.load(open(ref)) == {"2": 0.50}
    p2 = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_wait_s=0.0)
    p2._probe_once = lambda: {"median_ms": 0.80}
    with pytest.raises(SystemExit) as e:
        p2.phase("start")
    assert e.value.code == 3
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith("benchmark refused: the host is slower than at its best")
    assert "0.800 ms, +60% from 0.500 ms" in err
    forced = _quiet.Protocol("test", 2, force=True, seconds=0.01, reference=ref, host_wait_s=0.0)
    forced._probe_once = lambda: {"median_ms": 0.80}
    r = forced.phase("start")
    assert r["quiet"] is False and r["host_ok"] is False and forced.summary()["valid"] is False
    assert "the host was slow (probe +60% from its best)" in forced.markdown()
    # a host that recovers within the wait passes
    readings = iter([0.80, 0.52])
    ok = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_wait_s=60.0)
    ok._probe_once = lambda: {"median_ms": next(readings)}
    monkeypatch.setattr(_quiet.time, "sleep", lambda s: None)
    assert ok.phase("start")["host_ok"] is True


def test_protocol_records_a_slow_host_when_its_comparisons_are_interleaved(monkeypatch, capsys, tmp_path):
    # host_drift="record": a slow host is waited out for a bounded time, then the run goes on; the readings are on
    # the page and validity rests on the local quiet checks alone
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.0))
    monkeypatch.setattr(_quiet.time, "sleep", lambda s: None)
    ref = str(tmp_path / "probe_reference.json")
    json.dump({"2": 0.50}, open(ref, "w"))
    p = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_drift="record", host_wait_s=0.0)
    readings = iter([0.80, 0.55, 0.70])  # phase "start" (its reading is the probe before), "tuning x", after
    monkeypatch.setattr(
        _quiet,
        "probe_reading",
        lambda threads: {"median_ms": next(readings), "spread": 0.02, "wait_fraction": 0.0, "threads": threads},
    )
    p.start()
    r = p.phase("tuning x")
    p.finish()
    assert r["quiet"] is True and r["host_ok"] is True
    s = p.summary()
    assert s["valid"] is True and s["host_drift"] == "record" and s["checks"][0]["host_ok"] is False
    assert s["slow_in_hindsight"]  # still reported
    md = p.markdown()
    assert "INVALID" not in md and "0.550-0.800 ms before the phases" in md and "1 of 2 phases" in md
    assert "headline comparisons are timed side by side" in md
    assert capsys.readouterr().err == ""  # nothing refused
    # a script whose figures are not all side by side says which are
    scoped = dict(s, drift_scope="the kernels' table is side by side; the tuning times are not")
    md = _quiet.summary_markdown(scoped)
    assert "the tuning times are not" in md and "headline comparisons" not in md
    # local load still makes a recorded run invalid (forced) or refused
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(1.5))
    busy = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_drift="record", host_wait_s=0.0)
    busy._probe_once = lambda: {"median_ms": 0.5}
    with pytest.raises(SystemExit):
        busy.phase("start")
    with pytest.raises(ValueError):
        _quiet.Protocol("test", 2, reference=None, host_drift="ignore")


def test_an_unsteady_host_is_refused_even_when_drift_is_only_recorded(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.0))
    ref = str(tmp_path / "probe_reference.json")
    json.dump({"2": 0.50}, open(ref, "w"))
    p = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_drift="record", host_wait_s=0.0)
    p._probe_once = lambda: {"median_ms": 0.9, "spread": 1.18}
    with pytest.raises(SystemExit) as e:
        p.phase("start")
    assert e.value.code == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("benchmark refused: the host is unsteady before start") and "spread 118%" in err
    forced = _quiet.Protocol("test", 2, force=True, seconds=0.01, reference=ref, host_drift="record", host_wait_s=0)
    forced._probe_once = lambda: {"median_ms": 0.9, "spread": 1.18}
    assert forced.phase("start")["quiet"] is False and forced.summary()["valid"] is False
    steady = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_drift="record", host_wait_s=0.0)
    steady._probe_once = lambda: {"median_ms": 0.9, "spread": 0.05}  # slow but steady: recorded
    assert steady.phase("start")["quiet"] is True
    # a long wait is spent on an unsteady host only: a steady, slow one goes on after RECORD_DRIFT_WAIT_S
    clock = {"t": 0.0}
    monkeypatch.setattr(_quiet.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(_quiet.time, "sleep", lambda s: clock.__setitem__("t", clock["t"] + s))
    patient = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_drift="record", host_wait_s=600.0)
    readings = iter([{"median_ms": 0.9, "spread": 0.9}] * 3 + [{"median_ms": 0.9, "spread": 0.05}] * 100)
    patient._probe_once = lambda: next(readings)
    r = patient.phase("start")
    assert r["quiet"] is True and r["host_ok"] is False
    assert _quiet.RECORD_DRIFT_WAIT_S <= r["host_waited_s"] <= _quiet.RECORD_DRIFT_WAIT_S + 10
    unsteady = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_drift="record", host_wait_s=600)
    unsteady._probe_once = lambda: {"median_ms": 0.9, "spread": 0.9}
    with pytest.raises(SystemExit):
        unsteady.phase("start")  # the whole wait, then refused
    assert clock["t"] >= 600
    # forced: one reading, no wait, the run marked invalid
    forced = _quiet.Protocol("test", 2, force=True, seconds=0.01, reference=ref, host_drift="record", host_wait_s=600)
    forced._probe_once = lambda: {"median_ms": 0.9, "spread": 0.9}
    t = clock["t"]
    r = forced.phase("start")
    assert r["host_waited_s"] == 0 and clock["t"] == t and r["quiet"] is False and forced.summary()["valid"] is False


def test_one_slow_probe_window_does_not_make_a_host_unsteady(monkeypatch, tmp_path):
    # ten 30 ms windows, one of them slowed by a hypervisor tick: the median does not move, the run goes on
    samples = [0.450, 0.452, 0.449, 0.455, 0.451, 0.612, 0.450, 0.453, 0.448, 0.454]
    assert _quiet.steady_spread(samples) == pytest.approx((0.455 - 0.449) / 0.451, abs=1e-3)
    assert _quiet.steady_spread([0.4, 0.5, 0.6]) is None
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.0))
    ref = str(tmp_path / "probe_reference.json")
    json.dump({"2": 0.45}, open(ref, "w"))
    p = _quiet.Protocol("test", 2, seconds=0.01, reference=ref, host_drift="record", host_wait_s=0.0)
    p._probe_once = lambda: {"median_ms": 0.451, "spread": 0.36, "steady_spread": 0.013}
    r = p.phase("start")
    assert r["quiet"] is True and r["host_stable"] is True and r["probe_spread"] == 0.013
    # windows that disagree among themselves, not one outlier, still refuse
    wide = [0.45, 0.52, 0.61, 0.70, 0.48, 0.66, 0.55, 0.73, 0.50, 0.59]
    assert _quiet.steady_spread(wide) > _quiet.MAX_PROBE_SPREAD


def test_quiesce_returns_once_quiet_and_gives_up_when_bounded(monkeypatch):
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(0.0))
    r = _quiet.quiesce(seconds=1.0)
    assert r["quiet"] is True
    monkeypatch.setattr(_quiet.noise, "machine_load", _fake_load(2.0))
    t = time.monotonic()
    r = _quiet.quiesce(seconds=1.0, max_s=0.2)
    assert r["quiet"] is False and r["other_cores"] == 2.0 and time.monotonic() - t < 2


def test_check_peak_flags_a_peak_below_an_achieved_figure():
    assert _quiet.check_peak(200.0, 109.4) is None
    assert _quiet.check_peak(200.0, None) is None
    msg = _quiet.check_peak(100.0, 109.4, "GMM.2 workbench")
    assert "100.0 GFLOPS" in msg and "109.4" in msg and "GMM.2 workbench" in msg and "bug" in msg


def test_standalone_self_check_runs_the_users_command_per_kernel_and_judges_within_5_percent(monkeypatch, tmp_path):
    calls = []

    def fake_run(argv, capture_output, text, cwd, env):
        calls.append((argv, env))
        timed = {"w1": 1.03, "w2": 1.20}.get(argv[5])
        if timed is None:
            return subprocess.CompletedProcess(argv, 2, "", "workbench: no verified program of w3 in the store\n")
        out = {"timed_ms": timed, "spread": 0.02, "noisy": False}
        return subprocess.CompletedProcess(argv, 0, "log line\n" + json.dumps(out) + "\n", "")

    monkeypatch.setattr(_quiet, "quiesce", lambda *a, **k: {})
    monkeypatch.setattr(_quiet.subprocess, "run", fake_run)
    db = str(tmp_path / "wb.db")
    kernels = [{"db": db, "workload": w, "table_ms": 1.0} for w in ("w1", "w2", "w3")]
    kernels[1]["label"] = "w2 (full tuning)"  # a page that shows two kernels of one workload names them
    rows = _quiet.standalone_self_check(kernels, 2, str(tmp_path))
    argv, env = calls[0]
    assert argv[1:] == ["-m", "workbench.cli", "best", db, "w1", "--time", "--threads", "2", "--json"]
    assert env["TVM_NUM_THREADS"] == "2" and env["OMP_NUM_THREADS"] == "2"
    assert [r.get("agrees") for r in rows] == [True, False, None]
    assert rows[1]["ratio"] == pytest.approx(1.2) and "no verified program" in rows[2]["error"]
    md = _quiet.self_check_markdown(rows)
    assert "**1/3 within 5 % of the table**" in md and "`workbench best wb.db w1 --time --threads 2 --json`" in md
    assert (
        "| w2 (full tuning) | 1 | 1.2 (2 %) | 1.200 | **no** |" in md
        and "| w3 | 1 | failed: workbench: no verified" in md
    )


def test_transfer_tuning_describes_a_given_source_store_by_what_it_holds(tmp_path):
    import transfer_tuning

    from workbench.store import RecordStore
    from workbench.workloads import registry

    reg = registry()
    conv11, conv8 = reg.get("resnet18.conv11").spec(), reg.get("resnet18.conv8").spec()
    db = str(tmp_path / "source.db")
    store = RecordStore(db)
    sid = store.create_session(
        workload="resnet18-source",
        spec=[conv11, conv8],  # a network session: one spec per task
        target={"kind": "llvm"},
        preset="quick",
        preset_params={"name": "quick"},
        seed=0,
        trials=3,
        strategies=["no-rewrite"],
        strategy_arg="no-rewrite",
        versions={},
    )
    for i, (name, ok) in enumerate([("resnet18.conv11", True), ("resnet18.conv11", True), ("resnet18.conv8", False)]):
        rec = dict(session_id=sid, workload=name, trial=i + 1, round=1, strategy="no-rewrite", chosen_by="controller")
        rec.update(trace="{}", decisions="[]", mod_hash=str(i), latency_ms=1.0, gflops=1.0, verified=ok)
        store.add_record(
            dict(rec, error_class=None, is_best=False, seed=0, proposed_at=0, measured_at=0, elapsed_s=i), None
        )
    store.close()
    layers, measured = transfer_tuning.source_from_store(db)
    assert [w.name for w in layers] == ["resnet18.conv11"] and measured == 2  # conv8 has no verified program
    assert layers[0].class_key == reg.get("resnet18.conv11").class_key
    with pytest.raises(SystemExit, match="does not exist"):
        transfer_tuning.source_from_store(str(tmp_path / "none.db"))


def test_transfer_tuning_self_checks_each_tt_and_full_best_the_page_shows(monkeypatch):
    import transfer_tuning

    import workbench

    class Store:  # tt_none.db holds nothing for its layer: TT fell back to the untuned program
        def __init__(self, db, readonly):
            self.db = db

        def best(self, workload):
            return None if self.db == "tt_none.db" else {"workload": workload}

        def close(self):
            pass

    monkeypatch.setattr(workbench, "RecordStore", Store)
    got = {}
    monkeypatch.setattr(transfer_tuning._quiet, "standalone_self_check", lambda k, t, cwd: got.update(k=k, t=t))
    layers = [
        {"workload": "r50.a", "tt_db": "tt.db", "full_db": "full.db", "tt_ms": 1.0, "full_ms": 0.9},
        {"workload": "r50.b", "tt_db": "tt_none.db", "full_db": "full.db", "tt_ms": 5.0, "full_ms": 2.0},
    ]
    transfer_tuning.self_check([{"target": "resnet50", "layers": layers}], 2)
    assert got["t"] == 2
    assert [(k["db"], k["workload"], k["table_ms"], k["label"]) for k in got["k"]] == [
        ("tt.db", "r50.a", 1.0, "r50.a (TT)"),
        ("full.db", "r50.a", 0.9, "r50.a (full tuning)"),
        ("full.db", "r50.b", 2.0, "r50.b (full tuning)"),
    ]


def test_thread_env_sizes_every_pool():
    env = _quiet.thread_env(3, base={"PATH": "/bin"})
    assert env["TVM_NUM_THREADS"] == env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "3"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == os.path.dirname(BENCH) and env["PATH"] == "/bin"


def test_probe_reading_times_the_probe_in_a_fresh_process_with_the_threads_asked():
    r = _quiet.probe_reading(1)
    assert r["median_ms"] > 0 and r["threads"] == 1 and r["spread"] >= 0 and 0 <= r["wait_fraction"]
    assert r["env"] == {"TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    assert len(r["samples_ms"]) == 10


def test_timing_meter_loads_without_the_workbench_package():
    # as in the torch environment: neither TVM nor the workbench package can be imported there
    script = (
        "import sys; sys.modules['tvm'] = sys.modules['workbench'] = sys.modules['numpy'] = None\n"
        f"sys.path.insert(0, {BENCH!r})\n"
        "import _protocol\n"
        "with _protocol.timing_meter(1) as m:\n"
        "    sum(range(10000))\n"
        "import json; print(json.dumps(sorted(m.result)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert {"wall_s", "wait_fraction", "other_cores"} <= set(json.loads(out.stdout.strip().splitlines()[-1]))


# ---------------------------------------------------------------- performance.py under the protocol


class _FakeProtocol:
    def __init__(self, events):
        self.events = events

    def phase(self, name):
        self.events.append(("phase", name))
        return {"quiet": True}

    def probe(self, when):
        self.events.append(("probe", when))

    def enter(self, name):
        self.events.append(("enter", name))
        return {"quiet": True}


def test_performance_times_each_library_alone_one_process_after_another(monkeypatch, tmp_path):
    import performance

    events = []

    class FakeWorker:
        def __init__(self, argv, env=None, cwd=None):
            self.lib = "torch" if "_vendor_torch" in argv[1] else "tvm"
            assert env["TVM_NUM_THREADS"] == env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "2"
            assert argv[-1] == "2"
            events.append(("start", self.lib))

        def call(self, cmd, **kw):
            events.append((cmd,))
            if cmd == "setup":
                self.keys = [k["key"] for k in kw["kernels"]] + ["numpy:" + n for n in kw["numpy"]]
                return {k: {"verified": True} for k in self.keys}
            assert kw["repeats"] == 3
            return {k: {"samples": [3e-3, 1e-3, 2e-3], "wait_fraction": 0.0, "other_cores": 0.0} for k in self.keys}

        def close(self):
            events.append(("close",))

    monkeypatch.setattr(_protocol, "Worker", FakeWorker)
    monkeypatch.setattr(performance._quiet, "quiesce", lambda *a, **k: events.append(("quiesce",)))
    runs = {
        "4": {
            "GMM.2": {"workbench": {"best_trace": "t1"}, "ms-fastbuild": {"best_trace": "t2"}},
            "resnet18.conv5": {"workbench": {"best_trace": "t3"}, "ms-fastbuild": {"best_trace": None}},
        }
    }
    result = {"runs": runs, "names": ["GMM.2", "resnet18.conv5"], "remeasure": {}, "vendor": {}}
    performance.remeasure(
        result, str(tmp_path), {"num-cores": 2}, 2, 3, str(tmp_path / "no-torch"), _FakeProtocol(events)
    )
    one = [("quiesce",), None, ("start", "tvm"), ("setup",), ("time",), ("close",)]
    libs = ["workbench", "ms-fastbuild", "numpy/OpenBLAS"]
    expected = [("probe", "before timing")]
    for lib in libs:
        expected += [("phase", f"timing {lib}") if e is None else e for e in one]
    assert events == expected + [("probe", "after timing")]
    wb = result["remeasure"]["4"]["GMM.2"]["workbench"]
    assert wb["median"] == 2e-3 and wb["spread_pct"] == pytest.approx(100.0) and wb["wait_fraction"] == 0.0
    assert set(result["remeasure"]["4"]["resnet18.conv5"]) == {"workbench"}
    assert result["vendor"]["GMM.2"]["library"] == "numpy/OpenBLAS" and "skipped" in result["torch"]

    # several passes: every library once per pass, the order rotated, each kernel's samples pooled
    events.clear()
    result = {"runs": runs, "names": ["GMM.2", "resnet18.conv5"], "remeasure": {}, "vendor": {}}
    performance.remeasure(
        result, str(tmp_path), {"num-cores": 2}, 2, 3, str(tmp_path / "no-torch"), _FakeProtocol(events), passes=3
    )
    phases = [e[1] for e in events if e[0] == "phase"]
    assert phases == [
        f"timing {lib} (pass {p + 1}/3)"
        for p, order in enumerate([libs, libs[1:] + libs[:1], libs[2:] + libs[:2]])
        for lib in order
    ]
    assert len(result["samples"]["4|GMM.2|workbench"]) == 9 and result["timing_passes"] == 3
    assert result["remeasure"]["4"]["GMM.2"]["workbench"]["median"] == 2e-3


def test_performance_does_not_publish_a_peak_below_an_achieved_figure(monkeypatch, tmp_path):
    import performance

    res = _result()
    res["problems"] = []
    res["peak"]["fma_gflops_all"] = 3000.0  # the vendor reaches 4000 GFLOPS on A
    events = []
    monkeypatch.setattr(performance._quiet, "quiesce", lambda *a, **k: None)
    monkeypatch.setattr(performance, "run_peak", lambda out, threads: dict(res["peak"], fma_gflops_all=3500.0))
    performance.verify_peak(res, str(tmp_path), 2, _FakeProtocol(events))
    assert events == [("phase", "the peak microbenchmark, again")]
    assert res["peak"]["below_achieved"] and res["peak"]["fma_gflops_all"] == 3500.0
    assert len(res["problems"]) == 1 and "A numpy/OpenBLAS" in res["problems"][0]
    d = _report.derive(res)
    assert all(r["wb_peak_frac"] is None for r in d["rows"])
    md = _report.markdown(res, d, plot_name="plot.html")
    assert "## Problems" in md and "3500.0 GFLOPS" not in md.split("## Machine peak")[1] and "## Roofline" not in md

    res = _result()
    res["problems"] = []
    res["peak"]["fma_gflops_all"] = 3000.0
    monkeypatch.setattr(performance, "run_peak", lambda out, threads: dict(res["peak"], fma_gflops_all=5000.0))
    performance.verify_peak(res, str(tmp_path), 2, _FakeProtocol([]))
    assert res["problems"] == [] and not res["peak"].get("below_achieved") and res["peak"]["fma_gflops_all"] == 5000.0


def test_remeasure_worker_times_numpy_alone_with_medians_and_readings():
    from workbench import tvm_env

    w = _protocol.Worker([sys.executable, os.path.join(BENCH, "_remeasure.py"), "1"], env=_quiet.thread_env(1))
    try:
        info = w.call("setup", kernels=[], numpy=["GMM.2"], target=tvm_env.host_target_dict(1))
        assert info["numpy:GMM.2"]["verified"]
        out = w.call("time", repeats=3, min_repeat_ms=5)
    finally:
        w.close()
    r = out["numpy:GMM.2"]
    assert len(r["samples"]) == 3 and min(r["samples"]) > 0 and {"wait_fraction", "other_cores"} <= set(r)


# ---------------------------------------------------------------- offline cost-model evaluation (cost_model.py)


def _bench_cost_model():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_cost_model", os.path.join(BENCH, "cost_model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "args, error",
    [
        (["--validation", "--folds", "1"], "cost_model.py: --folds must be at least 2, got 1"),
        (["--holdout", "1"], "cost_model.py: --holdout must be a share in [0, 1), got 1.0"),
        (["--models", "nope"], "cost_model.py: unknown model 'nope'"),
        (["--validation", "--train-share", "0"], "cost_model.py: --train-share must be a share in (0, 1], got 0.0"),
        (["--train-share", "0.5"], "cost_model.py: --train-share is for --validation only"),
    ],
)
def test_cost_model_bad_arguments_give_one_line(args, error):
    out = subprocess.run(
        [sys.executable, os.path.join(BENCH, "cost_model.py"), "--db", "no-such.db", *args],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and error in out.stderr and "Traceback" not in out.stderr


def test_cost_model_metrics_on_known_rankings():
    import numpy as np

    cm = _bench_cost_model()
    lat = np.array([1.0, 2.0, 3.0, 4.0])
    perfect, reversed_ = np.array([4.0, 3.0, 2.0, 1.0]), np.array([1.0, 2.0, 3.0, 4.0])
    assert cm.pairwise_accuracy(perfect, lat) == 1.0 and cm.pairwise_accuracy(reversed_, lat) == 0.0
    assert cm.pairwise_accuracy(np.array([4.0, 1.0, 2.0, 3.0]), lat) == 0.5  # 3 of 6 pairs right
    assert cm.recall_at_k(perfect, lat, 2) == 1.0 and cm.recall_at_k(reversed_, lat, 2) == 0.0
    assert cm.top_k_score(reversed_, lat, 1) == 0.25 and cm.top_k_score(reversed_, lat, 4) == 1.0
    assert cm.top_k_score(np.array([1.0, 9.0, 0.0, 0.0]), lat, 1) == 0.5  # picks the 2 ms program
    rnd = cm.random_metrics(lat, np.random.default_rng(0), draws=400)
    assert abs(rnd["pairwise"] - 0.5) < 0.05 and abs(rnd["recall@1"] - 0.25) < 0.06


def test_cost_model_evaluation_from_stores_to_page(tmp_path):
    import numpy as np

    from workbench import RecordStore, cost_model

    cm = _bench_cost_model()
    rng = np.random.default_rng(0)
    db = str(tmp_path / "corpus.db")
    store = RecordStore(db)
    trial = 0
    for w, scale in (("wa", 1.0), ("wb", 50.0), ("wc", 0.02)):
        sid = store.create_session(
            workload=w,
            spec={},
            target={},
            preset="quick",
            preset_params={},
            seed=0,
            trials=60,
            strategies=["no-rewrite"],
            strategy_arg="no-rewrite",
            versions={},
        )
        for i in range(60):
            f = rng.uniform(0, 1, size=(int(rng.integers(1, 4)), cost_model.N_FEATURES)).astype(np.float32)
            lat = scale / float((0.1 + 3 * f[:, 0] + f[:, 1] ** 2).sum())
            rec = dict(
                session_id=sid,
                workload=w,
                trial=i,
                round=0,
                strategy="no-rewrite",
                chosen_by="controller",
                trace="",
                decisions="",
                mod_hash=f"{w}-{i}",
                latency_ms=lat,
                seed=0,
                proposed_at=0.0,
                measured_at=0.0,
                elapsed_s=0.0,
            )
            store.add_record(rec, f)
            if i < 5:  # re-measured: counts once, at its median
                store.add_record(dict(rec, latency_ms=lat * 3), f)
                store.add_record(dict(rec, latency_ms=lat), f)
            trial += 1
        store.add_record(dict(rec, mod_hash="failed", latency_ms=None, error_class="RunError"), None)
    store.close()
    corpus = cm.load_corpus([db])
    assert sorted(corpus) == ["wa", "wb", "wc"] and all(len(v) == 60 for v in corpus.values())
    preds: dict = {}
    res = cm.evaluate(corpus, ["pack-sum", "pairwise-rank"], seed=0, nthread=1, lowo_preds=preds)
    from workbench import pruning

    # the rules judge column 18 (the innermost vectorized extent, log2(x + 1)): 0-1 uniform -> 0 or 1 lane,
    # so "vector-width" (16 lanes) rejects every program with a vectorized main store, "unvectorized" the others
    res["pruning"] = cm.evaluate_pruning(corpus, pruning.Machine(lanes=16, cores=1), preds, ["pack-sum"])
    sets = res["pruning"]["sets"]
    assert set(sets) == {*pruning.RULES, "all"}
    assert all(v["pruned"] == 0.0 for v in sets["serial"].values())  # one core: the rule never fires
    for w, v in sets["unvectorized"].items():
        assert 0.0 <= v["pruned_of_top"] <= 1.0 and v["best_kept_over_best"] >= 1.0
    for name in ("pack-sum", "pairwise-rank"):
        for setting in ("lowo", "split"):
            assert cm._mean(res["models"][name][setting], "pairwise") > 0.75, (name, setting)
    assert abs(cm._mean({w: v["random_lowo"] for w, v in res["workloads"].items()}, "pairwise") - 0.5) < 0.05
    # choosing settings: 5-fold cross-validation inside the training 80 % (48 of 60), never on the page's 12 test
    # programs nor on lowo's workloads
    import numpy as np

    page = cm.splits(corpus, sorted(corpus), np.random.default_rng(0))
    folds = cm.splits(corpus, sorted(corpus), np.random.default_rng(0), folds=5)
    for w in corpus:
        (train, test), parts = page[w][0], folds[w]
        assert len(parts) == 5 and sorted(np.concatenate([t for _, t in parts])) == sorted(train)
        for fold_train, fold_test in parts:
            assert not set(fold_test) & set(fold_train) and not set(fold_test) & set(test)
            assert len(fold_train) + len(fold_test) == 48
    half = cm.splits(corpus, sorted(corpus), np.random.default_rng(0), folds=5, train_share=0.5)
    for w in corpus:  # the learning curve's folds: the first half of each fold's training programs, same tests
        for (fold_train, fold_test), (half_train, half_test) in zip(folds[w], half[w]):
            assert list(half_train) == list(fold_train[: len(half_train)]) and len(half_train) in (19, 20)
            assert list(half_test) == list(fold_test)
    with pytest.raises(ValueError, match="at least 2 folds"):
        cm.evaluate(corpus, ["pack-sum"], seed=0, nthread=1, validation=True, folds=1)
    val = cm.evaluate(corpus, ["pack-sum"], seed=0, nthread=1, holdout=0.2, validation=True)
    assert val["models"]["pack-sum"]["lowo"] == {} and val["folds"] == 5
    assert len(val["models"]["pack-sum"]["train_s"]) == 5  # one fit per fold
    assert all(v["n"] == 48 for v in val["models"]["pack-sum"]["split"].values())
    assert cm._mean(val["models"]["pack-sum"]["split"], "pairwise") > 0.75
    table = cm.validation_table(val)
    assert "| pack-sum |" in table and "holdout 0.2" in table and "5-fold" in table
    # how the corpus was measured comes from the protocol record corpus.py writes beside its store
    assert cm.corpus_protocol(db) is None
    record = {
        "valid": True,
        "host_drift": "record",
        "checks": [{"phase": "tuning wa", "quiet": True, "probe_ms": 0.41, "host_ok": True}],
        "git": {"commit": "0123456789abcdef"},
        "started": "2026-12-05 07:46:00",
        "wall_s": 1400.0,
        "set": "reduced",
        "trials": 64,
        "workloads": ["wa", "wb", "wc"],
    }
    with open(tmp_path / "corpus.protocol.json", "w") as f:
        json.dump(record, f)
    res.update(
        dbs=[db],
        corpus_protocols={db: cm.corpus_protocol(db), "other.db": None},
        command="python benchmarks/cost_model.py --db x",
        git={},
        date="today",
        wall_s=3.0,
        seed=0,
    )
    cm.write_report(res, str(tmp_path))
    md = open(tmp_path / "cost_model.md").read()
    assert f"How `{db}` was measured (`benchmarks/corpus.py --set reduced --trials 64`, 3 workloads)" in md
    assert "commit `0123456789ab`" in md and "relative to the best of its own workload" in md
    assert "How `other.db` was measured: no protocol record beside it" in md
    assert "| pairwise-rank | lowo |" in md and "| random | split |" in md and "| wb | 60 |" in md
    assert "### Rule-based pruning" in md and "| none | 0.000 | 0.000 | 1.000 |" in md and "| all |" in md
    assert json.load(open(tmp_path / "cost_model.json"))["models"]["pack-sum"]["lowo"]["wa"]["n"] == 60


def test_corpus_sets_are_registered_families_outside_the_evaluation_layers():
    import corpus

    from workbench.workloads import registry

    reduced, full = corpus.workload_names("reduced"), corpus.workload_names("full")
    assert reduced == [
        "C1D.0",
        "C2D.0",
        "C3D.0",
        "GMM.0",
        "GRP.0",
        "DIL.0",
        "DEP.0",
        "T2D.0",
        "CAP.0",
        "NRM.0",
        "SFM.0",
        "matmul-128",
        "CBR.0",
        "TBG.0",
    ]
    assert set(reduced) < set(full) and len(full) == 55
    reg = registry()
    assert [reg.get(n).name for n in full] == full
    assert not any(n.startswith(("resnet", "mobilenet", "vgg", "alexnet", "inception")) for n in full)


def test_policy_simulation_replays_the_fixed_sessions_rounds():
    import al_ansor_sim as sim

    # pre-transformed is best from its second round on; transform-stage never is
    rounds = {
        "no-rewrite": [1.0] * 16,
        "transform-stage": [3.0] * 16,
        "pre-transformed": [2.0] + [0.5] * 15,
    }
    best, used = sim.simulate(rounds, "optimistic-best", 1, 128, 8)
    assert best == 1.0 and used == {"no-rewrite": 14, "transform-stage": 1, "pre-transformed": 1}
    best, used = sim.simulate(rounds, "optimistic-best", 2, 128, 8)  # the second round shows pre-transformed
    assert best == 0.5 and used["pre-transformed"] > 10 and sum(used.values()) == 16
    best, used = sim.simulate(rounds, "uniform", 1, 64, 8, seed=3)
    assert sum(used.values()) == 8
    # an arm whose recorded rounds run out is marked exhausted, not replayed
    best, used = sim.simulate({"no-rewrite": [1.0] * 2, "pre-transformed": [2.0] * 20}, "optimistic-best", 1, 64, 8)
    assert used == {"no-rewrite": 2, "pre-transformed": 6} and best == 1.0
    # the candidate level-split: transform-stage, then no-rewrite, dropped once each has had 16 trials and is
    # behind at equal trials
    best, used = sim.simulate(rounds, "level-split", 1, 128, 8)
    assert best == 0.5 and used == {"no-rewrite": 2, "transform-stage": 2, "pre-transformed": 12}
    md = sim.table({("l", 0): rounds}, 128, 8)
    assert "| optimistic-best, warm-up 2 | 1.000 | 1/1 |" in md and "| optimistic-best | 2.000 | 0/1 |" in md


def test_policy_simulation_reads_a_ledgers_best_so_far_curves_as_rounds(tmp_path):
    import al_ansor_sim as sim

    def write(layer, method, curve):
        entry = {"layer": layer, "seed": 0, "method": method, "commit": None, "run": {"curve": curve}}
        (tmp_path / f"{layer}__seed0__{method}.json").write_text(json.dumps(entry))

    write("l", "no-rewrite", [None, 2.0, 2.0, 1.5, 1.5])
    write("l", "transform-stage", [3.0] * 5)
    write("l", "pre-transformed", [None, None, None, 1.0, 0.9])
    write("l", "adaptive", [1.0] * 5)  # not a fixed session: not replayed
    write("half", "no-rewrite", [1.0] * 5)  # a layer without all three fixed sessions: left out
    data = sim.ledger_rounds(str(tmp_path), 2)
    assert data == {
        ("l", 0): {"no-rewrite": [2.0, 1.5, 1.5], "transform-stage": [3.0] * 3, "pre-transformed": [None, 1.0, 0.9]}
    }


def test_search_variants_pairs_sessions_by_variant_and_compares_remeasured_bests(tmp_path):
    import search_variants as sv

    def sess(cost_model, deterministic, pruning=None, prior=False):
        pp = {"cost_model": cost_model, "deterministic": deterministic, "pruning": list(pruning or []), "prior": prior}
        return {"preset_params": pp, "strategy_arg": "no-rewrite"}

    assert sv.variant_of(sess("pack-sum", True)) == "pack-sum"
    assert sv.variant_of(sess("pack-sum", True, ["unvectorized", "vector-width", "serial"])) == "pack-sum + pruning"
    assert sv.variant_of(sess("pack-sum", False)) == "pack-sum on all cores"  # a store without the field: overlap on
    no_overlap = sess("pack-sum", False)
    no_overlap["preset_params"]["overlap"] = False
    assert sv.variant_of(no_overlap) == "pack-sum on all cores without overlap"
    no_overlap["preset_params"]["overlap"] = True
    assert sv.variant_of(no_overlap) == "pack-sum on all cores"
    assert sv.variant_of(sess("pack-sum", True, ["serial"])) is None  # not one of ours
    assert sv.variant_of(sess("pairwise-rank", True, prior=True)) == "pairwise-rank + prior"
    assert sv.variant_of(sess("pairwise-rank", True)) == "pairwise-rank"
    # the default --variants (every name joined by commas) parses back to every variant
    assert sv.parse_variants(",".join(sv.VARIANTS)) == list(sv.VARIANTS)
    with pytest.raises(ValueError, match="unknown variant 'fast'"):
        sv.parse_variants("pack-sum, fast")
    assert sv.variant_of(dict(sess("pairwise-rank", True), strategy_arg="auto")) is None

    def run(best, seconds, h):
        # best-so-far after each trial, with wall seconds; the best reached at the last trial
        curve = [(best * 2, seconds / 4), (best * 1.2, seconds / 2), (best, seconds)]
        return {
            "best_hash": h,
            "best_session_ms": best,
            "first_round_best_ms": best * 2,
            "seconds": seconds,
            "curve": curve,
            "pruning": None,
            "dropped": 0,
        }

    runs = {("w", 0, "pack-sum"): run(1.0, 100.0, "a"), ("w", 0, "pairwise-rank"): run(0.9, 120.0, "b")}
    timed = {("w", "a"): {"median_ms": 1.0, "spread": 0.02}, ("w", "b"): {"median_ms": 0.8, "spread": 0.03}}
    a = sv.analyse(runs, timed, ["w"], [0])
    assert a["geomean_vs_baseline"]["pairwise-rank"] == pytest.approx(1.25)  # re-measured, not in-session 1/0.9
    assert a["wall_vs_baseline"]["pairwise-rank"] == pytest.approx(1.2)
    row = a["per_workload"]["w|0"]
    # within 5 % of the best any variant reached (0.9 -> 0.945): pack-sum never, pairwise-rank at its last trial
    assert row["pack-sum"]["time_to_5pct_s"] is None and row["pairwise-rank"]["time_to_5pct_s"] == 120.0
    # the first rounds' bests (2x each session's final) against the best any variant reached (0.9)
    assert row["pairwise-rank"]["first_round_score"] == pytest.approx(0.5)
    assert row["pack-sum"]["first_round_score"] == pytest.approx(0.45)
    res = {
        "analysis": a,
        "protocol": None,
        "command": "python benchmarks/search_variants.py",
        "trials": 3,
        "seeds": [0],
        "threads": 2,
        "repeats": 11,
        "date": "today",
        "wall_seconds": 240.0,
    }
    sv.write_md(res, str(tmp_path))
    md = open(tmp_path / "search_variants.md").read()
    assert (
        "| pairwise-rank | 1.250 | 1.20 |" in md
        and "| w, seed 0 | pairwise-rank | 0.8000 (3 %) | 0.9000 | 0.50 |" in md
    )
    assert "## Reading this run" not in md  # words written for another run are not appended to this one
    assert "| lambdarank |" in md  # a results file that does not list its variants: every one, '-' where not run
    sv.write_md(dict(res, variants={"pack-sum": {}, "pairwise-rank": {}}), str(tmp_path))
    md = open(tmp_path / "search_variants.md").read()
    assert "| pairwise-rank | 1.250 | 1.20 |" in md and "| lambdarank |" not in md  # only the variants run
    words = tmp_path / "words.md"
    words.write_text("## Reading this run\n\nHand-written.\n")
    sv.write_md(res, str(tmp_path), str(words))
    assert open(tmp_path / "search_variants.md").read().endswith("## Reading this run\n\nHand-written.\n")


def test_networks_resume_keeps_only_networks_measured_with_the_same_settings(capsys):
    """The weights' strategy and the budgets are a network's own: a network tuned with others is kept (its section
    names them)."""
    import argparse

    import networks as nw

    args = argparse.Namespace(
        threads=2, repeats=10, passes=3, strategy="no-rewrite", trials_per_round=None, budgets=[200, 500]
    )
    now = nw.run_settings(args, {"mcpu": "znver4"})
    earlier = {
        "networks": {
            "resnet18": {"complete": True, "settings": dict(now)},
            "mobilenet_v2": {"complete": True, "settings": dict(now, threads=1, repeats=5)},
            "resnet18-bf16": {"complete": True, "settings": dict(now), "strategy": "packed", "budgets": [100]},
            "resnet18-int8": {"complete": False, "settings": dict(now)},  # interrupted: tuned again
            "vgg": {"complete": True, "settings": dict(now)},  # not asked for
            "old": {"complete": True},  # from before settings were recorded
        }
    }
    kept = nw.kept_networks(earlier, ["resnet18", "mobilenet_v2", "resnet18-int8", "resnet18-bf16", "old"], now)
    assert list(kept) == ["resnet18", "resnet18-bf16"]
    err = capsys.readouterr().err
    assert "mobilenet_v2: not kept from the earlier run: measured with other settings (repeats, threads)" in err


def test_networks_page_compares_every_checkpoint_with_pytorchs_best_mode(tmp_path):
    import networks as nw

    assert nw.parse_budgets("500,200,500") == [200, 500]
    with pytest.raises(SystemExit):
        nw.parse_budgets("0,10")
    with pytest.raises(SystemExit):
        nw.parse_networks("resnet18,vgg")
    ok, bad = nw.agreement([1.0, -3.0], [1.0, -3.002]), nw.agreement([1.0, 0.5], [1.0, 0.0])
    assert ok["matches"] and ok["scale"] == pytest.approx(3.002) and not bad["matches"]
    assert nw.split_name("resnet18-int8") == ("resnet18", "int8") and nw.split_name("mobilenet_v2")[1] == "float32"
    assert nw.split_name("resnet18-nhwc") == ("resnet18", "float32") and nw.model_kwargs("resnet18-nhwc") == {
        "layout": "NHWC"
    }
    assert nw.model_kwargs("mobilenet_v2") == {} and nw.model_kwargs("resnet18-int8") == {}
    assert nw.agreement([1.0, 0.5], [1.0, 0.495], "int8")["matches"]  # int8's tolerance is wider
    # an int8 output is judged against the PyTorch engine it is closest to (the engines round differently)
    refs = {"quantized-x86": [50.0, 1.0], "quantized-fbgemm": [50.0, 2.1]}
    got = nw.agreement_closest([50.0, 2.0], refs, "int8")
    assert got["matches"] and got["closest_mode"] == "quantized-fbgemm"
    assert got["error_by_mode"] == {"quantized-x86": pytest.approx(1.0), "quantized-fbgemm": pytest.approx(0.1)}
    assert not nw.agreement_closest([50.0, 9.0], refs, "int8")["matches"]
    assert nw._yes(got, "quantized-x86") == "yes (0.1, vs quantized-fbgemm)" and nw._yes(got) == "yes (0.1)"

    def timing(ms, **kw):
        return dict(latency_ms=ms, spread_pct=4.0, compile_s=3.0, matches=True, max_abs_error=1e-6, **kw)

    def cp(trials, ms):
        return timing(
            ms,
            trials=trials,
            tuning_s=60.0 * trials / 100,
            estimated_ms=ms * 0.9 if trials else None,
            speedup_vs_torch_best=2.0 / ms,
        )

    net = {
        "config": {"arch": "resnet18", "image": 224},
        "tasks": 12,
        "task_calls": 20,
        "gflop": 3.6,
        "budgets": [200, 500],
        "torch": {"eager-channels_last": timing(2.5), "jit-frozen": timing(2.0)},
        "torch_best": {"mode": "jit-frozen", "latency_ms": 2.0},
        "checkpoints": [cp(0, 8.0), cp(200, 2.5), cp(500, 1.6)],
        "tuning_wall_s": 300.0,
        "complete": True,
    }
    slow = dict(
        net,
        checkpoints=[dict(cp(0, 8.0), disturbed="shared the machine"), cp(200, 4.0), dict(cp(500, 3.0), matches=False)],
    )
    # the headline comes from the side-by-side passes, not from the checkpoint timed minutes apart
    net["final"] = {
        "passes": 3,
        "torch_mode": "jit-frozen",
        "torch": {"latency_ms": 2.1, "spread_pct": 6.0, "pass_medians_ms": [2.0, 2.1, 2.2], "samples": 30},
        "tvm": {"latency_ms": 2.0, "spread_pct": 5.0, "pass_medians_ms": [1.9, 2.0, 2.1], "samples": 30},
        "speedup_vs_torch_best": 1.05,
    }
    res = {
        "protocol": None,
        "command": "python benchmarks/networks.py",
        "date": "today",
        "machine": "test",
        "threads": 2,
        "image": 224,
        "seed": 0,
        "repeats": 10,
        "versions": {"tvm": "0.27"},
        "torch_version": "2.13",
        "networks_order": ["resnet18", "mobilenet_v2"],
        "networks": {"resnet18": net, "mobilenet_v2": dict(slow, config={"arch": "mobilenet_v2"})},
    }
    row = {
        "workload": "resnet18: TVM, 500 trials, pooled",
        "side": "tvm",
        "kind": "pooled",
        "table_ms": 2.0,
        "standalone_ms": 2.3,
        "spread": 0.04,
    }
    torch_row = dict(
        row, workload="resnet18: PyTorch jit-frozen, pooled", side="torch", standalone_ms=2.53, ratio=1.2, agrees=False
    )
    res["self_check"] = {"rows": [dict(row, ratio=1.15, agrees=False, command="networks.py --self-check"), torch_row]}
    res["self_check"]["protocol"] = None
    nw.write_report(res, str(tmp_path))
    md = open(tmp_path / "networks.md").read()
    assert "Each latency of the side-by-side tables (TVM's and PyTorch's) timed again alone" in md
    assert "PyTorch / TVM from the standalone re-times: resnet18 1.10x (pooled)." in md
    assert (
        "**0/2 within 5 % of the table**" in md
        and "| resnet18: TVM, 500 trials, pooled | 2 | 2.3 (4 %) | 1.150 | **no** |" in md
    )
    assert json.load(open(tmp_path / "networks.json"))["networks"]["resnet18"]["torch_best"]["mode"] == "jit-frozen"
    assert "| jit-frozen (best) | 2.000 | 4% | yes (1e-06) |" in md and "matches the reference (the first mode)" in md
    assert "| 0 (untuned) | 0.0 | – | 8.000 | 4% | 0.25x | yes (1e-06) | 3 |" in md
    assert "| 500 | 5.0 | 1.440 | 1.600 | 4% | 1.25x |" in md
    assert (
        "| TVM, 500 trials | 2.000 | 5% | 1.900, 2.000, 2.100 | 1.900 |" in md and "| jit-frozen | 2.100 | 6% |" in md
    )
    assert (
        md.count("**Goal") == 2
        and "met** — 1.05x after 500 trials (side by side, pooled; fastest process 1.05x; per pass 1.05x, 1.05x, 1.05x;"
        in md
    )
    # above the goal pooled, below it from the fastest processes: a slow process inflated the pooled reading
    net["final"]["tvm"]["pass_medians_ms"] = [2.05, 2.0, 2.1]
    net["final"]["torch"]["pass_medians_ms"] = [1.9, 2.1, 2.2]
    nw.write_report(res, str(tmp_path))
    md = open(tmp_path / "networks.md").read()
    assert "not met** — 1.05x after 500 trials (side by side, pooled; fastest process 0.95x;" in md
    assert "| 0 (untuned) | 0.0 | – | disturbed¹ | – | – |" in md and "¹ shared the machine" in md  # not a result
    assert "0.67x after 500 trials (at the checkpoint;" in md
    assert "not met** — 0.67x" in md and "**NO**" in md  # too slow, and a wrong output fails the goal too
    assert "Benchmark protocol: not recorded" in md


def test_networks_self_check_keeps_the_earlier_rows_of_a_network_whose_files_are_gone(tmp_path):
    """A network kept by --resume from another machine cannot be re-timed: its earlier rows stay, marked, when they
    checked the same table figures; without them the check refuses in one line instead of dropping the network."""
    import argparse

    import networks as nw

    fin = {
        "torch_mode": "jit-frozen",
        "torch": {"latency_ms": 2.1, "pass_medians_ms": [2.2, 2.0]},
        "tvm": {"latency_ms": 2.0, "pass_medians_ms": [1.9, 2.1]},
    }
    net = {"final": fin, "checkpoints": [{"trials": 500}]}
    result = {"out": str(tmp_path), "networks_order": ["resnet18"], "networks": {"resnet18": net}}
    rows = [
        {"workload": f"resnet18: {what}", "table_ms": ms, "standalone_ms": ms * 1.01, "agrees": True}
        for what, ms in (
            ("TVM, 500 trials, pooled", 2.0),
            ("TVM, 500 trials, fastest process", 1.9),
            ("PyTorch jit-frozen, pooled", 2.1),
            ("PyTorch jit-frozen, fastest process", 2.0),
        )
    ]
    result["self_check"] = {"rows": rows, "protocol": None}
    result["self_check"]["protocol"] = {"started": "day 1"}
    args = argparse.Namespace(threads=2, repeats=3, passes=2, command="networks.py --self-check")
    kept, kept_ratios = nw.self_check(result, args, protocol=None)
    assert [r["earlier"] for r in kept] == [True] * 4 and kept_ratios == []  # an alternating table: no ratio rows
    assert kept[0]["label"] == "resnet18: TVM, 500 trials, pooled (earlier self-check)"
    assert kept[0]["standalone_ms"] == pytest.approx(2.02) and kept[0]["checked_by"] == {"started": "day 1"}
    # checked again later: the rows keep the protocol of the check that timed them, not the later check's
    result["self_check"] = {"rows": kept, "protocol": {"started": "day 2"}}
    assert [r["checked_by"] for r in nw.self_check(result, args, protocol=None)[0]] == [{"started": "day 1"}] * 4
    # a check of the pooled figures alone (before the fastest process was a figure) did not check this table
    result["self_check"] = {"rows": [rows[0], rows[2]], "protocol": {"started": "day 0"}}
    with pytest.raises(SystemExit, match="--self-check: .*resnet18.* is missing"):
        nw.self_check(result, args, protocol=None)
    result["self_check"] = {"rows": kept, "protocol": {"started": "day 2"}}
    fin["tvm"]["latency_ms"] = 1.8  # the table changed since: the earlier check did not check it
    with pytest.raises(SystemExit, match="--self-check: .*resnet18.* is missing"):
        nw.self_check(result, args, protocol=None)


class _FakeNetworkWorkers:
    """Stands in for ``networks.open_worker``: each process of a side answers its rounds with the latencies given
    for it (ms, one per round), and every call is logged."""

    def __init__(self, per_process: dict):
        self.per_process = {side: iter(ps) for side, ps in per_process.items()}
        self.log, self.closed = [], 0

    def __call__(self, argv, setup, threads, cwd):
        side = "torch" if "mode" in setup else "tvm"
        rounds, owner = iter(next(self.per_process[side])), self
        self.log.append(("setup", side))

        class Worker:
            def call(self, cmd, repeats, min_repeat_ms):
                owner.log.append(("time", side))
                return {"samples": [next(rounds) / 1e3] * repeats, "wait_fraction": 0.01, "other_cores": 0.0}

            def close(self):
                owner.closed += 1

        return Worker(), {"output": [0.0]}


def test_networks_side_by_side_times_both_sides_round_by_round_in_fresh_processes(monkeypatch, tmp_path):
    """This host's speed for a whole network drifts within seconds and a process can run slow for life: the
    table's sides are timed a round at a time in the same pass (each alone, the order reversed each round and each
    pass), in fresh processes per pass; the self-check times it again the same way and checks each latency and
    each reading of PyTorch / TVM (pooled, fastest process, round by round)."""
    import argparse

    import networks as nw

    monkeypatch.setattr(nw._quiet, "quiesce", lambda **kw: {"quiet": True})
    # pass 1: both sides fast; pass 2: the host slower for both, TVM's second round slower still
    fake = _FakeNetworkWorkers({"torch": [[2.2, 2.2], [3.3, 3.3]], "tvm": [[2.0, 2.0], [3.0, 3.3]]})
    monkeypatch.setattr(nw._quiet, "open_worker", fake)
    args = argparse.Namespace(threads=2, repeats=4, passes=2, rounds=2, torch_python="python", command="networks.py")
    entry = {"torch_best": {"mode": "jit-frozen"}, "checkpoints": [{"trials": 500}]}
    phases = []
    protocol = _FakeProtocol(phases)
    fin = nw.final_comparison("resnet18", {"weights": "w", "input": "x"}, "db", {}, entry, args, protocol)
    assert [x for x in fake.log if x[0] == "time"] == [
        ("time", s) for s in ("torch", "tvm", "tvm", "torch", "tvm", "torch", "torch", "tvm")
    ]
    assert [x for x in fake.log if x[0] == "setup"] == [("setup", s) for s in ("torch", "tvm", "tvm", "torch")]
    assert fake.closed == 4 and len(phases) == 2 and "(pass 2/2)" in phases[1][1]
    assert fin["rounds"] == [{"torch": 2.2, "tvm": 2.0}] * 2 + [{"tvm": 3.0, "torch": 3.3}, {"torch": 3.3, "tvm": 3.3}]
    assert fin["tvm"]["pass_medians_ms"] == [2.0, 3.15] and fin["torch"]["pass_medians_ms"] == [2.2, 3.3]
    assert fin["tvm"]["samples"] == 2 * 2 * nw.ROUND_SAMPLES and fin["tvm"]["latency_ms"] == pytest.approx(2.5)
    assert fin["readings"] == pytest.approx({"pooled": 2.75 / 2.5, "fastest process": 1.1, "round by round": 1.1})

    # the page reads all three, and the goal needs each of them
    page = {"networks_order": ["resnet18"], "protocol": None, "command": "networks.py", "date": "today"}
    page.update(machine="test", threads=2, image=224, seed=0, repeats=4)
    net = dict(entry, final=fin, complete=True, dtype="float32", budgets=[500], config={}, tasks=1, task_calls=1)
    net.update(gflop=1.0, tuning_wall_s=60.0)
    timing = dict(latency_ms=2.2, spread_pct=3.0, matches=True, max_abs_error=0.0)
    net["torch"] = {"jit-frozen": timing}
    net["checkpoints"] = [dict(timing, trials=500, tuning_s=60.0, estimated_ms=2.0, speedup_vs_torch_best=1.1)]
    net["checkpoints"][0].update(compile_s=3.0)
    page["networks"] = {"resnet18": net}
    md = nw.markdown(page)
    assert "2 rounds per pass, each side alone in turn" in md
    assert "Round by round, PyTorch / TVM: median 1.10x over 4 rounds (from 1.00x to 1.10x)." in md
    assert "met** — 1.10x after 500 trials (side by side, pooled; fastest process 1.10x; round by round 1.10x;" in md
    net["final"] = dict(fin, rounds=[{"torch": 2.0, "tvm": 2.1}] * 3)
    assert "not met** — 1.10x after 500 trials (side by side, pooled; fastest process 1.10x; round by round 0.95x;" in (
        nw.markdown(page)
    )

    # the self-check: the same timing again, TVM's pass 1 process 4 % slower, PyTorch's fastest process as before
    net_dir = tmp_path / "resnet18"
    (net_dir / "db-500").mkdir(parents=True)
    for f in ("weights.safetensors", "input.safetensors"):
        (net_dir / f).write_text("")
    result = {"out": str(tmp_path), "target": {}, "networks_order": ["resnet18"], "networks": {"resnet18": net}}
    net["final"] = fin
    fake = _FakeNetworkWorkers({"torch": [[2.2, 2.2], [3.3, 3.3]], "tvm": [[2.08, 2.08], [3.0, 3.3]]})
    monkeypatch.setattr(nw._quiet, "open_worker", fake)
    rows, ratio_rows = nw.self_check(result, args, protocol)
    assert [x for x in fake.log if x[0] == "setup"] == [("setup", s) for s in ("tvm", "torch", "torch", "tvm")]
    rows = {r["workload"]: r for r in rows}
    fastest = rows["resnet18: TVM, 500 trials, fastest process"]
    assert fastest["table_ms"] == 2.0 and fastest["standalone_ms"] == 2.08 and fastest["agrees"]
    assert fastest["process_medians_ms"] == [2.08, 3.15] and fastest["processes"] == 2
    assert rows["resnet18: PyTorch jit-frozen, pooled"]["agrees"]
    ratios = {r["reading"]: r for r in ratio_rows}
    assert ratios["fastest process"]["standalone"] == pytest.approx(2.2 / 2.08) and ratios["fastest process"]["agrees"]
    assert ratios["round by round"]["table"] == pytest.approx(1.1)
    assert ratios["round by round"]["standalone"] == pytest.approx(2.2 / 2.08)  # rounds 1.0, 1.058, 1.058, 1.1
    page["self_check"] = {"rows": list(rows.values()), "ratio_rows": ratio_rows, "protocol": None}
    md = nw.markdown(page)
    assert "The side-by-side readings of PyTorch / TVM, timed again by the same command: **3/3 within 5 %" in md
    assert "| resnet18: PyTorch / TVM, round by round | 1.100x | 1.058x | 0.962 | yes |" in md

    # a later check of the same tables replaces this one on the page; this one stays there in short
    page["earlier_self_checks"] = [nw.archived_self_check(page["self_check"] | {"protocol": {"started": "day 1"}})]
    assert page["earlier_self_checks"][0]["latencies"] == [4, 4] and page["earlier_self_checks"][0]["readings"] == [
        3,
        3,
    ]
    assert "| day 1 | **no** | 4/4 | 3/3 | resnet18 1.08x / 1.06x / 1.06x |" in nw.markdown(page)

    # a table timed before the rounds existed is checked on the readings it has
    old = {k: v for k, v in fin.items() if k not in ("rounds", "rounds_per_pass")}
    net["final"] = old
    monkeypatch.setattr(
        nw._quiet, "open_worker", _FakeNetworkWorkers({"torch": [[2.2] * 2] * 2, "tvm": [[2.0] * 2] * 2})
    )
    _, ratio_rows = nw.self_check(result, args, protocol)
    assert [r["reading"] for r in ratio_rows] == ["pooled", "fastest process"]
    assert "each side alone in a fresh process, alternating" in nw.markdown(page)


def test_networks_retime_final_replaces_the_tables_it_can_time_and_drops_the_stale_self_check(monkeypatch, tmp_path):
    """``--retime-final`` times each finished network's side-by-side table again from its stores; a network whose
    files are gone keeps its table; the self-check of the replaced tables leaves the page."""
    import networks as nw

    out = tmp_path / "out"
    for name in ("resnet18", "mobilenet_v2"):
        (out / name / "db-500").mkdir(parents=True)
        for f in ("weights.safetensors", "input.safetensors"):
            (out / name / f).write_text("")
    old_final = {"passes": 3, "torch_mode": "jit-frozen", "speedup_vs_torch_best": 0.9}
    net = {"complete": True, "final": old_final, "checkpoints": [{"trials": 500}]}
    result = {
        "out": str(out),
        "target": {"kind": "llvm"},
        "threads": 2,
        "networks_order": ["resnet18", "mobilenet_v2", "resnet18-int8"],
        "networks": {"resnet18": dict(net), "mobilenet_v2": dict(net), "resnet18-int8": dict(net)},
        "self_check": {"rows": [], "protocol": None},
        "earlier_self_checks": [{"started": "day 1"}],
    }
    (tmp_path / "networks.json").write_text(json.dumps(result))
    timed = []
    monkeypatch.setattr(nw, "subprocess_ok", lambda python: True)
    monkeypatch.setattr(nw._quiet, "set_thread_env", lambda threads: None)
    monkeypatch.setattr(nw, "write_report", lambda res, d: (tmp_path / "networks.json").write_text(json.dumps(res)))

    class Protocol:
        def __init__(self, *a, **kw):
            pass

        start = finish = lambda self: None
        summary = lambda self: {"valid": True}  # noqa: E731

    monkeypatch.setattr(nw._quiet, "Protocol", Protocol)

    def fake_final(name, files, db, target, entry, args, protocol):
        timed.append((name, os.path.basename(db), target))
        return {"passes": args.passes, "torch_mode": "jit-frozen", "speedup_vs_torch_best": 1.2}

    monkeypatch.setattr(nw, "final_comparison", fake_final)
    nw.main(["--retime-final", "--results", str(tmp_path), "--threads", "2", "--passes", "5"])
    res = json.loads((tmp_path / "networks.json").read_text())
    assert timed == [("resnet18", "db-500", {"kind": "llvm"}), ("mobilenet_v2", "db-500", {"kind": "llvm"})]
    assert res["networks"]["resnet18"]["final"]["passes"] == 5
    assert res["networks"]["resnet18"]["final"]["timed_by"]["protocol"] == {"valid": True}
    assert res["networks"]["mobilenet_v2"]["final"]["timed_by"]["command"].endswith("--threads 2 --passes 5")
    assert res["networks"]["resnet18-int8"]["final"] == old_final  # its files are gone: its table stays
    assert "self_check" not in res and "earlier_self_checks" not in res
    with pytest.raises(SystemExit, match="--retime-final: the page was timed with 2 threads"):
        nw.main(["--retime-final", "--results", str(tmp_path), "--threads", "1"])
    with pytest.raises(SystemExit, match="--passes and --rounds must be at least 1"):
        nw.main(["--retime-final", "--results", str(tmp_path), "--rounds", "0"])


def test_every_al_ansor_method_is_recognised_from_its_stored_session():
    """The report finds each run's method from the session's strategy and preset parameters: a variant whose
    override the lookup ignored would pass for the default method and overwrite its row."""
    import dataclasses

    import al_ansor

    from workbench.presets import get

    for method, overrides in al_ansor.VARIANTS.items():
        params = dataclasses.asdict(get("quick", **overrides))
        assert al_ansor.method_of({"strategy_arg": "auto:a,b", "preset_params": params}) == method
    assert al_ansor.method_of({"strategy_arg": "no-rewrite", "preset_params": {}}) == "no-rewrite"


def _al_ansor_result(label=None):
    import al_ansor

    methods = ["no-rewrite", "transform-stage", "pre-transformed", "adaptive-paired"]
    lat = {"no-rewrite": 1.2, "transform-stage": 1.5, "pre-transformed": 1.0, "adaptive-paired": 0.95}
    key = "resnet18.conv2|0"
    res = {
        "set": "design",
        "label": label,
        "date": "2026-12-03 22:00",
        "trials": 128,
        "trials_per_round": 8,
        "seeds": [0],
        "layers": ["resnet18.conv2"],
        "methods": methods,
        "arms": al_ansor.FIXED,
        "repeats": 21,
        "target": {"kind": "llvm", "mcpu": "znver4", "num-cores": 2},
        "checkpoints": [128],
        "latency_ms": {f"{key}|{m}|128": v for m, v in lat.items()},
        "spread": {f"{key}|{m}|128": 0.05 for m in methods},
        "winner_strategy": {f"{key}|{m}|128": "pre-transformed" for m in methods},
        "allocation": {f"{key}|{m}": {"pre-transformed": 128} for m in methods},
        "tuning_seconds": {f"{key}|{m}": 100.0 for m in methods},
        "phase_seconds": {f"{key}|{m}": {"search": 50.0, "pair": 3.0} for m in methods},
        "pruned": {},
        "paired": {f"{key}|adaptive-paired": 3},
        "pairs": {
            f"{key}|adaptive-paired": [
                ["no-rewrite", "pre-transformed", 0.9],
                ["no-rewrite", "pre-transformed", 1.3],
                ["no-rewrite", "transform-stage", None],
            ]
        },
        "curves": {f"{key}|{m}": [2.0, lat[m]] for m in methods},
        "wall_seconds": 600.0,
        "command": "python benchmarks/al_ansor.py --set design",
        "protocol": None,
    }
    res["analysis"] = al_ansor.analyse(res)
    return res


def test_al_ansor_layer_sets_resolve_and_never_share_a_layer():
    import al_ansor
    from workbench.workloads import registry

    reg = registry()
    for name, layers in al_ansor.SETS.items():
        assert name in al_ansor.SET_TITLES
        assert all(reg.get(layer).op == "conv2d" for layer in layers), name
    for a, b in itertools.combinations(al_ansor.SETS.values(), 2):
        assert not set(a) & set(b)
    # the NCHW design set is the NHWC design layers' shapes in the other layout
    for layer in al_ansor.SETS["design-nchw"]:
        nchw, nhwc = reg.get(layer).spec()["params"], reg.get(layer.removesuffix("_nchw")).spec()["params"]
        assert nchw["layout"] == "NCHW" and nhwc["layout"] == "NHWC"
        assert {k: v for k, v in nchw.items() if k != "layout"} == {k: v for k, v in nhwc.items() if k != "layout"}


def test_al_ansor_page_has_a_section_per_report_and_counts_paired_trials(tmp_path):
    import al_ansor

    for res in (_al_ansor_result(), _al_ansor_result("znver4")):
        with open(tmp_path / f"{al_ansor._report_name(res)}.json", "w") as f:
            json.dump(res, f)
    (tmp_path / "al_ansor_design_conv7_old.json").write_text(json.dumps(_al_ansor_result()))  # not named as it says
    al_ansor._write_md(str(tmp_path))
    md = (tmp_path / "al_ansor.md").read_text()
    assert md.count("## Design layers") == 2 and "## Design layers (where the method is developed): znver4" in md
    assert "## Design layers in NCHW" not in md
    nchw = dict(_al_ansor_result(), set="design-nchw")
    (tmp_path / "al_ansor_design-nchw.json").write_text(json.dumps(nchw))
    al_ansor._write_md(str(tmp_path))
    md = (tmp_path / "al_ansor.md").read_text()
    assert md.count("## Design layers") == 3
    assert md.index("developed): znver4") < md.index("## Design layers in NCHW (where the fixed strategies leave room)")
    assert md.index("developed)\n") < md.index("developed): znver4")  # the set's main report first
    assert "| paired |" in md and "| resnet18.conv2 | adaptive-paired | 0 | 0 | 128 | 3 | pre-transformed |" in md
    assert "| resnet18.conv2 | adaptive-paired | no-rewrite -> pre-transformed | 2 | 1 | 1.100 | 0 |" in md
    assert "| no-rewrite -> transform-stage | 1 | 0 | - | 1 |" in md
    # 1.0 / 0.95 - 1 over the best fixed strategy (pre-transformed)
    assert "| adaptive-paired | +26.3 %; geo 26.3 %; 1/1 |" in md and "geo 5.3 %; 1/1 | 1.00x |" in md


def test_al_ansor_times_the_vendor_alone_in_torch_s_environment(monkeypatch, tmp_path):
    import al_ansor

    events = []
    layers = ["resnet18.conv5_nchw", "resnet18.conv8_nchw"]

    class FakeWorker:
        def __init__(self, argv, env=None, cwd=None):
            assert argv[0] == str(tmp_path / "python") and argv[1].endswith("_vendor_torch.py") and argv[2] == "2"
            assert env["OMP_NUM_THREADS"] == "2"
            events.append(("start",))

        def call(self, cmd, **kw):
            events.append((cmd,))
            if cmd == "setup":
                assert [c["name"] for c in kw["convs"]] == layers
                assert kw["convs"][0] == {
                    "name": "resnet18.conv5_nchw", "ci": 128, "h": 28, "w": 28, "co": 128, "k": 3, "stride": 1,
                    "pad": 1, "groups": 1,
                }  # fmt: skip
                return {"formats": {layers[0]: "nchw", layers[1]: "channels_last"}, "torch": "2.x", "threads": 2}
            assert kw["repeats"] == 3
            return {n: {"samples": [3e-3, 1e-3, 2e-3], "wait_fraction": 0.0} for n in layers}

        def close(self):
            events.append(("close",))

    monkeypatch.setattr(_protocol, "Worker", FakeWorker)
    monkeypatch.setattr(al_ansor._quiet, "quiesce", lambda *a, **k: events.append(("quiesce",)))
    protocol = _FakeProtocol(events)
    # no torch there: nothing started, the reason kept for the page
    got = al_ansor.time_vendor(layers, str(tmp_path / "python"), 2, 3, protocol)
    assert "cannot be imported" in got["skipped"] and events == []
    assert al_ansor.time_vendor(layers, "none", 2, 3, protocol) == {"skipped": "--vendor-python none"}
    (tmp_path / "python").write_text("")
    import performance

    monkeypatch.setattr(performance.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    got = al_ansor.time_vendor(layers, str(tmp_path / "python"), 2, 3, protocol)
    assert events == [
        ("quiesce",),
        ("enter", "timing the vendor library"),
        ("start",),
        ("setup",),
        ("time",),
        ("close",),
    ]
    assert got["layers"]["resnet18.conv8_nchw"] == {
        "median_ms": 2.0, "spread": 1.0, "samples": 3, "library": "torch oneDNN channels_last",
    }  # fmt: skip
    assert got["torch"] == "2.x" and got["threads"] == 2


def test_al_ansor_headroom_table_sets_the_best_fixed_strategy_against_the_vendor(tmp_path):
    import al_ansor

    res = _al_ansor_result()
    res["flops"] = {"resnet18.conv2": 231e6}
    res["peak"] = {"fma_gflops": 231.0, "source": "performance.json (2026-12-05 10:51 UTC)"}
    res["vendor"] = {
        "layers": {"resnet18.conv2": {"median_ms": 0.9, "spread": 0.02, "samples": 21, "library": "torch oneDNN nchw"}},
        "torch": "2.13.0+cpu",
        "threads": 2,
    }
    md = "\n".join(al_ansor._set_md(res))
    assert "### Headroom at 128 trials" in md and "torch oneDNN nchw (torch 2.13.0+cpu, 2 threads" in md
    # pre-transformed is the best fixed strategy (1.0 ms = 231 GFLOPS, the peak); the vendor 10 % faster
    assert "| resnet18.conv2 | pre-transformed | 1.000 | 231.0 (100 %) | 0.900 (2%) | 256.7 (111 %) | 1.11x |" in md
    res["vendor"], res["peak"] = {"skipped": "--vendor-python none"}, None
    md = "\n".join(al_ansor._set_md(res))
    assert "No vendor figure in this report: --vendor-python none." in md and "### Headroom" not in md
    del res["vendor"]  # a report from before the vendor was timed
    assert "vendor" not in "\n".join(al_ansor._set_md(res))


def test_throughput_page_shows_each_repeat_side_by_side_and_the_workbench_waits(tmp_path):
    import measure_throughput as mt

    def run(wall, ok=64, waited=None):
        return {"measured": 64, "ok": ok, "failed": 64 - ok, "wall_seconds": wall, "noise_waited_s": waited}

    runs = {
        "workbench": [run(90.0, waited=20.0), run(60.0, waited=0.0)],
        "ms-fastbuild": [run(100.0), run(120.0)],
    }
    for rs in runs.values():
        for r in rs:
            r.update(ok_per_second=r["ok"] / r["wall_seconds"], seconds_per_ok_trial=r["wall_seconds"] / r["ok"])
            r["best_latency_ms"] = 1.0
    rows = {k: mt._median_row(v) for k, v in runs.items()}
    rows["workbench"].update(verified=True, naive_latency_ms=100.0)
    result = {
        "command": "python benchmarks/measure_throughput.py",
        "workload": "resnet18.conv2",
        "trials": 64,
        "per_round": 16,
        "target": {"kind": "llvm"},
        "threads": 2,
        "repeats": 2,
        "versions": {"tvm": "0.27"},
        "date": "2026-12-03 18:40",
        "rows": rows,
        "speedup_vs": {"ms-fastbuild": 1.5},
        "protocol": None,
    }
    page = mt.write_page(result, str(tmp_path))
    assert page == (tmp_path / "throughput.md").read_text()
    assert "| 1 | 90.0 | 100.0 | 1.11x |" in page and "| 2 | 60.0 | 120.0 | 2.00x |" in page
    assert "20.0 s, 0.0 s in the repeats above" in page
    for r in rows["workbench"]["runs"]:
        r["noise_waited_s"] = None  # a run from before the waits were recorded says so
    assert "predates their recording" in mt.write_page(result, str(tmp_path))
    # a MetaSchedule run with no successful trial (e.g. a short build timeout): a dash, not a ZeroDivisionError
    failed = run(110.0, ok=0)
    failed.update(ok_per_second=0.0, seconds_per_ok_trial=110.0, best_latency_ms=None)
    result["rows"] = dict(rows, **{"ms-fastbuild": mt._median_row([runs["ms-fastbuild"][0], failed])})
    assert "| 2 | 60.0 | 110.0 | – |" in mt.write_page(result, str(tmp_path))
    # a run from before the self-check (temporary stores) says that its bests are not confirmed
    assert "No standalone self-check" in mt.write_page(result, str(tmp_path))


class _RecordingProtocol:
    """The benchmark protocol without the machine: records the phases it is told of."""

    def __init__(self, *args, **kwargs):
        self.phases = []

    def enter(self, what):
        self.phases.append(what)

    def finish(self):
        self.phases.append("finish")

    def summary(self):
        return None


def test_throughput_keeps_every_run_and_times_each_workbench_best_alone(tmp_path, monkeypatch):
    import _tuners
    import measure_throughput as mt

    def fake_workbench(workload, target, trials, per_round, db, **kw):
        open(db, "w").close()
        n = len([r for r in ran if r[0] == "workbench"])
        ran.append(("workbench", db))
        return {
            "measured": trials,
            "ok": trials,
            "failed": 0,
            "wall_seconds": 10.0 + n,
            "noise_waited_s": 0.0,
            "best_latency_ms": 1.0 + n / 10,
            "verified": True,
            "naive_latency_ms": 50.0,
        }

    def fake_ms(workload, target, trials, per_round, fast, build_timeout, work_dir, **kw):
        ran.append(("ms-fastbuild" if fast else "ms-stock", work_dir))
        return {"measured": trials, "ok": trials, "failed": 0, "wall_seconds": 20.0, "best_latency_ms": 1.1}

    checked = []

    def fake_self_check(kernels, threads, cwd):
        checked.extend(kernels)
        assert protocol.phases[-1] == "the standalone self-check"  # timed alone, in a phase of its own
        return [
            dict(
                k,
                standalone_ms=k["table_ms"] * 1.01,
                spread=0.01,
                noisy=False,
                ratio=1.01,
                agrees=True,
                command=f"workbench best {k['db']} {k['workload']} --time --threads {threads} --json",
            )
            for k in kernels
        ]

    ran = []
    protocol = _RecordingProtocol()
    monkeypatch.setattr(_tuners, "run_workbench", fake_workbench)
    monkeypatch.setattr(_tuners, "run_ms", fake_ms)
    monkeypatch.setattr(mt._quiet, "Protocol", lambda *a, **k: protocol)
    monkeypatch.setattr(mt._quiet, "standalone_self_check", fake_self_check)
    monkeypatch.setattr(mt._quiet, "quiesce", lambda *a, **k: {})
    monkeypatch.setattr(mt._quiet, "set_thread_env", lambda threads: None)
    out, results = tmp_path / "out", tmp_path / "results"
    argv = "measure_throughput.py --trials 8 --repeats 2 --threads 2".split()
    argv += ["--out", str(out), "--results", str(results)]
    monkeypatch.setattr(sys, "argv", argv)
    mt.main()
    assert [(t, os.path.basename(p)) for t, p in ran] == [
        ("workbench", "workbench-run1.db"),
        ("ms-fastbuild", "ms-fastbuild-run1"),
        ("ms-stock", "ms-stock-run1"),
        ("workbench", "workbench-run2.db"),
        ("ms-fastbuild", "ms-fastbuild-run2"),
        ("ms-stock", "ms-stock-run2"),
    ]
    assert all(os.path.dirname(p) == str(out) for _, p in ran)
    assert [(k["db"], k["table_ms"], k["label"]) for k in checked] == [
        (str(out / "workbench-run1.db"), 1.0, "workbench run 1"),
        (str(out / "workbench-run2.db"), 1.1, "workbench run 2"),
    ]
    assert protocol.phases[-1] == "finish"
    page = (results / "throughput.md").read_text()
    assert "## Standalone self-check" in page and "**2/2 within 5 % of the table**" in page
    assert "| workbench run 2 | 1.1 | 1.111 (1 %) | 1.010 | yes |" in page
    saved = json.loads((results / "throughput.json").read_text())
    assert len(saved["self_check"]) == 2 and saved["rows"]["workbench"]["runs"][0]["db"].endswith("workbench-run1.db")
    # the page is rewritten from the JSON alone, self-check included
    monkeypatch.setattr(sys, "argv", ["measure_throughput.py", "--report-only", "--results", str(results)])
    mt.main()
    assert (results / "throughput.md").read_text() == page


def test_workbench_noise_waits_sums_the_sessions_waits(tmp_path):
    import _tuners

    from workbench import events as ev
    from workbench.store import RecordStore

    db = str(tmp_path / "wb.db")
    store = RecordStore(db)
    for data in ({"state": "waiting"}, {"state": "quiet", "waited_s": 2.5}, {"state": "gave-up", "waited_s": 30.0}):
        store.add_event(1, ev.EventKind.MEASUREMENT_NOISE.value, 0.0, 0.0, data)
    store.close()
    assert _tuners.workbench_noise_waits(db) == pytest.approx(32.5)


def test_al_ansor_finds_each_paired_measurement_and_its_source():
    import al_ansor
    import pandas as pd

    rec = pd.DataFrame(
        {
            "round": [1, 1, 1, 2, 2, 2],
            "strategy": ["no-rewrite", "no-rewrite", "pre-transformed", "pre-transformed", "no-rewrite", "no-rewrite"],
            "decisions": ["a", "b", "b", "c", "c", "d"],
            "latency_ms": [2.0, 1.0, 0.8, 0.5, None, 0.7],
            "error_class": [None, None, None, None, "wrong-result", None],
        }
    )
    # round 2 was pre-transformed's: its new best "c" paired into no-rewrite failed; "d" is no pair (no source)
    got = al_ansor._pairs(rec, {1: "no-rewrite", 2: "pre-transformed"})
    assert got == [["no-rewrite", "pre-transformed", 0.8], ["pre-transformed", "no-rewrite", None]]


def test_live_dashboard_names_who_ran_beside_the_disturbed_timings(tmp_path):
    import live_dashboard

    from workbench import events as ev
    from workbench.store import RecordStore

    from .test_store import _session

    store = RecordStore(str(tmp_path / "live.db"))
    sid = _session(store)
    browser = {"pid": 7, "name": "chromium", "cores": 0.2}
    server = {"pid": 8, "name": "jupyter-lab", "cores": 0.1}
    for data in (
        {"source": "timing", "state": "noisy", "processes": [browser, server]},
        {"source": "timing", "state": "marked", "processes": [dict(browser, cores=0.4)]},
        {"source": "timing", "state": "remeasured", "processes": [server]},  # a retake, not a disturbed timing
        {"source": "load", "state": "waiting", "processes": [server]},  # between timings
        {"source": "timing", "state": "noisy"},  # disturbed with nobody seen beside it
    ):
        store.add_event(sid, ev.EventKind.MEASUREMENT_NOISE.value, 0.0, 0.0, data)
    got = live_dashboard.disturbers(store)
    assert got["disturbed_timings"] == 3
    assert got["threads"] == [
        {"name": "chromium", "timings": 2, "mean_cores": pytest.approx(0.3)},
        {"name": "jupyter-lab", "timings": 1, "mean_cores": pytest.approx(0.1)},
    ]
    assert "3 disturbed: chromium 2 (0.30), jupyter-lab 1 (0.10)" in live_dashboard._disturbers_line(
        {"sessions": [{"disturbers": got}]}
    )


def test_pruning_evaluation_picks_only_among_the_kept_programs(monkeypatch):
    import cost_model as cmb
    import numpy as np

    from workbench import pruning

    class FirstIsPruned:
        def __init__(self, rules, machine):
            pass

        def first_violation(self, feats):
            return "rule" if feats[0] == 1 else None

    monkeypatch.setattr(pruning, "Pruner", FirstIsPruned)
    monkeypatch.setattr(cmb, "rule_sets", lambda: {"rule": ("rule",)})
    # the fastest program (1 ms) is pruned; with fewer kept programs than k, the model's picks are the kept ones
    corpus = {"w": [(np.array([1]), 1.0), (np.array([0]), 2.0), (np.array([0]), 3.0)]}
    res = cmb.evaluate_pruning(corpus, pruning.Machine(16, 2), {("m", "w"): [0.1, 0.9, 0.5]}, ["m"])
    row = res["sets"]["rule"]["w"]
    assert row["pruned"] == pytest.approx(1 / 3) and row["best_kept_over_best"] == 2.0
    assert row["m:top1"] == 0.5 and row["m:top5"] == 0.5 and row["m:top10"] == 0.5


def test_timing_agreement_compares_processes_and_moments_and_writes_its_page(tmp_path):
    """The summary on hand-made figures: one program that a process now and then times slow (the faster of two
    processes hides it), one that the whole machine slows in one round (nothing hides it)."""
    import timing_agreement as ta

    def rnd(a, b, started):
        return {
            "latency_ms": {"A": a, "B": b},
            "started": started,
            "probe_ms": 1.0,
            "memory_probe_ms": 0.2,
            "disturbed_timings": 0,
            "wall_s": 20.0,
        }

    rounds = [
        rnd({"p": 1.0, "q": 2.0}, {"p": 1.0, "q": 2.0}, "10:00:00"),
        rnd({"p": 1.5, "q": 2.0}, {"p": 1.0, "q": 2.0}, "10:01:00"),  # p slow in process A only
        rnd({"p": 1.0, "q": 3.0}, {"p": 1.0, "q": 3.0}, "10:02:00"),  # q slow in both: the moment
    ]
    result = {
        "command": "python benchmarks/timing_agreement.py",
        "date": "2026-12-06 13:00",
        "threads": 2,
        "cpu": "znver1",
        "ledger": os.path.join(os.path.dirname(BENCH), "docs", "results", "al_ansor_sessions", "design-znver1"),
        "gap_s": 60.0,
        "programs": ["p", "q"],
        "rounds": rounds,
        "protocol": None,
    }
    s = ta.summarize(result)
    assert s["programs"] == 2
    assert s["between_processes_one_round"]["over_10pct"] == 1  # p in round 2
    assert s["next_round_one_process"]["max"] == pytest.approx(1.5)  # A's p: 1.0 -> 1.5 -> 1.0
    assert s["next_round_one_process"]["over_10pct"] == 3  # p twice, q once
    assert s["next_round_runner"]["over_10pct"] == 1  # only q's slow moment is left
    assert s["all_rounds_runner"]["max"] == pytest.approx(1.5)  # q: 2.0 vs 3.0
    assert s["worst_between_moments"][0]["key"] == "q"
    result["summary"] = s
    page = ta.write_page(result, str(tmp_path))
    assert (tmp_path / "timing_agreement.md").read_text() == page
    assert "| a round vs the next: the runner (faster of A and B) | 4 |" in page
    assert "`q` | 2.00 / 2.00 | 2.00 / 2.00 | 3.00 / 3.00 |" in page
