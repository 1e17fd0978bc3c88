"""Transfer-tuning reproduction (Gibson & Cano, PACT'22) on the workbench: ResNet-18 -> ResNet-50 and
-> MobileNet-V2's pointwise layers.

1. Source: the ResNet-18 conv layers are tuned in one NetworkSession (gradient task scheduler, the
   artifact's pre-tuning step) into a source store.
2. Transfer-tuning (TT): for every target layer, every same-class source schedule is replayed onto it
   (tile decisions repaired), built, measured and verified; the best is kept, the untuned program is
   the fallback. T_TT = the wall time of that loop (it includes each target's untuned baseline
   measurement, so it is an over-estimate of the paper's T_TT).
3. Full tuning: the target layers are tuned from scratch in one NetworkSession with the same
   per-layer budget as the source; its sum(w * latency) after every round gives the time-to-match curve.

Network latency = sum over the selected unique layers of multiplicity x latency; "untuned" = the
workbench's naive program (the unscheduled PrimFunc built by TVM, one call), measured once per target
during TT and used as the one baseline for S_TT and S_full. Exact-shape matches (a source layer with
the identical shape) are reported apart from true transfers.

The TT and full-tuning latencies the page compares are not the in-session ones: at the end, every target
layer's TT best and full-tuning best are rebuilt from their stored traces and re-measured in one process,
interleaved in shuffled order, ``--repeats`` times (the median is the layer's latency), so a host that drifts
between the phases cannot favour one side. The time-to-match curve compares in-session latencies on both sides.
Last, the standalone self-check: each of those bests is timed again by the user's own command
(``workbench best DB LAYER --time``), alone, in a fresh process, and compared with the page's figure (within 5 %).

The run follows the benchmark protocol (``_quiet.py``): a quiet check before the start and before every phase
(source tuning; per target: transfer-tuning, timing the default schedules, full tuning; the re-measurement;
status 3 and one line when the machine is busy, ``--force`` marks the result invalid), the calibration probe
before and after (a slow host is recorded, an unsteady one refused), every thread pool (tuning sessions, TT's
measurements, the default schedules' timing, the re-measurement) sized to ``--threads``.

    python benchmarks/transfer_tuning.py --mode reduced   # 6 R18 sources, 6 R50 + 4 MBv2 targets, 32 trials/layer
    python benchmarks/transfer_tuning.py --mode full      # all 11 R18, 23 R50, 17 MBv2 pointwise layers, 64/layer

writes docs/results/transfer_tuning.md and transfer_tuning.json (databases under benchmarks/out/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _quiet  # noqa: E402
from workbench.events import EventKind as K  # noqa: E402
from workbench.store import remove_store  # noqa: E402

PAPER = {"fraction_avg": 49.13, "fraction_max": 88.41, "time_ratio_server": 6.5, "time_ratio_edge": 10.8}

MODES = {
    "reduced": {
        "source": [
            "resnet18.conv2",
            "resnet18.conv4",
            "resnet18.conv5",
            "resnet18.conv7",
            "resnet18.conv8",
            "resnet18.conv11",
        ],
        # 2 exact-shape matches (conv3 = R18 conv2, conv11 = R18 conv5) and 4 true transfers
        "resnet50": [
            "resnet50.conv3",
            "resnet50.conv11",
            "resnet50.conv2",
            "resnet50.conv10",
            "resnet50.conv13",
            "resnet50.conv16",
        ],
        "mobilenet_v2": [
            "mobilenet_v2.pw24_144_56",
            "mobilenet_v2.pw144_24_56",
            "mobilenet_v2.pw64_384_14",
            "mobilenet_v2.pw384_64_14",
        ],
        "trials_per_layer": 32,
    },
    # a check that the script runs end to end (about 9 min on 2 cores); its numbers mean nothing
    "smoke": {
        "source": ["resnet18.conv11"],
        "resnet50": ["resnet50.conv23", "resnet50.conv22"],
        "mobilenet_v2": ["mobilenet_v2.pw960_160_7"],
        "trials_per_layer": 4,
    },
    "full": {"source": "resnet18", "resnet50": "resnet50", "mobilenet_v2": "pointwise", "trials_per_layer": 64},
}


def source_from_store(db: str) -> tuple[list, int]:
    """The layers a given source store (``--source-db``) holds a verified best for, as workloads (from their
    stored specs), and how many programs it measured for them."""
    from workbench.store import RecordStore
    from workbench.workloads import workload_from_spec

    if not os.path.exists(db):
        sys.exit(f"transfer_tuning.py: --source-db {db} does not exist")
    store = RecordStore(db, readonly=True)
    try:
        specs = {}
        for sess in store.sessions():
            for spec in sess["spec"] if isinstance(sess["spec"], list) else [sess["spec"]]:
                specs.setdefault(spec["name"], spec)
        per = store.summary()["workloads"]
    finally:
        store.close()
    names = [n for n, x in per.items() if x.get("best_latency_ms") is not None and n in specs]
    if not names:
        sys.exit(f"transfer_tuning.py: --source-db {db} holds no verified program")
    return [workload_from_spec(specs[n]) for n in names], sum(int(per[n]["measured"]) for n in names)


def _layers(sel, network):
    from workbench.workloads import registry

    reg = registry()
    if sel == network:
        return list(reg.networks[network])
    if sel == "pointwise":
        return [w for w in reg.networks[network] if w.op == "conv2d" and w.params["kernel"] == 1]
    return [reg.get(n) for n in sel]


def default_schedule(w):
    """The 'minimal default' untuned program of the design notes: in every block the leading spatial loops are
    fused and parallel; in a reduction block the last spatial loop (NHWC: the output channel, contiguous in the
    weight and the output) moves inside the reduction loops so that LLVM vectorizes it; a spatial-only block
    vectorizes its innermost loop."""
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(w.mod)
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(b)
        kinds = [int(iv.iter_type) for iv in sch.get(b).iter_vars]
        if len(kinds) != len(loops):
            continue
        spatial = [l for l, k in zip(loops, kinds) if k == 0]
        reduce = [l for l, k in zip(loops, kinds) if k == 2]
        if not spatial:
            continue
        if reduce and len(spatial) > 1:
            sch.reorder(*spatial[:-1], *reduce, spatial[-1])
            outer = spatial[:-1]
        elif not reduce and len(spatial) > 1 and int(sch.get(spatial[-1]).extent) <= 64:
            sch.vectorize(spatial[-1])
            outer = spatial[:-1]
        else:
            outer = spatial
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    return sch.mod


def measure_default(targets, target="host"):
    """(ms per layer) of default_schedule, timed like every candidate (quick preset's runner)."""
    from workbench import measure, presets, tvm_env

    tvm_env.setup()
    td = tvm_env.parse_target(target)
    p = presets.get("quick")
    builder = measure.make_builder(td, p)
    runner = measure.make_runner(None, td, p)
    out = {}
    try:
        builds = builder.build([default_schedule(w) for w in targets])
        for w, b in zip(targets, builds):
            r = runner.run(b.path, w.arg_shapes) if b.path else None
            out[w.name] = None if r is None or r.latency_ms is None else r.latency_ms
            builder.discard(b.path)
    finally:
        builder.close()
        runner.close()
    return out


def tune_network(layers, trials_per_layer, db, seed, per_round, strategy, label, target="host"):
    from workbench.network import NetworkSession

    s = NetworkSession(
        layers,
        target=target,
        trials=trials_per_layer * len(layers),
        db=db,
        seed=seed,
        strategy=strategy,
        trials_per_round=per_round,
        name=label,
    )
    t = time.time()
    s.subscribe(
        lambda e: (
            e.kind == K.NETWORK_ROUND
            and print(
                f"  [{label}] round {e.data['round']:3d} {e.data['workload']:28s} trials {e.data['trials_done']:4d} "
                f"est {e.data['estimated_latency_ms']:.3f} ms  {time.time() - t:6.0f} s",
                flush=True,
            )
        )
    )
    summ = s.run()
    return summ, list(s.history), time.time() - t


def run_target(name, targets, source_db, bank_params, args, out, protocol, target):
    from workbench.transfer import transfer

    protocol.phase(f"transfer-tuning onto {name}")
    print(f"# transfer-tuning onto {name}: {len(targets)} layers", flush=True)
    tt_db = os.path.join(out, f"tt_{name}.db")
    remove_store(tt_db)  # the re-measurement and the self-check read this store's bests: this run's only
    t = time.time()
    tt = transfer(source_db, targets, target=target, db=tt_db)
    t_tt_wall = time.time() - t
    _quiet.quiesce()
    protocol.phase(f"timing {name}'s default schedules")
    default_ms = measure_default(targets, target)
    _quiet.quiesce()
    protocol.phase(f"full tuning of {name}")
    print(f"# full tuning of {name}: {args.trials} trials per layer", flush=True)
    full_db = os.path.join(out, f"full_{name}.db")
    remove_store(full_db)
    summ, hist, t_full = tune_network(
        targets, args.trials, full_db, args.seed, args.per_round, args.strategy, f"full-{name}", target
    )
    layers = []
    for w, r in zip(targets, tt):
        full_best = next(x["best_latency_ms"] for x in summ["tasks"] if x["workload"] == w.name)
        exact_src = [n for n, (ck, p) in bank_params.items() if ck == w.class_key and p == w.params]
        layers.append(
            {
                "workload": w.name,
                "weight": w.weight,
                "flops": w.flops,
                "class": w.class_key,
                "exact_source": exact_src[0] if exact_src else None,
                "naive_ms": r.naive_latency_ms,
                "default_ms": default_ms[w.name],
                "tt_ms": r.best_latency_ms,
                "tt_source": r.source,
                "tt_exact": r.exact_match,
                "tt_repaired": r.repaired,
                "tt_candidates": r.candidates,
                "tt_valid": r.valid,
                "tt_seconds": r.search_seconds,
                "full_ms": full_best,
                "tt_db": os.path.join(out, f"tt_{name}.db"),
                "full_db": full_db,
                "full_naive_ms": next(x["naive_latency_ms"] for x in summ["tasks"] if x["workload"] == w.name),
            }
        )
    res = {
        "target": name,
        "layers": layers,
        "t_tt_s": sum(r.search_seconds for r in tt),
        "t_tt_wall_s": t_tt_wall,
        "t_full_s": t_full,
        "full_trials": summ["trials"],
        "curve": [],
    }
    naive = {x["workload"]: x["naive_ms"] for x in layers}
    weights = {x["workload"]: x["weight"] for x in layers}
    for h in hist:
        lat = sum(weights[k] * (v if v is not None else naive[k]) for k, v in h["per_task_ms"].items())
        res["curve"].append({"elapsed_s": h["elapsed_s"], "trials": h["trials_done"], "latency_ms": lat})
    _regroup(res)
    return res


def _regroup(res):
    res["groups"] = {
        g: _group(res["layers"], res, sel)
        for g, sel in (
            ("all", lambda x: True),
            ("exact", lambda x: x["exact_source"] is not None),
            ("transfer", lambda x: x["exact_source"] is None),
        )
    }


def remeasure_bests(targets, repeats, target):
    """Every target layer's TT best and full-tuning best, re-measured interleaved (al_ansor.remeasure); the
    layers' ``tt_ms`` / ``full_ms`` become those medians (in-session values kept as ``*_session_ms``)."""
    from al_ansor import remeasure

    from workbench import RecordStore

    entries = []
    for r in targets:
        for x in r["layers"]:
            for side, db in (("tt", x["tt_db"]), ("full", x["full_db"])):
                store = RecordStore(db, readonly=True)
                try:
                    rec = store.best(x["workload"])
                finally:
                    store.close()
                if rec is not None:
                    entries.append(((r["target"], x["workload"], side), x["workload"], rec))
    got = remeasure(entries, repeats, target)
    for r in targets:
        for x in r["layers"]:
            for side in ("tt", "full"):
                x[f"{side}_session_ms"] = x[f"{side}_ms"]
                m = got.get((r["target"], x["workload"], side))
                x[f"{side}_spread"] = m["spread"] if m else None
                if m and m["median_ms"] is not None:
                    x[f"{side}_ms"] = m["median_ms"]
        _regroup(r)


def self_check(targets, threads):
    """Every layer's TT best and full-tuning best of the page, timed again by the user's own command, alone
    (``_quiet.standalone_self_check``: ``workbench best DB LAYER --time`` in a fresh process each), against the
    page's figure (the interleaved re-measurement's median, or the in-session latency without one)."""
    from workbench import RecordStore

    kernels = []
    for r in targets:
        for x in r["layers"]:
            for side in ("tt", "full"):
                store = RecordStore(x[f"{side}_db"], readonly=True)
                try:
                    has_best = store.best(x["workload"]) is not None
                finally:
                    store.close()
                if has_best and x[f"{side}_ms"] is not None:
                    kernels.append(
                        {
                            "db": x[f"{side}_db"],
                            "workload": x["workload"],
                            "table_ms": x[f"{side}_ms"],
                            "label": f"{x['workload']} ({'TT' if side == 'tt' else 'full tuning'})",
                        }
                    )
    return _quiet.standalone_self_check(kernels, threads, ROOT)


def _net(layers, key):
    return sum(x["weight"] * (x[key] if x[key] is not None else x["naive_ms"]) for x in layers)


def _group(layers, res, sel):
    ls = [x for x in layers if sel(x)]
    if not ls:
        return None
    naive, tt, full = _net(ls, "naive_ms"), _net(ls, "tt_ms"), _net(ls, "full_ms")
    s_tt, s_full = naive / tt, naive / full
    g = {
        "layers": [x["workload"] for x in ls],
        "naive_ms": naive,
        "tt_ms": tt,
        "full_ms": full,
        "s_tt": s_tt,
        "s_full": s_full,
        "fraction": (s_tt - 1) / (s_full - 1) if s_full > 1 else None,
    }
    # the same against the parallel default schedule (layers where it failed to build count with naive)
    dflt = sum(x["weight"] * (x["default_ms"] or x["naive_ms"]) for x in ls)
    d_tt, d_full = dflt / tt, dflt / full
    g.update(
        {
            "default_ms": dflt,
            "s_tt_default": d_tt,
            "s_full_default": d_full,
            "fraction_default": (d_tt - 1) / (d_full - 1) if d_full > 1 else None,
        }
    )
    if len(ls) == len(layers):  # time-to-match only for the whole selection (the curve is for all layers)
        t_tt = res["t_tt_s"]
        # the curve holds in-session latencies: compare it with TT's in-session latency
        tt_session = _net(ls, "tt_session_ms") if all("tt_session_ms" in x for x in ls) else tt
        match = next((c for c in res["curve"] if c["latency_ms"] <= tt_session), None)
        equal = next((c for c in res["curve"] if c["elapsed_s"] >= t_tt), res["curve"][-1] if res["curve"] else None)
        g.update(
            {
                "t_tt_s": t_tt,
                "time_to_match_s": match["elapsed_s"] if match else None,
                "matched": match is not None,
                "time_ratio": (match["elapsed_s"] if match else res["curve"][-1]["elapsed_s"]) / t_tt,
                "full_at_equal_time_ms": equal["latency_ms"] if equal else None,
            }
        )
    return g


def write_report(data, results=RESULTS):
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, "transfer_tuning.json"), "w") as f:
        json.dump(data, f, indent=1)
    m = data["mode"]
    L = [
        "# Transfer-tuning reproduction (ResNet-18 -> ResNet-50, -> MobileNet-V2 pointwise)",
        "",
        _quiet.summary_markdown(data.get("protocol")),
    ]
    if data.get("source_given"):
        src = (
            f"the source store `{data['source_db']}` given with `--source-db` ({len(data['source_layers'])} layers "
            f"with a verified program, {data.get('source_measured')} programs measured; not tuned by this run), "
            f"{data['trials_per_layer']} trials per layer for full tuning"
        )
        src_time = "source tuning not part of this run"
    else:
        src = (
            f"{len(data['source_layers'])} ResNet-18 source layers, {data['trials_per_layer']} trials per layer for "
            "source and full tuning"
        )
        src_time = f"source tuning {data['source_s']:.0f} s"
    L.append(
        f"Measured on {data['machine']} with `{data['command']}` (mode **{m}**: {src}, {data['per_round']} per "
        f"round, strategy `{data['strategy']}`, seed {data['seed']}). Total wall time {data['wall_s'] / 60:.1f} min "
        f"({src_time})."
    )
    if data.get("git"):
        L.append("")
        L.append(f"Code: {data['git']}.")
    L.append("")
    L.append(
        "Definitions as in the paper's artifact: S_x = t_untuned / t_x on the network latency "
        "sum(multiplicity x layer latency) over the selected unique layers; fraction = (S_TT - 1)/(S_full - 1); "
        "time ratio = (wall time full tuning needs to reach TT's latency) / T_TT. "
        "**Untuned** is the workbench's naive program (unscheduled PrimFunc, single call), not TVM's default "
        "schedule, so S values are large; absolute latencies are given for that reason. **Full** is tuning "
        f"from scratch with the same {data['trials_per_layer']} trials per layer as the source "
        "(the paper uses Ansor's recommended 20,000 trials per model), so S_full is far from converged and the "
        "fraction is relative to a short full-tuning run. T_TT includes each target's untuned-baseline "
        "measurement (an over-estimate); the full-tuning clock starts with its session (its baseline "
        "measurements included too)."
    )
    if data.get("repeats"):
        L.append("")
        L.append(
            f"**TT ms** and **full ms** are medians of one interleaved re-measurement ({data['repeats']} rounds, "
            "shuffled order, one process) of every layer's TT best and full-tuning best, rebuilt from their "
            "stored traces; untuned and default are single in-run timings of programs 10-150x slower (their "
            "noise moves S_TT and S_full together). Time-to-match compares the full-tuning curve with TT's "
            "in-session latency (both measured during tuning)."
        )
    L.append("")
    L.append(
        "| target | layers | untuned ms | TT ms | full ms | S_TT | S_full | fraction | T_TT s | full reaches TT at s | "
        "time ratio | full at T_TT ms |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in data["targets"]:
        for gname, g in r["groups"].items():
            if g is None:
                continue
            frac = "-" if g["fraction"] is None else f"{100 * g['fraction']:.1f} %"
            if gname == "all":
                ttm = (
                    f"{g['time_to_match_s']:.0f}"
                    if g["matched"]
                    else f"not within budget (> {r['curve'][-1]['elapsed_s']:.0f})"
                )
                ratio = f"{g['time_ratio']:.1f}x" + ("" if g["matched"] else " (lower bound)")
                extra = f"{g['t_tt_s']:.0f} | {ttm} | {ratio} | {g['full_at_equal_time_ms']:.3f}"
            else:
                extra = "- | - | - | -"
            L.append(
                f"| {r['target']} ({gname}) | {len(g['layers'])} | {g['naive_ms']:.3f} | {g['tt_ms']:.3f} | "
                f"{g['full_ms']:.3f} | {g['s_tt']:.2f} | {g['s_full']:.2f} | {frac} | {extra} |"
            )
    L.append(
        f"| paper (server CPU, 10 models) | | | | | | | {PAPER['fraction_avg']} % avg, {PAPER['fraction_max']} % max "
        f"| | | {PAPER['time_ratio_server']}x (edge {PAPER['time_ratio_edge']}x) | |"
    )
    L.append("")
    L.append(
        "The same against the **parallel default schedule** (every block's leading spatial loops fused and "
        "parallel, innermost spatial loop vectorized: the design notes' 'minimal default'), a much stronger "
        "baseline than the naive program:"
    )
    L.append("")
    L.append("| target | default ms | TT ms | full ms | S_TT | S_full | fraction |")
    L.append("|---|---|---|---|---|---|---|")
    for r in data["targets"]:
        for gname, g in r["groups"].items():
            if g is None:
                continue
            frac = "-" if g["fraction_default"] is None else f"{100 * g['fraction_default']:.1f} %"
            L.append(
                f"| {r['target']} ({gname}) | {g['default_ms']:.3f} | {g['tt_ms']:.3f} | {g['full_ms']:.3f} | "
                f"{g['s_tt_default']:.2f} | {g['s_full_default']:.2f} | {frac} |"
            )
    L.append("")
    L.append(
        "Per layer (multiplicity, TT's chosen source; *exact* = the source has the identical shape; "
        "*repaired* = some tile decision no longer divided the new extents and was moved to the nearest divisor):"
    )
    L.append("")
    for r in data["targets"]:
        L.append(f"**{r['target']}**")
        L.append("")
        L.append(
            "| layer | x | untuned ms | default ms | TT ms | TT source | exact | repaired | valid/cands | full ms | "
            "S_TT | S_full | TT / full in session ms |"
        )
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for x in r["layers"]:
            tt = x["tt_ms"]
            d = x["default_ms"]
            L.append(
                f"| {x['workload']} | {x['weight']} | {x['naive_ms']:.3f} | {'-' if d is None else f'{d:.3f}'} | "
                f"{'-' if tt is None else f'{tt:.3f}'} | "
                f"{x['tt_source'] or 'untuned (fallback)'} | {'yes' if x['tt_exact'] else 'no'} | "
                f"{'yes' if x['tt_repaired'] else 'no'} | {x['tt_valid']}/{x['tt_candidates']} | "
                f"{'-' if x['full_ms'] is None else format(x['full_ms'], '.3f')} | "
                f"{x['naive_ms'] / (tt or x['naive_ms']):.1f} | "
                f"{'-' if x['full_ms'] is None else format(x['naive_ms'] / x['full_ms'], '.1f')} | "
                f"{_ms(x.get('tt_session_ms'))} / {_ms(x.get('full_session_ms'))} |"
            )
        L.append("")
    L.append(
        f"Class coverage: MobileNet-V2's depthwise layers have no same-class source in ResNet-18 "
        f"(conv2d sources only), so TT leaves them untuned; the pointwise (1x1 conv2d) layers are "
        f"{100 * data['mbv2_pointwise_flop_share']:.1f} % of MobileNet-V2's conv FLOPs."
    )
    L.append("")
    L.append("Full-tuning curves (sum w x latency after each round) are in transfer_tuning.json (`curve`).")
    if data.get("self_check"):
        L.append("")
        L.append(
            _quiet.self_check_markdown(data["self_check"], what="Each TT and full-tuning best of the per-layer tables")
        )
    with open(os.path.join(results, "transfer_tuning.md"), "w") as f:
        f.write("\n".join(L) + "\n")


def _ms(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _git_state() -> str:
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.split("\n")
        changed = sorted(ln[3:] for ln in dirty if ln.strip())
        return head + (f" + uncommitted changes to {', '.join(changed)}" if changed else "")
    except OSError:
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=sorted(MODES), default="reduced")
    ap.add_argument("--trials", type=int, default=None, help="trials per layer (source and full tuning)")
    ap.add_argument("--per-round", type=int, default=16)
    ap.add_argument("--strategy", default="no-rewrite")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "out", "transfer_tuning"))
    ap.add_argument("--source-db", help="reuse a tuned source store instead of tuning ResNet-18 again")
    ap.add_argument("--targets", default="resnet50,mobilenet_v2")
    ap.add_argument(
        "--repeats",
        type=int,
        default=11,
        help="interleaved re-measurement of every layer's TT and full-tuning best at the end (0: report the "
        "in-session latencies)",
    )
    ap.add_argument("--no-write", action="store_true", help="print the results, do not write docs/results")
    ap.add_argument("--results", default=RESULTS, help="where transfer_tuning.md/.json go (default docs/results)")
    ap.add_argument(
        "--threads",
        type=int,
        default=_quiet.available_cores(),
        help="threads of every session, transfer measurement and timing (TVM_NUM_THREADS, "
        "OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, the target's num-cores; default: all available "
        "cores, %(default)s)",
    )
    ap.add_argument(
        "--force", action="store_true", help="run even when the machine is not quiet; the result is then marked invalid"
    )
    args = ap.parse_args(argv)
    mode = MODES[args.mode]
    args.trials = args.trials or mode["trials_per_layer"]
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    from workbench import tvm_env
    from workbench.workloads import registry

    target = tvm_env.host_target_dict(args.threads)
    _quiet.set_thread_env(args.threads)
    # the comparisons come from one interleaved re-measurement: a slow host is recorded, not refused
    protocol = _quiet.Protocol(
        "transfer_tuning", args.threads, args.force, host_drift="record" if args.repeats else "refuse"
    )
    protocol.start()
    source = _layers(mode["source"], "resnet18")
    source_measured = None
    if args.source_db:
        source_db, t_src = args.source_db, None
        source, source_measured = source_from_store(source_db)
    else:
        source_db = os.path.join(args.out, "source_resnet18.db")
        remove_store(source_db)
        protocol.phase("tuning the ResNet-18 source")
        print(f"# source: {len(source)} ResNet-18 layers x {args.trials} trials", flush=True)
        _, _, t_src = tune_network(
            source, args.trials, source_db, args.seed, args.per_round, args.strategy, "source", target
        )
    bank_params = {w.name: (w.class_key, w.params) for w in source}
    targets = []
    for name in args.targets.split(","):
        _quiet.quiesce()
        targets.append(
            run_target(name, _layers(mode[name], name), source_db, bank_params, args, args.out, protocol, target)
        )
    if args.repeats:
        _quiet.quiesce()
        protocol.phase("re-measuring the TT and full-tuning bests, interleaved")
        print(f"# re-measuring every layer's TT and full best, interleaved, {args.repeats} repeats", flush=True)
        remeasure_bests(targets, args.repeats, target)
    _quiet.quiesce()
    protocol.phase("the standalone self-check")
    print("# standalone self-check: each TT and full best timed by `workbench best DB LAYER --time`, alone", flush=True)
    checked = self_check(targets, args.threads)
    protocol.finish()
    mb = registry().networks["mobilenet_v2"]
    pw = sum(w.weight * w.flops for w in mb if w.op == "conv2d" and w.params["kernel"] == 1)
    data = {
        "mode": args.mode,
        "command": "python " + " ".join(["benchmarks/transfer_tuning.py"] + (argv or sys.argv[1:])),
        "machine": f"{platform.machine()} {tvm_env.host_mcpu()}, {tvm_env.available_cores()} cores",
        "threads": args.threads,
        "target": target,
        "protocol": protocol.summary(),
        "trials_per_layer": args.trials,
        "repeats": args.repeats,
        "per_round": args.per_round,
        "strategy": args.strategy,
        "seed": args.seed,
        "source_layers": [w.name for w in source],
        "source_db": source_db,
        "source_given": bool(args.source_db),
        "source_measured": source_measured,
        "source_s": t_src,
        "targets": targets,
        "paper": PAPER,
        "mbv2_pointwise_flop_share": pw / sum(w.weight * w.flops for w in mb),
        "self_check": checked,
        "wall_s": time.time() - t0,
        "versions": tvm_env.library_versions(),
        "git": _git_state(),
    }
    if not args.no_write:
        write_report(data, args.results)
    for r in targets:
        g = r["groups"]["all"]
        frac = "-" if g["fraction"] is None else f"{100 * g['fraction']:.1f} %"
        fd = "-" if g["fraction_default"] is None else f"{100 * g['fraction_default']:.1f} %"
        print(
            f"{r['target']}: vs default schedule: S_TT {g['s_tt_default']:.2f}  S_full {g['s_full_default']:.2f}  "
            f"fraction {fd}"
        )
        print(
            f"{r['target']}: S_TT {g['s_tt']:.2f}  S_full {g['s_full']:.2f}  fraction {frac}  "
            f"time ratio {g['time_ratio']:.1f}x{'' if g['matched'] else ' (not matched: lower bound)'}"
        )
    print(f"total {(time.time() - t0) / 60:.1f} min")
    return data


if __name__ == "__main__":
    main()
