"""Nothing a records store holds runs as script in the dashboard: every stored text is escaped wherever a view
renders it as HTML (ipywidgets' HTML) or as a plotly label (hover texts, legend names: plotly renders a subset of
HTML there). The real-browser side of this is in tests/test_browser.py."""

import html
from html.parser import HTMLParser

import ipywidgets as W
import pytest

from widgets import Dashboard
from widgets.common import candidate_text, fmt
from workbench.events import Event
from workbench.replay import ReplaySession
from workbench.store import RecordStore

from .hostile_store import FAILED_TRIALS, NOISY_TRIAL, PAYLOADS, hostile_store

# Tags no view ever renders itself: any of them in a view's HTML came from a store.
FORBIDDEN = {"script", "img", "svg", "iframe", "object", "embed", "video", "audio", "link", "meta", "base", "form"}


class Structure(HTMLParser):
    """The elements, event-handler attributes and text of an HTML fragment, as a browser would parse it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.handlers, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.handlers += [f"{tag} {k}" for k, _ in attrs if k.lower().startswith("on")]
        self.handlers += [f"{tag} {k}" for k, v in attrs if v and v.strip().lower().startswith("javascript:")]

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def parse(fragment: str) -> Structure:
    s = Structure()
    s.feed(fragment)
    s.close()
    return s


def rendered(widget, where="dashboard"):
    """(where, string) for every string a widget tree renders as HTML: HTML widgets' values, and every string of
    every plotly figure (trace names, texts, hover texts, titles, annotations)."""
    if isinstance(widget, (W.HTML, W.HTMLMath)):
        yield where, widget.value
    if hasattr(widget, "to_dict") and hasattr(widget, "data"):  # a plotly FigureWidget
        yield from strings(widget.to_dict(), where + ".figure")
    for i, child in enumerate(getattr(widget, "children", None) or ()):
        yield from rendered(child, f"{where}/{type(child).__name__}[{i}]")


# Figure keys whose strings are identifiers, never drawn.
NOT_DRAWN = {"legendgroup", "uid", "uirevision", "ids", "template"}


def strings(obj, where):
    if isinstance(obj, str):
        yield where, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if k not in NOT_DRAWN:
                yield from strings(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from strings(v, f"{where}[{i}]")


def assert_inert(pieces):
    """No element a store could have injected, no event handler; returns the visible text of all pieces."""
    text = []
    for where, frag in pieces:
        s = parse(frag)
        bad = sorted(set(s.tags) & FORBIDDEN)
        assert not bad, f"{where} renders <{bad[0]}> from stored data: {frag[:300]!r}"
        assert not s.handlers, f"{where} renders an event handler ({s.handlers[0]}): {frag[:300]!r}"
        text.append("".join(s.text))
    return "\n".join(text)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hostile") / "hostile.db")
    return path, hostile_store(path)


def test_the_hostile_store_is_hostile(hostile):
    path, info = hostile
    store = RecordStore(path, readonly=True)
    rec = store.records(info["failed"])
    assert all(any(p in s for p in PAYLOADS) for s in rec["strategy"])
    assert all(any(p in s for p in PAYLOADS) for s in rec["chosen_by"])
    assert all(any(p in s for p in PAYLOADS) for s in rec["error_class"].dropna())
    assert len(rec["error_class"].dropna()) == len(FAILED_TRIALS)
    assert any(p in store.session(info["failed"])["workload"] for p in PAYLOADS)
    store.close()


def test_every_view_of_a_hostile_store_shows_its_text_literally(hostile):
    path, info = hostile
    dash = Dashboard.open(path, session_id=info["failed"], autopump=False)
    pieces = []
    try:
        dash.pump_once()
        assert dash.model.status == "failed" and dash.model.trials_done == 32
        pieces += list(rendered(dash.widget))
        m = dash.model
        for trial in (*FAILED_TRIALS, NOISY_TRIAL, m.best["trial"], 1):
            dash.inspector.show_trial(trial)
            pieces += list(rendered(dash.inspector.widget, f"inspector(trial {trial})"))
        for col in ("strategy", "chosen by", "error class"):
            dash.table.sort_by.value = col
            pieces += list(rendered(dash.table.widget, f"table(by {col})"))
        # the sketches of the (hostile) workload, with a strategy the engine knows
        dash.sketches.strategy.options = ["no-rewrite"]
        dash.sketches.load()
        dash.sketches.annotate(1)
        pieces += list(rendered(dash.sketches.widget, "sketches"))
        # the interrupted session, chosen in the picker
        dash.picker.choice.value = info["interrupted"]
        dash.pump_once()
        assert dash.model.status == "interrupted"
        pieces += list(rendered(dash.widget, "dashboard(interrupted)"))
    finally:
        dash.close()
    replay = Dashboard.replay(path, session_id=info["failed"], autopump=False)
    try:
        replay.attach(ReplaySession(path, session_id=info["failed"]))
        store = RecordStore(path, readonly=True)
        for e in store.events(info["failed"]):
            replay.queue.put(Event(e["kind"], info["failed"], e["time"], e["elapsed"], e["data"], e["id"]))
        store.close()
        replay.pump_once()
        pieces += list(rendered(replay.widget, "replay"))
    finally:
        replay.close()

    text = assert_inert(pieces)
    # what the store says is on the page, as text
    for name in info["strategies"].values():
        assert name in text
    assert info["workload"] in text
    for p in PAYLOADS:
        assert p in text
    hover = [s for w, s in pieces if w.endswith(".text") or ".text[" in w]
    assert hover and any(html.escape(info["strategies"]["no-rewrite"], quote=False) in s for s in hover)


def test_hover_text_and_numbers_escape_whatever_a_store_holds():
    rec = {
        "trial": "<b>1</b>",
        "round": "<i>",
        "strategy": PAYLOADS[0],
        "chosen_by": PAYLOADS[1],
        "error_class": None,
        "latency_ms": "<script>x</script>",
        "gflops": 1.5,
        "predicted_score": PAYLOADS[2],
        "cv": "<svg>",
        "remeasured_samples": PAYLOADS[3],
        "decisions": PAYLOADS[0] * 20,
    }
    s = parse(candidate_text(rec))
    assert set(s.tags) <= {"br"} and not s.handlers
    assert PAYLOADS[0] in "".join(s.text)
    assert fmt("<img src=x>", ".3f") == "&lt;img src=x&gt;" and fmt(2.0, ".1f") == "2.0"
