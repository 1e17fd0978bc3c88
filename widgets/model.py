"""What the views know about a session, built only from its events.

``SessionModel.apply(event)`` folds one ``workbench.events.Event`` into plain
Python state; it never touches a widget, so the pump can apply a whole burst of
events and then redraw once. ``take_changes()`` tells the pump which aspects
changed since the last redraw.
"""

from __future__ import annotations

from workbench.events import TERMINAL_KINDS, EventKind
from workbench.noise import NoisePolicy, describe

DRIFT_LIMIT = NoisePolicy.max_probe_drift  # a probe slower than baseline x (1 + this) means a changed machine

# "interrupted": a stored session whose process died while it ran (workbench.store.effective_status)
TERMINAL = tuple(k.value for k in TERMINAL_KINDS) + ("interrupted",)

# Aspects a view can depend on.
SESSION, RECORDS, STATUS, CONTROLLER = "session", "records", "status", "controller"


def noise_line(data: dict) -> str:
    """``workbench.noise.describe`` of a measurement_noise event, or what is known when its fields are not all there."""
    try:
        return describe(data)
    except (KeyError, TypeError, ValueError):  # an event from another version of the engine
        return f"{data.get('source')}: {data.get('state')}"


class SessionModel:
    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.session_id = None
        self.workload = None
        self.spec = None
        self.flops = None
        self.trials = None
        self.preset = None
        self.cost_model = None  # the session's cost model (cost_model.COST_MODELS name)
        self.prior = None  # what its shipped prior was trained on, when it starts from one
        self.strategies: list[str] = []
        self.mode = None
        self.db = None
        self.status = "idle"
        self.message = ""
        self.naive_latency_ms = None
        self.records: list[dict] = []
        self.by_id: dict[int, dict] = {}
        self.best = None  # fastest verified record overall
        self.best_by_strategy: dict[str, dict] = {}
        # per strategy: the records that improved the strategy's best, in order (the exact step curve)
        self.best_steps: dict[str, list[dict]] = {}
        self.last_by_strategy: dict[str, dict] = {}
        self.rounds: dict[int, dict] = {}
        self.controller: dict = {}
        self.trials_done = 0
        self.elapsed = 0.0
        self.first_measured = None  # (elapsed, trials_done) at the first measurement
        self.n_events = 0
        self.runners: dict[str, dict] = {}  # RPC measurement servers: the latest health of each
        self.noise = self._quiet_noise()  # what the session said about measurement noise (see _noise_event)
        self._seen_ids: set = set()
        self._changes: set = {SESSION, RECORDS, STATUS, CONTROLLER}

    @staticmethod
    def _quiet_noise() -> dict:
        return {
            "probe_ms": None,
            "baseline_ms": None,
            "drift": None,
            "when": None,  # the latest calibration
            "events": 0,  # measurement_noise events so far
            "line": "",  # the latest of them, in words (workbench.noise.describe)
            "source": None,
            "state": None,  # ... and its source and state
            "waiting": False,  # the session waits for a quiet machine (state "waiting" until "quiet"/"gave-up")
            "waiting_for": None,  # that wait's event data (other_cores, processes, why)
            "marking": False,  # a wait gave up: timings are marked noisy, not waited for, until the machine is quiet
            "remeasured": 0,  # best_remeasured events so far
            # what the latest signal said: "quiet", "disturbed" (a timing was noisy), "drift" (the probe is slower
            # than the session's baseline), or None before any
            "level": None,
        }

    def take_changes(self) -> set:
        out, self._changes = self._changes, set()
        return out

    def mark(self, *aspects) -> None:
        self._changes.update(aspects)

    def _strategy(self, s: str) -> None:
        if s and s not in self.strategies:
            self.strategies.append(s)
            self.mark(SESSION)

    def apply(self, ev) -> None:
        if ev.id:  # stored events carry ids; a backfill may overlap with the live queue
            if ev.id in self._seen_ids:
                return
            self._seen_ids.add(ev.id)
        self.n_events += 1
        self.elapsed = max(self.elapsed, ev.elapsed or 0.0)
        handler = _HANDLERS.get(ev.kind)
        if handler is not None:  # kinds a view does not show (network events, ...) only count
            handler(self, ev.kind, ev.data or {}, ev)

    def _on_session_started(self, k, d: dict, ev) -> None:
        self.session_id = ev.session_id
        self.workload = d.get("workload")
        self.spec = d.get("spec")
        self.flops = d.get("flops")
        self.trials = d.get("trials")
        self.preset = d.get("preset")
        self.cost_model = d.get("cost_model")
        self.prior = d.get("prior")
        self.mode = d.get("mode")
        self.db = d.get("db")
        for s in d.get("strategies") or []:
            self._strategy(s)
        self.trials_done = max(self.trials_done, d.get("trials_done") or 0)
        self.status = "running"
        self.message = ""  # a resumed session starts again after its earlier end
        self.mark(SESSION, STATUS, CONTROLLER)

    def _on_baseline(self, k, d: dict, ev) -> None:
        self.naive_latency_ms = d.get("naive_latency_ms")
        self.mark(STATUS)

    def _on_candidate(self, k, d: dict, ev) -> None:
        self._measured(d["record"], bool(d.get("strategy_best")), bool(d.get("new_best")))

    def _on_round_choice(self, k, d: dict, ev) -> None:
        r = d.get("round")
        if d.get("strategy"):
            self._strategy(d["strategy"])
            info = self.rounds.setdefault(r, {"round": r})
            info.update(strategy=d["strategy"], chosen_by=d.get("chosen_by"))
            if "n" in d:
                info["n"] = d["n"]
        if k == EventKind.CONTROLLER_DECISION:
            self.controller.update(
                mode=d.get("mode"),
                scores=d.get("scores") or {},
                reason=d.get("reason"),
                strategy=d.get("strategy"),
                chosen_by=d.get("chosen_by"),
                round=r,
            )
            self.mode = d.get("mode") or self.mode
            self.mark(CONTROLLER)
        self.mark(STATUS)

    def _on_round_finished(self, k, d: dict, ev) -> None:
        info = self.rounds.setdefault(d.get("round"), {"round": d.get("round")})
        info.update(
            strategy=d.get("strategy"),
            measured=d.get("measured"),
            errors=d.get("errors"),
            round_best_ms=d.get("round_best_ms"),
            phase_spans=d.get("phase_spans"),
        )
        state = d.get("controller")
        if state:
            self.controller["arms"] = state.get("arms", {})
            self.controller["arm_scores"] = state.get("scores", {})
            self.mode = state.get("mode") or self.mode
        if d.get("pruned"):
            self.controller["pruned"] = list(d["pruned"])
        self.mark(CONTROLLER, STATUS)

    def _on_model_trained(self, k, d: dict, ev) -> None:
        self.controller["model"] = {
            "round": d.get("round"),
            "n_samples": d.get("n_samples"),
            "seconds": d.get("seconds"),
            "feature_importance": d.get("feature_importance"),  # when the event carries it (a recording)
        }
        self.mark(CONTROLLER)

    def _on_runner_health(self, k, d: dict, ev) -> None:
        if d.get("server"):
            self.runners[d["server"]] = dict(d)
            self.mark(STATUS)

    def _on_pause(self, k, d: dict, ev) -> None:
        self.status = "paused" if k == EventKind.PAUSED else "running"
        self.mark(STATUS)

    def _on_terminal(self, k, d: dict, ev) -> None:
        self.status = str(k)
        self.message = d.get("message", "")
        if d.get("trials_done") is not None:
            self.trials_done = max(self.trials_done, d["trials_done"])
        self.mark(STATUS)

    def _noise_event(self, k, d: dict, ev=None) -> None:
        n = self.noise
        if k == EventKind.CALIBRATION:
            n.update(
                probe_ms=d.get("probe_ms"), baseline_ms=d.get("baseline_ms"), drift=d.get("drift"), when=d.get("when")
            )
            drift = d.get("drift")
            if drift is not None and drift <= DRIFT_LIMIT:
                n["marking"] = False  # as the session does: a probe within bounds ends marking-only
                n["level"] = "quiet"
            elif drift is not None:
                n["level"] = "drift"
            self.mark(STATUS)
        elif k == EventKind.MEASUREMENT_NOISE:
            n["events"] += 1
            n["source"], n["state"] = d.get("source"), d.get("state")
            n["line"] = noise_line(d)
            n["level"] = {
                "noisy": "disturbed",
                "marked": "disturbed",
                "drift": "drift",
                "quiet": "quiet",
                "remeasured": "quiet",
            }.get(d.get("state"), n["level"])
            if d.get("source") == "load":
                if d.get("state") == "waiting":
                    n["waiting"], n["waiting_for"] = True, dict(d)
                elif d.get("state") in ("quiet", "gave-up"):
                    n["waiting"], n["waiting_for"] = False, None
                    n["marking"] = d.get("state") == "gave-up"
            self.mark(STATUS)
        elif k == EventKind.RECORDS_MARKED_NOISY:
            for rid in d.get("record_ids") or []:
                rec = self.by_id.get(rid)
                if rec is not None:
                    rec["noisy"] = True
                    rec.setdefault("noisy_reason", d.get("reason"))
            self.mark(RECORDS, STATUS)
        elif k == EventKind.BEST_REMEASURED:
            n["remeasured"] += 1
            rec = self.by_id.get(d.get("record_id"))
            if rec is not None and d.get("latency_ms") is not None:
                # best, best_by_strategy and best_steps hold this same dict: the step is updated in place
                rec["latency_ms"], rec["gflops"] = d["latency_ms"], d.get("gflops")
                rec["remeasured_samples"] = d.get("samples")
                self._keep_steps_increasing(rec["strategy"])
            self.mark(RECORDS, STATUS)

    def _keep_steps_increasing(self, strategy: str) -> None:
        """A re-measured best may come out slower than an earlier step of its strategy: drop the earlier steps it
        no longer beats, so the best-so-far curve stays strictly increasing and ends at the strategy's best."""
        steps = self.best_steps.get(strategy)
        if not steps:
            return
        kept, floor = [], float("inf")
        for r in reversed(steps):
            g = r.get("gflops")
            if g is not None and g < floor:
                kept.append(r)
                floor = g
        self.best_steps[strategy] = kept[::-1]

    def _measured(self, rec: dict, strategy_best: bool, new_best: bool) -> None:
        rec = dict(rec)
        self.records.append(rec)
        if rec.get("id") is not None:
            self.by_id[rec["id"]] = rec
        s = rec["strategy"]
        self._strategy(s)
        self.trials_done = max(self.trials_done, rec.get("trial") or 0)
        self.last_by_strategy[s] = rec
        if self.first_measured is None:
            self.first_measured = (rec.get("elapsed_s") or 0.0, self.trials_done)
        ok = rec.get("error_class") is None and rec.get("gflops") is not None
        if ok and strategy_best:
            prev = self.best_by_strategy.get(s)
            if prev is None or rec["gflops"] > prev["gflops"]:
                self.best_by_strategy[s] = rec
                self.best_steps.setdefault(s, []).append(rec)
        if ok and new_best:
            self.best = rec
        self.mark(RECORDS, STATUS)

    # ---- derived ----
    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def n_noisy(self) -> int:
        """Measured records marked noisy (at measurement, or afterwards by records_marked_noisy)."""
        return sum(1 for r in self.records if r.get("noisy"))

    def eta_seconds(self) -> float | None:
        """Remaining time at the measured pace since the first measurement (setup excluded)."""
        if not self.trials or self.first_measured is None or self.terminal:
            return None
        t0, n0 = self.first_measured
        done = self.trials_done - n0
        last = self.records[-1].get("elapsed_s") if self.records else None
        if done < 1 or last is None or last <= t0:
            return None
        return max(0.0, (self.trials - self.trials_done) * (last - t0) / done)

    def record_by_trial(self, trial: int) -> dict | None:
        for r in self.records:
            if r.get("trial") == trial:
                return r
        return None


