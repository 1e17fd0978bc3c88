"""The loop's named steps (workbench/loop.py) one at a time, and the typed events they emit."""

import dataclasses
import json
import typing

import numpy as np
import pytest

from workbench import events as ev
from workbench import loop, noise
from workbench.store import RecordStore

# ---------------------------------------------------------------- typed events

_SAMPLE = {int: 3, float: 1.5, str: "x", bool: True, dict: {"a": 1}, list: [1, 2]}


def _sample_value(tp):
    base = _base_type(tp)
    for t, v in _SAMPLE.items():
        if base == t.__name__:
            return v
    return "x"


def _full_payload(cls):
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _sample_value(hints[f.name]) for f in dataclasses.fields(cls)})


def test_every_event_kind_has_exactly_one_payload_type():
    assert set(ev.PAYLOAD_TYPES) == set(ev.EventKind)
    assert all(cls.KIND == kind for kind, cls in ev.PAYLOAD_TYPES.items())


@pytest.mark.parametrize("kind", list(ev.EventKind), ids=lambda k: k.value)
def test_payloads_round_trip_through_their_stored_form(kind):
    p = _full_payload(ev.PAYLOAD_TYPES[kind])
    stored = json.loads(json.dumps(p.to_data()))  # what the records store keeps
    e = ev.Event(kind.value, 1, 0.0, 0.0, stored, 7)
    assert e.kind is kind and e.kind == kind.value
    assert e.payload == p


def test_optional_fields_stay_out_of_the_stored_form_and_unknown_keys_are_ignored():
    p = ev.MeasurementNoise(source="timing", state="marked", trial=4, wait_fraction=0.2)
    assert p.to_data() == {"source": "timing", "state": "marked", "trial": 4, "wait_fraction": 0.2}
    # a required field that is None is kept: it says something (no valid program yet)
    assert (
        ev.RoundFinished(
            round=1,
            strategy="s",
            measured=0,
            errors=0,
            round_best_ms=None,
            best_ms=None,
            pruned=[],
            controller={},
            phase_seconds={},
        ).to_data()["round_best_ms"]
        is None
    )
    back = ev.Event("measurement_noise", 1, 0, 0, dict(p.to_data(), from_a_newer_version=1)).payload
    assert back == p
    assert ev.Event("a_kind_from_elsewhere", 1, 0, 0, {}).payload is None


def _base_type(tp) -> str:
    args = typing.get_args(tp)
    if args:
        return "|".join(sorted(a.__name__ for a in args if a is not type(None)))
    return getattr(tp, "__name__", str(tp))


def test_no_key_changes_type_between_event_kinds():
    types: dict = {}
    for cls in ev.PAYLOAD_TYPES.values():
        for name, tp in typing.get_type_hints(cls).items():
            types.setdefault(name, set()).add(_base_type(tp))
    assert {k: v for k, v in types.items() if len(v) > 1} == {}


# ---------------------------------------------------------------- the steps, with stand-ins where TVM is not needed


class _Workload:
    name = "wl"
    flops = 2e9


class _Builder:
    def __init__(self):
        self.discarded = []

    def discard(self, path):
        self.discarded.append(path)


def _proposal(i: int):
    from workbench import space
    from workbench.workloads import registry

    w = registry().get("matmul-128")
    sch = None
    seed = i * 10 + 1
    while sch is None:
        sch = space.annotate(w, 0, seed)
        seed += 1
    from tvm.s_tir import meta_schedule as ms

    cand = ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_prim_func(w.mod["main"]))
    return loop.Proposal(cand, f"hash-{i}", sch.mod, np.ones((1, 4), np.float32), 0.5)


@pytest.fixture()
def store(tmp_path):
    s = RecordStore(str(tmp_path / "r.db"))
    sid = s.create_session(
        workload="wl",
        spec={},
        target={},
        preset="quick",
        preset_params={},
        seed=0,
        trials=8,
        strategies=["a", "b"],
        strategy_arg="a,b",
        versions={},
    )
    return s, sid


