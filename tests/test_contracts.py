"""One contract suite per extension point of ``workbench/interfaces.py``, run over every implementation.

A new builder, runner or cost model joins its suite by an entry in ``BUILDERS``, ``RUNNERS`` or
``COST_MODELS`` below; a new layout strategy joins by being registered in ``layouts.STRATEGIES``.
The RPC runner is exercised against a real tracker and server on 127.0.0.1 (``test_rpc.Cluster``).
"""

import contextlib
import inspect
import os
import threading
import time

import numpy as np
import pytest

from workbench import cost_model, interfaces, layouts, measure, presets, space, tvm_private
from workbench.errors import WorkbenchError
from workbench.workloads import workload_from_spec

from .shapes import SMALL
from .test_faults import bad_modules
from .test_rpc import Cluster

TARGET = {"kind": "llvm", "num-cores": 1}
PRESET = presets.get("quick")  # run_timeout 30 s: a per-call timeout that is honoured is visibly shorter


def _broken_and_slow_modules():
    """(a module TVM refuses to build, a kernel that runs for milliseconds), both on float32[16] A and B."""
    import tvm
    from tvm import tirx
    from tvm.script import tirx as T

    undefined = tirx.Var("undefined", "int32")

    @T.prim_func(check_well_formed=False)
    def unbuildable(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        B[0] = T.Cast("float32", undefined)  # a variable nothing defines: the build rejects it

    @T.prim_func
    def slow(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(16):
            B[i] = A[i]
        for k in range(2000000):  # a dependency chain through memory: ~5 ms, not vectorisable away
            B[k % 16] = B[(k * 7 + 3) % 16] * T.float32(0.5) + A[k % 16]

    return tvm.IRModule({"main": unbuildable}), tvm.IRModule({"main": slow})


@pytest.fixture(scope="module")
def kernels(pools):
    """Paths of built kernels (good: B = 2A; segv: crashes; hang: never ends; slow: milliseconds) and their shapes."""
    builder, _ = pools
    good, segv, hang, shapes = bad_modules()
    _, slow = _broken_and_slow_modules()
    built = builder.build([good, segv, hang, slow])
    assert all(b.path for b in built), built
    return dict(zip(("good", "segv", "hang", "slow"), (b.path for b in built))), shapes


# ---------------------------------------------------------------- Builder

BUILDERS = {
    # a shared library for the local runner, a tar for RPC servers (measure.artifact_for)
    "local-so": lambda: measure.make_builder(TARGET, PRESET, workers=1),
    "local-tar": lambda: measure.make_builder(TARGET, PRESET, workers=1, runner_spec="rpc://host:9190/key"),
}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def builder(request):
    b = BUILDERS[request.param]()
    yield b
    b.close()


def test_builder_conforms(builder):
    assert isinstance(builder, interfaces.Builder)


def test_builder_gives_one_result_per_module_in_order_and_a_failure_as_a_result(builder):
    good, _segv, _hang, _shapes = bad_modules()
    unbuildable, slow = _broken_and_slow_modules()
    assert builder.build([]) == []
    results = builder.build([good, unbuildable, slow])
    assert len(results) == 3 and all(isinstance(r, interfaces.BuildResult) for r in results)
    ok1, bad, ok2 = results
    assert ok1.path and ok2.path and ok1.path != ok2.path and os.path.isfile(ok1.path), results
    assert ok1.error_class is ok2.error_class is None
    assert all(0 < r.build_s < 60 for r in (ok1, ok2)), results  # how long the compile took, where it worked
    assert measure.recorded_arg_types(ok1.path) == [((16,), "float32"), ((16,), "float32")]  # shapes with dtypes
    assert bad.path is None and bad.error_class == "build-error", bad
    assert bad.error_msg and "\n" not in bad.error_msg
    for r in (ok1, ok2):
        builder.discard(r.path)
        assert not os.path.exists(r.path)
        builder.discard(r.path)  # already discarded: nothing happens
    builder.discard(None)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_builder_close_deletes_its_artifacts_and_is_idempotent(name):
    b = BUILDERS[name]()
    good, *_ = bad_modules()
    [r] = b.build([good])
    assert r.path and os.path.isfile(r.path)
    b.close()
    assert not os.path.exists(r.path)
    b.close()


# ---------------------------------------------------------------- Runner (and BatchRunner)

# name -> (is a BatchRunner, measures locally)
RUNNERS = {"local": (False, True), "rpc": (True, False)}


@pytest.fixture(scope="module")
def rpc_cluster():
    c = Cluster(1)
    yield c
    c.close()


def _runner_spec(name, request):
    return None if name == "local" else request.getfixturevalue("rpc_cluster").url


@pytest.fixture(scope="module", params=sorted(RUNNERS))
def runner(request):
    r = measure.make_runner(_runner_spec(request.param, request), TARGET, PRESET)
    r.contract_name = request.param
    yield r
    r.close()


def test_runner_conforms(runner):
    batch, local = RUNNERS[runner.contract_name]
    assert isinstance(runner, interfaces.Runner)
    assert isinstance(runner, interfaces.BatchRunner) is batch
    assert runner.measures_locally is local


def test_runner_times_in_seconds(runner, kernels):
    paths, shapes = kernels
    t = time.perf_counter()
    r = runner.run(paths["slow"], shapes, number=1, repeat=2, min_repeat_ms=0)
    wall = time.perf_counter() - t
    assert r.error_class is None and r.error_msg is None, r
    assert len(r.run_secs) == 2 and all(s > 0 for s in r.run_secs)
    assert r.latency_ms == float(np.median(r.run_secs)) * 1e3
    # Two million dependent iterations take well over 0.1 ms, and a timing cannot outlast the call that took it.
    assert 0.1 < r.latency_ms < wall * 1e3, (r.latency_ms, wall)


@pytest.mark.parametrize("artifact", sorted(BUILDERS))
def test_runner_loads_every_artifact_a_builder_makes(runner, artifact):
    b = BUILDERS[artifact]()
    try:
        good, *_rest, shapes = bad_modules()
        [built] = b.build([good])
        assert built.path.endswith("." + b.artifact), built
        r = runner.run(built.path, shapes, number=1, repeat=2, min_repeat_ms=0)
        assert r.error_class is None and len(r.run_secs) == 2, r
        x = np.linspace(-1, 1, 16, dtype="float32")
        out, cls, msg = runner.compute(built.path, [x], (16,))
        assert cls is None and np.allclose(out, 2 * x), msg
    finally:
        b.close()


def test_runner_computes_the_kernels_output(runner, kernels):
    paths, _ = kernels
    x = np.linspace(-1, 1, 16, dtype="float32")
    out, cls, msg = runner.compute(paths["good"], [x], (16,))
    assert cls is None and msg is None
    assert out.shape == (16,) and np.allclose(out, 2 * x)


@pytest.fixture(scope="module")
def typed_kernel(pools):
    """A kernel B = 3 * A on uint8[16] A and int32[16] B; the builder records those dtypes beside it."""
    import tvm
    from tvm import te

    a = te.placeholder((16,), "uint8", name="A")
    b = te.compute((16,), lambda i: a[i].astype("int32") * 3, name="B")
    [r] = pools[0].build([tvm.IRModule({"main": te.create_prim_func([a, b])})])
    assert r.path, r
    return r.path


def test_runner_uses_the_argument_dtypes_of_the_artifact_or_of_the_shapes(runner, typed_kernel):
    assert measure.recorded_arg_types(typed_kernel) == [((16,), "uint8"), ((16,), "int32")]
    for shapes in ([(16,), (16,)], [((16,), "uint8"), ((16,), "int32")]):  # plain shapes, or (shape, dtype) pairs
        r = runner.run(typed_kernel, shapes, number=1, repeat=1, min_repeat_ms=0)
        assert r.error_class is None and r.latency_ms > 0, r
    x = (np.arange(16) * 15).astype(np.uint8)
    for out_shape in ((16,), ((16,), "int32")):
        out, cls, msg = runner.compute(typed_kernel, [x], out_shape)
        assert cls is None, msg
        assert out.dtype == np.int32 and np.array_equal(out, 3 * x.astype(np.int32))


@contextlib.contextmanager
def _runner_of_its_own(name):
    """A runner that no other test uses, for RPC on a tracker and two servers of its own: a crashing kernel
    takes its RPC server down with it (TVM's server exits when a session's process dies)."""
    cluster = Cluster(2) if name == "rpc" else None
    try:
        r = measure.make_runner(cluster.url if cluster else None, TARGET, PRESET)
        try:
            yield r
        finally:
            r.close()
    finally:
        if cluster is not None:
            cluster.close()


@pytest.mark.parametrize("name", sorted(RUNNERS))
def test_runner_reports_a_crashing_kernel_as_a_result(name, kernels):
    paths, shapes = kernels
    with _runner_of_its_own(name) as runner:
        r = runner.run(paths["segv"], shapes)
        assert r.error_class == "run-crash" and r.error_msg and r.run_secs == [] and r.latency_ms is None, r
        out, cls, msg = runner.compute(paths["segv"], [np.ones(16, "float32")], (16,))
        assert out is None and cls == "run-crash" and msg


def test_runner_honours_a_per_call_timeout(runner, kernels):
    paths, shapes = kernels
    t = time.perf_counter()
    r = runner.run(paths["hang"], shapes, timeout=1)
    assert r.error_class == "run-timeout" and r.run_secs == [], r
    assert time.perf_counter() - t < 15  # the runner's own timeout is 30 s
    assert runner.run(paths["good"], shapes).error_class is None


@pytest.fixture(scope="module", params=sorted(n for n, (batch, _) in RUNNERS.items() if batch))
def batch_runner(request):
    r = measure.make_runner(_runner_spec(request.param, request), TARGET, PRESET)
    yield r
    r.close()


def test_batch_runner_returns_results_in_order_and_stops_when_told(batch_runner, kernels):
    runner = batch_runner
    paths, shapes = kernels
    seen = []
    items = [(paths["good"], shapes), (paths["slow"], shapes), (paths["good"], shapes)]
    results = runner.run_many(items, on_result=lambda i, r: seen.append((i, r)), min_repeat_ms=0)
    assert len(results) == 3 and all(r.error_class is None and r.latency_ms > 0 for r in results), results
    assert sorted(i for i, _ in seen) == [0, 1, 2] and all(results[i] is r for i, r in seen)
    assert results[1].latency_ms > results[0].latency_ms  # each result belongs to its own item
    assert runner.run_many(items, proceed=lambda: False) == [None, None, None]


def _children() -> set:
    import psutil

    alive = set()
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE:
                alive.add(c.pid)
        except psutil.NoSuchProcess:  # exited between the listing and the look
            pass
    return alive


def _until_gone(pids: set, seconds: float = 10) -> set:
    gone = time.monotonic() + seconds
    while pids & _children() and time.monotonic() < gone:
        time.sleep(0.05)
    return pids & _children()


@pytest.mark.parametrize("name", sorted(RUNNERS))
def test_runner_close_ends_its_workers_and_is_idempotent(name, request, kernels, monkeypatch):
    monkeypatch.setenv(measure.WARM_ENV, "0")  # nothing kept warm: close() ends them (kept: the test below)
    spec = _runner_spec(name, request)  # the RPC servers (a module fixture) are not this runner's workers
    before = _children()
    r = measure.make_runner(spec, TARGET, PRESET)
    paths, shapes = kernels
    assert r.run(paths["good"], shapes).error_class is None  # its workers are up
    assert _children() - before, "the runner started no worker process"
    r.close()
    r.close()
    assert not _until_gone(_children() - before), "a worker outlived close()"


def test_a_closed_pools_workers_serve_the_next_pool_of_its_kind(kernels, monkeypatch):
    """A session's pools, closed, keep their TVM-importing processes warm for the next session's (measure.WARM):
    the same processes answer, then end when WARM's time is up or at end_all."""
    monkeypatch.setattr(measure, "WARM", measure.WarmWorkers(seconds=60))
    paths, shapes = kernels
    before = _children()
    b, r = measure.make_builder(TARGET, PRESET, workers=1), measure.make_runner(None, TARGET, PRESET)
    good, *_ = bad_modules()
    [built] = b.build([good])
    assert r.run(built.path, shapes).error_class is None
    workers = _children() - before
    assert len(workers) == 2  # one builder worker, one runner worker (the suite's presets time in one process)
    b.close()
    r.close()
    r.close()
    assert sorted(measure.WARM.kinds()) == [("builder", 1, PRESET.build_timeout), ("runner", 1, 0)]
    assert not os.path.exists(built.path)  # the artifacts go with the builder, the processes stay

    b2, r2 = measure.make_builder(TARGET, PRESET, workers=1), measure.make_runner(None, TARGET, PRESET)
    assert measure.WARM.kinds() == []
    [again] = b2.build([good])
    assert r2.run(again.path, shapes).error_class is None
    assert _children() - before == workers, "the next pools started processes of their own"
    # a runner of another kind (thread count) is not served by them
    two_threads = measure.make_runner(None, {"kind": "llvm", "num-cores": 2}, PRESET)
    assert two_threads.run(again.path, shapes).error_class is None
    assert len(_children() - before) == 3
    two_threads.close()
    b2.close()
    r2.close()
    measure.WARM.end_all()
    assert not _until_gone(_children() - before), "a parked worker outlived end_all()"


def test_a_malformed_warm_time_is_refused_when_a_pool_is_made(monkeypatch):
    monkeypatch.setenv(measure.WARM_ENV, "a while")
    for make in (lambda: measure.make_runner(None, TARGET, PRESET), lambda: measure.make_builder(TARGET, PRESET)):
        with pytest.raises(WorkbenchError, match="WORKBENCH_WARM_WORKERS_S must be a number of seconds, not 'a while'"):
            make()


def test_workers_are_kept_warm_only_for_a_while(kernels, monkeypatch):
    monkeypatch.setattr(measure, "WARM", measure.WarmWorkers(seconds=0.5))
    paths, shapes = kernels
    before = _children()
    r = measure.make_runner(None, TARGET, PRESET)
    assert r.run(paths["good"], shapes).error_class is None
    r.close()
    assert measure.WARM.kinds() == [("runner", 1, 0)]
    assert not _until_gone(_children() - before), "a parked worker outlived its time"
    assert measure.WARM.kinds() == []
    # a worker still timing when its runner closes is ended, not parked
    r = measure.make_runner(None, TARGET, PRESET)
    pending = r._worker.submit(time.sleep, 1.0)
    r.close()
    assert measure.WARM.kinds() == []
    with pytest.raises(Exception):
        pending.result(timeout=10)


def test_a_runner_in_two_processes_reports_the_faster_and_keeps_both_warm(kernels, monkeypatch):
    """The default runner times each kernel in two processes, one after the other: ``repeat`` results from the
    faster one (its median is the latency), every process's results in ``last_process_secs``, one reading for
    both; closed, both processes serve the next such runner."""
    monkeypatch.setattr(measure, "WARM", measure.WarmWorkers(seconds=60))
    paths, shapes = kernels
    two = presets.get("quick", runner_processes=2)
    r = measure.make_runner(None, TARGET, two)
    try:
        res = r.run(paths["slow"], shapes, number=1, repeat=3, min_repeat_ms=0)
        assert res.error_class is None and len(res.run_secs) == 3, res
        assert len(r.last_process_secs) == 2 and all(len(x) == 3 for x in r.last_process_secs)
        assert res.latency_ms == pytest.approx(min(float(np.median(x)) for x in r.last_process_secs) * 1e3)
        assert res.reading["wall_s"] > 0 and "wait_fraction" in res.reading
        pids = {w.submit(os.getpid).result() for w in r._workers}
        assert len(pids) == 2, "two processes, not one asked twice"
        r.close()
        assert sorted(measure.WARM.kinds()) == [("runner", 1, 0), ("runner", 1, 1)]
        again = measure.make_runner(None, TARGET, two)
        assert {w.submit(os.getpid).result() for w in again._workers} == pids
        again.close()
    finally:
        r.close()
        measure.WARM.end_all()


def test_merged_readings_keep_the_worst_share():
    a = {"wall_s": 0.1, "wait_fraction": 0.01, "other_cores": 0.02, "busiest": []}
    b = {"wall_s": 0.2, "wait_fraction": 0.3, "other_cores": 0.5, "busiest": [{"pid": 7, "name": "hog", "cores": 0.5}]}
    assert measure.merge_readings([a, None, b]) == {
        "wall_s": 0.3,
        "wait_fraction": 0.3,
        "other_cores": 0.5,
        "busiest": b["busiest"],
    }
    assert measure.merge_readings([None]) is None


def test_runner_processes_must_be_a_positive_integer():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(WorkbenchError, match="runner_processes must be a positive integer"):
            presets.get("quick", runner_processes=bad)


def test_make_runner_passes_a_runner_through_and_rejects_a_bad_url(pools):
    _, local = pools
    assert measure.make_runner(local, TARGET, PRESET) is local
    with pytest.raises(WorkbenchError, match="rpc://HOST:PORT/KEY"):
        measure.make_runner("rpc:/nowhere", TARGET, PRESET)


# ---------------------------------------------------------------- CostModel

COST_MODELS = {
    name: (lambda cls=cls: cls(seed=0, max_rounds=100, early_stop=10, warmup=8, nthread=1))
    for name, cls in cost_model.COST_MODELS.items()
}
# One model per layout strategy (preset shared_cost_model=False), routing by the features' strategy one-hot.
for _name in (cost_model.PackSumXGB.name, cost_model.PairwiseRankXGB.name):
    COST_MODELS[f"per-strategy {_name}"] = lambda _name=_name: cost_model.PerStrategyModels(COST_MODELS[_name])

CONTRACT_STRATEGIES = 2  # the programs below come from two layout strategies (their rows' one-hot)


@pytest.fixture(params=sorted(COST_MODELS))
def model(request):
    return COST_MODELS[request.param]()


def _programs(rng, n):
    """n programs (1-3 feature rows each) and their throughput: a sum over rows, as pack-sum assumes. Program i
    comes from layout strategy i % CONTRACT_STRATEGIES: every row ends with that strategy's one-hot."""
    progs = []
    for i in range(n):
        p = rng.uniform(0, 1, size=(int(rng.integers(1, 4)), cost_model.N_FEATURES)).astype(np.float32)
        p[:, -cost_model.N_STRATEGIES :] = 0.0
        p[:, -cost_model.N_STRATEGIES + i % CONTRACT_STRATEGIES] = 1.0
        progs.append(p)
    return progs, np.array([float((0.1 + 3 * p[:, 0] + p[:, 1] ** 2).sum()) for p in progs])


def _rank_correlation(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_cost_model_conforms_and_is_random_before_training(model):
    assert isinstance(model, interfaces.CostModel)
    assert model.name in cost_model.COST_MODELS and isinstance(model.calibrated, bool)
    rng = np.random.default_rng(0)
    progs, _ = _programs(rng, 5)
    assert model.n_samples == 0 and not model.trained and model.last_train_rounds == 0
    assert model.feature_importance() == {}
    assert model.train() is False
    for scores in (model.predict(progs), model.untrained_scores(5)):
        assert scores.shape == (5,) and np.all((scores >= 0) & (scores < 1))
    for p in progs:
        model.add(p, 1e-3, "w")
    assert model.n_samples == 5 and model.train() is False and not model.trained  # below its warm-up


def test_cost_model_ranks_after_training_within_each_group(model):
    rng = np.random.default_rng(1)
    # 200 training programs per strategy: a model per strategy must learn from its own share alone
    progs, speed = _programs(rng, 480)
    # Two workloads whose latencies differ by 1000x: costs are compared only within a group.
    for i, (p, s) in enumerate(zip(progs[:400], speed[:400])):
        model.add(p, (1e-3 if i % 4 < 2 else 1.0) / s, "small" if i % 4 < 2 else "large")
    model.add(progs[0], None, "small")  # a failed program
    assert model.n_samples == 401
    assert model.train() is True
    assert model.trained and model.last_train_rounds > 0 and model.untrained_scores(3) is None
    importance = model.feature_importance()
    assert importance and all(isinstance(v, float) for v in importance.values())
    test, true_speed = progs[400:], speed[400:]
    pred = model.predict(test)
    assert pred.shape == (80,) and np.all(np.isfinite(pred))
    # a search ranks the candidates of one strategy at a time: every model must rank within each strategy
    for k in range(CONTRACT_STRATEGIES):
        assert _rank_correlation(pred[k::CONTRACT_STRATEGIES], true_speed[k::CONTRACT_STRATEGIES]) > 0.8, k
    assert np.array_equal(model.predict(test), pred)  # a trained model is deterministic


def test_cost_model_predicts_while_another_thread_adds_and_trains(model):
    rng = np.random.default_rng(2)
    progs, speed = _programs(rng, 60)
    errors, done, started, calls = [], threading.Event(), threading.Event(), []

    def predict():
        # a pause between calls, as a search between its batches: a loop that never lets go of the GIL starves
        # the training's Python objective (one test took 146 s on a slow 2-core machine) and tests nothing more
        while not done.wait(0.002):
            try:
                assert len(model.predict(progs[:8])) == 8
                model.n_samples, model.trained, model.feature_importance()
                calls.append(model.trained)
                started.set()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
                started.set()
                return

    t = threading.Thread(target=predict)
    t.start()
    try:
        assert started.wait(60)
        for p, s in zip(progs, speed):
            model.add(p, 1e-3 / s, "w")
            if model.n_samples % 20 == 0:
                model.train()
        for _ in range(6000):  # until it has predicted with the trained model too
            if errors or calls[-1]:
                break
            time.sleep(0.005)
    finally:
        done.set()
        t.join()
    assert errors == [] and model.trained
    assert calls[0] is False and calls[-1] is True, len(calls)  # it predicted before, during and after training


# ---------------------------------------------------------------- LayoutStrategy


@pytest.fixture(scope="module")
def conv():
    return workload_from_spec(SMALL["conv_nhwc"])  # has a constant weight: every strategy is distinct on it


def _candidate(workload, strategy):
    for seed in range(1, 20):
        sch = space.annotate(workload, 0, seed, strategy)
        if sch is not None:
            return sch
    raise AssertionError(f"no annotation of {workload.name} survives {strategy}'s postprocessors")


@pytest.mark.parametrize("name", list(layouts.STRATEGIES))
def test_layout_strategy_conforms_and_is_registered(name):
    from tvm.s_tir import meta_schedule as ms

    s = layouts.STRATEGIES[name]
    assert isinstance(s, interfaces.LayoutStrategy)
    assert s.name == name and layouts.get(name) is s and name in layouts.STRATEGY_INDEX
    assert s.summary.strip() and s.latency_means.strip() and isinstance(s.rewrites_offline, bool)
    a, b = s.postprocs(), s.postprocs()
    assert a and len(a) == len(b) and all(isinstance(p, ms.postproc.Postproc) for p in a + b)
    assert not any(x.same_as(y) for x in a for y in b)  # a new list of new postprocessors per call


@pytest.mark.parametrize("name", list(layouts.STRATEGIES))
def test_layout_strategy_deploy_inputs_are_what_its_kernel_computes_the_reference_from(name, conv, pools):
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    builder, runner = pools
    s = layouts.get(name)
    sch = _candidate(conv, name)
    inputs = conv.make_inputs(seed=1234)
    kin = s.deploy_inputs(sch, conv, inputs)
    shapes = [tuple(int(x) for x in a.shape) for a in ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)]
    assert [k.shape for k in kin] == shapes[:-1]
    assert [k.dtype for k in kin] == [x.dtype for x in inputs]  # a rewritten weight keeps its dtype
    if not s.rewrites_offline:
        assert all(k is x or np.array_equal(k, x) for k, x in zip(kin, inputs))
    [b] = builder.build([RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod)])
    try:
        assert b.path, b
        out, cls, msg = runner.compute(b.path, kin, shapes[-1])
        assert cls is None, msg
        ok, detail = measure.verify(out, conv.numpy_reference(inputs).astype(np.float64))
        assert ok, detail
    finally:
        builder.discard(b.path)


# ---------------------------------------------------------------- SessionView (what widgets/ may use)

DEMO_DB = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks", "data", "demo_session.db"
)


