"""The decision space of a session: every measured program's sampled decisions side by side, and which of them
mattered for measured speed.

Data (pure: no TVM, no widget; tested without a browser):

``decision_table(records, traces)``
    one row per successfully measured record, one numeric column per decision: the tile factors of every tiled
    loop and level (log2), the categorical choices (unroll step: the index of the chosen candidate), the compute
    locations (TVM's numbers: -2 inline, -1 root, k = the k-th possible loop), the parallel and vectorized extent
    of the tiled computation (log2; derived by the postprocessor from the tile factors, not sampled), the layout
    strategy and the sketch (codes). Each column carries its axis ticks (the real factor, the candidate, ...).

    A record's decisions are named from its trace (TVM's JSON form, decoded here as plain JSON: which block and
    loop a tile decision splits, which annotation a categorical choice feeds). Records of different sketches share
    a column when they decide the same thing (the same loop's tile, the unroll step) and have NaN in the columns
    of decisions their sketch does not make; the ``sketch`` column tells the sketches apart. Without a trace, the
    stored ``decisions`` list is used and decisions are named by position (``tile0.1``: the first tiled loop's
    second level).

``measured_importance(table)``
    how much each decision moved *measured* log-throughput: a small XGBoost regressor on the table, and each
    decision's mean |SHAP| contribution (``Booster.predict(pred_contribs=True)``).

``cost_model_importance(gain)``
    the session cost model's own gain per feature, with TVM's per-store feature names.

``DecisionSpaceView`` draws the table as parallel coordinates coloured by GFLOPS. Brushing an axis filters the
records table and rings the brushed programs on the throughput curves; selecting points on the curves (box or
lasso) or typing trial numbers highlights those programs here.
"""

from __future__ import annotations

import html
import json
import math
import threading
from dataclasses import dataclass, field
from functools import lru_cache

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import KNOWN
from .live_figure import LiveFigure
from .model import CONTROLLER, RECORDS, SESSION

# Kinds of decision column.
TILE, CATEGORICAL, LOCATION, EXTENT = "tile", "categorical", "location", "extent"
STRATEGY, SKETCH = "strategy", "sketch"
META_COLUMNS = ["id", "trial", "round", "gflops"]
MIN_RECORDS = 16  # fewer measured programs than this give no usable importance
IMPORTANCE_EVERY = 8  # while tuning, refit the importance model after this many new programs (a fit is ~0.1 s)
NA_TEXT = "n/a"  # the axis tick of a decision the record's sketch does not make

# What a SampleCategorical feeds, by the annotation key it is written to.
CATEGORICAL_NAMES = {
    "meta_schedule.unroll_explicit": "unroll",
    "meta_schedule.unroll_implicit": "unroll (implicit)",
}
# Schedule instructions that only look things up, sample or tile: they do not tell sketches apart.
_PLAIN = {
    "GetSBlock",
    "GetLoops",
    "GetChildBlocks",
    "GetConsumers",
    "GetProducers",
    "SamplePerfectTile",
    "SampleCategorical",
    "SampleComputeLocation",
    "Split",
    "Reorder",
    "Annotate",
    "Unannotate",
    "ComputeAt",  # at a sampled location: the location is a decision of its own
}


def _esc(v) -> str:
    return html.escape(str(v))


# ---------------------------------------------------------------- reading a stored trace (TVM JSON, as plain data)
def decode_tvm_json(text: str):
    """TVM's ``save_json`` object graph as Python lists, strings and numbers (never executed, only read)."""
    graph = json.loads(text)
    nodes = graph["nodes"]
    memo: dict[int, object] = {}

    def value(i: int):
        if i in memo:
            return memo[i]
        node = nodes[i]
        kind, data = node.get("type"), node.get("data")
        if kind == "ffi.Array":
            out = [value(j) for j in data]
        elif kind in ("ir.IntImm", "ir.FloatImm"):
            v = data["value"]
            out = v if isinstance(v, float) else value(v)
        elif kind == "None":
            out = None
        else:  # ffi.String, int, bool, float: the value itself; other objects: their data as stored
            out = data
        memo[i] = out
        return out

    return value(graph["root_index"])


@dataclass
class ProgramDecisions:
    """What one program decided, keyed by what each decision is about (see ``program_decisions``)."""

    values: dict  # key -> value: tile factors (list), candidate index, location number, extent
    kinds: dict  # key -> TILE | CATEGORICAL | LOCATION | EXTENT
    candidates: dict  # categorical key -> its candidates
    sketch: tuple  # the structure the sketch gives the program, comparable between records
    sketch_text: str  # the same, in words


