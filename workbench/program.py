"""A tuned program, ready to deploy: the best record of a store, compiled.

``TunedProgram.from_store("workbench.db", "resnet18.conv2")`` rebuilds the best
verified schedule from its trace and compiles it for the session's target.
Strategies that rewrite weights offline (pre-transformed, packed) compile the
kernel on rewritten weights; ``transform_weights`` is that one-off rewrite, and
calling the program applies it for you.
"""

from __future__ import annotations

import os

import numpy as np

from . import layouts, space, tvm_env
from .errors import WorkbenchError
from .store import RecordStore
from .workloads import workload_from_spec


def tensor_intrinsics(program) -> list[dict]:
    """The tensor intrinsics a program uses: one ``{"intrinsic", "instruction", "block"}`` per tensorized block,
    in the order its trace applied them. ``program`` is a ``Schedule`` (its blocks are named: ``block`` is the TIR
    block the instruction replaced) or a bare ``Trace`` (``block`` None). ``instruction`` is the x86 instruction
    of a workbench intrinsic (``intrinsics.INTRINSICS``), None for any other. Empty for a program without one,
    including a sketch tiled for an intrinsic whose tile did not match it (then it runs as plain loops)."""
    from . import intrinsics

    trace = getattr(program, "trace", program)
    out = []
    for inst in trace.insts:
        if inst.kind.name != "Tensorize":
            continue
        name = str(inst.attrs[0])
        block = None
        if trace is not program:
            try:
                block = program.get(inst.inputs[0]).name_hint
            except Exception:  # noqa: BLE001 - a loop, or a schedule the trace is not bound to
                block = None
        known = intrinsics.INTRINSICS.get(name)
        out.append({"intrinsic": name, "instruction": known.instruction if known else None, "block": block})
    return out


def intrinsics_line(used: list[dict]) -> str:
    """``tensor_intrinsics`` in one line for people: ``workbench.dot_16x4_vnni (vpdpbusd, block conv2d_nhwc_o_update)``,
    or ``none``."""
    if not used:
        return "none"
    parts = []
    for u in used:
        where = ", ".join(x for x in (u["instruction"], u["block"] and f"block {u['block']}") if x)
        parts.append(f"{u['intrinsic']} ({where})" if where else u["intrinsic"])
    return "; ".join(parts)


class TunedProgram:
    def __init__(self, workload, strategy: str, trace_json: str, target_dict: dict, latency_ms: float | None = None):
        self.workload = workload
        self.strategy = strategy
        self.latency_ms = latency_ms
        self.target_dict = target_dict
        self.schedule = space.schedule_from_trace_json(workload, trace_json)
        self._lib = None

    @classmethod
    def from_store(cls, db, workload: str, strategy: str | None = None) -> "TunedProgram":
        store = db if isinstance(db, RecordStore) else RecordStore(db, readonly=True)
        b = store.best(workload, strategy)
        if b is None:
            raise WorkbenchError(
                f"no verified program for {workload!r}"
                + (f" with strategy {strategy!r}" if strategy else "")
                + f" in {store.path!r}"
            )
        sess = store.session(b["session_id"])
        return cls(workload_from_spec(sess["spec"]), b["strategy"], b["trace"], sess["target"], b["latency_ms"])

    @property
    def trace(self) -> str:
        return str(self.schedule.trace)

    @property
    def tensor_intrinsics(self) -> list[dict]:
        return tensor_intrinsics(self.schedule)

    @property
    def kernel_mod(self):
        """The IRModule that is compiled: offline weight rewrites removed from the program."""
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        return RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(self.schedule.mod)

    @property
    def tir(self) -> str:
        return self.kernel_mod.script()

    def build(self):
        import tvm

        if self._lib is None:
            self._lib = tvm.tirx.build(self.kernel_mod, target=tvm_env.make_target(self.target_dict))
        return self._lib

    def transform_weights(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return layouts.get(self.strategy).deploy_inputs(self.schedule, self.workload, inputs)

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        import tvm

        lib = self.build()
        dev = tvm.cpu()
        args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in self.transform_weights(list(inputs))]
        out = tvm.runtime.empty(self.workload.arg_shapes[-1], self.workload.arg_dtypes[-1], dev)
        lib["main"](*args, out)
        return out.numpy()

    def time(self, threads: int | None = None, repeat: int = 10, min_repeat_ms: int = 50) -> dict:
        """Time the kernel as deployed, standalone: built and timed in fresh worker processes exactly as a
        session's runner times candidates, ``repeat`` results. Returns the median (ms), its spread
        ((max - min) / median), the noise reading of the timing and the thread count; ``noisy`` says
        whether another process disturbed it (then the figure is not to be trusted: time again)."""
        from tvm.s_tir import meta_schedule as ms

        from . import measure, noise, presets

        threads = int(threads or self.target_dict.get("num-cores") or tvm_env.available_cores())
        mod = self.kernel_mod
        shapes = [
            (tuple(int(x) for x in a.shape), str(a.dtype)) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        ]
        timing = presets.get("quick", number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
        target = dict(self.target_dict, **{"num-cores": threads})
        builder = measure.make_builder(self.target_dict, timing, workers=1)
        runner = measure.make_runner(None, target, timing)
        try:
            [b] = builder.build([mod])
            if b.path is None:
                raise WorkbenchError(f"the best program of {self.workload.name} does not build: {b.error_msg}")
            runner.run(b.path, shapes, repeat=1)  # warm-up: the runner's thread pool, caches
            r = runner.run(b.path, shapes)
            if r.latency_ms is None:
                raise WorkbenchError(f"the best program of {self.workload.name} failed to run: {r.error_msg}")
        finally:
            builder.close()
            runner.close()
        return {
            "timed_ms": r.latency_ms,
            "spread": noise.spread(r.run_secs),
            "repeats": len(r.run_secs),
            "threads": threads,
            "noise": r.reading,
            "noisy": noise.is_noisy(r.reading, noise.NoisePolicy()),
        }

    def export(self, path: str) -> str:
        """A shared library of the kernel (``tvm.runtime.load_module`` loads it); ``WorkbenchError`` (one line)
        when ``path`` cannot be written."""
        where = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(where):
            raise WorkbenchError(f"cannot export to {path!r}: no directory {where!r}")
        if os.path.isdir(path):
            raise WorkbenchError(f"cannot export to {path!r}: it is a directory (name the library file, e.g. k.so)")
        if not os.access(where, os.W_OK):
            raise WorkbenchError(f"cannot export to {path!r}: {where!r} is not writable")
        self.build().export_library(path)
        return path
