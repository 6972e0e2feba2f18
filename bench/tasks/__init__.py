"""Tasks: the registry of task folders, which way their metric improves, their data and weights.

registry.py   a folder with a ``task.toml`` is a :class:`Task` (the loader)
packs.py      which folders are tasks: ``tasks/``, ``BENCH_TASKS_PATH``, campaign ``tasks_path``,
              entry points
direction.py  :class:`Direction`: the one place where "better" is decided
data.py       download or mirror, verify checksums, prepare into the cache (``bench data prepare``)
weights.py    pretrained weights a task provides (T3's DINOv3), checked and installed by the user
"""

from bench.tasks.direction import Direction
from bench.tasks.packs import all_tasks, get_task
from bench.tasks.registry import DataSource, Task, TaskError, TaskSource, Weights, load_task

__all__ = [
    "DataSource", "Direction", "Task", "TaskError", "TaskSource", "Weights", "all_tasks", "get_task", "load_task",
]  # fmt: skip