@lru_cache(maxsize=4096)
def program_decisions(trace_json: str) -> ProgramDecisions:
    """The decisions of a stored trace, named by what they decide.

    Keys: ``("tile", block, loop position)`` -> factors; ``("cat", annotation key or "#i")`` -> candidate index;
    ``("loc", block)`` -> location number; ``("parallel",)`` / ``("vectorize",)`` -> the extent of the parallel /
    innermost vectorized loop of the tiled computation, as the postprocessor fused it from the tiled loops (1 when
    it left them serial; absent when the trace has no postprocessing or does not list the tiled block's loops).

    The tiled block is the one whose split loops are reordered (multi-level tiling); its nest is followed through
    the postprocessor's fuses: a block computed inside it shares its outer loops, which shows as the tiled
    block's loop count dropping by the number of loops fused minus one.
    """
    insts, decided = decode_tvm_json(trace_json)
    decided = {int(i): v for i, v in decided}
    blocks: dict[str, str] = {}  # block RV -> name
    loop_of: dict[str, tuple] = {}  # loop RV -> (block name, position) from GetLoops
    extent_of: dict[str, int] = {}  # loop RV -> extent, for loops split by sampled factors
    factor_of: dict[str, int] = {}  # factor RV -> its sampled value
    feeds: dict[str, str] = {}  # sampled categorical RV -> the annotation key it is written to
    values, kinds, candidates = {}, {}, {}
    sketch, words = [], []
    nest: list | None = None  # extents of the tiled block's loops, outermost first, once reordered
    nest_rvs: list = []
    tiled_block = None
    post = False
    pending = None  # a prefix of loops fused in parallel on a block that may share the tiled nest
    seen_tiled = False  # the postprocessor listed the tiled block's loops
    for kind, inputs, attrs, _outputs in insts:
        if kind == "Annotate" and len(inputs) > 1 and isinstance(inputs[1], str) and attrs:
            feeds.setdefault(inputs[1], str(attrs[0]))  # an RV as the value: a sampled choice written there
    n_cat = 0
    # postprocessing: loop RV -> (its GetLoops instruction, the tiled nest if that call lists the tiled block's
    # loops else None, position); fused RV -> (that nest or None, positions of the fused loops)
    loop_calls: dict[str, tuple] = {}
    fused: dict[str, tuple] = {}
    for i, (kind, inputs, attrs, outputs) in enumerate(insts):
        if kind == "EnterPostproc":
            post = True
            continue
        if not post:
            if kind == "GetSBlock":
                blocks[outputs[0]] = str(attrs[0])
            elif kind == "GetLoops":
                for pos, rv in enumerate(outputs):
                    loop_of[rv] = (blocks.get(inputs[0], inputs[0]), pos)
            elif kind == "SamplePerfectTile":
                block, pos = loop_of.get(inputs[0], (None, len(values)))
                factors = [int(x) for x in decided.get(i, [])]
                if factors:
                    values[("tile", block, pos)] = factors
                    kinds[("tile", block, pos)] = TILE
                    for rv, f in zip(outputs, factors):
                        factor_of[rv] = f
            elif kind == "Split":
                for rv, f in zip(outputs, inputs[1:]):
                    if isinstance(f, str) and f in factor_of:
                        extent_of[rv] = factor_of[f]
                    elif isinstance(f, int):
                        extent_of[rv] = f
                for rv in outputs:
                    if inputs[0] in loop_of:
                        loop_of[rv] = loop_of[inputs[0]]
            elif kind == "Reorder" and nest is None and inputs and all(rv in extent_of for rv in inputs):
                nest_rvs = list(inputs)
                nest = [extent_of[rv] for rv in inputs]
                tiled_block = loop_of.get(inputs[0], (None,))[0]
            elif kind == "SampleCategorical" and i in decided:
                key = ("cat", feeds.get(outputs[0], f"#{n_cat}"))
                n_cat += 1
                values[key] = int(decided[i])
                kinds[key] = CATEGORICAL
                candidates[key] = list(attrs[0]) if attrs else []
            elif kind == "SampleComputeLocation" and i in decided:
                key = ("loc", blocks.get(inputs[0], f"#{sum(k == LOCATION for k in kinds.values())}"))
                values[key] = int(decided[i])
                kinds[key] = LOCATION
            if kind not in _PLAIN:
                where = ""
                for rv in inputs if isinstance(inputs, list) else []:
                    if isinstance(rv, str) and rv in nest_rvs:
                        where = f"@{nest_rvs.index(rv)}"
                sketch.append(kind + where)
                words.append(_sketch_word(kind, where, nest_rvs))
            continue
        # postprocessing: find the loops fused in parallel and vectorized in the tiled computation
        if nest is None:
            continue
        if kind == "GetLoops":
            count = len(outputs)
            if pending is not None and count == len(nest) - pending + 1:
                # the tiled block has lost pending - 1 loops: that earlier block shared its outer loops
                nest[:] = _fuse_prefix(values, nest, pending)
                pending = None
            elif count == len(nest):
                pending = None  # the tiled block as it was: the earlier parallel loop was another nest's
            snapshot = list(nest) if count == len(nest) else None  # this call lists the tiled block's loops
            seen_tiled = seen_tiled or snapshot is not None
            for pos, rv in enumerate(outputs):
                loop_calls[rv] = (i, snapshot, pos)
        elif kind == "Fuse" and inputs and all(rv in loop_calls for rv in inputs):
            call, snapshot, _ = loop_calls[inputs[0]]
            if all(loop_calls[rv][0] == call for rv in inputs):
                fused[outputs[0]] = (snapshot, [loop_calls[rv][2] for rv in inputs])
        elif kind == "Parallel" and inputs and inputs[0] in fused and ("parallel",) not in values:
            snapshot, positions = fused[inputs[0]]
            if positions == list(range(len(positions))):  # the outermost loops of their block
                if snapshot is not None:
                    pending = None
                    nest[:] = _fuse_prefix(values, snapshot, len(positions))
                elif len(positions) > 1:
                    pending = len(positions)
        elif kind == "Vectorize" and inputs and inputs[0] in fused and ("vectorize",) not in values:
            snapshot, positions = fused[inputs[0]]
            m = len(positions)
            if snapshot is not None and positions == list(range(len(snapshot) - m, len(snapshot))):
                values[("vectorize",)] = math.prod(snapshot[-m:])
    if seen_tiled or ("parallel",) in values:
        values.setdefault(("parallel",), 1)  # the postprocessor left the tiled computation's loops serial
        values.setdefault(("vectorize",), 1)
    for key in (("parallel",), ("vectorize",)):
        if key in values:
            kinds[key] = EXTENT
    text = ", ".join(w for w in words if w) or "tiling only"
    if tiled_block is not None:
        text = f"{tiled_block}: {text}"
    return ProgramDecisions(values, kinds, candidates, tuple(sketch), text)


def _fuse_prefix(values: dict, nest: list, m: int) -> list:
    """Record the parallel extent of fusing the nest's outermost ``m`` loops; returns the nest after the fuse."""
    extent = math.prod(nest[:m])
    values[("parallel",)] = extent
    return [extent] + list(nest[m:])


