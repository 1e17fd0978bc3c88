"""Helpers shared by the views."""

from __future__ import annotations

import html
import math

from workbench.layouts import STRATEGY_INDEX

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
KNOWN = list(STRATEGY_INDEX)  # the registry's order, stable across sessions: stable colours


def color_of(strategy: str, strategies: list[str]) -> str:
    order = KNOWN + [s for s in strategies if s not in KNOWN]
    return PALETTE[order.index(strategy) % len(PALETTE)] if strategy in order else PALETTE[-1]


def esc(v) -> str:
    """Any value as text safe to put into HTML, an HTML attribute or a plotly label (which renders a subset of
    HTML): everything a view shows from a store or an event goes through this (or ``fmt``), numbers included, since
    a crafted store can hold text in any column."""
    return html.escape(str(v))


def label(v) -> str:
    """Any value as text for a plotly label (hover text, legend name, annotation): plotly renders a subset of HTML
    there and decodes only some entities (``&lt;``, ``&gt;``, ``&amp;``, numeric ones; not ``&quot;``), so only
    ``<``, ``>`` and ``&`` are escaped."""
    return html.escape(str(v), quote=False)


def fmt(v, spec: str = ".3g", none: str = "—") -> str:
    """A number formatted with ``spec``; ``none`` for a missing or non-finite one; anything that is not a number
    (a crafted store) as escaped text."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return none
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return esc(v)


def candidate_text(rec: dict, unit: str = "GFLOPS") -> str:
    """Hover text of a measured candidate (plotly hover labels take <br> line breaks); every stored value escaped.
    ``unit``: the workload's throughput unit (``workbench.dtypes.spec_rate_unit``: GOPS for an int8 workload)."""
    head = (
        f"trial {label(rec.get('trial'))} · round {label(rec.get('round'))} · {label(rec.get('strategy'))} "
        f"({label(rec.get('chosen_by'))})"
    )
    if rec.get("error_class"):
        body = f"error: {label(rec['error_class'])}"
    else:
        body = f"{fmt(rec.get('latency_ms'), '.4f')} ms · {fmt(rec.get('gflops'), '.1f')} {label(unit)}"
    pred = f"predicted {fmt(rec.get('predicted_score'), '.3f')}"
    if isinstance(rec.get("cv"), (int, float)):
        pred += f" · cv {fmt(rec['cv'] * 100, '.1f')} %"
    pred += build_note(rec)
    if rec.get("remeasured_samples"):
        pred += f" · re-measured ({label(rec['remeasured_samples'])} samples)"
    if rec.get("noisy"):
        pred += f"<br>{label(noise_note(rec))}"
    dec = str(rec.get("decisions") or "")
    if len(dec) > 120:
        dec = dec[:117] + "..."
    return f"{head}<br>{body} · {pred}<br>{label(dec)}"


def build_note(rec: dict) -> str:
    """`` · built in X s`` for a record whose compile time is known (``build_s``), else nothing."""
    b = rec.get("build_s")
    return f" · built in {fmt(b, '.2f')} s" if isinstance(b, (int, float)) and math.isfinite(b) else ""


def noise_note(rec: dict) -> str:
    """Why a record counts as noisy, in words (for a hover text); plain text, to be escaped by the caller."""
    n = rec.get("noise") if isinstance(rec.get("noise"), dict) else {}
    bits = []
    if n.get("wait_fraction") is not None:
        bits.append(f"its threads waited {fmt(n['wait_fraction'], '.0%')} of the time")
    if n.get("other_cores") is not None:
        busiest = [b for b in n.get("busiest") or [] if isinstance(b, dict)]
        most = f" (most: {busiest[0].get('name')} {fmt(busiest[0].get('cores'), '.2f')})" if busiest else ""
        bits.append(f"other threads {fmt(n['other_cores'], '.2f')} cores{most}")
    if rec.get("noisy_reason"):
        bits.append(str(rec["noisy_reason"]))
    return "NOISY timing" + (f": {', '.join(bits)}" if bits else "")


def pre(text: str, style: str = "") -> str:
    return (
        f"<pre style='font-size:12px;line-height:1.3;max-height:480px;overflow:auto;margin:0;{style}'>"
        f"{html.escape(text)}</pre>"
    )
