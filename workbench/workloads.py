"""Workloads: specs as data, validated, turned into TVM PrimFuncs.

A spec is ``{"name": str, "op": str, "params": {...}, "epilogue": [...]}``;
network files add ``"weight"`` (how often the layer occurs). Every op knows its
parameters, which inputs are constant weights (marked layout-free so the layout
strategies can rewrite them), its FLOPs, and how results are verified: a NumPy
reference for the common ops, the naive (unscheduled) program built by TVM for
the rest.

A spec may add ``"dtype"`` (default ``"float32"``; the table of what each means is
in ``dtypes``): ``"int8"``, ``"bfloat16"``, ``"float8_e4m3fn"`` or ``"float8_e5m2"``,
for conv2d, depthwise_conv2d, matmul and batch_matmul (``LOW_PRECISION_OPS``). An
int8 workload may end in ``"requantize": "per-tensor" | "per-channel"``: the int32
result (after its epilogue) times a float32 scale argument ``rq_scale`` of shape
(1,) or (channels,), rounded half to even, saturated to [-128, 127], stored as
int8. Zero points are not modelled: the accumulator is the plain sum of
uint8 x int8 products (what VNNI computes); an engine folds the activation's
zero point into the bias.
"""

from __future__ import annotations

import functools
import glob
import json
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import dtypes
from .errors import WorkbenchError

SAMPLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_workloads")

EPILOGUES = ("bias", "bn", "relu", "add")
INT8_EPILOGUES = ("bias", "relu")  # on the int32 accumulator; bn and add would need float scales and a float output
REQUANTIZE = ("per-tensor", "per-channel")
# uint8 x int8 products are at most 255 * 128; with a bias of at most 2**14 this many fit in an int32 accumulator
MAX_INT8_REDUCTION = (2**31 - 1 - 2**14) // (255 * 128)
MAX_DIM = 2**31 - 1


# --------------------------------------------------------------------------------------------
# Op definitions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    kind: str = "size"  # size (>=1) | nonneg (>=0) | layout | bool | size_or_pair
    default: object = None
    required: bool = True


@dataclass(frozen=True)
class OpDef:
    name: str
    params: tuple
    doc: str
    reference: str  # "numpy" or "tvm-naive"
    epilogue_ok: bool
    check: Callable[[dict], None]
    build: Callable[[dict, dtypes.DType], tuple]  # (params, dtype) -> (inputs, weights, output, channel_axis)
    numpy_ref: Callable[[dict, list], np.ndarray] | None = None
    # Products summed per output element (the int8 overflow bound, the requantize scale); None: float32 only
    reduction: Callable[[dict], int] | None = None

    @property
    def dtypes(self) -> tuple:
        return tuple(dtypes.DTYPES) if self.reduction is not None else (dtypes.DEFAULT,)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _out_size(size, k, s, p, d=1):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _fail(msg):
    raise WorkbenchError(msg)


def _check_window(name, size, k, p, d=1, axis="height"):
    eff = d * (k - 1) + 1
    if eff > size + 2 * p:
        _fail(
            f"{name}: kernel {k} (dilated extent {eff}) is larger than the padded input {axis} "
            f"{size}+2*{p}={size + 2 * p}; use a kernel of at most {size + 2 * p}"
        )


# ---- conv2d ---------------------------------------------------------------------------------


def _conv2d_check(p):
    if p["layout"] not in ("NCHW", "NHWC"):
        _fail(f"conv2d: layout {p['layout']!r} is not supported; valid: NCHW, NHWC")
    kh, kw = _pair(p["kernel"])
    g = p["groups"]
    if p["in_channels"] % g or p["out_channels"] % g:
        _fail(f"conv2d: groups={g} must divide in_channels={p['in_channels']} and out_channels={p['out_channels']}")
    _check_window("conv2d", p["height"], kh, p["padding"], p["dilation"], "height")
    _check_window("conv2d", p["width"], kw, p["padding"], p["dilation"], "width")


def _placeholders(dt, x_shape, w_shape):
    from tvm import te

    return te.placeholder(x_shape, dt.activation, name="X"), te.placeholder(w_shape, dt.weight, name="W")


def _out_dtype(dt) -> dict:
    # float32 workloads keep TOPI's defaults, so their PrimFuncs (and stored traces) stay what they were
    return {} if dt.name == dtypes.DEFAULT else {"out_dtype": dt.accumulate}


