"""The app ``bench ui`` serves: MLflow's own server app, whose UI opens in its model-training mode in a fresh browser.

Why: MLflow 3.17's UI has two modes, "GenAI" (Traces, Judges, Prompts; run pages titled "Evaluations") and "Model
training" (runs, models, the charts a benchmark needs). Read from the installed UI bundle
(``mlflow/server/js/build/static/js``): the mode is the URL's ``workflowType`` parameter if it has one, else the
browser's local storage ``mlflow.workflowType_v1`` (a JSON string), else ``"genai"``; the experiment tag
``mlflow.experimentKind`` that the harness sets (:func:`bench.tracking.store.experiment_id`) is no longer read for it.
A link can carry the parameter (:func:`bench.tracking.views.url` does), but the UI drops it on the next page (a run's
page opens in GenAI mode again). So the page MLflow serves for every UI route gets one line of script before the UI's
own: set the stored mode to model training when the browser has none (and mark the Assistant panel as already shown
once, so that it does not open itself over the runs). A person who then picks "GenAI" keeps it.

Served by ``mlflow server --app-name bench-ui`` (MLflow's plugin mechanism: the ``mlflow.app`` entry point in
pyproject.toml); everything else (the REST API, artifacts, security middleware) is MLflow's app unchanged.
"""

from __future__ import annotations

import json
import os

from flask import Response
from mlflow.server import app as flask_app
from mlflow.server.fastapi_app import app  # what uvicorn serves: MLflow's FastAPI app around its Flask app

__all__ = ["app", "STORAGE_KEY", "TRAINING", "SCRIPT"]

STORAGE_KEY = "mlflow.workflowType_v1"  # the UI's useLocalStorage({key: "mlflow.workflowType", version: 1})
TRAINING = "machine_learning"  # its WorkflowType.MACHINE_LEARNING ("Model training" in the side bar)
# the Assistant panel opens itself over a third of the screen on a browser's first visit unless this is true
ASSISTANT_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"
DEFAULTS = {STORAGE_KEY: json.dumps(TRAINING), ASSISTANT_OPENED_KEY: json.dumps(True)}  # stored values are JSON
SCRIPT = (
    "<script>try{var d="
    + json.dumps(DEFAULTS)
    + ";for(var k in d)if(localStorage.getItem(k)===null)localStorage.setItem(k,d[k])}catch(e){}</script>"
)
_INDEX = "serve"  # the Flask endpoint of MLflow's UI page ("/" and every UI route under it)


def _index() -> Response:
    """MLflow's ``index.html`` with :data:`SCRIPT` first in its head (the UI's own scripts are deferred)."""
    path = os.path.join(flask_app.static_folder, "index.html")
    with open(path, encoding="utf-8") as f:
        html = f.read()
    return Response(html.replace("<head>", "<head>" + SCRIPT, 1), mimetype="text/html")


if _INDEX in flask_app.view_functions:  # else MLflow changed its routes: its own page, in its default mode
    flask_app.view_functions[_INDEX] = _index
