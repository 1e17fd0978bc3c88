"""Real model graphs: ResNet-18 and MobileNet-V2 in ``tvm.relax.frontend.nn``, tuned end to end.

Path (no downloads; random weights):

1. ``resnet18(...)`` (stem 7x7/2 + max-pool, four stages of two basic blocks,
   global average pool, linear) or ``mobilenet_v2(...)`` (stem 3x3/2, seventeen
   inverted residual blocks with depthwise 3x3 convs and ReLU6, a 1x1 conv to
   1280 channels, global average pool, linear); batch norm folded into the conv
   bias; the Relax module with the weights bound as constants, and the same
   arrays by name (``RelaxModel.weights``; ``save_weights`` writes them in the
   safetensors layout for a PyTorch copy of the network);
2. ``extract(...)``: the preparation of MetaSchedule's ``compile_relax``
   (library dispatch, LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps,
   FuseTIR), then ``ms.relax_integration.extract_tasks``: one task per unique
   fused PrimFunc, with how often the graph calls it as its weight; the
   function's parameters fed from bound weights are its layout-free weights;
3. the extracted PrimFuncs are tuned directly (``RelaxTask`` wraps one as a
   workload: its reference is its own unscheduled build; its weights are the
   layout-free parameters, so every layout strategy applies) in ONE
   ``NetworkSession``, under the gradient task scheduler;
4. ``database(...)``: the best verified record of every tuned task becomes a
   MetaSchedule database; ``build`` applies it while compiling the whole model
   (untuned functions keep TVM's default lowering) and folds the weight
   rewrites of ``pre-transformed`` / ``packed`` schedules into the constants,
   as TVM's ``cpu_weight_prepack`` pipeline does;
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
from dataclasses import dataclass, field

import numpy as np

from . import intrinsics, tvm_env
from .errors import WorkbenchError
from .workloads import Workload

# ---------------------------------------------------------------------------------------- the model


def _model_class():
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn.core import wrap_nested

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride, layout):
            self.conv1 = nn.Conv2D(cin, cout, 3, stride, 1, bias=True, data_layout=layout)
            self.conv2 = nn.Conv2D(cout, cout, 3, 1, 1, bias=True, data_layout=layout)
            down = stride != 1 or cin != cout
            self.down = nn.Conv2D(cin, cout, 1, stride, 0, bias=True, data_layout=layout) if down else None

        def forward(self, x):
            y = nn.op.relu(self.conv1(x))
            y = self.conv2(y)
            skip = self.down(x) if self.down is not None else x
            return nn.op.relu(nn.op.add(y, skip))

    class ResNet18(nn.Module):
        """``layout``: the activations' layout between the layers. The input arrives NCHW either way (as
        PyTorch's does; NHWC transposes it once) and the conv weights stay OIHW (PyTorch's names and shapes)."""

        def __init__(self, width=64, classes=1000, stages=4, layout="NCHW"):
            self.layout = layout
            self.stem = nn.Conv2D(3, width, 7, 2, 3, bias=True, data_layout=layout)
            blocks, cin = [], width
            for s in range(stages):
                cout = width * 2**s
                blocks += [BasicBlock(cin, cout, 1 if s == 0 else 2, layout), BasicBlock(cout, cout, 1, layout)]
                cin = cout
            self.blocks = nn.ModuleList(blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            if self.layout == "NHWC":
                x = wrap_nested(relax.op.permute_dims(x._expr, [0, 2, 3, 1]), "to_nhwc")
            y = nn.op.relu(self.stem(x))
            pool = relax.op.nn.max_pool2d(y._expr, pool_size=3, strides=2, padding=1, layout=self.layout)
            y = wrap_nested(pool, "maxpool")
            for b in self.blocks:
                y = b(y)
            spatial = [1, 2] if self.layout == "NHWC" else [2, 3]
            y = wrap_nested(relax.op.mean(y._expr, axis=spatial), "avgpool")
            return self.fc(y)

    return ResNet18


# MobileNet-V2's inverted-residual table (Sandler et al. 2018, torchvision): expansion t, channels c, repeats n,
# stride of the first repeat s.
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
    """torchvision's channel rounding for a width multiplier: nearest multiple of 8, never 10 % below ``v``."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mobilenet_v2_channels(width_mult: float = 1.0) -> dict:
    """The stem, every inverted-residual block (cin, cout, stride, expansion) and the last conv's channels."""
    stem = _divisible(32 * width_mult)
    blocks, cin = [], stem
    for t, c, n, s in MOBILENET_V2_BLOCKS:
        cout = _divisible(c * width_mult)
        for i in range(n):
            blocks.append((cin, cout, s if i == 0 else 1, t))
            cin = cout
    return {"stem": stem, "blocks": blocks, "last": _divisible(1280 * max(1.0, width_mult))}


