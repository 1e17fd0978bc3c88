"""Workload specs: registry coverage, validation messages, NumPy references against TVM's naive programs."""

import json

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.dtypes import numpy_dtype
from workbench.workloads import OPS, load_spec_file, registry, workload_from_spec


def test_registry_covers_the_suites_and_networks():
    reg = registry()
    for op in ("C1D", "C2D", "C3D", "GMM", "GRP", "DIL", "DEP", "T2D", "CAP", "NRM"):
        assert [f"{op}.{i}" in reg.workloads for i in range(4)] == [True] * 4
    for sub in ("CBR", "TBG"):
        assert all(f"{sub}.{i}" in reg.workloads for i in range(4))
    assert len(reg.network("resnet18")) == 11
    assert sum(w.weight for w in reg.network("resnet18")) == 20
    assert len(reg.network("resnet50")) == 23
    assert sum(w.weight for w in reg.network("resnet50")) == 53
    mb = reg.network("mobilenet_v2")
    assert sum(w.weight for w in mb) == 52
    assert {w.op for w in mb} == {"conv2d", "depthwise_conv2d"}


def test_element_sizes_follow_the_dtype():
    # The memory check and the arithmetic intensity count each argument at its own width, not as fp32.
    sizes = {
        d: numpy_dtype(d).itemsize
        for d in ("float32", "int32", "bfloat16", "uint8", "int8", "float8_e4m3fn", "float8_e5m2")
    }
    assert sizes == {
        "float32": 4,
        "int32": 4,
        "bfloat16": 2,
        "uint8": 1,
        "int8": 1,
        "float8_e4m3fn": 1,
        "float8_e5m2": 1,
    }


def test_flops_and_weights_of_a_resnet_layer():
    w = registry().get("resnet18.conv2")
    assert w.flops == pytest.approx(2 * 56 * 56 * 64 * 64 * 9, rel=1e-3)
    assert w.weight_indices == [1] and w.arg_shapes[1] == (3, 3, 64, 64)
    assert w.prim_func.attrs["layout_free_buffers"][0] == 1


