"""A measurement worker that waits for its turn: one JSON command per stdin line, one JSON reply per stdout line.

The parent keeps several such workers alive (the TVM re-measurement process,
the torch process from its own environment) and lets exactly one of them time
at any moment, round by round, so their measurements are interleaved while
their environments stay apart. Standard library only: both environments import it.
"""

from __future__ import annotations

import json
import subprocess
import sys


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
