"""The parts of TVM 0.27 the workbench uses that TVM does not export: all of them, in one place.

The RPC tracker's wire protocol (``rpc.RPCRunner``). ``tvm.rpc.TrackerSession`` cannot do two
things the runner needs: its socket (the private ``_sock``) has no timeout, so a silent
tracker blocks the session forever; and ``request()`` returns an open RPC session, not the
address of the server it got, which the runner needs to report per-server health and to
connect from its own worker process. ``TrackerConnection`` therefore speaks the protocol on
a socket of its own, with the helpers and constants of ``tvm.rpc.base``, a module that
``tvm.rpc`` does not export: ``RPC_TRACKER_MAGIC``, ``TrackerCode.{SUCCESS, REQUEST,
SUMMARY}``, ``sendjson``, ``recvjson`` and ``recvall``.

``missing()`` names whichever of these the installed TVM lacks; tests/test_contracts.py fails
on any, so that an upgrade that moves them is caught by the tests, not by a tuning session.

(Per-call timeouts of worker processes, the other thing TVM's public classes do not offer,
need nothing private: ``measure.WorkerProcess`` is built on ``PopenWorker.send(timeout=...)``.)
"""

from __future__ import annotations

import socket
import struct

REQUIRED = (
    "RPC_TRACKER_MAGIC",
    "TrackerCode.SUCCESS",
    "TrackerCode.REQUEST",
    "TrackerCode.SUMMARY",
    "sendjson",
    "recvjson",
    "recvall",
)


def missing() -> list[str]:
    """The names of ``REQUIRED`` that ``tvm.rpc.base`` does not have (``tvm.rpc.base.X``); [] when all are there."""
    try:
        from tvm.rpc import base
    except ImportError:
        return ["tvm.rpc.base"]
    out = []
    for name in REQUIRED:
        obj = base
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            out.append(f"tvm.rpc.base.{name}")
    return out


class TrackerRefused(RuntimeError):
    """The tracker answered a request with something other than success."""


class TrackerConnection:
    """One connection to a TVM RPC tracker, over ``sock`` (already connected; its timeout applies).

    ``handshake()`` must come first. ``summary()`` and ``request()`` raise ``TrackerRefused``
    when the tracker answers with a failure, ``OSError`` when the socket fails or times out
    (``socket.timeout``) and ``ValueError`` for an answer that is not JSON; after an ``OSError``
    or ``ValueError`` the connection must be closed, as the tracker may still answer the failed
    message. ``close()`` may be called more than once. One thread at a time may use a connection.
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def handshake(self) -> None:
        """Both sides send the tracker magic number; ``RuntimeError`` if the peer answers another."""
        from tvm.rpc import base

        self.sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(self.sock, 4))[0]
        if magic != base.RPC_TRACKER_MAGIC:
            raise RuntimeError("wrong magic number")

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def summary(self) -> dict:
        """The tracker's state: ``server_info`` (one entry per registered server, ``key`` ``"server:KEY"``)
        and ``queue_info``."""
        from tvm.rpc import base

        base.sendjson(self.sock, [base.TrackerCode.SUMMARY])
        value = base.recvjson(self.sock)
        if value[0] != base.TrackerCode.SUCCESS:
            raise TrackerRefused(f"the tracker refused a summary: {value}")
        return value[1]

    def request(self, key: str, priority: int = 1) -> tuple[str, int, str]:
        """(host, port, matchkey) of a free server under ``key``, waiting for one up to the socket's timeout.

        The server is reserved for one ``tvm.rpc.connect(host, port, matchkey)``.
        """
        from tvm.rpc import base

        base.sendjson(self.sock, [base.TrackerCode.REQUEST, key, "", priority])
        value = base.recvjson(self.sock)
        if value[0] != base.TrackerCode.SUCCESS:
            raise TrackerRefused(str(value))
        host, port, matchkey = value[1]
        return host, int(port), matchkey

    def close(self) -> None:
        self.sock.close()
