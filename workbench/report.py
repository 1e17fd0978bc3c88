"""``workbench report``: a records store as one self-contained HTML file, viewable with no server.

Per session: best-so-far curves per strategy (plotly, its JavaScript inlined), the per-strategy table, the
cost model's ranking quality per round, the best program of each strategy as TIR, and the environment the
store recorded. The figures' data sit in ``<script type="application/json" data-figure=...>`` blocks that one
script at the end draws.

A store is data from anywhere: every stored string is HTML-escaped before it is written into the page, and
the figures' JSON has ``<``, ``>`` and ``&`` as JSON escapes, so no stored value can close a script element or
open a tag.
"""

from __future__ import annotations

import datetime
import html
import json
import math
import os

import pandas as pd

from . import analysis
from .dtypes import spec_rate_unit
from .errors import WorkbenchError
from .layouts import STRATEGY_INDEX

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]  # as the dashboard's

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1180px;
color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ccc}h3{font-size:15px;margin-top:22px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{padding:3px 9px;border-bottom:1px solid #e2e2e2;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.t,th.t{text-align:left}
pre{font-size:12px;line-height:1.3;background:#f8f8f8;padding:8px;overflow:auto;max-height:560px}
.meta{color:#666;font-size:13px}.note{color:#666;font-size:12px}.err{color:#c92a2a}
details{margin:6px 0}summary{cursor:pointer}
"""

DRAW = """
document.querySelectorAll('script[data-figure]').forEach(function (s) {
  var f = JSON.parse(s.textContent);
  Plotly.newPlot(s.getAttribute('data-figure'), f.data, f.layout, {responsive: true, displaylogo: false});
});
"""


def esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def fmt(v, spec: str = ".4g") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return format(v, spec)


def color_of(strategy: str, strategies: list) -> str:
    order = list(STRATEGY_INDEX) + [s for s in strategies if s not in STRATEGY_INDEX]
    return PALETTE[order.index(strategy) % len(PALETTE)] if strategy in order else PALETTE[-1]


def script_json(obj) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` left unescaped."""
    text = json.dumps(obj, allow_nan=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _num(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def _xs(col: pd.Series) -> list:
    return [int(v) for v in col] if col.name == "trial" else [_num(float(v)) for v in col]


def _table(df: pd.DataFrame, columns: list[tuple]) -> str:
    """An HTML table of ``df``: ``columns`` are (column, heading, format spec or None for text)."""
    head = "".join(f"<th class='{'t' if spec is None else ''}'>{esc(h)}</th>" for _c, h, spec in columns)
    rows = []
    for r in df.to_dict("records"):
        cells = []
        for c, _h, spec in columns:
            v = r.get(c)
            if spec is None:
                cells.append(f"<td class='t'>{esc(v)}</td>")
            else:
                cells.append(f"<td>{esc(fmt(None if v is None or pd.isna(v) else v, spec))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def curve_figure(per_strategy: pd.DataFrame, overall: pd.DataFrame, strategies: list, unit: str = "GFLOPS") -> dict:
    """Best-so-far throughput (``unit``: GFLOPS, or GOPS for an integer workload) per strategy (and the
    session's, dashed) against trial and wall time."""
    data = []
    for s in [s for s in strategies if s in set(per_strategy["strategy"])] + sorted(
        set(per_strategy["strategy"]) - set(strategies)
    ):
        c = per_strategy[per_strategy["strategy"] == s]
        for axis, key in (("x", "trial"), ("x2", "elapsed_s")):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": esc(s),
                    "legendgroup": esc(s),
                    "showlegend": axis == "x",
                    "xaxis": axis,
                    "yaxis": "y",
                    "x": _xs(c[key]),
                    "y": [_num(float(v)) for v in c["best_gflops"]],
                    "text": [f"record {int(i)}" for i in c["record_id"]],
                    "line": {"shape": "hv", "color": color_of(s, strategies), "width": 2},
                    "marker": {"size": 4},
                }
            )
    for axis, key in (("x", "trial"), ("x2", "elapsed_s")):
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "session best",
                "legendgroup": "session best",
                "showlegend": axis == "x",
                "xaxis": axis,
                "yaxis": "y",
                "x": _xs(overall[key]),
                "y": [_num(float(v)) for v in overall["best_gflops"]],
                "line": {"shape": "hv", "color": "#222", "width": 1.5, "dash": "dot"},
            }
        )
    layout = {
        "height": 360,
        "margin": {"l": 55, "r": 10, "t": 30, "b": 45},
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.22},
        "xaxis": {"domain": [0, 0.48], "title": {"text": "trial"}},
        "xaxis2": {"domain": [0.52, 1], "title": {"text": "elapsed (s)"}, "anchor": "y"},
        "yaxis": {"title": {"text": f"best-so-far {unit}"}},
        "annotations": [
            {"text": "vs trial", "xref": "paper", "yref": "paper", "x": 0.24, "y": 1.06, "showarrow": False},
            {"text": "vs wall time", "xref": "paper", "yref": "paper", "x": 0.76, "y": 1.06, "showarrow": False},
        ],
    }
    return {"data": data, "layout": layout}


def overview_figure(curves: pd.DataFrame, unit: str = "GFLOPS") -> dict:
    """Every session's best-so-far throughput (``unit``) against trial, one line each."""
    data = []
    for (_db, _sid), c in curves.groupby(["db", "session_id"], sort=False):
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": esc(c["label"].iloc[0]),
                "x": [int(v) for v in c["trial"]],
                "y": [_num(float(v)) for v in c["best_gflops"]],
                "line": {"shape": "hv", "width": 2},
            }
        )
    layout = {
        "height": 380,
        "margin": {"l": 55, "r": 10, "t": 20, "b": 45},
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.2},
        "xaxis": {"title": {"text": "trial"}},
        "yaxis": {"title": {"text": f"best-so-far {unit}"}},
    }
    return {"data": data, "layout": layout}


