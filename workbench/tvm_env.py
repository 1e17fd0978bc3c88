"""The one place that knows how TVM 0.27 is imported and configured.

Every workbench process (the session, builder workers, runner workers) calls
:func:`setup` before touching MetaSchedule. It does three things that TVM does
not do for us:

* registers only the x86 tensor intrinsics. ``TuneContext`` imports
  ``tvm.s_tir.tensor_intrin``, which parses every CUDA/ROCm/ARM/Hexagon
  intrinsic in TVMScript: 20-30 s per process. The llvm design spaces only need
  the x86 ones (0.4 s).
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
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    tvm.register_global_func("s_tir.meta_schedule.using_ipython", lambda: False, override=True)
    _DONE = True


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@functools.lru_cache(maxsize=None)
def host_mcpu() -> str:
    import tvm

    return str(tvm.target.Target.from_device(tvm.cpu()).attrs["mcpu"])


def host_target_dict(num_cores: int | None = None) -> dict:
    """The llvm target of this machine. Without ``mcpu`` LLVM emits SSE2 code."""
    return {"kind": "llvm", "mcpu": host_mcpu(), "num-cores": int(num_cores or available_cores())}


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
    target.setdefault("mcpu", host_mcpu())
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
