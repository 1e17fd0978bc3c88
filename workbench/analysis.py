"""Sessions as data for comparisons and reports: best-so-far curves, seed groups, per-strategy tables,
cost-model quality per round.

Every function reads stores opened read-only through ``RecordStore`` and returns plain pandas/dicts; the
compare widget (``widgets.compare``) and the HTML report (``workbench.report``) only draw what these return.

Best so far: the running minimum of the latency of *verified* records (a would-be best is verified before it
counts, as in the live dashboard), with the latencies as stored at the end of the session (an incumbent
re-measured beside a challenger keeps its re-measured median). ``trial`` is the record's stored trial number,
``elapsed_s`` the session's tuning time when it was measured.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager

import numpy as np
import pandas as pd

from .dtypes import spec_rate_unit
from .errors import WorkbenchError
from .store import RecordStore, search_records

SessionRef = tuple  # (db path, session id)

# What tells sessions apart in a comparison; sessions equal in GROUP_FIELDS differ only by seed.
LABEL_FIELDS = ["workload", "strategy_arg", "seed", "preset", "cost_model"]
GROUP_FIELDS = ["workload", "strategy_arg", "preset", "cost_model"]
BANDS = ("minmax", "quartiles")
X_AXES = ("trial", "elapsed_s")

CURVE_COLUMNS = [
    "db",
    "session_id",
    "label",
    *LABEL_FIELDS,
    "trial",
    "elapsed_s",
    "best_latency_ms",
    "best_gflops",
    "record_id",
    "improved",
]


@contextmanager
def open_stores(paths):
    """``{absolute path: RecordStore}``, each opened read-only once and closed on exit.

    Opening through ``RecordStore`` (SQLite's own read-only mode) and never with ``open()``: closing any
    descriptor of a store drops the POSIX locks this process holds on it (see ``workbench.store``).
    """
    stores: dict[str, RecordStore] = {}
    try:
        for p in paths:
            key = os.path.abspath(p)
            if key not in stores:
                stores[key] = RecordStore(p, readonly=True)
        yield stores
    finally:
        for s in stores.values():
            s.close()


def cost_model_of(row: dict) -> str:
    """The session's cost model as a short name ("pack-sum", "pairwise-rank+prior"); stores written before
    the choice existed used pack-sum."""
    p = row.get("preset_params") or {}
    name = str(p.get("cost_model") or "pack-sum")
    return name + ("+prior" if p.get("prior") else "")


def _valid(df: pd.DataFrame) -> pd.Series:
    return df["verified"].astype(bool) & df["error_class"].isna() & df["latency_ms"].notna()


def session_info(path: str, row: dict, recs: pd.DataFrame, multi_db: bool = False) -> dict:
    """A session's labels, status, measured and error counts and best verified record, from its ``sessions``
    row and its records; ``label`` names it in a legend (with the store's name when ``multi_db``)."""
    ok = recs[_valid(recs)] if len(recs) else recs
    best = ok.loc[ok["latency_ms"].idxmin()] if len(ok) else None
    searched = search_records(recs)
    info = {
        "db": path,
        "session_id": int(row["id"]),
        "workload": str(row["workload"]),
        "strategy_arg": str(row.get("strategy_arg") or "auto"),
        "seed": int(row["seed"]),
        "preset": str(row["preset"]),
        "cost_model": cost_model_of(row),
        "status": str(row["status"]),
        "budget": int(row["trials"]),
        # trials: the search's records (a person's what-ifs spend none; counted apart)
        "measured": int(len(searched)),
        "what_if": int(len(recs) - len(searched)),
        "errors": int(searched["error_class"].notna().sum()) if len(searched) else 0,
        "best_latency_ms": None if best is None else float(best["latency_ms"]),
        "best_gflops": None if best is None or pd.isna(best["gflops"]) else float(best["gflops"]),
        "rate_unit": spec_rate_unit(row.get("spec")),
        "best_strategy": None if best is None else str(best["strategy"]),
        "best_record_id": None if best is None else int(best["id"]),
        "naive_latency_ms": row.get("naive_latency_ms"),
    }
    db = os.path.splitext(os.path.basename(path))[0] + ":" if multi_db else ""
    info["label"] = (
        f"{db}{info['session_id']} · {info['workload']} · {info['strategy_arg']} · seed {info['seed']} · "
        f"{info['preset']}/{info['cost_model']}"
    )
    return info


def list_sessions(dbs) -> pd.DataFrame:
    """One row per session of the given stores (a path or a list of paths): its labels, status, trials
    measured and best; ``label`` names it in a picker or a legend."""
    paths = [dbs] if isinstance(dbs, (str, os.PathLike)) else list(dbs)
    rows = []
    with open_stores(paths) as stores:
        multi = len(stores) > 1
        for path, store in stores.items():
            for row in store.sessions():
                rows.append(session_info(path, row, store.records(session_id=row["id"]), multi))
    cols = ["db", "session_id", "label", *LABEL_FIELDS, "status", "budget", "measured", "errors"]
    cols += ["best_latency_ms", "best_gflops", "rate_unit", "best_strategy", "best_record_id", "naive_latency_ms"]
    return pd.DataFrame(rows, columns=cols)


def picker_text(info: dict) -> str:
    """A session in a picker: "id · workload · strategy · seed · best"."""
    unit = info.get("rate_unit") or "GFLOPS"
    best = "no verified best" if info.get("best_gflops") is None else f"{info['best_gflops']:.1f} {unit}"
    db = os.path.splitext(os.path.basename(info["db"]))[0]
    return f"{db}:{info['session_id']} · {info['workload']} · {info['strategy_arg']} · seed {info['seed']} · {best}"


def step_curve(recs: pd.DataFrame) -> pd.DataFrame:
    """The best-so-far of one run of records (in measurement order): one row per record from the first
    verified one on, with the best latency and GFLOPS so far, the best record's id, and whether it improved."""
    out = []
    best = None
    for r in recs.itertuples(index=False):
        ok = bool(r.verified) and pd.isna(r.error_class) and not pd.isna(r.latency_ms)
        improved = ok and (best is None or r.latency_ms < best.latency_ms)
        if improved:
            best = r
        if best is not None:
            out.append(
                {
                    "trial": int(r.trial),
                    "elapsed_s": float(r.elapsed_s),
                    "best_latency_ms": float(best.latency_ms),
                    "best_gflops": math.nan if pd.isna(best.gflops) else float(best.gflops),
                    "record_id": int(best.id),
                    "improved": improved,
                }
            )
    return pd.DataFrame(out, columns=["trial", "elapsed_s", "best_latency_ms", "best_gflops", "record_id", "improved"])


def _refs(refs) -> list[tuple[str, int]]:
    out = []
    for ref in refs:
        try:
            path, sid = ref
            out.append((os.path.abspath(os.fspath(path)), int(sid)))
        except (TypeError, ValueError):
            raise WorkbenchError(f"a session is named as (db path, session id), not {ref!r}") from None
    return out


def best_so_far(refs, per_strategy: bool = False) -> pd.DataFrame:
    """The best-so-far curves of sessions named by ``(db path, session id)`` pairs, as one tidy DataFrame.

    One row per measured trial of each session (from its first verified record on): ``db, session_id, label``
    and the session's labels (``workload, strategy_arg, seed, preset, cost_model``), ``trial, elapsed_s,
    best_latency_ms, best_gflops, record_id`` (the best record so far) and ``improved``. With
    ``per_strategy`` each session has one curve per layout strategy (a ``strategy`` column; a strategy's
    rows are its own trials), as the dashboard draws them.
    """
    refs = _refs(refs)
    frames = []
    with open_stores([p for p, _ in refs]) as stores:
        multi = len(stores) > 1
        for path, sid in refs:
            store = stores[path]
            row = store.session(sid)
            recs = store.records(session_id=sid)
            info = session_info(path, row, recs, multi)
            groups = recs.groupby("strategy", sort=False) if per_strategy and len(recs) else [(None, recs)]
            for strategy, g in groups:
                c = step_curve(g)
                if per_strategy:
                    c.insert(0, "strategy", strategy)
                for k in reversed(["db", "session_id", "label", *LABEL_FIELDS]):
                    c.insert(0, k, info[k])
                frames.append(c)
    cols = CURVE_COLUMNS[:3] + LABEL_FIELDS + (["strategy"] if per_strategy else []) + CURVE_COLUMNS[3 + 5 :]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)[cols]


def _at(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A step function (last value at or before x) sampled on ``grid``; NaN outside the curve's own range."""
    i = np.searchsorted(xs, grid, side="right") - 1
    v = ys[np.clip(i, 0, len(ys) - 1)].astype(float)
    v[(i < 0) | (grid > xs[-1])] = np.nan
    return v


def seed_groups(curves: pd.DataFrame, x: str = "trial", band: str = "minmax") -> pd.DataFrame:
    """Sessions that differ only by seed (equal ``workload, strategy_arg, preset, cost_model``; and
    ``strategy`` for per-strategy curves), aggregated per ``x`` (``trial`` or ``elapsed_s``): the median best
    and a band, min-max (``band="minmax"``) or the quartiles (``"quartiles"``), over the sessions that have a
    curve at that x (``n``). Each session's step curve is sampled at every x of its group, so wall-time
    curves with different measurement times line up.
    """
    if x not in X_AXES:
        raise WorkbenchError(f"x must be one of {', '.join(X_AXES)}, not {x!r}")
    if band not in BANDS:
        raise WorkbenchError(f"band must be one of {', '.join(BANDS)}, not {band!r}")
    keys = GROUP_FIELDS + (["strategy"] if "strategy" in curves.columns else [])
    stats = ["median_gflops", "lo_gflops", "hi_gflops", "median_latency_ms", "lo_latency_ms", "hi_latency_ms"]
    cols = ["group", *keys, "seeds", "sessions", x, "n", *stats]
    if curves.empty:
        return pd.DataFrame(columns=cols)
    lo_q, hi_q = (0.0, 1.0) if band == "minmax" else (0.25, 0.75)
    frames = []
    for key, g in curves.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        runs = [s.sort_values(x, kind="stable") for _, s in g.groupby(["db", "session_id"], sort=False)]
        grid = np.unique(g[x].to_numpy(dtype=float))
        per = {}
        for col in ("best_gflops", "best_latency_ms"):
            per[col] = np.vstack([_at(r[x].to_numpy(dtype=float), r[col].to_numpy(dtype=float), grid) for r in runs])
        n = np.sum(~np.isnan(per["best_latency_ms"]), axis=0)
        seeds = sorted({int(s) for s in g["seed"]})
        out = pd.DataFrame({x: grid if x == "elapsed_s" else grid.astype(int), "n": n})
        for col, name in (("best_gflops", "gflops"), ("best_latency_ms", "latency_ms")):
            m = per[col]
            with np.errstate(all="ignore"):
                out[f"median_{name}"] = np.nanmedian(m, axis=0)
                out[f"lo_{name}"] = np.nanquantile(m, lo_q, axis=0)
                out[f"hi_{name}"] = np.nanquantile(m, hi_q, axis=0)
        for k, v in zip(keys, key):
            out[k] = v
        out["seeds"] = ", ".join(map(str, seeds))
        out["sessions"] = len(runs)
        label = f"{key[0]} · {key[1]} · {key[2]}/{key[3]}" + (f" · {key[4]}" if len(key) > 4 else "")
        seeds_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"
        out["group"] = f"{label} · {seeds_text}" + (f" ({len(runs)} sessions)" if len(runs) != len(seeds) else "")
        frames.append(out[cols])
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------- per session, for the report


def strategy_table(recs: pd.DataFrame) -> pd.DataFrame:
    """Per layout strategy of one session: trials, their share of the session's trials, who chose them
    (``chosen_by`` counts), errors, and the best verified latency and GFLOPS. A person's what-if records are no
    trials (``store.is_what_if``): they count only towards the best."""
    cols = ["strategy", "trials", "share", "chosen_by", "errors", "best_latency_ms", "best_gflops", "best_record_id"]
    if recs.empty:
        return pd.DataFrame(columns=cols)
    searched = search_records(recs)
    total = max(1, len(searched))
    rows = []
    for s, g in recs.groupby("strategy", sort=False):
        ok = g[_valid(g)]
        best = ok.loc[ok["latency_ms"].idxmin()] if len(ok) else None
        trials = search_records(g)
        who = trials["chosen_by"].value_counts()
        rows.append(
            {
                "strategy": s,
                "trials": int(len(trials)),
                "share": len(trials) / total,
                "chosen_by": ", ".join(f"{k} {v}" for k, v in who.items()),
                "errors": int(trials["error_class"].notna().sum()),
                "best_latency_ms": None if best is None else float(best["latency_ms"]),
                "best_gflops": None if best is None or pd.isna(best["gflops"]) else float(best["gflops"]),
                "best_record_id": None if best is None else int(best["id"]),
            }
        )
    return pd.DataFrame(rows, columns=cols)


def spearman(x, y) -> float:
    """Spearman's rho (average ranks for ties); NaN when undefined (<3 points or a constant side)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3:
        return math.nan
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def kendall_tau(x, y) -> float:
    """Kendall's tau-b; NaN when undefined."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3:
        return math.nan
    iu = np.triu_indices(len(x), k=1)
    dx = np.sign(x[:, None] - x[None, :])[iu]
    dy = np.sign(y[:, None] - y[None, :])[iu]
    n1, n2 = np.count_nonzero(dx), np.count_nonzero(dy)
    if n1 == 0 or n2 == 0:
        return math.nan
    return float((dx * dy).sum() / math.sqrt(n1 * n2))


def pairwise_accuracy(score, gflops) -> float:
    """Share of the pairs with different measured GFLOPS that the score (higher = faster) orders the same
    way (a tied score counts as wrong); NaN without such a pair. As ``benchmarks/cost_model.py`` defines it."""
    s, g = np.asarray(score, dtype=float), np.asarray(gflops, dtype=float)
    i, j = np.nonzero(g[:, None] > g[None, :])
    if not len(i):
        return math.nan
    return float(np.mean(s[i] > s[j]))


def topk_recall(score, gflops, k: int) -> float:
    """Share of the k truly fastest candidates that the score also puts in its top k."""
    s, g = np.asarray(score, dtype=float), np.asarray(gflops, dtype=float)
    if not len(s):
        return math.nan
    k = max(1, min(k, len(s)))
    return len(set(np.argsort(-g, kind="stable")[:k]) & set(np.argsort(-s, kind="stable")[:k])) / k


QUALITY_COLUMNS = ["round", "strategy", "n", "spearman", "kendall", "pairwise", "k", "topk_recall", "trained_on"]


def round_quality(recs: pd.DataFrame, events: list[dict] | None = None, topk_share: float = 0.25) -> pd.DataFrame:
    """How well the cost model ranked each round's candidates before they were measured: Spearman, Kendall
    and pairwise accuracy of the predicted score against measured GFLOPS (failed candidates left out), and
    top-k recall (failures count as 0 GFLOPS: the model should not put them in its top k). Rounds without a
    prediction are left out, and so are a person's what-if records (round 0, ``store.is_what_if``: no search
    round). ``trained_on``: the samples of the model that predicted the round, from the session's
    ``model_trained`` events (NaN: not trained yet; its scores were then not a learned ranking).
    """
    recs = search_records(recs)
    if recs.empty or "predicted_score" not in recs or recs["predicted_score"].isna().all():
        return pd.DataFrame(columns=QUALITY_COLUMNS)
    trained = sorted(
        (e["data"]["round"], e["data"].get("n_samples"))
        for e in (events or [])
        if e.get("kind") == "model_trained"
        and isinstance(e.get("data"), dict)
        and isinstance(e["data"].get("round"), int)
        and isinstance(e["data"].get("n_samples"), (int, type(None)))
    )
    rows = []
    for rnd, g in recs.groupby("round", sort=True):
        g = g[g["predicted_score"].notna()]
        if g.empty:
            continue
        ok = g[g["gflops"].notna() & g["error_class"].isna()]
        k = max(1, int(round(len(g) * topk_share)))
        before = [n for r, n in trained if r < rnd]
        rows.append(
            {
                "round": int(rnd),
                "strategy": str(g["strategy"].iloc[0]),
                "n": int(len(g)),
                "spearman": spearman(ok["predicted_score"], ok["gflops"]),
                "kendall": kendall_tau(ok["predicted_score"], ok["gflops"]),
                "pairwise": pairwise_accuracy(ok["predicted_score"], ok["gflops"]),
                "k": k,
                "topk_recall": topk_recall(
                    g["predicted_score"], g["gflops"].where(g["error_class"].isna()).fillna(0.0), k
                ),
                "trained_on": math.nan if not before or before[-1] is None else int(before[-1]),
            }
        )
    return pd.DataFrame(rows, columns=QUALITY_COLUMNS)


def best_programs(store: RecordStore, session_id: int, recs: pd.DataFrame | None = None) -> list[dict]:
    """The best verified program of each strategy of a session, fastest first: strategy, record id, latency,
    GFLOPS and its TIR as compiled (offline weight rewrites removed), or ``error`` when the stored trace
    cannot be rebuilt here. Needs TVM (imported on the first call)."""
    from .program import TunedProgram
    from .workloads import workload_from_spec

    row = store.session(session_id)
    recs = store.records(session_id=session_id) if recs is None else recs
    table = strategy_table(recs)
    table = table[table["best_record_id"].notna()].sort_values("best_latency_ms")
    out = []
    workload = None
    for t in table.itertuples(index=False):
        item = {
            "strategy": t.strategy,
            "record_id": int(t.best_record_id),
            "latency_ms": t.best_latency_ms,
            "gflops": t.best_gflops,
            "tir": None,
            "error": None,
        }
        try:
            trace = store.record(int(t.best_record_id))["trace"]
            if workload is None:
                workload = workload_from_spec(row["spec"])
            item["tir"] = TunedProgram(workload, t.strategy, trace, row["target"]).tir
        except Exception as e:  # a damaged or foreign trace: say so in the report instead of failing it
            item["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:500]
        out.append(item)
    return out
