"""Start/Pause/Resume/Stop, budget, preset, strategy mode, the controller's scores, status, progress and ETA."""

from __future__ import annotations

import ipywidgets as W

from workbench.dtypes import spec_rate_unit
from workbench.layouts import STRATEGIES
from workbench.presets import PRESETS

from .common import esc, fmt
from .model import CONTROLLER, STATUS

STRATEGY_SETS = ["auto", "all", *STRATEGIES]


class ControlsView:
    """Buttons call ``actions`` (the Dashboard); the display is redrawn only by ``refresh`` (the pump)."""

    def __init__(
        self, actions, trials: int = 64, preset: str = "quick", strategy: str = "auto", can_configure: bool = True
    ):
        self.actions = actions
        b = dict(layout=W.Layout(width="86px"))
        self.start = W.Button(description="Start", button_style="success", icon="play", **b)
        self.pause = W.Button(description="Pause", icon="pause", disabled=True, **b)
        self.resume = W.Button(description="Resume", icon="play", disabled=True, **b)
        self.stop = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True, **b)
        self.trials = W.BoundedIntText(
            value=trials,
            min=1,
            max=1_000_000,
            description="trials",
            disabled=not can_configure,
            layout=W.Layout(width="150px"),
        )
        self.preset = W.Dropdown(
            options=list(PRESETS),
            value=preset,
            description="preset",
            disabled=not can_configure,
            layout=W.Layout(width="170px"),
        )
        self.strategy_set = W.Dropdown(
            options=STRATEGY_SETS if strategy in STRATEGY_SETS else STRATEGY_SETS + [strategy],
            value=strategy,
            description="strategies",
            disabled=not can_configure,
            layout=W.Layout(width="230px"),
        )
        self.mode = W.ToggleButtons(
            options=["auto", "manual"],
            value="auto",
            disabled=True,
            tooltips=["the controller chooses each round", "you choose the strategy"],
            style={"button_width": "70px"},
        )
        self.pick = W.Dropdown(options=[], description="pick", disabled=True, layout=W.Layout(width="230px"))
        self.status = W.HTML("<b>idle</b>")
        self.status.add_class("wb-status")  # a stable hook for browser tests
        self.progress = W.IntProgress(value=0, min=0, max=max(1, trials), layout=W.Layout(width="260px"))
        self.eta = W.HTML("", layout=W.Layout(min_width="180px"))
        self.arms = W.HTML("")
        self.widget = W.VBox(
            [
                W.HBox([self.start, self.pause, self.resume, self.stop, self.trials, self.preset, self.strategy_set]),
                W.HBox([W.HTML("<b>strategy mode</b>&nbsp;"), self.mode, self.pick]),
                W.HBox([self.status, self.progress, self.eta]),
                self.arms,
            ]
        )
        self.start.on_click(lambda _b: actions.start())
        self.pause.on_click(lambda _b: actions.pause())
        self.resume.on_click(lambda _b: actions.resume())
        self.stop.on_click(lambda _b: actions.stop())
        self.mode.observe(self._mode_changed, names="value")
        self.pick.observe(self._pick_changed, names="value")
        self._syncing = False  # set while refresh() writes mode/pick, so observers do not echo to the controller

    def _mode_changed(self, change) -> None:
        if self._syncing:
            return
        if change["new"] == "manual" and self.pick.value:
            self.actions.pick(self.pick.value)
        elif change["new"] == "auto":
            self.actions.auto()

    def _pick_changed(self, change) -> None:
        if not self._syncing and self.mode.value == "manual" and change["new"]:
            self.actions.pick(change["new"])

    def refresh(self, model, changes: set, session=None, request: str | None = None, held: bool = False) -> None:
        """Redraw the controls. ``held``: the session is timing kernels and the other views wait (the model lags
        behind)."""
        if not changes & {STATUS, CONTROLLER, "ui"}:
            return
        status = model.status
        if session is not None and session.status == "created" and not model.n_events:
            status = "ready"
        # a stored session (Dashboard.open) is only shown: nothing to start, pause or stop from here
        read_only = bool(getattr(session, "read_only", False))
        running = (
            session is not None
            and not read_only
            and not model.terminal
            and (model.n_events > 0 or session.status in ("running", "paused"))
        )
        paused = bool(session is not None and session.paused)
        ctrl = session.controller if session is not None else None
        with self.widget.hold_sync():
            ended_for_good = model.terminal and getattr(self.actions, "session_factory", None) is None
            self.start.disabled = running or ended_for_good or read_only
            self.pause.disabled = not running or paused
            self.resume.disabled = not running or not paused
            self.stop.disabled = not running
            total = model.trials or self.trials.value
            self.progress.max = max(1, total)
            self.progress.value = min(model.trials_done, self.progress.max)
            eta = model.eta_seconds()
            self.eta.value = (
                f"<span style='white-space:nowrap'>{esc(model.trials_done)}/{esc(total)} trials · "
                f"{'ETA ~' + fmt(eta, '.0f') + ' s' if eta is not None else 'ETA —'}</span>"
            )
            self.status.value = self._status_html(model, status, paused, request, session, held)
            self._syncing = True
            try:
                if list(self.pick.options) != list(model.strategies):
                    self.pick.options = list(model.strategies)
                if self.pick.value is None and model.strategies:
                    self.pick.value = model.strategies[0]
                steerable = ctrl is not None and running and len(model.strategies) > 1
                self.mode.disabled = not steerable
                self.pick.disabled = not steerable or self.mode.value != "manual"
                if ctrl is not None:
                    self.mode.value = "manual" if ctrl.mode == "manual" else "auto"
            finally:
                self._syncing = False
            self.arms.value = self._arms_html(model, ctrl)

    @staticmethod
    def _status_html(model, status, paused, request, session, held: bool = False) -> str:
        colors = {
            "running": "#2b8a3e",
            "paused": "#e67700",
            "finished": "#1864ab",
            "stopped": "#5c5f66",
            "failed": "#c92a2a",
            "interrupted": "#c92a2a",
        }
        shown = status
        if request == "pause" and status == "running":
            shown = "pausing (after the current candidate)"
        elif request == "stop" and not model.terminal:
            shown = "stopping (after the current candidate)"
        best = model.best
        parts = [f"<b style='color:{colors.get(status, '#333')}'>{esc(shown)}</b>"]
        if model.workload:
            parts.append(esc(model.workload))
        if session is not None and session.replay:
            parts.append("replay")
        if status == "interrupted":
            parts.append(
                "its process ended without finishing it (a kernel restart, a kill); "
                "<i>Resume session</i> in <code>Dashboard.open(db)</code> continues it"
            )
        writer = getattr(session, "writer_pid", None) if session is not None else None
        if writer is not None and not model.terminal:
            parts.append(f"tuned by another process (pid {esc(writer)})")
        if best:
            parts.append(
                f"best {fmt(best['gflops'], '.1f')} {spec_rate_unit(model.spec)} ({fmt(best['latency_ms'], '.4f')} ms, "
                f"{esc(best['strategy'])})"
            )
        naive, best_ms = model.naive_latency_ms, best and best.get("latency_ms")
        if isinstance(naive, (int, float)) and isinstance(best_ms, (int, float)) and naive and best_ms:
            parts.append(f"{naive / best_ms:.1f}× vs naive")
        if model.prior:
            parts.append(
                f"<span class='wb-prior' title='{esc(model.prior)}'>cost model "
                f"{esc(model.cost_model)} + shipped prior</span>"
            )
        elif model.cost_model and model.cost_model != "pack-sum":
            parts.append(f"cost model {esc(model.cost_model)}")
        if model.runners:
            parts.append(ControlsView._runners_html(model.runners))
        noise = ControlsView._noise_html(model)
        if noise:
            parts.append(noise)
        if held:
            parts.append("<span style='color:#5c5f66'>timing kernels: the plots catch up afterwards</span>")
        if model.message:
            parts.append(f"<span style='color:#c92a2a'>{esc(model.message)}</span>")
        return " · ".join(parts) + "&nbsp;&nbsp;"

    @staticmethod
    def _noise_html(model) -> str:
        """The measurement-noise indicator: quiet / waiting for a quiet machine (and who is busy) / marking, the
        probe's drift, and how many records are noisy. Empty for a session that said nothing about noise."""
        n = model.noise
        n_noisy = model.n_noisy
        if n["probe_ms"] is None and not n["events"] and not n_noisy and not n["waiting"]:
            return ""
        green, amber, red = "#2b8a3e", "#e67700", "#c92a2a"
        probe = f"probe {n['drift'] * 100:+.0f} %" if isinstance(n["drift"], (int, float)) else None
        if n["waiting"]:
            w = n["waiting_for"] or {}
            who = ", ".join(
                f"{p.get('name')} (pid {p.get('pid')}) {fmt(p.get('cores'), '.2f')} cores"
                for p in w.get("processes") or []
            )
            if not who and w.get("other_cores") is not None:
                who = f"other processes {fmt(w.get('other_cores'), '.2f')} cores"
            text, color = "timing: waiting for a quiet machine" + (f" — {who}" if who else ""), amber
        elif n["marking"]:
            text, color = "timing: machine busy, timings marked noisy", red
        elif n["level"] == "disturbed":
            text, color = "timing: disturbed" + (f" ({probe})" if probe else ""), amber
        elif n["level"] == "drift":
            text, color = f"timing: machine slower than at the start ({probe or 'probe'})", amber
        elif n["source"] == "probe" and n["state"] == "unavailable":
            text, color = "timing: checked per measurement (no calibration probe)", "#5c5f66"
        else:
            text, color = "timing: quiet" + (f" ({probe})" if probe else ""), green
        out = f"<span class='wb-noise' style='color:{color}' title='{esc(n['line'] or text)}'>{esc(text)}</span>"
        if n_noisy:
            out += f" · <span class='wb-noisy' style='color:{amber}'>{n_noisy} noisy</span>"
        if n["line"] and not n["waiting"]:
            line = n["line"] if len(n["line"]) <= 140 else n["line"][:137] + "..."
            out += f" <span style='color:#868e96;font-size:11px'>({esc(line)})</span>"
        return out

    @staticmethod
    def _runners_html(runners: dict) -> str:
        # A lost or timing-out server is what a person watching an RPC session needs to notice.
        colors = {"busy": "#2b8a3e", "idle": "#5c5f66", "timeout": "#e67700", "lost": "#c92a2a"}
        out = []
        for name, h in sorted(runners.items()):
            st = h.get("state", "?")
            out.append(
                f"<span class='wb-runner' style='color:{colors.get(st, '#333')}'>{esc(name)} "
                f"{esc(st)} ({esc(h.get('measured', 0))} measured, {esc(h.get('errors', 0))} errors, "
                f"{esc(h.get('timeouts', 0))} timeouts)</span>"
            )
        return "runners: " + ", ".join(out)

    @staticmethod
    def _arms_html(model, ctrl) -> str:
        c = model.controller
        if not model.strategies:
            return ""
        scores = dict(c.get("scores") or {})
        arms = c.get("arms") or {}
        mode = ctrl.mode if ctrl is not None else (c.get("mode") or model.mode)
        rows = []
        for s in model.strategies:
            a = arms.get(s, {})
            sc = scores.get(s)
            flag = " (pruned)" if a.get("pruned") else " (exhausted)" if a.get("exhausted") else ""
            # trials measured in this layout for other strategies' rounds (preset pair_layouts)
            paired = f" ({esc(a['paired'])} paired)" if a.get("paired") else ""
            rows.append(
                f"<tr><td>{esc(s)}{flag}</td><td>{fmt(sc, '.3f', 'warm-up' if s in scores else '—')}</td>"
                f"<td>{esc(a.get('rounds', '—'))}</td><td>{esc(a.get('trials', '—'))}{paired}</td>"
                f"<td>{fmt(a.get('best_ms'), '.4f')}</td></tr>"
            )
        last = ""
        if c.get("strategy"):
            last = (
                f"round {esc(c.get('round'))}: <b>{esc(c['strategy'])}</b> chosen by "
                f"{esc(c.get('chosen_by'))} — {esc(c.get('reason') or '')}"
            )
        return (
            f"<div style='font-size:12px'>controller mode <b>{esc(mode)}</b> · {last}"
            "<table style='font-size:12px'><tr><th>strategy</th><th>score</th><th>rounds</th><th>trials</th>"
            f"<th>best ms</th></tr>{''.join(rows)}</table></div>"
        )
