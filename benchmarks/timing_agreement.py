"""How far a kernel's measured time travels: between two runner processes timing it side by side, and between
moments of the same quiet machine.

    .venv/bin/python benchmarks/timing_agreement.py [--ledger DIR] [--rounds 6] [--gap-s 60] [--threads 2]

Programs: the best verified program of every run in an AL-Ansor ledger at the run's last checkpoint (default
``docs/results/al_ansor_sessions/design-znver1``: some 70 distinct tuned conv programs of six ResNet-18 layers),
each built once. Each round opens two fresh runner processes, A and B (``measure.Runner`` as a session's, the
quick preset's settings: number 1, repeat 3, min_repeat_ms 30), and times every program in A and at once in B,
the programs in the order a session meets them (layer by layer, shuffled within a layer); then both end. Between
rounds the machine idles ``--gap-s`` seconds, so that the rounds sample the host over some minutes. Each round
also reads two probes in this process: the protocol's calibration probe (a 256^3 matmul, compute-bound, its
data in L2) and a memory probe (``numpy.add`` over three 2 MB float32 arrays, 6 MB: in the L3 cache of a quiet
Zen 1 core complex, one thread), so that a change of the host shows in each kind of work.

What the page reports, per program (a ratio is the larger figure over the smaller):
* **between processes**: A against B in one round (a moment apart: does one process time a kernel slower than
  another right beside it?), and A's mean over the rounds against B's (is one process slower throughout?);
* **between moments**: a round's figure against the next round's, and the slowest round's against the
  fastest's: does a figure taken now hold a few minutes later? Both for one process (A's figure) and for the
  runner as it times (``measure.Runner`` with two processes: the faster of A and B);
and per round: the geomean of every program's runner figure against all rounds', and the two probes.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# every runner this script opens ends with it: a parked worker would be the next round's "fresh" process
os.environ["WORKBENCH_WARM_WORKERS_S"] = "0"

import _quiet  # noqa: E402
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_LEDGER = os.path.join(ROOT, "docs", "results", "al_ansor_sessions", "design-znver1")
ANALYSIS = os.path.join(HERE, "timing_agreement_analysis.md")  # the hand-written reading of the latest run


def ledger_programs(ledger: str) -> list[dict]:
    """Distinct programs ``{"key", "layer", "trace"}``: each ledger run's best at its last checkpoint."""
    out = {}
    for path in sorted(glob.glob(os.path.join(ledger, "*.json"))):
        with open(path) as f:
            entry = json.load(f)
        best = entry["run"].get("best") or {}
        last = best[max(best, key=int)] if best else None
        if last is None:
            continue
        key = f"{entry['layer']}|{last['mod_hash']}"
        out.setdefault(key, {"key": key, "layer": entry["layer"], "trace": last["trace"]})
    return list(out.values())


