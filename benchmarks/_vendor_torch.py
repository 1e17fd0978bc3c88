"""torch (oneDNN) conv2d, timed in torch's own environment (.venv-torch): a :mod:`_protocol` worker.

    .venv-torch/bin/python benchmarks/_vendor_torch.py THREADS

``setup`` takes conv specs (NCHW semantics, N=1) and picks, per spec, the faster
of torch's two memory formats (contiguous NCHW and channels_last, both run by
oneDNN on CPU); ``time`` times each conv in turn, ``repeats`` samples in a row
(each the mean over >= ``min_repeat_ms`` of calls), with a ``TimingMeter``
reading. ``performance.py`` starts this process alone, after the TVM ones have
exited (the benchmark protocol, ``_quiet.py``). torch never enters the
workbench's environment.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _protocol  # noqa: E402

import warnings  # noqa: E402

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

torch.set_num_threads(int(sys.argv[1]))
torch.set_grad_enabled(False)
CONVS: dict = {}


def _time_once(fn, min_s=0.1) -> float:
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= min_s:
            return t / n
        n = max(n * 2, int(n * min_s / max(t, 1e-6)) + 1)


def setup(msg):
    info = {}
    for s in msg["convs"]:
        x = torch.rand(1, s["ci"], s["h"], s["w"])
        wt = torch.rand(s["co"], s["ci"] // s["groups"], s["k"], s["k"])
        best = None
        for fmt in ("nchw", "channels_last"):
            mf = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
            xx, ww = x.contiguous(memory_format=mf), wt.contiguous(memory_format=mf)

            def fn(xx=xx, ww=ww, s=s):
                return torch.nn.functional.conv2d(xx, ww, None, s["stride"], s["pad"], 1, s["groups"])

            fn()
            t = min(_time_once(fn) for _ in range(3))
            if best is None or t < best[0]:
                best = (t, fmt, fn)
        CONVS[s["name"]] = best[2]
        info[s["name"]] = best[1]
    return {
        "formats": info,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
    }


def time_(msg):
    repeats = int(msg.get("repeats", 5))
    min_s = int(msg.get("min_repeat_ms", 100)) / 1e3
    out = {}
    for name, fn in CONVS.items():
        fn()
        with _protocol.timing_meter(torch.get_num_threads()) as m:
            xs = [_time_once(fn, min_s) for _ in range(repeats)]
        out[name] = dict(samples=xs, **m.result)
    return out


if __name__ == "__main__":
    _protocol.serve({"setup": setup, "time": time_})
