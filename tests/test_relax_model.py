"""The Relax path: ResNet-18 / MobileNet-V2 nn.Modules -> task extraction -> one tuning session -> whole-model build."""

import json
import subprocess
import sys

import numpy as np
import pytest

from workbench import relax_model as rm
from workbench.errors import WorkbenchError


def test_extraction_finds_resnet_tasks_with_multiplicities():
    m = rm.resnet18(image=32, width=8, classes=10, stages=2)
    tasks = rm.extract(m)
    names = {t.task_name: t for t in tasks}
    assert "fused_conv2d_add_relu" in names  # the stem: conv + folded-BN bias + relu
    assert any(n.count("add") >= 2 for n in names)  # a residual conv: bias add + skip add
    assert "max_pool2d" in names and "mean" in names
    # stages=2: layer1's two blocks are identical, so their tasks are called twice
    assert sum(t.weight for t in tasks if t.task_name.startswith("fused_conv2d")) == 2 * 2 * 2 + 1 + 1
    assert tasks == sorted(tasks, key=lambda t: -t.weight * t.flops)
    assert tasks[0].class_key == "relax:fused_conv2d_add_relu"


def test_a_tasks_weights_are_the_parameters_fed_from_bound_weights():
    """A conv task's layout-free parameters are its weight and folded-BN bias, never its activations (the data
    input, a residual): so every layout strategy applies to it, and only the weights are rewritten."""
    from workbench import layouts

    m = rm.resnet18(image=32, width=8, classes=10, stages=2)
    shapes = {tuple(v.shape) for v in m.weights.values()}
    convs = [t for t in rm.extract(m) if t.task_name.startswith("fused_conv2d")]
    residual = [t for t in convs if t.task_name.count("add") >= 2]
    assert convs and residual
    for t in convs:
        w = t.weight_indices
        weight, bias = (t.arg_shapes[i] for i in w)  # OIHW weight, folded-BN bias (1, O, 1, 1)
        assert weight in shapes and bias == (1, weight[0], 1, 1), t.describe()
        assert 0 not in w and len(t.arg_shapes) - 1 not in w  # the data input and the output
        assert layouts.parse_strategies("pre-transformed,packed", t) == ["pre-transformed", "packed"]
    assert all(len(t.arg_shapes) - 2 not in t.weight_indices for t in residual)  # the skip input is data
    pool = next(t for t in rm.extract(m) if t.task_name == "max_pool2d")
    assert pool.weight_indices == [] and layouts.parse_strategies("pre-transformed", pool) == ["no-rewrite"]
    with pytest.raises(WorkbenchError):
        rm.resnet18(image=8, stages=4)


