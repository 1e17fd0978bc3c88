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
elements, whatever their type, and the offline rewrites (``IndexMap.map_tensor``)
return the weights in their own dtype (int8, bfloat16, FP8).
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
                        loops = sch.get_loops(blk)
                        # As Ansor's INSERT_TRANSFORM_STAGE: fuse the outer loops, then parallel.
                        n = 3 if len(loops) >= 5 else (2 if len(loops) >= 3 else 1)
                        outer = sch.fuse(*loops[:n]) if n > 1 else loops[0]
                        sch.parallel(outer)
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


@dataclass(frozen=True)
class LayoutStrategy(interfaces.LayoutStrategy):
    """A strategy as data: its postprocessors come from ``make_postprocs``; every strategy is one entry of
    ``STRATEGIES``."""

    name: str
    summary: str
    latency_means: str
    make_postprocs: Callable[[], list]
    rewrites_offline: bool = False  # deploy_inputs must transform the weights

    def postprocs(self) -> list:
        return self.make_postprocs()

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
    import tvm
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
            if tuple(int(d) for d in imap.map_shape(list(out[i].shape))) == new_shapes[i]:
                out[i] = imap.map_tensor(tvm.runtime.tensor(out[i])).numpy()
                break
        else:
            raise RuntimeError(f"no recorded layout rewrite maps weight {i} to {new_shapes[i]}")
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
            lambda: _base_postprocs(),
        ),
        LayoutStrategy(
            "transform-stage",
            "a parallel stage inside the program copies the weights into the tiled loop order",
            "latency of the transform stage plus the kernel, paid on every call",
            lambda: _base_postprocs() + [_rewrite(), _inline_transform_stage()],
        ),
        LayoutStrategy(
            "pre-transformed",
            "weights are rewritten once, offline, into the tiled loop order",
            "latency of the kernel alone; the one-off weight transform is not timed",
            lambda: _base_postprocs() + [_rewrite()],
            rewrites_offline=True,
        ),
        LayoutStrategy(
            "packed",
            "weights are packed once, offline, into a fixed blocked layout: the output-channel axis split into "
            "blocks of 16/8/4 lanes, the block innermost (e.g. HWIO -> O/16 H W I 16o)",
            "latency of the kernel alone on the packed weights; the one-off packing is not timed",
            lambda: _base_postprocs() + [_packed_weights()],
            rewrites_offline=True,
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
