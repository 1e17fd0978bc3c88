"""benchmarks/low_precision.py (issue 15's int8/bf16 kernels against PyTorch): arguments, the plan of what each
library times, the run's order of processes (fakes for the tuner and the workers), the page's verdicts from a
fabricated result, and PyTorch's worker on tiny shapes in .venv-torch when it exists. No tuning, no benchmark."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, BENCH)

import _protocol  # noqa: E402
import low_precision as lp  # noqa: E402

TORCH_PYTHON = os.path.join(ROOT, ".venv-torch", "bin", "python")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--trials", "0"], "--trials: must be at least 1, not 0"),
        (["--repeats", "x"], "--repeats: not a whole number: 'x'"),
        (["--comparisons", "int8-conv,fp16-conv"], "unknown comparison 'fp16-conv'; choose from int8-conv"),
        (["--comparisons", ","], "unknown comparison ','"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--host-drift", "record", "--passes", "2"], "--host-drift record needs --passes 3 or more"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_status_2(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        lp.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("low_precision.py: ") and says in err


def test_missing_json_or_torch_is_one_line_from_the_command(tmp_path):
    def run(*a):
        return subprocess.run(
            [sys.executable, os.path.join(BENCH, "low_precision.py"), *a], capture_output=True, text=True, cwd=ROOT
        )

    p = run("--report-only", "--results", str(tmp_path))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "low_precision.json" in p.stderr
    p = run("--torch-python", str(tmp_path / "nopython"), "--results", str(tmp_path))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no PyTorch interpreter" in p.stderr
    assert not os.path.exists(tmp_path / "low_precision.md")


def _specs():
    from workbench.workloads import registry

    reg = registry()
    specs = {n: reg.get(n).spec() for n in ("resnet18-int8.conv2", "bert-int8.ffn1", "bert-bf16.ffn1", "bert.ffn1")}
    specs[lp.CONV_TWIN] = lp.twin_spec(specs["resnet18-int8.conv2"])
    return specs


def test_the_plan_compares_the_same_shapes_and_epilogues_on_every_side():
    specs = _specs()
    twin = specs[lp.CONV_TWIN]
    int8 = specs["resnet18-int8.conv2"]
    # the int8 conv's fp32 side is the same conv with its float epilogue, not the registry's bare resnet18.conv2
    assert twin["params"] == int8["params"] and twin["epilogue"] == ["bias", "relu"]
    assert "dtype" not in twin and "requantize" not in twin
    tune, libs = lp.plan(lp.DEFAULT_COMPARISONS, specs)
    assert tune == ["resnet18-int8.conv2", lp.CONV_TWIN, "bert-int8.ffn1", "bert.ffn1", "bert-bf16.ffn1"]
    assert set(libs) == {"torch int8 x86", "torch int8 onednn", "torch float"}
    assert libs["torch int8 x86"]["engine"] == "x86" and libs["torch float"]["engine"] is None
    for engine in ("x86", "onednn"):
        conv, lin = libs[f"torch int8 {engine}"]["ops"]
        assert conv == dict(
            kind="conv2d", ci=64, co=64, h=56, w=56, k=3, stride=1, pad=1, dtype="int8", bias=True, relu=True,
            key=f"int8-conv|int8, engine {engine}", comparison="int8-conv", label=f"int8, engine {engine}",
        )  # fmt: skip
        assert (lin["kind"], lin["m"], lin["n"], lin["k"], lin["bias"], lin["relu"]) == ("linear", 128, 3072, 768, 1, 0)
    fl = {op["key"]: op for op in libs["torch float"]["ops"]}
    assert fl["int8-conv|fp32 F.conv2d + relu"]["relu"] and fl["int8-conv|fp32 F.conv2d + relu"]["dtype"] == "float32"
    assert fl["bf16-matmul|bf16 F.linear"]["bias"] and fl["bf16-matmul|bf16 F.linear"]["dtype"] == "bfloat16"
    assert not fl["bf16-matmul|bf16 torch.mm"]["bias"] and fl["bf16-matmul|bf16 torch.mm"]["kind"] == "mm"
    assert fl["int8-matmul|fp32 F.linear"]["bias"] and not fl["int8-matmul|fp32 F.linear"]["relu"]


class _FakeProtocol:
    def __init__(self, events):
        self.events = events

    def __call__(self, name, threads, force, **kw):
        self.events.append(("protocol", threads, force))
        return self

    def start(self):
        self.events.append(("start",))

    def phase(self, name):
        self.events.append(("phase", name))

    def probe(self, when):
        self.events.append(("probe", when))

    def finish(self):
        self.events.append(("finish",))

    def summary(self):
        return {"valid": True}


def test_the_run_tunes_then_times_each_library_alone_one_process_after_another(monkeypatch, tmp_path):
    events = []

    def fake_tune(workload, target, trials, per_round, db, **kw):
        events.append(("tune", workload))
        if workload.startswith("--spec="):  # the twin reaches the CLI as its spec file, with the int8 conv's shape
            spec = json.load(open(workload[len("--spec=") :]))
            assert spec["name"] == lp.CONV_TWIN and spec["params"]["in_channels"] == 64
        return dict(measured=trials, ok=trials, failed=0, best_latency_ms=1.0, wall_seconds=2.0, verified=True, db=db)

    class FakeWorker:
        def __init__(self, argv, env=None, cwd=None):
            assert env["TVM_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "2" and argv[-1] == "2"
            self.torch = argv[0] == TORCH_PYTHON
            events.append(("start", "torch" if self.torch else "tvm"))

        def call(self, cmd, **kw):
            events.append((cmd,))
            if cmd == "setup":
                if self.torch:
                    self.keys = [op["key"] for op in kw["ops"]]
                    return {"ops": {k: {"ok": True, "detail": "d"} for k in self.keys}, "torch": "2.x"}
                self.keys = [k["key"] for k in kw["kernels"]]
                return {k: {"verified": True, "check": "exact match", "strategy": "pre-transformed"} for k in self.keys}
            assert kw == {"repeats": 3, "min_repeat_ms": 100}
            return {k: {"samples": [3e-3, 1e-3, 2e-3], "wait_fraction": 0.0, "other_cores": 0.0} for k in self.keys}

        def close(self):
            events.append(("close",))

    monkeypatch.setattr(lp._tuners, "run_workbench", fake_tune)
    monkeypatch.setattr(_protocol, "Worker", FakeWorker)
    monkeypatch.setattr(lp._quiet, "Protocol", _FakeProtocol(events))
    monkeypatch.setattr(lp._quiet, "quiesce", lambda *a, **k: events.append(("quiesce",)))
    monkeypatch.setattr(lp._quiet, "set_thread_env", lambda threads: None)
    monkeypatch.setattr(lp, "implementations", lambda *a: {})
    monkeypatch.setattr(lp._quiet, "standalone_self_check", lambda kernels, threads, cwd: [])
    args = lp.parse_args(
        ["--comparisons", "int8-conv,bf16-matmul", "--threads", "2", "--repeats", "3", "--out", str(tmp_path)]
    )
    args.torch_python = TORCH_PYTHON
    result = lp.run(args)
    tuned = [e[1] for e in events if e[0] == "tune"]
    assert tuned == ["resnet18-int8.conv2", "--spec=" + str(tmp_path / (lp.CONV_TWIN + ".json")), "bert-bf16.ffn1",
                     "bert.ffn1"]  # fmt: skip
    phases = [e[1] for e in events if e[0] == "phase"]
    libs = ["workbench", "torch int8 x86", "torch int8 onednn", "torch float"]
    assert phases == [f"tuning {n}" for n in result["runs"]] + [f"timing {x}" for x in libs] + [
        "the standalone self-check"
    ]
    i = events.index(("probe", "before timing"))
    one = [("quiesce",), None, None, ("setup",), ("time",), ("close",)]
    for lib in libs:  # each library set up, timed and closed before the next one starts
        for e in one:
            assert e is None or events[i + 1] == e, (lib, events[i + 1 :][:6])
            i += 1
    assert events[i + 1] == ("probe", "after timing")
    k = result["kernels"]["wb|resnet18-int8.conv2"]
    assert k["median"] == 2e-3 and k["verified"] and k["n"] == 3
    assert result["kernels"]["bf16-matmul|bf16 torch.mm"]["library"] == "torch float"


def _kernel(ms, **kw):
    return dict(median=ms / 1e3, spread_pct=3.0, n=5, **kw)


def _result(int8_conv_ms=0.5, x86_ms=0.6, fp32_ms=1.5, bf16_ms=2.0, torch_bf16_ms=1.0, valid=True, verified=True):
    specs = _specs()
    flops = {n: 2.0e8 for n in specs}
    ws = {n: {"spec": s, "flops": flops[n], "dtype": s.get("dtype", "float32")} for n, s in specs.items()}
    vnni = [{"intrinsic": "workbench.dot_16x4_vnni", "instruction": "vpdpbusd", "block": "conv2d_nhwc_o_update"}]

    def wb(ms, ok=True, intr=()):
        check = "exact match" if ok else "3 of 200704 elements differ"
        return _kernel(ms, verified=ok, check=check, strategy="pre-transformed", tensor_intrinsics=list(intr))

    def torch(c, label, dtype, ms, kind="linear", ok=True):
        op = {"kind": kind, "dtype": dtype, "bias": True, "relu": kind == "conv2d", "comparison": c, "label": label}
        return f"{c}|{label}", _kernel(ms, ok=ok, detail="max error 0.50 steps", op=op, library="torch")

    kernels = {
        "wb|resnet18-int8.conv2": wb(int8_conv_ms, verified, vnni),
        f"wb|{lp.CONV_TWIN}": wb(fp32_ms),
        "wb|bert-int8.ffn1": wb(0.2, True, vnni),
        "wb|bert.ffn1": wb(0.4),
        "wb|bert-bf16.ffn1": wb(bf16_ms),
    }
    kernels.update(
        [
            torch("int8-conv", "int8, engine x86", "int8", x86_ms, "conv2d"),
            torch("int8-conv", "int8, engine onednn", "int8", 0.9, "conv2d"),
            torch("int8-conv", "fp32 F.conv2d + relu", "float32", 1.2, "conv2d"),
            torch("int8-matmul", "int8, engine x86", "int8", 0.3),
            torch("int8-matmul", "int8, engine onednn", "int8", 0.25),
            torch("int8-matmul", "fp32 F.linear", "float32", 0.45),
            torch("bf16-matmul", "bf16 F.linear", "bfloat16", torch_bf16_ms),
            torch("bf16-matmul", "bf16 torch.mm", "bfloat16", torch_bf16_ms * 1.1),
            torch("bf16-matmul", "fp32 F.linear", "float32", 0.45),
        ]
    )
    run = dict(measured=64, ok=64, failed=0, wall_seconds=80.0, best_latency_ms=1.0, verified=True, db="x.db")
    return {
        "command": "python benchmarks/low_precision.py --threads 2",
        "date": "2026-12-03 10:00 UTC",
        "machine": "x86_64, 2 cores, mcpu znver4",
        "target": {"kind": "llvm", "mcpu": "znver4", "num-cores": 2},
        "threads": 2,
        "versions": {"tvm": "0.27.0.post1"},
        "trials": 64,
        "per_round": 16,
        "repeats": 5,
        "passes": 1,
        "comparisons": list(lp.DEFAULT_COMPARISONS),
        "workloads": ws,
        "runs": dict({n: dict(run) for n in ws}, **{"bert.ffn1": dict(run, wall_seconds=None, reused=True)}),
        "kernels": kernels,
        "torch": {"torch float": {"torch": "2.13.0+cpu"}},
        "implementations": {
            "int8-conv|int8, engine x86": [],
            "bf16-matmul|bf16 F.linear": ["brg_matmul:avx512_core_bf16"],
        },
        "self_check": [
            {
                "workload": "bert.ffn1",
                "table_ms": 0.4,
                "standalone_ms": 0.41,
                "spread": 0.02,
                "noisy": False,
                "ratio": 1.025,
                "agrees": True,
                "command": "workbench best x.db bert.ffn1 --time --threads 2 --json",
            }
        ],  # fmt: skip
        "protocol": {"valid": valid, "checks": [], "git": {"commit": "abc", "dirty": False}, "threads": 2},
        "total_seconds": 600.0,
    }


def _verdicts(md):
    table = md.split("## Where each target stands")[1].split("\n## ")[0]
    return [
        line.rsplit("|", 2)[-2].strip() for line in table.splitlines() if line.startswith("| ") and "target" not in line
    ]


def test_the_page_states_every_target_with_its_ratio_and_verdict(tmp_path):
    res = _result()
    d = lp.derive(res)
    t = {(x["comparison"], x["goal"]): x for x in d["targets"]}
    assert t[("int8-conv", 1.0)]["ratio"] == pytest.approx(0.6 / 0.5)  # the faster engine (x86), not onednn
    assert t[("int8-conv", 2.5)]["ratio"] == pytest.approx(3.0) and t[("int8-conv", 2.5)]["met"]
    assert t[("int8-matmul", 1.0)]["ratio"] == pytest.approx(0.25 / 0.2)
    assert t[("int8-matmul", 2.5)]["ratio"] == pytest.approx(2.0) and not t[("int8-matmul", 2.5)]["met"]
    assert t[("bf16-matmul", 1.0)]["ratio"] == pytest.approx(0.5) and not t[("bf16-matmul", 1.0)]["met"]
    lp.write_report(res, str(tmp_path))
    md = open(tmp_path / "low_precision.md").read()
    assert _verdicts(md) == ["**met**", "**met**", "**met**", "**NOT met**", "**NOT met**"]
    assert "1.20× (0.5 ms vs PyTorch int8, engine x86 0.6 ms)" in md
    assert "`vpdpbusd`" in md and "no oneDNN primitive (fbgemm)" in md and "`brg_matmul:avx512_core_bf16`" in md
    assert "| 1.5 (3 %) | 133.3 | 3.00× as fast |" in md  # fp32 twin: ms, GFLOPS, the int8 kernel's speedup
    assert "quint8 with one scale for the tensor" in md and "**int32** accumulator" in md and "1/1 within 5 %" in md
    assert "**write bfloat16**" in md and "not valid under the protocol" not in md
    assert "commit `abc`" in md
    assert "| bert.ffn1 | 64 | 0 | reused |" in md and "the records stores of `bert.ffn1` were tuned" in md
    assert lp.reused_run(str(tmp_path / "absent.db"), "bert.ffn1") is None


def test_the_page_says_when_pytorchs_int8_activations_were_held_to_7_bits(tmp_path):
    res = _result()
    lp.write_report(res, str(tmp_path))
    assert "held to 7 bits" not in open(tmp_path / "low_precision.md").read()  # a VNNI machine: all 8 bits
    held = "quint8 held to 7 bits (reduce_range: this CPU has no VNNI)"
    for key in ("int8-conv|int8, engine x86", "int8-matmul|int8, engine onednn"):
        res["kernels"][key]["activations"] = held
    lp.write_report(res, str(tmp_path))
    md = open(tmp_path / "low_precision.md").read()
    assert md.count(held) == 1 and "`reduce_range=True`" in md


def test_a_wrong_kernel_or_an_invalid_run_meets_no_target(tmp_path):
    res = _result(int8_conv_ms=0.1, verified=False, valid=False)  # fast but wrong: counts for nothing
    lp.write_report(res, str(tmp_path))
    md = open(tmp_path / "low_precision.md").read()
    assert _verdicts(md)[:2] == ["**NOT met**", "**NOT met**"] and "failed its check" in md
    assert "**FAILED**: 3 of 200704 elements differ" in md and "not valid under the protocol" in md


def test_report_only_rewrites_the_page_from_the_json(tmp_path):
    with open(tmp_path / "low_precision.json", "w") as f:
        json.dump(_result(), f)
    assert lp.main(["--report-only", "--results", str(tmp_path)]) == 0
    assert "# Low precision against PyTorch" in open(tmp_path / "low_precision.md").read()


@pytest.mark.skipif(
    # the stamp `make torch-env` writes only once torch is installed (the interpreter exists before that)
    not os.path.exists(os.path.join(ROOT, ".venv-torch", ".installed")),
    reason="torch could not be installed into .venv-torch: `make torch-env` prints why",
)
def test_pytorch_worker_runs_and_checks_each_op_on_tiny_shapes():
    conv = dict(kind="conv2d", ci=16, co=32, h=6, w=6, k=3, stride=1, pad=1, bias=True, relu=True)
    lin = dict(kind="linear", m=4, n=32, k=64, bias=True, relu=False)
    argv = [TORCH_PYTHON, os.path.join(BENCH, "_torch_low_precision.py"), "1"]
    for engine in ("x86", "onednn"):
        w = _protocol.Worker(argv)
        try:
            info = w.call(
                "setup", engine=engine, ops=[dict(conv, key="c", dtype="int8"), dict(lin, key="l", dtype="int8")]
            )
            out = w.call("time", repeats=2, min_repeat_ms=2)
        finally:
            w.close()
        assert info["engine"] == engine and info["threads"] == 1
        assert all(info["ops"][k]["ok"] for k in "cl"), info["ops"]
        assert "quint8" in info["ops"]["c"]["output"] and len(out["c"]["samples"]) == 2
        assert info["ops"]["c"]["activations"].startswith("quint8")  # 7 bits where the CPU has no VNNI
    w = _protocol.Worker(argv)
    try:
        ops = [dict(lin, key="l", dtype="bfloat16"), dict(conv, key="c", dtype="float32")]
        ops.append(dict(kind="mm", m=4, n=32, k=64, key="m", dtype="bfloat16"))
        info = w.call("setup", engine=None, ops=ops)
        with pytest.raises(RuntimeError, match="int8 op needs an engine"):
            w.call("setup", engine=None, ops=[dict(lin, key="l", dtype="int8")])
    finally:
        w.close()
    assert all(v["ok"] for v in info["ops"].values()) and info["ops"]["m"]["output"] == "torch.bfloat16"