def _timing(ms):
    return loop.Timing([ms / 1e3] * 3, None, None)


def test_record_writes_before_it_announces_and_only_a_verified_program_becomes_best(store):
    s, sid = store
    state, builder, said = loop.SearchState(), _Builder(), []

    def emit(p):
        if isinstance(p, ev.CandidateMeasured):  # durable before anyone hears of it
            assert s.conn.execute("SELECT COUNT(*) FROM records WHERE id=?", (p.record["id"],)).fetchone()[0] == 1
        said.append(p)

    record = loop.Record(s, sid, _Workload(), 0, state, builder, emit)
    kw = dict(round=1, proposed_at=0.0, elapsed_s=0.0, keep_artifact=True)
    fast_wrong = record(
        _proposal(0),
        "a",
        "controller",
        _timing(1.0),
        loop.Verdict(1.0, False, "wrong-result", "max abs diff 3"),
        trial=1,
        path="p0",
        **kw,
    )
    assert fast_wrong["error_class"] == "wrong-result" and not fast_wrong["is_best"] and state.best is None
    assert fast_wrong["latency_ms"] == 1.0  # its timing is kept for the record, never ranked
    first = record(_proposal(1), "a", "controller", _timing(2.0), loop.Verdict(2.0, True), trial=2, path="p1", **kw)
    assert first["is_best"] and state.best is first and state.best_by_strategy["a"] is first
    assert first["gflops"] == pytest.approx(2e9 / 2.0e-3 / 1e9)
    slower = record(_proposal(2), "a", "controller", _timing(3.0), loop.Verdict(3.0, True), trial=3, path="p2", **kw)
    assert not slower["is_best"] and state.best is first
    other = record(_proposal(3), "b", "controller", _timing(1.5), loop.Verdict(1.5, True), trial=4, path="p3", **kw)
    assert other["is_best"] and state.best is other and state.best_by_strategy["a"] is first
    # builds are kept for the incumbents only: p1 (a's best) and p3 (b's best and the overall best)
    assert set(state.artifacts) == {first["id"], other["id"]} and builder.discarded == []
    kinds = [p.KIND for p in said]
    assert kinds.count(ev.EventKind.CANDIDATE_MEASURED) == 4 and kinds.count(ev.EventKind.NEW_BEST) == 2
    assert list(s.records(session_id=sid)["id"]) == [fast_wrong["id"], first["id"], slower["id"], other["id"]]


def test_record_drops_the_build_of_a_dethroned_incumbent(store):
    s, sid = store
    state, builder = loop.SearchState(), _Builder()
    record = loop.Record(s, sid, _Workload(), 0, state, builder, lambda p: None)
    kw = dict(round=1, proposed_at=0.0, elapsed_s=0.0, keep_artifact=True)
    record(_proposal(0), "a", "controller", _timing(2.0), loop.Verdict(2.0, True), trial=1, path="old", **kw)
    record(_proposal(1), "a", "controller", _timing(1.0), loop.Verdict(1.0, True), trial=2, path="new", **kw)
    assert builder.discarded == ["old"] and [p for p, _ in state.artifacts.values()] == ["new"]


def test_a_confirmed_latency_is_noisy_when_its_confirmation_was_not_its_first_timing(store):
    s, sid = store
    record = loop.Record(s, sid, _Workload(), 0, loop.SearchState(), _Builder(), lambda p: None)
    kw = dict(round=1, proposed_at=0.0, elapsed_s=0.0, keep_artifact=False)
    noisy_first = dataclasses.replace(_timing(1.0), noisy=True)
    clean = loop.Verdict(1.1, True, confirm_secs=[1.1e-3] * 2, confirm_spread=0.0, confirm_noisy=False)
    disturbed = loop.Verdict(1.2, True, confirm_secs=[1.2e-3] * 2, confirm_spread=0.0, confirm_noisy=True)
    unconfirmed = loop.Verdict(1.0, True)
    r1 = record(_proposal(0), "a", "controller", noisy_first, clean, trial=1, path="p1", **kw)
    r2 = record(_proposal(1), "a", "controller", _timing(1.0), disturbed, trial=2, path="p2", **kw)
    r3 = record(_proposal(2), "a", "controller", noisy_first, unconfirmed, trial=3, path="p3", **kw)
    stored = s.records(session_id=sid).set_index("id")["noisy"]
    assert [bool(stored[r["id"]]) for r in (r1, r2, r3)] == [False, True, True]


