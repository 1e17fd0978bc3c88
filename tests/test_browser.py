"""The dashboard in a real JupyterLab, driven by headless Chromium: the quickstart tuning for real, and a hostile
records store opened without running any of the script it holds, and the views with controls (decision-space
brush, what-if, compare) on recorded sessions. One JupyterLab serves all three tests."""

import contextlib
import json
import os
import re
import shutil
import sys
import time

import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from _lab import CHROMIUM, CHROMIUM_ARGS, serve_notebooks  # noqa: E402  (shared with live_dashboard.py)

from .hostile_store import PAYLOADS, PWNED, hostile_store  # noqa: E402

ARTIFACTS = os.path.join(ROOT, "test-artifacts", "browser")
# What `make lab` (and `make test`) writes: JupyterLab's "official Jupyter news?" prompt defaults to "no".
LAB_DEFAULTS = os.path.join(ROOT, ".venv", "etc", "jupyter", "labconfig", "default_setting_overrides.json")

# a live session in a real browser: its waits assume the machine to itself (`make test` runs these alone)
pytestmark = [pytest.mark.browser, pytest.mark.serial, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 serving a copy of notebooks/, with a token; stopped afterwards.

    Its user settings say nothing about the news prompt, so the page gets the default `make lab` sets (as a
    newcomer's JupyterLab does). Beside the notebooks: a hostile store and a notebook that opens it."""
    if not os.path.exists(LAB_DEFAULTS):
        pytest.fail(f"{LAB_DEFAULTS} is missing: `make test` and `make lab` write it (the news prompt's default)")
    work = str(tmp_path_factory.mktemp("lab"))
    overrides = json.loads(os.environ.get("WORKBENCH_PRESET_OVERRIDES") or "{}")
    env = {
        "WORKBENCH_TRIALS": os.environ.get("WORKBENCH_BROWSER_TRIALS", "64"),
        "WORKBENCH_WORKLOAD": "matmul-128",
        "WORKBENCH_INTERACTIVE": "1",
        # rounds of 4: the first points reach the page after 4 programs are built and timed, not 16
        "WORKBENCH_PRESET_OVERRIDES": json.dumps({**overrides, "trials_per_round": 4}),
    }
    with serve_notebooks(work, env) as (url, token):
        settings = os.path.join(work, "settings", "@jupyterlab", "apputils-extension")
        with open(os.path.join(settings, "notification.jupyterlab-settings"), "w") as f:
            f.write('{"checkForUpdates": false}')
        root = os.path.join(work, "lab")
        info = hostile_store(os.path.join(root, "hostile.db"))
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [
            nbformat.v4.new_code_cell('from widgets import Dashboard\n\ndash = Dashboard.open("hostile.db")\ndash'),
            # a failed candidate in the inspector: its (hostile) error class and message
            nbformat.v4.new_code_cell(
                "dash.inspector.show_trial(5)\ndash.tabs.selected_index = list(dash.tabs.titles).index('Inspector')"
            ),
        ]
        nbformat.write(nb, os.path.join(root, "hostile.ipynb"))
        nbformat.write(_views_notebook(), os.path.join(root, "views.ipynb"))
        slow = nbformat.v4.new_notebook()
        slow.metadata["kernelspec"] = nb.metadata["kernelspec"]
        slow.cells = [
            nbformat.v4.new_code_cell(
                'from widgets import Dashboard\n\ndash = Dashboard.replay("data/demo_session.db", speed=50.0)\ndash'
            )
        ]
        nbformat.write(slow, os.path.join(root, "slow.ipynb"))
        info["lab_root"] = root
        yield url, token, info


def _views_notebook():
    """Two tiny finished sessions in one store: the first on a dashboard (its decision space and what-if), both in
    a compare view that draws the first alone until the picker adds the second."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from workbench import TuningSession\n"
            "from widgets import CompareView, Dashboard\n\n"
            'kw = dict(db="views.db", trials=4, trials_per_round=2, population=32, generations=1, '
            "init_min_unmeasured=8)\n"
            'sessions = [TuningSession("matmul-128", strategy=s, **kw) for s in ("no-rewrite", "transform-stage")]\n'
            "for s in sessions:\n"
            "    s.run()\n"
            'dash = Dashboard(sessions[0], title="views")\n'
            "dash"
        ),
        nbformat.v4.new_code_cell('CompareView("views.db", sessions=[("views.db", sessions[0].session_id)])'),
    ]
    return nb


def _wait(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _chromium():
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium); "
            "`playwright install` cannot download browsers on the project's machines"
        )


@contextlib.contextmanager
def _page(height: int, failure_png: str):
    """A headless Chromium page 1400 px wide; a screenshot of it lands in test-artifacts/browser/ when the test
    fails."""
    _chromium()
    from playwright.sync_api import sync_playwright

    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": height})
        try:
            yield page
        except Exception:
            page.screenshot(path=os.path.join(ARTIFACTS, failure_png))
            raise
        finally:
            browser.close()


def _run_notebook(page, url, token, name):
    """Open notebook ``name``, wait for its kernel, check that no news prompt greets the user, run every cell."""
    page.goto(f"{url}/lab/tree/{name}?token={token}&reset")
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.sessionContext"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        " === 'idle'",
        timeout=90_000,
    )
    # JupyterLab asks right after it has restored its layout, long before a kernel is idle
    page.wait_for_timeout(1000)
    assert page.get_by_text("official Jupyter news").count() == 0, "JupyterLab's news prompt greets the user"
    # not awaited: the promise resolves only when every cell has run
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def test_quickstart_dashboard_tunes_live_in_jupyterlab(lab):
    url, token, _info = lab
    with _page(1400, "failure.png") as page:
        _run_notebook(page, url, token, "01_quickstart.ipynb")

        start = page.locator(".jp-OutputArea-output .widget-button", has_text="Start").first
        start.wait_for(state="visible", timeout=120_000)
        dash = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-button", has_text="Start")).first
        plot = dash.locator(".js-plotly-plot").first
        plot.wait_for(state="visible", timeout=60_000)
        status = lambda: dash.locator(".wb-status").first.inner_text()  # noqa: E731
        initial_status = _wait(status, 30, "the status line")
        points = lambda: plot.locator(".scatterlayer path.point").count()  # noqa: E731
        assert points() == 0

        start.scroll_into_view_if_needed()
        start.click()
        _wait(lambda: "running" in status(), 60, "the status to read running")
        first = _wait(points, 240, "the throughput curves to show measured points")
        more = _wait(lambda: points() > first and points(), 240, "more points while tuning")
        assert more > first
        if os.environ.get("WORKBENCH_UPDATE_SCREENSHOTS") == "1":
            # a fuller picture for the published screenshot: about 16 trials (two points each, plus the
            # best-so-far markers)
            _wait(lambda: points() >= 40, 240, "some 16 trials on the curves")
        dash.scroll_into_view_if_needed()
        mid = os.path.join(ARTIFACTS, "dashboard-mid-tuning.png")
        dash.screenshot(path=mid)
        page.screenshot(path=os.path.join(ARTIFACTS, "lab-mid-tuning.png"))

        dash.locator(".widget-button", has_text="Pause").click()
        _wait(lambda: "paus" in status(), 30, "the status to show the pause")
        _wait(lambda: "paused" in status() and "pausing" not in status(), 120, "the session to pause")
        held = points()
        time.sleep(2.0)
        assert points() == held, "points kept coming while paused"
        assert status() != initial_status
        dash.screenshot(path=os.path.join(ARTIFACTS, "dashboard-paused.png"))

        dash.locator(".widget-button", has_text="Resume").click()
        _wait(lambda: "running" in status(), 60, "the session to resume")
        dash.locator(".widget-button", has_text="Stop").click()
        _wait(lambda: "stopped" in status() or "finished" in status(), 180, "the session to stop")
        dash.screenshot(path=os.path.join(ARTIFACTS, "dashboard-stopped.png"))
    if os.environ.get("WORKBENCH_UPDATE_SCREENSHOTS") == "1":
        os.makedirs(os.path.join(ROOT, "docs", "screenshots"), exist_ok=True)
        shutil.copy(mid, os.path.join(ROOT, "docs", "screenshots", "dashboard.png"))


def test_a_hostile_store_runs_no_script_in_jupyterlab(lab):
    """``Dashboard.open`` on a store whose every text carries script: the page shows that text literally (status,
    session list, records table, inspector, legend and hover labels) and none of it runs."""

    url, token, info = lab
    with _page(1600, "hostile-failure.png") as page:
        _run_notebook(page, url, token, "hostile.ipynb")
        dash = page.locator(".jp-OutputArea-output").filter(has=page.locator(".wb-sessions-picker")).first
        dash.wait_for(state="visible", timeout=120_000)
        status = lambda: dash.locator(".wb-status").first.inner_text()  # noqa: E731
        _wait(lambda: "interrupted" in status(), 60, "the cut-off session to read interrupted")
        # the inspector (the second cell) shows the failed candidate's (hostile) error class
        _wait(lambda: "build-error" in dash.inner_text(), 60, "the inspector to show trial 5's error")
        # the legend and a hover label of the curves
        plot = dash.locator(".js-plotly-plot").first
        assert info["strategies"]["no-rewrite"] in plot.locator(".legend").first.text_content()
        hover = plot.locator(".hoverlayer .hovertext")
        for point in plot.locator(".scatterlayer path.point").all()[:12]:
            point.hover(force=True)
            if hover.count():
                break
        _wait(lambda: hover.count(), 10, "a hover label on the curves")
        assert any(pl in hover.first.text_content() for pl in PAYLOADS), hover.first.text_content()
        # the records table
        dash.locator(".lm-TabBar-tab", has_text="Records").first.click()
        table = dash.locator(".wb-table").first
        table.wait_for(state="visible", timeout=30_000)
        assert info["strategies"]["no-rewrite"] in table.inner_text()
        # the other session, chosen in the picker: failed, with its (hostile) message
        dash.locator(".wb-sessions-picker select").first.select_option(index=0)  # session 1
        _wait(lambda: "failed" in status(), 60, "the failed session to be shown")
        text = dash.inner_text()
        for payload in PAYLOADS:
            assert payload in text, f"{payload!r} is not shown as text"
        assert info["workload"] in text
        dash.screenshot(path=os.path.join(ARTIFACTS, "hostile-store.png"))
        assert page.evaluate("() => window.__wb_pwned") is None, "a stored value ran as script"
        assert page.get_by_text("official Jupyter news").count() == 0
        # the check would have seen it: the same payload, unescaped, runs in this page
        page.evaluate(
            "(p) => document.body.insertAdjacentHTML('beforeend', p.replace('__wb_pwned', '__wb_canary'))",
            PAYLOADS[0],
        )
        _wait(lambda: page.evaluate("() => window.__wb_canary") == 1, 10, "the canary payload to run")
        assert PWNED in PAYLOADS[0]


def test_recorded_session_views_answer_their_controls_in_jupyterlab(lab):
    """The views with controls, driven as a person would: a brush on the decision space's GFLOPS axis filters the
    records table; an edited decision in the inspector is measured as a variant chosen by the user; the compare
    view's picker adds a session to the plot."""

    url, token, info = lab
    lab_root = info["lab_root"]
    with _page(1600, "views-failure.png") as page:
        _run_notebook(page, url, token, "views.ipynb")
        dash = page.locator(".jp-OutputArea-output").filter(has=page.locator(".wb-status")).first
        dash.wait_for(state="visible", timeout=300_000)
        status = lambda: dash.locator(".wb-status").first.inner_text()  # noqa: E731
        _wait(lambda: "finished" in status(), 60, "the session to read finished")

        # decision space: drag along the GFLOPS axis over its upper half, from its middle to beyond its top
        dash.locator(".lm-TabBar-tab", has_text="Decision space").first.click()
        space = dash.locator(".wb-decision-space").first
        axis = space.locator(".parcoords .y-axis").filter(has=page.locator(".axis-title", has_text="GFLOPS")).first
        axis.wait_for(state="visible", timeout=60_000)
        axis.scroll_into_view_if_needed()
        box = axis.locator(".axis-brush .background").first.bounding_box()
        x = box["x"] + box["width"] / 2
        page.mouse.move(x, box["y"] + box["height"] * 0.55)
        page.mouse.down()
        page.mouse.move(x, box["y"] - 12, steps=12)  # past the top: the brush reaches the axis maximum
        page.mouse.up()
        dash.locator(".lm-TabBar-tab", has_text="Records").first.click()
        note = dash.locator(".widget-html", has_text="filtered by the decision-space brush").first
        _wait(lambda: note.count() and note.is_visible(), 30, "the records table to follow the brush")
        shown, total = (int(v) for v in re.search(r"(\d+) of (\d+) measured", note.inner_text()).groups())
        assert 0 < shown < total, (shown, total)
        table = dash.locator(".wb-table").first
        _wait(lambda: table.locator("tbody tr").count() == shown, 30, "the table to show the brushed rows")
        # Export CSV writes the rows inside the brush next to the store, and says where
        dash.locator(".widget-button", has_text="Export CSV").first.click()
        wrote = dash.locator(".widget-html", has_text="records inside the decision-space brush").first
        _wait(lambda: wrote.count() and wrote.is_visible(), 30, "the export to say what it wrote")
        path = re.search(r"to (\S+\.csv)", wrote.inner_text()).group(1)
        assert f"wrote {shown} records" in wrote.inner_text()
        with open(os.path.join(lab_root, path)) as f:
            assert len(f.read().strip().splitlines()) == shown + 1  # a header and the brushed rows
        dash.screenshot(path=os.path.join(ARTIFACTS, "views-brushed.png"))

        # what-if: trial 1 in the inspector, a tile decision's factors reversed (same product), measured
        dash.locator(".lm-TabBar-tab", has_text="Inspector").first.click()
        inspector = dash.locator(".wb-inspector").first
        inspector.locator(".widget-inline-hbox input").first.fill("1")
        inspector.locator(".widget-button", has_text="Inspect").first.click()
        inspector.locator(".lm-TabBar-tab", has_text="trace & decisions").first.click()
        whatif = inspector.locator(".wb-whatif").first
        fields = whatif.locator(".widget-text input")
        _wait(lambda: fields.count(), 60, "the what-if fields")
        for i in range(fields.count()):
            factors = [f.strip() for f in fields.nth(i).input_value().split(",")]
            if len(factors) > 1 and factors != factors[::-1]:
                fields.nth(i).fill(", ".join(factors[::-1]))
                fields.nth(i).press("Enter")
                break
        else:
            raise AssertionError("no tile decision whose factors change when reversed")
        whatif.locator(".widget-button", has_text="Measure this variant").click()
        opened = whatif.locator(".widget-button", has_text="Inspect record")
        _wait(lambda: opened.count() and opened.is_visible(), 180, "the variant to be measured")
        assert "verified" in whatif.inner_text(), whatif.inner_text()
        opened.click()
        _wait(lambda: "chosen by user" in inspector.inner_text(), 30, "the new record in the inspector")
        dash.screenshot(path=os.path.join(ARTIFACTS, "views-what-if.png"))

        # compare: one session drawn, then both picked
        compare = page.locator(".wb-compare").first
        compare.scroll_into_view_if_needed()
        curves = lambda: compare.locator(".scatterlayer .trace").count()  # noqa: E731
        _wait(lambda: curves() == 1, 30, "the compare view's single curve")
        picker = compare.locator(".widget-select-multiple select").first
        assert picker.locator("option").count() == 2
        picker.select_option(index=[0, 1])
        _wait(lambda: curves() == 2, 30, "a second curve once both sessions are picked")
        compare.screenshot(path=os.path.join(ARTIFACTS, "views-compare.png"))


# anywidget gives a model's JavaScript two seconds to load (AbortSignal.timeout(2000)); a page busy for longer,
# as a 2-core machine tuning beside the browser can be, is emulated by a 1 ms budget for the first five models
SLOW_PAGE = """
(() => {
  const timeout = AbortSignal.timeout.bind(AbortSignal);
  let slowed = 0;
  AbortSignal.timeout = (ms) => timeout(ms === 2000 && slowed++ < 5 ? 1 : ms);
})();
"""


def test_figures_are_drawn_whole_when_the_browser_loads_them_slowly(lab):
    """A dashboard whose five figures' JavaScript (plotly's, ~5 MB each) takes longer to load than anywidget
    waits: anywidget then drops every message to the figure ("Failed to initialize model") and its views draw the
    model as it was created. Every figure must still be drawn whole (subplot titles), and the main plot must show
    the points of a replay started afterwards."""
    url, token, _info = lab
    with _page(1400, "slow-failure.png") as page:
        gave_up = []  # anywidget's rejection surfaces as a console error or as an uncaught one, by who awaited it
        page.on("console", lambda m: gave_up.append(m.text) if "Failed to initialize model" in m.text else None)
        page.on("pageerror", lambda e: gave_up.append(str(e)) if "Failed to initialize model" in str(e) else None)
        page.add_init_script(SLOW_PAGE)
        _run_notebook(page, url, token, "slow.ipynb")
        dash = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-button", has_text="Start")).first
        plot = dash.locator(".js-plotly-plot").first
        plot.wait_for(state="visible", timeout=120_000)
        _wait(lambda: gave_up, 60, "anywidget to give up on a figure's JavaScript")

        title = lambda: plot.locator(".annotation-text", has_text="best-so-far vs trial").count()  # noqa: E731
        _wait(title, 60, "the main plot's subplot titles")
        start = dash.locator(".widget-button", has_text="Start").first
        start.scroll_into_view_if_needed()
        start.click()
        points = lambda: plot.locator(".scatterlayer path.point").count()  # noqa: E731
        _wait(points, 120, "the replay's points on the main plot")
        dash.screenshot(path=os.path.join(ARTIFACTS, "slow-browser.png"))
