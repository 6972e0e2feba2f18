"""A mock LLM server that plays a scripted agent trajectory to the real agent CLIs (see server.py)."""

from tests.mockllm.server import MockLLM, Request
from tests.mockllm.trajectory import Step, answer, default_trajectory, read, run1_from_train, shell, write

__all__ = ["MockLLM", "Request", "Step", "answer", "default_trajectory", "read", "run1_from_train", "shell", "write"]
