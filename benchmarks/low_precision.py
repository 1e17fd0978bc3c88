"""Low precision against PyTorch: the workbench's int8 and bfloat16 kernels against PyTorch's, and against the
workbench's own float32 kernel of the same shape (issue 15's kernel targets).

    python benchmarks/low_precision.py --threads 2                       # 64 trials per workload
    python benchmarks/low_precision.py --trials 8 --repeats 2 --force --host-wait 0 \\
        --out /tmp/lp --results /tmp/lp                                  # a smoke test
    python benchmarks/low_precision.py --report-only                     # the page again, from the JSON

The comparisons (``--comparisons``, default the first three; every workload is in
``sample_workloads/low_precision.json`` or the registry):

- ``int8-conv``: ``resnet18-int8.conv2`` (uint8 x int8, bias, ReLU, per-channel requantize to int8) against a float32
  twin tuned here, ``resnet18-fp32-bias-relu.conv2`` (the same conv with bias and ReLU: the registry's
  ``resnet18.conv2`` has no epilogue), and PyTorch's quantized ``ConvReLU2d``;
- ``int8-matmul``: ``bert-int8.ffn1`` against ``bert.ffn1`` (both with bias) and ``torch.ao.nn.quantized.Linear``;
- ``bf16-matmul``: ``bert-bf16.ffn1`` against ``bert.ffn1`` and bfloat16 ``F.linear`` / ``torch.mm`` (oneDNN);
- ``bf16-conv`` (optional): ``resnet18-bf16.conv2`` against ``resnet18.conv2`` and bfloat16 ``F.conv2d``.

What it runs: each workbench workload tuned by ``workbench tune`` in a fresh process (``_tuners.run_workbench``:
quick preset, ``pre-transformed``, which puts int8 on ``vpdpbusd`` on an AVX512-VNNI CPU); then every best kernel
rebuilt from its store, verified against the workload's reference and timed in a process of its own (the
``_remeasure`` worker's timing, with a set-up that keeps each argument's dtype); then PyTorch in its own
environment (``.venv-torch``, ``_torch_low_precision.py``): the float ops (float32, bfloat16) in one process, the
int8 ops once per quantized engine (``x86``, ``onednn``), each in its own process; all of them one after the other,
``_quiet.quiesce()`` between two, ``--passes`` times in rotated order (samples pooled). Then the implementation
oneDNN ran for each PyTorch op (``ONEDNN_VERBOSE``), and the standalone self-check (``workbench best DB W --time``
per workbench kernel, alone). Every step follows the benchmark protocol (``_quiet.py``): a quiet check before each
phase (status 3 and one line when the machine is busy; ``--force`` marks the result invalid), the probe before and
after, every thread pool sized to ``--threads``, medians of ``--repeats`` samples of >= 100 ms with their spread.

``--reuse`` keeps a records store in ``--out`` that already holds a verified best of its workload (an earlier run
the protocol stopped after tuning) and times it without tuning again; the page names such stores.

Writes ``docs/results/low_precision.md`` and ``low_precision.json`` (``--results``); records stores go to
``benchmarks/out/low_precision/`` (``--out``). A bad argument is one line on stderr and exit status 2.
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
ANALYSIS = os.path.join(HERE, "low_precision_analysis.md")
TORCH_PYTHON = os.path.join(ROOT, ".venv-torch", "bin", "python")
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import _protocol  # noqa: E402
import _quiet  # noqa: E402
import _report  # noqa: E402
import _tuners  # noqa: E402

# The int8 conv's float32 twin: the registry's resnet18.conv2 has no epilogue, the int8 layer has bias and ReLU
# (and a requantize, which float32 has no counterpart for), so the fp32 side of the int8 target is this spec.
CONV_TWIN = "resnet18-fp32-bias-relu.conv2"
COMPARISONS = {
    "int8-conv": {
        "title": "int8 conv2d",
        "low": "resnet18-int8.conv2",
        "fp32": CONV_TWIN,
        "targets": [("torch", 1.0), ("fp32", 2.5)],
    },
    "int8-matmul": {
        "title": "int8 matmul",
        "low": "bert-int8.ffn1",
        "fp32": "bert.ffn1",
        "targets": [("torch", 1.0), ("fp32", 2.5)],
    },
    "bf16-matmul": {"title": "bf16 matmul", "low": "bert-bf16.ffn1", "fp32": "bert.ffn1", "targets": [("torch", 1.0)]},
    "bf16-conv": {"title": "bf16 conv2d", "low": "resnet18-bf16.conv2", "fp32": "resnet18.conv2", "targets": []},
}
DEFAULT_COMPARISONS = ["int8-conv", "int8-matmul", "bf16-matmul"]
ENGINES = ("x86", "onednn")
# What each side computes, in words, for the tables (the differences are the page's caveats).
SEMANTICS = {
    "int8": "uint8 × int8 → int32 sum",
    "bfloat16": "bfloat16 × bfloat16 → float32 sum, float32 output",
    "float32": "float32",
}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"low_precision.py: {message}", file=sys.stderr)
        sys.exit(2)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def parse_comparisons(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in COMPARISONS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown comparison {', '.join(map(repr, bad)) or repr(text)}; choose from {', '.join(COMPARISONS)}"
        )
    return list(dict.fromkeys(names))


def parse_args(argv=None):
    ap = _Parser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--comparisons",
        type=parse_comparisons,
        default=DEFAULT_COMPARISONS,
        help=f"comma-separated, from {', '.join(COMPARISONS)} (default: {','.join(DEFAULT_COMPARISONS)})",
    )
    ap.add_argument("--trials", type=_positive, default=64, help="trials per workbench workload (default 64)")
    ap.add_argument("--per-round", type=_positive, default=16)
    ap.add_argument("--repeats", type=_positive, default=5, help="timing samples of >= 100 ms per kernel")
    ap.add_argument("--passes", type=_positive, default=1, help="time every library this many times, rotated")
    ap.add_argument("--host-drift", choices=["refuse", "record"], default="refuse")
    ap.add_argument(
        "--host-wait",
        type=float,
        help="seconds to wait for a slow host before a phase (default: the protocol's; 0 for a smoke test)",
    )
    ap.add_argument("--threads", type=_positive, default=_quiet.available_cores())
    ap.add_argument("--torch-python", default=TORCH_PYTHON)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "out", "low_precision"))
    ap.add_argument("--results", default=RESULTS, help="where low_precision.md/.json go")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep a workload's records store in --out when it holds a verified best (tuned by an earlier run that "
        "stopped before its timing) instead of tuning it again; the page says which were reused",
    )
    ap.add_argument("--force", action="store_true", help="run on a busy machine; the result is marked invalid")
    ap.add_argument("--report-only", action="store_true", help="rewrite the page from low_precision.json")
    args = ap.parse_args(argv)
    if args.host_drift == "record" and args.passes < 3 and not args.report_only:
        # a drifting host is only tolerable where the comparison rests on interleaved passes
        ap.error("--host-drift record needs --passes 3 or more")
    return args


# ---------------------------------------------------------------- workloads and PyTorch ops


def twin_spec(spec: dict) -> dict:
    """The float32 spec of a low-precision spec: same op, shape and float epilogue, no dtype or requantize."""
    out = {k: v for k, v in spec.items() if k not in ("dtype", "requantize", "weight")}
    out["name"] = CONV_TWIN
    return out


def torch_op(spec: dict, dtype: str, kind: str | None = None) -> dict:
    """The op PyTorch runs for a workbench spec: a conv2d (NCHW semantics, N = 1) or a linear / mm (m, n, k)."""
    p = spec["params"]
    epi = spec.get("epilogue") or []
    if spec["op"] == "conv2d":
        if p.get("batch", 1) != 1 or p.get("groups", 1) != 1 or p.get("dilation", 1) != 1:
            raise ValueError(f"{spec['name']}: only batch 1, ungrouped, undilated convs are compared")
        op = dict(kind="conv2d", ci=p["in_channels"], co=p["out_channels"], h=p["height"], w=p["width"])
        op.update(k=p["kernel"], stride=p["stride"], pad=p["padding"])
    elif spec["op"] == "matmul":
        op = dict(kind=kind or "linear", m=p["m"], n=p["n"], k=p["k"])
    else:
        raise ValueError(f"{spec['name']}: op {spec['op']} has no PyTorch counterpart here")
    if op["kind"] == "mm":
        return dict(op, dtype=dtype, bias=False, relu=False)
    return dict(op, dtype=dtype, bias="bias" in epi, relu="relu" in epi)


def plan(comparisons: list[str], specs: dict) -> tuple[list[str], dict]:
    """(workbench workloads to tune, in order; {library: {"engine", "ops": [op + key + comparison + label]}})."""
    tune, libs = [], {}
    for c in comparisons:
        cfg = COMPARISONS[c]
        low, fp = specs[cfg["low"]], specs[cfg["fp32"]]
        tune += [n for n in (cfg["low"], cfg["fp32"]) if n not in tune]
        ops = []
        if low.get("dtype") == "int8":
            for e in ENGINES:
                ops.append((f"torch int8 {e}", e, torch_op(low, "int8"), f"int8, engine {e}"))
        else:
            ops.append(("torch float", None, torch_op(low, "bfloat16"), "bf16 " + _op_label(low)))
            if low["op"] == "matmul":
                ops.append(("torch float", None, torch_op(low, "bfloat16", "mm"), "bf16 torch.mm"))
        ops.append(("torch float", None, torch_op(fp, "float32"), "fp32 " + _op_label(fp)))
        for lib, engine, op, label in ops:
            entry = libs.setdefault(lib, {"engine": engine, "ops": []})
            entry["ops"].append(dict(op, key=f"{c}|{label}", comparison=c, label=label))
    return tune, libs


def _op_label(spec: dict) -> str:
    if spec["op"] == "conv2d":
        return "F.conv2d" + (" + relu" if "relu" in (spec.get("epilogue") or []) else "")
    return "F.linear"


# ---------------------------------------------------------------- the workbench's kernels, in their own process

WORKER_BOOT = (
    f"import sys; sys.path.insert(0, {HERE!r}); sys.path.insert(0, {ROOT!r}); "
    "import low_precision; low_precision.serve_worker()"
)


def worker_argv(threads: int) -> list:
    """A worker that rebuilds and times workbench kernels: ``_remeasure``'s timing (it reads the thread count from
    ``argv[1]``, hence ``-c``) with :func:`_wb_setup`, which keeps every argument's dtype (``_remeasure``'s own
    set-up casts every argument to float32, so int8 and bfloat16 kernels cannot run there)."""
    return [sys.executable, "-c", WORKER_BOOT, str(int(threads))]


def _wb_setup(msg):
    import _remeasure
    import numpy as np

    from workbench import tvm_env

    tvm_env.setup()
    import tvm

    from workbench import measure
    from workbench.program import TunedProgram

    tvm_env.configure_thread_pool(_remeasure.THREADS)
    dev, info = tvm.cpu(), {}
    for k in msg["kernels"]:
        prog = TunedProgram.from_store(k["db"], k["workload"])
        w = prog.workload
        lib = prog.build()
        inputs = w.make_inputs(seed=7)  # not the tuner's seed-0 data
        args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in prog.transform_weights(list(inputs))]
        out = tvm.runtime.empty(w.arg_shapes[-1], w.arg_dtypes[-1], dev)
        name = getattr(lib, "entry_name", None) or "main"
        lib[name](*args, out)
        ok, detail = measure.verify(out.numpy(), w.numpy_reference(inputs), w.dtype)
        _remeasure.KERNELS[k["key"]] = (lib, name, args + [out])
        info[k["key"]] = {
            "verified": ok,
            "check": detail,
            "strategy": prog.strategy,
            "tensor_intrinsics": prog.tensor_intrinsics,
            "arg_types": [[list(s), d] for s, d in w.arg_types],
        }
    return info


def serve_worker():
    import _remeasure

    _protocol.serve({"setup": _wb_setup, "time": _remeasure.time_})


# ---------------------------------------------------------------- the run


def torch_usable(torch_python: str) -> str | None:
    """None when ``torch_python`` imports torch, else why not (one line)."""
    if not os.path.exists(torch_python):
        return f"no PyTorch interpreter at {torch_python!r} (make torch-env creates .venv-torch)"
    p = subprocess.run([torch_python, "-c", "import torch"], capture_output=True, text=True)
    if p.returncode != 0:
        return f"{torch_python!r} cannot import torch: {(p.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


def implementations(torch_python: str, libs: dict, threads: int) -> dict:
    """{op key: [primitive:implementation, ...]}: what oneDNN executed in one call of each PyTorch op
    (``ONEDNN_VERBOSE=1``), reorders included (a layout conversion paid inside every call); an empty list means no
    oneDNN primitive ran (fbgemm, MKL or PyTorch's own code); None: the run failed."""
    out = {}
    for setup in libs.values():
        env = dict(_quiet.thread_env(threads), ONEDNN_VERBOSE="1")
        argv = [torch_python, os.path.join(HERE, "_torch_low_precision.py"), str(threads), "--implementations"]
        p = subprocess.run(argv + [json.dumps(setup)], capture_output=True, text=True, env=env, cwd=ROOT)
        key = None
        for line in p.stdout.splitlines():
            if line.startswith("@@op "):
                key = line[5:]
                out[key] = []
            elif line.startswith("@@end"):
                key = None
            elif key and ",primitive,exec," in line:
                f = line.split(",")
                if len(f) > 6:
                    impl = f"{f[5]}:{f[6]}" if not f[6].startswith(f[5]) else f[6]
                    if impl not in out[key]:
                        out[key].append(impl)
        if p.returncode != 0:
            for op in setup["ops"]:
                out.setdefault(op["key"], None)
    return out


def reused_run(db: str, name: str) -> dict | None:
    """A tuning run read back from its records store (``workbench show DB --json``), or None when the store is
    missing or holds no verified best of ``name``; its wall time is not in the store."""
    if not os.path.exists(db):
        return None
    p = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "show", db, "--json"], capture_output=True, text=True, cwd=ROOT
    )
    if p.returncode != 0:
        return None
    w = json.loads(p.stdout.strip().splitlines()[-1])["workloads"].get(name)
    if not w or w.get("best_latency_ms") is None:
        return None
    m = w["measured"]
    return dict(measured=m, ok=m - w["errors"], failed=w["errors"], best_latency_ms=w["best_latency_ms"]) | {
        "wall_seconds": None,
        "verified": True,
        "db": db,
        "reused": True,
    }


