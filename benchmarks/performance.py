"""Performance against the peers: the workbench vs TVM MetaSchedule, vendor libraries and the machine's peak.

    python benchmarks/performance.py --mode quick     # `make bench`: under an hour on 2 cores
    python benchmarks/performance.py --mode full      # `make bench-full`: about 5 hours on 2 cores (estimated
                                                      # from the quick run's per-trial rates; not run yet)

What it runs (all with the same llvm target, ``mcpu`` and ``num-cores`` included, and the same thread count):

1. the machine's peak: an FMA microbenchmark and a STREAM-like triad (``benchmarks/peak/peak.c``, gcc -O3
   -march=native -fopenmp);
2. for each trial budget and workload: the workbench (``workbench tune``, quick preset, MetaSchedule's own weight
   strategy ``pre-transformed``), MetaSchedule ``tune_tir`` with a build function that skips the tensor-intrinsics
   import (``ms-fastbuild``) and with its stock builder and a long build timeout (``ms-stock``); each in a fresh
   process, one after the other (``_tuners.py``); per-candidate timestamps give time-to-quality;
3. the final kernels, rebuilt, verified and timed one library at a time: each tuner's kernels in a process of
   their own (``_remeasure.py``), then numpy/OpenBLAS matmul in another, then torch's oneDNN conv2d in its own
   environment (``.venv-torch``, ``_vendor_torch.py``); each process exits before the next starts, with
   ``_quiet.quiesce()`` between them (``--passes N``: the whole sequence N times, in rotated order, samples
   pooled: for a host whose speed drifts); every figure is the median of ``repeats`` samples (>= 100 ms each) with
   its spread, and the calibration probe is read before and after this phase;
4. a profile of one workbench session, before and after the tuning-time change this benchmark documents
   (``_profile.py``);
5. the standalone self-check: each workbench kernel of the table timed again by ``workbench best DB W --time``
   in a process of its own, alone, and compared with the table (within 5 %: ``_quiet.standalone_self_check``).

Every step follows the benchmark protocol (``_quiet.py``): a quiet check before the start and before every
phase (the peak, each tuner run, each library's timing, each profile; status 3 and one line when the machine
is busy, ``--force`` marks the result invalid), the probe before and after the run, all thread pools sized
to ``--threads``; a peak below an achieved figure is reported as a problem, not published.

Modes: ``quick`` = 64 trials; workbench and ms-fastbuild on all eight workloads; ms-stock on one (its per-batch
worker start-up makes it 4+ s per trial); 5 samples per kernel; profile at 64 trials.
``full`` = 64 and 256 trials, all eight workloads, both MetaSchedule configurations, 10 samples per kernel.

Every finished tuner run is saved to ``OUT/performance.partial.json`` at once; ``--resume`` keeps those of an
interrupted invocation with the same settings (mode, budgets, batch size, target, threads, MetaSchedule build
timeout) and tunes only the rest; the page names the kept runs.

Writes ``docs/results/performance.md`` (+ ``performance.json``, ``performance_roofline.html``); raw tuner
outputs (records stores, MetaSchedule work dirs) go to ``benchmarks/out/performance/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import _quiet  # noqa: E402
import _report  # noqa: E402
import _tuners  # noqa: E402

# GMM 512^3; ResNet-18 3x3 convs at 56x56x64, 28x28x128, 14x14x256; a depthwise and a 1x1 conv; and the two
# shapes the tuning-speed targets name beyond these: VGG-16's 3x3 conv at 14x14x512 (NCHW) and BERT's FFN matmul
# (128x3072x768 with its bias: no vendor row, a vendor computes no epilogue).
WORKLOADS = [
    "GMM.2",
    "resnet18.conv2",
    "resnet18.conv5",
    "resnet18.conv8",
    "mobilenet_v2.dw144_56_s1",
    "resnet50.conv2",
    "vgg16.conv5_1",
    "bert.ffn1",
]
MODES = {
    "quick": {"budgets": [64], "ms_stock": ["resnet50.conv2"], "repeats": 5, "profile_trials": 64},
    "full": {"budgets": [64, 256], "ms_stock": WORKLOADS, "repeats": 10, "profile_trials": 64},
}
PROFILE_WORKLOAD = "resnet18.conv2"
ANALYSIS = os.path.join(HERE, "performance_analysis.md")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_peak(out_dir: str, threads: int) -> dict:
    exe = os.path.join(out_dir, "peak")
    subprocess.run(
        ["gcc", "-O3", "-march=native", "-fopenmp", os.path.join(HERE, "peak", "peak.c"), "-o", exe], check=True
    )
    p = subprocess.run([exe, str(threads)], capture_output=True, text=True, check=True, env=_quiet.thread_env(threads))
    return _report.parse_peak(p.stdout)


PEAK_KEYS = ("fma_gflops_1thread", "fma_gflops_all", "triad_gbs_1thread", "triad_gbs_all")


def best_achieved(result: dict) -> tuple:
    """(GFLOPS, what) of the fastest figure a kernel achieved: re-measured medians, vendor medians and each
    tuner's own best timing; (None, None) when there is none."""
    flops = {w["name"]: w["flops"] for w in result["workloads"]}
    best = (None, None)

    def offer(g, what):
        nonlocal best
        if g and (best[0] is None or g > best[0]):
            best = (g, what)

    for budget, per_w in result.get("remeasure", {}).items():
        for wname, per_t in per_w.items():
            for tuner, s in per_t.items():
                offer(flops[wname] / s["median"] / 1e9, f"{wname} {tuner} re-measured, {budget} trials")
    for wname, v in result.get("vendor", {}).items():
        offer(flops[wname] / v["median"] / 1e9, f"{wname} {v['library']}")
    for budget, per_w in result.get("runs", {}).items():
        for wname, per_t in per_w.items():
            for tuner, r in per_t.items():
                if r.get("best_latency_ms"):
                    offer(
                        flops[wname] / (r["best_latency_ms"] / 1e3) / 1e9,
                        f"{wname} {tuner}'s own best timing, {budget} trials",
                    )
    return best


