"""`bench ui` in a real browser: the links it prints open MLflow 3.17's runs table as the docs say.

Headless chromium (Debian's package: Playwright's own browser download is not reachable here) driven by Playwright
for Python against `bench ui` started by the test on a free 127.0.0.1 port, over the campaign of tests/campaign.py
(baseline and command agents x T6 and T5 x 2 repeats, real runs, plus the campaign summary). Every page is opened in
a fresh browser context (no local storage: a first visit). Checked: every printed link, the run pages they lead to
and the bare experiment page open in MLflow's model-training mode, not GenAI, and no link shows MLflow's "shared
view" banner; the campaign opened from MLflow's own experiment list shows the benchmark's columns; the runs view shows
the documented columns and the campaign's summary runs with their Agg; the per-task view groups the agent runs by
task, then agent, each group row naming its task and agent whole at a laptop's width, with each group's mean score
and rel_improvement; the comparison view lists the summary runs' Agg, Agg-max and success rate, the entry uncut;
``bench ui``'s own output holds its links and no access-log line, warning or notice after all these page loads.
The screenshots of the per-task and comparison views are saved under the test's tmp folder; with
BENCH_UPDATE_SCREENSHOT=1 they replace the docs' images (analysis/images/mlflow-per-task.png,
analysis/images/mlflow-compare-agents.png).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from bench.tracking import schema, uiapp, views
from tests.campaign import campaign  # noqa: F401 (the session fixture)

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the test extra not installed
    expect = sync_playwright = None

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "analysis" / "images"
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
SHARED_BANNER = "viewing a shared view"  # MLflow's banner over a view opened by ?viewStateShareKey=
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
    "tags.`bench.status`",
    "tags.`bench.reason`",
    "tags.`bench.entry`",
    "tags.`bench.task`",
    "metrics.`score`",
    "metrics.`rel_improvement`",
    "metrics.`budget_utilisation`",
    "metrics.`scripts_launched`",
    "metrics.`wall_time_s`",
    "metrics.`agg`",
    "metrics.`agg_max`",
    "metrics.`success_rate`",
    "metrics.`gap_closed`",
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
    """`bench ui` on the campaign's store: {"runs", "per", "compare": links, "base": url}; stopped after the module."""
    port = _free_port()
    env = {**os.environ, **campaign.env()}
    env.pop("MLFLOW_TRACKING_URI", None)
    argv = [sys.executable, "-m", "bench.cli", "ui", "--port", str(port), "--experiment", campaign.name]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines = []  # everything bench ui prints (the server's output included), read on until it ends
    try:
        links = {}
        while len(links) < 3:
            line = proc.stdout.readline()
            if not line:
                pytest.fail("bench ui ended before printing its links:\n" + "".join(lines))
            lines.append(line)
            if m := re.search(r": (runs|per task|compare agents)\s+(http\S+)", line):
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
        threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
        yield {**links, "base": base, "output": lines, "campaign": campaign.name}
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
    yield lambda url, **how: opened.append(_open(browser, url, **how)) or opened[-1]
    for i, page in enumerate(p for p in opened if not p.is_closed()):
        page.screenshot(path=str(tmp_path / f"failed-{i}.png"))
        print(f"screenshot of the page of a failed check: {tmp_path / f'failed-{i}.png'}")
        page.close()


