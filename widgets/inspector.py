"""One measured candidate in detail: its TIR, its trace and sampled decisions, its diff to the best, its error;
and what-if: its decisions edited and the variant measured by the session (``TuningSession.measure``)."""

from __future__ import annotations

import difflib
import html
import threading
from collections import OrderedDict

import ipywidgets as W

from workbench import space
from workbench.dtypes import spec_rate_unit
from workbench.errors import WorkbenchError
from workbench.program import intrinsics_line, tensor_intrinsics
from workbench.workloads import workload_from_spec

from .common import build_note, fmt, noise_note, pre


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


def _esc(v) -> str:
    return html.escape(str(v))


def edit_fields(decisions) -> list[dict]:
    """One editable field per decision: a dropdown of its candidates for a categorical decision, a text field
    otherwise (tile factors as "1, 4, 16, 2", a compute location as a number)."""
    out = []
    for i, d in enumerate(decisions):
        field = {"index": i, "kind": d.kind, "attrs": d.attrs, "setting": d.setting}
        if d.choices is not None:
            field.update(widget="dropdown", options=list(d.choices))
        else:
            field.update(widget="text", text=_setting_text(d.setting))
        if d.extent is not None:
            field["extent"] = d.extent
        out.append(field)
    return out


def _setting_text(setting) -> str:
    return ", ".join(str(x) for x in setting) if isinstance(setting, list) else str(setting)


def parse_setting(decision, entered):
    """What a field holds as the setting ``space.edit_decisions`` takes; ``ValueError`` with one line if it is
    not even of the right form (whether the value is allowed is the engine's check)."""
    if decision.choices is not None or not isinstance(entered, str):
        return entered
    text = entered.strip().strip("[]()")
    try:
        if decision.kind == "SamplePerfectTile":
            return [int(x) for x in text.replace(",", " ").split()]
        return int(text)
    except ValueError:
        form = "integers separated by commas" if decision.kind == "SamplePerfectTile" else "an integer"
        raise ValueError(f"{entered!r} is not {form}") from None


def edits_from(decisions, entered: dict) -> dict:
    """{decision index: new setting} for the fields whose value differs from the candidate's; a field that does
    not parse raises ``space.InvalidEdit`` (one message per field)."""
    edits, problems = {}, []
    for i, value in entered.items():
        d = decisions[i]
        try:
            setting = parse_setting(d, value)
        except ValueError as e:
            problems.append(f"decision {i} ({d.kind}): {e}")
            continue
        if setting != d.setting:
            edits[i] = setting
    if problems:
        raise space.InvalidEdit(problems)
    return edits


def variant_html(new: dict, base: dict | None, unit: str = "GFLOPS") -> str:
    """The result line of a measured variant: latency, throughput (in ``unit``) and verified, or its error;
    against the candidate it was made from."""
    head = f"<b>record {_esc(new.get('id'))}</b> (chosen by {_esc(new.get('chosen_by'))}): "
    if new.get("error_class"):
        return (
            head
            + f"<b style='color:#c00'>{_esc(new['error_class'])}</b> "
            + f"<span style='color:#a00'>{_esc(new.get('error_msg') or '')}</span>"
        )
    line = head + f"{fmt(new.get('latency_ms'), '.4f')} ms · {fmt(new.get('gflops'), '.1f')} {_esc(unit)}"
    line += " · verified" if new.get("verified") else " · <b style='color:#c00'>not verified</b>"
    b = (base or {}).get("latency_ms")
    if isinstance(b, (int, float)) and isinstance(new.get("latency_ms"), (int, float)) and new["latency_ms"] > 0:
        line += f" · {fmt(b / new['latency_ms'], '.2f')}× the speed of trial {_esc(base.get('trial'))}"
    if new.get("is_best"):
        line += " · <b style='color:#2b8a3e'>new best</b>"
    return line


def error_html(e: BaseException) -> str:
    problems = getattr(e, "problems", None) or [str(e)]
    items = "".join(f"<li>{_esc(p)}</li>" for p in problems)
    return f"<b style='color:#c00'>not measured:</b><ul style='margin:2px 0'>{items}</ul>"