def verify_peak(result: dict, out_dir: str, threads: int, protocol) -> None:
    """The peak must reach at least the best achieved figure. When it does not, the microbenchmark is run once
    more (on a quiet machine) and the better of each figure kept; still below: a problem, and the peak is not
    published (``peak["below_achieved"]``)."""
    best, what = best_achieved(result)
    problem = _quiet.check_peak(result["peak"]["fma_gflops_all"], best, what)
    if problem is None:
        return
    log(f"{problem}; running the peak microbenchmark again")
    _quiet.quiesce()
    protocol.phase("the peak microbenchmark, again")
    again = run_peak(out_dir, threads)
    result["peak_runs"] = [dict(result["peak"]), again]
    for k in PEAK_KEYS:
        result["peak"][k] = max(result["peak"][k], again[k])
    problem = _quiet.check_peak(result["peak"]["fma_gflops_all"], best, what)
    if problem:
        log(problem)
        result["peak"]["below_achieved"] = True
        result["problems"].append(problem)


def plain(w) -> bool:
    """Whether a vendor library computes exactly this workload: no epilogue, batch 1, no dilation (a float32
    workload; ``main`` refuses others)."""
    spec = w.spec()
    p = spec["params"]
    return not spec.get("epilogue") and p.get("batch", 1) == 1 and p.get("dilation", 1) == 1


def torch_importable(python: str | None) -> bool:
    """Whether ``python`` (torch's own environment, ``.venv-torch``) exists and imports torch: the vendor worker
    ``_vendor_torch.py`` runs there."""
    return bool(
        python
        and os.path.exists(python)
        and subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0
    )


def conv_spec(w) -> dict | None:
    """A workload's conv as torch needs it (NCHW semantics, N=1), or None when it is not a conv or not ``plain``
    (its row then has no vendor figure)."""
    p = w.spec()["params"]
    if not plain(w):
        return None
    if w.op == "conv2d":
        return {
            "name": w.name,
            "ci": p["in_channels"],
            "h": p["height"],
            "w": p["width"],
            "co": p["out_channels"],
            "k": p["kernel"],
            "stride": p["stride"],
            "pad": p["padding"],
            "groups": p.get("groups", 1),
        }
    if w.op == "depthwise_conv2d":
        return {
            "name": w.name,
            "ci": p["channels"],
            "h": p["height"],
            "w": p["width"],
            "co": p["channels"],
            "k": p["kernel"],
            "stride": p["stride"],
            "pad": p["padding"],
            "groups": p["channels"],
        }
    return None


