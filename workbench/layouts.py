"""Layout strategies for constant weights (static data).

A ``LayoutStrategy`` decides what happens to the layout-free (weight) inputs of
a workload while it is tuned, and therefore what a measured latency means:

=================  =========================================================  ==========================
strategy           what the measured program does                             latency means
=================  =========================================================  ==========================
no-rewrite         reads the weight in the workload's own layout              kernel, weights as given
transform-stage    copies the weight into the tiled loop order at the start   kernel + transform, every
                   of every call (a parallel transform stage in the program)  call (honest standalone op)
pre-transformed    reads weights already rewritten to the tiled order; the    kernel only; the transform
                   rewrite runs once, offline (``deploy_inputs``)             is paid once at deploy
packed             reads weights packed offline into one fixed blocked layout  kernel only; packing paid
                   (output channels in blocks of 16/8/4 lanes, innermost)     once at deploy
=================  =========================================================  ==========================

Each strategy is a set of MetaSchedule postprocessors applied after the
sketch's decisions are filled in. The weight layout itself is chosen per
candidate by TVM's ``RewriteLayout`` (``SuggestIndexMap`` over the tiled loop
nest), so the layout follows the schedule, as in Ansor.

Every strategy works on every workload dtype (``dtypes``): a layout moves
elements, whatever their type, and the offline rewrites (``map_weights``: the
IndexMap evaluated in NumPy) return the weights in their own dtype (int8, bfloat16, FP8).

A sketch tiled for a tensor intrinsic (``intrinsics``: int8 on VNNI hardware,
bfloat16 on AVX512-BF16) needs its weights in the order the instruction reads
them, whatever the candidate's tiles: output channels in blocks of 16, each
block's 4 (int8) or 2 (bfloat16) reduction elements innermost (int8: HWIO ->
O/16 H W I/4 16o 4i, KN -> N/16 K/4 16n 4k). The strategies that rewrite
weights (``intrinsic_pack``) give such a sketch that layout, offline
(pre-transformed, packed: the same layout for both) or as a parallel copy stage
inside the program (transform-stage); their usual layout postprocessors serve
every other sketch. no-rewrite reads the weights as given and so never offers
tensorized sketches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import interfaces
from .errors import WorkbenchError

PREPROC = "meta_schedule.layout_rewrite_preproc"


def _base_postprocs():
    from tvm.s_tir import meta_schedule as ms

    return [
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        ms.postproc.RewriteReductionBlock(),
    ]


_INLINE_CLS = None


def _inline_transform_stage():
    """A postproc that keeps RewriteLayout's weight copy *inside* the program and parallelises it.

    RewriteLayout marks the copy block as preprocessing; TVM's builder, ArgInfo and
    feature extractor then drop it (that is the pre-transformed strategy). Removing
    the mark keeps it in the measured program, and the features see it too.
    """
    global _INLINE_CLS
    if _INLINE_CLS is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        @derived_object
        class InlineTransformStage(ms.postproc.PyPostproc):
            def _initialize_with_tune_context(self, context) -> None:
                pass

            def apply(self, sch) -> bool:
                for blk in sch.get_child_blocks(sch.get_sblock("root")):
                    if PREPROC in sch.get(blk).annotations:
                        sch.unannotate(blk, PREPROC)
                        _parallel_copy_stage(sch, blk)
                return True

            def clone(self):
                return InlineTransformStage()

        _INLINE_CLS = InlineTransformStage
    return _INLINE_CLS()


def _blocked_map(rank: int, axis: int, b: int):
    from tvm.tirx import IndexMap

    def f(*i):
        rest = [i[d] for d in range(rank) if d != axis]
        return (i[axis] // b, *rest, i[axis] % b)

    return IndexMap.from_func(f, ndim=rank, index_dtype="int32")


_PACKED_CLS = None
# fp32 lanes of AVX-512, AVX2, SSE: the block size is the widest that divides. Counted in elements for every dtype
# (an int8 block of 16 is a quarter of an AVX-512 register; the loops' vectorization still spans the tile).
PACK_LANES = (16, 8, 4)


def _packed_weights():
    """A postproc that packs each weight into a fixed blocked layout, rewritten offline.

    The weight axis that is indexed by an output (spatial) loop, e.g. O of a conv's
    HWIO/OIHW weight or N of a matmul's KxN weight, is split into blocks of b lanes
    and the block moved innermost: HWIO -> (O/b)HWI{b}o, OIHW -> (O/b)IHW{b}o,
    KN -> (N/b)K{b}n. Unlike RewriteLayout's per-candidate layout, this layout is the
    same for every schedule, as a hand-written packed kernel would use.
    """
    global _PACKED_CLS
    if _PACKED_CLS is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        @derived_object
        class PackWeights(ms.postproc.PyPostproc):
            def _initialize_with_tune_context(self, context) -> None:
                pass

            def apply(self, sch) -> bool:
                func = sch.mod["main"]
                free = (
                    [int(i) for i in func.attrs["layout_free_buffers"]] if "layout_free_buffers" in func.attrs else []
                )
                names = {func.params[i].name for i in free}
                for blk in sch.get_child_blocks(sch.get_sblock("root")):
                    block = sch.get(blk)
                    spatial = {iv.var for iv in block.iter_vars if int(iv.iter_type) == 0}
                    if len(spatial) == len(block.iter_vars):
                        continue  # only the reduction (anchor) block reads the weight directly
                    for idx, region in enumerate(block.reads):
                        if region.source.name not in names:
                            continue
                        shape = [int(d) for d in region.source.shape]
                        axes = [d for d, r in enumerate(region.region) if any(r.min.same_as(v) for v in spatial)]
                        axis = next(
                            (d for d in reversed(axes) for b in PACK_LANES if shape[d] % b == 0 and shape[d] > b), None
                        )
                        if axis is None:
                            continue
                        b = next(b for b in PACK_LANES if shape[axis] % b == 0 and shape[axis] > b)
                        cached = sch.cache_read(blk, idx, "global")
                        sch.annotate(cached, PREPROC, True)
                        rank = len(shape)

                        sch.transform_layout(blk, ("read", idx), _blocked_map(rank, axis, b))
                        names.discard(region.source.name)
                        break
                return True

            def clone(self):
                return PackWeights()

        _PACKED_CLS = PackWeights
    return _PACKED_CLS()


_INTRIN_PACK_CLS = None


def _blocks_under(sch, block) -> list:
    out, todo = [], list(sch.get_child_blocks(block))
    while todo:
        b = todo.pop()
        out.append(b)
        todo.extend(sch.get_child_blocks(b))
    return out


def _parallel_copy_stage(sch, blk) -> None:
    """As Ansor's INSERT_TRANSFORM_STAGE: fuse the outer loops of the weight copy, then parallel."""
    loops = sch.get_loops(blk)
    n = 3 if len(loops) >= 5 else (2 if len(loops) >= 3 else 1)
    sch.parallel(sch.fuse(*loops[:n]) if n > 1 else loops[0])


