"""What-if: a person's edit of a candidate's decisions, measured, verified and stored as a record chosen by the user.

One real session on a 64³ matmul (4 trials, one strategy) serves every session test: a what-if while it is
paused, one after it has finished, one through the inspector's fields and button, one from a session object
resumed from the store; the decision checks run on annotated programs without a session.
"""

import threading
import time

import pytest

from widgets import SessionModel
from widgets.inspector import CandidateInspector, edits_from, variant_html
from workbench import RecordStore, TuningSession, space, whatif
from workbench.events import Event
from workbench.workloads import workload_from_spec

from .shapes import SMALL


def _annotated(key: str, sketch: int = 0):
    w = workload_from_spec(SMALL[key])
    for seed in range(1, 30):
        sch = space.annotate(w, sketch, seed)
        if sch is not None:
            return w, sch
    raise AssertionError("no valid annotation in 30 seeds")


def _a_tile_edit(decisions) -> dict:
    """A valid change of one tile decision: its innermost factor swapped with a different one (same product)."""
    for i, d in enumerate(decisions):
        if d.kind == "SamplePerfectTile" and len(set(d.value)) > 1:
            f = list(d.value)
            j = next(k for k in range(len(f)) if f[k] != f[-1])
            f[j], f[-1] = f[-1], f[j]
            if f[-1] <= d.max_innermost:
                return {i: f}
    raise AssertionError(f"no tile decision to change in {decisions}")


def _an_unroll_edit(decisions) -> dict:
    i, d = next((i, d) for i, d in enumerate(decisions) if d.kind == "SampleCategorical")
    return {i: next(c for c in d.choices if c != d.setting)}


# ---------------------------------------------------------------- the checks of an edit (no session)


def test_an_edit_changes_exactly_the_decisions_it_names():
    w, sch = _annotated("matmul")
    before = space.decisions_of(sch.trace)
    edits = {**_a_tile_edit(before), **_an_unroll_edit(before)}
    after = space.decisions_of(space.edit_decisions(w, sch, edits))
    for i, (b, a) in enumerate(zip(before, after)):
        assert a.setting == edits.get(i, b.setting), (i, b, a)
    unroll = next(d for d in before if d.kind == "SampleCategorical")
    assert unroll.choices == [0, 16, 64, 512] and unroll.setting == unroll.choices[unroll.value]


def test_bad_edits_get_one_clear_message_each():
    w, sch = _annotated("matmul")
    decisions = space.decisions_of(sch.trace)
    tile = next(i for i, d in enumerate(decisions) if d.kind == "SamplePerfectTile")
    n, extent = len(decisions[tile].value), decisions[tile].extent
    unroll = next(i for i, d in enumerate(decisions) if d.kind == "SampleCategorical")
    bad = {tile: [3] + [1] * (n - 1), unroll: 17, 99: 1}
    with pytest.raises(space.InvalidEdit) as e:
        space.edit_decisions(w, sch, bad)
    problems = e.value.problems
    assert len(problems) == 3, problems
    assert problems[0] == (
        f"decision {tile} (SamplePerfectTile of a loop of extent {extent}): factors {[3] + [1] * (n - 1)} "
        f"multiply to 3, not to the extent {extent}"
    )
    assert problems[1] == f"decision {unroll} (SampleCategorical): 17 is not one of its choices [0, 16, 64, 512]"
    assert problems[2] == f"decision 99 does not exist: this candidate has decisions 0-{len(decisions) - 1}"
    for wrong, says in (
        ({tile: [extent]}, f"needs {n} factors, got 1"),
        ({tile: "1, 2"}, "tile factors are a list of positive integers"),
        ({tile: [extent] + [1] * (n - 2) + [0]}, "tile factors are a list of positive integers"),
        ({"0": 1}, "decision '0' does not exist"),
    ):
        with pytest.raises(space.InvalidEdit, match=says):
            space.edit_decisions(w, sch, wrong)


