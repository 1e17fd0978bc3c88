"""The one place that knows how TVM 0.27 is imported and configured.

Every workbench process (the session, builder workers, runner workers) calls
:func:`setup` before touching MetaSchedule. It does three things that TVM does
not do for us:

* registers only the x86 tensor intrinsics. ``TuneContext`` imports
  ``tvm.s_tir.tensor_intrin``, which parses every CUDA/ROCm/ARM/Hexagon
  intrinsic in TVMScript: 20-30 s per process. The llvm design spaces only need
  the x86 ones (0.4 s), and the workbench's own (``intrinsics``: VNNI with the
  operand types of the linked LLVM), which traces of tensorized programs name.
* silences MetaSchedule's logger, which ``tune_*`` reconfigures to DEBUG.
* stops MetaSchedule from ``display()``-ing pandas tables inside Jupyter.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import sys
import threading
import types

from .errors import WorkbenchError

_DONE = False


def setup() -> None:
    global _DONE
    if _DONE:
        return
    import tvm
    import tvm.s_tir

    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
        sys.modules[name] = pkg
        importlib.import_module(name + ".x86")
    from . import intrinsics

    intrinsics.register()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    tvm.register_global_func("s_tir.meta_schedule.using_ipython", lambda: False, override=True)
    _DONE = True


def configure_thread_pool(num_threads: int) -> int | None:
    """Make TVM's thread pool in this process ``num_threads`` wide, each timing thread on a core of its own.

    TVM (``runtime.config_threadpool``) starts the pool's workers at once, each bound to one core, but leaves the
    calling thread (which runs the first share of every parallel loop) free to move. On a 2-core machine a thread
    of another process that wakes for a moment then lands that thread on its worker's core: the two share one
    core until the scheduler moves one back, milliseconds for a wakeup of microseconds (live-dashboard timings
    waited 4.5 % of the time in the median that way, beside 0.02 cores of other work; bound, under 1 %). Bound,
    the calling thread waits only while another thread runs in its place.

    Returns the core it is bound to, or None (one thread, no core left free, or no affinity on this platform).
    """
    import tvm

    tvm.get_global_func("runtime.config_threadpool")(1, int(num_threads))
    if int(num_threads) < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    mine = os.sched_getaffinity(0)
    taken = set()
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == threading.get_native_id():
            continue
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                allowed = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list"))
        except (OSError, StopIteration):
            continue
        if allowed.isdigit():  # a pool worker, bound to one core
            taken.add(int(allowed))
    free = sorted(mine - taken)
    if not taken or not free:
        return None
    os.sched_setaffinity(0, {free[0]})  # pid 0: the calling thread only
    return free[0]


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@functools.lru_cache(maxsize=None)
def host_mcpu() -> str:
    import tvm

    return str(tvm.target.Target.from_device(tvm.cpu()).attrs["mcpu"])


# /proc/cpuinfo flag -> LLVM feature, for the vector and matrix extensions a kernel can use. LLVM names the host
# CPU from its model number, and on a CPU (or a VM's CPU model) it does not know it picks an older part whose
# defaults lack some of them: a Sapphire Rapids VM reads "rocketlake", without AVX512-BF16/FP16 or AMX.
CPU_FLAG_FEATURES = {
    "avx2": "avx2",
    "fma": "fma",
    "f16c": "f16c",
    "avx512f": "avx512f",
    "avx512bw": "avx512bw",
    "avx512dq": "avx512dq",
    "avx512cd": "avx512cd",
    "avx512vl": "avx512vl",
    "avx512_vnni": "avx512vnni",
    "avx512_bf16": "avx512bf16",
    "avx512_fp16": "avx512fp16",
    "avx_vnni": "avxvnni",
    "amx_tile": "amx-tile",
    "amx_int8": "amx-int8",
    "amx_bf16": "amx-bf16",
}


@functools.lru_cache(maxsize=None)
def host_cpu_flags() -> frozenset:
    """The CPU flags the kernel reports for this machine (empty where /proc/cpuinfo is absent)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=None)
def host_mattr(mcpu: str) -> tuple:
    """``+feature`` for each extension this CPU has (``CPU_FLAG_FEATURES``) that LLVM's ``mcpu`` lacks."""
    import tvm
    from tvm.target import codegen

    have = {llvm for flag, llvm in CPU_FLAG_FEATURES.items() if flag in host_cpu_flags()}
    if not have:
        return ()
    setup()
    base = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    return tuple(f"+{f}" for f in sorted(have) if not codegen.llvm_cpu_has_features([f], base))


def host_target_dict(num_cores: int | None = None) -> dict:
    """The llvm target of this machine: LLVM's name for the CPU, plus (``mattr``) the vector and matrix
    extensions the CPU reports that this name's defaults lack. Without ``mcpu`` LLVM emits SSE2 code."""
    mcpu = host_mcpu()
    target = {"kind": "llvm", "mcpu": mcpu, "num-cores": int(num_cores or available_cores())}
    mattr = host_mattr(mcpu)
    if mattr:
        target["mattr"] = list(mattr)
    return target


def parse_target(target) -> dict:
    """``"host"``, a JSON string or a dict -> a validated target dict."""
    if target is None or target == "host":
        return host_target_dict()
    if isinstance(target, str):
        try:
            target = json.loads(target)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"target is neither 'host' nor valid JSON: {e.msg} at column {e.colno}") from None
    if not isinstance(target, dict):
        raise WorkbenchError('target must be \'host\' or a JSON object such as {"kind": "llvm", "mcpu": "znver4"}')
    if target.get("kind") != "llvm":
        raise WorkbenchError(
            f'target kind {target.get("kind")!r} is not supported; only CPU targets ("kind": "llvm") are'
        )
    target = dict(target)
    if "mcpu" not in target:
        host = host_target_dict()
        target["mcpu"] = host["mcpu"]
        if "mattr" in host and "mattr" not in target:
            target["mattr"] = host["mattr"]
    if isinstance(target.get("mattr"), str):  # "+avx2,+fma", as LLVM's -mattr takes it
        target["mattr"] = [a.strip() for a in target["mattr"].split(",") if a.strip()]
    target.setdefault("num-cores", available_cores())
    setup()
    import tvm

    try:
        tvm.target.Target(target)
    except Exception as e:  # TVM raises several types for bad attributes
        raise WorkbenchError(f"invalid target {json.dumps(target)}: {str(e).splitlines()[-1]}") from None
    return target


def make_target(target_dict: dict):
    import tvm

    return tvm.target.Target(target_dict)


def library_versions() -> dict:
    import numpy
    import tvm
    import xgboost

    from importlib.metadata import version

    def v(pkg):
        try:
            return version(pkg)
        except Exception:
            return None

    return {
        "tvm": tvm.__version__,
        "tvm_ffi": v("apache-tvm-ffi"),
        "xgboost": xgboost.__version__,
        "numpy": numpy.__version__,
        "python": sys.version.split()[0],
    }