def _figure(div_id: str, fig: dict) -> str:
    return (
        f"<div id='{esc(div_id)}' class='wb-figure'></div>"
        f"<script type='application/json' data-figure='{esc(div_id)}'>{script_json(fig)}</script>"
    )


def _environment(row: dict) -> str:
    target = row.get("target")
    items = [("target", json.dumps(target, sort_keys=True) if isinstance(target, dict) else target)]
    versions = row.get("versions")
    if isinstance(versions, dict):
        items += [(f"{k}", v) for k, v in versions.items()]
    else:
        items.append(("versions", versions))
    items.append(("preset", row.get("preset")))
    params = row.get("preset_params")
    body = "".join(f"<tr><th class='t'>{esc(k)}</th><td class='t'>{esc(v)}</td></tr>" for k, v in items)
    out = f"<table>{body}</table>"
    if params:
        out += (
            f"<details><summary>preset parameters</summary><pre>{esc(json.dumps(params, indent=1, default=str))}"
            "</pre></details>"
        )
    return out


def _session_section(store, row: dict, with_tir: bool) -> str:
    sid = int(row["id"])
    recs = store.records(session_id=sid)
    info = analysis.session_info(store.path, row, recs)
    unit = spec_rate_unit(row.get("spec"))
    strategies = row.get("strategies") if isinstance(row.get("strategies"), list) else []
    strategies = [str(s) for s in strategies]
    speedup = (
        row["naive_latency_ms"] / info["best_latency_ms"]
        if row.get("naive_latency_ms") and info["best_latency_ms"]
        else None
    )
    out = [
        f"<section id='session-{sid}'><h2>Session {sid} · {esc(row['workload'])}</h2>",
        f"<p>status <b>{esc(row['status'])}</b> · strategies {esc(info['strategy_arg'])} "
        f"({esc(', '.join(strategies))}) · seed {esc(info['seed'])} · preset {esc(info['preset'])} · cost model "
        f"{esc(info['cost_model'])} · {info['measured']} of {esc(row['trials'])} trials measured, "
        f"{info['errors']} errors" + (f", {info['what_if']} what-if" if info["what_if"] else "") + "</p>",
        f"<p>best <b>{esc(fmt(info['best_latency_ms']))} ms</b> ({esc(fmt(info['best_gflops'], '.1f'))} {unit}, "
        f"{esc(info['best_strategy'] or '—')}, record {esc(info['best_record_id'] or '—')}) · untuned "
        f"{esc(fmt(row.get('naive_latency_ms')))} ms · speedup {esc(fmt(speedup, '.1f'))}x</p>",
    ]
    if recs.empty:
        out.append("<p class='note'>No measured candidates.</p></section>")
        return "".join(out)
    per_strategy = pd.concat(
        [analysis.step_curve(g).assign(strategy=s) for s, g in recs.groupby("strategy", sort=False)],
        ignore_index=True,
    )
    overall = analysis.step_curve(recs)
    if len(overall):
        out.append(_figure(f"curve-{sid}", curve_figure(per_strategy, overall, strategies, unit)))
    else:
        out.append("<p class='note'>No verified program yet: no best-so-far curve.</p>")

    out.append("<h3>Strategies</h3>")
    table = analysis.strategy_table(recs)
    out.append(
        _table(
            table,
            [
                ("strategy", "strategy", None),
                ("trials", "trials", "d"),
                ("share", "share of trials", ".0%"),
                ("chosen_by", "chosen by", None),
                ("errors", "errors", "d"),
                ("best_latency_ms", "best ms", ".4g"),
                ("best_gflops", f"best {unit}", ".1f"),
                ("best_record_id", "record", ".0f"),
            ],
        )
    )

    out.append("<h3>Cost-model quality per round</h3>")
    quality = analysis.round_quality(recs, store.events(sid))
    if quality.empty:
        out.append("<p class='note'>No predicted scores recorded.</p>")
    else:
        out.append(
            "<p class='note'>The model's predicted scores of each round's candidates against their measured "
            "GFLOPS, before they were measured: rank correlations, the share of pairs ordered right (0.5 is a "
            "coin), and how many of the k fastest it put in its top k. Rounds with no trained model "
            "(trained on —) were ranked without learned data.</p>"
        )
        out.append(
            _table(
                quality,
                [
                    ("round", "round", "d"),
                    ("strategy", "strategy", None),
                    ("n", "candidates", "d"),
                    ("spearman", "Spearman ρ", ".2f"),
                    ("kendall", "Kendall τ", ".2f"),
                    ("pairwise", "pairwise accuracy", ".2f"),
                    ("k", "k", "d"),
                    ("topk_recall", "top-k recall", ".2f"),
                    ("trained_on", "trained on", ".0f"),
                ],
            )
        )

    if with_tir:
        out.append("<h3>Best programs</h3>")
        progs = analysis.best_programs(store, sid, recs)
        if not progs:
            out.append("<p class='note'>No verified program.</p>")
        for i, p in enumerate(progs):
            head = (
                f"{esc(p['strategy'])} · record {p['record_id']} · {esc(fmt(p['latency_ms']))} ms · "
                f"{esc(fmt(p['gflops'], '.1f'))} {unit}"
            )
            body = (
                f"<pre class='tir'>{esc(p['tir'])}</pre>"
                if p["tir"] is not None
                else f"<p class='err'>its TIR could not be rebuilt: {esc(p['error'])}</p>"
            )
            out.append(f"<details{' open' if i == 0 else ''}><summary>{head}</summary>{body}</details>")

    out.append("<h3>Environment</h3>")
    out.append(_environment(row))
    out.append("</section>")
    return "".join(out)