class _Guard:
    def __init__(self, samples):
        self.samples = samples
        self.asked = None

    def confirm(self, entries):
        self.asked = [k for k, _, _ in entries]
        return self.samples(entries)


def test_confirm_remeasures_the_incumbents_and_reranks(store):
    s, sid = store
    state = loop.SearchState()
    record = loop.Record(s, sid, _Workload(), 0, state, _Builder(), lambda p: None)
    kw = dict(round=1, proposed_at=0.0, elapsed_s=0.0, keep_artifact=True)
    a = record(_proposal(0), "a", "controller", _timing(1.0), loop.Verdict(1.0, True), trial=1, path="pa", **kw)
    b = record(_proposal(1), "b", "controller", _timing(1.2), loop.Verdict(1.2, True), trial=2, path="pb", **kw)
    assert state.best is a
    # b's challenger arrives; re-timed side by side, a's incumbent turns out slower than b's
    guard = _Guard(
        lambda entries: noise.Confirmation(
            {"candidate": [1.1e-3] * 3, a["id"]: [1.4e-3] * 3, b["id"]: [1.3e-3] * 3}, noisy={a["id"]}
        )
    )
    said = []
    confirm = loop.Confirm(guard, 3, _Workload(), s, state, said.append)
    v = confirm("b", "pc", [(1,)], first_ms=0.9)
    assert guard.asked == ["candidate", b["id"], a["id"]]
    assert v.verified and v.latency_ms == pytest.approx(1.1) and v.confirm_spread == 0.0
    assert state.best is b and b["latency_ms"] == pytest.approx(1.3) and a["latency_ms"] == pytest.approx(1.4)
    stored = s.records(session_id=sid).set_index("id")
    assert stored.loc[a["id"], "latency_ms"] == pytest.approx(1.4)
    # an incumbent's noisy flag follows its new latency's timings; so does the challenger's verdict
    assert bool(stored.loc[a["id"], "noisy"]) and a["noisy"] and not stored.loc[b["id"], "noisy"]
    assert not v.confirm_noisy
    assert {p.record_id for p in said} == {a["id"], b["id"]} and all(p.KIND == "best_remeasured" for p in said)
    assert loop.Confirm(guard, 0, _Workload(), s, state, said.append)("b", "pc", [], first_ms=0.9) == loop.Verdict(
        0.9, True
    )


class _Model:
    trained = True
    calibrated = True

    def __init__(self):
        self.added = []

    def add(self, feats, latency_ms, group):
        self.added.append((latency_ms, group))

    def train(self):
        return True


class _Controller:
    def __init__(self):
        self.seen = None

    def observe(self, *args, **kw):
        self.seen = (args, kw)
        return []


def test_learn_feeds_failures_as_failures_and_tells_the_controller_the_top_predictions():
    model, controller = _Model(), _Controller()
    learn = loop.Learn(model, controller, {}, {}, None, loop.SearchState())
    p = loop.Proposal(None, "h", None, np.ones((1, 2), np.float32), 0.1)
    learn.record("a", p, {"error_class": "run-crash", "latency_ms": None, "workload": "wl"})
    assert model.added == [(None, "wl")]
    props = [loop.Proposal(None, str(i), None, None, s) for i, s in enumerate([0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4])]
    learn.state.best_by_strategy = {"a": {"id": 1, "latency_ms": 1.1}, "b": {"id": 2, "latency_ms": 0.9}}
    learn.observe("a", 1.0, 2.0, 8, props)
    args, kw = controller.seen
    assert args == ("a", 1.0, 2.0, 8) and kw["predicted_mean"] == pytest.approx((0.9 + 0.8) / 2) and kw["model_trained"]
    assert kw["held_bests"] == {"a": 1.1, "b": 0.9}  # the bests as re-measured, every arm's


