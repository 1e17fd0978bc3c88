import os
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tests check what the workbench does, not how fast: sessions mark disturbed timings instead of waiting for a
# quiet machine (on a slow or shared host the waits made the suite 25 % longer). Inherited by the CLI, notebook and
# JupyterLab processes the tests start; tests/test_noise.py asks for "wait" where it tests waiting.
os.environ.setdefault("WORKBENCH_NOISE", "mark")
# For the same reason, shorter timings: 10 ms windows instead of 30 and one interleaved re-measurement round of a new
# best instead of 3 (a small session took 11 s instead of 19), and a smaller evolutionary search (48 programs over 2
# generations instead of 128 over 3: the search was the largest part of a small session's rounds), and one runner
# process instead of two (half the timing, one TVM-importing process less per session; tests/test_contracts.py
# tests two). Tests that check these ask for their own values.
os.environ.setdefault(
    "WORKBENCH_PRESET_OVERRIDES",
    '{"min_repeat_ms": 10, "confirm_rounds": 1, "population": 48, "generations": 2, "init_min_unmeasured": 16, '
    '"runner_processes": 1}',
)
# Benchmark scripts the tests run compare the calibration probe with a reference of the suite's own, neither
# reading this machine's best (another day's host: every phase would wait for it) nor moving it.
os.environ.setdefault(
    "WORKBENCH_PROBE_REFERENCE",
    os.path.join(tempfile.mkdtemp(prefix="wb-probe-"), "probe_reference.json"),
)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from .shapes import SMALL  # noqa: E402 - after WORKBENCH_NOISE is set for every process the tests start


@pytest.fixture
def small():
    return SMALL


DEMO_DB = os.path.join(ROOT, "notebooks", "data", "demo_session.db")


@pytest.fixture(scope="module")
def demo_events():
    """The events of the recorded demo session (notebooks/data/demo_session.db), as a live view receives them."""
    from workbench.events import Event
    from workbench.store import RecordStore

    store = RecordStore(DEMO_DB, readonly=True)
    sid = store.sessions()[-1]["id"]
    evs = [Event(e["kind"], sid, e["time"], e["elapsed"], e["data"], e["id"]) for e in store.events(sid)]
    store.close()
    return evs


# One small CPU target and the quick preset, for the suites that build and run kernels directly.
POOL_TARGET = {"kind": "llvm", "num-cores": 1}


@pytest.fixture(scope="module")
def pools():
    """A builder and a local runner (quick preset: run_timeout 30 s) on ``POOL_TARGET``, for one test module."""
    from workbench import measure, presets, tvm_env

    tvm_env.setup()
    preset = presets.get("quick")
    b = measure.make_builder(POOL_TARGET, preset)
    r = measure.make_runner(None, POOL_TARGET, preset)
    yield b, r
    r.close()
    b.close()
