"""The workbench's Relax networks rebuilt in PyTorch with the same weights, run and timed in torch's own environment
(.venv-torch, no numpy, no TVM): a :mod:`_protocol` worker.

    .venv-torch/bin/python benchmarks/_torch_networks.py THREADS

``setup`` takes ``weights`` (a file ``workbench.relax_model.save_weights`` wrote: the safetensors layout, the
model's config in its metadata), ``input`` (the same layout, one tensor ``x``) and ``mode``:

- ``eager-channels_last``: the module in eager mode, module and input in channels_last memory format;
- ``jit-frozen``: ``torch.jit.trace``, ``torch.jit.freeze`` and ``torch.jit.optimize_for_inference`` (oneDNN
  weight prepacking, conv fusion), on a contiguous input;
- int8 (a ``resnet18_int8`` file): ``quantized-x86`` / ``quantized-fbgemm``, PyTorch's quantized backend with that
  engine, eager, built from the file's int8 weights, per-channel scales and activation parameters.

The network is built from the config with the parameter names of the Relax module (``stem``, ``blocks.N.conv1``,
..., ``fc``) and loaded with ``load_state_dict(strict=True)``: a name or shape that differs from the Relax model
fails the setup (the int8 network takes its quantized parameters by the same names). It returns the output on the input (for the correctness check against TVM) and the library
facts; ``time`` times ``repeats`` samples in a row (each the mean over >= ``min_repeat_ms`` of calls) with a
``TimingMeter`` reading. ``networks.py`` starts one such process per mode, alone (the benchmark protocol,
``_quiet.py``).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _protocol  # noqa: E402

import warnings  # noqa: E402

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
# torch 2.13 deprecates its quantized tensors (in favour of torchao); they are still its quantized CPU backend
warnings.filterwarnings("ignore", message="torch.quantize_per_tensor, torch.quantize_per_channel")
import torch  # noqa: E402
from torch import nn  # noqa: E402

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
torch.set_grad_enabled(False)
MODES = ("eager-channels_last", "jit-frozen")
INT8_MODES = ("quantized-x86", "quantized-fbgemm")  # eager, with torch.backends.quantized.engine = x86 / fbgemm
STATE: dict = {}

_DTYPES = {"F32": torch.float32, "I8": torch.int8, "U8": torch.uint8, "I32": torch.int32}


def read_safetensors(path: str) -> tuple[dict, dict]:
    """(metadata, {name: tensor}) of a safetensors-layout file, with the standard library and torch only."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        t = torch.frombuffer(data, dtype=_DTYPES[h["dtype"]], count=(b - a) // _DTYPES[h["dtype"]].itemsize, offset=a)
        out[name] = t.reshape(h["shape"]).clone()
    return meta, out


# ---------------------------------------------------------------- the networks (parameter names as in Relax)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=True)
        self.down = nn.Conv2d(cin, cout, 1, stride, 0, bias=True) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        skip = self.down(x) if self.down is not None else x
        return torch.relu(y + skip)


class ResNet18(nn.Module):
    def __init__(self, width=64, classes=1000, stages=4, **_):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 7, 2, 3, bias=True)
        blocks, cin = [], width
        for s in range(stages):
            cout = width * 2**s
            blocks += [BasicBlock(cin, cout, 1 if s == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.stem(x)), 3, 2, 1)
        for b in self.blocks:
            y = b(y)
        return self.fc(y.mean(dim=(2, 3)))


# workbench.relax_model.MOBILENET_V2_BLOCKS and its channel rounding (this environment cannot import the
# workbench); a difference shows as a strict load_state_dict failure.
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expansion):
        super().__init__()
        hidden = cin * expansion
        self.expand = nn.Conv2d(cin, hidden, 1, bias=True) if expansion != 1 else None
        self.dw = nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=True)
        self.project = nn.Conv2d(hidden, cout, 1, bias=True)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = torch.nn.functional.relu6(self.expand(x)) if self.expand is not None else x
        y = self.project(torch.nn.functional.relu6(self.dw(y)))
        return y + x if self.residual else y


class MobileNetV2(nn.Module):
    def __init__(self, width_mult=1.0, classes=1000, **_):
        super().__init__()
        stem = _divisible(32 * width_mult)
        blocks, cin = [], stem
        for t, c, n, s in MOBILENET_V2_BLOCKS:
            cout = _divisible(c * width_mult)
            for i in range(n):
                blocks.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        last = _divisible(1280 * max(1.0, width_mult))
        self.stem = nn.Conv2d(3, stem, 3, 2, 1, bias=True)
        self.blocks = nn.ModuleList(blocks)
        self.last = nn.Conv2d(cin, last, 1, bias=True)
        self.fc = nn.Linear(last, classes)

    def forward(self, x):
        y = torch.nn.functional.relu6(self.stem(x))
        for b in self.blocks:
            y = b(y)
        y = torch.nn.functional.relu6(self.last(y))
        return self.fc(y.mean(dim=(2, 3)))


NETWORKS = {"resnet18": ResNet18, "mobilenet_v2": MobileNetV2}


