"""The app ``bench ui`` serves.

MLflow's own server app, whose UI opens in its model-training mode in a fresh browser.

Why: MLflow 3.17's UI has two modes, "GenAI" (Traces, Judges, Prompts; run pages titled
"Evaluations") and "Model training" (runs, models, the charts a benchmark needs). Read from the
installed UI bundle (``mlflow/server/js/build/static/js``): the mode is the URL's ``workflowType``
parameter if it has one, else the browser's local storage ``mlflow.workflowType_v1`` (a JSON
string), else ``"genai"``; the experiment tag ``mlflow.experimentKind`` that the harness sets
(:func:`bench.tracking.store.experiment_id`) is no longer read for it. A link can carry the
parameter (:func:`bench.tracking.views.url` does), but the UI drops it on the next page (a run's
page opens in GenAI mode again). So the page MLflow serves for every UI route gets one line of
script before the UI's own: set the stored mode to model training when the browser has none (and
mark the Assistant panel as already shown once, so that it does not open itself over the runs). A
person who then picks "GenAI" keeps it.

Served by ``mlflow server --app-name bench-ui`` (MLflow's plugin mechanism: the ``mlflow.app`` entry
point in pyproject.toml); everything else (the REST API, artifacts, security middleware) is MLflow's
app unchanged.
"""

from __future__ import annotations

import json
import os

from flask import Response
from mlflow.server import BACKEND_STORE_URI_ENV_VAR
from mlflow.server import app as flask_app
from mlflow.server.fastapi_app import app  # what uvicorn serves: MLflow's FastAPI app around its Flask app

from bench.tracking import views

__all__ = ["app", "STORAGE_KEY", "TRAINING", "SCRIPT", "SEEDED", "ROUND_SCRIPT", "views_script"]

STORAGE_KEY = "mlflow.workflowType_v1"  # the UI's useLocalStorage({key: "mlflow.workflowType", version: 1})
TRAINING = "machine_learning"  # its WorkflowType.MACHINE_LEARNING ("Model training" in the side bar)
# the Assistant panel opens itself over a third of the screen on a browser's first visit unless this
# is true
ASSISTANT_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"
DEFAULTS = {STORAGE_KEY: json.dumps(TRAINING), ASSISTANT_OPENED_KEY: json.dumps(True)}  # stored values are JSON
SCRIPT = (
    "<script>try{var d="
    + json.dumps(DEFAULTS)
    + ";for(var k in d)if(localStorage.getItem(k)===null)localStorage.setItem(k,d[k])}catch(e){}</script>"
)
SEEDED = "1gc7rc.viewSeeded."  # + experiment id: this browser was given the runs view as the campaign's state once
# The views (bench.tracking.views): a campaign gets the runs view as this browser's own state of it
# the first time the browser loads a page of the UI after the campaign exists (a person's later
# changes are then kept), and a link with ?benchView=<id> sets that view as the experiment's state
# and leaves the URL without it, before MLflow's UI reads the state (its scripts are deferred): no
# "shared view" banner, and MLflow's own navigation finds the benchmark's columns too. B: {d:
# defaults, v: view id -> state, c: campaign ids, r: runs view, p: URL parameter, k: the state's
# key, s: SEEDED}
VIEWS_SCRIPT = r"""<script>try{var B=%s,L=localStorage;
function K(i){return B.k.replace("{ids}",JSON.stringify([String(i)]))}
for(var j=0;j<B.c.length;j++){if(L.getItem(B.s+B.c[j])===null){L.setItem(K(B.c[j]),B.v[B.r]);L.setItem(B.s+B.c[j],"1")}}
var h=location.hash,q=h.indexOf("?"),e=h.match(/^#\/experiments\/([^\/?]+)/);
if(e&&q>=0){var p=new URLSearchParams(h.slice(q+1)),v=p.get(B.p);if(v!==null){
if(B.v[v]){L.setItem(K(e[1]),B.v[v]);L.setItem(B.s+e[1],"1")}p.delete(B.p);var r=p.toString();
history.replaceState(null,"",location.pathname+location.search+h.slice(0,q)+(r?"?"+r:""))}}
}catch(x){}</script>"""
# MLflow 3.17's runs table prints a metric's stored value with all its digits (0.014982395262843623)
# and has no precision setting: the page rounds what the table shows to 4 decimals, as the report
# does (0.0150; "0.0150 (average)" on a group row), the stored value kept as the cell's tooltip.
# Only a number with 5 decimals or more in a cell of the runs grid is touched, whenever the grid
# draws or redraws it (a MutationObserver, batched per frame).
ROUND_SCRIPT = r"""<script>try{(function(){var R=/^(-?\d+\.\d{5,}(?:e[-+]?\d+)?)(\s*\(\w+\))?$/,q=0;
function f(t){var s=t.nodeValue,m=s&&R.exec(s.trim());if(!m)return;var v=Number(m[1]);if(!isFinite(v))return;
var r=(v===0||Math.abs(v)>=1e-3)?v.toFixed(4):v.toPrecision(3);t.nodeValue=r+(m[2]||"");var e=t.parentElement;
if(e&&!e.title)e.title=s.trim()}
function p(){q=0;var c=document.querySelectorAll(".ag-cell");for(var i=0;i<c.length;i++){
var w=document.createTreeWalker(c[i],4),n;while((n=w.nextNode()))f(n)}}
new MutationObserver(function(){if(!q)q=requestAnimationFrame(p)}).observe(document.documentElement,
{childList:true,subtree:true,characterData:true})})()}catch(x){}</script>"""
_INDEX = "serve"  # the Flask endpoint of MLflow's UI page ("/" and every UI route under it)


def _campaigns() -> list[str]:
    """The ids of the store's campaigns (the experiments holding the views), or none.

    They are read from the store this server serves; none when it cannot be read (the page is served
    all the same).
    """
    try:
        return views.campaign_ids(os.environ[BACKEND_STORE_URI_ENV_VAR])
    except Exception:  # noqa: BLE001 (a page without the seeding beats no page)
        return []


def views_script(campaigns: list[str]) -> str:
    """:data:`VIEWS_SCRIPT` for these campaign ids."""
    data = {
        "v": views.states(),
        "c": campaigns,
        "r": views.RUNS_VIEW,
        "p": views.VIEW_PARAM,
        "k": views.STATE_KEY,
        "s": SEEDED,
    }
    return VIEWS_SCRIPT % json.dumps(data).replace("</", "<\\/")


def _index() -> Response:
    """MLflow's ``index.html`` with :data:`SCRIPT` and the views' script first in its head.

    The UI's own scripts are deferred.
    """
    path = os.path.join(flask_app.static_folder, "index.html")
    with open(path, encoding="utf-8") as f:
        html = f.read()
    head = "<head>" + SCRIPT + views_script(_campaigns()) + ROUND_SCRIPT
    return Response(html.replace("<head>", head, 1), mimetype="text/html")


if _INDEX in flask_app.view_functions:  # else MLflow changed its routes: its own page, in its default mode
    flask_app.view_functions[_INDEX] = _index