def build(programs, builder) -> dict:
    """{key: (artifact path, argument shapes)} for every program that builds, its weight-layout transform
    stripped (the weights arrive pre-transformed, as MetaSchedule's builder and the AL-Ansor report have it)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from workbench import space
    from workbench.workloads import registry

    strip = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)
    mods, keys, shapes = [], [], {}
    for p in programs:
        mod = strip(space.schedule_from_trace_json(registry().get(p["layer"]), p["trace"]).mod)
        mods.append(mod)
        keys.append(p["key"])
        shapes[p["key"]] = [tuple(int(x) for x in a.shape) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    return {k: (b.path, shapes[k]) for k, b in zip(keys, builder.build(mods)) if b.path}


def session_order(programs, built, seed: int) -> list[str]:
    """Layer by layer, the programs of a layer shuffled (as a session times its candidates)."""
    rng = random.Random(seed)
    out = []
    for layer in sorted({p["layer"] for p in programs}):
        keys = [p["key"] for p in programs if p["layer"] == layer and p["key"] in built]
        rng.shuffle(keys)
        out.extend(keys)
    return out


def memory_probe_ms(repeats: int = 50) -> float:
    """The median time of ``numpy.add`` over three 2 MB float32 arrays (one thread, 6 MB: L3-resident when the
    host leaves this core complex's L3 to us), in ms."""
    n = (2 << 20) // 4
    a, b, c = np.ones(n, "float32"), np.ones(n, "float32"), np.empty(n, "float32")
    for _ in range(5):
        np.add(a, b, out=c)
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        np.add(a, b, out=c)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3


def time_round(order, built, threads) -> dict:
    """Two fresh runner processes; each program timed in A, then at once in B."""
    from workbench import measure

    a = measure.Runner(threads, number=1, repeat=3, min_repeat_ms=30)
    b = measure.Runner(threads, number=1, repeat=3, min_repeat_ms=30)
    lat = {"A": {}, "B": {}}
    disturbed = 0
    t0 = time.monotonic()
    try:
        for key in order:
            path, shapes = built[key]
            for name, runner in (("A", a), ("B", b)):
                r = runner.run(path, shapes)
                if r.latency_ms is not None:
                    lat[name][key] = r.latency_ms
                    disturbed += bool(r.reading and r.reading.get("wait_fraction", 0) > 0.10)
    finally:
        a.close()
        b.close()
    return {"latency_ms": lat, "disturbed_timings": disturbed, "wall_s": time.monotonic() - t0}


def _stats(ratios) -> dict:
    x = np.asarray(ratios, float)
    return {
        "median": float(np.median(x)),
        "p90": float(np.percentile(x, 90)),
        "max": float(x.max()),
        "over_5pct": int((x > 1.05).sum()),
        "over_10pct": int((x > 1.10).sum()),
        "n": int(len(x)),
    }


def summarize(result: dict) -> dict:
    """The comparisons on the page. "One process" is A's figure; "the runner" is the faster of A and B, which is
    what ``measure.Runner(processes=2)`` (the default) reports for a timing."""
    rounds = result["rounds"]
    keys = sorted(set.intersection(*(set(r["latency_ms"]["A"]) & set(r["latency_ms"]["B"]) for r in rounds)))
    a = np.array([[r["latency_ms"]["A"][k] for k in keys] for r in rounds])  # rounds x programs
    b = np.array([[r["latency_ms"]["B"][k] for k in keys] for r in rounds])
    runner = np.minimum(a, b)

    def ratio(x, y):
        return np.maximum(x, y) / np.minimum(x, y)

    round_geomean = np.exp(np.log(runner / np.exp(np.log(runner).mean(0))).mean(1))
    worst = np.argsort(runner.max(0) / runner.min(0))[::-1][:8]
    return {
        "programs": len(keys),
        "between_processes_one_round": _stats(ratio(a, b).ravel()),
        "between_processes_over_rounds": _stats(ratio(a.mean(0), b.mean(0))),
        "next_round_one_process": _stats(ratio(a[1:], a[:-1]).ravel()),
        "next_round_runner": _stats(ratio(runner[1:], runner[:-1]).ravel()),
        "all_rounds_one_process": _stats(a.max(0) / a.min(0)),
        "all_rounds_runner": _stats(runner.max(0) / runner.min(0)),
        "round_geomean": [round(float(x), 4) for x in round_geomean],
        "worst_between_moments": [
            {
                "key": keys[i],
                "a_ms": [round(float(x), 4) for x in a[:, i]],
                "b_ms": [round(float(x), 4) for x in b[:, i]],
            }
            for i in worst
        ],
    }


def write_page(result: dict, results_dir: str) -> str:
    s = result["summary"]
    proto = result.get("protocol") or {}
    commit = (proto.get("git") or {}).get("commit", "?")[:7]
    lines = [
        "# Timing agreement: between runner processes, and between moments",
        "",
        _quiet.summary_markdown(proto),
        f"Command: `{result['command']}` (commit {commit}), {result['date']}, {result['threads']} threads, "
        f"`{result['cpu']}`. {s['programs']} distinct tuned programs (the best of each run in "
        f"`{os.path.relpath(result['ledger'], ROOT)}`), {len(result['rounds'])} rounds {result['gap_s']:.0f} s "
        "apart; in each round two fresh runner processes A and B time every program one after the other "
        "(number 1, repeat 3, min_repeat_ms 30: the quick preset's timing).",
        "",
        "| comparison | programs | median | p90 | worst | > 5 % | > 10 % |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, key in (
        ("between processes, one round: A vs B, a moment apart (programs x rounds)", "between_processes_one_round"),
        ("between processes over the rounds: A's mean vs B's", "between_processes_over_rounds"),
        ("a round vs the next: one process (A)", "next_round_one_process"),
        ("a round vs the next: the runner (faster of A and B)", "next_round_runner"),
        ("slowest round vs fastest: one process (A)", "all_rounds_one_process"),
        ("slowest round vs fastest: the runner (faster of A and B)", "all_rounds_runner"),
    ):
        r = s[key]
        lines.append(
            f"| {name} | {r['n']} | {r['median']:.3f} | {r['p90']:.3f} | {r['max']:.3f} | {r['over_5pct']} | "
            f"{r['over_10pct']} |"
        )
    lines += [
        "",
        "| round | started | programs' geomean (runner) vs all rounds | calibration probe (compute, L2) | memory probe "
        "(6 MB numpy.add, L3) | timings with run-queue wait > 10 % |",
        "|---|---|---|---|---|---|",
    ]
    for i, (r, g) in enumerate(zip(result["rounds"], s["round_geomean"])):
        lines.append(
            f"| {i + 1} | {r['started']} | {g:.3f} | {r['probe_ms']:.3f} ms | {r['memory_probe_ms']:.3f} ms | "
            f"{r['disturbed_timings']} |"
        )
    lines += ["", "The programs whose runner figure moved most between rounds (A / B per round, ms):", ""]
    lines += ["| program | " + " | ".join(f"round {i + 1}" for i in range(len(result["rounds"]))) + " |"]
    lines += ["|---" * (len(result["rounds"]) + 1) + "|"]
    for w in s["worst_between_moments"]:
        cells = [f"{x:.2f} / {y:.2f}" for x, y in zip(w["a_ms"], w["b_ms"])]
        lines.append(f"| `{w['key'].replace('|', ' ')}` | " + " | ".join(cells) + " |")
    if os.path.exists(ANALYSIS):
        with open(ANALYSIS) as f:
            lines += ["", f.read().strip()]
    page = "\n".join(lines) + "\n"
    with open(os.path.join(results_dir, "timing_agreement.md"), "w") as f:
        f.write(page)
    return page


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ledger", default=DEFAULT_LEDGER, help="an AL-Ansor ledger folder (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds, each with two fresh runner processes (default 6)")
    ap.add_argument("--gap-s", type=float, default=60.0, help="idle seconds between rounds (default 60)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="time only the first N programs (0: all)")
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--force", action="store_true", help="run on a busy machine; the result is marked invalid")
    ap.add_argument("--report-only", action="store_true", help="rewrite the page from timing_agreement.json")
    args = ap.parse_args()
    if args.report_only:
        with open(os.path.join(args.results, "timing_agreement.json")) as f:
            print(write_page(json.load(f), args.results))
        return
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (agreement between moments needs two)")
    if args.gap_s < 0:
        ap.error("--gap-s must not be negative")
    programs = ledger_programs(args.ledger)
    if not programs:
        ap.error(f"no runs with a best program in {args.ledger}")
    if args.limit:
        programs = programs[: args.limit]

    from workbench import measure, tvm_env

    target = tvm_env.host_target_dict(args.threads)
    _quiet.set_thread_env(args.threads)
    protocol = _quiet.Protocol("timing_agreement", args.threads, args.force, host_drift="record")
    protocol.enter("building the programs")
    builder = measure.Builder(target, workers=2, artifact="so")
    built, rounds = {}, []
    try:
        built = build(programs, builder)
        print(f"{len(built)} of {len(programs)} programs built", file=sys.stderr, flush=True)
        for i in range(args.rounds):
            if i:
                time.sleep(args.gap_s)
            _quiet.quiesce()
            check = protocol.enter(f"round {i + 1}")
            started = time.strftime("%H:%M:%S")
            mem = memory_probe_ms()
            r = time_round(session_order(programs, built, i), built, args.threads)
            r.update(started=started, memory_probe_ms=mem, probe_ms=(check or {}).get("probe_ms"))
            rounds.append(r)
            print(f"round {i + 1}: {r['wall_s']:.1f} s, memory probe {mem:.3f} ms", file=sys.stderr, flush=True)
        protocol.finish()
    finally:
        for path, _ in built.values():
            builder.discard(path)
        builder.close()
    result = {
        "command": "python " + " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "threads": args.threads,
        "cpu": target.get("mcpu", "host"),
        "ledger": os.path.abspath(args.ledger),
        "gap_s": args.gap_s,
        "programs": sorted(built),
        "rounds": rounds,
        "protocol": protocol.summary(),
    }
    result["summary"] = summarize(result)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "timing_agreement.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(write_page(result, args.results))


if __name__ == "__main__":
    main()