# ---------------------------------------------------------------- int8 ResNet-18 on PyTorch's quantized backend


def _act(t) -> tuple[float, int]:
    return float(t[0]), int(t[1])


def _qconv(q: dict, name: str, stride: int, relu: bool):
    """A quantized conv with the Relax model's int8 weights, per-channel scales, float bias and output qparams."""
    from torch.ao.nn import intrinsic, quantized

    w = q[name + ".weight_q"]
    cout, cin, k, _ = w.shape
    conv = (intrinsic.quantized.ConvReLU2d if relu else quantized.Conv2d)(cin, cout, k, stride, k // 2, bias=True)
    qw = torch._make_per_channel_quantized_tensor(
        w, q[name + ".weight_scale"].double(), torch.zeros(cout, dtype=torch.long), 0
    )
    conv.set_weight_bias(qw, q[name + ".bias"])
    conv.scale, conv.zero_point = _act(q[name + ".act"])
    return conv


class QBasicBlock(nn.Module):
    def __init__(self, q, prefix, stride):
        super().__init__()
        self.conv1 = _qconv(q, prefix + "conv1", stride, True)
        self.conv2 = _qconv(q, prefix + "conv2", 1, False)
        self.down = _qconv(q, prefix + "down", stride, False) if prefix + "down.weight_q" in q else None
        self.scale, self.zero_point = _act(q[prefix + "out.act"])

    def forward(self, x):
        y = self.conv2(self.conv1(x))
        skip = self.down(x) if self.down is not None else x
        return torch.ops.quantized.add_relu(y, skip, self.scale, self.zero_point)


class QResNet18(nn.Module):
    """``workbench.relax_model.resnet18_int8``: activations quint8 per tensor, weights qint8 per channel, the same
    parameters; average pool and the linear classifier in float32."""

    def __init__(self, q: dict, width=64, stages=4, **_):
        super().__init__()
        self.scale, self.zero_point = _act(q["input.act"])
        self.stem = _qconv(q, "stem", 2, True)
        blocks, i = [], 0
        for s in range(stages):
            for stride in (1 if s == 0 else 2, 1):
                blocks.append(QBasicBlock(q, f"blocks.{i}.", stride))
                i += 1
        self.blocks = nn.ModuleList(blocks)
        self.fc_weight, self.fc_bias = q["fc.weight"], q["fc.bias"]

    def forward(self, x):
        y = torch.quantize_per_tensor(x, self.scale, self.zero_point, torch.quint8)
        y = torch.nn.functional.max_pool2d(self.stem(y), 3, 2, 1)
        for b in self.blocks:
            y = b(y)
        return torch.nn.functional.linear(y.dequantize().mean(dim=(2, 3)), self.fc_weight, self.fc_bias)


def build(weights_path: str) -> tuple[nn.Module, dict]:
    meta, weights = read_safetensors(weights_path)
    config = json.loads(meta["config"])
    if config.get("dtype") == "int8":
        return QResNet18(weights, **config).eval(), config
    model = NETWORKS[config["arch"]](**config)
    model.load_state_dict(weights, strict=True)
    return model.eval(), config


def prepare(model: nn.Module, x: torch.Tensor, mode: str):
    """(callable, input) for one of MODES."""
    if mode == "eager-channels_last":
        m = model.to(memory_format=torch.channels_last)
        xx = x.contiguous(memory_format=torch.channels_last)
        return m, xx
    if mode == "jit-frozen":
        traced = torch.jit.trace(model, x)
        return torch.jit.optimize_for_inference(torch.jit.freeze(traced)), x.contiguous()
    if mode in INT8_MODES:  # the engine packs the weights: set it before the modules are built (see setup)
        return model, x.contiguous()
    raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


def _time_once(fn, min_s=0.1) -> float:
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= min_s:
            return t / n
        n = max(n * 2, int(n * min_s / max(t, 1e-6)) + 1)


def setup(msg):
    if msg["mode"] in INT8_MODES:
        torch.backends.quantized.engine = msg["mode"].split("-", 1)[1]
    model, config = build(msg["weights"])
    _, inputs = read_safetensors(msg["input"])
    fn, x = prepare(model, inputs["x"], msg["mode"])
    with torch.inference_mode():
        for _ in range(3):  # warm-up: oneDNN primitives, the JIT's profiling runs
            out = fn(x)
    STATE["call"] = lambda: fn(x)
    return {
        "output": [float(v) for v in out.float().reshape(-1).tolist()],
        "output_shape": list(out.shape),
        "mode": msg["mode"],
        "config": config,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
    }


def time_(msg):
    repeats = int(msg.get("repeats", 10))
    min_s = int(msg.get("min_repeat_ms", 100)) / 1e3
    call = STATE["call"]
    with torch.inference_mode():
        call()
        with _protocol.timing_meter(torch.get_num_threads()) as m:
            xs = [_time_once(call, min_s) for _ in range(repeats)]
    return dict(samples=xs, **m.result)


if __name__ == "__main__":
    _protocol.serve({"setup": setup, "time": time_})