def _open(browser, url: str, width: int = 4200, height: int = 1000, ready: str | None = ".ag-header-cell"):
    """A fresh page (no saved UI state) on ``url``, once ``ready`` is drawn (the runs table); wide enough for every
    column."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)
    page.goto(url)
    if ready:
        page.wait_for_selector(ready)
    return page


ROUNDED = re.compile(r"^-?\d+(\.\d{1,4})?( \(average\))?$")  # as the page shows it: 4 decimals at most (1.0: "1")


def _number(text: str) -> float:
    return float(text.split()[0])  # "0.5548 (average)" on a group row


def _shown(text: str, value: float) -> bool:
    """A value as the page shows it: rounded to 4 decimals (bench.tracking.uiapp.ROUND_SCRIPT), never all 17 digits
    (a value with fewer decimals, 0.5 or 1.0, is shown as it is)."""
    digits = text.split()[0].partition(".")[2]
    return len(digits) <= 4 and _number(text) == pytest.approx(value, abs=5e-5 * (len(digits) == 4) + 1e-12)


def _cell(page, row_id: str, column: str):
    return page.locator(f'.ag-center-cols-container .ag-row[row-id="{row_id}"] [col-id="{column}"]')


def _rel(task: str, score: float) -> float:
    """Eq. 1's term of one run, by hand."""
    return (T6 - score) / T6 if task == "t6" else (score - T5) / T5


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _training_mode(page) -> None:
    """The page is in MLflow's model-training mode: its side bar lists the runs and the model registry, none of the
    GenAI pages (Judges, Prompts, Evaluation runs), and the UI's stored mode is model training."""
    nav = page.locator("nav").first
    expect(nav).to_contain_text("Model registry")
    for genai in ("Judges", "Evaluation runs", "Prompts", "Agent versions"):
        expect(nav).not_to_contain_text(genai)
    assert page.evaluate(f"localStorage.getItem({json.dumps(uiapp.STORAGE_KEY)})") == json.dumps(uiapp.TRAINING)


def test_the_links_open_the_views_of_the_campaign_in_model_training_mode(ui, campaign):  # noqa: F811
    exp = campaign.experiment_id
    assert ui["runs"] == views.url(ui["base"], exp, views.RUNS_VIEW)
    assert ui["per"] == f"{ui['base']}/#/experiments/{exp}/runs?benchView=bench-tasks&workflowType=machine_learning"
    assert ui["compare"] == (
        f"{ui['base']}/#/experiments/{exp}/runs?benchView=bench-compare&workflowType=machine_learning"
    )


def test_every_page_opens_in_model_training_mode_in_a_fresh_browser(ui, pages, campaign):  # noqa: F811
    for link in (ui["runs"], ui["per"], ui["compare"]):
        page = pages(link, width=1600, height=900)
        _training_mode(page)
        expect(page.locator("body")).not_to_contain_text("Training runs")  # GenAI mode's title of this page
        expect(page.locator("body")).not_to_contain_text(SHARED_BANNER)
        assert "benchView" not in page.url  # applied, then left out (a reload keeps the person's own state)
        page.close()

    # a run page the runs view leads to (the UI drops the URL's workflowType there: the stored default holds)
    page = pages(ui["runs"], width=1600, height=900)
    name = page.locator(".ag-pinned-left-cols-container [col-id='attributes.`Run Name`'] a", has_text="t6").first
    page.goto(ui["base"] + "/" + name.get_attribute("href"))
    page.wait_for_url(re.compile(r"/runs/[0-9a-f]{32}"))
    expect(page.get_by_text("Model metrics", exact=True)).to_be_visible()
    assert "workflowType" not in page.url
    _training_mode(page)
    expect(page.locator("body")).not_to_contain_text("Evaluations")  # GenAI mode's breadcrumb of a run page
    page.close()

    # the experiment's bare address, typed by hand in a browser that never saw bench ui's links
    page = pages(f"{ui['base']}/#/experiments/{campaign.experiment_id}", width=1600, height=900)
    expect(page).to_have_url(re.compile(r"/runs\?.*workflowType=machine_learning"))
    _training_mode(page)
    page.close()

    # MLflow's own navigation: its experiment list, then the campaign's name: the benchmark's columns, no click more
    page = pages(f"{ui['base']}/#/experiments", ready=None)
    page.get_by_role("link", name=campaign.name, exact=True).first.click()
    page.wait_for_selector(".ag-header-cell")
    expect(page.locator('.ag-header-cell[col-id="metrics.`score`"]')).to_be_attached()
    columns = page.locator(".ag-header-cell").evaluate_all("hs => hs.map(h => h.getAttribute('col-id'))")
    assert sorted(c for c in columns if c.startswith(("metrics.", "tags."))) == sorted(SHOWN)
    expect(page.locator("body")).not_to_contain_text(SHARED_BANNER)
    page.close()


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
        assert _shown(_cell(page, run_id, "metrics.`agg`").inner_text(), _agg(campaign, entry))
        assert _cell(page, run_id, "tags.`bench.kind`").inner_text() == "summary"
    page.close()