def run(args) -> dict:
    from workbench import tvm_env
    from workbench.workloads import registry

    reg = registry()
    threads = args.threads
    target = tvm_env.host_target_dict(threads)
    specs = {}
    for c in args.comparisons:
        cfg = COMPARISONS[c]
        specs[cfg["low"]] = reg.get(cfg["low"]).spec()
        if cfg["fp32"] == CONV_TWIN:
            specs[CONV_TWIN] = twin_spec(specs[cfg["low"]])
        else:
            specs[cfg["fp32"]] = reg.get(cfg["fp32"]).spec()
    tune, libs = plan(args.comparisons, specs)
    _quiet.set_thread_env(threads)
    protocol = _quiet.Protocol(
        "low_precision", threads, args.force, host_wait_s=args.host_wait, host_drift=args.host_drift
    )
    protocol.start()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    from workbench.workloads import workload_from_spec

    result = {
        "command": "python " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, mcpu {target['mcpu']}",
        "target": target,
        "threads": threads,
        "versions": tvm_env.library_versions(),
        "trials": args.trials,
        "per_round": args.per_round,
        "repeats": args.repeats,
        "passes": args.passes,
        "comparisons": args.comparisons,
        "workloads": {},
        "runs": {},
        "kernels": {},
        "torch": {},
    }
    for name in tune:
        w = workload_from_spec(specs[name])
        result["workloads"][name] = {"spec": specs[name], "flops": w.flops, "dtype": w.dtype}
    for name in tune:
        arg = name
        if name == CONV_TWIN:
            path = os.path.join(args.out, CONV_TWIN + ".json")
            with open(path, "w") as f:
                json.dump(specs[name], f)
            arg = f"--spec={path}"  # run_workbench puts its workload argument where the CLI reads one; one token
        db = os.path.join(args.out, f"wb-{name}.db")
        r = reused_run(db, name) if args.reuse else None
        if r is not None:
            log(f"reusing {db}: {r['measured']} trials, best {r['best_latency_ms']} ms")
            result["runs"][name] = r
            continue
        protocol.phase(f"tuning {name}")
        log(f"tuning {name}: {args.trials} trials")
        r = _tuners.run_workbench(arg, target, args.trials, args.per_round, db)
        r.pop("timeline", None)
        result["runs"][name] = r
        log(f"  best {r['best_latency_ms']} ms, {r['wall_seconds']:.0f} s")

    kernels = [{"key": f"wb|{n}", "db": result["runs"][n]["db"], "workload": n} for n in tune]
    libraries = [("workbench", worker_argv(threads), {"kernels": kernels})]
    torch_argv = [args.torch_python, os.path.join(HERE, "_torch_low_precision.py"), str(threads)]
    libraries += [(lib, torch_argv, setup) for lib, setup in libs.items()]
    samples, readings, setups = {}, {}, {}
    protocol.probe("before timing")
    for p in range(args.passes):
        for lib, argv, setup in libraries[p % len(libraries) :] + libraries[: p % len(libraries)]:
            _quiet.quiesce()
            what = f"timing {lib}" + (f" (pass {p + 1}/{args.passes})" if args.passes > 1 else "")
            protocol.phase(what)
            log(f"{what}: {args.repeats} samples per kernel, alone in its own process")
            info, timed = _quiet.set_up_and_time(argv, setup, threads, args.repeats, ROOT)
            setups[lib] = info
            _quiet.pool_timed(timed, samples, readings)
    protocol.probe("after timing")
    checks = dict(setups.pop("workbench"))
    for lib, info in setups.items():
        result["torch"][lib] = {k: v for k, v in info.items() if k != "ops"}
        checks.update(info["ops"])
    for key, xs in samples.items():
        result["kernels"][key] = dict(_report.summarize(xs), **readings[key], **checks.get(key, {}), samples=xs)
    for lib, setup in libs.items():
        for op in setup["ops"]:
            result["kernels"][op["key"]].update(op=op, library=lib)
    log("the implementation oneDNN runs for each PyTorch op (ONEDNN_VERBOSE)")
    _quiet.quiesce()
    result["implementations"] = implementations(args.torch_python, libs, threads)
    protocol.phase("the standalone self-check")
    log("standalone self-check: each workbench kernel timed by `workbench best DB W --time`, alone")
    result["self_check"] = _quiet.standalone_self_check(
        [
            {"db": r["db"], "workload": n, "table_ms": 1e3 * result["kernels"][f"wb|{n}"]["median"]}
            for n, r in result["runs"].items()
        ],
        threads,
        ROOT,
    )
    protocol.finish()
    result["total_seconds"] = time.time() - t0
    result["protocol"] = protocol.summary()
    return result