def _sketch_word(kind: str, where: str, nest_rvs: list) -> str:
    pos = f" under loop {int(where[1:]) + 1} of {len(nest_rvs)}" if where else ""
    return {
        "CacheWrite": "cache write",
        "CacheRead": "cache read",
        "ReverseComputeAt": f"written back{pos}",
        "RFactor": "rfactor",
        "ComputeInline": "inlined",
        "ReverseComputeInline": "epilogue inlined",
        "Fuse": "fused",
    }.get(kind, kind + pos)


def decisions_from_list(decisions) -> ProgramDecisions:
    """A record's stored ``decisions`` (``[[kind, value], ...]``, JSON or list) when its trace is not at hand:
    decisions are named by their position among those of their kind."""
    if isinstance(decisions, str):
        decisions = json.loads(decisions) if decisions else []
    values, kinds, counts = {}, {}, {TILE: 0, CATEGORICAL: 0, LOCATION: 0}
    for kind, value in decisions or []:
        if kind == "SamplePerfectTile":
            key, k = ("tile", None, counts[TILE]), TILE
        elif kind == "SampleCategorical":
            key, k = ("cat", f"#{counts[CATEGORICAL]}"), CATEGORICAL
        elif kind == "SampleComputeLocation":
            key, k = ("loc", f"#{counts[LOCATION]}"), LOCATION
        else:
            continue
        counts[k] += 1
        values[key], kinds[key] = value, k
    signature = tuple((kind, len(v) if isinstance(v, list) else 1) for kind, v in decisions or [])
    text = f"{counts[TILE]} tiled loops, {counts[CATEGORICAL]} choices, {counts[LOCATION]} locations"
    return ProgramDecisions(values, kinds, {}, signature, text)


# ---------------------------------------------------------------- the table
@dataclass
class DecisionColumn:
    name: str  # the DataFrame column
    kind: str  # TILE, CATEGORICAL, LOCATION, EXTENT, STRATEGY or SKETCH
    group: str  # decisions that belong together (the levels of one loop's tiling); importance can sum over it
    description: str
    tickvals: list = field(default_factory=list)  # axis ticks: values in the column ...
    ticktext: list = field(default_factory=list)  # ... and what they mean (a factor, a candidate, a name)


@dataclass
class DecisionTable:
    frame: pd.DataFrame  # META_COLUMNS, then one numeric column per decision
    columns: list  # DecisionColumn of every decision column, in frame order
    sketches: list  # what each sketch code means, in words

    @property
    def decision_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> DecisionColumn:
        return next(c for c in self.columns if c.name == name)


def _records_list(records) -> list[dict]:
    if isinstance(records, pd.DataFrame):
        return records.to_dict("records")
    return list(records)


def _measured(rec: dict) -> bool:
    g = rec.get("gflops")
    err = rec.get("error_class")
    return (
        isinstance(g, (int, float))
        and math.isfinite(g)
        and g > 0
        and (err is None or (isinstance(err, float) and math.isnan(err)))
    )


def _log2(v) -> float:
    return math.log2(v) if isinstance(v, (int, float)) and v > 0 else math.nan


def _factor_text(v: float) -> str:
    f = 2**v
    return str(int(round(f))) if abs(f - round(f)) < 1e-6 else f"{f:.3g}"


def _location_text(v: int) -> str:
    return {-2: "inline", -1: "root"}.get(int(v), f"loop {int(v)}")


