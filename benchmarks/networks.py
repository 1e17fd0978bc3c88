"""Whole networks end to end: the workbench's tuned Relax ResNet-18 and MobileNet-V2 against PyTorch on the CPU.

    python benchmarks/networks.py                                   # both networks, 200/500/1000/2000 trials: hours
    python benchmarks/networks.py --networks mobilenet_v2 --budgets 100,300 --resume
    python benchmarks/networks.py --budgets 16,32 --image 64 --out /tmp/nw --results /tmp/nw --force --host-wait 0  # smoke

For each network (batch 1, float32, random weights drawn from ``--seed``; ``workbench.relax_model``):

1. the weights and one input are written in the safetensors layout (``relax_model.save_weights``), so PyTorch
   builds the identical network (``_torch_networks.py``, in torch's own environment ``.venv-torch``; torch never
   enters the workbench's);
2. the untuned baseline: ``relax_model.build`` with an empty database (TVM's default lowering of every function);
3. ONE ``NetworkSession`` (quick preset, ``no-rewrite``, the gradient task scheduler) over every extracted
   task, run to the largest budget; when it reaches each budget of ``--budgets`` it is held (the tuning
   thread waits) while the best verified record of every task goes into a MetaSchedule database, the whole
   model is compiled with it and timed end to end; then it goes on: one search, not one per budget;
4. PyTorch's two best CPU modes, each in a process of its own: eager with channels_last, and
   ``torch.jit.trace`` + ``freeze`` + ``optimize_for_inference``; the better one is "PyTorch's best". For
   ``resnet18-int8`` (``relax_model.resnet18_int8``: the same float32 weights quantized, int8 per channel, uint8
   activations per tensor) PyTorch's quantized backend with the same int8 parameters, engine ``x86`` and
   ``fbgemm``. ``resnet18-nhwc`` is the float32 ResNet-18 built with NHWC activations (``layout="NHWC"``: the
   same input, weights and output; PyTorch runs the same network);
5. after the largest budget, the headline ratio is measured side by side (``time_interleaved``): in each of
   ``--passes`` passes a fresh process per side (PyTorch's best mode, the tuned model), then ``--rounds`` rounds in
   which each side, alone, times two samples, the order reversed each round. This host's speed for a whole network
   drifts by 10-60 % within seconds, with the calibration probe unmoved (cause not identified; a memory-bound
   probe does not track it either: ``networks_analysis.md``), and a process of either side can run slow for its whole life: two sides
   timed a second apart meet the same host, several processes per side dilute a slow one. The page gives three
   readings of PyTorch / TVM: the pooled medians, the medians of each side's fastest process, and the median of
   the rounds' ratios; the goal is met only when all three reach it. ``--self-check`` times the table again the
   same way and checks each latency and each reading; ``--retime-final`` replaces the table by a new timing;
6. every TVM build's output is compared with PyTorch's first mode's output on the same input: they must agree
   within ``TOLERANCE[dtype]`` x max(1, max |PyTorch output|): float32 1e-3 (sums in a different order differ
   by ~1e-6 of the output scale here; a wrong kernel is off by O(1)); int8 1e-2 (the integer arithmetic is the
   same on both sides, but a requantization whose float product lands on the other side of a rounding tie moves
   one activation by one step, and that step propagates: PyTorch's own two int8 engines differ from each other by
   0.7 % of the scale on ResNet-18 at 224, TVM's builds from either by 0.6-0.75 %). TVM's output is judged against
   the closest of PyTorch's modes.

The run follows the benchmark protocol (``_quiet.py``): a quiet check before the start, before the tuning and
before every timing (status 3 and one line when the machine is busy; ``--force`` marks the result invalid), the
calibration probe before and after (``--host-drift record``: a host slower than its best is recorded on the page,
not refused; its steadiness is still required), every thread pool sized to ``--threads`` in every process (the tuner's, each
TVM timing process, each torch process), each library timed alone in its own process with ``quiesce()``
between two of them, medians of ``--repeats`` samples (each >= 100 ms of calls) with their spread.

``--resume`` keeps every network already finished in ``--out``/networks-partial.json and tunes the others; a
network whose tuning was interrupted starts again in a fresh store (its old store is kept beside it): a
``NetworkSession`` cannot be resumed mid-way, and its checkpoints must come from one search.

Writes ``docs/results/networks.md`` and ``networks.json`` (``--results``); stores, databases, weights and
inputs go to ``benchmarks/out/networks/`` (``--out``). ``--report-only`` rewrites the page from the JSON.

``python benchmarks/networks.py --worker THREADS`` is the TVM timing process (a ``_protocol`` worker).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _protocol  # noqa: E402
import _quiet  # noqa: E402
import _report  # noqa: E402

from workbench.relax_model import COMPARE_TOLERANCE as TOLERANCE  # noqa: E402  (one table: the CLI's check too)

# Each network: (architecture, dtype, the model constructor's keyword arguments). resnet18-nhwc is another build
# of resnet18 (the same weights, input and output; PyTorch runs the same network for both).
BUILDS = {
    "resnet18": ("resnet18", "float32", {}),
    "mobilenet_v2": ("mobilenet_v2", "float32", {}),
    "resnet18-int8": ("resnet18", "int8", {}),
    "resnet18-nhwc": ("resnet18", "float32", {"layout": "NHWC"}),
}
NETWORKS = tuple(BUILDS)
# Hand-written reading of the measured figures, appended to the page (rewrite it with the figures it reads:
# ``--report-only`` regenerates the page from networks.json).
ANALYSIS = os.path.join(HERE, "networks_analysis.md")
DEFAULT_BUDGETS = (200, 500, 1000, 2000)
# PyTorch's modes per dtype; the first one's output is the reference
TORCH_MODES = {"float32": ("eager-channels_last", "jit-frozen"), "int8": ("quantized-x86", "quantized-fbgemm")}
TARGET_SPEEDUP = 1.0  # the goal: end to end at least as fast as PyTorch's best mode within the largest budget


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_budgets(text: str) -> list[int]:
    try:
        budgets = sorted({int(b) for b in text.split(",") if b.strip()})
    except ValueError:
        raise SystemExit(f"networks.py: --budgets must be comma-separated trial counts, got {text!r}") from None
    if not budgets or budgets[0] < 1:
        raise SystemExit(f"networks.py: --budgets must be positive trial counts, got {text!r}")
    return budgets


def parse_networks(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in NETWORKS]
    if bad or not names:
        raise SystemExit(f"networks.py: unknown network {bad[0] if bad else text!r}; choose from {', '.join(NETWORKS)}")
    return names


def split_name(name: str) -> tuple[str, str]:
    """A network's architecture and dtype (``BUILDS``): resnet18-int8 -> (resnet18, int8), resnet18-nhwc ->
    (resnet18, float32)."""
    arch, dtype, _ = BUILDS[name]
    return arch, dtype


def model_kwargs(name: str) -> dict:
    """The model constructor's keyword arguments of a network (``BUILDS``): resnet18-nhwc -> {"layout": "NHWC"}."""
    return dict(BUILDS[name][2])


