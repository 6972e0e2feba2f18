"""Tracking: the tag schema, the MLflow store, the script tracer hook and the relay.

``hook/`` holds the interpreter start hook that traces the agent's scripts; it is put on
the agent's PYTHONPATH by the runner and must stay standard-library only.
"""

from pathlib import Path

HOOK_DIR = Path(__file__).parent / "hook"