def _tuning_session(tmp_path, trials: int = 4):
    from workbench import TuningSession

    return TuningSession(
        SMALL["matmul"],
        trials=trials,
        trials_per_round=4,
        strategy="auto",
        db=str(tmp_path / "v.db"),
        population=16,
        generations=1,
        init_min_unmeasured=4,
        noise="off",
        confirm_rounds=0,
    )


def _replay_session(tmp_path):
    from workbench.replay import ReplaySession

    return ReplaySession(DEMO_DB, speed=1000.0, max_gap=0.01)


SESSION_VIEWS = {"tuning": _tuning_session, "replay": _replay_session}


@pytest.mark.parametrize("name", list(SESSION_VIEWS))
def test_session_view_conforms_and_runs_its_course(name, tmp_path):
    from workbench.events import Event, EventKind
    from workbench.workloads import workload_from_spec as from_spec
    from workbench.store import RecordStore

    s = SESSION_VIEWS[name](tmp_path)
    assert isinstance(s, interfaces.SessionView)
    assert s.status == "created" and not s.paused and s.replay == (name == "replay")
    assert s.controller is None or isinstance(s.controller, interfaces.Steering)
    from_spec(s.workload_spec)  # the workload as data
    got = []
    unsubscribe = s.subscribe(got.append)
    assert s.measurement_gate.begin_draw()  # nothing is timed yet: a view may draw
    s.measurement_gate.end_draw()
    s.start()
    assert s.wait(300) and s.status == "finished"
    assert got and all(isinstance(e, Event) for e in got) and got[-1].kind == EventKind.FINISHED
    stored = RecordStore(s.db_path, readonly=True).events(s.session_id)
    assert len(stored) >= len([e for e in got if e.id])
    unsubscribe()


