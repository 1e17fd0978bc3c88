"""``NetworkSession``: tune a set of weighted workloads (a network's unique layers) in one session.

Every task is a ``TuningSession`` of its own (its own layout strategies,
controller, search contexts and session row in the store), but they share one
records store, ONE builder pool, ONE runner and ONE cost model (``PackSumXGB``
normalises labels per workload, so one model learns from every layer). Ansor's
gradient task scheduler (``scheduler.GradientScheduler``) picks the task that
gets the next round; after every round the estimated end-to-end latency

    sum_i weight_i * latency_i      (latency_i: the task's best verified program, or its untuned
                                     program while it has none)

is emitted as a ``network_round`` event and stored with the events of the task
that ran the round (``network_history(db)`` reads the curve back).

A subscriber hears every task's own events (``candidate_measured``, ``new_best``, ...,
each task's ``finished``) plus the network's: ``network_started``,
``network_baseline`` (naive_latency_ms, per_task), ``task_chosen`` (round, index,
workload, reason: warm-up | gradient | tie, gradients, n), ``network_round``
(round, index, workload, trials_done, estimated_latency_ms, naive_latency_ms,
per_task_ms, elapsed_s), ``task_dead``, ``network_paused`` / ``network_resumed``,
and one of ``network_finished`` / ``network_stopped`` / ``network_failed``. The
network's own events are stored with the first task's session unless they
concern one task.

``trials`` is the budget for the whole network (all tasks together), spent in
rounds of the preset's ``trials_per_round``.
"""

from __future__ import annotations

import time

from . import cost_model as cm
from . import measure, presets, tvm_env
from .errors import WorkbenchError
from . import events as ev
from .lifecycle import SessionLifecycle
from .scheduler import GradientScheduler, similarity_tag
from .session import DEFAULT_DB, TuningSession, as_workload
from .store import RecordStore


