"""int8 workloads searched with the CPU's VNNI instruction (workbench.intrinsics): the design space of a strategy that
packs weights is tiled for ``vpdpbusd``, the tensorized programs verify exactly, and the intrinsics a program uses
are listed (inspector, ``workbench best``).

Design spaces and postprocessing run on any machine (they only need a target that names VNNI); building and
running a tensorized kernel needs a CPU with avx512_vnni (Intel Cascade Lake and later, AMD Zen 4 and later)."""

import numpy as np
import pytest

from workbench import intrinsics, layouts, measure, space, tvm_env
from workbench.program import TunedProgram, intrinsics_line, tensor_intrinsics
from workbench.workloads import workload_from_spec

# a named CPU with AVX512-VNNI: the design spaces do not depend on the machine the tests run on
VNNI_TARGET = {"kind": "llvm", "mcpu": "cascadelake", "num-cores": 1}
NO_VNNI_TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}

MATMUL = {"name": "t-mm-int8", "op": "matmul", "dtype": "int8", "params": {"m": 64, "n": 64, "k": 64}}
CONV = {
    "name": "t-conv-int8",
    "op": "conv2d",
    "dtype": "int8",
    "params": {"layout": "NHWC", "batch": 1, "in_channels": 32, "height": 8, "width": 8, "out_channels": 32,
               "kernel": 3, "stride": 1, "padding": 1},
    "epilogue": ["bias", "relu"],
    "requantize": "per-channel",
}  # fmt: skip


def _host_has_vnni() -> bool:
    tvm_env.setup()
    return intrinsics.target_has(tvm_env.host_target_dict(), "avx512vnni")


needs_vnni = pytest.mark.skipif(
    not _host_has_vnni(), reason="this CPU has no AVX512-VNNI (avx512_vnni): tensorized int8 kernels cannot run here"
)


def _target(d):
    return tvm_env.make_target(d)


def _program(w, strategy, target, sketch=0):
    """A complete program of the sketch: the first seeded annotation its postprocessors accept."""
    return next(s for seed in range(1, 10) if (s := space.annotate(w, sketch, seed, strategy, target)) is not None)


def test_the_plan_says_where_vnni_applies_and_why_not_elsewhere():
    mm = workload_from_spec(MATMUL)
    intrin, why = intrinsics.plan(mm, _target(VNNI_TARGET), "pre-transformed")
    assert intrin.name == intrinsics.VNNI and intrin.instruction == "vpdpbusd"
    assert intrinsics.plan(mm, _target(NO_VNNI_TARGET), "pre-transformed")[1] == (
        "the target has no avx512vnni (vpdpbusd)"
    )
    intrin, why = intrinsics.plan(mm, _target(VNNI_TARGET), "no-rewrite")
    assert intrin is None and "no-rewrite reads the weights in their own layout" in why
    fp32 = workload_from_spec({**MATMUL, "dtype": "float32"})
    assert intrinsics.plan(fp32, _target(VNNI_TARGET), "packed") == (
        None,
        "no tensor intrinsic computes a float32 workload's accumulation",
    )


@pytest.mark.parametrize("spec", [MATMUL, CONV], ids=["matmul", "conv2d-nhwc"])
def test_the_design_space_of_a_packing_strategy_is_tiled_for_vnni(spec):
    w = workload_from_spec(spec)
    for strategy in layouts.STRATEGIES:
        sketches = space.design_spaces(w, strategy, _target(VNNI_TARGET))
        tiled = [s for s in sketches if s.intrinsics == [intrinsics.VNNI]]
        assert bool(tiled) == layouts.get(strategy).packs_for_intrinsics, strategy
    fp32 = workload_from_spec({k: v for k, v in spec.items() if k not in ("dtype", "requantize", "epilogue")})
    assert not any(s.intrinsics for s in space.design_spaces(fp32, "packed", _target(VNNI_TARGET)))


def test_shapes_that_do_not_map_fall_back_to_plain_sketches():
    w = workload_from_spec({**MATMUL, "params": {"m": 16, "n": 40, "k": 30}})  # 16 does not divide 40, 4 not 30
    sketches = space.design_spaces(w, "packed", _target(VNNI_TARGET))
    assert sketches and not any(s.intrinsics for s in sketches)
    sch = _program(w, "packed", _target(VNNI_TARGET), sketch=0)
    assert tensor_intrinsics(sch) == []


@pytest.mark.parametrize("strategy", ["transform-stage", "pre-transformed", "packed"])
def test_every_packing_strategy_tensorizes_the_conv_and_lists_it(strategy):
    w = workload_from_spec(CONV)
    sch = _program(w, strategy, _target(VNNI_TARGET), sketch=0)
    used = tensor_intrinsics(sch)
    assert used == [{"intrinsic": intrinsics.VNNI, "instruction": "vpdpbusd", "block": "conv2d_nhwc_o_update"}]
    assert intrinsics_line(used) == "workbench.dot_16x4_vnni (vpdpbusd, block conv2d_nhwc_o_update)"
    assert tensor_intrinsics(sch.trace) == [{**used[0], "block": None}]  # a bare trace names no block
    preproc = [b for b in sch.mod["main"].body.block.alloc_buffers if b.name == "W_global"]
    assert preproc and [int(d) for d in preproc[0].shape] == [2, 3, 3, 8, 16, 4]  # O/16 H W I/4 16o 4i
    # the offline strategies leave the repacking to deploy time; transform-stage runs it in the program
    assert (layouts.PREPROC in sch.mod.script()) == layouts.get(strategy).rewrites_offline


def test_an_fp32_program_uses_no_intrinsic():
    w = workload_from_spec({**MATMUL, "dtype": "float32"})
    sch = _program(w, "packed", _target(VNNI_TARGET), sketch=0)
    assert tensor_intrinsics(sch) == [] and intrinsics_line([]) == "none"


@needs_vnni
def test_a_tensorized_conv_with_its_copy_stage_in_the_program_runs_exactly():
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    w = workload_from_spec(CONV)
    host = _target(tvm_env.host_target_dict())  # a kernel tensorized for VNNI is built for a target that has it
    sch = _program(w, "transform-stage", host, sketch=1)
    assert tensor_intrinsics(sch)
    lib = tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod), target=host)
    assert "vpdpbusd" in lib.inspect_source("asm")
    inputs = w.make_inputs(seed=3)
    args = [tvm.runtime.tensor(a) for a in inputs] + [tvm.runtime.empty(w.arg_shapes[-1], w.arg_dtypes[-1])]
    lib["main"](*args)
    ok, detail = measure.verify(args[-1].numpy(), w.numpy_reference(inputs), "int8")
    assert ok, detail


@needs_vnni
def test_an_int8_session_tunes_with_vnni_verifies_and_its_best_deploys(tmp_path):
    from workbench import TuningSession

    db = str(tmp_path / "vnni.db")
    s = TuningSession(
        MATMUL,
        trials=4,
        trials_per_round=2,
        population=16,
        generations=1,
        init_min_unmeasured=4,
        strategy="pre-transformed",
        db=db,
        noise="off",
        confirm_rounds=0,
    )
    summ = s.run()
    rec = s.records()
    assert summ["verified"] and rec["error_class"].isna().all(), rec[["error_class", "error_msg"]]
    prog = TunedProgram.from_store(db, MATMUL["name"])
    assert [u["instruction"] for u in prog.tensor_intrinsics] == ["vpdpbusd"]
    inputs = prog.workload.make_inputs(seed=9)
    assert np.array_equal(prog(*inputs), prog.workload.numpy_reference(inputs))  # the VNNI weight packing, offline
