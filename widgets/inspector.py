"""One measured candidate in detail: its TIR, its trace and sampled decisions, its diff to the best, its error."""

from __future__ import annotations

import difflib
import html
import threading
from collections import OrderedDict

import ipywidgets as W

from workbench import space
from workbench.workloads import workload_from_spec

from .common import fmt, noise_note, pre


def diff_html(old: str, new: str, old_name: str, new_name: str) -> str:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, lineterm="", n=2))
    if not lines:
        return "<i>identical to the current best</i>"
    out = []
    for ln in lines:
        bg = (
            "#e6ffec"
            if ln.startswith("+")
            else "#ffebe9"
            if ln.startswith("-")
            else "#ddf4ff"
            if ln.startswith("@@")
            else "transparent"
        )
        out.append(f"<span style='background:{bg}'>{html.escape(ln)}</span>")
    return (
        "<pre style='font-size:12px;line-height:1.3;max-height:480px;overflow:auto;margin:0'>"
        + "\n".join(out)
        + "</pre>"
    )


class CandidateInspector:
    """``show(record_id)`` loads the record from the store and fills four tabs.

    ``store_of()`` returns a read-only ``RecordStore`` and ``model`` gives the
    session's spec and current best; the inspector reads, it never writes.
    """

    TABS = ("TIR", "trace & decisions", "diff vs best", "error")

    def __init__(self, model, store_of, cache_size: int = 32):
        self.model = model
        self.store_of = store_of
        self.header = W.HTML("<i>click a point in a plot, or enter a trial number</i>")
        self.trial = W.BoundedIntText(value=1, min=1, max=10**7, description="trial", layout=W.Layout(width="160px"))
        self.go = W.Button(description="Inspect", layout=W.Layout(width="90px"))
        self.panes = [W.HTML() for _ in self.TABS]
        self.tabs = W.Tab(children=self.panes, titles=self.TABS)
        self.widget = W.VBox([W.HBox([self.trial, self.go, self.header]), self.tabs])
        self.go.on_click(lambda _b: self.show_trial(self.trial.value))
        self.record_id = None
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _program(self, record_id: int) -> dict:
        """TIR, python trace and decisions of a stored record (cached: replaying a trace costs ~0.1-1 s)."""
        if record_id in self._cache:
            self._cache.move_to_end(record_id)
            return self._cache[record_id]
        rec = self.store_of().record(record_id)
        out = {"record": rec, "tir": None, "trace": None, "decisions": [], "replay_error": None}
        try:
            sch = space.schedule_from_trace_json(workload_from_spec(self.model.spec), rec["trace"])
            out["tir"] = sch.mod.script()
            out["trace"] = str(sch.trace)
            out["decisions"] = space.decisions_of(sch.trace)
        except Exception as e:  # a stored trace that no longer replays is itself worth showing
            out["replay_error"] = f"{type(e).__name__}: {e}"
        self._cache[record_id] = out
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return out

    def show_trial(self, trial: int) -> None:
        rec = self.model.record_by_trial(trial)
        if rec is None:
            self.header.value = f"<span style='color:#c00'>no measured trial {trial} yet</span>"
            return
        self.show(rec["id"])

    def show(self, record_id: int) -> None:
        with self._lock:
            self.record_id = record_id
            p = self._program(record_id)
            rec = p["record"]
            # the model's copy is current: a re-measured best's latency, a record marked noisy after its round
            live = {
                **rec,
                **{
                    k: v
                    for k, v in (self.model.by_id.get(record_id) or {}).items()
                    if k in ("latency_ms", "gflops", "noisy", "noisy_reason", "cv")
                },
            }
            best = self.model.best
            with self.widget.hold_sync():
                status = (
                    f"<b style='color:#c00'>{html.escape(str(rec['error_class']))}</b>"
                    if rec["error_class"]
                    else f"{fmt(live['latency_ms'], '.4f')} ms · {fmt(live['gflops'], '.1f')} GFLOPS"
                    + (" · verified" if rec["verified"] else "")
                )
                if live.get("noisy"):
                    status += f" · <span style='color:#e67700'>{html.escape(noise_note(live))}</span>"
                self.header.value = (
                    f"<b>trial {rec['trial']}</b> (record {rec['id']}) · round {rec['round']} · "
                    f"{html.escape(rec['strategy'])} chosen by {html.escape(rec['chosen_by'])} · "
                    f"{status} · predicted {fmt(rec['predicted_score'], '.3f')}"
                )
                self.trial.value = rec["trial"]
                if p["replay_error"]:
                    self.panes[0].value = pre("the stored trace does not replay:\n" + p["replay_error"])
                    self.panes[1].value = pre(rec["trace"][:4000])
                else:
                    self.panes[0].value = pre(p["tir"])
                    self.panes[1].value = self._decisions_html(p["decisions"]) + pre(p["trace"])
                if best is None:
                    self.panes[2].value = "<i>no verified best yet</i>"
                elif best["id"] == record_id:
                    self.panes[2].value = "<i>this candidate is the current best</i>"
                else:
                    b = self._program(best["id"])
                    self.panes[2].value = diff_html(
                        b["tir"] or "", p["tir"] or "", f"best (trial {best['trial']})", f"trial {rec['trial']}"
                    )
                self.panes[3].value = (
                    pre(f"{rec['error_class']}\n\n{rec['error_msg'] or ''}", "color:#a00")
                    if rec["error_class"]
                    else "<i>no error: this candidate built, ran and "
                    + ("was verified</i>" if rec["verified"] else "was timed</i>")
                )
                if rec["error_class"]:
                    self.tabs.selected_index = 3

    @staticmethod
    def _decisions_html(decisions) -> str:
        rows = "".join(
            f"<tr><td>{i}</td><td>{html.escape(d.kind)}</td><td>{html.escape(d.attrs)}</td>"
            f"<td><b>{html.escape(str(d.value))}</b></td></tr>"
            for i, d in enumerate(decisions)
        )
        return (
            "<table style='font-size:12px;margin-bottom:6px'><tr><th>#</th><th>sampling instruction</th>"
            f"<th>attributes</th><th>decision</th></tr>{rows}</table>"
        )