def test_a_compute_location_outside_the_blocks_set_names_the_set():
    w, sch = _annotated("conv_nhwc")
    decisions = space.decisions_of(sch.trace)
    i = next(i for i, d in enumerate(decisions) if d.kind == "SampleComputeLocation")
    valid = space._compute_locations(w, sch.trace, i)
    assert -2 in valid and decisions[i].value in valid
    gap = next(k for k in range(-2, max(valid) + 1) if k not in valid)
    with pytest.raises(space.InvalidEdit, match=rf"decision {i} \(SampleComputeLocation\): {gap} is not a compute "):
        space.edit_decisions(w, sch, {i: gap})
    assert space.decisions_of(space.edit_decisions(w, sch, {i: -2}))[i].value == -2


def test_the_inspector_fields_parse_into_edits():
    _w, sch = _annotated("matmul")
    decisions = space.decisions_of(sch.trace)
    tile = next(i for i, d in enumerate(decisions) if d.kind == "SamplePerfectTile")
    text = ", ".join(str(f) for f in decisions[tile].value)
    assert edits_from(decisions, {tile: text}) == {}  # unchanged fields are no edit
    assert edits_from(decisions, {tile: "[2 " + text[1:] + "]"})[tile][0] == 2
    with pytest.raises(space.InvalidEdit, match=rf"decision {tile} \(SamplePerfectTile\): 'a, b' is not integers"):
        edits_from(decisions, {tile: "a, b"})
    line = variant_html(
        {"id": 7, "chosen_by": "<script>", "latency_ms": 0.5, "gflops": 3.0, "verified": True},
        {"latency_ms": 1.0, "trial": 2},
    )
    assert "2.00× the speed of trial 2" in line and "verified" in line and "<script>" not in line