# ---------------------------------------------------------------- the page


def derive(result: dict) -> dict:
    """Per comparison: the rows of its table and its targets with their verdicts."""
    out = {"comparisons": {}, "targets": []}
    valid = (result.get("protocol") or {}).get("valid", False)
    for c in result["comparisons"]:
        cfg = COMPARISONS[c]
        flops = result["workloads"][cfg["low"]]["flops"]
        low = result["kernels"].get(f"wb|{cfg['low']}")
        fp = result["kernels"].get(f"wb|{cfg['fp32']}")
        torch_rows = [
            dict(k, key=key, label=k["op"]["label"])
            for key, k in result["kernels"].items()
            if k.get("op", {}).get("comparison") == c
        ]
        low_dt = result["workloads"][cfg["low"]]["dtype"]
        t_low = [r for r in torch_rows if r["op"]["dtype"] == low_dt]
        best_torch = min(t_low, key=lambda r: r["median"]) if t_low else None
        comp = {"low": low, "fp32": fp, "torch": torch_rows, "best_torch": best_torch, "flops": flops}
        out["comparisons"][c] = comp
        for against, goal in cfg["targets"]:
            other = best_torch if against == "torch" else fp
            ratio = other["median"] / low["median"] if (low and other) else None
            ok_kernels = bool(low and low.get("verified")) and bool(other and other.get("verified", other.get("ok")))
            met = ratio is not None and ratio >= goal and ok_kernels
            if against == "torch":
                what = f"{cfg['title']} ≥ {goal:.1f}× PyTorch {low_dt} (the faster of its modes)"
                who = f"PyTorch {best_torch['label']}" if best_torch else "PyTorch"
            else:
                what = f"{cfg['title']} ≥ {goal:.1f}× the workbench's fp32 kernel of the same shape"
                who = f"workbench fp32 `{cfg['fp32']}`"
            measured = (
                f"{ratio:.2f}× ({1e3 * low['median']:.4g} ms vs {who} {1e3 * other['median']:.4g} ms)"
                if ratio is not None
                else "not measured"
            )
            if ratio is not None and not ok_kernels:
                measured += "; a kernel failed its check, so it does not count"
            out["targets"].append(
                {"comparison": c, "target": what, "goal": goal, "ratio": ratio, "met": met, "measured": measured}
            )
    out["valid"] = valid
    return out