def _long_replay(tmp_path):
    from workbench.replay import ReplaySession

    return ReplaySession(DEMO_DB, speed=4.0)  # 32 candidates over ~17 s


def test_a_stored_session_is_a_read_only_session_view():
    from widgets.sessions import StoredSession

    from workbench.events import EventKind
    from workbench.store import RecordStore
    from workbench.workloads import workload_from_spec as from_spec

    sid = RecordStore(DEMO_DB, readonly=True).sessions()[-1]["id"]
    s = StoredSession(DEMO_DB, sid)
    assert isinstance(s, interfaces.SessionView) and s.read_only
    assert s.status == "finished" and not s.paused and not s.replay
    assert s.controller is None and s.measurement_gate is None
    from_spec(s.workload_spec)  # the workload as data
    got = []
    unsubscribe = s.subscribe(got.append)
    assert s.wait(5)  # no process tunes it: nothing to follow
    with pytest.raises(WorkbenchError, match="resume it"):
        s.start()
    s.pause()  # nothing runs: nothing to hold
    s.resume_running()
    s.stop()
    assert s.status == "finished" and got == []  # its events are in the store, not re-emitted
    assert any(e["kind"] == EventKind.FINISHED for e in RecordStore(DEMO_DB, readonly=True).events(sid))
    unsubscribe()