PARTIAL = "performance.partial.json"
# what must match for an earlier invocation's tuner runs to be kept by --resume
RESUME_KEYS = ("mode", "budgets", "per_round", "target", "threads", "ms_build_timeout")


def save_partial(path: str, result: dict) -> None:
    """The result so far (its tuner runs), replaced atomically: what --resume keeps after an interruption."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, default=str)
    os.replace(tmp, path)


def kept_runs(path: str, result: dict, force: bool = False) -> dict:
    """``{budget: {workload: {tuner: run}}}`` of the earlier invocation at ``path`` whose runs can be kept: same
    settings (``RESUME_KEYS``), and each run's records store or best trace still there; its protocol record goes
    to ``result["earlier_runs"]``. Exits with one line when the settings differ, or when the earlier invocation
    was invalid (forced on a busy machine) and this one is not forced; nothing to keep without such a file."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        earlier = json.load(f)
    differ = [k for k in RESUME_KEYS if earlier.get(k) != result.get(k)]
    if differ:
        sys.exit(
            f"performance.py: --resume: {path} was made with other settings ({', '.join(differ)}); "
            "run without --resume to start again"
        )
    protocol = earlier.get("protocol") or {}
    if not protocol.get("valid") and not force:
        sys.exit(
            f"performance.py: --resume: the invocation that wrote {path} was not valid under the benchmark protocol "
            "(forced, or its record is missing): its runs cannot go on a valid page; run without --resume"
        )
    result["earlier_runs"] = earlier.get("earlier_runs", []) + [protocol]
    out: dict = {}
    for budget, per_w in (earlier.get("runs") or {}).items():
        for wname, runs in per_w.items():
            if wname not in result["names"]:
                continue
            for tuner, r in runs.items():
                need = r.get("db") if tuner == "workbench" else r.get("best_trace")
                if need is None and tuner != "workbench" and r.get("best_latency_ms") is None:
                    need = ""  # a MetaSchedule run that found nothing: nothing to re-time, still a finished run
                if need == "" or (need and os.path.exists(need)):
                    out.setdefault(budget, {}).setdefault(wname, {})[tuner] = r
    return out


def remeasure(result, out_dir, target, threads, repeats, torch_python, protocol, passes=1):
    """Every tuner's final kernels and the vendor libraries, each library timed alone in its own process.

    ``passes`` > 1 times every library that many times, in turn (the order rotated each pass, a fresh process
    each time), and pools each kernel's samples over the passes: a host whose speed drifts over minutes then
    slows every library alike instead of whichever happened to be timed during the slow spell."""
    from workbench.workloads import registry

    reg = registry()
    by_tuner: dict = {}
    for budget, per_w in result["runs"].items():
        for wname, runs in per_w.items():
            for tuner, r in runs.items():
                trace = r.get("best_trace")
                if trace is None and tuner == "workbench":
                    trace = os.path.join(out_dir, f"wb-{wname}-{budget}.trace.json")
                    with open(trace, "w") as f:
                        f.write(_best_workbench_trace(r["db"]))
                if trace:
                    by_tuner.setdefault(tuner, []).append(
                        {"key": f"{budget}|{wname}|{tuner}", "workload": wname, "trace": trace}
                    )
    numpy_w = [w for w in result["names"] if reg.get(w).op in ("matmul", "batch_matmul") and plain(reg.get(w))]
    convs = [c for c in (conv_spec(reg.get(w)) for w in result["names"]) if c]
    tvm_argv = [sys.executable, os.path.join(HERE, "_remeasure.py"), str(threads)]
    # (library, worker argv, setup arguments): one process each, one after the other
    libraries = [(tuner, tvm_argv, {"kernels": ks, "numpy": [], "target": target}) for tuner, ks in by_tuner.items()]
    if numpy_w:
        libraries.append(("numpy/OpenBLAS", tvm_argv, {"kernels": [], "numpy": numpy_w, "target": target}))
    if torch_importable(torch_python) and convs:
        libraries.append(
            ("torch", [torch_python, os.path.join(HERE, "_vendor_torch.py"), str(threads)], {"convs": convs})
        )
    elif convs:
        result["torch"] = {
            "skipped": f"torch cannot be imported from {torch_python!r} (make bench creates "
            ".venv-torch; torch could not be installed there)"
        }
    result["verification"], samples, readings = {}, {}, {}
    result["timing_passes"] = passes
    protocol.probe("before timing")
    for p in range(passes):
        for lib, argv, setup in libraries[p % len(libraries) :] + libraries[: p % len(libraries)]:
            _quiet.quiesce()  # the previous library's process has exited; its pools must have stopped spinning
            what = f"timing {lib}" + (f" (pass {p + 1}/{passes})" if passes > 1 else "")
            protocol.phase(what)
            log(f"{what}: {repeats} samples per kernel, alone in its own process")
            info, timed = _quiet.set_up_and_time(argv, setup, threads, repeats, ROOT)
            if lib == "torch":
                result["torch"] = info
            else:
                result["verification"].update(info)
            _quiet.pool_timed(timed, samples, readings)
    protocol.probe("after timing")
    result["samples"] = samples
    result["timing_readings"] = readings
    for key, xs in samples.items():
        s = dict(_report.summarize(xs), **readings[key])
        if key.startswith("numpy:"):
            result["vendor"][key[6:]] = dict(s, library="numpy/OpenBLAS")
        elif "|" not in key:
            result["vendor"][key] = dict(s, library="torch oneDNN " + result["torch"]["formats"][key])
        else:
            budget, wname, tuner = key.split("|")
            result["remeasure"].setdefault(budget, {}).setdefault(wname, {})[tuner] = s


