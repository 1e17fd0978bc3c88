"""PyTorch's int8, bfloat16 and float32 conv2d / matmul, timed in torch's own environment (.venv-torch, no numpy, no
TVM): a :mod:`_protocol` worker for ``low_precision.py``.

    .venv-torch/bin/python benchmarks/_torch_low_precision.py THREADS

``setup`` takes ``engine`` (``"x86"`` or ``"onednn"``: ``torch.backends.quantized.engine``, set before any
quantized module is built, because the engine packs the weights when they are set; None for the float ops) and
``ops``, each a dict:

- ``kind`` ``"conv2d"`` (``ci, co, h, w, k, stride, pad``; NCHW semantics, N = 1, the input in channels_last) or
  ``"linear"`` (``m, n, k``: an m x k input, n x k weights, as ``nn.Linear`` holds them) or ``"mm"`` (``m, n, k``:
  ``torch.mm`` of an m x k input and k x n weights, as the workbench's matmul reads them; no bias);
- ``dtype`` ``"int8"`` (``torch.ao.nn.quantized.Conv2d`` / ``ConvReLU2d`` / ``Linear``: quint8 activations per
  tensor (7 of their 8 bits used on a CPU without VNNI, see ``ACTIVATION_LEVELS``), qint8 weights per output channel, a float bias, the output requantized to quint8 per tensor),
  ``"bfloat16"`` or ``"float32"`` (``torch.nn.functional.conv2d`` / ``linear``, ``torch.mm``);
- ``bias``, ``relu`` (booleans; an int8 conv with ReLU is the intrinsic ``ConvReLU2d``, a float one
  ``F.conv2d`` then ``torch.relu``).

Each op runs once on random data and is checked against float32 arithmetic on the same (already rounded or
quantized) inputs: an int8 output within one quantization step of the float result (the integer sum is exact;
what remains is the requantization's rounding), a bfloat16 output within 2^-7 of the float result's scale (its
own rounding to 8 significant bits, plus summation order). A failed check is reported, not hidden: the parent
prints the timing with it. ``time`` times every op in turn, ``repeats`` samples in a row (each the mean over
>= ``min_repeat_ms`` of calls) with a ``TimingMeter`` reading. The parent starts one such process per engine,
alone (the benchmark protocol, ``_quiet.py``).

    .venv-torch/bin/python benchmarks/_torch_low_precision.py THREADS --implementations SETUP_JSON

(with ``ONEDNN_VERBOSE=1``) sets up, then calls each op once after a marker line, so that the parent can read
which oneDNN implementation each op ran.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _protocol  # noqa: E402
from _vendor_torch import _time_once, torch  # noqa: E402  (sets torch's threads from argv[1])

import warnings  # noqa: E402

# torch 2.13 deprecates its quantized tensors (in favour of torchao); they are still its quantized CPU backend
warnings.filterwarnings("ignore", message="torch.quantize_per_tensor, torch.quantize_per_channel")

F = torch.nn.functional
OPS: dict = {}
# Without VNNI, x86 int8 kernels (fbgemm's and oneDNN's alike) multiply u8 x s8 with vpmaddubsw, whose sums of
# two products saturate at int16: activations over the full 8 bits overflow (outputs off by tens of quantization
# steps on an AVX2 CPU). PyTorch's default x86 qconfig (reduce_range=True) keeps activations to 7 bits for this;
# so does this worker where torch finds no VNNI. torch checks only AVX-512 VNNI, so an AVX-VNNI-only CPU is
# given 7 bits too: correct, just coarser.
_VNNI = bool(getattr(torch.cpu, "_is_vnni_supported", lambda: False)())
ACTIVATION_LEVELS = 255 if _VNNI else 127
ENGINES = ("x86", "onednn")
_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def _float_reference(op: dict, x, w, b):
    """float32 arithmetic on the op's (rounded or dequantized) inputs; x as the op reads it, w in nn's layout."""
    if op["kind"] == "conv2d":
        y = F.conv2d(x.float(), w.float(), None if b is None else b.float(), op["stride"], op["pad"])
    elif op["kind"] == "linear":
        y = F.linear(x.float(), w.float(), None if b is None else b.float())
    else:
        y = torch.mm(x.float(), w.float())
    return torch.relu(y) if op.get("relu") else y


def _inputs(op: dict, gen):
    """float32 (x, w in nn's layout, bias or None)."""
    if op["kind"] == "conv2d":
        x = torch.rand(1, op["ci"], op["h"], op["w"], generator=gen)
        w = torch.rand(op["co"], op["ci"], op["k"], op["k"], generator=gen) * 2 - 1
        n_out = op["co"]
    elif op["kind"] == "linear":
        x = torch.rand(op["m"], op["k"], generator=gen)
        w = torch.rand(op["n"], op["k"], generator=gen) * 2 - 1
        n_out = op["n"]
    else:
        x = torch.rand(op["m"], op["k"], generator=gen)
        w = torch.rand(op["k"], op["n"], generator=gen) * 2 - 1
        n_out = op["n"]
    b = torch.rand(n_out, generator=gen) - 0.5 if op.get("bias") else None
    return x, w, b


def _int8(op: dict, x, w, b):
    """(callable, check) of a quantized conv / linear: quint8 activations per tensor (zero point 0, as the
    workbench's uint8 data has none), qint8 weights per output channel (symmetric), the output requantized to
    quint8 per tensor with a scale that spans the float result's range."""
    from torch.ao.nn import intrinsic, quantized

    if op["kind"] == "mm":
        raise ValueError("int8 has no mm op here: use kind 'linear' (torch.ao.nn.quantized.Linear)")
    xs = float(x.max()) / ACTIVATION_LEVELS
    xq = torch.quantize_per_tensor(x, xs, 0, torch.quint8)
    wscale = w.abs().reshape(w.shape[0], -1).amax(dim=1).double() / 127
    wq = torch.quantize_per_channel(w, wscale, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
    ref = _float_reference(op, xq.dequantize(), wq.dequantize(), b)
    lo, hi = min(0.0, float(ref.min())), float(ref.max())
    out_scale = (hi - lo) / 255
    out_zp = int(round(-lo / out_scale))
    if op["kind"] == "conv2d":
        cls = intrinsic.quantized.ConvReLU2d if op.get("relu") else quantized.Conv2d
        m = cls(op["ci"], op["co"], op["k"], op["stride"], op["pad"], bias=b is not None)
        xq = xq.contiguous(memory_format=torch.channels_last)
    else:
        if op.get("relu"):
            raise ValueError("int8 linear with relu is not a workload here")
        m = quantized.Linear(op["k"], op["n"], bias_=b is not None)
    m.set_weight_bias(wq, b)
    m.scale, m.zero_point = out_scale, out_zp
    y = m(xq)
    steps = float((y.dequantize() - ref).abs().max()) / out_scale
    check = {
        "ok": steps <= 1.0 + 1e-3,
        "detail": f"max error {steps:.2f} output quantization steps (scale {out_scale:.3g}) vs float32 on the "
        "dequantized inputs",
        "output": f"{y.dtype} per tensor, {'channels_last' if op['kind'] == 'conv2d' else 'contiguous'}",
        "activations": "quint8, 8 bits" if _VNNI else "quint8 held to 7 bits (reduce_range: this CPU has no VNNI)",
    }
    return (lambda: m(xq)), check


def _float(op: dict, x, w, b):
    """(callable, check) of a bfloat16 / float32 op, the conv's input and weights in channels_last."""
    dt = _DTYPES[op["dtype"]]
    xx, ww = x.to(dt), w.to(dt)
    bb = None if b is None else b.to(dt)
    ref = _float_reference(op, xx, ww, bb)
    if op["kind"] == "conv2d":
        xx = xx.contiguous(memory_format=torch.channels_last)
        ww = ww.contiguous(memory_format=torch.channels_last)

        def fn():
            y = F.conv2d(xx, ww, bb, op["stride"], op["pad"])
            return torch.relu_(y) if op.get("relu") else y

    elif op["kind"] == "linear":

        def fn():
            y = F.linear(xx, ww, bb)
            return torch.relu_(y) if op.get("relu") else y

    else:
        if bb is not None or op.get("relu"):
            raise ValueError("kind 'mm' takes no bias or relu")

        def fn():
            return torch.mm(xx, ww)

    y = fn()
    scale = max(1.0, float(ref.abs().max()))
    err = float((y.float() - ref).abs().max())
    tol = (2.0**-7 if dt == torch.bfloat16 else 1e-4) * scale
    check = {"ok": err <= tol, "detail": f"max abs error {err:.3g} (scale {scale:.3g}, tolerance {tol:.3g})"}
    check["output"] = str(y.dtype)
    return fn, check


def setup(msg):
    engine = msg.get("engine")
    if engine is not None:
        if engine not in ENGINES or engine not in torch.backends.quantized.supported_engines:
            raise ValueError(
                f"quantized engine {engine!r} is not available; torch has {torch.backends.quantized.supported_engines}"
            )
        torch.backends.quantized.engine = engine
    gen = torch.Generator().manual_seed(0)
    info = {}
    OPS.clear()
    with torch.inference_mode():
        for op in msg["ops"]:
            x, w, b = _inputs(op, gen)
            if op["dtype"] == "int8":
                if engine is None:
                    raise ValueError("an int8 op needs an engine")
                fn, check = _int8(op, x, w, b)
            elif op["dtype"] in _DTYPES:
                fn, check = _float(op, x, w, b)
            else:
                raise ValueError(f"unknown dtype {op['dtype']!r}")
            OPS[op["key"]] = fn
            info[op["key"]] = check
    return {
        "ops": info,
        "engine": torch.backends.quantized.engine if engine else None,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
        "mkldnn_bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    }


def time_(msg):
    repeats = int(msg.get("repeats", 5))
    min_s = int(msg.get("min_repeat_ms", 100)) / 1e3
    out = {}
    with torch.inference_mode():
        for key, fn in OPS.items():
            fn()
            with _protocol.timing_meter(torch.get_num_threads()) as m:
                xs = [_time_once(fn, min_s) for _ in range(repeats)]
            out[key] = dict(samples=xs, **m.result)
    return out


def implementations(msg) -> None:
    """Each op called once after ``setup(msg)``, a marker line before it, for a run with ``ONEDNN_VERBOSE=1``:
    oneDNN prints the implementation of every primitive it executes (``brg_matmul:avx512_core_bf16``, ...) to
    stdout, which is why this is not a worker command. An op with no oneDNN line ran elsewhere (fbgemm)."""
    setup(msg)
    with torch.inference_mode():
        for key, fn in OPS.items():
            print(f"@@op {key}", flush=True)
            fn()
            sys.stdout.flush()
    print("@@end", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--implementations":
        import json

        implementations(json.loads(sys.argv[3]))
    else:
        _protocol.serve({"setup": setup, "time": time_})
