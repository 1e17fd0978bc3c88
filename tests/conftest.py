import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tests check what the workbench does, not how fast: sessions mark disturbed timings instead of waiting for a
# quiet machine (on a slow or shared host the waits made the suite 25 % longer). Inherited by the CLI, notebook and
# JupyterLab processes the tests start; tests/test_noise.py asks for "wait" where it tests waiting.
os.environ.setdefault("WORKBENCH_NOISE", "mark")
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