def _mobilenet_class():
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn.core import wrap_nested

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expansion):
            hidden = cin * expansion
            self.expand = nn.Conv2D(cin, hidden, 1, bias=True) if expansion != 1 else None
            self.dw = nn.Conv2D(hidden, hidden, 3, stride, 1, groups=hidden, bias=True)
            self.project = nn.Conv2D(hidden, cout, 1, bias=True)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = nn.op.relu6(self.expand(x)) if self.expand is not None else x
            y = self.project(nn.op.relu6(self.dw(y)))
            return nn.op.add(y, x) if self.residual else y

    class MobileNetV2(nn.Module):
        def __init__(self, width_mult=1.0, classes=1000):
            ch = mobilenet_v2_channels(width_mult)
            self.stem = nn.Conv2D(3, ch["stem"], 3, 2, 1, bias=True)
            self.blocks = nn.ModuleList([InvertedResidual(*b) for b in ch["blocks"]])
            self.last = nn.Conv2D(ch["blocks"][-1][1], ch["last"], 1, bias=True)
            self.fc = nn.Linear(ch["last"], classes)

        def forward(self, x):
            y = nn.op.relu6(self.stem(x))
            for b in self.blocks:
                y = b(y)
            y = nn.op.relu6(self.last(y))
            y = wrap_nested(relax.op.mean(y._expr, axis=[2, 3]), "avgpool")
            return self.fc(y)

    return MobileNetV2


@dataclass
class RelaxModel:
    """A model with its weights bound as constants; ``weights`` holds the same arrays by parameter name (the names
    and shapes of a ``torch.nn`` module built from ``config`` the same way: OIHW convs, (out, in) linear)."""

    mod: object  # tvm.IRModule, weights bound as constants; entry function "forward"
    input_shape: tuple
    config: dict  # "arch" (+ "dtype": "int8") and the constructor's arguments: from_config(config) rebuilds it
    # name -> np.ndarray: float32 parameters; an int8 model's int8 weights, their scales and activation parameters
    weights: dict = field(default_factory=dict, repr=False)

    def example_input(self, seed: int = 7) -> np.ndarray:
        return np.random.default_rng(seed).uniform(-1, 1, size=self.input_shape).astype("float32")


def _positive_ints(arch: str, **values) -> None:
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise WorkbenchError(f"{arch}: {k} must be a positive integer, got {v!r}")


