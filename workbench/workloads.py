"""Workloads: specs as data, validated, turned into TVM PrimFuncs.

A spec is ``{"name": str, "op": str, "params": {...}, "epilogue": [...]}``;
network files add ``"weight"`` (how often the layer occurs). Every op knows its
parameters, which inputs are constant weights (marked layout-free so the layout
strategies can rewrite them), its FLOPs, and how results are verified: a NumPy
reference for the common ops, the naive (unscheduled) program built by TVM for
the rest.
"""

from __future__ import annotations

import functools
import glob
import json
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .errors import WorkbenchError

SAMPLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_workloads")

EPILOGUES = ("bias", "bn", "relu", "add")
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
    build: Callable[[dict], tuple]  # -> (inputs, weights, output, channel_axis)
    numpy_ref: Callable[[dict, list], np.ndarray] | None = None


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


def _conv2d_build(p):
    from tvm import te, topi

    n, ci, h, w, co = p["batch"], p["in_channels"], p["height"], p["width"], p["out_channels"]
    kh, kw = _pair(p["kernel"])
    s, pad, d, g = p["stride"], p["padding"], p["dilation"], p["groups"]
    if p["layout"] == "NCHW":
        x = te.placeholder((n, ci, h, w), name="X")
        wt = te.placeholder((co, ci // g, kh, kw), name="W")
        if g == 1:
            y = topi.nn.conv2d_nchw(x, wt, s, pad, d)
        else:
            y = topi.nn.group_conv2d_nchw(x, wt, s, pad, d, g)
        return [x], [wt], y, 1
    x = te.placeholder((n, h, w, ci), name="X")
    wt = te.placeholder((kh, kw, ci // g, co), name="W")
    if g == 1:
        y = topi.nn.conv2d_nhwc(x, wt, s, pad, d)
    else:
        y = topi.nn.group_conv2d_nhwc(x, wt, s, pad, d, g)
    return [x], [wt], y, 3


def np_conv2d_nchw(x, w, stride, pad, dil, groups):
    """Grouped, dilated conv2d in NCHW/OIHW; accumulates in float64."""
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = _out_size(h, kh, stride, pad, dil), _out_size(wd, kw, stride, pad, dil)
    out = np.zeros((n, co, oh, ow))
    cog = co // groups
    for gi in range(groups):
        xs = xp[:, gi * cig : (gi + 1) * cig]
        ws = w[gi * cog : (gi + 1) * cog].astype(np.float64)
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


def _dw_build(p):
    from tvm import te, topi

    n, c, h, w, k = p["batch"], p["channels"], p["height"], p["width"], p["kernel"]
    s, pad, d = p["stride"], p["padding"], p["dilation"]
    if p["layout"] == "NCHW":
        x = te.placeholder((n, c, h, w), name="X")
        wt = te.placeholder((c, 1, k, k), name="W")
        return [x], [wt], topi.nn.depthwise_conv2d_nchw(x, wt, s, pad, d), 1
    x = te.placeholder((n, h, w, c), name="X")
    wt = te.placeholder((k, k, c, 1), name="W")
    return [x], [wt], topi.nn.depthwise_conv2d_nhwc(x, wt, s, pad, d), 3


def _dw_ref(p, args):
    x, w = args[0], args[1]
    c = p["channels"]
    if p["layout"] == "NHWC":  # HWC1 -> C1HW
        return np_conv2d_nchw(
            x.transpose(0, 3, 1, 2), w.transpose(2, 3, 0, 1), p["stride"], p["padding"], p["dilation"], c
        ).transpose(0, 2, 3, 1)
    return np_conv2d_nchw(x, w, p["stride"], p["padding"], p["dilation"], c)


# ---- matmul family --------------------------------------------------------------------------


def _matmul_build(p):
    from tvm import te

    a = te.placeholder((p["m"], p["k"]), name="A")
    b = te.placeholder((p["k"], p["n"]), name="B")
    k = te.reduce_axis((0, p["k"]), name="k")
    c = te.compute((p["m"], p["n"]), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return [a], [b], c, 1


def _bmm_build(p):
    from tvm import te

    a = te.placeholder((p["batch"], p["m"], p["k"]), name="A")
    b = te.placeholder((p["batch"], p["k"], p["n"]), name="B")
    k = te.reduce_axis((0, p["k"]), name="k")
    c = te.compute((p["batch"], p["m"], p["n"]), lambda q, i, j: te.sum(a[q, i, k] * b[q, k, j], axis=k), name="C")
    if p["constant_b"]:
        return [a], [b], c, 2
    return [a, b], [], c, 2


def _tw(fn_name, *keys, weighted=False):
    """Build through the Ansor-suite generators shipped in TVM (``te_workload``).

    With ``weighted`` the generator's second input is a constant weight.
    """

    def build(p):
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
        lambda p, a: a[0].astype(np.float64) @ a[1],
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
        lambda p, a: np.matmul(a[0].astype(np.float64), a[1]),
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

    @property
    def opdef(self) -> OpDef:
        return OPS[self.op]

    def spec(self) -> dict:
        d = {"name": self.name, "op": self.op, "params": dict(self.params)}
        if self.epilogue:
            d["epilogue"] = list(self.epilogue)
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
        return f"{self.op}{extra}+{'+'.join(self.epilogue) or 'none'}"

    # ---- TVM objects (built lazily, cached) ----
    @functools.cached_property
    def _built(self):
        from tvm import te

        from . import tvm_env

        tvm_env.setup()
        ins, weights, out, caxis = self.opdef.build(self.params)
        extra = []
        y = out
        for e in self.epilogue:
            c = int(out.shape[caxis])
            if e == "bias":
                b = te.placeholder((c,), name="bias")
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
    def flops(self) -> float:
        from tvm.s_tir.analysis import estimate_tir_flops

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
        """Random inputs for every argument but the output."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1, 1, size=s).astype("float32") for s in self.arg_shapes[:-1]]

    def numpy_reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The NumPy result, epilogue included. Only for ``reference_kind == "numpy"``."""
        op = self.opdef
        n_main = self._built[1] + self._built[2]
        y = op.numpy_ref(self.params, inputs[:n_main])
        caxis = self._built[3]
        rest = list(inputs[n_main:])
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
        return y.astype("float32")

    def describe(self) -> str:
        p = self.params
        return ", ".join(f"{k}={v}" for k, v in p.items()) + (
            f"; epilogue {'+'.join(self.epilogue)}" if self.epilogue else ""
        )


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
    unknown = sorted(set(spec) - {"name", "op", "params", "epilogue", "weight", "note"})
    if unknown:
        _fail(f"workload {name!r}: unknown key {unknown[0]!r}; valid keys: name, op, params, epilogue, weight")
    op = spec.get("op")
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
    return Workload(name=name, op=op, params=params, epilogue=tuple(epi), weight=weight, source=source)


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