def render(db, session_ids=None, with_tir: bool = True) -> str:
    """The report of a store (all its sessions, or those named) as one HTML string."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise WorkbenchError("workbench report needs plotly: pip install 'tuning-workbench[lab]'") from None
    with analysis.open_stores([db]) as stores:
        store = next(iter(stores.values()))
        rows = store.sessions()
        if session_ids:
            known = {int(r["id"]) for r in rows}
            missing = [i for i in session_ids if int(i) not in known]
            if missing:
                raise WorkbenchError(
                    f"no session {', '.join(map(str, missing))} in {db!r}; it has: "
                    + (", ".join(map(str, sorted(known))) or "none")
                )
            wanted = {int(i) for i in session_ids}
            rows = [r for r in rows if int(r["id"]) in wanted]
        name = os.path.basename(store.path)
        summary = analysis.list_sessions(store.path)
        summary = summary[summary["session_id"].isin([int(r["id"]) for r in rows])]
        parts = [
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            f"<title>Tuning report · {esc(name)}</title><style>{STYLE}</style>",
            f"<script>{get_plotlyjs()}</script></head><body>",
            f"<h1>Tuning report · {esc(name)}</h1>",
            f"<p class='meta'>store {esc(store.path)} · {len(rows)} session{'s' if len(rows) != 1 else ''} · "
            f"written {esc(datetime.datetime.now().isoformat(timespec='seconds'))} by <code>workbench report</code>"
            "</p>",
            "<h2>Sessions</h2>",
        ]
        units = sorted({spec_rate_unit(r.get("spec")) for r in rows})
        unit = units[0] if len(units) == 1 else " / ".join(units)  # GOPS for integer workloads
        summary = summary.assign(
            link=summary["session_id"],
            speedup=[
                (n / b) if (n and b and not pd.isna(n) and not pd.isna(b)) else None
                for n, b in zip(summary["naive_latency_ms"], summary["best_latency_ms"])
            ],
        )
        parts.append(
            _table(
                summary,
                [
                    ("session_id", "session", "d"),
                    ("workload", "workload", None),
                    ("status", "status", None),
                    ("strategy_arg", "strategies", None),
                    ("seed", "seed", "d"),
                    ("preset", "preset", None),
                    ("cost_model", "cost model", None),
                    ("measured", "trials", "d"),
                    ("budget", "budget", "d"),
                    ("best_latency_ms", "best ms", ".4g"),
                    ("best_gflops", f"best {unit}", ".1f"),
                    ("best_strategy", "best strategy", None),
                    ("speedup", "speedup", ".1f"),
                ],
            )
        )
        if len(rows) > 1:
            curves = analysis.best_so_far([(store.path, int(r["id"])) for r in rows])
            if len(curves):
                parts.append("<h3>Best so far, all sessions</h3>")
                parts.append(_figure("overview", overview_figure(curves, unit)))
        for row in rows:
            parts.append(_session_section(store, row, with_tir))
        parts.append(f"<script>{DRAW}</script></body></html>")
    return "".join(parts)


def default_output(db) -> str:
    """``<db stem>-report.html`` next to the store."""
    path = os.path.abspath(db)
    return os.path.join(os.path.dirname(path), os.path.splitext(os.path.basename(path))[0] + "-report.html")


def write_report(db, output=None, session_ids=None, with_tir: bool = True) -> str:
    """Write the report of ``db`` to ``output`` (default ``default_output(db)``); returns the path written."""
    if os.path.isdir(db):
        raise WorkbenchError(f"{db!r} is a directory, not a records store")
    out = os.path.abspath(output or default_output(db))
    store_files = {os.path.abspath(db) + s for s in ("", "-wal", "-shm")}
    if out in store_files:
        raise WorkbenchError(f"the report would overwrite the store itself: choose another output than {output!r}")
    if not os.path.isdir(os.path.dirname(out)):
        raise WorkbenchError(f"cannot write {out!r}: directory {os.path.dirname(out)!r} does not exist")
    try:
        page = render(db, session_ids, with_tir)
    except (TypeError, ValueError) as e:  # a number column holding text: SQLite does not enforce column types
        raise WorkbenchError(f"{db!r} holds values no workbench store has ({type(e).__name__}: {e})") from None
    tmp = out + ".part"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise WorkbenchError(f"cannot write {out!r}: {e.strerror or e}") from None
    return out
