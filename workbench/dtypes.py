"""Element types of workloads: what a spec's ``"dtype"`` means, the data drawn for it, how exactly results must match.

==============  ==============================  ===========  =================================  ==================
dtype           activations x weights (stored)  computed in  output                             verified
==============  ==============================  ===========  =================================  ==================
float32         float32 x float32               float32      float32                            rtol 1e-3, atol 1e-3
bfloat16        bfloat16 x bfloat16             float32      float32                            rtol 1e-3, atol 1e-3
float8_e4m3fn   float8_e4m3fn x float8_e4m3fn   float32      float32                            rtol 1e-3, atol 1e-3
float8_e5m2     float8_e5m2 x float8_e5m2       float32      float32                            rtol 1e-3, atol 1e-3
int8            uint8 x int8                    int32        int32; int8 with ``"requantize"``  exact
==============  ==============================  ===========  =================================  ==================

A float check passes when ``|out - ref| <= rtol * |ref| + atol * max(1, max|ref|)`` element-wise, against a
reference computed in float64 from the very same (rounded) inputs. The low-precision float rows need no looser
tolerance than float32: their inputs are rounded to the dtype before the reference sees them, and the product of two
bfloat16 values (8 significant bits each) or two FP8 values is exact in float32 (24 bits), so what remains is the
float32 accumulation order, as for float32 itself. int8 results are integers: exact or wrong.

Epilogue arguments (bias, batch-norm scale and shift, residual) are float32 for the float dtypes; for int8 the
bias is int32 (added to the accumulator) and ``"requantize"`` adds a float32 scale argument (see workloads.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .errors import WorkbenchError

DEFAULT = "float32"


@dataclass(frozen=True)
class DType:
    name: str
    activation: str  # TVM dtype of the activation input(s)
    weight: str  # TVM dtype of the weights
    accumulate: str  # what products are converted to and summed in
    output: str  # the output's TVM dtype (int8 workloads with "requantize": int8)
    rtol: float  # verification: |out - ref| <= rtol * |ref| + atol * max(1, max|ref|); both 0: exact
    atol: float
    summary: str

    @property
    def exact(self) -> bool:
        return self.rtol == 0 and self.atol == 0

    @property
    def is_float(self) -> bool:
        return self.accumulate.startswith("float")


DTYPES: dict[str, DType] = {
    d.name: d
    for d in [
        DType("float32", "float32", "float32", "float32", "float32", 1e-3, 1e-3, "float32 in, float32 out"),
        DType(
            "bfloat16",
            "bfloat16",
            "bfloat16",
            "float32",
            "float32",
            1e-3,
            1e-3,
            "bfloat16 inputs and weights, products summed in float32, float32 out",
        ),
        DType(
            "float8_e4m3fn",
            "float8_e4m3fn",
            "float8_e4m3fn",
            "float32",
            "float32",
            1e-3,
            1e-3,
            "FP8 E4M3 storage of inputs and weights, computed in float32, float32 out",
        ),
        DType(
            "float8_e5m2",
            "float8_e5m2",
            "float8_e5m2",
            "float32",
            "float32",
            1e-3,
            1e-3,
            "FP8 E5M2 storage of inputs and weights, computed in float32, float32 out",
        ),
        DType(
            "int8",
            "uint8",
            "int8",
            "int32",
            "int32",
            0.0,
            0.0,
            "uint8 activations x int8 weights summed in int32; int32 out, or int8 after requantize",
        ),
    ]
}

# Integer data drawn for arguments (timing and verification): the whole range of the 8-bit types; int32
# arguments (biases) stay far from overflow when added to an accumulator.
INT_RANGES = {"uint8": (0, 256), "int8": (-128, 128), "int32": (-(2**14), 2**14)}


def get(name) -> DType:
    """The row of ``DTYPES`` for a spec's ``"dtype"``; ``WorkbenchError`` (one line) for anything else."""
    if isinstance(name, str) and name in DTYPES:
        return DTYPES[name]
    shown = repr(name) if isinstance(name, str) else json.dumps(name, default=str)
    raise WorkbenchError(f"unknown dtype {shown}; valid: {', '.join(DTYPES)}")


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype holding a TVM dtype: ml_dtypes' types for bfloat16 and FP8 (what TVM's tensors use)."""
    import ml_dtypes

    if hasattr(ml_dtypes, dtype) and dtype.startswith(("bfloat", "float4", "float6", "float8")):
        return np.dtype(getattr(ml_dtypes, dtype))
    return np.dtype(dtype)


def rate_unit(dtype: str | None) -> str:
    """The unit of a workload's throughput as shown: GOPS for integer arithmetic (int8), GFLOPS otherwise. The
    figure is the same either way (2 x multiply-adds per second; the API's ``gflops`` keys keep their name)."""
    return "GOPS" if isinstance(dtype, str) and get(dtype).exact else "GFLOPS"


def spec_rate_unit(spec) -> str:
    """``rate_unit`` of a stored workload spec (float32 specs carry no dtype; a network's list of specs counts in
    GFLOPS unless every layer is integer). A spec it cannot read (a crafted store's) counts in GFLOPS: a view
    shows it rather than failing on it."""
    try:
        if isinstance(spec, dict):
            return rate_unit(spec.get("dtype"))
        if isinstance(spec, list) and spec and all(rate_unit((s or {}).get("dtype")) == "GOPS" for s in spec):
            return "GOPS"
    except (WorkbenchError, AttributeError):
        pass
    return "GFLOPS"


def is_integer(dtype) -> bool:
    return np.issubdtype(numpy_dtype(str(dtype)) if isinstance(dtype, str) else np.dtype(dtype), np.integer)


def random_array(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Seeded data of one argument: integers over ``INT_RANGES``; floats uniform in [-1, 1), drawn in float32 and
    rounded to the dtype (so float32 data is what it always was)."""
    if is_integer(dtype):
        lo, hi = INT_RANGES.get(dtype, (0, 2))  # other integer arguments (a fused graph's indices): 0 and 1
        return rng.integers(lo, hi, size=tuple(shape)).astype(dtype)
    x = rng.uniform(-1, 1, size=tuple(shape)).astype("float32")
    return x if dtype == "float32" else x.astype(numpy_dtype(dtype))


def unwritten(shape, dtype: str) -> np.ndarray:
    """An output buffer marked as never written: NaN for floats, the type's minimum for integers (an
    element a kernel skips then differs from any reference that is not that very value)."""
    nd = numpy_dtype(dtype)
    fill = np.iinfo(nd).min if np.issubdtype(nd, np.integer) else np.nan
    return np.full(tuple(shape), fill, dtype=nd)


def for_result(dtype) -> DType:
    """The verification row for an output of this NumPy/TVM dtype when the workload's own dtype is not at hand:
    integer outputs come only from int8 workloads; every float row has the float32 tolerance."""
    return DTYPES["int8"] if is_integer(dtype) else DTYPES["float32"]
