"""Tensor intrinsics of the CPU that the search maps a workload's innermost loops onto.

``vpdpbusd`` (AVX512-VNNI) adds, into each of 16 int32 lanes, the dot product of 4 uint8 activations (the same 4
for every lane) with 4 int8 weights of that lane's output channel: exactly the int8 workloads' accumulation
(``dtypes``). It is registered here as a TVM ``TensorIntrin`` (a description the loops must match, and the
implementation that replaces them). MetaSchedule's ``MultiLevelTilingWithIntrin`` tiles the anchor block so that
its innermost 16 x 4 loops match the description (it needs 16 | output channels and 4 | the innermost reduction,
read contiguously from the activation); the layout postprocessor (``layouts``) puts the weights in the order the
instruction reads them (output channels in blocks of 16, each with its 4 reduction elements innermost), and
``RewriteTensorize`` swaps the loops for the instruction.

TVM's own ``dot_16x4_vnni`` (``tvm.s_tir.tensor_intrin.x86``) calls ``llvm.x86.avx512.vpdpbusd.512`` with
``<16 x i32>`` operands, the signature LLVM had up to version 21; LLVM 22 (the one TVM 0.27's wheel links) takes
``<64 x i8>`` operands and rejects the old call when it verifies the module. The intrinsic registered here passes
the operand types of the linked LLVM.

``vdpbf16ps`` (AVX512-BF16) adds, into each of 16 float32 lanes, the dot product of 2 bfloat16 activations (the
same 2 for every lane) with 2 bfloat16 weights of that lane's output channel: the bfloat16 workloads' accumulation
(products of bfloat16 values are exact in float32), at twice the multiply-adds per instruction of a float32 FMA.
LLVM's ``llvm.x86.avx512bf16.dpbf16ps.512`` takes ``<32 x bfloat>`` operands, and TVM's lowering turns every
bfloat16 value of a kernel into float32 (``BF16ComputeLegalize``) before LLVM sees it, so the intrinsic cannot be
called from TIR. The implementation here loads the operands in TIR as bit patterns (``int32`` lanes: the two
activations as one, the 16 x 2 weights as 16) and calls a small LLVM function that reinterprets them as
``<32 x bfloat>`` and issues the instruction; that function's IR travels with the kernel
(``pragma_import_llvm``), is linked into its module and inlined. Every memory access stays TIR's, so it carries
TVM's alias information like the rest of the kernel's.

``register()`` runs in every workbench process (``tvm_env.setup``): the session replays stored traces that name
the intrinsic, and the builder's workers import the workbench before building.
"""

from __future__ import annotations

from dataclasses import dataclass

VNNI = "workbench.dot_16x4_vnni"
BF16_DOT = "workbench.dot_16x2_bf16"

# The LLVM version whose x86 dot-product intrinsics take byte (bfloat16) vectors instead of dword vectors.
VNNI_BYTE_OPERANDS_SINCE = 22


@dataclass(frozen=True)
class Intrinsic:
    name: str  # the TensorIntrin's registered name, as traces record it
    dtype: str  # the workload dtype (``dtypes``) whose accumulation it computes
    feature: str  # the LLVM target feature the instruction needs
    instruction: str  # the x86 instruction it becomes
    lanes: int  # output elements per instruction (output channels in a block)
    reduce: int  # reduction elements per lane (innermost in the packed weight)


INTRINSICS = {
    i.name: i
    for i in [
        Intrinsic(VNNI, "int8", "avx512vnni", "vpdpbusd", 16, 4),
        Intrinsic(BF16_DOT, "bfloat16", "avx512bf16", "vdpbf16ps", 16, 2),
    ]
}

_REGISTERED = False


def register() -> None:
    """Register the intrinsics with TVM (once per process; parsing their TVMScript takes ~0.1 s)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from tvm.s_tir import TensorIntrin
    from tvm.target import codegen

    byte_operands = int(codegen.llvm_version_major()) >= VNNI_BYTE_OPERANDS_SINCE
    desc, impl = _vnni(byte_operands)
    TensorIntrin.register(VNNI, desc, impl, override=True)
    TensorIntrin.register(BF16_DOT, *_bf16_dot(), override=True)
    _REGISTERED = True


def _dot_desc(a_dtype: str, b_dtype: str, acc_dtype: str, reduce: int, lanes: int = 16):
    """What a dot-product instruction computes: into each of ``lanes`` accumulators, the products of the same
    ``reduce`` activations with that lane's ``reduce`` weights, each operand widened to the accumulator's type."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((reduce,), a_dtype, offset_factor=1),
        B: T.Buffer((lanes, reduce), b_dtype, offset_factor=1),
        C: T.Buffer((lanes,), acc_dtype, offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:reduce], B[0:lanes, 0:reduce])
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, reduce):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], acc_dtype) * T.cast(B[vi, vk], acc_dtype)

    return desc


