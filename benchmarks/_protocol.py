"""A measurement worker: one JSON command per stdin line, one JSON reply per stdout line.

The parent starts one such worker per library (a TVM re-measurement process per
tuner, one for numpy/OpenBLAS, the torch process from its own environment), uses
it (``setup``, then ``time``), closes it and waits for it to exit before the next
one starts: each library is timed alone, with no other process's thread pool
spinning beside it (see ``_quiet.py``, the benchmark protocol). Standard library
only: both environments import it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timing_meter(threads: int):
    """``workbench.noise.TimingMeter(threads)`` loaded from its file, without importing the workbench package
    (which needs TVM): the torch environment has no TVM. noise.py imports only the standard library."""
    name = "_wb_noise"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "workbench", "noise.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod.TimingMeter(threads)


def serve(handlers: dict) -> None:
    """Worker side: ``{"cmd": name, ...}`` -> ``handlers[name](msg)`` -> one JSON line; ``quit`` ends it."""
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever the handlers print must not corrupt the protocol
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "quit":
            break
        try:
            reply = {"ok": True, "result": handlers[msg["cmd"]](msg)}
        except Exception as e:  # noqa: BLE001 - reported to the parent, which decides
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


class Worker:
    """Parent side of :func:`serve`."""

    def __init__(self, argv: list, env=None, cwd=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)

    def call(self, cmd: str, **kw):
        self.p.stdin.write(json.dumps(dict(kw, cmd=cmd)) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.p.args[:2]} died (rc {self.p.wait()})")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(f"worker {cmd}: {reply['error']}")
        return reply["result"]

    def close(self):
        try:
            self.p.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.p.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        self.p.wait(timeout=60)
