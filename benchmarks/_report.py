"""Aggregation and reporting for ``performance.py``: statistics, the peak-benchmark parser, time-to-quality,
the Markdown tables and the roofline plot. Pure functions of the result dict, so they are unit-tested.
"""

from __future__ import annotations

import math
import os
import statistics

TUNERS = ("workbench", "ms-fastbuild", "ms-stock")


def summarize(samples: list) -> dict:
    """Median and spread of repeated timings (seconds)."""
    xs = sorted(float(x) for x in samples)
    if not xs:
        raise ValueError("no samples")
    med = statistics.median(xs)
    return {
        "median": med,
        "min": xs[0],
        "max": xs[-1],
        "n": len(xs),
        "spread_pct": 100.0 * (xs[-1] - xs[0]) / med if med > 0 else 0.0,
    }


def geomean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def parse_peak(text: str) -> dict:
    """``key value`` lines of benchmarks/peak/peak.c -> dict (numbers converted)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        k, v = parts
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    missing = {"fma_gflops_1thread", "fma_gflops_all", "triad_gbs_all"} - set(out)
    if missing:
        raise ValueError(f"peak benchmark output lacks {sorted(missing)}")
    return out


def time_to_reach(timeline, target_ms: float) -> float | None:
    """Seconds (since launch) of the first measurement at or below ``target_ms``; None if never reached."""
    for t, lat in timeline:
        if lat is not None and lat <= target_ms:
            return float(t)
    return None


def best_over_time(timeline):
    """(seconds, best-so-far ms) at every improvement."""
    best, out = None, []
    for t, lat in timeline:
        if lat is not None and (best is None or lat < best):
            best = lat
            out.append((t, lat))
    return out


def arithmetic_intensity(flops: float, arg_shapes, itemsizes=None) -> float:
    """FLOPs per byte of compulsory traffic (every input read once, the output written once); ``itemsizes``: bytes
    per element of each argument (default 4, fp32)."""
    itemsizes = itemsizes or [4] * len(arg_shapes)
    nbytes = sum(math.prod(s) * b for s, b in zip(arg_shapes, itemsizes))
    return flops / nbytes


def _fmt(x, spec=".3f", none="–"):
    return none if x is None else format(x, spec)


def _ratio(a, b):
    return None if (a is None or b is None or b == 0) else a / b


def publishable_peak(peak: dict) -> float | None:
    """The FMA peak (GFLOPS, all threads) that shares of peak may be published against: none when the
    microbenchmark measured less than a kernel achieved (``below_achieved``: a bug in it, not a roof)."""
    return None if not peak or peak.get("below_achieved") else peak.get("fma_gflops_all")


def derive(result: dict) -> dict:
    """Per-workload/budget comparisons and the headline figures, from the raw runs and re-measurements."""
    peak = publishable_peak(result["peak"])
    rows, heads = [], {}
    for budget in result["budgets"]:
        for w in result["workloads"]:
            name = w["name"]
            runs = result["runs"].get(str(budget), {}).get(name, {})
            rem = result["remeasure"].get(str(budget), {}).get(name, {})
            row = {"budget": budget, "workload": name, "flops": w["flops"]}
            for tuner in TUNERS:
                if tuner in rem:
                    row[tuner + "_ms"] = rem[tuner]["median"] * 1e3
                    row[tuner + "_spread_pct"] = rem[tuner]["spread_pct"]
                    row[tuner + "_gflops"] = w["flops"] / rem[tuner]["median"] / 1e9
            vendor = result["vendor"].get(name)
            if vendor:
                row["vendor_ms"] = vendor["median"] * 1e3
                row["vendor_spread_pct"] = vendor["spread_pct"]
                row["vendor_gflops"] = w["flops"] / vendor["median"] / 1e9
                row["vendor_name"] = vendor["library"]
                row["wb_vs_vendor"] = _ratio(row.get("workbench_gflops"), row["vendor_gflops"])
            row["wb_peak_frac"] = _ratio(row.get("workbench_gflops"), peak)
            for ms_tuner in ("ms-fastbuild", "ms-stock"):
                if ms_tuner not in runs or "workbench" not in runs:
                    continue
                ms_run, wb_run = runs[ms_tuner], runs["workbench"]
                row[f"speedup_vs_{ms_tuner}"] = _ratio(row.get(ms_tuner + "_ms"), row.get("workbench_ms"))
                target = ms_run["best_latency_ms"]
                t_ms = time_to_reach(ms_run["timeline"], target) if target else None
                t_wb = time_to_reach(wb_run["timeline"], target) if target else None
                row[f"t_ms_{ms_tuner}"] = t_ms
                row[f"t_wb_{ms_tuner}"] = t_wb
                row[f"time_ratio_{ms_tuner}"] = _ratio(t_wb, t_ms)
            rows.append(row)
    for budget in result["budgets"]:
        sub = [r for r in rows if r["budget"] == budget]
        for ms_tuner in ("ms-fastbuild", "ms-stock"):
            sp = [r.get(f"speedup_vs_{ms_tuner}") for r in sub if r.get(f"speedup_vs_{ms_tuner}")]
            if sp:
                heads[f"geomean_speedup_vs_{ms_tuner}@{budget}"] = geomean(sp)
                heads[f"n_workloads_{ms_tuner}@{budget}"] = len(sp)
            tr = [r.get(f"time_ratio_{ms_tuner}") for r in sub if f"t_ms_{ms_tuner}" in r]
            if tr:
                heads[f"time_ratio_max_vs_{ms_tuner}@{budget}"] = None if any(x is None for x in tr) else max(tr)
                heads[f"time_ratio_geomean_vs_{ms_tuner}@{budget}"] = geomean(x for x in tr if x is not None)
                heads[f"time_target_reached_vs_{ms_tuner}@{budget}"] = sum(x is not None for x in tr)
        vv = [r["wb_vs_vendor"] for r in sub if r.get("wb_vs_vendor") is not None]
        if vv:
            heads[f"min_wb_vs_vendor@{budget}"] = min(vv)
            heads[f"geomean_wb_vs_vendor@{budget}"] = geomean(vv)
    return {"rows": rows, "headline": heads}


def per_workload(result: dict, derived: dict) -> None:
    """Copy each workload's headline figures (at the largest budget) into ``result["workloads"]``:
    ``workbench_ms``, ``vendor_ms``, ``vendor`` (the library), and their spreads."""
    top = max(result["budgets"])
    rows = {r["workload"]: r for r in derived["rows"] if r["budget"] == top}
    for w in result["workloads"]:
        r = rows.get(w["name"], {})
        w["workbench_ms"] = r.get("workbench_ms")
        w["workbench_spread_pct"] = r.get("workbench_spread_pct")
        w["vendor_ms"] = r.get("vendor_ms")
        w["vendor_spread_pct"] = r.get("vendor_spread_pct")
        w["vendor"] = r.get("vendor_name")


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def targets(result: dict, derived: dict) -> list:
    """The issue's three targets: (target, where it stands, verdict)."""
    h = derived["headline"]
    out = []
    top = max(result["budgets"])
    for budget in result["budgets"]:
        for ms_tuner in ("ms-fastbuild", "ms-stock"):
            g = h.get(f"geomean_speedup_vs_{ms_tuner}@{budget}")
            if g is None:
                continue
            n = h[f"n_workloads_{ms_tuner}@{budget}"]
            out.append(
                (
                    f"Equal trials ({budget}): geomean best latency vs {ms_tuner} ≥ 1.0×, aim 1.1×",
                    f"workbench {g:.2f}× as fast (geomean over {n} workload(s))",
                    _verdict(g >= 1.0) + (" (aim met)" if g >= 1.1 else ""),
                )
            )
            r = h.get(f"time_ratio_max_vs_{ms_tuner}@{budget}")
            reached = h.get(f"time_target_reached_vs_{ms_tuner}@{budget}")
            gm = h.get(f"time_ratio_geomean_vs_{ms_tuner}@{budget}")
            txt = (
                f"reached on {reached}/{n}; worst {_fmt(r, '.2f')}×, geomean {_fmt(gm, '.2f')}× of "
                f"{ms_tuner}'s time to its own final best"
            )
            out.append(
                (
                    f"Wall time to {ms_tuner}'s final best ({budget} trials) ≤ 1/3 of its own",
                    txt,
                    _verdict(r is not None and r <= 1 / 3),
                )
            )
    v = h.get(f"min_wb_vs_vendor@{top}")
    if v is not None:
        out.append(
            (
                f"Tuned ≥ 0.8× vendor on every workload, at {top} trials (≤ 1000)",
                f"worst {v:.2f}×, geomean {h[f'geomean_wb_vs_vendor@{top}']:.2f}×",
                _verdict(v >= 0.8),
            )
        )
    return out