def _ms(k) -> str:
    if not k:
        return "–"
    return f"{1e3 * k['median']:.4g} ({k['spread_pct']:.0f} %)"


def _impl(result, key, dtype) -> str:
    impls = (result.get("implementations") or {}).get(key)
    if impls is None:
        return "not read"
    if impls:
        return ", ".join(f"`{i}`" for i in impls)
    return "no oneDNN primitive (fbgemm)" if dtype == "int8" else "no oneDNN primitive (MKL or PyTorch's own code)"


def _intrinsics(k) -> str:
    used = k.get("tensor_intrinsics") or []
    return ", ".join(f"`{u['instruction'] or u['intrinsic']}`" for u in used) or "none (plain loops)"


def _semantics(spec: dict, dtype: str) -> str:
    epi = list(spec.get("epilogue") or [])
    s = SEMANTICS[dtype] + (" + " + ", ".join(epi) if epi else "")
    if dtype == "int8":
        s += ", requantize per channel → int8" if spec.get("requantize") == "per-channel" else " → int32 output"
    elif dtype == "float32":
        s += " → float32"
    return s


def _torch_semantics(op: dict) -> str:
    extra = (" + bias" if op.get("bias") else "") + (" + ReLU" if op.get("relu") else "")
    if op["dtype"] == "int8":
        return f"quint8 (per tensor) × qint8 (per channel){extra}, requantized → quint8 per tensor"
    if op["dtype"] == "bfloat16":
        return f"bfloat16{extra} → bfloat16 output"
    return f"float32{extra}"