# Which fold each event kind goes through (kinds not listed only count as events).
_HANDLERS = {
    EventKind.SESSION_STARTED: SessionModel._on_session_started,
    EventKind.BASELINE_MEASURED: SessionModel._on_baseline,
    EventKind.CANDIDATE_MEASURED: SessionModel._on_candidate,
    EventKind.ROUND_STARTED: SessionModel._on_round_choice,
    EventKind.CONTROLLER_DECISION: SessionModel._on_round_choice,
    EventKind.ROUND_FINISHED: SessionModel._on_round_finished,
    EventKind.MODEL_TRAINED: SessionModel._on_model_trained,
    EventKind.RUNNER_HEALTH: SessionModel._on_runner_health,
    EventKind.CALIBRATION: SessionModel._noise_event,
    EventKind.MEASUREMENT_NOISE: SessionModel._noise_event,
    EventKind.RECORDS_MARKED_NOISY: SessionModel._noise_event,
    EventKind.BEST_REMEASURED: SessionModel._noise_event,
    EventKind.PAUSED: SessionModel._on_pause,
    EventKind.RESUMED: SessionModel._on_pause,
    EventKind.STOPPED: SessionModel._on_terminal,
    EventKind.FINISHED: SessionModel._on_terminal,
    EventKind.FAILED: SessionModel._on_terminal,
}