def agreement(output: list, reference: list, dtype: str = "float32") -> dict:
    """How far an output is from the reference's: max abs error, the scale, and whether it is within the dtype's
    TOLERANCE x the scale."""
    if len(output) != len(reference):
        return {"max_abs_error": None, "scale": None, "matches": False}
    err = max((abs(a - b) for a, b in zip(output, reference)), default=0.0)
    scale = max(1.0, max((abs(b) for b in reference), default=0.0))
    return {"max_abs_error": err, "scale": scale, "matches": err <= TOLERANCE[dtype] * scale}


def agreement_closest(output: list, references: dict, dtype: str = "float32") -> dict:
    """``agreement`` with the closest of several references (PyTorch's modes, by name), which decides, and the
    error to each (``error_by_mode``). PyTorch's two int8 engines round some requantizations the other way and
    differ from each other by as much as from TVM: an int8 output is judged against the engine it agrees with."""
    per = {m: agreement(output, ref, dtype) for m, ref in references.items()}
    closest = min(per, key=lambda m: float("inf") if per[m]["max_abs_error"] is None else per[m]["max_abs_error"])
    return dict(per[closest], closest_mode=closest, error_by_mode={m: a["max_abs_error"] for m, a in per.items()})


# ---------------------------------------------------------------- the TVM timing process (a _protocol worker)

_VM: dict = {}


def _worker_setup(msg):
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from workbench import relax_model as rm
    from workbench import tvm_env

    tvm_env.setup()
    tvm_env.configure_thread_pool(int(os.environ["TVM_NUM_THREADS"]))  # as the workbench's runner does
    config, weights = rm.load_weights(msg["weights"])
    model = rm.from_config(config, weights)
    _, inputs = rm.load_tensors(msg["input"])
    db = ms.database.JSONDatabase(work_dir=msg["db"]) if msg.get("db") else ms.database.MemoryDatabase()
    t0 = time.time()
    ex = rm.build(model, db, msg["target"])
    compile_s = time.time() - t0
    dev = tvm.cpu()
    vm = relax.VirtualMachine(ex, dev)
    x = tvm.runtime.tensor(np.ascontiguousarray(inputs["x"]), dev)
    out = vm["forward"](x).numpy()
    _VM.update(vm=vm, x=x, dev=dev)
    return {
        "output": [float(v) for v in out.reshape(-1)],
        "output_shape": list(out.shape),
        "compile_s": round(compile_s, 2),
        "applied": rm.applied(model, db, msg["target"]) if msg.get("db") else [],
        "tvm_threads": os.environ.get("TVM_NUM_THREADS"),
    }


def _worker_time(msg):
    vm, x, dev = _VM["vm"], _VM["x"], _VM["dev"]
    repeats, min_ms = int(msg.get("repeats", 10)), int(msg.get("min_repeat_ms", 100))
    timer = vm.time_evaluator("forward", dev, number=1, repeat=repeats, min_repeat_ms=min_ms)
    timer(x)  # warm-up: the thread pool starts
    with _protocol.timing_meter(int(os.environ.get("TVM_NUM_THREADS", "1"))) as m:
        samples = [float(s) for s in timer(x).results]
    return dict(samples=samples, **m.result)


# ---------------------------------------------------------------- one library alone in its own process


def time_in_process(argv, setup: dict, threads: int, repeats: int, protocol, phase: str) -> dict:
    """Quiesce, check the machine, start the process, set up, time, close: one library alone."""
    _quiet.quiesce()
    protocol.phase(phase)
    log(f"{phase}: {repeats} samples, alone in its own process")
    info, timed = _quiet.set_up_and_time(argv, setup, threads, repeats, ROOT)
    stats = _report.summarize(timed["samples"])
    return dict(
        info,
        latency_ms=stats["median"] * 1e3,
        min_ms=stats["min"] * 1e3,
        max_ms=stats["max"] * 1e3,
        spread_pct=stats["spread_pct"],
        samples_ms=[s * 1e3 for s in timed["samples"]],
        wait_fraction=timed.get("wait_fraction"),
        other_cores=timed.get("other_cores"),
    )


def tvm_side(files: dict, target: dict, db_dir, threads: int) -> tuple[list, dict]:
    """(argv, setup) of the TVM timing process for the model compiled with the database in ``db_dir`` (None:
    untuned)."""
    argv = [sys.executable, os.path.abspath(__file__), "--worker", str(threads)]
    return argv, {"weights": files["weights"], "input": files["input"], "target": target, "db": db_dir}


def torch_side(files: dict, mode: str, args) -> tuple[list, dict]:
    """(argv, setup) of the PyTorch timing process (in torch's own environment) for one of its modes."""
    argv = [args.torch_python, os.path.join(HERE, "_torch_networks.py"), str(args.threads)]
    return argv, {"weights": files["weights"], "input": files["input"], "mode": mode}


def time_tvm(net_dir, files, db_dir, target, threads, repeats, protocol, phase) -> dict:
    r = time_in_process(*tvm_side(files, target, db_dir, threads), threads, repeats, protocol, phase)
    out = r.pop("output")
    with open(os.path.join(net_dir, f"output-{os.path.basename(db_dir) if db_dir else 'untuned'}.json"), "w") as f:
        json.dump(out, f)
    r["output"] = out
    return r


# ---------------------------------------------------------------- one network


def checkpoint_db(net_dir: str, trials: int) -> str:
    """Where the MetaSchedule database of the checkpoint at ``trials`` is kept."""
    return os.path.join(net_dir, f"db-{trials}")


def network_files(net_dir: str) -> dict:
    return {
        "weights": os.path.join(net_dir, "weights.safetensors"),
        "input": os.path.join(net_dir, "input.safetensors"),
    }


def run_settings(args, target: dict) -> dict:
    """What a network's figures depend on besides its name, image and seed: a network kept by --resume must have
    been measured with the same. The weights' layout strategy and the tuning budgets are not among them: they are
    the network's own (its entry's ``strategy`` and ``budgets``, named in its section of the page: the strategy in
    its header line, the budgets as its checkpoint rows and goal line), and ``--strategy``/``--budgets`` set them
    for the networks this run tunes. Nor are the side-by-side table's passes and rounds: the table records its
    own (``--retime-final`` times it again)."""
    return {
        "threads": args.threads,
        "repeats": args.repeats,
        "trials_per_round": args.trials_per_round,
        "mcpu": target.get("mcpu"),
    }


