"""Rule-based pruning of the schedule space (workbench/pruning.py): the rules on real feature rows, the
pruner's counting and waiver, the search's scores, and a session that prunes."""

import numpy as np
import pytest

from workbench import pruning
from workbench.errors import WorkbenchError
from workbench.store import RecordStore

from .shapes import SMALL
from .test_session_e2e import _session

MACHINE = pruning.Machine(lanes=16, cores=2)


def _row(vec_len=0, par_prod=0, mul=1000.0):
    """A main-store feature row with the given vectorized innermost extent and parallel extent product."""
    r = np.zeros(164, np.float32)
    r[2] = np.log2(mul + 1)
    if vec_len:
        r[pruning.VEC_NUM], r[pruning.VEC_PROD], r[pruning.VEC_LEN] = 1.0, np.log2(vec_len + 1), np.log2(vec_len + 1)
    if par_prod:
        r[pruning.PAR_NUM], r[pruning.PAR_PROD], r[pruning.PAR_LEN] = 1.0, np.log2(par_prod + 1), np.log2(par_prod + 1)
    return r


@pytest.mark.parametrize("name", list(pruning.RULES))
def test_pruning_rule_conforms_and_is_registered(name):
    rule = pruning.RULES[name]
    assert isinstance(rule, pruning.PruningRule) and rule.name == name and type(rule).__doc__
    good = _row(vec_len=16, par_prod=64)
    assert rule.violated(good, MACHINE) is False  # a vectorized, parallel program breaks no rule
    assert isinstance(rule.violated(_row(), MACHINE), bool)


@pytest.mark.parametrize(
    "row, broken",
    [
        (_row(vec_len=0, par_prod=64), "unvectorized"),
        (_row(vec_len=8, par_prod=64), "vector-width"),
        (_row(vec_len=24, par_prod=64), "vector-width"),
        (_row(vec_len=32, par_prod=1), "serial"),
        (_row(vec_len=48, par_prod=2), None),
    ],
)
def test_each_rule_fires_on_what_it_describes(row, broken):
    p = pruning.Pruner("all", MACHINE)
    assert p.first_violation(np.stack([np.zeros(164, np.float32), row])) == broken


def test_the_main_store_is_the_one_doing_the_arithmetic():
    copy_store = _row(vec_len=0, par_prod=0, mul=0.0)  # a weight copy: no arithmetic, not vectorized
    compute = _row(vec_len=16, par_prod=8, mul=1e6)
    assert pruning.Pruner("all", MACHINE).first_violation(np.stack([copy_store, compute])) is None


def test_pruner_counts_per_rule_and_waives_a_batch_that_breaks_rules_everywhere():
    p = pruning.Pruner("unvectorized,serial", MACHINE)
    batch = [_row(16, 8)[None], _row(0, 8)[None], _row(16, 1)[None]]
    assert p.check(batch) == [None, "unvectorized", "serial"]
    assert p.check([_row(0, 8)[None], _row(16, 1)[None]]) == [None, None]  # all broken: nothing pruned
    assert p.snapshot() == {"unvectorized": 1, "serial": 1, "checked": 5, "waived": 2}
    assert p.check(batch, count=False) == [None, "unvectorized", "serial"]
    assert p.snapshot()["checked"] == 5


def test_pruned_programs_score_below_every_kept_one_in_their_own_order():
    s = pruning.pruned_scores(np.array([0.5, 3.0, -1.0, 2.0]), [None, "serial", None, "serial"])
    assert s[0] == 0.5 and s[2] == -1.0
    assert max(s[1], s[3]) < -1.0 and s[1] > s[3]


def test_rule_names_are_checked_with_one_line():
    assert pruning.parse_rules("all") == tuple(pruning.RULES)
    assert pruning.parse_rules("none") == () == pruning.parse_rules("")
    assert pruning.parse_rules("serial, serial,unvectorized") == ("serial", "unvectorized")
    with pytest.raises(WorkbenchError, match="unknown pruning rule 'vectorise'; valid: all, none, unvectorized"):
        pruning.parse_rules("vectorise")
    from workbench import presets

    assert presets.get("quick", pruning="all").pruning == tuple(pruning.RULES)
    with pytest.raises(WorkbenchError, match="unknown pruning rule"):
        presets.get("quick", pruning=("bogus",))


def test_lanes_come_from_the_targets_vector_extensions():
    import tvm

    assert pruning.Machine.of_target(tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})) == (
        pruning.Machine(16, 2)
    )
    assert pruning.Machine.of_target(tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})).lanes == 8


def test_the_rules_read_tvm_feature_rows_right():
    """Real PerStoreFeature rows of two schedules of a matmul: the naive loop nest breaks 'unvectorized' and
    'serial'; one with a parallel outer loop and a 16-wide vectorized inner loop breaks nothing."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from workbench import cost_model, presets, space, tvm_env
    from workbench.workloads import workload_from_spec

    tvm_env.setup()
    w = workload_from_spec(SMALL["matmul"])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    ctx = space.tune_context(w, target, "no-rewrite", presets.get("quick"), 0, search=False)
    naive, tuned = Schedule(w.mod), Schedule(w.mod)
    loops = tuned.get_loops(tuned.get_sblock(w.anchor_block))
    assert int(tuned.get(loops[1]).extent) % 16 == 0
    tuned.parallel(loops[0])
    j_outer, j_inner = tuned.split(loops[1], [None, 16])
    k = loops[2]
    tuned.reorder(j_outer, k, j_inner)
    tuned.vectorize(j_inner)
    feats = cost_model.Featurizer(ctx, reuse=False)(
        ctx,
        [ms.MeasureCandidate(s, ms.arg_info.ArgInfo.from_prim_func(s.mod["main"])) for s in (naive, tuned)],
        "no-rewrite",
    )
    p = pruning.Pruner("all", pruning.Machine.of_target(target))
    assert p.first_violation(feats[0]) == "unvectorized"
    assert pruning.Pruner("serial", pruning.Machine.of_target(target)).first_violation(feats[0]) == "serial"
    assert p.first_violation(feats[1]) is None


def test_a_session_with_pruning_measures_no_program_a_rule_rejects(tmp_path):
    s = _session(SMALL["matmul"], tmp_path, strategy="no-rewrite", trials=16, pruning="all", warmup_samples=8)
    summ = s.run()
    assert summ["status"] == "finished" and summ["verified"]
    counts = summ["pruning"]
    assert set(counts) == {*pruning.RULES, "checked", "waived"} and counts["checked"] > 0
    store = RecordStore(str(tmp_path / "r.db"), readonly=True)
    rounds = [e["data"] for e in store.events(s.session_id) if e["kind"] == "round_finished"]
    assert rounds and all("pruning_counts" in d and "pruned_programs" in d for d in rounds)
    judge = pruning.Pruner("all", s.pruner.machine)
    for _strategy, feats, _lat, _h in store.training_rows(SMALL["matmul"]["name"]):
        assert feats is None or judge.first_violation(feats) is None or counts["waived"] > 0
    assert store.sessions()[0]["preset_params"]["pruning"] == list(pruning.RULES)
