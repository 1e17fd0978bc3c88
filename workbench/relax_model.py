"""A real model graph: a ResNet-18-shaped network in ``tvm.relax.frontend.nn``, tuned end to end.

Path (no downloads; random weights):

1. ``resnet18(...)``: the model (stem 7x7/2 + max-pool, four stages of two basic
   blocks, global average pool, linear; batch-norm folded into conv bias), its
   Relax module with the weights bound as constants;
2. ``extract(...)``: the same preparation as MetaSchedule's ``compile_relax``
   (library dispatch, LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps,
   FuseTIR), then ``ms.relax_integration.extract_tasks``: one task per unique
   fused PrimFunc, with how often the graph calls it as its weight;
3. the extracted PrimFuncs are tuned directly (``RelaxTask`` wraps one as a
   workload: its reference is its own unscheduled build) in ONE
   ``NetworkSession``, under the gradient task scheduler;
4. ``database(...)``: the best verified record of every tuned task becomes a
   MetaSchedule database; ``compile_relax`` applies it while compiling the
   whole model (untuned functions keep TVM's default lowering);
5. ``compare(...)``: the tuned and the untuned (``tvm.compile``) builds run on
   the same input; outputs must agree; both end-to-end latencies are reported.

Tuned schedules are only reused where the extracted PrimFunc is structurally
identical to the tuned one; the workbench's own conv workloads (NHWC, HWIO)
are a different program from Relax's legalized NCHW convs, so records are not
mapped across the two.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass

import numpy as np

from . import tvm_env
from .errors import WorkbenchError
from .workloads import Workload

# ---------------------------------------------------------------------------------------- the model


def _model_class():
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn.core import wrap_nested

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            self.conv1 = nn.Conv2D(cin, cout, 3, stride, 1, bias=True)
            self.conv2 = nn.Conv2D(cout, cout, 3, 1, 1, bias=True)
            self.down = nn.Conv2D(cin, cout, 1, stride, 0, bias=True) if (stride != 1 or cin != cout) else None

        def forward(self, x):
            y = nn.op.relu(self.conv1(x))
            y = self.conv2(y)
            skip = self.down(x) if self.down is not None else x
            return nn.op.relu(nn.op.add(y, skip))

    class ResNet18(nn.Module):
        def __init__(self, width=64, classes=1000, stages=4):
            self.stem = nn.Conv2D(3, width, 7, 2, 3, bias=True)
            blocks, cin = [], width
            for s in range(stages):
                cout = width * 2**s
                blocks += [BasicBlock(cin, cout, 1 if s == 0 else 2), BasicBlock(cout, cout, 1)]
                cin = cout
            self.blocks = nn.ModuleList(blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            y = nn.op.relu(self.stem(x))
            y = wrap_nested(relax.op.nn.max_pool2d(y._expr, pool_size=3, strides=2, padding=1), "maxpool")
            for b in self.blocks:
                y = b(y)
            y = wrap_nested(relax.op.mean(y._expr, axis=[2, 3]), "avgpool")
            return self.fc(y)

    return ResNet18


@dataclass
class RelaxModel:
    mod: object  # tvm.IRModule, weights bound as constants; entry function "forward"
    input_shape: tuple
    config: dict


def resnet18(
    batch: int = 1, image: int = 224, width: int = 64, classes: int = 1000, stages: int = 4, seed: int = 0
) -> RelaxModel:
    """ResNet-18's structure; ``image``, ``width`` and ``stages`` shrink it for quick runs (224, 64, 4 = the real one)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend import nn

    for k, v in (("batch", batch), ("image", image), ("width", width), ("classes", classes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise WorkbenchError(f"resnet18: {k} must be a positive integer, got {v!r}")
    if stages not in (1, 2, 3, 4):
        raise WorkbenchError(f"resnet18: stages must be 1 to 4, got {stages!r}")
    if image < 4 * 2**stages:
        raise WorkbenchError(f"resnet18: image {image} is too small for {stages} stages (at least {4 * 2**stages})")
    tvm_env.setup()
    model = _model_class()(width=width, classes=classes, stages=stages)
    shape = (batch, 3, image, image)
    mod, named = model.export_tvm(spec={"forward": {"x": nn.spec.Tensor(shape, "float32")}})
    rng = np.random.default_rng(seed)
    params = {}
    for name, p in named:
        shp = tuple(int(s) for s in p.shape)
        if len(shp) == 1:  # biases (folded batch norm)
            arr = rng.uniform(-0.1, 0.1, size=shp)
        else:  # He initialisation keeps activations O(1) through the residual stages
            fan_in = int(np.prod(shp[1:]))
            arr = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shp)
        params[name] = tvm.runtime.tensor(arr.astype("float32"))
    mod = relax.transform.BindParams("forward", params)(mod)
    return RelaxModel(
        mod, shape, {"batch": batch, "image": image, "width": width, "classes": classes, "stages": stages, "seed": seed}
    )


# ---------------------------------------------------------------------------------------- tasks


def _fuse(mod, target):
    """Exactly the preparation ``ms.relax_integration.compile_relax`` applies, so database keys match."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline as rp

    try:
        dispatch = rp.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    seq = tvm.transform.Sequential(
        [
            *dispatch,
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )
    with target, tvm.transform.PassContext(opt_level=3):
        return seq(mod)


@dataclass
class RelaxTask(Workload):
    """An extracted fused PrimFunc as a workload; verified against its own unscheduled build."""

    task_mod: object = None
    task_name: str = ""

    @functools.cached_property
    def _built(self):
        from tvm.s_tir import meta_schedule as ms

        func = self.task_mod["main"]
        return func, len(ms.arg_info.ArgInfo.from_prim_func(func)) - 1, 0, 1

    @functools.cached_property
    def mod(self):
        return self.task_mod

    @property
    def reference_kind(self) -> str:
        return "tvm-naive"

    @property
    def class_key(self) -> str:
        return "relax:" + re.sub(r"\d+(?=_|$)", "", self.task_name)  # the fused function's name, numbering dropped

    def spec(self) -> dict:
        d = {
            "name": self.name,
            "op": "relax-task",
            "params": {"task": self.task_name, "args": [list(s) for s in self.arg_shapes]},
        }
        if self.weight != 1:
            d["weight"] = self.weight
        return d

    def describe(self) -> str:
        return f"{self.task_name}: " + ", ".join("x".join(map(str, s)) for s in self.arg_shapes)


def extract(model: RelaxModel, target="host", prefix: str = "r18") -> list[RelaxTask]:
    """The model's tuning tasks (unique fused PrimFuncs, weight = calls), largest weight x FLOPs first."""
    from tvm.s_tir import meta_schedule as ms

    tvm_env.setup()
    tgt = tvm_env.make_target(tvm_env.parse_target(target))
    tasks = ms.relax_integration.extract_tasks(_fuse(model.mod, tgt), tgt)
    out = []
    for t in tasks:
        name = str(t.task_name)
        w = RelaxTask(
            name=f"{prefix}.{name}",
            op="relax-task",
            params={"task": name},
            weight=int(t.weight),
            source="relax",
            task_mod=t.dispatched[0] if len(t.dispatched) else t.mod,
            task_name=name,
        )
        if len(w.arg_shapes) < 2:
            continue
        out.append(w)
    out.sort(key=lambda w: -w.weight * w.flops)
    return out


# ---------------------------------------------------------------------------------------- compile and run


def database(store, tasks: list[RelaxTask], target="host", work_dir: str | None = None):
    """A MetaSchedule database with the best verified record of every tuned task (JSON when work_dir is given)."""
    from tvm.s_tir import meta_schedule as ms

    from . import space
    from .store import RecordStore

    store = store if isinstance(store, RecordStore) else RecordStore(store, readonly=True)
    tgt = tvm_env.make_target(tvm_env.parse_target(target))
    db = ms.database.JSONDatabase(work_dir=work_dir) if work_dir else ms.database.MemoryDatabase()
    used = []
    for w in tasks:
        b = store.best(w.name)
        if b is None:
            continue
        sch = space.schedule_from_trace_json(w, b["trace"])
        wl = db.commit_workload(w.mod)
        args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, [float(x) for x in b["run_secs"]], tgt, args))
        used.append(w.name)
    return db, used