# The same views with a course too long to end by itself within the pause/stop test (a stop that did nothing
# would leave them running, not "finished"): a 256-trial tuning session, a replay at a quarter of recorded time.
LONG_SESSION_VIEWS = {"tuning": lambda tmp_path: _tuning_session(tmp_path, trials=256), "replay": _long_replay}


def _until(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


@pytest.mark.parametrize("name", list(SESSION_VIEWS))
def test_session_view_pause_and_stop_take_effect(name, tmp_path):
    from workbench.events import EventKind

    assert set(LONG_SESSION_VIEWS) == set(SESSION_VIEWS)
    s = LONG_SESSION_VIEWS[name](tmp_path)
    if s.controller is not None:
        s.controller.pick(s.controller.strategies[-1])
        assert s.controller.mode == "manual"
        with pytest.raises(WorkbenchError):
            s.controller.pick("no-such-strategy")
        s.controller.auto()
    measured, kinds = [], []
    s.subscribe(lambda e: measured.append(e) if e.kind == EventKind.CANDIDATE_MEASURED else None)
    s.subscribe(lambda e: kinds.append(e.kind))
    s.start()
    assert _until(lambda: len(measured) >= 1, 120), s.status
    s.pause()
    assert _until(lambda: s.status == "paused", 120), s.status  # held after the candidate being measured
    held = len(measured)
    time.sleep(1.0)
    assert len(measured) == held and s.status == "paused"  # nothing measured while paused
    s.resume_running()
    assert _until(lambda: len(measured) > held, 120), s.status  # going on again
    s.stop()
    assert s.wait(120) and s.status == "stopped" and kinds[-1] == EventKind.STOPPED
    assert EventKind.PAUSED in kinds and EventKind.RESUMED in kinds


# ---------------------------------------------------------------- TVM internals (workbench/tvm_private.py)


def test_the_tvm_internals_the_workbench_relies_on_are_there():
    from tvm.support.popen_pool import PopenWorker

    assert tvm_private.missing() == [], (
        f"the installed TVM lacks {tvm_private.missing()}: workbench/tvm_private.py must be adapted to it"
    )
    assert "timeout" in inspect.signature(PopenWorker.send).parameters, (
        "tvm.support.popen_pool.PopenWorker.send has no per-call timeout: measure.WorkerProcess must be adapted"
    )
