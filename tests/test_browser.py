"""The quickstart dashboard in a real JupyterLab, driven by headless Chromium, tuning for real."""

import os
import shutil
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from _lab import CHROMIUM, CHROMIUM_ARGS, serve_notebooks  # noqa: E402  (shared with live_dashboard.py)

ARTIFACTS = os.path.join(ROOT, "test-artifacts", "browser")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 serving a copy of notebooks/, with a token; stopped afterwards."""
    env = {
        "WORKBENCH_TRIALS": os.environ.get("WORKBENCH_BROWSER_TRIALS", "64"),
        "WORKBENCH_WORKLOAD": "matmul-128",
        "WORKBENCH_INTERACTIVE": "1",
    }
    with serve_notebooks(str(tmp_path), env) as (url, token):
        yield url, token


def _wait(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_quickstart_dashboard_tunes_live_in_jupyterlab(lab):
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium); "
            "`playwright install` cannot download browsers on the project's machines"
        )
    from playwright.sync_api import sync_playwright

    url, token = lab
    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        try:
            page.goto(f"{url}/lab/tree/01_quickstart.ipynb?token={token}&reset")
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
            # not awaited: the promise resolves only when every cell has run
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

            start = page.locator(".jp-OutputArea-output .widget-button", has_text="Start").first
            start.wait_for(state="visible", timeout=120_000)
            dash = (
                page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-button", has_text="Start")).first
            )
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
            # a fuller picture for the screenshot: about 16 trials (two points each, plus the best-so-far markers)
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
        except Exception:
            page.screenshot(path=os.path.join(ARTIFACTS, "failure.png"))
            raise
        finally:
            browser.close()
    if os.environ.get("WORKBENCH_UPDATE_SCREENSHOTS") == "1":
        os.makedirs(os.path.join(ROOT, "docs", "screenshots"), exist_ok=True)
        shutil.copy(mid, os.path.join(ROOT, "docs", "screenshots", "dashboard.png"))