def _bind_random_weights(arch: str, module, shape: tuple, config: dict, seed: int, weights: dict | None) -> RelaxModel:
    """Export ``module``, draw its weights (or take ``weights``: the same names and shapes) and bind them."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend import nn

    mod, named = module.export_tvm(spec={"forward": {"x": nn.spec.Tensor(shape, "float32")}})
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, p in named:
        shp = tuple(int(s) for s in p.shape)
        if weights is not None:
            if name not in weights or tuple(weights[name].shape) != shp:
                got = None if name not in weights else tuple(weights[name].shape)
                raise WorkbenchError(f"{arch}: weight {name!r} must have shape {shp}, got {got}")
            arr = weights[name]
        elif len(shp) == 1:  # biases (folded batch norm)
            arr = rng.uniform(-0.1, 0.1, size=shp)
        else:  # He initialisation keeps activations O(1) through the stages
            fan_in = int(np.prod(shp[1:]))
            arr = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shp)
        arrays[name] = np.ascontiguousarray(arr, dtype="float32")
    if weights is not None and set(weights) != set(arrays):
        raise WorkbenchError(f"{arch}: unexpected weights {sorted(set(weights) - set(arrays))}")
    params = {k: tvm.runtime.tensor(v) for k, v in arrays.items()}
    mod = relax.transform.BindParams("forward", params)(mod)
    return RelaxModel(mod, shape, dict(arch=arch, **config, seed=seed), arrays)


# The activation layouts a float32 ResNet-18 can be built with: NCHW (PyTorch's, the default) or NHWC, where a
# conv's output channels are contiguous and its tuned kernels vectorize over them.
LAYOUTS = ("NCHW", "NHWC")


def _check_resnet18(batch, image, width, classes, stages) -> None:
    _positive_ints("resnet18", batch=batch, image=image, width=width, classes=classes)
    if stages not in (1, 2, 3, 4):
        raise WorkbenchError(f"resnet18: stages must be 1 to 4, got {stages!r}")
    if image < 4 * 2**stages:
        raise WorkbenchError(f"resnet18: image {image} is too small for {stages} stages (at least {4 * 2**stages})")


def resnet18(
    batch: int = 1,
    image: int = 224,
    width: int = 64,
    classes: int = 1000,
    stages: int = 4,
    seed: int = 0,
    weights: dict | None = None,
    layout: str = "NCHW",
) -> RelaxModel:
    """ResNet-18's structure; ``image``, ``width`` and ``stages`` shrink it for quick runs (224, 64, 4 = the real one).

    ``weights``: name -> array (e.g. another model's ``weights``) instead of random ones drawn from ``seed``.
    ``layout``: the activations' layout (``LAYOUTS``); the input, the weights and the output are the same for
    both, so both builds compute the same function of the same parameters."""
    _check_resnet18(batch, image, width, classes, stages)
    if layout not in LAYOUTS:
        raise WorkbenchError(f"resnet18: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    tvm_env.setup()
    module = _model_class()(width=width, classes=classes, stages=stages, layout=layout)
    config = {"batch": batch, "image": image, "width": width, "classes": classes, "stages": stages}
    if layout != "NCHW":  # a config without it is NCHW, as every model built before the option was
        config["layout"] = layout
    return _bind_random_weights("resnet18", module, (batch, 3, image, image), config, seed, weights)


def mobilenet_v2(
    batch: int = 1,
    image: int = 224,
    width_mult: float = 1.0,
    classes: int = 1000,
    seed: int = 0,
    weights: dict | None = None,
) -> RelaxModel:
    """MobileNet-V2 (inverted residual blocks, depthwise 3x3 as grouped convs, ReLU6, batch norm folded into the
    conv bias, global average pool, linear); ``image`` and ``width_mult`` shrink it (224, 1.0 = the real one)."""
    _positive_ints("mobilenet_v2", batch=batch, image=image, classes=classes)
    if isinstance(width_mult, bool) or not isinstance(width_mult, (int, float)) or not 0 < width_mult <= 4:
        raise WorkbenchError(f"mobilenet_v2: width_mult must be in (0, 4], got {width_mult!r}")
    if image < 32:
        raise WorkbenchError(f"mobilenet_v2: image {image} is too small (at least 32: five stride-2 stages)")
    tvm_env.setup()
    module = _mobilenet_class()(width_mult=float(width_mult), classes=classes)
    config = {"batch": batch, "image": image, "width_mult": float(width_mult), "classes": classes}
    return _bind_random_weights("mobilenet_v2", module, (batch, 3, image, image), config, seed, weights)


# ---------------------------------------------------------------------------------------- int8 ResNet-18

# Activations: uint8 per tensor, calibrated to [0, 127] (PyTorch's x86/fbgemm default, reduce_range: u8 x s8 pairs
# summed in 16 bits cannot saturate), clamped to [0, 255] like PyTorch's quint8; weights: int8 symmetric per
# output channel ([-127, 127]); the classifier (average pool + linear) stays float32.
ACT_QMAX = 127


def _resnet18_blocks(width: int, stages: int):
    """(prefix, cin, cout, stride, has_downsample) of every basic block, in order (the names of ``resnet18``)."""
    cin, i = width, 0
    for s in range(stages):
        cout = width * 2**s
        for stride in (1 if s == 0 else 2, 1):
            yield f"blocks.{i}.", cin, cout, stride, stride != 1 or cin != cout
            cin, i = cout, i + 1


def _conv_np(x, w, b, stride, pad):
    """float64 NCHW x OIHW convolution (groups 1) plus bias, by im2col and one matrix product per image."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.empty((n, o, oh, ow))
    wm = w.reshape(o, -1).astype(np.float64)
    for k in range(n):
        cols = np.stack(
            [
                xp[k, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
                for i in range(kh)
                for j in range(kw)
            ],
            axis=1,
        )
        out[k] = (wm @ cols.reshape(c * kh * kw, oh * ow)).reshape(o, oh, ow) + b[:, None, None]
    return out


def _maxpool_np(x):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    oh, ow = (x.shape[2] - 1) // 2 + 1, (x.shape[3] - 1) // 2 + 1
    return np.max([xp[:, :, i : i + 2 * oh : 2, j : j + 2 * ow : 2] for i in range(3) for j in range(3)], axis=0)


def _act_params(lo: float, hi: float) -> np.ndarray:
    """(scale, zero point) of a uint8 tensor whose calibration range is [lo, hi] (0 always representable)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max((hi - lo) / ACT_QMAX, 1e-8)
    return np.array([scale, float(min(ACT_QMAX, max(0, round(-lo / scale))))], dtype="float32")


def quantize_resnet18(model: RelaxModel, calibration: np.ndarray) -> dict:
    """The int8 parameters of a float32 ``resnet18``: per-channel int8 weights, float32 biases, and per-tensor
    activation (scale, zero point) from the float model's ranges on ``calibration`` (min/max)."""
    wt, cfg = model.weights, model.config
    q, relu = {}, lambda v: np.maximum(v, 0.0)  # noqa: E731

    def conv(name, x, stride, pad):
        return _conv_np(x, wt[name + ".weight"], wt[name + ".bias"].astype(np.float64), stride, pad)

    def act(name, v):
        q[name + ".act"] = _act_params(float(v.min()), float(v.max()))

    x = calibration.astype(np.float64)
    act("input", x)
    y = relu(conv("stem", x, 2, 3))
    act("stem", y)
    y = _maxpool_np(y)
    for p, _cin, _cout, stride, down in _resnet18_blocks(cfg["width"], cfg["stages"]):
        h = relu(conv(p + "conv1", y, stride, 1))
        act(p + "conv1", h)
        h = conv(p + "conv2", h, 1, 1)
        act(p + "conv2", h)
        skip = conv(p + "down", y, stride, 0) if down else y
        if down:
            act(p + "down", skip)
        y = relu(h + skip)
        act(p + "out", y)
    for name, w in wt.items():
        if name.endswith(".weight") and w.ndim == 4:
            layer = name[: -len(".weight")]
            scale = np.maximum(np.abs(w).reshape(w.shape[0], -1).max(axis=1) / 127.0, 1e-12).astype("float32")
            q[layer + ".weight_q"] = np.clip(np.round(w / scale[:, None, None, None]), -127, 127).astype("int8")
            q[layer + ".weight_scale"] = scale
            q[layer + ".bias"] = wt[layer + ".bias"]
    q["fc.weight"], q["fc.bias"] = wt["fc.weight"], wt["fc.bias"]
    return q


def _resnet18_int8_module(shape: tuple, cfg: dict, q: dict):
    """The quantized graph as Relax: u8 x s8 -> s32 convs, requantized (with ReLU) in their epilogue.

    The input arrives NCHW (as PyTorch's does); the quantized activations are NHWC and the conv weights HWIO,
    the layouts of the workbench's own int8 conv workloads: an output's reduction runs over input channels
    adjacent in memory, which is what AVX512-VNNI's ``vpdpbusd`` multiplies four at a time (over NCHW
    activations no conv maps onto it). The parameters keep PyTorch's layouts (OIHW); the graph transposes its
    constants."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))

    def const(v, dtype="float32"):
        return relax.const(np.asarray(v, dtype=dtype))

    def requantize(f, out: str, relu: bool):
        """float32 in the output's units (zero point included) -> uint8, clamped like PyTorch's quint8."""
        lo = float(q[out + ".act"][1]) if relu else 0.0
        r = bb.emit(relax.op.clip(relax.op.round(f), lo, 255.0))
        return bb.emit(relax.op.astype(r, "uint8"))

    def conv(y, layer: str, src: str, stride: int, pad: int, relu: bool):
        w = q[layer + ".weight_q"]
        s_in, zp_in = (float(v) for v in q[src + ".act"])
        s_out, zp_out = (float(v) for v in q[layer + ".act"])
        # vpdpbusd multiplies input channels four at a time: a conv with fewer (the stem's 3) gets zero-weight
        # channels up to the next multiple, so that it maps onto the instruction too; what the padded activations
        # hold is then multiplied by zero
        extra = -w.shape[1] % intrinsics.INTRINSICS[intrinsics.VNNI].reduce
        space_pad = pad if zp_in else 0  # pad with the zero point (the value 0.0), as PyTorch does
        if space_pad or extra:
            widths = [0, 0, space_pad, space_pad, space_pad, space_pad, 0, extra]
            y = bb.emit(relax.op.nn.pad(y, widths, pad_value=zp_in))
            pad -= space_pad
        wide = np.concatenate([w, np.zeros((w.shape[0], extra) + w.shape[2:], w.dtype)], axis=1)
        hwio = const(np.ascontiguousarray(wide.transpose(2, 3, 1, 0)), "int8")
        acc = bb.emit(
            relax.op.nn.conv2d(
                y, hwio, strides=stride, padding=pad, data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32"
            )
        )
        sw = q[layer + ".weight_scale"].astype(np.float64)
        mult = s_in * sw / s_out
        offset = (
            q[layer + ".bias"] - zp_in * w.reshape(w.shape[0], -1).astype(np.int64).sum(axis=1) * s_in * sw
        ) / s_out
        f = relax.op.multiply(relax.op.astype(acc, "float32"), const(mult.reshape(1, 1, 1, -1)))
        f = relax.op.add(f, const((offset + zp_out).reshape(1, 1, 1, -1)))
        return requantize(f, layer, relu), layer

    def dequantize(y, src: str):
        s, zp = (float(v) for v in q[src + ".act"])
        return relax.op.multiply(relax.op.subtract(relax.op.astype(y, "float32"), const(zp)), const(s))

    with bb.function("forward", [x]):
        with bb.dataflow():
            s_in, zp_in = (float(v) for v in q["input.act"])
            xq = requantize(relax.op.add(relax.op.divide(x, const(s_in)), const(zp_in)), "input", False)
            xq = bb.emit(relax.op.permute_dims(xq, [0, 2, 3, 1]))  # NCHW -> NHWC
            y, src = conv(xq, "stem", "input", 2, 3, True)
            y = bb.emit(relax.op.nn.max_pool2d(y, pool_size=3, strides=2, padding=1, layout="NHWC"))
            for p, _cin, _cout, stride, down in _resnet18_blocks(cfg["width"], cfg["stages"]):
                h, _ = conv(y, p + "conv1", src, stride, 1, True)
                h, _ = conv(h, p + "conv2", p + "conv1", 1, 1, False)
                skip, skip_src = conv(y, p + "down", src, stride, 0, False) if down else (y, src)
                s_out, zp_out = (float(v) for v in q[p + "out.act"])
                f = relax.op.add(dequantize(h, p + "conv2"), dequantize(skip, skip_src))
                y = requantize(relax.op.add(relax.op.divide(f, const(s_out)), const(zp_out)), p + "out", True)
                src = p + "out"
            pooled = bb.emit(relax.op.mean(dequantize(y, src), axis=[1, 2]))
            logits = relax.op.add(relax.op.matmul(pooled, const(q["fc.weight"].T)), const(q["fc.bias"]))
            out = bb.emit_output(bb.emit(logits))
        bb.emit_func_output(out)
    return bb.get()


def resnet18_int8(
    batch: int = 1,
    image: int = 224,
    width: int = 64,
    classes: int = 1000,
    stages: int = 4,
    seed: int = 0,
    calibration_seed: int = 11,
    weights: dict | None = None,
) -> RelaxModel:
    """``resnet18(...)`` with the same float32 weights, quantized (``quantize_resnet18``; the activations
    calibrated on one random input drawn from ``calibration_seed``, not the one ``example_input`` gives).
    ``weights``: the quantized parameters (another int8 model's ``weights``) instead."""
    _check_resnet18(batch, image, width, classes, stages)
    if weights is None:
        fp = resnet18(batch, image, width, classes, stages, seed)
        calib = np.random.default_rng(calibration_seed).uniform(-1, 1, size=fp.input_shape).astype("float32")
        weights = quantize_resnet18(fp, calib)
    config = {"batch": batch, "image": image, "width": width, "classes": classes, "stages": stages}
    shape = (batch, 3, image, image)
    tvm_env.setup()
    mod = _resnet18_int8_module(shape, config, weights)
    full = dict(arch="resnet18", dtype="int8", **config, seed=seed, calibration_seed=calibration_seed)
    return RelaxModel(mod, shape, full, weights)


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}
INT8_MODELS = {"resnet18": resnet18_int8}


def from_config(config: dict, weights: dict | None = None) -> RelaxModel:
    """The model a ``config`` describes (``RelaxModel.config``): the same weights, drawn again from its seed, or
    ``weights``."""
    kw = dict(config)
    arch, dtype = kw.pop("arch", None), kw.pop("dtype", "float32")
    table = INT8_MODELS if dtype == "int8" else MODELS
    if arch not in table or dtype not in ("float32", "int8"):
        raise WorkbenchError(f"unknown model {arch!r} ({dtype}); choose from {', '.join(MODELS)}")
    return table[arch](**kw, weights=weights)


# ---------------------------------------------------------------------------------------- weights on disk

# The safetensors layout (8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
# "__metadata__": {"config": JSON}, then the raw little-endian arrays), written and read here without the
# safetensors package; benchmarks/_torch_networks.py reads it with the standard library and torch.frombuffer,
# in an environment without numpy or TVM.
_ST_DTYPES = {"float32": "F32", "int8": "I8", "uint8": "U8", "int32": "I32"}


def save_tensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Write name -> array (float32, int8, uint8, int32) and string metadata to ``path`` (safetensors layout)."""
    import json
    import struct

    header, offset = {"__metadata__": dict(metadata or {})}, 0
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    for name, arr in arrays.items():
        header[name] = {
            "dtype": _ST_DTYPES[str(arr.dtype)],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for arr in arrays.values():
            f.write(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def load_tensors(path: str) -> tuple[dict, dict]:
    """(metadata, name -> array) from a file ``save_tensors`` wrote."""
    import json
    import struct

    names = {v: k for k, v in _ST_DTYPES.items()}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        dt = np.dtype(names[h["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(h["shape"]).astype(dt.newbyteorder("="))
    return meta, out


def save_weights(model: RelaxModel, path: str) -> None:
    """The model's weights, with its config in the metadata (``config``: JSON), in the safetensors layout."""
    import json

    save_tensors(path, model.weights, {"config": json.dumps(model.config)})


def load_weights(path: str) -> tuple[dict, dict]:
    """(config, weights) from a file ``save_weights`` wrote; ``from_config(*load_weights(p))`` is the same model."""
    import json

    meta, weights = load_tensors(path)
    if "config" not in meta:
        raise WorkbenchError(f"{path!r} holds no model config (not written by save_weights)")
    return json.loads(meta["config"]), weights


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


def _weight_params(fused) -> dict:
    """Fused function name -> the indices of its parameters fed from bound weights (Relax constants) at every
    call: the function's layout-free buffers. (TVM's ``AttachAttrLayoutFreeBuffers`` finds the same but renames
    every function it marks, which would change the tasks' names and database keys.)"""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    out: dict = {}
    for func in fused.functions.values():
        if not isinstance(func, relax.Function):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                v = binding.value
                if not (isinstance(v, relax.Call) and v.op.same_as(call_tir)):
                    continue
                name = v.args[0].name_hint
                const = {i for i, a in enumerate(v.args[1].fields) if isinstance(a, tvm.ir.Constant)}
                out[name] = out[name] & const if name in out else const
    return {k: sorted(v) for k, v in out.items()}


@dataclass
class RelaxTask(Workload):
    """An extracted fused PrimFunc as a workload; verified against its own unscheduled build."""

    task_mod: object = None  # tuned: the fused PrimFunc with its weights marked layout-free
    task_name: str = ""
    compile_mod: object = None  # the fused PrimFunc as the compiled model holds it: the database's key

    @functools.cached_property
    def _built(self):
        from tvm.s_tir import meta_schedule as ms

        func = self.task_mod["main"]
        return func, len(ms.arg_info.ArgInfo.from_prim_func(func)) - 1, 0, 1

    @functools.cached_property
    def mod(self):
        return self.task_mod

    @property
    def weight_indices(self) -> list[int]:
        """The parameters fed from the model's bound weights (``_weight_params``): a fused function may take them
        anywhere among its arguments (a residual input can follow the bias)."""
        attrs = self.prim_func.attrs
        return sorted(int(i) for i in attrs["layout_free_buffers"]) if attrs and "layout_free_buffers" in attrs else []

    @property
    def reference_kind(self) -> str:
        return "tvm-naive"

    @property
    def mac_dtype(self) -> str:
        """``"int8"`` for a task that multiplies uint8 activations by int8 weights into int32 (a quantized conv or
        matmul: VNNI's operands), whatever its output; else its ``dtype``. Verification keeps ``dtype``: the
        task's own unscheduled build is the reference, with the float tolerance."""
        types = self.arg_dtypes
        return "int8" if "uint8" in types and "int8" in types else self.dtype

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


PREFIXES = {"resnet18": "r18", "mobilenet_v2": "mnv2"}


def extract(model: RelaxModel, target="host", prefix: str | None = None) -> list[RelaxTask]:
    """The model's tuning tasks (unique fused PrimFuncs, weight = calls), largest weight x FLOPs first; their
    names are ``prefix.<fused function>`` (default: r18 / mnv2)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    prefix = prefix or PREFIXES.get(model.config.get("arch"), "relax")
    tvm_env.setup()
    tgt = tvm_env.make_target(tvm_env.parse_target(target))
    fused = _fuse(model.mod, tgt)
    weights = _weight_params(fused)
    tasks = ms.relax_integration.extract_tasks(fused, tgt)
    out = []
    for t in tasks:
        name = str(t.task_name)
        mod = t.dispatched[0] if len(t.dispatched) else t.mod
        tuned = mod
        if weights.get(name):
            tuned = tvm.IRModule({"main": mod["main"].with_attr("layout_free_buffers", weights[name])})
        w = RelaxTask(
            name=f"{prefix}.{name}",
            op="relax-task",
            params={"task": name},
            weight=int(t.weight),
            source="relax",
            task_mod=tuned,
            task_name=name,
            compile_mod=mod,
        )
        if len(w.arg_shapes) < 2:
            continue
        out.append(w)
    out.sort(key=lambda w: -w.weight * w.flops)
    return out


# ---------------------------------------------------------------------------------------- compile and run


def best_record_of_task(store, task, sessions: list[dict] | None = None) -> dict | None:
    """The best verified record of the sessions that tuned exactly ``task``: its name and its arguments' shapes
    (the spec's ``params``). A store can hold the same fused function's name at other shapes (a model built with
    another ``--image``, ``--width`` or ``--batch``), whose schedules do not fit this one. ``sessions``: the
    store's ``sessions()``, read once by a caller that asks for many tasks."""
    want = task.spec()["params"]
    rows = store.sessions() if sessions is None else sessions
    ids = [r["id"] for r in rows if r["workload"] == task.name and (r["spec"] or {}).get("params") == want]
    bests = [b for b in (store.best(task.name, session_id=i) for i in ids) if b is not None]
    return min(bests, key=lambda b: b["latency_ms"]) if bests else None


def database(store, tasks: list[RelaxTask], target="host", work_dir: str | None = None):
    """A MetaSchedule database with the best verified record of every tuned task (``best_record_of_task``; JSON
    when work_dir is given)."""
    from tvm.s_tir import meta_schedule as ms

    from . import space
    from .store import RecordStore

    store = store if isinstance(store, RecordStore) else RecordStore(store, readonly=True)
    tgt = tvm_env.make_target(tvm_env.parse_target(target))
    db = ms.database.JSONDatabase(work_dir=work_dir) if work_dir else ms.database.MemoryDatabase()
    used = []
    sessions = store.sessions()
    for w in tasks:
        b = best_record_of_task(store, w, sessions)
        if b is None:
            continue
        sch = space.schedule_from_trace_json(w, b["trace"])
        wl = db.commit_workload(w.compile_mod if w.compile_mod is not None else w.mod)
        args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, [float(x) for x in b["run_secs"]], tgt, args))
        used.append(w.name)
    return db, used


def applied(model: RelaxModel, db, target="host") -> list[str]:
    """Names of the fused functions the database schedules in this model (what ``build`` will apply)."""
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


def _apply_database(mod, target):
    """Under a database, a target and a PassContext: the model fused as its tasks were extracted, every tuned
    function scheduled from the database, and the weight layout rewrite of a tuned schedule (``pre-transformed``,
    ``packed``) split into a function of its own (``SplitLayoutRewritePreproc``) and evaluated on the bound
    weights (``FoldConstant``): the deployed model reads its weights already rewritten, as TVM's
    ``cpu_weight_prepack`` pipeline does."""
    from tvm import relax
    from tvm.relax.transform import MetaScheduleApplyDatabase

    mod = MetaScheduleApplyDatabase()(_fuse(mod, target))
    return relax.transform.FoldConstant()(relax.transform.SplitLayoutRewritePreproc()(mod))


def prepared(model: RelaxModel, db, target="host"):
    """The Relax module ``build`` lowers and compiles with ``db`` (before lowering): what a tuned build runs."""
    import tvm

    tgt = tvm_env.make_target(tvm_env.parse_target(target))
    with tgt, db, tvm.transform.PassContext(opt_level=3):
        return _apply_database(model.mod, tgt)


def build(model: RelaxModel, db=None, target="host"):
    """The whole model compiled: with a MetaSchedule database (tuned: ``_apply_database``, then TVM's CPU
    lowering; functions the database does not schedule keep TVM's default lowering) or by ``tvm.compile``
    (untuned)."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline as cpu  # the package does not export dataflow_lower_passes

    tgt = tvm_env.make_target(tvm_env.parse_target(target))
    if db is None:
        return tvm.compile(model.mod, target=tgt)

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(mod, _ctx):
        mod = _apply_database(mod, tgt)
        return tvm.transform.Sequential(cpu.dataflow_lower_passes(tgt) + cpu.finalize_passes(tgt))(mod)

    with tgt, db, tvm.transform.PassContext(opt_level=3):
        return relax.build(model.mod, target=tgt, relax_pipeline=pipeline)


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


# How far a tuned build's output may be from the untuned one's, x max(1, max |untuned output|). float32: sums in
# another order differ by ~1e-6 of the scale; a wrong kernel by O(1). int8: a schedule that fuses a requantize's
# multiply and add (one rounding instead of two) moves a product that lands next to a rounding tie by one step, and
# the step propagates: tuned and untuned ResNet-18 int8 differ by ~0.7 % of the scale, as PyTorch's own two int8
# engines (x86, fbgemm) do from each other on it (0.72 of 102.8).
COMPARE_TOLERANCE = {"float32": 1e-3, "int8": 1e-2}


def compare(
    model: RelaxModel, store, tasks: list[RelaxTask], target="host", seed: int = 7, work_dir: str | None = None
) -> dict:
    """Build untuned and tuned, run both on the same input, check they agree, report both latencies."""
    x = model.example_input(seed)
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
    tolerance = COMPARE_TOLERANCE[model.config.get("dtype", "float32")]
    return {
        "untuned_latency_ms": ms_untuned,
        "tuned_latency_ms": ms_tuned,
        "speedup": ms_untuned / ms_tuned,
        "max_abs_error": err,
        "matches": bool(err <= tolerance * scale),
        "tolerance": tolerance,
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
        name=f"relax-{model.config.get('arch', 'model')}",
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