def _agg(campaign, entry: str) -> float:  # noqa: F811 (campaign: the fixture's value, passed on)
    """Eq. 1 by hand from the runs' results: the mean over tasks of the relative improvement of the task's mean."""
    scores = {t: [r.score for r in campaign.results if (r.run.agent, r.run.task) == (entry, t)] for t in ("t6", "t5")}
    return _mean(_rel(t, _mean(s)) for t, s in scores.items())


def _hide_panels(page) -> None:
    """The shared-view banner (and the Assistant's panel, if a later MLflow opens it anyway): not in the picture."""
    for label in ("Close", "Hide banner"):
        button = page.get_by_role("button", name=label, exact=True)
        if button.count():
            button.first.click()
    page.wait_for_timeout(1000)


def _screenshot(page, tmp_path: Path, name: str) -> None:
    shot = tmp_path / name
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000
    if os.environ.get("BENCH_UPDATE_SCREENSHOT") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, IMAGES / name)


def test_the_per_task_view_groups_by_task_then_agent(ui, pages, campaign, tmp_path):  # noqa: F811
    groups = {
        (task, entry): runs
        for task in ("t5", "t6")
        for entry in ("baseline", "command")
        if (runs := [r for r in campaign.results if (r.run.task, r.run.agent) == (task, entry)])
    }
    assert len(groups) == 4
    page = pages(ui["per"], width=1600, height=900)  # a laptop's width: each group row names its agent whole
    columns = page.locator(".ag-header-cell").evaluate_all("hs => hs.map(h => h.getAttribute('col-id'))")
    assert "metrics.`agg`" not in columns and "metrics.`score`" in columns  # agent runs' columns only
    rows = page.locator(".ag-center-cols-container .ag-row").evaluate_all("rs => rs.map(r => r.getAttribute('row-id'))")
    group_rows = [r for r in rows if not re.search(r"\.[0-9a-f]{32}$", r)]  # a run's row: its group's id + its own
    assert sorted(group_rows) == sorted(f"tag.{schema.GROUP}.{schema.group_label(t, e)}" for t, e in groups)
    assert group_rows == sorted(group_rows)  # task by task, then agent
    for (task, entry), runs in groups.items():
        label = schema.group_label(task, entry)  # "t6 · command"
        row = f"tag.{schema.GROUP}.{label}"
        name = page.locator(f'.ag-pinned-left-cols-container .ag-row[row-id="{row}"] span[title="{label}"]')
        assert name.inner_text() == f"Group: {task} · {entry}"
        # drawn whole: no ellipsis in the label, and the label ends inside its cell
        whole = "e => e.scrollWidth <= e.clientWidth && e.getBoundingClientRect().right <= "
        assert name.evaluate(whole + "e.closest('.ag-cell').getBoundingClientRect().right"), f"{label} is cut"
        score = _cell(page, row, "metrics.`score`")
        assert score.inner_text().endswith("(average)")  # a mean over one agent's runs on one task, never across tasks
        assert ROUNDED.match(score.inner_text()) and _shown(score.inner_text(), _mean(r.score for r in runs))
        assert score.evaluate(whole + "e.getBoundingClientRect().right"), "the group cell cuts its label"
        rel = _cell(page, row, "metrics.`rel_improvement`").inner_text()
        assert _shown(rel, _mean(_rel(task, r.score) for r in runs))
    assert page.get_by_text("8 matching runs").is_visible()  # agent runs only: no script, eval or summary run
    page.close()

    # the docs' clicks, from the experiment's page in a browser that never saw the views: Views, "per task"
    page = pages(f"{ui['base']}/#/experiments/{campaign.experiment_id}/runs", width=1600, height=900)
    page.locator('[data-testid="saved-views-trigger"]').click()
    page.get_by_role("menuitem", name="1GC-7RC: per task").click()
    cell = _cell(page, f"tag.{schema.GROUP}.{schema.group_label('t6', 'command')}", "metrics.`score`")
    cell.wait_for(state="attached")
    expect(cell).to_have_text(ROUNDED)
    assert _shown(cell.inner_text(), _mean(r.score for r in groups[("t6", "command")]))
    _hide_panels(page)
    _screenshot(page, tmp_path, "mlflow-per-task.png")
    page.locator('label:has(input[name="runs-view-mode"][value="CHART"])').click()  # the charts: a bar per group
    page.wait_for_selector(".js-plotly-plot")
    page.wait_for_timeout(2000)
    _screenshot(page, tmp_path, "mlflow-per-task-charts.png")
    print(f"screenshots: {tmp_path / 'mlflow-per-task.png'}, {tmp_path / 'mlflow-per-task-charts.png'}")
    # the charts open on the benchmark's metrics, in this order, before anything alphabetical (anytime_score)
    titles = page.evaluate(CHART_TITLES, CHART_NAMES)
    assert titles[:3] == [schema.SCORE, schema.REL_IMPROVEMENT, schema.BUDGET_UTILISATION], titles
    page.get_by_placeholder("Search metric charts").fill(schema.REL_IMPROVEMENT)
    for runs in groups.values():
        mean = _mean(_rel(r.run.task, r.score) for r in runs)
        expect(page.locator(".js-plotly-plot").first).to_contain_text(f"{mean:.2f}")
    page.close()


