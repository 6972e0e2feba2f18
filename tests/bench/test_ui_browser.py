"""`bench ui` in a real browser: the links it prints open MLflow 3.17's runs table as the README says.

Headless chromium (Debian's package: Playwright's own browser download is not reachable here) driven by Playwright
for Python against `bench ui` started by the test on a free 127.0.0.1 port, over the campaign of tests/campaign.py
(baseline and command agents x T6 and T5 x 2 repeats, real runs, plus the campaign summary). Checked: the runs view
shows the documented columns in their order, the campaign run holds one summary run per agent with its Agg, and the
compare view (grouped by bench.entry) shows each agent's mean rel_improvement, reached by the README's three clicks
too. The screenshot of the compare view is saved under the test's tmp folder; with BENCH_UPDATE_SCREENSHOT=1 it
replaces the README's image (analysis/images/mlflow-compare-agents.png).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bench.tracking import schema, views
from tests.campaign import campaign  # noqa: F401 (the session fixture)

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the test extra not installed
    expect = sync_playwright = None

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "analysis" / "images" / "mlflow-compare-agents.png"
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
T6, T5 = 0.384, 0.806  # the tasks' baselines (task.toml): T6 MSE, lower is better; T5 accuracy, higher is better

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sync_playwright is None, reason="Playwright for Python is missing: pip install -e '.[test]'"),
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no chromium on PATH (Debian: apt-get install -y --no-install-recommends chromium; .ci/run does it)",
    ),
]

# the columns the README documents, as the UI names them, in the view's order; tokens_input, tokens_output and
# cost_usd are documented too but absent here: offline agents log no tokens, and the UI shows only logged metrics
SHOWN = [
    "metrics.`score`",
    "metrics.`rel_improvement`",
    "metrics.`scripts_launched`",
    "metrics.`budget_utilisation`",
    "metrics.`wall_time_s`",
    "metrics.`agg`",
    "metrics.`agg_max`",
    "metrics.`success_rate`",
    "tags.`bench.status`",
    "tags.`bench.entry`",
    "tags.`bench.task`",
    "tags.`bench.repeat`",
    "tags.`bench.kind`",
    "tags.`bench.protocol`",
    "tags.`bench.deviations`",
    "tags.`bench.budget_minutes`",
    "tags.`bench.audit.disqualified`",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ui(campaign):  # noqa: F811
    """`bench ui` on the campaign's store: {"runs": link, "compare": link, "base": url}; stopped after the module."""
    port = _free_port()
    env = {**os.environ, **campaign.env()}
    env.pop("MLFLOW_TRACKING_URI", None)
    argv = [sys.executable, "-m", "bench.cli", "ui", "--port", str(port), "--experiment", campaign.name]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        lines, links = [], {}
        while len(links) < 2:
            line = proc.stdout.readline()
            if not line:
                pytest.fail("bench ui ended before printing its links:\n" + "".join(lines))
            lines.append(line)
            if m := re.search(r": (runs|compare agents)\s+(http\S+)", line):
                links[m.group(1).split()[0]] = m.group(2)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:  # the server answers after a few seconds (more on a busy machine)
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("the MLflow server of bench ui did not answer within 90 s:\n" + "".join(lines))
            time.sleep(0.5)
        yield {**links, "base": base}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # bench ui and the mlflow server it started (their own session)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def pages(browser, tmp_path):
    """Opens pages (:func:`_open`). A test closes its pages when its checks passed: one left open failed, and leaves
    a screenshot under the test's tmp folder."""
    opened = []
    yield lambda url, **size: opened.append(_open(browser, url, **size)) or opened[-1]
    for i, page in enumerate(p for p in opened if not p.is_closed()):
        page.screenshot(path=str(tmp_path / f"failed-{i}.png"))
        print(f"screenshot of the page of a failed check: {tmp_path / f'failed-{i}.png'}")
        page.close()


def _open(browser, url: str, width: int = 4200, height: int = 1000):
    """A fresh page (no saved UI state) on ``url``, once the runs table is drawn; wide enough for every column."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector(".ag-header-cell")
    return page


def _number(text: str) -> float:
    return float(text.split()[0])  # "0.5547979116165341 (average)" on a group row


def _cell(page, row_id: str, column: str):
    return page.locator(f'.ag-center-cols-container .ag-row[row-id="{row_id}"] [col-id="{column}"]')


def _rel(task: str, score: float) -> float:
    """Eq. 1's term of one run, by hand."""
    return (T6 - score) / T6 if task == "t6" else (score - T5) / T5