def decision_table(records, traces: dict | None = None, strategies=None, loop_names: dict | None = None):
    """One row per successfully measured record (positive GFLOPS, no error), one numeric column per decision.

    ``records``: dicts or a DataFrame with ``id, trial, round, strategy, gflops, error_class, decisions`` (a
    ``SessionModel``'s records, ``RecordStore.records()``, with or without a ``trace`` column). ``traces``: record
    id -> stored trace, to name decisions by block and loop; without one the record's ``decisions`` list is used.
    ``strategies``: the order of the strategy codes (default: the registry's). ``loop_names``: block -> its loops'
    names (``loop_names(workload, blocks)``); without them loops are ``ax0, ax1, ...``.
    Returns a ``DecisionTable``; tile factors and extents are log2, the axis ticks give the real values.
    """
    rows = [r for r in _records_list(records) if _measured(r)]
    traces = traces or {}
    parsed = []
    for r in rows:
        trace = traces.get(r.get("id")) or r.get("trace")
        p = None
        if isinstance(trace, str) and trace:
            try:
                p = program_decisions(trace)
            except (ValueError, KeyError, TypeError, IndexError):  # a damaged trace: fall back to the list
                p = None
        parsed.append(p if p is not None else decisions_from_list(r.get("decisions")))
    order = list(strategies or [])
    order += [s for s in KNOWN if s not in order]
    order += [s for s in dict.fromkeys(str(r.get("strategy")) for r in rows) if s not in order]
    present = [s for s in order if any(str(r.get("strategy")) == s for r in rows)]
    sketch_codes: dict[tuple, int] = {}
    sketch_text: list[str] = []
    for p in parsed:
        if p.sketch not in sketch_codes:
            sketch_codes[p.sketch] = len(sketch_codes)
            sketch_text.append(p.sketch_text)
    keys: dict[tuple, str] = {}  # key -> kind, in the order first seen
    for p in parsed:
        for k in p.values:
            keys.setdefault(k, p.kinds[k])
    levels: dict[tuple, int] = {}
    for p in parsed:
        for k, v in p.values.items():
            if p.kinds[k] == TILE:
                levels[k] = max(levels.get(k, 0), len(v))
    tile_blocks = {k[1] for k in keys if keys[k] == TILE}
    names = loop_names or {}

    def loop_label(k: tuple) -> str:
        _, block, pos = k
        if block is None:
            return f"tile{pos}"
        known = names.get(block) or []
        loop = known[pos] if pos < len(known) else f"ax{pos}"
        return f"{block}:{loop}" if len(tile_blocks) > 1 else loop

    data: dict[str, list] = {c: [r.get(c) for r in rows] for c in META_COLUMNS}
    columns: list[DecisionColumn] = []
    taken = set(META_COLUMNS)

    def add(name, kind, group, description, values, tickvals=None, ticktext=None):
        base, n = name, 2
        while name in taken:
            name, n = f"{base}~{n}", n + 1
        taken.add(name)
        data[name] = values
        col = pd.Series(values, dtype=float)
        if tickvals is None:
            present_vals = sorted(set(col.dropna().tolist()))
            tickvals = present_vals
            ticktext = [_factor_text(v) for v in present_vals]
        columns.append(DecisionColumn(name, kind, group, description, list(tickvals), list(ticktext)))

    add(
        STRATEGY,
        STRATEGY,
        STRATEGY,
        "the layout strategy that measured the program",
        [present.index(str(r.get("strategy"))) for r in rows],
        list(range(len(present))),
        present,
    )
    add(
        SKETCH,
        SKETCH,
        SKETCH,
        "the sketch (design space) the program was sampled from",
        [sketch_codes[p.sketch] for p in parsed],
        list(range(len(sketch_text))),
        [f"sketch {i + 1}" for i in range(len(sketch_text))],
    )
    for k, kind in keys.items():
        if kind != TILE:
            continue
        label = loop_label(k)
        for level in range(levels[k]):
            vals = []
            for p in parsed:
                f = p.values.get(k)
                vals.append(_log2(f[level]) if f is not None and level < len(f) else math.nan)
            add(
                f"{label}.{level}",
                TILE,
                f"tile {label}",
                f"tile factor of loop {label} at level {level} (outermost 0), log2",
                vals,
            )
    for k, kind in keys.items():
        if kind == CATEGORICAL:
            name = CATEGORICAL_NAMES.get(k[1]) or (k[1].rsplit(".", 1)[-1] if not k[1].startswith("#") else None)
            name = name or f"choice{k[1][1:]}"
            cands = next((p.candidates[k] for p in parsed if k in p.candidates), [])
            vals = [p.values.get(k, math.nan) for p in parsed]
            ticks = list(range(len(cands))) if cands else sorted(set(pd.Series(vals).dropna().tolist()))
            text = [str(c) for c in cands] if cands else [str(int(v)) for v in ticks]
            add(name, CATEGORICAL, name, f"sampled choice written to {k[1]} (the candidate's index)", vals, ticks, text)
    for k, kind in keys.items():
        if kind == LOCATION:
            name = f"{k[1]} at" if not k[1].startswith("#") else f"location{k[1][1:]}"
            vals = [p.values.get(k, math.nan) for p in parsed]
            ticks = sorted(set(pd.Series(vals, dtype=float).dropna().tolist()))
            add(
                name,
                LOCATION,
                name,
                "compute location (-2 inline, -1 root, k: the k-th loop it can go under)",
                vals,
                ticks,
                [_location_text(v) for v in ticks],
            )
    for key, name, what in ((("parallel",), "parallel", "parallel"), (("vectorize",), "vectorize", "vectorized")):
        if key in keys:
            add(
                name,
                EXTENT,
                name,
                f"extent of the {what} loop of the tiled computation (derived from the tile factors), log2",
                [_log2(p.values.get(key)) for p in parsed],
            )
    frame = pd.DataFrame(data)
    for c in ("id", "trial", "round"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    frame["gflops"] = frame["gflops"].astype(float)
    return DecisionTable(frame, columns, sketch_text)


def loop_names(workload, blocks) -> dict[str, list[str]]:
    """The loop variable names of the named blocks of a workload (TVM; for readable column names)."""
    from tvm.s_tir import Schedule

    sch = Schedule(workload.mod)
    out = {}
    for b in blocks:
        try:
            out[b] = [str(sch.get(lp).loop_var.name) for lp in sch.get_loops(sch.get_sblock(b))]
        except Exception:  # a block created by the sketch (a cache stage) is not in the plain workload
            continue
    return out


# ---------------------------------------------------------------- what mattered
IMPORTANCE_COLUMNS = ["decision", "kind", "importance", "share"]


def measured_importance(table: DecisionTable, by: str = "decision", min_records: int = MIN_RECORDS, seed: int = 0):
    """Importance of each decision for *measured* performance; None with fewer than ``min_records`` rows.

    A small XGBoost regressor (depth 3, 100 rounds, one thread, seeded) is fitted on the decision columns
    (missing decisions stay missing: trees route them) against log GFLOPS; a decision's importance is the mean
    over the measured programs of |its SHAP contribution| (``pred_contribs=True``), in log-GFLOPS units: how far,
    on average, this decision moves a program's predicted log-throughput from the mean. ``by="group"`` sums the
    contributions of a group (the levels of one loop's tiling) per program first. Decisions that never vary are
    left out. ``share`` is each importance over their sum.
    """
    import xgboost as xgb

    df = table.frame
    if len(df) < min_records:
        return None
    cols = [c for c in table.columns if df[c.name].nunique(dropna=False) > 1]
    if not cols:
        return pd.DataFrame(columns=IMPORTANCE_COLUMNS)
    X = df[[c.name for c in cols]].to_numpy(dtype=np.float32)
    y = np.log(df["gflops"].to_numpy(dtype=np.float64))
    params = {
        "objective": "reg:squarederror",
        "max_depth": 3,
        "eta": 0.1,
        "min_child_weight": 1.0,
        "nthread": 1,
        "seed": seed,
    }
    dm = xgb.DMatrix(X, label=y, missing=np.nan)
    booster = xgb.train(params, dm, num_boost_round=100)
    contrib = booster.predict(dm, pred_contribs=True)[:, :-1]  # the last column is the bias
    if by == "group":
        groups = list(dict.fromkeys(c.group for c in cols))
        kind_of = {c.group: c.kind for c in cols}
        summed = np.stack([contrib[:, [i for i, c in enumerate(cols) if c.group == g]].sum(axis=1) for g in groups], 1)
        names, kinds, imp = groups, [kind_of[g] for g in groups], np.abs(summed).mean(axis=0)
    elif by == "decision":
        names, kinds, imp = [c.name for c in cols], [c.kind for c in cols], np.abs(contrib).mean(axis=0)
    else:
        raise ValueError(f"by must be 'decision' or 'group', not {by!r}")
    total = float(imp.sum())
    out = pd.DataFrame(
        {"decision": names, "kind": kinds, "importance": imp, "share": imp / total if total > 0 else 0.0}
    )
    return out.sort_values("importance", ascending=False, kind="stable").reset_index(drop=True)


# TVM's per-store features (src/s_tir/meta_schedule/feature_extractor/per_store_feature.cc), in export order.
_ARITH = [
    "float_mad",
    "float_add_sub",
    "float_mul",
    "float_div_mod",
    "float_cmp",
    "float_math_func",
    "float_other_func",
    "int_mad",
    "int_add_sub",
    "int_mul",
    "int_div_mod",
    "int_cmp",
    "int_math_func",
    "int_other_func",
    "bool_op",
    "select_op",
]
_FOR_KIND = ["num", "prod", "len"] + [
    f"pos={p}"
    for p in (
        "none",
        "inner_spatial",
        "middle_spatial",
        "outer_spatial",
        "inner_reduce",
        "middle_reduce",
        "outer_reduce",
        "mixed",
    )
]
_GPU = ["is_gpu", "blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread"]
_BUFFER = (
    ["access=read", "access=write", "access=read_write", "bytes", "unique_bytes", "lines", "unique_lines"]
    + ["reuse=loop", "reuse=serial", "reuse=none", "reuse_dis_iter", "reuse_dis_bytes", "reuse_ct"]
    + ["bytes/reuse_ct", "unique_bytes/reuse_ct", "lines/reuse_ct", "unique_lines/reuse_ct", "stride"]
)
_ALLOC = ["alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod"]
_OUTER = ["outer_prod", "num_loops", "auto_unroll_max_step"]


def _feature_table() -> list[tuple[str, str]]:
    out = [(a, "arithmetic") for a in _ARITH]
    for kind in ("vectorize", "unroll", "parallel"):
        out += [(f"{kind} {f}", kind) for f in _FOR_KIND]
    out += [(g, "gpu") for g in _GPU]
    for b in range(5):
        out += [(f"buffer{b} {f}", "buffer access") for f in _BUFFER]
    out += [(f"arith intensity {i}", "arithmetic intensity") for i in range(10)]
    out += [(a, "allocation") for a in _ALLOC]
    out += [(o, "outer loops") for o in _OUTER]
    return out


FEATURES = _feature_table()  # f0 ... f163


def feature_label(name: str) -> tuple[str, str]:
    """(readable name, group) of a cost-model feature: ``f161`` -> ("outer_prod", "outer loops")."""
    if name.startswith("strategy="):
        return name, "strategy"
    if name.startswith("f") and name[1:].isdigit() and int(name[1:]) < len(FEATURES):
        return FEATURES[int(name[1:])]
    return name, "other"


COST_IMPORTANCE_COLUMNS = ["feature", "label", "group", "gain", "share"]


def cost_model_importance(gain: dict | None) -> pd.DataFrame:
    """The cost model's gain per feature (``PackSumXGB.feature_importance()``), largest first, with readable names.

    Gain is the average loss reduction of the splits on a feature: what the model's trees rely on to rank
    programs before measuring them (not how much the feature changes speed)."""
    if not gain:
        return pd.DataFrame(columns=COST_IMPORTANCE_COLUMNS)
    rows = [(f, *feature_label(f), float(g)) for f, g in gain.items()]
    df = pd.DataFrame(rows, columns=COST_IMPORTANCE_COLUMNS[:-1])
    total = df["gain"].sum()
    df["share"] = df["gain"] / total if total > 0 else 0.0
    return df.sort_values("gain", ascending=False, kind="stable").reset_index(drop=True)


READING = (
    "<b>How to read it.</b> Left: how much each decision moved the <i>measured</i> speed of this session's "
    "programs: the mean |SHAP| of a small XGBoost model fitted to the decision table (log GFLOPS; 0.1 ≈ 10 %). "
    "A long bar: changing this decision changed speed; decisions that move together (the levels of one loop) "
    "share the credit, and with few records it is a rough guide. Right: what the cost model's trees split on "
    "(gain over TVM's program features, computed from the program, not the decisions). The cost model ranks "
    "candidates before they are measured; if it relies on features unrelated to the decisions that matter on the "
    "left, expect it to misrank."
)


# ---------------------------------------------------------------- brushing
def display_values(table: DecisionTable) -> pd.DataFrame:
    """The values the axes draw: a missing decision (another sketch's) sits one step below the axis's lowest
    value, labelled ``n/a``, since parallel coordinates cannot draw a line with a hole."""
    out = pd.DataFrame(index=table.frame.index)
    for c in table.columns:
        col = table.frame[c.name].astype(float)
        if col.isna().any():
            lo = min(list(c.tickvals) + [-2.0 if c.kind == LOCATION else 0.0])  # below inline/root, factor 1
            col = col.fillna(lo - 1.0)
        out[c.name] = col
    out["GFLOPS"] = table.frame["gflops"].astype(float)
    return out


def _ranges(constraint) -> list[tuple[float, float]]:
    """A parcoords ``constraintrange`` ([lo, hi] or [[lo, hi], ...], None) as a list of ranges."""
    if constraint is None:
        return []
    c = list(constraint)
    if not c:
        return []
    if isinstance(c[0], (list, tuple)):
        return [(float(a), float(b)) for a, b in c]
    return [(float(c[0]), float(c[1]))]


def brushed_mask(values: pd.DataFrame, constraints: dict) -> np.ndarray | None:
    """Rows inside every axis's brushed ranges (an axis with several ranges: inside any of them); None when no
    axis is brushed. ``constraints``: column -> constraintrange."""
    mask = None
    for name, constraint in constraints.items():
        ranges = _ranges(constraint)
        if not ranges or name not in values:
            continue
        col = values[name].to_numpy(dtype=float)
        inside = np.zeros(len(col), dtype=bool)
        for lo, hi in ranges:
            inside |= (col >= min(lo, hi)) & (col <= max(lo, hi))
        mask = inside if mask is None else mask & inside
    return mask


def parse_trials(text: str) -> list[int]:
    """``"3, 7-9"`` -> [3, 7, 8, 9]; raises ValueError with a message naming the bad part."""
    out = []
    for part in (p.strip() for p in (text or "").replace(";", ",").split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"{part!r} is not a trial number or a range like 7-9") from None
        if b < a or b - a > 100_000:
            raise ValueError(f"{part!r} is not a range from a smaller to a larger trial")
        out += list(range(a, b + 1))
    return out


# ---------------------------------------------------------------- the view
HIGHLIGHT = "decision-space-highlight"  # ``meta`` of the rings this view adds to the throughput curves
SELECTED = "selected"  # the axis of the records selected on the curves or by trial number


class DecisionSpaceView:
    """Parallel coordinates over a session's decisions, and what mattered for measured speed.

    ``traces_of(after_id)`` returns record id -> stored trace of the records with ids above ``after_id`` (the
    dashboard reads them from the read-only store);
    ``workload_of()`` the workload, for loop names; ``cost_model_of()`` the live session's cost model (None for
    a replay: then its importance comes from ``model_trained`` events that carry it). ``poke()`` asks the
    dashboard's pump for a redraw: a brush (on the comm thread) only records its ranges, and the pump applies
    them to the table and the curves under its lock. Without ``poke`` they are applied at once.
    """

    def __init__(self, traces_of=None, workload_of=None, cost_model_of=None, poke=None, height: int = 420):
        self.traces_of = traces_of
        self.workload_of = workload_of
        self.cost_model_of = cost_model_of
        self.poke = poke
        self.visible = True  # the dashboard clears it while another tab is shown: no figure redraws then
        self.table: DecisionTable | None = None
        self.values: pd.DataFrame | None = None
        self.brushed_ids: set | None = None  # records inside the brush; None: no axis brushed
        self.selected_ids: set = set()  # records selected on the curves or by trial number
        self.importance: pd.DataFrame | None = None
        self.cost_importance = cost_model_importance(None)
        self._constraints: dict = {}
        self._records: list[dict] = []
        self._traces: dict = {}
        self._loop_names: dict | None = None
        self._importance_n = -1  # measured programs at the last importance fit
        self._bars = None  # what the importance bars show
        self._data_dirty = False
        self._brush_dirty = False
        self._importance_dirty = False
        self._updating = None  # the thread redrawing the axes: its own change callbacks are not brushes
        self._lock = threading.RLock()
        self._model = None
        self._source = None  # (session id, store, workload) the caches belong to
        self._records_table = None
        self._throughput = None
        self._curve_traces: set = set()  # uids of the curve traces whose box/lasso selections select here
        self.fig = LiveFigure(
            go.Figure(
                go.Parcoords(dimensions=[]),
                layout=dict(height=height, margin=dict(l=70, r=70, t=60, b=30), template="plotly_white"),
            )
        )
        self.fig.data[0].on_change(self._on_dimensions, "dimensions")
        self.header = W.HTML("<i>no measured programs yet</i>")
        self.trials = W.Text(
            placeholder="e.g. 3, 7-9",
            description="trials",
            continuous_update=False,  # Enter (or leaving the box) selects, not every keystroke
            layout=W.Layout(width="260px"),
        )
        self.highlight_button = W.Button(description="Highlight", layout=W.Layout(width="90px"))
        self.clear_button = W.Button(description="Clear selection and brush", layout=W.Layout(width="190px"))
        self.message = W.HTML()
        importance = make_subplots(
            rows=1,
            cols=2,
            horizontal_spacing=0.28,
            subplot_titles=("what mattered for measured speed", "what the cost model relies on"),
        )
        importance.update_layout(
            height=360, margin=dict(l=130, r=10, t=40, b=40), template="plotly_white", showlegend=False
        )
        importance.add_trace(go.Bar(orientation="h", marker_color="#1f77b4"), row=1, col=1)
        importance.add_trace(go.Bar(orientation="h", marker_color="#7f7f7f"), row=1, col=2)
        importance.update_xaxes(title_text="mean |SHAP| (log GFLOPS)", row=1, col=1)
        importance.update_xaxes(title_text="gain", row=1, col=2)
        self.importance_fig = LiveFigure(importance)
        self.importance_note = W.HTML()
        self.widget = W.VBox(
            [
                self.header,
                W.HBox([self.trials, self.highlight_button, self.clear_button, self.message]),
                self.fig.box,
                self.importance_note,
                self.importance_fig.box,
                W.HTML(f"<div style='font-size:12px;max-width:900px'>{READING}</div>"),
            ]
        )
        self.widget.add_class("wb-decision-space")  # a stable hook for browser tests
        self.highlight_button.on_click(lambda _b: self.select_trials(self.trials.value))
        self.trials.observe(lambda c: self.select_trials(c["new"]), names="value")
        self.clear_button.on_click(lambda _b: self.clear())

    # ---------------------------------------------------------- links to the other views
    def link(self, table=None, throughput=None) -> None:
        """Filter ``table`` (a ``RecordsTable``) by the brush, highlight its shown rows on its "Highlight these",
        and ring the brushed points on ``throughput`` (whose box/lasso selections highlight programs here)."""
        self._records_table = table
        self._throughput = throughput
        if table is not None:
            table.on_highlight(self.select)

    # ---------------------------------------------------------- user actions (any thread)
    def select(self, record_ids) -> None:
        """Highlight these records (replacing the selection); an empty list clears it."""
        with self._lock:
            self.selected_ids = {int(i) for i in record_ids}
            self._data_dirty = True
        self._changed()

    def select_trials(self, text: str) -> None:
        try:
            trials = set(parse_trials(text))
        except ValueError as e:
            self.message.value = f"<span style='color:#c00'>{_esc(e)}</span>"
            return
        ids = [int(r["id"]) for r in self._records if r.get("trial") in trials and r.get("id") is not None]
        self.message.value = "" if ids or not trials else "<span style='color:#c00'>no such measured trial</span>"
        self.select(ids)

    def clear(self) -> None:
        with self._lock:
            self.selected_ids = set()
            self._constraints = {}
            self._data_dirty = True
            self._brush_dirty = True
        self.message.value = ""
        self._changed()

    def brush(self, constraints: dict) -> None:
        """Set axis ranges as a brush in the browser would (column -> [lo, hi] or None), e.g. from code."""
        with self._lock:
            for name, c in constraints.items():
                if c is None:
                    self._constraints.pop(name, None)
                else:
                    self._constraints[name] = c
            self._data_dirty = True
            self._brush_dirty = True
        self._changed()

    def _on_dimensions(self, trace, dimensions) -> None:
        if self._updating == threading.get_ident():
            return
        found = {
            d.label: d.constraintrange
            for d in dimensions
            if d.label and d.label != SELECTED and d.constraintrange is not None
        }
        with self._lock:
            if found == self._constraints:
                return
            self._constraints = found
            self._brush_dirty = True
        self._changed()

    def _curve_selected(self, view, trace, points, _selector) -> None:
        ids = getattr(view, "_ids", [])
        idx = points.trace_index
        if idx >= len(ids) or not ids[idx]:
            return
        picked = {ids[idx][i] for i in points.point_inds if i < len(ids[idx])}
        with self._lock:
            self.selected_ids |= picked
            self._data_dirty = True
        self._changed()

    def _changed(self) -> None:
        if self.poke is not None:
            self.poke()
        else:
            self._apply(force=True)

    # ---------------------------------------------------------- the pump's side
    def refresh(self, model, changes: set) -> None:
        with self._lock:
            source = (model.session_id, model.db, model.workload)
            if source != self._source:  # another session attached: nothing cached belongs to it
                self._source = source
                self._traces, self._loop_names, self._importance_n = {}, None, -1
                self.selected_ids, self._constraints = set(), {}
                self._brush_dirty = True
            if changes & {RECORDS, SESSION}:
                self._records = list(model.records)
                self._data_dirty = True
                self._importance_dirty = True
            if CONTROLLER in changes:
                self._importance_dirty = True
            self._model = model
            self._apply()

    def _apply(self, force: bool = False) -> None:
        with self._lock:
            # hidden and nothing brushed: the table needs nothing from here, so the work waits until it is shown
            needed = self.visible or bool(self._constraints)
            rebuilt = self._data_dirty and needed
            if rebuilt:
                self._rebuild()
            if rebuilt or self._brush_dirty:
                mask = brushed_mask(self.values, self._constraints) if self.values is not None else None
                ids = None if mask is None else {int(i) for i in self.table.frame["id"][mask].dropna()}
                self.brushed_ids = ids
                self._link_out()
            if self.visible and (rebuilt or force):
                self._draw()
            if needed:
                self._data_dirty = False
            self._brush_dirty = False
            if self.visible and self._importance_dirty:
                self._draw_importance()

    def _rebuild(self) -> None:
        if not self._records:
            self.table = decision_table([])
            self.values = display_values(self.table)
            return
        if self.traces_of is not None:
            missing = [r.get("id") for r in self._records if r.get("id") is not None and r["id"] not in self._traces]
            if missing:
                try:
                    # a what-if record can arrive with an id below a later search record's: ask from the lowest
                    self._traces.update(self.traces_of(min(missing) - 1))
                except Exception:  # a store that cannot be read now: decisions by position meanwhile
                    pass
        strategies = getattr(self._model, "strategies", None)
        self.table = decision_table(self._records, self._traces, strategies, self._names())
        self.values = display_values(self.table)

    def _names(self) -> dict:
        if self._loop_names is None and self.workload_of is not None and self._traces:
            blocks = set()
            for t in self._traces.values():
                try:
                    blocks |= {k[1] for k in program_decisions(t).values if k[0] == "tile"}
                except (ValueError, KeyError, TypeError, IndexError):
                    pass
            try:
                wl = self.workload_of()
                self._loop_names = loop_names(wl, sorted(b for b in blocks if b)) if wl is not None else None
            except Exception:  # no TVM or no such block: loops keep their positions as names
                self._loop_names = {}
        return self._loop_names or {}

    def _link_out(self) -> None:
        ids = self.brushed_ids
        if self._records_table is not None:
            note = None
            if ids is not None:
                note = f"filtered by the decision-space brush: {len(ids)} of {len(self.table.frame)} measured programs"
            self._records_table.set_filter(ids, note)
        if self._throughput is not None:
            self._ring(ids)

    def _ring(self, ids) -> None:
        """Ring the brushed programs on the throughput curves (two overlay traces, only while a brush is active)."""
        fig = self._throughput.fig
        for tr in fig.data:  # box/lasso selections on the curves select programs here
            if tr.meta != HIGHLIGHT and tr.uid not in self._curve_traces:
                tr.on_selection(lambda t, p, s, v=self._throughput: self._curve_selected(v, t, p, s), append=True)
                tr.on_deselect(lambda *_a: self.select([]), append=True)
                self._curve_traces.add(tr.uid)
        rings = [tr for tr in fig.data if tr.meta == HIGHLIGHT]
        if ids is None and not any(len(tr.x or ()) for tr in rings):
            return
        if not rings:
            for col in (1, 2):
                fig.add_trace(
                    go.Scatter(
                        meta=HIGHLIGHT,
                        name="brushed",
                        mode="markers",
                        showlegend=False,
                        hoverinfo="skip",
                        marker=dict(symbol="circle-open", size=12, color="#111", line=dict(width=2)),
                    ),
                    row=1,
                    col=col,
                )
            rings = [tr for tr in fig.data if tr.meta == HIGHLIGHT]
        recs = [r for r in self._records if ids is not None and r.get("id") in ids]
        with fig.batch_update():
            for tr, key in zip(rings, ("trial", "elapsed_s")):
                tr.x = [r.get(key) for r in recs]
                tr.y = [r.get("gflops") for r in recs]

    def _draw(self) -> None:
        t = self.table
        n = 0 if t is None else len(t.frame)
        if not n:
            self.header.value = "<i>no measured programs yet</i>"
            self._updating = threading.get_ident()
            try:
                self.fig.data[0].dimensions = []
            finally:
                self._updating = None
            return
        values = self.values
        shown = [c for c in t.columns if values[c.name].nunique() > 1] or t.columns[:1]
        cap = 58 - (1 if self.selected_ids else 0)
        hidden = max(0, len(shown) - cap)
        shown = shown[:cap]
        dims = []
        for c in shown:
            v = values[c.name]
            tickvals, ticktext = list(c.tickvals), list(c.ticktext)
            if t.frame[c.name].isna().any():
                tickvals, ticktext = [float(v.min())] + tickvals, [NA_TEXT] + ticktext
            dims.append(
                dict(
                    label=c.name,
                    values=v.tolist(),
                    tickvals=tickvals,
                    ticktext=ticktext,
                    constraintrange=self._constraints.get(c.name),
                )
            )
        dims.append(
            dict(label="GFLOPS", values=values["GFLOPS"].tolist(), constraintrange=self._constraints.get("GFLOPS"))
        )
        if self.selected_ids:
            sel = [1 if int(i) in self.selected_ids else 0 for i in t.frame["id"]]
            dims.insert(
                0,
                dict(
                    label=SELECTED,
                    values=sel,
                    tickvals=[0, 1],
                    ticktext=["no", "yes"],
                    range=[0, 1],
                    constraintrange=[0.5, 1.5],
                ),
            )
        self._updating = threading.get_ident()
        try:
            with self.fig.batch_update():
                tr = self.fig.data[0]
                tr.dimensions = dims
                tr.line = dict(
                    color=t.frame["gflops"].tolist(),
                    colorscale="Viridis",
                    showscale=True,
                    colorbar=dict(title=dict(text="GFLOPS")),
                )
        finally:
            self._updating = None
        self.header.value = (
            f"<b>{n}</b> measured programs, <b>{len(shown)}</b> decisions that vary"
            + (f" (the first {len(shown)}; {hidden} more hidden)" if hidden else "")
            + f", <b>{len(t.sketches)}</b> sketch{'es' if len(t.sketches) != 1 else ''}"
            + (": " + "; ".join(f"{i + 1}: {_esc(s)}" for i, s in enumerate(t.sketches)) if len(t.sketches) > 1 else "")
            + ". Tile factors and extents are on log2 axes (ticks show the factor). Brush an axis (drag along it) "
            "to filter the Records tab and ring those programs on the curves; select points on the curves (box or "
            "lasso) or type trial numbers to highlight them here."
        )

    def _draw_importance(self) -> None:
        t = self.table
        n = 0 if t is None else len(t.frame)
        if n < MIN_RECORDS:
            self.importance = None
            self.importance_note.value = (
                f"<b>What matters</b>: not enough records yet ({n} measured programs; it needs {MIN_RECORDS})."
            )
        elif (
            self._importance_n < MIN_RECORDS
            or n - self._importance_n >= IMPORTANCE_EVERY
            or (n != self._importance_n and getattr(self._model, "terminal", True))
        ):
            self.importance = measured_importance(t, by="group")
            self._importance_n = n
        gain, source = None, ""
        model = self.cost_model_of() if self.cost_model_of is not None else None
        if model is not None:
            try:
                gain, source = model.feature_importance(), "the live session's cost model"
            except Exception:
                gain = None
        if not gain:
            info = (getattr(self._model, "controller", None) or {}).get("model") or {}
            gain = info.get("feature_importance")
            source = f"the cost model trained after round {info.get('round')}" if gain else ""
        self.cost_importance = cost_model_importance(gain)
        imp = self.importance if self.importance is not None else pd.DataFrame(columns=IMPORTANCE_COLUMNS)
        top = imp.head(15)[::-1]
        cm = self.cost_importance.head(15)[::-1]
        bars = (
            top["importance"].tolist(),
            [_esc(d) for d in top["decision"]],
            cm["gain"].tolist(),
            [f"{_esc(lbl)} ({_esc(f)})" if lbl != f else _esc(f) for f, lbl in zip(cm["feature"], cm["label"])],
        )
        if bars != self._bars:  # a new record alone changes nothing here until the next refit
            self._bars = bars
            with self.importance_fig.batch_update():
                left, right = self.importance_fig.data
                left.x, left.y, right.x, right.y = bars
        if n >= MIN_RECORDS:
            cost = (
                f"cost model: from {source}"
                if gain
                else "cost model: its importance is not known here (a replayed recording whose model_trained "
                "events do not carry it, or a model not trained yet)"
            )
            self.importance_note.value = f"<b>What matters</b> ({n} measured programs); {_esc(cost)}."
        self._importance_dirty = False