def markdown(result: dict, analysis: str = "") -> str:
    d = derive(result)
    L = ["# Low precision against PyTorch", ""]
    L.append(_quiet.summary_markdown(result.get("protocol")))
    L += [
        f"Generated by `{result['command']}` on {result['date']}; this machine: {result['machine']}. Target "
        f"`{json.dumps(result['target'])}`; {result['threads']} threads everywhere (`TVM_NUM_THREADS`, "
        "`OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, `torch.set_num_threads`). TVM "
        f"{result['versions'].get('tvm', '?')}, PyTorch {_torch_version(result)}. Each workbench workload was tuned "
        f"by `workbench tune` ({result['trials']} trials, quick preset, `pre-transformed`, "
        f"{result['per_round']} per round) in a fresh process; every best kernel was then rebuilt from its store, "
        "checked against the workload's reference and timed in a process of its own, then PyTorch in its own "
        "environment: the float ops in one process, the int8 ops once per quantized engine (`x86`, `onednn`), each "
        f"process alone on the machine and gone before the next started; {result['repeats']} samples of ≥100 ms "
        f"per kernel{_passes(result)}. Latencies are medians; spread = (max − min) / median. G(FL)OPS count 2 per "
        "multiply-add plus the epilogue, as for the float32 layer of the same shape (`workbench.workloads`), on every "
        "side, so figures compare across dtypes (int8: integer operations per second).",
        "",
    ]
    if not d["valid"]:
        L += ["**This run is not valid under the protocol (see above): its figures are not evidence.**", ""]
    L += ["## Where each target stands", "", "| target | measured | verdict |", "|---|---|---|"]
    for t in d["targets"]:
        verdict = "**met**" if t["met"] else "**NOT met**"
        L.append(f"| {t['target']} | {t['measured']} | {verdict} |")
    L.append("")
    for c in result["comparisons"]:
        L += _comparison_md(result, c, d["comparisons"][c])
    L += _differences_md(result)
    if analysis:
        L += ["## Analysis", "", analysis.strip(), ""]
    if result.get("self_check"):
        L.append(_quiet.self_check_markdown(result["self_check"]))
    L += ["## Tuning runs", "", "| workload | measured | failed | wall s | best ms (own timing) | verified |"]
    L.append("|---|---|---|---|---|---|")
    for n, r in result["runs"].items():
        wall = "reused" if r.get("reused") else f"{r['wall_seconds']:.0f}"
        L.append(
            f"| {n} | {r['measured']} | {r['failed']} | {wall} | {r['best_latency_ms']:.4g} | "
            f"{'yes' if r['verified'] else '**no**'} |"
        )
    reused = [n for n, r in result["runs"].items() if r.get("reused")]
    if reused:
        L += [
            "",
            f"Reused (`--reuse`): the records stores of {', '.join(f'`{n}`' for n in reused)} were tuned by an "
            "earlier run of the same command that the protocol stopped before its timing phase; this run timed "
            'their best kernels (best verified program per store; "wall s" is not in a store).',
        ]
    L += ["", f"Total benchmark time: {result.get('total_seconds', 0) / 60:.1f} min.", ""]
    return "\n".join(L)