class NetworkSession(SessionLifecycle):
    def __init__(
        self,
        workloads,
        target="host",
        trials: int | None = None,
        preset="quick",
        seed: int = 0,
        db: str | RecordStore = DEFAULT_DB,
        strategy="auto",
        name: str | None = None,
        **preset_overrides,
    ):
        ws = [as_workload(w) for w in workloads]
        if not ws:
            raise WorkbenchError("a network session needs at least one workload")
        names = [w.name for w in ws]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise WorkbenchError(f"workload {dup[0]!r} appears twice in the network")
        self.preset = presets.get(preset, **preset_overrides)
        if trials is None:
            trials = 2 * self.preset.trials_per_round * len(ws)
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise WorkbenchError(f"trials must be a positive integer, got {trials!r}")
        self.name = name or "network"
        self.workloads = ws
        self.trials = trials
        self.seed = seed
        self.target_dict = tvm_env.parse_target(target)
        self.store = db if isinstance(db, RecordStore) else RecordStore(db)
        self.db_path = self.store.path
        # The shared cost model exists from the start (a notebook can inspect it); pools start with the session.
        p = self.preset
        self.model = cm.make_cost_model(p.cost_model, seed, p, tvm_env.available_cores(), with_prior=p.prior)
        self.tasks = []
        try:
            for i, w in enumerate(ws):
                self.tasks.append(
                    TuningSession(
                        w,
                        target=self.target_dict,
                        trials=trials,
                        preset=self.preset,
                        seed=seed + i,
                        db=self.store,
                        strategy=strategy,
                        model=self.model,
                    )
                )
        except BaseException:
            for t in self.tasks:  # each holds its session's lock from its construction on
                t.abandon()
            raise
        self.scheduler = GradientScheduler(
            [w.weight for w in ws],
            [float(w.flops) for w in ws],
            [similarity_tag(w.class_key, float(w.flops)) for w in ws],
            seed=seed,
        )
        self._init_lifecycle()
        for t in self.tasks:
            t.subscribe(self._bus.emit)  # a subscriber hears every task's events, too
        self.history: list[dict] = []  # one entry per round: the network_round event's data
        self._t0 = None

    # ------------------------------------------------------------------ public API
    @property
    def session_ids(self) -> list[int]:
        return [t.session_id for t in self.tasks]

    def subscribe(self, fn):
        """``fn(event)`` for the network's own events and every task's (called on the tuning thread)."""
        return self._bus.subscribe(fn)

    @property
    def _thread_name(self) -> str:
        return self.name

    def pause(self) -> None:
        """Takes effect between candidates of the current round (or before the next round)."""
        super().pause()
        for t in self.tasks:
            t.pause()

    def resume_running(self) -> None:
        super().resume_running()
        for t in self.tasks:
            t.resume_running()

    def stop(self) -> None:
        super().stop()
        for t in self.tasks:
            t.stop()

    @property
    def cost_model(self):
        return self.model

    def records(self, with_trace: bool = False):
        """Measured candidates of every task, as one DataFrame (``workload`` tells them apart)."""
        import pandas as pd

        frames = [t.records(with_trace) for t in self.tasks]
        frames = [f for f in frames if len(f)]
        if not frames:
            return self.tasks[0].records(with_trace)
        return pd.concat(frames, ignore_index=True).sort_values("id", ignore_index=True)

    def estimated_latency_ms(self) -> float | None:
        """sum_i w_i * latency_i; a task without a verified program counts with its untuned latency."""
        total = 0.0
        for w, t in zip(self.workloads, self.tasks):
            lat = t.best["latency_ms"] if t.best else t.naive_latency_ms
            if lat is None:
                return None
            total += w.weight * lat
        return total

    def naive_latency_ms(self) -> float | None:
        if any(t.naive_latency_ms is None for t in self.tasks):
            return None
        return sum(w.weight * t.naive_latency_ms for w, t in zip(self.workloads, self.tasks))

    def summary(self) -> dict:
        est, naive = self.estimated_latency_ms(), self.naive_latency_ms()
        per = []
        for i, (w, t) in enumerate(zip(self.workloads, self.tasks)):
            b = t.best
            per.append(
                {
                    "workload": w.name,
                    "weight": w.weight,
                    "session_id": t.session_id,
                    "trials": t.trials_done,
                    "rounds": self.scheduler.rounds[i],
                    "best_latency_ms": b["latency_ms"] if b else None,
                    "best_strategy": b["strategy"] if b else None,
                    "naive_latency_ms": t.naive_latency_ms,
                    "verified": bool(b and b["verified"]),
                    "dead": i in self.scheduler.dead,
                }
            )
        return {
            "network": self.name,
            "tasks": per,
            "trials": self.trials_done,
            "budget": self.trials,
            "rounds": self.round,
            "estimated_latency_ms": est,
            "naive_latency_ms": naive,
            "speedup_vs_naive": (naive / est) if (est and naive) else None,
            "verified": all(p["verified"] for p in per),
            "tuning_seconds": round(self._elapsed(), 2),
            "status": self.status,
            "db": self.db_path,
            "session_ids": self.session_ids,
        }

    # ------------------------------------------------------------------ internals
    def _elapsed(self) -> float:
        return time.time() - self._t0 if self._t0 else 0.0

    def _emit(self, payload_type: type[ev.Payload], task: TuningSession | None = None, **data) -> ev.Event:
        """Stored with the events of ``task`` (default: the first task), then handed to subscribers."""
        sid = (task or self.tasks[0]).session_id
        t = time.time()
        payload = payload_type(**data, network=self.name, session_ids=self.session_ids)
        event = ev.Event.of(payload, sid, t, self._elapsed())
        event.id = self.store.add_event(sid, payload.KIND.value, t, event.elapsed, event.data)
        self._bus.emit(event)
        return event

    def _loop(self) -> None:
        self._t0 = time.time()
        self.status = "running"
        opened = []
        try:
            self._open_pools()
            self._emit(
                ev.NetworkStarted,
                workloads=[w.name for w in self.workloads],
                weights=[w.weight for w in self.workloads],
                trials=self.trials,
                preset=self.preset.name,
                seed=self.seed,
                target=self.target_dict,
                db=self.db_path,
            )
            for t in self.tasks:
                if self._stop.is_set():
                    break
                try:
                    t.open(builder=self.builder, runner=self.runner)  # search contexts, untuned baseline, reference
                except BaseException as e:
                    t.fail(e)  # its own status and event say why the network failed
                    raise
                opened.append(t)
            self._emit(
                ev.NetworkBaseline,
                naive_latency_ms=self.naive_latency_ms(),
                per_task={t.workload.name: t.naive_latency_ms for t in self.tasks},
            )
            reason = self._schedule()
            self.status = "stopped" if self._stop.is_set() else "finished"
            end = ev.NetworkStopped if self.status == "stopped" else ev.NetworkFinished
            self._emit(
                end,
                trials_done=self.trials_done,
                reason=reason,
                estimated_latency_ms=self.estimated_latency_ms(),
                summary=self.summary(),
            )
        except BaseException as e:  # noqa: BLE001 - recorded, then re-raised by run()
            self.error = e
            self.status = "failed"
            try:
                self._emit(ev.NetworkFailed, message=f"{type(e).__name__}: {e}")
            except Exception:
                pass
        finally:
            for t in opened:
                try:
                    self.store.update_session(t.session_id, trials=t.trials_done)
                    if t.error is None:  # a failed task was released when it failed
                        if self.error is None:
                            t.close()
                        else:  # the network's failure ended it
                            t.fail(self.error)
                except Exception:
                    pass
            for t in self.tasks:
                if t not in opened and t.status == "created":  # stopped or failed before its turn came
                    t.abandon()
            self._close_pools()

    def _open_pools(self) -> None:
        tvm_env.setup()
        p = self.preset
        self.builder = measure.make_builder(self.target_dict, p)
        self.runner = measure.make_runner(None, self.target_dict, p)

    def _close_pools(self) -> None:
        for obj in (getattr(self, "builder", None), getattr(self, "runner", None)):
            if obj is not None:
                try:
                    obj.close()
                except Exception:
                    pass

    def _wait_if_paused(self) -> bool:
        if not self._running.is_set():
            self._emit(ev.NetworkPaused, trials_done=self.trials_done)
            self._block_while_paused()
            if not self._stop.is_set():
                self._emit(ev.NetworkResumed, trials_done=self.trials_done)
        return not self._stop.is_set()

    def _schedule(self) -> str:
        tpr = self.preset.trials_per_round
        while self.trials_done < self.trials:
            if not self._wait_if_paused():
                return "stopped"
            dead_before = set(self.scheduler.dead)
            choice = self.scheduler.next()
            for i in sorted(self.scheduler.dead - dead_before):  # the warm-up over, those without a valid program
                t = self.tasks[i]
                self._emit(
                    ev.TaskDead, task=t, index=i, workload=t.workload.name, reason="no valid program after warm-up"
                )
            if choice is None:
                return "every task is dead (no new programs to propose, or failed)"
            i = choice.task
            task = self.tasks[i]
            n = min(tpr, self.trials - self.trials_done)
            task.grant(n)  # this round's share of the network budget
            self.round += 1
            self._emit(
                ev.TaskChosen,
                task=task,
                round=self.round,
                index=i,
                workload=task.workload.name,
                reason=choice.reason,
                gradients=choice.gradients,
                n=n,
            )
            before = task.trials_done
            try:
                ran = task.step()
            except Exception as e:  # noqa: BLE001 - one task's failure ends that task, not the others' tuning
                self.trials_done += task.trials_done - before
                self.scheduler.mark_dead(i)
                task.fail(e)
                first_line = (str(e).strip().splitlines() or [""])[0][:300]
                self._emit(
                    ev.TaskDead,
                    task=task,
                    index=i,
                    workload=task.workload.name,
                    reason=f"failed: {type(e).__name__}: {first_line}",
                )
                continue
            self.trials_done += task.trials_done - before
            if self._stop.is_set():
                return "stopped"
            if not ran:
                self.scheduler.mark_dead(i)
                self._emit(
                    ev.TaskDead, task=task, index=i, workload=task.workload.name, reason="no new program to propose"
                )
                continue
            self.scheduler.observe(i, task.best["latency_ms"] if task.best else None)
            entry = {
                "round": self.round,
                "index": i,
                "workload": task.workload.name,
                "trials_done": self.trials_done,
                "estimated_latency_ms": self.estimated_latency_ms(),
                "naive_latency_ms": self.naive_latency_ms(),
                "per_task_ms": {t.workload.name: (t.best["latency_ms"] if t.best else None) for t in self.tasks},
                "elapsed_s": round(self._elapsed(), 3),
            }
            self.history.append(entry)
            self._emit(ev.NetworkRound, task=task, **entry)
        return "budget spent"


def network_history(db: str, session_ids: list[int] | None = None):
    """The ``network_round`` events of a store (optionally of one network's sessions) as a DataFrame."""
    import pandas as pd

    store = db if isinstance(db, RecordStore) else RecordStore(db, readonly=True)
    rows = []
    for s in store.sessions():
        if session_ids is not None and s["id"] not in session_ids:
            continue
        for e in store.events(s["id"]):
            if e["kind"] == ev.EventKind.NETWORK_ROUND:
                rows.append(dict(e["data"], time=e["time"]))
    df = pd.DataFrame(rows)
    return df.sort_values("time", ignore_index=True) if len(df) else df
