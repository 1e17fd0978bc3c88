"""Low-precision workloads (spec "dtype"): data, exact references, the real measurement path, layouts, sessions.

Every kernel here is tiny (matmul 16x16x16, conv 1x4x8x8): the modules of a test are built in one builder call.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from workbench import dtypes, layouts, measure, presets, space
from workbench.errors import WorkbenchError
from workbench.workloads import workload_from_spec

TARGET = {"kind": "llvm", "num-cores": 1}
PRESET = presets.get("quick")
LOW = ("int8", "bfloat16", "float8_e4m3fn", "float8_e5m2")


def conv(layout, **kw):
    p = {"layout": layout, "batch": 1, "in_channels": 4, "height": 8, "width": 8, "out_channels": 8}
    return {**p, "kernel": 3, "stride": 1, "padding": 1, **kw}


def dw(layout):
    return {
        "layout": layout,
        "batch": 1,
        "channels": 8,
        "height": 8,
        "width": 8,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
    }


OPS = {
    "matmul": ("matmul", {"m": 16, "n": 16, "k": 16}),
    "conv-nhwc": ("conv2d", conv("NHWC")),
    "conv-nchw": ("conv2d", conv("NCHW")),
    "dw-nhwc": ("depthwise_conv2d", dw("NHWC")),
    "dw-nchw": ("depthwise_conv2d", dw("NCHW")),
}


def spec(op_key, dtype, name=None, **extra):
    op, params = OPS[op_key]
    return dict({"name": name or f"{op_key}-{dtype}", "op": op, "dtype": dtype, "params": params}, **extra)


# ---------------------------------------------------------------- specs as data


def test_a_float32_spec_stays_as_it_was_and_a_low_precision_one_round_trips():
    plain = {"name": "mm", "op": "matmul", "params": {"m": 8, "n": 8, "k": 8}}
    w = workload_from_spec(plain)
    assert w.spec() == plain and json.dumps(w.spec()) == json.dumps(plain) and w.dtype == "float32"
    assert workload_from_spec(dict(plain, dtype="float32")).spec() == plain  # the default is never written out
    assert w.class_key == "matmul+none"
    q = workload_from_spec(spec("conv-nhwc", "int8", epilogue=["bias", "relu"], requantize="per-channel"))
    assert q.spec()["dtype"] == "int8" and q.spec()["requantize"] == "per-channel"
    again = workload_from_spec(q.spec())
    assert again.spec() == q.spec() and again.class_key == q.class_key == "conv2d:NHWC:int8+bias+relu+requantize"
    assert q.arg_dtypes == ["uint8", "int8", "int32", "float32", "int8"]  # X, W, bias, rq_scale, output
    assert q.arg_types[1] == ((3, 3, 4, 8), "int8") and "dtype int8" in q.describe()
    b = workload_from_spec(spec("matmul", "bfloat16"))
    assert b.arg_dtypes == ["bfloat16", "bfloat16", "float32"]
    assert workload_from_spec(spec("matmul", "float8_e4m3fn")).arg_dtypes == ["float8_e4m3fn"] * 2 + ["float32"]
    # GFLOPS stay 2 x MACs: a low-precision workload counts what its float32 twin counts
    assert b.flops == workload_from_spec(dict(spec("matmul", "float32"))).flops == 2 * 16**3


def test_inputs_have_their_dtype_and_range():
    w = workload_from_spec(spec("conv-nchw", "int8", epilogue=["bias"], requantize="per-tensor"))
    x, wt, bias, scale = w.make_inputs(seed=3)
    assert (x.dtype, wt.dtype, bias.dtype, scale.dtype) == (np.uint8, np.int8, np.int32, np.float32)
    assert x.min() >= 0 and x.max() > 200 and wt.min() < -100 and wt.max() > 100
    assert scale.shape == (1,) and 0 < scale[0] < 1
    for dt in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        a, b = workload_from_spec(spec("matmul", dt)).make_inputs(seed=3)
        assert a.dtype == b.dtype == dtypes.numpy_dtype(dt)
        # drawn in float32 and rounded: the same values as the float32 workload's, to the dtype's precision
        f32 = workload_from_spec(spec("matmul", "float32")).make_inputs(seed=3)[0]
        assert np.array_equal(a, f32.astype(dtypes.numpy_dtype(dt)))


# ---------------------------------------------------------------- references, against independent arithmetic


def _conv_nhwc_int64(x, w, pad):
    """NHWC x HWIO, stride 1, via explicit windows and an int64 einsum (not the workbench's im2col loop)."""
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    win = sliding_window_view(xp, w.shape[:2], axis=(1, 2))  # n, oh, ow, c, kh, kw
    return np.einsum("nhwcij,ijco->nhwo", win, w.astype(np.int64))


def test_int8_references_are_exact_integer_arithmetic():
    mm = workload_from_spec(spec("matmul", "int8", epilogue=["bias", "relu"]))
    a, b, bias = mm.make_inputs(seed=0)
    expect = np.maximum(np.einsum("mk,kn->mn", a.astype(np.int64), b.astype(np.int64)) + bias, 0)
    got = mm.numpy_reference([a, b, bias])
    assert got.dtype == np.int32 and np.array_equal(got, expect)

    c = workload_from_spec(spec("conv-nhwc", "int8"))
    x, w = c.make_inputs(seed=1)
    assert np.array_equal(c.numpy_reference([x, w]), _conv_nhwc_int64(x, w, 1))
    n = workload_from_spec(spec("conv-nchw", "int8"))
    xn, wn = n.make_inputs(seed=1)
    ref_nhwc = _conv_nhwc_int64(xn.transpose(0, 2, 3, 1), wn.transpose(2, 3, 1, 0), 1)
    assert np.array_equal(n.numpy_reference([xn, wn]), ref_nhwc.transpose(0, 3, 1, 2))
    d = workload_from_spec(spec("dw-nhwc", "int8"))
    xd, wd = d.make_inputs(seed=2)
    xp = np.pad(xd.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = sliding_window_view(xp, (3, 3), axis=(1, 2))  # n, oh, ow, c, kh, kw
    assert np.array_equal(d.numpy_reference([xd, wd]), np.einsum("nhwcij,ijc->nhwc", win, wd[..., 0].astype(np.int64)))


def test_requantize_rounds_half_to_even_and_saturates():
    w = workload_from_spec(spec("matmul", "int8", requantize="per-channel"))
    a, b, scale = w.make_inputs(seed=0)
    acc = a.astype(np.int64) @ b.astype(np.int64)
    got = w.numpy_reference([a, b, scale])
    assert got.dtype == np.int8 and len(np.unique(got)) > 40  # the scales spread the output over int8's range
    half = np.full_like(scale, 0.5)
    r = w.numpy_reference([a, b, half]).astype(np.int64)
    exact = acc / 2
    ties = (acc % 2 == 1) & (np.abs(exact) < 127)
    assert ties.any() and np.all(r[ties] % 2 == 0)  # x.5 goes to the even neighbour
    assert np.array_equal(r[(exact > 128)], np.full((exact > 128).sum(), 127))
    assert np.array_equal(r[(exact < -129)], np.full((exact < -129).sum(), -128))


def test_bf16_and_fp8_references_are_float_math_on_the_rounded_inputs():
    for dt in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        w = workload_from_spec(spec("matmul", dt, epilogue=["bias"]))
        a, b, bias = w.make_inputs(seed=4)
        expect = (a.astype(np.float64) @ b.astype(np.float64) + bias).astype(np.float32)
        got = w.numpy_reference([a, b, bias])
        assert got.dtype == np.float32 and np.array_equal(got, expect), dt


# ---------------------------------------------------------------- the real measurement path


CASES = {
    f"{op_key}-{dt}{'-rq' if rq else ''}": spec(op_key, dt, **rq)
    for dt in LOW
    for op_key in OPS
    for rq in ([{}, {"requantize": "per-channel", "epilogue": ["bias", "relu"]}] if dt == "int8" else [{}])
}
CASES["matmul-int8-rq-tensor"] = spec("matmul", "int8", requantize="per-tensor")
CASES["matmul-bf16-bn-add"] = spec("matmul", "bfloat16", epilogue=["bn", "relu", "add"])
CASES["conv-grouped-dilated-fp8"] = dict(
    spec("conv-nhwc", "float8_e5m2"), params=conv("NHWC", groups=2, dilation=2, stride=2)
)
CASES["conv-grouped-int8"] = dict(spec("conv-nchw", "int8"), params=conv("NCHW", groups=2))
CASES["conv-unpadded-fp8"] = dict(spec("conv-nchw", "float8_e4m3fn"), params=dict(conv("NCHW"), padding=0))
CASES["bmm-int8"] = {
    "name": "bmm",
    "op": "batch_matmul",
    "dtype": "int8",
    "params": {"batch": 2, "m": 8, "n": 8, "k": 8},
}
# every FP8 code through the kernel: C[i, 0] = A[i, 0] * 1.0
for _fmt in ("float8_e4m3fn", "float8_e5m2"):
    CASES[f"codes-{_fmt}"] = {"name": "codes", "op": "matmul", "dtype": _fmt, "params": {"m": 256, "n": 1, "k": 1}}


@pytest.fixture(scope="module")
def built(pools):
    builder, _ = pools
    ws = {k: workload_from_spec(s) for k, s in CASES.items()}
    results = builder.build([w.mod for w in ws.values()])
    yield {k: (w, b) for (k, w), b in zip(ws.items(), results)}
    for b in results:
        builder.discard(b.path)


@pytest.mark.parametrize("case", [k for k in CASES if not k.startswith("codes")])
def test_each_dtype_and_op_builds_runs_and_matches_its_reference(case, built, pools):
    _, runner = pools
    w, b = built[case]
    assert b.path, b.error_msg
    assert measure.recorded_arg_types(b.path) == w.arg_types  # the artifact knows its argument dtypes
    inputs = w.make_inputs(seed=1234)
    out, cls, msg = runner.compute(b.path, inputs, w.arg_shapes[-1])  # a plain shape: the dtype is recorded
    assert cls is None, msg
    ref = w.numpy_reference(inputs)
    assert out.dtype == ref.dtype == dtypes.numpy_dtype(w.arg_dtypes[-1])
    ok, detail = measure.verify(out, ref, w.dtype)
    assert ok, detail
    assert measure.verify(out, ref)[0]  # the row inferred from the output's type agrees
    if w.dtype == "int8":
        wrong = out.copy()
        wrong.flat[0] += 1
        assert not measure.verify(wrong, ref)[0]  # exact: one unit off fails
    r = runner.run(b.path, w.arg_types, min_repeat_ms=0)
    assert r.error_class is None and r.latency_ms > 0, r


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
def test_every_fp8_code_decodes_exactly(fmt, built, pools):
    # TVM 0.27's own float8 cast turns 0x00 into 2**-7 (E4M3FN) and drops subnormals: the workbench decodes the bits
    _, runner = pools
    w, b = built[f"codes-{fmt}"]
    codes = np.arange(256, dtype=np.uint8).view(dtypes.numpy_dtype(fmt)).reshape(256, 1)
    one = np.ones((1, 1), np.float32).astype(dtypes.numpy_dtype(fmt))
    out, cls, msg = runner.compute(b.path, [codes, one], (256, 1))
    assert cls is None, msg
    np.testing.assert_array_equal(out, codes.astype(np.float32))  # NaN == NaN here, inf and the subnormals too


# ---------------------------------------------------------------- layout strategies keep the dtype


# every strategy on int8; the weight-rewriting ones on the float types (the others pass the weights through)
LAYOUT_CASES = [(s, "int8") for s in layouts.STRATEGIES] + [
    (s, dt) for dt in ("bfloat16", "float8_e4m3fn") for s, v in layouts.STRATEGIES.items() if v.rewrites_offline
]


@pytest.fixture(scope="module")
def layout_builds(pools):
    builder, _ = pools
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    cands = {}
    for strategy, dt in LAYOUT_CASES:
        extra = {"requantize": "per-channel", "epilogue": ["bias"]} if dt == "int8" else {}
        w = workload_from_spec(spec("conv-nhwc", dt, **extra))
        sch = next(s for seed in range(1, 20) if (s := space.annotate(w, 0, seed, strategy)) is not None)
        cands[(strategy, dt)] = (w, sch)
    mods = [RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod) for _, sch in cands.values()]
    results = builder.build(mods)
    yield {k: (w, sch, b) for (k, (w, sch)), b in zip(cands.items(), results)}
    for b in results:
        builder.discard(b.path)


@pytest.mark.parametrize("strategy,dtype", LAYOUT_CASES)
def test_layout_strategies_keep_the_weights_dtype(strategy, dtype, layout_builds, pools):
    from tvm.s_tir import meta_schedule as ms

    _, runner = pools
    w, sch, b = layout_builds[(strategy, dtype)]
    assert b.path, b.error_msg
    inputs = w.make_inputs(seed=1234)
    kin = layouts.get(strategy).deploy_inputs(sch, w, inputs)
    assert [k.dtype for k in kin] == [x.dtype for x in inputs]
    args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    assert [k.shape for k in kin] == [tuple(int(x) for x in a.shape) for a in args][:-1]
    out, cls, msg = runner.compute(b.path, kin, tuple(int(x) for x in args[-1].shape))
    assert cls is None, msg
    ok, detail = measure.verify(out, w.numpy_reference(inputs), dtype)
    assert ok, detail


# ---------------------------------------------------------------- sessions


def test_an_int8_session_tunes_times_and_verifies_and_its_best_deploys(tmp_path):
    from workbench import TuningSession
    from workbench.program import TunedProgram

    s = TuningSession(
        {"name": "t-mm-int8", "op": "matmul", "dtype": "int8", "params": {"m": 32, "n": 32, "k": 32}},
        trials=4,
        trials_per_round=2,
        population=16,
        generations=1,
        init_min_unmeasured=4,
        strategy="pre-transformed",
        target=TARGET,
        db=str(tmp_path / "i8.db"),
        noise="off",
        confirm_rounds=0,
    )
    summ = s.run()
    assert summ["status"] == "finished" and summ["trials"] == 4 and summ["verified"], s.records()[
        ["error_class", "error_msg"]
    ]
    rec = s.records()
    assert rec["error_class"].isna().all() and rec["gflops"].gt(0).all()
    prog = TunedProgram.from_store(str(tmp_path / "i8.db"), "t-mm-int8")
    assert prog.workload.dtype == "int8"
    inputs = prog.workload.make_inputs(seed=9)
    out = prog(*inputs)
    assert out.dtype == np.int32 and np.array_equal(out, prog.workload.numpy_reference(inputs))


def test_a_bf16_spec_file_tunes_through_the_cli(tmp_path):
    f = tmp_path / "bf16.json"
    f.write_text(json.dumps(spec("matmul", "bfloat16", name="t-mm-bf16", epilogue=["bias", "relu"])))
    db = str(tmp_path / "bf.db")
    args = ["--trials", "2", "--trials-per-round", "2", "--strategy", "packed", "--db", db, "--quiet", "--json"]
    r = cli("tune", "--spec", str(f), *args)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["trials"] == 2 and out["verified"] and out["best_gflops"] > 0, out


# ---------------------------------------------------------------- bad input: one line, exit 2


@pytest.mark.parametrize(
    "bad,needle",
    [
        ({"dtype": "float16"}, "unknown dtype 'float16'; valid: float32, bfloat16, float8_e4m3fn, float8_e5m2, int8"),
        ({"dtype": 8}, "unknown dtype 8; valid:"),
        ({"dtype": ["int8"]}, 'unknown dtype ["int8"]; valid:'),
        ({"dtype": "int8", "requantize": "per-row"}, "'requantize' must be one of per-tensor, per-channel"),
        ({"dtype": "bfloat16", "requantize": "per-tensor"}, "'requantize' applies to dtype int8 only"),
        ({"requantize": "per-tensor"}, "'requantize' applies to dtype int8 only"),
        ({"dtype": "int8", "epilogue": ["bn"]}, "epilogue 'bn' is not available for int8"),
        ({"dtype": "int8", "params": {"m": 4, "n": 4, "k": 70000}}, "can overflow the int32 accumulator"),
    ],
)
def test_bad_dtype_specs_give_one_line(bad, needle):
    s = dict({"name": "x", "op": "matmul", "params": {"m": 4, "n": 4, "k": 4}}, **bad)
    with pytest.raises(WorkbenchError) as e:
        workload_from_spec(s)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "op,params",
    [
        (
            "conv1d",
            {"batch": 1, "length": 8, "in_channels": 4, "out_channels": 4, "kernel": 3, "stride": 1, "padding": 1},
        ),
        ("softmax", {"m": 4, "n": 4}),
    ],
)
def test_an_op_without_low_precision_is_refused_in_one_line(op, params):
    with pytest.raises(WorkbenchError, match=f"op {op} supports dtype float32 only; int8 is available for matmul, "):
        workload_from_spec({"name": "x", "op": op, "dtype": "int8", "params": params})


def cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=300)


def test_the_cli_refuses_a_bad_dtype_with_exit_2(tmp_path):
    for content, needle in [
        ({"name": "x", "op": "matmul", "dtype": "int4", "params": {"m": 4, "n": 4, "k": 4}}, "unknown dtype 'int4'"),
        (
            {"name": "x", "op": "norm", "dtype": "bfloat16", "params": {"batch": 1, "m": 4, "n": 4}},
            "op norm supports dtype float32 only",
        ),
    ]:
        f = tmp_path / "bad.json"
        f.write_text(json.dumps(content))
        r = cli("tune", "--spec", str(f), "--db", str(tmp_path / "x.db"))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert needle in lines[0], lines[0]