# ---------------------------------------------------------------- one session, measured what-ifs


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A session paused after its first candidate, a what-if measured while paused, then run to the end."""
    db = str(tmp_path_factory.mktemp("whatif") / "w.db")
    s = TuningSession(
        SMALL["matmul"],
        trials=4,
        strategy="no-rewrite",
        db=db,
        trials_per_round=2,
        population=32,
        generations=1,
        init_min_unmeasured=8,
    )
    events: list[Event] = []
    lock = threading.Lock()

    def on_event(e):
        with lock:
            events.append(e)
        if e.kind == "candidate_measured" and e.data["record"]["chosen_by"] != "user":
            s.pause()  # the loop stops before its next candidate

    unsubscribe = s.subscribe(on_event)
    s.start()
    deadline = time.time() + 300
    while s.status != "paused" and time.time() < deadline:
        time.sleep(0.05)
    assert s.status == "paused"
    unsubscribe()
    s.subscribe(lambda e: events.append(e))
    done_before = s.trials_done
    base = s.best
    assert base is not None, "the first candidate was not verified"
    edits = _a_tile_edit(space.decisions_of(s.edit_decisions(base, {})))
    paused_rec = s.measure(s.edit_decisions(base, edits))
    status_during = s.status
    s.resume_running()
    assert s.wait(300)
    assert s.status == "finished", s.error
    return {
        "session": s,
        "db": db,
        "events": events,
        "base": base,
        "edits": edits,
        "paused": paused_rec,
        "done_before": done_before,
        "status_during": status_during,
    }


@pytest.mark.slow
def test_a_what_if_while_paused_is_stored_verified_and_spends_no_budget(tuned):
    s, rec = tuned["session"], tuned["paused"]
    assert tuned["status_during"] == "paused"
    assert rec["chosen_by"] == "user" and rec["round"] == 0 and rec["error_class"] is None and rec["verified"]
    assert rec["trial"] == tuned["done_before"]  # where the search stood
    decisions = space.decisions_of(space.schedule_from_trace_json(s.workload, rec["trace"]).trace)
    ((i, want),) = tuned["edits"].items()
    assert decisions[i].setting == want
    stored = RecordStore(tuned["db"], readonly=True).record(rec["id"])
    assert stored["chosen_by"] == "user" and stored["verified"] == 1 and stored["features"] is not None
    ids = [e.data["record"]["id"] for e in tuned["events"] if e.kind == "candidate_measured"]
    assert rec["id"] in ids
    # The budget was the search's: 4 search trials, the what-if on top.
    records = s.records()
    assert s.trials_done == 4 and len(whatif.search_records(records)) == 4 and len(records) >= 5
    summary = s.summary()
    assert summary["trials"] == 4 and summary["what_if"] >= 1


@pytest.mark.slow
def test_a_what_if_after_the_session_finished_reopens_it_for_one_measurement(tuned):
    s = tuned["session"]
    n_events = len(tuned["events"])
    decisions = space.decisions_of(s.edit_decisions(tuned["base"], {}))
    rec = s.measure(s.edit_decisions(tuned["base"], _an_unroll_edit(decisions)))
    assert rec["chosen_by"] == "user" and rec["verified"] and rec["trial"] == 4
    assert s.status == "finished"
    store = RecordStore(tuned["db"], readonly=True)
    assert store.session(s.session_id)["status"] == "finished"
    new = tuned["events"][n_events:]
    kinds = [e.kind for e in new]
    assert "candidate_measured" in kinds and not {"session_started", "resumed", "finished"} & set(kinds)
    stored_kinds = [e["kind"] for e in store.events(s.session_id)]
    assert stored_kinds[-1] in ("candidate_measured", "new_best", "best_remeasured", "measurement_noise")
    assert s.trials_done == 4 and s.summary()["trials"] == 4


@pytest.mark.slow
def test_the_inspector_measures_an_edited_variant_without_blocking(tuned):
    s = tuned["session"]
    store = RecordStore(tuned["db"], readonly=True)
    model = SessionModel()
    for e in store.events(s.session_id):
        model.apply(Event(e["kind"], s.session_id, e["time"], e["elapsed"], e["data"], e["id"]))
    measured = []
    insp = CandidateInspector(model, lambda: store, session_of=lambda: s, on_measured=measured.append)
    insp.show(tuned["base"]["id"])
    editor = insp.what_if
    assert not editor.button.disabled and editor.inputs
    ((i, value),) = _a_tile_edit(editor.decisions).items()
    editor.inputs[i].value = ", ".join(str(f) for f in value)
    thread = editor.measure()
    assert thread is not None and thread.is_alive()  # the click returns while the variant is still being measured
    thread.join(240)
    assert not thread.is_alive() and measured, editor.result.value
    new = measured[0]
    assert new["chosen_by"] == "user" and f"record {new['id']}" in editor.result.value
    assert "verified" in editor.result.value
    editor.open_new.click()
    assert insp.record_id == new["id"] and "chosen by user" in insp.header.value
    # bad values: one message each, and nothing is measured
    n_records = len(s.records())
    editor.inputs[i].value = "a, b"
    assert editor.measure() is None and "is not integers separated by commas" in editor.result.value
    editor.inputs[i].value = ", ".join(["3"] + ["1"] * (len(value) - 1))
    editor.measure().join(60)
    assert "not measured" in editor.result.value and "multiply to 3, not to the extent 64" in editor.result.value
    assert len(s.records()) == n_records
    # without a session that can measure, the fields are not offered
    ro = CandidateInspector(model, lambda: store)
    ro.show(tuned["base"]["id"])
    assert ro.what_if.button.disabled and not ro.what_if.inputs


@pytest.mark.slow
def test_a_resumed_session_counts_only_search_trials_against_its_budget(tuned):
    s = tuned["session"]
    n_user = int((s.records()["chosen_by"] == "user").sum())
    n_search = len(whatif.search_records(s.records()))
    r = TuningSession.resume(tuned["db"], session_id=s.session_id, trials=5)
    started = []
    r.subscribe(lambda e: e.kind == "session_started" and started.append(e.data["trials_done"]))
    try:
        summary = r.run()
        assert summary["trials"] == 5 and summary["what_if"] == n_user
        assert n_user and started == [n_search]  # what it starts from, as a progress bar counts: no what-if
        assert len(whatif.search_records(r.records())) == 5
    finally:
        r.store.close()