class WhatIfEditor:
    """The decisions of the shown candidate as fields; "Measure this variant" has the session measure the edited
    program in a thread of its own (``session.edit_decisions`` then ``session.measure``: thread-safe, and the
    session waits for its own candidate in flight), so the kernel's UI thread never waits for a build or a
    timing. The new record reaches the views as every record does, through the session's events;
    ``on_measured(record)`` asks for a redraw, ``on_select(record_id)`` opens it."""

    def __init__(self, session_of=None, on_measured=None, on_select=None):
        self.session_of = session_of or (lambda: None)
        self.on_measured = on_measured
        self.on_select = on_select
        self.note = W.HTML()
        self.rows = W.VBox()
        self.button = W.Button(description="Measure this variant", disabled=True, layout=W.Layout(width="190px"))
        self.open_new = W.Button(description="Inspect the new record", layout=W.Layout(width="190px", display="none"))
        self.result = W.HTML()
        self.widget = W.VBox([self.note, self.rows, W.HBox([self.button, self.open_new]), self.result])
        self.widget.add_class("wb-whatif")  # stable hooks for browser tests
        self.button.on_click(lambda _b: self.measure())
        self.open_new.on_click(lambda _b: self._open_new())
        self.record = None
        self.decisions: list = []
        self.inputs: dict = {}  # decision index -> its field widget
        self.new_record = None
        self.thread: threading.Thread | None = None

    def _session(self):
        s = self.session_of()
        if s is None or getattr(s, "replay", False) or not hasattr(s, "measure"):
            return None
        return s

    def load(self, record: dict, decisions: list) -> None:
        """Fields for ``record``'s decisions (none when there is no session that can measure)."""
        self.record, self.decisions = record, list(decisions)
        self.open_new.layout.display = "none"
        self.result.value = ""
        old = list(self.rows.children)
        self.inputs = {}
        if self._session() is None or not decisions:
            self.note.value = (
                "<i>What-if edits need the session that tuned this workload (a replay or a stored record alone "
                "cannot measure).</i>"
                if decisions
                else ""
            )
            self.rows.children = []
            self.button.disabled = True
        else:
            self.note.value = (
                "<b>What if?</b> Change a decision and measure the variant: tile factors must multiply to the "
                "loop's extent, a choice comes from its list. The variant is built, timed, verified and stored as "
                "a record chosen by <i>user</i>; it spends none of the session's budget."
            )
            rows = []
            for f in edit_fields(decisions):
                label = W.HTML(
                    f"<code>{f['index']}</code> {_esc(f['kind'])} <span style='color:#666'>({_esc(f['attrs'][:60])}"
                    + (f"; extent {_esc(f['extent'])}" if "extent" in f else "")
                    + ")</span>",
                    layout=W.Layout(width="480px"),
                )
                if f["widget"] == "dropdown":
                    field = W.Dropdown(options=[(str(c), c) for c in f["options"]], value=f["setting"])
                else:
                    field = W.Text(value=f["text"])
                field.layout = W.Layout(width="180px")
                self.inputs[f["index"]] = field
                rows.append(W.HBox([label, field]))
            self.rows.children = rows
            self.button.disabled = self.thread is not None and self.thread.is_alive()
        for w in old:
            w.close()

    def entered(self) -> dict:
        return {i: w.value for i, w in self.inputs.items()}

    def measure(self) -> threading.Thread | None:
        """The button: check the fields, then measure in a thread (returned; None when nothing was started)."""
        session, record = self._session(), self.record
        if session is None or record is None:
            return None
        if self.thread is not None and self.thread.is_alive():
            self.result.value = "<i>a variant is being measured; wait for its result</i>"
            return None
        try:
            edits = edits_from(self.decisions, self.entered())
        except space.InvalidEdit as e:
            self.result.value = error_html(e)
            return None
        if not edits:
            self.result.value = "<i>change a decision first: every field holds this candidate's value</i>"
            return None
        self.button.disabled = True
        self.open_new.layout.display = "none"
        changed = ", ".join(f"{i} → {_setting_text(v)}" for i, v in sorted(edits.items()))
        self.result.value = f"<i>building, timing and verifying the variant ({_esc(changed)})…</i>"
        self.thread = threading.Thread(
            target=self._run, args=(session, record, edits), name="workbench-what-if", daemon=True
        )
        self.thread.start()
        return self.thread

    def _run(self, session, record: dict, edits: dict) -> None:
        try:
            trace = session.edit_decisions(record["id"], edits)
            new = session.measure(trace, strategy=record["strategy"])
        except WorkbenchError as e:
            self.result.value = error_html(e)
        except Exception as e:  # noqa: BLE001 - a bug must still show, not vanish in a thread
            self.result.value = error_html(RuntimeError(f"{type(e).__name__}: {e}"))
        else:
            self.new_record = new
            unit = spec_rate_unit(getattr(session, "workload_spec", None))
            self.result.value = variant_html(new, record, unit)
            self.open_new.description = f"Inspect record {new['id']}"
            self.open_new.layout.display = None
            if self.on_measured is not None:
                self.on_measured(new)
        finally:
            self.button.disabled = False

    def _open_new(self) -> None:
        if self.new_record is not None and self.on_select is not None:
            self.on_select(self.new_record["id"])


