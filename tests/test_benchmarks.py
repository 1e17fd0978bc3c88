"""The benchmark helpers (benchmarks/_report.py, _protocol.py): parsing, aggregation and the Markdown report.

Synthetic inputs only; nothing is timed.
"""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import _protocol  # noqa: E402
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
    assert p == {"isa": "avx2-fma", "lanes": 8, "threads": 2, "fma_gflops_1thread": 101.5, "fma_gflops_all": 200.25,
                 "triad_gbs_1thread": 20.0, "triad_gbs_all": 25.5}
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
        return {"measured": 4, "ok": 4, "failed": 0, "build_errors": 0, "run_errors": 0, "wall_seconds": 10.0,
                "best_latency_ms": best, "timeline": tl}

    return {
        "mode": "quick", "command": "make bench", "date": "2026-01-01 00:00 UTC", "machine": "test", "target": "{}",
        "threads": 2, "versions": {"tvm": "x", "numpy": "y"}, "budgets": [4], "per_round": 2, "repeats": 3,
        "names": ["A", "B"], "peak": _report.parse_peak(PEAK_OUT), "torch": {"torch": "t"},
        "workloads": [{"name": "A", "op": "matmul", "flops": 2e9, "arg_shapes": [(10,)], "intensity": 50.0},
                      {"name": "B", "op": "conv2d", "flops": 1e9, "arg_shapes": [(10,)], "intensity": 5.0}],
        "runs": {"4": {
            "A": {"workbench": run(1.0, [[1, 2.0], [2, 1.0]]), "ms-fastbuild": run(2.0, [[3, 4.0], [6, 2.0]])},
            "B": {"workbench": run(1.0, [[1, 3.0], [2, 1.0]]), "ms-fastbuild": run(4.0, [[9, 4.0]]),
                  "ms-stock": run(0.5, [[20, 0.5]])}}},
        "remeasure": {"4": {"A": {"workbench": _report.summarize([1e-3]), "ms-fastbuild": _report.summarize([2e-3])},
                            "B": {"workbench": _report.summarize([1e-3]), "ms-fastbuild": _report.summarize([4e-3]),
                                  "ms-stock": _report.summarize([0.5e-3])}}},
        "vendor": {"A": dict(_report.summarize([0.5e-3]), library="numpy/OpenBLAS"),
                   "B": dict(_report.summarize([2e-3]), library="torch oneDNN nchw")},
        "verification": {"4|A|workbench": {"verified": True}, "4|B|ms-stock": {"verified": False}},
    }


def test_derive_compares_at_equal_trials_and_reads_time_to_quality():
    res = _result()
    d = _report.derive(res)
    a, b = d["rows"]
    assert a["speedup_vs_ms-fastbuild"] == pytest.approx(2.0)
    assert a["t_ms_ms-fastbuild"] == 6 and a["t_wb_ms-fastbuild"] == 1 and a["time_ratio_ms-fastbuild"] == pytest.approx(1 / 6)
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
    script.write_text("import sys\nsys.path.insert(0, %r)\nimport _protocol\n"
                      "_protocol.serve({'add': lambda m: m['a'] + m['b'], 'boom': lambda m: 1 / 0})\n"
                      % os.path.dirname(_protocol.__file__))
    w = _protocol.Worker([sys.executable, str(script)])
    try:
        assert w.call("add", a=1, b=2) == 3
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            w.call("boom")
        assert w.call("add", a=2, b=2) == 4
    finally:
        w.close()


def test_conv_spec_gives_torch_the_workloads_shapes():
    import performance
    from workbench.workloads import registry

    reg = registry()
    assert performance.conv_spec(reg.get("resnet18.conv5")) == {
        "name": "resnet18.conv5", "ci": 128, "h": 28, "w": 28, "co": 128, "k": 3, "stride": 1, "pad": 1, "groups": 1}
    dw = performance.conv_spec(reg.get("mobilenet_v2.dw144_56_s1"))
    assert dw["groups"] == dw["ci"] == dw["co"] == 144
    assert performance.conv_spec(reg.get("GMM.2")) is None
    assert [reg.get(n).name for n in performance.WORKLOADS] == performance.WORKLOADS  # all registered
