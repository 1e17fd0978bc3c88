"""One library's final kernels, rebuilt and timed alone in this process: a :mod:`_protocol` worker.

    .venv/bin/python benchmarks/_remeasure.py THREADS

``performance.py`` starts one such process per tuner (and one for numpy), one
after the other (the benchmark protocol, ``_quiet.py``). ``setup`` takes
``kernels`` (``{"key", "workload", "trace"}``: a trace in TVM's JSON form,
postprocessors included, as the workbench's records store and MetaSchedule's
database hold it) and ``numpy`` (workload names to time ``numpy.matmul`` on,
OpenBLAS with the same thread count). Each kernel is replayed, its
weight-layout preproc block removed (MetaSchedule's own builder does the same:
the weights arrive pre-transformed), built for the target and checked against
the workload's NumPy reference on inputs whose weights went through that
kernel's layout transform. ``time`` times each kernel in turn, ``repeats``
samples in a row after one warm-up call, each sample one ``time_evaluator``
repeat lasting >= ``min_repeat_ms``; a ``TimingMeter`` reading (run-queue wait
of this process's threads, other processes' CPU) comes back with each.
"""

from __future__ import annotations

import os
import sys
import time

THREADS = sys.argv[1] if len(sys.argv) > 1 else "2"
os.environ["TVM_NUM_THREADS"] = THREADS
os.environ["OPENBLAS_NUM_THREADS"] = THREADS
os.environ["OMP_NUM_THREADS"] = THREADS
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import _protocol  # noqa: E402
import numpy as np  # noqa: E402

KERNELS: dict = {}
NUMPY: dict = {}


def _build(workload, trace_text, target):
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from workbench import layouts, measure, space

    sch = space.schedule_from_trace_json(workload, trace_text)
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod)
    rt = tvm.tirx.build(mod, target=tvm.target.Target(target))
    dev = tvm.cpu()
    shapes = [tuple(int(x) for x in a.shape) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    inputs = workload.make_inputs(seed=7)
    kin = layouts.get("pre-transformed").deploy_inputs(sch, workload, inputs)
    args = [tvm.runtime.tensor(np.ascontiguousarray(a, dtype="float32"), dev) for a in kin]
    out = tvm.runtime.tensor(np.zeros(shapes[-1], "float32"), dev)
    name = getattr(rt, "entry_name", None) or "main"
    rt[name](*args, out)
    ok, detail = measure.verify(out.numpy(), workload.numpy_reference(inputs).astype(np.float64))
    return rt, name, args + [out], ok, detail


def setup(msg):
    from workbench import tvm_env
    from workbench.workloads import registry

    tvm_env.setup()
    tvm_env.configure_thread_pool(THREADS)  # as the workbench's runner does
    reg = registry()
    info = {}
    for k in msg["kernels"]:
        with open(k["trace"]) as f:
            text = f.read()
        rt, name, args, ok, detail = _build(reg.get(k["workload"]), text, msg["target"])
        KERNELS[k["key"]] = (rt, name, args)
        info[k["key"]] = {"verified": ok, "check": detail}
    for wname in msg.get("numpy", []):
        w = reg.get(wname)
        a, b = (x.reshape(x.shape[-2:]) for x in w.make_inputs(seed=7))
        c = np.empty((a.shape[0], b.shape[1]), np.float32)
        NUMPY[wname] = (a, b, c)
        info["numpy:" + wname] = {
            "verified": bool(
                np.allclose(a @ b, w.numpy_reference([a[None], b[None]]).reshape(c.shape), rtol=1e-3, atol=1e-3)
            ),
            "check": "vs reference",
        }
    return info


def _numpy_once(a, b, c, min_s):
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            np.matmul(a, b, out=c)
        t = time.perf_counter() - t0
        if t >= min_s:
            return t / n
        n = max(n * 2, int(n * min_s / max(t, 1e-6)) + 1)


def time_(msg):
    import tvm

    repeats = int(msg.get("repeats", 5))
    min_ms = int(msg.get("min_repeat_ms", 100))
    threads = int(THREADS)
    out = {}
    for key, (rt, name, args) in KERNELS.items():
        rt[name](*args)  # warm-up: caches, and the pool is running before the first sample
        f = rt.time_evaluator(name, tvm.cpu(), number=1, repeat=repeats, min_repeat_ms=min_ms)
        with _protocol.timing_meter(threads) as m:
            xs = [float(x) for x in f(*args).results]
        out[key] = dict(samples=xs, **m.result)
    for wname, (a, b, c) in NUMPY.items():
        np.matmul(a, b, out=c)
        with _protocol.timing_meter(threads) as m:
            xs = [_numpy_once(a, b, c, min_ms / 1e3) for _ in range(repeats)]
        out["numpy:" + wname] = dict(samples=xs, **m.result)
    return out


if __name__ == "__main__":
    _protocol.serve({"setup": setup, "time": time_})