class CandidateInspector:
    """``show(record_id)`` loads the record from the store and fills four tabs.

    ``store_of()`` returns a read-only ``RecordStore`` and ``model`` gives the
    session's spec and current best; the inspector reads, it never writes. With
    ``session_of()`` (the live session, or None), the decisions become editable
    and the session measures and stores a variant (``WhatIfEditor``);
    ``on_measured(record)`` is called once it is stored (e.g. to ask for a redraw).
    """

    TABS = ("TIR", "trace & decisions", "diff vs best", "error")

    def __init__(self, model, store_of, cache_size: int = 32, session_of=None, on_measured=None):
        self.model = model
        self.store_of = store_of
        self.header = W.HTML("<i>click a point in a plot, or enter a trial number</i>")
        self.trial = W.BoundedIntText(value=1, min=0, max=10**7, description="trial", layout=W.Layout(width="160px"))
        self.go = W.Button(description="Inspect", layout=W.Layout(width="90px"))
        self.panes = [W.HTML() for _ in self.TABS]
        self.what_if = WhatIfEditor(session_of, on_measured, on_select=self._show_new)
        tab_children = list(self.panes)
        tab_children[1] = W.VBox([self.what_if.widget, self.panes[1]])
        self.tabs = W.Tab(children=tab_children, titles=self.TABS)
        self.widget = W.VBox([W.HBox([self.trial, self.go, self.header]), self.tabs])
        self.widget.add_class("wb-inspector")
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
        out = {"record": rec, "tir": None, "trace": None, "decisions": [], "replay_error": None, "intrinsics": []}
        try:
            sch = space.schedule_from_trace_json(workload_from_spec(self.model.spec), rec["trace"])
            out["tir"] = sch.mod.script()
            out["intrinsics"] = tensor_intrinsics(sch)
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
                    else f"{fmt(live['latency_ms'], '.4f')} ms · {fmt(live['gflops'], '.1f')} {spec_rate_unit(self.model.spec)}"
                    + (" · verified" if rec["verified"] else "")
                )
                if live.get("noisy"):
                    status += f" · <span style='color:#e67700'>{html.escape(noise_note(live))}</span>"
                self.header.value = (
                    f"<b>trial {_esc(rec['trial'])}</b> (record {_esc(rec['id'])}) · round {_esc(rec['round'])} · "
                    f"{_esc(rec['strategy'])} chosen by {_esc(rec['chosen_by'])} · "
                    f"{status} · predicted {fmt(rec['predicted_score'], '.3f')}" + build_note(rec)
                )
                if isinstance(rec["trial"], int) and rec["trial"] >= 0:
                    self.trial.value = rec["trial"]
                if p["replay_error"]:
                    self.panes[0].value = pre("the stored trace does not replay:\n" + p["replay_error"])
                    self.panes[1].value = pre(rec["trace"][:4000])
                    self.what_if.load(rec, [])
                else:
                    used = (
                        f"<div><b>tensor intrinsics:</b> {html.escape(intrinsics_line(p['intrinsics']))}</div>"
                        if p["intrinsics"]
                        else ""
                    )
                    self.panes[0].value = used + pre(p["tir"])
                    self.panes[1].value = self._decisions_html(p["decisions"]) + pre(p["trace"])
                    self.what_if.load(rec, p["decisions"])
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

    def _show_new(self, record_id: int) -> None:
        self.show(record_id)
        self.tabs.selected_index = 1

    @staticmethod
    def _decisions_html(decisions) -> str:
        rows = "".join(
            f"<tr><td>{i}</td><td>{html.escape(d.kind)}</td><td>{html.escape(d.attrs)}</td>"
            f"<td><b>{html.escape(str(d.value))}</b>"
            + (f" (→ {html.escape(str(d.setting))})" if d.setting != d.value else "")
            + "</td></tr>"
            for i, d in enumerate(decisions)
        )
        return (
            "<table style='font-size:12px;margin-bottom:6px'><tr><th>#</th><th>sampling instruction</th>"
            f"<th>attributes</th><th>decision</th></tr>{rows}</table>"
        )