def kept_networks(earlier: dict, names: list, now: dict) -> dict:
    """The networks of an earlier run (its partial JSON) that --resume keeps: complete, asked for again, and
    measured with the same ``run_settings``; each one left out is named with the settings that differ."""
    kept = {}
    for n, e in earlier.get("networks", {}).items():
        if not (e.get("complete") and n in names):
            continue
        differ = sorted(k for k in now if (e.get("settings") or {}).get(k) != now[k])
        if differ:
            log(f"{n}: not kept from the earlier run: measured with other settings ({', '.join(differ)})")
            continue
        kept[n] = e
        log(f"{n}: kept from the earlier run (--resume)")
    return kept


def run_network(name: str, args, target: dict, protocol, save) -> dict:
    from workbench import relax_model as rm
    from workbench.events import EventKind
    from workbench.network import NetworkSession

    net_dir = os.path.join(args.out, name)
    if os.path.exists(net_dir):  # an interrupted run: its store is kept, the network is tuned again
        shutil.move(net_dir, f"{net_dir}.interrupted-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(net_dir)
    arch, dtype = split_name(name)
    model = (rm.INT8_MODELS if dtype == "int8" else rm.MODELS)[arch](
        image=args.image, seed=args.seed, **model_kwargs(name)
    )
    files = network_files(net_dir)
    rm.save_weights(model, files["weights"])
    rm.save_tensors(files["input"], {"x": model.example_input(args.seed + 7)})
    tasks = rm.extract(model, target)
    entry = {
        "config": model.config,
        "dtype": dtype,
        "settings": run_settings(args, target),
        "strategy": args.strategy,
        "tasks": len(tasks),
        "task_calls": sum(t.weight for t in tasks),
        "gflop": sum(t.weight * t.flops for t in tasks) / 1e9,
        "budgets": args.budgets,
        "checkpoints": [],
        "torch": {},
        "complete": False,
    }
    save(name, entry)

    # PyTorch first: its first mode's output is the reference every TVM build is checked against.
    modes = TORCH_MODES[dtype]
    for mode in modes:
        r = time_in_process(
            *torch_side(files, mode, args),
            args.threads,
            args.repeats,
            protocol,
            f"timing {name} in PyTorch ({mode})",
        )
        entry["torch"][mode] = r
        log(f"  PyTorch {mode}: {r['latency_ms']:.3f} ms (spread {r['spread_pct']:.0f}%)")
    outputs = {mode: r.pop("output") for mode, r in entry["torch"].items()}
    reference = outputs[modes[0]]
    for mode, r in entry["torch"].items():
        r.update(agreement(outputs[mode], reference, dtype))
    best_mode = min(modes, key=lambda m: entry["torch"][m]["latency_ms"])
    entry["torch_best"] = {"mode": best_mode, "latency_ms": entry["torch"][best_mode]["latency_ms"]}
    save(name, entry)

    def checkpoint(trials: int, tuning_s: float, estimated_ms, db_dir) -> dict:
        r = time_tvm(
            net_dir, files, db_dir, target, args.threads, args.repeats, protocol, f"timing {name} after {trials} trials"
        )
        r.update(agreement_closest(r.pop("output"), outputs, dtype))
        r.update(trials=trials, tuning_s=round(tuning_s, 1), estimated_ms=estimated_ms)
        r["speedup_vs_torch_best"] = entry["torch_best"]["latency_ms"] / r["latency_ms"]
        entry["checkpoints"].append(r)
        save(name, entry)
        log(
            f"  {name} @ {trials} trials ({tuning_s / 60:.1f} min tuning): {r['latency_ms']:.3f} ms end to end, "
            f"{r['speedup_vs_torch_best']:.2f}x PyTorch's best, output matches: {r['matches']}"
        )
        return r

    checkpoint(0, 0.0, None, None)  # the untuned baseline: TVM's default lowering of every function

    protocol.phase(f"tuning {name}")
    log(f"{name}: {len(tasks)} tasks, one session to {args.budgets[-1]} trials")
    pending = list(args.budgets)
    held = {"seconds": 0.0}
    db_dirs: list = []  # the database of each budget's checkpoint
    failure: list = []
    net = NetworkSession(
        tasks,
        target=target,
        trials=pending[0],
        db=os.path.join(net_dir, "tuning.db"),
        strategy=args.strategy,
        seed=args.seed,
        name=f"networks-{name}",
        **({"trials_per_round": args.trials_per_round} if args.trials_per_round else {}),
    )
    t_start = time.time()

    def at_budget(trials_done: int) -> None:
        t0 = time.time()
        db_dir = checkpoint_db(net_dir, trials_done)
        os.makedirs(db_dir, exist_ok=True)
        rm.database(net.store, tasks, target, work_dir=db_dir)
        db_dirs.append(db_dir)
        checkpoint(trials_done, t0 - t_start - held["seconds"], net.estimated_latency_ms(), db_dir)
        held["seconds"] += time.time() - t0

    def on_event(e):
        # Called on the tuning thread: the search waits while a checkpoint is compiled and timed.
        if e.kind != EventKind.NETWORK_ROUND or failure or not pending or e.data["trials_done"] < pending[0]:
            return
        try:
            at_budget(e.data["trials_done"])
        except BaseException as ex:  # noqa: BLE001 - re-raised after the session stops (SystemExit included)
            failure.append(ex)
            net.stop()
            return
        pending.pop(0)
        if pending:
            net.trials = pending[0]  # the same search goes on to the next budget

    net.subscribe(on_event)
    summary = net.run()
    if failure:
        raise failure[0]
    if pending:  # every task ran out of new programs before the largest budget
        entry["ended_early"] = f"the search ended at {net.trials_done} trials: {summary['status']}"
        at_budget(net.trials_done)
    entry["session"] = {
        k: summary[k] for k in ("trials", "rounds", "tuning_seconds", "estimated_latency_ms", "naive_latency_ms")
    }
    entry["tuning_wall_s"] = round(time.time() - t_start - held["seconds"], 1)
    save(name, entry)
    entry["final"] = final_comparison(name, files, db_dirs[-1], target, entry, args, protocol)
    entry["complete"] = True
    save(name, entry)
    return entry


# Samples each side times per round of the side-by-side comparison (each >= 100 ms of calls).
ROUND_SAMPLES = 2
# Rest between two timings of a round: long enough for the side just timed to put its thread pool to sleep
# (``quiesce`` checks that it did), short enough that the two sides of a round meet the same host.
ROUND_REST_S = 0.5


def time_interleaved(sides: dict, order: list, args, protocol, phase) -> dict:
    """Both sides (name -> (argv, setup)) side by side, round by round: in each of ``args.passes`` passes a fresh
    process per side is started and set up, then in each of ``args.rounds`` rounds each side times
    ``ROUND_SAMPLES`` samples alone (the other side's process idle, its pool asleep: ``quiesce`` between), the
    order reversed after each round and each pass. ``phase(pass_number)`` names a pass for the protocol, whose
    checks run before each pass (the machine quiet; the host's speed, which the rounds make both sides share).

    Why rounds: this host's speed for a whole network drifts by 10-60 % within seconds (which neither the
    calibration probe, a kernel that fits in L2, nor a memory-bound probe tracks: ``networks_analysis.md``), and a
    process of either side can run slow for its whole life. Two sides timed a second apart meet the same host;
    several processes per side dilute a slow one. Returns ``{"runs": {side: [one dict per pass: latency_ms,
    spread_pct, samples_ms, ...]}, "rounds": [{side: median ms of the round}]}``."""
    runs: dict = {side: [] for side in sides}
    rounds: list = []
    for p in range(args.passes):
        workers: dict = {}
        try:
            _quiet.quiesce()
            protocol.phase(phase(p + 1))
            log(f"{phase(p + 1)}: {' and '.join(order)} set up, each in its own process")
            for side in order:
                workers[side] = _quiet.open_worker(*sides[side], args.threads, ROOT)
            samples: dict = {side: [] for side in sides}
            meters: dict = {side: {"wait_fraction": 0.0, "other_cores": 0.0} for side in sides}
            turn = list(order)
            for _ in range(args.rounds):
                one: dict = {}
                for side in turn:
                    _quiet.quiesce(seconds=ROUND_REST_S)
                    t = workers[side][0].call("time", repeats=ROUND_SAMPLES, min_repeat_ms=100)
                    xs = [x * 1e3 for x in t["samples"]]
                    samples[side] += xs
                    one[side] = _report.summarize(xs)["median"]
                    for k in meters[side]:
                        meters[side][k] = max(meters[side][k], t.get(k) or 0.0)
                rounds.append(one)
                turn = turn[::-1]
        finally:
            for w, _ in workers.values():
                w.close()
        for side in sides:
            st = _report.summarize([x / 1e3 for x in samples[side]])
            runs[side].append(
                dict(
                    workers[side][1],
                    latency_ms=st["median"] * 1e3,
                    spread_pct=st["spread_pct"],
                    samples_ms=samples[side],
                    **meters[side],
                )
            )
        order = order[::-1]
    return {"runs": runs, "rounds": rounds}


def side_summary(runs: list) -> dict:
    """One side's passes of ``time_interleaved`` as the table shows them: the pooled median of every sample with
    its spread, each pass's median, the worst noise readings."""
    samples = [x for r in runs for x in r["samples_ms"]]
    st = _report.summarize([x / 1e3 for x in samples])
    return {
        "latency_ms": st["median"] * 1e3,
        "spread_pct": st["spread_pct"],
        "pass_medians_ms": [round(r["latency_ms"], 4) for r in runs],
        "pass_spreads_pct": [r["spread_pct"] for r in runs],
        "samples": len(samples),
        "wait_fraction": max(r["wait_fraction"] for r in runs),
        "other_cores": max(r["other_cores"] for r in runs),
    }


def round_ratios(rounds: list) -> list:
    """PyTorch's latency / TVM's in each round of ``time_interleaved``."""
    return [r["torch"] / r["tvm"] for r in rounds]


def readings(fin: dict) -> dict:
    """The side-by-side table's readings of PyTorch / TVM: the pooled medians, the medians of each side's fastest
    process and, when it was timed in rounds, the median of the rounds' ratios."""
    out = {
        "pooled": fin["torch"]["latency_ms"] / fin["tvm"]["latency_ms"],
        "fastest process": min(fin["torch"]["pass_medians_ms"]) / min(fin["tvm"]["pass_medians_ms"]),
    }
    if fin.get("rounds"):
        out["round by round"] = _report.summarize(round_ratios(fin["rounds"]))["median"]
    return out


def final_comparison(name, files, db_dir, target, entry, args, protocol) -> dict:
    """The headline ratio, measured side by side (``time_interleaved``): PyTorch's best mode and the model tuned
    to the largest budget, ``args.passes`` processes a side, ``args.rounds`` rounds in each. The checkpoints were
    timed minutes apart, and this host's speed drifts between seconds; here both sides meet every drift alike."""
    mode = entry["torch_best"]["mode"]
    sides = {"torch": torch_side(files, mode, args), "tvm": tvm_side(files, target, db_dir, args.threads)}
    what = {"torch": f"PyTorch ({mode})", "tvm": f"TVM after {entry['checkpoints'][-1]['trials']} trials"}
    timed = time_interleaved(
        sides,
        ["torch", "tvm"],
        args,
        protocol,
        lambda p: f"final: {name}, {what['tvm']} vs {what['torch']} (pass {p}/{args.passes})",
    )
    runs = timed["runs"]
    out = {
        "passes": args.passes,
        "rounds_per_pass": args.rounds,
        "torch_mode": mode,
        "rounds": [{k: round(v, 4) for k, v in r.items()} for r in timed["rounds"]],
    }
    for side in ("torch", "tvm"):
        out[side] = side_summary(runs[side])
    out["speedup_vs_torch_best"] = out["torch"]["latency_ms"] / out["tvm"]["latency_ms"]
    out["readings"] = readings(out)
    log(
        f"  {name} side by side ({args.passes} passes x {args.rounds} rounds): TVM {out['tvm']['latency_ms']:.3f} ms, "
        f"PyTorch {mode} {out['torch']['latency_ms']:.3f} ms: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in out["readings"].items())
    )
    return out


def checked_figures(name: str, e: dict) -> list[dict]:
    """The figures of ``name``'s side-by-side table that the self-check times again: for each side (TVM after the
    largest budget, PyTorch's best mode) its pooled median and the median of its fastest process."""
    fin, trials = e["final"], e["checkpoints"][-1]["trials"]
    figures = []
    for side, what in (("tvm", f"TVM, {trials} trials"), ("torch", f"PyTorch {fin['torch_mode']}")):
        r = fin[side]
        figures.append(dict(side=side, kind="pooled", label=f"{name}: {what}, pooled", table_ms=r["latency_ms"]))
        figures.append(
            dict(
                side=side,
                kind="fastest",
                label=f"{name}: {what}, fastest process",
                table_ms=min(r["pass_medians_ms"]),
            )
        )
    return figures


def checked_ratios(name: str, e: dict) -> list[dict]:
    """The side-by-side table's readings of PyTorch / TVM (``readings``) that the self-check times again."""
    return [dict(reading=k, label=f"{name}: PyTorch / TVM, {k}", table=v) for k, v in readings(e["final"]).items()]


def self_check(result: dict, args, protocol) -> tuple[list, list]:
    """Each side-by-side table timed again after the run, as the table timed it (``time_interleaved``: the tuned
    model from its stored database, PyTorch's best mode from the same weights). Returns (rows, ratio rows): the
    rows check each side's latencies (pooled, fastest process) against the table's; the ratio rows check the
    table's readings of PyTorch / TVM. Rows as ``_quiet.self_check_markdown`` reads them.

    A network kept by ``--resume`` whose files are gone (another machine, a fresh clone) cannot be re-timed: its
    rows of the page's earlier self-check are kept, marked ``earlier``, when they checked the same table figures;
    without such rows the check stops with one line."""
    rows, ratio_rows = [], []
    out = result.get("out") or args.out
    command = args.command
    previous = result.get("self_check") or {}
    previous_protocol = previous.get("protocol")
    for name in result["networks_order"]:
        e = result["networks"].get(name) or {}
        fin = e.get("final")
        if not fin:
            continue
        figures, ratios = checked_figures(name, e), checked_ratios(name, e)
        net_dir = os.path.join(out, name)
        files, trials = network_files(net_dir), e["checkpoints"][-1]["trials"]
        missing = [p for p in (*files.values(), checkpoint_db(net_dir, trials)) if not os.path.exists(p)]
        if missing:
            kept = earlier_rows(previous.get("rows", []), name, figures, previous_protocol)
            kept_ratios = earlier_rows(previous.get("ratio_rows", []), name, ratios, previous_protocol, "table")
            if not kept or (fin.get("rounds") and not kept_ratios):
                raise SystemExit(f"networks.py: --self-check: {missing[0]} is missing (the run's files are gone)")
            log(f"{name}: its files are gone; the page's earlier self-check of it is kept")
            rows += kept
            ratio_rows += kept_ratios
            continue
        sides = {
            "tvm": tvm_side(files, result["target"], checkpoint_db(net_dir, trials), args.threads),
            "torch": torch_side(files, fin["torch_mode"], args),
        }
        # as the table was timed: its passes and (a table from before the rounds: one) rounds per pass
        like = argparse.Namespace(**dict(vars(args), passes=fin["passes"], rounds=fin.get("rounds_per_pass", 1)))
        timed = time_interleaved(
            sides, ["tvm", "torch"], like, protocol, lambda p: f"self-check: {name} ({p}/{like.passes})"
        )
        now = {side: side_summary(rs) for side, rs in timed["runs"].items()}
        for f in figures:
            side, r = f["side"], now[f["side"]]
            if f["kind"] == "pooled":
                standalone, spread = r["latency_ms"], r["spread_pct"] / 100
            else:
                i = min(range(len(r["pass_medians_ms"])), key=r["pass_medians_ms"].__getitem__)
                standalone, spread = r["pass_medians_ms"][i], r["pass_spreads_pct"][i] / 100
            ratio = standalone / f["table_ms"]
            rows.append(
                {
                    "workload": f["label"],
                    "side": side,
                    "kind": f["kind"],
                    "processes": like.passes,
                    "table_ms": f["table_ms"],
                    "standalone_ms": standalone,
                    "process_medians_ms": r["pass_medians_ms"],
                    "spread": spread,
                    "ratio": ratio,
                    "agrees": abs(ratio - 1.0) <= _quiet.SELF_CHECK_TOLERANCE,
                    "command": command,
                }
            )
            log(f"  self-check {f['label']}: {standalone:.3f} ms, {ratio:.3f}x the table's {f['table_ms']:.3f} ms")
        read_now = readings(dict(now, rounds=timed["rounds"]))
        for f in ratios:
            standalone = read_now[f["reading"]]
            ratio = standalone / f["table"]
            ratio_rows.append(
                {
                    "workload": f["label"],
                    "reading": f["reading"],
                    "table": f["table"],
                    "standalone": standalone,
                    "ratio": ratio,
                    "agrees": abs(ratio - 1.0) <= _quiet.SELF_CHECK_TOLERANCE,
                    "command": command,
                }
            )
            log(f"  self-check {f['label']}: {standalone:.3f}x, the table's {f['table']:.3f}x")
    return rows, ratio_rows


def archived_self_check(check: dict) -> dict:
    """A self-check replaced on the page by a later one of the same tables, in short: when it ran, how many of its
    latencies and readings agreed, and each reading it re-timed."""
    rows, ratio_rows = check.get("rows") or [], check.get("ratio_rows") or []
    return {
        "started": (check.get("protocol") or {}).get("started"),
        "valid": (check.get("protocol") or {}).get("valid"),
        "command": rows[0]["command"] if rows else None,
        "latencies": [sum(bool(r.get("agrees")) for r in rows), len(rows)],
        "readings": [sum(bool(r.get("agrees")) for r in ratio_rows), len(ratio_rows)],
        "standalone_readings": {r["workload"]: round(r["standalone"], 4) for r in ratio_rows},
    }


def earlier_rows(rows: list, name: str, figures: list, protocol: dict | None, key: str = "table_ms") -> list:
    """``name``'s rows of an earlier self-check, marked ``earlier``, if they checked exactly ``figures`` (the
    table's figures ``checked_figures`` or ``checked_ratios`` names, by label and value, ``key`` in a row and in a
    figure); otherwise none. Each keeps the protocol of the check that timed it (``checked_by``): its own if it was
    already an earlier row, else ``protocol``, that check's."""
    mine = [r for r in rows if r["workload"].split(":")[0] == name]
    checked = sorted((r["workload"], round(r[key], 9)) for r in mine)
    if checked != sorted((f["label"], round(f[key], 9)) for f in figures):
        return []
    return [
        dict(
            r,
            earlier=True,
            label=f"{r['workload']} (earlier self-check)",
            checked_by=r.get("checked_by") if r.get("earlier") else protocol,
        )
        for r in mine
    ]


def _ms(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def markdown(result: dict) -> str:
    L = [
        "# Whole networks end to end: tuned TVM (the workbench) vs PyTorch",
        "",
        _quiet.summary_markdown(result.get("protocol")),
    ]
    retimed = {}
    for name in result["networks_order"]:
        t = ((result["networks"].get(name) or {}).get("final") or {}).get("timed_by")
        if t:
            retimed.setdefault(t["command"] + t["date"], (t, []))[1].append(name)
    for t, names in retimed.values():
        L += [
            f"> The side-by-side tables of {', '.join(names)} were timed again after the tuning, on their own "
            f"(`{t['command']}`, {t['date']}), under this protocol:",
            "",
            _quiet.summary_markdown(t.get("protocol")),
        ]
    earlier = result.get("earlier_runs") or []
    if earlier:
        L += [
            f"> Resumed (`--resume`): {len(earlier)} earlier run(s) measured the networks kept from them; "
            f"{sum(1 for r in earlier if not r.get('valid'))} of them **INVALID** by their own checks (their protocol "
            "records are in networks.json, `earlier_runs`):",
            "",
            *[
                f"> - started {r.get('started')}, commit `{str((r.get('git') or {}).get('commit'))[:12]}`, `{r.get('command')}`"
                for r in earlier
            ],
            "",
        ]
    L += [
        f"Command: `{result['command']}` · {result['date']} · {result['machine']} · {result['threads']} threads in "
        f"every process · image {result['image']}x{result['image']}, batch 1, random weights (seed "
        f"{result['seed']}) · TVM {result.get('versions', {}).get('tvm', '?')}, PyTorch "
        f"{result.get('torch_version') or '?'}",
        "",
        "Each network is defined once, with the same weights, in Relax (`workbench/relax_model.py`) and in PyTorch "
        "(`benchmarks/_torch_networks.py`, loaded from the Relax model's weights with `strict=True`). One "
        "`NetworkSession` tunes every extracted task under the gradient task scheduler; at each budget the search "
        "is held while the best verified record of every task is compiled into the whole model "
        "(`relax_model.build`: MetaSchedule's `compile_relax` preparation, and a weight layout rewrite of a tuned "
        "schedule folded into the constants) and timed end to end in a fresh process. PyTorch's two best CPU modes (eager with "
        "channels_last; `torch.jit.trace` + `freeze` + `optimize_for_inference`; for int8 its quantized backend "
        "with the same int8 parameters, engines x86 and fbgemm) are timed in their own processes. "
        f"Latencies are medians of {result['repeats']} samples (each >= 100 ms of calls), with their spread "
        "((max - min) / median). *vs PyTorch* is PyTorch's best mode's latency / TVM's (above 1: TVM is faster). "
        f"*matches*: the output within {TOLERANCE['float32']:g} (int8: {TOLERANCE['int8']:g}) x max(1, max |output|) "
        "of a PyTorch mode's output on the same input: the first mode's for PyTorch's own rows, the closest mode's "
        "for TVM's (named when it is not the first; PyTorch's two int8 engines round some requantizations "
        "differently and differ from each other by a few steps of the output). *tuning* is the search's wall time up to the checkpoint (the checkpoints' own compile and timing "
        "excluded); *estimated* is the session's sum of calls x best task latency (a task without a tuned "
        "program counts with its unscheduled build as the session timed it). A checkpoint row's *vs PyTorch* divides "
        "by PyTorch's latency timed before the tuning, minutes to an hour earlier: on a host whose speed drifts it "
        "is indicative only. The goal is judged on the side-by-side table after the tuning, timed round by round "
        "(a fresh process per side in each pass; in each round each side alone, a second apart, so both meet the "
        "same host: this host's speed for a whole network drifts by 10-60 % within seconds while the calibration "
        "probe stays put, and a process of either side can run slow for its whole life), by three readings of it: "
        "the pooled medians, the medians of each side's fastest process and the median of the rounds' ratios; it is "
        "met when all three reach it. The per-pass ratios show how much one pass would have said. A table timed "
        "before the rounds existed reads 'alternating': one process per side per pass, minutes apart.",
        "",
    ]
    for name in result["networks_order"]:
        e = result["networks"].get(name)
        if not e:
            continue
        cfg = e["config"]
        L += [f"## {name} ({e.get('dtype', 'float32')})", ""]
        L.append(
            f"{e['tasks']} tasks ({e['task_calls']} calls, {e['gflop']:.2f} GFLOP per inference); "
            f"config `{json.dumps(cfg)}`; weights' layout strategy `{e.get('strategy', 'no-rewrite')}`"
            + ("" if e.get("complete") else " — **incomplete (interrupted)**")
        )
        L.append("")
        if e.get("torch"):
            L += [
                "| PyTorch mode | latency (ms) | spread | matches the reference (the first mode) |",
                "|---|---|---|---|",
            ]
            for mode, r in e["torch"].items():
                best = " (best)" if e.get("torch_best", {}).get("mode") == mode else ""
                L.append(f"| {mode}{best} | {_ms(r['latency_ms'])} | {r['spread_pct']:.0f}% | {_yes(r)} |")
            L.append("")
        if e.get("checkpoints"):
            L += [
                "| trials | tuning (min) | estimated (ms) | end to end (ms) | spread | vs PyTorch | matches | compile (s) |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for c in e["checkpoints"]:
                trials = "0 (untuned)" if c["trials"] == 0 else str(c["trials"])
                timed = f"{_ms(c['latency_ms'])} | {c['spread_pct']:.0f}% | {c['speedup_vs_torch_best']:.2f}x"
                if c.get("disturbed"):  # a timing known to have shared the machine is not shown as a result
                    timed = "disturbed¹ | – | –"
                L.append(
                    f"| {trials} | {c['tuning_s'] / 60:.1f} | {_ms(c.get('estimated_ms'))} | {timed} | "
                    f"{_yes(c, next(iter(e['torch']), None))} | {c['compile_s']:.0f} |"
                )
            L.append("")
            notes = [f"¹ {c['disturbed']}" for c in e["checkpoints"] if c.get("disturbed")]
            if notes:
                L += notes + [""]
        if e.get("ended_early"):
            L += [f"Note: {e['ended_early']}.", ""]
        fin = e.get("final")
        if fin:
            how = (
                f"{fin['passes']} passes, a fresh process per side in each; {fin['rounds_per_pass']} rounds per pass, "
                f"each side alone in turn ({ROUND_SAMPLES} samples a round), the order reversed each round"
                if fin.get("rounds")
                else f"{fin['passes']} passes, each side alone in a fresh process, alternating"
            )
            L += [
                f"Side by side after tuning ({how}; samples pooled per side):",
                "",
                "| | latency (ms), pooled | spread | per-pass medians (ms) | fastest process (ms) |",
                "|---|---|---|---|---|",
            ]
            for side, label in (("tvm", f"TVM, {e['checkpoints'][-1]['trials']} trials"), ("torch", fin["torch_mode"])):
                r = fin[side]
                passes = ", ".join(f"{x:.3f}" for x in r["pass_medians_ms"])
                L.append(
                    f"| {label} | {r['latency_ms']:.3f} | {r['spread_pct']:.0f}% | {passes} | "
                    f"{min(r['pass_medians_ms']):.3f} |"
                )
            L.append("")
            if fin.get("rounds"):
                rr = round_ratios(fin["rounds"])
                L += [
                    f"Round by round, PyTorch / TVM: median {_report.summarize(rr)['median']:.2f}x over {len(rr)} "
                    f"rounds (from {min(rr):.2f}x to {max(rr):.2f}x).",
                    "",
                ]
            if fin.get("timed_by"):
                L += [
                    f"Timed again after the tuning, on its own, {fin['timed_by']['date']} (the protocol box above).",
                    "",
                ]
        if e.get("complete") and e.get("checkpoints"):
            last = e["checkpoints"][-1]
            speedup = fin["speedup_vs_torch_best"] if fin else last["speedup_vs_torch_best"]
            judged = speedup  # the goal needs every reading of the side-by-side table at or above it
            how = "at the checkpoint"
            if fin:
                read = readings(fin)
                judged = min(read.values())
                per_pass = [t / v for t, v in zip(fin["torch"]["pass_medians_ms"], fin["tvm"]["pass_medians_ms"])]
                how = (
                    "side by side, pooled; "
                    + "; ".join(f"{k} {v:.2f}x" for k, v in read.items() if k != "pooled")
                    + "; per pass "
                    + ", ".join(f"{r:.2f}x" for r in per_pass)
                )
            if e.get("dtype") == "int8":
                L += [
                    f"After {last['trials']} trials: {speedup:.2f}x PyTorch's quantized backend ({how}; "
                    f"{e.get('tuning_wall_s', 0) / 60:.0f} min of tuning; the >= {TARGET_SPEEDUP:.1f}x goal is "
                    "float32's).",
                    "",
                ]
            else:
                ok = judged >= TARGET_SPEEDUP and all(c["matches"] for c in e["checkpoints"])
                L += [
                    f"**Goal (>= {TARGET_SPEEDUP:.1f}x PyTorch's best within {e['budgets'][-1]} trials): "
                    f"{'met' if ok else 'not met'}** — {speedup:.2f}x after {last['trials']} trials ({how}; "
                    f"{e.get('tuning_wall_s', 0) / 60:.0f} min of tuning).",
                    "",
                ]
    if result.get("self_check"):
        rows = result["self_check"]["rows"]
        L.append(_quiet.self_check_markdown(rows, what="Each latency of the side-by-side tables (TVM's and PyTorch's)"))
        by_net: dict = {}
        for r in rows:
            by_net.setdefault((r["workload"].split(":")[0], r.get("kind", "pooled")), {})[r.get("side")] = r
        ratios = [
            f"{n} {sides['torch']['standalone_ms'] / sides['tvm']['standalone_ms']:.2f}x ({kind})"
            for (n, kind), sides in by_net.items()
            if {"tvm", "torch"} <= set(sides)
        ]
        ratio_rows = result["self_check"].get("ratio_rows") or []
        if ratios and not ratio_rows:  # a check from before the readings were checked themselves
            L += [f"PyTorch / TVM from the standalone re-times: {', '.join(ratios)}.", ""]
        if ratio_rows:
            ok = sum(bool(r["agrees"]) for r in ratio_rows)
            L += [
                "The side-by-side readings of PyTorch / TVM, timed again by the same command: "
                f"**{ok}/{len(ratio_rows)} within {100 * _quiet.SELF_CHECK_TOLERANCE:.0f} % of the table**.",
                "",
                "| reading | table | standalone | standalone / table | agrees |",
                "|---|---|---|---|---|",
            ]
            L += [
                f"| {r.get('label', r['workload'])} | {r['table']:.3f}x | {r['standalone']:.3f}x | {r['ratio']:.3f} | "
                f"{'yes' if r['agrees'] else '**no**'} |"
                for r in ratio_rows
            ]
            L.append("")
        L.append(_quiet.summary_markdown(result["self_check"]["protocol"]))
        history = result.get("earlier_self_checks") or []
        if history:
            L += [
                "Earlier self-checks of the same tables, each a full re-time by the same command (replaced above by "
                "the latest; in short in networks.json, `earlier_self_checks`):",
                "",
                "| started | valid | latencies within 5 % | readings within 5 % | readings re-timed (PyTorch / TVM) |",
                "|---|---|---|---|---|",
            ]
            for h in history:
                by_net: dict = {}
                for label, x in h["standalone_readings"].items():
                    by_net.setdefault(label.split(":")[0], []).append(f"{x:.2f}x")
                readings_md = "; ".join(f"{n} {' / '.join(xs)}" for n, xs in by_net.items())
                L.append(
                    f"| {h['started']} | {'yes' if h['valid'] else '**no**'} | {h['latencies'][0]}/{h['latencies'][1]} | "
                    f"{h['readings'][0]}/{h['readings'][1]} | {readings_md} |"
                )
            L += ["", "(readings in the order pooled / fastest process / round by round)", ""]
        earlier: dict = {}
        for r in rows:
            if r.get("earlier"):
                p = r.get("checked_by")
                earlier.setdefault((p or {}).get("started"), p)
        if earlier:
            L += [
                "The rows marked *earlier self-check* are from an earlier self-check: those networks were kept from "
                "an earlier run (`--resume`) and their files were not on the machine of this one. The protocol of "
                "the check that timed them:",
                "",
            ]
            L += [_quiet.summary_markdown(p) for p in earlier.values()]
    return "\n".join(L) + "\n"


def _yes(r, first_mode: str | None = None) -> str:
    err = r.get("max_abs_error")
    closest = r.get("closest_mode")
    vs = f", vs {closest}" if closest and first_mode and closest != first_mode else ""
    return f"{'yes' if r.get('matches') else '**NO**'} ({'–' if err is None else f'{err:.1g}'}{vs})"


def write_report(result: dict, results_dir: str) -> None:
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "networks.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    analysis = open(ANALYSIS).read() if os.path.exists(ANALYSIS) else ""
    with open(os.path.join(results_dir, "networks.md"), "w") as f:
        f.write(markdown(result) + ("\n" + analysis if analysis else ""))


# ---------------------------------------------------------------- main


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default=",".join(NETWORKS), help=f"comma-separated: {', '.join(NETWORKS)}")
    ap.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)), help="trial counts to time at")
    ap.add_argument("--image", type=int, default=224, help="input height and width (a small one for a smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=10, help="samples per timing (each >= 100 ms of calls)")
    ap.add_argument(
        "--strategy",
        default="no-rewrite",
        help="every task's weight layout strategy (default no-rewrite; pre-transformed / packed rewrite the "
        "weights once, folded into the compiled model)",
    )
    ap.add_argument("--trials-per-round", type=int, default=None)
    ap.add_argument("--threads", type=int, default=_quiet.available_cores())
    ap.add_argument("--torch-python", default=os.path.join(ROOT, ".venv-torch", "bin", "python"))
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "out", "networks"))
    ap.add_argument("--results", default=RESULTS, help="where networks.md/.json go")
    ap.add_argument("--resume", action="store_true", help="keep the networks already finished in --out")
    ap.add_argument("--force", action="store_true", help="run on a busy machine; the result is marked invalid")
    ap.add_argument(
        "--host-wait",
        type=float,
        default=None,
        help="seconds a host slower than at its best is waited out before each phase (then refused, or with "
        "--force marked invalid; default 300, with --host-drift record 60; 0 for a smoke run)",
    )
    ap.add_argument(
        "--host-drift",
        choices=["refuse", "record"],
        default="refuse",
        help="a host slower than at its best: refused (status 3), or recorded on the page (the headline ratios "
        "then rest on the final side-by-side passes)",
    )
    ap.add_argument(
        "--passes",
        type=int,
        default=4,
        help="side-by-side passes of the final TVM vs PyTorch timing (processes a side)",
    )
    ap.add_argument("--rounds", type=int, default=8, help="rounds per side-by-side pass (each side timed in each)")
    ap.add_argument("--report-only", action="store_true", help="rewrite networks.md from networks.json")
    ap.add_argument(
        "--self-check",
        action="store_true",
        help="time each side-by-side figure of networks.json again, alone (the stores in --out), and add it to the page",
    )
    ap.add_argument(
        "--retime-final",
        action="store_true",
        help="time the side-by-side table of each finished network of networks.json again (its stores in --out), "
        "replacing it; the page's self-check is dropped (it checked the tables replaced)",
    )
    ap.add_argument(
        "--probe-reference",
        default=_quiet.REFERENCE,
        help="the file with the fastest calibration probe reading on this machine (default: the protocol's)",
    )
    args = ap.parse_args(argv)
    args.command = "python " + " ".join(
        [os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + (sys.argv[1:] if argv is None else list(argv))
    )
    if args.passes < 1 or args.rounds < 1:
        raise SystemExit(f"networks.py: --passes and --rounds must be at least 1, got {args.passes} and {args.rounds}")
    if args.report_only:
        with open(os.path.join(args.results, "networks.json")) as f:
            write_report(json.load(f), args.results)
        return
    if args.self_check:
        with open(os.path.join(args.results, "networks.json")) as f:
            result = json.load(f)
        require_torch(args)
        protocol = timing_protocol("networks-self-check", args)
        rows, ratio_rows = self_check(result, args, protocol)
        protocol.finish()
        if result.get("self_check"):  # the tables are the same (a new timing drops their checks): kept, in short
            result.setdefault("earlier_self_checks", []).append(archived_self_check(result["self_check"]))
        result["self_check"] = {"rows": rows, "ratio_rows": ratio_rows, "protocol": protocol.summary()}
        write_report(result, args.results)
        return
    if args.retime_final:
        retime_final(args)
        return
    args.budgets = parse_budgets(args.budgets)
    names = parse_networks(args.networks)
    if args.image < 64:
        raise SystemExit("networks.py: --image must be at least 64 (ResNet-18's stem and four stages)")
    require_torch(args)

    from workbench import tvm_env

    threads = args.threads
    _quiet.set_thread_env(threads)
    target = tvm_env.host_target_dict(threads)
    os.makedirs(args.out, exist_ok=True)
    partial = os.path.join(args.out, "networks-partial.json")
    earlier = {}
    if args.resume and os.path.exists(partial):
        with open(partial) as f:
            earlier = json.load(f)
    if earlier and (earlier.get("image"), earlier.get("seed")) != (args.image, args.seed):
        raise SystemExit(
            f"networks.py: --resume: {partial} is for image {earlier.get('image')}, seed {earlier.get('seed')}; "
            "pass the same --image and --seed, or drop --resume"
        )
    protocol = _quiet.Protocol(
        "networks",
        threads,
        args.force,
        host_wait_s=args.host_wait,
        reference=args.probe_reference,
        host_drift=args.host_drift,
    )
    protocol.start()
    result = {
        "command": args.command,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, mcpu {target['mcpu']}",
        "target": target,
        "threads": threads,
        "image": args.image,
        "seed": args.seed,
        "out": os.path.abspath(args.out),
        "repeats": args.repeats,
        "passes": args.passes,
        "versions": tvm_env.library_versions(),
        "networks_order": names,
        "networks": {},
        "earlier_runs": earlier.get("earlier_runs", []) + ([earlier["protocol"]] if earlier.get("protocol") else []),
    }
    result["networks"].update(kept_networks(earlier, names, run_settings(args, target)))

    def save(name, entry):
        result["networks"][name] = entry
        result["protocol"] = protocol.summary()
        with open(partial + ".tmp", "w") as f:
            json.dump(result, f, indent=1, default=str)
        os.replace(partial + ".tmp", partial)

    for name in names:
        if result["networks"].get(name, {}).get("complete"):
            continue
        log(f"{name}: image {args.image}, budgets {args.budgets}")
        run_network(name, args, target, protocol, save)
    protocol.finish()
    result["protocol"] = protocol.summary()
    for e in result["networks"].values():
        for r in e.get("torch", {}).values():
            result["torch_version"] = r.get("torch")
    write_report(result, args.results)
    with open(partial, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(markdown(result))


def require_torch(args) -> None:
    if not subprocess_ok(args.torch_python):
        raise SystemExit(
            f"networks.py: torch cannot be imported from {args.torch_python!r}; `make torch-env` creates .venv-torch"
        )


def timing_protocol(name: str, args):
    """The protocol of a run that only times (``--self-check``, ``--retime-final``), started: every thread pool in
    this process and its children sized to ``--threads``."""
    _quiet.set_thread_env(args.threads)
    protocol = _quiet.Protocol(
        name,
        args.threads,
        args.force,
        host_wait_s=args.host_wait,
        reference=args.probe_reference,
        host_drift=args.host_drift,
    )
    protocol.start()
    return protocol


def retime_final(args) -> None:
    """``--retime-final``: each finished network's side-by-side table timed again from its stores in ``--out``
    (the tuned database of its largest budget, its weights and input), replacing the table; a network whose files
    are gone keeps its table. The self-check of the replaced tables is dropped from the page."""
    from workbench import tvm_env

    path = os.path.join(args.results, "networks.json")
    with open(path) as f:
        result = json.load(f)
    require_torch(args)
    if args.threads != result["threads"]:
        raise SystemExit(f"networks.py: --retime-final: the page was timed with {result['threads']} threads")
    protocol = timing_protocol("networks-final", args)
    target = result.get("target") or tvm_env.host_target_dict(args.threads)
    out = result.get("out") or args.out
    done = []
    for name in result["networks_order"]:
        e = result["networks"].get(name) or {}
        if not (e.get("complete") and e.get("final")):
            continue
        net_dir = os.path.join(out, name)
        files, db = network_files(net_dir), checkpoint_db(net_dir, e["checkpoints"][-1]["trials"])
        if not all(os.path.exists(p) for p in (*files.values(), db)):
            log(f"{name}: its files are gone from {net_dir}; its table is kept")
            continue
        done.append((name, final_comparison(name, files, db, target, e, args, protocol)))
    protocol.finish()
    stamp = {"command": args.command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for name, fin in done:
        result["networks"][name]["final"] = dict(fin, timed_by=dict(stamp, protocol=protocol.summary()))
    if done:
        result.pop("self_check", None)
        result.pop("earlier_self_checks", None)
    write_report(result, args.results)


def subprocess_ok(python: str) -> bool:
    import subprocess

    if not python or not os.path.exists(python):
        return False
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _protocol.serve({"setup": _worker_setup, "time": _worker_time})
    else:
        main()