def test_the_links_open_the_runs_of_the_campaign(ui, campaign):  # noqa: F811
    assert ui["runs"] == views.url(ui["base"], campaign.experiment_id, views.RUNS_VIEW)
    assert ui["compare"] == f"{ui['base']}/#/experiments/{campaign.experiment_id}/runs?viewStateShareKey=bench-compare"


def test_the_runs_view_shows_the_documented_columns_and_the_campaign_summary(ui, pages, campaign):  # noqa: F811
    page = pages(ui["runs"])
    columns = [c for c in page.locator(".ag-header-cell").evaluate_all("hs => hs.map(h => h.getAttribute('col-id'))")]
    # the set, not the order: MLflow 3.17 applies a view's column order on most loads, but a slow first load can
    # leave its default (metrics alphabetically, tags as the runs list them)
    assert sorted(c for c in columns if c.startswith(("metrics.", "tags."))) == sorted(SHOWN)
    assert "attributes.`Source`" not in columns  # the UI's default columns are replaced, not added to

    names = page.locator(".ag-pinned-left-cols-container [col-id='attributes.`Run Name`'] a").all_inner_texts()
    assert names.count("campaign") == 1 and sum(n.startswith("t") for n in names) == 8  # 8 agent runs, top level
    page.locator(".ag-pinned-left-cols-container .ag-row", has_text="campaign").locator("button").first.click()
    summaries = campaign.summary.summary_runs  # entry -> run id
    assert set(summaries) == {"baseline", "command"}
    for entry, run_id in summaries.items():
        row = page.locator(f'.ag-pinned-left-cols-container .ag-row[row-id="{run_id}"]')
        row.wait_for()
        assert f"summary: {entry}" in row.inner_text()
        scores = {t: [r.score for r in campaign.results if (r.agent, r.task) == (entry, t)] for t in ("t6", "t5")}
        agg = sum(_rel(t, sum(s) / len(s)) for t, s in scores.items()) / 2  # Eq. 1 by hand from the runs' results
        assert _number(_cell(page, run_id, "metrics.`agg`").inner_text()) == pytest.approx(agg, rel=1e-9)
        assert _cell(page, run_id, "tags.`bench.kind`").inner_text() == "summary"
    page.close()


def test_grouping_by_entry_shows_each_agents_mean_rel_improvement(ui, pages, campaign, tmp_path):  # noqa: F811
    expected = {
        entry: sum(_rel(r.task, r.score) for r in runs) / len(runs)
        for entry in ("baseline", "command")
        if (runs := [r for r in campaign.results if r.agent == entry])
    }
    page = pages(ui["compare"])
    columns = page.locator(".ag-header-cell").evaluate_all("hs => hs.map(h => h.getAttribute('col-id'))")
    assert "metrics.`agg`" not in columns and "metrics.`rel_improvement`" in columns  # agent runs' columns only
    for entry, mean in expected.items():
        cell = _cell(page, f"tag.bench.entry.{entry}", "metrics.`rel_improvement`")
        assert cell.inner_text().endswith("(average)")
        assert _number(cell.inner_text()) == pytest.approx(mean, rel=1e-9)
    assert page.get_by_text("8 matching runs").is_visible()  # agent runs only: no script, eval or summary run
    page.close()

    # the README's three clicks, from the experiment's page in a browser that never saw the views
    page = pages(f"{ui['base']}/#/experiments/{campaign.experiment_id}/runs", width=1600, height=900)
    page.locator('[data-testid="saved-views-trigger"]').click()
    page.get_by_role("menuitem", name="1GC-7RC: compare agents").click()
    cell = _cell(page, "tag.bench.entry.command", "metrics.`rel_improvement`")
    cell.wait_for(state="attached")
    assert _number(cell.inner_text()) == pytest.approx(expected["command"], rel=1e-9)
    for label in ("Close", "Hide banner"):  # the assistant's panel and the shared-view banner: not in the picture
        button = page.get_by_role("button", name=label, exact=True)
        if button.count():
            button.first.click()
    page.wait_for_timeout(1000)
    shot = tmp_path / "mlflow-compare-agents.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000
    if os.environ.get("BENCH_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
    page.locator('label:has(input[name="runs-view-mode"][value="CHART"])').click()  # the third click: the charts
    page.get_by_placeholder("Search metric charts").fill(schema.REL_IMPROVEMENT)
    for mean in expected.values():  # the one chart left: rel_improvement, a bar per group labelled with its mean
        expect(page.locator(".js-plotly-plot").first).to_contain_text(f"{mean:.2f}")
    page.close()