# the metric names written as a chart card's title, top to bottom and left to right: the elements whose own text is a
# metric name and that sit above a plot in the charts' area (the runs list, on the left, holds none of them)
CHART_TITLES = """names => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const left = Math.min(...plots.map(p => p.getBoundingClientRect().left));
  const found = [];
  for (const e of document.querySelectorAll('body *')) {
    const t = [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.nodeValue).join('').trim();
    const r = e.getBoundingClientRect();
    const shown = r.width > 0 && r.left >= left - 40 && !e.closest('.ag-root-wrapper');
    if (names.includes(t) && shown) found.push([r.top, r.left, t]);
  }
  found.sort((a, b) => (Math.abs(a[0] - b[0]) < 20 ? a[1] - b[1] : a[0] - b[0]));
  return [...new Set(found.map(f => f[2]))];
}"""
CHART_NAMES = [schema.SCORE, schema.REL_IMPROVEMENT, schema.BUDGET_UTILISATION, schema.ANYTIME, schema.SCRIPTS_LAUNCHED,
               schema.WALL_TIME, schema.CHECKPOINTS, schema.SUCCESS, schema.TASK_BASELINE, schema.BEST_VAL]  # fmt: skip


def test_the_comparison_view_ranks_the_summary_runs_by_agg(ui, pages, campaign, tmp_path):  # noqa: F811
    page = pages(ui["compare"], width=1600, height=900)
    summaries = campaign.summary.summary_runs  # entry -> run id
    rows = page.locator(".ag-center-cols-container .ag-row").evaluate_all("rs => rs.map(r => r.getAttribute('row-id'))")
    by_agg = sorted(summaries, key=lambda e: _agg(campaign, e), reverse=True)
    assert rows == [summaries[e] for e in by_agg]  # the summary runs only, best Agg first
    for entry, run_id in summaries.items():
        runs = [r for r in campaign.results if r.run.agent == entry]
        assert _shown(_cell(page, run_id, "metrics.`agg`").inner_text(), _agg(campaign, entry))
        rate = sum(r.status == "success" for r in runs) / len(runs)
        assert _shown(_cell(page, run_id, "metrics.`success_rate`").inner_text(), rate)
        entry_cell = _cell(page, run_id, "tags.`bench.entry`")
        assert entry_cell.inner_text() == entry
        assert entry_cell.evaluate(f"e => e.getBoundingClientRect().width >= {views.ENTRY_PX - 1}")  # a whole entry
        model_cell = _cell(page, run_id, "tags.`bench.model`")  # a whole model name beside it
        assert model_cell.evaluate(f"e => e.getBoundingClientRect().width >= {views.MODEL_PX - 1}")
    _hide_panels(page)
    _screenshot(page, tmp_path, "mlflow-compare-agents.png")
    page.close()


