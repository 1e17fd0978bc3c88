"""Events: how a session tells the world what it did.

Every state change of a session is an ``Event``; it is written to the records
store first, then handed to subscribers. Subscribers run on the tuning thread:
a UI must only enqueue (see ``EventQueue``) and do its work elsewhere.

Kinds and their ``data``:
  session_started      workload, spec, flops, target, trials, preset, seed, strategies, mode, db, resumed, trials_done
  baseline_measured    naive_latency_ms, reference ("numpy" | "tvm-naive")
  round_started        round, strategy, chosen_by ("controller" | "user"), reason {arm: score, ...}, n
  candidates_proposed  round, strategy, candidates [{index, predicted_score, mod_hash}]
  candidate_measured   record (the stored row, without trace/features; with noisy, noise, cv, confirm_secs,
                       confirm_spread), new_best, strategy_best
  new_best             record_id, trial, strategy, latency_ms, gflops, verified
  round_finished       round, strategy, measured, errors, round_best_ms, best_ms, pruned, controller (its state),
                       phase_seconds {search, features, build, measure, cross_seed, train}: the round's wall time
                       per phase of the loop
  model_trained        round, n_samples, seconds, boost_rounds
  controller_decision  round, strategy, chosen_by, mode, scores, reason, pruned
  paused / resumed     trials_done
  runner_health        server ("host:port"), state ("busy" | "idle" | "timeout" | "lost"), measured, errors,
                       timeouts, retried, in_flight; optionally seconds, message, retrying (RPC runner only)
  calibration          probe_ms, baseline_ms, drift (fraction), when ("start" | "before round" | "after round"):
                       the calibration probe timed (workbench/noise.py); the baseline is its fastest reading
  measurement_noise    source ("timing" | "probe" | "load"), state ("noisy" | "marked" | "remeasured" | "drift" |
                       "waiting" | "quiet" | "gave-up" | "unavailable"); with trial, wait_fraction, other_cores,
                       processes [{pid, name, cores}], probe_ms, baseline_ms, drift, when, why, waited_s,
                       first_ms, remeasured_ms as they apply (noise.describe(data) says it in one line)
  records_marked_noisy record_ids, reason (the probe was slow around the round that timed them)
  best_remeasured      record_id, strategy, latency_ms, gflops, samples: an incumbent best re-timed interleaved
                       with a challenger; its record now holds that median
  stopped / finished   trials_done, best_latency_ms, summary
  failed               message (an unexpected error ended the session; records so far are kept)

A NetworkSession (workbench/network.py) adds network_started, network_baseline, task_chosen, network_round
(estimated_latency_ms = sum of weight x latency), task_dead, network_paused / network_resumed and
network_finished / network_stopped / network_failed; see that module.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field

log = logging.getLogger("workbench")


@dataclass
class Event:
    kind: str
    session_id: int
    time: float
    elapsed: float
    data: dict = field(default_factory=dict)
    id: int = 0


class EventBus:
    def __init__(self):
        self._subs: list = []
        self._lock = threading.Lock()

    def subscribe(self, fn):
        """Call ``fn(event)`` for every event; returns a function that unsubscribes."""
        with self._lock:
            self._subs.append(fn)

        def unsubscribe():
            with self._lock:
                if fn in self._subs:
                    self._subs.remove(fn)

        return unsubscribe

    def emit(self, event: Event) -> None:
        with self._lock:
            subs = list(self._subs)
        for fn in subs:
            try:
                fn(event)
            except Exception:  # a broken view must not stop tuning
                log.exception("event subscriber failed on %s", event.kind)


class EventQueue:
    """A thread-safe inbox: ``subscribe(q.put)`` on the tuning side, ``q.drain()`` on the UI side."""

    def __init__(self):
        self._q: queue.Queue = queue.Queue()

    def put(self, event: Event) -> None:
        self._q.put(event)

    def empty(self) -> bool:
        return self._q.empty()

    def drain(self, limit: int | None = None) -> list[Event]:
        out = []
        while limit is None or len(out) < limit:
            try:
                out.append(self._q.get_nowait())
            except queue.Empty:
                break
        return out