def applied(model: RelaxModel, db, target="host") -> list[str]:
    """Names of the fused functions the database schedules in this model (what compile_relax will apply)."""
    import tvm
    from tvm.relax.transform import MetaScheduleApplyDatabase

    tgt = tvm_env.make_target(tvm_env.parse_target(target))
    fused = _fuse(model.mod, tgt)
    with tgt, db, tvm.transform.PassContext(opt_level=3):
        out = MetaScheduleApplyDatabase()(fused)
    return sorted(
        gv.name_hint
        for gv, f in out.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and f.attrs.get("tirx.is_scheduled", False)
    )


def build(model: RelaxModel, db=None, target="host"):
    """The whole model compiled: with a MetaSchedule database (tuned) or by ``tvm.compile`` (untuned)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    tgt = tvm_env.make_target(tvm_env.parse_target(target))
    if db is None:
        return tvm.compile(model.mod, target=tgt)
    return ms.relax_integration.compile_relax(db, model.mod, tgt, None)


def run(executable, x: np.ndarray, repeat: int = 5, min_repeat_ms: int = 50):
    """(output, median latency in ms) of the compiled model on input x."""
    import tvm
    from tvm import relax

    dev = tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    xt = tvm.runtime.tensor(x, dev)
    out = vm["forward"](xt).numpy()
    timer = vm.time_evaluator("forward", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    secs = list(timer(xt).results)
    return out, float(np.median(secs)) * 1e3


def compare(
    model: RelaxModel, store, tasks: list[RelaxTask], target="host", seed: int = 7, work_dir: str | None = None
) -> dict:
    """Build untuned and tuned, run both on the same input, check they agree, report both latencies."""
    x = np.random.default_rng(seed).uniform(-1, 1, size=model.input_shape).astype("float32")
    t0 = time.time()
    untuned = build(model, None, target)
    t_untuned = time.time() - t0
    db, used = database(store, tasks, target, work_dir)
    scheduled = applied(model, db, target)
    t0 = time.time()
    tuned = build(model, db, target)
    t_tuned = time.time() - t0
    ref, ms_untuned = run(untuned, x)
    out, ms_tuned = run(tuned, x)
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(out.astype(np.float64) - ref).max())
    return {
        "untuned_latency_ms": ms_untuned,
        "tuned_latency_ms": ms_tuned,
        "speedup": ms_untuned / ms_tuned,
        "max_abs_error": err,
        "matches": bool(err <= 1e-3 * scale),
        "tuned_tasks": used,
        "applied": scheduled,
        "compile_seconds": {"untuned": round(t_untuned, 2), "tuned": round(t_tuned, 2)},
        "output_shape": list(out.shape),
    }


def tune_and_compare(
    model: RelaxModel,
    trials: int,
    db: str,
    target="host",
    max_tasks: int | None = None,
    strategy="no-rewrite",
    seed: int = 0,
    on_event=None,
    **preset_overrides,
) -> dict:
    """Extract, tune the largest ``max_tasks`` tasks (all by default) in one NetworkSession, compile, compare."""
    from .network import NetworkSession

    tasks = extract(model, target)
    chosen = tasks[:max_tasks] if max_tasks else tasks
    s = NetworkSession(
        chosen,
        target=target,
        trials=trials,
        db=db,
        strategy=strategy,
        seed=seed,
        name="relax-resnet18",
        **preset_overrides,
    )
    if on_event is not None:
        s.subscribe(on_event)
    summ = s.run()
    res = compare(model, db, chosen, target)
    return {
        "tasks": [{"workload": w.name, "weight": w.weight, "flops": w.flops, "tuned": w in chosen} for w in tasks],
        "session": summ,
        **res,
    }