def _conv2d_build(p, dt):
    from tvm import topi

    if dt.name in FP8_FORMATS:
        return _fp8_conv(p, dt, depthwise=False)
    n, ci, h, w, co = p["batch"], p["in_channels"], p["height"], p["width"], p["out_channels"]
    kh, kw = _pair(p["kernel"])
    s, pad, d, g = p["stride"], p["padding"], p["dilation"], p["groups"]
    od = _out_dtype(dt)
    if p["layout"] == "NCHW":
        x, wt = _placeholders(dt, (n, ci, h, w), (co, ci // g, kh, kw))
        if g == 1:
            y = topi.nn.conv2d_nchw(x, wt, s, pad, d, **od)
        else:
            y = topi.nn.group_conv2d_nchw(x, wt, s, pad, d, g, **od)
        return [x], [wt], y, 1
    x, wt = _placeholders(dt, (n, h, w, ci), (kh, kw, ci // g, co))
    if g == 1:
        y = topi.nn.conv2d_nhwc(x, wt, s, pad, d, **od)
    else:
        y = topi.nn.group_conv2d_nhwc(x, wt, s, pad, d, g, **od)
    return [x], [wt], y, 3


def _acc(a: np.ndarray) -> np.ndarray:
    """A reference's accumulator type: int64 for integer data (exact), float64 for the rest."""
    return a.astype(np.int64) if np.issubdtype(a.dtype, np.integer) else a.astype(np.float64)


def np_conv2d_nchw(x, w, stride, pad, dil, groups):
    """Grouped, dilated conv2d in NCHW/OIHW; accumulates in int64 for integer inputs, else in float64."""
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    xp = np.pad(_acc(x), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = _out_size(h, kh, stride, pad, dil), _out_size(wd, kw, stride, pad, dil)
    out = np.zeros((n, co, oh, ow), dtype=xp.dtype)
    cog = co // groups
    for gi in range(groups):
        xs = xp[:, gi * cig : (gi + 1) * cig]
        ws = _acc(w[gi * cog : (gi + 1) * cog])
        for i in range(kh):
            for j in range(kw):
                patch = xs[
                    :,
                    :,
                    i * dil : i * dil + stride * (oh - 1) + 1 : stride,
                    j * dil : j * dil + stride * (ow - 1) + 1 : stride,
                ]
                out[:, gi * cog : (gi + 1) * cog] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j], optimize=True)
    return out


def _conv2d_ref(p, args):
    x, w = args[0], args[1]
    kh, kw = _pair(p["kernel"])
    if p["layout"] == "NHWC":
        return np_conv2d_nchw(
            x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), p["stride"], p["padding"], p["dilation"], p["groups"]
        ).transpose(0, 2, 3, 1)
    return np_conv2d_nchw(x, w, p["stride"], p["padding"], p["dilation"], p["groups"])


# ---- depthwise ------------------------------------------------------------------------------


def _dw_check(p):
    if p["layout"] not in ("NCHW", "NHWC"):
        _fail(f"depthwise_conv2d: layout {p['layout']!r} is not supported; valid: NCHW, NHWC")
    k = p["kernel"]
    _check_window("depthwise_conv2d", p["height"], k, p["padding"], p["dilation"], "height")
    _check_window("depthwise_conv2d", p["width"], k, p["padding"], p["dilation"], "width")


def _dw_build(p, dt):
    from tvm import topi

    if dt.name in FP8_FORMATS:
        return _fp8_conv(p, dt, depthwise=True)
    n, c, h, w, k = p["batch"], p["channels"], p["height"], p["width"], p["kernel"]
    s, pad, d = p["stride"], p["padding"], p["dilation"]
    od = _out_dtype(dt)
    if p["layout"] == "NCHW":
        x, wt = _placeholders(dt, (n, c, h, w), (c, 1, k, k))
        return [x], [wt], topi.nn.depthwise_conv2d_nchw(x, wt, s, pad, d, **od), 1
    x, wt = _placeholders(dt, (n, h, w, c), (k, k, c, 1))
    return [x], [wt], topi.nn.depthwise_conv2d_nhwc(x, wt, s, pad, d, **od), 3


def _dw_ref(p, args):
    x, w = args[0], args[1]
    c = p["channels"]
    if p["layout"] == "NHWC":  # HWC1 -> C1HW
        return np_conv2d_nchw(
            x.transpose(0, 3, 1, 2), w.transpose(2, 3, 0, 1), p["stride"], p["padding"], p["dilation"], c
        ).transpose(0, 2, 3, 1)
    return np_conv2d_nchw(x, w, p["stride"], p["padding"], p["dilation"], c)


# ---- matmul family --------------------------------------------------------------------------


def _widened(dt, v):
    """A loaded element in the type products are summed in (float32 stays as it is)."""
    if dt.name == dtypes.DEFAULT:
        return v
    if dt.name in FP8_FORMATS:
        return _decode_fp8(v)
    return v.astype(dt.accumulate)


def _matmul_build(p, dt):
    from tvm import te

    a = te.placeholder((p["m"], p["k"]), dt.activation, name="A")
    b = te.placeholder((p["k"], p["n"]), dt.weight, name="B")
    k = te.reduce_axis((0, p["k"]), name="k")
    c = te.compute(
        (p["m"], p["n"]), lambda i, j: te.sum(_widened(dt, a[i, k]) * _widened(dt, b[k, j]), axis=k), name="C"
    )
    return [a], [b], c, 1


def _bmm_build(p, dt):
    from tvm import te

    a = te.placeholder((p["batch"], p["m"], p["k"]), dt.activation, name="A")
    b = te.placeholder((p["batch"], p["k"], p["n"]), dt.weight, name="B")
    k = te.reduce_axis((0, p["k"]), name="k")
    c = te.compute(
        (p["batch"], p["m"], p["n"]),
        lambda q, i, j: te.sum(_widened(dt, a[q, i, k]) * _widened(dt, b[q, k, j]), axis=k),
        name="C",
    )
    if p["constant_b"]:
        return [a], [b], c, 2
    return [a, b], [], c, 2


# TVM 0.27's own float8 -> float32 cast (FP8ComputeLegalize on llvm) decodes zero and every subnormal wrongly
# (E4M3FN 0x00 becomes 2**-7) and E5M2's inf/NaN as finite values; FP8 data is decoded here from its bits instead.
FP8_FORMATS = {"float8_e4m3fn": (4, 3), "float8_e5m2": (5, 2)}  # exponent bits, mantissa bits


def _decode_fp8(v):
    """The float32 value of a float8 element (exact: at most 4 significant bits times a power of two)."""
    from tvm import tirx

    ebits, mbits = FP8_FORMATS[str(v.dtype)]
    bias = (1 << (ebits - 1)) - 1
    bits = tirx.reinterpret("uint8", v).astype("int32")
    e = (bits >> mbits) & ((1 << ebits) - 1)
    m = bits & ((1 << mbits) - 1)
    significand = tirx.Select(e == 0, m, m + (1 << mbits)).astype("float32")  # subnormals have no implicit 1
    power = tirx.reinterpret("float32", (tirx.max(e, 1) - bias - mbits + 127) << 23)
    mag = significand * power
    nan = tirx.const(float("nan"), "float32")
    if ebits == 4:  # E4M3FN: no infinities; S.1111.111 is NaN
        mag = tirx.Select((bits & 0x7F) == 0x7F, nan, mag)
    else:  # E5M2: exponent 31 is inf (mantissa 0) or NaN, as in IEEE
        mag = tirx.Select(e == (1 << ebits) - 1, tirx.Select(m == 0, tirx.const(float("inf"), "float32"), nan), mag)
    return tirx.Select((bits & 0x80) != 0, -mag, mag)


def _fp8_conv(p, dt, depthwise: bool):
    """conv2d / depthwise_conv2d on float8 data, written out here rather than through TOPI, whose ops cast their
    inputs with TVM's faulty float8 cast (see ``_decode_fp8``). The padding stage decodes the activations
    (``pad_temp`` is float32); the conv block decodes the weight where it reads it, so that the weight is read by
    the anchor block itself, as the layout rewrites need. Same layouts as TOPI: NHWC/HWIO (depthwise HWC1),
    NCHW/OIHW (depthwise C1HW)."""
    from tvm import te, tirx

    nhwc = p["layout"] == "NHWC"
    n, h, w = p["batch"], p["height"], p["width"]
    if depthwise:
        ci = co = g = p["channels"]
        kh = kw = p["kernel"]
    else:
        ci, co, g = p["in_channels"], p["out_channels"], p["groups"]
        kh, kw = _pair(p["kernel"])
    s, pad, d = p["stride"], p["padding"], p["dilation"]
    cig, cog = ci // g, co // g
    oh, ow = _out_size(h, kh, s, pad, d), _out_size(w, kw, s, pad, d)
    if depthwise:
        w_shape = (kh, kw, ci, 1) if nhwc else (ci, 1, kh, kw)
    else:
        w_shape = (kh, kw, cig, co) if nhwc else (co, cig, kh, kw)
    x, wt = _placeholders(dt, (n, h, w, ci) if nhwc else (n, ci, h, w), w_shape)

    def at(t, b, c, i, j):  # element (batch, channel, row, column) of an activation-shaped tensor
        return t[b, i, j, c] if nhwc else t[b, c, i, j]

    if pad:

        def padded(*idx):
            b, i, j, c = idx if nhwc else (idx[0], idx[2], idx[3], idx[1])
            inside = tirx.all(i >= pad, i < h + pad, j >= pad, j < w + pad)
            return tirx.if_then_else(inside, _decode_fp8(at(x, b, c, i - pad, j - pad)), tirx.const(0.0, "float32"))

        ph, pw = h + 2 * pad, w + 2 * pad
        xp = te.compute((n, ph, pw, ci) if nhwc else (n, ci, ph, pw), padded, name="pad_temp")

        def act(b, c, i, j):
            return at(xp, b, c, i, j)
    else:

        def act(b, c, i, j):
            return _decode_fp8(at(x, b, c, i, j))

    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    if depthwise:

        def body(b, o, i, j):
            wv = wt[ry, rx, o, 0] if nhwc else wt[o, 0, ry, rx]
            return te.sum(act(b, o, i * s + ry * d, j * s + rx * d) * _decode_fp8(wv), axis=[ry, rx])

        name = "DepthwiseConv2d"
    else:
        rc = te.reduce_axis((0, cig), name="rc")

        def body(b, o, i, j):
            c = o // cog * cig + rc
            wv = wt[ry, rx, rc, o] if nhwc else wt[o, rc, ry, rx]
            return te.sum(act(b, c, i * s + ry * d, j * s + rx * d) * _decode_fp8(wv), axis=[rc, ry, rx])

        name = "conv2d_nhwc" if nhwc else "conv2d_nchw"
    if nhwc:
        y = te.compute((n, oh, ow, co), lambda b, i, j, o: body(b, o, i, j), name=name)
        return [x], [wt], y, 3
    return [x], [wt], te.compute((n, co, oh, ow), body, name=name), 1


def _tw(fn_name, *keys, weighted=False):
    """Build through the Ansor-suite generators shipped in TVM (``te_workload``); float32 only.

    With ``weighted`` the generator's second input is a constant weight.
    """

    def build(p, dt):
        from tvm.s_tir.meta_schedule.testing import te_workload as tw

        *ins, out = getattr(tw, fn_name)(*[p[k] for k in keys])
        weights = [ins.pop(1)] if weighted else []
        return ins, weights, out, len(out.shape) - 1

    return build


def _noop_check(p):
    pass


def _conv_nd_check(opname, dims):
    def check(p):
        for axis in dims:
            _check_window(opname, p[axis], p["kernel"], p["padding"], 1, axis)

    return check


def _t2d_check(p):
    if p["padding"] > p["kernel"] - 1:
        _fail(f"conv2d_transpose: padding {p['padding']} must be at most kernel-1 = {p['kernel'] - 1}")


S = Param
_CONV2D_PARAMS = (
    S("layout", "layout"),
    S("batch"),
    S("in_channels"),
    S("height"),
    S("width"),
    S("out_channels"),
    S("kernel", "size_or_pair"),
    S("stride", "size_or_pair"),
    S("padding", "nonneg"),
    S("dilation", default=1, required=False),
    S("groups", default=1, required=False),
)

OPS: dict[str, OpDef] = {}


def _op(o: OpDef):
    OPS[o.name] = o


_op(
    OpDef(
        "matmul",
        (S("m"), S("n"), S("k")),
        "C[m,n] = A[m,k] @ B[k,n]; B is the constant weight",
        "numpy",
        True,
        _noop_check,
        _matmul_build,
        lambda p, a: _acc(a[0]) @ _acc(a[1]),
        lambda p: p["k"],
    )
)
_op(
    OpDef(
        "batch_matmul",
        (S("batch"), S("m"), S("n"), S("k"), S("constant_b", "bool", False, False)),
        "C[b,m,n] = A[b,m,k] @ B[b,k,n]; B is a constant weight only with constant_b=true",
        "numpy",
        True,
        _noop_check,
        _bmm_build,
        lambda p, a: np.matmul(_acc(a[0]), _acc(a[1])),
        lambda p: p["k"],
    )
)
_op(
    OpDef(
        "conv2d",
        _CONV2D_PARAMS,
        "2-D convolution; NCHW uses OIHW weights, NHWC uses HWIO; dilation and groups optional",
        "numpy",
        True,
        _conv2d_check,
        _conv2d_build,
        _conv2d_ref,
        lambda p: p["in_channels"] // p["groups"] * _pair(p["kernel"])[0] * _pair(p["kernel"])[1],
    )
)
_op(
    OpDef(
        "depthwise_conv2d",
        (
            S("layout", "layout"),
            S("batch"),
            S("channels"),
            S("height"),
            S("width"),
            S("kernel"),
            S("stride"),
            S("padding", "nonneg"),
            S("dilation", default=1, required=False),
        ),
        "depthwise 2-D conv; NCHW weights C1HW, NHWC weights HWC1",
        "numpy",
        True,
        _dw_check,
        _dw_build,
        _dw_ref,
        lambda p: p["kernel"] * p["kernel"],
    )
)
_op(
    OpDef(
        "conv1d",
        (
            S("batch"),
            S("length"),
            S("in_channels"),
            S("out_channels"),
            S("kernel"),
            S("stride"),
            S("padding", "nonneg"),
        ),
        "1-D convolution, NLC input, (K, CI, CO) weight (Ansor C1D)",
        "tvm-naive",
        True,
        _conv_nd_check("conv1d", ["length"]),
        _tw(
            "conv1d_nlc", "batch", "length", "in_channels", "out_channels", "kernel", "stride", "padding", weighted=True
        ),
    )
)
_op(
    OpDef(
        "conv3d",
        (
            S("batch"),
            S("depth"),
            S("height"),
            S("width"),
            S("in_channels"),
            S("out_channels"),
            S("kernel"),
            S("stride"),
            S("padding", "nonneg"),
        ),
        "3-D convolution, NDHWC input, DHWIO weight (Ansor C3D)",
        "tvm-naive",
        True,
        _conv_nd_check("conv3d", ["depth", "height", "width"]),
        _tw(
            "conv3d_ndhwc",
            "batch",
            "depth",
            "height",
            "width",
            "in_channels",
            "out_channels",
            "kernel",
            "stride",
            "padding",
            weighted=True,
        ),
    )
)
_op(
    OpDef(
        "conv2d_transpose",
        (
            S("batch"),
            S("height"),
            S("width"),
            S("in_channels"),
            S("out_channels"),
            S("kernel"),
            S("stride"),
            S("padding", "nonneg"),
        ),
        "transposed 2-D convolution, NHWC (Ansor T2D, DCGAN)",
        "tvm-naive",
        True,
        _t2d_check,
        _tw(
            "conv2d_transpose_nhwc",
            "batch",
            "height",
            "width",
            "in_channels",
            "out_channels",
            "kernel",
            "stride",
            "padding",
            weighted=True,
        ),
    )
)
_op(
    OpDef(
        "conv2d_capsule",
        (
            S("batch"),
            S("height"),
            S("width"),
            S("in_channels"),
            S("out_channels"),
            S("kernel"),
            S("stride"),
            S("padding", "nonneg"),
            S("capsule_size", default=4, required=False),
        ),
        "capsule conv2d, input (N,H,W,cap,cap,CI) (Ansor CAP)",
        "tvm-naive",
        False,
        _conv_nd_check("conv2d_capsule", ["height", "width"]),
        _tw(
            "conv2d_capsule_nhwijc",
            "batch",
            "height",
            "width",
            "in_channels",
            "out_channels",
            "kernel",
            "stride",
            "padding",
            "capsule_size",
            weighted=True,
        ),
    )
)
_op(
    OpDef(
        "norm",
        (S("batch"), S("m"), S("n")),
        "out[b] = sqrt(sum_{m,n} a[b,m,n]^2) (Ansor NRM)",
        "numpy",
        False,
        _noop_check,
        _tw("norm_bmn", "batch", "m", "n"),
        lambda p, a: np.sqrt((a[0].astype(np.float64) ** 2).sum(axis=(1, 2))),
    )
)
_op(
    OpDef(
        "softmax",
        (S("m"), S("n")),
        "row softmax of an (m, n) matrix",
        "numpy",
        False,
        _noop_check,
        _tw("softmax_mn", "m", "n"),
        lambda p, a: (lambda e: e / e.sum(1, keepdims=True))(np.exp(a[0] - a[0].max(1, keepdims=True))),
    )
)
_op(
    OpDef(
        "transpose_batch_matmul",
        (S("batch"), S("seq"), S("heads"), S("dim")),
        "query/value (batch, seq, heads, dim) transposed, then batched matmul (Ansor TBG)",
        "tvm-naive",
        False,
        _noop_check,
        _tw("transpose_batch_matmul", "batch", "seq", "heads", "dim"),
    )
)


# --------------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------------


def _normalize_params(name: str, op: OpDef, params) -> dict:
    if not isinstance(params, dict):
        _fail(f"workload {name!r}: 'params' must be an object, got {type(params).__name__}")
    known = {p.name for p in op.params}
    unknown = sorted(set(params) - known)
    if unknown:
        _fail(
            f"workload {name!r}: unknown parameter {unknown[0]!r} for op {op.name}; valid: {', '.join(p.name for p in op.params)}"
        )
    out = {}
    for p in op.params:
        if p.name not in params:
            if p.required:
                _fail(
                    f"workload {name!r}: op {op.name} needs parameter {p.name!r}; required: "
                    f"{', '.join(q.name for q in op.params if q.required)}"
                )
            out[p.name] = p.default
            continue
        v = params[p.name]
        if p.kind == "layout":
            if not isinstance(v, str):
                _fail(f"workload {name!r}: parameter 'layout' must be a string such as \"NHWC\"")
        elif p.kind == "bool":
            if not isinstance(v, bool):
                _fail(f"workload {name!r}: parameter {p.name!r} must be true or false")
        else:
            vals = v if (p.kind == "size_or_pair" and isinstance(v, list)) else [v]
            if p.kind == "size_or_pair" and isinstance(v, list) and len(v) != 2:
                _fail(f"workload {name!r}: parameter {p.name!r} must be an integer or a pair [h, w]")
            for x in vals:
                if isinstance(x, bool) or not isinstance(x, int):
                    _fail(f"workload {name!r}: parameter {p.name!r} must be an integer, got {json.dumps(x)}")
                lo = 0 if p.kind == "nonneg" else 1
                if x < lo:
                    _fail(f"workload {name!r}: parameter {p.name!r}={x} must be >= {lo}")
                if x > MAX_DIM:  # TVM indexes buffers with int32 by default; beyond that it overflows or refuses
                    _fail(f"workload {name!r}: parameter {p.name!r}={x} is too large (at most {MAX_DIM})")
            if p.kind == "size_or_pair" and isinstance(v, list):
                v = v if v[0] != v[1] else v[0]
                if isinstance(v, list) and p.name == "stride":
                    _fail(f"workload {name!r}: stride must be the same along height and width")
        out[p.name] = v
    return out


@dataclass
class Workload:
    """One tensor program to tune, built from a spec."""

    name: str
    op: str
    params: dict
    epilogue: tuple = ()
    weight: int = 1
    source: str = ""  # file it came from
    dtype: str = dtypes.DEFAULT  # a key of dtypes.DTYPES
    requantize: str | None = None  # int8 only: "per-tensor" | "per-channel" (an int8 output), None: int32 output

    @property
    def opdef(self) -> OpDef:
        return OPS[self.op]

    @property
    def dtype_info(self) -> dtypes.DType:
        return dtypes.DTYPES[self.dtype]

    @property
    def mac_dtype(self) -> str:
        """The ``dtypes`` key of the workload's multiply-accumulate, which selects its tensor intrinsics
        (``intrinsics.plan``): its ``dtype``."""
        return self.dtype

    def spec(self) -> dict:
        # A float32 spec has no "dtype" key: stored sessions and class keys of float32 workloads stay as they were.
        d = {"name": self.name, "op": self.op}
        if self.dtype != dtypes.DEFAULT:
            d["dtype"] = self.dtype
        d["params"] = dict(self.params)
        if self.epilogue:
            d["epilogue"] = list(self.epilogue)
        if self.requantize:
            d["requantize"] = self.requantize
        if self.weight != 1:
            d["weight"] = self.weight
        return d

    @property
    def reference_kind(self) -> str:
        return self.opdef.reference

    @property
    def class_key(self) -> str:
        """Workloads with the same class share block names, so schedules can transfer between them."""
        p = self.params
        extra = f":{p['layout']}" if "layout" in p else ""
        if self.op == "conv2d" and p.get("groups", 1) != 1:
            extra += ":grouped"
        if self.dtype != dtypes.DEFAULT:
            extra += f":{self.dtype}"
        epi = self.epilogue + (("requantize",) if self.requantize else ())
        return f"{self.op}{extra}+{'+'.join(epi) or 'none'}"

    # ---- TVM objects (built lazily, cached) ----
    @functools.cached_property
    def _built(self):
        from tvm import te

        from . import tvm_env

        tvm_env.setup()
        dt = self.dtype_info
        ins, weights, out, caxis = self.opdef.build(self.params, dt)
        extra = []
        y = out
        c = int(out.shape[caxis])
        for e in self.epilogue:
            if e == "bias":
                b = te.placeholder((c,), dt.accumulate, name="bias")  # int8: int32, added to the accumulator
                extra.append(b)
                y = _channel_op(y, b, caxis, "add", "T_bias")
            elif e == "bn":
                sc = te.placeholder((c,), name="bn_scale")
                sh = te.placeholder((c,), name="bn_shift")
                extra += [sc, sh]
                y = _channel_op(_channel_op(y, sc, caxis, "mul", "T_bn_mul"), sh, caxis, "add", "T_bn_add")
            elif e == "relu":
                from tvm import topi

                y = topi.nn.relu(y)
            elif e == "add":
                r = te.placeholder(tuple(out.shape), name="residual")
                extra.append(r)
                y = te.compute(y.shape, lambda *i: y(*i) + r(*i), name="T_residual")
        if self.requantize:
            scale = te.placeholder((c if self.requantize == "per-channel" else 1,), "float32", name="rq_scale")
            extra.append(scale)
            y = _requantized(y, scale, caxis if self.requantize == "per-channel" else None)
        args = list(ins) + list(weights) + extra + [y]
        func = te.create_prim_func(args)
        if weights:
            func = func.with_attr("layout_free_buffers", [len(ins) + i for i in range(len(weights))])
        return func, len(ins), len(weights), caxis

    @property
    def prim_func(self):
        return self._built[0]

    @functools.cached_property
    def mod(self):
        import tvm

        return tvm.IRModule({"main": self.prim_func})

    @property
    def weight_indices(self) -> list[int]:
        _, n_in, n_w, _ = self._built
        return list(range(n_in, n_in + n_w))

    @functools.cached_property
    def arg_shapes(self) -> list[tuple]:
        from tvm.s_tir import meta_schedule as ms

        return [tuple(int(x) for x in a.shape) for a in ms.arg_info.ArgInfo.from_prim_func(self.prim_func)]

    @functools.cached_property
    def arg_dtypes(self) -> list[str]:
        """Every argument's TVM dtype, in order, the output last."""
        from tvm.s_tir import meta_schedule as ms

        return [str(a.dtype) for a in ms.arg_info.ArgInfo.from_prim_func(self.prim_func)]

    @property
    def arg_types(self) -> list[tuple]:
        """``(shape, dtype)`` of every argument, the output last: what a runner takes as ``shapes``."""
        return list(zip(self.arg_shapes, self.arg_dtypes))

    @functools.cached_property
    def flops(self) -> float:
        """Floating-point (for int8: integer) operations of one call: 2 per multiply-add plus the epilogue's.

        A low-precision workload counts what its float32 twin of the same shape counts: widening casts, FP8
        decoding and requantizing are not counted, so GFLOPS compare across dtypes."""
        from tvm.s_tir.analysis import estimate_tir_flops

        if self.dtype != dtypes.DEFAULT:
            return Workload(self.name, self.op, self.params, self.epilogue).flops
        return float(estimate_tir_flops(self.mod))

    @functools.cached_property
    def anchor_block(self) -> str:
        """Name of the block with a reduction: what the sketches tile."""
        from tvm.s_tir.schedule import Schedule

        sch = Schedule(self.mod)
        best = None
        for b in sch.get_child_blocks(sch.get_sblock("root")):
            blk = sch.get(b)
            if any(int(iv.iter_type) == 2 for iv in blk.iter_vars):  # CommReduce
                best = blk.name_hint
        return best or sch.get(sch.get_child_blocks(sch.get_sblock("root"))[-1]).name_hint

    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random inputs for every argument but the output, each of its argument's dtype
        (``dtypes.random_array``: float32 data is uniform in [-1, 1) as it always was); the requantize scale
        keeps the int8 output spread over its range."""
        rng = np.random.default_rng(seed)
        out = [dtypes.random_array(rng, s, d) for s, d in self.arg_types[:-1]]
        if self.requantize:
            out[-1] = self._requantize_scales(rng, out[-1].shape)
        return out

    def _requantize_scales(self, rng, shape) -> np.ndarray:
        # The accumulator of k products of uniform uint8 and int8 data has a standard deviation of about
        # sqrt(k * E[x^2] * E[w^2]) = 10891 sqrt(k); scaled to about 40, the int8 output has values across its
        # range, some saturated.
        k = self.opdef.reduction(self.params)
        return (rng.uniform(0.5, 1.5, size=shape) * 40.0 / (10891.0 * np.sqrt(k))).astype("float32")

    def numpy_reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The NumPy result, epilogue included. Only for ``reference_kind == "numpy"``.

        float32: computed in float64, returned as float32. bfloat16 / FP8: the same, from the inputs as the
        kernel reads them (already rounded to the dtype). int8: exact integer arithmetic (int64, then the int32
        the kernel holds; ``workload_from_spec`` refuses reductions that could overflow it), then the requantize
        step in float32 exactly as the kernel does it."""
        op = self.opdef
        n_main = self._built[1] + self._built[2]
        low = self.dtype != dtypes.DEFAULT
        args = [_acc(a) for a in inputs] if low else list(inputs)
        y = op.numpy_ref(self.params, args[:n_main])
        caxis = self._built[3]
        rest = args[n_main:]
        shape = [1] * y.ndim
        shape[caxis] = -1
        for e in self.epilogue:
            if e == "bias":
                y = y + rest.pop(0).reshape(shape)
            elif e == "bn":
                y = y * rest.pop(0).reshape(shape)
                y = y + rest.pop(0).reshape(shape)
            elif e == "relu":
                y = np.maximum(y, 0)
            elif e == "add":
                y = y + rest.pop(0)
        if self.dtype_info.is_float:
            return y.astype("float32")
        y = y.astype(np.int32)
        if self.requantize:
            s = inputs[-1].astype(np.float32)
            s = s.reshape(shape) if s.size > 1 else s[0]
            y = np.clip(np.rint(y.astype(np.float32) * s), -128, 127).astype(np.int8)
        return y

    def describe(self) -> str:
        p = self.params
        return (
            ", ".join(f"{k}={v}" for k, v in p.items())
            + (f"; epilogue {'+'.join(self.epilogue)}" if self.epilogue else "")
            + (f"; dtype {self.dtype}" if self.dtype != dtypes.DEFAULT else "")
            + (f"; requantize {self.requantize}" if self.requantize else "")
        )


def _requantized(y, scale, caxis):
    """int8 = saturate(round_half_even(float32(y) * scale)): the scale of channel ``i[caxis]``, or ``scale[0]``
    for the whole tensor when ``caxis`` is None."""
    from tvm import te, tirx

    def f(*i):
        v = tirx.nearbyint(y(*i).astype("float32") * scale[0 if caxis is None else i[caxis]])
        return tirx.max(tirx.min(v, tirx.const(127.0, "float32")), tirx.const(-128.0, "float32")).astype("int8")

    return te.compute(y.shape, f, name="T_requantize")


def _channel_op(y, vec, caxis, kind, name):
    from tvm import te

    if kind == "add":
        return te.compute(y.shape, lambda *i: y(*i) + vec[i[caxis]], name=name)
    return te.compute(y.shape, lambda *i: y(*i) * vec[i[caxis]], name=name)


def workload_from_spec(spec, source: str = "") -> Workload:
    """Validate one spec dict; raises WorkbenchError with a one-line message."""
    if not isinstance(spec, dict):
        _fail(f"a workload spec must be a JSON object, got {type(spec).__name__}")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        _fail("workload spec needs a non-empty string 'name'")
    unknown = sorted(set(spec) - {"name", "op", "params", "epilogue", "weight", "note", "dtype", "requantize"})
    if unknown:
        _fail(
            f"workload {name!r}: unknown key {unknown[0]!r}; valid keys: name, op, params, epilogue, weight, "
            "dtype, requantize"
        )
    op = spec.get("op")
    if op == "relax-task":  # a network store's task: its PrimFunc comes from the model, which a spec does not hold
        _fail(
            f"workload {name!r} is a task of a Relax model: it is rebuilt from the model, not from its spec; "
            "`workbench show` lists its best latency, `workbench model` compiles its best program into the model"
        )
    if not isinstance(op, str) or op not in OPS:
        _fail(f"workload {name!r}: unknown op {op!r}; valid ops: {', '.join(sorted(OPS))}")
    opdef = OPS[op]
    params = _normalize_params(name, opdef, spec.get("params", {}))
    try:
        opdef.check(params)
    except WorkbenchError as e:
        raise WorkbenchError(f"workload {name!r}: {e}") from None
    epi = spec.get("epilogue", [])
    if not isinstance(epi, list) or any(e not in EPILOGUES for e in epi):
        _fail(f"workload {name!r}: epilogue must be a list drawn from {', '.join(EPILOGUES)}; got {json.dumps(epi)}")
    if epi and not opdef.epilogue_ok:
        _fail(f"workload {name!r}: op {op} does not take an epilogue")
    weight = spec.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
        _fail(f"workload {name!r}: 'weight' (multiplicity) must be an integer >= 1")
    dtype, requantize = _check_dtype(name, opdef, params, epi, spec.get("dtype", dtypes.DEFAULT), spec)
    return Workload(
        name=name,
        op=op,
        params=params,
        epilogue=tuple(epi),
        weight=weight,
        source=source,
        dtype=dtype,
        requantize=requantize,
    )


LOW_PRECISION_OPS = tuple(n for n, o in OPS.items() if o.reduction is not None)


def _check_dtype(name, opdef, params, epi, dtype, spec) -> tuple:
    """(dtype, requantize) of a spec, or one line on what is wrong."""
    try:
        dt = dtypes.get(dtype)
    except WorkbenchError as e:
        raise WorkbenchError(f"workload {name!r}: {e}") from None
    if dt.name not in opdef.dtypes:
        _fail(
            f"workload {name!r}: op {opdef.name} supports dtype float32 only; {dt.name} is available for "
            f"{', '.join(LOW_PRECISION_OPS)}"
        )
    requantize = spec.get("requantize")
    if requantize is not None:
        if dt.name != "int8":
            _fail(f"workload {name!r}: 'requantize' applies to dtype int8 only (this workload is {dt.name})")
        if requantize not in REQUANTIZE:
            _fail(
                f"workload {name!r}: 'requantize' must be one of {', '.join(REQUANTIZE)}; got {json.dumps(requantize, default=str)}"
            )
    if dt.name == "int8":
        bad = [e for e in epi if e not in INT8_EPILOGUES]
        if bad:
            _fail(
                f"workload {name!r}: epilogue {bad[0]!r} is not available for int8 (int32 accumulator); "
                f"valid: {', '.join(INT8_EPILOGUES)}, then 'requantize' for an int8 output"
            )
        k = opdef.reduction(params)
        if k > MAX_INT8_REDUCTION:
            _fail(
                f"workload {name!r}: {k} uint8 x int8 products per output can overflow the int32 accumulator "
                f"(at most {MAX_INT8_REDUCTION})"
            )
    return dt.name, requantize


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


@dataclass
class Registry:
    workloads: dict = field(default_factory=dict)  # name -> Workload
    networks: dict = field(default_factory=dict)  # name -> list[Workload]
    suites: dict = field(default_factory=dict)  # suite name -> list[name]

    def get(self, name: str) -> Workload:
        if name in self.workloads:
            return self.workloads[name]
        close = [n for n in self.workloads if n.lower().startswith(name.lower()[:4])][:5]
        hint = f"; similar: {', '.join(close)}" if close else ""
        _fail(f"unknown workload {name!r}; run 'workbench workloads' to list them{hint}")

    def network(self, name: str) -> list[Workload]:
        if name in self.networks:
            return self.networks[name]
        _fail(f"unknown network {name!r}; valid: {', '.join(sorted(self.networks))}")


def load_spec_file(path: str) -> list[Workload]:
    """A user's ``--spec FILE.json``: one spec, a list, or ``{"workloads": [...]}``."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        _fail(f"spec file {path!r} does not exist")
    except json.JSONDecodeError as e:
        _fail(f"spec file {path!r} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}")
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"cannot read spec file {path!r}: {e}")
    if isinstance(data, dict) and "workloads" in data:
        data = data["workloads"]
    specs = data if isinstance(data, list) else [data]
    if not specs:
        _fail(f"spec file {path!r} lists no workloads")
    out = [workload_from_spec(s, source=path) for s in specs]
    names = [w.name for w in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        _fail(f"spec file {path!r}: workload name {sorted(dup)[0]!r} appears twice")
    return out


@functools.lru_cache(maxsize=None)
def registry(directory: str = SAMPLE_DIR) -> Registry:
    reg = Registry()
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            data = json.load(f)
        ws = [workload_from_spec(s, source=os.path.basename(path)) for s in data["workloads"]]
        for w in ws:
            if w.name in reg.workloads:
                raise RuntimeError(f"duplicate workload {w.name} in {path}")
            reg.workloads[w.name] = w
        if "network" in data:
            reg.networks[data["network"]] = ws
        reg.suites[data.get("network") or data.get("suite") or os.path.basename(path)] = [w.name for w in ws]
    return reg


def resolve(name_or_path: str) -> list[Workload]:
    """A workload name, a network name, or a spec file path."""
    reg = registry()
    if name_or_path in reg.networks:
        return reg.network(name_or_path)
    if name_or_path.endswith(".json") and os.path.exists(name_or_path):
        return load_spec_file(name_or_path)
    return [reg.get(name_or_path)]
