"""What the views know about a session, built only from its events.

``SessionModel.apply(event)`` folds one ``workbench.events.Event`` into plain
Python state; it never touches a widget, so the pump can apply a whole burst of
events and then redraw once. ``take_changes()`` tells the pump which aspects
changed since the last redraw.
"""

from __future__ import annotations

TERMINAL = ("stopped", "finished", "failed")

# Aspects a view can depend on.
SESSION, RECORDS, STATUS, CONTROLLER = "session", "records", "status", "controller"


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
        self._seen_ids: set = set()
        self._changes: set = {SESSION, RECORDS, STATUS, CONTROLLER}

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
        d = ev.data or {}
        k = ev.kind
        if k == "session_started":
            self.session_id = ev.session_id
            self.workload = d.get("workload")
            self.spec = d.get("spec")
            self.flops = d.get("flops")
            self.trials = d.get("trials")
            self.preset = d.get("preset")
            self.mode = d.get("mode")
            self.db = d.get("db")
            for s in d.get("strategies") or []:
                self._strategy(s)
            self.trials_done = max(self.trials_done, d.get("trials_done") or 0)
            self.status = "running"
            self.mark(SESSION, STATUS, CONTROLLER)
        elif k == "baseline_measured":
            self.naive_latency_ms = d.get("naive_latency_ms")
            self.mark(STATUS)
        elif k == "candidate_measured":
            self._measured(d["record"], bool(d.get("strategy_best")), bool(d.get("new_best")))
        elif k in ("round_started", "controller_decision"):
            r = d.get("round")
            if d.get("strategy"):
                self._strategy(d["strategy"])
                info = self.rounds.setdefault(r, {"round": r})
                info.update(strategy=d["strategy"], chosen_by=d.get("chosen_by"))
                if "n" in d:
                    info["n"] = d["n"]
            if k == "controller_decision":
                self.controller.update(mode=d.get("mode"), scores=d.get("scores") or {}, reason=d.get("reason"),
                                       strategy=d.get("strategy"), chosen_by=d.get("chosen_by"), round=r)
                self.mode = d.get("mode") or self.mode
                self.mark(CONTROLLER)
            self.mark(STATUS)
        elif k == "round_finished":
            info = self.rounds.setdefault(d.get("round"), {"round": d.get("round")})
            info.update(measured=d.get("measured"), errors=d.get("errors"), round_best_ms=d.get("round_best_ms"))
            state = d.get("controller")
            if state:
                self.controller["arms"] = state.get("arms", {})
                self.controller["arm_scores"] = state.get("scores", {})
                self.mode = state.get("mode") or self.mode
            if d.get("pruned"):
                self.controller["pruned"] = list(d["pruned"])
            self.mark(CONTROLLER, STATUS)
        elif k == "model_trained":
            self.controller["model"] = {"round": d.get("round"), "n_samples": d.get("n_samples"),
                                        "seconds": d.get("seconds")}
            self.mark(CONTROLLER)
        elif k == "runner_health":
            if d.get("server"):
                self.runners[d["server"]] = dict(d)
                self.mark(STATUS)
        elif k in ("paused", "resumed"):
            self.status = "paused" if k == "paused" else "running"
            self.mark(STATUS)
        elif k in TERMINAL:
            self.status = k
            self.message = d.get("message", "")
            if d.get("trials_done") is not None:
                self.trials_done = max(self.trials_done, d["trials_done"])
            self.mark(STATUS)

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