def _torch_version(result) -> str:
    vs = {v.get("torch") for v in (result.get("torch") or {}).values() if v.get("torch")}
    return ", ".join(sorted(vs)) or "?"


def _passes(result) -> str:
    p = result.get("passes", 1)
    return f", the whole sequence {p} times in rotated order, samples pooled" if p > 1 else ""


def _comparison_md(result, c, comp) -> list:
    cfg = COMPARISONS[c]
    spec = result["workloads"][cfg["low"]]["spec"]
    fspec = result["workloads"][cfg["fp32"]]["spec"]
    low_dt = result["workloads"][cfg["low"]]["dtype"]
    flops, low = comp["flops"], comp["low"]
    p = spec["params"]
    shape = (
        f"{p['height']}×{p['width']}×{p['in_channels']} → {p['out_channels']}, {p['kernel']}×{p['kernel']}, "
        f"stride {p['stride']}, NHWC"
        if spec["op"] == "conv2d"
        else f"{p['m']} × {p['k']} → {p['n']}"
    )
    L = [
        f"## {cfg['title']}: `{cfg['low']}` ({shape})",
        "",
        f"| implementation | computes | ms (spread) | G(FL)OPS | the workbench's {low_dt} kernel is | check |",
        "|---|---|---|---|---|---|",
    ]

    def row(name, what, k, check):
        if not k:
            return f"| {name} | {what} | not measured | – | – | – |"
        g = flops / k["median"] / 1e9
        vs = f"{k['median'] / low['median']:.2f}× as fast" if low else "–"
        return f"| {name} | {what} | {_ms(k)} | {g:.1f} | {vs} | {check} |"

    def wb_check(k):
        return ("yes: " if k.get("verified") else "**FAILED**: ") + str(k.get("check"))

    if low:
        L.append(
            row(
                f"workbench `{cfg['low']}` ({low.get('strategy')}; tensor intrinsic {_intrinsics(low)})",
                _semantics(spec, low_dt),
                low,
                wb_check(low),
            )
        )
    else:
        L.append(row(f"workbench `{cfg['low']}`", _semantics(spec, low_dt), None, ""))
    fp = comp["fp32"]
    L.append(row(f"workbench fp32 `{cfg['fp32']}`", _semantics(fspec, "float32"), fp, wb_check(fp) if fp else ""))
    for t in comp["torch"]:
        best = " (faster mode)" if comp["best_torch"] and t["key"] == comp["best_torch"]["key"] else ""
        name = f"PyTorch {t['label']}{best}; oneDNN: {_impl(result, t['key'], t['op']['dtype'])}"
        check = ("yes: " if t.get("ok") else "**FAILED**: ") + str(t.get("detail"))
        L.append(row(name, _torch_semantics(t["op"]), t, check))
    L.append("")
    return L