def markdown(result: dict, derived: dict, analysis: str = "", plot_name: str | None = None) -> str:
    import _quiet

    pk = result["peak"]
    sequential = result.get("remeasure_protocol") == "sequential"
    if sequential:
        how = (
            f"the final kernels were then timed one library at a time: each tuner's kernels rebuilt in a process "
            f"of their own, then numpy/OpenBLAS, then torch in its own environment, each process alone on the "
            f"machine and gone before the next started; {result['repeats']} samples of ≥100 ms per kernel"
            + (
                f" in each of {result['timing_passes']} passes (every library timed once per pass, in turn, the "
                "order rotated each pass; the samples pooled over the passes, so a drift of the host's speed "
                "reaches every library alike)"
                if result.get("timing_passes", 1) > 1
                else ""
            )
            + ". Latencies are medians over the samples"
        )
    else:
        how = (
            f"the final kernels were then rebuilt in one process and timed in {result['repeats']} interleaved "
            "rounds (each round times every kernel once, ≥100 ms per sample; torch in its own process, taking "
            "its turn in the same rounds). Latencies are medians over the rounds"
        )
    L = [
        "# Performance against the peers",
        "",
        _quiet.summary_markdown(result.get("protocol")),
        f"Generated by `{result['command']}` ({result['mode']} mode) on {result['date']}; this machine: "
        f"{result['machine']}. Target `{result['target']}` on every side, {result['threads']} threads "
        f"(`TVM_NUM_THREADS`, `OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, `torch.set_num_threads`). "
        f"TVM {result['versions'].get('tvm')}, "
        f"torch {result.get('torch', {}).get('torch', 'not run')}, numpy {result['versions'].get('numpy')}. "
        "Each tuner ran in its own fresh process, one after the other, with the same trial budget and batch "
        f"size ({result['per_round']}); {how}; spread = (max − min) / median.",
        "",
    ]
    if result.get("resumed"):
        earlier = [
            f"started {p.get('started')}, commit `{((p.get('git') or {}).get('commit') or 'unknown')[:12]}`"
            for p in result.get("earlier_runs") or []
        ]
        L += [
            "Tuner runs kept from an earlier, interrupted invocation with the same settings (`--resume`; their "
            f"tuning and wall times were taken then, under that invocation's protocol checks: {'; '.join(earlier)}; "
            f"records in performance.json, `earlier_runs`): {', '.join(result['resumed'])}.",
            "",
        ]
    if result.get("problems"):
        L += ["## Problems", ""] + [f"- **{p}**" for p in result["problems"]] + [""]
    L += ["## Where each target stands", "", "| target | measured | verdict |", "|---|---|---|"]
    L += [f"| {a} | {b} | {c} |" for a, b, c in targets(result, derived)]
    L += ["", "## Machine peak", ""]
    if pk.get("below_achieved"):
        L += [
            "The FMA microbenchmark (`benchmarks/peak/peak.c`) measured less than a kernel achieved (see "
            "Problems above), twice: its figure is a bug, not the machine's peak, so it is not published and no "
            f"fraction of peak is given. STREAM-like triad: **{pk['triad_gbs_all']:.1f} GB/s** on "
            f"{pk.get('threads')}.",
            "",
        ]
    else:
        L += [
            f"FMA microbenchmark (`benchmarks/peak/peak.c`, {pk.get('isa')}, {pk.get('lanes')} fp32 lanes, "
            f"independent FMA chains): **{pk['fma_gflops_1thread']:.1f} GFLOPS on one core, "
            f"{pk['fma_gflops_all']:.1f} GFLOPS on {pk.get('threads')}**. STREAM-like triad: "
            f"{pk.get('triad_gbs_1thread', float('nan')):.1f} GB/s on one core, **{pk['triad_gbs_all']:.1f} GB/s** "
            f"on {pk.get('threads')}. Ridge point: {pk['fma_gflops_all'] / pk['triad_gbs_all']:.1f} FLOP/byte.",
            "",
        ]
    for budget in result["budgets"]:
        rows = [r for r in derived["rows"] if r["budget"] == budget]
        L += [
            f"## Best kernels after {budget} trials (re-measured, "
            f"{'each library alone' if sequential else 'interleaved'})",
            "",
            "| workload | workbench ms (spread) | ms-fastbuild ms (spread) | ms-stock ms (spread) | vs fastbuild | "
            "vs stock | workbench GFLOPS | % of peak | vendor | vendor GFLOPS | tuned / vendor |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            cells = []
            for t in TUNERS:
                ms = r.get(t + "_ms")
                cells.append("–" if ms is None else f"{ms:.3f} ({r[t + '_spread_pct']:.0f}%)")
            sf, ss = r.get("speedup_vs_ms-fastbuild"), r.get("speedup_vs_ms-stock")
            L.append(
                f"| {r['workload']} | "
                + " | ".join(cells)
                + f" | {_fmt(sf, '.2f')}× | {_fmt(ss, '.2f')}× | {_fmt(r.get('workbench_gflops'), '.1f')} | "
                f"{_fmt(None if r.get('wb_peak_frac') is None else 100 * r['wb_peak_frac'], '.0f')}% | "
                f"{r.get('vendor_name', '–')} | {_fmt(r.get('vendor_gflops'), '.1f')} | "
                f"{_fmt(r.get('wb_vs_vendor'), '.2f')}× |"
            )
        L += [
            "",
            f"### Tuning runs, {budget} trials",
            "",
            "| workload | tuner | measured | failed (build/run errors) | wall s | ok trials / s | "
            "best ms (own timing) | s to its final best | workbench s to this best |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for w in result["workloads"]:
            runs = result["runs"].get(str(budget), {}).get(w["name"], {})
            for t in TUNERS:
                if t not in runs:
                    continue
                r = runs[t]
                errs = f"{r['failed']}" + (f" ({r['build_errors']}/{r['run_errors']})" if "build_errors" in r else "")
                own = time_to_reach(r["timeline"], r["best_latency_ms"]) if r["best_latency_ms"] else None
                wbt = (
                    time_to_reach(runs["workbench"]["timeline"], r["best_latency_ms"])
                    if t != "workbench" and r["best_latency_ms"]
                    else None
                )
                wbt_txt = "–" if t == "workbench" else (_fmt(wbt, ".1f") if wbt is not None else "not reached")
                wall = f"{r['wall_seconds']:.1f}"
                if r.get("noise_waited_s"):
                    wall += f" ({r['noise_waited_s']:.1f} waiting)"
                L.append(
                    f"| {w['name']} | {t} | {r['measured']} | {errs} | {wall} | "
                    f"{r['ok'] / r['wall_seconds']:.3f} | {_fmt(r['best_latency_ms'])} | {_fmt(own, '.1f')} | "
                    f"{wbt_txt} |"
                )
        from workbench.noise import NoisePolicy

        policy = NoisePolicy()
        L += [
            "",
            "A workbench wall time includes its waits for a quiet machine (in brackets when there were any): its "
            f"default noise mode `wait` holds the timing while other processes take more than {policy.max_other_cores:g} "
            f"of a core (for up to {policy.max_wait_s:g} s) or the calibration probe reads the host more than "
            f"{100 * policy.max_probe_drift:g} % slower than the session's baseline with nothing here busy (for up to "
            f"{policy.max_drift_wait_s:g} s), then goes on and marks what it timed noisy "
            "([measurement.md](../measurement.md)). MetaSchedule never waits.",
            "",
        ]
    ver = result.get("verification", {})
    bad = [k for k, v in ver.items() if not v["verified"]]
    L += [
        f"Every re-measured kernel was checked against the workload's NumPy reference: "
        f"{len(ver) - len(bad)}/{len(ver)} correct" + (f" (wrong: {', '.join(bad)})" if bad else "") + ".",
        "",
    ]
    if plot_name and not pk.get("below_achieved"):
        L += [
            "## Roofline",
            "",
            f"[Interactive plot]({plot_name}): achieved GFLOPS of each tuner's best kernel and of "
            "the vendor library against arithmetic intensity (compulsory traffic: each input read once, the output "
            "written once), under the measured FMA peak and triad bandwidth.",
            "",
        ]
        L += ["| workload | FLOP/byte | roof GFLOPS | workbench | ms-fastbuild | vendor |", "|---|---|---|---|---|---|"]
        top = max(result["budgets"])
        for r in [r for r in derived["rows"] if r["budget"] == top]:
            w = next(x for x in result["workloads"] if x["name"] == r["workload"])
            roof = min(pk["fma_gflops_all"], pk["triad_gbs_all"] * w["intensity"])
            L.append(
                f"| {r['workload']} | {w['intensity']:.1f} | {roof:.0f} | {_fmt(r.get('workbench_gflops'), '.1f')} | "
                f"{_fmt(r.get('ms-fastbuild_gflops'), '.1f')} | {_fmt(r.get('vendor_gflops'), '.1f')} |"
            )
        L.append("")
    prof = result.get("profile")
    if prof:
        L += [
            "## Where the workbench's tuning time goes",
            "",
            f"One in-process session of `{prof['before']['workload']}`, {prof['before']['trials']} trials, "
            "exclusive wall seconds per phase (`benchmarks/_profile.py`), before and after the change described "
            "below:",
            "",
            "| phase | before s | after s |",
            "|---|---|---|",
        ]
        for k in prof["before"]["phases"]:
            L.append(f"| {k} | {prof['before']['phases'][k]:.1f} | {prof['after']['phases'][k]:.1f} |")
        L += [
            f"| **total** | **{prof['before']['wall_seconds']:.1f}** | **{prof['after']['wall_seconds']:.1f}** |",
            f"| best ms | {_fmt(prof['before']['best_latency_ms'])} | {_fmt(prof['after']['best_latency_ms'])} |",
            "",
            prof.get("change", ""),
            "",
        ]
        fc = prof["after"].get("feature_cache")
        if fc:
            L += [
                f"With the change, {fc['hits']} of {fc['hits'] + fc['misses']} feature look-ups were served from the "
                f"cache, and feature extraction ran in {prof['after']['calls']['features']} calls instead of "
                f"{prof['before']['calls']['features']}.",
                "",
            ]
    if analysis:
        L += ["## Analysis", "", analysis.strip(), ""]
    return "\n".join(L)


def roofline_html(result: dict, derived: dict, path: str) -> bool:
    """Write the roofline plot as HTML (and PNG next to it when kaleido is installed). False without plotly."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        return False
    pk = result["peak"]
    peak, bw = pk["fma_gflops_all"], pk["triad_gbs_all"]
    ai = [w["intensity"] for w in result["workloads"]]
    xs = [min(ai) / 4 * (1.2**i) for i in range(200) if min(ai) / 4 * (1.2**i) < max(ai) * 4]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=xs, y=[min(peak, bw * x) for x in xs], mode="lines", name="roof (measured)", line={"color": "black"}
        )
    )
    top = max(result["budgets"])
    rows = [r for r in derived["rows"] if r["budget"] == top]
    by_name = {w["name"]: w for w in result["workloads"]}
    for key, label in (
        ("workbench_gflops", "workbench"),
        ("ms-fastbuild_gflops", "ms-fastbuild"),
        ("ms-stock_gflops", "ms-stock"),
        ("vendor_gflops", "vendor"),
    ):
        pts = [(by_name[r["workload"]]["intensity"], r[key], r["workload"]) for r in rows if r.get(key)]
        if pts:
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in pts],
                    y=[p[1] for p in pts],
                    text=[p[2] for p in pts],
                    mode="markers",
                    name=f"{label} ({top} trials)" if label != "vendor" else label,
                    marker={"size": 10},
                )
            )
    fig.update_layout(
        title="Roofline: achieved GFLOPS vs arithmetic intensity",
        xaxis_type="log",
        yaxis_type="log",
        xaxis_title="FLOP / byte (compulsory traffic)",
        yaxis_title="GFLOPS",
        width=900,
        height=600,
    )
    fig.write_html(path, include_plotlyjs="cdn")
    try:
        fig.write_image(os.path.splitext(path)[0] + ".png")
    except Exception:  # noqa: BLE001 - kaleido not installed: HTML only, the table carries the numbers
        pass
    return True