def _intrinsic_map(rank: int, lane_axis: int, reduce_axis: int, lanes: int, reduce: int):
    from tvm.tirx import IndexMap

    def f(*i):
        rest = [i[d] // reduce if d == reduce_axis else i[d] for d in range(rank) if d != lane_axis]
        return (i[lane_axis] // lanes, *rest, i[lane_axis] % lanes, i[reduce_axis] % reduce)

    return IndexMap.from_func(f, ndim=rank, index_dtype="int32")


def _pack_for_intrinsics(sch, in_program: bool) -> bool:
    """Give every weight read by a block tiled for a tensor intrinsic the instruction's layout (a cached copy,
    marked as the offline rewrite unless ``in_program``). False when the program has no such block."""
    from tvm.tirx.analysis import undefined_vars

    from . import intrinsics

    func = sch.mod["main"]
    free = [int(i) for i in func.attrs["layout_free_buffers"]] if "layout_free_buffers" in func.attrs else []
    names = {func.params[i].name for i in free}
    found = False
    for outer in _blocks_under(sch, sch.get_sblock("root")):
        intrin = intrinsics.INTRINSICS.get(str(sch.get(outer).annotations.get(intrinsics.AUTO_TENSORIZE, "")))
        if intrin is None:
            continue
        found = True
        for idx, region in enumerate(sch.get(outer).reads):
            if region.source.name not in names:
                continue
            # the tile the intrinsic replaces: its lane (spatial) and reduction iterators index the weight's axes
            inner = next(
                (
                    sch.get(b)
                    for b in sch.get_child_blocks(outer)
                    if any(r.source.same_as(region.source) for r in sch.get(b).reads)
                ),
                None,
            )
            if inner is None:
                continue
            lane = [iv.var for iv in inner.iter_vars if int(iv.iter_type) == 0 and int(iv.dom.extent) == intrin.lanes]
            red = [iv.var for iv in inner.iter_vars if int(iv.iter_type) == 2 and int(iv.dom.extent) == intrin.reduce]
            access = next(r for r in inner.reads if r.source.same_as(region.source))

            def axis_of(var_list):
                axes = [
                    d
                    for d, r in enumerate(access.region)
                    if any(v.same_as(u) for v in var_list for u in undefined_vars(r.min))
                ]
                return axes[0] if len(axes) == 1 else None

            lane_axis, reduce_axis = axis_of(lane[-1:]), axis_of(red[-1:])
            if lane_axis is None or reduce_axis is None or lane_axis == reduce_axis:
                continue  # RewriteTensorize then leaves the tile as plain loops
            cached = sch.cache_read(outer, idx, "global")
            if in_program:
                _parallel_copy_stage(sch, cached)
            else:
                sch.annotate(cached, PREPROC, True)
            rank = len(region.source.shape)
            sch.transform_layout(
                outer, ("read", idx), _intrinsic_map(rank, lane_axis, reduce_axis, intrin.lanes, intrin.reduce)
            )
            names.discard(region.source.name)
            break
    return found


_SCALAR_TILE_CLS = None
INTRINSIC_TILE = "workbench.intrinsic_tile"  # a loop annotation: RewriteParallelVectorizeUnroll leaves the loop be


def _intrinsic_tiles_not_vectorized():
    """A postproc, before RewriteParallelVectorizeUnroll: marks the innermost loop around each block tiled for a
    tensor intrinsic. That postproc never fuses an annotated loop into a vectorized one; without the mark it
    vectorizes the loops around the tile, and the instruction (already a vector) cannot be vectorized again:
    about half of all samples failed to build ("Cannot broadcast lanes=32 to 128")."""
    global _SCALAR_TILE_CLS
    if _SCALAR_TILE_CLS is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        from . import intrinsics

        @derived_object
        class MarkIntrinsicTiles(ms.postproc.PyPostproc):
            def _initialize_with_tune_context(self, context) -> None:
                pass

            def apply(self, sch) -> bool:
                for blk in _blocks_under(sch, sch.get_sblock("root")):
                    if intrinsics.AUTO_TENSORIZE in sch.get(blk).annotations:
                        loops = sch.get_loops(blk)
                        if loops:
                            sch.annotate(loops[-1], INTRINSIC_TILE, 1)
                return True

            def clone(self):
                return MarkIntrinsicTiles()

        _SCALAR_TILE_CLS = MarkIntrinsicTiles
    return _SCALAR_TILE_CLS()


def _intrinsic_packing(in_program: bool, otherwise: list):
    """A postproc: weights in a tensor intrinsic's layout for a sketch tiled for one (``_pack_for_intrinsics``);
    for any other sketch, the strategy's own layout postprocs ``otherwise``."""
    global _INTRIN_PACK_CLS
    if _INTRIN_PACK_CLS is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        @derived_object
        class PackForIntrinsics(ms.postproc.PyPostproc):
            def __init__(self, in_program: bool, otherwise: list):
                super().__init__()
                self.in_program = in_program
                self.otherwise = list(otherwise)

            def _initialize_with_tune_context(self, context) -> None:
                for p in self.otherwise:
                    p._initialize_with_tune_context(context)

            def apply(self, sch) -> bool:
                if _pack_for_intrinsics(sch, self.in_program):
                    return True
                return all(p.apply(sch) for p in self.otherwise)

            def clone(self):
                return PackForIntrinsics(self.in_program, [p.clone() for p in self.otherwise])

        _INTRIN_PACK_CLS = PackForIntrinsics
    return _INTRIN_PACK_CLS(in_program, otherwise)


@dataclass(frozen=True)
class LayoutStrategy(interfaces.LayoutStrategy):
    """A strategy as data: its postprocessors are the base ones then ``make_layout_postprocs``; every strategy is
    one entry of ``STRATEGIES``."""

    name: str
    summary: str
    latency_means: str
    make_layout_postprocs: Callable[[], list]
    rewrites_offline: bool = False  # deploy_inputs must transform the weights
    # How a sketch tiled for a tensor intrinsic gets its weights in the instruction's layout: "offline",
    # "in-program" (a copy stage the measured program runs), or None (the strategy never offers such sketches).
    intrinsic_pack: str | None = None

    @property
    def packs_for_intrinsics(self) -> bool:
        return self.intrinsic_pack is not None

    def postprocs(self, tensorize: bool = False) -> list:
        """A new list of postprocessors. With ``tensorize`` (a design space with sketches tiled for a tensor
        intrinsic): the weights of such a sketch are packed for the instruction instead of by this strategy's
        layout postprocs, and ``RewriteTensorize`` swaps the tile for the instruction at the end."""
        layout = self.make_layout_postprocs()
        if not (tensorize and self.packs_for_intrinsics):
            return _base_postprocs() + layout
        from tvm.s_tir import meta_schedule as ms

        base = _base_postprocs()
        return (
            base[:1]
            + [_intrinsic_tiles_not_vectorized()]
            + base[1:]
            + [
                _intrinsic_packing(self.intrinsic_pack == "in-program", layout),
                ms.postproc.RewriteTensorize(vectorize_init_loop=True),
            ]
        )

    def deploy_inputs(self, sch, workload, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The inputs the measured kernel expects, derived from the workload's inputs.

        For ``pre-transformed`` this applies the offline weight transform (the
        IndexMap that RewriteLayout chose for this candidate); for the others the
        inputs are returned unchanged.
        """
        if not self.rewrites_offline:
            return list(inputs)
        return apply_offline_transforms(sch, workload, inputs)


def offline_index_maps(sch) -> list:
    """IndexMaps of the layout rewrites recorded in a schedule's trace."""
    maps = []
    for inst in sch.trace.insts:
        if inst.kind.name == "TransformLayout":
            for x in inst.inputs:
                if type(x).__name__ == "IndexMap":
                    maps.append(x)
    return maps


def apply_offline_transforms(sch, workload, inputs):
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    final = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod)
    from tvm.s_tir import meta_schedule as ms

    new_shapes = [tuple(int(d) for d in a.shape) for a in ms.arg_info.ArgInfo.from_prim_func(final["main"])]
    maps = offline_index_maps(sch)
    out = list(inputs)
    for i in workload.weight_indices:
        if new_shapes[i] == tuple(out[i].shape):
            continue
        for imap in maps:
            if len(imap.initial_indices) != out[i].ndim:  # another weight's rewrite (a matmul's, not its bias's)
                continue
            if tuple(int(d) for d in imap.map_shape(list(out[i].shape))) == new_shapes[i]:
                out[i] = map_weights(imap, out[i], new_shapes[i])
                break
        else:
            raise RuntimeError(f"no recorded layout rewrite maps weight {i} to {new_shapes[i]}")
    return out


def map_weights(imap, arr: np.ndarray, shape: tuple) -> np.ndarray:
    """``arr`` rewritten by the IndexMap ``imap`` into ``shape``, in its own dtype; where the layout pads (e.g.
    1000 output channels in blocks of 16) the padding is zero (the kernel computes outputs there that it never
    stores).

    The map is evaluated once over the whole index grid in NumPy. TVM's ``IndexMap.map_tensor`` evaluates it
    element by element (seconds for a 512x512x3x3 weight, and every would-be best of a session pays it) and
    refuses maps that pad; it remains the fallback for an index expression the NumPy evaluator does not know."""
    try:
        return _map_with_numpy(imap, arr, shape)
    except NotImplementedError:
        if int(np.prod(shape)) != arr.size:
            raise
        import tvm

        return imap.map_tensor(tvm.runtime.tensor(arr)).numpy()


def _map_with_numpy(imap, arr: np.ndarray, shape: tuple) -> np.ndarray:
    from tvm import tirx

    ops = {
        tirx.Add: np.add,
        tirx.Sub: np.subtract,
        tirx.Mul: np.multiply,
        tirx.FloorDiv: np.floor_divide,
        tirx.FloorMod: np.mod,
    }

    def value(e, env):
        if isinstance(e, tirx.Var):
            return env[e.name]
        if isinstance(e, tirx.IntImm):
            return int(e.value)
        if isinstance(e, tirx.Cast):
            return value(e.value, env)
        if type(e) in ops:
            return ops[type(e)](value(e.a, env), value(e.b, env))
        raise NotImplementedError(f"layout rewrite index {e!r}")

    grid = np.indices(arr.shape, dtype=np.int64)
    env = {v.name: grid[d] for d, v in enumerate(imap.initial_indices)}
    out = np.zeros(shape, dtype=arr.dtype)
    out[tuple(np.broadcast_to(value(e, env), arr.shape) for e in imap.final_indices)] = arr
    return out


def _rewrite():
    from tvm.s_tir import meta_schedule as ms

    return ms.postproc.RewriteLayout()


# Every layout strategy, by name: adding one here makes it selectable and puts it under tests/test_contracts.py.
STRATEGIES: dict[str, LayoutStrategy] = {
    s.name: s
    for s in [
        LayoutStrategy(
            "no-rewrite",
            "weights keep the workload's layout; only loops are scheduled",
            "latency of the kernel reading weights in their original layout",
            lambda: [],
        ),
        LayoutStrategy(
            "transform-stage",
            "a parallel stage inside the program copies the weights into the tiled loop order",
            "latency of the transform stage plus the kernel, paid on every call",
            lambda: [_rewrite(), _inline_transform_stage()],
            intrinsic_pack="in-program",
        ),
        LayoutStrategy(
            "pre-transformed",
            "weights are rewritten once, offline, into the tiled loop order",
            "latency of the kernel alone; the one-off weight transform is not timed",
            lambda: [_rewrite()],
            rewrites_offline=True,
            intrinsic_pack="offline",
        ),
        LayoutStrategy(
            "packed",
            "weights are packed once, offline, into a fixed blocked layout: the output-channel axis split into "
            "blocks of 16/8/4 lanes, the block innermost (e.g. HWIO -> O/16 H W I 16o)",
            "latency of the kernel alone on the packed weights; the one-off packing is not timed",
            lambda: [_packed_weights()],
            rewrites_offline=True,
            intrinsic_pack="offline",
        ),
    ]
}

# The arms of `auto`/`all`: Ansor's three LayoutRewriteOptions plus a fixed blocked layout.
DEFAULT_ARMS = ("no-rewrite", "transform-stage", "pre-transformed", "packed")

# Stable feature positions for the shared cost model: never reorder, only append.
STRATEGY_INDEX = {name: i for i, name in enumerate(STRATEGIES)}


def get(name: str) -> LayoutStrategy:
    if name not in STRATEGIES:
        raise WorkbenchError(f"unknown layout strategy {name!r}; valid: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def parse_strategies(text, workload=None) -> list[str]:
    """``auto``/``all``/``auto:NAME,NAME...``/``NAME[,NAME...]`` -> list of strategy names.

    A workload without constant weights has nothing to rewrite, so every
    strategy collapses to ``no-rewrite``.
    """
    if text in (None, "auto", "all"):
        names = list(DEFAULT_ARMS)
    elif isinstance(text, (list, tuple)):
        names = list(text)
    else:
        body = str(text)[5:] if str(text).startswith("auto:") else str(text)
        names = [t.strip() for t in body.split(",") if t.strip()]
    if not names:
        raise WorkbenchError("no layout strategy given; valid: auto, all, " + ", ".join(STRATEGIES))
    for n in names:
        get(n)
    if workload is not None and not workload.weight_indices:
        names = ["no-rewrite"]
    return list(dict.fromkeys(names))