def _differences_md(result) -> list:
    cs = result["comparisons"]
    L = ["## What differs between the two sides", ""]
    if "int8-conv" in cs:
        L.append(
            "- **int8 conv2d.** The workbench's kernel takes uint8 activations and int8 weights with no zero points "
            "(an engine folds them into the bias), adds an int32 bias, applies ReLU and requantizes with one float32 "
            "scale per output channel to **int8**, rounding half to even. PyTorch's `ConvReLU2d` takes quint8 "
            "activations per tensor (zero point 0 here) and qint8 weights per channel, a float bias (quantized "
            "inside with the input × weight scales), and requantizes to **quint8 with one scale for the tensor** "
            "(a quantized PyTorch activation cannot carry per-channel scales). The arithmetic per output is the "
            "same (a uint8 × int8 sum in int32, a bias, a clamp, a scale, a round); the output's scales differ. "
            f"The fp32 side is `{CONV_TWIN}`, tuned here: the same conv with bias and ReLU (the registry's "
            "`resnet18.conv2` has no epilogue); float32 has no requantize step. PyTorch's fp32 conv is `F.conv2d` "
            "with bias then `relu_` (eager: two calls)."
        )
    held = sorted(
        {k["activations"] for k in result.get("kernels", {}).values() if "7 bits" in k.get("activations", "")}
    )
    if held:
        L.append(
            f"- **PyTorch's int8 activations: {held[0]}.** Without VNNI its x86 kernels sum pairs of u8 × s8 "
            "products in int16 (`vpmaddubsw`), which saturates on full-range activations; PyTorch's own x86 "
            "default (`reduce_range=True`) uses 7 bits for that reason, and so does this benchmark there. The "
            "workbench's uint8 activations keep all 8 bits."
        )
    if "int8-matmul" in cs:
        L.append(
            "- **int8 matmul.** The workbench's `bert-int8.ffn1` outputs the **int32** accumulator plus an int32 "
            "bias, with no requantize (the workload has none); PyTorch's quantized `Linear` adds a float bias and "
            "requantizes to **quint8** per tensor, so it does more work per output (a float multiply, a round, a "
            "clamp) but writes a quarter of the bytes. Its weights are held n × k (as `nn.Linear` does), the "
            "workbench's k × n rewritten offline for `vpdpbusd`; both pack their weights before timing."
        )
    if "bf16-matmul" in cs or "bf16-conv" in cs:
        L.append(
            "- **bfloat16.** The workbench's bfloat16 kernels read bfloat16 inputs, accumulate in float32 and "
            "**write float32**; on a CPU with AVX512-BF16 their inner loops are the `vdpbf16ps` dot product where "
            "the shape maps onto it (the implementation column names the intrinsic; docs/dtypes.md), elsewhere "
            "float32 arithmetic on widened values. PyTorch's bfloat16 `F.linear` / `torch.mm` / `F.conv2d` run "
            "oneDNN's bf16 kernels (`avx512_core_bf16`, the `vdpbf16ps` dot product where the CPU has it) and "
            "**write bfloat16** (half the output bytes). `torch.mm` takes no bias; `F.linear`'s bias is bfloat16, "
            "the workbench's float32. Each is checked against arithmetic on the very rounded inputs it reads."
        )
    L += [
        "- **Layouts and packing.** Every workbench kernel is timed as deployed with `pre-transformed` weights "
        "(rewritten once, offline, not timed); PyTorch's quantized modules pack their weights once, when they are "
        "set; its float ops run eagerly on plain tensors, so a weight reorder oneDNN needs is paid inside every "
        "call (the oneDNN column lists every primitive one call executed, `reorder` included).",
        "- **Data.** Each side times its own random data (timing does not depend on the values); each side's check "
        "is on its own data: the workbench's against its exact NumPy reference (int8: equal; float: 1e-3), "
        "PyTorch's against float32 arithmetic on the same quantized or rounded inputs (int8: within one output "
        "quantization step; bfloat16: 2⁻⁷ of the output's scale).",
        "",
    ]
    return L


def write_report(result: dict, results_dir: str) -> str:
    analysis = open(ANALYSIS).read() if os.path.exists(ANALYSIS) else ""
    md = markdown(result, analysis)
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, "low_precision.md")
    with open(path, "w") as f:
        f.write(md)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report_only:
        path = os.path.join(args.results, "low_precision.json")
        try:
            with open(path) as f:
                result = json.load(f)
        except (OSError, ValueError) as e:
            print(f"low_precision.py: cannot read {path}: {e}", file=sys.stderr)
            return 2
        print(write_report(result, args.results))
        return 0
    why = torch_usable(args.torch_python)
    if why:
        print(f"low_precision.py: {why}", file=sys.stderr)
        return 2
    result = run(args)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "low_precision.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(write_report(result, args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
