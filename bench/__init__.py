"""1GC-7RC toolkit: run AI coding agents on the seven 1GC-7RC tasks, record everything in MLflow."""

__version__ = "0.1.0"
