"""Low-precision workloads searched with the CPU's dot-product instructions (workbench.intrinsics), one contract
for every registered intrinsic: int8 on ``vpdpbusd`` (AVX512-VNNI) and bfloat16 on ``vdpbf16ps`` (AVX512-BF16).
The design space of a strategy that packs weights is tiled for the instruction, the tensorized programs verify, and
the intrinsics a program uses are listed (inspector, ``workbench best``).

Design spaces and postprocessing run on any machine (they only need a target that names the feature); building and
running a tensorized kernel needs a CPU that has it (VNNI: Intel Cascade Lake and later, AMD Zen 4 and later;
BF16: Intel Cooper Lake / Sapphire Rapids and later, AMD Zen 4 and later)."""

from dataclasses import dataclass

import pytest

from workbench import intrinsics, layouts, measure, space, tvm_env
from workbench.program import TunedProgram, intrinsics_line, tensor_intrinsics
from workbench.workloads import workload_from_spec


@dataclass(frozen=True)
class Case:
    intrinsic: str
    dtype: str
    feature: str
    instruction: str
    target: dict  # a named CPU with the feature: the design spaces do not depend on the machine the tests run on
    target_without: dict  # a named CPU without it
    conv_extra: dict  # what the conv spec adds for this dtype
    packed_weight: list  # the conv's packed weight: O/16 H W I/reduce 16o reduce-i


def _conv(dtype, **extra):
    return {
        "name": f"t-conv-{dtype}",
        "op": "conv2d",
        "dtype": dtype,
        "params": {"layout": "NHWC", "batch": 1, "in_channels": 32, "height": 8, "width": 8, "out_channels": 32,
                   "kernel": 3, "stride": 1, "padding": 1},
        "epilogue": ["bias", "relu"],
        **extra,
    }  # fmt: skip


CASES = [
    Case(
        intrinsics.VNNI,
        "int8",
        "avx512vnni",
        "vpdpbusd",
        {"kind": "llvm", "mcpu": "cascadelake", "num-cores": 1},
        {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1},
        {"requantize": "per-channel"},
        [2, 3, 3, 8, 16, 4],
    ),
    Case(
        intrinsics.BF16_DOT,
        "bfloat16",
        "avx512bf16",
        "vdpbf16ps",
        {"kind": "llvm", "mcpu": "cooperlake", "num-cores": 1},
        {"kind": "llvm", "mcpu": "cascadelake", "num-cores": 1},
        {},
        [2, 3, 3, 16, 16, 2],
    ),
]
IDS = [c.dtype for c in CASES]


def test_every_registered_intrinsic_has_a_case():
    assert {c.intrinsic for c in CASES} == set(intrinsics.INTRINSICS)
    for c in CASES:
        i = intrinsics.INTRINSICS[c.intrinsic]
        assert (i.dtype, i.feature, i.instruction, i.lanes) == (c.dtype, c.feature, c.instruction, 16)


def _matmul(case, n=64, k=64):
    return {"name": f"t-mm-{case.dtype}", "op": "matmul", "dtype": case.dtype, "params": {"m": 64, "n": n, "k": k}}


def _host_has(feature) -> bool:
    tvm_env.setup()
    return intrinsics.target_has(tvm_env.host_target_dict(), feature)


def _needs_host(case):
    return pytest.mark.skipif(
        not _host_has(case.feature),
        reason=f"this CPU has no {case.feature}: a kernel tensorized for {case.instruction} cannot run here",
    )


RUNNABLE = [pytest.param(c, marks=_needs_host(c), id=c.dtype) for c in CASES]


def _target(d):
    return tvm_env.make_target(d)