def test_a_failed_campaign_shows_status_and_reason_first_and_no_description_escapes(ui, pages, campaign, tmp_path):  # noqa: F811
    """A campaign whose runs all failed (no score column at all): its runs view at a laptop's 1,600 px shows each run's
    status and reason in view, before any metric. And no description the harness stored holds a backslash escape
    (MLflow's page shows ``hardware\\: cpu`` as it is)."""
    import uuid

    from bench.tracking import whole_runs
    from bench.tracking.writer import MlflowWriter

    with pytest.MonkeyPatch.context() as mp:
        campaign.activate(mp)
        _, runs = whole_runs.campaign_runs(campaign.name)
        notes = {r.info.run_name: r.data.tags.get(schema.RUN_NOTE, "") for r in runs}
        assert sum(bool(n) for n in notes.values()) >= 8  # every agent run has one
        escaped = {k: n for k, n in notes.items() if re.search(r"\\[!-/:-@\[-`{-~]", n)}
        assert not escaped, escaped
        name = f"failed-{uuid.uuid4().hex[:6]}"
        w = MlflowWriter(name)
        reason = "no checkpoint: the agent's scripts saved none within the budget (checkpoints/ is empty)"
        for repeat in (1, 2):
            tags = schema.agent_run_tags(name, "claude-code", "claude-opus-4-7", "t6", repeat, f"/runs/{repeat}")
            run = w.create_run(f"t6-claude-code-r{repeat}", {**tags, schema.STATUS: "failed", schema.REASON: reason})
            w.log_metrics(run, [(schema.SUCCESS, 0.0, 0, None), (schema.WALL_TIME, 61.5, 0, None)])
            w.end_run(run, "FAILED")
        views.save(w)
        experiment = w.experiment_id
    page = pages(views.url(ui["base"], experiment, views.RUNS_VIEW), width=1600, height=900)
    for column in (schema.STATUS, schema.REASON):
        header = page.locator(f'.ag-header-cell[col-id="tags.`{column}`"]')
        expect(header).to_be_visible()
        assert header.evaluate("e => e.getBoundingClientRect().right") <= 1600, f"{column} is past 1,600 px"
    expect(page.locator('.ag-center-cols-container [col-id="tags.`bench.status`"]').first).to_have_text("failed")
    expect(page.locator('.ag-center-cols-container [col-id="tags.`bench.reason`"]').first).to_contain_text(
        "no checkpoint"
    )
    _hide_panels(page)
    _screenshot(page, tmp_path, "mlflow-failed-campaign.png")
    print(f"screenshot: {tmp_path / 'mlflow-failed-campaign.png'}")
    page.close()


ACCESS_LOG = re.compile(r'"(GET|POST|HEAD) /\S* HTTP/[\d.]+" \d{3}')  # uvicorn's access line


def test_bench_ui_stays_quiet_with_its_links_last(ui):
    """After every page the tests above loaded (dozens of requests): bench ui's output is its two lines and its
    links, with no access-log line, deprecation warning or MLflow notice."""
    time.sleep(1)  # the last lines the server may have printed
    out = list(ui["output"])
    text = "".join(out)
    assert not [line for line in out if ACCESS_LOG.search(line)], text
    assert "Warning" not in text and "[MLflow]" not in text and "Registry store" not in text, text
    assert [line for line in out if "http" in line][-1].startswith(f"  {ui['campaign']}: compare agents"), text
    assert len(out) == 5, text  # starting ..., MLflow UI on ..., three links: nothing after them