def self_check(result: dict, threads: int) -> list:
    """The workbench's final kernels of every budget, timed again by the user's own command (``_quiet``)."""
    kernels = []
    for budget, per_w in result["runs"].items():
        for wname, runs in per_w.items():
            table = result["remeasure"].get(budget, {}).get(wname, {}).get("workbench")
            if table and "workbench" in runs:
                kernels.append({"db": runs["workbench"]["db"], "workload": wname, "table_ms": 1e3 * table["median"]})
    return _quiet.standalone_self_check(kernels, threads, ROOT)


def _best_workbench_trace(db: str) -> str:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        (trace,) = con.execute("SELECT trace FROM records WHERE is_best = 1 ORDER BY latency_ms LIMIT 1").fetchone()
    finally:
        con.close()
    return trace


def run_profile(out_dir: str, target: dict, trials: int, protocol) -> dict:
    """One session profiled twice in a fresh process each: with the change off ('before') and on ('after')."""
    out = {}
    for label, flag in (("before", "0"), ("after", "1")):
        protocol.phase(f"profile {label}")
        log(f"profile {label}: {PROFILE_WORKLOAD}, {trials} trials")
        db = os.path.join(out_dir, f"profile-{label}.db")
        p = subprocess.run(
            [
                sys.executable,
                os.path.join(HERE, "_profile.py"),
                PROFILE_WORKLOAD,
                "--trials",
                str(trials),
                "--db",
                db,
                "--target",
                json.dumps(target),
                "--improved",
                flag,
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=_quiet.thread_env(target["num-cores"]),
        )
        if p.returncode != 0:
            raise RuntimeError(f"profile failed:\n{p.stderr[-3000:]}")
        out[label] = json.loads(p.stdout)
    import _profile

    out["change"] = _profile.CHANGE
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=sorted(MODES), default="quick")
    ap.add_argument("--trials", type=int, nargs="*", help="override the mode's budgets (e.g. 8 for a smoke test)")
    ap.add_argument("--workloads", help="comma-separated subset (default: all eight)")
    ap.add_argument("--ms-stock", help="comma-separated workloads for ms-stock (default: the mode's)")
    ap.add_argument("--repeats", type=int)
    ap.add_argument(
        "--passes",
        type=int,
        default=1,
        help="time every library this many times, in turn, and pool the samples (for a host whose speed drifts)",
    )
    ap.add_argument(
        "--host-drift",
        choices=["refuse", "record"],
        default="refuse",
        help="a host slower than at its best: refuse/stop the run (default), or record it on the page and go on "
        "(then use --passes 3 or more: the kernels' comparison rests on the interleaved passes)",
    )
    ap.add_argument("--per-round", type=int, default=16)
    ap.add_argument("--ms-build-timeout", type=float, default=300.0)
    ap.add_argument("--profile-trials", type=int, help="0 skips the profile")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the tuner runs an interrupted invocation with the same settings finished (OUT/"
        f"{PARTIAL}, written after every run); the page names them",
    )
    ap.add_argument("--torch-python", default=os.path.join(ROOT, ".venv-torch", "bin", "python"))
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "out", "performance"))
    ap.add_argument("--results", default=RESULTS, help="where performance.md/.json go")
    ap.add_argument(
        "--threads",
        type=int,
        default=_quiet.available_cores(),
        help="threads of every tuner, kernel and library (TVM_NUM_THREADS, OMP_NUM_THREADS, "
        "OPENBLAS_NUM_THREADS, the target's num-cores; default: all available cores, %(default)s)",
    )
    ap.add_argument(
        "--force", action="store_true", help="run even when the machine is not quiet; the result is then marked invalid"
    )
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite performance.md from the existing performance.json (e.g. after editing the analysis)",
    )
    args = ap.parse_args()
    if args.report_only:
        path = os.path.join(args.results, "performance.json")
        with open(path) as f:
            result = json.load(f)
        if result.get("profile"):
            import _profile

            result["profile"]["change"] = _profile.CHANGE  # the description, not a measurement
        _report.per_workload(result, _report.derive(result))
        with open(path, "w") as f:
            json.dump(result, f, indent=1, default=str)
        write_report(result, args.results)
        return

    from workbench import tvm_env
    from workbench.dtypes import numpy_dtype
    from workbench.errors import WorkbenchError
    from workbench.workloads import registry

    mode = MODES[args.mode]
    budgets = args.trials or mode["budgets"]
    names = args.workloads.split(",") if args.workloads else WORKLOADS
    stock = args.ms_stock.split(",") if args.ms_stock is not None else mode["ms_stock"]
    repeats = args.repeats or mode["repeats"]
    if args.passes < 1:
        sys.exit("performance.py: --passes must be at least 1")
    if args.host_drift == "record" and args.passes < 3:
        # a drifting host is only tolerable where the comparison rests on interleaved passes
        sys.exit("performance.py: --host-drift record needs --passes 3 or more")
    profile_trials = mode["profile_trials"] if args.profile_trials is None else args.profile_trials
    reg = registry()
    for n in names:
        try:
            dtype = reg.get(n).spec().get("dtype", "float32")
        except WorkbenchError as e:
            sys.exit(f"performance.py: {e}")
        if dtype != "float32":
            # the peers' side (numpy, torch) and the re-measurement here are float32 only
            sys.exit(f"performance.py: {n} is {dtype}; benchmarks/low_precision.py compares low-precision kernels")
    threads = args.threads
    target = tvm_env.host_target_dict(threads)
    _quiet.set_thread_env(threads)
    protocol = _quiet.Protocol(
        "performance",
        threads,
        args.force,
        host_drift=args.host_drift,
        drift_scope="the kernels' table is timed side by side (every library in each of the rotated passes, samples "
        "pooled), so a drift moves every library alike; the tuning-time figures (wall time, time to quality, trials "
        "per second) come from one run per tuner, one after the other, and are not: a drift between two tuners' runs "
        "moves their ratio (performance.json keeps the probe reading before each run: protocol.checks)",
    )
    protocol.start()
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    # the make targets pass exactly --mode: any other option is a different run, named by its own command line
    made = {("--mode", "quick"): "make bench", ("--mode", "full"): "make bench-full"}
    cmd = made.get(tuple(sys.argv[1:])) or "python " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    result = {
        "mode": args.mode,
        "command": cmd,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, mcpu {target['mcpu']}",
        "target": json.dumps(target),
        "threads": threads,
        "versions": tvm_env.library_versions(),
        "budgets": budgets,
        "per_round": args.per_round,
        # a shorter limit fails MetaSchedule's slower builds, so its runs under another limit are not comparable
        "ms_build_timeout": args.ms_build_timeout,
        "repeats": repeats,
        "names": names,
        "ms_stock_workloads": [w for w in stock if w in names],
        "workloads": [],
        "runs": {},
        "remeasure": {},
        "vendor": {},
        "remeasure_protocol": "sequential",
        "problems": [],
    }
    for n in names:
        w = reg.get(n)
        result["workloads"].append(
            {
                "name": n,
                "op": w.op,
                "flops": w.flops,
                "arg_shapes": w.arg_shapes,
                "intensity": _report.arithmetic_intensity(
                    w.flops, w.arg_shapes, [numpy_dtype(d).itemsize for d in w.arg_dtypes]
                ),
            }
        )
    protocol.phase("the peak microbenchmark")
    log("peak microbenchmark")
    result["peak"] = run_peak(args.out, threads)
    log(f"peak: {result['peak']}")
    partial = os.path.join(args.out, PARTIAL)
    if args.resume:
        kept = kept_runs(partial, result, force=args.force)
    else:  # a fresh run: an earlier invocation's runs must not be kept by a later --resume
        kept = {}
        if os.path.exists(partial):
            os.remove(partial)
    result["resumed"] = []
    for budget in budgets:
        for n in names:
            runs = result["runs"].setdefault(str(budget), {}).setdefault(n, {})
            earlier = kept.get(str(budget), {}).get(n, {})
            if "workbench" in earlier:
                runs["workbench"] = earlier["workbench"]
                result["resumed"].append(f"{n} @ {budget} workbench")
            else:
                protocol.phase(f"tuning {n} @ {budget} with the workbench")
                log(f"{n} @ {budget}: workbench")
                runs["workbench"] = _tuners.run_workbench(
                    n, target, budget, args.per_round, os.path.join(args.out, f"wb-{n}-{budget}.db")
                )
                save_partial(partial, dict(result, protocol=protocol.summary()))
            log(f"  best {runs['workbench']['best_latency_ms']} ms, {runs['workbench']['wall_seconds']:.0f} s")
            configs = [("ms-fastbuild", True)] + ([("ms-stock", False)] if n in stock else [])
            for tuner, fast in configs:
                if tuner in earlier:
                    runs[tuner] = earlier[tuner]
                    result["resumed"].append(f"{n} @ {budget} {tuner}")
                    continue
                protocol.phase(f"tuning {n} @ {budget} with {tuner}")
                log(f"{n} @ {budget}: {tuner}")
                runs[tuner] = _tuners.run_ms(
                    n,
                    target,
                    budget,
                    args.per_round,
                    fast,
                    args.ms_build_timeout,
                    os.path.join(args.out, f"{tuner}-{n}-{budget}"),
                )
                save_partial(partial, dict(result, protocol=protocol.summary()))
                log(
                    f"  best {runs[tuner]['best_latency_ms']} ms, {runs[tuner]['wall_seconds']:.0f} s, "
                    f"failed {runs[tuner]['failed']}"
                )
    log("re-measuring final kernels, one library at a time")
    remeasure(result, args.out, target, threads, repeats, args.torch_python, protocol, passes=args.passes)
    verify_peak(result, args.out, threads, protocol)
    if profile_trials:
        result["profile"] = run_profile(args.out, target, profile_trials, protocol)
    protocol.phase("the standalone self-check")
    log("standalone self-check: each workbench kernel timed by `workbench best DB W --time`, alone")
    result["self_check"] = self_check(result, threads)
    protocol.finish()
    result["total_seconds"] = time.time() - t_start
    result["protocol"] = protocol.summary()
    result["derived"] = _report.derive(result)
    _report.per_workload(result, result["derived"])
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "performance.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    write_report(result, args.results)


def write_report(result: dict, results_dir: str) -> None:
    """performance.md (+ the roofline plot) from a result dict; the analysis section comes from ANALYSIS."""
    derived = _report.derive(result)
    plot = os.path.join(results_dir, "performance_roofline.html")
    # a peak below an achieved figure is not drawn as a roof
    has_plot = not result["peak"].get("below_achieved") and _report.roofline_html(result, derived, plot)
    analysis = open(ANALYSIS).read() if os.path.exists(ANALYSIS) else ""
    md = _report.markdown(result, derived, analysis, os.path.basename(plot) if has_plot else None)
    if result.get("self_check"):
        md += "\n" + _quiet.self_check_markdown(result["self_check"])
    md += f"\nTotal benchmark time: {result['total_seconds'] / 60:.1f} min.\n"
    with open(os.path.join(results_dir, "performance.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