def test_timing_latency_is_the_median_in_ms_and_none_on_error():
    assert loop.Timing([1e-3, 3e-3, 2e-3], None, None).latency_ms == pytest.approx(2.0)
    assert loop.Timing([], "run-crash", "boom").latency_ms is None


# ---------------------------------------------------------------- propose


class _Candidate:
    def __init__(self, name):
        self.sch = type("Sch", (), {"mod": name})()


class _Context:
    """An evolutionary search that returns the same programs every time, and counts its searches."""

    def __init__(self, names):
        self.names, self.searches = names, 0

    def generate_measure_candidates(self):
        self.searches += 1
        return [_Candidate(n) for n in self.names]


@pytest.fixture
def propose_on_names(monkeypatch):
    """Propose over a fake search whose programs are their own hashes (no TVM objects needed)."""
    import tvm.s_tir.transform as tr

    monkeypatch.setattr(loop, "program_hash", lambda mod: mod)
    monkeypatch.setattr(tr, "RemoveWeightLayoutRewriteBlock", lambda **kw: lambda mod: mod)

    def make(names, eps=0.0, state=None):
        ctx = _Context(names)
        return loop.Propose({"s": ctx}, state or loop.SearchState(), eps), ctx

    return make


def test_a_search_returns_a_spare_share_so_a_round_rarely_comes_up_short():
    assert loop.search_batch(16) == 24 and loop.search_batch(64) == 96 and loop.search_batch(2) == 6


def test_propose_fills_a_round_from_the_spare_programs_with_one_search(propose_on_names):
    names = [f"p{i}" for i in range(24)]
    state = loop.SearchState(measured_hashes={"p0", "p3"}, seed_copies={"p1"})
    propose, ctx = propose_on_names(names, state=state)
    got = [p.mod_hash for p in propose("s", 16, exclude={"p5"})]
    assert got == ["p2", "p4"] + [f"p{i}" for i in range(6, 20)]  # in the search's order, 16 of them
    assert ctx.searches == 1


def test_propose_keeps_eps_greedys_share_of_random_picks_from_the_searchs_tail(propose_on_names):
    # 24 returned with eps 0.25: the model's picks are p0-p17, the random ones p18-p23; a round of 8 takes 2 of those
    propose, _ = propose_on_names([f"p{i}" for i in range(24)], eps=0.25)
    assert [p.mod_hash for p in propose("s", 8)] == ["p0", "p1", "p2", "p3", "p4", "p5", "p18", "p19"]
    # the random tail all measured: the model's picks fill in
    state = loop.SearchState(measured_hashes={f"p{i}" for i in range(18, 24)})
    propose, _ = propose_on_names([f"p{i}" for i in range(24)], eps=0.25, state=state)
    assert [p.mod_hash for p in propose("s", 8)] == [f"p{i}" for i in range(8)]
    # few model picks left: the random ones fill in
    state = loop.SearchState(measured_hashes={f"p{i}" for i in range(16)})
    propose, _ = propose_on_names([f"p{i}" for i in range(24)], eps=0.25, state=state)
    assert [p.mod_hash for p in propose("s", 6)] == ["p16", "p17", "p18", "p19", "p20", "p21"]


def test_propose_measures_seeded_copies_only_when_the_search_has_nothing_else(propose_on_names):
    state = loop.SearchState(measured_hashes={"p0"}, seed_copies={"p1", "p2"})
    propose, ctx = propose_on_names(["p0", "p1", "p2", "p1"], state=state)
    assert [p.mod_hash for p in propose("s", 4)] == ["p1", "p2"]
    assert ctx.searches == loop.Propose.ATTEMPTS  # it tried again for new programs first