def _program(w, strategy, target, sketch=0):
    """A complete program of the sketch: the first seeded annotation its postprocessors accept."""
    return next(s for seed in range(1, 10) if (s := space.annotate(w, sketch, seed, strategy, target)) is not None)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_plan_says_where_the_intrinsic_applies_and_why_not_elsewhere(case):
    mm = workload_from_spec(_matmul(case))
    intrin, why = intrinsics.plan(mm, _target(case.target), "pre-transformed")
    assert intrin.name == case.intrinsic and intrin.instruction == case.instruction
    assert intrinsics.plan(mm, _target(case.target_without), "pre-transformed")[1] == (
        f"the target has no {case.feature} ({case.instruction})"
    )
    intrin, why = intrinsics.plan(mm, _target(case.target), "no-rewrite")
    assert intrin is None and "no-rewrite reads the weights in their own layout" in why
    fp32 = workload_from_spec({**_matmul(case), "dtype": "float32"})
    assert intrinsics.plan(fp32, _target(case.target), "packed") == (
        None,
        "no tensor intrinsic computes a float32 workload's accumulation",
    )


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("op", ["matmul", "conv2d-nhwc"])
def test_the_design_space_of_a_packing_strategy_is_tiled_for_the_intrinsic(case, op):
    spec = _matmul(case) if op == "matmul" else _conv(case.dtype, **case.conv_extra)
    w = workload_from_spec(spec)
    for strategy in layouts.STRATEGIES:
        sketches = space.design_spaces(w, strategy, _target(case.target))
        tiled = [s for s in sketches if s.intrinsics == [case.intrinsic]]
        assert bool(tiled) == layouts.get(strategy).packs_for_intrinsics, strategy
    fp32 = workload_from_spec({k: v for k, v in spec.items() if k not in ("dtype", "requantize", "epilogue")})
    assert not any(s.intrinsics for s in space.design_spaces(fp32, "packed", _target(case.target)))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_shapes_that_do_not_map_fall_back_to_plain_sketches(case):
    w = workload_from_spec(_matmul(case, n=40, k=30 if case.dtype == "int8" else 31))  # 16 ∤ 40; 4 ∤ 30, 2 ∤ 31
    sketches = space.design_spaces(w, "packed", _target(case.target))
    assert sketches and not any(s.intrinsics for s in sketches)
    sch = _program(w, "packed", _target(case.target), sketch=0)
    assert tensor_intrinsics(sch) == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("strategy", ["transform-stage", "pre-transformed", "packed"])
def test_every_packing_strategy_tensorizes_the_conv_and_lists_it(case, strategy):
    w = workload_from_spec(_conv(case.dtype, **case.conv_extra))
    sch = _program(w, strategy, _target(case.target), sketch=0)
    used = tensor_intrinsics(sch)
    assert used == [{"intrinsic": case.intrinsic, "instruction": case.instruction, "block": "conv2d_nhwc_o_update"}]
    assert intrinsics_line(used) == f"{case.intrinsic} ({case.instruction}, block conv2d_nhwc_o_update)"
    assert tensor_intrinsics(sch.trace) == [{**used[0], "block": None}]  # a bare trace names no block
    preproc = [b for b in sch.mod["main"].body.block.alloc_buffers if b.name == "W_global"]
    assert preproc and [int(d) for d in preproc[0].shape] == case.packed_weight
    # the offline strategies leave the repacking to deploy time; transform-stage runs it in the program
    assert (layouts.PREPROC in sch.mod.script()) == layouts.get(strategy).rewrites_offline


def test_an_fp32_program_uses_no_intrinsic():
    w = workload_from_spec({**_matmul(CASES[0]), "dtype": "float32"})
    sch = _program(w, "packed", _target(CASES[0].target), sketch=0)
    assert tensor_intrinsics(sch) == [] and intrinsics_line([]) == "none"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_tensorized_conv_with_its_copy_stage_in_the_program_runs_and_verifies(case):
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    w = workload_from_spec(_conv(case.dtype, **case.conv_extra))
    # built for a CPU with the feature: the instruction is checked in the assembly on any machine
    target = _target(case.target)
    sch = _program(w, "transform-stage", target, sketch=1)
    assert tensor_intrinsics(sch)
    lib = tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod), target=target)
    assert case.instruction in lib.inspect_source("asm")
    if not _host_has(case.feature):
        pytest.skip(f"this CPU has no {case.feature}: the kernel built for {case.instruction} cannot run here")
    inputs = w.make_inputs(seed=3)
    args = [tvm.runtime.tensor(a) for a in inputs] + [tvm.runtime.empty(w.arg_shapes[-1], w.arg_dtypes[-1])]
    lib["main"](*args)
    ok, detail = measure.verify(args[-1].numpy(), w.numpy_reference(inputs), case.dtype)
    assert ok, detail


@pytest.mark.parametrize("case", RUNNABLE)
def test_a_session_tunes_with_the_intrinsic_verifies_and_its_best_deploys(case, tmp_path):
    from workbench import TuningSession

    db = str(tmp_path / "intrin.db")
    spec = _matmul(case)
    s = TuningSession(
        spec,
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
    prog = TunedProgram.from_store(db, spec["name"])
    assert [u["instruction"] for u in prog.tensor_intrinsics] == [case.instruction]
    inputs = prog.workload.make_inputs(seed=9)
    ok, detail = measure.verify(prog(*inputs), prog.workload.numpy_reference(inputs), case.dtype)
    assert ok, detail  # the weight packing, offline