@pytest.mark.parametrize(
    "spec,needle",
    [
        ({"name": "x", "op": "conv9d", "params": {}}, "unknown op 'conv9d'; valid ops:"),
        ({"name": "x", "op": "matmul", "params": {"m": 4, "n": 4}}, "needs parameter 'k'"),
        ({"name": "x", "op": "matmul", "params": {"m": 0, "n": 4, "k": 4}}, "'m'=0 must be >= 1"),
        ({"name": "x", "op": "matmul", "params": {"m": -3, "n": 4, "k": 4}}, "'m'=-3 must be >= 1"),
        ({"name": "x", "op": "matmul", "params": {"m": 2.5, "n": 4, "k": 4}}, "'m' must be an integer"),
        ({"name": "x", "op": "matmul", "params": {"m": 2, "n": 4, "k": 4, "mm": 1}}, "unknown parameter 'mm'"),
        (
            {
                "name": "x",
                "op": "conv2d",
                "params": {
                    "layout": "NCWH",
                    "batch": 1,
                    "in_channels": 3,
                    "height": 8,
                    "width": 8,
                    "out_channels": 4,
                    "kernel": 3,
                    "stride": 1,
                    "padding": 1,
                },
            },
            "valid: NCHW, NHWC",
        ),
        (
            {
                "name": "x",
                "op": "conv2d",
                "params": {
                    "layout": "NHWC",
                    "batch": 1,
                    "in_channels": 3,
                    "height": 4,
                    "width": 4,
                    "out_channels": 4,
                    "kernel": 7,
                    "stride": 1,
                    "padding": 1,
                },
            },
            "larger than the padded input height 4+2*1=6",
        ),
        (
            {
                "name": "x",
                "op": "conv2d",
                "params": {
                    "layout": "NHWC",
                    "batch": 1,
                    "in_channels": 6,
                    "height": 8,
                    "width": 8,
                    "out_channels": 4,
                    "kernel": 3,
                    "stride": 1,
                    "padding": 1,
                    "groups": 4,
                },
            },
            "groups=4 must divide",
        ),
        (
            {"name": "x", "op": "matmul", "params": {"m": 2, "n": 2, "k": 2}, "epilogue": ["gelu"]},
            "epilogue must be a list drawn from",
        ),
        (
            {"name": "x", "op": "norm", "params": {"batch": 1, "m": 2, "n": 2}, "epilogue": ["relu"]},
            "does not take an epilogue",
        ),
        ({"op": "matmul", "params": {"m": 2, "n": 2, "k": 2}}, "non-empty string 'name'"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_invalid_specs_give_one_line_errors(spec, needle):
    with pytest.raises(WorkbenchError) as e:
        workload_from_spec(spec)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_spec_files(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(
        json.dumps(
            [
                {"name": "a", "op": "matmul", "params": {"m": 8, "n": 8, "k": 8}},
                {"name": "b", "op": "matmul", "params": {"m": 8, "n": 8, "k": 4}},
            ]
        )
    )
    assert [w.name for w in load_spec_file(str(p))] == ["a", "b"]
    p.write_text("{not json")
    with pytest.raises(WorkbenchError, match="not valid JSON"):
        load_spec_file(str(p))
    with pytest.raises(WorkbenchError, match="does not exist"):
        load_spec_file(str(tmp_path / "missing.json"))


def _naive_output(w, inputs):
    import tvm

    from workbench import tvm_env

    lib = tvm.compile(w.mod, target=tvm_env.make_target(tvm_env.host_target_dict()))
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in inputs] + [tvm.runtime.empty(w.arg_shapes[-1], "float32", dev)]
    lib["main"](*args)
    return args[-1].numpy()


CONV = {
    "batch": 1,
    "in_channels": 8,
    "height": 9,
    "width": 9,
    "out_channels": 8,
    "kernel": 3,
    "stride": 2,
    "padding": 1,
}


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "mm", "op": "matmul", "params": {"m": 8, "n": 12, "k": 16}, "epilogue": ["bias", "relu"]},
        {"name": "bmm", "op": "batch_matmul", "params": {"batch": 2, "m": 8, "n": 4, "k": 6}},
        {"name": "c1", "op": "conv2d", "params": dict(CONV, layout="NCHW")},
        {"name": "c2", "op": "conv2d", "params": dict(CONV, layout="NHWC", dilation=2)},
        {
            "name": "c3",
            "op": "conv2d",
            "params": dict(CONV, layout="NHWC", groups=4),
            "epilogue": ["bn", "relu", "add"],
        },
        {"name": "c4", "op": "conv2d", "params": dict(CONV, layout="NCHW", groups=2, kernel=[3, 1])},
        {
            "name": "dw1",
            "op": "depthwise_conv2d",
            "params": {
                "layout": "NHWC",
                "batch": 1,
                "channels": 8,
                "height": 9,
                "width": 9,
                "kernel": 3,
                "stride": 2,
                "padding": 1,
            },
        },
        {
            "name": "dw2",
            "op": "depthwise_conv2d",
            "params": {
                "layout": "NCHW",
                "batch": 1,
                "channels": 8,
                "height": 9,
                "width": 9,
                "kernel": 3,
                "stride": 1,
                "padding": 1,
            },
        },
        {"name": "nrm", "op": "norm", "params": {"batch": 2, "m": 8, "n": 8}},
        {"name": "sfm", "op": "softmax", "params": {"m": 4, "n": 16}},
    ],
)
def test_numpy_reference_matches_tvm(spec):
    w = workload_from_spec(spec)
    assert w.reference_kind == "numpy"
    inputs = w.make_inputs(0)
    np.testing.assert_allclose(w.numpy_reference(inputs), _naive_output(w, inputs), rtol=1e-4, atol=1e-4)


def test_every_op_builds_a_prim_func():
    for name, op in OPS.items():
        ws = [w for w in registry().workloads.values() if w.op == name]
        assert ws, f"no sample workload uses {name}"
        assert ws[0].prim_func is not None and ws[0].flops > 0