@pytest.mark.slow
def test_tiny_budget_tunes_compiles_and_matches_untuned(tmp_path):
    """`workbench model resnet18`: extract, tune the 2 biggest tasks in one session (weights pre-transformed),
    compile with the records, compare; the tuned build reads its weights rewritten at compile time."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "model",
            "resnet18",
            "--image",
            "32",
            "--width",
            "8",
            "--stages",
            "2",
            "--max-tasks",
            "2",
            "--trials",
            "8",
            "--trials-per-round",
            "4",
            "--strategy",
            "pre-transformed",
            "--db",
            str(tmp_path / "rx.db"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["trials"] == 8 and res["output_shape"] == [1, 1000]
    assert len(res["tuned_tasks"]) == 2  # every tuned task has a verified record and went into the database
    assert res["matches"] and res["tolerance"] == 1e-3, res["max_abs_error"]  # float32's (int8's is 1e-2)
    assert res["untuned_latency_ms"] > 0 and res["tuned_latency_ms"] > 0
    # the tuned build really used the records: exactly the tuned tasks' functions were scheduled from the database
    # (which build is faster is not asserted: at this budget either can win)
    assert res["applied"] == sorted(w.split(".", 1)[1] for w in res["tuned_tasks"])
    # each tuned conv's weight rewrite was split off and evaluated on the constants: the model calls the
    # rewritten kernel and never the rewrite
    from workbench.store import RecordStore

    m = rm.resnet18(image=32, width=8, stages=2)
    db, used = rm.database(RecordStore(str(tmp_path / "rx.db"), readonly=True), rm.extract(m))
    calls = [ln for ln in rm.prepared(m, db)["forward"].script().splitlines() if "R.call_tir(" in ln]
    assert sorted(used) == sorted(res["tuned_tasks"])
    assert not [ln for ln in calls if "_weight_prepack" in ln]
    assert {ln.split("R.call_tir(")[1].split(",")[0] for ln in calls if "_prepacked" in ln} == {
        w.split(".", 1)[1] + "_prepacked" for w in res["tuned_tasks"]
    }
    bad = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "model", "resnet18", "--stages", "9", "--db", str(tmp_path / "rx.db")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_task_with_weights_of_two_ranks_tunes_pre_transformed(tmp_path):
    """The classifier's matmul + bias: a 2-D weight rewritten offline beside a 1-D bias; each would-be best is
    verified on its weights rewritten (the bias left as it is), and no candidate fails."""
    from workbench import TuningSession

    m = rm.resnet18(image=32, width=8, classes=1000, stages=1)  # 1000 classes: some layouts pad them
    fc = next(t for t in rm.extract(m) if t.task_name.startswith("fused_matmul"))
    assert [len(fc.arg_shapes[i]) for i in fc.weight_indices] == [2, 1]
    s = TuningSession(fc, strategy="pre-transformed", trials=16, trials_per_round=8, db=str(tmp_path / "fc.db"))
    summary = s.run()
    assert summary["status"] == "finished" and summary["errors"] == 0 and summary["verified"], summary
    assert s.records()["error_class"].isna().all()


def _conv(x, w, b, stride, pad, groups=1):
    """NCHW x OIHW convolution with groups, plus bias: the reference the Relax build is checked against."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    cols = np.stack(
        [xp[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride] for i in range(kh) for j in range(kw)],
        axis=2,
    ).reshape(n, groups, cg, kh * kw, oh, ow)
    y = np.einsum("ngckhw,gock->ngohw", cols, w.reshape(groups, o // groups, cg, kh * kw)).reshape(n, o, oh, ow)
    return y + b[None, :, None, None]


def _mobilenet_v2_numpy(config, wt, x):
    """MobileNet-V2 from exported weights and the config alone (what a PyTorch copy of the network gets)."""
    relu6 = lambda v: np.clip(v, 0.0, 6.0)  # noqa: E731
    y = relu6(_conv(x, wt["stem.weight"], wt["stem.bias"], 2, 1))
    for i, (cin, cout, stride, t) in enumerate(rm.mobilenet_v2_channels(config["width_mult"])["blocks"]):
        p = f"blocks.{i}."
        h = relu6(_conv(y, wt[p + "expand.weight"], wt[p + "expand.bias"], 1, 0)) if t != 1 else y
        h = relu6(_conv(h, wt[p + "dw.weight"], wt[p + "dw.bias"], stride, 1, groups=h.shape[1]))
        h = _conv(h, wt[p + "project.weight"], wt[p + "project.bias"], 1, 0)
        y = h + y if (stride == 1 and cin == cout) else h
    y = relu6(_conv(y, wt["last.weight"], wt["last.bias"], 1, 0)).mean(axis=(2, 3))
    return y @ wt["fc.weight"].T + wt["fc.bias"]


def test_mobilenet_v2_has_depthwise_tasks_and_its_exported_weights_rebuild_it(tmp_path):
    """Depthwise 3x3 convs are tasks of their own; the weights written to disk and the config alone rebuild a
    network whose output is the compiled Relax model's (the contract a PyTorch copy relies on)."""
    m = rm.mobilenet_v2(image=32, width_mult=0.25, classes=10)
    tasks = rm.extract(m)
    depthwise = [t for t in tasks if len(t.arg_shapes[1]) == 4 and t.arg_shapes[1][1:] == (1, 3, 3)]
    assert depthwise and all("clip" in t.task_name for t in depthwise)  # depthwise conv + bias + ReLU6, fused
    assert all(t.name.startswith("mnv2.") for t in tasks)
    rm.save_weights(m, str(tmp_path / "w.safetensors"))
    config, weights = rm.load_weights(str(tmp_path / "w.safetensors"))
    assert config == m.config and list(weights) == list(m.weights)
    assert all(weights[k].dtype == np.float32 and np.array_equal(weights[k], m.weights[k]) for k in weights)
    x = m.example_input()
    out, _ = rm.run(rm.build(m), x, repeat=1, min_repeat_ms=0)
    ref = _mobilenet_v2_numpy(config, weights, x.astype(np.float64))
    assert out.shape == (1, 10) and np.abs(out - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    again = rm.from_config(config, weights)  # the identical model from the file
    assert all(np.array_equal(again.weights[k], m.weights[k]) for k in weights)
    with pytest.raises(WorkbenchError, match="shape"):
        rm.from_config(config, dict(weights, **{"fc.weight": weights["fc.weight"][:5]}))


def test_model_command_rejects_bad_dtypes_and_other_models_options(capsys, tmp_path):
    from workbench import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["model", "mobilenet_v2", "--dtype", "bogus"])
    assert e.value.code == 2
    for argv in (
        ["mobilenet_v2", "--dtype", "int8"],
        ["mobilenet_v2", "--stages", "2"],
        ["resnet18", "--width-mult", "0.5"],
        ["mobilenet_v2", "--layout", "NHWC"],
        ["resnet18", "--dtype", "int8", "--layout", "NCHW"],
    ):
        assert cli.main(["model", *argv, "--db", str(tmp_path / "unused.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 6 and all(line.startswith("workbench: error:") for line in err)
    assert "int8" in err[1] and "--stages" in err[2] and "--width-mult" in err[3]
    assert (
        "--layout does not apply to mobilenet_v2" in err[4] and "--layout does not apply to resnet18 (int8)" in err[5]
    )
    with pytest.raises(SystemExit) as e:
        cli.main(["model", "resnet18", "--layout", "NCWH"])
    assert e.value.code == 2


def test_an_nhwc_resnet18_computes_the_nchw_networks_function_with_nhwc_conv_tasks(tmp_path):
    """The layout is a build of the same network: the same input, weights (PyTorch's OIHW) and output; its conv
    tasks take NHWC activations; the config on disk rebuilds it; a bad layout is one line."""
    kw = dict(image=64, width=8, stages=2, classes=10)
    nchw, nhwc = rm.resnet18(**kw), rm.resnet18(**kw, layout="NHWC")
    assert "layout" not in nchw.config and nhwc.config["layout"] == "NHWC"
    assert {k: v.shape for k, v in nhwc.weights.items()} == {k: v.shape for k, v in nchw.weights.items()}
    stem = [t for t in rm.extract(nhwc) if t.arg_shapes[1] == (8, 3, 7, 7)]
    assert stem and stem[0].arg_shapes[0] == (1, 64, 64, 3)  # the input transposed once, before the stem
    x = nchw.example_input()
    a, _ = rm.run(rm.build(nchw), x, repeat=1, min_repeat_ms=0)
    b, _ = rm.run(rm.build(nhwc), x, repeat=1, min_repeat_ms=0)
    assert a.shape == b.shape == (1, 10) and np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(a).max())
    rm.save_weights(nhwc, str(tmp_path / "w.safetensors"))
    assert rm.from_config(*rm.load_weights(str(tmp_path / "w.safetensors"))).config == nhwc.config
    with pytest.raises(WorkbenchError, match="layout must be one of NCHW, NHWC"):
        rm.resnet18(**kw, layout="NCWH")


def test_int8_resnet18_is_the_float_network_quantized_with_u8_s8_convs(tmp_path):
    """Per-channel int8 weights and per-tensor uint8 activations of the same float32 weights: the convs are
    u8 x s8 -> s32 tasks with the requantize in their epilogue, the output is the float network's within the
    quantization error, and the quantized parameters on disk rebuild the identical model."""
    kw = dict(image=64, width=8, stages=2, classes=10)
    fp, q = rm.resnet18(**kw), rm.resnet18_int8(**kw)
    assert q.config["dtype"] == "int8" and q.weights["stem.weight_q"].dtype == np.int8
    convs = [t for t in rm.extract(q) if "conv2d" in t.task_name]
    assert convs and all(t.arg_dtypes[:2] == ["uint8", "int8"] for t in convs)
    # their multiply-accumulate is VNNI's (u8 x s8 -> s32): the plan offers it; verification keeps the float rows
    from workbench import intrinsics, tvm_env

    vnni = tvm_env.make_target({"kind": "llvm", "mcpu": "cascadelake", "num-cores": 1})
    assert all(t.mac_dtype == "int8" and t.dtype == "float32" for t in convs)
    assert intrinsics.plan(convs[0], vnni, "pre-transformed")[0].instruction == "vpdpbusd"
    assert {t.mac_dtype for t in rm.extract(fp)} == {"float32"}
    x = q.example_input()
    ref, _ = rm.run(rm.build(fp), x, repeat=1, min_repeat_ms=0)
    out, _ = rm.run(rm.build(q), x, repeat=1, min_repeat_ms=0)
    assert np.abs(out - ref).max() <= 0.05 * np.abs(ref).max()  # quantization error, not a wrong graph
    rm.save_weights(q, str(tmp_path / "q.safetensors"))
    again = rm.from_config(*rm.load_weights(str(tmp_path / "q.safetensors")))
    out2, _ = rm.run(rm.build(again), x, repeat=1, min_repeat_ms=0)
    assert np.array_equal(out, out2)


def test_every_int8_conv_maps_onto_vnni_the_stem_through_zero_weight_channels():
    """vpdpbusd multiplies input channels four at a time: the stem's 3 channels are padded to 4 with zero weights,
    so that its task, like every other conv, is tiled for the instruction (16 output channels: width 16)."""
    from workbench import intrinsics, space, tvm_env

    q = rm.resnet18_int8(image=32, width=16, stages=1, classes=10)
    convs = [t for t in rm.extract(q) if "conv2d" in t.task_name]
    stem = [t for t in convs if any(list(a) == [7, 7, 4, 16] for a in t.arg_shapes)]  # HWIO, 4 input channels
    assert len(stem) == 1, [t.arg_shapes for t in convs]
    vnni = tvm_env.make_target({"kind": "llvm", "mcpu": "cascadelake", "num-cores": 1})
    for t in convs:
        assert any(s.intrinsics == [intrinsics.VNNI] for s in space.design_spaces(t, "pre-transformed", vnni)), t


def test_a_padded_weight_rewrite_keeps_every_weight_in_place():
    """A layout rewrite that pads (1000 classes in blocks of 16: 63 x 16 = 1008 slots) moves each weight where the
    index map says and leaves zeros in the padding (TVM's map_tensor refuses padded maps)."""
    from tvm.tirx import IndexMap

    from workbench.layouts import map_weights

    w = np.arange(1, 2001, dtype=np.float32).reshape(1000, 2)
    imap = IndexMap.from_func(lambda n, k: (n // 16, k, n % 16), index_dtype="int32")
    shape = tuple(int(d) for d in imap.map_shape(list(w.shape)))
    out = map_weights(imap, w, shape)
    assert shape == (63, 2, 16) and out.dtype == w.dtype
    n, k = np.indices(w.shape)
    assert np.array_equal(out[n // 16, k, n % 16], w)
    assert out.sum() == w.sum() and np.count_nonzero(out) == w.size


@pytest.mark.parametrize("dtype", ["float32", "int8", "bfloat16"])
def test_weights_rewritten_in_numpy_are_what_tvms_map_tensor_gives(dtype):
    """The offline rewrite evaluates the index map over the whole grid in NumPy; on maps that do not pad it must
    give exactly TVM's element-by-element ``IndexMap.map_tensor``: a conv's OIHW blocked by 16 output channels
    with the reduction split, and a matmul's transposed-and-blocked weight."""
    import tvm
    from tvm.tirx import IndexMap

    from workbench import dtypes
    from workbench.layouts import map_weights

    rng = np.random.default_rng(0)
    maps = [
        ((32, 8, 3, 3), IndexMap.from_func(lambda o, i, h, w: (o // 16, h, i // 4, w, i % 4, o % 16))),
        ((24, 40), IndexMap.from_func(lambda k, n: (n // 8, k // 6, k % 6, n % 8))),
    ]
    for shape, imap in maps:
        w = dtypes.random_array(rng, shape, dtype)
        new_shape = tuple(int(d) for d in imap.map_shape(list(shape)))
        got = map_weights(imap, w, new_shape)
        want = imap.map_tensor(tvm.runtime.tensor(w)).numpy()
        assert got.dtype == w.dtype and got.shape == new_shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_a_model_takes_only_schedules_tuned_for_its_own_task_shapes(tmp_path):
    """The same fused function's name at another input size (an earlier ``--image 64`` run in the same store):
    its faster record is not this task's schedule."""
    import types

    from workbench.store import RecordStore

    from .test_compare import make_session, rec

    def task(args):
        spec = {"name": "r18.fused_conv2d_add_relu", "op": "relax-task", "params": {"task": "fused", "args": args}}
        return types.SimpleNamespace(name=spec["name"], spec=lambda: spec)

    small, large = task([[1, 64, 16, 16], [64, 64, 3, 3]]), task([[1, 64, 56, 56], [64, 64, 3, 3]])
    store = RecordStore(str(tmp_path / "m.db"))
    for t, ms in ((small, 0.1), (large, 1.0), (large, 0.9)):
        make_session(store, [rec("no-rewrite", ms)], workload=t.name, spec=t.spec())
    assert rm.best_record_of_task(store, large)["latency_ms"] == 0.9
    assert rm.best_record_of_task(store, small)["latency_ms"] == 0.1
    assert rm.best_record_of_task(store, task([[1, 3, 224, 224]])) is None
