"""The MLflow UI (`bench ui`) on a campaign imported from a bundle, in a real browser: the runs view lists the
imported agent runs, each nests its script and eval runs as in the original, and a run page opens in model-training
mode with its metrics. Headless chromium through Playwright, as tests/bench/test_ui_browser.py does; the campaign is
the small generated one of tests/bench/bundle_support.py, imported into a fresh SQLite store.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from bench.cli import main
from tests.bench import bundle_support as support
from tests.bench.bundle_support import _use_store
from tests.bench.test_ui_browser import CHROMIUM, ROOT, _free_port, _open, _training_mode, expect, sync_playwright

pytestmark = [
    pytest.mark.slow,  # a browser and an MLflow server: ~1 min on a loaded 2-core machine
    pytest.mark.skipif(sync_playwright is None, reason="Playwright for Python is missing: pip install -e '.[test]'"),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install -y chromium)"),
]
empty, source = support.empty, support.source  # module fixtures: an empty store, the exported campaign


def _ui(env: dict, campaign: str):
    """`bench ui` on the store of ``env``; (process, the runs view's link, the server's base URL)."""
    port = _free_port()
    argv = [sys.executable, "-m", "bench.cli", "ui", "--port", str(port), "--experiment", campaign]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines = []
    while not (m := re.search(r": runs\s+(http\S+)", lines[-1] if lines else "")):
        line = proc.stdout.readline()
        if not line:
            pytest.fail("bench ui ended before printing its links:\n" + "".join(lines))
        lines.append(line)
    base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                if r.status == 200:
                    return proc, m.group(1), base
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            pytest.fail("the MLflow server of bench ui did not answer within 90 s:\n" + "".join(lines))
        time.sleep(0.5)


def test_the_mlflow_ui_shows_an_imported_campaign_its_nesting_and_its_run_pages(source, empty, tmp_path, monkeypatch):
    _use_store(monkeypatch, tmp_path / "imported", empty)
    assert main(["import", str(source.archive), "--quiet"]) == 0
    agents = sorted(t[0] for t in source.tree if t[7] is None)  # top-level runs: the agent runs (name, ..., parent)
    children = {a: sorted(t[0] for t in source.tree if t[7] == a) for a in agents}
    assert agents and all(children.values())

    proc, runs_link, base = _ui(dict(os.environ), source.campaign)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = _open(browser, runs_link, width=1600, height=900)
            names = ".ag-pinned-left-cols-container [col-id='attributes.`Run Name`'] a"
            expect(page.locator(names).first).to_be_visible()
            assert sorted(page.locator(names).all_inner_texts()) == agents  # the children fold under their parents
            for agent in agents:  # unfold each agent run: its script and eval runs, as in the original
                page.locator(".ag-pinned-left-cols-container .ag-row", has_text=agent).locator("button").first.click()
            expect(page.locator(names)).to_have_count(len(agents) + sum(map(len, children.values())))
            assert sorted(page.locator(names).all_inner_texts()) == sorted(agents + sum(children.values(), []))
            _training_mode(page)

            link = page.locator(names, has_text=agents[0]).first.get_attribute("href")
            page.goto(base + "/" + link)
            page.wait_for_url(re.compile(r"/runs/[0-9a-f]{32}"))
            expect(page.get_by_text("Model metrics", exact=True)).to_be_visible()
            expect(page.locator("body")).to_contain_text(agents[0])
            _training_mode(page)
            browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
