"""Successfully measured candidates per second: the workbench vs TVM MetaSchedule's ``tune_tir``.

Same workload, target (mcpu and core count included), trial budget and batch
size, run one after the other in one invocation; each tuner runs in its own
fresh process, so each pays its own start-up (imports, worker pools), as a user
would. MetaSchedule runs twice:

* ``ms-stock``: its stock ``LocalBuilder`` (which starts fresh workers for every
  batch, each importing all tensor intrinsics) with a build timeout long enough
  that builds do not fail (``--ms-build-timeout``, default 300 s; the stock 30 s
  times out here and the failures are silently recorded as 1e10 s), and its
  default ``LocalRunner``.
* ``ms-fastbuild``: the same, with a build function that skips the tensor
  intrinsics import (what a knowledgeable user would do).

Failed candidates (``run_secs`` = 1e10 or an error) are counted, not hidden.

The run follows the benchmark protocol (``_quiet.py``): a quiet check before every
tuner run and before the self-check, the first of them starting the run (status 3
and one line when the machine is busy; ``--force`` marks the result invalid),
``quiesce()`` between runs, the calibration probe before and after, every thread
pool sized to ``--threads``.
Every tuner runs ``--repeats`` times (default 3; in rounds: each tuner once per
round) and each figure is the median over its runs, with its spread.

    python benchmarks/measure_throughput.py [--workload resnet18.conv2] [--trials 64] [--repeats 3] [--host-drift record]

writes ``docs/results/throughput.md`` and ``docs/results/throughput.json`` (``--report-only`` rewrites the page from
the JSON). The page shows each repeat side by side as well, and the workbench's waits for a quiet machine (its
default noise mode), which are part of its wall time. Every run's records go to ``benchmarks/out/throughput/``
(``--out``; the workbench's store ``workbench-runN.db``, MetaSchedule's work directory ``ms-...-runN/``), kept
after the run: each workbench run's best is then timed again alone by the user's own command (``workbench best
DB WORKLOAD --time``) and compared with the run's figure (the standalone self-check, within 5 %).
MetaSchedule's bests are the figures its own database records.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _quiet  # noqa: E402
import _tuners  # noqa: E402

TUNERS = ("workbench", "ms-fastbuild", "ms-stock")
FIGURES = ("wall_seconds", "ok_per_second", "seconds_per_ok_trial", "best_latency_ms")


def run_tuner(tuner: str, run: int, args, target: dict) -> dict:
    """One run of ``tuner`` (its ``run``-th, from 1), its records kept under ``args.out``."""
    if tuner == "workbench":
        db = os.path.join(args.out, f"workbench-run{run}.db")
        r = _tuners.run_workbench(args.workload, target, args.trials, args.per_round, db)
        r["db"] = db
    else:
        work_dir = os.path.join(args.out, f"{tuner}-run{run}")
        fast = tuner == "ms-fastbuild"
        r = _tuners.run_ms(args.workload, target, args.trials, args.per_round, fast, args.ms_build_timeout, work_dir)
    r["ok_per_second"] = r["ok"] / r["wall_seconds"]
    r["seconds_per_ok_trial"] = r["wall_seconds"] / max(1, r["ok"])
    return r


def self_check(runs: list, workload: str, threads: int) -> list:
    """Each workbench run's best, timed again alone by ``workbench best DB WORKLOAD --time``, against the run's own
    figure (the session's re-measured best); a run with no best has nothing to check."""
    kernels = [
        {"db": r["db"], "workload": workload, "table_ms": r["best_latency_ms"], "label": f"workbench run {i}"}
        for i, r in enumerate(runs, 1)
        if r.get("db") and r.get("best_latency_ms")
    ]
    return _quiet.standalone_self_check(kernels, threads, ROOT)


def _median_row(runs: list) -> dict:
    """The run whose throughput is the median one (its counts), each figure replaced by the median over
    ``runs`` and given its spread ((max - min) / median; None for a single run)."""
    import statistics

    from workbench import noise

    order = sorted(runs, key=lambda r: r["ok_per_second"])
    row = {k: v for k, v in order[(len(order) - 1) // 2].items() if k != "timeline"}
    for k in FIGURES:
        xs = [r[k] for r in runs if r.get(k) is not None]
        row[k] = statistics.median(xs) if xs else None
        row[k + "_spread"] = noise.spread(xs) if xs else None
    row["runs"] = [{k: r.get(k) for k in ("measured", "ok", "failed", "noise_waited_s", "db") + FIGURES} for r in runs]
    return row


def _ratio(a, b) -> str:
    """a / b as "1.23x"; "–" when b is zero or missing (a run with no successful trial)."""
    return f"{a / b:.2f}x" if a is not None and b else "–"


def _fig(r, k, spec):
    sp = r.get(k + "_spread")
    v = "-" if r.get(k) is None else format(r[k], spec)
    return v if sp is None else f"{v} ({100 * sp:.0f}%)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="resnet18.conv2")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--per-round", type=int, default=16)
    ap.add_argument("--ms-build-timeout", type=float, default=300.0)
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs per tuner; figures are medians over them with their spread (default %(default)s)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=_quiet.available_cores(),
        help="threads of every tuner and its workers (TVM_NUM_THREADS, OMP_NUM_THREADS, "
        "OPENBLAS_NUM_THREADS, the target's num-cores; default: all available cores, %(default)s)",
    )
    ap.add_argument(
        "--force", action="store_true", help="run even when the machine is not quiet; the result is then marked invalid"
    )
    ap.add_argument(
        "--host-drift",
        choices=["refuse", "record"],
        default="refuse",
        help="a host slower than at its best: refuse/stop the run (default), or record it on the page and go on "
        "(the tuners alternate within every repeat, so a drift moves each of them alike)",
    )
    ap.add_argument("--results", default=RESULTS, help="where throughput.md/.json go (default docs/results)")
    ap.add_argument(
        "--out",
        default=os.path.join(ROOT, "benchmarks", "out", "throughput"),
        help="where every run's records are kept (workbench stores, MetaSchedule work directories; default "
        "%(default)s); a new run replaces the runs it repeats",
    )
    ap.add_argument(
        "--report-only", action="store_true", help="no tuning: rewrite throughput.md from --results' throughput.json"
    )
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.report_only:
        with open(os.path.join(args.results, "throughput.json")) as f:
            print(write_page(json.load(f), args.results))
        return

    from workbench import tvm_env

    target = tvm_env.host_target_dict(args.threads)
    _quiet.set_thread_env(args.threads)
    protocol = _quiet.Protocol("measure_throughput", args.threads, args.force, host_drift=args.host_drift)
    os.makedirs(args.out, exist_ok=True)
    runs = {k: [] for k in TUNERS}
    # The workbench uses MetaSchedule's own strategy for its weights (pre-transformed: RewriteLayout with the
    # transform stripped by the builder), so both sides measure the same kind of program.
    for i in range(args.repeats):
        for tuner in TUNERS:
            _quiet.quiesce()
            protocol.enter(f"tuning with {tuner} (run {i + 1}/{args.repeats})")
            print(f"{tuner} (run {i + 1}/{args.repeats}) ...", file=sys.stderr, flush=True)
            runs[tuner].append(run_tuner(tuner, i + 1, args, target))
    protocol.enter("the standalone self-check")
    print(
        "standalone self-check: each workbench run's best timed by `workbench best DB W --time`, alone", file=sys.stderr
    )
    checks = self_check(runs["workbench"], args.workload, args.threads)
    protocol.finish()
    rows = {k: _median_row(v) for k, v in runs.items()}
    wb = rows["workbench"]["ok_per_second"]
    result = {
        "command": "python " + " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]),
        "workload": args.workload,
        "trials": args.trials,
        "per_round": args.per_round,
        "target": target,
        "threads": args.threads,
        "repeats": args.repeats,
        "versions": tvm_env.library_versions(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "rows": rows,
        "speedup_vs": {k: wb / v["ok_per_second"] for k, v in rows.items() if k != "workbench" and v["ok"]},
        "self_check": checks,
        "protocol": protocol.summary(),
    }
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "throughput.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(write_page(result, args.results))


def per_run_lines(result: dict) -> list:
    """The runs side by side: the tuners alternate within each repeat, so a repeat's ratios meet one host."""
    rows = result["rows"]
    n = min(len(r.get("runs", [])) for r in rows.values())
    if n < 2:
        return []
    others = [k for k in rows if k != "workbench"]
    lines = [
        "",
        "Each repeat, side by side (the tuners run one after the other within a repeat, so a host whose speed "
        "drifts between repeats moves each repeat's tuners alike):",
        "",
        "| repeat | "
        + " | ".join(f"{k} wall s" for k in rows)
        + " | "
        + " | ".join(f"throughput vs {k}" for k in others)
        + " |",
        "|---|" + "---|" * (len(rows) + len(others)),
    ]
    for i in range(n):
        wb = rows["workbench"]["runs"][i]
        walls = " | ".join(f"{rows[k]['runs'][i]['wall_seconds']:.1f}" for k in rows)
        ratios = " | ".join(_ratio(wb["ok_per_second"], rows[k]["runs"][i]["ok_per_second"]) for k in others)
        lines.append(f"| {i + 1} | {walls} | {ratios} |")
    waits = [r.get("noise_waited_s") for r in rows["workbench"]["runs"]]
    if all(w is not None for w in waits):
        lines += [
            "",
            "The workbench's wall includes its waits for a quiet machine (noise mode `wait`, the default): "
            + ", ".join(f"{w:.1f} s" for w in waits)
            + " in the repeats above.",
        ]
    else:
        lines += [
            "",
            "The workbench's wall includes any waits for a quiet machine (noise mode `wait`, the default); this run "
            "predates their recording, so how much of its spread they explain is not known.",
        ]
    return lines


def write_page(result: dict, results: str) -> str:
    """throughput.md from ``result`` (throughput.json's content); returns the page."""
    rows = result["rows"]
    lines = [
        "# Tuning throughput: workbench vs MetaSchedule `tune_tir`",
        "",
        _quiet.summary_markdown(result.get("protocol")),
        f"Workload `{result['workload']}`, {result['trials']} trials in batches of {result['per_round']}, target "
        f"`{json.dumps(result['target'])}`, measured {result['date']} on this machine ({result['threads']} threads), "
        f"TVM {result['versions']['tvm']}. Produced by `{result['command']}`; each tuner in a "
        f"fresh process, one after the other; wall time includes start-up. {result['repeats']} run(s) per tuner: "
        "figures are medians over the runs, with their spread ((max - min) / median) in brackets when there are "
        "several; the counts are the median run's.",
        "",
        "| tuner | measured | ok | failed | wall s | s per ok trial | ok trials / s | best ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, r in rows.items():
        lines.append(
            f"| {k} | {r['measured']} | {r['ok']} | {r['failed']} | {_fig(r, 'wall_seconds', '.1f')} | "
            f"{_fig(r, 'seconds_per_ok_trial', '.2f')} | {_fig(r, 'ok_per_second', '.3f')} | "
            f"{_fig(r, 'best_latency_ms', '.3f')} |"
        )
    wbr = rows["workbench"]
    lines += [
        "",
        f"The workbench's best program is verified: {wbr['verified']}; it runs in {wbr['best_latency_ms']:.3f} ms "
        f"against {wbr['naive_latency_ms']:.1f} ms for the naive (unscheduled) program: "
        f"**{wbr['naive_latency_ms'] / wbr['best_latency_ms']:.0f}x faster**.",
    ]
    lines += [
        "",
        "Workbench throughput relative to each MetaSchedule configuration (successful trials per second, medians "
        "over the repeats): " + ", ".join(f"**{v:.1f}x** vs {k}" for k, v in result["speedup_vs"].items()) + ".",
    ]
    lines += per_run_lines(result)
    if result.get("self_check"):
        lines += [
            "",
            _quiet.self_check_markdown(
                result["self_check"],
                what="The best program of each workbench run (its figure: the session's re-measured best, as in the "
                "table's median)",
            ).rstrip("\n"),
            "MetaSchedule's bests are the figures its own database records; they are not timed again.",
        ]
    else:
        lines += [
            "",
            "No standalone self-check: this run predates it (its workbench stores were temporary), so its best "
            "latencies are the sessions' own figures, not confirmed by a separate command.",
        ]
    lines += [
        "",
        "What differs between the tuners (by construction, not measured here one by one): the workbench keeps its "
        "build and run workers alive for the whole session (MetaSchedule's `LocalBuilder` starts a new pool for "
        "every batch, and each stock worker imports every tensor intrinsic), registers only the x86 intrinsics in "
        "its own process, searches the next round while this one builds, times each kernel with `repeat=3, "
        "min_repeat_ms=30` instead of `min_repeat_ms=100`, and its `quick` preset searches a population of 128 "
        "(MetaSchedule: 512). Where a session's time goes is profiled on "
        "[performance.md](performance.md#where-the-workbenchs-tuning-time-goes).",
        "",
    ]
    page = "\n".join(lines)
    with open(os.path.join(results, "throughput.md"), "w") as f:
        f.write(page)
    return page


if __name__ == "__main__":
    main()
