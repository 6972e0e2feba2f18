"""An example task pack for 1GC-7RC (docs/extending.md): one task folder, ``spirals/``, shipped as package data.

The benchmark finds it through this distribution's entry point in the group ``bench.tasks`` (pyproject.toml): the
value names this package, whose folder is scanned like a ``BENCH_TASKS_PATH`` entry (each sub-folder with a
``task.toml`` is a task). Nothing here is imported by the task itself: a task folder imports nothing from the pack.
"""