def _vnni(byte_operands: bool):
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def impl_bytes(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((16, 4), "int8", offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            a_u8x64 = T.reinterpret(
                T.broadcast(T.reinterpret(A.vload([0], "uint8x4"), dtype="int32"), 16), dtype="uint8x64"
            )
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                C.vload([0], dtype="int32x16"),
                a_u8x64,
                B.vload([0, 0], dtype="int8x64"),
                dtype="int32x16",
            )

    @T.prim_func(s_tir=True)
    def impl_dwords(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((16, 4), "int8", offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                C.vload([0], dtype="int32x16"),
                T.broadcast(T.reinterpret(A.vload([0], "uint8x4"), dtype="int32"), 16),
                T.reinterpret(B.vload([0, 0], dtype="int8x64"), dtype="int32x16"),
                dtype="int32x16",
            )

    return _dot_desc("uint8", "int8", "int32", 4), impl_bytes if byte_operands else impl_dwords


# The function the bfloat16 intrinsic's implementation calls: the operands arrive as bit patterns (TIR cannot hold a
# bfloat16 vector past BF16ComputeLegalize) and become the <32 x bfloat> vectors the instruction takes. Internal
# and always inlined: nothing of it is left as a call.
_BF16_DOT_FN = "workbench_dot_16x2_bf16"
_BF16_DOT_LLVM = f"""
define internal <16 x float> @{_BF16_DOT_FN}(<16 x float> %acc, i32 %pair, <16 x i32> %weights, ptr %a_data, ptr %b_data) #0 {{
  %lane0 = insertelement <16 x i32> poison, i32 %pair, i64 0
  %pairs = shufflevector <16 x i32> %lane0, <16 x i32> poison, <16 x i32> zeroinitializer
  %a = bitcast <16 x i32> %pairs to <32 x bfloat>
  %b = bitcast <16 x i32> %weights to <32 x bfloat>
  %sum = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc, <32 x bfloat> %a, <32 x bfloat> %b)
  ret <16 x float> %sum
}}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
attributes #0 = {{ alwaysinline nounwind readnone "target-features"="+avx512f,+avx512bf16" }}
"""


def _bf16_dot():
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def impl(
        A: T.Buffer((2,), "bfloat16", offset_factor=1),
        B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
        C: T.Buffer((16,), "float32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            T.attr(T.int32(0), "pragma_import_llvm", _BF16_DOT_LLVM)
            C[T.ramp(T.int32(0), 1, 16)] = T.call_extern(
                "float32x16",
                _BF16_DOT_FN,
                C.vload([0], dtype="float32x16"),
                T.reinterpret(A.vload([0], dtype="bfloat16x2"), dtype="int32"),
                T.reinterpret(B.vload([0, 0], dtype="bfloat16x32"), dtype="int32x16"),
                # Unused by the function: a buffer whose pointer is used as a value keeps its bfloat16 storage, where
                # BF16ComputeLegalize would otherwise turn a buffer allocated in the kernel (a padded input, a weight
                # copy stage) into float32, and the bit patterns above would be float32 ones.
                A.data,
                B.data,
            )

    return _dot_desc("bfloat16", "bfloat16", "float32", 2), impl


def target_has(target, feature: str) -> bool:
    """Whether an llvm target (a ``Target`` or a target dict) has an LLVM feature, from its mcpu and mattr."""
    import tvm
    from tvm.target import codegen

    t = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    try:
        return bool(codegen.llvm_cpu_has_features([feature], t))
    except Exception:  # noqa: BLE001 - a target LLVM cannot describe has no such feature as far as we know
        return False


def for_workload(workload, target) -> Intrinsic | None:
    """The intrinsic whose accumulation is this workload's and that the target can execute, or None."""
    dtype = getattr(workload, "mac_dtype", None)
    for intrin in INTRINSICS.values():
        if intrin.dtype == dtype and target is not None and target_has(target, intrin.feature):
            return intrin
    return None


def plan(workload, target, strategy: str) -> tuple[Intrinsic | None, str]:
    """(the intrinsic the search of ``strategy`` offers for ``workload`` on ``target``, or None; why, in words).

    The weights must be repacked for the instruction (16 output channels x ``reduce`` reduction elements, innermost),
    so a strategy that reads them as given (no-rewrite) keeps the plain schedule rules."""
    from . import layouts

    dtype = getattr(workload, "mac_dtype", None)
    wanted = [i for i in INTRINSICS.values() if i.dtype == dtype]
    if not wanted:
        return None, f"no tensor intrinsic computes a {dtype} workload's accumulation"
    intrin = for_workload(workload, target)
    if intrin is None:
        need = " or ".join(f"{i.feature} ({i.instruction})" for i in wanted)
        return None, f"the target has no {need}"
    if not workload.weight_indices:
        return None, f"{intrin.instruction} needs constant weights to pack; this workload has none"
    if not layouts.get(strategy).packs_for_intrinsics:
        return None, (
            f"{strategy} reads the weights in their own layout; {intrin.instruction} needs each output channel's "
            f"{intrin.reduce} reduction elements adjacent (the other layout strategies pack them)"
        )
    return intrin, f"{intrin.name} ({intrin.instruction}) where the loops map onto it"


def sketch_intrinsics(trace) -> list[str]:
    """The intrinsics a sketch's (or program's) trace asked for: its ``auto_tensorize`` annotations."""
    out = []
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and len(inst.attrs) and str(inst.attrs[0]) == AUTO_TENSORIZE:
            name = str(getattr(inst.inputs[1], "value", inst.inputs[1])) if len(inst.inputs) > 1 else ""
            if name and name not in out:
                out.append(name)
    return out


AUTO_TENSORIZE = "meta_schedule.auto_tensorize"
