"""Tasks: the registry of task folders, which way their metric improves, their data and their weights.

registry.py   every folder under ``tasks/`` with a ``task.toml`` is a :class:`Task`
direction.py  :class:`Direction`: the one place where "better" is decided
data.py       download or mirror, verify checksums, prepare into the cache (``bench data prepare``)
weights.py    pretrained weights a task provides (T3's DINOv3), checked and installed by the user
"""

from bench.tasks.direction import Direction
from bench.tasks.registry import DataSource, Task, TaskError, Weights, all_tasks, get_task, load_task

__all__ = ["DataSource", "Direction", "Task", "TaskError", "Weights", "all_tasks", "get_task", "load_task"]
